"""The run's controller of a ``ray_tt_ext.v2.Tuner(trainer)`` trial.

Ray runs each Train V2 run's controller as an actor of its own. Here it runs
in the Tune trial actor's process, on an event loop thread of its own
(:class:`ControllerHost`): a Python process fewer per trial. What runs there
(one Train V2 run at a time); the trial side only builds the callbacks it
gives the controller (:class:`TuneReportBridge`,
:func:`without_idle_dataset_manager`) and passes the workers' calls on:

* :class:`TrialController`: Ray's ``TrainController`` whose worker group
  starts in the trial's placement group, which Tune reserved from the
  trainer's ``ScalingConfig``; Tune removes it when the trial stops, and the
  workers with it. A worker's ``report()`` returns once the run recorded the
  report and Tune took it; the trial takes rank 0's reports from it directly.
  On Ray 2.60, the worker groups' barrier (Ray's ``SynchronizationActor``)
  runs on a second event loop thread, and Ray's ``PreemptionWatcher`` as a
  thread, where Ray starts an actor each per worker group.
* :class:`TrialWorkerGroup`: Ray's ``WorkerGroup`` in the trial's bundles.
* :class:`TuneReportBridge` (a V2 ``UserCallback``): hands rank 0's metrics and
  the checkpoint to the trial, in order, once the run recorded them.
* :class:`ControllerHost`: the two event loop threads, and the way in for the
  workers' calls, which reach the trial actor (``_v2_trial.V2Trial``).

The trial side (the Tune trial actor's Tune and training threads) is ``_v2_trial``.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import inspect
import itertools
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any, Optional

import ray

from ray_tt_ext._compat import train_v2_bridge as _V2
from ray_tt_ext._train_v2 import (
    ControllerBarrier,
    NoDatasetShards,
    process_group_state,
    release_process_group,
    sum_of_ones_over_process_group,
)

logger = logging.getLogger("ray_tt_ext")


class _TunePlacementGroupHandle(_V2.DefaultPlacementGroupHandle or object):  # type: ignore[misc]
    """The trial's placement group as the worker group's: Tune owns it, so
    shutting the worker group down leaves it (Tune removes it with the trial).
    Ray 2.54+; before, see :func:`_keep_trial_placement_groups_in_train`."""

    def shutdown(self) -> None:
        """Overrides Ray Train V2's ``DefaultPlacementGroupHandle.shutdown``; runs on
        the controller's event loop (trial actor). Tune removes the trial's placement group itself."""


#: The ids of the trials' placement groups this process handed to Ray Train's
#: worker groups (Ray 2.51 .. 2.53: :func:`_keep_trial_placement_groups_in_train`).
_TRIAL_PLACEMENT_GROUPS: set = set()


class _TrialPlacementGroupFactory:
    """Stands for Ray Train V2's ``worker_group.placement_group`` in a trial's
    controller (Ray 2.51 .. 2.53, whose ``WorkerGroup._start_impl`` calls it
    itself: there is no ``_create_placement_group`` to override). In a
    :class:`TrialController`'s process, a worker group whose bundles are the
    trial's (one per worker) gets the trial's placement group; anything else,
    Ray's."""

    def __init__(self, rays: Callable[..., Any]):
        self._rays = rays

    def __call__(self, bundles: list, *args: Any, **kwargs: Any) -> Any:
        controller = _this_processes_controller()
        pg = controller.worker_group_cls.trial_placement_group if controller else None
        if pg is not None and len(pg.bundle_specs) == len(bundles):
            _TRIAL_PLACEMENT_GROUPS.add(pg.id)
            return pg
        return self._rays(bundles, *args, **kwargs)


class _TrialPlacementGroupLeft:
    """Stands for Ray Train V2's ``worker_group.remove_placement_group`` and
    ``state._shutdown_placement_group`` in a trial's controller (Ray 2.51 ..
    2.53): the trial's placement group is left to Tune (which removes it with
    the trial); any other is removed as Ray does."""

    def __init__(self, rays: Callable[[Any], Any]):
        self._rays = rays

    def __call__(self, placement_group: Any) -> Any:
        if placement_group is not None and placement_group.id in _TRIAL_PLACEMENT_GROUPS:
            return None
        return self._rays(placement_group)


def _keep_trial_placement_groups_in_train() -> None:
    """Patches Ray Train V2's ``worker_group.placement_group`` and
    ``remove_placement_group`` and ``state._shutdown_placement_group`` in this
    process (the trial actor of a ``ray_tt_ext.v2.Tuner`` trial), once, on Ray
    2.51 .. 2.53, whose ``WorkerGroup`` has no ``_create_placement_group`` and
    no placement group handle: the worker group of this process's
    :class:`TrialController` starts in the trial's placement group, and never
    removes it (:class:`_TrialPlacementGroupFactory`,
    :class:`_TrialPlacementGroupLeft`). Ray 2.54+ needs none of it
    (:meth:`TrialWorkerGroup._create_placement_group`)."""
    if _V2.DefaultPlacementGroupHandle is not None:
        return
    module = _V2.worker_group_module
    if not isinstance(module.placement_group, _TrialPlacementGroupFactory):
        module.placement_group = _TrialPlacementGroupFactory(module.placement_group)
    if not isinstance(module.remove_placement_group, _TrialPlacementGroupLeft):
        module.remove_placement_group = _TrialPlacementGroupLeft(
            module.remove_placement_group
        )
    state = _V2.worker_group_state_module
    if not isinstance(state._shutdown_placement_group, _TrialPlacementGroupLeft):
        state._shutdown_placement_group = _TrialPlacementGroupLeft(
            state._shutdown_placement_group
        )


def _trial_placement_group_of(state: Any) -> Any:
    """The trial's placement group, if the worker group whose state this is runs in
    it (Ray 2.54+: its handle; before, its ``placement_group``); else ``None``."""
    handle = getattr(state, "placement_group_handle", None)
    if handle is not None:
        return (
            handle.placement_group
            if isinstance(handle, _TunePlacementGroupHandle)
            else None
        )
    pg = getattr(state, "placement_group", None)
    return pg if pg is not None and pg.id in _TRIAL_PLACEMENT_GROUPS else None


