"""Ray Train V2's controller, worker group and callback classes that
``ray_tt_ext.v2.Tuner(trainer)`` builds on (``_v2_trial``, ``_v2_controller``).

Imported on demand, in the Tune trial actor and the run's controller actor
(never on a training worker): importing it on a Ray whose Train V2 lacks one
of these raises :class:`UnsupportedRayVersionError`. Checked on Ray 2.60;
``RAY_OVERRIDES`` lists what is overridden.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any, Optional

from ray.train.backend import BackendConfig
from ray.tune.trainable.function_trainable import wrap_function
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

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

try:
    from ray._common.constants import RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_ENV_VAR
    from ray.train.v2._internal.callbacks.backend_setup import BackendSetupCallback
    from ray.train.v2._internal.callbacks.datasets import DatasetsCallback
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
    from ray.train.v2._internal.execution.checkpoint.sync_actor import (
        SynchronizationActor,
    )
    from ray.train.v2._internal.execution.controller import TrainController
    from ray.train.v2._internal.execution.controller.state import (
        AbortedState,
        FinishedState,
        ShuttingDownState,
    )
    from ray.train.v2._internal.execution.worker_group import WorkerGroup
    from ray.train.v2._internal.execution.worker_group.placement_group_handle import (
        DefaultPlacementGroupHandle,
    )
    from ray.train.v2._internal.execution.worker_group.state import WorkerGroupState
    from ray.train.v2.api.callback import UserCallback

    #: The modules whose names the run's barrier replaces in a trial's
    #: controller actor (``_v2_controller``): ``worker_group`` starts Ray's
    #: ``SynchronizationActor`` per worker group, ``state`` kills it.
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
        f"'ray[tune,train]>=2.60,<{MAX_RAY_VERSION}' (docs/compatibility.md), or "
        "tune a function that fits the trainer (Ray's documented pattern)."
    ) from e


def _plain_class(actor_class: Any) -> Optional[type]:
    """The Python class behind a ``@ray.remote`` class (``None`` if Ray keeps it
    elsewhere)."""
    modified = getattr(
        getattr(actor_class, "__ray_metadata__", None), "modified_class", None
    )
    return getattr(modified, "__ray_actor_class__", None)


try:  # what a barrier kept in the controller raises once closed (Ray 2.60)
    from ray.train.v2._internal.execution.checkpoint.sync_actor import (
        SynchronizationBarrierResetError,
    )
except ImportError:  # an older Train V2: its barrier cannot be released (no reset)
    SynchronizationBarrierResetError = None  # type: ignore[assignment,misc]

#: Ray's ``SynchronizationActor`` as a plain class (the run's barrier, kept in
#: the controller actor), or ``None`` where this Ray lacks what that needs (the
#: barrier's ``reset``, the hooks in ``worker_group`` and ``state``; Ray 2.55):
#: its worker groups then start Ray's actor, as without ray_tt_ext.
SynchronizationBarrier: Optional[type] = (
    _plain_class(SynchronizationActor)
    if SynchronizationBarrierResetError is not None
    and callable(getattr(SynchronizationActor, "reset", None))
    and getattr(worker_group_module, "SynchronizationActor", None) is SynchronizationActor
    and callable(getattr(worker_group_state_module, "_shutdown_sync_actor", None))
    else None
)

try:  # Ray's per-worker-group PreemptionWatcher actor (Ray 2.60)
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
    function once its backend's ``on_shutdown`` ran (``_v2_controller``'s kept
    workers): Ray's base ``BackendConfig`` (its ``on_start`` does nothing) and
    ``TorchConfig`` (the next run keeps the process group, or Ray's ``on_start``
    makes a new one once the old one is destroyed: ``_v2_controller``'s
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
    "worker_group_module",
    "worker_group_state_module",
    "wrap_function",
]
