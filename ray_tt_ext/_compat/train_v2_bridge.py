"""Ray Train V2's controller, worker group and callback classes that
``ray_tt_ext.v2.Tuner(trainer)`` builds on (``v2._trial``, ``v2._controller``).

Imported on demand, in the Tune trial actor and the run's controller actor
(never on a training worker): importing it on a Ray whose Train V2 lacks one
of the classes every release since 2.51 has raises
:class:`UnsupportedRayVersionError`. What changed between Train V2 releases
is detected here, once, from Ray's own code (not from its version number):
each name below that a release lacks is ``None`` there, and each flag says
which of two ways that release works. ``RAY_OVERRIDES`` lists what is
overridden, with the releases that have it.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from typing import Any, Optional

from ray.train.backend import BackendConfig
from ray.tune.trainable.function_trainable import wrap_function
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from ray_tt_ext._compat.train_mode import MIN_TRAIN_V2_RAY_VERSION
from ray_tt_ext._compat.train_v2 import (
    CheckpointConfig,
    DataParallelTrainer,
    RunConfig,
    ScalingConfig,
)
from ray_tt_ext._compat.versions import (
    MAX_RAY_VERSION,
    RAY_VERSION,
    UnsupportedRayVersionError,
)

try:  # in every Train V2 release (2.51 .. 2.60)
    from ray._common.constants import RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_ENV_VAR
    from ray.train.v2._internal.callbacks.backend_setup import BackendSetupCallback
    from ray.train.v2._internal.constants import (
        DEFAULT_RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_VALUE,
        ENV_VARS_TO_PROPAGATE,
        get_env_vars_to_propagate,
    )
    from ray.train.v2._internal.exceptions import UserExceptionWithTraceback
    from ray.train.v2._internal.execution.checkpoint import (
        checkpoint_manager as checkpoint_manager_module,
    )
    from ray.train.v2._internal.execution.checkpoint.sync_actor import (
        SynchronizationActor,
    )
    from ray.train.v2._internal.execution.controller import TrainController
    from ray.train.v2._internal.execution.controller.state import (
        AbortedState,
        FinishedState,
    )
    from ray.train.v2._internal.execution.worker_group import WorkerGroup
    from ray.train.v2._internal.execution.worker_group.state import WorkerGroupState
    from ray.train.v2._internal.execution.worker_group.worker import RayTrainWorker
    from ray.train.v2.api.callback import UserCallback

    datasets_callbacks_module = importlib.import_module(
        "ray.train.v2._internal.callbacks.datasets"
    )
    #: The modules whose names a trial's controller replaces in its process
    #: (``v2._controller``): ``worker_group`` starts Ray's ``SynchronizationActor``
    #: per worker group (and, before Ray 2.54, creates its placement group),
    #: ``state`` kills and removes them.
    worker_group_module = importlib.import_module(
        "ray.train.v2._internal.execution.worker_group.worker_group"
    )
    worker_group_state_module = importlib.import_module(
        "ray.train.v2._internal.execution.worker_group.state"
    )
except ImportError as e:  # a Train V2 older or newer than the bridge knows
    raise UnsupportedRayVersionError(
        f"ray_tt_ext.v2.Tuner(trainer) extends Ray Train V2 internals that "
        f"ray=={RAY_VERSION} does not have ({e}). Fix: pip install "
        f"'ray[tune,train]>={MIN_TRAIN_V2_RAY_VERSION},<{MAX_RAY_VERSION}' "
        "(docs/compatibility.md), or "
        "tune a function that fits the trainer (Ray's documented pattern)."
    ) from e


def _optional(module: str, name: str) -> Any:
    """``module.name``, or ``None`` on a Train V2 release without it."""
    try:
        return getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None


def _plain_class(actor_class: Any) -> Optional[type]:
    """The Python class behind a ``@ray.remote`` class (``None`` if Ray keeps it
    elsewhere)."""
    modified = getattr(
        getattr(actor_class, "__ray_metadata__", None), "modified_class", None
    )
    return getattr(modified, "__ray_actor_class__", None)


_STATE = "ray.train.v2._internal.execution.controller.state"

#: ``ShuttingDownState`` (Ray 2.52+: a run ends through it, ``next_state``
#: saying how); ``None`` on 2.51, whose run goes to ``FinishedState`` at once
#: and shuts its worker group down after the loop.
ShuttingDownState: Optional[type] = _optional(_STATE, "ShuttingDownState")

#: Ray's ``PlacementGroupCleanerCallback`` (Ray 2.53+: removes a run's placement
#: group when its controller dies); ``None`` before.
PlacementGroupCleanerCallback: Optional[type] = _optional(
    "ray.train.v2._internal.callbacks.placement_group_callback",
    "PlacementGroupCleanerCallback",
)

#: Ray's ``DefaultPlacementGroupHandle`` (Ray 2.54+: a worker group creates its
#: placement group in ``WorkerGroup._create_placement_group`` and removes it
#: through the handle); ``None`` before, where ``WorkerGroup._start_impl``
#: calls ``worker_group.placement_group`` itself and ``state`` removes it with
#: ``_shutdown_placement_group``.
DefaultPlacementGroupHandle: Optional[type] = _optional(
    "ray.train.v2._internal.execution.worker_group.placement_group_handle",
    "DefaultPlacementGroupHandle",
)

#: Ray's callback that hands the trainer's datasets to the workers:
#: ``DatasetsCallback`` (Ray 2.54+), ``DatasetsSetupCallback`` before.
DatasetsCallback: type = (
    getattr(datasets_callbacks_module, "DatasetsCallback", None)
    or datasets_callbacks_module.DatasetsSetupCallback
)

#: Whether Ray starts a ``DatasetManager`` actor per worker group, datasets or
#: not (Ray 2.56+); before, datasets are split in the controller.
DATASET_MANAGER_PER_GROUP: bool = (
    importlib.util.find_spec("ray.train.v2._internal.data_integration.dataset_manager")
    is not None
)

#: Whether ``BackendSetupCallback``'s hooks are the execution group's
#: (``after_execution_group_start``, ``before_execution_group_shutdown``: Ray
#: 2.56+); before, the worker group's (``after_worker_group_start``,
#: ``before_worker_group_shutdown``).
EXECUTION_GROUP_HOOKS: bool = hasattr(BackendSetupCallback, "after_execution_group_start")

#: Whether a run numbers its reports across its worker groups (Ray 2.54+: a new
#: group continues from the controller's ``current_report_index``, which the
#: checkpoint manager's snapshot keeps); before, each group numbers its reports
#: from 1 and the snapshot keeps no numbers.
RUN_WIDE_REPORT_INDEX: bool = (
    "current_report_index"
    in inspect.signature(RayTrainWorker.init_train_context).parameters
)


def _source_has(function: Any, text: str, unknown: bool) -> bool:
    """Whether ``function``'s source has ``text`` (``unknown`` without its source)."""
    try:
        return text in inspect.getsource(function)
    except (OSError, TypeError):
        return unknown


