"""The executor host's process: Ray's ``BackendExecutor`` for a caller elsewhere.

Runs in an executor host actor (shared by a ``ray_tt_ext.Tuner``'s trials on a
node, or dedicated to one executor), or in-process for tests. The caller's
side is :mod:`ray_tt_ext._executor` (the ``RemoteBackendExecutor`` proxy, in
the coordinator); a Tuner's shared hosts are started by
:mod:`ray_tt_ext._executor_hosts` (driver). Where sessions live and how they
are kept apart: the module docstring of :mod:`ray_tt_ext._executor`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any, Optional

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ray_tt_ext import _compat

logger = logging.getLogger("ray_tt_ext")


#: The host's concurrency group for ``BackendExecutorHost.sentinel``.
_SENTINEL_GROUP = "sentinel"
#: Sessions one shared host takes at once (more trials on the node get a
#: dedicated host each). A session's call holds a thread of the host's while
#: it runs.
HOST_CAPACITY = 64
#: How often a shared host checks that each session's coordinator lives (s).
_WATCH_INTERVAL_S = 1.0


class _HostedBackendExecutor(_compat.BackendExecutor):
    """Ray's ``BackendExecutor`` as it runs in an executor host, for a caller elsewhere.

    Runs in the executor host. Ray's executor, with what running outside the
    caller's process needs: it starts its workers in a placement group it
    borrows (the caller's) without owning it, gives them the caller's Ray Data
    ``DataContext``, and starts them as :class:`_compat.RayTrainWorker` (Ray's,
    with a ``get_next`` method), whose results the caller reads directly
    (:meth:`RemoteBackendExecutor.get_next_results`): reports do not pass
    through the host.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        """Extends ``BackendExecutor.__init__``; runs in the executor host."""
        super().__init__(*args, **kwargs)
        # Whether the running workers are RayTrainWorker (have get_next), see start()
        self._workers_have_get_next = False
        self._borrowed_placement_group: Optional[Any] = None

    def use_placement_group(self, placement_group: Any) -> None:
        """Start the workers in ``placement_group`` (the caller's), without owning it.

        Set by :class:`BackendExecutorHost` in the executor host when the
        caller (the coordinator) runs in a placement group and captures child
        tasks: where Ray's executor, running in the caller, would start them
        (its ``placement_group="default"``). ``placement_group`` is a
        :class:`_compat.BorrowedPlacementGroup`, so the workers capture their
        own child tasks as well. The executor never removes it.
        """
        self._borrowed_placement_group = placement_group

    def use_data_context(self, context: Any) -> None:
        """Give the workers ``context`` (the caller's Ray Data ``DataContext``).

        Ray's ``start`` gives them the ``DataContext`` of the process it runs
        in; this one runs in the host, so the caller's is sent along and set
        where Ray sets its own: after it, right before the backend's
        ``on_start`` (this executor's backend's ``on_start`` sets it first,
        inside Ray's ``start``, so a worker's death there is Ray's restart).
        """
        on_start = self._backend.on_start

        def set_data_context_then_on_start(worker_group: Any, backend_config: Any) -> None:
            worker_group.execute(_compat.set_data_context, context)
            on_start(worker_group, backend_config)

        self._backend.on_start = set_data_context_then_on_start

    def _create_placement_group(self) -> None:
        """Overrides ``BackendExecutor._create_placement_group``; runs in the executor host.

        With a borrowed placement group, use it (Ray's decides from the
        process's own placement group, which the host has none of); else Ray's.
        """
        if self._borrowed_placement_group is not None:
            self._placement_group = self._borrowed_placement_group
            return
        super()._create_placement_group()

    def _let_go_of_borrowed_placement_group(self) -> None:
        # Ray's shutdown and _restart remove self._placement_group: not a borrowed one.
        if self._placement_group is self._borrowed_placement_group:
            self._placement_group = None

    def _restart(self) -> None:
        """Extends ``BackendExecutor._restart``; runs in the executor host.

        Ray's, without removing a borrowed placement group (``start`` takes
        it again).
        """
        self._let_go_of_borrowed_placement_group()
        super()._restart()

    def start(
        self,
        initialization_hook: Optional[Callable[[], None]] = None,
        train_cls: Optional[type] = None,
        train_cls_args: Optional[tuple] = None,
        train_cls_kwargs: Optional[dict] = None,
    ) -> None:
        """Overrides ``BackendExecutor.start``; runs in the executor host.

        Ray's, with workers of :class:`_compat.RayTrainWorker` (Ray's, with a
        ``get_next`` method) unless a ``train_cls`` is given. Ray's restart
        after a worker failure calls this again, without a ``train_cls``.
        """
        self._workers_have_get_next = False
        super().start(
            initialization_hook,
            _compat.RayTrainWorker if train_cls is None else train_cls,
            train_cls_args,
            train_cls_kwargs,
        )
        self._workers_have_get_next = train_cls is None and self.is_started()

    def start_training(self, *args: Any, **kwargs: Any) -> None:
        """Extends ``BackendExecutor.start_training``; runs in the executor host.

        Ray's; then, for workers the caller reads itself, each worker's
        reports are made synchronous (``_compat.worker_report_synchronously``:
        its ``train.report()`` returns once the caller has the result); then
        it waits until every worker has taken these calls and Ray's call that
        starts its training thread (Ray's does not wait for it): the caller's
        first read is submitted by the caller, and Ray orders actor calls per
        caller only, so it could otherwise reach a worker first. A worker that
        died meanwhile is not waited for: the caller's first read finds it,
        as with Ray's executor.
        """
        super().start_training(*args, **kwargs)
        if self._workers_have_get_next:  # the caller reads them itself
            self.worker_group.execute_async(_compat.worker_report_synchronously)
        _compat.wait_for_workers_to_take_their_calls(self.worker_group)

    def worker_group_to_read(self) -> Optional[Any]:
        """The worker group whose results the caller reads itself, or ``None``.

        Runs in the executor host; the caller gets a copy (handles to the same
        workers). ``None`` when the workers have no ``get_next`` (a
        ``train_cls`` of the caller's) or are not running: the caller then
        asks this executor's ``get_next_results`` (Ray's, errors included).
        """
        return self.worker_group if self._workers_have_get_next else None

    def shutdown(self, graceful_termination: bool = True) -> None:
        """Extends ``BackendExecutor.shutdown``; runs in the executor host.

        Ray's; a borrowed placement group stays (the caller's), one of its own
        is removed, as Ray's does.
        """
        self._workers_have_get_next = False
        self._let_go_of_borrowed_placement_group()
        super().shutdown(graceful_termination=graceful_termination)


class _TrainingWorkerError(Exception):
    """A training worker's error, carried across the executor host's boundary.

    Ray's executor raises ``StartTracebackWithWorkerRank(rank) from error``
    for an error in the user's training function; the coordinator's
    ``TrainingIterator`` catches it (``except StartTraceback``), reports the
    final run status and re-raises the user's error without Ray's frames.
    ``StartTracebackWithWorkerRank`` pickles its rank only, so its
    ``__cause__`` (the user's error) would be lost on the way from the
    executor host to the coordinator. This carrier pickles both; the
    coordinator rebuilds Ray's exception from it (:meth:`as_start_traceback`).
    """

    def __init__(self, worker_rank: Optional[int], error: Optional[BaseException]):
        super().__init__(worker_rank, error)
        self.worker_rank = worker_rank
        self.error = error

    def __reduce__(self):
        return (type(self), (self.worker_rank, self.error))

    def as_start_traceback(self) -> BaseException:
        """Ray's own exception, without its cause (raise it ``from self.error``)."""
        if self.worker_rank is None:
            return _compat.StartTraceback()
        return _compat.StartTracebackWithWorkerRank(worker_rank=self.worker_rank)


class _CarriedError(Exception):
    """An executor's error with its ``__cause__``, which pickling would drop.

    E.g. Ray's ``RuntimeError("Training has failed after N attempts")``,
    raised ``from`` the last worker failure once ``max_retries`` is used up.
    The proxy raises :attr:`error` ``from`` :attr:`cause` again.
    """

    def __init__(self, error: BaseException, cause: Optional[BaseException]):
        super().__init__(error, cause)
        self.error = error
        self.cause = cause

    def __reduce__(self):
        return (type(self), (self.error, self.cause))


def _picklable(error: Optional[BaseException]) -> Optional[BaseException]:
    """``error`` if it pickles; else a ``RuntimeError`` with its type, message and
    traceback, so that the carrier (and the final run status) still arrive."""
    if error is None:
        return None
    try:
        _compat.ray_cloudpickle.dumps(error)
        return error
    except Exception:
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        return RuntimeError(f"{type(error).__name__}: {error}\n{text}")


def _placement_group_id() -> Optional[str]:
    """This process's placement group id (hex), or ``None``: runs on a training worker."""
    return ray.get_runtime_context().get_placement_group_id()


class _Session:
    """One ``RemoteBackendExecutor``'s state in a host."""

    def __init__(self, executor: Any, coordinator: Any):
        self.executor = executor
        self.coordinator = coordinator  # actor handle, watched; None: not watched
        self.closed = False


class BackendExecutorHost:
    """Owns real ``BackendExecutor``s, one per session, and runs their calls.

    Runs in a host actor (shared by a Tuner's trials on one node, or
    dedicated to one executor), or in-process for tests. Arguments and return
    values are Ray's own. Errors are Ray's own too, except that a training
    worker's error (Ray's ``StartTraceback``) travels as a
    :class:`_TrainingWorkerError`, and an error with a ``__cause__`` as a
    :class:`_CarriedError`, so that their causes survive pickling.

    ``registry``: this host is a Tuner's first one (named after the Tuner), and
    hands out the hosts of other nodes (:meth:`host_for`), which it owns.
    """

    def __init__(self, registry: bool = False, capacity: int = HOST_CAPACITY):
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()
        self._capacity = capacity
        self._registry = registry
        self._children: dict[str, tuple[Any, Any]] = {}  # node id: (host, sentinel)
        # Its own lock: host_for may start an actor, and every call takes _lock.
        self._children_lock = threading.Lock()
        self._watcher: Optional[threading.Thread] = None
        self._env = _compat.executor_env()
        ctx = ray.get_runtime_context()
        self._node_id = ctx.get_node_id()
        self._in_actor = ctx.get_actor_id() is not None
        if self._in_actor:  # this process runs executors only
            _compat.use_capturing_worker_group()
            # Several trials' executors start at once in this actor's threads.
            _compat.connect_global_state()

    # -- sessions ------------------------------------------------------------

    def open(
        self,
        session_id: str,
        executor_cls: type[Any],
        kwargs: dict[str, Any],
        placement_group: Any = None,
        data_context: Any = None,
        coordinator: Any = None,
        env: Optional[dict[str, str]] = None,
    ) -> bool:
        """Build the session's executor; ``False`` if this host cannot take it.

        Runs in the host. Refused (the caller then starts a dedicated host):
        the host is full, or the caller's executor environment variables
        (``_compat.EXECUTOR_ENV_VARS``, read by Ray's executor in its own
        process) differ from this host's. ``coordinator``: an actor whose
        death ends the session (a shared host's trials).
        """
        if env is not None and env != self._env:
            return False
        with self._lock:  # the place is taken now, built below
            if len(self._sessions) >= self._capacity or session_id in self._sessions:
                return False
            self._sessions[session_id] = _Session(None, coordinator)
        try:
            executor = self._call_executor(lambda: executor_cls(**kwargs))
        except BaseException:
            with self._lock:
                self._sessions.pop(session_id, None)
            raise
        if placement_group is not None and hasattr(executor, "use_placement_group"):
            executor.use_placement_group(placement_group)
        if data_context is not None and hasattr(executor, "use_data_context"):
            executor.use_data_context(data_context)
        with self._lock:
            session = self._sessions[session_id]
            session.executor = executor
        if coordinator is not None:
            self._start_watching()
        return True

    def close(self, session_id: str) -> None:
        """End the session: its workers (if still running) go by force. Runs in the host.

        A call of the session still in progress (its coordinator died during
        ``start()``, say) shuts the executor down again when it returns.
        """
        with self._lock:
            session = self._sessions.pop(session_id, None)
            if session is None:
                return
            session.closed = True
        if session.executor is not None:
            self._force_shutdown(session_id, session)

    @staticmethod
    def _force_shutdown(session_id: str, session: _Session) -> None:
        executor = session.executor
        if not executor.is_started() and executor._placement_group is None:
            return  # already shut down (its coordinator's graceful shutdown)
        try:
            executor.shutdown(graceful_termination=False)
        except Exception:  # a worker already gone, or Ray 2.40's second shutdown
            logger.debug("closing executor session %s", session_id, exc_info=True)

    def sessions(self) -> int:
        """How many sessions are open here."""
        with self._lock:
            return len(self._sessions)

    @ray.method(concurrency_group=_SENTINEL_GROUP)
    def sentinel(self) -> None:
        """Never returns: its ``ObjectRef`` fails when this host dies (runs in the host)."""
        threading.Event().wait()

    def call(
        self, session_id: str, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """``method(*args, **kwargs)`` of the session's executor. Runs in the host."""
        with self._lock:
            session = self._sessions.get(session_id)
        if session is None or session.executor is None:  # closed, or not built
            raise _compat.InactiveWorkerGroupError()
        try:
            return self._call_executor(
                lambda: getattr(session.executor, method)(*args, **kwargs)
            )
        finally:
            if session.closed:  # closed while this call ran: what it started goes
                self._force_shutdown(session_id, session)

    @staticmethod
    def _call_executor(function: Callable[[], Any]) -> Any:
        try:
            return function()
        except _compat.StartTraceback as e:
            raise _TrainingWorkerError(
                getattr(e, "worker_rank", None), _picklable(e.__cause__)
            ) from None
        except Exception as e:
            if e.__cause__ is None:
                raise
            raise _CarriedError(_picklable(e), _picklable(e.__cause__)) from None

    # -- coordinators' lives (shared hosts) -----------------------------------

    def _start_watching(self) -> None:
        with self._lock:
            if self._watcher is not None:
                return
            self._watcher = threading.Thread(
                target=self._watch, name="ray_tt_ext-coordinators", daemon=True
            )
        self._watcher.start()

    def _watch(self) -> None:
        """Close the session of every coordinator that dies (a thread of the host).

        At most one ``__ray_ready__`` per coordinator per
        :data:`_WATCH_INTERVAL_S`: it answers between the trial's ``train()``
        calls, and fails once the actor is dead.
        """
        pending: dict[str, Any] = {}
        while True:
            try:
                self._watch_once(pending)
            except Exception:  # keep watching; a failed pass is retried
                logger.warning("watching the coordinators failed", exc_info=True)
                pending.clear()
            time.sleep(_WATCH_INTERVAL_S)

    def _watch_once(self, pending: dict[str, Any]) -> None:
        """One pass of :meth:`_watch` (runs in the host's watcher thread)."""
        with self._lock:
            watched = {
                sid: s.coordinator
                for sid, s in self._sessions.items()
                if s.coordinator is not None
            }
        for sid in [sid for sid in pending if sid not in watched]:
            del pending[sid]
        for sid, coordinator in watched.items():
            if sid not in pending:
                pending[sid] = _compat.actor_ready_ref(coordinator)
        if not pending:
            return
        refs = list(pending.values())
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=_WATCH_INTERVAL_S)
        ready_set = set(ready)
        for sid, ref in list(pending.items()):
            if ref not in ready_set:
                continue
            del pending[sid]
            try:
                ray.get(ref)
            except _compat.ActorDiedError:  # not ActorUnavailableError: may come back
                logger.info("executor session %s: its coordinator died", sid)
                self.close(sid)
            except Exception:
                logger.debug("watching session %s", sid, exc_info=True)

    # -- the Tuner's other hosts (registry only) ----------------------------------

    def host_for(self, node_id: str) -> Any:
        """The shared host for ``node_id``: this one, or one it starts and owns.

        Runs in a Tuner's first host. A host found dead (its sentinel failed) is
        replaced.
        """
        if node_id == self._node_id:
            return ray.get_runtime_context().current_actor
        if not self._registry:
            return None
        with self._children_lock:
            known = self._children.get(node_id)
            if known is not None:
                ready, _ = ray.wait([known[1]], timeout=0)
                if not ready:
                    return known[0]
            host = HostActor.options(**host_options(node_id)).remote()
            self._children[node_id] = (host, host.sentinel.remote())
            return host

    def placement_info(self, session_id: Optional[str] = None) -> dict[str, Any]:
        """Where this host runs (node, placement group, assigned resources,
        pid, sessions), and where the session's workers run."""
        ctx = ray.get_runtime_context()
        try:
            resources = ctx.get_assigned_resources()
        except AssertionError:  # in-process on a driver: nothing is assigned
            resources = {}
        info: dict[str, Any] = {
            "node_id": ctx.get_node_id(),
            "placement_group_id": ctx.get_placement_group_id(),
            "assigned_resources": resources,
            "pid": os.getpid(),
            "sessions": self.sessions(),
        }
        with self._lock:
            session = self._sessions.get(session_id) if session_id else None
        if session is not None and session.executor.is_started():
            info["worker_placement_group_ids"] = session.executor.worker_group.execute(
                _placement_group_id
            )
        return info


#: The host's actor class (``ray.remote(BackendExecutorHost)``): ``ray list
#: actors`` shows its class name, BackendExecutorHost. Not to be taken for the
#: proxy, :class:`ray_tt_ext._executor.RemoteBackendExecutor`. Concurrency
#: groups cannot be set in ``.options()``.
HostActor = ray.remote(concurrency_groups={_SENTINEL_GROUP: 2})(BackendExecutorHost)


def host_options(node_id: str, env: Optional[dict[str, str]] = None) -> dict[str, Any]:
    """A host's actor options: zero resources, pinned to ``node_id``, outside any
    placement group (the executor places its workers itself)."""
    return {
        "num_cpus": 0,
        "num_gpus": 0,
        "memory": 0,
        "max_restarts": 0,  # a restarted host would have lost its workers
        "max_task_retries": 0,
        # One thread per session's call, and a few for open/close/host_for.
        "max_concurrency": HOST_CAPACITY + 8,
        # Node affinity: outside the caller's placement group whatever it captures.
        "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
        # Train V1 in the host, and so in the workers it starts; a dedicated
        # host also gets its caller's executor environment variables.
        "runtime_env": {"env_vars": {**_compat.train_v1_runtime_env_vars(), **(env or {})}},
    }
