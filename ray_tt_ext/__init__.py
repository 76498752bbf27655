"""ray_tt_ext: a hardened Ray Tune x Ray Train (V1) integration.

Importing this package sets ``RAY_TRAIN_V2_ENABLED=0`` when it is unset (its
one deliberate import-time effect; see the README), because the Ray classes it
extends are Ray Train's V1 API.
"""

# _compat settles RAY_TRAIN_V2_ENABLED before anything imports ray.train.
from ray_tt_ext import _compat  # noqa: F401  (isort: skip)
from ray_tt_ext._compat import TrainV2EnabledError, UnsupportedRayVersionError
from ray_tt_ext._executor import ExecutorActorDiedError, RemoteBackendExecutor
from ray_tt_ext._payload import (
    GRPC_MAX_MESSAGE_BYTES,
    PayloadReport,
    PayloadTooLargeError,
    inspect_payload,
)
from ray_tt_ext._storage import CheckpointConfig, StorageContext
from ray_tt_ext._trainer import BaseTrainer, DataParallelTrainer
from ray_tt_ext._tuner import Tuner
from ray_tt_ext._version import __version__

#: Framework trainers, built on first use (never imported by ``import ray_tt_ext``).
_LAZY = ("LightGBMTrainer", "TorchTrainer", "XGBoostTrainer")


def __getattr__(name: str):
    if name in _LAZY:
        from ray_tt_ext import _frameworks

        return _frameworks.build(name)
    raise AttributeError(f"module 'ray_tt_ext' has no attribute {name!r}")


# The lazy framework trainers are public but not in __all__: a star import
# would import torch, xgboost and lightgbm.
__all__ = [
    "BaseTrainer",
    "CheckpointConfig",
    "DataParallelTrainer",
    "ExecutorActorDiedError",
    "GRPC_MAX_MESSAGE_BYTES",
    "PayloadReport",
    "PayloadTooLargeError",
    "RemoteBackendExecutor",
    "StorageContext",
    "TrainV2EnabledError",
    "Tuner",
    "UnsupportedRayVersionError",
    "__version__",
    "inspect_payload",
]
