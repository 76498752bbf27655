"""A sweep over a trainer with ``datasets`` never waits for ever for the CPUs its
own trials took: ``v2.Tuner`` starts a trial only while every trial's Ray Data
pipeline keeps ``data_cpus_per_trial`` CPUs free (``_compat.tune_loop``).

Without it, two 2-worker trials on 4 CPUs take every CPU and their pipelines
wait at 0 rows for ever (ray-project/ray#29662). Real Train V2 under real Tune.
"""

from __future__ import annotations

import logging
import os
import threading
import time

import pytest
import ray
import ray.data
import ray.train
import ray.tune

import ray_tt_ext.v2 as v2
from rtt_testing import ran_when, rows_loop, trials_at_once


def _sweep(storage_path, log_dir, lrs, workers, **tuner_kwargs):
    trainer = v2.DataParallelTrainer(
        rows_loop,
        train_loop_config={"log_dir": str(log_dir)},
        datasets={"train": ray.data.range(200)},
        scaling_config=ray.train.ScalingConfig(num_workers=workers),
    )
    return v2.Tuner(
        trainer,
        param_space={"train_loop_config": {"lr": ray.tune.grid_search(lrs)}},
        tune_config=ray.tune.TuneConfig(max_concurrent_trials=len(lrs)),
        run_config=ray.tune.RunConfig(name="data", storage_path=storage_path),
        **tuner_kwargs,
    ).fit()


def _said_once(caplog, *parts: str) -> None:
    """One log line about the trials' Ray Data pipelines, with ``parts`` and how
    to change it."""
    said = [r.getMessage() for r in caplog.records if "Ray Data pipeline" in r.getMessage()]
    assert len(said) == 1, said
    assert all(part in said[0] for part in parts), said
    assert "data_cpus_per_trial" in said[0]


@pytest.mark.usefixtures("ray_start_4_cpus")
@pytest.mark.extended
@pytest.mark.parametrize("workers, trials, at_once", [(2, 2, 1)], ids=["2_workers"])
def test_trials_over_datasets_run_as_many_as_leave_their_pipelines_cpus_and_finish(
    storage_path, tmp_path, caplog, workers, trials, at_once
):
    """The issue's sweep on 4 CPUs, ``max_concurrent_trials`` as many as the trials,
    1 CPU kept for each trial's pipeline: 2-worker trials one at a time (two
    would leave their pipelines none); every row read; one log line saying so
    and how to change it. (1-worker trials, two at a time: tests/test_data_cpus.py.)"""
    caplog.set_level(logging.WARNING, logger="ray_tt_ext")
    lrs = [0.1 * (i + 1) for i in range(trials)]
    results = _sweep(storage_path, tmp_path, lrs, workers=workers)
    assert not results.errors
    assert sorted(r.metrics["rows"] for r in results) == [200 // workers] * trials
    assert trials_at_once(ran_when(tmp_path)) == at_once
    _said_once(caplog, f"{at_once} trial(s) run at once", "4 CPUs")


@pytest.mark.usefixtures("ray_start_4_cpus")
def test_what_no_trial_could_run_with_its_pipeline_is_an_error_before_anything_runs(
    storage_path, tmp_path
):
    """4 workers of 1 CPU and 1 CPU for the pipeline cannot run on 4 CPUs: an error
    before any trial starts names the arithmetic and the fix; with
    ``data_cpus_per_trial=0`` the check is off (Ray Tune's behaviour)."""
    with pytest.raises(ValueError) as info:
        _sweep(storage_path, tmp_path, [0.1], workers=4)
    message = str(info.value)
    assert "takes 4 CPU" in message and "keeps 1 CPU" in message and "5 in all" in message
    assert "the cluster has 4 CPUs" in message and "Nothing was started" in message
    assert "Fix: " in message and "v2.Tuner(..., data_cpus_per_trial=" in message
    assert not list((tmp_path).glob("*.json"))  # no trial ran
    with pytest.raises(ValueError, match="data_cpus_per_trial must be a finite number"):
        _sweep(storage_path, tmp_path, [0.1], workers=1, data_cpus_per_trial=-1)


@pytest.mark.cluster
@pytest.mark.timeout(300)
def test_a_growing_cluster_runs_more_trials_at_once_once_the_cpus_are_there(
    shutdown_only, storage_path, tmp_path, caplog
):
    """A head of 3 CPUs: one 2-worker trial at a time (2 + 1 for its pipeline).
    Once the first trial runs, a node of 3 CPUs joins (as an autoscaler would
    add it): the next trial starts beside it."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 3, "include_dashboard": False}
    )
    caplog.set_level(logging.WARNING, logger="ray_tt_ext")
    try:
        ray.init(address=cluster.address)
        signal = tmp_path / "grown"
        log_dir = tmp_path / "log"
        log_dir.mkdir()

        trainer = v2.DataParallelTrainer(
            rows_loop,
            # Each trial reads its rows once the node joined and two trials run
            # (two can, on 6 CPUs), so that the two run at once whatever their start.
            train_loop_config={
                "log_dir": str(log_dir),
                "wait_for": str(signal),
                "together": 2,
            },
            datasets={"train": ray.data.range(200)},
            scaling_config=ray.train.ScalingConfig(num_workers=2),
        )
        tuner = v2.Tuner(
            trainer,
            param_space={
                "train_loop_config": {"lr": ray.tune.grid_search([0.1, 0.2, 0.3])}
            },
            tune_config=ray.tune.TuneConfig(max_concurrent_trials=3),
            run_config=ray.tune.RunConfig(name="grows", storage_path=storage_path),
        )
        fitted: list = []
        fit = threading.Thread(target=lambda: fitted.append(tuner.fit()), daemon=True)
        fit.start()
        # The first trial waits for the signal before it reads its rows; the node
        # joins (from this thread: Ray's Cluster starts its processes here) once
        # it runs.
        deadline = time.monotonic() + 120
        while not list(log_dir.glob("started-*")) and time.monotonic() < deadline:
            threading.Event().wait(0.2)  # polling for the trial, not pacing it
        assert list(log_dir.glob("started-*")), "no trial started within 120 s"
        cluster.add_node(num_cpus=3)
        cluster.wait_for_nodes()
        signal.touch()
        fit.join(timeout=240)
        assert fitted, "the sweep did not end within 240 s of the node joining"
        (results,) = fitted
        assert not results.errors
        assert sorted(r.metrics["rows"] for r in results) == [100, 100, 100]
        intervals = ran_when(log_dir)
        # Before the node joined only the first trial ran; after, two at once.
        grown_at = os.path.getmtime(signal)
        assert sum(1 for start, _ in intervals if start < grown_at) == 1, intervals
        assert trials_at_once(intervals) == 2, intervals
        # Said on the head's 3 CPUs, before the node joined.
        _said_once(caplog, "1 trial(s) run at once", "3 CPUs")
    finally:
        ray.shutdown()
        cluster.shutdown()
