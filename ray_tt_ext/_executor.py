"""A remote BackendExecutor (ray-project/ray#20123): Ray's executor outside the trial's process.

Shape (as xgboost_ray's ``RayXGBoostActor`` / ``_RemoteRayXGBoostActor`` /
``_create_actor``):

* :class:`_HostedBackendExecutor` — Ray's ``BackendExecutor``, able to start
  its workers in a placement group it borrows (the trial's) without owning it,
  and starting them with a ``get_next`` method the coordinator calls.
* :class:`BackendExecutorHost` — a plain class that owns real executors, one
  per *session* (one ``RemoteBackendExecutor``), and exposes their methods;
  testable in-process.
* :data:`_RemoteBackendExecutor` — ``ray.remote(BackendExecutorHost)``, the
  private actor class (its class name contains ``BackendExecutor``).
* :class:`ExecutorHosts` — a Tuner's shared hosts (driver): one host per node,
  started by the first trial on that node that asks (the host on the driver's
  node when the fit begins), all gone when the fit returns.
* :class:`RemoteBackendExecutor` — the drop-in for Ray's ``BackendExecutor``
  that the coordinator uses: same constructor; every call proxied
  synchronously to its session in a host, except the reading of results,
  which it does itself as Ray's executor does (no extra hop per report).

Where a session lives. In a trial of a ``ray_tt_ext.Tuner``, the Tuner's host
on the trial's node (a zero-CPU actor the trials there share: a Ray worker
process per trial is a second or two and some 200 MiB more per trial, see
docs/benchmarks.md). Anywhere else (a
trainer's own ``fit()``, Ray's ``Tuner``, direct use, a full or lost shared
host), a dedicated host of its own, pinned to the caller's node, owned by the
caller. Either way the host runs outside the caller's placement group, with
``num_cpus=0``; the executor starts its workers where Ray's executor in the
caller would: in the caller's placement group if the caller captures child
tasks (the workers capture theirs too), else in a placement group of its own.

Isolation. Each session has its own executor and workers; an error, stop or
shutdown of one touches no other. A shared host watches each session's
coordinator and shuts the session's workers down if the coordinator dies. A
host that dies takes its sessions' workers with it (it owns them): each of
its trials sees an executor death, and retries as ``FailureConfig`` says (on
a new host, or a dedicated one).
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import logging
import os
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Optional

import ray
from ray.exceptions import RayActorError, RayTaskError
from ray.util.placement_group import get_current_placement_group
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ray_tt_ext import _compat

logger = logging.getLogger("ray_tt_ext")


#: The host's concurrency group for ``BackendExecutorHost.sentinel``.
_SENTINEL_GROUP = "sentinel"
#: Sessions one shared host takes at once (more trials on the node get a
#: dedicated host each). Each holds a thread of the host's while it waits.
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
            host = _RemoteBackendExecutor.options(**_host_options(node_id)).remote()
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


# `ray list actors` shows the class name, BackendExecutorHost. Concurrency
# groups cannot be set in `.options()`.
_RemoteBackendExecutor = ray.remote(concurrency_groups={_SENTINEL_GROUP: 2})(
    BackendExecutorHost
)


def _host_options(node_id: str, env: Optional[dict[str, str]] = None) -> dict[str, Any]:
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


def _scheduling_options() -> dict[str, Any]:
    """A dedicated host's actor options, on the caller's node (see the module docstring)."""
    return _host_options(ray.get_runtime_context().get_node_id(), _compat.executor_env())


# ---------------------------------------------------------------------------
# A Tuner's shared hosts (driver)
# ---------------------------------------------------------------------------

_HOSTS: contextvars.ContextVar[Optional[str]] = contextvars.ContextVar(
    "ray_tt_ext_executor_hosts", default=None
)


@contextlib.contextmanager
def using_hosts(name: Optional[str]) -> Iterator[None]:
    """Executors made in this context (thread) look for the shared hosts ``name``
    (:func:`hosts_name` of the trial's experiment; ``None``: none).

    Runs in the trial actor, around the trainer's training loop.
    """
    token = _HOSTS.set(name)
    try:
        yield
    finally:
        _HOSTS.reset(token)


def hosts_name(experiment_path: str) -> str:
    """The name of the shared executor hosts of the experiment at ``experiment_path``.

    The Tuner's driver and its trials both know the experiment's folder
    (``StorageContext.experiment_fs_path``); the trainable's registered class
    is no key (Tune registers it by name, and a second Tuner of the same
    trainer class in the same job replaces it).
    """
    digest = hashlib.sha1(experiment_path.encode()).hexdigest()[:20]
    return f"ray_tt_ext_executor_hosts_{digest}"


class ExecutorHosts:
    """The shared executor hosts of one fit (driver, or the Ray Client Tuner actor).

    :meth:`running` starts the first host on this node, named
    :func:`hosts_name` of the experiment, for the length of a fit, and kills it
    at the end: the hosts it started on other nodes, and every worker any of
    them owns, go with it. Nothing outlives the fit.
    """

    def __init__(self, experiment_path: str) -> None:
        self.name = hosts_name(experiment_path)

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        registry = self._start()
        try:
            yield
        finally:
            ray.kill(registry, no_restart=True)

    def _start(self) -> Any:
        options = _host_options(ray.get_runtime_context().get_node_id())
        deadline = time.monotonic() + 10.0
        while True:  # a previous fit's host may still be releasing the name
            try:
                return _RemoteBackendExecutor.options(name=self.name, **options).remote(
                    registry=True
                )
            except ValueError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        logger.warning(message)


def _shared_host() -> Any:
    """The shared host for this trial's node, or ``None`` (runs in the coordinator)."""
    name = _HOSTS.get()
    if name is None or _compat.current_actor_or_none() is None:
        return None
    try:
        registry = ray.get_actor(name)
    except ValueError:  # none: not a ray_tt_ext.Tuner's fit (trainer.fit(), Ray's Tuner)
        return None
    try:
        return ray.get(registry.host_for.remote(ray.get_runtime_context().get_node_id()))
    except Exception:  # it died: a dedicated host then
        logger.debug("no shared executor host %s", name, exc_info=True)
        _warn_once(
            "ray_tt_ext: the Tuner's shared executor host died: this trial's "
            "remote executor gets a host of its own."
        )
        return None


# ---------------------------------------------------------------------------
# The proxy (coordinator)
# ---------------------------------------------------------------------------


class ExecutorActorDiedError(RuntimeError):
    """The remote BackendExecutor's host actor died; the trial fails (and may retry)."""


class RemoteBackendExecutor:
    """Drop-in for Ray's ``BackendExecutor`` that runs it in a zero-CPU host actor.

    Same constructor, methods and public attributes as Ray's
    ``BackendExecutor`` (Ray 2.40 .. 2.60). Created and called by the
    coordinator (the trial actor); each call blocks until the host answers.
    Errors raised by the real executor are raised again here as the local
    executor raises them: the same exception type, message and cause (after
    ``shutdown()``, ``InactiveWorkerGroupError``; a worker that dies,
    ``TrainingWorkerError`` from ``get_next_results`` after Ray's restart), and
    an error in the user's training function as Ray's
    ``StartTracebackWithWorkerRank`` with the user's error as its cause, so
    ``TrainingIterator``'s error handling (final run status, the user's error
    in ``Result.error``) works as with the local executor. Only the host's own
    death is :class:`ExecutorActorDiedError`, raised at once (no call waits on
    a dead actor).

    After ``shutdown()`` it can ``start()`` again, as Ray's can. :meth:`close`
    (ray_tt_ext's trainers call it when their training loop ends) also gives
    back its place in the host (a dedicated host goes).
    """

    _executor_cls: type[Any] = _HostedBackendExecutor

    def __init__(
        self,
        backend_config: Any,
        trial_info: Optional[Any] = None,
        num_workers: int = 1,
        resources_per_worker: Optional[dict[str, float]] = None,
        max_retries: int = 3,
    ):
        # Ray's public attributes, here as on Ray's executor.
        self._backend_config = backend_config
        self._backend = backend_config.backend_cls()
        self._kwargs = dict(
            backend_config=backend_config,
            trial_info=trial_info,
            num_workers=num_workers,
            resources_per_worker=resources_per_worker,
            max_retries=max_retries,
        )
        self._actor: Any = None
        self._dedicated = False
        self._session = ""
        # Each worker's get_next while the run's workers are read directly
        # (see get_next_results); None: ask the host.
        self._readers: Optional[list[Any]] = None
        self._open()

    def _open(self) -> None:
        """Open a new session of this executor: in the shared host, else a
        dedicated one."""
        self._session = uuid.uuid4().hex
        placement_group = get_current_placement_group()
        if placement_group is not None and _compat.captures_child_tasks():
            borrowed = _compat.BorrowedPlacementGroup.of(placement_group)
        else:  # Ray's executor would make a placement group of its own
            borrowed = None
        args = (self._session, self._executor_cls, self._kwargs, borrowed)
        data_context = _compat.data_context_if_used()
        host = _shared_host()
        if host is not None:
            self._actor, self._dedicated = host, False
            try:
                opened = self._wait(
                    "__init__",
                    lambda actor: actor.open.remote(
                        *args,
                        data_context=data_context,
                        coordinator=_compat.current_actor_or_none(),
                        env=_compat.executor_env(),
                    ),
                )
            except ExecutorActorDiedError:
                opened = False  # the shared host died meanwhile
            if opened:
                return
            _warn_once(
                "ray_tt_ext: a trial's remote executor got a host of its own: the "
                f"node's shared host is full ({HOST_CAPACITY} trials), gone, or runs with other "
                "Train executor environment variables (TRAIN_ENABLE_*). It works the "
                "same, at the cost of one more actor process."
            )
        host = _RemoteBackendExecutor.options(**_scheduling_options()).remote(capacity=1)
        self._actor, self._dedicated = host, True
        self._wait(
            "__init__", lambda actor: actor.open.remote(*args, data_context=data_context)
        )

    @property
    def actor(self) -> Any:
        """The host actor's handle (None after :meth:`close`)."""
        return self._actor

    @property
    def session(self) -> str:
        """This executor's session id in its host."""
        return self._session

    @property
    def shares_host(self) -> bool:
        """Whether its host is a Tuner's shared host (else a dedicated one)."""
        return self._actor is not None and not self._dedicated

    @property
    def worker_group(self) -> Any:
        """Ray's ``BackendExecutor.worker_group``: a copy of the host's (handles
        to the same workers), or an ``InactiveWorkerGroup`` when not started."""
        return self.get_worker_group()

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        session = self._session
        return self._wait(
            method, lambda actor: actor.call.remote(session, method, args, kwargs)
        )

    def _wait(self, method: str, submit: Callable[[Any], Any]) -> Any:
        """The result of ``submit(actor)``, the host's call for ``method``."""
        if self._actor is None:  # closed: inactive, as Ray's after shutdown
            raise _compat.InactiveWorkerGroupError()
        try:
            return ray.get(submit(self._actor))
        except RayTaskError as e:
            # The host is alive and raised: re-raise what it raised, as a
            # local executor would. Checked before RayActorError: a worker's
            # death re-raised by the executor is a RayTaskError(ActorDiedError),
            # which is a RayActorError too, but names the worker, not the host.
            cause = getattr(e, "cause", None)
            if isinstance(cause, _TrainingWorkerError):
                raise cause.as_start_traceback() from cause.error
            if isinstance(cause, _CarriedError):
                raise cause.error from cause.cause
            if isinstance(cause, BaseException):
                raise cause from None
            raise
        except RayActorError as e:
            raise ExecutorActorDiedError(
                f"The remote BackendExecutor actor died during {method}(): {e}. "
                "The trial fails; with FailureConfig(max_failures>=1) Tune restarts "
                "it from its latest checkpoint."
            ) from None

    # The BackendExecutor API, as TrainingIterator and DataParallelTrainer use it.

    def start(
        self,
        initialization_hook: Optional[Callable[[], None]] = None,
        train_cls: Optional[type] = None,
        train_cls_args: Optional[tuple] = None,
        train_cls_kwargs: Optional[dict] = None,
    ) -> None:
        if self._actor is None:  # after close(): a new session
            self._open()
        self._call(
            "start",
            initialization_hook=initialization_hook,
            train_cls=train_cls,
            train_cls_args=train_cls_args,
            train_cls_kwargs=train_cls_kwargs,
        )

    def start_training(self, *args: Any, **kwargs: Any) -> None:
        self._readers = None
        self._call("start_training", *args, **kwargs)
        worker_group = self._call("worker_group_to_read")
        if worker_group is not None:
            self._readers = _compat.get_next_methods(worker_group)

    def get_next_results(self) -> Optional[list[Any]]:
        """Replaces ``BackendExecutor.get_next_results``; runs in the coordinator.

        Reads each worker's next result itself, as Ray's executor does in the
        coordinator (the workers' ``get_next``, Ray's ``check_for_failure``,
        then its checks), so a report costs what it costs with Ray's executor:
        it does not pass through the host. Only a worker's failure goes to
        the host, whose executor handles it as Ray's does (its
        ``get_with_failure_handling`` on the same calls: restart, then
        ``TrainingWorkerError``). Before ``start_training``, after
        ``shutdown()`` or with workers of a ``train_cls`` of the caller's, the
        host's executor answers (Ray's code, Ray's errors).
        """
        readers = self._readers
        if readers is None:
            return self._call("get_next_results")
        futures = [get_next.remote() for get_next in readers]
        ok, _ = _compat.check_for_failure(futures)  # a user's error: Ray's StartTraceback
        if ok:
            results = ray.get(futures)
        else:  # a worker died: the host restarts the workers, as Ray's executor does,
            self._readers = None  # and raises TrainingWorkerError (training starts again)
            results = self._call("get_with_failure_handling", futures)
        if any(r is None for r in results):
            if not all(r is None for r in results):
                raise RuntimeError(
                    "Some workers returned results while others didn't. Make sure "
                    "that `session.report()` are called the same number of times "
                    "on all workers."
                )
            return None
        return results

    def pause_reporting(self) -> None:
        self._call("pause_reporting")

    def finish_training(self) -> Any:
        return self._call("finish_training")

    def report_final_run_status(self, *args: Any, **kwargs: Any) -> None:
        self._call("report_final_run_status", *args, **kwargs)

    def is_started(self) -> bool:
        return self._actor is not None and self._call("is_started")

    def get_worker_group(self) -> Any:
        if self._actor is None:
            return _compat.InactiveWorkerGroup()
        return self._call("get_worker_group")

    def _get_num_failures(self) -> int:
        return self._call("_get_num_failures")

    def shutdown(self, graceful_termination: bool = True) -> None:
        """Shut the workers down, as Ray's (the session stays: ``start()`` may follow)."""
        self._readers = None
        if self._actor is None:
            return
        try:
            self._call("shutdown", graceful_termination=graceful_termination)
        except ExecutorActorDiedError:
            pass  # its workers died with it (the host owned them)

    def close(self) -> None:
        """Shut down by force what still runs and give the session back. Idempotent.

        A dedicated host goes with it. Runs in the coordinator.
        """
        host, self._actor = self._actor, None
        self._readers = None
        if host is None:
            return
        try:
            ray.get(host.close.remote(self._session))
        except (RayActorError, RayTaskError):
            pass  # the host is gone, and the workers with it
        finally:
            if self._dedicated:
                ray.kill(host, no_restart=True)

    def __del__(self) -> None:
        # A session nobody closed (direct use): give it back, without waiting.
        # A dedicated host goes by itself with its last handle.
        host = getattr(self, "_actor", None)
        if host is not None and not getattr(self, "_dedicated", True):
            try:
                host.close.remote(self._session)
            except Exception:
                pass
