"""Checkpoint naming rules, shared by Train V1 (``_storage``) and Train V2 (``v2._train``).

Two pieces, one implementation each:

* **The policy** (pure functions): a checkpoint's index (``"sequential"``, a
  metric, or a callable) and its folder name (a ``str.format`` template or a
  callable), validated to one safe path component.
* **The run-folder rules** (:class:`FolderListing`): the checkpoint folders
  already in a trial (V1) or run (V2) folder, listed once per process; a
  folder nobody recorded is lost progress, moved aside intact, never
  overwritten; a sequential index continues after the highest one on disk.

Rules (also in docs/guide/checkpoint-names.md):

* A rendered name must be one safe path component: not empty, not ``.`` or
  ``..``, no ``/`` or ``\\``, no NUL or other control character, at most 255
  bytes in UTF-8. Otherwise: ``ValueError``, nothing is written.
* Indices strictly increase; a policy that returns an index not above the
  current one is rejected (``ValueError``).
* NaN and infinities render as Python spells them: ``nan``, ``inf``, ``-inf``
  (``{loss:.2f}`` of NaN gives ``nan``). They cannot be an index.

Runs wherever a checkpoint is named: Tune trial actors and Train V1 workers
(through ``_storage``), Train V2 training workers (through ``v2._train``),
the driver. Imports no other ray_tt_ext module (no trainer, Tuner, storage
or executor code reaches a worker through it).
"""

from __future__ import annotations

import logging
import math
import re
import string
import threading
from collections.abc import Callable, Iterable
from typing import Any, Optional, Union

import pyarrow.fs

logger = logging.getLogger("ray_tt_ext")

SEQUENTIAL = "sequential"
DEFAULT_DIR_NAME_TEMPLATE = "checkpoint_{index:06d}"
_MAX_NAME_BYTES = 255

IndexPolicy = Union[str, Callable[[int, dict[str, Any]], int]]
NamePolicy = Union[str, Callable[[int, dict[str, Any]], str]]


# ---------------------------------------------------------------------------
# The policy: pure functions
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
# Run-folder rules
# ---------------------------------------------------------------------------


def list_folders(fs: pyarrow.fs.FileSystem, path: str) -> set[str]:
    """The folders directly in ``path`` now (one request; ``set()`` if it is missing).

    Uncached: :class:`FolderListing` keeps this process's view instead.
    """
    infos = fs.get_file_info(pyarrow.fs.FileSelector(path, allow_not_found=True))
    return {i.base_name for i in infos if i.type == pyarrow.fs.FileType.Directory}


def continue_index(
    index_policy: IndexPolicy, name_policy: NamePolicy, names: Iterable[str], current: int
) -> int:
    """Where a sequential index goes on: past the highest index read back from ``names``.

    Any other index policy renders its own indices again: ``current`` as is.
    """
    if index_policy != SEQUENTIAL:
        return current
    highest = highest_index(name_policy, names)
    return current if highest is None or highest <= current else highest


class FolderListing:
    """The checkpoint folders directly in one trial (V1) or run (V2) folder.

    One object per folder path per process (:meth:`of`), shared by every
    naming decision made there. Its contract, the one both namings rely on:

    * :meth:`names`: the folders in it, listed from storage **once per
      process** (on cloud storage each listing is a request), plus the names
      noted since. A storage error is an ``OSError`` saying that the
      never-overwrite check cannot run; the listing is tried again next time.
    * :meth:`note`: this process decided a checkpoint folder name; it counts
      as existing from now on.
    * :meth:`is_gone`: whether a listed folder has been deleted since (one
      request; Ray's ``num_to_keep`` deletes folders), and if so forget it.
    * :meth:`move_aside`: a folder of lost progress (written, never recorded)
      moves, intact, to ``<name>.unrecorded`` (``-2``, ... if taken) next to
      it, with a warning naming both paths; several processes may do this at
      once, and a folder another one moved already is left alone.

    ``kind`` ("trial folder", "run folder") is how messages call the folder.
    """

    _BY_PATH: dict[str, FolderListing] = {}
    _BY_PATH_LOCK = threading.Lock()

    def __init__(self, fs: pyarrow.fs.FileSystem, path: str, kind: str):
        self.fs, self.path, self.kind = fs, path, kind
        self._names: Optional[set[str]] = None
        self._lock = threading.RLock()

    @classmethod
    def of(
        cls, fs: pyarrow.fs.FileSystem, path: str, kind: str = "trial folder"
    ) -> FolderListing:
        """This process's listing of ``path`` (made on first use)."""
        with cls._BY_PATH_LOCK:
            listing = cls._BY_PATH.get(path)
            if listing is None:
                listing = cls._BY_PATH[path] = cls(fs, path, kind)
            return listing

    def names(self) -> set[str]:
        """The folders in this folder: listed once per process, plus those noted since."""
        with self._lock:
            if self._names is None:
                try:
                    names = list_folders(self.fs, self.path)
                except Exception as e:
                    raise OSError(
                        f"Could not list the {self.kind} {self.path} to check for "
                        f"existing checkpoint folders ({type(e).__name__}: {e}); refusing "
                        "to save a checkpoint that could overwrite one. Nothing was "
                        "written. Fix: check that the storage is reachable and readable "
                        "from every node."
                    ) from e
                self._names = names
            return set(self._names)

    def note(self, name: str) -> None:
        """A checkpoint folder this process decided (it exists from now on)."""
        with self._lock:
            if self._names is not None:
                self._names.add(name)

    def is_gone(self, name: str) -> bool:
        """Whether ``name`` no longer exists in storage; if so it is forgotten here."""
        gone = (
            self.fs.get_file_info(f"{self.path}/{name}").type
            == pyarrow.fs.FileType.NotFound
        )
        if gone:
            with self._lock:
                if self._names is not None:
                    self._names.discard(name)
        return gone

    def move_aside(self, name: str) -> str:
        """Move the folder of lost progress ``name`` out of the way, intact.

        Returns the name it has now (``<name>.unrecorded[-n]``). A warning names
        both paths.
        """
        with self._lock:
            target = unrecorded_name(name, self.names())
            src, dst = f"{self.path}/{name}", f"{self.path}/{target}"
            try:
                _move_dir(self.fs, src, dst)
            except FileNotFoundError:
                if self.fs.get_file_info(dst).type == pyarrow.fs.FileType.NotFound:
                    raise
                # another process moved it first
            else:
                logger.warning(
                    "Checkpoint folder %s was written by an earlier attempt but never "
                    "recorded (lost progress); a new checkpoint takes its name. Moved "
                    "it, intact, to %s.",
                    src,
                    dst,
                )
            if self._names is not None:
                self._names.discard(name)
                self._names.add(target)
            return target


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
