"""ray_tt_ext.v2.Tuner(trainer): one Train V2 run per trial, seen by Tune.

Real Train V2 (controller, worker group) under real Tune, on the
session's 4-CPU local Ray, with ``RAY_TRAIN_V2_ENABLED`` unset as users have it.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
from pathlib import Path

import pytest
import ray
import ray.train
import ray.tune
from v2_tune_loops import steps_loop

import ray_tt_ext.v2 as v2
from ray_tt_ext import _compat
from rtt_testing import (
    actors_started,
    assert_every_cpu_free,
    placement_group_ids,
    removed_before_created,
)

pytestmark = pytest.mark.usefixtures("ray_start_4_cpus")

#: Ray 2.60's preemption notice that the survivors' collectives are relaxed for
#: (``FailureConfig(relax_collectives_on_preemption=True)``).
RAY_2_60 = _compat.RAY_VERSION.release >= (2, 60)


def barrier_kept_in_the_controller() -> bool:
    """Whether this Ray's worker-group barrier can live in the controller (2.60)."""
    from ray_tt_ext._compat import train_v2_bridge

    return train_v2_bridge.SynchronizationBarrier is not None


def folders(path: str) -> list[str]:
    return sorted(n for n in os.listdir(path) if os.path.isdir(os.path.join(path, n)))


def read_step(checkpoint) -> int:
    with checkpoint.as_directory() as d:
        with open(os.path.join(d, "state.json")) as f:
            return json.load(f)["step"]


def trainer_for(storage_path, config, *, workers=2, checkpoint_config=None, **kwargs):
    return v2.DataParallelTrainer(
        steps_loop,
        train_loop_config=config,
        scaling_config=ray.train.ScalingConfig(num_workers=workers),
        run_config=ray.train.RunConfig(
            storage_path=storage_path,
            checkpoint_config=checkpoint_config or v2.CheckpointConfig(),
            **kwargs,
        ),
    )


@pytest.mark.compat_tier
def test_every_train_checkpoint_is_a_tune_checkpoint_of_its_trial(storage_path):
    trainer = trainer_for(
        storage_path,
        {"steps": 4, "list_reported": True},
        checkpoint_config=v2.CheckpointConfig(
            checkpoint_dir_name="step_{index:03d}", num_to_keep=2
        ),
    )
    results = v2.Tuner(
        trainer,
        param_space={"train_loop_config": {"lr": ray.tune.grid_search([1.0, 2.0])}},
        run_config=ray.tune.RunConfig(name="bridge", storage_path=storage_path),
    ).fit()
    assert not results.errors
    assert len(results) == 2
    for result in results:
        # The Train checkpoints, in the trial folder, named by v2.CheckpointConfig.
        assert os.path.dirname(result.checkpoint.path) == result.path
        assert os.path.basename(result.checkpoint.path) == "step_003"
        assert read_step(result.checkpoint) == 3
        kept = sorted(os.path.basename(c.path) for c, _ in result.best_checkpoints)
        assert kept == ["step_002", "step_003"]
        # Retention agrees: the folders on disk are the ones Tune lists, and the
        # ones the Train run lists (its own record in the trial folder).
        assert [n for n in folders(result.path) if n.startswith("step_")] == kept
        with open(os.path.join(result.path, "checkpoint_manager_snapshot.json")) as f:
            train_record = json.load(f)
        assert (
            sorted(r["checkpoint_dir_name"] for r in train_record["checkpoint_results"])
            == kept
        )
        # The loop's ray.train.get_all_reported_checkpoints() (a call of the run's
        # controller, which runs in the trial actor): before step 3, the two kept.
        assert result.metrics["reported_before"] == ["step_001", "step_002"]
        # Rank 0's metrics plus Tune's own fields.
        assert result.metrics["rank"] == 0 and result.metrics["world_size"] == 2
        assert result.metrics["training_iteration"] == 4
        # Handed to Tune as Tune's Checkpoint: a Train one makes Tune log a
        # deprecation telling the user to change imports of theirs (the
        # README's examples run with it on: tests/test_readme.py).
        assert type(result.checkpoint) is ray.tune.Checkpoint
    best = results.get_best_result("loss", "min")
    assert best.config["train_loop_config"]["lr"] == 1.0
    assert read_step(best.checkpoint) == 3
    assert os.environ.get("RAY_TRAIN_V2_ENABLED") is None


@pytest.mark.quick
def test_a_param_space_key_that_is_not_a_trainer_argument_is_an_error(storage_path):
    trainer = trainer_for(storage_path, {"steps": 1})
    with pytest.raises(ValueError, match="param_space key 'lr' is not an argument of") as e:
        v2.Tuner(trainer, param_space={"lr": ray.tune.grid_search([0.1, 0.2])})
    # It lists the trainer's arguments and says where a hyperparameter goes.
    assert "Its arguments: ['train_loop_per_worker', 'train_loop_config'" in str(e.value)
    assert "param_space={'train_loop_config': {'lr': tune.grid_search" in str(e.value)
    with pytest.raises(ValueError, match=r"param_space\['scaling_config'\] must be a dict"):
        v2.Tuner(trainer, param_space={"scaling_config": ray.train.ScalingConfig()})
    assert not os.listdir(storage_path)  # nothing was written


