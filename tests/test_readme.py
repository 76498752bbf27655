"""Every Python example in the README runs, as written, and prints what it says.

The examples run as ``__main__`` scripts in fresh interpreters with Ray's
defaults (``RAY_TRAIN_V2_ENABLED`` unset, as for a new user) and ``HOME`` in a
temporary folder, so that Tune's default ``~/ray_results`` stays there: one
interpreter for the Train V1 examples and one for the Train V2 ones (which
Train a process runs is process state; within one, the examples share the Ray
the first of them starts). A ``print(...)`` line ending in ``# text`` must
print ``text``, in that example's own output.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ray_tt_ext import _compat

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"^( *)```python\n(.*?)^\1```", re.M | re.S)
EXPECTED = re.compile(r"^\s*print\(.*\)\s+# (.+)$", re.M)

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(
        _compat.RAY_VERSION.release < (2, 50),
        reason="the README is written for Ray >= 2.50 (ray.tune.RunConfig, tune.report)",
    ),
]

#: Runs each script given as ``__main__``, in order, with its own stdout and
#: stderr; prints one JSON line of ``[path, error or None, stdout, stderr]``.
_RUNNER = """
import contextlib, io, json, runpy, sys, traceback
runs = []
for path in sys.argv[1:]:
    out, err = io.StringIO(), io.StringIO()
    error = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_path(path, run_name="__main__")
        except SystemExit as e:
            if e.code not in (None, 0):
                error = traceback.format_exc()
        except BaseException:
            error = traceback.format_exc()
    runs.append([path, error, out.getvalue(), err.getvalue()])
sys.__stdout__.write("\\nREADME_RUNS " + json.dumps(runs) + "\\n")
"""


def _examples() -> list[str]:
    blocks = []
    for indent, body in BLOCK.findall(README.read_text()):
        lines = [
            line[len(indent) :] if line.startswith(indent) else line
            for line in body.splitlines()
        ]
        blocks.append("\n".join(lines) + "\n")
    return blocks


def _is_v2(source: str) -> bool:
    return "ray_tt_ext.v2" in source


def _run_examples(v2: bool, home: Path) -> dict[int, tuple]:
    """``{index: (error, stdout, stderr)}`` of one Train version's examples, run in
    one fresh interpreter, which must itself exit 0."""
    examples = _examples()
    indices = [i for i, source in enumerate(examples) if _is_v2(source) == v2]
    scripts = []
    for i in indices:
        script = home / f"readme_example_{i}.py"
        script.write_text(examples[i])
        scripts.append(str(script))
    env = {k: v for k, v in os.environ.items() if k != "RAY_TRAIN_V2_ENABLED"}
    env.update(HOME=str(home), RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    proc = subprocess.run(
        [sys.executable, "-c", _RUNNER, *scripts],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("README_RUNS ")]
    assert line and proc.returncode == 0, (
        f"the interpreter exited with {proc.returncode}:\n{proc.stderr[-4000:]}"
    )
    runs = json.loads(line[-1][len("README_RUNS ") :])
    return {
        i: (error, out, err) for i, (_, error, out, err) in zip(indices, runs, strict=True)
    }


@pytest.fixture(scope="module")
def readme_runs(tmp_path_factory):
    """``runs(v2)``: each Train version's examples, run once, when first asked for
    (so each interpreter runs within the timeout of the test that asks)."""
    cache: dict[bool, dict[int, tuple]] = {}

    def runs(v2: bool) -> dict[int, tuple]:
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
    error, out, err = readme_runs(_is_v2(source))[index]
    assert error is None, f"{source}\n--- error:\n{error}\n--- stderr:\n{err[-4000:]}"
    for expected in EXPECTED.findall(source):
        assert expected.strip() in out, (expected, out[-2000:])
