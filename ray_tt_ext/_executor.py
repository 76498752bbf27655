"""A remote BackendExecutor (ray-project/ray#20123): Ray's executor outside the trial's process.

Shape (as xgboost_ray's ``RayXGBoostActor`` / ``_RemoteRayXGBoostActor`` /
``_create_actor``):

* :mod:`ray_tt_ext._executor_host` (the host's process):
  :class:`~ray_tt_ext._executor_host._HostedBackendExecutor`, Ray's
  ``BackendExecutor`` able to start its workers in a placement group it
  borrows (the trial's) without owning it, with a ``get_next`` method the
  coordinator calls; :class:`~ray_tt_ext._executor_host.BackendExecutorHost`,
  a plain class that owns real executors, one per *session* (one
  ``RemoteBackendExecutor``), testable in-process; and
  :data:`~ray_tt_ext._executor_host.HostActor`, its actor class (its class
  name contains ``BackendExecutor``).
* :mod:`ray_tt_ext._executor_hosts` (driver): :class:`ExecutorHosts`, a
  Tuner's shared hosts: one host per node, started by the first trial on that
  node that asks (the host on the driver's node when the fit begins), all gone
  when the fit returns.
* This module (coordinator): :class:`RemoteBackendExecutor`, the drop-in for Ray's ``BackendExecutor``
  that the coordinator uses: same constructor; every call proxied
  synchronously to its session in a host, except the reading of results,
  which it does itself as Ray's executor does (no extra hop per report).

Where a session lives. In a trial of a ``ray_tt_ext.Tuner``, the Tuner's host
on the trial's node (a zero-CPU actor the trials there share: a Ray worker
process per trial costs time and memory, docs/benchmarks.md, section
``executor_trials``). Anywhere else (a trainer's own ``fit()``, Ray's
``Tuner``, direct use, a full or lost shared host), a dedicated host of its
own, pinned to the caller's node, owned by the caller. Either way the host runs outside the caller's placement group, with
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
import logging
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Optional

import ray
from ray.exceptions import RayActorError, RayTaskError
from ray.util.placement_group import get_current_placement_group

from ray_tt_ext import _compat
from ray_tt_ext._executor_host import (
    HOST_CAPACITY,
    HostActor,
    _CarriedError,
    _HostedBackendExecutor,
    _TrainingWorkerError,
    host_options,
)

logger = logging.getLogger("ray_tt_ext")

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


def _scheduling_options() -> dict[str, Any]:
    """A dedicated host's actor options, on the caller's node (see the module docstring)."""
    return host_options(ray.get_runtime_context().get_node_id(), _compat.executor_env())


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


class ExecutorActorDiedError(RuntimeError):
    """The remote BackendExecutor's host actor died; the trial fails (and may retry)."""


class RemoteBackendExecutor:
    """Drop-in for Ray's ``BackendExecutor`` that runs it in a zero-CPU host actor.

    Same constructor, methods and public attributes as Ray's
    ``BackendExecutor`` (Ray 2.40 .. 2.60). Created and called by the
    coordinator (the trial actor); each call blocks until the host answers,
    except :meth:`get_next_results`, which reads the workers' results itself.
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
        # The run's workers, in rank order, while the coordinator reads them
        # directly (see get_next_results); None: ask the host.
        self._readers: Optional[list[_compat.WorkerReader]] = None
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
        host = HostActor.options(**_scheduling_options()).remote(capacity=1)
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
        """The result of ``submit(actor)``, the host's call for ``method``.

        A ``TrainingWorkerError`` (Ray's restart of the workers, from any
        call) drops the readers: the workers they call are gone, and training
        starts again with ``start_training``.
        """
        try:
            return self._wait_for_host(method, submit)
        except _compat.TrainingWorkerError:
            self._readers = None
            raise

    def _wait_for_host(self, method: str, submit: Callable[[Any], Any]) -> Any:
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
        self._call("start_training", *args, **kwargs)  # raises: the readers stay
        worker_group = self._call("worker_group_to_read")
        if worker_group is None:
            self._readers = None
        else:
            self._readers = _compat.worker_readers(worker_group)

    def get_next_results(self) -> Optional[list[Any]]:
        """Replaces ``BackendExecutor.get_next_results``; runs in the coordinator.

        Reads each worker's next result itself, as Ray's executor does in the
        coordinator (the workers' ``get_next``, what Ray's ``check_for_failure``
        does, then Ray's checks): a report does not pass through the host. The
        workers report synchronously and each is let go (its ``let_go``) once
        its result is here, not before it has left the worker as with Ray's
        executor: a worker that dies right after its ``train.report()``
        returned has handed its result over.
        Only a worker's failure goes to the host, whose executor handles it as
        Ray's does (its ``get_with_failure_handling`` on the same calls:
        restart, then ``TrainingWorkerError``). Before ``start_training``, after
        ``shutdown()`` or with workers of a ``train_cls`` of the caller's, the
        host's executor answers (Ray's code, Ray's errors).
        """
        readers = self._readers
        if readers is None:
            return self._call("get_next_results")
        futures = [reader.get_next() for reader in readers]
        if self._wait_and_let_go(readers, futures):
            results = ray.get(futures)
        else:  # a worker died: the host restarts the workers, as Ray's executor does,
            # and raises TrainingWorkerError (training starts again on new workers)
            self._readers = None
            session = self._session
            results = self._wait(
                "get_next_results",
                lambda actor: actor.call.remote(
                    session, "get_with_failure_handling", (futures,), {}
                ),
            )
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

    def _wait_and_let_go(
        self, readers: list[_compat.WorkerReader], futures: list[Any]
    ) -> bool:
        """Replaces Ray's ``check_for_failure`` (Ray Train's utils module)
        for the remote executor's reads: the same checks on the workers'
        ``get_next`` calls, letting each worker go on the moment its own result
        is here; runs in the coordinator.

        ``False`` when a worker died (``RayActorError``); a worker's other error
        is Ray's ``StartTracebackWithWorkerRank`` from it, as Ray's raises it.
        Each worker is let go (its ``let_go``, fire and forget, run before its
        next ``get_next``) once the coordinator holds that worker's result, not
        once it holds every worker's: as with Ray's executor, a worker does not
        wait for the others' reports (a loop where one rank passes its report
        before another reaches its own runs as it does with Ray's).
        """
        pending = list(futures)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                rank = futures.index(ref)
                try:
                    result = ray.get(ref)
                except RayActorError:
                    logger.info("Worker %s has failed.", rank)
                    return False
                except Exception as exc:  # the worker's own error, as Ray raises it
                    raise _compat.StartTracebackWithWorkerRank(worker_rank=rank) from exc
                if result is not None:
                    readers[rank].let_go()
        return True

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
