"""Section ``train_loop_config`` of scripts/bench.py: ``trainer.fit()`` of a trainer with a large array in ``train_loop_config`` (100 MiB; 16 MiB with --quick) and 3 reports, beside ``ray_tt_ext.Tuner(trainer).fit()`` and upstream Ray's ``trainer.fit()``: time and the size of Tune's JSON files. Goals: fit / Tuner <= 1.1, JSON <= 1 MiB."""

from __future__ import annotations

import gc
import statistics
import time
from pathlib import Path
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

# -- train_loop_config: a large value under trainer.fit() and Tuner(trainer) -----------


def _three_reports_loop(config):
    for step in range(3):
        ray.train.report({"step": step, "weights": float(config["weights"][:3].sum())})


def _config_case(flavour: str, nbytes: int, storage: str) -> dict[str, Any]:
    """One fit of a 1-worker trainer with ``nbytes`` of numpy in train_loop_config."""
    name = f"config_{flavour}_{time.time_ns()}"
    cls = (
        RayDataParallelTrainer
        if flavour == "upstream_fit"
        else ray_tt_ext.DataParallelTrainer
    )
    trainer = cls(
        _three_reports_loop,
        train_loop_config={"weights": np.ones(nbytes // 8), "lr": 0.1},
        scaling_config=ray.train.ScalingConfig(num_workers=1),
        run_config=_compat.TuneRunConfig(storage_path=storage, name=name, verbose=0),
    )
    t0 = time.perf_counter()
    if flavour == "ray_tt_ext_tuner":
        result = ray_tt_ext.Tuner(trainer).fit()[0]
    else:
        result = trainer.fit()
    seconds = time.perf_counter() - t0
    assert result.error is None and result.metrics["weights"] == 3.0, result
    sizes: dict[str, int] = {}
    for path in Path(storage, name).rglob("*.json"):
        kind = path.name if path.name in ("params.json", "result.json") else "state"
        sizes[kind] = max(sizes.get(kind, 0), path.stat().st_size)
    return {
        "seconds": seconds,
        "params_json_bytes": sizes.get("params.json", 0),
        "result_json_bytes": sizes.get("result.json", 0),
        "largest_state_json_bytes": sizes.get("state", 0),
    }


_CONFIG_FLAVOURS = ("ray_tt_ext_fit", "ray_tt_ext_tuner", "upstream_fit")


def bench_train_loop_config(quick: bool, storage: str) -> dict[str, Any]:
    nbytes = 16 * MiB if quick else 100 * MiB
    for flavour in _CONFIG_FLAVOURS:  # warm-up: imports, Tune's first-run costs
        _config_case(flavour, MiB, storage)
    runs: dict[str, list] = {f: [] for f in _CONFIG_FLAVOURS}
    for i in range(1 if quick else 2):
        order = _CONFIG_FLAVOURS if i % 2 == 0 else _CONFIG_FLAVOURS[::-1]
        for flavour in order:
            progress(f"train_loop_config: {flavour}, run {i + 1}, {format_bytes(nbytes)}")
            runs[flavour].append(_config_case(flavour, nbytes, storage))
            gc.collect()
    out: dict[str, Any] = {"attached_bytes": nbytes, "runs": runs}
    for flavour, cases in runs.items():
        out[flavour] = {k: statistics.median(c[k] for c in cases) for k in cases[0]}
    fit, tuner = out["ray_tt_ext_fit"], out["ray_tt_ext_tuner"]
    out["fit_over_tuner"] = fit["seconds"] / tuner["seconds"]
    largest = max(
        v
        for f in ("ray_tt_ext_fit", "ray_tt_ext_tuner")
        for k, v in out[f].items()
        if k.endswith("json_bytes")
    )
    out["goal_met"] = out["fit_over_tuner"] <= 1.1 and largest <= MiB
    print(
        _table(
            f"1-worker trainer, {format_bytes(nbytes)} in train_loop_config, 3 reports "
            f"(median of {len(runs['upstream_fit'])})",
            ["flavour", "fit()", "params.json", "result.json", "largest state"],
            [
                [
                    f,
                    f"{out[f]['seconds']:.1f} s",
                    format_bytes(out[f]["params_json_bytes"]),
                    format_bytes(out[f]["result_json_bytes"]),
                    format_bytes(out[f]["largest_state_json_bytes"]),
                ]
                for f in _CONFIG_FLAVOURS
            ],
        )
    )
    print(f"trainer.fit() / Tuner(trainer): {out['fit_over_tuner']:.3f} (goal <= 1.1)")
    return out
