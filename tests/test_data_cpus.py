"""``ray_tt_ext.Tuner`` (Train V1) over a trainer with ``datasets``: trials start only
while each one's Ray Data pipeline keeps ``data_cpus_per_trial`` CPUs free, so
the sweep never waits for ever for the CPUs its own trials took
(``_compat.tune_loop``; the Train V2 side: tests/v2/test_data_cpus.py).
"""

from __future__ import annotations

import logging

import pytest
import ray
import ray.data
import ray.train
import ray.tune
import tune_api

import ray_tt_ext
from rtt_testing import ran_when, rows_loop, trials_at_once


def _trainer(
    log_dir, workers: int, datasets: bool = True, together: int = 0
) -> ray_tt_ext.DataParallelTrainer:
    return ray_tt_ext.DataParallelTrainer(
        rows_loop,
        train_loop_config={"log_dir": str(log_dir), "together": together},
        datasets={"train": ray.data.range(200)} if datasets else None,
        scaling_config=ray.train.ScalingConfig(
            num_workers=workers, trainer_resources={"CPU": 0}
        ),
    )


@pytest.mark.extended
@pytest.mark.usefixtures("ray_start_4_cpus")
@pytest.mark.parametrize("workers, trials, at_once", [(1, 3, 2)], ids=["1_worker"])
def test_trials_over_datasets_run_as_many_as_leave_their_pipelines_cpus_and_finish(
    storage_path, tmp_path, caplog, workers, trials, at_once
):
    """4 CPUs, ``max_concurrent_trials`` as many as the trials, 1 CPU kept for each
    pipeline: 1-worker trials 2 at once (3 would leave one CPU for three
    pipelines), not fewer; every row read; one log line. (2-worker trials, one
    at a time, and a growing cluster: tests/v2/test_data_cpus.py; the same
    manager runs Tune's loop under both Tuners.)"""
    caplog.set_level(logging.WARNING, logger="ray_tt_ext")
    results = ray_tt_ext.Tuner(
        # The trials that may run at once wait for each other before reading.
        _trainer(tmp_path, workers=workers, together=at_once),
        param_space={
            "train_loop_config": {"lr": ray.tune.grid_search(list(range(trials)))}
        },
        tune_config=ray.tune.TuneConfig(max_concurrent_trials=trials),
        run_config=tune_api.RunConfig(name="data", storage_path=storage_path, verbose=0),
    ).fit()
    assert not results.errors
    assert [r.metrics["rows"] for r in results] == [200 // workers] * trials
    assert trials_at_once(ran_when(tmp_path)) == at_once
    said = [r.getMessage() for r in caplog.records if "Ray Data pipeline" in r.getMessage()]
    assert len(said) == 1 and f"{at_once} trial(s) run at once" in said[0], said


@pytest.mark.quick
@pytest.mark.usefixtures("ray_start_4_cpus")
def test_only_a_trainer_with_datasets_keeps_cpus_for_its_pipelines(tmp_path):
    """What a fit keeps: for a trainer with datasets, ``data_cpus_per_trial`` (1 by
    default) besides its placement group's CPUs; nothing for a trainer without,
    nor with 0. Bad values are refused before anything is written."""
    from ray_tt_ext._tuner import DEFAULT_DATA_CPUS_PER_TRIAL

    def kept(trainer, **kwargs):
        internal = ray_tt_ext.Tuner(trainer, **kwargs)._local_tuner
        return internal._data_cpus(internal.converted_trainable)

    data = kept(_trainer(tmp_path, workers=2))
    assert (data.trial_cpus, data.data_cpus) == (2.0, DEFAULT_DATA_CPUS_PER_TRIAL)
    assert (data.what, data.tuner) == ("DataParallelTrainer", "ray_tt_ext.Tuner")
    assert kept(_trainer(tmp_path, workers=2), data_cpus_per_trial=2.5).data_cpus == 2.5
    assert kept(_trainer(tmp_path, workers=2), data_cpus_per_trial=0) is None
    assert kept(_trainer(tmp_path, workers=2, datasets=False)) is None
    for bad in (-1, "1", True, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="data_cpus_per_trial must be a finite number"):
            ray_tt_ext.Tuner(_trainer(tmp_path, workers=1), data_cpus_per_trial=bad)


@pytest.mark.quick
@pytest.mark.usefixtures("ray_start_4_cpus")
def test_a_cluster_that_grows_by_itself_keeps_tunes_placement(
    tmp_path, monkeypatch, caplog
):
    """On a head node that Ray's cluster launcher started (its bootstrap config in
    the home folder, which Ray Tune's own check reads), the autoscaler grows the
    cluster for the trials' placement groups and their pipelines' tasks: no CPU
    is kept back (that would hide the demand), said once; elsewhere it is kept."""
    from ray_tt_ext._compat.tune_loop import DataCpus, _is_ray_cluster, leaves_data_cpus

    data = DataCpus("DataParallelTrainer", 2.0, 1.0, "ray_tt_ext.Tuner")
    caplog.set_level(logging.WARNING, logger="ray_tt_ext")
    assert leaves_data_cpus(data)
    assert not caplog.records
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "ray_bootstrap_config.yaml").write_text("cluster_name: test\n")
    _is_ray_cluster.cache_clear()  # Ray Tune reads it once per process
    try:
        assert not leaves_data_cpus(data)
    finally:
        monkeypatch.undo()
        _is_ray_cluster.cache_clear()
    assert not _is_ray_cluster()
    (said,) = [r.getMessage() for r in caplog.records]
    assert "grows by itself (an autoscaling cluster)" in said
    assert "data_cpus_per_trial=1 is not applied" in said
