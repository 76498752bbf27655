"""Section ``tuner`` of scripts/bench.py: a Tuner over a trainer with a large array attached (1 GiB; 64 MiB with --quick): conversions, bytes put into the object store, the payload registered in the GCS, and the time from ``Tuner()`` to the first trial running. Upstream is ``ray.tune.Tuner`` with Ray's ``DataParallelTrainer``."""

from __future__ import annotations

import gc
import statistics
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
from rtt_bench.common import GiB, MiB, _table, progress
from rtt_testing import counting_conversions

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

    def count(trainer):
        conversions["n"] += 1

    Counted = counting_conversions(base, count)

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
    for i in range(1 if quick else 3):
        for flavour in runs:
            progress(f"tuner: {flavour}, run {i + 1}, {format_bytes(nbytes)} attached")
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
