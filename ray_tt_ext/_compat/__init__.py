"""The one place where ray_tt_ext touches Ray's internals.

Every ``ray.*._internal`` / ``ray._private`` import, every look at Ray's
version and every decision about Ray Train V2 lives here. Other modules import
the names below; they never reach into Ray's private modules themselves.

A package, a module per concern: ``versions`` (the supported range, and the
names that differ between Ray releases; imported first, it refuses an
unsupported Ray before anything imports ``ray.train``), ``core`` (Ray's core
and Tune's driver), ``train_mode`` (Train V1 or V2, and V2 configs converted),
``tune_loop`` (Tune's controller and placement groups in a fit),
``tune_checkpoints`` (Tune's record of each trial's checkpoints, for the
sweep's retention, imported on demand), ``train_v1``
(the training workers' session, the executor host's process),
``train_v2`` and ``train_v2_bridge`` (Ray Train V2's internals, typed, imported
on demand: ``from ray_tt_ext._compat import train_v2``) and ``overrides``
(``RAY_OVERRIDES``, the map of every Ray method ray_tt_ext changes) and
``ray_check`` (whether the installed Ray has each of them: the Tuners' check
before any trial, ``python -m ray_tt_ext check-ray``).

Importing this package never changes ``RAY_TRAIN_V2_ENABLED``: ``ray_tt_ext``
(the Train V1 integration) calls :func:`activate_train_v1` before it imports
this module for the first public name taken from it, and ``ray_tt_ext.v2``
never does (see ``ray_tt_ext/__init__.py``).
"""

from __future__ import annotations

from typing import Any, Optional

# isort: off
# versions first: it checks Ray's version before anything imports ray.train.
from ray_tt_ext._compat.versions import (
    AirRunConfig,
    FUNCTION_SIZE_ERROR_THRESHOLD,
    FUNCTION_SIZE_WARN_THRESHOLD,
    RAYS_TUNER_OF_TRAINER_DEPRECATION,
    RAY_VERSION,
    TuneCheckpoint,
    TuneCheckpointConfig,
    TuneFailureConfig,
    TuneRunConfig,
    UnsupportedRayVersionError,
    as_tune_checkpoint,
    check_ray_version,
    deep_update,
    get_checkpoint,
    grpc_max_message_bytes,
    has_v2_migration_warnings,
    should_pickle_by_reference,
    tune_report,
    v2_migration_warnings_enabled,
)

# Ray's names, and ours built on them: a Ray build that lacks one of them (a
# fork, a nightly) gets UnsupportedRayVersionError naming what it lacks at the
# first name taken from here (``__getattr__``), and ``check-ray`` still runs.
try:
    from ray_tt_ext._compat.core import (
        Experiment,
        StorageContext,
        acting_as_tune_driver,
        actor_ready_ref,
        add_post_init_hook,
        claim_job_key,
        connect_global_state,
        count_out_of_band_pins,
        current_actor_or_none,
        dead_train_controllers_placement_groups,
        experiment_fs_and_path,
        experiment_fs_path,
        force_on_current_node_options,
        global_state_connects_locked,
        guard_tune_registry,
        is_driver_process,
        note_ref_pickled,
        release_job_key,
        release_out_of_band_pins,
        set_experiment_storage_context_cls,
        train_run_pids,
    )
    from ray_tt_ext._compat.train_mode import (
        AirScalingConfig,
        MIN_TRAIN_V2_RAY_VERSION,
        TrainV2DisabledError,
        TrainV2EnabledError,
        ensure_train_v1,
        ensure_train_v2,
        is_train_v2_trainer,
        to_train_v1,
        train_v1_runtime_env_vars,
        train_v2_enabled,
    )
    from ray_tt_ext._compat.train_v1 import (
        BorrowedPlacementGroup,
        RayTrainWorker,
        TrainBackendError,
        WorkerReader,
        captures_child_tasks,
        data_context_if_used,
        executor_env,
        get_session,
        join_training_thread,
        set_data_context,
        tune_report_queue,
        use_capturing_worker_group,
        wait_for_workers_to_take_their_calls,
        worker_report_synchronously,
        worker_readers,
    )
    from ray_tt_ext._compat.overrides import (
        RAY_OVERRIDES,
        RayOverride,
    )
    from ray_tt_ext._compat.ray_check import check_ray_attributes
    from ray_tt_ext._compat.tune_loop import DataCpus, tune_controller_fixed

    # Ray's own names that the other modules take from here.
    import ray.cloudpickle as ray_cloudpickle
    from ray.air._internal.usage import AirEntrypoint
    from ray.air._internal.util import StartTraceback, StartTracebackWithWorkerRank
    from ray.exceptions import ActorDiedError
    from ray.train._internal.backend_executor import (
        BackendExecutor,
        InactiveWorkerGroup,
        InactiveWorkerGroupError,
        TrainingWorkerError,
    )
    from ray.train.base_trainer import BaseTrainer
    from ray.train.constants import CHECKPOINT_DIR_NAME
    from ray.train.data_parallel_trainer import DataParallelTrainer
    from ray.tune.error import TuneError
    from ray.tune.execution.placement_groups import PlacementGroupFactory
    from ray.tune.impl.tuner_internal import TunerInternal
    from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback
    from ray.tune.result import RESULT_DUPLICATE
    from ray.tune.trainable.function_trainable import FunctionTrainable, wrap_function

    # Train V1 activation lives in ``_env`` (it must run before anything imports
    # ``ray.train``); its variable's name is re-exported for the other modules.
    from ray_tt_ext._env import V2_ENV_VAR
