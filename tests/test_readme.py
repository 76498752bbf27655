"""Every Python example in the README runs, as written, and prints what it says.

Each ```python block runs as a script of its own (its own Ray, Ray's defaults:
``RAY_TRAIN_V2_ENABLED`` unset, as for a new user), with ``HOME`` in a temporary
folder so that Tune's default ``~/ray_results`` stays there. A ``print(...)``
line ending in ``# text`` must print ``text``.
"""

from __future__ import annotations

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


def _examples() -> list[str]:
    blocks = []
    for indent, body in BLOCK.findall(README.read_text()):
        lines = [
            line[len(indent) :] if line.startswith(indent) else line
            for line in body.splitlines()
        ]
        blocks.append("\n".join(lines) + "\n")
    return blocks


def test_the_readme_has_python_examples():
    assert len(_examples()) >= 3


@pytest.mark.parametrize("index", range(len(_examples())))
def test_readme_example_runs_as_written(index, tmp_path):
    source = _examples()[index]
    if "ray_tt_ext.v2" in source and _compat.RAY_VERSION.release < (2, 51):
        pytest.skip("ray_tt_ext.v2 needs Ray >= 2.51 (Train V2 by default)")
    script = tmp_path / f"readme_example_{index}.py"
    script.write_text(source)
    env = {k: v for k, v in os.environ.items() if k != "RAY_TRAIN_V2_ENABLED"}
    env.update(HOME=str(tmp_path), RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert proc.returncode == 0, f"{source}\n--- stderr:\n{proc.stderr[-4000:]}"
    for expected in EXPECTED.findall(source):
        assert expected.strip() in proc.stdout, (expected, proc.stdout[-2000:])
