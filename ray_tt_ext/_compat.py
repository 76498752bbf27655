"""The one place where ray_tt_ext touches Ray's internals.

Every ``ray.*._internal`` / ``ray._private`` import, every look at Ray's
version and every decision about Ray Train V2 lives here. Other modules import
the names below; they never reach into Ray's private modules themselves.

Importing this module never changes ``RAY_TRAIN_V2_ENABLED``: ``ray_tt_ext``
(the Train V1 integration) calls :func:`activate_train_v1` before it imports
this module for the first public name taken from it, and ``ray_tt_ext.v2``
never does (see ``ray_tt_ext/__init__.py``).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
import sys
import threading
import warnings
from collections.abc import Iterator
from typing import Any, Optional

# ---------------------------------------------------------------------------
# Ray imports (never before the caller has settled the variable).
# ---------------------------------------------------------------------------
import ray
import ray.cloudpickle as ray_cloudpickle
from packaging.version import Version
from ray.exceptions import ActorDiedError  # noqa: F401

# Train V1 activation lives in ``_env`` (it must run before this module imports
# ``ray.train``, so it cannot live here); re-exported for the other modules.
from ray_tt_ext._env import V2_ENV_VAR, activate_train_v1, train_v1_activated_by  # noqa: F401

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

import ray.train  # noqa: F401  (V1 or V2 namespace, as the variable says now)
import ray.tune
from ray._private import ray_constants as _ray_constants
from ray._private import worker as _ray_worker
from ray.air._internal.usage import AirEntrypoint  # noqa: F401
from ray.air._internal.util import StartTraceback, StartTracebackWithWorkerRank
from ray.air.config import CheckpointConfig as AirCheckpointConfig
from ray.air.config import RunConfig as AirRunConfig
from ray.air.config import ScalingConfig as AirScalingConfig
from ray.air.util.node import _force_on_current_node
from ray.train._internal import backend_executor as _backend_executor_module
from ray.train._internal.backend_executor import (  # noqa: F401
    BackendExecutor,
    InactiveWorkerGroup,
    InactiveWorkerGroupError,
    TrainBackendError,
    TrainingWorkerError,
)
from ray.train._internal.storage import StorageContext
from ray.train._internal.utils import check_for_failure
from ray.train._internal.worker_group import RayTrainWorker as _RayTrainWorker
from ray.train._internal.worker_group import WorkerGroup as _WorkerGroup
from ray.train.base_trainer import BaseTrainer
from ray.train.constants import CHECKPOINT_DIR_NAME  # noqa: F401
from ray.train.data_parallel_trainer import DataParallelTrainer
from ray.tune.error import TuneError  # noqa: F401
from ray.tune.execution.placement_groups import PlacementGroupFactory  # noqa: F401
from ray.tune.experiment import Experiment
from ray.tune.impl.tuner_internal import TunerInternal
from ray.tune.result import RESULT_DUPLICATE  # noqa: F401
from ray.tune.trainable.function_trainable import FunctionTrainable  # noqa: F401
from ray.util.placement_group import PlacementGroup

try:  # Ray >= 2.50
    from ray.train._internal.session import get_session
except ImportError:  # Ray 2.40 .. 2.49
    from ray.train._internal.session import _get_session as get_session  # noqa: F401

# Ray >= 2.50 has Tune's own config classes (subclasses of the AIR ones),
# Checkpoint, report and get_checkpoint; Ray 2.40 .. 2.49 uses Train V1's.
# The one place for these version-neutral names (tests, scripts, release
# scenarios and the demo use them from here).
TuneCheckpointConfig = getattr(ray.tune, "CheckpointConfig", AirCheckpointConfig)
TuneRunConfig = getattr(ray.tune, "RunConfig", AirRunConfig)
TuneFailureConfig = getattr(ray.tune, "FailureConfig", ray.train.FailureConfig)
TuneCheckpoint = getattr(ray.tune, "Checkpoint", ray.train.Checkpoint)
tune_report = getattr(ray.tune, "report", ray.train.report)


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


# -- Object-store lifetime of refs pickled out of band (driver) ------------------------

# ref.binary() -> (job id, pins Ray added in this process when it was pickled
# outside a Ray task), for the refs whose holders track them.
_OUT_OF_BAND_PINS: dict[bytes, list[Any]] = {}
# Reentrant: a release runs from a weakref finalizer, which a garbage
# collection inside a locked section of the same thread may call.
_PINS_LOCK = threading.RLock()


def count_out_of_band_pins(ref: Any) -> None:
    """Start counting the pins Ray adds for ``ref`` in this process (driver).

    Ray's ``SerializationContext.add_contained_object_ref`` (Ray 2.40 ..
    2.60) adds a local reference that is never removed each time an
    ``ObjectRef`` is pickled outside a Ray task (``cloudpickle.dumps`` of a
    class Tune registers, an actor class it exports), pinning the object for
    the life of the process. :func:`note_ref_pickled` counts them and
    :func:`release_out_of_band_pins` removes them. No-op under Ray Client (the
    client process has no core worker of its own).
    """
    if ray.util.client.ray.is_connected():
        return
    with _PINS_LOCK:
        _OUT_OF_BAND_PINS[ref.binary()] = [_ray_worker.global_worker.current_job_id, 0]


def note_ref_pickled(ref: Any) -> None:
    """Count the pin Ray adds if ``ref`` is being pickled out of band now (tracked refs).

    Call it only where ``ref`` is really serialized (a ``__reduce__`` whose
    result is pickled), not where a reduction is only looked at.
    """
    with _PINS_LOCK:
        entry = _OUT_OF_BAND_PINS.get(ref.binary())
        if entry is None:
            return
        try:
            context = _ray_worker.global_worker.get_serialization_context()
            in_band = context.is_in_band_serialization()
        except Exception:
            return
        if not in_band:
            entry[1] += 1


def release_out_of_band_pins(ref: Any) -> None:
    """Remove the pins counted for ``ref`` (``CoreWorker.remove_object_ref_reference``).

    Runs on the driver, when nothing of this process will use ``ref`` again;
    Ray's reference counting then frees the object once the last
    ``ObjectRef`` to it is gone.
    """
    with _PINS_LOCK:
        job_id, pins = _OUT_OF_BAND_PINS.pop(ref.binary(), (None, 0))
    worker = _ray_worker.global_worker
    if not pins or not ray.is_initialized() or worker.current_job_id != job_id:
        return  # Ray was shut down (and the pins with it) since
    # Never remove more than Ray holds beyond the ObjectRef passed in here.
    counts = worker.core_worker.get_all_reference_counts()
    local = counts.get(ref.hex().encode(), {}).get("local", 0)
    for _ in range(min(pins, local - 1)):
        worker.core_worker.remove_object_ref_reference(ref)


_TUNE_DRIVER_HERE: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "ray_tt_ext_tune_driver_here", default=False
)


@contextlib.contextmanager
def acting_as_tune_driver() -> Iterator[None]:
    """Tune's driver loop runs in this Ray worker, for the length of the block.

    For the Ray Client Tuner actor's calls and ``trainer.fit()`` sent to the
    cluster as a task: :func:`is_driver_process` is true inside the block (in
    this thread, and in threads started with a copy of its context), false
    after it, so a task worker process Ray reuses for other tasks is not
    taken for a driver.
    """
    token = _TUNE_DRIVER_HERE.set(True)
    try:
        yield
    finally:
        _TUNE_DRIVER_HERE.reset(token)


def is_driver_process() -> bool:
    """Whether Tune's driver loop runs here (a driver, a process without Ray, or a
    Ray worker inside :func:`acting_as_tune_driver`), not a trial actor or a
    training worker."""
    if _TUNE_DRIVER_HERE.get():
        return True
    return getattr(_ray_worker.global_worker, "mode", None) != _ray_worker.WORKER_MODE


def add_post_init_hook(hook) -> None:
    """Run ``hook()`` right after the next ``ray.init()`` in this process."""
    _ray_worker._post_init_hooks.append(hook)


def force_on_current_node_options() -> dict[str, Any]:
    """Scheduling options that pin a task/actor to the caller's node."""
    return _force_on_current_node(None)


