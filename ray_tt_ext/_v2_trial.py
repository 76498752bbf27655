"""One Tune trial = one Train V2 run: the trial side of ``ray_tt_ext.v2.Tuner(trainer)``.

Where each piece runs:

* :func:`make_trainable_cls` (driver): the small Tune trainable class that
  stands for a V2 trainer: the trainer's class, its constructor arguments in
  the object store (``_params``), its base ``ScalingConfig``.
* :class:`V2Trial` (the Tune trial actor): builds the trainer from those
  arguments and the trial's hyperparameters (V1's meaning of ``param_space``:
  its keys are trainer arguments, ``train_loop_config`` and ``scaling_config``
  merged key by key), names the Train run after the trial (its folder *is*
  the trial folder, so a retry or a restore continues the run), runs
  ``fit()`` in a thread and reports each of rank 0's reports to Tune, with
  the Train checkpoint itself (nothing copied).
* :class:`TrialController` (the run's controller actor, in the trial's
  placement group): Ray's ``TrainController`` whose worker group starts in the
  trial's placement group, which Tune reserved from the trainer's
  ``ScalingConfig``; Tune removes it when the trial stops, and the workers
  with it. On Ray 2.60, the worker groups' barrier (Ray's
  ``SynchronizationActor``) and Ray's ``PreemptionWatcher``, an actor each per
  worker group in Ray's controller, run in it (Ray 2.55: Ray's barrier actor).
* :class:`TuneReportBridge` (a V2 ``UserCallback``, in the controller): hands
  rank 0's metrics and the checkpoint to the trial, in order, once the run
  recorded them; a worker's ``report()`` returns once Tune took its report
  (so nothing Tune was told can be lost, and Train never runs ahead of Tune).
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import dataclasses
import inspect
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any, Optional

import ray

from ray_tt_ext import _compat
from ray_tt_ext._compat import train_v2_bridge as _V2
from ray_tt_ext._naming import list_folders
from ray_tt_ext._params import ObjectStoreParams
from ray_tt_ext._train_v2 import ControllerBarrier, NoDatasetShards, PolicyTrainFn

logger = logging.getLogger("ray_tt_ext")


#: Trainer constructor parameter -> the attribute Ray's V2 trainers keep it in
#: (a framework's ``<name>_config``, e.g. ``torch_config``, ``xgboost_config``,
#: is its ``backend_config``).
_ATTRIBUTE_OF = {"dataset_config": "data_config"}
_OWN_CONFIGS = {"train_loop_config", "scaling_config", "run_config", "validation_config"}
#: Parameters that V2 trainers refuse (deprecated): never passed on.
_DEPRECATED = {"resume_from_checkpoint", "metadata"}


def trainer_parameters(trainer_cls: type) -> list[str]:
    """The keyword arguments ``trainer_cls``'s constructor takes (its ``param_space`` keys)."""
    params = inspect.signature(trainer_cls.__init__).parameters.values()
    return [
        p.name
        for p in params
        if p.name != "self"
        and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        and p.name not in _DEPRECATED
    ]


def trainer_kwargs(trainer: Any) -> dict[str, Any]:
    """The arguments that rebuild ``trainer`` (a V2 trainer, Ray's or ours), read
    back from the attributes its constructor set. Runs on the driver."""
    kwargs = {}
    for name in trainer_parameters(type(trainer)):
        attribute = _ATTRIBUTE_OF.get(name, name)
        if not hasattr(trainer, attribute) and name.endswith("_config"):
            if name not in _OWN_CONFIGS:
                attribute = "backend_config"  # torch_config, xgboost_config, ...
        if hasattr(trainer, attribute):
            kwargs[name] = getattr(trainer, attribute)
    if getattr(trainer, "validation_config", None) is not None:
        raise ValueError(
            f"{type(trainer).__name__}(validation_config=...) is not supported by "
            "ray_tt_ext.v2.Tuner: Ray Train keeps checkpoints whose validation is "
            "pending, which Tune's retention would delete. Fix: validate inside the "
            "training loop and report the metric, or fit the trainer outside a Tuner."
        )
    return kwargs


def check_param_space(trainer_cls: type, param_space: Optional[dict[str, Any]]) -> None:
    """Every ``param_space`` key must be a trainer argument (driver, before anything runs)."""
    allowed = trainer_parameters(trainer_cls)
    for key in param_space or {}:
        if key not in allowed:
            raise ValueError(
                f"param_space key {key!r} is not an argument of {trainer_cls.__name__}: "
                "with a trainer, param_space's keys are trainer arguments (V1's meaning). "
                f"Its arguments: {allowed}. Fix: put hyperparameters under "
                "'train_loop_config' (merged key by key into the trainer's), e.g. "
                f"param_space={{'train_loop_config': {{{key!r}: tune.grid_search([...])}}}}."
            )
    for key in ("train_loop_config", "scaling_config"):
        value = (param_space or {}).get(key)
        if value is not None and (not isinstance(value, dict) or "grid_search" in value):
            raise ValueError(
                f"param_space[{key!r}] must be a dict of the fields to tune (merged "
                f"key by key into the trainer's {key}), got {_described(value)}. Fix: "
                f"tune each field, e.g. {{{key!r}: {{'num_workers': "
                "tune.grid_search([1, 2])}}."
            )
    fields = {f.name for f in dataclasses.fields(_V2.ScalingConfig)}
    for field in (param_space or {}).get("scaling_config") or {}:
        if field not in fields:
            raise ValueError(
                f"param_space['scaling_config'] key {field!r} is not a field of "
                f"ray.train.ScalingConfig. Its fields: {sorted(fields)}."
            )


