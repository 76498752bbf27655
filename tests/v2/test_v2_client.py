"""``ray_tt_ext.v2.Tuner(trainer)`` under Ray Client (``ray://``) against a
``ray start --head`` cluster on loopback, token auth on, Train V2 at Ray's
default. Runs last in the session (the ``client`` marker: tests/conftest.py).
"""

from __future__ import annotations

import os

import pytest
import ray
import ray.train
import ray.tune
from v2_tune_loops import steps_loop

import ray_tt_ext.v2 as v2

pytestmark = [pytest.mark.client, pytest.mark.timeout(300)]


def test_v2_tuner_trials_run_their_controller_in_the_trial_actor_under_ray_client(
    ray_client, storage_path
):
    """Two trials of a 2-worker trainer, one report each per step, a checkpoint
    each from rank 0: every report and checkpoint reaches Tune through the
    controller in the trial actor (the workers' calls and the barrier reach it
    while Tune's ``train()`` waits there), and the loops'
    ``ray.train.get_all_reported_checkpoints()`` is answered."""
    assert ray.util.client.ray.is_connected()
    trainer = v2.DataParallelTrainer(
        steps_loop,
        train_loop_config={"steps": 3, "list_reported": True},
        scaling_config=ray.train.ScalingConfig(num_workers=2),
        run_config=ray.train.RunConfig(
            checkpoint_config=v2.CheckpointConfig(checkpoint_dir_name="step_{index:03d}")
        ),
    )
    results = v2.Tuner(
        trainer,
        param_space={"train_loop_config": {"lr": ray.tune.grid_search([1.0, 2.0])}},
        run_config=ray.tune.RunConfig(name="v2_client", storage_path=storage_path),
    ).fit()
    assert not results.errors
    for result in results:
        assert result.metrics["training_iteration"] == 3
        assert result.metrics["world_size"] == 2
        assert result.metrics["reported_before"] == ["step_000", "step_001"]
        assert os.path.basename(result.checkpoint.path) == "step_002"
        assert os.path.dirname(result.checkpoint.path) == result.path
