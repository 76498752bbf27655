"""Section ``inspect`` of scripts/bench.py: ``inspect_payload`` against ``ray.cloudpickle.dumps``, time and peak traced memory, 1 MiB to 1 GiB (speed-up: higher is better)."""

from __future__ import annotations

import gc
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
import ray
import ray.cloudpickle
import ray.train
import ray.tune

import ray_tt_ext
from ray_tt_ext._payload import format_bytes
from rtt_bench.common import GiB, MiB, _table, progress

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
        progress(f"inspect: {format_bytes(size)}")
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
