#!/usr/bin/env python
"""Benchmarks, side by side with upstream Ray on the same machine, in one run.

    python scripts/bench.py [--quick] [--out bench_results] [--only NAME ...]

Sections (ratios are ray_tt_ext / upstream; lower is better unless noted):

* ``tuner``: a Tuner over a trainer with a large array attached (1 GiB; 64 MiB
  with --quick): conversions, bytes put into the object store, the payload
  registered in the GCS, and the time from ``Tuner()`` to the first trial
  running. Upstream is ``ray.tune.Tuner`` with Ray's ``DataParallelTrainer``.
* ``inspect``: ``inspect_payload`` against ``ray.cloudpickle.dumps``, time and
  peak traced memory, 1 MiB to 1 GiB (speed-up: higher is better).
* ``executor``: reports per second through the remote executor against the
  local one, 1,000 reports (200 with --quick).

Prints a table per section and writes ``<out>/bench.json``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # loopback only
os.environ.setdefault("RAY_TRAIN_ENABLE_V2_MIGRATION_WARNINGS", "0")
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")

import ray_tt_ext  # noqa: E402,I001  (first: it settles RAY_TRAIN_V2_ENABLED)
from ray_tt_ext import _compat  # noqa: E402
import numpy as np  # noqa: E402
import ray  # noqa: E402
import ray.cloudpickle  # noqa: E402
import ray.train  # noqa: E402
import ray.tune  # noqa: E402
from ray_tt_ext._testing import init_local_ray  # noqa: E402
from ray.train.data_parallel_trainer import (  # noqa: E402
    DataParallelTrainer as RayDataParallelTrainer,
)

from ray_tt_ext._payload import format_bytes  # noqa: E402

MiB = 1024 * 1024
GiB = 1024 * MiB


def _table(title: str, header: list[str], rows: list[list[Any]]) -> str:
    cells = [header] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = [
        f"\n## {title}",
        "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)),
    ]
    lines.append("  ".join("-" * w for w in widths))
    lines += [
        "  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells[1:]
    ]
    return "\n".join(lines)


# -- tuner: conversions, object-store bytes, payload, time to first trial ----------


def _noop_loop(config):
    ray.train.report({"done": 1})


class _FirstTrialStart(ray.tune.Callback):
    def __init__(self) -> None:
        self.at: float = float("nan")

    def on_trial_start(self, iteration, trials, trial, **info):
        if self.at != self.at:  # first time only
            self.at = time.perf_counter()


def _tuner_case(flavour: str, nbytes: int, storage: str) -> dict[str, Any]:
    conversions = {"n": 0}
    base = (
        ray_tt_ext.DataParallelTrainer
        if flavour == "ray_tt_ext"
        else RayDataParallelTrainer
    )
    tuner_cls = ray_tt_ext.Tuner if flavour == "ray_tt_ext" else ray.tune.Tuner

    class Counted(base):
        def as_trainable(self):
            conversions["n"] += 1
            return super().as_trainable()

    put_bytes = {"n": 0}
    real_put = ray.put

    def counting_put(value, *args, **kwargs):
        put_bytes["n"] += ray_tt_ext.inspect_payload(value).total_bytes
        return real_put(value, *args, **kwargs)

    weights = np.ones(nbytes // 8)
    callback = _FirstTrialStart()
    ray.put = counting_put
    try:
        t0 = time.perf_counter()
        tuner = tuner_cls(
            Counted(
                _noop_loop,
                train_loop_config={"weights": weights},
                scaling_config=ray.train.ScalingConfig(num_workers=1),
            ),
            param_space={"train_loop_config": {"lr": ray.tune.grid_search([0.1, 0.2])}},
            run_config=_compat.TuneRunConfig(
                storage_path=storage,
                name=f"{flavour}_{time.time_ns()}",
                verbose=0,
                callbacks=[callback],
            ),
        )
        internal = tuner._local_tuner
        payload = len(ray.cloudpickle.dumps(internal.converted_trainable))
        results = tuner.fit()
        tuner.get_results()
    finally:
        ray.put = real_put
    assert not results.errors, results.errors
    return {
        "conversions": conversions["n"],
        "object_store_bytes": put_bytes["n"],
        "registered_payload_bytes": payload,
        "time_to_first_trial_s": callback.at - t0,
    }


def bench_tuner(quick: bool, storage: str) -> dict[str, Any]:
    nbytes = 64 * MiB if quick else GiB
    # Warm up both code paths (imports, Tune's first-run costs), then interleave
    # the measured runs so that drift hits both flavours alike.
    for flavour in ("ray_tt_ext", "upstream"):
        _tuner_case(flavour, MiB, storage)
    runs: dict[str, list] = {"ray_tt_ext": [], "upstream": []}
    for _ in range(1 if quick else 3):
        for flavour in runs:
            runs[flavour].append(_tuner_case(flavour, nbytes, storage))
            gc.collect()
    rows, out = [], {"attached_bytes": nbytes, "runs": runs}
    for key in runs["ray_tt_ext"][0]:
        ours = statistics.median(r[key] for r in runs["ray_tt_ext"])
        upstream = statistics.median(r[key] for r in runs["upstream"])
        ratio = ours / upstream if upstream else float("nan")
        out[key] = {"ray_tt_ext": ours, "upstream": upstream, "ratio": ratio}
        fmt = format_bytes if key.endswith("bytes") else (lambda v: f"{v:.3g}")
        rows.append([key, fmt(ours), fmt(upstream), f"{ratio:.3f}"])
    print(
        _table(
            f"Tuner over a trainer with {format_bytes(nbytes)} attached, 2 trials "
            f"(median of {len(runs['upstream'])})",
            ["measure", "ray_tt_ext", "upstream Ray", "ratio"],
            rows,
        )
    )
    return out


# -- inspect_payload vs cloudpickle.dumps -----------------------------------------------


def _measure(fn: Callable[[], Any]) -> dict[str, float]:
    gc.collect()
    tracemalloc.start()
    t0 = time.perf_counter()
    fn()
    elapsed = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"seconds": elapsed, "peak_bytes": peak}


def bench_inspect(quick: bool) -> dict[str, Any]:
    sizes = [MiB, 16 * MiB, 128 * MiB] + ([] if quick else [GiB])
    rows, out = [], {}
    for size in sizes:
        obj = {"train_loop_config": {"weights": np.ones(size // 8)}}
        inspect = min(
            (_measure(lambda o=obj: ray_tt_ext.inspect_payload(o)) for _ in range(3)),
            key=lambda m: m["seconds"],
        )
        dumps = _measure(lambda o=obj: len(ray.cloudpickle.dumps(o)))
        speedup = dumps["seconds"] / inspect["seconds"]
        out[str(size)] = {"inspect": inspect, "dumps": dumps, "speedup": speedup}
        rows.append(
            [
                format_bytes(size),
                f"{inspect['seconds'] * 1e3:.2f} ms",
                f"{dumps['seconds'] * 1e3:.1f} ms",
                f"{speedup:.0f}x",
                format_bytes(inspect["peak_bytes"]),
                format_bytes(dumps["peak_bytes"]),
            ]
        )
        del obj
    print(
        _table(
            "inspect_payload vs ray.cloudpickle.dumps",
            ["size", "inspect", "dumps", "speed-up", "inspect peak", "dumps peak"],
            rows,
        )
    )
    return out


# -- executor throughput ------------------------------------------------------------------


def _throughput_loop(config):
    n = config["num_reports"]
    ray.train.report({"i": 0})  # warm-up
    latencies = []
    t0 = time.perf_counter()
    for i in range(1, n + 1):
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


def _executor_case(remote: bool, num_reports: int, storage: str) -> dict[str, float]:
    result = ray_tt_ext.Tuner(
        ray_tt_ext.DataParallelTrainer(
            _throughput_loop,
            train_loop_config={"num_reports": num_reports},
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


def bench_executor(quick: bool, storage: str) -> dict[str, Any]:
    n = 200 if quick else 1000
    runs: dict[str, list] = {"local": [], "remote": []}
    for _ in range(3):  # interleaved, so drift hits both alike
        runs["local"].append(_executor_case(False, n, storage))
        runs["remote"].append(_executor_case(True, n, storage))
    med = {
        kind: {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        for kind, rs in runs.items()
    }
    local, remote = med["local"]["reports_per_s"], med["remote"]["reports_per_s"]
    overhead = local / remote - 1.0
    rows = [
        [
            label,
            f"{m['reports_per_s']:.0f}",
            f"{1e3 / m['reports_per_s']:.2f}",
            f"{m['p50_ms']:.2f}",
            f"{m['p95_ms']:.2f}",
        ]
        for label, m in (
            ("local (Ray)", med["local"]),
            ("remote (ray_tt_ext)", med["remote"]),
        )
    ]
    rows.append(["remote overhead", f"{overhead * 100:+.1f}%", "", "", ""])
    print(
        _table(
            f"Executor throughput, {n} reports, 1 worker (median of 3)",
            ["executor", "reports/s", "ms/report", "report() p50 ms", "p95 ms"],
            rows,
        )
    )
    return {
        "num_reports": n,
        "runs": runs,
        "local": med["local"],
        "remote": med["remote"],
        "overhead": overhead,
    }


SECTIONS = {"tuner": bench_tuner, "inspect": bench_inspect, "executor": bench_executor}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a minute)")
    parser.add_argument("--out", default="bench_results", help="folder for bench.json")
    parser.add_argument(
        "--only", nargs="*", choices=sorted(SECTIONS), help="sections to run"
    )
    args = parser.parse_args(argv)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    storage = str((out_dir / "ray_results").resolve())
    machine = {
        "python": sys.version.split()[0],
        "ray": ray.__version__,
        "ray_tt_ext": ray_tt_ext.__version__,
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
    }
    print(f"# ray_tt_ext benchmarks ({'quick' if args.quick else 'full'}): {machine}")
    init_local_ray(4, log_to_driver=False)
    results: dict[str, Any] = {"machine": machine, "quick": args.quick}
    try:
        for name in args.only or list(SECTIONS):
            fn = SECTIONS[name]
            results[name] = fn(args.quick) if name == "inspect" else fn(args.quick, storage)
    finally:
        ray.shutdown()
    (out_dir / "bench.json").write_text(json.dumps(results, indent=2, default=float))
    print(f"\nwrote {out_dir / 'bench.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
