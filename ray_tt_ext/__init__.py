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
