"""ray_tt_ext.v2 on Ray's default Train V2 stack: names, restarts, guard, Tuner.

Every fit here runs real Ray Train V2 (Ray's controller actor, worker group) on the
session's local Ray, with ``RAY_TRAIN_V2_ENABLED`` unset as users have it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import ray
import ray.train
import ray.tune
from v2_loops import (
    epochs_loop,
    no_upload_loop,
    read_state,
    torch_loop,
    tune_checkpoints_fn,
    tune_fn,
)

import ray_tt_ext.v2 as v2
from rtt_testing import actors_started

pytestmark = pytest.mark.usefixtures("ray_start_4_cpus")


def folders(run_dir: str) -> list[str]:
    return sorted(n for n in os.listdir(run_dir) if os.path.isdir(os.path.join(run_dir, n)))


def make_trainer(
    storage_path, name, config, *, checkpoint_config=None, workers=2, retries=0
):
    return v2.DataParallelTrainer(
        epochs_loop,
        train_loop_config=config,
        scaling_config=ray.train.ScalingConfig(num_workers=workers),
        run_config=ray.train.RunConfig(
            name=name,
            storage_path=storage_path,
            checkpoint_config=checkpoint_config or v2.CheckpointConfig(),
            failure_config=ray.train.FailureConfig(max_failures=retries),
        ),
    )


@pytest.mark.quick
def test_sequential_names_num_to_keep_by_index_and_no_train_v1_module_on_workers(
    storage_path,
):
    trainer = make_trainer(
        storage_path,
        "seq",
        {"epochs": 4, "sharded": True, "report_modules": True},
        checkpoint_config=v2.CheckpointConfig(num_to_keep=2),
    )
    result = trainer.fit()
    # A V2 training worker loads no Train V1 module of ray_tt_ext.
    loaded = set(result.metrics["modules"].split(","))
    assert "ray_tt_ext.v2._train" in loaded  # the worker did unpickle ray_tt_ext.v2's code
    v1 = {f"ray_tt_ext.{m}" for m in ("_storage", "_trainer", "_tuner", "_executor")}
    assert not loaded & (v1 | {"ray_tt_ext._frameworks", "ray_tt_ext.v2._tuner"}), loaded
    run_dir = os.path.join(storage_path, "seq")
    assert folders(run_dir) == ["checkpoint_000002", "checkpoint_000003"]
    assert os.path.basename(result.checkpoint.path) == "checkpoint_000003"
    # Both ranks uploaded into the one folder rank 0 named.
    assert sorted(os.listdir(os.path.join(run_dir, "checkpoint_000003"))) == [
        "shard-1.json",
        "state.json",
    ]
    assert read_state(os.path.join(run_dir, "checkpoint_000003"))["epoch"] == 3


@pytest.mark.extended
def test_index_continues_after_a_worker_restart_and_a_resumed_run(storage_path, tmp_path):
    config = {"epochs": 4, "fail_at": 2, "marker": str(tmp_path / "failed_once")}
    make_trainer(storage_path, "restart", config, retries=1).fit()
    assert os.path.exists(config["marker"])  # the first attempt did fail
    run_dir = os.path.join(storage_path, "restart")

    def epochs() -> list[int]:
        names = [n for n in folders(run_dir) if not n.endswith(".unrecorded")]
        # One folder per index, no gaps: no index was used twice.
        assert names == [f"checkpoint_{i:06d}" for i in range(len(names))]
        return [read_state(os.path.join(run_dir, n))["epoch"] for n in names]

    # Epochs 0-1, the failure, then 2-5 from the restored checkpoint. A plain
    # fit() runs Ray's controller, which takes reports at its polls: if the
    # failure beat it to epoch 1's report, epoch 1 ran twice, and its first
    # folder (persisted, never recorded) was moved aside, intact, when the
    # retry's epoch 1 took the index after the last recorded checkpoint.
    first = epochs()
    assert first == list(range(6))
    lost = [n for n in folders(run_dir) if n.endswith(".unrecorded")]
    assert lost in ([], ["checkpoint_000001.unrecorded"]), lost
    for name in lost:
        assert read_state(os.path.join(run_dir, name))["epoch"] == 1

    # The same run name again: Ray resumes it; the index continues, nothing is overwritten.
    make_trainer(storage_path, "restart", {"epochs": 2}).fit()
    assert epochs() == first + [6, 7]


def test_metric_index_template_and_lost_progress_moved_aside(storage_path):
    run_dir = os.path.join(storage_path, "metric")
    lost = os.path.join(run_dir, "epoch_001-loss_0.50")
    os.makedirs(lost)
    with open(os.path.join(lost, "lost.txt"), "w") as f:
        f.write("progress of a crashed attempt")
    policy = v2.CheckpointConfig(
        checkpoint_index="epoch", checkpoint_dir_name="epoch_{index:03d}-loss_{loss:.2f}"
    )
    make_trainer(
        storage_path, "metric", {"epochs": 3}, checkpoint_config=policy, workers=1
    ).fit()
    assert folders(run_dir) == [
        "epoch_000-loss_1.00",
        "epoch_001-loss_0.50",
        "epoch_001-loss_0.50.unrecorded",
        "epoch_002-loss_0.33",
    ]
    assert read_state(lost)["epoch"] == 1  # the new checkpoint took the name
    with open(os.path.join(lost + ".unrecorded", "lost.txt")) as f:
        assert f.read() == "progress of a crashed attempt"  # moved aside, intact


def test_a_reused_explicit_name_is_an_error_and_nothing_is_merged(storage_path):
    trainer = make_trainer(
        storage_path, "reuse", {"epochs": 2, "names": {"0": "same", "1": "same"}}
    )
    with pytest.raises(Exception, match="'same' was already used by this run"):
        trainer.fit()
    same = os.path.join(storage_path, "reuse", "same")
    assert os.listdir(same) == ["state.json"]
    assert read_state(same)["epoch"] == 0  # the first checkpoint, not merged into


def test_an_explicit_name_outside_the_run_folder_writes_nothing(storage_path):
    # Ray's own V2 trainer writes this checkpoint to <storage>/outside, then fails.
    trainer = make_trainer(
        storage_path, "escape", {"epochs": 1, "names": {"0": "../outside"}}
    )
    with pytest.raises(Exception, match="contains a path separator"):
        trainer.fit()
    assert not os.path.exists(os.path.join(storage_path, "outside"))
    assert folders(os.path.join(storage_path, "escape")) == []


@pytest.mark.quick
def test_payload_guard_names_the_culprit_before_anything_is_sent(storage_path):
    weights = np.zeros(2_000_000)  # 16 MB in train_loop_config
    trainer = make_trainer(storage_path, "big", {"epochs": 1, "weights": weights})
    trainer.payload_limit = 1_000_000
    with pytest.raises(v2.PayloadTooLargeError) as info:
        trainer.fit()
    culprit = "DataParallelTrainer['train_loop_config']['weights']"
    assert info.value.report.contributors[0].path == culprit
    assert "controller" in str(info.value)
    assert not os.path.exists(os.path.join(storage_path, "big"))  # no controller ran
    assert v2.inspect_payload(trainer).contributors[0].path == culprit


def test_cli_measures_a_v2_trainer_by_what_it_sends(tmp_path):
    (tmp_path / "job.py").write_text(
        textwrap.dedent(
            """
            import numpy as np
            import ray.train
            import ray_tt_ext.v2 as v2

            def loop(config):
                pass

            trainer = v2.DataParallelTrainer(
                loop,
                train_loop_config={"weights": np.zeros(2_000_000)},
                scaling_config=ray.train.ScalingConfig(num_workers=1),
            )
            """
        )
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_TRAIN_V2_ENABLED"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ray_tt_ext",
            "inspect",
            "job:trainer",
            "--limit",
            "1000000",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]  # over the limit
    assert "DataParallelTrainer['train_loop_config']['weights']" in proc.stdout


@pytest.mark.extended
def test_rays_tune_and_train_v2_pattern_runs_under_the_v2_tuner(storage_path):
    tuner = v2.Tuner(
        tune_fn,
        param_space={"lr": ray.tune.grid_search([0.1, 0.2]), "storage_path": storage_path},
        run_config=ray.tune.RunConfig(storage_path=storage_path, name="tune"),
    )
    helpers = {
        c: actors_started(c)
        for c in ("SynchronizationActor", "PreemptionWatcher", "DatasetManager")
    }
    results = tuner.fit()
    assert not results.errors
    assert sorted(r.metrics["lr"] for r in results) == [0.1, 0.2]
    assert {r.metrics["v2"] for r in results} == {1}  # Train V2 ran in the trials
    # Ray's own controller keeps Ray's barrier, preemption watcher and dataset
    # manager actors (one each per run): only a v2.Tuner(trainer) trial's
    # controller does without them.
    from ray_tt_ext._compat import train_v2_bridge

    started_by_ray = {  # by each run's worker group, on this Ray
        "SynchronizationActor": True,
        "PreemptionWatcher": train_v2_bridge.PreemptionCallback is not None,  # 2.57+
        "DatasetManager": train_v2_bridge.DATASET_MANAGER_PER_GROUP,  # 2.56+
    }
    assert {c: actors_started(c) for c in helpers} == {
        c: n + (2 if started_by_ray[c] else 0) for c, n in helpers.items()
    }
    assert os.environ.get("RAY_TRAIN_V2_ENABLED") is None  # left as the user has it


@pytest.mark.quick
def test_v2_tuner_guards_a_function_trainable(storage_path):
    weights = np.zeros(2_000_000)

    def big(config):
        ray.tune.report({"m": float(weights.mean())})

    with pytest.raises(v2.PayloadTooLargeError) as info:
        v2.Tuner(big, payload_limit=1_000_000)
    assert info.value.report.contributors[0].path.endswith(".weights")


def test_torch_trainer_names_checkpoints(storage_path):
    pytest.importorskip("torch")
    trainer = v2.TorchTrainer(
        torch_loop,
        train_loop_config={"epochs": 2},
        scaling_config=ray.train.ScalingConfig(num_workers=2),
        run_config=ray.train.RunConfig(
            name="torch",
            storage_path=storage_path,
            checkpoint_config=v2.CheckpointConfig(checkpoint_dir_name="model-{index:03d}"),
        ),
    )
    result = trainer.fit()
    assert result.metrics["allreduce"] == 3.0  # ranks 1 + 2, over gloo
    run_dir = os.path.join(storage_path, "torch")
    assert folders(run_dir) == ["model-000", "model-001"]
    assert os.listdir(os.path.join(run_dir, "model-001")) == ["model.pt"]


def run_script(code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "RAY_TRAIN_V2_ENABLED"}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_importing_and_using_v2_never_touches_the_variable():
    proc = run_script(
        """
        import os, sys
        import ray_tt_ext.v2 as v2
        from ray_tt_ext.v2 import *  # noqa
        print("TORCH", "torch" in sys.modules)
        v2.TorchTrainer, v2.Tuner, v2.CheckpointConfig(num_to_keep=1)
        import ray.train
        from ray.train.v2.api.config import RunConfig
        print("ENV", os.environ.get("RAY_TRAIN_V2_ENABLED"), ray.train.RunConfig is RunConfig)
        """
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "TORCH False" in proc.stdout  # torch only when TorchTrainer is named
    assert "ENV None True" in proc.stdout


def test_v2_after_the_v1_integration_turned_v1_on_names_the_cause():
    proc = run_script(
        """
        from ray_tt_ext import Tuner  # the V1 integration: turns Train V1 on
        import ray_tt_ext.v2 as v2
        try:
            v2.DataParallelTrainer(lambda: None)
        except v2.TrainV2DisabledError as e:
            print("ERROR", e)
        try:
            v2.Tuner(lambda config: None)
        except v2.TrainV2DisabledError as e:
            print("TUNER", e)
        """
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    trainer_error, _, tuner_error = proc.stdout.partition("ERROR")[2].partition("TUNER")
    assert "`ray_tt_ext.Tuner`" in trainer_error, proc.stdout
    assert "ray_tt_ext.v2" in trainer_error
    assert "ray_tt_ext.v2.Tuner" in tuner_error and "`ray_tt_ext.Tuner`" in tuner_error


def test_the_v1_tuner_refuses_a_v2_trainer_with_the_fix():
    # Train V2 set on explicitly (never overridden), a ray_tt_ext.v2 trainer, then
    # the V1 integration's Tuner: a TypeError naming ray_tt_ext.v2.Tuner.
    proc = run_script(
        """
        import os
        os.environ["RAY_TRAIN_V2_ENABLED"] = "1"
        import ray_tt_ext.v2 as v2
        trainer = v2.DataParallelTrainer(lambda: None)
        import ray_tt_ext
        try:
            ray_tt_ext.Tuner(trainer)
        except TypeError as e:
            print("ERROR", e)
        """
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ERROR `DataParallelTrainer` is a Ray Train V2 trainer" in proc.stdout, (
        proc.stdout
    )
    assert "Fix: ray_tt_ext.v2.Tuner(trainer" in proc.stdout


@pytest.mark.quick
def test_v2_trainers_are_rays_classes_with_rays_constructor():
    """docs/guide/migrating.md, "Train V2": ``v2.DataParallelTrainer`` and
    ``v2.TorchTrainer`` are subclasses of Ray's V2 classes with Ray's
    constructor (same parameters, same defaults)."""
    import inspect

    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
    from ray.train.v2.torch.torch_trainer import TorchTrainer

    for ours, rays in [
        (v2.DataParallelTrainer, DataParallelTrainer),
        (v2.TorchTrainer, TorchTrainer),
    ]:
        assert issubclass(ours, rays)
        # Ray's own constructor: no class of ours between defines one.
        ours_only = ours.__mro__[: ours.__mro__.index(rays)]
        assert not [c for c in ours_only if "__init__" in vars(c)], ours_only
        assert inspect.signature(ours.__init__) == inspect.signature(rays.__init__)


@pytest.mark.quick
def test_param_space_merges_train_loop_config_and_scaling_config_key_by_key():
    """docs/guide/train-v2.md, "Tuner(trainer) on Train V2": ``train_loop_config`` and
    ``scaling_config`` are merged key by key (nested dicts too), any other key
    replaces the argument; the trainer's own arguments are left alone."""
    from ray_tt_ext.v2._arguments import merged_kwargs

    scaling = ray.train.ScalingConfig(num_workers=1, resources_per_worker={"CPU": 2})
    base = {
        "train_loop_config": {"lr": 0.1, "opt": {"name": "sgd", "momentum": 0.9}},
        "scaling_config": scaling,
        "datasets": None,
    }
    merged = merged_kwargs(
        base,
        {
            "train_loop_config": {"lr": 0.5, "opt": {"momentum": 0.5}},
            "scaling_config": {"num_workers": 3},
            "datasets": {"train": "tuned"},
        },
        v2.DataParallelTrainer,
    )
    assert merged["train_loop_config"] == {
        "lr": 0.5,
        "opt": {"name": "sgd", "momentum": 0.5},
    }
    assert merged["scaling_config"].num_workers == 3
    assert merged["scaling_config"].resources_per_worker == {"CPU": 2}
    assert merged["datasets"] == {"train": "tuned"}
    assert base["train_loop_config"] == {"lr": 0.1, "opt": {"name": "sgd", "momentum": 0.9}}
    assert scaling.num_workers == 1


