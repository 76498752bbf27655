"""Ray Client (`ray://`) against a `ray start --head` cluster on loopback, token auth on."""

from __future__ import annotations

import os
import uuid

import pytest
import ray
import ray.train
import ray.tune
import tune_api
from helpers import (
    CountingTrainer,
    RecordingTrainer,
    checkpoint_folders,
    conversions,
    get_or_create_counter,
    recorded,
    report_loop,
)

import ray_tt_ext
from ray_tt_ext import Tuner
from rtt_testing import train_v2_is_rays_default

pytestmark = [pytest.mark.client, pytest.mark.timeout(300)]


def test_client_connects_with_token_auth(ray_client):
    assert ray.util.client.ray.is_connected()
    assert os.environ["RAY_AUTH_MODE"] == "token"
    assert ray.get(ray.remote(lambda: os.environ.get("RAY_AUTH_MODE")).remote()) == "token"


def test_tuner_converts_once_under_ray_client(ray_client, storage_path, tmp_path):
    get_or_create_counter()
    key = uuid.uuid4().hex
    marker = str(tmp_path / "failed_once")

    def trainer(spy_key):
        return CountingTrainer(
            report_loop,
            train_loop_config={"num_reports": 3, "fail_at_step": 1, "fail_marker": marker},
            scaling_config=ray.train.ScalingConfig(num_workers=1),
            metadata={"spy_key": spy_key},
        )

    tuner = Tuner(
        trainer(key),
        run_config=tune_api.RunConfig(storage_path=storage_path, name="client"),
    )
    assert conversions(key) == 1
    results = tuner.fit()
    tuner.get_results()
    assert conversions(key) == 1
    assert results.errors  # failed once at step 1, by design, to restore below

    restore_key = key + "-restore"
    restored = Tuner.restore(
        os.path.join(storage_path, "client"),
        trainable=trainer(restore_key),
        resume_errored=True,
    )
    assert type(restored) is Tuner
    results = restored.fit()
    assert not results.errors
    assert results[0].metrics["step"] == 2
    assert conversions(restore_key) == 1
    # Another trainable's name is refused, as by Ray's Tuner (the error reaches
    # the client as itself).
    with pytest.raises(ValueError, match="Invalid `trainable` input to `Tuner.restore"):
        Tuner.restore(os.path.join(storage_path, "client"), trainable="other_name")


def test_remote_executor_under_ray_client(ray_client, storage_path):
    def loop(config):
        ray.train.report(
            {"v1": os.environ.get("RAY_TRAIN_V2_ENABLED"), "pid": os.getpid()},
        )
        report_loop(config)

    counter = get_or_create_counter()
    ray.get(counter.put.remote("executors", []))
    result = Tuner(
        RecordingTrainer(
            loop,
            train_loop_config={"num_reports": 3},
            scaling_config=ray.train.ScalingConfig(num_workers=2),
            remote_executor=True,
        ),
        run_config=tune_api.RunConfig(storage_path=storage_path, name="client_exec"),
    ).fit()[0]
    assert result.error is None
    assert result.metrics["step"] == 2
    # The executor ran on the Tuner's shared host (the Tuner runs on the
    # cluster, in ray_tt_ext's Ray Client Tuner actor, and started it there).
    (executor,) = recorded("executors")
    assert executor["shares_host"] is True
    assert executor["node_id"] == executor["coordinator_node"]
    # Results and checkpoints reach the client.
    assert os.path.basename(result.checkpoint.path) == "checkpoint_000002"
    with result.checkpoint.as_directory() as d:
        assert os.path.exists(os.path.join(d, "state.json"))
    assert result.metrics_dataframe["v1"].iloc[0] == "0"


