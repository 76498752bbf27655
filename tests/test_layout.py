"""The package's layers point down (its wheel's file list: scripts/check_wheel.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.quick  # unit tests: scripts/test --quick runs them

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "ray_tt_ext"

#: docs/guide.md, "Layout": a module imports only from its own layer or below.
LAYERS = {
    "_version": 0,
    "_env": 0,
    "_compat": 1,
    "_payload": 2,
    "_naming": 2,
    "_params": 2,
    "_tune_logs": 2,
    "_fit_names": 2,
    "_executor_host": 2,
    "_executor_hosts": 2,
    "_executor": 2,
    "_storage": 3,
    "_trainer": 3,
    "_tuner": 3,
    "_frameworks": 3,
    "_train_v2": 3,
    "_tune_v2": 3,
    "_v2_arguments": 3,
    "_v2_controller": 3,
    "_v2_trial": 3,
    "__init__": 4,
    "v2": 4,
    "__main__": 4,
    "_demo": 4,
}
#: What a Train V2 training worker may load (it unpickles ``_train_v2``'s code).
V1_MODULES = {
    "_storage",
    "_trainer",
    "_tuner",
    "_frameworks",
    "_executor",
    "_executor_host",
    "_executor_hosts",
    "_tune_v2",
    "_v2_arguments",
    "_v2_controller",
    "_v2_trial",
}


def sources(module: str) -> list[Path]:
    """``module``'s file, or every file of the package ``module`` (``_compat``)."""
    if (PACKAGE / module).is_dir():
        return sorted((PACKAGE / module).glob("*.py"))
    return [PACKAGE / f"{module}.py"]


def imports(module: str) -> set[str]:
    """The package modules ``module`` imports, function-local imports included."""
    found = set()
    nodes = [n for p in sources(module) for n in ast.walk(ast.parse(p.read_text()))]
    for node in nodes:
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.startswith("ray_tt_ext")
        ):
            if node.module == "ray_tt_ext":
                found |= {a.name for a in node.names if a.name in LAYERS}
            else:
                found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found |= {
                a.name.split(".")[1] for a in node.names if a.name.startswith("ray_tt_ext.")
            }
    return found - {module}


def reaches(start: str) -> set[str]:
    """Every package module ``start`` imports, directly or through others."""
    seen, todo = set(), [start]
    while todo:
        for t in imports(todo.pop()):
            if t not in seen:
                seen.add(t)
                todo.append(t)
    return seen


def test_every_module_has_a_layer():
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert modules | packages == set(LAYERS)


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


def test_the_v2_trainers_and_the_shared_pieces_reach_no_train_v1_module():
    for module in ("_train_v2", "_naming", "_payload", "_compat", "_env"):
        reached = reaches(module)
        assert not reached & V1_MODULES, (module, reached & V1_MODULES)


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
