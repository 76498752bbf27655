#!/usr/bin/env python3
"""Run the regression suite: tests/ (Train V1) and tests/v2 (Train V2).

    python scripts/pytest_sessions.py [--quick] [pytest args...]

Ray reads ``RAY_TRAIN_V2_ENABLED`` once per process, so the two cannot share
a pytest session: ``tests/`` runs first (the V1 integration turns V1 on),
then ``tests/v2`` with the variable unset, as Ray 2.51+ users have it. Uses
the Python that runs this script; extra arguments go to both sessions
(``-k``, ``-m``, ``-x``...; a ``--basetemp`` gets ``-v2`` for the second).
Ends with one line for both, e.g. ``== both sessions: tests/ 188 passed;
tests/v2 17 passed ==`` (``scripts/compat.sh`` puts it in its verdict). Exit
status 0 only if both pass; a session that collects no test fails, unless a
``-k``/``-m`` filter deselected them all. ``--quick`` runs the quick tier only
(``-m quick``: unit and single-fit tests, a few minutes). Standard library only.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)")
NO_TESTS_COLLECTED = 5


def run(
    label: str, paths: list[str], args: list[str], env: dict[str, str]
) -> tuple[int, dict]:
    print(f"=== {label}: pytest {' '.join(paths)}", flush=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", *paths, *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    last = ""
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        if COUNT.search(line) and " in " in line:
            last = line
    status = proc.wait()
    if status == NO_TESTS_COLLECTED and not any(a[:2] in ("-k", "-m") for a in args):
        print(f"=== {label}: no tests collected without a -k/-m filter: a broken session")
        status = 1
    counts: dict[str, int] = {}
    for n, kind in COUNT.findall(last):
        kind = "errors" if kind.startswith("error") else kind
        counts[kind] = counts.get(kind, 0) + int(n)
    return (0 if status == NO_TESTS_COLLECTED else status), counts  # filtered out: fine


def main(args: list[str]) -> int:
    if "--quick" in args:  # the quick tier: unit and single-fit tests
        args = [a for a in args if a != "--quick"]
        if "-m" in args[:-1]:  # pytest keeps only the last -m: combine them
            i = args.index("-m")
            args[i + 1] = f"quick and ({args[i + 1]})"
        else:
            args += ["-m", "quick"]
    v1_env = dict(os.environ)
    v2_env = {k: v for k, v in os.environ.items() if k != "RAY_TRAIN_V2_ENABLED"}
    v2_env["RAY_TT_EXT_TEST_TRAIN"] = "v2"
    v2_args = [a + "-v2" if a.startswith("--basetemp=") else a for a in args]
    status_v1, counts_v1 = run("Train V1 (tests/)", ["tests"], args, v1_env)
    status_v2, counts_v2 = run("Train V2 (tests/v2)", ["tests/v2"], v2_args, v2_env)
    order = ["failed", "errors", "passed", "skipped", "xfailed", "xpassed", "deselected"]

    def fmt(counts: dict[str, int]) -> str:
        return (
            ", ".join(f"{counts[k]} {k}" for k in order if counts.get(k)) or "no tests ran"
        )

    print(f"== both sessions: tests/ {fmt(counts_v1)}; tests/v2 {fmt(counts_v2)} ==")
    return 0 if status_v1 == 0 and status_v2 == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