class TrialWorkerGroup(_V2.WorkerGroup):
    """Ray Train V2's ``WorkerGroup`` whose workers take the trial's bundles."""

    #: The trial's placement group (set per controller, see TrialController).
    trial_placement_group: Any = None
    #: The Ray Train variables this controller's process already had (see
    #: TrialController): workers that would inherit the same need no runtime env.
    inherited_env: dict = {}

    def _create_placement_group(self, scaling_config: Any, worker_group_context: Any):
        """Overrides Ray Train V2's ``WorkerGroup._create_placement_group``; runs on
        the controller's event loop (trial actor). The trial's placement group when its bundles fit
        the worker group (one per worker); else Ray's own (a resized group)."""
        pg = self.trial_placement_group
        if pg is not None and len(pg.bundle_specs) == worker_group_context.num_workers:
            return _TunePlacementGroupHandle(pg)
        return super()._create_placement_group(scaling_config, worker_group_context)

    def _create_workers(
        self,
        num_workers: int,
        placement_group: Any,
        resources_per_worker: dict,
        *args: Any,
        **kwargs: Any,
    ) -> list:
        """Extends Ray Train V2's ``WorkerGroup._create_workers``; runs in the
        controller's event loop. The workers the controller kept from its last run
        (:meth:`TrialController.next_run`), ranks and all, when this is a whole
        group (Ray 2.60's bundle indices, starting rank, world size and replica
        groups at their defaults; Ray 2.55 has none of them) that fits them
        (:class:`_KeptWorkers`), and they are idle; otherwise they are killed and
        Ray starts new ones. Ray's other arguments are passed on as given."""
        controller = _this_processes_controller()
        kept = controller.take_kept_workers() if controller is not None else None
        if kept is not None:
            whole_group = not args and (
                kwargs.get("placement_group_bundle_indices") is None
                and kwargs.get("starting_world_rank", 0) == 0
                and kwargs.get("world_size") in (None, num_workers)
                and kwargs.get("replica_group_size") is None
            )
            key = _KeptWorkers.key_of(
                placement_group, num_workers, resources_per_worker, self._train_run_context
            )
            if whole_group and kept.key == key and kept.idle():
                logger.debug("Reusing the %d workers of the last run", num_workers)
                return kept.workers
            kept.kill()
        return super()._create_workers(
            num_workers, placement_group, resources_per_worker, *args, **kwargs
        )

    def keep_workers_at_shutdown(
        self, keep: Callable[[list], None], keep_process_group: bool
    ) -> None:
        """Make this group's next ``shutdown()`` leave its workers alive and hand
        them to ``keep`` (runs on the controller's event loop, before Ray's
        ``WorkerGroup.shutdown``, whose callbacks then run as usual);
        ``keep_process_group``: their torch process group stays too (a
        ``TorchConfig`` run: :class:`_TorchSetupKeepingItsGroup`), else any they
        hold is destroyed."""
        state = self._worker_group_state
        fields = {f.name: getattr(state, f.name) for f in dataclasses.fields(state)}
        self._worker_group_state = _KeepingState(
            **fields, keep=keep, keep_process_group=keep_process_group
        )

    def _get_worker_runtime_env(self, custom_runtime_env: Any) -> Any:
        """Extends Ray Train V2's ``WorkerGroup._get_worker_runtime_env``; runs in the
        controller's event loop. Ray sets ``env_vars`` on every worker's runtime env (the
        Ray Train variables to propagate), even when the worker process has them
        already: a runtime env of its own is a new Python process per worker
        instead of one of Ray's started workers. Left out when every variable
        is what this process inherited, and the user gave no ``env_vars``."""
        runtime_env = _V2.WorkerGroup._get_worker_runtime_env(custom_runtime_env)
        # Set here for the controller's own event loop; no worker is an async actor.
        quiet = _V2.blocking_get_warning_var
        env_vars = {
            k: v for k, v in (runtime_env.get("env_vars") or {}).items() if k != quiet
        }
        inherited = {k: v for k, v in self.inherited_env.items() if k != quiet}
        if env_vars == inherited and not custom_runtime_env.get("env_vars"):
            runtime_env = {k: v for k, v in runtime_env.items() if k != "env_vars"}
        return runtime_env


def _tune_deletes(fs: Any, fs_path: str) -> None:
    """Patches Ray Train V2's ``checkpoint_manager.delete_fs_path`` in the controller's
    event loop of a ``ray_tt_ext.v2.Tuner`` trial (a process of that run alone).

    The run's checkpoint manager applies the trial's retention (the same
    policy, the same algorithm: both are Ray's ``_CheckpointManager``) and drops
    a checkpoint from its list exactly when Tune's will; Tune, which registers
    each report after Train did, deletes the folder. So no folder is deleted
    that either still lists, and none is deleted twice.
    """
    logger.debug("Checkpoint %s left for Tune to delete", fs_path)


#: How long kept workers get to answer: their shutdown hooks, the check or the
#: release of their process group, their status before the next run (seconds).
_KEPT_PATIENCE_S = 5.0


@dataclasses.dataclass(frozen=True)
class _KeepingState(_V2.WorkerGroupState):
    """Ray Train V2's ``WorkerGroupState`` of a group whose workers the controller
    keeps for its next run (the run ended cleanly; see
    :meth:`TrialController._shutdown_worker_group`)."""

    keep: Any = None
    keep_process_group: bool = False

    def shutdown(self) -> None:
        """Overrides Ray Train V2's ``WorkerGroupState.shutdown``; runs in the
        controller's event loop, inside Ray's ``WorkerGroup.shutdown`` (after the
        callbacks' ``before_execution_group_shutdown``: the backend's
        ``on_shutdown`` ran). As Ray's ``_shutdown_workers`` without its
        ``ray.kill``: the workers' shutdown hooks run, their torch process group
        goes (unless ``keep_process_group``), and they are handed to ``keep``; a
        worker that does not answer in time gets Ray's ``ray.kill``, and none is
        kept; nor are any once ``keep`` is ``None`` (a callback refused them:
        :meth:`_TorchSetupKeepingItsGroup.before_execution_group_shutdown`)."""
        workers = list(self.workers)
        try:
            if self.keep is None:
                raise RuntimeError("the group's process group failed its check")
            ray.get([w.actor.shutdown.remote() for w in workers], timeout=_KEPT_PATIENCE_S)
            if not self.keep_process_group:
                ray.get(
                    [w.actor.execute.remote(release_process_group) for w in workers],
                    timeout=_KEPT_PATIENCE_S,
                )
        except Exception:
            logger.debug("Kept workers did not shut down cleanly: killed", exc_info=True)
            for worker in workers:
                ray.kill(worker.actor)
        else:
            self.keep(workers)
        _V2.worker_group_state_module._shutdown_sync_actor(self.sync_actor)
        handle = getattr(self, "placement_group_handle", None)
        if handle is not None:  # Ray 2.54+
            handle.shutdown()
        else:  # Ray 2.51 .. 2.53: the trial's is left (_TrialPlacementGroupLeft)
            _V2.worker_group_state_module._shutdown_placement_group(self.placement_group)


#: The torch process group backend whose group kept workers keep from one run to
#: the next: gloo. An NCCL group is made again for each run (a kept one is not
#: tested here, where there is no GPU).
_KEPT_TORCH_BACKEND = "gloo"