@pytest.mark.parametrize(
    "reuse_actors",
    [
        pytest.param(False, marks=pytest.mark.compat_tier),
        pytest.param(True, marks=pytest.mark.extended),
    ],
    ids=["new_actors", "reuse_actors"],
)
def test_trials_reserve_their_worker_group_and_give_it_back(
    storage_path, tmp_path, reuse_actors
):
    """4 CPUs, 2-CPU worker groups, 4 trials, ASHA: 2 train at a time, all finish;
    the same with Tune reusing trial actors (a trial ASHA stopped keeps no workers)."""
    log_dir = tmp_path / "steps"
    log_dir.mkdir()
    trainer = v2.DataParallelTrainer(
        steps_loop,
        train_loop_config={
            "steps": 4,
            "sleep_s": 0.5,
            "log_dir": str(log_dir),
            "rendezvous_s": 120,
        },
        scaling_config=ray.train.ScalingConfig(
            num_workers=1, resources_per_worker={"CPU": 2}
        ),
        run_config=ray.train.RunConfig(checkpoint_config=v2.CheckpointConfig()),
    )
    scheduler = ray.tune.schedulers.ASHAScheduler(
        time_attr="training_iteration", max_t=4, grace_period=1, reduction_factor=2
    )
    results = v2.Tuner(
        trainer,
        param_space={"train_loop_config": {"lr": ray.tune.grid_search([1, 2, 3, 4])}},
        tune_config=ray.tune.TuneConfig(
            metric="loss", mode="min", scheduler=scheduler, reuse_actors=reuse_actors
        ),
        run_config=ray.tune.RunConfig(name="resources", storage_path=storage_path),
    ).fit()
    assert len(results) == 4 and not results.errors
    iterations = sorted(r.metrics["training_iteration"] for r in results)
    assert iterations[0] < 4 and iterations[-1] == 4  # ASHA stopped some early
    # The first two trainings met (each waited for a second to begin): 2 at once.
    assert not list(log_dir.glob("alone-*"))
    # Each trial's training, from its start to its last step, by worker process:
    # never more than 2 at once.
    spans = []
    for log in log_dir.glob("*.log"):
        times = [float(line.split()[-1]) for line in log.read_text().splitlines()]
        spans.append((min(times), max(times)))
    at_once = max(sum(1 for s, e in spans if s <= t <= e) for t, _ in spans)
    assert at_once == 2, spans
    # Nothing kept: no placement group of the Tuner, every CPU free.
    from ray.util import placement_group_table

    assert not [pg for pg in placement_group_table().values() if pg["state"] != "REMOVED"]
    assert_every_cpu_free()


def test_the_training_loops_error_reaches_result_error(storage_path, tmp_path, monkeypatch):
    """With Tune's result buffering on too: Tune then calls the trial actor's
    ``train_buffered`` (Ray's loop over ``train``, which is a coroutine on this
    async actor), and gets the step's result, then the loop's error."""
    monkeypatch.setenv("TUNE_RESULT_BUFFER_LENGTH", "3")
    trainer = trainer_for(
        storage_path, {"steps": 3, "fail_at": 1, "marker": str(tmp_path / "m")}, workers=1
    )
    (result,) = v2.Tuner(
        trainer, run_config=ray.tune.RunConfig(name="raises", storage_path=storage_path)
    ).fit()
    assert isinstance(result.error, ValueError)
    assert "lr=None diverged at step 1" in str(result.error)
    assert read_step(result.checkpoint) == 0  # the checkpoint before the error
    assert result.metrics["step"] == 0 and result.metrics["training_iteration"] == 1


@pytest.mark.extended
@pytest.mark.parametrize("reuse_actors", [False, True], ids=["new_actors", "reuse_actors"])
def test_restore_resumes_unfinished_trials_from_their_latest_checkpoints(
    storage_path, tmp_path, reuse_actors
):
    config = {"steps": 4, "fail_at": 2, "marker": str(tmp_path / "m")}
    trainer = trainer_for(storage_path, config, workers=1)
    run_config = ray.tune.RunConfig(name="restored", storage_path=storage_path)
    tune_config = ray.tune.TuneConfig(reuse_actors=reuse_actors)
    (first,) = v2.Tuner(trainer, tune_config=tune_config, run_config=run_config).fit()
    assert isinstance(first.error, ValueError)
    tuner = v2.Tuner.restore(
        os.path.join(storage_path, "restored"), trainer, resume_errored=True
    )
    assert isinstance(tuner, v2.Tuner)
    (result,) = tuner.fit()
    assert result.error is None
    assert result.metrics["start"] == 2 and result.metrics["step"] == 3
    assert os.path.dirname(result.checkpoint.path) == first.path  # the same run