def set_experiment_storage_context_cls(cls) -> Any:
    """Swap the StorageContext class Tune's ``Experiment`` builds; return the old one.

    Ray reads ``Experiment._storage_context_cls`` when it builds the
    experiment in ``tune.run`` (driver), checked on Ray 2.40 .. 2.60.
    """
    old = Experiment.__dict__.get("_storage_context_cls", StorageContext)
    Experiment._storage_context_cls = cls
    return old


# ---------------------------------------------------------------------------
# Train V2 detection after the fact.
# ---------------------------------------------------------------------------


class TrainV2EnabledError(RuntimeError):
    """Ray Train V2 is active where ray_tt_ext needs Train V1."""


def train_v2_enabled() -> bool:
    """What this process's Ray will do now (Ray's own check, read each call)."""
    try:
        from ray.train.v2._internal.constants import is_v2_enabled
    except ImportError:  # Ray without Train V2: always V1.
        return False
    return bool(is_v2_enabled())


_FIX = (
    f"leave {V2_ENV_VAR} unset (ray_tt_ext then sets it to 0 when its first Train V1 name is "
    f"taken, e.g. `from ray_tt_ext import Tuner`) or `export {V2_ENV_VAR}=0` before "
    "Python starts."
)


def ensure_train_v1(*objects: Any) -> None:
    """Fail fast, with the fix, when Train V2 would break a ray_tt_ext call.

    Runs on the driver where a V1 trainer enters (trainer construction, a
    Tuner given a trainer), and in the coordinator actor before the trainer is
    built. Function and class trainables never need it. ``objects`` are config
    objects that could not be converted by :func:`to_train_v1` (a trainer that
    is not ray_tt_ext's was given Train V2 config objects).
    """
    if train_v2_enabled():
        raise TrainV2EnabledError(
            f"Ray Train V2 is enabled ({V2_ENV_VAR}="
            f"{os.environ.get(V2_ENV_VAR, '<unset>')!s}), but this is a Ray Train V1 "
            f"trainer (Tuner(trainer) is Train V1's API). Fix: {_FIX} For Ray's "
            "default Train V2 stack, use ray_tt_ext.v2.Tuner with ray_tt_ext.v2's trainers."
        )
    v2_types = _train_v2_config_types()
    for obj in objects:
        if v2_types and isinstance(obj, tuple(v2_types.values())):
            name = type(obj).__name__
            raise TrainV2EnabledError(
                f"Got a Ray Train V2 `{name}`. It comes from `from ray.train import "
                f"{name}` run before the first Train V1 `ray_tt_ext` name while {V2_ENV_VAR} was unset, "
                f"so `ray.train` bound its Train V2 classes. ray_tt_ext's trainers "
                f"convert it for you; Ray's own V1 trainers need the V1 class. Fix: "
                f"use a ray_tt_ext trainer, or `ray.tune.{name}`/`ray.air.config.{name}`, "
                f"or {_FIX}"
            )


def _train_v2_config_types() -> dict[str, type]:
    """Train V2's config classes by name, if this process loaded them."""
    module = sys.modules.get("ray.train.v2.api.config")
    if module is None:
        return {}
    names = ("RunConfig", "ScalingConfig", "CheckpointConfig", "FailureConfig")
    return {
        n: getattr(module, n) for n in names if isinstance(getattr(module, n, None), type)
    }


def _v1_config_classes() -> dict[str, type]:
    return {
        "RunConfig": TuneRunConfig,
        "ScalingConfig": AirScalingConfig,
        "CheckpointConfig": TuneCheckpointConfig,
        "FailureConfig": TuneFailureConfig,
    }


def to_train_v1(obj: Any) -> Any:
    """A Train V2 config object as its Train V1 class, field by field; else ``obj``.

    ``from ray import train`` before the first Train V1 ``ray_tt_ext`` name (the variable still
    unset on Ray 2.51+) binds ``train.RunConfig``, ``ScalingConfig``,
    ``CheckpointConfig`` and ``FailureConfig`` to Train V2's classes. Their
    common fields carry over (nested configs too); a V2-only setting that V1
    cannot honour, left at a value other than its default, is an error naming
    it. Runs wherever a ray_tt_ext trainer or Tuner is built (driver, and the
    coordinator actor).
    """
    v2_types = _train_v2_config_types()
    name = type(obj).__name__
    v2_cls = v2_types.get(name)
    if v2_cls is None or type(obj) is not v2_cls:
        return obj
    v1_cls = _v1_config_classes()[name]
    v1_fields = {f.name for f in dataclasses.fields(v1_cls)}
    deprecated = getattr(sys.modules["ray.train.v2.api.config"], "_DEPRECATED", object())
    baseline = v2_cls()  # V2's defaults, after its __post_init__
    kwargs = {}
    for field in dataclasses.fields(obj):
        value = getattr(obj, field.name)
        if value is deprecated or (isinstance(deprecated, str) and value == deprecated):
            continue  # V2's marker for "not set": V1's default applies
        if field.name in v1_fields:
            kwargs[field.name] = to_train_v1(value)
            continue
        if value is None or value == getattr(baseline, field.name, dataclasses.MISSING):
            continue  # left at its default (as V2's own __post_init__ fills it in)
        raise TrainV2EnabledError(
            f"`{name}({field.name}={value!r})` is a Ray Train V2 setting that the Train "
            f"V1 trainers ray_tt_ext extends cannot honour (this `{name}` is V2's: "
            f"`ray.train` was imported before Train V1 was turned on). Fix: drop `{field.name}`, "
            f"or use Ray's Train V2 trainers (outside a Tuner) for it."
        )
    if name == "RunConfig" and kwargs.get("callbacks"):
        raise TrainV2EnabledError(
            "`RunConfig(callbacks=...)` of Ray Train V2 holds V2 callbacks, which Tune "
            "(Train V1) cannot run. Fix: pass Tune callbacks in `ray.tune.RunConfig`."
        )
    return v1_cls(**kwargs)