@pytest.mark.quick
def test_the_v2_tuner_refuses_a_v1_trainer_with_the_fix():
    """docs/guide/migrating.md, "Train V2": a Train V1 trainer given to ``v2.Tuner`` is a
    ``TypeError`` naming the fix (Ray refuses to build one with Train V2 on, so
    the instance is made without its constructor, as an unpickled one would be)."""
    from ray.train.data_parallel_trainer import DataParallelTrainer as V1Trainer

    with pytest.raises(TypeError) as info:
        v2.Tuner(object.__new__(V1Trainer))
    assert "`DataParallelTrainer` is a Ray Train V1 trainer" in str(info.value)
    assert "Fix: use ray_tt_ext.v2.DataParallelTrainer" in str(info.value)


@pytest.mark.quick
def test_tunes_own_retention_wins_over_the_trainers(tmp_path):
    """docs/guide/train-v2.md, "Tuner(trainer) on Train V2": Tune's retention is the
    trainer's unless Tune's ``CheckpointConfig`` sets its own."""
    from ray_tt_ext.v2._tuner import _tune_run_config

    trainer = v2.DataParallelTrainer(
        lambda: None,
        run_config=ray.train.RunConfig(
            name="retention",
            storage_path=str(tmp_path),
            checkpoint_config=v2.CheckpointConfig(
                num_to_keep=2, checkpoint_score_attribute="loss"
            ),
        ),
    )
    inherited = _tune_run_config(None, trainer)
    assert (inherited.name, inherited.storage_path) == ("retention", str(tmp_path))
    assert inherited.checkpoint_config.num_to_keep == 2
    assert inherited.checkpoint_config.checkpoint_score_attribute == "loss"
    tunes = ray.tune.RunConfig(checkpoint_config=ray.tune.CheckpointConfig(num_to_keep=5))
    own = _tune_run_config(tunes, trainer)
    assert own.checkpoint_config.num_to_keep == 5
    assert own.checkpoint_config.checkpoint_score_attribute is None


