"""Does the installed Ray have every attribute ray_tt_ext builds on?

``RAY_OVERRIDES`` lists each Ray method, class or function ray_tt_ext
overrides, extends, patches or uses, with the oldest Ray release that has it
(``since``). :func:`missing_ray_attributes` looks each one up on the installed
Ray, so that a Ray release outside the supported range, or a build of Ray that
differs from its release (a fork, a nightly), is refused with the list of what
it lacks before any trial starts (:func:`check_ray_attributes`, called by both
Tuners), and ``python -m ray_tt_ext check-ray`` prints that list without
starting Ray.

Importing a module to look an attribute up never starts Ray. A module that
would import an optional framework (``ray.train.torch``: torch) is read, not
imported, unless this process imported it already.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import importlib.util
import inspect
import re
import sys
import threading
from collections.abc import Callable
from typing import Any, Optional

from packaging.version import Version

from ray_tt_ext._compat.overrides import RAY_OVERRIDES, RayOverride
from ray_tt_ext._compat.versions import (
    MAX_RAY_VERSION,
    MIN_RAY_VERSION,
    RAY_VERSION,
    UnsupportedRayVersionError,
)

#: The parts of ray_tt_ext, by what they build on: Ray Tune's driver and
#: storage (both Tuners), Ray Train V1's trainers and executor
#: (``ray_tt_ext.Tuner``'s trainers), Ray Train V2 (``ray_tt_ext.v2``).
TUNE, TRAIN_V1, TRAIN_V2 = "tune", "train_v1", "train_v2"
PARTS = (TUNE, TRAIN_V1, TRAIN_V2)

#: The modules of ray_tt_ext that build on Ray Train V1's trainers and executor.
_TRAIN_V1_MODULES = frozenset(
    {
        "ray_tt_ext._trainer",
        "ray_tt_ext._executor",
        "ray_tt_ext._executor_host",
        "ray_tt_ext._compat.train_v1",
    }
)
#: The first Ray release with Train V2 by default: what ``since`` is for Train V2
#: (``train_mode.MIN_TRAIN_V2_RAY_VERSION``, without importing it: a Ray build
#: ``train_mode`` cannot import still gets ``check-ray``'s list).
TRAIN_V2_SINCE = Version("2.51.0")
_TRAIN_V2_SINCE = TRAIN_V2_SINCE.release[:2]
#: Modules looked up in their source unless already imported (they import an
#: optional framework).
_READ_NOT_IMPORTED = ("ray.train.torch",)


def part_of(entry: RayOverride) -> str:
    """Which part of ray_tt_ext an entry of ``RAY_OVERRIDES`` belongs to."""
    if Version(entry.since).release >= _TRAIN_V2_SINCE:
        return TRAIN_V2
    if entry.ours.partition(":")[0] in _TRAIN_V1_MODULES:
        return TRAIN_V1
    return TUNE


def applies(entry: RayOverride, version: Version = RAY_VERSION) -> bool:
    """Whether ray_tt_ext builds on the entry's attribute on Ray ``version``
    (``since`` or later, and ``until`` or earlier), which must have it."""
    minor = version.release[:2]
    if minor < Version(entry.since).release[:2]:
        return False
    return entry.until is None or minor <= Version(entry.until).release[:2]


@dataclasses.dataclass(frozen=True)
class MissingRayAttribute:
    """An attribute of ``RAY_OVERRIDES`` that the installed Ray lacks."""

    entry: RayOverride
    #: What the look-up found instead (the module or the name that is not there).
    reason: str

    @property
    def part(self) -> str:
        return part_of(self.entry)

    def __str__(self) -> str:
        return (
            f"{self.entry.ray} ({self.reason}; ray_tt_ext {self.entry.how} it in "
            f"{self.entry.ours}, {self.entry.where})"
        )


def resolve(target: str) -> Any:
    """``"module:Qualified.name"`` on the installed Ray: the object, or ``AttributeError``
    / ``ImportError`` naming what is missing. An instance attribute (a dataclass
    field, or one Ray sets in a method: ``self.name = ...``) resolves to its name. A module under
    :data:`_READ_NOT_IMPORTED` that this process has not imported is read, not
    imported (it resolves to its name)."""
    module_name, _, qualname = target.partition(":")
    if module_name.startswith(_READ_NOT_IMPORTED) and module_name not in sys.modules:
        return _resolve_in_source(module_name, qualname)
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        if _has(obj, part):
            obj = getattr(obj, part)
        elif isinstance(obj, type) and (
            part in getattr(obj, "__dataclass_fields__", {}) or _sets_on_self(obj, part)
        ):
            obj = part
        else:
            raise AttributeError(f"{_name_of(obj)} has no attribute {part!r}")
    return obj


def _has(obj: Any, name: str) -> bool:
    """Whether ``obj`` has ``name``; a class only if it defines it itself (the map
    names the class where Ray defines a method: one that moved to a base class,
    or Ray's base class's stub, is not what ray_tt_ext checked)."""
    if isinstance(obj, type):
        return name in vars(obj)
    return hasattr(obj, name)


def _name_of(obj: Any) -> str:
    if inspect.ismodule(obj):
        return f"module {obj.__name__!r}"
    return f"{getattr(obj, '__qualname__', type(obj).__name__)!r}"


def _sets_on_self(cls: type, name: str) -> bool:
    """Whether a method of ``cls`` (or a base from Ray) sets ``self.<name>``; also
    ``True`` for a class of a module installed without its ``.py`` file (only
    its ``.pyc``: what cannot be read is not called missing). A compiled
    extension's class keeps its attributes on the class."""
    pattern = re.compile(rf"\bself\.{re.escape(name)}\s*(:[^=\n]*)?=[^=]")
    for klass in cls.__mro__:
        if klass is object or not klass.__module__.startswith("ray."):
            continue
        try:
            source = _source_of(klass, inspect.getsource)
        except (OSError, TypeError):
            module_file = getattr(sys.modules.get(klass.__module__), "__file__", "") or ""
            if module_file.endswith(".pyc"):
                return True
            continue
        if pattern.search(source):
            return True
    return False


