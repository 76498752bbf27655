"""A drop-in ``ray.tune.Tuner`` that converts a Trainer once and guards the payload.

``trainable`` and ``converted_trainable`` are linked (Ray PR "Only convert a
BaseTrainer to Trainable once in the Tuner", ray-project/ray#30355): setting the trainable
converts it, exactly once; the converted trainable is never stale; neither is
pickled into the experiment state (``tuner.pkl``). ``Tuner.restore`` returns
this class. Under Ray Client the internal Tuner runs as a zero-CPU actor on
the client-server node, with Train V1 enabled in its environment.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any, Optional, Union

import pyarrow.fs
import ray
import ray.tune

from ray_tt_ext import _compat
from ray_tt_ext._compat import AirEntrypoint, BaseTrainer, Experiment, TunerInternal
from ray_tt_ext._env import REUSE_WORKERS_ENV_VAR
from ray_tt_ext._executor_hosts import ExecutorHosts
from ray_tt_ext._fit_names import fit_name, registry_name, renamed
from ray_tt_ext._payload import (
    check_registered_payload,
    format_bytes,
    resolve_payload_limit,
)
from ray_tt_ext._storage import StorageContext, checkpoint_policy_installed
from ray_tt_ext._sweep import SweepRetention, sweep_policy
from ray_tt_ext._trainer import conversion, large_value_bytes
from ray_tt_ext._tune_logs import with_whole_result_logs

logger = logging.getLogger("ray_tt_ext")

TrainableLike = Union[str, Callable, type[ray.tune.Trainable], BaseTrainer]


def _is_ray_client() -> bool:
    return ray.util.client.ray.is_connected()


#: ray_tt_ext's word on ``Tuner(trainer)``, instead of Ray's deprecation.
TUNER_OF_TRAINER_NOTICE = (
    "ray_tt_ext: Tuner(trainer) is supported by ray_tt_ext on Ray Train V1 (Ray's "
    "deprecation of it concerns ray.tune.Tuner); ray_tt_ext.v2.Tuner(trainer) is the "
    "one-line move to Ray Train V2."
)
_NOTICE_LOCK = threading.RLock()
_NOTICE_GIVEN: list[bool] = []


@contextlib.contextmanager
def _speaking_for_tuner_of_trainer(trainable: Any) -> Iterator[None]:
    """Around Ray's ``TunerInternal.__init__`` (driver, or the Ray Client Tuner
    actor): Ray 2.51+'s ``RayDeprecationWarning`` for a Trainer passed to a Tuner
    gives way to one line of ray_tt_ext's, once per process, when Ray's
    migration warnings are on. The lock keeps two Tuners built in two threads
    from restoring each other's warning filters."""
    if not isinstance(trainable, BaseTrainer):
        yield
        return
    with _NOTICE_LOCK:
        with warnings.catch_warnings():
            warnings.filterwarnings(
                "ignore", message=f".*{_compat.RAYS_TUNER_OF_TRAINER_DEPRECATION}"
            )
            yield
        if _compat.v2_migration_warnings_enabled() and not _NOTICE_GIVEN:
            _NOTICE_GIVEN.append(True)
            logger.warning(TUNER_OF_TRAINER_NOTICE)


#: CPUs a trial of a trainer with ``datasets`` keeps free for its Ray Data pipeline
#: by default: Ray Data's streaming executor runs its read and map tasks outside
#: the trial's placement group, and makes no progress without a free CPU for one.
DEFAULT_DATA_CPUS_PER_TRIAL = 1.0


def _check_data_cpus_per_trial(value: Any) -> None:
    """``data_cpus_per_trial``: ``None`` or a number >= 0 (driver or client)."""
    if value is None:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
    ):
        raise ValueError(
            f"data_cpus_per_trial must be a finite number of CPUs >= 0, got {value!r}. Fix: "
            "the CPUs each trial of a trainer with datasets keeps free for its Ray "
            "Data pipeline (0 keeps none, as Ray Tune does; None: "
            f"{DEFAULT_DATA_CPUS_PER_TRIAL:g})."
        )