def _described(value: Any) -> str:
    if isinstance(value, dict) and "grid_search" in value:
        return "a grid_search over whole configs"
    return type(value).__name__


def merged_kwargs(base: dict[str, Any], config: dict[str, Any], trainer_cls: type) -> dict:
    """The trainer's arguments with the trial's hyperparameters (trial actor, driver)."""
    check_param_space(trainer_cls, config)
    merged = dict(base)
    for key, value in config.items():
        if key == "train_loop_config":
            merged[key] = _compat.deep_update(
                dict(base.get(key) or {}), value, new_keys_allowed=True
            )
        elif key == "scaling_config":
            scaling = base.get(key) or _V2.ScalingConfig()
            merged[key] = dataclasses.replace(scaling, **value)
        else:
            merged[key] = value
    return merged


def resource_request(scaling_config: Any) -> Any:
    """What a trial reserves: one bundle per worker, the trial actor and the run's
    controller take none (nothing waits holding a CPU). Driver."""
    num_workers = scaling_config.num_workers
    if not isinstance(num_workers, int) or num_workers < 1:
        raise ValueError(
            f"ScalingConfig(num_workers={num_workers!r}) cannot be reserved by a Tune "
            "trial of ray_tt_ext.v2.Tuner (an elastic range, or Ray Train's local mode). "
            "Fix: a fixed num_workers >= 1 (tune it with "
            "param_space={'scaling_config': {'num_workers': ...}})."
        )
    if getattr(scaling_config, "use_tpu", False) or getattr(
        scaling_config, "label_selector", None
    ):
        raise ValueError(
            "ScalingConfig(use_tpu=..., label_selector=...) is not supported by "
            "ray_tt_ext.v2.Tuner(trainer): a trial reserves its workers' bundles itself, "
            "without TPU slices or label selectors. Fix: drop them, or tune a function "
            "that fits the trainer (Ray's pattern) under ray_tt_ext.v2.Tuner."
        )
    bundle = dict(scaling_config._resources_per_worker_not_none)
    return _compat.PlacementGroupFactory(
        [{}] + [bundle] * scaling_config.num_workers,
        strategy=scaling_config.placement_strategy,
    )


# ---------------------------------------------------------------------------
# The run's controller (an actor in the trial's placement group)
# ---------------------------------------------------------------------------


class _TunePlacementGroupHandle(_V2.DefaultPlacementGroupHandle):
    """The trial's placement group as the worker group's: Tune owns it, so
    shutting the worker group down leaves it (Tune removes it with the trial)."""

    def shutdown(self) -> None:
        """Overrides Ray Train V2's ``DefaultPlacementGroupHandle.shutdown``; runs in
        the controller actor. Tune removes the trial's placement group itself."""


