"""``python -m ray_tt_ext demo``: the four guarantees on a local Ray, in a minute."""

from __future__ import annotations

import json
import os
import tempfile
import time
from typing import Any, Optional

import numpy as np
import ray
import ray.tune

import ray_tt_ext
from ray_tt_ext import _compat
from ray_tt_ext._compat import AirScalingConfig
from ray_tt_ext._compat import DataParallelTrainer as RayDataParallelTrainer
from ray_tt_ext._payload import format_bytes
from ray_tt_ext._testing import init_local_ray

_conversions = {"count": 0}


class DemoTrainer(ray_tt_ext.DataParallelTrainer):
    """Counts its conversions to a Tune trainable (on the driver)."""

    def as_trainable(self):
        _conversions["count"] += 1
        return super().as_trainable()


def _train_loop(config: dict[str, Any]) -> None:
    import ray.train

    # Gradient descent on x**2 from the weights' mean: the loss depends on lr.
    x = float(config["weights"][:1000].mean())
    rank = ray.train.get_context().get_world_rank()
    for step in range(3):
        x -= config["lr"] * 2 * x
        loss = x * x
        if rank != 0:  # rank 0 saves the checkpoint, every worker reports
            ray.train.report({"step": step, "loss": loss})
            continue
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "state.json"), "w") as f:
                json.dump({"step": step}, f)
            ray.train.report(
                {"step": step, "loss": loss},
                checkpoint=ray.train.Checkpoint.from_directory(d),
            )


def run_demo(size_mb: int = 200, storage_path: Optional[str] = None) -> int:
    os.environ.setdefault("RAY_TRAIN_ENABLE_V2_MIGRATION_WARNINGS", "0")
    storage_path = storage_path or tempfile.mkdtemp(prefix="ray_tt_ext_demo_")
    weights = np.random.default_rng(0).random(size_mb * 1024 * 1024 // 8)
    print(f"ray_tt_ext {ray_tt_ext.__version__} demo on Ray {_compat.RAY_VERSION}")
    print(f"A trainer holding a {format_bytes(weights.nbytes)} array in train_loop_config.")
    started_here = not ray.is_initialized()
    if started_here:
        init_local_ray(4, log_to_driver=False)
    try:
        kwargs = dict(
            train_loop_config={"weights": weights},
            scaling_config=AirScalingConfig(num_workers=2),
        )
        upstream = ray_tt_ext.inspect_payload(
            RayDataParallelTrainer(_train_loop, **kwargs).as_trainable()
        )
        t0 = time.monotonic()
        tuner = ray_tt_ext.Tuner(
            DemoTrainer(_train_loop, **kwargs),
            param_space={"train_loop_config": {"lr": ray.tune.grid_search([0.01, 0.1])}},
            run_config=_compat.TuneRunConfig(
                name="demo",
                storage_path=storage_path,
                verbose=0,
                checkpoint_config=ray_tt_ext.CheckpointConfig(
                    checkpoint_dir_name="checkpoint_{index:03d}-loss_{loss:.4f}",
                    num_to_keep=2,
                ),
            ),
        )
        ours = ray_tt_ext.inspect_payload(tuner._local_tuner.converted_trainable)
        results = tuner.fit()
        elapsed = time.monotonic() - t0
    finally:
        if started_here:
            ray.shutdown()

    print("\nWhat happened")
    print(
        f"  trials run:                       {len(results)} (errors: {len(results.errors)})"
    )
    print(f"  trainer -> trainable conversions: {_conversions['count']} (once per Tuner)")
    print(
        f"  payload Tune registers in GCS:    {format_bytes(ours.total_bytes)} "
        f"(Ray's own DataParallelTrainer: {format_bytes(upstream.total_bytes)}; "
        f"gRPC limit {format_bytes(ray_tt_ext.GRPC_MAX_MESSAGE_BYTES)})"
    )
    if upstream.contributors:
        top = upstream.contributors[0]
        print(
            f"  largest part of Ray's payload:    {top.path} ({format_bytes(top.nbytes)})"
        )
    for result in results:
        names = sorted(os.path.basename(c.path) for c, _ in result.best_checkpoints)
        print(f"  checkpoints of {os.path.basename(result.path)}:")
        for name in names:
            print(f"    {name}")
    print(f"  wall time: {elapsed:.1f} s; results in {os.path.join(storage_path, 'demo')}")
    return 0 if not results.errors else 1
