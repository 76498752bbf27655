"""Section ``sweep_disk`` of scripts/bench.py: the bytes a sweep keeps on storage.

40 trials x 8 checkpoints x 4 MiB, 2 trials at a time (8 x 4 x 1 MiB with
--quick), with ``ray_tt_ext.Tuner`` over a function trainable, three ways:
``none`` (no retention), ``per_trial`` (Tune's ``num_to_keep=1``, the best a
user can do without ray_tt_ext) and ``sweep`` (``sweep_num_to_keep=3``). A
thread of the driver adds up the bytes in the experiment's checkpoint folders
every 0.1 s (the peak) and once the fit returned (the final). ``none`` and
``sweep`` run in alternating pairs: the time ratio is the median of the pairs'.
Goals (issue #48): a peak of at most (3 + trials at a time + 1) checkpoints'
bytes, and sweep / none <= 1.05 in fit() time.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import threading
import time
from typing import Any

import ray
import ray.tune

from rtt_bench.common import MiB, _table, progress

_FLAVOURS = ("none", "per_trial", "sweep")
_AT_ONCE = 2
_KEEP = 3


def _loop(config: dict) -> None:
    """``steps`` checkpoints of ``bytes`` each; ``score`` grows with ``x`` and the step."""
    from ray_tt_ext import _compat

    blob = os.urandom(1024) * (config["bytes"] // 1024)
    for step in range(config["steps"]):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "model.bin"), "wb") as f:
                f.write(blob)
            _compat.tune_report(
                {"score": config["x"] * 100 + step},
                checkpoint=_compat.TuneCheckpoint.from_directory(d),
            )


def _checkpoint_bytes(root: str) -> int:
    total = 0
    for folder, _, files in os.walk(root):
        if "/checkpoint_" not in folder + "/":
            continue
        for name in files:
            try:
                total += os.path.getsize(os.path.join(folder, name))
            except OSError:  # deleted meanwhile
                pass
    return total


def _fit(flavour: str, trials: int, steps: int, size: int, storage: str) -> dict[str, Any]:
    from ray_tt_ext import CheckpointConfig, Tuner

    checkpoint_config = {
        "none": CheckpointConfig(),
        "per_trial": CheckpointConfig(
            num_to_keep=1, checkpoint_score_attribute="score", checkpoint_score_order="max"
        ),
        "sweep": CheckpointConfig(sweep_num_to_keep=_KEEP),
    }[flavour]
    name = f"sweep_disk_{flavour}_{time.time_ns()}"
    root = os.path.join(storage, name)
    tuner = Tuner(
        _loop,
        param_space={
            "x": ray.tune.grid_search(list(range(trials))),
            "steps": steps,
            "bytes": size,
        },
        tune_config=ray.tune.TuneConfig(
            metric="score", mode="max", max_concurrent_trials=_AT_ONCE
        ),
        run_config=ray.tune.RunConfig(
            name=name, storage_path=storage, verbose=0, checkpoint_config=checkpoint_config
        ),
    )
    peak = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.1):
            peak[0] = max(peak[0], _checkpoint_bytes(root))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.monotonic()
    grid = tuner.fit()
    seconds = time.monotonic() - start
    stop.set()
    sampler.join()
    final = _checkpoint_bytes(root)
    peak[0] = max(peak[0], final)
    errors = sum(r.error is not None for r in grid)
    return {
        "seconds": seconds,
        "peak_bytes": peak[0],
        "final_bytes": final,
        "errors": errors,
    }


def bench_sweep_disk(quick: bool, storage: str) -> dict[str, Any]:
    from rtt_testing import init_local_ray

    trials, steps, size, pairs = (8, 4, MiB, 1) if quick else (40, 8, 4 * MiB, 3)
    init_local_ray(4, log_to_driver=False)
    try:
        runs: dict[str, list] = {f: [] for f in _FLAVOURS}
        ratios = []
        for i in range(pairs):
            order = ("none", "sweep") if i % 2 == 0 else ("sweep", "none")
            got = {}
            for flavour in order:
                got[flavour] = _fit(flavour, trials, steps, size, storage)
                runs[flavour].append(got[flavour])
                progress(f"sweep_disk {flavour}: {got[flavour]}")
            ratios.append(got["sweep"]["seconds"] / got["none"]["seconds"])
        runs["per_trial"].append(_fit("per_trial", trials, steps, size, storage))
        progress(f"sweep_disk per_trial: {runs['per_trial'][-1]}")
    finally:
        ray.shutdown()
    goal_bytes = (_KEEP + _AT_ONCE + 1) * size
    out: dict[str, Any] = {
        "trials": trials,
        "checkpoints_per_trial": steps,
        "checkpoint_bytes": size,
        "at_once": _AT_ONCE,
        "sweep_num_to_keep": _KEEP,
        "pairs": pairs,
        "flavours": {
            f: {
                "seconds": statistics.median(r["seconds"] for r in rs),
                "peak_bytes": max(r["peak_bytes"] for r in rs),
                "final_bytes": max(r["final_bytes"] for r in rs),
                "errors": sum(r["errors"] for r in rs),
            }
            for f, rs in runs.items()
        },
        "pair_ratios": ratios,
        "ratio": statistics.median(ratios),
        "goal_peak_bytes": goal_bytes,
    }
    sweep = out["flavours"]["sweep"]
    out["peak_goal_met"] = sweep["peak_bytes"] <= goal_bytes
    out["time_goal_met"] = out["ratio"] <= 1.05
    print(
        _table(
            "sweep_disk",
            ["flavour", "fit() s", "peak MiB", "final MiB", "errors"],
            [
                [
                    f,
                    f"{v['seconds']:.1f}",
                    f"{v['peak_bytes'] / MiB:.0f}",
                    f"{v['final_bytes'] / MiB:.0f}",
                    v["errors"],
                ]
                for f, v in out["flavours"].items()
            ],
        )
    )
    print(
        f"sweep peak {sweep['peak_bytes'] / MiB:.0f} MiB (goal <= {goal_bytes / MiB:.0f} MiB: "
        f"{'met' if out['peak_goal_met'] else 'not met'}); sweep / none fit(): "
        f"{out['ratio']:.3f} (pairs: {', '.join(f'{r:.3f}' for r in ratios)}; goal <= 1.05: "
        f"{'met' if out['time_goal_met'] else 'not met'})"
    )
    return out