@functools.lru_cache(maxsize=64)
def _source_of(klass: type, getsource: Callable[[Any], str]) -> str:
    """``getsource(klass)``, read once per class until :func:`forget_checks`:
    reading a class's source parses its whole module, and the map names several
    attributes of one class. ``getsource`` is part of the key, so a replaced
    ``inspect.getsource`` (the override map's tests take an attribute out of a
    class's source) is called."""
    return getsource(klass)


def _resolve_in_source(module_name: str, qualname: str) -> str:
    spec = importlib.util.find_spec(module_name)
    if spec is None or not spec.origin:
        raise ImportError(f"No module named {module_name!r}")
    if not spec.origin.endswith(".py"):  # no source to read: not called missing
        return qualname
    with open(spec.origin, encoding="utf-8") as f:
        body: list[ast.stmt] = ast.parse(f.read()).body
    where = f"module {module_name!r}"
    for part in qualname.split("."):
        node = _defined_in(body, part)
        if node is None:
            raise AttributeError(f"{where} has no attribute {part!r}")
        body = node.body if isinstance(node, ast.ClassDef) else []
        where = repr(part)
    return qualname


def _defined_in(body: list[ast.stmt], name: str) -> Optional[Any]:
    for node in body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name == name:
                return node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((a.asname or a.name).split(".")[0] == name for a in node.names):
                return node
        elif isinstance(node, (ast.If, ast.Try)):
            inner = [*node.body, *getattr(node, "orelse", [])]
            inner += [s for h in getattr(node, "handlers", []) for s in h.body]
            found = _defined_in(inner, name)
            if found is not None:
                return found
    return None