class TrainV2DisabledError(RuntimeError):
    """``ray_tt_ext.v2`` was used where Ray Train V2 is off (or absent)."""


#: The first Ray release that turns Train V2 on by default (ray_tt_ext.v2's floor).
MIN_TRAIN_V2_RAY_VERSION = Version("2.51.0")


def ensure_train_v2(what: str) -> None:
    """Fail fast, with the fix, when ``ray_tt_ext.v2`` is used without Train V2.

    Runs where a ``ray_tt_ext.v2`` trainer or Tuner is built (driver, or the
    Tune trial actor that builds a V2 trainer).
    """
    if RAY_VERSION.release < MIN_TRAIN_V2_RAY_VERSION.release:
        raise UnsupportedRayVersionError(
            f"{what} needs ray>={MIN_TRAIN_V2_RAY_VERSION} (Ray Train V2 by default); "
            f"ray=={RAY_VERSION} is installed. Fix: pip install "
            f"'ray[tune,train]>={MIN_TRAIN_V2_RAY_VERSION},<{MAX_RAY_VERSION}', or use "
            "the Train V1 integration (`from ray_tt_ext import Tuner, ...`)."
        )
    if train_v2_enabled():
        return
    by = train_v1_activated_by()
    cause = (
        f"ray_tt_ext set it when `{by}` was first used in this process: the top-level "
        "`ray_tt_ext` names are the Train V1 integration. Fix: take every name from "
        "`ray_tt_ext.v2` in a Train V2 process (it has Tuner, CheckpointConfig, "
        "inspect_payload and the errors too)."
        if by
        else f"Fix: unset {V2_ENV_VAR} (Train V2 is Ray's default) or set it to 1."
    )
    raise TrainV2DisabledError(
        f"{what} runs on Ray Train V2, but Train V2 is off in this process "
        f"({V2_ENV_VAR}={os.environ.get(V2_ENV_VAR)}). {cause}"
    )


def train_v2_api() -> Any:
    """Ray Train V2's classes and worker hooks that ``ray_tt_ext.v2`` builds on.

    Imported on demand (``ray_tt_ext.v2`` imports them; the V1 integration
    never does). Checked on Ray 2.60; ``ray_tt_ext.v2`` refuses Ray < 2.51.
    ``DistributedTrainFnUtils`` is what ``ray.train.report`` and friends call
    on a training worker (Ray: "this class can be patched if new user APIs
    behaviors is wanted"); ``set_train_fn_utils`` installs one.
    """
    import types

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

    try:  # newer than some Rays with Train V2 by default
        from ray.train.v2.api.report_config import CheckpointConsistencyMode
    except ImportError:
        CheckpointConsistencyMode = None
    return types.SimpleNamespace(
        CheckpointConfig=CheckpointConfig,
        CheckpointConsistencyMode=CheckpointConsistencyMode,
        DataParallelTrainer=DataParallelTrainer,
        DistributedTrainFnUtils=DistributedTrainFnUtils,
        RunConfig=RunConfig,
        ScalingConfig=ScalingConfig,
        get_train_context=get_train_context,
        get_train_fn_utils=get_train_fn_utils,
        set_train_fn_utils=set_train_fn_utils,
    )


def train_v2_bridge_api() -> Any:
    """Ray Train V2's controller, worker group and callback classes that
    ``ray_tt_ext.v2.Tuner(trainer)`` builds on (``_v2_trial``).

    Imported on demand, in the Tune trial actor and the run's controller actor
    (never on a training worker). Checked on Ray 2.60; ``RAY_OVERRIDES`` lists
    what is overridden.
    """
    import types

    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    try:
        from ray._common.constants import RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_ENV_VAR
        from ray.train.v2._internal.callbacks.placement_group_callback import (
            PlacementGroupCleanerCallback,
        )
        from ray.train.v2._internal.constants import (
            DEFAULT_RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_VALUE,
            ENV_VARS_TO_PROPAGATE,
            get_env_vars_to_propagate,
        )
        from ray.train.v2._internal.execution.checkpoint import (
            checkpoint_manager as checkpoint_manager_module,
        )
        from ray.train.v2._internal.execution.controller import TrainController
        from ray.train.v2._internal.execution.worker_group import WorkerGroup
        from ray.train.v2._internal.execution.worker_group.placement_group_handle import (
            DefaultPlacementGroupHandle,
        )
        from ray.train.v2.api.callback import UserCallback
    except ImportError as e:  # a Train V2 older or newer than the bridge knows
        raise UnsupportedRayVersionError(
            f"ray_tt_ext.v2.Tuner(trainer) extends Ray Train V2 internals that "
            f"ray=={RAY_VERSION} does not have ({e}). Fix: pip install "
            f"'ray[tune,train]>=2.60,<{MAX_RAY_VERSION}' (docs/compatibility.md), or "
            "tune a function that fits the trainer (Ray's documented pattern)."
        ) from e

    def controller_env_vars() -> dict[str, str]:
        """The environment Ray's ``_initialize_and_run_controller`` gives its controller."""
        env_vars = get_env_vars_to_propagate()
        env_vars.setdefault(
            RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_ENV_VAR,
            DEFAULT_RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_VALUE,
        )
        return env_vars

    v2 = train_v2_api()
    from ray.tune.trainable.function_trainable import wrap_function

    return types.SimpleNamespace(
        CheckpointConfig=v2.CheckpointConfig,
        checkpoint_manager_module=checkpoint_manager_module,
        DataParallelTrainer=v2.DataParallelTrainer,
        wrap_function=wrap_function,
        DefaultPlacementGroupHandle=DefaultPlacementGroupHandle,
        PlacementGroupCleanerCallback=PlacementGroupCleanerCallback,
        PlacementGroupSchedulingStrategy=PlacementGroupSchedulingStrategy,
        RunConfig=v2.RunConfig,
        ScalingConfig=v2.ScalingConfig,
        TrainController=TrainController,
        UserCallback=UserCallback,
        WorkerGroup=WorkerGroup,
        controller_env_vars=controller_env_vars,
        propagated_env_vars=lambda: frozenset(ENV_VARS_TO_PROPAGATE),
        blocking_get_warning_var=RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_ENV_VAR,
    )