class _TunerInternal(TunerInternal):
    """Ray's ``TunerInternal`` with once-only conversion, a payload guard and
    the checkpoint policy.

    Runs on the driver, or under Ray Client inside a zero-CPU actor on the
    client-server node (see :func:`_remote_tuner_internal_cls`).
    """

    def __init__(
        self,
        *,
        payload_limit: Optional[int] = None,
        storage_context_cls: Optional[type[StorageContext]] = None,
        data_cpus_per_trial: Optional[float] = None,
        trainable_converter: Optional[Callable[[Any, Any], Any]] = None,
        **kwargs: Any,
    ):
        """Extends Ray's ``TunerInternal.__init__`` with ``payload_limit``,
        ``storage_context_cls`` and ``data_cpus_per_trial``, checked before Ray's
        runs (nothing is written on bad input), and ``trainable_converter``
        (``converter(trainable, owner)``: a Tune trainable, or ``None`` to leave
        it to this class; ``ray_tt_ext.v2.Tuner`` converts Train V2 trainers with
        it). Runs on the driver (or the Ray Client Tuner actor).
        """
        self._trainable_converter = trainable_converter
        # Validated now, so bad input fails before anything is written.
        if payload_limit is not None:
            resolve_payload_limit(payload_limit)
        if storage_context_cls is not None and not (
            isinstance(storage_context_cls, type)
            and issubclass(storage_context_cls, StorageContext)
        ):
            raise TypeError(
                "storage_context_cls must be a subclass of ray_tt_ext.StorageContext, "
                f"got {storage_context_cls!r}."
            )
        _check_data_cpus_per_trial(data_cpus_per_trial)
        trainable = kwargs.get("trainable")
        sweep_policy(  # the run config Ray's picks: the Tuner's, else the trainer's
            getattr(
                kwargs.get("run_config") or getattr(trainable, "run_config", None),
                "checkpoint_config",
                None,
            ),
            kwargs.get("tune_config"),
            "ray_tt_ext.Tuner" if trainable_converter is None else "ray_tt_ext.v2.Tuner",
        )
        self._storage_context_cls = storage_context_cls
        self._payload_limit = payload_limit
        self._data_cpus_per_trial = data_cpus_per_trial
        # What this call was given; on restore it wins over tuner.pkl's values.
        self._explicit = {
            "_payload_limit": payload_limit,
            "_storage_context_cls": storage_context_cls,
            "_data_cpus_per_trial": data_cpus_per_trial,
        }
        self._guarded_trainable: Any = None
        # The registry name a fit used when another fit held the trainable's own
        # (ray_tt_ext._fit_names); in tuner.pkl, for Tuner.restore.
        self._fit_name: Optional[str] = None
        with _speaking_for_tuner_of_trainer(kwargs.get("trainable")):
            super().__init__(**kwargs)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Restore ``tuner.pkl``; options given to ``Tuner.restore`` win.

        Extends Ray's ``TunerInternal.__setstate__``; runs on the driver.
        """
        explicit = getattr(self, "_explicit", {})
        converter = getattr(self, "_trainable_converter", None)
        super().__setstate__(state)
        self._trainable_converter = converter
        for name, value in explicit.items():
            if value is not None:
                setattr(self, name, value)
        self._explicit = explicit
        self._guarded_trainable = None

    def __getstate__(self) -> dict[str, Any]:
        """Ray's experiment state, minus our in-memory bookkeeping.

        Extends Ray's ``TunerInternal.__getstate__`` (which already drops the
        trainable and the converted trainable); runs on the driver.
        """
        state = super().__getstate__()
        state.pop("_guarded_trainable", None)
        state.pop("_trainable_converter", None)  # given again on restore
        state.pop("_explicit", None)
        return state

    def _convert_trainable(self, trainable: TrainableLike) -> Any:
        """Convert a Trainer with ``as_trainable()``; leave other trainables as is.

        Overrides Ray's ``TunerInternal._convert_trainable``; runs on the
        driver (or the Ray Client Tuner actor). Called only from the
        ``trainable`` setter, so exactly once per assignment. The result is
        measured by :meth:`_guard`, with this Tuner's ``payload_limit``, not
        by ``as_trainable()`` with the default one.
        """
        if isinstance(trainable, BaseTrainer):
            _compat.ensure_train_v1(trainable.run_config, trainable.scaling_config)
            with conversion(self, measured_by_caller=True):
                return trainable.as_trainable()
        converter = getattr(self, "_trainable_converter", None)
        converted = converter(trainable, self) if converter is not None else None
        return trainable if converted is None else converted

    def _guard(self, trainable: Any) -> None:
        """Check ``trainable`` once (it is measured again only if it changes)."""
        if self._guarded_trainable is trainable:
            return
        what = f"The trainable `{Experiment.get_trainable_name(trainable)}`"
        check_registered_payload(trainable, what=what, limit=self._payload_limit)
        self._guarded_trainable = trainable

    def _validate_trainable(
        self, trainable: Any, required_trainable_name: Optional[str] = None
    ) -> None:
        """Measure what Tune will register (which also proves it pickles).

        Overrides Ray's ``TunerInternal._validate_trainable``, which pickles the
        whole trainable (copying every large buffer) only to check that it
        can; runs on the driver (or the Ray Client Tuner actor).

        Raises:
            PayloadTooLargeError: the trainable is over the payload limit.
            TypeError: the trainable cannot be pickled (Ray's diagnosis, and
                the path to the part at fault).
            ValueError: on restore, the trainable is not the original one
                (also when it is given by its registered name).
        """
        if not isinstance(trainable, str):  # a registered name has nothing to measure
            self._guard(trainable)
        if required_trainable_name is None:
            return
        trainable_name = Experiment.get_trainable_name(trainable)
        if trainable_name != required_trainable_name:
            raise ValueError(
                "Invalid `trainable` input to `Tuner.restore()`: got a trainable "
                f"named '{trainable_name}', but the experiment was run with "
                f"'{required_trainable_name}'. Fix: pass the trainable (or a "
                "trainer of the same class) that the original Tuner was given."
            )

    def _get_tune_run_arguments(self, trainable: Any) -> dict[str, Any]:
        """Ray's arguments for ``tune.run``, with result logs that keep every row.

        Extends Ray's ``TunerInternal._get_tune_run_arguments``; runs on the
        driver (or the Ray Client Tuner actor). Tune's own JSON and CSV
        loggers lose the rows a trial reported since the last sync when the
        trial restarts (PBT); see :mod:`ray_tt_ext._tune_logs`. A trainable
        converter with a ``fit_callbacks`` attribute (``ray_tt_ext.v2``'s) adds
        the callbacks it returns, on a new fit and on a restored one; with
        ``CheckpointConfig(sweep_num_to_keep=..., sweep_max_bytes=...)``, the
        sweep's retention (:class:`ray_tt_ext._sweep.SweepRetention`).
        """
        arguments = super()._get_tune_run_arguments(trainable)
        callbacks = with_whole_result_logs(arguments.get("callbacks"))
        extra = getattr(self._trainable_converter, "fit_callbacks", None)
        if extra is not None:
            callbacks = list(callbacks or []) + extra()
        policy = sweep_policy(self._run_config.checkpoint_config, self._tune_config)
        if policy is not None:
            scheduler = self._tune_config.scheduler
            v2 = self._trainable_converter is not None  # ray_tt_ext.v2.Tuner
            callbacks = list(callbacks or []) + [SweepRetention(policy, scheduler, v2)]
        arguments["callbacks"] = callbacks
        return arguments

    def fit(self):
        """Guard the payload, install the checkpoint policy, run Tune under a
        registry name no other running fit of the Ray job holds
        (:mod:`ray_tt_ext._fit_names`).

        With a trainer whose ``remote_executor`` is on, the trials share one
        executor host per node for the length of the fit. Tune's controller
        drops the STOP a pause while saving leaves under PBT, and removes no
        placement group while the GCS creates it (``_compat.tune_controller_fixed``).

        Extends Ray's ``TunerInternal.fit``; runs on the driver (or the Ray
        Client Tuner actor).
        """
        trainable = self.converted_trainable
        _compat.guard_tune_registry()
        if isinstance(trainable, str):  # a registered name: Tune's entry as it is
            if self._is_restored and getattr(self, "_fit_name", None):
                raise ValueError(
                    f"This experiment's trials are registered as {self._fit_name!r} "
                    "(another Tuner held their trainable's own name when they "
                    f"started), not as {trainable!r}. Fix: restore it with the "
                    "trainable or trainer itself instead of its registered name."
                )
            names: Any = contextlib.nullcontext(None)
        else:
            self._guard(trainable)
            saved = None
            if self._is_restored:  # its trials keep the name they were saved with
                saved = getattr(self, "_fit_name", None) or registry_name(trainable)
            names = fit_name(trainable, saved)
        with (
            names as name,
            checkpoint_policy_installed(
                self._run_config.checkpoint_config, self._storage_context_cls
            ),
            self._executor_hosts(trainable),
            _compat.tune_controller_fixed(self._data_cpus(trainable)),
        ):
            own_name = name is None or name == registry_name(trainable)
            if name is not None and not self._is_restored:
                self._save_fit_name(None if own_name else name)
            return super().fit() if own_name else self._fit_registered_as(trainable, name)

    def _save_fit_name(self, fit_name: Optional[str]) -> None:
        """Write the registry name this fit's trials get (``None``: the
        trainable's own) into ``tuner.pkl`` when it differs from the one there,
        for ``Tuner.restore``. Runs on the driver (or the Ray Client Tuner actor)
        before Tune starts. Only that entry changes: the state Ray's
        ``TunerInternal`` saved is read back (not this object's state, which
        may hold a Ray Client progress queue since), and replaced whole (a new
        file moved over the old one)."""
        if getattr(self, "_fit_name", None) == fit_name:
            return
        self._fit_name = fit_name
        fs, path = _compat.experiment_fs_and_path(
            self._run_config.storage_path,
            self._run_config.storage_filesystem,
            self._run_config.name,
        )
        with fs.open_input_stream(f"{path}/tuner.pkl") as f:
            state = _compat.ray_cloudpickle.loads(f.read())
        state["_fit_name"] = fit_name
        with fs.open_output_stream(f"{path}/tuner.pkl.tmp") as f:
            f.write(_compat.ray_cloudpickle.dumps(state))
        fs.move(f"{path}/tuner.pkl.tmp", f"{path}/tuner.pkl")

    def _fit_registered_as(self, trainable: Any, name: str) -> Any:
        """Ray's fit, with ``trainable`` registered in Tune as ``name`` (another
        running fit of this Ray job holds its own name).

        Sets Ray's ``TunerInternal._converted_trainable`` for the length of the
        fit; runs on the driver (or the Ray Client Tuner actor).
        """
        self._converted_trainable = renamed(trainable, name)
        try:
            return super().fit()
        finally:
            self._converted_trainable = trainable

    def _data_cpus(self, trainable: Any) -> Optional[_compat.DataCpus]:
        """What each trial of this fit keeps free for its Ray Data pipeline: for a
        trainer with ``datasets``, ``data_cpus_per_trial`` (default
        :data:`DEFAULT_DATA_CPUS_PER_TRIAL`) besides what its placement group
        takes (``_compat.tune_loop``); ``None`` for anything else, or 0. Runs on
        the driver (or the Ray Client Tuner actor)."""
        trainer = getattr(self, "_trainable", None)
        keep = getattr(self, "_data_cpus_per_trial", None)
        if keep is None:
            keep = DEFAULT_DATA_CPUS_PER_TRIAL
        if not getattr(trainer, "datasets", None) or not keep or isinstance(trainable, str):
            return None
        request = trainable.default_resource_request({})
        trial_cpus = float(request.required_resources.get("CPU", 0.0))
        tuner = (
            "ray_tt_ext.v2.Tuner"
            if _compat.is_train_v2_trainer(trainer)
            else "ray_tt_ext.Tuner"
        )
        return _compat.DataCpus(type(trainer).__name__, trial_cpus, float(keep), tuner)

    def _executor_hosts(self, trainable: Any) -> Any:
        """The fit's shared executor hosts, for a trainer with a remote executor.

        Named after the experiment's folder, which the trials know too (the
        trainable's registered class may be another Tuner's of the same name).
        Runs on the driver (or the Ray Client Tuner actor).
        """
        if not getattr(trainable, "_remote_executor", False):
            return contextlib.nullcontext()
        path = _compat.experiment_fs_path(
            self._run_config.storage_path,
            self._run_config.storage_filesystem,
            self._run_config.name,
        )
        return ExecutorHosts(path).running()


class _ClientTunerInternal(_TunerInternal):
    """The Ray Client flavour of :class:`_TunerInternal`, built after creation.

    Runs as a zero-CPU actor on the client-server node. Its constructor does
    nothing; :meth:`build` runs ``_TunerInternal.__init__``, so that an error
    raised there (``PayloadTooLargeError``, restore's ``ValueError``,
    ``TrainV2EnabledError``) comes back to the client as itself (a task error
    keeps its exception; an actor constructor's error arrives as
    ``ActorDiedError``).
    """

    def __init__(self) -> None:  # noqa: D107 - see build()
        pass

    def build(self, kwargs: dict[str, Any]) -> None:
        """``_TunerInternal.__init__`` (a restore reads the experiment state here)."""
        with _compat.acting_as_tune_driver():
            _TunerInternal.__init__(self, **kwargs)

    def fit(self):
        """Extends ``_TunerInternal.fit``: Tune's driver loop runs in this actor."""
        with _compat.acting_as_tune_driver():
            return super().fit()

    def get_results(self):
        """Extends Ray's ``TunerInternal.get_results`` (reads the experiment state)."""
        with _compat.acting_as_tune_driver():
            return super().get_results()


