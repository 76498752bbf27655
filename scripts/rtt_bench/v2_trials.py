"""Section ``v2_trials`` of scripts/bench.py: the per-trial cost of short trials,
Tune x Train V2: ``ray_tt_ext.v2.Tuner(trainer)`` beside the V1
``ray_tt_ext.Tuner(trainer)`` in alternating pairs, and Ray's documented pattern
(a Tune function fitting a V2 trainer with ``TuneReportCallback``), each flavour
in a process of its own (``v2_trials_child.py``): fit() time and the memory of
a running trial."""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from rtt_bench.common import _fit_seconds, _table, progress

# -- v2_trials: the per-trial cost of short trials, Tune x Train V2 --------------------

_V2_FLAVOURS = ("v2_tuner", "v1_tuner", "rays_pattern")


def _v2_trials_run(
    flavour: str, n: int, hold_s: float = 0.0, cpu: bool = False
) -> dict[str, Any]:
    import subprocess

    script = Path(__file__).resolve().parent / "v2_trials_child.py"
    env = {k: v for k, v in os.environ.items() if k != "RAY_TRAIN_V2_ENABLED"}
    if flavour == "v1_tuner":
        env["RAY_TRAIN_V2_ENABLED"] = "0"
    proc = subprocess.run(
        [sys.executable, str(script), flavour, str(n), str(hold_s)]
        + (["cpu"] if cpu else []),
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{flavour} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def bench_v2_trials(quick: bool, storage: str) -> dict[str, Any]:
    """N short trials with each flavour, each in a process of its own (V1 and V2
    cannot share one). Time: alternating pairs of v2_tuner and v1_tuner (which
    runs first alternates), the median of the pairs' ratios; Ray's pattern
    once. Memory: 4 trials of each that hold after their report, sampled.
    Goals: v2_tuner / v1_tuner <= 1.0 in time; memory per running trial no
    more than v1_tuner's and rays_pattern's."""
    # Single fits of 8 trials on 2 cores swing by a quarter (20.6 .. 33.0 s for
    # the same flavour in the run at 2faa918), so a ratio needs more than 2 pairs.
    n, pairs = (4, 1) if quick else (8, 5)
    out: dict[str, Any] = {
        "trials": n,
        "pairs": pairs,
        "runs": {f: [] for f in _V2_FLAVOURS},
    }
    ratios = []
    for i in range(pairs):
        order = ("v2_tuner", "v1_tuner") if i % 2 == 0 else ("v1_tuner", "v2_tuner")
        pair = {}
        for flavour in order:
            pair[flavour] = _v2_trials_run(flavour, n)
            out["runs"][flavour].append(pair[flavour])
            progress(f"v2_trials {flavour}: {pair[flavour]['seconds']:.1f} s")
        ratios.append(pair["v2_tuner"]["seconds"] / pair["v1_tuner"]["seconds"])
    out["runs"]["rays_pattern"].append(_v2_trials_run("rays_pattern", n))
    progress(f"v2_trials rays_pattern: {out['runs']['rays_pattern'][0]['seconds']:.1f} s")
    for flavour in _V2_FLAVOURS:
        runs = out["runs"][flavour]
        out[flavour] = dict(runs[-1], seconds=statistics.median(r["seconds"] for r in runs))
        out[flavour]["seconds_per_trial"] = out[flavour]["seconds"] / n
        memory = _v2_trials_run(flavour, 4, hold_s=6.0)["memory"]
        out[flavour]["memory"] = memory
        progress(
            f"v2_trials {flavour}: {memory['uss_mib']:.0f} MiB per running trial; "
            f"USS per process: {memory.get('uss_mib_per_process')}"
        )
    # Where the CPU goes (a run of its own: sampling costs CPU too).
    for flavour in ("v2_tuner", "v1_tuner"):
        roles = _v2_trials_run(flavour, n, cpu=True)["cpu_by_role"]
        out[flavour]["cpu_by_role"] = roles
        total = sum(r["cpu_s"] for r in roles.values())
        progress(f"v2_trials {flavour}: {total / n:.1f} CPU s per trial")
    out["pair_ratios"] = ratios
    out["ratio_to_v1"] = statistics.median(ratios)
    out["ratio_to_rays_pattern"] = (
        out["v2_tuner"]["seconds"] / out["rays_pattern"]["seconds"]
    )
    uss = {f: out[f]["memory"]["uss_mib"] for f in _V2_FLAVOURS}
    out["time_goal_met"] = out["ratio_to_v1"] <= 1.0
    out["memory_goal_met"] = uss["v2_tuner"] <= min(uss["v1_tuner"], uss["rays_pattern"])
    rows = [
        [
            f,
            _fit_seconds(out[f], unit=""),
            f"{out[f]['seconds_per_trial']:.2f}",
            f"{out[f]['memory']['uss_mib']:.0f}",
            out[f]["placement_groups_left"],
            f"{out[f]['free_cpus']:.0f}",
        ]
        for f in _V2_FLAVOURS
    ]
    print(
        _table(
            f"{n} short trials (1 worker, 1 report with a checkpoint), 4 CPUs; "
            f"v2_tuner / v1_tuner = {out['ratio_to_v1']:.3f} (median of {pairs} "
            f"alternating pairs), v2_tuner / rays_pattern = "
            f"{out['ratio_to_rays_pattern']:.3f}",
            ["flavour", "fit s", "s/trial", "MiB/trial (USS)", "PGs left", "free CPUs"],
            rows,
        )
    )
    return out