def test_a_tuner_registered_under_a_second_name_is_restored_under_it(
    storage_path, tmp_path
):
    """A fit whose trainer's name another running fit of the Ray job holds (two
    Tuners in two threads: tests/v2/test_reuse_workers.py; here another process
    of the job, as a Ray Client Tuner actor would) registers as ``<name>_2``;
    ``v2.Tuner.restore`` resumes its trials under that name, and refuses, with
    a clear error and nothing run, while another fit holds it."""
    from ray_tt_ext._fit_names import RegistryNameInUseError, fit_name

    def files(path):
        return sorted(os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs)

    # It fails at step 2: its latest checkpoint (step 1) is not its first.
    trainer = trainer_for(
        storage_path, {"steps": 4, "fail_at": 2, "marker": str(tmp_path / "m")}, workers=1
    )
    holder = v2.Tuner(trainer, run_config=ray.tune.RunConfig(storage_path=str(tmp_path)))
    trainable = holder._local_tuner.converted_trainable

    @ray.remote(num_cpus=0)
    class NameHolder:
        def hold(self, trainable):
            self.held = fit_name(trainable)
            return self.held.__enter__()

        def release(self):
            self.held.__exit__(None, None, None)

    other_process = NameHolder.remote()
    try:
        assert ray.get(other_process.hold.remote(trainable)) == "DataParallelTrainer"
        run_config = ray.tune.RunConfig(name="second", storage_path=storage_path)
        (first,) = v2.Tuner(trainer, run_config=run_config).fit()
        assert isinstance(first.error, ValueError)
        assert os.path.basename(first.path).startswith("DataParallelTrainer_2_")
        path = os.path.join(storage_path, "second")
        restored = v2.Tuner.restore(path, trainer, resume_errored=True)
        assert isinstance(restored, v2.Tuner)
        (result,) = restored.fit()
        assert result.error is None, result.error
        assert result.path == first.path  # the same trial, resumed
        assert (result.metrics["start"], result.metrics["step"]) == (2, 3)
        # from its latest checkpoint, in its own folder
        assert os.path.dirname(result.checkpoint.path) == first.path
        with fit_name(trainable) as also_held:  # as a fit in this process would
            assert also_held == "DataParallelTrainer_2"
            tuner = v2.Tuner.restore(path, trainer, resume_errored=True)
            before = files(path)
            with pytest.raises(RegistryNameInUseError, match=r"once\s+the other Tuner"):
                tuner.fit()
            assert files(path) == before
    finally:
        ray.get(other_process.release.remote())
        ray.kill(other_process)
    with fit_name(trainable) as free_again:  # every name was given back
        assert free_again == "DataParallelTrainer"


@pytest.mark.parametrize(
    "reuse_actors",
    [pytest.param(False, marks=pytest.mark.extended), True],
    ids=["new_actors", "reuse_actors"],
)
def test_pbt_moves_a_checkpoint_and_the_receiving_run_continues_from_it(
    storage_path, reuse_actors
):
    trainer = trainer_for(storage_path, {"steps": 6, "sleep_s": 0.2}, workers=1)
    pbt = ray.tune.schedulers.PopulationBasedTraining(
        time_attr="training_iteration",
        perturbation_interval=2,
        hyperparam_mutations={"train_loop_config": {"lr": [1.0, 2.0]}},
        quantile_fraction=0.5,
        resample_probability=0.0,
        synch=True,
    )
    before = placement_group_ids()
    results = v2.Tuner(
        trainer,
        param_space={"train_loop_config": {"lr": ray.tune.grid_search([1.0, 100.0])}},
        tune_config=ray.tune.TuneConfig(
            metric="loss", mode="min", scheduler=pbt, reuse_actors=reuse_actors
        ),
        run_config=ray.tune.RunConfig(name="pbt", storage_path=storage_path),
    ).fit()
    assert not results.errors
    # Tune gave up the placement groups it had asked for a paused trial that took a
    # cached actor: none was removed before it was created (when one is, about one
    # fit in two lost a CPU for good: ray-project/ray#64693; the fixture's teardown
    # checks every CPU is free).
    assert not removed_before_created(placement_group_ids() - before)
    # Every report is in the trial's metrics, also those since the last sync
    # before PBT paused the trial (Tune's own loggers lose them).
    for result in results:
        iterations = list(result.metrics_dataframe["training_iteration"])
        assert iterations == list(range(1, 7)), (result.path, iterations)
    rows = [row for r in results for _, row in r.metrics_dataframe.iterrows()]
    # A run that started from another trial's checkpoint (lr 1.0's) went on from
    # that checkpoint's step, not from 0 or from its own.
    moved = [row for row in rows if row["restored_lr"] == 1.0 and row["start"] > 0]
    assert moved, rows
    assert all(row["step"] >= row["start"] for row in moved)