def is_train_v2_trainer(obj: Any) -> bool:
    """Whether ``obj`` is a Ray Train V2 trainer (never imports Train V2 itself)."""
    module = sys.modules.get("ray.train.v2.api.data_parallel_trainer")
    return module is not None and isinstance(obj, module.DataParallelTrainer)


def train_v1_runtime_env_vars() -> dict[str, str]:
    """Env vars a remote process needs to run Train V1 code."""
    return {V2_ENV_VAR: "0"}


# -- Train V1 worker session (runs on the training workers) ---------------------------


def tune_report_queue(session: Any) -> Any:
    """The queue Ray's ``TuneReportCallback`` reports through, if this trial made one.

    ``_TrainSession._inter_actor_queue`` (Ray 2.51 .. 2.60), in the Tune trial actor.
    """
    return getattr(session, "_inter_actor_queue", None)


def join_training_thread(session: Any, timeout_s: float) -> None:
    """Wait up to ``timeout_s`` for a Train/Tune session's training thread to end.

    Runs in a trial actor (the coordinator), on Tune's ``stop()``.
    ``_TrainSession.training_thread`` (Ray 2.40 .. 2.60) is the thread that
    runs the trainable's function; ``FunctionTrainable.reset_config`` waits
    for it the same way (``_TrainSession.finish(timeout=...)``).
    """
    thread = getattr(session, "training_thread", None)
    if thread is not None and thread.is_alive():
        thread.join(timeout=timeout_s)


def _training_over(session: Any) -> bool:
    """The training thread has ended and left no result and no error to report.

    ``_TrainSession.get_next`` (Ray 2.40 .. 2.60) then returns ``None`` too, but
    only after waiting up to a second for an error that cannot come (its
    ``_report_thread_runner_error(block=True)``; the runner thread queues its
    error before it ends): the last read of a run would hold each worker
    that long.
    """
    return (
        session.training_started
        and not session.training_thread.is_alive()
        and session.result_queue.empty()
        and session.error_queue.empty()
        and getattr(session, "_inter_actor_queue", None) is None
    )


def worker_get_next() -> Any:
    """``_TrainSession.get_next`` on a training worker.

    Runs on a training worker; the same as the closure in Ray's
    ``BackendExecutor.get_next_results`` (a module-level function, so it is
    pickled by reference).
    """
    session = get_session()
    try:
        if session is None:
            raise RuntimeError
        if _training_over(session):
            return None
        return session.get_next()
    except RuntimeError:  # what Ray's closure turns into TrainBackendError
        raise TrainBackendError(
            "`get_next_results` has been called before `start_training`. "
            "Please call `start_training` before `get_next_results`."
        ) from None


class RayTrainWorker(_RayTrainWorker):
    """Ray's ``RayTrainWorker`` (Ray 2.40 .. 2.60) plus :meth:`get_next`.

    The training workers' actor class when the remote executor starts them
    (``BackendExecutor.start(train_cls=...)``). The same name as Ray's, so
    ``ray list actors`` and a worker's ``ActorDiedError`` read as with Ray's
    executor.
    """

    def get_next(self) -> Any:
        """``__execute(worker_get_next)``: Ray's ``RayTrainWorker.__execute``
        with :func:`worker_get_next`, its error handling included.

        Runs on a training worker; the remote executor's call on every
        report. A method of its own spares pickling, sending and unpickling
        the function with each call (0.06 ms to send it, on 2 cores).
        """
        return self._RayTrainWorker__execute(worker_get_next)


def get_next_methods(worker_group: Any) -> list[Any]:
    """Each worker's :meth:`RayTrainWorker.get_next`, as an actor method to call.

    Runs in the coordinator, on a copy of the executor host's ``worker_group``
    (``WorkerGroup.workers``, Ray 2.40 .. 2.60) that the host started with
    :class:`RayTrainWorker`. The tasks are named as those of Ray's
    ``BackendExecutor.get_next_results`` (``_RayTrainWorker__execute.get_next``),
    so ``ray list tasks`` and a worker's ``RayTaskError`` read the same with
    either executor.
    """
    return [
        w.actor.get_next.options(name="_RayTrainWorker__execute.get_next")
        for w in worker_group.workers
    ]


# -- The executor host's process (ray_tt_ext._executor) ---------------------------------

#: The environment variables Ray's ``BackendExecutor`` (Ray 2.40 .. 2.60) reads
#: in its own process (``start``, ``_create_placement_group``, ``__init__``).
#: Ray's executor reads them in the coordinator; the remote executor's host
#: must see the same values.
EXECUTOR_ENV_VARS: tuple[str, ...] = tuple(
    getattr(_backend_executor_module, name)
    for name in (
        "ENABLE_SHARE_CUDA_VISIBLE_DEVICES_ENV",
        "ENABLE_SHARE_HIP_VISIBLE_DEVICES_ENV",
        "ENABLE_SHARE_NEURON_CORES_ACCELERATOR_ENV",
        "ENABLE_SHARE_NPU_RT_VISIBLE_DEVICES_ENV",
        "ENABLE_DETAILED_AUTOFILLED_METRICS_ENV",
        "RAY_TRAIN_ENABLE_STATE_TRACKING",
        "TRAIN_ENABLE_WORKER_SPREAD_ENV",
        "TRAIN_PLACEMENT_GROUP_TIMEOUT_S_ENV",
    )
    if hasattr(_backend_executor_module, name)
)


def executor_env() -> dict[str, str]:
    """This process's values of :data:`EXECUTOR_ENV_VARS` (those set)."""
    return {k: os.environ[k] for k in EXECUTOR_ENV_VARS if k in os.environ}


def captures_child_tasks() -> bool:
    """Whether tasks and actors this process starts join its placement group.

    ``Worker.should_capture_child_tasks_in_placement_group`` (Ray 2.40 ..
    2.60): what Ray's ``BackendExecutor._create_placement_group`` reads, with
    ``get_current_placement_group()``, to decide whether to make a placement
    group of its own.
    """
    return bool(_ray_worker.global_worker.should_capture_child_tasks_in_placement_group)