def _remote_tuner_internal_cls(train_v1: bool):
    """The Ray Client Tuner actor class (client).

    Replaces Ray's ``_force_on_current_node(ray.remote(num_cpus=0)(TunerInternal))``
    in ``Tuner.__init__``/``Tuner.restore`` (Ray 2.40 .. 2.60). For the V1
    integration the actor's environment enables Train V1, which Tune then
    copies into every trial actor; ``ray_tt_ext.v2.Tuner`` leaves the
    cluster's default.
    """
    env_vars = _compat.train_v1_runtime_env_vars() if train_v1 else {}
    if REUSE_WORKERS_ENV_VAR in os.environ:  # read where the trainer is converted
        env_vars[REUSE_WORKERS_ENV_VAR] = os.environ[REUSE_WORKERS_ENV_VAR]
    return ray.remote(_ClientTunerInternal).options(
        num_cpus=0,
        runtime_env={"env_vars": env_vars},
        **_compat.force_on_current_node_options(),
    )


def _start_remote_tuner_internal(kwargs: dict[str, Any], train_v1: bool = True) -> Any:
    """Create the Ray Client Tuner actor and build it; raise its errors here (client).

    A function or class trainable is measured here first, on the client,
    before anything is sent; a trainer's Tune trainable is measured where it
    is converted, in the actor. Either way, ``PayloadTooLargeError`` and
    restore's ``ValueError`` reach the caller of ``Tuner(...)`` or
    ``Tuner.restore(...)`` as themselves, not as Ray's ``ActorDiedError``.
    """
    trainable = kwargs.get("trainable")
    is_trainer = isinstance(trainable, BaseTrainer) or _compat.is_train_v2_trainer(
        trainable
    )
    if trainable is not None and not isinstance(trainable, str) and not is_trainer:
        check_registered_payload(
            trainable,
            what=f"The trainable `{Experiment.get_trainable_name(trainable)}`",
            limit=kwargs.get("payload_limit"),
        )
    actor = _remote_tuner_internal_cls(train_v1).remote()
    try:
        ray.get(actor.build.remote(kwargs))
    except ray.exceptions.RayTaskError as e:
        ray.kill(actor)
        cause = getattr(e, "cause", None)
        if isinstance(cause, BaseException):
            raise cause from None
        raise
    return actor