def test_the_trainer_is_converted_once_and_what_tune_registers_is_small(
    storage_path, monkeypatch
):
    import gc

    import numpy as np

    from ray_tt_ext.v2 import _trial
    from rtt_testing import object_store_used_mib, settled_object_store_used_mib

    conversions = []
    real = _trial.make_trainable_cls
    monkeypatch.setattr(
        _trial,
        "make_trainable_cls",
        lambda *a, **k: conversions.append(a[0]) or real(*a, **k),
    )
    before = settled_object_store_used_mib()
    weights = np.ones(8_000_000)  # 64 MB in train_loop_config
    trainer = trainer_for(storage_path, {"steps": 1, "weights": weights}, workers=1)
    tuner = v2.Tuner(
        trainer,
        param_space={"train_loop_config": {"lr": ray.tune.grid_search([1.0, 2.0])}},
        run_config=ray.tune.RunConfig(name="once", storage_path=storage_path),
    )
    registered = v2.inspect_payload(tuner._local_tuner.converted_trainable)
    assert registered.total_bytes < 16 * 1024, registered.format()
    results = tuner.fit()
    assert len(results) == 2 and not results.errors
    # Tune's JSON files hold only param_space, never the trainer's 64 MB
    # train_loop_config (docs/guide/payload-guard.md, "Large values in train_loop_config").
    from pathlib import Path

    written = {p: p.stat().st_size for p in Path(storage_path, "once").rglob("*.json")}
    assert sum(p.name == "params.json" for p in written) == 2, written
    assert max(written.values()) < 1024 * 1024, written
    for result in results:
        assert set(result.config) == {"train_loop_config"}
        assert set(result.config["train_loop_config"]) == {"lr"}
    tuner.fit()  # fit again: no new conversion
    assert len(conversions) == 1
    assert object_store_used_mib(settle_s=0) >= before + 60  # put once, not per trial
    del tuner, trainer
    gc.collect()
    assert object_store_used_mib(below=before + 30) < before + 30  # freed with the Tuner


def test_a_torch_trainer_trial_runs_ddp_over_gloo(storage_path):
    """Ray's own ``ray.train.torch.TorchTrainer`` (Train V2's, as a user on Ray's
    default stack imports it) under ``v2.Tuner``: DDP over gloo on two workers, and
    ray_tt_ext's naming from ``v2.CheckpointConfig`` (``v2.TorchTrainer`` is
    Ray's class plus the naming for a plain ``fit()``: test_v2.py)."""
    torch = pytest.importorskip("torch")
    from ray.train.torch import TorchTrainer
    from v2_loops import torch_loop

    assert TorchTrainer.__module__.startswith("ray.train.v2.")  # Ray's V2 class
    trainer = TorchTrainer(
        torch_loop,
        train_loop_config={"epochs": 1},
        scaling_config=ray.train.ScalingConfig(num_workers=2),
        run_config=ray.train.RunConfig(
            checkpoint_config=v2.CheckpointConfig(checkpoint_dir_name="model-{index:02d}")
        ),
    )
    helpers = {
        c: actors_started(c)
        for c in (
            "SynchronizationActor",
            "PreemptionWatcher",
            "DatasetManager",
            "TrialController",
            "TrainController",
        )
    }
    (result,) = v2.Tuner(
        trainer,
        param_space={"train_loop_config": {"epochs": 2}},
        run_config=ray.tune.RunConfig(name="torch", storage_path=storage_path),
    ).fit()
    assert result.error is None
    assert result.metrics["allreduce"] == 3.0  # ranks 1 + 2, over gloo
    # Ray Train's barrier worked for both ranks (report()'s, the loop's own and,
    # on Ray 2.60, get_preemption_info()'s), kept in the run's controller with the
    # preemption watcher, and the controller runs in the trial actor: no
    # SynchronizationActor, PreemptionWatcher, controller actor (nor, without
    # datasets, DatasetManager) started. That the watcher in the
    # controller sees a drained node: the drained-node test.
    assert result.metrics["ranks_given_rank_0s"] == 2.0
    assert result.metrics["preempted"] is False
    if not barrier_kept_in_the_controller():  # Ray 2.55: Ray's actor, one per group
        helpers["SynchronizationActor"] += 1
    assert {c: actors_started(c) for c in helpers} == helpers
    assert result.checkpoint.path == os.path.join(result.path, "model-01")
    with result.checkpoint.as_directory() as d:
        state = torch.load(os.path.join(d, "model.pt"))
    assert set(state) == {"module.weight", "module.bias"}  # DDP-wrapped Linear(4, 1)


