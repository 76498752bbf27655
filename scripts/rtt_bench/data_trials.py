"""Section ``data_trials`` of scripts/bench.py: a sweep over a trainer with
``datasets`` under ``ray_tt_ext.v2.Tuner`` on 4 CPUs (2 workers of 1 CPU per
trial, ``max_concurrent_trials=2``), which ray_tt_ext runs one trial at a time so
that each trial's Ray Data pipeline keeps a CPU (without it, the sweep never
ends), beside the best ``max_concurrent_trials`` a user could set by hand (1),
in alternating pairs, each run in a process of its own (``data_trials_child.py``)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from rtt_bench.common import _table, progress

_FLAVOURS = ("kept", "by_hand")


def _run(flavour: str, n: int, storage: str) -> dict[str, Any]:
    script = Path(__file__).resolve().parent / "data_trials_child.py"
    env = {k: v for k, v in os.environ.items() if k != "RAY_TRAIN_V2_ENABLED"}
    proc = subprocess.run(
        [sys.executable, str(script), flavour, str(n), storage],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"data_trials {flavour} failed:\n{proc.stderr[-3000:]}")
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    if got["errors"] or got["rows"] != [100] * n:
        raise RuntimeError(f"data_trials {flavour}: {got}")
    return got


def bench_data_trials(quick: bool, storage: str) -> dict[str, Any]:
    """Alternating pairs (which flavour runs first alternates); the ratio is the
    median of the pairs' kept / by_hand fit() times. Goal (issue #51): <= 1.1."""
    n, pairs = (2, 1) if quick else (4, 5)
    runs: dict[str, list] = {f: [] for f in _FLAVOURS}
    ratios = []
    for i in range(pairs):
        order = _FLAVOURS if i % 2 == 0 else _FLAVOURS[::-1]
        got = {}
        for flavour in order:
            got[flavour] = _run(flavour, n, storage)
            runs[flavour].append(got[flavour])
            progress(f"data_trials {flavour}: {got[flavour]['seconds']:.1f} s")
        ratios.append(got["kept"]["seconds"] / got["by_hand"]["seconds"])
    out = {
        "trials": n,
        "pairs": pairs,
        "seconds": {
            f: statistics.median(r["seconds"] for r in rs) for f, rs in runs.items()
        },
        "at_once": {f: max(r["at_once"] for r in rs) for f, rs in runs.items()},
        "pair_ratios": ratios,
        "ratio": statistics.median(ratios),
    }
    print(
        _table(
            "data_trials",
            ["flavour", "fit() s (median)", "most trials at once"],
            [[f, f"{out['seconds'][f]:.1f}", out["at_once"][f]] for f in _FLAVOURS],
        )
    )
    print(
        f"kept / by_hand: {out['ratio']:.3f} (pairs: {', '.join(f'{r:.3f}' for r in ratios)})"
    )
    return out
