"""A ``ray_tt_ext.v2.Tuner(trainer)`` trial's worker groups, in the run's controller.

Everything here runs in the Tune trial actor's process, on the run's
controller's event loop (``_controller.ControllerHost``), where Ray Train V2's
``WorkerGroup`` and its callbacks run:

* :class:`TrialWorkerGroup`: Ray's ``WorkerGroup`` whose workers take the
  trial's bundles (Ray 2.54+: ``_create_placement_group``; Ray 2.51 .. 2.53:
  :func:`_keep_trial_placement_groups_in_train`), and that can hand its
  workers over at shutdown (:class:`_KeepingState`) for the next run of a
  trial actor Tune reuses (:class:`_KeptWorkers`, with
  :class:`_TorchSetupKeepingItsGroup` for a ``TorchConfig`` run's gloo group);
* the worker groups' barrier (Ray's ``SynchronizationActor``) kept in the
  controller (Ray 2.56+: :func:`_keep_barriers_in_the_controller`), Ray's
  drained-node watcher as a thread (Ray 2.57+: :class:`_WatcherInTheController`)
  and no ``DatasetManager`` actor for a trainer without datasets (Ray 2.56+:
  :func:`without_idle_dataset_manager`);
* :func:`_this_processes_controller`: the run's controller of this process,
  which ``_controller.TrialController`` registers.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Callable
from typing import Any, Optional

import pyarrow.fs
import ray

from ray_tt_ext._compat import train_v2_bridge as _V2
from ray_tt_ext.v2._train import (
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


def _restore_without_deleted(manager: Any) -> None:
    """Patches Ray Train V2's ``CheckpointManager._maybe_load_state_from_storage`` in
    the controller's event loop of a ``ray_tt_ext.v2.Tuner`` trial (installed by
    :func:`tune_owns_checkpoints`; it calls Ray's).

    Tune deletes a trial's checkpoints that its retention drops, among them
    ones the run's snapshot still lists: the sweep's retention
    (``ray_tt_ext.CheckpointConfig(sweep_num_to_keep=...)``) deletes a running
    trial's older checkpoints, and, once PBT gave the trial another trial's
    checkpoint, its own latest. When the trial is retried, exploited or
    restored, Ray's ``_assert_checkpoints_exist`` would refuse the run (from Ray
    2.54; before, its run would name a deleted folder as its latest); here the
    deleted ones, the latest among them, are dropped from the restored list (the
    run's latest becomes the newest left by report index). What the trial
    resumes from is Tune's checkpoint of it, which is never deleted while the
    trial may run (``v2._trial._resume_from``).
    """
    manager._assert_checkpoints_exist = lambda: None
    try:
        _RAYS_RESTORE[0](manager)
    finally:
        del manager._assert_checkpoints_exist

    def missing(checkpoint: Any) -> bool:
        info = checkpoint.filesystem.get_file_info(checkpoint.path)
        return info.type == pyarrow.fs.FileType.NotFound

    # By path: before Ray 2.54 the latest is an object of its own, not the list's.
    gone = {r.checkpoint.path for r in manager._checkpoint_results if missing(r.checkpoint)}
    latest = manager._latest_checkpoint_result
    if latest is not None and missing(latest.checkpoint):
        gone.add(latest.checkpoint.path)
    if not gone:
        return
    left = [r for r in manager._checkpoint_results if r.checkpoint.path not in gone]
    order = manager._checkpoint_to_report_index
    for result in manager._checkpoint_results:
        if result.checkpoint.path in gone:
            order.pop(result.checkpoint, None)
            getattr(manager, "_pending_training_results", {}).pop(result.checkpoint, None)
    manager._checkpoint_results = left
    if latest is not None and latest.checkpoint.path in gone:
        # The newest by report index; without indices (a run from before Ray
        # 2.54 without ray_tt_ext's entry) none is known to be: no latest.
        indexed = [(order[r.checkpoint], r) for r in left if r.checkpoint in order]
        newest = max(indexed, key=lambda pair: pair[0], default=(0, None))[1]
        manager._latest_checkpoint_result = newest
    logger.info("The run's snapshot listed %d checkpoint(s) Tune deleted", len(gone))


#: Ray's ``CheckpointManager._maybe_load_state_from_storage`` (set at the first install).
_RAYS_RESTORE: list[Callable[[Any], None]] = []


def tune_owns_checkpoints() -> None:
    """Tune deletes the run's checkpoints (:func:`_tune_deletes` patches Ray Train
    V2's ``checkpoint_manager.delete_fs_path``), and a run restores without those
    the sweep deleted (:func:`_restore_without_deleted` patches
    ``CheckpointManager._maybe_load_state_from_storage``). The trial actor, at
    each run's controller."""
    _V2.checkpoint_manager_module.delete_fs_path = _tune_deletes
    manager_cls = _V2.checkpoint_manager_module.CheckpointManager
    if not _RAYS_RESTORE:
        _RAYS_RESTORE.append(manager_cls._maybe_load_state_from_storage)
        manager_cls._maybe_load_state_from_storage = _restore_without_deleted


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


def _this_processes_controller() -> Optional[Any]:
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
        none (:class:`~ray_tt_ext.v2._train.NoDatasetShards`)."""
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


def without_idle_dataset_manager(callback: Any) -> Any:
    """Ray's ``DatasetsCallback`` as :class:`_DatasetsCallback` (the same state, one
    method extended) where Ray starts a ``DatasetManager`` actor per worker
    group (Ray 2.56+); any other callback as it is (older releases split the
    datasets in the controller, without an actor). Runs in the trial actor, on
    the callbacks Ray's trainer builds for the controller."""
    if _V2.DATASET_MANAGER_PER_GROUP and type(callback) is _V2.DatasetsCallback:
        callback.__class__ = _DatasetsCallback
    return callback


def _workers_of(group: Any) -> list:
    """A worker group's workers, if it started (controller's event loop)."""
    return group.get_workers() if group is not None and group.has_started() else []


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