def test_rays_xgboost_trainer_trials_train_over_their_dataset_shards(storage_path):
    """Ray's own ``ray.train.xgboost.XGBoostTrainer`` (Train V2's) under ``v2.Tuner``:
    two trials of two workers each, XGBoost's collective between them (Ray's
    ``XGBoostConfig``), a ``train`` dataset sharded to the workers, every
    round's model a checkpoint of the trial (the Train folder, in the trial
    folder), the last one with every round."""
    pytest.importorskip("xgboost")
    import ray.data
    from ray.train.xgboost import RayTrainReportCallback, XGBoostTrainer
    from v2_tune_loops import xgboost_loop

    assert XGBoostTrainer.__module__.startswith("ray.train.v2.")  # Ray's V2 class
    rows = [{"x": float(i), "y": 2.0 * i} for i in range(64)]
    trainer = XGBoostTrainer(
        xgboost_loop,
        train_loop_config={"rounds": 3},
        datasets={"train": ray.data.from_items(rows)},
        scaling_config=ray.train.ScalingConfig(num_workers=2),
    )
    results = v2.Tuner(
        trainer,
        param_space={"train_loop_config": {"eta": ray.tune.grid_search([0.3, 0.6])}},
        tune_config=ray.tune.TuneConfig(max_concurrent_trials=1),
        run_config=ray.tune.RunConfig(name="xgb", storage_path=storage_path),
    ).fit()
    assert not results.errors
    for result in results:
        assert result.metrics["training_iteration"] == 3  # a Tune report per round
        assert os.path.dirname(result.checkpoint.path) == result.path
        assert len(result.best_checkpoints) == 3
        booster = RayTrainReportCallback.get_model(result.checkpoint)
        assert booster.num_boosted_rounds() == 3


def test_datasets_reach_the_workers_and_a_trainer_without_starts_no_dataset_manager(
    storage_path,
):
    """A trial of a trainer with ``datasets`` gets its shards as with Ray's
    controller (Ray's ``DatasetManager`` actor splits them); a trial of a trainer
    without starts none (Ray starts one per worker group even then), and asking
    it for a shard is Ray's ``KeyError``, naming the fix."""
    import ray.data
    from v2_tune_loops import dataset_loop, no_dataset_loop

    managers = actors_started("DatasetManager")
    (with_data,) = v2.Tuner(
        v2.DataParallelTrainer(
            dataset_loop,
            datasets={"train": ray.data.range(10)},
            scaling_config=ray.train.ScalingConfig(num_workers=2),
        ),
        run_config=ray.tune.RunConfig(name="data", storage_path=storage_path),
    ).fit()
    (without,) = v2.Tuner(
        v2.DataParallelTrainer(
            no_dataset_loop, scaling_config=ray.train.ScalingConfig(num_workers=1)
        ),
        run_config=ray.tune.RunConfig(name="no_data", storage_path=storage_path),
    ).fit()
    assert with_data.error is None and without.error is None
    assert with_data.metrics["rows"] == 5  # rank 0's half of the 10 rows
    assert "Dataset shard for 'missing' not found" in with_data.metrics["missing"]
    assert "`datasets` argument" in without.metrics["missing"]  # the fix
    from ray_tt_ext._compat import train_v2_bridge

    if train_v2_bridge.DATASET_MANAGER_PER_GROUP:  # ray_tt_ext's provider, Ray's before
        assert "this trainer has no datasets" in without.metrics["missing"]
    # The one with datasets (Ray 2.56+; older Rays split datasets without one).
    per_group = train_v2_bridge.DATASET_MANAGER_PER_GROUP
    assert actors_started("DatasetManager") == managers + (1 if per_group else 0)


def _puts(log_path: str, prefix: str) -> dict[str, int]:
    """PUT requests moto's server logged for keys under ``prefix``, by key."""
    import re

    counts: dict[str, int] = {}
    with open(log_path) as f:
        for line in f:
            match = re.search(r'"PUT /([^ ?]+)[^ ]* HTTP', line)
            if match and match.group(1).startswith(prefix):
                counts[match.group(1)] = counts.get(match.group(1), 0) + 1
    return counts


def test_on_s3_each_checkpoint_is_written_once_and_never_copied(s3_server):
    import re

    import pyarrow.fs

    fs = s3_server.filesystem()
    trainer = v2.DataParallelTrainer(
        steps_loop,
        train_loop_config={"steps": 2},
        scaling_config=ray.train.ScalingConfig(num_workers=1),
        run_config=ray.train.RunConfig(checkpoint_config=v2.CheckpointConfig()),
    )
    (result,) = v2.Tuner(
        trainer,
        run_config=ray.tune.RunConfig(
            name="nocopy", storage_path="bucket/v2tune", storage_filesystem=fs
        ),
    ).fit()
    assert result.error is None
    trial = result.path
    assert result.checkpoint.path == f"{trial}/checkpoint_000001"
    puts = {
        key: n
        for key, n in _puts(s3_server.log.name, f"{trial}/").items()
        if re.search(r"/checkpoint_\d+/", key)
    }
    files = [
        i.path
        for i in fs.get_file_info(pyarrow.fs.FileSelector(trial, recursive=True))
        if i.type == pyarrow.fs.FileType.File and re.search(r"/checkpoint_\d+/", i.path)
    ]
    assert sorted(files) == [f"{trial}/checkpoint_00000{i}/state.json" for i in (0, 1)]
    # Bytes written per checkpoint = its size: each file uploaded once, by the
    # worker; Tune recorded the folder where it was, with no copy onto itself.
    # (Besides them: one empty folder marker per checkpoint, 0 bytes.)
    assert {k: n for k, n in puts.items() if not k.endswith("/")} == {p: 1 for p in files}
    assert all(n == 1 for k, n in puts.items() if k.endswith("/")), puts