@pytest.mark.quick
def test_run_folder_rules_without_a_run(tmp_path):
    """docs/guide/migrating.md, "Train V2": without ``v2.CheckpointConfig`` and without an
    explicit name Ray's own name stays (and nothing is listed); the run folder is
    listed once per worker process; a NO_UPLOAD checkpoint's name counts as used
    and a sequential index moves past it. Rank 0's naming state, on a real local
    folder, with no run."""
    import pyarrow.fs

    from ray_tt_ext.v2._train import _RunFolder
    from rtt_testing import CountingFileSystem

    root = str(tmp_path / "run")
    counting = CountingFileSystem(pyarrow.fs.LocalFileSystem())
    fs = pyarrow.fs.PyFileSystem(counting)
    os.makedirs(os.path.join(root, "checkpoint_000000"))
    nothing_recorded = set

    rays = _RunFolder(fs, root, None, nothing_recorded)
    assert rays.name({"step": 0}, None) is None
    assert counting.counts["list"] == 0

    policy = v2.CheckpointConfig(checkpoint_dir_name="checkpoint_{index:06d}")
    first = _RunFolder(fs, root, policy, nothing_recorded)
    first.note_in_place(os.path.join(root, "mine"))
    with pytest.raises(ValueError, match="'mine' was already used by this run"):
        first.name({}, "mine")
    # checkpoint_000000 was never recorded: moved aside when its index comes again.
    assert first.name({}, None) == "checkpoint_000000"
    assert os.path.isdir(os.path.join(root, "checkpoint_000000.unrecorded"))
    in_place = os.path.join(root, "checkpoint_000004")
    first.note_in_place(in_place)
    assert first.name({}, None) == "checkpoint_000005"  # past the one in place
    second = _RunFolder(fs, root, policy, nothing_recorded)
    second.existing()
    assert counting.counts["list"] == 1  # one listing for the process

    # A run folder that cannot be listed is an error naming it, and nothing is
    # named (docs/guide/troubleshooting.md, "Errors").
    failing = CountingFileSystem(pyarrow.fs.LocalFileSystem(), fail_listing=True)
    unlistable = _RunFolder(
        pyarrow.fs.PyFileSystem(failing),
        str(tmp_path / "unlistable"),
        policy,
        nothing_recorded,
    )
    with pytest.raises(OSError, match="Could not list the run folder .*unlistable"):
        unlistable.name({}, None)
    assert failing.counts["list"] == 1


