"""Self-free trainers: what Tune registers never carries the Trainer or its data.

Ray's ``BaseTrainer.as_trainable`` builds a Trainable class inside a method, so
anything the method's closure reaches (``self``, in the regression that Ray
PR #43146 introduced; the ``metadata`` dict, still, in Ray 2.60) is pickled
into the actor class that Tune registers in the GCS. Here the Trainable is a
module-level class (:class:`_TrainCoordinator`); the per-trainer class Tune
registers is a tiny subclass whose attributes are the trainer *class*, a
handle to the constructor arguments in the object store, and the scaling
config. The coordinator runs :func:`_train_coordinator_fn`, a module-level
function that takes the trainer class and its arguments explicitly.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import dataclasses
import logging
from collections.abc import Callable, Iterator
from typing import Any, Optional, Union

import ray

from ray_tt_ext import _compat
from ray_tt_ext._compat import (
    AirRunConfig,
    AirScalingConfig,
    FunctionTrainable,
    PlacementGroupFactory,
)
from ray_tt_ext._executor import (
    ExecutorActorDiedError,
    RemoteBackendExecutor,
    using_hosts,
)
from ray_tt_ext._executor_hosts import hosts_name
from ray_tt_ext._params import ObjectStoreParams, owned_by
from ray_tt_ext._payload import check_registered_payload, format_bytes, pickled_size
from ray_tt_ext._storage import checkpoint_policy_installed

logger = logging.getLogger("ray_tt_ext")


# ---------------------------------------------------------------------------
# The conversion context
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Conversion:
    """Who a trainer's conversion to a Tune trainable answers to (driver).

    ``owner``: the object whose lifetime the trainer's arguments in the object
    store follow (a ``ray_tt_ext.Tuner``; ``None``: the holder itself).
    ``measured_by_caller``: the caller measures the trainable it gets, once,
    with its own limit, so ``as_trainable()`` does not.
    """

    owner: Any = None
    measured_by_caller: bool = False


_NO_CONVERSION = _Conversion()
_CONVERSION: contextvars.ContextVar[Optional[_Conversion]] = contextvars.ContextVar(
    "ray_tt_ext_conversion", default=None
)


def _current_conversion() -> _Conversion:
    return _CONVERSION.get() or _NO_CONVERSION


@contextlib.contextmanager
def conversion(owner: Any, *, measured_by_caller: bool = False) -> Iterator[None]:
    """Trainers converted in this context (thread) keep their arguments while
    ``owner`` lives; with ``measured_by_caller`` their ``as_trainable()`` leaves
    measuring to the caller. Runs on the driver (or the Ray Client Tuner actor)."""
    token = _CONVERSION.set(_Conversion(owner, measured_by_caller))
    try:
        with owned_by(owner):
            yield
    finally:
        _CONVERSION.reset(token)


# ---------------------------------------------------------------------------
# Large values of train_loop_config under trainer.fit()
# ---------------------------------------------------------------------------

#: A value of a trainer's ``train_loop_config`` (a top-level key) whose pickled
#: form is over this many bytes is *large*: ``trainer.fit()`` leaves it out of
#: the param_space it gives Tune (so out of Tune's JSON logs and
#: ``Result.config``, where a :class:`LargeConfigValue` stands for it), and the
#: trial takes it from the object store with the trainer's other arguments.
LARGE_CONFIG_VALUE_BYTES = 64 * 1024


@dataclasses.dataclass(frozen=True, repr=False)
class LargeConfigValue:
    """Stands for a large ``train_loop_config`` value in Tune's config (driver).

    Made by :meth:`BaseTrainer._extract_fields_for_tuner_param_space`; Tune
    logs it as its ``str``, ``Result.config`` holds it, and the coordinator
    ignores it (the value itself comes from the object store).
    """

    type_name: str
    nbytes: int

    def __str__(self) -> str:
        return (
            f"<{self.type_name} of {format_bytes(self.nbytes)}: not logged, "
            "the trial gets it from the object store>"
        )

    __repr__ = __str__


def large_value_bytes(value: Any) -> Optional[int]:
    """The pickled size of ``value`` if it is over :data:`LARGE_CONFIG_VALUE_BYTES`,
    else ``None`` (also for a value that cannot be pickled: Ray reports that)."""
    try:
        nbytes = pickled_size(value)
    except Exception:
        return None
    return nbytes if nbytes > LARGE_CONFIG_VALUE_BYTES else None


def _loggable(value: Any) -> Any:
    """A copy of ``value`` for Tune's config, or a :class:`LargeConfigValue` (driver)."""
    nbytes = large_value_bytes(value)
    if nbytes is None:
        return copy.deepcopy(value)
    kind = type(value)
    return LargeConfigValue(f"{kind.__module__}.{kind.__qualname__}", nbytes)


