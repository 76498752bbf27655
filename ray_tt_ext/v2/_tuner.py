"""Ray Tune over Ray's default Train V2 stack: ``ray_tt_ext.v2.Tuner``.

The Tune x Train V2 seam, driver side (or the Ray Client client). It builds on
the V1 Tuner's machinery (once-only conversion, the payload guard, the
checkpoint policy) and adds what Ray 2.51+ dropped: ``Tuner(trainer)`` for a
Train V2 trainer, with V1's meaning of ``param_space``. The trial side is
``_trial`` (its run's controller: ``_controller``); nothing here
reaches a Train V2 training worker.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from typing import Any, Optional

import ray
import ray.tune

from ray_tt_ext import _compat
from ray_tt_ext._compat import AirEntrypoint
from ray_tt_ext._env import REUSE_WORKERS_ENV_VAR
from ray_tt_ext._storage import StorageContext
from ray_tt_ext._trainer import conversion
from ray_tt_ext._tuner import Tuner as _V1Tuner

logger = logging.getLogger("ray_tt_ext")


def _bridge() -> Any:
    """``_trial``, imported when first needed: it builds on Ray Train V2
    internals (Ray 2.51 and later; ``UnsupportedRayVersionError`` without them),
    which function and class trainables under ``v2.Tuner`` do not need."""
    from ray_tt_ext.v2 import _trial

    return _trial


def _arguments() -> Any:
    """``_arguments`` (a V2 trainer's arguments as ``param_space``), imported
    when first needed, with Ray Train V2's config classes."""
    from ray_tt_ext.v2 import _arguments

    return _arguments


_WARNED_NO_RELEASE: list[bool] = []


def keep_workers_enabled() -> bool:
    """Whether a reused trial actor's next trial may run on its last run's
    workers (driver, or the Ray Client Tuner actor, where the Tuner converts
    the trainer): on every Train V2 release, unless ``RAY_TT_EXT_REUSE_WORKERS``
    is ``0``, ``false``, ``no`` or ``off``."""
    value = os.environ.get(REUSE_WORKERS_ENV_VAR, "1").strip().lower()
    return value not in {"0", "false", "no", "off"}


def convert_v2_trainer(trainable: Any, owner: Any) -> Optional[type]:
    """A Train V2 trainer as its Tune trainable class, a function as Tune's with
    :class:`_trial.ReleasingTrial`; ``None`` for anything else.

    The ``_TunerInternal`` converter of ``ray_tt_ext.v2.Tuner`` (driver, or the
    Ray Client Tuner actor), called once per assignment of the trainable. The
    trainer's arguments go into the object store once, owned by ``owner`` (the
    Tuner); the Tuner measures the class it gets.
    """
    if _compat.is_train_v2_trainer(trainable):
        run_config = getattr(owner, "_run_config", None)
        reuse = getattr(getattr(owner, "_tune_config", None), "reuse_actors", False)
        with conversion(owner, measured_by_caller=True):
            return _bridge().make_trainable_cls(
                trainable,
                getattr(run_config, "checkpoint_config", None),
                keep_workers=bool(reuse) and keep_workers_enabled(),
            )
    if callable(trainable) and not isinstance(trainable, type):
        # A function (Ray's pattern among them): its Train V2 runs are stopped,
        # workers and placement group, when Tune stops the trial.
        try:
            return _bridge().releasing_function_trainable(trainable)
        except _compat.UnsupportedRayVersionError as e:
            if not _WARNED_NO_RELEASE:
                _WARNED_NO_RELEASE.append(True)
                logger.warning(
                    "ray_tt_ext.v2.Tuner runs function trainables as Tune does, without "
                    "stopping their Train V2 runs with the trial: %s",
                    e,
                )
    return None


#: How often, during a fit, the placement groups of dead Train controllers are looked for.
_SWEEP_INTERVAL_S = 5.0
#: How long the end of a fit waits for its trials' Train controller actors to die
#: (a fit beside it, in another thread, with Ray's pattern trials running, waits
#: that long).
_SWEEP_END_WAIT_S = 15.0


class _DeadControllersPlacementGroups(ray.tune.Callback):
    """Removes the placement groups of Ray's Train V2 controller actors that died
    with their trial (Ray's pattern: a trial that Tune kills, at the end of a
    fit, or whose run did not take the abort; see
    ``_compat.dead_train_controllers_placement_groups``), every
    :data:`_SWEEP_INTERVAL_S` during a fit and at its end, once the job's
    controllers are dead and their processes have exited (about
    :data:`_SWEEP_END_WAIT_S` at most; a group whose controller's process still runs is
    left for a later pass: removed under it, that controller would start again
    with a new group). Without it such a
    group holds its CPUs for the rest of the job: the next fit's trials wait
    for them forever. A group the GCS has not created yet is left until it is
    created or, at the end of a fit, until the wait is over: removed while the
    GCS creates it, it can keep a raylet's CPUs for good (ray-project/ray#64693;
    docs/guide/troubleshooting.md, "No placement group removed while Ray creates it"); then it
    goes before any created one frees the CPUs it waits for.
    A Tune callback of every ``ray_tt_ext.v2.Tuner``; runs in
    the driver (or the Ray Client Tuner actor)."""

    def __init__(self) -> None:
        self._next_sweep = 0.0

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        now = time.monotonic()
        if now >= self._next_sweep:
            self._next_sweep = now + _SWEEP_INTERVAL_S
            self.sweep(wait_s=0.0)

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        self.sweep(wait_s=_SWEEP_END_WAIT_S)

    @staticmethod
    def sweep(wait_s: float) -> int:
        """Remove what there is now; with ``wait_s``, until no controller actor
        of the job that an actor started (a trial actor: Tune has stopped or
        killed them all at the end of a fit) is alive and no dead one's process
        runs (about ``wait_s`` at most: a pass that asks another node waits for
        it up to 5 s), and once more after; what is left then is said in a
        warning. How many groups it removed. A
        failure is a warning: the fit goes on, its own error stays its error."""
        try:
            job = ray.get_runtime_context().get_job_id()
            deadline = time.monotonic() + wait_s
            removed, last_pass = 0, False
            while True:
                created, pending, dying = _compat.dead_train_controllers_placement_groups(
                    job, count_dying=wait_s > 0
                )
                out_of_time = time.monotonic() >= deadline
                # A pending one is left for a later pass, or goes first at the end.
                final = out_of_time and wait_s > 0
                for group in pending + created if final else created:
                    try:
                        ray.util.remove_placement_group(group)
                        removed += 1
                    except Exception:  # removed meanwhile
                        logger.debug("removing %s", group.id, exc_info=True)
                if pending and wait_s > 0 and not out_of_time:
                    # The end of a fit: the next pass removes those created by then.
                    ray.wait(
                        [g.ready() for g in pending],
                        num_returns=len(pending),
                        timeout=max(min(deadline - time.monotonic(), 1.0), 0.0),
                    )
                    continue
                if last_pass or out_of_time:
                    if dying and wait_s > 0:
                        logger.warning(
                            "ray_tt_ext: %d Train controller(s) of Ray's pattern in "
                            "this job had not ended %.0f s after the fit (another "
                            "fit's, or a process still exiting); a placement group "
                            "one of them made is left to a later fit's sweep, or to "
                            "the end of the job",
                            dying,
                            wait_s,
                        )
                    return removed
                # One more pass once none is dying: a controller that died
                # between the two tables' reads has its group seen then.
                last_pass = not dying
                if dying:
                    time.sleep(0.2)  # a killed trial's controller dies a moment later
        except Exception:
            logger.warning(
                "ray_tt_ext: could not look for the placement groups of dead Train "
                "controllers",
                exc_info=True,
            )
            return 0


def _fit_callbacks() -> list[Any]:
    """The Tune callbacks of every fit of a ``ray_tt_ext.v2.Tuner``, new or
    restored (``convert_v2_trainer.fit_callbacks``; the driver, or the Ray
    Client Tuner actor, at ``fit()``)."""
    return [_DeadControllersPlacementGroups()]


convert_v2_trainer.fit_callbacks = _fit_callbacks  # type: ignore[attr-defined]


def _tune_run_config(run_config: Any, trainer: Any) -> Any:
    """Tune's ``RunConfig`` for a V2 trainer's trials (driver).

    Given none, the trainer's ``name``, ``storage_path`` and
    ``storage_filesystem`` carry over (V1's ``Tuner(trainer)`` did the same).
    Tune keeps the record of every checkpoint and deletes what retention drops,
    so the trainer's ``num_to_keep`` and score settings become Tune's unless
    Tune's ``CheckpointConfig`` sets its own.
    """
    trainer_run = trainer.run_config
    if run_config is None:
        run_config = _compat.TuneRunConfig(
            name=trainer_run.name,
            storage_path=trainer_run.storage_path,
            storage_filesystem=trainer_run.storage_filesystem,
        )
    checkpoint_config = run_config.checkpoint_config or _compat.TuneCheckpointConfig()
    train_checkpoints = trainer_run.checkpoint_config
    retention = _arguments().RETENTION
    if train_checkpoints is not None and all(
        getattr(checkpoint_config, f) == getattr(_compat.TuneCheckpointConfig(), f)
        for f in retention
    ):
        checkpoint_config = dataclasses.replace(
            checkpoint_config, **{f: getattr(train_checkpoints, f) for f in retention}
        )
    return dataclasses.replace(run_config, checkpoint_config=checkpoint_config)


class Tuner(_V1Tuner):
    """``ray_tt_ext.Tuner`` for Ray's default Train V2 stack; never turns V1 on.

    Same arguments as ``ray_tt_ext.Tuner``. It takes:

    * a ``ray_tt_ext.v2`` trainer or one of Ray's own V2 trainers, with V1's
      meaning of ``param_space`` (its keys are trainer arguments;
      ``train_loop_config`` and ``scaling_config`` are merged key by key). Each
      trial is one Train V2 run named after the trial, whose folder is the
      trial folder: every checkpoint the run reports is a Tune checkpoint of
      the trial (the same folder, nothing copied); the trial reserves one
      bundle per worker, and Tune removes it, workers and all, when the trial
      stops;
    * function and class trainables, with the payload guard and the checkpoint
      policy, Ray's Tune + Train V2 pattern (a function that fits a V2 trainer
      with ``TuneReportCallback``) among them.

    Under Ray Client its Tuner actor keeps the cluster's Train version.

    Raises:
        TrainV2DisabledError: Train V2 is off in this process.
        TypeError: a Train V1 trainer (use ``ray_tt_ext.Tuner``).
        ValueError: a ``param_space`` key that is not an argument of the trainer.
        PayloadTooLargeError: what Tune would register is over the limit.
    """

    _TRAIN_V1 = False

    def __init__(
        self,
        trainable: Optional[Any] = None,
        *,
        param_space: Optional[dict[str, Any]] = None,
        tune_config: Optional[Any] = None,
        run_config: Optional[Any] = None,
        payload_limit: Optional[int] = None,
        storage_context_cls: Optional[type[StorageContext]] = None,
        data_cpus_per_trial: Optional[float] = None,
        _tuner_kwargs: Optional[dict] = None,
        _tuner_internal: Optional[Any] = None,
        _entrypoint: AirEntrypoint = AirEntrypoint.TUNER,
    ):
        """Extends ``ray_tt_ext.Tuner.__init__`` (driver or client): a V2 trainer's
        ``param_space`` is checked first, and Tune's ``RunConfig`` takes the
        trainer's storage and retention."""
        if _tuner_internal is None and _compat.is_train_v2_trainer(trainable):
            self._check_trainable(trainable)  # this Ray has what the bridge needs
            _bridge()  # Train V2 internals this Ray lacks: an error before anything runs
            arguments = _arguments()
            arguments.check_param_space(type(trainable), param_space)
            arguments.resource_request(trainable.scaling_config)  # reservable by a trial
            run_config = _tune_run_config(_compat.to_train_v1(run_config), trainable)
        super().__init__(
            trainable,
            param_space=param_space,
            tune_config=tune_config,
            run_config=run_config,
            payload_limit=payload_limit,
            storage_context_cls=storage_context_cls,
            data_cpus_per_trial=data_cpus_per_trial,
            _tuner_kwargs=_tuner_kwargs,
            _tuner_internal=_tuner_internal,
            _entrypoint=_entrypoint,
        )

    @classmethod
    def _make_internal(cls, kwargs: dict[str, Any]) -> Any:
        """Extends ``ray_tt_ext.Tuner._make_internal`` (driver or client): V2 trainers
        are converted by :func:`convert_v2_trainer`, and their experiments use
        ray_tt_ext's ``StorageContext`` (it records a Train checkpoint where it
        is, instead of copying it)."""
        kwargs = dict(kwargs, trainable_converter=convert_v2_trainer)
        if _compat.is_train_v2_trainer(kwargs.get("trainable")):
            kwargs["storage_context_cls"] = (
                kwargs.get("storage_context_cls") or StorageContext
            )
        return super()._make_internal(kwargs)

    @classmethod
    def _check_trainable(cls, trainable: Any) -> None:
        """Extends ``ray_tt_ext.Tuner._check_trainable``: Train V2 only; a Train V2
        trainer on a Ray with every attribute the bridge builds on, a function or
        class trainable on one with Ray Tune's (driver or client)."""
        _compat.ensure_train_v2("ray_tt_ext.v2.Tuner")
        _compat.check_ray_attributes(
            "ray_tt_ext.v2.Tuner",
            "v2" if _compat.is_train_v2_trainer(trainable) else None,
        )
        if isinstance(trainable, _compat.BaseTrainer):
            raise TypeError(
                f"`{type(trainable).__name__}` is a Ray Train V1 trainer; "
                "ray_tt_ext.v2.Tuner runs Ray's Train V2 trainers (ray_tt_ext.v2's or "
                "Ray's own) and Tune trainables. Fix: use ray_tt_ext.v2.DataParallelTrainer "
                "(or TorchTrainer) with configs from ray.train, or run V1 trainers with "
                f"ray_tt_ext.Tuner in a process with {_compat.V2_ENV_VAR}=0."
            )
        if _compat.is_train_v2_trainer(trainable):
            return  # converted by convert_v2_trainer
        super()._check_trainable(trainable)