@pytest.mark.extended
def test_names_on_s3_move_a_folder_nobody_recorded_aside(s3_server):
    import pyarrow.fs

    fs = s3_server.filesystem()
    # A folder at the first name that the run never recorded: never written to,
    # moved aside intact when the run's first checkpoint takes the name.
    with fs.open_output_stream("bucket/v2s3/run/checkpoint_000000/theirs.txt") as f:
        f.write(b"not ours")
    trainer = v2.DataParallelTrainer(
        epochs_loop,
        train_loop_config={"epochs": 2},
        scaling_config=ray.train.ScalingConfig(num_workers=1),
        run_config=ray.train.RunConfig(
            name="run",
            storage_path="bucket/v2s3",
            storage_filesystem=fs,
            checkpoint_config=v2.CheckpointConfig(),
        ),
    )
    result = trainer.fit()
    infos = fs.get_file_info(pyarrow.fs.FileSelector("bucket/v2s3/run"))
    names = sorted(i.base_name for i in infos if i.type == pyarrow.fs.FileType.Directory)
    assert names == [
        "checkpoint_000000",
        "checkpoint_000000.unrecorded",
        "checkpoint_000001",
    ]
    with fs.open_input_stream(
        "bucket/v2s3/run/checkpoint_000000.unrecorded/theirs.txt"
    ) as f:
        assert f.read() == b"not ours"
    assert result.checkpoint.path == "bucket/v2s3/run/checkpoint_000001"


