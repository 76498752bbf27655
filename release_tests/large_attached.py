"""Scenario 1: 4 trials over a trainer with more than 512 MiB attached.

The attached data is split over ``train_loop_config``, an attribute of the
driver's trainer instance and a ``resume_from_checkpoint`` whose folder holds
a large file; together they exceed the 512 MiB gRPC limit. All trials must
succeed; the scenario records conversions and the bytes put into the object
store (once per Tuner, not per trial).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from common import Context, MiB, main

import ray_tt_ext
from ray_tt_ext import _compat  # noqa: E402
from rtt_testing import counting_conversions, resume_step


def train_loop(config):
    import ray.train

    start = resume_step(ray.train.get_checkpoint())
    weights = config["weights"]
    for step in range(start, start + 2):
        with tempfile.TemporaryDirectory() as d:
            Path(d, "state.json").write_text(json.dumps({"step": step}))
            ray.train.report(
                {"step": step, "checksum": float(weights[:1000].sum()), "lr": config["lr"]},
                checkpoint=ray.train.Checkpoint.from_directory(d),
            )


def run(ctx: Context) -> dict:
    import numpy as np
    import ray
    import ray.train
    import ray.tune

    config_bytes = 32 * MiB if ctx.smoke else 400 * MiB
    attribute_bytes = 8 * MiB if ctx.smoke else 100 * MiB
    checkpoint_bytes = 8 * MiB if ctx.smoke else 100 * MiB
    ctx.init_ray()
    conversions = {"n": 0}
    puts = {"n": 0, "bytes": 0}
    real_put = ray.put

    def counting_put(value, *args, **kwargs):
        puts["n"] += 1
        puts["bytes"] += ray_tt_ext.inspect_payload(value).total_bytes
        return real_put(value, *args, **kwargs)

    def count(trainer):
        conversions["n"] += 1

    Counted = counting_conversions(ray_tt_ext.DataParallelTrainer, count)

    resume_dir = ctx.scratch("rtt_resume_")
    Path(resume_dir, "state.json").write_text(json.dumps({"step": 0}))
    np.ones(checkpoint_bytes // 8).tofile(os.path.join(resume_dir, "weights.bin"))
    trainer = Counted(
        train_loop,
        train_loop_config={"weights": np.ones(config_bytes // 8), "lr": 0.0},
        scaling_config=ray.train.ScalingConfig(num_workers=1),
        resume_from_checkpoint=ray.train.Checkpoint.from_directory(resume_dir),
    )
    trainer.embedding_table = np.ones(attribute_bytes // 8)
    attached = config_bytes + attribute_bytes + checkpoint_bytes
    ctx.progress(f"attached {attached / MiB:.0f} MiB; fitting 4 trials")
    ray.put = counting_put
    try:
        tuner = ray_tt_ext.Tuner(
            trainer,
            param_space={"train_loop_config": {"lr": ray.tune.grid_search([1, 2, 3, 4])}},
            run_config=_compat.TuneRunConfig(
                storage_path=ctx.storage_path, name="large_attached", verbose=0
            ),
        )
        payload = len(ray.cloudpickle.dumps(tuner._local_tuner.converted_trainable))
        results = tuner.fit()
    finally:
        ray.put = real_put
        ray.shutdown()
    assert len(results) == 4 and not results.errors, results.errors
    for result in results:
        assert result.metrics["step"] == 2, "each trial resumed from the checkpoint"
        assert result.metrics["checksum"] == 1000.0
    assert conversions["n"] == 1, conversions
    assert puts["bytes"] < 2 * config_bytes, puts  # once per Tuner
    ctx.progress(f"ok: {conversions['n']} conversion, {puts['bytes'] / MiB:.0f} MiB put")
    return {
        "attached_bytes": attached,
        "over_grpc_limit": attached > ray_tt_ext.GRPC_MAX_MESSAGE_BYTES,
        "trials": len(results),
        "conversions": conversions["n"],
        "object_store_puts": puts["n"],
        "object_store_bytes": puts["bytes"],
        "registered_payload_bytes": payload,
    }


if __name__ == "__main__":
    raise SystemExit(main(run))