def _param_space_leaves(space: Any, path: str) -> Iterator[tuple[str, Any]]:
    """``(path, value)`` of every value in ``param_space`` that is not a dict."""
    if isinstance(space, dict):
        for key, value in space.items():
            yield from _param_space_leaves(value, f"{path}[{key!r}]")
    else:
        yield path, space


def warn_large_param_space(param_space: Optional[dict[str, Any]]) -> None:
    """Warn, naming the key, of each ``param_space`` value over
    :data:`~ray_tt_ext._trainer.LARGE_CONFIG_VALUE_BYTES` when pickled (driver),
    by the rule ``trainer.fit()`` applies to ``train_loop_config``.

    Ray's documented anti-pattern: Tune writes every ``param_space`` value as
    JSON into ``params.json`` and into ``result.json`` once per report, and
    sends it with each trial. A value that cannot be pickled is left to the
    checks that follow (Ray's, and the payload guard).
    """
    for path, value in _param_space_leaves(param_space or {}, "param_space"):
        nbytes = large_value_bytes(value)
        if nbytes is not None:
            warnings.warn(
                f"{path} is {format_bytes(nbytes)} when pickled "
                f"({type(value).__name__}): Tune writes every param_space value "
                "as JSON into params.json, and into result.json once per report, "
                "and sends it with each trial. Fix: pass large objects with "
                "tune.with_parameters(trainable, name=value); for a trainer, put "
                "them in its train_loop_config, which goes to the object store "
                "once and is not logged.",
                UserWarning,
                stacklevel=3,
            )