except ImportError as _error:  # see __getattr__
    if not (_error.name or "").startswith("ray"):  # ours, or another package's
        raise
    _IMPORT_ERROR: Optional[BaseException] = _error
else:
    _IMPORT_ERROR = None

# isort: on

__all__ = [
    "ActorDiedError",
    "AirEntrypoint",
    "AirRunConfig",
    "AirScalingConfig",
    "BackendExecutor",
    "BorrowedPlacementGroup",
    "BaseTrainer",
    "CHECKPOINT_DIR_NAME",
    "CSVLoggerCallback",
    "DataCpus",
    "DataParallelTrainer",
    "Experiment",
    "FUNCTION_SIZE_ERROR_THRESHOLD",
    "FUNCTION_SIZE_WARN_THRESHOLD",
    "FunctionTrainable",
    "InactiveWorkerGroup",
    "InactiveWorkerGroupError",
    "JsonLoggerCallback",
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
    "WorkerReader",
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
    "as_tune_checkpoint",
    "actor_ready_ref",
    "add_post_init_hook",
    "captures_child_tasks",
    "check_ray_attributes",
    "check_ray_version",
    "claim_job_key",
    "connect_global_state",
    "count_out_of_band_pins",
    "current_actor_or_none",
    "data_context_if_used",
    "dead_train_controllers_placement_groups",
    "deep_update",
    "ensure_train_v1",
    "ensure_train_v2",
    "executor_env",
    "experiment_fs_and_path",
    "experiment_fs_path",
    "force_on_current_node_options",
    "global_state_connects_locked",
    "guard_tune_registry",
    "get_checkpoint",
    "get_session",
    "grpc_max_message_bytes",
    "is_driver_process",
    "is_train_v2_trainer",
    "join_training_thread",
    "note_ref_pickled",
    "ray_cloudpickle",
    "release_job_key",
    "release_out_of_band_pins",
    "set_data_context",
    "set_experiment_storage_context_cls",
    "should_pickle_by_reference",
    "to_train_v1",
    "train_v1_runtime_env_vars",
    "train_run_pids",
    "tune_report_queue",
    "train_v2_enabled",
    "tune_controller_fixed",
    "tune_report",
    "use_capturing_worker_group",
    "wait_for_workers_to_take_their_calls",
    "worker_report_synchronously",
    "worker_readers",
    "v2_migration_warnings_enabled",
    "wrap_function",
    "has_v2_migration_warnings",
]


def __getattr__(name: str) -> Any:
    """A name this package could not import from the installed Ray (see the
    ``try`` above): ``UnsupportedRayVersionError`` naming every Ray attribute
    ray_tt_ext builds on that this Ray lacks."""
    if _IMPORT_ERROR is not None and name in __all__:
        from ray_tt_ext._compat.ray_check import import_failed_message

        raise UnsupportedRayVersionError(
            import_failed_message(_IMPORT_ERROR)
        ) from _IMPORT_ERROR
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