class _TorchSetupKeepingItsGroup(_V2.BackendSetupCallback):
    """Ray Train V2's ``BackendSetupCallback`` of a ``TorchConfig`` run whose
    workers the controller may keep (``reuse_actors``; runs in the controller's
    event loop). A kept group keeps its gloo process group: the next run that runs
    on those workers has the same workers in the same ranks, the same world
    size and the same backend configuration (:class:`_KeptWorkers`), so the
    group Ray's setup would make again is the one they hold. It is checked at
    the end of each run (every rank holds it, and an all-reduce over it
    completes) and before the next; Ray's setup runs whenever that does not
    hold."""

    def _holds_its_group(self, execution_group: Any, held: list) -> bool:
        """Whether every worker holds the group Ray's setup would make for this
        configuration (gloo: :data:`_KEPT_TORCH_BACKEND`), in its rank."""
        backend = _V2.torch_process_group_backend(
            self._backend_config, execution_group.get_resources_per_worker()
        )
        size = len(execution_group)
        return backend == _KEPT_TORCH_BACKEND and held == [
            (_KEPT_TORCH_BACKEND, rank, size) for rank in range(size)
        ]

    def after_execution_group_start(self, execution_group: Any) -> None:
        """Overrides Ray Train V2's ``BackendSetupCallback.after_execution_group_start``;
        runs on the controller's event loop (trial actor). When every worker holds the default
        process group this configuration makes (gloo, the group's world size,
        the worker's rank: kept workers), Ray's setup without making the group:
        the torch variables (``RANK``, ``LOCAL_RANK``, ...) from the new run's
        Train context, then the backend's ``on_training_start``. Otherwise the
        group any worker holds is destroyed, and Ray's setup makes a new one."""
        held = execution_group.execute(process_group_state)
        if self._holds_its_group(execution_group, held):
            set_torch_env_vars, _ = _V2.torch_worker_functions()
            execution_group.execute(set_torch_env_vars)
            self._backend.on_training_start(execution_group, self._backend_config)
            logger.debug("Kept the process group of %d workers", len(held))
            return
        if any(state is not None for state in held):
            execution_group.execute(release_process_group)
        _rays_backend_setup(self, "start", execution_group)

    def before_execution_group_shutdown(self, execution_group: Any) -> None:
        """Overrides Ray Train V2's ``BackendSetupCallback.before_execution_group_shutdown``;
        runs on the controller's event loop (trial actor). A group whose workers the controller
        keeps (:meth:`TrialWorkerGroup.keep_workers_at_shutdown`) keeps its
        process group when every rank holds it and an all-reduce over it
        completes within :data:`_KEPT_PATIENCE_S` with the world size (no
        collective a rank left pending on it); a group some rank left or that
        is not gloo is destroyed; then Ray's torch shutdown on the workers
        without the group's destruction (the CUDA cache is emptied, as Ray
        does). Workers that fail any of it (an all-reduce out of step waits)
        are killed by ``_KeepingState.shutdown``, none kept. Not checked:
        subgroups the loop made, point-to-point sends and receives left
        pending, threads the loop left issuing collectives. Any other group:
        Ray's ``on_shutdown``."""
        state = getattr(execution_group, "_worker_group_state", None)
        if not (isinstance(state, _KeepingState) and state.keep_process_group):
            return _rays_backend_setup(self, "shutdown", execution_group)

        def on_workers(fn: Callable, **kwargs: Any) -> list:
            return ray.get(
                execution_group.execute_async(fn, **kwargs), timeout=_KEPT_PATIENCE_S
            )

        _, shutdown_torch = _V2.torch_worker_functions()
        try:
            held = on_workers(process_group_state)
            if self._holds_its_group(execution_group, held):
                sums = on_workers(sum_of_ones_over_process_group)
                if sums != [float(len(held))] * len(held):
                    raise RuntimeError(f"all-reduce of ones over the group: {sums}")
            elif any(s is not None for s in held):
                on_workers(release_process_group)
            on_workers(shutdown_torch, destroy_process_group=False)
        except Exception:
            logger.debug("Kept workers' process group failed its check", exc_info=True)
            # _KeepingState.shutdown kills them and keeps none (a hung rank too)
            execution_group._worker_group_state = dataclasses.replace(state, keep=None)


#: Ray's ``BackendSetupCallback`` hooks by what they do: Ray 2.56+ names them
#: for the execution group (a worker group calls them for itself, or for each
#: replica group), older releases for the worker group.
_BACKEND_SETUP_HOOKS = (
    {"start": "after_execution_group_start", "shutdown": "before_execution_group_shutdown"}
    if _V2.EXECUTION_GROUP_HOOKS
    else {"start": "after_worker_group_start", "shutdown": "before_worker_group_shutdown"}
)


def _rays_backend_setup(callback: Any, hook: str, group: Any) -> None:
    """Ray's ``BackendSetupCallback`` hook (``"start"`` or ``"shutdown"``) on ``group``."""
    getattr(_V2.BackendSetupCallback, _BACKEND_SETUP_HOOKS[hook])(callback, group)


if not _V2.EXECUTION_GROUP_HOOKS:  # Ray 2.51 .. 2.55: Ray calls the worker group's hooks
    _TorchSetupKeepingItsGroup.after_worker_group_start = (  # type: ignore[method-assign]
        _TorchSetupKeepingItsGroup.after_execution_group_start
    )
    _TorchSetupKeepingItsGroup.before_worker_group_shutdown = (  # type: ignore[method-assign]
        _TorchSetupKeepingItsGroup.before_execution_group_shutdown
    )


def _settings(config: Any) -> str:
    """A backend configuration's settings, to compare two of them (its fields:
    ``TorchConfig`` is a dataclass, Ray's base ``BackendConfig`` a plain class)."""
    if dataclasses.is_dataclass(config):
        return repr(dataclasses.astuple(config))
    return repr(sorted(vars(config).items()))


@dataclasses.dataclass
class _KeptWorkers:
    """A worker group's workers that outlived its run, for the controller's next
    run (controller's event loop). ``key``: what a group must share with the last one
    to run on its workers: the placement group (the trial's: Tune reuses a
    trial actor only for the same bundles), the number of workers and their
    resources, the backend configuration and the workers' runtime env."""

    workers: list
    key: tuple

    @staticmethod
    def key_of(
        placement_group: Any, num_workers: int, resources: dict, run_context: Any
    ) -> tuple:
        return (
            placement_group.id,
            num_workers,
            tuple(sorted((resources or {}).items())),
            type(run_context.backend_config),
            _settings(run_context.backend_config),
            repr(run_context.run_config.worker_runtime_env),
        )

    def idle(self) -> bool:
        """Every worker answers, runs no training function, holds no report or
        error, and was told of no preemption of its node (Ray's
        ``RayTrainWorker.poll_status``; a run that finished just before its
        node was reclaimed ends with ``FinishedState`` too)."""
        try:
            statuses = ray.get(
                [w.actor.poll_status.remote() for w in self.workers],
                timeout=_KEPT_PATIENCE_S,
            )
        except Exception:
            return False
        return all(
            not s.running
            and s.error is None
            and s.training_report is None
            and getattr(s, "preemption_info", None) is None  # not on a draining node
            for s in statuses
        )

    def kill(self) -> None:
        for worker in self.workers:
            ray.kill(worker.actor)


