"""The package's layers point down (its wheel's file list: scripts/check_wheel.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.quick  # unit tests: scripts/test --quick runs them

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "ray_tt_ext"

#: The design notes' layout (docs/design/layout.md): a module imports only from
#: its own layer or below. ``_compat`` is a package counted as one module; ``v2``
#: is the package's front door (its ``__init__``), ``v2._x`` its modules.
LAYERS = {
    "_version": 0,
    "_env": 0,
    "_compat": 1,
    "_payload": 2,
    "_naming": 2,
    "_params": 2,
    "_tune_logs": 2,
    "_fit_names": 2,
    "_sweep": 2,
    "_executor_host": 2,
    "_executor_hosts": 2,
    "_executor": 2,
    "_storage": 3,
    "_trainer": 3,
    "_tuner": 3,
    "_frameworks": 3,
    "v2._train": 3,
    "v2._tuner": 3,
    "v2._arguments": 3,
    "v2._controller": 3,
    "v2._worker_group": 3,
    "v2._trial": 3,
    "__init__": 4,
    "v2": 4,
    "__main__": 4,
    "_demo": 4,
}
#: What a Train V2 training worker must not load (it unpickles ``v2._train``'s code,
#: and so runs ``v2``'s ``__init__``): the Train V1 modules and the V2 modules of
#: the driver, the trial actor and the run's controller.
NOT_ON_V2_WORKERS = {
    "_storage",
    "_sweep",
    "_trainer",
    "_tuner",
    "_frameworks",
    "_executor",
    "_executor_host",
    "_executor_hosts",
    "v2._tuner",
    "v2._arguments",
    "v2._controller",
    "v2._worker_group",
    "v2._trial",
}
#: The modules that are packages of their own here (one node each).
_PACKAGES = {"_compat"}


def sources(module: str) -> list[Path]:
    """``module``'s file, or every file of the package ``module`` (``_compat``)."""
    if module in _PACKAGES:
        return sorted((PACKAGE / module).glob("*.py"))
    if module == "v2":
        return [PACKAGE / "v2" / "__init__.py"]
    return [PACKAGE / (module.replace(".", "/") + ".py")]


def _node(dotted: str) -> str:
    """The node of ``ray_tt_ext.<dotted>``: ``_compat`` for its modules, ``v2._x``
    for the V2 package's, else the top-level module."""
    parts = dotted.split(".")
    if parts[0] == "v2" and len(parts) > 1:
        return f"v2.{parts[1]}"
    return parts[0]


def imports(module: str, module_level_only: bool = False) -> set[str]:
    """The package modules ``module`` imports: function-local imports included,
    unless ``module_level_only`` (what runs when it is imported)."""
    found = set()
    trees = [ast.parse(p.read_text()) for p in sources(module)]
    if module_level_only:
        nodes = [
            n for t in trees for n in t.body if isinstance(n, (ast.Import, ast.ImportFrom))
        ]
    else:
        nodes = [n for t in trees for n in ast.walk(t)]
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "ray_tt_ext":
                found |= {a.name for a in node.names if a.name in LAYERS}
            elif node.module == "ray_tt_ext.v2":
                found |= {
                    f"v2.{a.name}" if f"v2.{a.name}" in LAYERS else "v2" for a in node.names
                }
            elif node.module.startswith("ray_tt_ext."):
                found.add(_node(node.module.split(".", 1)[1]))
        elif isinstance(node, ast.Import):
            found |= {
                _node(a.name.split(".", 1)[1])
                for a in node.names
                if a.name.startswith("ray_tt_ext.")
            }
    return found - {module}


def reaches(start: str, loaded: bool = False) -> set[str]:
    """Every package module ``start`` imports, directly or through others; with
    ``loaded``, what importing it loads: module-level imports only, and a
    module of ``v2`` runs ``v2``'s ``__init__`` first."""
    seen, todo = set(), [start]
    while todo:
        module = todo.pop()
        found = imports(module, module_level_only=loaded)
        if loaded and module.startswith("v2."):
            found.add("v2")
        for t in found:
            if t not in seen:
                seen.add(t)
                todo.append(t)
    return seen


def test_every_module_has_a_layer():
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    v2 = {f"v2.{p.stem}" for p in (PACKAGE / "v2").glob("_*.py") if p.stem != "__init__"}
    v2.add("v2")
    assert modules | _PACKAGES | v2 == set(LAYERS)


def test_layers_point_down_and_nothing_imports_in_a_circle():
    upward = [
        f"{m} (layer {LAYERS[m]}) imports {t} (layer {LAYERS[t]})"
        for m in LAYERS
        for t in imports(m)
        if LAYERS[t] > LAYERS[m]
    ]
    assert not upward, upward
    circles = [m for m in LAYERS if m in reaches(m)]
    assert not circles, circles


def test_no_module_is_over_700_lines():
    long = {
        p.relative_to(PACKAGE).as_posix(): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 700
    }
    assert not long, long


def test_the_v2_trainers_and_the_shared_pieces_reach_no_train_v1_module():
    # What a Train V2 training worker loads (v2._train, and v2's __init__ with it).
    loaded = reaches("v2._train", loaded=True)
    assert not loaded & NOT_ON_V2_WORKERS, loaded & NOT_ON_V2_WORKERS
    for module in ("_naming", "_payload", "_compat", "_env"):
        reached = reaches(module)
        assert not reached & NOT_ON_V2_WORKERS, (module, reached & NOT_ON_V2_WORKERS)


def test_the_shared_pieces_know_no_trainer():
    for module in ("_payload", "_naming", "_params"):
        assert imports(module) <= {"_compat", "_env"}, (module, imports(module))


def _without_merged_names(text: str) -> str:
    """``text`` without the first cells of docs/testing.md's table of merged
    tests (they name the old tests on purpose)."""
    lines, in_merged = [], False
    for line in text.splitlines():
        if line.startswith("## "):
            in_merged = line.startswith("## Tests merged")
        if in_merged and line.startswith("| "):
            line = "|" + line.split("|", 2)[2]
        lines.append(line)
    return "\n".join(lines)


def test_every_test_the_docs_cite_exists():
    """docs/ and the README say where each rule is tested: a renamed or removed
    test fails here instead of leaving a citation to nothing."""
    import re

    defined = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        defined |= set(re.findall(r"^(?:async )?def (test_\w+)", path.read_text(), re.M))
    cited = {}
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = _without_merged_names(doc.read_text())
        # A name ending in "_" is a pattern (``test_cli_*``), not a test.
        for name in re.findall(r"\b(test_[a-z0-9_]*[a-z0-9])\b(?!\.py|_)", text):
            cited.setdefault(name, doc.relative_to(ROOT).as_posix())
    missing = {n: doc for n, doc in cited.items() if n not in defined}
    assert not missing, f"cited but not defined in tests/: {missing}"
