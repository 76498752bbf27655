#!/usr/bin/env python3
"""The wheel holds product code only: build it, then check its file list.

    python scripts/check_wheel.py

Builds ``ray_tt_ext``'s wheel (``pip wheel --no-deps``), from a copy of the
checkout without its build output, into a temporary folder and checks that
its code is exactly the package's ``.py`` files and ``py.typed``, with no
test support (``tests/``, ``rtt_testing/``). A build-only check, so
``scripts/check`` (which CI runs) runs it rather than the test suite. Exit
status 0 when it holds. Standard library only.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "ray_tt_ext"


#: What the copy the wheel is built from leaves out: a checkout's build output
#: (setuptools' ``build/lib`` keeps modules deleted since, and would put them in
#: the wheel), venvs, caches and git.
NOT_COPIED = shutil.ignore_patterns(
    "build", "dist", ".venv", "venv", "*.egg-info", "__pycache__", ".git", "*_results"
)


def main() -> int:
    with tempfile.TemporaryDirectory() as out:
        source = Path(out, "source")
        shutil.copytree(ROOT, source, ignore=NOT_COPIED, symlinks=True)
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--no-deps",
                "-q",
                "-w",
                out,
                str(source),
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if proc.returncode != 0:
            print(f"check_wheel: the wheel did not build:\n{proc.stderr[-3000:]}")
            return 1
        (wheel,) = Path(out).glob("ray_tt_ext-*.whl")
        names = zipfile.ZipFile(wheel).namelist()
    code = sorted(
        n for n in names if not n.startswith("ray_tt_ext-") and not n.endswith("/")
    )
    expected = sorted(
        f"ray_tt_ext/{p.relative_to(PACKAGE).as_posix()}"
        for p in PACKAGE.rglob("*")
        if p.suffix in (".py", ".typed") and "__pycache__" not in p.parts
    )
    problems = []
    if code != expected:
        problems.append(
            f"the wheel's code is not the package's: extra {sorted(set(code) - set(expected))}, "
            f"missing {sorted(set(expected) - set(code))}"
        )
    support = [
        n for n in names if "testing" in n or n.startswith(("tests/", "rtt_testing/"))
    ]
    if support:
        problems.append(f"test support in the wheel: {support}")
    for problem in problems:
        print(f"check_wheel: {problem}")
    if not problems:
        print(f"check_wheel: {wheel.name} holds product code only ({len(code)} files)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
