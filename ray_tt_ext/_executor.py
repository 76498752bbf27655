"""A remote BackendExecutor (seed 002): Ray's executor in its own zero-CPU actor.

Shape (as xgboost_ray's ``RayXGBoostActor`` / ``_RemoteRayXGBoostActor`` /
``_create_actor``):

* :class:`_PrefetchingBackendExecutor` — Ray's ``BackendExecutor``, asking the
  workers for the next result early (no extra round trip per report, no
  worker running further ahead than with Ray's executor).
* :class:`BackendExecutorHost` — a plain class that owns one real
  ``BackendExecutor`` and exposes its methods; testable in-process.
* :data:`_RemoteBackendExecutor` — ``ray.remote(BackendExecutorHost)``, the
  private actor class (its class name contains ``BackendExecutor``).
* :func:`_create_executor_actor` — the factory; every scheduling option is set
  explicitly.
* :class:`RemoteBackendExecutor` — the drop-in for Ray's ``BackendExecutor``
  that the coordinator uses: same constructor, every call proxied
  synchronously to the actor.

Placement: inside a trial, the actor joins bundle 0 of the trial's placement
group (the coordinator's own bundle, hence the coordinator's node) with
``num_cpus=0``, and captures child tasks, so the training workers it starts
land in the trial's worker bundles exactly as when the executor runs inside
the coordinator. It takes no CPU from the trial or from other trials. Outside
a placement group it is pinned to the caller's node with hard node affinity.
The actor is owned by the coordinator: if the coordinator dies, Ray kills it,
and with it the workers it owns.
"""

from __future__ import annotations

import logging
import os
import threading
import traceback
from collections.abc import Callable
from typing import Any, Optional

import ray
from ray.exceptions import RayActorError, RayTaskError
from ray.util.placement_group import get_current_placement_group
from ray.util.scheduling_strategies import (
    NodeAffinitySchedulingStrategy,
    PlacementGroupSchedulingStrategy,
)

from ray_tt_ext import _compat

logger = logging.getLogger("ray_tt_ext")


#: How long a graceful shutdown waits for requests issued early (WorkerGroup's patience).
_SHUTDOWN_PATIENCE_S = 5.0

#: The executor actor's concurrency group for ``BackendExecutorHost.wait_for_stop``.
_STOP_GROUP = "stop_signal"


