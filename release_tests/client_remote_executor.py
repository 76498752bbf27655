"""Scenario 3: the remote executor through Ray Client.

Starts ``ray start --head`` on loopback (token authentication on, Train V2 left
at Ray's default on the cluster), connects through ``ray://``, tunes a
``DataParallelTrainer(remote_executor=True)`` and checks that results and
checkpoints reach the client, then stops exactly the processes it started.
With ``--address ray://...`` it uses that cluster instead.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from common import Context, main

import ray_tt_ext
from ray_tt_ext import _compat  # noqa: E402
from rtt_testing import HeadNode, connect_client


def train_loop(config):
    import ray.train

    ctx = ray.train.get_context()
    for step in range(config["num_reports"]):
        checkpoint = None
        with tempfile.TemporaryDirectory() as d:
            if ctx.get_world_rank() == 0:
                Path(d, "state.json").write_text(json.dumps({"step": step}))
                checkpoint = ray.train.Checkpoint.from_directory(d)
            ray.train.report(
                {"step": step, "v2": os.environ.get("RAY_TRAIN_V2_ENABLED")},
                checkpoint=checkpoint,
            )


def run(ctx: Context) -> dict:
    import ray
    import ray.train
    import ray.tune

    head = None if ctx.address else HeadNode(num_cpus=4)
    failed = True  # until the Tuner's results say otherwise
    address = ctx.address or head.client_address
    try:
        ctx.progress(f"connecting to {address}")
        client = (
            connect_client(address) if address.startswith("ray://") else ray.init(address)
        )
        assert ray.util.client.ray.is_connected()
        num_trials, num_reports = (2, 3) if ctx.smoke else (4, 50)
        results = ray_tt_ext.Tuner(
            ray_tt_ext.DataParallelTrainer(
                train_loop,
                train_loop_config={"num_reports": num_reports},
                scaling_config=ray.train.ScalingConfig(num_workers=1),
                remote_executor=True,
            ),
            param_space={
                "train_loop_config": {"seed": ray.tune.grid_search(list(range(num_trials)))}
            },
            tune_config=ray.tune.TuneConfig(max_concurrent_trials=2),
            run_config=_compat.TuneRunConfig(storage_path=ctx.storage_path, name="client"),
        ).fit()
        client.disconnect()
        failed = bool(results.errors)
    finally:
        if head is not None:
            try:
                if failed:  # a crashed process's log goes with the temp dir
                    print(head.crash_report() or "no Ray log shows a crash", flush=True)
            finally:
                head.stop()
    assert not results.errors, results.errors
    steps, checkpoints = [], []
    for result in results:
        assert result.metrics["v2"] == "0"
        steps.append(result.metrics["step"])
        with result.checkpoint.as_directory() as d:
            checkpoints.append(json.loads(Path(d, "state.json").read_text())["step"])
    assert steps == checkpoints == [num_reports - 1] * num_trials
    ctx.progress(f"ok: {num_trials} trials through ray://, checkpoints on the client")
    return {"trials": num_trials, "reports_per_trial": num_reports, "address": address}


if __name__ == "__main__":
    raise SystemExit(main(run))