def test_rays_pattern_under_the_v2_tuner_gives_stopped_trials_resources_back(
    storage_path,
):
    from v2_tune_loops import rays_pattern

    scheduler = ray.tune.schedulers.ASHAScheduler(
        time_attr="training_iteration", max_t=4, grace_period=1, reduction_factor=2
    )
    results = v2.Tuner(
        rays_pattern,
        param_space={
            "lr": ray.tune.grid_search([1.0, 2.0, 3.0, 4.0]),
            "steps": 4,
            "storage_path": os.path.join(storage_path, "train_runs"),
        },
        tune_config=ray.tune.TuneConfig(
            metric="loss", mode="min", scheduler=scheduler, max_concurrent_trials=2
        ),
        run_config=ray.tune.RunConfig(name="pattern", storage_path=storage_path),
    ).fit()
    assert len(results) == 4 and not results.errors
    assert min(r.metrics["training_iteration"] for r in results) < 4  # some stopped
    from ray.util import placement_group_table

    left = [pg for pg in placement_group_table().values() if pg["state"] != "REMOVED"]
    assert not left, left  # Ray's own Tuner leaves the stopped trials' groups
    assert_every_cpu_free()


class _StopOnceARunWaitsForWorkers(ray.tune.Stopper):
    """Ends the fit once a placement group of 4 bundles (the run's workers),
    not one of ``before``, is pending: its run then waits for CPUs it cannot
    get (driver)."""

    def __init__(self, before: set):
        self.before = before

    def __call__(self, trial_id, result):
        return False

    def stop_all(self):
        from ray.util import placement_group_table

        return any(
            pg["state"] == "PENDING" and len(pg["bundles"]) == 4
            for pg_id, pg in placement_group_table().items()
            if pg_id not in self.before
        )


def test_rays_pattern_stopped_while_its_workers_wait_leaves_no_placement_group(
    storage_path,
):
    """Tune ends the fit while a trial of Ray's pattern waits for its run's
    workers' CPUs (4 workers; 3 CPUs free beside the trial). The trial does not
    stop (its training thread waits in ``fit()``), so Tune kills it, Ray's
    controller actor with it, and Ray keeps the run's pending placement group
    for the rest of the job: reserved once the trial's CPU is back, it would
    hold every CPU, and the next test's trial would wait forever. The driver
    side of ``v2.Tuner`` removes it at the end of ``fit()``, once the
    controller's process has exited: removed while that process still ran
    (the GCS says DEAD a moment before), the controller started again with a
    second group (two 4-bundle groups here, or CPUs held after ``fit()``)."""
    from ray.util import placement_group_table
    from v2_tune_loops import rays_pattern

    before = set(placement_group_table())
    (result,) = v2.Tuner(
        rays_pattern,
        param_space={
            "lr": 1.0,
            "steps": 1,
            "num_workers": 4,
            "storage_path": os.path.join(storage_path, "train_runs"),
        },
        tune_config=ray.tune.TuneConfig(time_budget_s=120),
        run_config=ray.tune.RunConfig(
            name="waiting",
            storage_path=storage_path,
            stop=_StopOnceARunWaitsForWorkers(before),
        ),
    ).fit()
    assert result.metrics.get("training_iteration") is None  # it never reported
    runs = [
        pg
        for pg_id, pg in placement_group_table().items()
        if pg_id not in before and len(pg["bundles"]) == 4
    ]
    assert len(runs) == 1 and runs[0]["state"] == "REMOVED", runs  # the run's own
    # Not removed while the GCS created it (once its trial's CPU came back): the
    # sweep waited for it to be created (ray-project/ray#64693).
    assert removed_before_created({runs[0]["placement_group_id"]}) == [], runs
    left = [pg for pg in placement_group_table().values() if pg["state"] != "REMOVED"]
    assert not left, left
    assert_every_cpu_free()


@ray.remote(num_cpus=0)
class TrainController:
    """Named as Ray's Train V2 controller: makes a placement group, as Ray's
    does for its run's workers (here one that waits for a resource no node has,
    and holds nothing)."""

    def make_group(self) -> tuple[int, str]:
        group = ray.util.placement_group([{"no_such_resource": 1}])
        return os.getpid(), group.id.hex()