class _PrefetchingBackendExecutor(_compat.BackendExecutor):
    """Ray's ``BackendExecutor`` that asks the workers for the next result early.

    Runs in the executor actor. Ray's local executor, on each
    ``get_next_results``, calls ``get_next`` on every worker and waits; the
    worker hands over the result it has queued and is released to compute the
    next one. A remote executor done the same way puts one more round trip
    (coordinator to executor actor) on every report. This class removes it
    without letting the workers run further ahead than Ray allows:

    * the workers report synchronously (their ``get_next`` releases the
      training thread when it *starts*, then waits for the result);
    * when the coordinator asks for result *k*, the executor first issues the
      request for *k + 1*, then waits for *k* (requested the same way during
      the previous call). On each worker the new request queues behind the
      one for *k* and starts as soon as *k* is taken, releasing the training
      thread there and then: exactly when Ray's executor, whose ``get_next``
      for *k* is issued when the coordinator asks and releases the worker as
      it takes *k*, would release it;
    * so result *k* is usually waiting in the executor already when the
      coordinator asks, one hop away, as it would wait in the worker's queue
      with Ray's executor, and no worker waits for a round trip through the
      executor before it may go on.

    A worker is therefore released at the same point as with Ray's executor
    and still holds at most one unconsumed result, so a trial Tune stops after
    result *k* has run the same steps (and written the same checkpoints) with
    either executor. Failures of a call issued early surface on the next
    ``get_next_results``, through Ray's ``get_with_failure_handling``; results
    already there are taken with one ``ray.get`` (Ray's waits and gets per
    worker first), which falls back to Ray's on anything but success.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        """Extends ``BackendExecutor.__init__``; runs in the executor actor."""
        super().__init__(*args, **kwargs)
        self._next_results: Optional[list[Any]] = None  # ObjectRefs, one per worker
        self._stop_signal: Optional[_StopSignal] = None
        # The workers' own get_next methods while they run, see start()
        self._get_next: Optional[list[Any]] = None

    def use_stop_signal(self, signal: _StopSignal) -> None:
        """Let early requests go at shutdown through ``signal`` (see :meth:`shutdown`).

        Set by :class:`BackendExecutorHost` in the executor actor, before
        ``start_training``. Without one (the executor used in-process, as some
        tests do), a graceful shutdown waits for early requests instead.
        """
        self._stop_signal = signal

    def start(
        self,
        initialization_hook: Optional[Callable[[], None]] = None,
        train_cls: Optional[type] = None,
        train_cls_args: Optional[tuple] = None,
        train_cls_kwargs: Optional[dict] = None,
    ) -> None:
        """Overrides ``BackendExecutor.start``; runs in the executor actor.

        Ray's, with workers of :class:`_compat.RayTrainWorker` (Ray's, with a
        ``get_next`` method) unless a ``train_cls`` is given. Ray's restart
        after a worker failure calls this again, without one.
        """
        self._get_next = None
        super().start(
            initialization_hook,
            _compat.RayTrainWorker if train_cls is None else train_cls,
            train_cls_args,
            train_cls_kwargs,
        )
        if train_cls is None:
            self._get_next = _compat.get_next_methods(self.worker_group)

    def _request_next_results(self) -> list[Any]:
        if self._get_next is not None:
            return [get_next.remote() for get_next in self._get_next]
        # Ray's way: a train_cls of the caller's, or after shutdown (Ray's error).
        return self.worker_group.execute_async(_compat.worker_get_next)

    def start_training(self, *args: Any, **kwargs: Any) -> None:
        """Overrides ``BackendExecutor.start_training``; runs in the executor actor.

        Ray's, then the workers switch to synchronous reporting and the first
        result is requested (``get_next`` does not release before the first
        result, so this lets no worker run ahead).
        """
        self._next_results = None
        super().start_training(*args, **kwargs)
        stop = [self._stop_signal.ref] if self._stop_signal is not None else None
        self.get_with_failure_handling(
            self.worker_group.execute_async(_compat.worker_report_synchronously, stop)
        )
        self._next_results = self._request_next_results()

    def get_next_results(self) -> Optional[list[Any]]:
        """Overrides ``BackendExecutor.get_next_results``; runs in the executor actor.

        Same contract as Ray's (a result per worker, ``None`` once every
        worker's training function returned, the same error if only some
        did), served from the request issued during the previous call; the
        next request is issued before this one's results are awaited.
        """
        futures, self._next_results = self._next_results, None
        if futures is None:  # not started, or after the final None: as Ray does
            futures = self._request_next_results()
        # The coordinator is asking now: the next request goes out before this
        # one's results are awaited. On each worker it queues behind the
        # current get_next and starts the moment that one has taken its result,
        # releasing the training thread there and then, as Ray's get_next does
        # (no round trip through this actor before a worker may go on).
        self._next_results = self._request_next_results()
        try:  # usually ready by now: one get, not Ray's wait-and-get per worker
            results = ray.get(futures, timeout=0)
        except Exception:  # not ready, or failed: Ray's own waiting and handling,
            results = None  # outside this block (no chained "during handling")
        if results is None:
            results = self.get_with_failure_handling(futures)
        if any(r is _compat.WorkerSignal.STOPPED for r in results):  # never before shutdown
            raise RuntimeError("get_next_results() called after shutdown began")
        if any(r is None for r in results):
            if not all(r is None for r in results):
                raise RuntimeError(
                    "Some workers returned results while others didn't. Make sure "
                    "that `session.report()` are called the same number of times "
                    "on all workers."
                )
            # Training is over: the request just issued finds no training
            # thread and returns None at once (_compat.worker_get_next).
            self._next_results = None
            return None
        return results

    def shutdown(self, graceful_termination: bool = True) -> None:
        """Overrides ``BackendExecutor.shutdown``; runs in the executor actor.

        A request issued early occupies each worker's only task thread until
        the training function reports again, and the backend's cleanup
        (``on_shutdown``, e.g. Torch's process-group teardown) is a call on
        every worker that would queue behind it. So a graceful shutdown first
        lets those requests go: it sets the stop signal, each worker's
        ``get_next`` returns :attr:`WorkerSignal.STOPPED` at once (see
        ``_compat.worker_report_synchronously``), and Ray's graceful shutdown
        follows: ``on_shutdown`` on every worker, then the workers exit,
        stopping the step in progress where Ray's executor stops it (unless
        it had already reached its report, it writes no checkpoint the driver
        never records).

        Without a stop signal (in-process use) it waits for the requests
        instead, up to Ray's own 5 s worker patience, and falls back to Ray's
        forced shutdown (no ``on_shutdown``) if they do not come.
        """
        pending, self._next_results = self._next_results, None
        self._get_next = None  # the workers go: no handles kept
        if graceful_termination and self._stop_signal is not None:
            # Also when nothing is pending here: after a worker's death the
            # others may still be inside the get_next that failed.
            self._stop_signal.set()
        if pending and graceful_termination:
            _, not_done = ray.wait(
                pending, num_returns=len(pending), timeout=_SHUTDOWN_PATIENCE_S
            )
            graceful_termination = not not_done
        super().shutdown(graceful_termination=graceful_termination)


class _StopSignal:
    """An ``ObjectRef`` (:attr:`ref`) that becomes ready when :meth:`set` is called.

    Made by :class:`BackendExecutorHost` in the executor actor: :attr:`ref` is
    the actor's own call of ``wait_for_stop`` (its own concurrency group, so
    it does not hold up the executor's calls), which returns once ``set()``
    sets the event it waits on.
    """

    def __init__(self, ref: Any, event: threading.Event):
        self.ref = ref
        self._event = event

    def set(self) -> None:
        self._event.set()


class _TrainingWorkerError(Exception):
    """A training worker's error, carried across the executor actor's boundary.

    Ray's executor raises ``StartTracebackWithWorkerRank(rank) from error``
    for an error in the user's training function; the coordinator's
    ``TrainingIterator`` catches it (``except StartTraceback``), reports the
    final run status and re-raises the user's error without Ray's frames.
    ``StartTracebackWithWorkerRank`` pickles its rank only, so its
    ``__cause__`` (the user's error) would be lost on the way from the
    executor actor to the coordinator. This carrier pickles both; the
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


class BackendExecutorHost:
    """Owns a real ``BackendExecutor`` and exposes the calls the coordinator makes.

    Runs in the executor actor (or in-process, for tests). Arguments and
    return values are Ray's own. Errors are Ray's own too, except that a
    training worker's error (Ray's ``StartTraceback``) travels as a
    :class:`_TrainingWorkerError`, so that its cause survives pickling.
    """

    def __init__(
        self, executor_cls: type[Any], kwargs: dict[str, Any], stop_signal: bool = False
    ):
        """``stop_signal``: this is the executor actor (``_create_executor_actor``),
        whose ``wait_for_stop`` makes the executor's stop signal."""
        self._executor = executor_cls(**kwargs)
        self._stopping = threading.Event()
        if stop_signal and hasattr(self._executor, "use_stop_signal"):
            this_actor = ray.get_runtime_context().current_actor
            self._executor.use_stop_signal(
                _StopSignal(this_actor.wait_for_stop.remote(), self._stopping)
            )

    @ray.method(concurrency_group=_STOP_GROUP)
    def wait_for_stop(self) -> None:
        """Returns once the executor starts shutting down (its stop signal).

        Runs in the executor actor, in its own concurrency group of one
        thread, beside the executor's calls; called once, by the actor itself.
        """
        self._stopping.wait()

    def get_next_results(self) -> Any:
        """``call("get_next_results", (), {})``, without arguments to serialize.

        Runs in the executor actor; the coordinator's call on every report
        (about 0.1 ms less to send than :meth:`call`, on 2 cores).
        """
        return self.call("get_next_results", (), {})

    def call(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            return getattr(self._executor, method)(*args, **kwargs)
        except _compat.StartTraceback as e:
            raise _TrainingWorkerError(
                getattr(e, "worker_rank", None), _picklable(e.__cause__)
            ) from None

    def placement_info(self) -> dict[str, Any]:
        """Where this actor runs: node, placement group, assigned resources."""
        ctx = ray.get_runtime_context()
        try:
            resources = ctx.get_assigned_resources()
        except AssertionError:  # in-process on a driver: nothing is assigned
            resources = {}
        return {
            "node_id": ctx.get_node_id(),
            "placement_group_id": ctx.get_placement_group_id(),
            "assigned_resources": resources,
            "pid": os.getpid(),
        }


# `ray list actors` shows the class name, BackendExecutorHost. Concurrency
# groups cannot be set in `.options()`.
_RemoteBackendExecutor = ray.remote(concurrency_groups={_STOP_GROUP: 1})(
    BackendExecutorHost
)


def _scheduling_options() -> dict[str, Any]:
    """Where the executor actor goes: see the module docstring."""
    placement_group = get_current_placement_group()
    if placement_group is not None:
        strategy: Any = PlacementGroupSchedulingStrategy(
            placement_group=placement_group,
            # Bundle 0 is the coordinator's own bundle in a Tune trial.
            placement_group_bundle_index=0,
            # Workers started by the executor go into the trial's bundles.
            placement_group_capture_child_tasks=True,
        )
    else:
        strategy = NodeAffinitySchedulingStrategy(
            node_id=ray.get_runtime_context().get_node_id(), soft=False
        )
    return {
        "num_cpus": 0,
        "num_gpus": 0,
        "memory": 0,
        "max_restarts": 0,  # a restarted executor would have lost its workers
        "max_task_retries": 0,
        # Calls run one at a time (each caller waits for its call); the class
        # adds one thread, for BackendExecutorHost.wait_for_stop only.
        "max_concurrency": 1,
        "scheduling_strategy": strategy,
        # Train V1 in the executor, and so in the workers it starts.
        "runtime_env": {"env_vars": _compat.train_v1_runtime_env_vars()},
    }


def _create_executor_actor(executor_cls: type[Any], kwargs: dict[str, Any]) -> Any:
    """Start the executor actor on the caller's node (coordinator)."""
    return _RemoteBackendExecutor.options(**_scheduling_options()).remote(
        executor_cls, kwargs, stop_signal=True
    )


class ExecutorActorDiedError(RuntimeError):
    """The remote BackendExecutor actor died; the trial fails (and may retry)."""


class RemoteBackendExecutor:
    """Drop-in for Ray's ``BackendExecutor`` that runs it in a zero-CPU actor.

    Same constructor and methods as Ray's ``BackendExecutor`` (Ray 2.40 ..
    2.60). Created and called by the coordinator (the trial actor); each call
    blocks until the actor answers. Errors raised by the real executor are
    raised again here as the local executor raises them: the same exception
    type and message, and an error in the user's training function as Ray's
    ``StartTracebackWithWorkerRank`` with the user's error as its cause, so
    ``TrainingIterator``'s error handling (final run status, the user's error
    in ``Result.error``) works as with the local executor. A training
    worker's death is the worker's ``ActorDiedError``; only the executor
    actor's own death is :class:`ExecutorActorDiedError`, raised at once (no
    call waits on a dead actor).
    """

    _executor_cls: type[Any] = _PrefetchingBackendExecutor

    def __init__(
        self,
        backend_config: Any,
        trial_info: Optional[Any] = None,
        num_workers: int = 1,
        resources_per_worker: Optional[dict[str, float]] = None,
        max_retries: int = 3,
    ):
        self._actor = _create_executor_actor(
            self._executor_cls,
            dict(
                backend_config=backend_config,
                trial_info=trial_info,
                num_workers=num_workers,
                resources_per_worker=resources_per_worker,
                max_retries=max_retries,
            ),
        )

    @property
    def actor(self) -> Any:
        """The executor actor's handle (None after shutdown)."""
        return self._actor

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._wait(method, lambda actor: actor.call.remote(method, args, kwargs))

    def _wait(self, method: str, submit: Callable[[Any], Any]) -> Any:
        """The result of ``submit(actor)``, the executor actor's call for ``method``."""
        if self._actor is None:
            raise ExecutorActorDiedError(
                f"RemoteBackendExecutor.{method}() called after shutdown()."
            )
        try:
            return ray.get(submit(self._actor))
        except RayTaskError as e:
            # The executor is alive and raised: re-raise what it raised, as a
            # local executor would. Checked before RayActorError: a worker's
            # death re-raised by the executor is a RayTaskError(ActorDiedError),
            # which is a RayActorError too, but names the worker, not the executor.
            cause = getattr(e, "cause", None)
            if isinstance(cause, _TrainingWorkerError):
                raise cause.as_start_traceback() from cause.error
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
        self._call(
            "start",
            initialization_hook=initialization_hook,
            train_cls=train_cls,
            train_cls_args=train_cls_args,
            train_cls_kwargs=train_cls_kwargs,
        )

    def start_training(self, *args: Any, **kwargs: Any) -> None:
        self._call("start_training", *args, **kwargs)

    def get_next_results(self) -> Optional[list[Any]]:
        # Every report: the actor's method without arguments to serialize.
        return self._wait("get_next_results", lambda actor: actor.get_next_results.remote())

    def pause_reporting(self) -> None:
        self._call("pause_reporting")

    def finish_training(self) -> Any:
        return self._call("finish_training")

    def report_final_run_status(self, *args: Any, **kwargs: Any) -> None:
        self._call("report_final_run_status", *args, **kwargs)

    def is_started(self) -> bool:
        return self._actor is not None and self._call("is_started")

    def get_worker_group(self) -> Any:
        return self._call("get_worker_group")

    def _get_num_failures(self) -> int:
        return self._call("_get_num_failures")

    def shutdown(self, graceful_termination: bool = True) -> None:
        """Shut the workers down, then the executor actor. Idempotent."""
        if self._actor is None:
            return
        try:
            self._call("shutdown", graceful_termination=graceful_termination)
        except ExecutorActorDiedError:
            pass  # its workers died with it (the actor owned them)
        finally:
            ray.kill(self._actor, no_restart=True)
            self._actor = None