class TrialWorkerGroup(_V2.WorkerGroup):
    """Ray Train V2's ``WorkerGroup`` whose workers take the trial's bundles."""

    #: The trial's placement group (set per controller, see TrialController).
    trial_placement_group: Any = None
    #: The Ray Train variables this controller's process already had (see
    #: TrialController): workers that would inherit the same need no runtime env.
    inherited_env: dict = {}

    def _create_placement_group(self, scaling_config: Any, worker_group_context: Any):
        """Overrides Ray Train V2's ``WorkerGroup._create_placement_group``; runs in
        the controller actor. The trial's placement group when its bundles fit
        the worker group (one per worker); else Ray's own (a resized group)."""
        pg = self.trial_placement_group
        if pg is not None and len(pg.bundle_specs) == worker_group_context.num_workers:
            return _TunePlacementGroupHandle(pg)
        return super()._create_placement_group(scaling_config, worker_group_context)

    def _get_worker_runtime_env(self, custom_runtime_env: Any) -> Any:
        """Extends Ray Train V2's ``WorkerGroup._get_worker_runtime_env``; runs in the
        controller actor. Ray sets ``env_vars`` on every worker's runtime env (the
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
    """Patches Ray Train V2's ``checkpoint_manager.delete_fs_path`` in the controller
    actor of a ``ray_tt_ext.v2.Tuner`` trial (a process of that run alone).

    The run's checkpoint manager applies the trial's retention (the same
    policy, the same algorithm: both are Ray's ``_CheckpointManager``) and drops
    a checkpoint from its list exactly when Tune's will; Tune, which registers
    each report after Train did, deletes the folder. So no folder is deleted
    that either still lists, and none is deleted twice.
    """
    logger.debug("Checkpoint %s left for Tune to delete", fs_path)


#: The TrialController of this process (a controller actor's process runs one).
_THIS_PROCESS: dict[str, Any] = {}
#: The controller actor's concurrency group for its worker groups' barriers:
#: a thread and event loop of its own, so a barrier never waits behind the
#: controller's blocking calls (its polls, a group's start or shutdown), nor the
#: controller behind a barrier, as with Ray's actor of its own.
BARRIER_GROUP = "ray_tt_ext_barrier"


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
    ``worker_group`` module of a trial's controller actor: in a
    :class:`TrialController`'s actor, ``.options(...).remote(...)`` makes the
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
    group's ``SynchronizationActor``) in a trial's controller actor: a
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
    controller actor of a ``ray_tt_ext.v2.Tuner`` trial (its polling thread), not
    as an actor of its own per worker group: a Python process fewer per trial,
    the same drain polls and the same ``mark_preempt`` calls on the workers."""

    def after_worker_group_start(self, worker_group: Any) -> None:
        """Overrides Ray Train V2's ``PreemptionCallback.after_worker_group_start``;
        runs in the controller actor. Ray's watcher class, as a plain object."""
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
        of the watcher actor); runs in the controller actor: stops the
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
        runs in the controller actor. With datasets, Ray's (its
        ``DatasetManager`` actor splits them); without, a provider that has
        none (:class:`~ray_tt_ext._train_v2.NoDatasetShards`)."""
        if self._datasets:
            return super().before_init_train_context(workers)
        return {"dataset_shard_provider": [NoDatasetShards()] * len(workers)}


def _keep_barriers_in_the_controller() -> None:
    """Patches Ray Train V2's ``worker_group.SynchronizationActor`` and
    ``state._shutdown_sync_actor`` in this process (the controller actor of a
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


#: Between polls of a worker group whose training function has ended (seconds).
_FINISHING_POLL_S = 0.05
#: How many such quick polls before the controller's usual interval again.
_FINISHING_POLLS = 60


class TrialController(_V2.TrainController):
    """Ray Train V2's ``TrainController`` for one Tune trial (the controller actor).

    Besides Ray's: the workers' reports reach it when they are made, not at
    its next poll, and a report returns on a worker only once the run
    recorded it and Tune took it (:meth:`commit_report`); the trial takes
    rank 0's reports with :meth:`next_report` (no queue actor between them)
    and says when Tune took each (:meth:`report_taken`). On Ray 2.60 its worker
    groups' barriers (Ray's ``SynchronizationActor``, an actor per group) are
    kept here, in a concurrency group of their own (:meth:`barrier_call`;
    declared on Ray 2.55 too, where it stays unused), and Ray's
    ``PreemptionWatcher`` runs here as a thread (:class:`_WatcherInTheController`:
    its ``ray.nodes()`` call at a group's start runs on the controller's event
    loop; it is not restarted on its own, it lives and dies with the controller).
    """

    #: ``ray.remote`` options of the controller actor (see ``_TrialRun.run_controller``).
    RAY_REMOTE_OPTIONS: dict[str, Any] = {"concurrency_groups": {BARRIER_GROUP: 1000}}

    def __init__(
        self,
        *,
        trial_placement_group: Any,
        env_vars: Optional[dict] = None,
        replay_after: Optional[str] = None,
        **kwargs: Any,
    ):
        """Extends Ray Train V2's ``TrainController.__init__``; runs in the controller
        actor. Its worker group starts in ``trial_placement_group``; Tune deletes
        the checkpoints retention drops (:func:`_tune_deletes`); ``env_vars``,
        what Ray's ``_initialize_and_run_controller`` would give the actor as a
        runtime env, are set in this process (the actor then starts on one of
        Ray's started workers instead of a new process); ``replay_after``: see
        :meth:`_replay`."""
        inherited = {k: os.environ[k] for k in env_vars or {} if k in os.environ}
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
        self._ended = False
        self._quick_polls = 0
        self._barriers: dict[int, Any] = {}  # generation -> its worker group's barrier
        self._barrier_generation = 0
        self._actor_id = ray.get_runtime_context().get_actor_id()
        _THIS_PROCESS["controller"] = self  # the actor's process serves this run alone
        _keep_barriers_in_the_controller()
        super().__init__(**kwargs)
        if _V2.PreemptionCallback is not None:  # the watcher in this actor too
            self._worker_group_callbacks_to_propagate = [
                _WatcherInTheController()
                if type(callback) is _V2.PreemptionCallback
                else callback
                for callback in self._worker_group_callbacks_to_propagate
            ]
        if replay_after is not None:
            self._replay(replay_after)

    def _replay(self, tune_checkpoint_path: str) -> None:
        """Hand the trial first the checkpoints the run recorded after Tune's own
        latest (``""``: Tune has none), in the order the run recorded them.

        Runs in the controller actor, once Ray's checkpoint manager restored the
        run's snapshot. A report that returned on the workers just before the
        trial actor, its controller or the driver died reached the snapshot but
        not Tune: the run resumes from it, and Tune now records it too (its
        checkpoint, its metrics, its iteration), so that Tune's list and
        retention match the run's.
        """
        manager = self._checkpoint_manager
        order = manager._checkpoint_to_report_index
        recorded = sorted(manager._checkpoint_results, key=lambda r: order[r.checkpoint])
        paths = [r.checkpoint.path.rstrip("/") for r in recorded]
        tune_path = tune_checkpoint_path.rstrip("/")
        if tune_path in paths:
            newer = recorded[paths.index(tune_path) + 1 :]
        elif tune_path:  # Tune's is one the run dropped since: its latest only
            newer = recorded[-1:]
        else:
            newer = recorded
        for result in newer:
            index = order[result.checkpoint] + 1  # the report index it was recorded at
            self._pending.append((index, dict(result.metrics), result.checkpoint))

    async def _poll_workers(self) -> Any:
        """Overrides Ray Train V2's ``TrainController._poll_workers``; runs in the
        controller actor. As Ray's (at most one poll per health-check interval),
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
            if self.get_state().is_terminal():
                ray.actor.exit_actor()
        self._woken.clear()
        status = self._worker_group.poll_status(timeout=self._health_check_interval_s)
        self._latest_poll_time = time.monotonic()
        return status

    def new_barrier(self, *args: Any, **kwargs: Any) -> ControllerBarrier:
        """A new worker group's barrier, kept in this controller: Ray's
        ``SynchronizationActor`` class as a plain object, built with the
        arguments Ray's ``WorkerGroup`` gives the actor. Runs in the controller
        actor, when Ray's ``WorkerGroup._start_worker_group`` would start it."""
        self._barrier_generation += 1
        self._barriers[self._barrier_generation] = _V2.SynchronizationBarrier(
            *args, **kwargs
        )
        handle = ray.get_runtime_context().current_actor
        return ControllerBarrier(handle, self._barrier_generation)

    @ray.method(concurrency_group=BARRIER_GROUP)
    async def barrier_call(
        self, generation: int, method: str, /, *args: Any, **kwargs: Any
    ) -> Any:
        """``ControllerBarrier.<method>.remote(...)``: that method of Ray's
        ``SynchronizationActor`` on the barrier ``generation`` (the workers'
        ``broadcast_from_rank_zero``; the worker group's ``reset`` and
        ``set_required_ranks``). Runs in the controller actor, in the barriers'
        concurrency group. A call of a closed barrier's group raises
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

    @ray.method(concurrency_group=BARRIER_GROUP)
    async def close_barrier(self, generation: int) -> None:
        """Release the workers waiting at the barrier ``generation`` (Ray's
        ``reset``: they raise ``SynchronizationBarrierResetError``) and refuse its
        later calls. Runs in the controller actor, in the barriers' group."""
        barrier = self._barriers.pop(generation, None)
        if barrier is not None:
            await barrier.reset()

    def close_barrier_soon(self, generation: int) -> None:
        """Close the barrier ``generation`` once its concurrency group runs
        (:meth:`close_barrier`); runs in the controller actor, where Ray's
        worker group shuts down (it killed Ray's actor there)."""
        ray.get_runtime_context().current_actor.close_barrier.remote(generation)

    async def commit_report(self, report_index: int) -> None:
        """A worker's report ``report_index`` is in its result queue: poll now, and
        return once the run recorded it (Ray's checkpoint manager: its snapshot
        is in storage) and Tune took it (:meth:`report_taken`). Called by every worker after each
        ``ray.train.report`` (see ``_train_v2.PolicyTrainFn``), whose ``report()``
        returns only then; runs in the controller actor."""
        self._woken.set()
        worker_group = self._worker_group
        async with self._handed_over:
            await self._handed_over.wait_for(
                lambda: (
                    self._taken_index >= report_index
                    or self._worker_group is not worker_group
                    or self._ended
                )
            )

    def training_ended(self) -> None:
        """A worker's training function returned or raised: poll now, and quickly
        until the group is done (runs in the controller actor)."""
        self._quick_polls = _FINISHING_POLLS
        self._woken.set()

    def hand_over(self, report: tuple) -> None:
        """Rank 0's consolidated report, after Ray's checkpoint manager recorded it
        (``TuneReportBridge.after_report``, in the controller actor)."""
        self._pending.append(report)
        task = asyncio.get_running_loop().create_task(self._notify())
        self._tasks.add(task)  # the event loop keeps only a weak reference
        task.add_done_callback(self._tasks.discard)

    async def _notify(self) -> None:
        async with self._handed_over:
            self._handed_over.notify_all()

    async def next_report(self) -> Optional[tuple]:
        """The next of rank 0's reports, ``(index, metrics, checkpoint)``, once there
        is one; ``None`` once the run ended and the trial took them all. Called by
        the trial (``_TrialRun.reports``); runs in the controller actor."""
        async with self._handed_over:
            await self._handed_over.wait_for(lambda: self._pending or self._ended)
            if not self._pending:
                return None
            return self._pending.popleft()

    async def report_taken(self, index: int) -> None:
        """Tune took the report ``index`` (the trial's ``tune.report`` returned,
        which it does once Tune's driver has the result): the workers waiting
        for it go on (:meth:`commit_report`). Runs in the controller actor."""
        async with self._handed_over:
            self._taken_index = max(self._taken_index, index)
            self._handed_over.notify_all()

    async def run(self) -> None:
        """Extends Ray Train V2's ``TrainController.run``; runs in the controller
        actor. When the run ends, the trial's :meth:`next_report` returns
        ``None`` after the last report, and no worker waits any more."""
        try:
            await super().run()
        finally:
            self._ended = True
            await self._notify()


class TuneReportBridge(_V2.UserCallback):
    """Hands rank 0's metrics and each checkpoint to the trial, in order.

    A Ray Train V2 ``UserCallback``; ``after_report`` runs in the controller
    actor, after Ray's checkpoint manager recorded the report. The trial
    takes each with ``TrialController.next_report`` and reports it to Tune;
    the workers' ``report()`` waits until Tune's driver took it, so Train never
    runs ahead of Tune (as with Ray's ``TuneReportCallback``).
    """

    def after_report(self, run_context: Any, metrics: list, checkpoint: Any) -> None:
        controller = _THIS_PROCESS["controller"]
        index = controller._checkpoint_manager._current_report_index
        controller.hand_over((index, dict(metrics[0]), checkpoint))


#: How long a stopped trial waits for Ray's abort of its run before killing the
#: controller (its workers die with it; a placement group of the run's own stays).
_ABORT_PATIENCE_S = 10.0


def _user_error(error: BaseException) -> BaseException:
    """The training loop's own error inside Ray Train V2's ``WorkerGroupError``
    (rank 0's first), so that ``Result.error`` names its type and message."""
    failures = getattr(error, "worker_failures", None)
    if isinstance(failures, dict) and failures:
        return failures[min(failures)]
    return error


def _without_idle_dataset_manager(callback: Any) -> Any:
    """Ray's ``DatasetsCallback`` as :class:`_DatasetsCallback` (the same state, one
    method extended); any other callback as it is. Trial actor."""
    if type(callback) is _V2.DatasetsCallback:
        callback.__class__ = _DatasetsCallback
    return callback


class _TrialRun:
    """One Train V2 run inside a trial actor: ``fit()`` in a thread of its own, its
    controller in the trial's placement group, rank 0's reports taken from the
    controller (``TrialController.next_report``) by the trial's training thread."""

    def __init__(self) -> None:
        self.controller: Any = None
        self.error: Optional[BaseException] = None
        self._thread: Optional[threading.Thread] = None
        self._aborted = False
        self._started = threading.Event()  # the controller exists, or fit() ended
        #: TrialController's ``replay_after`` (see ``_resume_from``).
        self.replay_after: Optional[str] = None

    def start(self, trainer: Any) -> None:
        """Run ``trainer.fit()`` with this trial's controller (trial actor)."""
        default_callbacks = trainer._create_default_callbacks
        trainer._create_default_callbacks = lambda: [
            # Tune owns the trial's placement group: nothing else removes it.
            _without_idle_dataset_manager(c)
            for c in default_callbacks()
            if not isinstance(c, _V2.PlacementGroupCleanerCallback)
        ]
        trainer._initialize_and_run_controller = self._run_controller
        self._thread = threading.Thread(
            target=self._fit, args=(trainer,), name="ray_tt_ext-v2-run", daemon=True
        )
        self._thread.start()

    def _fit(self, trainer: Any) -> None:
        try:
            trainer.fit()
        except BaseException as e:  # raised again in the trial's training thread
            self.error = e
        finally:
            self._started.set()

    def _run_controller(self, **controller_kwargs: Any) -> Any:
        """Replaces Ray Train V2's ``DataParallelTrainer._initialize_and_run_controller``
        for this trainer instance; runs in the trial actor. The controller is
        Ray's, its worker group in the trial's placement group; the Ray Train
        variables Ray gives it as a runtime env are set in its process."""
        placement_group = ray.util.get_current_placement_group()
        return self.run_controller(
            TrialController,
            dict(
                controller_kwargs,
                trial_placement_group=placement_group,
                env_vars=_V2.controller_env_vars(),
                replay_after=self.replay_after,
            ),
            rays_runtime_env=False,
        )

    def run_controller(
        self, controller_cls: type, controller_kwargs: dict, rays_runtime_env: bool = True
    ) -> Any:
        """Start the run's controller actor in the trial's placement group (if the
        trial has one) and wait for its result, as Ray's
        ``_initialize_and_run_controller`` does (trial actor), with Ray's runtime
        env for it (``rays_runtime_env``) or none."""
        placement_group = ray.util.get_current_placement_group()
        options: dict[str, Any] = {
            "num_cpus": 0,  # as Ray's controller; it holds nothing of the trial's
            "max_restarts": 0,
        }
        if rays_runtime_env:
            options["runtime_env"] = {"env_vars": _V2.controller_env_vars()}
        if placement_group is not None:
            options["scheduling_strategy"] = _V2.PlacementGroupSchedulingStrategy(
                placement_group=placement_group,
                placement_group_capture_child_tasks=True,
            )
        remote_options = getattr(controller_cls, "RAY_REMOTE_OPTIONS", None)
        actor_cls = (
            ray.remote(**remote_options)(controller_cls)
            if remote_options
            else ray.remote(controller_cls)
        )
        controller = self.controller = actor_cls.options(**options).remote(
            **controller_kwargs
        )
        self._started.set()
        if self._aborted:  # Tune stopped the trial while the run was starting
            self.abort()
        ray.get(controller.run.remote())
        return ray.get(controller.get_result.remote())

    def reports(self):
        """Rank 0's reports, ``(index, metrics, checkpoint)``, as the run records
        them, until it ends (trial's training thread). A controller that died
        ends them; ``finish()`` raises the run's error."""
        self._started.wait()
        controller = self.controller
        if controller is None:
            return
        while True:
            try:
                item = ray.get(controller.next_report.remote())
            except ray.exceptions.RayActorError:
                return
            if item is None:
                return
            yield item

    def taken(self, index: int) -> None:
        """Tune took the report ``index``: the workers waiting for it go on
        (trial's training thread)."""
        try:
            self.controller.report_taken.remote(index)
        except Exception:  # the controller is gone: nobody waits
            pass

    def finish(self) -> None:
        """Wait for ``fit()``; raise the training loop's error (trial's training thread)."""
        if self._thread is not None:
            self._thread.join()
        if self.error is not None:
            error = _user_error(self.error)
            raise error from (self.error if error is not self.error else None)

    def abort(self, report_queue: Any = None) -> None:
        """Stop the run now: its workers, its controller (trial actor,
        when Tune stops or resets the trial). Tune removes the trial's placement
        group; a run's own (Ray's pattern) goes with Ray's abort.

        ``report_queue``: the queue of Ray's ``TuneReportCallback`` (Ray's
        pattern) goes first: a report waiting for Tune (which no longer takes
        any) holds the controller's event loop in ``put``, and Ray's abort could
        not run behind it.
        """
        self._aborted = True
        if report_queue is not None:
            try:
                ray.kill(report_queue.actor, no_restart=True)
            except Exception:
                pass
        controller, self.controller = self.controller, None
        if controller is not None:
            try:  # Ray's abort: the worker group, then the controller itself exits
                ray.get(controller.abort.remote(), timeout=_ABORT_PATIENCE_S)
            except Exception:
                pass
            ray.kill(controller, no_restart=True)


class V2Trial(_compat.FunctionTrainable):
    """The Tune trainable behind ``ray_tt_ext.v2.Tuner(trainer)`` (trial actor).

    A per-trainer subclass made by :func:`make_trainable_cls` sets the class
    attributes below; they are small, so what Tune registers is a few KiB
    whatever the trainer holds.
    """

    _name = "Trainer"
    _trainer_cls: type
    _params: ObjectStoreParams
    _base_scaling_config: Any = None
    #: Tune's retention (num_to_keep, checkpoint_score_attribute/order).
    _retention: dict = {}  # set per subclass, never mutated
    _run: Optional[_TrialRun] = None

    @classmethod
    def default_resource_request(cls, config: dict[str, Any]) -> Any:
        """Overrides Tune's ``Trainable.default_resource_request``; runs on the
        driver. One bundle per worker of the (tuned) ``ScalingConfig``."""
        scaling = cls._base_scaling_config or _V2.ScalingConfig()
        tuned = (config or {}).get("scaling_config")
        if isinstance(tuned, dict):
            scaling = dataclasses.replace(scaling, **tuned)
        return resource_request(scaling)

    def _trainable_func(self, config: dict[str, Any]) -> None:
        """Overrides ``FunctionTrainable._trainable_func``; runs in the trial actor's
        training thread: one Train V2 run, each report of rank 0 a Tune report."""
        session = _compat.get_session()
        storage = session.storage
        kwargs = merged_kwargs(dict(self._params.get()), config, self._trainer_cls)
        run = self._run = _TrialRun()
        kwargs["run_config"] = _run_config_for_trial(
            kwargs.get("run_config"), storage, self._retention
        )
        trainer = self._trainer_cls(**kwargs)
        trainer._measured_by_tuner = True  # the Tuner measured what Tune registered
        run.replay_after = _resume_from(trainer, _compat.get_checkpoint(), storage)
        run.start(trainer)
        score = self._retention.get("checkpoint_score_attribute")
        for index, metrics, checkpoint in run.reports():
            if checkpoint is not None and score is not None and score not in metrics:
                raise ValueError(
                    f"A checkpoint was reported without checkpoint_score_attribute "
                    f"{score!r} in rank 0's metrics ({sorted(metrics)}); Tune and Ray "
                    "Train would rank it differently and delete different folders. "
                    "Nothing was deleted. Fix: report it with every checkpoint."
                )
            if checkpoint is not None:
                # The Train checkpoint is the trial's: recorded where it is.
                metrics[_compat.CHECKPOINT_DIR_NAME] = os.path.basename(
                    checkpoint.path.rstrip("/")
                )
                metrics["checkpoint_index"] = storage.current_checkpoint_index + 1
            # Returns once Tune's driver took the result: only then does the
            # workers' report() return (TrialController.commit_report).
            _compat.tune_report(metrics, checkpoint=checkpoint)
            run.taken(index)
        run.finish()
        # Like Ray's wrap_function: mark the end without logging twice.
        session.report({_compat.RESULT_DUPLICATE: True})

    def cleanup(self) -> None:
        """Extends ``FunctionTrainable.cleanup``; runs in the trial actor when Tune
        stops the trial: the run's workers and controller go first."""
        self._abort_run()
        super().cleanup()

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        """Extends ``FunctionTrainable.reset_config`` (an actor reused for another
        trial, e.g. by PBT); runs in the trial actor: the old run stops first."""
        self._abort_run()
        return super().reset_config(new_config)

    def _abort_run(self) -> None:
        run, self._run = self._run, None
        if run is not None:
            run.abort()


def _run_config_for_trial(run_config: Any, storage: Any, retention: dict[str, Any]) -> Any:
    """The trainer's ``RunConfig`` for this trial's run (trial actor).

    The run is named after the trial and lives in the trial folder, so its
    checkpoints are the trial's and a retry or a restore continues the run.
    Its retention is Tune's (``retention``: ``num_to_keep`` and the score, the
    trainer's unless Tune's ``CheckpointConfig`` sets its own): Train keeps the
    same list as Tune, and Tune deletes what both drop (see :func:`_tune_deletes`).
    """
    run_config = run_config or _V2.RunConfig()
    checkpoint_config = run_config.checkpoint_config or _V2.CheckpointConfig()
    return dataclasses.replace(
        run_config,
        name=storage.trial_dir_name,
        storage_path=storage.experiment_fs_path,
        storage_filesystem=storage.storage_filesystem,
        checkpoint_config=dataclasses.replace(checkpoint_config, **retention),
        callbacks=[*(run_config.callbacks or []), TuneReportBridge()],
    )


def _resume_from(trainer: Any, tune_checkpoint: Any, storage: Any) -> Optional[str]:
    """Start the run from the checkpoint Tune gives the trial (trial actor).

    Another trial's (PBT moved one here): the workers'
    ``ray.train.get_checkpoint()`` returns it until the run reports a
    checkpoint of its own (see ``_train_v2.PolicyTrainFn``): a folder already
    in the trial folder never counts as one, so an older checkpoint of the run
    never wins over the one PBT chose.

    The trial's own (Tune retries or restores it): the run's latest recorded
    checkpoint wins, which Ray Train restores from the run's snapshot in the
    trial folder. It is never older than Tune's (Train records each report
    before Tune hears of it) and may be newer: a report the run recorded just
    before the trial or its controller died, before Tune had it (its
    ``report()`` had not returned yet), or one Tune had when the driver died
    but had not saved in the experiment's state. Tune's is the fallback.

    Returns what the run's controller hands Tune again first
    (``TrialController``'s ``replay_after``): the path of Tune's own
    checkpoint of the trial (``""``: Tune has none), or ``None`` (PBT's).
    """
    known: tuple = ()  # the trial's own (or none): the run's latest, if any, wins
    replay_after: Optional[str] = ""
    if tune_checkpoint is not None:
        replay_after = tune_checkpoint.path
        parent = tune_checkpoint.path.rstrip("/").rpartition("/")[0]
        if parent != storage.trial_fs_path.rstrip("/"):  # another trial's (PBT)
            # Listed now, not from this process's cache: an actor Tune reuses
            # has seen the trial folder before, without the run's later checkpoints.
            known = tuple(
                sorted(list_folders(storage.storage_filesystem, storage.trial_fs_path))
            )
            replay_after = None
    original = trainer._get_train_func

    def get_train_func() -> Any:
        train_fn = original()
        if not isinstance(train_fn, PolicyTrainFn):
            train_fn = PolicyTrainFn(train_fn)
        return train_fn.starting_from(tune_checkpoint, known)

    trainer._get_train_func = get_train_func
    return replay_after


#: The retention fields Tune's and Train V2's ``CheckpointConfig`` share.
RETENTION = ("num_to_keep", "checkpoint_score_attribute", "checkpoint_score_order")


def make_trainable_cls(trainer: Any, tune_checkpoint_config: Any = None) -> type[V2Trial]:
    """The per-trainer Tune trainable class: small attributes only (driver).

    The trainer's constructor arguments go into the object store here, once
    per conversion, owned by the ``_params.owned_by`` owner in force (the
    Tuner). ``tune_checkpoint_config``: Tune's, whose retention the runs follow.
    """
    trainer_cls = type(trainer)
    source = tune_checkpoint_config or trainer.run_config.checkpoint_config
    retention = {f: getattr(source, f) for f in RETENTION} if source is not None else {}
    score = retention.get("checkpoint_score_attribute")
    if isinstance(score, str) and "/" in score:
        raise ValueError(
            f"checkpoint_score_attribute={score!r}: under ray_tt_ext.v2.Tuner the score "
            "must be a top-level metric of rank 0's reports (Tune and Ray Train read a "
            "nested one differently, and their retention would disagree). Fix: report "
            "it at the top level."
        )
    attrs = {
        "_retention": retention,
        "_name": trainer_cls.__name__,
        "_trainer_cls": trainer_cls,
        "_params": ObjectStoreParams.for_trainer(trainer_kwargs(trainer)),
        "_base_scaling_config": trainer.scaling_config,
        "__module__": __name__,
    }
    return type("V2TrainTrainable", (V2Trial,), attrs)


# ---------------------------------------------------------------------------
# Ray's documented pattern (a Tune function that fits a V2 trainer) under
# ray_tt_ext.v2.Tuner: its runs are stopped with the trial
# ---------------------------------------------------------------------------

#: The runs a function trial of ``ray_tt_ext.v2.Tuner`` started (its training thread).
_TRIAL_RUNS: contextvars.ContextVar[Optional[list]] = contextvars.ContextVar(
    "ray_tt_ext_trial_runs", default=None
)
_PATCH_LOCK = threading.Lock()
_RAYS_RUN_CONTROLLER: list[Callable[..., Any]] = []


def _run_controller_of_a_trial(self: Any, **controller_kwargs: Any) -> Any:
    """Patches Ray Train V2's ``DataParallelTrainer._initialize_and_run_controller``
    in a Tune trial actor of ``ray_tt_ext.v2.Tuner`` (installed by
    :class:`ReleasingTrial`). Inside such a trial's training thread the run is
    recorded, so that the trial aborts it when Tune stops it (Ray's own
    ``PlacementGroupCleaner`` needs the State API, and its placement group
    outlives the trial without it); anywhere else, Ray's method."""
    runs = _TRIAL_RUNS.get()
    if runs is None:
        return _RAYS_RUN_CONTROLLER[0](self, **controller_kwargs)
    run = _TrialRun()
    runs.append(run)
    return run.run_controller(_V2.TrainController, controller_kwargs)


def _install_run_tracking() -> None:
    with _PATCH_LOCK:
        if not _RAYS_RUN_CONTROLLER:
            base = _V2.DataParallelTrainer
            _RAYS_RUN_CONTROLLER.append(base._initialize_and_run_controller)
            base._initialize_and_run_controller = _run_controller_of_a_trial


class ReleasingTrial:
    """The function trainables of ``ray_tt_ext.v2.Tuner`` (Ray's pattern among
    them): a Train V2 run the function starts is aborted, workers and placement
    group, when Tune stops the trial. Mixed in before Tune's wrapped function
    class (:func:`releasing_function_trainable`); runs in the trial actor."""

    _runs: Optional[list] = None

    def setup(self, config: dict[str, Any]) -> None:
        """Extends ``FunctionTrainable.setup``; runs in the trial actor."""
        _install_run_tracking()
        self._runs = []
        super().setup(config)

    def _trainable_func(self, config: dict[str, Any]) -> Any:
        """Extends ``FunctionTrainable._trainable_func``; runs in the trial's
        training thread, where the user's function starts its runs."""
        token = _TRIAL_RUNS.set(self._runs)
        try:
            return super()._trainable_func(config)
        finally:
            _TRIAL_RUNS.reset(token)

    def cleanup(self) -> None:
        """Extends ``FunctionTrainable.cleanup``; runs in the trial actor when Tune
        stops the trial: the runs it started go first."""
        self._abort_runs()
        super().cleanup()

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        """Extends ``FunctionTrainable.reset_config``; runs in the trial actor."""
        self._abort_runs()
        return super().reset_config(new_config)

    def _abort_runs(self) -> None:
        runs, self._runs = self._runs or [], []
        # Ray's TuneReportCallback reports through the Tune session's queue.
        report_queue = _compat.tune_report_queue(_compat.get_session())
        for run in runs:
            run.abort(report_queue=report_queue)


def releasing_function_trainable(fn: Callable[..., Any]) -> type:
    """Tune's trainable class for the function ``fn``, with :class:`ReleasingTrial`
    (driver). Named as Tune names ``fn``."""
    base = _V2.wrap_function(fn)
    cls = type(base.__name__, (ReleasingTrial, base), {"__module__": base.__module__})
    cls.__qualname__ = base.__qualname__
    return cls
