"""Ray Train V2's classes and worker hooks that ``ray_tt_ext.v2`` builds on.

Imported on demand (``ray_tt_ext.v2`` imports it; the Train V1 integration
never does): importing it on a Ray whose Train V2 lacks one of these raises
:class:`UnsupportedRayVersionError`. What differs between Ray 2.51 and
2.60 is detected in ``train_v2_bridge``; ``ray_tt_ext.v2`` refuses Ray < 2.51. ``DistributedTrainFnUtils`` is what ``ray.train.report``
and friends call on a training worker (Ray: "this class can be patched if new
user APIs behaviors is wanted"); ``set_train_fn_utils`` installs one.
"""

from __future__ import annotations

from typing import Any, Optional

from ray_tt_ext._compat.train_mode import MIN_TRAIN_V2_RAY_VERSION
from ray_tt_ext._compat.versions import (
    MAX_RAY_VERSION,
    RAY_VERSION,
    UnsupportedRayVersionError,
)

try:
    from ray.train.v2._internal.execution.context import get_train_context
    from ray.train.v2._internal.execution.train_fn_utils import (
        DistributedTrainFnUtils,
        get_train_fn_utils,
        set_train_fn_utils,
    )
    from ray.train.v2.api.config import CheckpointConfig, RunConfig, ScalingConfig
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
except ImportError as e:  # a Ray whose Train V2 lacks what ray_tt_ext.v2 extends
    raise UnsupportedRayVersionError(
        f"ray_tt_ext.v2 extends Ray Train V2 internals that ray=={RAY_VERSION} "
        f"does not have ({e}). Fix: pip install "
        f"'ray[tune,train]>={MIN_TRAIN_V2_RAY_VERSION},<{MAX_RAY_VERSION}' (tested: "
        "docs/compatibility.md), or use the Train V1 integration."
    ) from e

#: ``ray.train.v2.api.report_config.CheckpointConsistencyMode``, or ``None`` on
#: a Ray with Train V2 by default that does not have it yet.
CheckpointConsistencyMode: Optional[Any]
try:
    from ray.train.v2.api.report_config import (  # type: ignore[no-redef]
        CheckpointConsistencyMode,
    )
except ImportError:
    CheckpointConsistencyMode = None

try:  # the size of a worker's checkpoint upload pool (ASYNC reports)
    from ray.train.v2._internal.execution.context import MAX_CHECKPOINT_UPLOAD_THREADS
except ImportError:  # a Train V2 without ASYNC uploads
    MAX_CHECKPOINT_UPLOAD_THREADS = 1

__all__ = [
    "CheckpointConfig",
    "CheckpointConsistencyMode",
    "DataParallelTrainer",
    "DistributedTrainFnUtils",
    "MAX_CHECKPOINT_UPLOAD_THREADS",
    "RunConfig",
    "ScalingConfig",
    "get_train_context",
    "get_train_fn_utils",
    "set_train_fn_utils",
]