def _loggable_config(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` for Tune: each large top-level value a :class:`LargeConfigValue`."""
    return {key: _loggable(value) for key, value in config.items()}


def _without_large_value_markers(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` without :class:`LargeConfigValue` entries, at any depth of dicts
    (trial actor): where Tune's config has one, the trainer's own value stays."""
    return {
        key: _without_large_value_markers(value) if isinstance(value, dict) else value
        for key, value in config.items()
        if not isinstance(value, LargeConfigValue)
    }


# ---------------------------------------------------------------------------
# The coordinator
# ---------------------------------------------------------------------------


def _train_coordinator_fn(
    config: dict[str, Any], trainer_cls: type[_compat.BaseTrainer]
) -> None:
    """The Ray Train coordinator: runs in the trial actor, never on the driver.

    Replaces ``ray.train.base_trainer._train_coordinator_fn`` (Ray 2.40 ..
    2.60). It builds a new trainer of ``trainer_cls`` from ``config`` (the
    constructor arguments merged with Tune's hyperparameters) and runs its
    training loop. It takes no ``self`` and no bound method, so nothing of the
    driver's trainer instance is captured. A remote executor looks for the
    shared executor hosts of the trial's experiment (its Tuner's).
    """
    _compat.ensure_train_v1()
    trainer = trainer_cls(**config)
    # Propagate (validated) user metadata from the Trainer constructor.
    _compat.get_session().metadata = trainer.metadata
    checkpoint = _compat.get_checkpoint()
    if checkpoint:
        # Auto-recovery and manual restore resume from Tune's checkpoint; else
        # Train starts from the user's `resume_from_checkpoint`.
        trainer.starting_checkpoint = checkpoint
    trainer.datasets = {k: d() if callable(d) else d for k, d in trainer.datasets.items()}
    trainer.setup()
    storage = getattr(_compat.get_session(), "storage", None)
    hosts = hosts_name(storage.experiment_fs_path) if storage is not None else None
    with _executors_shut_down(trainer), using_hosts(hosts):
        trainer.training_loop()


@contextlib.contextmanager
def _executors_shut_down(trainer: Any) -> Iterator[None]:
    """Shut down every BackendExecutor the training loop starts, however it ends.

    Runs in the trial actor (coordinator), around
    ``DataParallelTrainer.training_loop``, whose executor it builds from
    Ray's ``_backend_executor_cls`` attribute (Ray 2.40 .. 2.60). Ray 2.60's
    loop shuts the executor down in a ``finally``; Ray 2.40's only when the
    loop returns, so when Tune stops a trial (``SystemExit`` in the
    coordinator's ``train.report``) the workers died with the trial actor,
    without the backend's ``on_shutdown``. Here the executor is shut down on
    every way out, unless the loop already did (or an error in the training
    function shut it down by force): gracefully when the loop returned or
    Tune stopped the trial (``SystemExit``), by force on any other error (a
    worker's death, say, where the backend's cleanup could wait on the dead
    worker).
    """
    executor_cls = getattr(trainer, "_backend_executor_cls", None)
    if executor_cls is None:  # not a data-parallel trainer
        yield
        return
    started: list[Any] = []

    def make_executor(*args: Any, **kwargs: Any) -> Any:
        executor = executor_cls(*args, **kwargs)
        started.append(executor)
        return executor

    trainer._backend_executor_cls = make_executor
    try:
        yield
    except BaseException as error:
        trainer._backend_executor_cls = executor_cls
        # The loop's own error is the one to see.
        _shut_down(started, graceful=isinstance(error, SystemExit), quiet=True)
        raise
    trainer._backend_executor_cls = executor_cls
    _shut_down(started, graceful=True, quiet=False)


def _shut_down(executors: list[Any], graceful: bool, quiet: bool) -> None:
    """Shut down the executors still started (Ray 2.40's ``shutdown`` is not
    idempotent: a second call fails on the inactive worker group), then close
    remote ones (their place in the host goes back)."""
    for executor in executors:
        try:
            if executor.is_started():
                executor.shutdown(graceful_termination=graceful)
        except ExecutorActorDiedError:
            pass  # its workers died with it
        except Exception:
            if not quiet:
                raise
            logger.warning("Shutting down the trainer's executor failed", exc_info=True)
        finally:
            if isinstance(executor, RemoteBackendExecutor):
                executor.close()


#: How long a stopped trial waits for its trainer's graceful shutdown (seconds).
#: Ray's executor gives its workers 5 s to exit; this covers that and the
#: backend's ``on_shutdown``. Tune calls ``stop()`` between two results, so the
#: coordinator's thread is parked in ``train.report`` and leaves at once: the
#: wait is the shutdown's own length, and a shutdown that hangs is left after this.
COORDINATOR_STOP_PATIENCE_S = 10.0


def _as_scaling_config(value: Any) -> AirScalingConfig:
    return AirScalingConfig(**value) if isinstance(value, dict) else value


class _TrainCoordinator(FunctionTrainable):
    """The Tune Trainable behind every ray_tt_ext trainer (trial actor).

    A per-trainer subclass made by :func:`_make_trainable_cls` sets the class
    attributes below; they are all small, so what Tune registers is a few KiB
    whatever the trainer carries.
    """

    _name = "Trainer"
    _trainer_cls: type[_compat.BaseTrainer]
    _params: ObjectStoreParams
    _base_scaling_config: AirScalingConfig
    _has_base_dataset = False
    _dataset_context: Any = None
    #: The trainer runs a remote executor (its Tuner starts shared hosts).
    _remote_executor = False

    @classmethod
    def has_base_dataset(cls) -> bool:
        """Whether the trainer was given datasets (Ray's TrainTrainable API)."""
        return cls._has_base_dataset

    @classmethod
    def base_scaling_config(cls) -> AirScalingConfig:
        """The scaling config given to the trainer (Ray's TrainTrainable API)."""
        return cls._base_scaling_config

    def setup(self, config: dict[str, Any], **kwargs: Any) -> None:
        """Pull the trainer's arguments from the object store and merge Tune's.

        Overrides ``TrainTrainable.setup`` from Ray's
        ``BaseTrainer._generate_trainable_cls``; runs in the trial actor.
        """
        base_config = dict(self._params.get())
        # run_config is not a hyperparameter: it is not merged, and it is passed
        # back only to a trainer that was given one (a user's own trainer class
        # may not take it).
        given_run_config = "run_config" in base_config
        run_config = base_config.pop("run_config", None)
        # trainer.fit() gave Tune placeholders for large train_loop_config
        # values: the trainer's own values (from the object store) stay.
        tuned = _without_large_value_markers(self.config)
        merged = _compat.deep_update(base_config, tuned, new_keys_allowed=True)
        if given_run_config:
            merged["run_config"] = run_config
        scaling_config = _as_scaling_config(
            merged.get("scaling_config") or AirScalingConfig()
        )
        merged["scaling_config"] = self._reconcile_scaling_config(scaling_config)
        self._merged_config = merged
        if self._has_base_dataset:
            _compat.set_data_context(self._dataset_context)
        super().setup(config)

    def _reconcile_scaling_config(
        self, scaling_config: AirScalingConfig
    ) -> AirScalingConfig:
        """Match the scaling config to the trial's resources.

        Same as Ray's ``TrainTrainable._reconcile_scaling_config_with_trial_resources``
        (ResourceChangingScheduler support); runs in the trial actor.
        """
        trial_resources = self.trial_resources
        if not isinstance(trial_resources, PlacementGroupFactory):
            return scaling_config
        if trial_resources == scaling_config.as_placement_group_factory():
            return scaling_config
        self._trainer_cls._validate_scaling_config(scaling_config)
        return AirScalingConfig.from_placement_group_factory(trial_resources)

    def cleanup(self) -> None:
        """Ray's, then let the trainer shut its workers down before the actor goes.

        Extends ``FunctionTrainable.cleanup``; runs in the trial actor when
        Tune stops the trial. Ray's wakes the training thread (which leaves
        the trainer's training loop and shuts the executor down: the
        backend's ``on_shutdown``, then the workers; see
        :func:`_executors_shut_down`) and returns at once; Tune then lets the actor go, and a shutdown still in progress
        dies with it. This waits for that thread, up to
        :data:`COORDINATOR_STOP_PATIENCE_S`, so the graceful shutdown
        completes with either executor (the remote one takes a few more
        round trips than Ray's).
        """
        session = _compat.get_session()
        try:
            super().cleanup()
        finally:
            _compat.join_training_thread(session, COORDINATOR_STOP_PATIENCE_S)

    def _trainable_func(self, config: dict[str, Any]) -> None:
        """Run the coordinator with the merged config, not Tune's.

        Overrides ``FunctionTrainable._trainable_func``; runs in the trial
        actor's training thread.
        """
        _train_coordinator_fn(self._merged_config, self._trainer_cls)
        # Like Ray's wrap_function: mark the end without logging twice.
        _compat.get_session().report({_compat.RESULT_DUPLICATE: True})

    @classmethod
    def default_resource_request(cls, config: dict[str, Any]) -> PlacementGroupFactory:
        """Resources of one trial, from the (possibly tuned) scaling config.

        Same as Ray's ``TrainTrainable.default_resource_request``; runs on the
        driver.
        """
        scaling_config = _as_scaling_config(
            config.get("scaling_config", cls._base_scaling_config)
        )
        return cls._trainer_cls._validate_scaling_config(
            scaling_config
        ).as_placement_group_factory()


def _make_trainable_cls(trainer: _compat.BaseTrainer) -> type[_TrainCoordinator]:
    """The per-trainer Trainable class: small attributes only (driver)."""
    trainer_cls = type(trainer)
    dataset_context = None
    if trainer.datasets:
        from ray.data.context import DataContext

        dataset_context = DataContext.get_current()
    executor_cls = getattr(trainer, "_backend_executor_cls", None)
    attrs = {
        "_name": trainer_cls.__name__,
        "_trainer_cls": trainer_cls,
        "_params": ObjectStoreParams.for_trainer(dict(trainer._param_dict)),
        "_base_scaling_config": trainer.scaling_config,
        "_has_base_dataset": bool(trainer.datasets),
        "_dataset_context": dataset_context,
        "_remote_executor": isinstance(executor_cls, type)
        and issubclass(executor_cls, RemoteBackendExecutor),
        "_handles_checkpoint_freq": trainer_cls._handles_checkpoint_freq,
        "_handles_checkpoint_at_end": trainer_cls._handles_checkpoint_at_end,
        "__module__": __name__,
    }
    return type("TrainTrainable", (_TrainCoordinator,), attrs)


def _check_remote_executor_flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"remote_executor must be True or False, got {value!r}.")
    return value


class BaseTrainer(_compat.BaseTrainer):
    """Ray's V1 ``BaseTrainer`` whose ``as_trainable()`` is self-free and size-checked.

    Subclass it as you would Ray's. To give an existing trainer class (a
    framework trainer, or your own subclass of Ray's ``DataParallelTrainer``)
    every guarantee, put this class first; its constructor stays as it is::

        class MyTrainer(ray_tt_ext.BaseTrainer, MyDataParallelTrainer):
            remote_executor = True  # optional: Ray's BackendExecutor in an actor

    ``remote_executor`` may also be set per instance, by your own constructor,
    before it calls ``super().__init__``: ``self.remote_executor = flag``.
    """

    #: Run Ray's ``BackendExecutor`` in a zero-CPU host actor on the coordinator's
    #: node, shared by a Tuner's trials there (:class:`ray_tt_ext.RemoteBackendExecutor`).
    #: Data-parallel trainers only.
    remote_executor: bool = False
    #: The executor class ``remote_executor`` selects (a subclass may swap it).
    _remote_backend_executor_cls: type[Any] = RemoteBackendExecutor

    # No __init__ here: as a mixin (first base) this class must leave the
    # trainer's own constructor, and so Ray's signature-recording __new__, alone.

    def _validate_attributes(self) -> None:
        """Convert Train V2 config objects, fail fast on Train V2; select the executor.

        Overrides Ray's ``BaseTrainer._validate_attributes`` (called from
        ``BaseTrainer.__init__``); runs wherever the trainer is built (driver,
        and the coordinator actor).
        """
        # Train V2 config objects (`ray.train` imported before ray_tt_ext) become V1's.
        self.run_config = _compat.to_train_v1(self.run_config)
        self.scaling_config = _compat.to_train_v1(self.scaling_config)
        params = getattr(self, "_param_dict", {})  # what the coordinator rebuilds from
        for key in ("run_config", "scaling_config"):
            if params.get(key) is not None:
                params[key] = _compat.to_train_v1(params[key])
        _compat.ensure_train_v1(self.run_config, self.scaling_config)
        if _check_remote_executor_flag(self.remote_executor):
            if not isinstance(self, _compat.DataParallelTrainer):
                raise TypeError(
                    f"remote_executor=True needs a data-parallel trainer; "
                    f"{type(self).__name__} has no BackendExecutor. Fix: leave "
                    "remote_executor False, or subclass Ray's DataParallelTrainer."
                )
            self._backend_executor_cls = self._remote_backend_executor_cls
        super()._validate_attributes()

    def fit(self) -> Any:
        """Run training as Ray's ``BaseTrainer.fit``, with this trainer's checkpoint policy.

        Extends Ray's ``BaseTrainer.fit`` (which builds a plain ``ray.tune.Tuner``);
        runs on the driver. A ``ray_tt_ext.CheckpointConfig`` in the trainer's
        ``run_config`` names checkpoints here too, not only under
        ``ray_tt_ext.Tuner``. Under Ray Client, where Ray would run Tune in an
        actor the policy cannot reach, the whole ``fit()`` runs in a zero-CPU
        task on the client-server node instead (as Ray's client Tuner runs
        there), with Train V1 in its environment.
        """
        if not ray.util.client.ray.is_connected():
            # The arguments Ray's fit() converts stay while this trainer lives.
            with (
                conversion(self),
                checkpoint_policy_installed(self.run_config.checkpoint_config),
            ):
                return super().fit()
        return ray.get(
            _fit_on_cluster.options(
                num_cpus=0,
                max_retries=0,  # never run a whole fit() twice
                runtime_env={"env_vars": _compat.train_v1_runtime_env_vars()},
                **_compat.force_on_current_node_options(),
            ).remote(self)
        )

    def _extract_fields_for_tuner_param_space(self) -> dict[str, Any]:
        """Ray's fields for the Tuner's param_space, with large values left out.

        Overrides Ray's ``BaseTrainer._extract_fields_for_tuner_param_space``
        (Ray 2.40 .. 2.60), which ``BaseTrainer.fit`` calls (and so a
        restored trainer's ``fit``); runs on the driver (under Ray Client, in
        the task that runs ``fit()`` on the cluster). Ray deep-copies
        ``train_loop_config`` into Tune's param_space, so that Tune writes all
        of it as JSON into ``params.json``, into ``result.json`` once per
        report and into the experiment state. Here a value over
        :data:`LARGE_CONFIG_VALUE_BYTES` becomes a :class:`LargeConfigValue`:
        the trial gets the value from the object store, with the trainer's
        other arguments, as under ``ray_tt_ext.Tuner(trainer)``. A trainer
        class that builds a trainable of its own (overriding
        ``_generate_trainable_cls`` or ``as_trainable``) gets Ray's fields:
        only ray_tt_ext's coordinator knows the placeholder.
        """
        cls = type(self)
        if (
            cls._generate_trainable_cls is not BaseTrainer._generate_trainable_cls
            or cls.as_trainable is not BaseTrainer.as_trainable
        ):
            return super()._extract_fields_for_tuner_param_space()
        fields: dict[str, Any] = {}
        for key in self._fields_for_tuner_param_space:
            if key in self._param_dict:
                value = self._param_dict[key]
                fields[key] = (
                    _loggable_config(value) if isinstance(value, dict) else _loggable(value)
                )
        return fields

    def _generate_trainable_cls(self) -> type[_TrainCoordinator]:
        """Build the per-trainer Trainable class without capturing ``self``.

        Overrides Ray's ``BaseTrainer._generate_trainable_cls`` (Ray 2.40 ..
        2.60); runs on the driver. The constructor arguments go into the object
        store here, once per call.
        """
        return _make_trainable_cls(self)

    def as_trainable(self) -> type[_TrainCoordinator]:
        """Convert this trainer to a Tune Trainable class, self-free and size-checked.

        Overrides Ray's ``BaseTrainer.as_trainable``; runs on the driver (or,
        under Ray Client, in the remote Tuner actor). Measures what Tune will
        register before anything is sent to the GCS.

        Under a ``ray_tt_ext.Tuner`` the Tuner measures the result itself, once,
        with its own ``payload_limit``; called directly, this method measures it.

        Raises:
            PayloadTooLargeError: the Trainable would be over the payload limit
                (``RAY_TT_EXT_PAYLOAD_LIMIT``, else Ray's
                ``FUNCTION_SIZE_ERROR_THRESHOLD``).
        """
        _compat.ensure_train_v1(self.run_config, self.scaling_config)
        trainable = self._generate_trainable_cls()
        if not _current_conversion().measured_by_caller:
            check_registered_payload(
                trainable, what=f"The Tune trainable of {type(self).__name__}"
            )
        return trainable


@ray.remote
def _fit_on_cluster(trainer: BaseTrainer) -> Any:
    """``trainer.fit()`` on the Ray Client server's node (a task, not the client).

    Tune's driver loop runs in this task, so the process is Tune's driver for
    the length of the call (not after: Ray reuses task worker processes).
    """
    with _compat.acting_as_tune_driver():
        return trainer.fit()


class DataParallelTrainer(BaseTrainer, _compat.DataParallelTrainer):
    """Ray's V1 ``DataParallelTrainer``, self-free, with an optional remote executor.

    Args:
        remote_executor: Run Ray's ``BackendExecutor`` in a zero-CPU host actor
            on the coordinator's node (:class:`ray_tt_ext.RemoteBackendExecutor`)
            instead of inside the coordinator process. Default ``False``, as in
            Ray.

    All other arguments are Ray's ``DataParallelTrainer`` arguments.
    """

    def __init__(
        self,
        train_loop_per_worker: Union[Callable[[], None], Callable[[dict], None]],
        *,
        train_loop_config: Optional[dict] = None,
        backend_config: Optional[Any] = None,
        scaling_config: Optional[AirScalingConfig] = None,
        dataset_config: Optional[Any] = None,
        run_config: Optional[AirRunConfig] = None,
        datasets: Optional[dict[str, Any]] = None,
        metadata: Optional[dict[str, Any]] = None,
        resume_from_checkpoint: Optional[Any] = None,
        remote_executor: bool = False,
    ):
        self.remote_executor = _check_remote_executor_flag(remote_executor)
        super().__init__(
            train_loop_per_worker,
            train_loop_config=train_loop_config,
            backend_config=backend_config,
            scaling_config=scaling_config,
            dataset_config=dataset_config,
            run_config=run_config,
            datasets=datasets,
            metadata=metadata,
            resume_from_checkpoint=resume_from_checkpoint,
        )

    def _propagate_results(self, training_results: list[Any]) -> None:
        """Process one round of worker reports: metrics and checkpoint, in order.

        Extends Ray's ``DataParallelTrainer._propagate_results``, the single
        place where the coordinator handles both reports and checkpoints; runs
        in the coordinator (trial actor). The rule for workers that disagree:
        a checkpoint is registered when at least one worker reports one (Ray's
        rule; rank 0's metrics are recorded with it), and every worker that
        reports one must have uploaded it to the same folder. A mismatch (e.g.
        a ``checkpoint_dir_name`` template over a metric that differs between
        workers, or checkpoints reported by a changing set of workers) raises
        a ``ValueError`` naming the folders, instead of Ray's bare assertion.
        """
        folders = [
            (rank, result.checkpoint.path)
            for rank, result in enumerate(training_results)
            if result.checkpoint is not None
        ]
        if len({path for _, path in folders}) > 1:
            listing = ", ".join(f"worker {rank}: {path}" for rank, path in folders)
            raise ValueError(
                "Training workers uploaded one checkpoint to different folders "
                f"({listing}). Each worker names the folder from its own reported "
                "metrics and checkpoint count. Fix: report the metrics used by "
                "checkpoint_dir_name with the same value on every worker, and report "
                "checkpoints from the same workers every time (e.g. rank 0 only, or "
                "all workers)."
            )
        super()._propagate_results(training_results)
