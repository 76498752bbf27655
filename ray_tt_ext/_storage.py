"""Pluggable checkpoint indexing and naming (seed 003).

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

Rules (also in the README):

* A rendered name must be one safe path component: not empty, not ``.`` or
  ``..``, no ``/`` or ``\\``, no NUL or other control character, at most 255
  bytes in UTF-8. Otherwise: ``ValueError``, nothing is written.
* Two checkpoints that render the same name: ``ValueError``, nothing is
  overwritten. A folder already in the trial folder that the trial never
  recorded (lost progress): with sequential indexing it is skipped; with a
  metric or callable index a folder matching the template is moved aside
  intact to ``<name>.unrecorded``; any other is a ``ValueError``.
* Indices strictly increase; a policy that returns an index not above the
  current one is rejected (``ValueError``).
* NaN and infinities render as Python spells them: ``nan``, ``inf``, ``-inf``
  (``{loss:.2f}`` of NaN gives ``nan``). They cannot be an index.
* In a ``DataParallelTrainer`` each worker names the checkpoint it uploads
  from its own reported metrics; rank 0's decision is the one the coordinator
  and the driver record. Workers whose metrics render different names get a
  ``ValueError`` naming both (report the template's metrics identically on
  every worker).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import math
import re
import string
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

import pyarrow.fs

from ray_tt_ext import _compat
from ray_tt_ext._compat import CHECKPOINT_DIR_NAME

logger = logging.getLogger("ray_tt_ext")

#: Metric key under which the checkpoint's index is reported next to
#: ``checkpoint_dir_name``.
CHECKPOINT_INDEX_KEY = "checkpoint_index"
#: Tune's iteration counter, filled in by Tune *after* a function trainable or
#: a Train worker has saved the checkpoint reported with it.
TRAINING_ITERATION = "training_iteration"

SEQUENTIAL = "sequential"
DEFAULT_DIR_NAME_TEMPLATE = "checkpoint_{index:06d}"
_MAX_NAME_BYTES = 255

IndexPolicy = Union[str, Callable[[int, dict[str, Any]], int]]
NamePolicy = Union[str, Callable[[int, dict[str, Any]], str]]


# ---------------------------------------------------------------------------
# Pure policy functions
# ---------------------------------------------------------------------------


def template_fields(template: str) -> set[str]:
    """The named fields of a ``str.format`` template.

    Raises:
        ValueError: bad syntax, or a positional field (``{}``, ``{0}``).
    """
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as e:
        raise ValueError(
            f"checkpoint_dir_name template {template!r} is not valid str.format "
            f"syntax: {e}. Example: 'checkpoint_{{training_iteration:06d}}-{{loss:.2f}}'."
        ) from None
    fields = set()
    for _, field_name, format_spec, _ in parsed:
        if field_name is None:
            continue
        base = re.split(r"[.\[]", field_name, maxsplit=1)[0]
        if base == "" or base.isdigit():
            raise ValueError(
                f"checkpoint_dir_name template {template!r} has a positional field "
                f"'{{{field_name}}}'. Use named fields: 'index' or a reported metric, "
                "e.g. 'checkpoint_{index:06d}'."
            )
        if format_spec and "{" in format_spec:
            raise ValueError(
                f"checkpoint_dir_name template {template!r} nests a field in a "
                "format spec; use a fixed spec such as '{loss:.2f}'."
            )
        fields.add(base)
    return fields


def validate_dir_name(name: Any) -> str:
    """Return ``name`` if it is one safe path component, else raise ``ValueError``."""
    if not isinstance(name, str):
        raise ValueError(
            f"A checkpoint folder name must be a str, got {type(name).__name__} "
            f"{name!r}. Fix: make checkpoint_dir_name return a str."
        )
    problem = None
    if name in ("", ".", ".."):
        problem = "is empty or a relative reference"
    elif "/" in name or "\\" in name:
        problem = "contains a path separator"
    elif any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        problem = "contains NUL or another control character"
    elif len(name.encode("utf-8")) > _MAX_NAME_BYTES:
        problem = f"is longer than {_MAX_NAME_BYTES} bytes"
    if problem:
        raise ValueError(
            f"Checkpoint folder name {name!r} {problem}; it must be a single path "
            "component inside the trial folder. Nothing was written. Fix: change "
            "checkpoint_dir_name, or the metrics it uses, so the name is a plain "
            "file name (no '/', '..', NUL, at most 255 bytes)."
        )
    return name


def render_dir_name(policy: NamePolicy, index: int, metrics: dict[str, Any]) -> str:
    """The folder name for a checkpoint: validated, one path component."""
    if callable(policy):
        return validate_dir_name(policy(index, dict(metrics)))
    values = {**metrics, "index": index}
    try:
        name = policy.format(**values)
    except KeyError as e:
        missing = e.args[0]
        available = sorted(str(k) for k in values)
        raise ValueError(
            f"checkpoint_dir_name template {policy!r} uses '{missing}', which is not "
            f"in the reported metrics. Available keys: {available}. Nothing was "
            "written. Fix: report that metric with every checkpoint, or change the "
            "template."
        ) from None
    except (ValueError, TypeError, IndexError, AttributeError) as e:
        raise ValueError(
            f"checkpoint_dir_name template {policy!r} could not be rendered with "
            f"index={index} and the reported metrics: {e}. Nothing was written."
        ) from None
    return validate_dir_name(name)


def next_index(policy: IndexPolicy, current: int, metrics: dict[str, Any]) -> int:
    """The next checkpoint index; strictly above ``current`` or ``ValueError``."""
    if callable(policy):
        value = policy(current, dict(metrics))
        source = "the checkpoint_index callable"
    elif policy == SEQUENTIAL:
        value, source = current + 1, "sequential"
    else:
        if policy not in metrics:
            raise ValueError(
                f"checkpoint_index='{policy}' but the reported metrics have no "
                f"'{policy}'. Available keys: {sorted(map(str, metrics))}. Fix: report "
                "it with every checkpoint, or use 'sequential'."
            )
        value, source = metrics[policy], f"metric '{policy}'"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(
            f"A checkpoint index must be an integer, got {value!r} from {source}."
        )
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise ValueError(
                f"A checkpoint index must be a whole number, got {value!r} from "
                f"{source}. NaN and infinities cannot be an index."
            )
    value = int(value)
    if value <= current:
        raise ValueError(
            f"Checkpoint indices must strictly increase: {source} gave {value} after "
            f"{current}. Nothing was written. Fix: index by a metric that grows with "
            "every checkpoint (e.g. 'training_iteration'), or use 'sequential'."
        )
    return value


def name_pattern(policy: NamePolicy) -> Optional[re.Pattern]:
    """A regex matching the names ``policy`` renders; ``index`` is a named group.

    ``None`` for callables, and for templates with neither literal text nor
    an ``{index}`` (they would match any folder, a user's own artifacts included).
    """
    if callable(policy):
        return None
    parts, literal_text = [], ""
    for literal, field_name, _, _ in string.Formatter().parse(policy):
        parts.append(re.escape(literal))
        literal_text += literal
        if field_name is None:
            continue
        if field_name == "index" and "(?P<index>" not in "".join(parts):
            parts.append(r"(?P<index>-?\d+)")
        else:
            parts.append(r".*?")
    if not literal_text and "(?P<index>" not in "".join(parts):
        return None
    # Never a folder already moved aside (``<name>.unrecorded``, ``-2``, ...).
    return re.compile(r"^(?!.*\.unrecorded(-\d+)?$)" + "".join(parts) + "$")


def index_pattern(policy: NamePolicy) -> Optional[re.Pattern]:
    """A regex that reads the index back from names rendered by ``policy``.

    Only for string templates with an ``{index}`` field; ``None`` otherwise.
    """
    if callable(policy) or "index" not in template_fields(policy):
        return None
    return name_pattern(policy)


def highest_index(policy: NamePolicy, names: Iterable[str]) -> Optional[int]:
    """The highest index read back from ``names`` rendered by ``policy`` (sequential
    templates with ``{index}``); ``None`` if none can be read."""
    pattern = None if callable(policy) else index_pattern(policy)
    if pattern is None:
        return None
    indices = [int(m.group("index")) for m in map(pattern.match, names) if m is not None]
    return max(indices, default=None)


def unrecorded_name(name: str, existing: set[str]) -> str:
    """Where a folder of lost progress moves: ``<name>.unrecorded`` (``-2``, ... if taken)."""
    target, n = f"{name}.unrecorded", 1
    while target in existing:
        n += 1
        target = f"{name}.unrecorded-{n}"
    return target


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

    All other fields are Ray's.
    """

    checkpoint_index: IndexPolicy = SEQUENTIAL
    checkpoint_dir_name: NamePolicy = DEFAULT_DIR_NAME_TEMPLATE

    def __post_init__(self) -> None:
        super().__post_init__()
        validate_policy(self.checkpoint_index, self.checkpoint_dir_name)


def validate_policy(index: Any, name: Any) -> None:
    """Check a ``checkpoint_index`` / ``checkpoint_dir_name`` pair when it is configured.

    Shared by :class:`CheckpointConfig` and ``ray_tt_ext.v2.CheckpointConfig``.
    """
    if not callable(index) and not (isinstance(index, str) and index):
        raise ValueError(
            f"checkpoint_index must be 'sequential', a metric name, or a callable "
            f"(current_index, metrics) -> int; got {index!r}."
        )
    if callable(name):
        return
    if not isinstance(name, str):
        raise ValueError(
            "checkpoint_dir_name must be a str.format template or a callable "
            f"(index, metrics) -> str; got {name!r}."
        )
    template_fields(name)  # syntax check
    if "/" in name or "\\" in name:
        raise ValueError(
            f"checkpoint_dir_name template {name!r} contains a path separator; "
            "a checkpoint folder must be one path component in the trial folder."
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
            _note_written(self.trial_fs_path, name)
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
          again: a folder matching the template is moved aside intact (see
          :meth:`_move_aside`); any other is reserved.

        A storage error while listing is kept and raised at the first
        checkpoint decision (an error naming the path; nothing is written).
        """
        if self.trial_dir_name is None or self._reconciled_trial_dir == self.trial_fs_path:
            return
        self._reconciled_trial_dir = self.trial_fs_path
        try:
            existing = _list_dirs(self.storage_filesystem, self.trial_fs_path)
        except Exception as e:
            self._listing_error = (
                f"Could not list the trial folder {self.trial_fs_path} to check for "
                f"existing checkpoint folders ({type(e).__name__}: {e}); refusing to "
                "save a checkpoint that could overwrite one. Nothing was written. Fix: "
                "check that the storage is reachable and readable from every node."
            )
            return
        unrecorded = existing - self._used_checkpoint_dir_names
        sequential = self.checkpoint_index_policy == SEQUENTIAL
        pattern = None
        if isinstance(self.checkpoint_dir_name_policy, str):
            pattern = (index_pattern if sequential else name_pattern)(
                self.checkpoint_dir_name_policy
            )
        for name in sorted(unrecorded):
            if not sequential and pattern is not None and pattern.match(name):
                self._move_aside(name, existing)
            else:
                self._unrecorded_dir_names.add(name)
        if not sequential or pattern is None:
            return
        highest = highest_index(self.checkpoint_dir_name_policy, existing)
        if highest is not None and highest > self.current_checkpoint_index:
            self.current_checkpoint_index = highest

    def _move_aside(self, name: str, existing: set[str]) -> None:
        """Move a folder of lost progress out of the run's way, intact.

        The new name is ``<name>.unrecorded`` (``.unrecorded-2``, ... if taken),
        next to it in the trial folder; a warning names both paths. Several
        workers may do this at once before training starts: they pick the same
        new name, and a folder already moved by another is left alone.
        """
        target = unrecorded_name(name, existing)
        src = f"{self.trial_fs_path}/{name}"
        dst = f"{self.trial_fs_path}/{target}"
        fs = self.storage_filesystem
        try:
            _move_dir(fs, src, dst)
        except FileNotFoundError:
            if fs.get_file_info(dst).type == pyarrow.fs.FileType.NotFound:
                raise
            return  # another worker moved it
        existing.add(target)
        logger.warning(
            "Checkpoint folder %s was written by an earlier attempt of this trial but "
            "never recorded (lost progress); the run renders that name again. Moved "
            "it, intact, to %s.",
            src,
            dst,
        )


# Folders listed (and written since) per trial folder, once per process: on
# cloud storage each listing is a request.
_LISTINGS: dict[str, set[str]] = {}
_LISTINGS_LOCK = threading.Lock()


def _list_dirs(fs: pyarrow.fs.FileSystem, path: str) -> set[str]:
    """The folders directly in ``path`` (``set()`` if it does not exist)."""
    with _LISTINGS_LOCK:
        cached = _LISTINGS.get(path)
        if cached is not None:
            return set(cached)
    infos = fs.get_file_info(pyarrow.fs.FileSelector(path, allow_not_found=True))
    names = {info.base_name for info in infos if info.type == pyarrow.fs.FileType.Directory}
    with _LISTINGS_LOCK:
        _LISTINGS.setdefault(path, set()).update(names)
        return set(_LISTINGS[path])


def _note_written(path: str, name: str) -> None:
    """Keep this process's listing of ``path`` current after deciding ``name``."""
    with _LISTINGS_LOCK:
        if path in _LISTINGS:
            _LISTINGS[path].add(name)


def _move_dir(fs: pyarrow.fs.FileSystem, src: str, dst: str) -> None:
    """Rename a folder; on stores without folder renames (S3), copy then delete."""
    if fs.get_file_info(src).type == pyarrow.fs.FileType.NotFound:
        raise FileNotFoundError(src)
    try:
        fs.move(src, dst)
    except (NotImplementedError, OSError):
        # Object stores: copy, then delete. Workers of one trial may do this at
        # once before training starts; they copy the same objects to the same
        # new name, so the result is the same folder, intact.
        try:
            pyarrow.fs.copy_files(src, dst, source_filesystem=fs, destination_filesystem=fs)
            fs.delete_dir(src)
        except FileNotFoundError:
            if fs.get_file_info(dst).type == pyarrow.fs.FileType.NotFound:
                raise
            # another worker finished the move first
    with _LISTINGS_LOCK:
        listing = _LISTINGS.get(src.rsplit("/", 1)[0])
        if listing is not None:
            listing.discard(src.rsplit("/", 1)[1])
            listing.add(dst.rsplit("/", 1)[1])


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
