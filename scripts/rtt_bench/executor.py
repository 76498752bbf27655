"""Section ``executor`` of scripts/bench.py: reports per second through the remote executor against the local one, 1,000 reports (200 with --quick), the median overhead of 9 alternating pairs (3 with --quick; which executor runs first alternates too), in two setups: ``full`` (``num_cpus=2`` on this 2-core machine: the coordinator and one worker fill it) and ``roomy`` (``num_cpus=4``). The goal (<= 5% overhead) holds only if it holds in both."""

from __future__ import annotations

import statistics
import time
from typing import Any

import ray
import ray.cloudpickle
import ray.train
import ray.tune

import ray_tt_ext
from ray_tt_ext import _compat
from rtt_bench.common import _table, progress
from rtt_testing import init_local_ray

# -- executor throughput ------------------------------------------------------------------


def _throughput_loop(config):
    n = config["num_reports"]
    step_s = config.get("step_s", 0.0)  # the "training" between two reports
    ray.train.report({"i": 0})  # warm-up
    latencies = []
    t0 = time.perf_counter()
    for i in range(1, n + 1):
        if step_s:
            time.sleep(step_s)
        t = time.perf_counter()
        ray.train.report({"i": i})
        latencies.append(time.perf_counter() - t)
    elapsed = time.perf_counter() - t0
    latencies.sort()
    ray.train.report(
        {
            "i": n + 1,
            "elapsed": elapsed,
            # How long train.report() blocks the worker, as the worker sees it.
            "p50_ms": 1e3 * latencies[len(latencies) // 2],
            "p95_ms": 1e3 * latencies[int(len(latencies) * 0.95)],
        }
    )


def _executor_case(
    remote: bool, num_reports: int, storage: str, step_s: float = 0.0
) -> dict[str, float]:
    result = ray_tt_ext.Tuner(
        ray_tt_ext.DataParallelTrainer(
            _throughput_loop,
            train_loop_config={"num_reports": num_reports, "step_s": step_s},
            scaling_config=ray.train.ScalingConfig(num_workers=1),
            remote_executor=remote,
        ),
        run_config=_compat.TuneRunConfig(
            storage_path=storage, name=f"exec_{remote}_{time.time_ns()}", verbose=0
        ),
    ).fit()[0]
    assert result.error is None, result.error
    m = result.metrics
    return {
        "reports_per_s": num_reports / m["elapsed"],
        "p50_ms": m["p50_ms"],
        "p95_ms": m["p95_ms"],
    }


def _executor_setup(
    setup: str, num_cpus: int, quick: bool, storage: str, step_s: float = 0.0
) -> dict:
    n = 200 if quick else 1000
    if step_s:
        n = int(n * 0.005 / step_s)  # about as long as the report-only runs
    # Pairs of runs vary by +-10% and more on this machine: enough of them for
    # the median to say something.
    pairs = 3 if quick else 9
    runs: dict[str, list] = {"local": [], "remote": []}
    init_local_ray(num_cpus, log_to_driver=False)
    try:
        for remote in (False, True):  # warm-up of each (imports, worker and host start)
            _executor_case(remote, 50, storage)
        for i in range(pairs):  # alternating, so drift hits both alike
            order = (("local", False), ("remote", True))
            for kind, remote in order if i % 2 == 0 else order[::-1]:
                progress(f"executor ({setup}, num_cpus={num_cpus}): {kind}, pair {i + 1}")
                runs[kind].append(_executor_case(remote, n, storage, step_s))
    finally:
        ray.shutdown()
    per_pair = [
        local["reports_per_s"] / remote["reports_per_s"] - 1.0
        for local, remote in zip(runs["local"], runs["remote"], strict=True)
    ]
    med = {
        kind: {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        for kind, rs in runs.items()
    }
    return {
        "num_cpus": num_cpus,
        "step_s": step_s,
        "num_reports": n,
        "runs": runs,
        "local": med["local"],
        "remote": med["remote"],
        # The median of the pairs' own overheads: each pair ran back to back, so
        # drift between pairs cancels out of it (the medians of each executor's
        # runs, compared, do not pair anything: kept for comparison).
        "overhead": statistics.median(per_pair),
        "overhead_of_medians": med["local"]["reports_per_s"]
        / med["remote"]["reports_per_s"]
        - 1.0,
        "overhead_per_pair": per_pair,
    }


def bench_executor(quick: bool, storage: str) -> dict[str, Any]:
    out = {
        "full": _executor_setup("full", 2, quick, storage),
        "roomy": _executor_setup("roomy", 4, quick, storage),
        # Not part of the goal: the same fixed cost next to 10 ms of "training".
        "steps_10ms": _executor_setup("full, 10 ms steps", 2, quick, storage, step_s=0.01),
    }
    rows = []
    for setup, r in out.items():
        if not isinstance(r, dict):
            continue
        for label, m in (("local (Ray)", r["local"]), ("remote (ray_tt_ext)", r["remote"])):
            rows.append(
                [
                    f"{setup} ({r['num_cpus']} CPUs)",
                    label,
                    f"{m['reports_per_s']:.0f}",
                    f"{1e3 / m['reports_per_s']:.2f}",
                    f"{m['p50_ms']:.2f}",
                    f"{m['p95_ms']:.2f}",
                ]
            )
        spread = r["overhead_per_pair"]
        rows.append(
            [
                "",
                "remote overhead",
                f"{r['overhead'] * 100:+.1f}%",
                f"pairs {min(spread) * 100:+.1f}% .. {max(spread) * 100:+.1f}%",
                f"of medians {r['overhead_of_medians'] * 100:+.1f}%",
                "",
            ]
        )
    out["goal_met"] = all(r["overhead"] <= 0.05 for r in (out["full"], out["roomy"]))
    print(
        _table(
            f"Executor throughput, {out['full']['num_reports']} reports, 1 worker "
            f"(median of {len(out['full']['overhead_per_pair'])} alternating pairs)",
            ["setup", "executor", "reports/s", "ms/report", "report() p50 ms", "p95 ms"],
            rows,
        )
    )
    print(f"goal (<= 5% in both setups): {'met' if out['goal_met'] else 'NOT met'}")
    return out