#: Whether a worker group's shutdown may leave a worker's process alive (Ray <
#: 2.54: ``state._shutdown_workers`` ends them with ``__ray_terminate__`` and
#: kills only those that do not answer it in time; a worker whose ``report()``
#: waits answers it, and lives on); Ray 2.54+ kill every worker.
WORKERS_LEFT_AT_SHUTDOWN: bool = _source_has(
    worker_group_state_module._shutdown_workers, "__ray_terminate__", unknown=True
)

try:  # what a barrier kept in the controller raises once closed (Ray 2.56+)
    from ray.train.v2._internal.execution.checkpoint.sync_actor import (
        SynchronizationBarrierResetError,
    )
except ImportError:  # an older Train V2: its barrier cannot be released (no reset)
    SynchronizationBarrierResetError = None  # type: ignore[assignment,misc]

#: Ray's ``SynchronizationActor`` as a plain class (the run's barrier, kept in
#: the controller actor), or ``None`` where this Ray lacks what that needs (the
#: barrier's ``reset``, Ray 2.56+, and the hooks in ``worker_group`` and
#: ``state``): its worker groups then start Ray's actor, as without ray_tt_ext.
SynchronizationBarrier: Optional[type] = (
    _plain_class(SynchronizationActor)
    if SynchronizationBarrierResetError is not None
    and callable(getattr(SynchronizationActor, "reset", None))
    and getattr(worker_group_module, "SynchronizationActor", None) is SynchronizationActor
    and callable(getattr(worker_group_state_module, "_shutdown_sync_actor", None))
    else None
)

try:  # Ray's per-worker-group PreemptionWatcher actor (Ray 2.57+)
    from ray.train.v2._internal.callbacks.preemption_callback import PreemptionCallback
    from ray.train.v2._internal.execution.preemption import PreemptionWatcher