#: The TrialController of this process (a trial actor's process runs one at a time).
_THIS_PROCESS: dict[str, Any] = {}
#: The generations of the worker groups' barriers made in this process.
_BARRIER_GENERATIONS = itertools.count(1)


def _this_processes_controller() -> Optional[TrialController]:
    """The TrialController of the actor running in this process, if any."""
    controller = _THIS_PROCESS.get("controller")
    if controller is None:
        return None
    if controller._actor_id != ray.get_runtime_context().get_actor_id():
        return None  # a controller of an earlier actor in this process
    return controller


class _BarrierFactory:
    """Stands for Ray's ``SynchronizationActor`` class in Ray Train V2's
    ``worker_group`` module of a trial actor: in a
    :class:`TrialController`'s process, ``.options(...).remote(...)`` makes the
    worker group's barrier in the controller (:meth:`TrialController.new_barrier`);
    anywhere else, Ray's actor."""

    def __init__(self, ray_class: Any):
        self._ray_class = ray_class

    def options(self, **options: Any) -> _BarrierStarter:
        return _BarrierStarter(self._ray_class, options)

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        return _BarrierStarter(self._ray_class, {}).remote(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ray_class, name)


class _BarrierStarter:
    def __init__(self, ray_class: Any, options: dict):
        self._ray_class, self._options = ray_class, options

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        controller = _this_processes_controller()
        if controller is None:
            return self._ray_class.options(**self._options).remote(*args, **kwargs)
        return controller.new_barrier(*args, **kwargs)


class _BarrierShutdown:
    """Stands for Ray Train V2's ``state._shutdown_sync_actor`` (``ray.kill`` of the
    group's ``SynchronizationActor``) in a trial's controller: a
    :class:`ControllerBarrier` is closed in the controller instead (its waiting
    workers released, its later calls refused); Ray's actor is killed."""

    def __init__(self, rays: Callable[[Any], None]):
        self._rays = rays

    def __call__(self, sync_actor: Any) -> None:
        if not isinstance(sync_actor, ControllerBarrier):
            return self._rays(sync_actor)
        controller = _this_processes_controller()
        if controller is not None:
            controller.close_barrier_soon(sync_actor.generation)


_PreemptionCallbackBase: type = _V2.PreemptionCallback or object


class _WatcherInTheController(_PreemptionCallbackBase):
    """Ray Train V2's ``PreemptionCallback`` whose ``PreemptionWatcher`` runs in the
    controller of a ``ray_tt_ext.v2.Tuner`` trial (its polling thread), not
    as an actor of its own per worker group: a Python process fewer per trial,
    the same drain polls and the same ``mark_preempt`` calls on the workers."""

    def after_worker_group_start(self, worker_group: Any) -> None:
        """Overrides Ray Train V2's ``PreemptionCallback.after_worker_group_start``;
        runs on the controller's event loop (trial actor). Ray's watcher class, as a plain object."""
        self._stop_watcher()
        node_to_ranks: dict[str, list[int]] = {}
        actors_by_rank: dict[int, Any] = {}
        for worker in worker_group.get_workers():
            rank = worker.distributed_context.world_rank
            node_to_ranks.setdefault(worker.metadata.node_id, []).append(rank)
            actors_by_rank[rank] = worker.actor
        self._watcher = _V2.PreemptionWatcher(
            node_to_ranks=node_to_ranks,
            poll_interval_s=self._poll_interval_s,
            worker_actors_by_rank=actors_by_rank,
        )

    def _stop_watcher(self) -> None:
        """Overrides Ray Train V2's ``PreemptionCallback._stop_watcher`` (``ray.kill``
        of the watcher actor); runs on the controller's event loop (trial actor): stops the
        watcher's polling thread."""
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher._stop_event.set()


class _DatasetsCallback(_V2.DatasetsCallback):
    """Ray Train V2's ``DatasetsCallback`` (the trainer's ``datasets`` split for the
    workers) that starts no ``DatasetManager`` actor for a trainer without
    datasets."""

    def before_init_train_context(self, workers: list) -> dict[str, list]:
        """Extends Ray Train V2's ``DatasetsCallback.before_init_train_context``;
        runs on the controller's event loop (trial actor). With datasets, Ray's (its
        ``DatasetManager`` actor splits them); without, a provider that has
        none (:class:`~ray_tt_ext._train_v2.NoDatasetShards`)."""
        if self._datasets:
            return super().before_init_train_context(workers)
        return {"dataset_shard_provider": [NoDatasetShards()] * len(workers)}


def _keep_barriers_in_the_controller() -> None:
    """Patches Ray Train V2's ``worker_group.SynchronizationActor`` and
    ``state._shutdown_sync_actor`` in this process (the trial actor of a
    ``ray_tt_ext.v2.Tuner`` trial), once: a worker group of this process's
    :class:`TrialController` keeps its barrier in the controller instead of
    starting Ray's ``SynchronizationActor``, a Python process that imports Ray
    Train, per group. Anything else in the process keeps Ray's."""
    if _V2.SynchronizationBarrier is None:  # this Ray lacks a hook: Ray's actor
        return
    module = _V2.worker_group_module
    if not isinstance(module.SynchronizationActor, _BarrierFactory):
        module.SynchronizationActor = _BarrierFactory(module.SynchronizationActor)
    state = _V2.worker_group_state_module
    if not isinstance(state._shutdown_sync_actor, _BarrierShutdown):
        state._shutdown_sync_actor = _BarrierShutdown(state._shutdown_sync_actor)


def _ends_cleanly(state: Any) -> bool:
    """Whether the run's state says that it ends because training finished (no
    error, no retry, no abort): Ray 2.52+'s ``ShuttingDownState`` whose next state
    is ``FinishedState``; on Ray 2.51 (no ``ShuttingDownState``: a run goes to
    ``FinishedState`` at once, and its worker group is shut down after the
    loop), ``FinishedState``."""
    if _V2.ShuttingDownState is None:
        return isinstance(state, _V2.FinishedState)
    return isinstance(state, _V2.ShuttingDownState) and isinstance(
        state.next_state, _V2.FinishedState
    )


#: ray_tt_ext's entry of a run's checkpoint manager snapshot on Ray < 2.54: the
#: run's report index of each checkpoint listed (``TrialController._replay``).
_REPORT_ORDER_KEY = "ray_tt_ext_report_indices"


def _path(checkpoint: Any) -> str:
    return checkpoint.path.rstrip("/")


def _workers_of(group: Any) -> list:
    """A worker group's workers, if it started (controller's event loop)."""
    return group.get_workers() if group is not None and group.has_started() else []