class BorrowedPlacementGroup(PlacementGroup):
    """The trial's placement group, given to an executor that runs outside it.

    A ``PlacementGroup`` (same id, same bundles) that also tells
    :class:`CapturingWorkerGroup` to let the workers capture their child tasks,
    as workers started by Ray's executor inside a capturing trial do.
    """

    @classmethod
    def of(cls, placement_group: PlacementGroup) -> BorrowedPlacementGroup:
        return cls(placement_group.id, placement_group.bundle_cache)

    def __reduce__(self):
        return (type(self), (self.id, self.bundle_cache))


class _CapturingActorClass:
    """A worker actor class whose ``.options(placement_group=borrowed)`` captures
    child tasks too (see :class:`CapturingWorkerGroup`)."""

    def __init__(self, actor_cls: Any):
        self._actor_cls = actor_cls

    def options(self, **options: Any) -> Any:
        if isinstance(options.get("placement_group"), BorrowedPlacementGroup):
            options.setdefault("placement_group_capture_child_tasks", True)
        return self._actor_cls.options(**options)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_actor_cls":  # unpickling: not set yet
            raise AttributeError(name)
        return getattr(self._actor_cls, name)


class CapturingWorkerGroup(_WorkerGroup):
    """Ray's ``WorkerGroup`` (Ray 2.40 .. 2.60) whose workers, started in a
    :class:`BorrowedPlacementGroup`, capture their child tasks.

    Ray's executor inside a trial starts its workers with
    ``placement_group="default"``: the trial's group, and (because the
    coordinator captures child tasks) tasks the training function starts land
    in the trial's bundles. The executor host runs outside the trial's group,
    so it names the group explicitly; this makes the workers capture as well.
    Runs in the executor host only (installed there by
    :func:`use_capturing_worker_group`).
    """

    @property
    def _remote_cls(self) -> Any:
        return self.__dict__["_remote_cls"]

    @_remote_cls.setter
    def _remote_cls(self, actor_cls: Any) -> None:
        # Set by WorkerGroup.__init__ (ray.remote(...)(cls)), read by add_workers.
        self.__dict__["_remote_cls"] = _CapturingActorClass(actor_cls)


def use_capturing_worker_group() -> None:
    """Make Ray's ``BackendExecutor.start`` build :class:`CapturingWorkerGroup`s.

    Patches ``ray.train._internal.backend_executor.WorkerGroup`` (Ray 2.40 ..
    2.60) for the whole process: call it in the executor host's process only,
    which runs nothing but executors (a group outside a borrowed placement
    group is Ray's exactly).
    """
    _backend_executor_module.WorkerGroup = CapturingWorkerGroup


def set_data_context(context: Any) -> None:
    """Make ``context`` this process's Ray Data ``DataContext``.

    Runs on a training worker (what Ray's ``BackendExecutor.start`` does with
    the executor's process's context), and in the trial actor (the trainer's
    dataset context): Ray's ``DataContext._set_current``.
    """
    from ray.data import DataContext

    DataContext._set_current(context)


def data_context_if_used() -> Any:
    """This process's ``DataContext`` if Ray Data is imported here, else ``None``."""
    if "ray.data" not in sys.modules:
        return None
    from ray.data import DataContext

    return DataContext.get_current()


def actor_ready_ref(actor: Any) -> Any:
    """``actor.__ray_ready__.remote()``: an ``ObjectRef`` ready when the actor can
    take a call, failing with ``ActorDiedError`` once it is dead.

    ``__ray_ready__`` (Ray 2.40 .. 2.60): the method Ray's ``_modify_class`` gives every actor.
    Runs in the executor host (it watches the trials' coordinators).
    """
    return actor.__ray_ready__.remote()


def experiment_fs_path(
    storage_path: str, storage_filesystem: Optional[Any], experiment_dir_name: str
) -> str:
    """``StorageContext.experiment_fs_path`` (Ray 2.40 .. 2.60) without building one.

    Ray's ``StorageContext.__init__`` writes and reads a marker file in the
    experiment folder (requests, on S3); this is the same path from Ray's
    ``get_fs_and_path``. Runs on the driver (or the Ray Client Tuner actor).
    """
    from pathlib import Path

    from ray.train._internal.storage import get_fs_and_path

    _, fs_path = get_fs_and_path(storage_path, storage_filesystem)
    return Path(Path(fs_path).as_posix(), experiment_dir_name).as_posix()


def current_actor_or_none() -> Any:
    """The handle of the actor this code runs in, or ``None`` (driver, task)."""
    try:
        return ray.get_runtime_context().current_actor
    except Exception:  # RuntimeError outside an actor
        return None


def train_run_pids() -> dict[str, int]:
    """On a Train V2 training worker: the pids of its run's controller actor and
    of the actor that started it (a Tune trial actor), read from the GCS's
    actor table (no dashboard needed). For tests that kill one of them at a
    chosen moment."""
    from ray._private.state import actors

    controller = train_v2_api().get_train_context().controller_actor
    table = actors(actor_state_name="ALIVE")
    info = table[controller._actor_id.hex()]
    owner = info["OwnerAddress"]
    (trial_pid,) = [
        int(other["Pid"])
        for other in table.values()
        if other["Address"]["Port"] == owner["Port"]
        and other["Address"]["NodeID"] == owner["NodeID"]
    ]
    return {"controller": int(info["Pid"]), "trial": trial_pid}


# ---------------------------------------------------------------------------
# The map of every Ray method ray_tt_ext overrides, extends, replaces or patches
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RayOverride:
    """One place where ray_tt_ext changes a Ray class or function.

    ``ray``: the Ray attribute, ``"module:Qualified.name"``; ``ours``: where
    ray_tt_ext does it, ``"ray_tt_ext.module:Qualified.name"``; ``how``:
    overrides (replaces the method), extends (calls Ray's), replaces (Ray's is
    not called), patches (sets it on Ray's class), adds (a method of ours on a
    subclass of Ray's class, built on the private ``ray`` attribute); ``where``:
    the process it runs in; ``checked``: the Ray releases it was checked
    against; ``since``: the oldest Ray that has it (Train V2: 2.51).
    """

    ray: str
    ours: str
    how: str
    where: str
    checked: str = "2.40 .. 2.60"
    since: str = "2.40"


