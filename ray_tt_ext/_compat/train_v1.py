"""Train V1 internals: the training workers' session, and the remote executor's host process."""

from __future__ import annotations

import os
import sys
from typing import Any

import ray
from ray._private import worker as _ray_worker
from ray.train._internal import backend_executor as _backend_executor_module
from ray.train._internal.backend_executor import (
    TrainBackendError,
)
from ray.train._internal.worker_group import RayTrainWorker as _RayTrainWorker
from ray.train._internal.worker_group import WorkerGroup as _WorkerGroup
from ray.util.placement_group import PlacementGroup

try:  # Ray >= 2.50
    from ray.train._internal.session import get_session
except ImportError:  # Ray 2.40 .. 2.49
    from ray.train._internal.session import _get_session as get_session


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


def worker_report_synchronously() -> None:
    """Make this worker's ``train.report()`` return only once its result is taken.

    Runs on a training worker, after ``BackendExecutor.start_training``, when
    the remote executor's coordinator reads the worker's results itself. Sets
    ``_TrainSession.synchronous_result_reporting`` (Ray 2.40 .. 2.60): the
    training thread then waits after each report until it is let go
    (:func:`worker_let_go`, or the next ``get_next``), instead of being let go
    by ``get_next`` *before* the result has left the worker. So a worker that
    dies right after ``train.report()`` returned has handed its result over
    already (Ray's executor lets go first, and a death in that instant loses the
    report).
    """
    session = get_session()
    if session is None:
        raise TrainBackendError("no Ray Train session on this worker")
    session.synchronous_result_reporting = True


def worker_let_go() -> None:
    """Let the training thread go on after its last result was taken.

    Runs on a training worker, called by the coordinator right after it has
    the worker's result in hand (fire and forget, before the next
    ``get_next``, in order). With synchronous reporting
    (:func:`worker_report_synchronously`) ``_TrainSession.get_next`` (Ray 2.40 ..
    2.60) would let the thread go only when the next result is asked for;
    this lets it go now (``continue_lock``) and marks the next ``get_next`` as
    the first (``_first_report``) so that it does not let go a second time. The
    worker computes its next step while the coordinator hands the result to
    Tune, as with Ray's executor.
    """
    session = get_session()
    if session is None or session._first_report:  # nothing taken yet
        return
    session._first_report = True
    session.continue_lock.release()


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
    """Ray's ``RayTrainWorker`` (Ray 2.40 .. 2.60) plus :meth:`get_next` and :meth:`let_go`.

    The training workers' actor class when the remote executor starts them
    (``BackendExecutor.start(train_cls=...)``). The same name as Ray's, so
    ``ray list actors`` and a worker's ``ActorDiedError`` read as with Ray's
    executor.
    """

    def get_next(self) -> Any:
        """``__execute(worker_get_next)``: Ray's ``RayTrainWorker.__execute``
        with :func:`worker_get_next`, its error handling included.

        Runs on a training worker; the remote executor's call on every
        report (the coordinator calls it). A method of its own spares
        pickling, sending and unpickling the function with each call (the
        difference: docs/benchmarks.md, section ``executor``).
        """
        return self._RayTrainWorker__execute(worker_get_next)

    def let_go(self) -> None:
        """``__execute(worker_let_go)``: runs on a training worker, see
        :func:`worker_let_go`."""
        return self._RayTrainWorker__execute(worker_let_go)


def wait_for_workers_to_take_their_calls(worker_group: Any) -> None:
    """Return once every worker has run the calls this process made of it so far.

    Runs in the executor host, after Ray's ``start_training``: each worker's
    ``__ray_ready__`` (Ray's built-in actor method, Ray 2.40 .. 2.60) queues
    behind this process's earlier calls to it (``WorkerGroup.workers``), so its
    answer means they ran. A worker that died answers with its death, which is
    not raised here (whoever reads from it next finds it).
    """
    refs = [w.actor.__ray_ready__.remote() for w in worker_group.workers]
    ray.wait(refs, num_returns=len(refs))


class WorkerReader:
    """One training worker as the remote executor's coordinator reads it: its
    :meth:`RayTrainWorker.get_next` and :meth:`RayTrainWorker.let_go`.

    Runs in the coordinator. Holds the worker's actor handle itself: on Ray
    2.40 an actor method keeps only a weak reference to its handle (Ray 2.60's
    keeps a strong one), so a method taken from a worker group that is then
    dropped raises "Lost reference to actor" at its next call.
    """

    __slots__ = ("_actor",)

    def __init__(self, actor: Any) -> None:
        self._actor = actor

    def get_next(self) -> Any:
        """The worker's next result, as an ``ObjectRef``. The task is named as
        that of Ray's ``BackendExecutor.get_next_results``
        (``_RayTrainWorker__execute.get_next``), so ``ray list tasks`` and a
        worker's ``RayTaskError`` read the same with either executor."""
        return self._actor.get_next.options(
            name="_RayTrainWorker__execute.get_next"
        ).remote()

    def let_go(self) -> None:
        """Let the worker go on past its report (fire and forget). Called in the
        coordinator once it holds this worker's result of ``get_next``; the
        worker runs it before the coordinator's next ``get_next`` (Ray runs one
        caller's calls to an actor in order)."""
        self._actor.let_go.remote()


def worker_readers(worker_group: Any) -> list[WorkerReader]:
    """A :class:`WorkerReader` per worker, in rank order.

    Runs in the coordinator, on a copy of the executor host's ``worker_group``
    (``WorkerGroup.workers``, Ray 2.40 .. 2.60) that the host started with
    :class:`RayTrainWorker`.
    """
    return [WorkerReader(w.actor) for w in worker_group.workers]


# -- The executor host's process (ray_tt_ext._executor_host) ---------------------

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
