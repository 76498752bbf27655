"""Pluggable checkpoint indexing and naming (ray-project/ray#39927).

Ray bumps a trial's checkpoint index in three places (class Trainable,
function session, and the driver's ``Trial``), each by calling
``StorageContext._update_checkpoint_index(metrics)`` on its own copy of the
trial's ``StorageContext``, and names the folder ``checkpoint_{index:06d}``.
:class:`StorageContext` here takes both decisions from a policy
(:class:`CheckpointConfig`) where the checkpoint is written (trial actor or
training worker), writes them into the reported metrics
(``checkpoint_dir_name``, ``checkpoint_index``), and the driver's copy adopts
them from there, so the two cannot drift. On restore the index is reconciled
with the checkpoint folders already in the trial folder (listed once per
process, never where Tune's driver loop runs); an existing folder is never
written to again.

The policy functions and the run-folder rules (listing, lost progress moved
aside) are ``_naming``'s, shared with Train V2. Rules (also in the README):

* A rendered name must be one safe path component (``_naming.validate_dir_name``).
* Two checkpoints that render the same name: ``ValueError``, nothing is
  overwritten. A folder already in the trial folder that the trial never
  recorded (lost progress): with sequential indexing it is skipped; with a
  metric or callable index a folder matching the template is moved aside
  intact to ``<name>.unrecorded``; any other is a ``ValueError``.
* Indices strictly increase; NaN and infinities cannot be an index.
* In a ``DataParallelTrainer`` each worker names the checkpoint it uploads
  from its own reported metrics; rank 0's decision is the one the coordinator
  and the driver record. Workers whose metrics render different names get a
  ``ValueError`` naming both (report the template's metrics identically on
  every worker).
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ray_tt_ext import _compat
from ray_tt_ext._compat import CHECKPOINT_DIR_NAME
from ray_tt_ext._naming import (
    DEFAULT_DIR_NAME_TEMPLATE,
    SEQUENTIAL,
    FolderListing,
    IndexPolicy,
    NamePolicy,
    continue_index,
    index_pattern,
    name_pattern,
    next_index,
    render_dir_name,
    validate_dir_name,
    validate_policy,
)

#: Metric key under which the checkpoint's index is reported next to
#: ``checkpoint_dir_name``.
CHECKPOINT_INDEX_KEY = "checkpoint_index"
#: Tune's iteration counter, filled in by Tune *after* a function trainable or
#: a Train worker has saved the checkpoint reported with it.
TRAINING_ITERATION = "training_iteration"


# ---------------------------------------------------------------------------
# CheckpointConfig
# ---------------------------------------------------------------------------


@dataclass
class CheckpointConfig(_compat.TuneCheckpointConfig):
    """``ray.tune.CheckpointConfig`` plus checkpoint indexing and naming.

    Args:
        checkpoint_index: ``"sequential"`` (Ray's 0, 1, 2, ...), the name of a
            reported metric whose integer value is the index (e.g.
            ``"training_iteration"``), or ``callable(current_index, metrics) -> int``.
            Indices must strictly increase.
        checkpoint_dir_name: a ``str.format`` template over ``index`` and the
            reported metrics (default ``"checkpoint_{index:06d}"``, Ray's names),
            or ``callable(index, metrics) -> str``. Must render one safe path
            component.
        sweep_num_to_keep: keep the ``n`` best checkpoints of the whole sweep
            (over all trials; several may be one trial's), plus the latest
            checkpoint of every trial that may still run and each one PBT may
            still exploit; every other checkpoint is deleted while the sweep
            runs. Ranked by ``checkpoint_score_attribute`` /
            ``checkpoint_score_order``, else by ``TuneConfig(metric, mode)``.
            ``num_to_keep`` still applies inside each trial. An errored trial
            keeps its latest (``Tuner.restore(resume_errored=True)`` resumes
            it). A finished trial none of whose checkpoints is kept has
            ``Result.checkpoint`` ``None``. Default ``None``: Tune's per-trial
            retention only.
        sweep_max_bytes: keep the best checkpoints beyond the protected ones
            only while everything kept stays within this many bytes (with
            ``sweep_num_to_keep``, at most that many). Protected checkpoints are
            never deleted for it: when they alone exceed it, one warning says so.

    All other fields are Ray's.
    """

    checkpoint_index: IndexPolicy = SEQUENTIAL
    checkpoint_dir_name: NamePolicy = DEFAULT_DIR_NAME_TEMPLATE
    sweep_num_to_keep: Optional[int] = None
    sweep_max_bytes: Optional[int] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        validate_policy(self.checkpoint_index, self.checkpoint_dir_name)
        for name in ("sweep_num_to_keep", "sweep_max_bytes"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise ValueError(
                    f"CheckpointConfig({name}={value!r}): must be a positive integer "
                    f"(or None for Tune's per-trial retention only), e.g. {name}="
                    f"{3 if name == 'sweep_num_to_keep' else 10 * 2**30}."
                )


# ---------------------------------------------------------------------------
# StorageContext
# ---------------------------------------------------------------------------


class StorageContext(_compat.StorageContext):
    """Ray's ``StorageContext`` whose checkpoint index and folder name come from a policy.

    Subclass it and override :meth:`_next_checkpoint_index` /
    :meth:`_render_checkpoint_dir_name` for a policy of your own, and pass the
    class to ``ray_tt_ext.Tuner(..., storage_context_cls=...)``.
    """

    def __init__(
        self,
        *args: Any,
        checkpoint_index: IndexPolicy = SEQUENTIAL,
        checkpoint_dir_name: NamePolicy = DEFAULT_DIR_NAME_TEMPLATE,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        self.checkpoint_index_policy = checkpoint_index
        self.checkpoint_dir_name_policy = checkpoint_dir_name
        self._current_checkpoint_dir_name: Optional[str] = None
        # Names recorded for this trial (adopted from the process that saved
        # them, or decided here): never rendered again.
        self._used_checkpoint_dir_names: set[str] = set()
        # Folders found on disk that this trial never recorded (per copy).
        self._unrecorded_dir_names: set[str] = set()
        self._reconciled_trial_dir: Optional[str] = None
        self._listing_error: Optional[str] = None
        # Tune's training_iteration of the latest checkpoint this trial
        # recorded (the one a restarted or restored trial resumes from).
        self._checkpoint_training_iteration = 0

    def __copy__(self) -> StorageContext:
        # Tune copies the experiment's context into each Trial: give every copy
        # its own bookkeeping instead of sharing the sets.
        new = self.__class__.__new__(self.__class__)
        new.__dict__.update(self.__dict__)
        new._used_checkpoint_dir_names = set(self._used_checkpoint_dir_names)
        new._unrecorded_dir_names = set(self._unrecorded_dir_names)
        return new

    def __getstate__(self) -> dict[str, Any]:
        """What another process gets: the trial's record, not this copy's disk view."""
        state = self.__dict__.copy()
        for name in ("_unrecorded_dir_names", "_reconciled_trial_dir", "_listing_error"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickled in a trial actor or training worker: reconcile with the disk now.

        Tune ships the trial's context to the trial actor, and the coordinator
        ships it to each training worker, before any checkpoint of the run is
        written; reconciling here (not at the first save) means every worker
        sees the same folders, never one that another worker just wrote. On
        the driver (which only adopts what those processes decided) nothing is
        listed until a checkpoint is decided there.
        """
        self.__dict__.update(state)
        self._unrecorded_dir_names = set()
        self._reconciled_trial_dir = None
        self._listing_error = None
        if not _compat.is_driver_process():
            self._reconcile_with_disk()

    # -- the policy (override these) ---------------------------------------

    def _policy_metrics(self, metrics: dict[str, Any]) -> dict[str, Any]:
        """The reported metrics, with the ``training_iteration`` Tune will give them.

        A class trainable saves after Tune filled the metric in; a function
        trainable and a Train worker save inside ``report()``, before. There it
        is the iteration of the checkpoint the run resumed from plus the
        reports this session made (Ray's ``_TrainSession.iteration``, counted
        in the same process), exactly what Tune's ``Trainable.train`` assigns.
        """
        if TRAINING_ITERATION in metrics:
            return metrics
        session = _compat.get_session()
        reports = getattr(session, "iteration", None)
        if not isinstance(reports, int):
            return metrics
        iteration = getattr(self, "_checkpoint_training_iteration", 0) + reports
        return {**metrics, TRAINING_ITERATION: iteration}

    def _next_checkpoint_index(self, metrics: dict[str, Any]) -> int:
        """The index of the checkpoint being saved with ``metrics``."""
        return next_index(
            self.checkpoint_index_policy, self.current_checkpoint_index, metrics
        )

    def _render_checkpoint_dir_name(self, index: int, metrics: dict[str, Any]) -> str:
        """The folder name of checkpoint ``index`` saved with ``metrics``."""
        return render_dir_name(self.checkpoint_dir_name_policy, index, metrics)

    # -- Ray's hooks -----------------------------------------------------------

    def _update_checkpoint_index(self, metrics: dict) -> None:
        """Decide (or adopt) the next checkpoint's index and folder name.

        Overrides Ray's ``StorageContext._update_checkpoint_index`` (Ray 2.40 ..
        2.60). Ray calls it in the trial actor (class ``Trainable.save``, the
        function session's ``report``), in each training worker (``report``),
        in the coordinator (``DataParallelTrainer._propagate_results``) and on
        the driver (``Trial.on_checkpoint``). Where the metrics already carry a
        decision (``checkpoint_dir_name`` and ``checkpoint_index``, written by
        the process that saved the checkpoint) it is adopted; otherwise it is
        made here and written into ``metrics``.
        """
        adopted_name = metrics.get(CHECKPOINT_DIR_NAME)
        adopted_index = metrics.get(CHECKPOINT_INDEX_KEY)
        iteration = metrics.get(TRAINING_ITERATION)
        if isinstance(iteration, int):  # the driver's copy: the full result
            self._checkpoint_training_iteration = iteration
        if isinstance(adopted_name, str) and isinstance(adopted_index, int):
            index, name = adopted_index, adopted_name
        else:
            self._reconcile_with_disk()
            if self._listing_error is not None:
                raise OSError(self._listing_error)
            policy_metrics = self._policy_metrics(metrics)
            index = self._next_checkpoint_index(policy_metrics)
            name = validate_dir_name(
                self._render_checkpoint_dir_name(index, policy_metrics)
            )
            if name in self._used_checkpoint_dir_names:
                raise ValueError(
                    f"Checkpoint {index} renders the folder name {name!r}, which an "
                    "earlier checkpoint of this trial already has. Refusing to "
                    "overwrite it. Fix: include a field that changes with every "
                    "checkpoint in checkpoint_dir_name, such as '{index}'."
                )
            if name in self._unrecorded_dir_names:
                raise ValueError(
                    f"Checkpoint {index} renders the folder name {name!r}, but a "
                    f"folder of that name already exists in {self.trial_fs_path} "
                    "and this trial never recorded it. Refusing to overwrite it. "
                    "Fix: move that folder away, or include a field that changes "
                    "with every checkpoint in checkpoint_dir_name, such as '{index}'."
                )
            self._listing().note(name)
            metrics[CHECKPOINT_DIR_NAME] = name
            metrics[CHECKPOINT_INDEX_KEY] = index
        self.current_checkpoint_index = index
        self._current_checkpoint_dir_name = name
        self._used_checkpoint_dir_names.add(name)

    @property
    def checkpoint_dir_name(self) -> str:
        """The current checkpoint's folder name, as the policy rendered it.

        Overrides Ray's ``StorageContext.checkpoint_dir_name`` property.
        """
        if self._current_checkpoint_dir_name is not None:
            return self._current_checkpoint_dir_name
        # No checkpoint decided yet in this process: Ray's name for the index.
        return self._make_checkpoint_dir_name(self.current_checkpoint_index)

    def persist_current_checkpoint(self, checkpoint: Any) -> Any:
        """Persist into the policy's folder, never outside the trial folder.

        Extends Ray's ``StorageContext.persist_current_checkpoint``; runs where
        the checkpoint is saved (trial actor or training worker).
        """
        target = Path(self.checkpoint_fs_path)
        if target.parent != Path(self.trial_fs_path) or target.name in ("", ".", ".."):
            raise ValueError(
                f"Refusing to write checkpoint to {target}: not a folder directly in "
                f"the trial folder {self.trial_fs_path}."
            )
        if _already_there(checkpoint, self.storage_filesystem, self.checkpoint_fs_path):
            # Written into its folder already (a Train V2 run of a
            # ray_tt_ext.v2.Tuner trial): recorded where it is, never copied.
            return checkpoint
        return super().persist_current_checkpoint(checkpoint)

    # -- restore ---------------------------------------------------------------

    def _reconcile_with_disk(self) -> None:
        """Continue after the folders already in the trial folder (once per copy).

        Runs where checkpoints are saved, before the first one of this run
        (after a restore, a failure, or a moved experiment folder). Folders
        this trial recorded are known from the driver's record; any other
        folder is progress the run lost (written, never recorded):

        * with sequential indexing, it is reserved and an index read back from
          its name (string templates with ``{index}``) moves the current index
          past it, so the run skips it;
        * with a metric or callable index, the rerun renders those names
          again: a folder matching the template is moved aside intact
          (``FolderListing.move_aside``); any other is reserved.

        A storage error while listing is kept and raised at the first
        checkpoint decision (an error naming the path; nothing is written).
        """
        if self.trial_dir_name is None or self._reconciled_trial_dir == self.trial_fs_path:
            return
        self._reconciled_trial_dir = self.trial_fs_path
        listing = self._listing()
        try:
            existing = listing.names()
        except OSError as e:
            self._listing_error = str(e)
            return
        sequential = self.checkpoint_index_policy == SEQUENTIAL
        pattern = None
        if isinstance(self.checkpoint_dir_name_policy, str):
            pattern = (index_pattern if sequential else name_pattern)(
                self.checkpoint_dir_name_policy
            )
        for name in sorted(existing - self._used_checkpoint_dir_names):
            if not sequential and pattern is not None and pattern.match(name):
                listing.move_aside(name)  # the rerun renders this name again
            else:
                self._unrecorded_dir_names.add(name)
        self.current_checkpoint_index = continue_index(
            self.checkpoint_index_policy,
            self.checkpoint_dir_name_policy,
            existing,
            self.current_checkpoint_index,
        )

    def _listing(self) -> FolderListing:
        """This process's listing of the trial folder (``_naming.FolderListing``)."""
        return FolderListing.of(self.storage_filesystem, self.trial_fs_path, "trial folder")


def _already_there(checkpoint: Any, filesystem: Any, fs_path: str) -> bool:
    """Whether ``checkpoint`` is the folder ``fs_path`` of ``filesystem`` itself."""
    fs = getattr(checkpoint, "filesystem", None)
    if fs is None or getattr(fs, "type_name", None) != filesystem.type_name:
        return False
    return str(checkpoint.path).rstrip("/") == str(fs_path).rstrip("/")


# ---------------------------------------------------------------------------
# Installing the policy for one Tuner's experiment
# ---------------------------------------------------------------------------

_ACTIVE: contextvars.ContextVar[Optional[Callable[..., Any]]] = contextvars.ContextVar(
    "ray_tt_ext_storage_factory", default=None
)
_install_lock = threading.Lock()
_install_depth = 0
_original_storage_cls: Any = None


def _dispatching_storage_context(*args: Any, **kwargs: Any) -> Any:
    """What ``Experiment._storage_context_cls`` is while a ray_tt_ext fit runs.

    Builds the StorageContext of the Tuner whose ``fit()`` runs in the current
    context (thread), or Ray's own class for anyone else (driver).
    """
    factory = _ACTIVE.get()
    if factory is None:
        # Ray's class (kept after the last fit ends: a plain Tune fit in another
        # thread may have read the dispatcher just before it was uninstalled).
        return (_original_storage_cls or _compat.StorageContext)(*args, **kwargs)
    return factory(*args, **kwargs)


def storage_factory(
    checkpoint_config: Any, storage_context_cls: Optional[type[StorageContext]] = None
) -> Optional[Callable[..., Any]]:
    """A StorageContext factory for a Tuner, or ``None`` for Ray's default."""
    if storage_context_cls is None and not isinstance(checkpoint_config, CheckpointConfig):
        return None
    cls = storage_context_cls or StorageContext
    if isinstance(checkpoint_config, CheckpointConfig):
        index, name = (
            checkpoint_config.checkpoint_index,
            checkpoint_config.checkpoint_dir_name,
        )
    else:
        index, name = SEQUENTIAL, DEFAULT_DIR_NAME_TEMPLATE

    def factory(*args: Any, **kwargs: Any) -> StorageContext:
        return cls(*args, checkpoint_index=index, checkpoint_dir_name=name, **kwargs)

    return factory


@contextlib.contextmanager
def checkpoint_policy_installed(
    checkpoint_config: Any, storage_context_cls: Optional[type[StorageContext]] = None
) -> Iterator[None]:
    """Use the policy for experiments built in this context; undo on exit.

    ``Experiment._storage_context_cls`` is swapped for a dispatcher while at
    least one ray_tt_ext fit runs and restored when the last one returns or
    raises; each fit's policy lives in a context variable, so Tuners with
    different policies (even in threads) do not interfere. Runs on the driver.
    """
    global _install_depth, _original_storage_cls
    factory = storage_factory(checkpoint_config, storage_context_cls)
    if factory is None:
        yield
        return
    with _install_lock:
        if _install_depth == 0:
            _original_storage_cls = _compat.set_experiment_storage_context_cls(
                staticmethod(_dispatching_storage_context)
            )
        _install_depth += 1
    token = _ACTIVE.set(factory)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
        with _install_lock:
            _install_depth -= 1
            if _install_depth == 0:
                _compat.set_experiment_storage_context_cls(_original_storage_cls)
