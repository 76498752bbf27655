"""The map of Ray overrides in ``_compat`` is complete and true on the installed Ray.

On a new Ray release (``scripts/compat.sh NEW``, ``scripts/matrix.sh``) the first
test names every Ray attribute ray_tt_ext overrides, extends or patches that
moved: the upgrade canary's map.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest
from packaging.version import Version

from ray_tt_ext import _compat

pytestmark = pytest.mark.quick  # unit tests: scripts/test --quick runs them

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "ray_tt_ext"
COMPAT = PACKAGE / "_compat"


def resolve(target: str):
    """``"module:Qualified.name"`` -> the object (AttributeError/ImportError if gone)."""
    module_name, _, qualname = target.partition(":")
    obj = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = (
            getattr(obj, part)
            if part in dir(obj) or hasattr(obj, part)
            else _source_attr(obj, part)
        )
    return obj


def _source_attr(cls, name: str):
    """An instance attribute Ray sets in ``__init__`` (not on the class)."""
    import inspect

    if isinstance(cls, type) and re.search(
        rf"self\.{re.escape(name)}\b", inspect.getsource(cls)
    ):
        return name
    raise AttributeError(f"{cls!r} has no attribute {name!r}")


def applies(entry: _compat.RayOverride) -> bool:
    return _compat.RAY_VERSION.release >= Version(entry.since).release


def is_train_v2(entry: _compat.RayOverride) -> bool:
    """An override of Ray Train V2 (Ray 2.51 or later)."""
    return Version(entry.since).release >= (2, 51)


def test_every_listed_ray_attribute_exists_on_the_installed_ray():
    missing = []
    for entry in _compat.RAY_OVERRIDES:
        if not applies(entry):
            continue
        try:
            resolve(entry.ray)
        except (AttributeError, ImportError) as e:
            missing.append(f"{entry.ray} (ray_tt_ext: {entry.ours}): {e}")
    assert not missing, f"Ray {_compat.RAY_VERSION} moved:\n" + "\n".join(missing)


def test_every_listed_override_of_ours_exists_and_says_where_it_runs():
    for entry in _compat.RAY_OVERRIDES:
        assert entry.how in {"overrides", "extends", "replaces", "patches", "adds", "uses"}
        assert entry.where and re.fullmatch(r"2\.\d+ \.\. 2\.\d+", entry.checked)
        if is_train_v2(entry) and not _compat.train_v2_enabled():
            continue  # the V2 modules are checked in the Train V2 session
        ours = resolve(entry.ours)
        assert callable(ours) or isinstance(ours, property), entry.ours


def _documented_overrides() -> set[str]:
    """Functions of the package whose docstring says they override a Ray method."""
    found = set()
    # "Overrides Ray's ...", "Extends ``FunctionTrainable.setup``": a Ray method
    # (ray_tt_ext's own classes are named ``ray_tt_ext.X`` or ``_X``).
    said = re.compile(
        r"\b(Overrides|Extends|Replaces|Patches)\b[^.]*?(\bRay\b|``[A-Z]\w*\.)", re.S
    )
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())

        def walk(node, prefix, module):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.ClassDef)):
                    name = prefix + child.name
                    doc = ast.get_docstring(child) or ""
                    if isinstance(child, ast.FunctionDef) and said.search(doc):
                        found.add(f"ray_tt_ext.{module}:{name}")
                    walk(child, name + ".", module)

        parts = path.relative_to(PACKAGE).with_suffix("").parts
        walk(tree, "", ".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def test_every_override_the_code_documents_is_in_the_map():
    listed = {entry.ours for entry in _compat.RAY_OVERRIDES}
    unlisted = sorted(_documented_overrides() - listed)
    assert not unlisted, f"overrides of Ray missing from _compat.RAY_OVERRIDES: {unlisted}"


def _names_taken_from_compat() -> set[str]:
    names: set[str] = set()
    for folder in ("ray_tt_ext", "tests", "release_tests", "scripts", "rtt_testing"):
        for path in (ROOT / folder).rglob("*.py"):
            if COMPAT in path.parents:
                continue
            tree = ast.parse(path.read_text())
            aliases = {"_compat", "ray_tt_ext._compat"}
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module == "ray_tt_ext._compat":
                    names |= {a.name for a in node.names}
                if isinstance(node, ast.ImportFrom) and node.module == "ray_tt_ext":
                    aliases |= {
                        a.asname for a in node.names if a.name == "_compat" and a.asname
                    }
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and ast.unparse(node.value) in aliases:
                    names.add(node.attr)
    # ``from ray_tt_ext._compat import train_v2``: a module of the package, not a name
    modules = {p.stem for p in COMPAT.glob("*.py")}
    return {n for n in names if not n.startswith("__") and n not in modules}


def test_compat_all_is_exactly_what_other_code_takes_from_it():
    taken = _names_taken_from_compat()
    assert set(_compat.__all__) == taken
    assert all(hasattr(_compat, name) for name in _compat.__all__)


def test_no_other_private_module_keeps_an_all():
    stale = [
        p.name
        for p in PACKAGE.glob("_*.py")
        if p.name not in ("__init__.py", "__main__.py") and "__all__" in p.read_text()
    ]
    assert not stale, stale


@pytest.mark.parametrize(
    "entry", [e for e in _compat.RAY_OVERRIDES if e.how != "uses"], ids=lambda e: e.ours
)
def test_each_override_is_where_the_map_says(entry):
    if is_train_v2(entry) and not _compat.train_v2_enabled():
        pytest.skip("Train V2 modules: checked in the Train V2 session")
    module_name = entry.ours.partition(":")[0]
    source = Path(importlib.import_module(module_name).__file__).read_text()
    ray_name = entry.ray.rpartition(".")[2].rpartition(":")[2]
    assert ray_name.strip("_") in source or ray_name in source, (entry.ray, entry.ours)