def test_a_dead_controllers_group_is_left_while_its_process_still_runs():
    """The GCS marks an actor DEAD before its process exits. A dead Train
    controller's placement group is not removed until its process has exited
    (removed sooner, Ray's controller starts again with a new group): here the
    process is stopped (SIGSTOP) before ``ray.kill``, so that it is DEAD and
    still there for as long as the test needs, then let go on (SIGCONT), and
    it takes Ray's kill."""
    import signal

    from ray.util import placement_group_table

    from rtt_testing import alive_actor_ids, wait_until

    job = ray.get_runtime_context().get_job_id()
    controller = TrainController.remote()
    pid, group = ray.get(controller.make_group.remote())
    actor_id = controller._actor_id.hex()

    def process_gone() -> bool:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
        except FileNotFoundError:
            return True

    os.kill(pid, signal.SIGSTOP)
    try:
        ray.kill(controller)
        wait_until(lambda: actor_id not in alive_actor_ids("TrainController"), "DEAD")
        assert not process_gone()
        created, pending, dying = _compat.dead_train_controllers_placement_groups(
            job, count_dying=True
        )
        assert group not in {g.id.hex() for g in created + pending}
        assert dying >= 1
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_until(process_gone, "the killed controller's process exits")
    created, pending, _ = _compat.dead_train_controllers_placement_groups(job)
    found = created + pending
    assert group in {g.id.hex() for g in found}
    for g in found:
        ray.util.remove_placement_group(g)
    assert placement_group_table()[group]["state"] == "REMOVED"


def _refused_with_the_fix(match: str, make) -> None:
    """``make()`` raises a ``ValueError`` matching ``match`` that names the fix."""
    with pytest.raises(ValueError, match=match) as info:
        make()
    assert "Fix: " in str(info.value), str(info.value)


@pytest.mark.quick
def test_what_a_trial_cannot_run_is_an_error_before_anything_runs(storage_path):
    """Each error says what is wrong and the fix; nothing is written."""
    trainer = trainer_for(storage_path, {"steps": 1})
    _refused_with_the_fix(
        "'workers' is not a field of ray.train.Scal",
        lambda: v2.Tuner(trainer, param_space={"scaling_config": {"workers": 2}}),
    )
    whole = ray.tune.grid_search([{"num_workers": 1}, {"num_workers": 2}])
    _refused_with_the_fix(
        "a grid_search over whole configs",
        lambda: v2.Tuner(trainer, param_space={"scaling_config": whole}),
    )
    run_config = ray.train.RunConfig(storage_path=storage_path)

    def trainer_with(scaling_config, **kwargs):
        return v2.DataParallelTrainer(
            steps_loop, scaling_config=scaling_config, run_config=run_config, **kwargs
        )

    none = trainer_with(ray.train.ScalingConfig(num_workers=0))
    _refused_with_the_fix(r"num_workers=0\) cannot be reserved", lambda: v2.Tuner(none))
    elastic = trainer_with(ray.train.ScalingConfig(num_workers=(1, 2)))
    _refused_with_the_fix(
        r"num_workers=\(1, 2\)\) cannot be reserved", lambda: v2.Tuner(elastic)
    )
    unsupported_configs = [
        ray.train.ScalingConfig(
            num_workers=1, use_tpu=True, topology="2x2", accelerator_type="TPU-V4"
        )
    ]
    if "label_selector" in {f.name for f in dataclasses.fields(ray.train.ScalingConfig)}:
        unsupported_configs.append(  # Ray 2.53+
            ray.train.ScalingConfig(num_workers=1, label_selector={"zone": "a"})
        )
    for unsupported in unsupported_configs:
        _refused_with_the_fix(
            "without TPU slices or label selectors",
            lambda: v2.Tuner(trainer_with(unsupported)),  # noqa: B023
        )
    if hasattr(ray.train, "ValidationConfig"):  # Ray 2.54+; before: the next test
        validated = trainer_with(
            ray.train.ScalingConfig(num_workers=1),
            validation_config=ray.train.ValidationConfig(fn=lambda checkpoint, config: {}),
        )
        _refused_with_the_fix(
            r"validation_config=...\) is not supported", lambda: v2.Tuner(validated)
        )
    ranked = trainer_for(
        storage_path,
        {"steps": 1},
        checkpoint_config=v2.CheckpointConfig(checkpoint_score_attribute="eval/loss"),
    )
    _refused_with_the_fix("must be a top-level metric", lambda: v2.Tuner(ranked))
    assert not os.listdir(storage_path)  # nothing was written


def test_a_checkpoint_without_the_score_attribute_is_an_error_and_nothing_is_deleted(
    storage_path,
):
    trainer = trainer_for(
        storage_path,
        {"steps": 3},
        workers=1,
        checkpoint_config=v2.CheckpointConfig(
            num_to_keep=1, checkpoint_score_attribute="accuracy"
        ),
    )
    (result,) = v2.Tuner(
        trainer, run_config=ray.tune.RunConfig(name="unscored", storage_path=storage_path)
    ).fit()
    assert isinstance(result.error, ValueError)
    assert "without checkpoint_score_attribute 'accuracy'" in str(result.error)
    # Tune never took a checkpoint, and nobody deleted one: every folder the run
    # wrote (the first, and any written before the trial stopped) is there.
    names = [n for n in folders(result.path) if n.startswith("checkpoint_")]
    assert names and names == [f"checkpoint_{i:06d}" for i in range(len(names))]
    assert result.checkpoint is None


