"""Ray's version: the supported range, and the names that differ between Ray 2.40 and 2.60."""

from __future__ import annotations

import os
import warnings
from typing import Any

# ---------------------------------------------------------------------------
# Ray imports (never before the caller has settled the variable).
# ---------------------------------------------------------------------------
import ray
from packaging.version import Version

RAY_VERSION = Version(ray.__version__)
#: Oldest Ray release this package supports (inclusive).
MIN_RAY_VERSION = Version("2.40.0")
#: First Ray release this package has not been tested against (exclusive).
MAX_RAY_VERSION = Version("2.61.0")


class UnsupportedRayVersionError(ImportError):
    """The installed Ray is older than the oldest release ray_tt_ext supports."""


def check_ray_version(version: Version = RAY_VERSION) -> None:
    """Refuse a Ray older than the supported range; warn about a newer one.

    Older Ray lacks internals this package subclasses (the Tune config
    classes, the executor API): refuse it. A newer Ray may well work, and the
    regression suite is the canary that tells: warn, so that
    ``scripts/compat.sh NEW_VERSION`` can run against it.
    """
    if version.release < MIN_RAY_VERSION.release:
        raise UnsupportedRayVersionError(
            f"ray_tt_ext needs ray>={MIN_RAY_VERSION},<{MAX_RAY_VERSION}, but "
            f"ray=={version} is installed. Fix: "
            f"pip install 'ray[tune,train]>={MIN_RAY_VERSION},<{MAX_RAY_VERSION}'."
        )
    if version.release >= MAX_RAY_VERSION.release:
        warnings.warn(
            f"ray_tt_ext is tested with ray>={MIN_RAY_VERSION},<{MAX_RAY_VERSION}; "
            f"ray=={version} is newer and untested. Run "
            f"`scripts/compat.sh {version}` to check it before relying on it.",
            RuntimeWarning,
            stacklevel=3,
        )


check_ray_version()

import ray.train
import ray.tune
from ray._private import ray_constants as _ray_constants
from ray.air.config import CheckpointConfig as AirCheckpointConfig
from ray.air.config import RunConfig as AirRunConfig

# Ray >= 2.50 has Tune's own config classes (subclasses of the AIR ones),
# Checkpoint, report and get_checkpoint; Ray 2.40 .. 2.49 uses Train V1's.
# The one place for these version-neutral names (tests, scripts, release
# scenarios and the demo use them from here).
TuneCheckpointConfig = getattr(ray.tune, "CheckpointConfig", AirCheckpointConfig)
TuneRunConfig = getattr(ray.tune, "RunConfig", AirRunConfig)
TuneFailureConfig = getattr(ray.tune, "FailureConfig", ray.train.FailureConfig)
TuneCheckpoint = getattr(ray.tune, "Checkpoint", ray.train.Checkpoint)
tune_report = getattr(ray.tune, "report", ray.train.report)


def as_tune_checkpoint(checkpoint: Any) -> Any:
    """``checkpoint`` as Tune's ``Checkpoint``: the same folder (Ray >= 2.50's
    ``ray.tune.Checkpoint`` is a pass-through subclass of Train's). Tune's
    ``report`` logs a ``RayDeprecationWarning`` ("The `Checkpoint` class should
    be imported from `ray.tune`") for a Train one, which would tell users to
    change imports of theirs when the ``v2.Tuner`` trial actor reports the
    run's Train checkpoints to Tune (trial actor). A subclass of Train's (a
    ``checkpoint_upload_fn``'s own) is handed over as it is."""
    if type(checkpoint) is not ray.train.Checkpoint:  # None, Tune's, a subclass
        return checkpoint
    return TuneCheckpoint(path=checkpoint.path, filesystem=checkpoint.filesystem)


try:  # Ray's Train V2 migration warnings, among them its deprecation of Tuner(trainer)
    from ray.train.constants import _v2_migration_warnings_enabled
except ImportError:  # a Ray before them
    _v2_migration_warnings_enabled = None


def has_v2_migration_warnings() -> bool:
    """Whether this Ray has Train V2 migration warnings at all (whatever the variable)."""
    return _v2_migration_warnings_enabled is not None


def v2_migration_warnings_enabled() -> bool:
    """Whether Ray prints them now (``RAY_TRAIN_ENABLE_V2_MIGRATION_WARNINGS``)."""
    return has_v2_migration_warnings() and _v2_migration_warnings_enabled()


#: What Ray 2.51+ says when a Trainer is passed to a Tuner (``TunerInternal.__init__``).
RAYS_TUNER_OF_TRAINER_DEPRECATION = "Passing a Trainer to the Tuner is deprecated"


try:  # Ray >= 2.50 exports it from ray.tune; the V1 session has it everywhere.
    from ray.tune import get_checkpoint
except ImportError:  # Ray 2.40 .. 2.49
    from ray.train._internal.session import get_checkpoint  # noqa: F401

try:
    from ray._private.dict import deep_update  # noqa: F401
except ImportError:  # pragma: no cover - older layout
    from ray.tune.utils.util import deep_update  # noqa: F401

try:
    from ray.cloudpickle.cloudpickle import _should_pickle_by_reference
except ImportError:  # pragma: no cover - older vendored cloudpickle
    from ray.cloudpickle.cloudpickle import (  # type: ignore[no-redef]
        _is_importable as _should_pickle_by_reference,
    )

#: Ray warns about a registered function/actor class above this many bytes.
FUNCTION_SIZE_WARN_THRESHOLD: int = int(_ray_constants.FUNCTION_SIZE_WARN_THRESHOLD)
#: Ray refuses a registered function/actor class at this many bytes.
FUNCTION_SIZE_ERROR_THRESHOLD: int = int(_ray_constants.FUNCTION_SIZE_ERROR_THRESHOLD)

_GRPC_DEFAULT_MAX = 512 * 1024 * 1024


def grpc_max_message_bytes() -> int:
    """The gRPC message limit in force for this process.

    Read from Ray's C++ config (which honours ``RAY_max_grpc_message_size``),
    not from Python constants that went stale in older Ray releases.
    """
    try:
        from ray._raylet import Config

        return int(Config.max_grpc_message_size())
    except Exception:  # pragma: no cover - layout change in a future Ray
        override = os.environ.get("RAY_max_grpc_message_size")
        return int(override) if override else _GRPC_DEFAULT_MAX


def should_pickle_by_reference(obj: Any) -> bool:
    """Whether cloudpickle pickles ``obj`` (function/class/module) by reference."""
    try:
        return bool(_should_pickle_by_reference(obj))
    except Exception:
        return False