class Tuner(ray.tune.Tuner):
    """``ray.tune.Tuner`` that converts a Trainer once and checks its payload.

    Same constructor as Ray's, plus:

    Args:
        payload_limit: Largest pickled trainable (bytes) this Tuner lets Tune
            register. Default: ``RAY_TT_EXT_PAYLOAD_LIMIT`` if set, else Ray's
            ``FUNCTION_SIZE_ERROR_THRESHOLD``; never above
            ``GRPC_MAX_MESSAGE_BYTES``.
        storage_context_cls: A subclass of :class:`ray_tt_ext.StorageContext`
            with a checkpoint index/name policy of your own, for this Tuner's
            experiment only. Not needed for ``ray_tt_ext.CheckpointConfig``.
        data_cpus_per_trial: For a trainer with ``datasets``: the CPUs each
            trial keeps free for its Ray Data pipeline, which runs outside the
            trial's placement group. Trials start only while the fit's trials
            and their pipelines' CPUs fit the cluster (more as it grows;
            ``max_concurrent_trials`` stays a maximum), so that their pipelines
            never wait for ever. Default (``None``): 1. ``0`` keeps none, as
            Ray Tune does.

    Function and class trainables work whatever the Train version; a V1
    trainer needs Train V1 (the first Train V1 name taken from ``ray_tt_ext`` turns it
    on when the variable is unset). A Train V2 ``RunConfig`` (``ray.train``
    imported first) is converted to Tune's.

    Raises:
        PayloadTooLargeError: on construction, ``fit()`` or ``restore()``,
            before anything is sent to the GCS.
        TrainV2EnabledError: a V1 trainer where Train V2 is active, with the fix.
    """

    def __init__(
        self,
        trainable: Optional[TrainableLike] = None,
        *,
        param_space: Optional[dict[str, Any]] = None,
        tune_config: Optional[ray.tune.TuneConfig] = None,
        run_config: Optional[Any] = None,
        payload_limit: Optional[int] = None,
        storage_context_cls: Optional[type[StorageContext]] = None,
        data_cpus_per_trial: Optional[float] = None,
        _tuner_kwargs: Optional[dict] = None,
        _tuner_internal: Optional[Any] = None,
        _entrypoint: AirEntrypoint = AirEntrypoint.TUNER,
    ):
        """Build the Tuner: checked, converted once, measured.

        Replaces Ray's ``Tuner.__init__`` (Ray 2.40 .. 2.60) without calling
        it: Ray's builds its own ``TunerInternal`` (under Ray Client, an actor
        of Ray's class) before anything could be checked. This builds ours and
        sets the attributes Ray's other ``Tuner`` methods read:
        ``_is_ray_client``, and ``_local_tuner`` or ``_remote_tuner``. Runs on
        the driver (or the Ray Client client).
        """
        self._is_ray_client = _is_ray_client()
        if _tuner_internal is None:
            self._check_trainable(trainable)
            warn_large_param_space(param_space)
            # Function and class trainables need no Train V1; a V1 trainer does.
            if isinstance(trainable, BaseTrainer):
                _compat.ensure_train_v1()
            _tuner_internal = self._make_internal(
                dict(
                    trainable=trainable,
                    param_space=param_space,
                    tune_config=tune_config,
                    run_config=_compat.to_train_v1(run_config),
                    payload_limit=payload_limit,
                    storage_context_cls=storage_context_cls,
                    data_cpus_per_trial=data_cpus_per_trial,
                    _tuner_kwargs=_tuner_kwargs,
                    _entrypoint=_entrypoint,
                )
            )
        if self._is_ray_client:
            self._remote_tuner = _tuner_internal
        else:
            self._local_tuner = _tuner_internal

    @classmethod
    def _make_internal(cls, kwargs: dict[str, Any]) -> Any:
        """Our ``TunerInternal`` here, or under Ray Client its actor (driver or client)."""
        if _is_ray_client():
            return _start_remote_tuner_internal(kwargs, cls._TRAIN_V1)
        return _TunerInternal(**kwargs)

    #: This Tuner belongs to the Train V1 integration (see ``ray_tt_ext.v2.Tuner``).
    _TRAIN_V1 = True

    @classmethod
    def _check_trainable(cls, trainable: Any) -> None:
        """Refuse what this Tuner cannot run, with the fix (driver or client): a
        Train V2 trainer, or a Ray that lacks an attribute this Tuner builds on
        (``UnsupportedRayVersionError`` naming each, before anything starts)."""
        _compat.check_ray_attributes(
            "ray_tt_ext.Tuner", "v1" if isinstance(trainable, BaseTrainer) else None
        )
        if _compat.is_train_v2_trainer(trainable):
            raise TypeError(
                f"`{type(trainable).__name__}` is a Ray Train V2 trainer, which "
                "ray_tt_ext.Tuner (the Train V1 integration) cannot run. Fix: "
                "ray_tt_ext.v2.Tuner(trainer, param_space=...) runs Train V2 trainers, "
                "each trial one Train run, in a process that takes no Train V1 name "
                "of ray_tt_ext; or use ray_tt_ext's V1 trainers with ray_tt_ext.Tuner."
            )

    @classmethod
    def restore(
        cls,
        path: str,
        trainable: TrainableLike,
        resume_unfinished: bool = True,
        resume_errored: bool = False,
        restart_errored: bool = False,
        param_space: Optional[dict[str, Any]] = None,
        storage_filesystem: Optional[pyarrow.fs.FileSystem] = None,
        _resume_config: Optional[ray.tune.ResumeConfig] = None,
        *,
        payload_limit: Optional[int] = None,
        storage_context_cls: Optional[type[StorageContext]] = None,
        data_cpus_per_trial: Optional[float] = None,
    ) -> Tuner:
        """Restore a run, as Ray's ``Tuner.restore``, returning a ``ray_tt_ext.Tuner``.

        Replaces Ray's ``Tuner.restore`` (which builds Ray's ``TunerInternal``);
        runs on the driver (or the Ray Client client).

        The trainable (or trainer) is converted once. ``payload_limit``,
        ``storage_context_cls`` and ``data_cpus_per_trial`` as in the constructor.
        """
        cls._check_trainable(trainable)
        if isinstance(trainable, BaseTrainer):
            _compat.ensure_train_v1()
        resume = ray.tune.ResumeConfig.ResumeType
        errored = resume.SKIP
        if resume_errored:
            errored = resume.RESUME
        elif restart_errored:
            errored = resume.RESTART
        resume_config = _resume_config or ray.tune.ResumeConfig(
            unfinished=resume.RESUME if resume_unfinished else resume.SKIP,
            errored=errored,
        )
        internal = cls._make_internal(
            dict(
                restore_path=path,
                resume_config=resume_config,
                trainable=trainable,
                param_space=param_space,
                storage_filesystem=storage_filesystem,
                payload_limit=payload_limit,
                storage_context_cls=storage_context_cls,
                data_cpus_per_trial=data_cpus_per_trial,
            )
        )
        return cls(_tuner_internal=internal)