@pytest.mark.skipif(
    "validate_fn" not in inspect.signature(ray.train.report).parameters,
    reason="ray.train.report(validate_fn=...) is Ray 2.51 .. 2.53's (2.54+: the "
    "validation_config test_what_a_trial_cannot_run_is_an_error_before_anything_runs refuses)",
)
def test_a_report_asking_for_validation_is_refused_in_the_trial(storage_path):
    """Ray 2.51 .. 2.53 ask for a checkpoint's validation per report
    (``ray.train.report(validate_fn=...)``), which the driver cannot see: the
    report is refused on the worker, before anything is reported, and the
    trial's error says why and the fix."""
    from v2_tune_loops import validating_loop

    trainer = v2.DataParallelTrainer(
        validating_loop, scaling_config=ray.train.ScalingConfig(num_workers=1)
    )
    (result,) = v2.Tuner(
        trainer, run_config=ray.tune.RunConfig(name="validate", storage_path=storage_path)
    ).fit()
    assert isinstance(result.error, ValueError), result.error
    message = str(result.error)
    assert "validate_fn=...) (Ray 2.51 .. 2.53) is not supported" in message
    assert "Fix: " in message and "Nothing was reported" in message
    assert result.checkpoint is None
    assert not [n for n in folders(result.path) if n.startswith("checkpoint")]


#: ``ray.train.get_preemption_info``: Ray 2.58+ (docs/compatibility.md).
HAS_PREEMPTION_NOTICE = hasattr(ray.train, "get_preemption_info")


@pytest.mark.quick
@pytest.mark.skipif(HAS_PREEMPTION_NOTICE, reason="this Ray has the preemption notice")
def test_a_ray_without_the_preemption_notice_is_what_the_compatibility_page_says():
    """Ray 2.51 .. 2.57: the training loop gets no preemption notice (Ray's API is
    new in 2.58), as docs/compatibility.md says; ray_tt_ext adds none."""
    from ray_tt_ext._compat import train_v2_bridge

    assert _compat.RAY_VERSION.release < (2, 58)
    page = (Path(__file__).parents[2] / "docs" / "compatibility.md").read_text()
    assert "`ray.train.get_preemption_info`" in page and "2.58" in page
    # Ray 2.57 watches for drained nodes without telling the loop: in the controller.
    assert (train_v2_bridge.PreemptionCallback is not None) == (
        _compat.RAY_VERSION.release >= (2, 57)
    )


@pytest.mark.cluster
@pytest.mark.timeout(300)
@pytest.mark.skipif(
    not HAS_PREEMPTION_NOTICE,
    reason="Ray's preemption notice (ray.train.get_preemption_info) is new in Ray 2.58: "
    "test_a_ray_without_the_preemption_notice_is_what_the_compatibility_page_says",
)
def test_a_drained_node_reaches_the_loop_and_the_survivors_barrier_is_relaxed(
    shutdown_only, storage_path, tmp_path
):
    """Ray Train's preemption notice under a trial, two workers on two nodes:
    rank 1's node is drained (a spot reclaim's notice), the watcher that
    ray_tt_ext keeps in the run's controller sees it, and the loops'
    ``ray.train.get_preemption_info()`` names rank 1 and its node. On Ray 2.60
    rank 1 then joins no collective: rank 0's notice and just-in-time
    checkpoint go through only because the controller relaxed the barrier to
    rank 0 (``relax_collectives_on_preemption``: Ray's controller calls the
    barrier's ``set_required_ranks`` and waits for it, on a barrier ray_tt_ext
    keeps in that same controller, in the trial actor). Ray 2.58 .. 2.59 have
    no relaxing (the notice is a barrier of every rank): rank 1 goes on
    stepping. The trial finishes with that checkpoint."""
    from ray.cluster_utils import Cluster
    from v2_tune_loops import drain_rank_one_loop

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 0, "include_dashboard": False},
    )
    try:
        ray.init(address=cluster.address)
        for _ in range(2):  # a node per worker (1 CPU each, none on the head)
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        watchers = actors_started("PreemptionWatcher")
        barriers = actors_started("SynchronizationActor")
        trainer = v2.DataParallelTrainer(
            drain_rank_one_loop,
            train_loop_config={
                "wait_s": 60,
                "dir": str(tmp_path),
                "rank_one_stays": not RAY_2_60,
            },
            scaling_config=ray.train.ScalingConfig(num_workers=2),
            run_config=ray.train.RunConfig(
                failure_config=ray.train.FailureConfig(relax_collectives_on_preemption=True)
            )
            if RAY_2_60
            else None,
        )
        (result,) = v2.Tuner(
            trainer,
            run_config=ray.tune.RunConfig(name="drained", storage_path=storage_path),
        ).fit()
        assert result.error is None, result.error
        assert result.metrics["step"] == 1
        assert result.metrics["preempted_ranks"] == [1]
        assert result.metrics["preempted_node_is_rank_1s"] is True
        with result.checkpoint.as_directory() as d:
            assert json.load(open(os.path.join(d, "state.json"))) == {"step": 1}
        # Both kept in the controller: no actor of either started.
        assert actors_started("PreemptionWatcher") == watchers
        assert actors_started("SynchronizationActor") == barriers
    finally:
        ray.shutdown()
        cluster.shutdown()
