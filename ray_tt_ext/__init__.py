"""ray_tt_ext: a hardened Ray Tune x Ray Train integration.

Two front doors, one package:

* ``ray_tt_ext`` (this module) is the Train V1 integration: ``Tuner(trainer)``
  with ray_tt_ext's trainers. The first of its Train V1 names taken
  (``Tuner``, the trainers, ``RemoteBackendExecutor``, ``StorageContext``)
  sets ``RAY_TRAIN_V2_ENABLED=0`` when the variable is unset, before anything
  of Ray Train is imported: its one deliberate effect on the process (see the
  README). ``import ray_tt_ext`` alone changes nothing, and neither do the
  neutral names (``CheckpointConfig``, Tune's; ``inspect_payload``,
  ``PayloadReport``, ``GRPC_MAX_MESSAGE_BYTES`` and the errors), which a
  Train V2 program may use.
* ``ray_tt_ext.v2`` is the integration for Ray's default Train V2 stack; it
  never touches the variable (importing it runs this file, which imports
  nothing of Ray).

Every public name is loaded on first use (PEP 562), so that the variable is
settled before the module behind a Train V1 name imports ``ray.train``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ray_tt_ext._version import __version__

if TYPE_CHECKING:  # for type checkers and IDEs; at run time, see __getattr__
    # ruff: noqa: F401
    from ray_tt_ext._compat import TrainV2EnabledError, UnsupportedRayVersionError
    from ray_tt_ext._executor import ExecutorActorDiedError, RemoteBackendExecutor
    from ray_tt_ext._payload import (
        GRPC_MAX_MESSAGE_BYTES,
        PayloadReport,
        PayloadTooLargeError,
    )
    from ray_tt_ext._storage import CheckpointConfig, StorageContext
    from ray_tt_ext._trainer import BaseTrainer, DataParallelTrainer
    from ray_tt_ext._tuner import Tuner
    from ray_tt_ext.v2 import inspect_payload

#: public name -> the private module that defines it.
_EXPORTS = {
    "BaseTrainer": "_trainer",
    "CheckpointConfig": "_storage",
    "DataParallelTrainer": "_trainer",
    "ExecutorActorDiedError": "_executor",
    "GRPC_MAX_MESSAGE_BYTES": "_payload",
    "PayloadReport": "_payload",
    "PayloadTooLargeError": "_payload",
    "RemoteBackendExecutor": "_executor",
    "StorageContext": "_storage",
    "TrainV2EnabledError": "_compat",
    "Tuner": "_tuner",
    "UnsupportedRayVersionError": "_compat",
    "inspect_payload": "v2",  # one inspector for both front doors (V2 trainers too)
}
#: The names whose first use turns Train V1 on (the others are neutral).
_TRAIN_V1_NAMES = frozenset(
    {
        "BaseTrainer",
        "DataParallelTrainer",
        "RemoteBackendExecutor",
        "StorageContext",
        "Tuner",
    }
)
#: Framework trainers, built on first use (``import ray_tt_ext`` never imports
#: torch, xgboost or lightgbm).
_LAZY_TRAINERS = ("LightGBMTrainer", "TorchTrainer", "XGBoostTrainer")


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS and name not in _LAZY_TRAINERS:
        raise AttributeError(f"module 'ray_tt_ext' has no attribute {name!r}")
    if name in _TRAIN_V1_NAMES or name in _LAZY_TRAINERS:
        # Before the module behind the name imports ray.train (V1 names bound).
        from ray_tt_ext._env import activate_train_v1

        activate_train_v1(by=f"ray_tt_ext.{name}")
    if name in _LAZY_TRAINERS:
        from ray_tt_ext import _frameworks

        return _frameworks.build(name)
    value = getattr(importlib.import_module(f"ray_tt_ext.{_EXPORTS[name]}"), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS, *_LAZY_TRAINERS})


# The lazy framework trainers are public but not in __all__: a star import
# would import torch, xgboost and lightgbm.
__all__ = [*sorted(_EXPORTS), "__version__"]
