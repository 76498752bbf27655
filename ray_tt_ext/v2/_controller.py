"""The run's controller of a ``ray_tt_ext.v2.Tuner(trainer)`` trial.

Ray runs each Train V2 run's controller as an actor of its own; here it runs in
the Tune trial actor's process, on an event loop thread of its own, one run at a
time: a Python process fewer per trial.

* :class:`TrialController`: Ray's ``TrainController`` whose worker group
  (``_worker_group``) starts in the trial's placement group, which Tune reserved
  from the trainer's ``ScalingConfig`` and removes, workers and all, when the
  trial stops. A worker's ``report()`` returns once the run recorded the report
  and Tune took it. From Ray 2.56 the groups' barrier (Ray's
  ``SynchronizationActor``) runs on a second event loop thread, and from 2.57
  Ray's ``PreemptionWatcher`` as a thread, where Ray starts an actor each.
* :class:`TuneReportBridge` (a V2 ``UserCallback``): hands rank 0's metrics and
  the checkpoint to the trial, in order, once the run recorded them.
* :class:`ControllerHost`: the two event loop threads, and the way in for the
  workers' calls, which reach the trial actor (``_trial.V2Trial``, the trial
  side: Tune's and the training threads).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import inspect
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any, Optional

import ray

from ray_tt_ext._compat import train_v2_bridge as _V2
from ray_tt_ext.v2._train import ControllerBarrier
from ray_tt_ext.v2._worker_group import (
    _BARRIER_GENERATIONS,
    _THIS_PROCESS,
    TrialWorkerGroup,
    _ends_cleanly,
    _keep_barriers_in_the_controller,
    _keep_trial_placement_groups_in_train,
    _KeptWorkers,
    _TorchSetupKeepingItsGroup,
    _trial_placement_group_of,
    _WatcherInTheController,
    _workers_of,
    tune_owns_checkpoints,
)

logger = logging.getLogger("ray_tt_ext")

#: ray_tt_ext's entry of a run's checkpoint manager snapshot on Ray < 2.54: the
#: run's report index of each checkpoint listed (``TrialController._replay``).
_REPORT_ORDER_KEY = "ray_tt_ext_report_indices"


def _path(checkpoint: Any) -> str:
    return checkpoint.path.rstrip("/")


def _key(checkpoint: Any, run_path: str) -> str:
    """A checkpoint's key in ray_tt_ext's snapshot entry: its path within the run's
    folder (a moved experiment keeps it), or its whole path outside it."""
    path, root = _path(checkpoint), run_path.rstrip("/") + "/"
    return path[len(root) :] if path.startswith(root) else path


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
    and says when Tune took each (:meth:`report_taken`). From Ray 2.56 its worker
    groups' barriers (Ray's ``SynchronizationActor``, an actor per group) are
    kept here, on the barriers' event loop (:meth:`barrier_call`), and from Ray 2.57 Ray's
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
        the checkpoints retention drops (:func:`tune_owns_checkpoints`); ``env_vars``,
        what Ray's ``_initialize_and_run_controller`` would give its controller
        actor as a runtime env, are set in this process (the trial actor's,
        which has them from Tune's runtime env already); ``replay_after``: see
        :meth:`_replay`; ``keep_workers``: a group that ends cleanly keeps its
        workers for the next run (:meth:`next_run`). Called again by
        :meth:`next_run` for each later run of the same actor."""
        # What this process had before the first run set anything (next_run again).
        start_env = self._start_env = getattr(self, "_start_env", None) or dict(os.environ)
        inherited = {k: start_env[k] for k in env_vars or {} if k in start_env}
        os.environ.update(env_vars or {})
        tune_owns_checkpoints()
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
        #: The last report index handed to the trial, and (Ray < 2.54: groups number
        #: from 1 each) what the current group adds to its numbers.
        self._last_index = 0
        self._index_base = 0
        self._ended = False
        self._aborting = False  # abort() cancels the run's loop
        self._quick_polls = 0
        # Kept across runs (next_run); generations are the process's: a late call
        # of an earlier group's barrier never reaches a later group's.
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
        actor when Tune reuses it for another trial (``_trial``). Ray's
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
        run_path = storage.experiment_fs_path
        for result in restored:
            if _key(result.checkpoint, run_path) in saved:
                dict.__setitem__(
                    indices,
                    result.checkpoint,
                    int(saved[_key(result.checkpoint, run_path)]),
                )
        self._last_index = max(indices.values(), default=-1) + 1
        rays = manager._save_state

        def save_state() -> str:
            state = json.loads(rays())
            listed = {_key(r.checkpoint, run_path) for r in manager._checkpoint_results}
            state[_REPORT_ORDER_KEY] = {
                _key(c, run_path): i
                for c, i in indices.items()
                if _key(c, run_path) in listed
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
        worker after each ``ray.train.report`` (see ``_train.PolicyTrainFn``),
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
    actor, an async actor (``_trial.V2Trial``), passes those calls here
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