_V2_CHECKED = "2.51 .. 2.60"
_BRIDGE_CHECKED = "2.60 .. 2.60"
_TRAIN_V2 = "ray.train.v2.api.data_parallel_trainer:DataParallelTrainer"
_TUNER_INTERNAL = "ray.tune.impl.tuner_internal:TunerInternal"
_BASE_TRAINER = "ray.train.base_trainer:BaseTrainer"
_EXECUTOR = "ray.train._internal.backend_executor:BackendExecutor"
_STORAGE = "ray.train._internal.storage:StorageContext"
_FUNCTION_TRAINABLE = "ray.tune.trainable.function_trainable:FunctionTrainable"

#: ``scripts/matrix.sh`` on a new Ray runs ``tests/test_compat_map.py``, which
#: checks that each ``ray`` attribute still exists: what moved is named there.
RAY_OVERRIDES: tuple[RayOverride, ...] = (
    # -- Tuner (driver, or under Ray Client the Tuner actor) --------------------
    RayOverride("ray.tune:Tuner.__init__", "ray_tt_ext._tuner:Tuner.__init__", "replaces", "driver / Ray Client client"),
    RayOverride("ray.tune:Tuner.restore", "ray_tt_ext._tuner:Tuner.restore", "replaces", "driver / Ray Client client"),
    RayOverride("ray.tune.tuner:_force_on_current_node", "ray_tt_ext._tuner:_remote_tuner_internal_cls", "replaces", "Ray Client client (Ray's client Tuner actor)"),
    RayOverride(f"{_TUNER_INTERNAL}.__init__", "ray_tt_ext._tuner:_TunerInternal.__init__", "extends", "driver / Ray Client Tuner actor"),
    RayOverride(f"{_TUNER_INTERNAL}.__getstate__", "ray_tt_ext._tuner:_TunerInternal.__getstate__", "extends", "driver / Ray Client Tuner actor"),
    RayOverride(f"{_TUNER_INTERNAL}.__setstate__", "ray_tt_ext._tuner:_TunerInternal.__setstate__", "extends", "driver / Ray Client Tuner actor"),
    RayOverride(f"{_TUNER_INTERNAL}._convert_trainable", "ray_tt_ext._tuner:_TunerInternal._convert_trainable", "overrides", "driver / Ray Client Tuner actor"),
    RayOverride(f"{_TUNER_INTERNAL}._validate_trainable", "ray_tt_ext._tuner:_TunerInternal._validate_trainable", "overrides", "driver / Ray Client Tuner actor"),
    RayOverride(f"{_TUNER_INTERNAL}.fit", "ray_tt_ext._tuner:_TunerInternal.fit", "extends", "driver / Ray Client Tuner actor"),
    RayOverride(f"{_TUNER_INTERNAL}.fit", "ray_tt_ext._tuner:_ClientTunerInternal.fit", "extends", "Ray Client Tuner actor"),
    RayOverride(f"{_TUNER_INTERNAL}.get_results", "ray_tt_ext._tuner:_ClientTunerInternal.get_results", "extends", "Ray Client Tuner actor"),
    RayOverride("ray.tune.experiment:Experiment._storage_context_cls", "ray_tt_ext._storage:checkpoint_policy_installed", "patches", "driver, while a fit runs"),
    # -- V1 trainers -----------------------------------------------------------
    RayOverride("ray.train.base_trainer:_train_coordinator_fn", "ray_tt_ext._trainer:_train_coordinator_fn", "replaces", "trial actor (coordinator)"),
    RayOverride(f"{_BASE_TRAINER}._validate_attributes", "ray_tt_ext._trainer:BaseTrainer._validate_attributes", "overrides", "driver and trial actor"),
    RayOverride(f"{_BASE_TRAINER}.fit", "ray_tt_ext._trainer:BaseTrainer.fit", "extends", "driver"),
    RayOverride(f"{_BASE_TRAINER}._generate_trainable_cls", "ray_tt_ext._trainer:BaseTrainer._generate_trainable_cls", "overrides", "driver"),
    RayOverride(f"{_BASE_TRAINER}._extract_fields_for_tuner_param_space", "ray_tt_ext._trainer:BaseTrainer._extract_fields_for_tuner_param_space", "overrides", "driver"),
    RayOverride(f"{_BASE_TRAINER}.as_trainable", "ray_tt_ext._trainer:BaseTrainer.as_trainable", "overrides", "driver"),
    RayOverride(f"{_FUNCTION_TRAINABLE}.setup", "ray_tt_ext._trainer:_TrainCoordinator.setup", "overrides", "trial actor"),
    RayOverride(f"{_FUNCTION_TRAINABLE}.cleanup", "ray_tt_ext._trainer:_TrainCoordinator.cleanup", "extends", "trial actor"),
    RayOverride(f"{_FUNCTION_TRAINABLE}._trainable_func", "ray_tt_ext._trainer:_TrainCoordinator._trainable_func", "overrides", "trial actor"),
    RayOverride("ray.tune.trainable:Trainable.default_resource_request", "ray_tt_ext._trainer:_TrainCoordinator.default_resource_request", "overrides", "driver"),
    RayOverride("ray.train.data_parallel_trainer:DataParallelTrainer._propagate_results", "ray_tt_ext._trainer:DataParallelTrainer._propagate_results", "extends", "trial actor (coordinator)"),
    RayOverride("ray.train.data_parallel_trainer:DataParallelTrainer._backend_executor_cls", "ray_tt_ext._trainer:_executors_shut_down", "patches", "trial actor, per trainer instance"),
    # -- StorageContext (where checkpoints are saved, and the driver) -----------
    RayOverride(f"{_STORAGE}._update_checkpoint_index", "ray_tt_ext._storage:StorageContext._update_checkpoint_index", "overrides", "trial actor, training workers, coordinator, driver"),
    RayOverride(f"{_STORAGE}.checkpoint_dir_name", "ray_tt_ext._storage:StorageContext.checkpoint_dir_name", "overrides", "wherever a checkpoint is saved"),
    RayOverride(f"{_STORAGE}.persist_current_checkpoint", "ray_tt_ext._storage:StorageContext.persist_current_checkpoint", "extends", "trial actor, training workers"),
    # -- The remote executor (executor host, training workers) ------------------
    RayOverride(f"{_EXECUTOR}.__init__", "ray_tt_ext._executor:_HostedBackendExecutor.__init__", "extends", "executor host"),
    RayOverride(f"{_EXECUTOR}.start", "ray_tt_ext._executor:_HostedBackendExecutor.start", "overrides", "executor host"),
    RayOverride(f"{_EXECUTOR}.shutdown", "ray_tt_ext._executor:_HostedBackendExecutor.shutdown", "extends", "executor host"),
    RayOverride(f"{_EXECUTOR}._create_placement_group", "ray_tt_ext._executor:_HostedBackendExecutor._create_placement_group", "overrides", "executor host"),
    RayOverride(f"{_EXECUTOR}._restart", "ray_tt_ext._executor:_HostedBackendExecutor._restart", "extends", "executor host"),
    RayOverride(f"{_EXECUTOR}.get_next_results", "ray_tt_ext._executor:RemoteBackendExecutor.get_next_results", "replaces", "coordinator (trial actor): reads the workers' results as Ray's does"),
    RayOverride(f"{_EXECUTOR}.get_with_failure_handling", "ray_tt_ext._executor:RemoteBackendExecutor.get_next_results", "uses", "executor host, on a worker's failure"),
    RayOverride("ray.train._internal.utils:check_for_failure", "ray_tt_ext._executor:RemoteBackendExecutor.get_next_results", "uses", "coordinator (trial actor)"),
    RayOverride("ray.train.backend:Backend.on_start", "ray_tt_ext._executor:_HostedBackendExecutor.use_data_context", "patches", "executor host, per executor's backend instance"),
    RayOverride("ray.train._internal.backend_executor:WorkerGroup", "ray_tt_ext._compat:use_capturing_worker_group", "patches", "executor host (its process only)"),
    RayOverride("ray.train._internal.worker_group:WorkerGroup.add_workers", "ray_tt_ext._compat:CapturingWorkerGroup", "uses", "executor host (WorkerGroup._remote_cls.options)"),
    RayOverride("ray._private.worker:Worker.should_capture_child_tasks_in_placement_group", "ray_tt_ext._compat:captures_child_tasks", "uses", "coordinator (trial actor)"),
    RayOverride("ray.train._internal.storage:get_fs_and_path", "ray_tt_ext._compat:experiment_fs_path", "uses", "driver / Ray Client Tuner actor (StorageContext.experiment_fs_path)"),
    RayOverride("ray.actor:_modify_class", "ray_tt_ext._compat:actor_ready_ref", "uses", "executor host (its __ray_ready__ method, to watch coordinators)"),
    RayOverride("ray.train._internal.worker_group:RayTrainWorker._RayTrainWorker__execute", "ray_tt_ext._compat:RayTrainWorker.get_next", "adds", "training worker"),
    RayOverride("ray.train._internal.session:_TrainSession.get_next", "ray_tt_ext._compat:_training_over", "uses", "training worker (training_thread, result_queue, error_queue)"),
    # -- Ray's core, driver ------------------------------------------------------
    RayOverride("ray._private.worker:_post_init_hooks", "ray_tt_ext._compat:add_post_init_hook", "patches", "driver"),
    RayOverride("ray._raylet:CoreWorker.remove_object_ref_reference", "ray_tt_ext._compat:release_out_of_band_pins", "uses", "driver"),
    # -- Train V2 (Ray >= 2.51) -------------------------------------------------
    RayOverride(f"{_TRAIN_V2}._validate_configs", "ray_tt_ext._train_v2:_V2TrainerMixin._validate_configs", "extends", "driver or Tune trial actor", _V2_CHECKED, "2.51"),
    RayOverride(f"{_TRAIN_V2}._get_train_func", "ray_tt_ext._train_v2:_V2TrainerMixin._get_train_func", "overrides", "driver or Tune trial actor", _V2_CHECKED, "2.51"),
    RayOverride(f"{_TRAIN_V2}.fit", "ray_tt_ext._train_v2:_V2TrainerMixin.fit", "extends", "driver or Tune trial actor", _V2_CHECKED, "2.51"),
    RayOverride("ray.train.v2._internal.execution.train_fn_utils:DistributedTrainFnUtils.report", "ray_tt_ext._train_v2:_NamingTrainFnUtils.report", "extends", "Train V2 training worker", _V2_CHECKED, "2.51"),
    RayOverride("ray.train.v2._internal.execution.train_fn_utils:set_train_fn_utils", "ray_tt_ext._train_v2:PolicyTrainFn.__call__", "patches", "Train V2 training worker", _V2_CHECKED, "2.51"),
    RayOverride("ray.train.v2._internal.execution.train_fn_utils:DistributedTrainFnUtils.get_checkpoint", "ray_tt_ext._train_v2:_NamingTrainFnUtils.get_checkpoint", "extends", "Train V2 training worker", _V2_CHECKED, "2.51"),
    # -- Tune x Train V2: ray_tt_ext.v2.Tuner(trainer) (Ray 2.60) ------------------
    RayOverride(f"{_TRAIN_V2}._initialize_and_run_controller", "ray_tt_ext._v2_trial:_TrialRun._run_controller", "replaces", "Tune trial actor, per trainer instance", _BRIDGE_CHECKED, "2.51"),
    RayOverride(f"{_TRAIN_V2}._create_default_callbacks", "ray_tt_ext._v2_trial:_TrialRun.start", "patches", "Tune trial actor, per trainer instance", _BRIDGE_CHECKED, "2.51"),
    RayOverride(f"{_TRAIN_V2}._initialize_and_run_controller", "ray_tt_ext._v2_trial:_run_controller_of_a_trial", "patches", "Tune trial actor of a v2.Tuner function trial", _BRIDGE_CHECKED, "2.51"),
    RayOverride("ray.train.v2._internal.execution.controller:TrainController.__init__", "ray_tt_ext._v2_trial:TrialController.__init__", "extends", "the run's controller actor", _BRIDGE_CHECKED, "2.51"),
    RayOverride("ray.train.v2._internal.execution.controller:TrainController.worker_group_cls", "ray_tt_ext._v2_trial:TrialController.__init__", "patches", "the run's controller actor", _BRIDGE_CHECKED, "2.51"),
    RayOverride("ray.train.v2._internal.execution.controller:TrainController._poll_workers", "ray_tt_ext._v2_trial:TrialController._poll_workers", "overrides", "the run's controller actor", _BRIDGE_CHECKED, "2.51"),
    RayOverride("ray.train.v2._internal.execution.controller:TrainController.run", "ray_tt_ext._v2_trial:TrialController.run", "extends", "the run's controller actor", _BRIDGE_CHECKED, "2.51"),
    RayOverride("ray.train.v2._internal.execution.checkpoint.checkpoint_manager:CheckpointManager.register_checkpoint", "ray_tt_ext._v2_trial:TrialController._replay", "uses", "the run's controller actor (the recorded results and their report indices)", _BRIDGE_CHECKED, "2.51"),
    RayOverride("ray.train.v2._internal.execution.checkpoint.checkpoint_manager:CheckpointManager.after_report", "ray_tt_ext._v2_trial:TuneReportBridge.after_report", "uses", "the run's controller actor (the report index it counts)", _BRIDGE_CHECKED, "2.51"),
    RayOverride("ray.train.v2._internal.execution.context:TrainContext._wait_then_report", "ray_tt_ext._train_v2:_commit_each_report", "patches", "Train V2 training worker (its context instance, under a v2.Tuner trial)", _BRIDGE_CHECKED, "2.51"),
    RayOverride("ray.train.v2._internal.execution.worker_group:WorkerGroup._get_worker_runtime_env", "ray_tt_ext._v2_trial:TrialWorkerGroup._get_worker_runtime_env", "extends", "the run's controller actor", _BRIDGE_CHECKED, "2.51"),
    RayOverride("ray.train.v2._internal.execution.worker_group:WorkerGroup._create_placement_group", "ray_tt_ext._v2_trial:TrialWorkerGroup._create_placement_group", "overrides", "the run's controller actor", _BRIDGE_CHECKED, "2.51"),
    RayOverride("ray.train.v2._internal.execution.worker_group.placement_group_handle:DefaultPlacementGroupHandle.shutdown", "ray_tt_ext._v2_trial:_TunePlacementGroupHandle.shutdown", "overrides", "the run's controller actor", _BRIDGE_CHECKED, "2.51"),
    RayOverride("ray.train.v2._internal.execution.checkpoint.checkpoint_manager:delete_fs_path", "ray_tt_ext._v2_trial:_tune_deletes", "patches", "the run's controller actor", _BRIDGE_CHECKED, "2.51"),
    RayOverride("ray.train.v2._internal.callbacks.placement_group_callback:PlacementGroupCleanerCallback", "ray_tt_ext._v2_trial:_TrialRun.start", "patches", "Tune trial actor (left out of the run's callbacks)", _BRIDGE_CHECKED, "2.51"),
    RayOverride(f"{_FUNCTION_TRAINABLE}._trainable_func", "ray_tt_ext._v2_trial:V2Trial._trainable_func", "overrides", "Tune trial actor", _BRIDGE_CHECKED, "2.51"),
    RayOverride(f"{_FUNCTION_TRAINABLE}.cleanup", "ray_tt_ext._v2_trial:V2Trial.cleanup", "extends", "Tune trial actor", _BRIDGE_CHECKED, "2.51"),
    RayOverride(f"{_FUNCTION_TRAINABLE}.reset_config", "ray_tt_ext._v2_trial:V2Trial.reset_config", "extends", "Tune trial actor", _BRIDGE_CHECKED, "2.51"),
    RayOverride("ray.tune.trainable:Trainable.default_resource_request", "ray_tt_ext._v2_trial:V2Trial.default_resource_request", "overrides", "driver", _BRIDGE_CHECKED, "2.51"),
    RayOverride(f"{_FUNCTION_TRAINABLE}._trainable_func", "ray_tt_ext._v2_trial:ReleasingTrial._trainable_func", "extends", "Tune trial actor", _BRIDGE_CHECKED, "2.51"),
    RayOverride(f"{_FUNCTION_TRAINABLE}.cleanup", "ray_tt_ext._v2_trial:ReleasingTrial.cleanup", "extends", "Tune trial actor", _BRIDGE_CHECKED, "2.51"),
    RayOverride(f"{_FUNCTION_TRAINABLE}.setup", "ray_tt_ext._v2_trial:ReleasingTrial.setup", "extends", "Tune trial actor", _BRIDGE_CHECKED, "2.51"),
    RayOverride(f"{_FUNCTION_TRAINABLE}.reset_config", "ray_tt_ext._v2_trial:ReleasingTrial.reset_config", "extends", "Tune trial actor", _BRIDGE_CHECKED, "2.51"),
)  # fmt: skip


