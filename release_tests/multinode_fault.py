"""Scenario 5: a 3-node cluster loses a worker node mid-run; the run completes.

A head and two worker nodes (``ray.cluster_utils.Cluster``), 2 CPUs and one
``worker_node`` slot each, so any two nodes can host a trial. A trial with two
training workers and the remote executor runs; after its second checkpoint a
worker node hosting a training worker is removed without warning. With
``max_failures`` the trial resumes from its last checkpoint and finishes.
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from pathlib import Path

from common import Context, main

import ray_tt_ext
from ray_tt_ext import _compat  # noqa: E402
from rtt_testing import resume_step


def train_loop(config):
    import ray.train

    ctx = ray.train.get_context()
    start = resume_step(ray.train.get_checkpoint())
    node = ray.get_runtime_context().get_node_id()
    Path(config["nodes_dir"], f"rank{ctx.get_world_rank()}").write_text(node)
    for step in range(start, config["steps"]):
        time.sleep(config["sleep"])
        with tempfile.TemporaryDirectory() as d:
            checkpoint = None
            if ctx.get_world_rank() == 0:
                Path(d, "state.json").write_text(json.dumps({"step": step}))
                checkpoint = ray.train.Checkpoint.from_directory(d)
            ray.train.report({"step": step}, checkpoint=checkpoint)


def run(ctx: Context) -> dict:
    import ray
    import ray.train
    import ray.tune
    from ray.cluster_utils import Cluster

    if ctx.address:
        raise ValueError("multinode_fault builds its own Cluster; run it without --address")
    steps, sleep = (8, 0.5) if ctx.smoke else (60, 1.0)
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 2,
            "resources": {"worker_node": 1},
            "include_dashboard": False,
        },
    )
    # Connect before adding the worker nodes: all nodes share 127.0.0.1 and
    # ray.init attaches the driver to any node on its IP (a worker node's, at
    # times, on Ray 2.40); killing that node would take the driver down.
    ray.init(address=cluster.address, log_to_driver=False)
    if ray.get_runtime_context().get_node_id() != cluster.head_node.node_id:
        raise RuntimeError("the driver is not attached to the head node")
    workers = [cluster.add_node(num_cpus=2, resources={"worker_node": 1}) for _ in range(2)]
    cluster.wait_for_nodes()
    experiment = Path(ctx.storage_path, "multinode")
    nodes_dir = ctx.scratch("rtt_nodes_")
    killed = {}

    def kill_after_second_checkpoint():
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if list(experiment.glob("*/checkpoint_000001")):
                hosts = {p.read_text() for p in Path(nodes_dir).iterdir()}
                # A worker node hosting a training worker (never the head).
                node = next((n for n in workers if n.node_id in hosts), None)
                if node is not None:
                    cluster.remove_node(node, allow_graceful=False)
                    killed["node"] = node.node_id
                    killed["at"] = time.monotonic()
                    ctx.progress(
                        f"removed worker node {node.node_id[:8]} after checkpoint 1"
                    )
                    return
            time.sleep(0.2)

    killer = threading.Thread(target=kill_after_second_checkpoint, daemon=True)
    try:
        killer.start()
        ctx.progress(f"3 nodes up; {steps} steps, a worker node dies after checkpoint 1")
        result = ray_tt_ext.Tuner(
            ray_tt_ext.DataParallelTrainer(
                train_loop,
                train_loop_config={"steps": steps, "sleep": sleep, "nodes_dir": nodes_dir},
                scaling_config=ray.train.ScalingConfig(
                    num_workers=2, resources_per_worker={"CPU": 1, "worker_node": 1}
                ),
                remote_executor=True,
            ),
            run_config=_compat.TuneRunConfig(
                storage_path=ctx.storage_path,
                name="multinode",
                verbose=0,
                failure_config=_compat.TuneFailureConfig(max_failures=3),
            ),
        ).fit()[0]
        killer.join(timeout=5)
    finally:
        ray.shutdown()
        cluster.shutdown()
    assert killed, f"no worker node was killed (the trial's error: {result.error!r})"
    assert result.error is None, result.error
    assert result.metrics["step"] == steps - 1
    reported = list(result.metrics_dataframe["step"])
    # Resumed from a checkpoint: steps before it were not trained again.
    assert len(reported) < 2 * steps - 2, reported
    ctx.progress(f"ok: killed node {killed['node'][:8]}, finished {steps} steps")
    return {
        "steps": steps,
        "killed_node": killed["node"],
        "reports_after_restore": len(reported),
    }


if __name__ == "__main__":
    raise SystemExit(main(run))
