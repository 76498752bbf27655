"""One Tune trial = one Train V2 run: the trial side of ``ray_tt_ext.v2.Tuner(trainer)``.

Where each piece runs:

* :func:`make_trainable_cls` (driver): the small Tune trainable class that
  stands for a V2 trainer: the trainer's class, its constructor arguments in
  the object store (``_params``), its base ``ScalingConfig``.
* :class:`V2Trial` (the Tune trial actor): builds the trainer from those
  arguments and the trial's hyperparameters (``_arguments``), names the
  Train run after the trial (its folder *is* the trial folder, so a retry or
  a restore continues the run), runs ``fit()`` in a thread and reports each of
  rank 0's reports to Tune, with the Train checkpoint itself (nothing copied).
  The run's controller, ``_controller``'s ``TrialController``, runs in this
  actor's process too (``ControllerHost``), where Ray starts an actor for it;
  so this actor is an async actor, whose Tune calls run in a thread of their
  own and whose workers' calls reach the controller meanwhile.
* :class:`ReleasingTrial` (the Tune trial actor): function trainables of
  ``ray_tt_ext.v2.Tuner`` (Ray's pattern among them), whose runs stop with the
  trial.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import dataclasses
import functools
import logging
import os
import threading
from collections.abc import Callable
from typing import Any, Optional

import ray

from ray_tt_ext import _compat
from ray_tt_ext._compat import train_v2_bridge as _V2
from ray_tt_ext._naming import list_folders
from ray_tt_ext._params import ObjectStoreParams
from ray_tt_ext.v2._arguments import (
    RETENTION,
    merged_kwargs,
    resource_request,
    trainer_kwargs,
)
from ray_tt_ext.v2._controller import (
    ControllerHost,
    TuneReportBridge,
)
from ray_tt_ext.v2._train import PolicyTrainFn
from ray_tt_ext.v2._worker_group import without_idle_dataset_manager

logger = logging.getLogger("ray_tt_ext")

#: How long a stopped trial waits for Ray's abort of its run (Ray's pattern: then
#: its controller actor is killed, its workers with it; the placement group it
#: created stays until the driver removes it: ``_tuner._DeadControllersPlacementGroups``).
_ABORT_PATIENCE_S = 10.0
#: How long a stopped or reset trial waits for the abort of its run's controller
#: in its process: a worker group that is starting holds the controller's event
#: loop up to Ray Train's worker group start timeout (60 s by default).
_IN_PROCESS_ABORT_PATIENCE_S = (
    float(os.environ.get("RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S", "60")) + 30.0
)


def _user_error(error: BaseException) -> BaseException:
    """The training loop's own error inside Ray Train V2's ``WorkerGroupError``
    (rank 0's first), so that ``Result.error`` names its type and message."""
    failures = getattr(error, "worker_failures", None)
    if isinstance(failures, dict) and failures:
        error = failures[min(failures)]
        if isinstance(error, _V2.UserExceptionWithTraceback):  # Ray < 2.55 keeps it
            error = error._base_exc  # wrapped; Ray 2.55+ unwraps it as here
    return error


class _TrialRun:
    """One Train V2 run inside a trial actor: ``fit()`` in a thread of its own, its
    controller in the trial's placement group, rank 0's reports taken from the
    controller (``TrialController.next_report``) by the trial's training thread."""

    def __init__(self, kept_controller: Any = None, keep_workers: bool = False) -> None:
        self.controller: Any = None
        #: The controller of this trial actor's last run, which kept its workers
        #: (``V2Trial.reset_config``): this run starts in it if it can.
        self.kept_controller = kept_controller
        self.keep_workers = keep_workers
        #: The run ended and the trial took all its reports (trial actor).
        self.completed = False
        self.error: Optional[BaseException] = None
        self._thread: Optional[threading.Thread] = None
        self._aborted = False
        self._started = threading.Event()  # the controller exists, or fit() ended
        #: TrialController's ``replay_after`` (see ``_resume_from``).
        self.replay_after: Optional[str] = None
        #: This process's ControllerHost, once the run's controller runs in it.
        self.host: Optional[ControllerHost] = None
        self.stuck = False

    def start(self, trainer: Any) -> None:
        """Run ``trainer.fit()`` with this trial's controller (trial actor)."""
        default_callbacks = trainer._create_default_callbacks
        # Tune owns the trial's placement group: nothing else removes it (Ray
        # 2.53+'s cleaner would, when the controller dies).
        cleaner = _V2.PlacementGroupCleanerCallback or ()
        trainer._create_default_callbacks = lambda: [
            without_idle_dataset_manager(c)
            for c in default_callbacks()
            if not isinstance(c, cleaner)
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
        for this trainer instance; runs in the trial actor's fit thread. The
        controller is Ray's (:class:`TrialController`), run in this process
        (:class:`ControllerHost`) rather than as an actor of its own; its
        worker group takes the trial's placement group."""
        kwargs = dict(
            controller_kwargs,
            trial_placement_group=ray.util.get_current_placement_group(),
            env_vars=_V2.controller_env_vars(),
            replay_after=self.replay_after,
            keep_workers=self.keep_workers,
        )
        host = self.host = ControllerHost.of_this_process()
        controller = self._kept_controller_for(host, kwargs)
        if controller is None:
            controller = host.new_controller(kwargs)
        self.controller = controller
        self._started.set()
        if self._aborted:  # Tune stopped the trial while the run was starting
            self.abort()
        host.on_controller(controller, "run").result()
        if self._aborted:
            raise RuntimeError("The run was aborted: Tune stopped or reset the trial.")
        return controller.get_result()

    def run_controller(self, controller_cls: type, controller_kwargs: dict) -> Any:
        """Start a run's controller actor (Ray's pattern: Ray's ``TrainController``)
        in the trial's placement group (if the trial has one) and wait for its
        result, as Ray's ``_initialize_and_run_controller`` does (trial actor)."""
        placement_group = ray.util.get_current_placement_group()
        options: dict[str, Any] = {
            "num_cpus": 0,  # as Ray's controller; it holds nothing of the trial's
            "max_restarts": 0,
            "runtime_env": {"env_vars": _V2.controller_env_vars()},
        }
        if placement_group is not None:
            options["scheduling_strategy"] = _V2.PlacementGroupSchedulingStrategy(
                placement_group=placement_group,
                placement_group_capture_child_tasks=True,
            )
        controller = (
            ray.remote(controller_cls).options(**options).remote(**controller_kwargs)
        )
        self.controller = controller
        self._started.set()
        if self._aborted:  # Tune stopped the trial while the run was starting
            self.abort()
        ray.get(controller.run.remote())
        return ray.get(controller.get_result.remote())

    def _kept_controller_for(self, host: ControllerHost, kwargs: dict) -> Any:
        """The last run's controller, started on this run
        (``TrialController.next_run``), or ``None`` (there is none, or it could
        not start it: its kept workers are killed). Trial actor."""
        kept, self.kept_controller = self.kept_controller, None
        if kept is None:
            return None
        try:
            if host.on_controller(kept, "next_run", **kwargs).result():
                host.controller = kept
                return kept
        except Exception:
            logger.debug("The kept controller could not start a run", exc_info=True)
        host.on_controller(kept, "discard")
        return None

    def reports(self):
        """Rank 0's reports, ``(index, metrics, checkpoint)``, as the run records
        them, until it ends (trial's training thread); ``finish()`` raises the
        run's error."""
        self._started.wait()
        controller = self.controller
        if controller is None:
            return
        while True:
            item = self.host.on_controller(controller, "next_report").result()
            if item is None:
                return
            yield item

    def taken(self, index: int) -> None:
        """Tune took the report ``index``: the workers waiting for it go on
        (trial's training thread)."""
        controller = self.controller
        if controller is not None:
            self.host.on_controller(controller, "report_taken", index)

    def finish(self) -> None:
        """Wait for ``fit()``; raise the training loop's error (trial's training thread)."""
        if self._thread is not None:
            self._thread.join()
        if self.error is not None:
            error = _user_error(self.error)
            raise error from (self.error if error is not self.error else None)

    def abort(self, report_queue: Any = None) -> None:
        """Stop the run now: its workers, its controller (trial actor, when Tune
        stops or resets the trial). Tune removes the trial's placement group; a
        run's own (Ray's pattern) goes with Ray's abort, or, if Ray's abort does
        not come in time, with the driver's sweep
        (``_tuner._DeadControllersPlacementGroups``). ``stuck``: the
        controller did not abort within ``_IN_PROCESS_ABORT_PATIENCE_S`` (a
        worker group still starting holds its loop): the actor is not reused.

        ``report_queue``: the queue of Ray's ``TuneReportCallback`` (Ray's
        pattern) goes first: a report waiting for Tune (which no longer takes
        any) holds the controller's event loop in ``put``, and Ray's abort could
        not run behind it.
        """
        self._aborted = True
        kept, self.kept_controller = self.kept_controller, None
        if kept is not None:  # fit() ended before it took the kept controller
            ControllerHost.of_this_process().on_controller(kept, "discard")
        if report_queue is not None:
            try:
                ray.kill(report_queue.actor, no_restart=True)
            except Exception:
                pass
        controller, self.controller = self.controller, None
        if controller is None:
            return
        if self.host is None:  # Ray's controller actor (Ray's pattern)
            try:  # Ray's abort: the worker group, then the controller itself exits
                ray.get(controller.abort.remote(), timeout=_ABORT_PATIENCE_S)
            except Exception:
                pass
            ray.kill(controller, no_restart=True)
            return
        try:
            self.host.on_controller(controller, "abort").result(
                timeout=_IN_PROCESS_ABORT_PATIENCE_S
            )
        except Exception:
            logger.warning(
                "The Train run's controller did not abort within %.0f s: this trial "
                "actor is not reused",
                _IN_PROCESS_ABORT_PATIENCE_S,
                exc_info=True,
            )
            self.stuck = True
        # A run that had ended already kept its workers for a next run: none comes.
        self.host.on_controller(controller, "discard")


class _SyncTrain:
    """``self`` for Ray's ``Trainable.train_buffered`` on a :class:`V2Trial`: its
    ``train()`` is Tune's blocking one (the trial's is a coroutine)."""

    def __init__(self, trial: V2Trial):
        self._trial = trial

    def train(self) -> Any:
        return _compat.FunctionTrainable.train(self._trial)


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
    #: Tune reuses trial actors (``TuneConfig(reuse_actors=True)``): a run that
    #: ended cleanly leaves its controller and workers for the actor's next trial.
    _keep_workers: bool = False
    _run: Optional[_TrialRun] = None
    _kept_controller: Any = None
    _tune_thread: Optional[concurrent.futures.ThreadPoolExecutor] = None

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
        # This trial actor is an async actor (for the workers' calls): its
        # threads' ray.get calls are not on its event loop, so Ray's warning
        # for them is off, as Ray turns it off for its own controller.
        warning = _V2.blocking_get_warning_var
        os.environ.setdefault(warning, _V2.controller_env_vars()[warning])
        session = _compat.get_session()
        storage = session.storage
        kwargs = merged_kwargs(dict(self._params.get()), config, self._trainer_cls)
        kept, self._kept_controller = self._kept_controller, None
        run = self._run = _TrialRun(kept, keep_workers=self._keep_workers)
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
            _compat.tune_report(metrics, checkpoint=_compat.as_tune_checkpoint(checkpoint))
            run.taken(index)
        run.finish()
        run.completed = True
        # Like Ray's wrap_function: mark the end without logging twice.
        session.report({_compat.RESULT_DUPLICATE: True})

    def cleanup(self) -> None:
        """Extends ``FunctionTrainable.cleanup``; runs in the trial actor when Tune
        stops the trial: the run's workers and controller go first (and the
        workers a controller kept from an earlier run)."""
        self._abort_run(keep=False)
        super().cleanup()

    # -- Tune's calls: one at a time, in a thread of their own --------------
    # The trial actor is an async actor (the workers' calls below are
    # coroutines), so that the workers reach the run's controller while Tune's
    # ``train()`` waits for a result. Tune's calls, which block, run in one
    # thread of their own, one at a time, in the order they start on the
    # actor's event loop (Tune waits for each before it sends the next, but for
    # ``stop`` after ``export_model`` or during a ``save``).

    async def _in_tune_thread(
        self, method: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Any:
        if self._tune_thread is None:
            self._tune_thread = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="ray_tt_ext-tune"
            )
        loop = asyncio.get_running_loop()
        call = functools.partial(method, *args, **kwargs)
        return await loop.run_in_executor(self._tune_thread, call)

    async def train(self) -> Any:
        """Tune's ``Trainable.train`` in the trial actor's Tune thread."""
        return await self._in_tune_thread(super().train)

    async def train_buffered(self, *args: Any, **kwargs: Any) -> Any:
        """Tune's ``Trainable.train_buffered`` (``TUNE_RESULT_BUFFER_LENGTH`` > 1) in
        the trial actor's Tune thread: Ray's loop, over Tune's own ``train``
        (this class's is a coroutine)."""
        buffered = _compat.FunctionTrainable.train_buffered
        return await self._in_tune_thread(buffered, _SyncTrain(self), *args, **kwargs)

    async def save(self, *args: Any, **kwargs: Any) -> Any:
        """Tune's ``Trainable.save`` in the trial actor's Tune thread."""
        return await self._in_tune_thread(super().save, *args, **kwargs)

    async def restore(self, *args: Any, **kwargs: Any) -> Any:
        """Tune's ``Trainable.restore`` in the trial actor's Tune thread."""
        return await self._in_tune_thread(super().restore, *args, **kwargs)

    async def reset(self, *args: Any, **kwargs: Any) -> Any:
        """Tune's ``Trainable.reset`` in the trial actor's Tune thread."""
        return await self._in_tune_thread(super().reset, *args, **kwargs)

    async def stop(self) -> Any:
        """Tune's ``Trainable.stop`` in the trial actor's Tune thread."""
        return await self._in_tune_thread(super().stop)

    async def export_model(self, *args: Any, **kwargs: Any) -> Any:
        """Tune's ``Trainable.export_model`` in the trial actor's Tune thread."""
        return await self._in_tune_thread(super().export_model, *args, **kwargs)

    # -- The workers' calls of the run's controller (ControllerHost) --------

    async def commit_report(self, report_index: int) -> None:
        """A worker's ``TrialController.commit_report`` (see ``_train``)."""
        host = ControllerHost.of_this_process()
        return await host.call_controller("commit_report", report_index)

    async def training_ended(self) -> None:
        """A worker's ``TrialController.training_ended``."""
        host = ControllerHost.of_this_process()
        return await host.call_controller("training_ended")

    async def get_all_reported_checkpoints(self, *args: Any, **kwargs: Any) -> Any:
        """A worker's ``ray.train.get_all_reported_checkpoints()``: Ray's
        ``TrainController.get_all_reported_checkpoints`` of the run. Runs on the
        trial actor's event loop (so do the methods below), which awaits the
        controller's or the barriers' loop (``ControllerHost``)."""
        host = ControllerHost.of_this_process()
        return await host.call_controller("get_all_reported_checkpoints", *args, **kwargs)

    async def barrier_call(
        self, generation: int, method: str, /, *args: Any, **kwargs: Any
    ) -> Any:
        """A worker group's barrier (``_train.ControllerBarrier``):
        ``TrialController.barrier_call``."""
        host = ControllerHost.of_this_process()
        return await host.call_barrier("barrier_call", generation, method, *args, **kwargs)

    async def close_barrier(self, generation: int) -> None:
        """``TrialController.close_barrier``."""
        host = ControllerHost.of_this_process()
        return await host.call_barrier("close_barrier", generation)

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        """Extends ``FunctionTrainable.reset_config`` (an actor reused for another
        trial, e.g. by PBT); runs in the trial actor: the old run stops first.
        With ``reuse_actors``, a run that completed (it ended and Tune took all
        its reports) keeps its controller, whose workers the next trial's run
        takes over when they fit (``TrialController.next_run``); a run that
        Tune stopped or paused mid-way, or that failed, is aborted. Runs in the
        trial actor's Tune thread (inside ``reset``); ``False`` (Tune then fails
        the trial it was reset for) only when the old run's controller did not
        abort in time."""
        if not self._abort_run(keep=self._keep_workers):
            return False  # Tune fails the trial it reset this actor for
        return super().reset_config(new_config)

    def _abort_run(self, keep: bool) -> bool:
        """Stop this actor's run (or keep its controller); ``False`` when its
        controller could not abort in time (the actor should not be reused)."""
        run, self._run = self._run, None
        kept, self._kept_controller = self._kept_controller, None
        if kept is not None:  # never used: its workers go
            ControllerHost.of_this_process().on_controller(kept, "discard")
        if run is None:
            return True
        if keep and run.completed and run.controller is not None:
            self._kept_controller = run.controller
        else:
            run.abort()
        return not run.stuck


def _run_config_for_trial(run_config: Any, storage: Any, retention: dict[str, Any]) -> Any:
    """The trainer's ``RunConfig`` for this trial's run (trial actor).

    The run is named after the trial and lives in the trial folder, so its
    checkpoints are the trial's and a retry or a restore continues the run.
    Its retention is Tune's (``retention``: ``num_to_keep`` and the score, the
    trainer's unless Tune's ``CheckpointConfig`` sets its own): Train keeps the
    same list as Tune, and Tune deletes what both drop (see ``_worker_group._tune_deletes``).
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
    checkpoint of its own (see ``_train.PolicyTrainFn``): a folder already
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


def make_trainable_cls(
    trainer: Any, tune_checkpoint_config: Any = None, keep_workers: bool = False
) -> type[V2Trial]:
    """The per-trainer Tune trainable class: small attributes only (driver).

    The trainer's constructor arguments go into the object store here, once
    per conversion, owned by the ``_params.owned_by`` owner in force (the
    Tuner). ``tune_checkpoint_config``: Tune's, whose retention the runs follow.
    ``keep_workers``: Tune reuses trial actors; a trial's workers are kept
    for the actor's next trial (``V2Trial.reset_config``).
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
        "_keep_workers": bool(keep_workers),
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