def test_construction_errors_reach_the_client_as_themselves(ray_client, storage_path):
    import numpy as np

    weights = np.ones(2_000_000)  # 16 MB, captured by a closure

    def train_fn(config):
        tune_api.report({"s": float(weights.sum())})

    # The guard runs on the client, before anything is sent.
    with pytest.raises(ray_tt_ext.PayloadTooLargeError, match="weights") as info:
        Tuner(
            train_fn,
            payload_limit=1_000_000,
            run_config=tune_api.RunConfig(storage_path=storage_path, name="big"),
        )
    assert info.value.report.contributors[0].path.endswith("<closure>.weights")

    # A trainer is converted in the Tuner actor; its error comes back as itself.
    from test_regression_grpc import RegressedTrainer, noop_loop

    trainer = RegressedTrainer(
        noop_loop, scaling_config=ray.train.ScalingConfig(num_workers=1)
    )
    trainer.embedding_table = np.ones(2_000_000)
    with pytest.raises(ray_tt_ext.PayloadTooLargeError, match="embedding_table"):
        Tuner(
            trainer,
            payload_limit=1_000_000,
            run_config=tune_api.RunConfig(storage_path=storage_path, name="regressed"),
        )


def test_trainer_fit_applies_the_checkpoint_policy_under_ray_client(
    ray_client, storage_path
):
    result = ray_tt_ext.DataParallelTrainer(
        report_loop,
        train_loop_config={"num_reports": 3},
        scaling_config=ray.train.ScalingConfig(num_workers=1),
        run_config=tune_api.RunConfig(
            storage_path=storage_path,
            name="client_fit",
            checkpoint_config=ray_tt_ext.CheckpointConfig(
                checkpoint_dir_name="step-{step:03d}"
            ),
        ),
    ).fit()
    assert result.error is None
    assert os.path.basename(result.checkpoint.path) == "step-002"
    names = sorted(n for n in os.listdir(result.path) if n.startswith("step-"))
    assert names == ["step-000", "step-001", "step-002"]


def test_v1_reaches_a_separately_started_cluster_from_a_plain_driver(
    ray_head_node, tmp_path
):
    """A normal driver (not Ray Client) on a `ray start` cluster left at Ray's defaults."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        f"""
        import os
        import ray_tt_ext, ray, ray.train, ray.air.config
        from tune_api import RunConfig

        def loop(config):
            ray.train.report({{
                "env": os.environ.get("RAY_TRAIN_V2_ENABLED"),
                "v1": ray.train.RunConfig is ray.air.config.RunConfig,
            }})

        ray.init(address={ray_head_node.gcs_address!r})
        result = ray_tt_ext.Tuner(
            ray_tt_ext.DataParallelTrainer(
                loop, scaling_config=ray.train.ScalingConfig(num_workers=2)),
            run_config=RunConfig(storage_path={str(tmp_path)!r}, name="plain", verbose=0),
        ).fit()[0]
        print("RESULT", result.error, result.metrics["env"], result.metrics["v1"])
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_TRAIN_V2_ENABLED"}
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "RESULT None" in proc.stdout and proc.stdout.strip().endswith("True")  # V1 ran
    if train_v2_is_rays_default():  # then the variable is what keeps V2 away
        assert "RESULT None 0 True" in proc.stdout


def test_sweep_retention_under_ray_client(ray_client, storage_path):
    """A sweep of a Train V1 trainer under Ray Client with
    ``CheckpointConfig(sweep_num_to_keep=1)``: its retention runs in the Tuner's
    actor on the cluster; one checkpoint is left, and the ResultGrid the client
    gets names only it."""
    trainer = ray_tt_ext.DataParallelTrainer(
        report_loop,
        train_loop_config={"num_reports": 3},
        scaling_config=ray.train.ScalingConfig(num_workers=1),
    )
    tuner = Tuner(
        trainer,
        param_space={"train_loop_config": {"lr": ray.tune.grid_search([1, 2, 3])}},
        tune_config=ray.tune.TuneConfig(metric="loss", mode="min"),
        run_config=tune_api.RunConfig(
            storage_path=storage_path,
            name="client_sweep",
            checkpoint_config=ray_tt_ext.CheckpointConfig(sweep_num_to_keep=1),
        ),
    )
    results = tuner.fit()
    assert not results.errors
    named = [r.checkpoint.path for r in results if r.checkpoint is not None]
    named += [c.path for r in results for c, _ in r.best_checkpoints]
    on_disk = checkpoint_folders(os.path.join(storage_path, "client_sweep"))
    assert len(on_disk) == 1 and set(named) == set(on_disk), (named, on_disk)