except ImportError:  # a Train V2 without it: nothing to keep in the controller
    PreemptionCallback = PreemptionWatcher = None  # type: ignore[assignment,misc]

#: The variable Ray's controller sets for itself (its blocking-get warning).
blocking_get_warning_var: str = RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_ENV_VAR


def controller_env_vars() -> dict[str, str]:
    """The environment Ray's ``_initialize_and_run_controller`` gives its controller."""
    env_vars = get_env_vars_to_propagate()
    env_vars.setdefault(
        RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_ENV_VAR,
        DEFAULT_RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_VALUE,
    )
    return env_vars


def reusable_backend(backend_config: Any) -> bool:
    """Whether a worker group of this backend can run another trial's training
    function once its backend's ``on_shutdown`` ran (``v2._controller``'s kept
    workers): Ray's base ``BackendConfig`` (its ``on_start`` does nothing) and
    ``TorchConfig`` (the next run keeps the process group, or Ray's ``on_start``
    makes a new one once the old one is destroyed: ``v2._controller``'s
    ``_TorchSetupKeepingItsGroup``). Any other backend's
    state (XGBoost's tracker, JAX's distributed runtime) is not known to
    survive, so its workers are never kept."""
    return type(backend_config) in {BackendConfig, torch_config_class()} - {None}


def torch_config_class() -> Optional[type]:
    """Ray's ``TorchConfig``, if something in this process imported it (a run's
    ``TorchConfig`` arrives pickled, and unpickling it imports it); ``None``
    otherwise, without importing torch."""
    return getattr(sys.modules.get("ray.train.torch.config"), "TorchConfig", None)


def torch_process_group_backend(backend_config: Any, resources: dict) -> Optional[str]:
    """The torch process group backend Ray's ``TorchConfig`` setup
    (``_TorchBackend.on_start``) makes for workers with these resources: the
    configuration's (lowercase, as torch names it), else ``nccl`` with GPUs,
    ``tpu_dist`` with TPUs, ``gloo``; ``None`` for any other backend
    configuration."""
    torch_config = torch_config_class()
    if torch_config is None or type(backend_config) is not torch_config:
        return None
    if backend_config.backend is not None:
        return str(backend_config.backend).lower()
    if (resources or {}).get("GPU", 0) > 0:
        return "nccl"
    if (resources or {}).get("TPU", 0) > 0:
        return "tpu_dist"
    return "gloo"


def torch_worker_functions() -> tuple[Callable[[], None], Callable[..., None]]:
    """Ray's ``TorchConfig`` worker functions (imported here, where torch is
    already loaded): ``_set_torch_distributed_env_vars`` (``RANK``,
    ``LOCAL_RANK``, ``WORLD_SIZE`` and the rest from the run's Train context)
    and ``_shutdown_torch`` (empties the CUDA cache; destroys the default process
    group when asked)."""
    from ray.train.torch.config import _set_torch_distributed_env_vars, _shutdown_torch

    return _set_torch_distributed_env_vars, _shutdown_torch


def propagated_env_vars() -> frozenset[str]:
    """The variables Ray Train V2 propagates from the driver to its actors."""
    return frozenset(ENV_VARS_TO_PROPAGATE)


__all__ = [
    "BackendConfig",
    "AbortedState",
    "DATASET_MANAGER_PER_GROUP",
    "EXECUTION_GROUP_HOOKS",
    "RUN_WIDE_REPORT_INDEX",
    "WORKERS_LEFT_AT_SHUTDOWN",
    "RayTrainWorker",
    "BackendSetupCallback",
    "CheckpointConfig",
    "DataParallelTrainer",
    "DatasetsCallback",
    "DefaultPlacementGroupHandle",
    "FinishedState",
    "PlacementGroupCleanerCallback",
    "PlacementGroupSchedulingStrategy",
    "PreemptionCallback",
    "PreemptionWatcher",
    "RunConfig",
    "ScalingConfig",
    "ShuttingDownState",
    "SynchronizationBarrier",
    "SynchronizationBarrierResetError",
    "TrainController",
    "UserCallback",
    "UserExceptionWithTraceback",
    "WorkerGroup",
    "WorkerGroupState",
    "blocking_get_warning_var",
    "checkpoint_manager_module",
    "controller_env_vars",
    "propagated_env_vars",
    "reusable_backend",
    "torch_config_class",
    "torch_process_group_backend",
    "torch_worker_functions",
    "datasets_callbacks_module",
    "worker_group_module",
    "worker_group_state_module",
    "wrap_function",
]
