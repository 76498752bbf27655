"""The sweep's checkpoint retention under ``ray_tt_ext.v2.Tuner``: Train V2 runs whose
snapshots list checkpoints the sweep deleted still resume."""

from __future__ import annotations

import os

import pytest
import ray
import ray.train
import ray.tune
from v2_tune_loops import steps_loop

import ray_tt_ext
import ray_tt_ext.v2 as v2


def _folders(root: str) -> list[str]:
    found = []
    for folder, names, _ in os.walk(root):
        found += [os.path.join(folder, n) for n in names if n.startswith("checkpoint_")]
    return sorted(found)


@pytest.mark.extended
def test_a_retried_run_resumes_although_the_sweep_deleted_checkpoints_its_snapshot_lists(
    ray_start_4_cpus, storage_path, tmp_path
):
    """4 trials, 2 at a time, ``sweep_num_to_keep=1``. The first trial to reach step
    3 fails once: by then the sweep has deleted its steps 0 and 1, which its
    run's snapshot still lists; Tune's retry resumes the run from step 2 (Ray's
    check alone would refuse the run). At the end only the sweep's best is on
    disk, and the ResultGrid names nothing else."""
    trainer = v2.DataParallelTrainer(
        steps_loop,
        train_loop_config={"steps": 5, "fail_at": 3, "marker": str(tmp_path / "failed")},
        scaling_config=ray.train.ScalingConfig(num_workers=1),
    )
    tuner = v2.Tuner(
        trainer,
        param_space={
            "train_loop_config": {"lr": ray.tune.grid_search([1.0, 2.0, 3.0, 4.0])}
        },
        tune_config=ray.tune.TuneConfig(metric="loss", mode="min", max_concurrent_trials=2),
        run_config=ray.tune.RunConfig(
            name="sweep_v2",
            storage_path=storage_path,
            failure_config=ray.tune.FailureConfig(max_failures=1),
            checkpoint_config=ray_tt_ext.CheckpointConfig(sweep_num_to_keep=1),
        ),
    )
    grid = tuner.fit()
    assert os.path.exists(tmp_path / "failed")
    retried = []
    for result in grid:
        assert result.error is None, result.error
        assert result.metrics["step"] == 4
        if result.metrics["start"] == 3:
            retried.append(result)
        for checkpoint, _ in result.best_checkpoints:
            assert os.path.isdir(checkpoint.path), checkpoint.path
        if result.checkpoint is not None:
            assert os.path.isdir(result.checkpoint.path)
    assert len(retried) == 1, [r.metrics["start"] for r in grid]
    best = grid.get_best_result()
    assert best.config["train_loop_config"]["lr"] == 1.0
    assert best.metrics["step"] == 4 and best.checkpoint is not None
    assert _folders(os.path.join(storage_path, "sweep_v2")) == [best.checkpoint.path]


def test_a_pbt_exploited_run_resumes_from_its_donor_although_its_own_latest_is_gone(
    ray_start_4_cpus, storage_path
):
    """Synch PBT gives the worse trial (lr=100) the better one's checkpoint; the
    sweep then deletes the worse trial's own latest, which its run's snapshot
    still names as the run's latest. The run resumes from the donor's checkpoint,
    at the donor's step, and the sweep ends with its best checkpoint alone."""
    trainer = v2.DataParallelTrainer(
        steps_loop,
        train_loop_config={"steps": 6, "sleep_s": 0.2},
        scaling_config=ray.train.ScalingConfig(num_workers=1),
    )
    pbt = ray.tune.schedulers.PopulationBasedTraining(
        time_attr="training_iteration",
        perturbation_interval=2,
        hyperparam_mutations={"train_loop_config": {"lr": [1.0, 2.0]}},
        quantile_fraction=0.5,
        resample_probability=0.0,
        synch=True,
    )
    grid = v2.Tuner(
        trainer,
        param_space={"train_loop_config": {"lr": ray.tune.grid_search([1.0, 100.0])}},
        tune_config=ray.tune.TuneConfig(metric="loss", mode="min", scheduler=pbt),
        run_config=ray.tune.RunConfig(
            name="pbt_sweep",
            storage_path=storage_path,
            checkpoint_config=ray_tt_ext.CheckpointConfig(sweep_num_to_keep=1),
        ),
    ).fit()
    assert not grid.errors, grid.errors
    rows = [row for r in grid for _, row in r.metrics_dataframe.iterrows()]
    moved = [row for row in rows if row["restored_lr"] == 1.0 and row["start"] > 0]
    assert moved, rows
    assert all(row["step"] >= row["start"] for row in moved)
    (best,) = _folders(os.path.join(storage_path, "pbt_sweep"))
    assert best == grid.get_best_result().checkpoint.path