@pytest.mark.quick
def test_the_v2_surface_extends_rays_v2_classes():
    from ray.train.v2.api.config import CheckpointConfig as RayCheckpointConfig
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer as RayTrainer
    from ray.train.v2.torch.torch_trainer import TorchTrainer as RayTorchTrainer

    from ray_tt_ext import _compat, _payload

    assert set(v2.__all__) == {
        "CheckpointConfig",
        "DataParallelTrainer",
        "GRPC_MAX_MESSAGE_BYTES",
        "PayloadReport",
        "PayloadTooLargeError",
        "TrainV2DisabledError",
        "TrainV2EnabledError",
        "Tuner",
        "UnsupportedRayVersionError",
        "inspect_payload",
    }
    assert issubclass(v2.DataParallelTrainer, RayTrainer)
    assert issubclass(v2.TorchTrainer, RayTorchTrainer)
    assert issubclass(v2.CheckpointConfig, RayCheckpointConfig)
    assert issubclass(v2.Tuner, ray.tune.Tuner)
    assert v2.PayloadTooLargeError is _payload.PayloadTooLargeError
    assert v2.TrainV2DisabledError is _compat.TrainV2DisabledError
    with pytest.raises(ValueError, match="path separator"):
        v2.CheckpointConfig(checkpoint_dir_name="a/{index}")