# Every name other ray_tt_ext modules (and the tests, scripts and release
# scenarios) take from this module; tests/test_compat_map.py keeps it accurate.
__all__ = [
    "ActorDiedError",
    "AirEntrypoint",
    "AirRunConfig",
    "AirScalingConfig",
    "BackendExecutor",
    "BorrowedPlacementGroup",
    "BaseTrainer",
    "CHECKPOINT_DIR_NAME",
    "DataParallelTrainer",
    "Experiment",
    "FUNCTION_SIZE_ERROR_THRESHOLD",
    "FUNCTION_SIZE_WARN_THRESHOLD",
    "FunctionTrainable",
    "InactiveWorkerGroup",
    "InactiveWorkerGroupError",
    "MIN_TRAIN_V2_RAY_VERSION",
    "PlacementGroupFactory",
    "RAYS_TUNER_OF_TRAINER_DEPRECATION",
    "RAY_OVERRIDES",
    "RAY_VERSION",
    "RESULT_DUPLICATE",
    "RayOverride",
    "RayTrainWorker",
    "StartTraceback",
    "StartTracebackWithWorkerRank",
    "StorageContext",
    "TrainBackendError",
    "TrainV2DisabledError",
    "TrainingWorkerError",
    "TrainV2EnabledError",
    "TuneCheckpoint",
    "TuneCheckpointConfig",
    "TuneError",
    "TuneFailureConfig",
    "TuneRunConfig",
    "TunerInternal",
    "UnsupportedRayVersionError",
    "V2_ENV_VAR",
    "acting_as_tune_driver",
    "actor_ready_ref",
    "add_post_init_hook",
    "captures_child_tasks",
    "check_for_failure",
    "check_ray_version",
    "count_out_of_band_pins",
    "current_actor_or_none",
    "data_context_if_used",
    "deep_update",
    "ensure_train_v1",
    "ensure_train_v2",
    "executor_env",
    "experiment_fs_path",
    "force_on_current_node_options",
    "get_checkpoint",
    "get_next_methods",
    "get_session",
    "grpc_max_message_bytes",
    "is_driver_process",
    "is_train_v2_trainer",
    "join_training_thread",
    "note_ref_pickled",
    "ray_cloudpickle",
    "release_out_of_band_pins",
    "set_data_context",
    "set_experiment_storage_context_cls",
    "should_pickle_by_reference",
    "to_train_v1",
    "train_v1_runtime_env_vars",
    "train_run_pids",
    "train_v2_api",
    "train_v2_bridge_api",
    "tune_report_queue",
    "train_v2_enabled",
    "tune_report",
    "use_capturing_worker_group",
    "v2_migration_warnings_enabled",
    "has_v2_migration_warnings",
]
