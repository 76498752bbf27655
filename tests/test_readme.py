"""Every Python example in the README and the user guide (docs/guide/) runs, as
written, and prints what it says.

The examples run as ``__main__`` scripts in fresh interpreters with Ray's
defaults (``RAY_TRAIN_V2_ENABLED`` and ``RAY_TRAIN_ENABLE_V2_MIGRATION_WARNINGS``
unset, as for a new user) and ``HOME`` in a
temporary folder, so that Tune's default ``~/ray_results`` stays there: one
interpreter for the Train V1 examples and one for the Train V2 ones (which
Train a process runs is process state; within one, the examples share the Ray
the first of them starts). A ``print(...)`` line ending in ``# text`` must
print ``text``, in that example's own output.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from ray_tt_ext import _compat

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
#: The README and the user guide's pages: every Python example of each runs.
SOURCES = [README, *sorted((ROOT / "docs" / "guide").glob("*.md"))]
BLOCK = re.compile(r"^( *)```python\n(.*?)^\1```", re.M | re.S)
EXPECTED = re.compile(r"^\s*print\(.*\)\s+# (.+)$", re.M)

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(
        _compat.RAY_VERSION.release < (2, 50),
        reason="the README is written for Ray >= 2.50 (ray.tune.RunConfig, tune.report)",
    ),
]


def _examples() -> list[str]:
    blocks = []
    text = "\n".join(source.read_text() for source in SOURCES)
    for indent, body in BLOCK.findall(text):
        lines = [
            line[len(indent) :] if line.startswith(indent) else line
            for line in body.splitlines()
        ]
        blocks.append("\n".join(lines) + "\n")
    return blocks


def _is_v2(source: str) -> bool:
    return "ray_tt_ext.v2" in source


def _run_examples(v2: bool, home: Path) -> dict[int, subprocess.CompletedProcess]:
    """``{index: CompletedProcess}`` of one Train version's examples, run as
    scripts in one fresh interpreter (``rtt_testing.run_in_one_interpreter``)."""
    from rtt_testing import run_in_one_interpreter

    examples = _examples()
    indices = [i for i, source in enumerate(examples) if _is_v2(source) == v2]
    scripts = []
    for i in indices:
        script = home / f"readme_example_{i}.py"
        script.write_text(examples[i])
        scripts.append([str(script)])
    # Ray's defaults: Train V2 by default, its migration warnings on.
    unset = ("RAY_TRAIN_V2_ENABLED", "RAY_TRAIN_ENABLE_V2_MIGRATION_WARNINGS")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env.update(HOME=str(home), RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    runs = run_in_one_interpreter(scripts, timeout=280, cwd=home, env=env)
    return dict(zip(indices, runs, strict=True))


@pytest.fixture(scope="module")
def readme_runs(tmp_path_factory):
    """``runs(v2)``: each Train version's examples, run once, when first asked for
    (so each interpreter runs within the timeout of the test that asks)."""
    cache: dict[bool, dict[int, subprocess.CompletedProcess]] = {}

    def runs(v2: bool) -> dict[int, subprocess.CompletedProcess]:
        if v2 not in cache:
            home = tmp_path_factory.mktemp("readme_v2" if v2 else "readme_v1")
            cache[v2] = _run_examples(v2, home)
        return cache[v2]

    return runs


def test_the_readme_has_python_examples():
    assert len(_examples()) >= 3


@pytest.mark.parametrize("index", range(len(_examples())))
def test_readme_example_runs_as_written(index, readme_runs):
    source = _examples()[index]
    if _is_v2(source) and _compat.RAY_VERSION.release < (2, 51):
        pytest.skip("ray_tt_ext.v2 needs Ray >= 2.51 (Train V2 by default)")
    proc = readme_runs(_is_v2(source))[index]
    assert proc.returncode == 0, f"{source}\n--- stderr:\n{proc.stderr[-4000:]}"
    # No deprecation that tells the user to change imports the example does
    # not have (Tune's, for a Train checkpoint handed to tune.report).
    assert "should be imported from" not in proc.stderr, proc.stderr[-4000:]
    for expected in EXPECTED.findall(source):
        assert expected.strip() in proc.stdout, (expected, proc.stdout[-2000:])