@pytest.mark.quick
def test_a_name_that_ignores_the_index_is_refused_not_looped_on(tmp_path):
    """A template that ignores the index and renders a name again is refused."""
    import pyarrow.fs

    from ray_tt_ext.v2._train import _RunFolder

    policy = v2.CheckpointConfig(checkpoint_dir_name="loss_{loss:.2f}")
    folder = _RunFolder(pyarrow.fs.LocalFileSystem(), str(tmp_path), policy, set)
    assert folder.name({"loss": 0.5}, None) == "loss_0.50"
    with pytest.raises(ValueError, match="'loss_0.50' was rendered again"):
        folder.name({"loss": 0.501}, None)
    # A folder deleted since the listing (Ray's num_to_keep) frees its name.
    other = tmp_path / "other"
    (other / "gone").mkdir(parents=True)
    stale = _RunFolder(pyarrow.fs.LocalFileSystem(), str(other), None, set)
    assert "gone" in stale.existing()
    (other / "gone").rmdir()
    assert stale.name({}, "gone") == "gone"
    assert not (other / "gone.unrecorded").exists()


def test_no_upload_checkpoints_are_recorded_in_place(storage_path):
    trainer = v2.DataParallelTrainer(
        no_upload_loop,
        train_loop_config={"run_dir": os.path.join(storage_path, "in_place")},
        scaling_config=ray.train.ScalingConfig(num_workers=1),
        run_config=ray.train.RunConfig(
            name="in_place",
            storage_path=storage_path,
            checkpoint_config=v2.CheckpointConfig(),
        ),
    )
    result = trainer.fit()
    run_dir = os.path.join(storage_path, "in_place")
    assert folders(run_dir) == ["mine_0", "mine_1"]  # neither renamed nor moved aside
    assert result.checkpoint.path == os.path.join(run_dir, "mine_1")


def test_v2_tuner_applies_a_checkpoint_policy_to_function_trainables(storage_path):
    from ray_tt_ext import CheckpointConfig  # Tune's: a neutral name, V1 stays off

    result = v2.Tuner(
        tune_checkpoints_fn,
        run_config=ray.tune.RunConfig(
            storage_path=storage_path,
            name="fn_policy",
            checkpoint_config=CheckpointConfig(checkpoint_dir_name="fn-{index:02d}"),
        ),
    ).fit()[0]
    assert result.error is None
    assert [n for n in folders(result.path) if n.startswith("fn-")] == ["fn-00", "fn-01"]
    assert os.environ.get("RAY_TRAIN_V2_ENABLED") is None