def missing_ray_attributes(
    parts: tuple[str, ...] = PARTS, entries: tuple[RayOverride, ...] = RAY_OVERRIDES
) -> list[MissingRayAttribute]:
    """The attributes of ``entries`` (of those ``parts``) that the installed Ray
    should have (``since``) and lacks, in the map's order, once per part that
    needs it (an attribute that Train V1 and Train V2 both build on is named
    under each)."""
    missing: dict[tuple[str, str], MissingRayAttribute] = {}
    for entry in entries:
        key = (part_of(entry), entry.ray)
        if key in missing or key[0] not in parts or not applies(entry):
            continue
        try:
            resolve(entry.ray)
        except (AttributeError, ImportError) as e:
            missing[key] = MissingRayAttribute(entry, str(e))
        except Exception as e:  # a Ray module that fails to import: named too
            missing[key] = MissingRayAttribute(
                entry, f"importing it raised {type(e).__name__}: {e}"
            )
    return list(missing.values())


_CHECKED: dict[tuple[str, ...], list[MissingRayAttribute]] = {}
_CHECKED_LOCK = threading.Lock()


def check_ray_attributes(what: str, train: Optional[str] = None) -> None:
    """Raise :class:`UnsupportedRayVersionError` naming every attribute the installed
    Ray lacks of those that ``what`` (a Tuner) builds on: Ray Tune's, and with
    ``train`` (``"v1"`` or ``"v2"``) that Ray Train's. Runs where the Tuner is
    constructed or restored, on the driver or the Ray Client client, before any
    trial starts; looked up once per process (:func:`forget_checks` looks again).
    Under Ray Client this looks at the client's Ray (its version must be the
    cluster's, as Ray Client requires)."""
    parts: tuple[str, ...] = (TUNE,)
    if train is not None:
        parts += ({"v1": TRAIN_V1, "v2": TRAIN_V2}[train],)
    with _CHECKED_LOCK:
        if parts not in _CHECKED:
            _CHECKED[parts] = missing_ray_attributes(parts)
        missing = _CHECKED[parts]
    if missing:
        raise UnsupportedRayVersionError(unsupported_message(what, missing))


def forget_checks() -> None:
    """Look the attributes up again at the next :func:`check_ray_attributes`."""
    with _CHECKED_LOCK:
        _CHECKED.clear()
        _source_of.cache_clear()


def unsupported_message(what: str, missing: list[MissingRayAttribute]) -> str:
    """What :func:`check_ray_attributes` says about ``missing``."""
    lines = "\n".join(f"  - {m}" for m in missing)
    low = MIN_RAY_VERSION
    if any(m.part == TRAIN_V2 for m in missing):
        low = TRAIN_V2_SINCE
    in_range = MIN_RAY_VERSION.release <= RAY_VERSION.release < MAX_RAY_VERSION.release
    why = (
        "a build of Ray that differs from its release (a fork, a nightly)"
        if in_range
        else f"outside the releases ray_tt_ext supports (>={MIN_RAY_VERSION},<{MAX_RAY_VERSION})"
    )
    return (
        f"{what} builds on {len(missing)} Ray attribute(s) that the installed "
        f"ray=={RAY_VERSION} lacks ({why}):\n{lines}\n"
        f"Nothing was started. Fix: pip install 'ray[tune,train]>={low},"
        f"<{MAX_RAY_VERSION}' (a release listed in docs/compatibility.md); "
        "`python -m ray_tt_ext check-ray` lists what this Ray lacks."
    )


def import_failed_message(error: BaseException) -> str:
    """What ``ray_tt_ext._compat`` says when a name it imports from Ray is missing:
    every attribute of ``RAY_OVERRIDES`` this Ray lacks, or the import's own error
    when the name is not one of them."""
    missing = missing_ray_attributes()
    if missing:
        return unsupported_message("ray_tt_ext", missing)
    return (
        f"ray_tt_ext could not import a name it builds on from the installed "
        f"ray=={RAY_VERSION} ({type(error).__name__}: {error}): a build of Ray that "
        "differs from its release (a fork, a nightly), or a release outside "
        f">={MIN_RAY_VERSION},<{MAX_RAY_VERSION}. Nothing was started. Fix: install a "
        "release listed in docs/compatibility.md."
    )
