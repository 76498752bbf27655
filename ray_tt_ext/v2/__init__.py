"""ray_tt_ext for Ray's default Train V2 stack (Ray >= 2.51).

``import ray_tt_ext.v2`` never changes ``RAY_TRAIN_V2_ENABLED``, and nothing
here needs Train V1. It offers:

* :class:`DataParallelTrainer` and ``TorchTrainer`` (torch loaded on first
  use): Ray's V2 trainers, whose checkpoint folders are named by
  :class:`CheckpointConfig` and checked (path-safe, never an existing or
  already-used folder, also for ``ray.train.report(checkpoint_dir_name=...)``),
  and whose ``fit()`` measures what it sends to the controller first;
* :class:`CheckpointConfig`: V2's, plus ``checkpoint_index`` and
  ``checkpoint_dir_name`` with the V1 meaning;
* :class:`Tuner`: the drop-in Tuner, for V2 trainers given directly
  (``Tuner(trainer, param_space=...)`` with V1's meaning: each trial one Train
  run whose checkpoints are the trial's), function and class trainables and
  Ray's Tune + Train V2 pattern;
* the payload inspector and the errors. A V2 program needs no top-level
  ``ray_tt_ext`` name but the neutral ``ray_tt_ext.CheckpointConfig`` (Tune's,
  for function and class trainables under :class:`Tuner`); a Train V1 name
  (``ray_tt_ext.Tuner``, the trainers, ``RemoteBackendExecutor``,
  ``StorageContext``) would turn Train V1 on.

V2's controller actor already runs the training loop away from the driver
(it is Ray's own remote executor), so ``remote_executor`` does not apply.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from ray_tt_ext import _compat
from ray_tt_ext._compat import (
    TrainV2DisabledError,
    TrainV2EnabledError,
    UnsupportedRayVersionError,
    ensure_train_v2,
)
from ray_tt_ext._payload import (
    GRPC_MAX_MESSAGE_BYTES,
    PayloadReport,
    PayloadTooLargeError,
)
from ray_tt_ext._payload import inspect_payload as _inspect_payload

if TYPE_CHECKING:
    from ray_tt_ext.v2._train import CheckpointConfig, DataParallelTrainer
    from ray_tt_ext.v2._tuner import Tuner


def inspect_payload(
    obj: Any, *, name: Optional[str] = None, min_bytes: Optional[int] = None
) -> PayloadReport:
    """``ray_tt_ext.inspect_payload``; a Train V2 trainer (Ray's own too) is measured
    by what its ``fit()`` sends to the controller: its training function and
    ``train_loop_config`` (the view ``_train`` registers with the inspector)."""
    if _compat.is_train_v2_trainer(obj):
        from ray_tt_ext.v2 import _train  # noqa: F401  (registers the V2 trainer view)
    return _inspect_payload(obj, name=name, min_bytes=min_bytes)


#: Names that need Ray >= 2.51's Train V2 classes: loaded on first use.
_V2_NAMES = ("CheckpointConfig", "DataParallelTrainer", "TorchTrainer", "Tuner")


def __getattr__(name: str) -> Any:
    if name not in _V2_NAMES:
        raise AttributeError(f"module 'ray_tt_ext.v2' has no attribute {name!r}")
    if _compat.RAY_VERSION.release < _compat.MIN_TRAIN_V2_RAY_VERSION.release:
        ensure_train_v2(f"ray_tt_ext.v2.{name}")  # raises UnsupportedRayVersionError
    if name == "Tuner":
        from ray_tt_ext.v2._tuner import Tuner as value  # noqa: N813
    else:
        from ray_tt_ext.v2 import _train

        value = _train.torch_trainer() if name == "TorchTrainer" else getattr(_train, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_V2_NAMES})


# TorchTrainer is public but not in __all__: a star import would import torch.
__all__ = [
    "CheckpointConfig",
    "DataParallelTrainer",
    "GRPC_MAX_MESSAGE_BYTES",
    "PayloadReport",
    "PayloadTooLargeError",
    "TrainV2DisabledError",
    "TrainV2EnabledError",
    "Tuner",
    "UnsupportedRayVersionError",
    "inspect_payload",
]