def test_a_resumed_run_cannot_reuse_the_name_of_a_recorded_checkpoint(storage_path):
    make_trainer(storage_path, "resumed", {"epochs": 1, "names": {"0": "named"}}).fit()
    # The same run again: Ray resumes it (epoch 1 next) and records "named" already.
    again = make_trainer(storage_path, "resumed", {"epochs": 1, "names": {"1": "named"}})
    with pytest.raises(Exception, match="'named' names a checkpoint this run recorded"):
        again.fit()
    named = os.path.join(storage_path, "resumed", "named")
    assert read_state(named)["epoch"] == 0  # the recorded checkpoint, untouched
    assert folders(os.path.join(storage_path, "resumed")) == ["named"]


@pytest.mark.quick
def test_a_large_value_in_the_v2_tuners_param_space_is_warned_of_by_name(storage_path):
    with pytest.warns(UserWarning, match=r"param_space\['table'\] is 781\.\d KiB") as info:
        v2.Tuner(
            tune_fn,
            param_space={"table": np.ones(100_000), "lr": 0.1},
            run_config=ray.tune.RunConfig(name="warned", storage_path=storage_path),
        )
    ours = [w for w in info if "param_space[" in str(w.message)]
    assert len(ours) == 1 and "tune.with_parameters" in str(ours[0].message)


@pytest.mark.quick
@pytest.mark.compat_tier
def test_the_compatibility_page_says_what_this_ray_does():
    """docs/compatibility.md's table of what differs between the Train V2 releases
    (``scripts/render_compatibility.py``'s ``V2_DIFFERENCES``) is what this Ray
    and ray_tt_ext's bridge do: each row holds exactly on the releases it names.
    The matrix runs this on every Train V2 release."""
    import dataclasses
    import inspect

    from ray_tt_ext import _compat
    from ray_tt_ext._compat import train_v2_bridge

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
    from render_compatibility import V2_DIFFERENCES

    does = {
        "preemption_notice": hasattr(ray.train, "get_preemption_info"),
        "relax_collectives": "relax_collectives_on_preemption"
        in {f.name for f in dataclasses.fields(ray.train.FailureConfig)},
        "watcher_in_controller": train_v2_bridge.PreemptionCallback is not None,
        "barrier_in_controller": train_v2_bridge.SynchronizationBarrier is not None,
        "no_idle_dataset_manager": train_v2_bridge.DATASET_MANAGER_PER_GROUP,
        "validate_fn_refused": "validate_fn"
        in inspect.signature(ray.train.report).parameters,
    }
    assert {row[0] for row in V2_DIFFERENCES} == set(does)
    minor = _compat.RAY_VERSION.release[:2]
    for key, _, since, until, _ in V2_DIFFERENCES:
        says = tuple(map(int, since.split("."))) <= minor and (
            until is None or minor <= tuple(map(int, until.split(".")))
        )
        assert does[key] is says, (key, _compat.RAY_VERSION)


@pytest.mark.quick
@pytest.mark.compat_tier
def test_the_v2_entries_of_the_override_map_resolve():
    """Train V2's entries that ray_tt_ext uses on this Ray (``since`` .. ``until``):
    Ray's attribute is where the map says (as ``check-ray`` looks it up), and
    ray_tt_ext's is a callable of the modules this session imports."""
    from ray_tt_ext import _compat
    from ray_tt_ext._compat import ray_check

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    from test_compat_map import resolve

    v2_entries = [
        e
        for e in _compat.RAY_OVERRIDES
        if ray_check.part_of(e) == ray_check.TRAIN_V2 and ray_check.applies(e)
    ]
    assert v2_entries
    assert not ray_check.missing_ray_attributes((ray_check.TRAIN_V2,))
    for entry in v2_entries:
        ours = resolve(entry.ours)
        assert callable(ours) or isinstance(ours, property), entry.ours