class _RunWideIndices(dict):
    """Ray's ``CheckpointManager._checkpoint_to_report_index`` of a trial's run on Ray
    < 2.54 (:meth:`TrialController._number_reports_across_groups`): Ray sets the
    current worker group's number of a checkpoint, which is stored as the run's
    (the group's base added). Controller's event loop."""

    def __init__(self, controller: Any, *args: Any) -> None:
        super().__init__(*args)
        self._controller = controller

    def __setitem__(self, checkpoint: Any, group_index: int) -> None:
        super().__setitem__(checkpoint, self._controller._index_base + group_index)


#: Between polls of a worker group whose training function has ended (seconds).
_FINISHING_POLL_S = 0.05
#: How many such quick polls before the controller's usual interval again.
_FINISHING_POLLS = 60


class TrialController(_V2.TrainController):
    """Ray Train V2's ``TrainController`` for one Tune trial (on the trial actor's
    controller thread: :class:`ControllerHost`).

    Besides Ray's: the workers' reports reach it when they are made, not at
    its next poll, and a report returns on a worker only once the run
    recorded it and Tune took it (:meth:`commit_report`); the trial takes
    rank 0's reports with :meth:`next_report` (no queue actor between them)
    and says when Tune took each (:meth:`report_taken`). On Ray 2.60 its worker
    groups' barriers (Ray's ``SynchronizationActor``, an actor per group) are
    kept here, on the barriers' event loop (:meth:`barrier_call`), and Ray's
    ``PreemptionWatcher`` runs here as a thread (:class:`_WatcherInTheController`:
    its ``ray.nodes()`` call at a group's start runs on the controller's event
    loop; it is not restarted on its own, it lives and dies with the controller).
    """

    def __init__(
        self,
        *,
        trial_placement_group: Any,
        env_vars: Optional[dict] = None,
        replay_after: Optional[str] = None,
        keep_workers: bool = False,
        **kwargs: Any,
    ):
        """Extends Ray Train V2's ``TrainController.__init__``; runs in the controller's
        event loop. Its worker group starts in ``trial_placement_group``; Tune deletes
        the checkpoints retention drops (:func:`_tune_deletes`); ``env_vars``,
        what Ray's ``_initialize_and_run_controller`` would give its controller
        actor as a runtime env, are set in this process (the trial actor's,
        which has them from Tune's runtime env already); ``replay_after``: see
        :meth:`_replay`; ``keep_workers``: a group that ends cleanly keeps its
        workers for the next run (:meth:`next_run`). Called again by
        :meth:`next_run` for each later run of the same actor."""
        # What this process had before the first run set anything (next_run
        # calls this again, after the first run's update).
        start_env = self._start_env = getattr(self, "_start_env", None) or dict(os.environ)
        inherited = {k: start_env[k] for k in env_vars or {} if k in start_env}
        os.environ.update(env_vars or {})
        _V2.checkpoint_manager_module.delete_fs_path = _tune_deletes
        self.worker_group_cls = type(
            "TrialWorkerGroup",
            (TrialWorkerGroup,),
            {
                "trial_placement_group": trial_placement_group,
                "inherited_env": {
                    k: v for k, v in inherited.items() if k in _V2.propagated_env_vars()
                },
            },
        )
        self._woken = asyncio.Event()
        self._handed_over = asyncio.Condition()
        self._taken_index = -1  # the report index of the last report Tune took
        self._tasks: set = set()  # strong references to the notifying tasks
        self._pending: collections.deque = collections.deque()
        #: The report index of the last report handed to the trial, and (Ray <
        #: 2.54, whose worker groups number their reports from 1 each) what this
        #: run's current worker group adds to its numbers (_start_worker_group).
        self._last_index = 0
        self._index_base = 0
        self._ended = False
        self._aborting = False  # abort() cancels the run's loop
        self._quick_polls = 0
        # Kept across this controller's runs (next_run); generations are the
        # process's (_BARRIER_GENERATIONS): a late call of an earlier group's
        # barrier never reaches a later group's.
        self._barriers: dict[int, Any] = getattr(self, "_barriers", {})
        self._kept: Optional[_KeptWorkers] = getattr(self, "_kept", None)
        self._keep_workers = keep_workers
        self._kept_key: tuple = ()
        self._actor_id = ray.get_runtime_context().get_actor_id()
        _THIS_PROCESS["controller"] = self  # the actor's process serves this run alone
        _keep_barriers_in_the_controller()
        _keep_trial_placement_groups_in_train()
        super().__init__(**kwargs)
        self._worker_group_callbacks_to_propagate = [
            self._in_this_controller(callback)
            for callback in self._worker_group_callbacks_to_propagate
        ]
        if not _V2.RUN_WIDE_REPORT_INDEX:
            self._number_reports_across_groups()
        if replay_after is not None:
            self._replay(replay_after)

    def _in_this_controller(self, callback: Any) -> Any:
        """The worker group callback this controller runs for one of Ray's: Ray's
        ``PreemptionCallback`` with its watcher in this actor
        (:class:`_WatcherInTheController`); with ``keep_workers``, the
        ``BackendSetupCallback`` of a ``TorchConfig`` run keeping its process
        group (:class:`_TorchSetupKeepingItsGroup`); any other, as given."""
        if _V2.PreemptionCallback is not None and type(callback) is _V2.PreemptionCallback:
            return _WatcherInTheController()
        if (
            self._keep_workers
            and type(callback) is _V2.BackendSetupCallback
            and type(self._train_run_context.backend_config) is _V2.torch_config_class()
        ):
            return _TorchSetupKeepingItsGroup(self._train_run_context.backend_config)
        return callback

    def next_run(self, **kwargs: Any) -> bool:
        """Start another run in this actor, with the arguments a new controller
        would get; ``False`` (nothing changed) unless the last run reached a
        terminal state, its ``run()`` loop ended and its worker group is gone. Runs in the controller's event loop; called by the trial
        actor when Tune reuses it for another trial (``_v2_trial``). Ray's
        ``TrainController`` holds one run: ``__init__`` binds it, and every
        attribute a run sets is set there, so calling it again starts afresh
        (what this class keeps across runs is said in ``__init__``)."""
        if not (self._ended and self.get_state().is_terminal()):
            return False
        if self._worker_group is not None:
            return False
        self.__init__(**kwargs)
        return True

    def take_kept_workers(self) -> Optional[_KeptWorkers]:
        """The workers kept from the last run, once (controller's event loop)."""
        kept, self._kept = self._kept, None
        return kept

    def _keep(self, workers: list) -> None:
        if self._kept is not None:  # never two groups kept at once
            self._kept.kill()
        self._kept = _KeptWorkers(workers=workers, key=self._kept_key)

    def _shutdown_worker_group(self) -> None:
        """Extends Ray Train V2's ``TrainController._shutdown_worker_group``; runs on
        the controller's event loop (trial actor). With ``keep_workers``, a group that ends because
        training finished (no error, no retry, no abort: those never come
        here with ``FinishedState`` next; a run that finished while its node
        was being preempted does, and :meth:`_KeptWorkers.idle` refuses its
        workers before the next run), in the trial's placement group and
        with a backend whose setup can be redone (``reusable_backend``), keeps
        its workers alive for the next run; any other group is shut down as
        Ray does, its workers killed."""
        group = self._worker_group
        if (
            self._keep_workers
            and group is not None
            and group.has_started()
            and _ends_cleanly(self.get_state())
            and _V2.reusable_backend(self._train_run_context.backend_config)
        ):
            trial_pg = _trial_placement_group_of(group.get_worker_group_state())
            if trial_pg is not None:
                context = group.get_worker_group_context()
                self._kept_key = _KeptWorkers.key_of(
                    trial_pg,
                    context.num_workers,
                    context.resources_per_worker,
                    self._train_run_context,
                )
                group.keep_workers_at_shutdown(
                    self._keep,
                    keep_process_group=any(
                        isinstance(c, _TorchSetupKeepingItsGroup)
                        for c in self._worker_group_callbacks_to_propagate
                    ),
                )
        workers = _workers_of(group)
        try:
            super()._shutdown_worker_group()
        finally:
            self._end_workers_left(workers)

    def _end_workers_left(self, workers: list) -> None:
        """After Ray shut a worker group down or aborted it (controller's event
        loop): its reports still waiting for Tune raise (:meth:`commit_report`),
        and on Ray < 2.54 (``WORKERS_LEFT_AT_SHUTDOWN``) its workers are killed:
        Ray ends them with ``__ray_terminate__`` and kills only those that do not
        answer in time; a worker whose ``report()`` waits answers, and its process
        lives on, holding its bundle of the trial's placement group (the next
        group's workers would wait for it for ever). Kept workers live on."""
        if _V2.WORKERS_LEFT_AT_SHUTDOWN:
            kept = {id(w) for w in self._kept.workers} if self._kept is not None else set()
            for worker in workers:
                if id(worker) not in kept:
                    ray.kill(worker.actor)
        self._notify_soon()

    def _replay(self, tune_checkpoint_path: str) -> None:
        """Hand the trial first the checkpoints the run recorded after Tune's own
        latest (``""``: Tune has none), in the order the run recorded them.

        Runs in the controller's event loop, once Ray's checkpoint manager restored the
        run's snapshot. A report that returned on the workers just before the
        trial actor, its controller or the driver died reached the snapshot but
        not Tune: the run resumes from it, and Tune now records it too (its
        checkpoint, its metrics, its iteration), so that Tune's list and
        retention match the run's.
        """
        manager = self._checkpoint_manager
        results = list(manager._checkpoint_results)
        order = manager._checkpoint_to_report_index
        tune_path = tune_checkpoint_path.rstrip("/")
        if not all(r.checkpoint in order for r in results):
            # Ray < 2.54, a snapshot without ray_tt_ext's entry (a run from before
            # it): without a score, Ray's list is in the order the run recorded it.
            if manager._checkpoint_config.checkpoint_score_attribute is None:
                for position, result in enumerate(results):
                    dict.__setitem__(order, result.checkpoint, position)
                self._last_index = len(results)
            else:  # in the score's order: only its latest is known to be the last
                latest = manager.latest_checkpoint_result
                if latest is not None and _path(latest.checkpoint) != tune_path:
                    self._last_index += 1
                    self._pending.append(
                        (self._last_index, dict(latest.metrics), latest.checkpoint)
                    )
                return
        recorded = sorted(results, key=lambda r: order[r.checkpoint])
        paths = [_path(r.checkpoint) for r in recorded]
        if tune_path in paths:
            newer = recorded[paths.index(tune_path) + 1 :]
        elif tune_path:  # Tune's is one the run dropped since: its latest only
            newer = recorded[-1:]
        else:
            newer = recorded
        for result in newer:
            index = order[result.checkpoint] + 1  # the report index it was recorded at
            self._pending.append((index, dict(result.metrics), result.checkpoint))

    def _number_reports_across_groups(self) -> None:
        """Ray < 2.54 (``RUN_WIDE_REPORT_INDEX`` off), whose worker groups number
        their reports from 1 each and whose checkpoint manager's snapshot keeps
        no report indices. Runs in the controller's event loop, once Ray's
        checkpoint manager restored the run's snapshot.

        Ray's ``CheckpointManager._checkpoint_to_report_index`` (its ties in a
        score's order, and :meth:`_replay`'s order) becomes the run's
        (:class:`_RunWideIndices`: a group's numbers count on from the run's
        last report, as Ray 2.54+ number them), and extends
        ``CheckpointManager._save_state`` (when Ray saves the snapshot, with each
        checkpoint it records) to add each listed checkpoint's index under
        :data:`_REPORT_ORDER_KEY` (Ray's own reading ignores it), read back
        here at a restore."""
        manager = self._checkpoint_manager
        indices = _RunWideIndices(self, manager._checkpoint_to_report_index)
        manager._checkpoint_to_report_index = indices
        storage = manager._storage_context
        saved: dict[str, int] = {}
        try:
            with storage.storage_filesystem.open_input_stream(
                storage.checkpoint_manager_snapshot_path
            ) as f:
                saved = json.loads(f.read()).get(_REPORT_ORDER_KEY) or {}
        except Exception:  # no snapshot (a new run), or one without the entry
            logger.debug("No report indices in the run's snapshot", exc_info=True)
        restored = list(manager._checkpoint_results)
        if manager.latest_checkpoint_result is not None:
            restored.append(manager.latest_checkpoint_result)
        for result in restored:
            if _path(result.checkpoint) in saved:
                dict.__setitem__(
                    indices, result.checkpoint, int(saved[_path(result.checkpoint)])
                )
        self._last_index = max(indices.values(), default=-1) + 1
        rays = manager._save_state

        def save_state() -> str:
            state = json.loads(rays())
            listed = {_path(r.checkpoint) for r in manager._checkpoint_results}
            state[_REPORT_ORDER_KEY] = {
                _path(c): i for c, i in indices.items() if _path(c) in listed
            }
            return json.dumps(state)

        manager._save_state = save_state

    async def _poll_workers(self) -> Any:
        """Overrides Ray Train V2's ``TrainController._poll_workers``; runs in the
        controller's event loop. As Ray's (at most one poll per health-check interval),
        except that the wait ends when a worker reports (:meth:`commit_report`)
        or its training function ends (:meth:`training_ended`): then the
        controller polls at once, and quickly until the group is done."""
        interval = self._health_check_interval_s
        if self._quick_polls > 0:
            self._quick_polls -= 1
            interval = min(interval, _FINISHING_POLL_S)
        remaining = interval - (time.monotonic() - self._latest_poll_time)
        if remaining > 0 and not self._woken.is_set():
            try:
                await asyncio.wait_for(self._woken.wait(), remaining)
            except asyncio.TimeoutError:
                pass
            if self.get_state().is_terminal():  # aborted meanwhile (abort)
                self._aborting = True
                raise asyncio.CancelledError()
        self._woken.clear()
        status = self._worker_group.poll_status(timeout=self._health_check_interval_s)
        self._latest_poll_time = time.monotonic()
        return status

    def _start_worker_group(self, *args: Any, **kwargs: Any) -> Any:
        """Extends Ray Train V2's ``TrainController._start_worker_group``; runs on the
        controller's event loop. On Ray < 2.54 (``RUN_WIDE_REPORT_INDEX`` off)
        a new worker group numbers its reports from 1 again, and Ray's
        checkpoint manager with it: the group's numbers count on from the
        run's last report (:meth:`commit_report`, :class:`TuneReportBridge`),
        so that a worker's ``report()`` never returns before Tune took its
        report. Ray 2.54+ numbers reports across groups itself."""
        if not _V2.RUN_WIDE_REPORT_INDEX:
            self._index_base = self._last_index
        return super()._start_worker_group(*args, **kwargs)

    def run_report_index(self, group_report_index: int) -> int:
        """The run's number of the current worker group's report
        ``group_report_index`` (the same on Ray 2.54+; see
        :meth:`_start_worker_group`). Controller's event loop."""
        return self._index_base + group_report_index

    def new_barrier(self, *args: Any, **kwargs: Any) -> ControllerBarrier:
        """A new worker group's barrier, kept in this controller: Ray's
        ``SynchronizationActor`` class as a plain object, built with the
        arguments Ray's ``WorkerGroup`` gives the actor. Runs in the controller's
        event loop, when Ray's ``WorkerGroup._start_worker_group`` would start it."""
        generation = next(_BARRIER_GENERATIONS)
        self._barriers[generation] = _V2.SynchronizationBarrier(*args, **kwargs)
        handle = ray.get_runtime_context().current_actor
        return ControllerBarrier(handle, generation)

    async def barrier_call(
        self, generation: int, method: str, /, *args: Any, **kwargs: Any
    ) -> Any:
        """``ControllerBarrier.<method>.remote(...)``: that method of Ray's
        ``SynchronizationActor`` on the barrier ``generation`` (the workers'
        ``broadcast_from_rank_zero``; the worker group's ``reset`` and
        ``set_required_ranks``). Runs on the barriers' event loop (trial actor). A call of a closed barrier's group raises
        ``RuntimeError``, as a call of Ray's killed actor raises
        (``report()`` raises it, where Ray's ``SynchronizationBarrierResetError``
        would let it go on without the report)."""
        if method.startswith("_"):
            raise AttributeError(
                f"A worker group's barrier has no public method {method!r}."
            )
        barrier = self._barriers.get(generation)
        if barrier is None:
            raise RuntimeError(
                f"The barrier of worker group {generation} of this run was closed: "
                "the group was shut down."
            )
        result = getattr(barrier, method)(*args, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result

    async def close_barrier(self, generation: int) -> None:
        """Release the workers waiting at the barrier ``generation`` (Ray's
        ``reset``: they raise ``SynchronizationBarrierResetError``) and refuse its
        later calls. Runs on the barriers' event loop (trial actor)."""
        barrier = self._barriers.pop(generation, None)
        if barrier is not None:
            await barrier.reset()

    def close_barrier_soon(self, generation: int) -> None:
        """Close the barrier ``generation`` on the barriers' event loop
        (:meth:`close_barrier`); runs on the controller's event loop, where Ray's
        worker group shuts down (it killed Ray's actor there)."""
        ControllerHost.of_this_process().barrier_loop.submit(self.close_barrier, generation)

    async def commit_report(self, report_index: int) -> None:
        """A worker's report ``report_index`` is in its result queue: poll now, and
        return once the run recorded it (Ray's checkpoint manager: its snapshot
        is in storage) and Tune took it (:meth:`report_taken`); raise if the
        worker group is shut down or the run ends first (its workers are being
        ended: a ``report()`` never returns unless Tune took it). Called by every
        worker after each ``ray.train.report`` (see ``_train_v2.PolicyTrainFn``),
        whose ``report()`` returns only then; runs on the controller's event
        loop (trial actor)."""
        self._woken.set()
        worker_group = self._worker_group
        report_index = self.run_report_index(report_index)
        async with self._handed_over:
            await self._handed_over.wait_for(
                lambda: (
                    self._taken_index >= report_index
                    or self._worker_group is not worker_group
                    or self._ended
                )
            )
            if self._taken_index < report_index:
                raise RuntimeError(
                    f"Report {report_index} of this run was not taken by Tune: its "
                    "worker group was shut down or the run ended first. The run "
                    "resumes from the last report Tune took, or a later one it recorded."
                )

    def training_ended(self) -> None:
        """A worker's training function returned or raised: poll now, and quickly
        until the group is done (runs on the controller's event loop)."""
        self._quick_polls = _FINISHING_POLLS
        self._woken.set()

    def hand_over(self, report: tuple) -> None:
        """Rank 0's consolidated report, after Ray's checkpoint manager recorded it
        (``TuneReportBridge.after_report``, in the controller's event loop)."""
        self._last_index = max(self._last_index, report[0])
        self._pending.append(report)
        self._notify_soon()

    def _notify_soon(self) -> None:
        """Wake the trial and the workers waiting on this controller (controller's
        event loop)."""
        task = asyncio.get_running_loop().create_task(self._notify())
        self._tasks.add(task)  # the event loop keeps only a weak reference
        task.add_done_callback(self._tasks.discard)

    async def _notify(self) -> None:
        async with self._handed_over:
            self._handed_over.notify_all()

    async def next_report(self) -> Optional[tuple]:
        """The next of rank 0's reports, ``(index, metrics, checkpoint)``, once there
        is one; ``None`` once the run ended and the trial took them all. Called by
        the trial (``_TrialRun.reports``); runs on the controller's event loop (trial actor)."""
        async with self._handed_over:
            await self._handed_over.wait_for(lambda: self._pending or self._ended)
            if not self._pending:
                return None
            return self._pending.popleft()

    async def report_taken(self, index: int) -> None:
        """Tune took the report ``index`` (the trial's ``tune.report`` returned,
        which it does once Tune's driver has the result): the workers waiting
        for it go on (:meth:`commit_report`). Runs in the controller's event loop."""
        async with self._handed_over:
            self._taken_index = max(self._taken_index, index)
            self._handed_over.notify_all()

    async def run(self) -> None:
        """Extends Ray Train V2's ``TrainController.run``; runs on the controller's
        event loop. When the run ends, the trial's :meth:`next_report` returns
        ``None`` after the last report, and no worker waits any more. A run
        :meth:`abort` stopped ends here, in Ray's ``AbortedState``."""
        self._run_task = asyncio.current_task()
        try:
            await super().run()
        except asyncio.CancelledError:
            if not self._aborting:
                raise
        finally:
            self._run_task = None
            self._ended = True
            await self._notify()

    async def abort(self) -> None:
        """Overrides Ray Train V2's ``TrainController.abort``; runs on the controller's
        event loop, in the trial actor. As Ray's (the callbacks'
        ``before_controller_abort``, the worker group's abort, then
        ``AbortedState``), except its last step: Ray's ends the controller's
        actor (``ray.actor.exit_actor``), which here is the Tune trial's. The
        run's loop is cancelled instead, and :meth:`run` returns."""
        if self.get_state().is_terminal():
            return
        self._before_abort()
        self._aborting = True
        workers = _workers_of(self._worker_group)
        try:
            if self._worker_group:
                self._worker_group.abort()
        except Exception as e:
            logger.exception("Error aborting worker group: %s", e)
        self._end_workers_left(workers)
        try:
            self._set_state(_V2.AbortedState())
        except Exception as e:
            logger.exception("Error setting the aborted state: %s", e)
        task = getattr(self, "_run_task", None)
        if task is not None:
            task.cancel()

    def _before_abort(self) -> None:
        """The controller callbacks' ``before_controller_abort``, errors logged (Ray
        2.56+'s ``invoke_best_effort``; Ray 2.55 calls the hook in a loop, older
        releases have none). Controller's event loop."""
        manager = getattr(self, "_controller_callback_manager", None)
        if manager is not None and hasattr(manager, "invoke_best_effort"):
            manager.invoke_best_effort("before_controller_abort")
            return
        for callback in getattr(self, "_controller_callbacks", []):
            hook = getattr(callback, "before_controller_abort", None)
            if callable(hook):
                try:
                    hook()
                except Exception:
                    logger.exception("before_controller_abort of %r failed", callback)

    def discard(self) -> None:
        """Kill the workers this controller kept from its last run, if any (it
        will not run again: the trial actor stops or takes another trial
        whose run does not take them). Runs on the controller's event loop."""
        kept = self.take_kept_workers()
        if kept is not None:
            kept.kill()


class TuneReportBridge(_V2.UserCallback):
    """Hands rank 0's metrics and each checkpoint to the trial, in order.

    A Ray Train V2 ``UserCallback``; ``after_report`` runs in the controller's
    event loop, after Ray's checkpoint manager recorded the report. The trial
    takes each with ``TrialController.next_report`` and reports it to Tune;
    the workers' ``report()`` waits until Tune's driver took it, so Train never
    runs ahead of Tune (as with Ray's ``TuneReportCallback``).
    """

    def after_report(self, run_context: Any, metrics: list, checkpoint: Any) -> None:
        controller = _THIS_PROCESS["controller"]
        index = controller.run_report_index(
            controller._checkpoint_manager._current_report_index
        )
        controller.hand_over((index, dict(metrics[0]), checkpoint))


def without_idle_dataset_manager(callback: Any) -> Any:
    """Ray's ``DatasetsCallback`` as :class:`_DatasetsCallback` (the same state, one
    method extended) where Ray starts a ``DatasetManager`` actor per worker
    group (Ray 2.56+); any other callback as it is (older releases split the
    datasets in the controller, without an actor). Runs in the trial actor, on
    the callbacks Ray's trainer builds for the controller."""
    if _V2.DATASET_MANAGER_PER_GROUP and type(callback) is _V2.DatasetsCallback:
        callback.__class__ = _DatasetsCallback
    return callback


class _EventLoopThread:
    """An asyncio event loop in a daemon thread of its own."""

    def __init__(self, name: str):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name=name, daemon=True
        )
        self._thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` on this loop (awaited if it is a coroutine
        function); a ``concurrent.futures.Future`` of its result."""

        async def call() -> Any:
            result = fn(*args, **kwargs)
            if inspect.isawaitable(result):
                result = await result
            return result

        return asyncio.run_coroutine_threadsafe(call(), self.loop)


class ControllerHost:
    """Runs a ``ray_tt_ext.v2.Tuner`` trial's Train V2 controller in the trial
    actor's own process: one per process, made on first use.

    Ray runs each run's ``TrainController`` as an actor of its own: a Python
    process per trial that imports Ray Train, as many CPU seconds as the trial
    actor itself. Here :class:`TrialController` runs on an event loop in a
    thread of the trial actor (``controller_loop``), with its worker groups'
    barriers on a second one (``barrier_loop``): the controller's blocking
    calls (its polls, a group's start or shutdown, a ``ray.get`` on the
    barrier) never hold a barrier, nor a barrier the controller, as with Ray's
    actors. The workers call the run's controller on the handle Ray gives them
    (the trial actor's, ``ray.get_runtime_context().current_actor``); the trial
    actor, an async actor (``_v2_trial.V2Trial``), passes those calls here
    (:meth:`call_controller`, :meth:`call_barrier`).
    """

    _lock = threading.Lock()
    _instance: Optional[ControllerHost] = None

    def __init__(self) -> None:
        self.controller_loop = _EventLoopThread("ray_tt_ext-v2-controller")
        self.barrier_loop = _EventLoopThread("ray_tt_ext-v2-barriers")
        #: The controller whose run is this process's current one.
        self.controller: Optional[TrialController] = None

    @classmethod
    def of_this_process(cls) -> ControllerHost:
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    def new_controller(self, kwargs: dict) -> TrialController:
        """A new :class:`TrialController` (built on the controller's loop), now
        this process's (trial actor's fit thread)."""
        controller = self.controller_loop.submit(TrialController, **kwargs).result()
        self.controller = controller
        return controller

    def on_controller(
        self, controller: TrialController, method: str, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future:
        """``controller.<method>(*args, **kwargs)`` on the controller's loop (any
        thread of the trial actor); a future of its result."""
        return self.controller_loop.submit(getattr(controller, method), *args, **kwargs)

    async def call_controller(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """A worker's call of the run's controller (``commit_report``,
        ``training_ended``, Ray's ``get_all_reported_checkpoints``), made on the
        trial actor's event loop; runs on the controller's."""
        return await self._call(self.controller_loop, method, *args, **kwargs)

    async def call_barrier(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """A call of a worker group's barrier (``TrialController.barrier_call`` or
        ``close_barrier``), made on the trial actor's event loop; runs on the
        barriers' loop."""
        return await self._call(self.barrier_loop, method, *args, **kwargs)

    async def _call(
        self, on: _EventLoopThread, method: str, *args: Any, **kwargs: Any
    ) -> Any:
        controller = self.controller
        if controller is None:
            raise RuntimeError(
                f"This Tune trial runs no Train V2 run: a worker of an earlier run "
                f"called its controller's {method!r}."
            )
        future = on.submit(getattr(controller, method), *args, **kwargs)
        return await asyncio.wrap_future(future)
