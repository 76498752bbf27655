"""Section ``lifetime`` of scripts/bench.py: object-store memory still in use after N Tuners in a row, each over a trainer with a large ``train_loop_config``, each deleted and garbage-collected before the next (4 x 300 MiB; 3 x 64 MiB with --quick), ray_tt_ext beside upstream Ray, each in a Ray of its own."""

from __future__ import annotations

import gc
import time
from typing import Any

import numpy as np
import ray
import ray.cloudpickle
import ray.train
import ray.tune
from ray.train.data_parallel_trainer import (
    DataParallelTrainer as RayDataParallelTrainer,
)

import ray_tt_ext
from ray_tt_ext import _compat
from ray_tt_ext._payload import format_bytes
from rtt_bench.common import MiB, _table, progress
from rtt_bench.tuner import _noop_loop
from rtt_testing import init_local_ray

# -- object-store lifetime ----------------------------------------------------------------


def _plasma_used_bytes() -> int:
    """Plasma memory in use on this Ray (Ray's memory summary; MiB resolution)."""
    import re

    from ray._private.internal_api import memory_summary

    summary = memory_summary(address=ray.get_runtime_context().gcs_address, stats_only=True)
    match = re.search(r"Plasma memory usage (\d+) MiB", summary)
    return int(match.group(1)) * MiB if match else 0


def _lifetime_case(flavour: str, n: int, nbytes: int, storage: str) -> list[int]:
    base = (
        ray_tt_ext.DataParallelTrainer
        if flavour == "ray_tt_ext"
        else RayDataParallelTrainer
    )
    tuner_cls = ray_tt_ext.Tuner if flavour == "ray_tt_ext" else ray.tune.Tuner
    init_local_ray(2, log_to_driver=False, object_store_memory=(n + 2) * nbytes)
    held = []
    try:
        for i in range(n):
            progress(f"lifetime: {flavour}, Tuner {i + 1} of {n}")
            tuner = tuner_cls(
                base(
                    _noop_loop,
                    train_loop_config={"weights": np.ones(nbytes // 8)},
                    scaling_config=ray.train.ScalingConfig(num_workers=1),
                ),
                run_config=_compat.TuneRunConfig(
                    storage_path=storage, name=f"life_{flavour}_{time.time_ns()}", verbose=0
                ),
            )
            assert not tuner.fit().errors
            del tuner
            gc.collect()
            time.sleep(2.0)  # Ray frees objects asynchronously
            held.append(_plasma_used_bytes())
    finally:
        ray.shutdown()
    return held


def bench_lifetime(quick: bool, storage: str) -> dict[str, Any]:
    n, nbytes = (3, 64 * MiB) if quick else (4, 300 * MiB)
    out = {f: _lifetime_case(f, n, nbytes, storage) for f in ("ray_tt_ext", "upstream")}
    rows = [
        [str(i + 1), format_bytes(out["ray_tt_ext"][i]), format_bytes(out["upstream"][i])]
        for i in range(n)
    ]
    print(
        _table(
            f"Object store in use after N Tuners ({format_bytes(nbytes)} "
            "train_loop_config each), each deleted and garbage-collected",
            ["N", "ray_tt_ext", "upstream Ray"],
            rows,
        )
    )
    return {"tuners": n, "attached_bytes": nbytes, **out}
