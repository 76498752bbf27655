"""The four guarantees on Ray's default Train V2 stack (``ray_tt_ext.v2``).

Imported only through ``ray_tt_ext.v2``, which refuses Ray < 2.51; never
touches ``RAY_TRAIN_V2_ENABLED``.

Where each piece runs:

* :class:`CheckpointConfig` is built on the driver and travels inside Ray's
  ``RunConfig`` to the controller and the training workers.
* ``_V2TrainerMixin.fit`` measures what the trainer sends to its controller
  (driver, or the Tune trial actor that builds the trainer) and
  ``_get_train_func`` wraps the training function.
* :class:`PolicyTrainFn` runs on every training worker: before the user's
  loop starts it installs :class:`_NamingTrainFnUtils`, the object behind
  ``ray.train.report`` there, which names (rank 0) and checks (every rank)
  each checkpoint folder before Ray writes anything.

Naming rules, the V1 rules carried over (one implementation: ``_naming``):

* A name is one safe path component (``validate_dir_name``), whether the
  policy renders it or ``ray.train.report(checkpoint_dir_name=...)`` gives
  it: otherwise ``ValueError`` on every rank, before anything is written.
* Rank 0's name is the one Ray uses (it broadcasts it). When rank 0 reports a
  checkpoint, its name is checked against the run folder (listed once per
  worker process) and the names used so far: a name this run recorded is a
  ``ValueError`` (Ray would merge two checkpoints into one folder); a folder
  nobody recorded (lost progress of a crashed attempt) is moved aside intact
  to ``<name>.unrecorded`` with a warning; the sequential index continues
  after the checkpoints the run recorded (after worker or controller
  restarts, and when a run is resumed under the same name), so a folder past
  them (written, never recorded) is lost progress, moved aside when the next
  checkpoint takes its index.
* With ``ray_tt_ext.v2.CheckpointConfig`` and no explicit name, the policy
  names the checkpoint (``checkpoint_{index:06d}`` by default); without it,
  Ray's timestamp names stay.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

import ray

from ray_tt_ext import _compat
from ray_tt_ext._compat import train_v2 as _V2
from ray_tt_ext._naming import (
    DEFAULT_DIR_NAME_TEMPLATE,
    SEQUENTIAL,
    FolderListing,
    IndexPolicy,
    NamePolicy,
    continue_index,
    next_index,
    render_dir_name,
    validate_dir_name,
    validate_policy,
)
from ray_tt_ext._payload import check_registered_payload, register_payload_view

logger = logging.getLogger("ray_tt_ext")


# ---------------------------------------------------------------------------
# CheckpointConfig
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class CheckpointConfig(_V2.CheckpointConfig):
    """Ray Train V2's ``CheckpointConfig`` plus checkpoint indexing and naming.

    Args:
        checkpoint_index: ``"sequential"`` (0, 1, 2, ... over the checkpoints
            rank 0 reports), the name of a reported metric whose integer value
            is the index (e.g. ``"epoch"``), or
            ``callable(current_index, metrics) -> int``. Indices must strictly
            increase.
        checkpoint_dir_name: a ``str.format`` template over ``index`` and rank
            0's reported metrics (default ``"checkpoint_{index:06d}"``), or
            ``callable(index, metrics) -> str``. Must render one safe path
            component.

    All other fields are Ray's (without ``checkpoint_score_attribute``,
    ``num_to_keep`` keeps the highest indices: Ray keeps the latest, and
    indices grow with every checkpoint).
    """

    checkpoint_index: IndexPolicy = SEQUENTIAL
    checkpoint_dir_name: NamePolicy = DEFAULT_DIR_NAME_TEMPLATE

    def __post_init__(self) -> None:
        super().__post_init__()
        validate_policy(self.checkpoint_index, self.checkpoint_dir_name)


# ---------------------------------------------------------------------------
# Naming on the training workers
# ---------------------------------------------------------------------------


class _RunFolder:
    """Rank 0's naming state for one run folder, in one worker process.

    The folder's contents come from this process's :class:`_naming.FolderListing`
    (listed once, lost progress moved aside there); this object adds what only
    the V2 naming knows: the index rank 0 is at and the names this run used.
    """

    def __init__(
        self,
        fs: Any,
        path: str,
        policy: Optional[CheckpointConfig],
        recorded: Optional[Callable[[], set[str]]] = None,
    ):
        self.path, self.policy = path, policy
        #: The names of the checkpoints the run recorded (asks the controller).
        self.recorded = recorded or _recorded_checkpoint_names
        self.listing = FolderListing.of(fs, path, "run folder")
        self.current = -1
        self.used: set[str] = set()
        self.lock = threading.Lock()
        self._listed = False

    def existing(self) -> set[str]:
        """The folders in the run folder (listed once per process) plus this run's.

        The first time, a sequential index continues after the checkpoints the
        run recorded (Ray's, restored after a restart or a resume), not after
        every folder on disk: a folder past them is lost progress (written,
        never recorded: its report never reached the controller, or some rank
        never finished its upload), and the checkpoint that takes its index
        again moves it aside (:meth:`_clear_the_way`), as the Train V1 naming does.
        """
        names = self.listing.names()
        if not self._listed:
            self._listed = True
            if self.policy is not None and self.policy.checkpoint_index == SEQUENTIAL:
                self._continue_after(names & self.recorded())
        return names | self.used

    def _continue_after(self, names: set[str]) -> None:
        """Sequential index: continue after the highest index read back from ``names``."""
        if self.policy is not None:
            self.current = continue_index(
                self.policy.checkpoint_index,
                self.policy.checkpoint_dir_name,
                names,
                self.current,
            )

    def name(self, metrics: dict[str, Any], explicit: Optional[str]) -> Optional[str]:
        """The folder for rank 0's checkpoint; ``None`` leaves Ray's default name."""
        if explicit is None and self.policy is None:
            return None  # Ray's own (timestamp) name: nothing to decide or list
        with self.lock:
            existing = self.existing()
            if explicit is not None:
                name = explicit
                if name in self.used:
                    raise ValueError(self._reused(name, "was already used by this run"))
                if name in existing:
                    self._clear_the_way(name)
            else:
                name = self._policy_name(metrics, existing)
            self.used.add(name)
            self.listing.note(name)
            return name

    def _policy_name(self, metrics: dict[str, Any], existing: set[str]) -> str:
        policy = self.policy
        index = next_index(policy.checkpoint_index, self.current, metrics)
        name = render_dir_name(policy.checkpoint_dir_name, index, metrics)
        if name in self.used:
            raise ValueError(
                self._reused(name, f"was rendered again (index {index})")
                + " Fix: put '{index}' (or a metric that changes with every checkpoint) "
                "in checkpoint_dir_name."
            )
        if name in existing:
            self._clear_the_way(name)
        self.current = index
        return name

    def note_in_place(self, path: str) -> None:
        """A checkpoint rank 0 reports where it lies (NO_UPLOAD): if it is a folder
        of the run folder, its name is used, and a sequential index moves past it."""
        parent, _, name = path.rstrip("/").rpartition("/")
        if parent != self.path.rstrip("/"):
            return
        with self.lock:
            self.existing()
            self.used.add(name)
            self.listing.note(name)
            self._continue_after({name})

    def _reused(self, name: str, how: str) -> str:
        return (
            f"Checkpoint folder name {name!r} {how}: Ray would write this checkpoint "
            f"into the folder of an earlier one ({self.path}/{name}), merging the two. "
            "Nothing was written. Fix: give every checkpoint its own name, or leave "
            "checkpoint_dir_name unset and let ray_tt_ext.v2.CheckpointConfig name it."
        )

    def _clear_the_way(self, name: str) -> None:
        """A folder at ``name`` that this run did not write in this process.

        Gone since it was listed (Ray's ``num_to_keep`` deleted it): the name
        is free. A checkpoint the run recorded (Ray's reported checkpoints,
        restored after a restart or a resume): ``ValueError``. Anything else
        is lost progress: moved aside, intact, to ``<name>.unrecorded[-n]``.
        """
        if self.listing.is_gone(name):
            return
        if name in self.recorded():
            raise ValueError(self._reused(name, "names a checkpoint this run recorded"))
        self.listing.move_aside(name)


def _recorded_checkpoint_names() -> set[str]:
    """Folder names of the checkpoints Ray recorded for this run (worker -> controller)."""
    context = _V2.get_train_context()
    if _V2.CheckpointConsistencyMode is None:
        # Ray 2.51 .. 2.52: Ray's own call waits for the count of reports put in
        # the result queue, which an ASYNC upload can pass meanwhile (then it
        # waits for ever); the count of report() calls never runs ahead of the
        # controller's, as on Ray 2.53+.
        reported = ray.get(
            context.controller_actor.get_all_reported_checkpoints.remote(
                context.report_call_index
            )
        )
    else:
        reported = context.get_all_reported_checkpoints(
            consistency_mode=_V2.CheckpointConsistencyMode.COMMITTED
        )
    return {r.checkpoint.path.rstrip("/").rsplit("/", 1)[-1] for r in reported}


_FOLDERS: dict[str, _RunFolder] = {}
_FOLDERS_LOCK = threading.Lock()


def _run_folder(context: Any) -> _RunFolder:
    storage = context.get_storage()
    path = storage.experiment_fs_path
    policy = context.train_run_context.run_config.checkpoint_config
    if not isinstance(policy, CheckpointConfig):
        policy = None
    with _FOLDERS_LOCK:
        folder = _FOLDERS.get(path)
        if folder is None:
            folder = _FOLDERS[path] = _RunFolder(storage.storage_filesystem, path, policy)
        return folder


class _NamingTrainFnUtils(_V2.DistributedTrainFnUtils):
    """What ``ray.train.report`` calls on a training worker, with safe names.

    Extends Ray Train V2's ``DistributedTrainFnUtils.report`` (installed by
    :class:`PolicyTrainFn` with ``set_train_fn_utils``); runs on every
    training worker, in the thread of the user's training loop.

    ``initial_checkpoint``: where the run starts when it has no checkpoint of
    its own yet (a Tune trial given another trial's checkpoint, e.g. by PBT);
    ``known``: the names of the run's folders from before, which do not count
    as its own checkpoints for that.
    """

    def __init__(self, initial_checkpoint: Optional[Any] = None, known: tuple = ()):
        super().__init__()
        self._initial_checkpoint = initial_checkpoint
        self._known = frozenset(known)

    def get_checkpoint(self) -> Optional[Any]:
        """Extends Ray Train V2's ``DistributedTrainFnUtils.get_checkpoint``; runs on a
        training worker: the run's own latest checkpoint, else the initial one."""
        own = super().get_checkpoint()
        if self._initial_checkpoint is None:
            return own
        if own is not None and own.path.rstrip("/").rsplit("/", 1)[-1] not in self._known:
            return own
        return self._initial_checkpoint

    def report(
        self,
        metrics: dict[str, Any],
        checkpoint: Optional[Any] = None,
        checkpoint_dir_name: Optional[str] = None,
        **kwargs: Any,
    ) -> None:
        """Extends Ray Train V2's ``DistributedTrainFnUtils.report``: the folder
        name is checked (every rank) and decided (rank 0) before Ray's runs.
        Runs on a training worker."""
        if checkpoint_dir_name is not None:
            validate_dir_name(checkpoint_dir_name)  # every rank, before any I/O
        if kwargs.get("validate_fn") is not None and _committing_controller() is not None:
            raise ValueError(
                "ray.train.report(validate_fn=...) (Ray 2.51 .. 2.53) is not supported "
                "under ray_tt_ext.v2.Tuner: Ray Train keeps checkpoints whose validation "
                "is pending, which Tune's retention would delete. Nothing was reported. "
                "Fix: validate inside the training loop and report the metric, or fit "
                "the trainer outside a Tuner."
            )
        mode = kwargs.get("checkpoint_upload_mode")
        context = _V2.get_train_context()
        rank0 = context.get_world_rank() == 0
        if getattr(mode, "name", None) == "NO_UPLOAD":
            # The user wrote the checkpoint where it is; Ray records it in place.
            # Nothing is uploaded, so nothing is named or moved; its name is taken.
            if rank0 and checkpoint is not None:
                _run_folder(context).note_in_place(checkpoint.path)
            return super().report(
                metrics,
                checkpoint=checkpoint,
                checkpoint_dir_name=checkpoint_dir_name,
                **kwargs,
            )
        # Rank 0's name is the one Ray broadcasts: checked when rank 0 reports a
        # checkpoint or names the folder (other ranks may upload into it).
        if rank0 and (checkpoint is not None or checkpoint_dir_name is not None):
            checkpoint_dir_name = _run_folder(context).name(
                dict(metrics), checkpoint_dir_name
            )
        return super().report(
            metrics,
            checkpoint=checkpoint,
            checkpoint_dir_name=checkpoint_dir_name,
            **kwargs,
        )


class ControllerBarrier:
    """Ray Train V2's ``SynchronizationActor`` handle, for a ``ray_tt_ext.v2.Tuner``
    trial's worker group: the barrier of that group, kept in the run's
    controller (``_controller.TrialController.barrier_call``) instead of an
    actor of its own (a Python process fewer per trial).

    Made in the run's controller (trial actor) per worker group; travels to the group's
    training workers, where ``ray.train.report`` and ``ray.train.collective``
    call ``<handle>.broadcast_from_rank_zero.remote(...)`` as on Ray's actor.
    ``generation`` tells this group's barrier from an earlier group's (a call
    of a group already shut down fails, as on Ray's killed actor).
    """

    def __init__(self, controller: Any, generation: int):
        self._controller = controller
        self._generation = generation

    @property
    def generation(self) -> int:
        return self._generation

    def __getattr__(self, method: str) -> _BarrierMethod:
        if method.startswith("_"):
            raise AttributeError(method)
        return _BarrierMethod(self._controller, self._generation, method)

    def __repr__(self) -> str:
        return f"ControllerBarrier(generation={self._generation})"


class _BarrierMethod:
    """``ControllerBarrier.<method>``: ``.remote(...)`` as on an actor handle's method."""

    def __init__(self, controller: Any, generation: int, method: str):
        self._controller = controller
        self._generation = generation
        self._method = method

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        return self._controller.barrier_call.remote(
            self._generation, self._method, *args, **kwargs
        )


class NoDatasetShards:
    """The dataset shard provider of a ``ray_tt_ext.v2.Tuner`` trial whose trainer
    has no datasets (Ray Train V2's ``DatasetShardProvider`` protocol). Ray's
    starts a ``DatasetManager`` actor per worker group even then, a Python
    process per trial that serves nothing. Made in the run's controller; on a
    training worker, ``ray.train.get_dataset_shard`` raises ``KeyError`` as
    Ray's does for a name it does not have."""

    def get_dataset_shard(self, dataset_info: Any) -> Any:
        raise KeyError(
            f"Dataset shard for '{dataset_info.dataset_name}' not found: this "
            "trainer has no datasets. Fix: pass the dataset in the trainer's "
            "`datasets` argument."
        )


def _committing_controller() -> Optional[Any]:
    """The run's controller, if it takes reports as they are made (the controller
    of a ``ray_tt_ext.v2.Tuner`` trial: ``_controller.TrialController``)."""
    try:
        controller = _V2.get_train_context().controller_actor
    except Exception:  # Ray's local mode: no controller
        return None
    try:
        controller.commit_report  # noqa: B018  (an actor handle's method, if it has it)
    except AttributeError:
        return None
    return controller


def _commit_each_report(context: Any, controller: Any) -> None:
    """Patches Ray Train V2's ``TrainContext._wait_then_report`` on this worker's
    context (runs on a training worker, in the thread that hands a report
    over: the training loop's, or an ASYNC upload's).

    Ray puts the report in the worker's result queue, where it waits for the
    controller's next poll (up to ``RAY_TRAIN_HEALTH_CHECK_INTERVAL_S``): a
    worker that dies meanwhile takes the report with it. Here the hand-off
    returns only once the controller recorded the report (its snapshot is in
    storage) and Tune's driver took it, so a ``report()`` that returned (for
    ASYNC: an upload that finished) is never lost.
    """
    handed_over = context._wait_then_report

    def wait_then_report(training_report: Any, report_call_index: int) -> None:
        handed_over(training_report, report_call_index)
        ray.get(controller.commit_report.remote(report_call_index))

    context._wait_then_report = wait_then_report


def _own_upload_pool(context: Any) -> None:
    """Patches Ray Train V2's ``TrainContext.checkpoint_upload_threadpool`` on this
    worker's context (runs on a training worker, under a ``v2.Tuner`` trial).

    Ray's default is one pool shared by every context of the process, which
    Ray shuts down when a training function returns: a worker kept for the
    next trial (``_controller``'s kept workers) would refuse that trial's
    ``checkpoint_upload_mode=ASYNC`` uploads. Each run gets a pool of its own,
    of Ray's size; Ray shuts it down as it did the shared one."""
    shared = getattr(type(context), "checkpoint_upload_threadpool", None)
    if getattr(context, "checkpoint_upload_threadpool", None) is shared:
        context.checkpoint_upload_threadpool = ThreadPoolExecutor(
            max_workers=_V2.MAX_CHECKPOINT_UPLOAD_THREADS
        )


def _forget_other_runs(context: Any) -> None:
    """Drop the cached folder lists of other runs (a worker kept between trials
    runs one trial's loop at a time); runs on a training worker."""
    path = context.get_storage().experiment_fs_path
    with _FOLDERS_LOCK:
        for other in [p for p in _FOLDERS if p != path]:
            del _FOLDERS[other]


def _torch_distributed() -> Any:
    """``torch.distributed`` if this process imported torch and it has a default
    process group, else ``None`` (never imports torch)."""
    dist = getattr(sys.modules.get("torch"), "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist
    return None


def release_process_group() -> None:
    """Destroy this worker's default torch process group, if it has one (runs on
    a kept training worker: at the end of a run whose backend is not torch's,
    where the loop may have made one itself; before a run whose torch setup
    cannot keep the one the worker holds): the run's setup makes a new one,
    as on a new worker."""
    dist = _torch_distributed()
    if dist is not None:
        dist.destroy_process_group()


def sum_of_ones_over_process_group() -> float:
    """An all-reduce of 1 over this worker's default torch process group (runs on
    every kept training worker at once, at the end of a run): the world size
    when every rank's group is in step. When a rank left a collective pending,
    the other ranks' all-reduces pair with that one and return, and that
    rank's waits for a partner that never comes (the caller's timeout)."""
    torch = sys.modules["torch"]
    ones = torch.ones(1)
    _torch_distributed().all_reduce(ones)
    return float(ones.item())


def process_group_state() -> Optional[tuple[str, int, int]]:
    """This worker's default torch process group as (backend, rank, world size),
    or ``None`` without one (runs on a training worker, before a run's backend
    setup)."""
    dist = _torch_distributed()
    if dist is None:
        return None
    return str(dist.get_backend()).lower(), dist.get_rank(), dist.get_world_size()


class PolicyTrainFn:
    """The training function a ray_tt_ext.v2 trainer sends: Ray's, plus safe names.

    Built on the driver by ``_V2TrainerMixin._get_train_func``; called on every
    training worker, where it installs :class:`_NamingTrainFnUtils` (Ray has
    just installed its own ``DistributedTrainFnUtils`` there) and runs the
    user's loop.
    """

    def __init__(self, train_fn: Callable[[], Any]):
        self._train_fn = train_fn
        self._initial_checkpoint: Optional[Any] = None
        self._known: tuple = ()

    def starting_from(
        self, initial_checkpoint: Optional[Any], known: tuple
    ) -> PolicyTrainFn:
        """This function, starting the run from ``initial_checkpoint`` while the run
        has no checkpoint of its own (names in ``known`` are older ones). Set in
        the Tune trial actor by ``ray_tt_ext.v2.Tuner``."""
        self._initial_checkpoint, self._known = initial_checkpoint, tuple(known)
        return self

    def __call__(self) -> Any:
        """Patches Ray Train V2's worker hook (``set_train_fn_utils``), then runs
        the user's loop. Runs on a training worker.

        Under a ``ray_tt_ext.v2.Tuner`` trial's controller, each report also
        waits for the controller (:func:`_commit_each_report`), and the end of
        the loop is told to it at once."""
        controller = _committing_controller()
        if controller is None:
            return self._call()
        context = _V2.get_train_context()
        _own_upload_pool(context)
        _forget_other_runs(context)
        _commit_each_report(context, controller)
        try:
            return self._call()
        finally:
            controller.training_ended.remote()

    def _call(self) -> Any:
        current = _V2.get_train_fn_utils()
        if type(current) is _V2.DistributedTrainFnUtils:
            _V2.set_train_fn_utils(
                _NamingTrainFnUtils(self._initial_checkpoint, self._known)
            )
        elif not isinstance(current, _NamingTrainFnUtils):
            logger.warning(
                "ray_tt_ext.v2: this worker's ray.train.report goes through %s, not Ray's "
                "DistributedTrainFnUtils; checkpoint folders keep Ray's names and are not "
                "checked (Ray's local mode, or a Ray release ray_tt_ext does not know).",
                type(current).__name__,
            )
        return self._train_fn()


# ---------------------------------------------------------------------------
# Trainers
# ---------------------------------------------------------------------------

_V2_SENDS = (
    "a Ray Train V2 trainer ships it to its controller actor and every training "
    "worker (train_loop_config twice: inside the training function and in the run "
    "context)"
)
_V2_ADVICE = (
    "Fix: pass large objects through the object store instead of capturing them: "
    "`datasets=` for data, or `ref = ray.put(obj)` on the driver, the ref in "
    "`train_loop_config`, and `ray.get(ref)` inside the training function."
)


def v2_payload(trainer: Any) -> dict[str, Any]:
    """What a V2 trainer sends to its controller that it may have captured:
    the training function and ``train_loop_config``."""
    return {
        "train_loop_per_worker": trainer.train_loop_per_worker,
        "train_loop_config": trainer.train_loop_config,
    }


# ``inspect_payload(trainer)`` measures a Train V2 trainer (Ray's or ours) by what
# its fit() sends, not as the whole instance (which never travels).
register_payload_view(_compat.is_train_v2_trainer, v2_payload)


class _V2TrainerMixin:
    """The ray_tt_ext.v2 half of ``DataParallelTrainer`` and ``TorchTrainer``."""

    #: Largest payload (bytes) ``fit()`` sends; ``None``: the guard's default
    #: (``RAY_TT_EXT_PAYLOAD_LIMIT``, else Ray's).
    payload_limit: Optional[int] = None

    def _validate_configs(self) -> None:
        """Refuse a process without Train V2 with the fix, then Ray's checks.

        Extends Ray Train V2's ``DataParallelTrainer._validate_configs``
        (called by its constructor); runs where the trainer is built.
        """
        _compat.ensure_train_v2(f"ray_tt_ext.v2.{type(self).__name__}")
        super()._validate_configs()

    def _get_train_func(self) -> Callable[[], Any]:
        """Ray's training function, wrapped to name checkpoints safely on the workers.

        Overrides Ray Train V2's ``DataParallelTrainer._get_train_func``; runs
        where ``fit()`` is called (driver, or a Tune trial actor).
        """
        return PolicyTrainFn(super()._get_train_func())

    def fit(self) -> Any:
        """Measure the payload, then Ray's ``fit()``.

        Extends Ray Train V2's ``DataParallelTrainer.fit``; runs where it is
        called (driver, or a Tune trial actor), before anything is sent.

        Raises:
            PayloadTooLargeError: the training function and
                ``train_loop_config`` are over the payload limit.
        """
        if getattr(self, "_measured_by_tuner", False):
            # A trial of ray_tt_ext.v2.Tuner: the Tuner measured what Tune
            # registered; the arguments came through the object store.
            return super().fit()
        check_registered_payload(
            v2_payload(self),
            what=f"What {type(self).__name__} sends to its controller",
            name=type(self).__name__,
            limit=self.payload_limit,
            sent_as=_V2_SENDS,
            advice=_V2_ADVICE,
        )
        return super().fit()


class DataParallelTrainer(_V2TrainerMixin, _V2.DataParallelTrainer):
    """Ray Train V2's ``DataParallelTrainer`` with safe checkpoint names and a
    payload guard. Same constructor as Ray's."""


_TORCH: list[type] = []
_TORCH_LOCK = threading.Lock()


def torch_trainer() -> type:
    """``ray_tt_ext.v2.TorchTrainer``, built the first time it is named (imports torch)."""
    with _TORCH_LOCK:
        if not _TORCH:
            try:
                from ray.train.v2.torch.torch_trainer import TorchTrainer as RayTorchTrainer
            except ImportError as e:
                raise ImportError(
                    f"ray_tt_ext.v2.TorchTrainer needs torch, which could not be "
                    f"imported ({e}). Fix: pip install 'ray-tt-ext[torch]'."
                ) from e

            class TorchTrainer(_V2TrainerMixin, RayTorchTrainer):
                """Ray Train V2's ``TorchTrainer`` with safe checkpoint names and a
                payload guard. Same constructor as Ray's."""

            TorchTrainer.__module__ = "ray_tt_ext.v2"  # pickled by reference there
            TorchTrainer.__qualname__ = "TorchTrainer"
            _TORCH.append(TorchTrainer)
        return _TORCH[0]
