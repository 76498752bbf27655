"""Several nodes (ray.cluster_utils.Cluster): executor placement and a dying worker node."""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from pathlib import Path

import pytest
import ray
import ray.train
import ray.tune
import tune_api
from helpers import (
    RecordingTrainer,
    get_or_create_counter,
    record,
    recorded,
    resume_step,
)

from ray_tt_ext import Tuner

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def ray_head_and_2_worker_nodes():
    """Head and two worker nodes, 2 CPUs and one `worker_node` slot each.

    Any two nodes can host a trial (coordinator + rank 0 on one, rank 1 on
    another), so a trial survives the loss of one worker node. Shared by the
    module: the test that kills a worker node comes last.
    """
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
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
    ray.init(address=cluster.address)
    assert ray.get_runtime_context().get_node_id() == cluster.head_node.node_id
    workers = [cluster.add_node(num_cpus=2, resources={"worker_node": 1}) for _ in range(2)]
    cluster.wait_for_nodes()
    yield cluster, workers
    ray.shutdown()
    cluster.shutdown()


def slow_loop(config):
    ctx = ray.train.get_context()
    start = resume_step(ray.train.get_checkpoint())
    node_id = ray.get_runtime_context().get_node_id()
    record(f"rank{ctx.get_world_rank()}_node", node_id)
    for step in range(start, config["num_reports"]):
        time.sleep(config.get("sleep", 0.5))
        checkpoint = None
        with tempfile.TemporaryDirectory() as d:
            if ctx.get_world_rank() == 0:
                Path(d, "state.json").write_text(json.dumps({"step": step}))
                checkpoint = ray.train.Checkpoint.from_directory(d)
            ray.train.report({"step": step, "node": node_id}, checkpoint=checkpoint)


def _trainer(num_reports):
    return RecordingTrainer(
        slow_loop,
        train_loop_config={"num_reports": num_reports},
        scaling_config=ray.train.ScalingConfig(
            num_workers=2,
            # One training worker per worker node. Ray packs the coordinator with
            # rank 0 (one bundle), so the coordinator is on a worker node too.
            resources_per_worker={"CPU": 1, "worker_node": 1},
        ),
        remote_executor=True,
    )


@pytest.mark.extended
def test_executor_lives_on_the_coordinators_node(ray_head_and_2_worker_nodes, storage_path):
    cluster, _ = ray_head_and_2_worker_nodes
    get_or_create_counter(cluster.head_node.node_id)  # never on a node we kill
    result = Tuner(
        _trainer(num_reports=2),
        run_config=tune_api.RunConfig(storage_path=storage_path, name="placed", verbose=0),
    ).fit()[0]
    assert result.error is None
    info = recorded("executor")
    # The Tuner's host for that worker node (started there by its first host).
    assert info["shares_host"] is True
    assert info["node_id"] == info["coordinator_node"] == recorded("rank0_node")
    assert recorded("rank1_node") != info["node_id"]


@ray.remote(num_cpus=0)
class _Sleeper:
    def pid(self) -> int:
        return os.getpid()


def test_whether_a_process_of_another_node_runs_is_asked_there(
    ray_head_and_2_worker_nodes, monkeypatch
):
    """``v2.Tuner``'s sweep removes a dead Train controller's placement group only
    once the controller's process has exited, on whichever node it ran
    (``_compat._processes_running``: ``/proc`` on the caller's node, a task
    pinned to any other; this cluster's nodes share one machine, so the test
    shows the task's path answers, not that it read another machine)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from ray_tt_ext._compat import core
    from rtt_testing import wait_until

    cluster, workers = ray_head_and_2_worker_nodes
    here, there = cluster.head_node.node_id, workers[0].node_id
    # What is checked is the other node's answer; one that comes later than
    # the sweep's 5 s (a worker process to start there, on a busy machine) is
    # counted as running by design, to be asked again: here it is waited for.
    monkeypatch.setattr(core, "_REMOTE_CHECK_TIMEOUT_S", 120.0)
    sleepers = {
        node: _Sleeper.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)
        ).remote()
        for node in (here, there)
    }
    pids = {node: ray.get(s.pid.remote()) for node, s in sleepers.items()}
    now = time.time()
    processes = [(bytes.fromhex(node), pid, now) for node, pid in pids.items()]
    running = {(node, pid) for node, pid, _ in processes}
    assert core._processes_running(processes) == running
    # A process that started after the death it is asked about has the pid of
    # a process gone since (pids wrap): not the one asked about.
    reused = [(node, pid, now - 3600) for node, pid, _ in processes]
    assert core._processes_running(reused) == set()
    for sleeper in sleepers.values():
        ray.kill(sleeper)
    wait_until(lambda: not core._processes_running(processes), "the killed actors exit")


def test_killing_a_worker_node_mid_run_is_survived(
    ray_head_and_2_worker_nodes, storage_path
):
    cluster, workers = ray_head_and_2_worker_nodes
    get_or_create_counter(cluster.head_node.node_id)  # never on a node we kill
    experiment = Path(storage_path, "node_kill")
    killed = threading.Event()
    placed = {}  # where the first attempt's executor and workers ran

    def kill_a_training_node_after_second_checkpoint():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if list(experiment.glob("*/checkpoint_000001")):
                placed.update(
                    executor=recorded("executor"),
                    rank0_node=recorded("rank0_node"),
                    rank1_node=recorded("rank1_node"),
                )
                # A worker node that hosts a training worker (never the head).
                hosts = {placed["rank1_node"], placed["rank0_node"]}
                node = next(n for n in workers if n.node_id in hosts)
                cluster.remove_node(node, allow_graceful=False)
                killed.set()
                return
            time.sleep(0.2)

    killer = threading.Thread(
        target=kill_a_training_node_after_second_checkpoint, daemon=True
    )
    killer.start()
    result = Tuner(
        _trainer(num_reports=12),
        run_config=tune_api.RunConfig(
            storage_path=storage_path,
            name="node_kill",
            verbose=0,
            failure_config=tune_api.FailureConfig(max_failures=3),
        ),
    ).fit()[0]
    killer.join(timeout=5)
    assert killed.is_set(), "the worker node was never killed"
    assert result.error is None
    assert result.metrics["step"] == 11
    steps = list(result.metrics_dataframe["step"])
    assert steps[-1] == 11 and len(steps) < 24  # resumed from a checkpoint, not from 0
    assert os.path.basename(result.checkpoint.path) > "checkpoint_000001"
    # The executor ran in the Tuner's host on its coordinator's node, that of
    # rank 0 (started there by its first host), not on rank 1's.
    info = placed["executor"]
    assert info["shares_host"] is True
    assert info["node_id"] == info["coordinator_node"] == placed["rank0_node"]
    assert placed["rank1_node"] != info["node_id"]
