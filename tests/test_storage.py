"""Checkpoint indexing and naming: policies, sync, failures, restores, bad input.

Upstream: ray-project/ray#39927 (checkpoint index bookkeeping).
"""

from __future__ import annotations

import json
import math
import os
import pickle
import shutil
import tempfile
import time
from pathlib import Path

import pyarrow.fs
import pytest
import ray
import ray.train
import ray.tune
import tune_api
from helpers import ClassTrainable, CountingFileSystem, report_loop, trial_folders
from hypothesis import given, settings
from hypothesis import strategies as st

import ray_tt_ext
from ray_tt_ext import CheckpointConfig, StorageContext, Tuner
from ray_tt_ext._compat import Experiment
from ray_tt_ext._compat import StorageContext as RayStorageContext
from ray_tt_ext._naming import (
    index_pattern,
    next_index,
    render_dir_name,
    template_fields,
    validate_dir_name,
)

# -- pure policy functions (hypothesis) -------------------------------------------

metric_values = st.one_of(
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=300),
    st.sampled_from(["../../evil", "/etc/passwd", "..", ".", "", "a\x00b", "x" * 300]),
)
templates = st.sampled_from(
    [
        "checkpoint_{index:06d}",
        "ckpt-{index}-{value}",
        "{value}",
        "checkpoint_{training_iteration:06d}-{loss:.2f}",
        "c{index}_{value!s}",
    ]
)


@pytest.mark.quick
@settings(max_examples=300, deadline=None)
@given(
    template=templates, index=st.integers(0, 10**9), value=metric_values, loss=st.floats()
)
def test_rendered_name_is_one_safe_path_component_or_rejected(template, index, value, loss):
    metrics = {"value": value, "loss": loss, "training_iteration": index}
    try:
        name = render_dir_name(template, index, metrics)
    except ValueError:
        return
    assert name not in ("", ".", "..")
    assert "/" not in name and "\\" not in name and "\x00" not in name
    assert len(name.encode()) <= 255
    assert Path("/trial", name).parent == Path("/trial")


@pytest.mark.quick
@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.integers(-5, 50), st.floats(allow_nan=True)), max_size=20))
def test_index_sequence_strictly_increases_or_is_rejected(values):
    current, seen = -1, []
    for value in values:
        try:
            current = next_index("step", current, {"step": value})
        except ValueError:
            continue
        seen.append(current)
    assert seen == sorted(set(seen))
    current = -1
    for _ in range(5):
        current = next_index("sequential", current, {})
    assert current == 4


@pytest.mark.quick
@given(st.integers(0, 10**7))
def test_index_reads_back_from_template_names(index):
    for template in [
        "checkpoint_{index:06d}",
        "ck-{index}-{loss:.2f}",
        "x{loss}_{index:03d}",
    ]:
        name = render_dir_name(template, index, {"loss": 0.5})
        assert int(index_pattern(template).match(name).group("index")) == index


@pytest.mark.quick
def test_template_syntax_and_fields():
    assert template_fields("checkpoint_{training_iteration:06d}-{loss:.2f}") == {
        "training_iteration",
        "loss",
    }
    for bad in ["ck-{", "ck-{}", "ck-{0}", "ck-{loss:{w}}"]:
        with pytest.raises(ValueError):
            template_fields(bad)


@pytest.mark.quick
@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(checkpoint_dir_name="ck-{"), "not valid str.format"),
        (dict(checkpoint_dir_name="ck-{}"), "positional"),
        (dict(checkpoint_dir_name="a/{index}"), "path separator"),
        (dict(checkpoint_dir_name=5), "template or a callable"),
        (dict(checkpoint_index=""), "checkpoint_index"),
        (dict(checkpoint_index=3), "checkpoint_index"),
    ],
)
def test_checkpoint_config_rejects_bad_policies_at_construction(kwargs, match):
    with pytest.raises(ValueError, match=match):
        CheckpointConfig(**kwargs)


@pytest.mark.quick
def test_nan_and_inf_render_as_python_spells_them_and_cannot_be_an_index():
    assert render_dir_name("l_{loss:.2f}", 0, {"loss": math.nan}) == "l_nan"
    assert render_dir_name("l_{loss}", 0, {"loss": -math.inf}) == "l_-inf"
    with pytest.raises(ValueError, match="NaN and infinities"):
        next_index("loss", 0, {"loss": math.nan})


@pytest.mark.quick
def test_missing_field_names_the_field_and_the_keys():
    with pytest.raises(ValueError) as info:
        render_dir_name("ck-{accuracy:.2f}", 1, {"loss": 0.1, "step": 3})
    assert "'accuracy'" in str(info.value)
    assert "['index', 'loss', 'step']" in str(info.value)


@pytest.mark.quick
@pytest.mark.parametrize(
    "name", ["", ".", "..", "a/b", "a\\b", "a\x00b", "é" * 200, "a\nb"]
)
def test_unsafe_names_are_rejected(name):
    with pytest.raises(ValueError, match="single path"):
        validate_dir_name(name)


@pytest.mark.quick
def test_callable_policies_get_a_copy_of_the_metrics_and_the_same_checks():
    """docs/guide/checkpoint-names.md, "Checkpoint indexing and naming": ``checkpoint_index`` and
    ``checkpoint_dir_name`` may be callables; what they return is checked as a
    metric's value or a template's rendering is."""
    metrics = {"step": 4, "loss": 0.25}
    seen = []

    def index(current, m):
        seen.append(m)
        m["step"] = "mutated"  # the caller's metrics are not the callable's
        return current + 10

    assert next_index(index, 2, metrics) == 12
    assert metrics["step"] == 4 and seen[0] is not metrics
    assert render_dir_name(lambda i, m: f"c{i}-{m['loss']}", 3, metrics) == "c3-0.25"
    with pytest.raises(ValueError, match="strictly increase.*checkpoint_index callable"):
        next_index(lambda current, m: current, 5, metrics)
    with pytest.raises(ValueError, match="must be an integer.*checkpoint_index callable"):
        next_index(lambda current, m: "7", 5, metrics)
    with pytest.raises(ValueError, match="single path component"):
        render_dir_name(lambda i, m: "../outside", 1, metrics)


# -- reconciliation with the disk (real StorageContext, shipped as Tune ships it) ----


@pytest.mark.quick
def test_persisted_index_reconciles_with_folders_on_disk(tmp_path):
    storage = StorageContext(
        storage_path=str(tmp_path),
        experiment_dir_name="exp",
        trial_dir_name="trial",
        current_checkpoint_index=245,
    )
    for i in range(246, 251):
        (tmp_path / "exp" / "trial" / f"checkpoint_{i:06d}").mkdir(parents=True)
    shipped = pickle.loads(pickle.dumps(storage))  # Tune -> trial actor
    metrics = {}
    shipped._update_checkpoint_index(metrics)
    assert shipped.current_checkpoint_index == 251
    assert shipped.checkpoint_dir_name == "checkpoint_000251"
    assert metrics == {"checkpoint_dir_name": "checkpoint_000251", "checkpoint_index": 251}


class EveryTenthStorageContext(StorageContext):
    """A policy of one's own (docs/guide/checkpoint-names.md, "Your own policy"): the two hooks."""

    def _next_checkpoint_index(self, metrics):
        return self.current_checkpoint_index + 10

    def _render_checkpoint_dir_name(self, index, metrics):
        return f"ckpt-{index}-{metrics.get('tag', 'none')}"


@pytest.mark.quick
def test_a_storage_context_subclass_overrides_the_index_and_the_name(tmp_path):
    storage = EveryTenthStorageContext(
        storage_path=str(tmp_path),
        experiment_dir_name="exp",
        trial_dir_name="trial",
        current_checkpoint_index=0,
    )
    (tmp_path / "exp" / "trial" / "ckpt-20-b").mkdir(parents=True)  # not the trial's
    shipped = pickle.loads(pickle.dumps(storage))  # Tune -> trial actor
    metrics = {"tag": "a"}
    shipped._update_checkpoint_index(metrics)
    assert shipped.current_checkpoint_index == 10
    assert shipped.checkpoint_dir_name == "ckpt-10-a"
    assert metrics == {
        "tag": "a",
        "checkpoint_dir_name": "ckpt-10-a",
        "checkpoint_index": 10,
    }
    # The hooks' results get the same checks as the built-in policies: a folder
    # the trial never recorded is never written into, and nothing moves.
    with pytest.raises(ValueError, match="ckpt-20-b.*Refusing to overwrite"):
        shipped._update_checkpoint_index({"tag": "b"})
    assert shipped.current_checkpoint_index == 10
    assert (tmp_path / "exp" / "trial" / "ckpt-20-b").is_dir()
    with pytest.raises(ValueError, match="single path component"):
        shipped._update_checkpoint_index({"tag": "../outside"})
    assert sorted(p.name for p in (tmp_path / "exp" / "trial").iterdir()) == ["ckpt-20-b"]


@pytest.mark.quick
def test_existing_folder_is_never_reused_by_a_custom_name(tmp_path):
    storage = StorageContext(
        storage_path=str(tmp_path),
        experiment_dir_name="exp",
        trial_dir_name="trial",
        checkpoint_dir_name="best-{loss:.1f}",
    )
    (tmp_path / "exp" / "trial" / "best-0.5").mkdir(parents=True)
    shipped = pickle.loads(pickle.dumps(storage))
    with pytest.raises(ValueError, match="Refusing to overwrite"):
        shipped._update_checkpoint_index({"loss": 0.5})
    shipped._update_checkpoint_index({"loss": 0.4})
    assert shipped.checkpoint_dir_name == "best-0.4"


@pytest.mark.quick
def test_lost_progress_in_the_way_of_a_metric_index_is_moved_aside(tmp_path, caplog):
    import logging

    storage = StorageContext(
        storage_path=str(tmp_path),
        experiment_dir_name="exp",
        trial_dir_name="trial",
        checkpoint_index="step",
        current_checkpoint_index=2,  # the trial recorded steps 0..2
    )
    storage._used_checkpoint_dir_names |= {f"checkpoint_{i:06d}" for i in range(3)}
    trial = tmp_path / "exp" / "trial"
    for i in range(4):  # step 3 was persisted, never recorded
        (trial / f"checkpoint_{i:06d}").mkdir(parents=True)
        (trial / f"checkpoint_{i:06d}" / "f").write_text(str(i))
    (trial / "checkpoint_000003.unrecorded").mkdir()  # an earlier one, kept too
    shipped = pickle.loads(pickle.dumps(storage))
    with caplog.at_level(logging.WARNING, logger="ray_tt_ext"):
        shipped._update_checkpoint_index({"step": 3})
    assert shipped.checkpoint_dir_name == "checkpoint_000003"
    assert not (trial / "checkpoint_000003").exists()  # free for the rerun
    moved = trial / "checkpoint_000003.unrecorded-2"
    assert (moved / "f").read_text() == "3"  # intact
    assert (trial / "checkpoint_000003.unrecorded").is_dir()
    (message,) = [r.getMessage() for r in caplog.records]
    assert str(trial / "checkpoint_000003") in message and str(moved) in message
    # Recorded folders are never touched.
    assert all(
        (trial / f"checkpoint_{i:06d}" / "f").read_text() == str(i) for i in range(3)
    )


@pytest.mark.quick
def test_sequential_index_skips_lost_progress_instead(tmp_path):
    storage = StorageContext(
        storage_path=str(tmp_path), experiment_dir_name="exp", trial_dir_name="trial"
    )
    (tmp_path / "exp" / "trial" / "checkpoint_000000").mkdir(parents=True)
    shipped = pickle.loads(pickle.dumps(storage))
    shipped._update_checkpoint_index({})
    assert shipped.checkpoint_dir_name == "checkpoint_000001"
    assert (tmp_path / "exp" / "trial" / "checkpoint_000000").is_dir()


@pytest.mark.quick
def test_each_trial_folder_is_listed_once_per_process(tmp_path):
    handler = CountingFileSystem(pyarrow.fs.LocalFileSystem())
    storage = StorageContext(
        storage_path=str(tmp_path / "s"),
        experiment_dir_name="exp",
        trial_dir_name="listed_once",
        storage_filesystem=pyarrow.fs.PyFileSystem(handler),
    )
    before = handler.counts["list"]
    for _ in range(5):  # Tune and Train unpickle the context many times
        copy = pickle.loads(pickle.dumps(storage))
        copy._update_checkpoint_index({})
    assert handler.counts["list"] - before == 1


@pytest.mark.quick
def test_a_listing_error_is_an_error_naming_the_path(tmp_path):
    handler = CountingFileSystem(pyarrow.fs.LocalFileSystem(), fail_listing=True)
    storage = StorageContext(
        storage_path=str(tmp_path / "s"),
        experiment_dir_name="exp",
        trial_dir_name="unlistable",
        storage_filesystem=pyarrow.fs.PyFileSystem(handler),
    )
    shipped = pickle.loads(pickle.dumps(storage))
    with pytest.raises(OSError, match="Could not list the trial folder .*unlistable"):
        shipped._update_checkpoint_index({})
    assert handler.counts["list"] == 1


@pytest.mark.quick
def test_copies_for_trials_do_not_share_bookkeeping(tmp_path):
    import copy

    storage = StorageContext(storage_path=str(tmp_path), experiment_dir_name="exp")
    a, b = copy.copy(storage), copy.copy(storage)
    a.trial_dir_name, b.trial_dir_name = "a", "b"
    a._update_checkpoint_index({})
    b._update_checkpoint_index({})
    assert a.checkpoint_dir_name == b.checkpoint_dir_name == "checkpoint_000000"


# -- on a real Ray: the three trainable kinds ------------------------------------------


def _assert_in_sync(result, expected_names, reported=True):
    """Disk, Result.checkpoint, best_checkpoints, reported metrics and the Trial agree.

    ``best_checkpoints`` is the driver Trial's bookkeeping (its checkpoint
    manager); ``reported`` checks the ``checkpoint_dir_name`` column of the
    reported results (function and Train trainables report it per result).
    """
    assert trial_folders(result.path) == sorted(expected_names)
    best = [os.path.basename(c.path) for c, _ in result.best_checkpoints]
    assert best == expected_names
    for checkpoint, metrics in result.best_checkpoints:
        assert metrics["checkpoint_dir_name"] == os.path.basename(checkpoint.path)
    assert os.path.basename(result.checkpoint.path) == expected_names[-1]
    if reported:
        df = result.metrics_dataframe
        names = [n for n in df["checkpoint_dir_name"] if isinstance(n, str)]
        assert names == expected_names


def test_ray_39927s_example_class_trainable_indexed_by_training_iteration(
    ray_start_4_cpus, storage_path
):
    tuner = Tuner(
        ClassTrainable,
        run_config=tune_api.RunConfig(
            storage_path=storage_path,
            name="seed",
            verbose=0,
            stop={"training_iteration": 100},
            checkpoint_config=CheckpointConfig(
                checkpoint_frequency=5, checkpoint_index="training_iteration"
            ),
        ),
    )
    result = tuner.fit()[0]
    assert result.error is None
    expected = [f"checkpoint_{i:06d}" for i in range(5, 101, 5)]
    _assert_in_sync(result, expected, reported=False)  # class trainables: per checkpoint
    with open(Path(result.checkpoint.path, "state.json")) as f:
        assert json.load(f)["iteration"] == 100  # the folder holds its own step


def _by_iteration(storage_path, name, **kwargs):
    return tune_api.RunConfig(
        storage_path=storage_path,
        name=name,
        verbose=0,
        checkpoint_config=CheckpointConfig(
            checkpoint_index="training_iteration",
            checkpoint_dir_name="checkpoint_{training_iteration:06d}",
            **kwargs.pop("checkpoint", {}),
        ),
        **kwargs,
    )


@pytest.mark.parametrize("kind", ["class", "function", "data_parallel"])
def test_training_iteration_index_for_every_trainable_kind(
    ray_start_4_cpus, storage_path, kind
):
    from helpers import function_trainable

    name = f"iter_{kind}"
    if kind == "class":
        tuner = Tuner(
            ClassTrainable,
            run_config=_by_iteration(
                storage_path,
                name,
                stop={"training_iteration": 4},
                checkpoint={"checkpoint_frequency": 1},
            ),
        )
    elif kind == "function":
        tuner = Tuner(
            function_trainable,
            param_space={"num_reports": 4},
            run_config=_by_iteration(storage_path, name),
        )
    else:
        tuner = Tuner(
            ray_tt_ext.DataParallelTrainer(
                report_loop,
                train_loop_config={"num_reports": 4},
                scaling_config=ray.train.ScalingConfig(num_workers=2),
            ),
            run_config=_by_iteration(storage_path, name),
        )
    result = tuner.fit()[0]
    assert result.error is None
    expected = [f"checkpoint_{i:06d}" for i in range(1, 5)]
    _assert_in_sync(result, expected, reported=kind != "class")
    for checkpoint, metrics in result.best_checkpoints:
        # Each folder is named by the iteration Tune recorded for it.
        assert checkpoint.path.endswith(f"checkpoint_{metrics['training_iteration']:06d}")


def test_training_iteration_index_continues_after_a_failure(
    ray_start_4_cpus, storage_path, tmp_path
):
    from helpers import function_trainable_failing_once

    result = Tuner(
        function_trainable_failing_once,
        param_space={"num_reports": 5, "fail_at": 3, "marker": str(tmp_path / "failed")},
        run_config=_by_iteration(
            storage_path,
            "iter_retry",
            failure_config=tune_api.FailureConfig(max_failures=1),
        ),
    ).fit()[0]
    assert result.error is None
    assert os.path.exists(tmp_path / "failed")
    expected = [f"checkpoint_{i:06d}" for i in range(1, 6)]
    _assert_in_sync(result, expected)
    for i, name in enumerate(expected):
        with open(Path(result.path, name, "state.json")) as f:
            assert json.load(f)["step"] == i  # iteration i + 1 ran step i


class Ray39927StorageContext(StorageContext):
    """The override of ray-project/ray#39927 (its workaround), verbatim, on ray_tt_ext.StorageContext."""

    def _update_checkpoint_index(self, metrics):
        self.current_checkpoint_index = metrics.get(
            "training_iteration", self.current_checkpoint_index + 1
        )


def test_ray_39927s_storage_context_subclass_works_without_monkey_patching(
    ray_start_4_cpus, storage_path
):
    before = Experiment.__dict__["_storage_context_cls"]
    result = Tuner(
        ClassTrainable,
        storage_context_cls=Ray39927StorageContext,
        run_config=tune_api.RunConfig(
            storage_path=storage_path,
            name="seedcls",
            verbose=0,
            stop={"training_iteration": 20},
            checkpoint_config=tune_api.CheckpointConfig(checkpoint_frequency=5),
        ),
    ).fit()[0]
    assert result.error is None
    assert trial_folders(result.path) == [f"checkpoint_{i:06d}" for i in (5, 10, 15, 20)]
    assert Experiment.__dict__["_storage_context_cls"] is before is RayStorageContext


@pytest.mark.quick
def test_function_trainable_template_names_in_sync(ray_start_4_cpus, storage_path):
    from helpers import function_trainable

    result = Tuner(
        function_trainable,
        param_space={"num_reports": 4},
        run_config=tune_api.RunConfig(
            storage_path=storage_path,
            name="fn",
            verbose=0,
            checkpoint_config=CheckpointConfig(
                checkpoint_index="step", checkpoint_dir_name="ckpt-{index:03d}-{loss:.3f}"
            ),
        ),
    ).fit()[0]
    assert result.error is None
    expected = ["ckpt-000-1.000", "ckpt-001-0.500", "ckpt-002-0.333", "ckpt-003-0.250"]
    _assert_in_sync(result, expected)
    for name in expected:
        with open(Path(result.path, name, "state.json")) as f:
            assert json.load(f)["step"] == int(name[5:8])


def test_data_parallel_trainer_uses_rank_0_metrics(ray_start_4_cpus, storage_path):
    trainer = ray_tt_ext.DataParallelTrainer(
        report_loop,
        # Every rank reports; each reports its own rank, and all checkpoint.
        train_loop_config={
            "num_reports": 3,
            "report_rank": True,
            "all_ranks_checkpoint": True,
        },
        scaling_config=ray.train.ScalingConfig(num_workers=2),
    )
    result = Tuner(
        trainer,
        run_config=tune_api.RunConfig(
            storage_path=storage_path,
            name="dpt",
            verbose=0,
            checkpoint_config=CheckpointConfig(
                checkpoint_dir_name="step{step}-{index:02d}"
            ),
        ),
    ).fit()[0]
    assert result.error is None
    _assert_in_sync(result, ["step0-00", "step1-01", "step2-02"])
    # What the driver recorded, with each checkpoint and per result, is rank 0's.
    assert list(result.metrics_dataframe["rank"]) == [0, 0, 0]
    assert [m["rank"] for _, m in result.best_checkpoints] == [0, 0, 0]


def test_workers_rendering_different_names_get_a_clear_error(
    ray_start_4_cpus, storage_path
):
    def loop(config):
        rank = ray.train.get_context().get_world_rank()
        with tempfile.TemporaryDirectory() as d:
            Path(d, "f").write_text(str(rank))
            ray.train.report(
                {"rank_loss": float(rank)},
                checkpoint=ray.train.Checkpoint.from_directory(d),
            )

    result = Tuner(
        ray_tt_ext.DataParallelTrainer(
            loop, scaling_config=ray.train.ScalingConfig(num_workers=2)
        ),
        run_config=tune_api.RunConfig(
            storage_path=storage_path,
            name="disagree",
            verbose=0,
            checkpoint_config=CheckpointConfig(checkpoint_dir_name="ck-{rank_loss}"),
        ),
    ).fit()[0]
    assert isinstance(result.error, Exception)
    assert "uploaded one checkpoint to different folders" in str(result.error)


# -- failures and restores ---------------------------------------------------------------


def test_a_metric_indexed_trial_that_lost_progress_finishes(
    ray_start_4_cpus, storage_path, tmp_path
):
    from helpers import function_trainable_losing_progress_once

    result = Tuner(
        function_trainable_losing_progress_once,
        param_space={"num_reports": 4, "fail_at": 2, "marker": str(tmp_path / "lost")},
        run_config=tune_api.RunConfig(
            storage_path=storage_path,
            name="lost",
            verbose=0,
            failure_config=tune_api.FailureConfig(max_failures=1),
            checkpoint_config=CheckpointConfig(
                checkpoint_index="step", checkpoint_dir_name="ckpt_{index:06d}"
            ),
        ),
    ).fit()[0]
    assert os.path.exists(tmp_path / "lost")
    assert result.error is None
    names = [f"ckpt_{i:06d}" for i in range(4)]
    assert trial_folders(result.path) == sorted([*names, "ckpt_000002.unrecorded"])
    with open(Path(result.path, "ckpt_000002.unrecorded", "state.json")) as f:
        assert json.load(f) == {"step": 2, "lost": True}
    with open(Path(result.path, "ckpt_000002", "state.json")) as f:
        assert json.load(f) == {"step": 2}
    assert [os.path.basename(c.path) for c, _ in result.best_checkpoints] == names


def _fn_tuner(storage_path, name, tmp_path, max_failures=0, **config):
    from helpers import function_trainable_failing_once

    return Tuner(
        function_trainable_failing_once,
        param_space={"marker": str(tmp_path / f"{name}.failed"), **config},
        run_config=tune_api.RunConfig(
            storage_path=storage_path,
            name=name,
            verbose=0,
            failure_config=tune_api.FailureConfig(max_failures=max_failures),
            checkpoint_config=CheckpointConfig(
                checkpoint_dir_name="ck-{index:04d}-s{step}"
            ),
        ),
    )


def _assert_each_checkpoint_holds_its_own_step(trial_path):
    for name in trial_folders(trial_path):
        step = int(name.rsplit("-s", 1)[1])
        with open(Path(trial_path, name, "state.json")) as f:
            assert json.load(f)["step"] == step


def test_indices_continue_after_a_trial_failure(ray_start_4_cpus, storage_path, tmp_path):
    result = _fn_tuner(
        storage_path, "retry", tmp_path, max_failures=1, num_reports=5, fail_at=3
    ).fit()[0]
    assert result.error is None
    names = trial_folders(result.path)
    assert names == [f"ck-{i:04d}-s{i}" for i in range(5)]
    _assert_each_checkpoint_holds_its_own_step(result.path)
    _assert_in_sync(result, names)


def test_restore_continues_indices_and_never_overwrites(
    ray_start_4_cpus, storage_path, tmp_path
):
    from helpers import function_trainable_failing_once

    first = _fn_tuner(storage_path, "restore", tmp_path, num_reports=5, fail_at=3).fit()[0]
    assert first.error is not None
    trial_path = Path(first.path)
    assert trial_folders(trial_path) == ["ck-0000-s0", "ck-0001-s1", "ck-0002-s2"]
    # Folders the driver never recorded (e.g. written just before a crash).
    for i in (3, 4):
        stray = trial_path / f"ck-{i:04d}-s9{i}"
        stray.mkdir()
        (stray / "state.json").write_text(json.dumps({"step": 90 + i}))
    mtimes = {p.name: p.stat().st_mtime_ns for p in trial_path.iterdir()}

    result = Tuner.restore(
        os.path.join(storage_path, "restore"),
        trainable=function_trainable_failing_once,
        resume_errored=True,
    ).fit()[0]
    assert result.error is None
    names = trial_folders(result.path)
    assert names == [
        "ck-0000-s0",
        "ck-0001-s1",
        "ck-0002-s2",
        "ck-0003-s93",
        "ck-0004-s94",
        "ck-0005-s3",
        "ck-0006-s4",
    ]
    _assert_each_checkpoint_holds_its_own_step(result.path)
    for name, mtime in mtimes.items():
        if name.startswith("ck-"):
            assert (trial_path / name).stat().st_mtime_ns == mtime, f"{name} was rewritten"


def test_moved_experiment_folder_continues_where_it_now_is(
    ray_start_4_cpus, storage_path, tmp_path
):
    from helpers import function_trainable_failing_once

    first = _fn_tuner(storage_path, "moving", tmp_path, num_reports=4, fail_at=2).fit()[0]
    assert first.error is not None
    new_home = tmp_path / "moved"
    shutil.move(os.path.join(storage_path, "moving"), new_home)
    result = Tuner.restore(
        str(new_home), trainable=function_trainable_failing_once, resume_errored=True
    ).fit()[0]
    assert result.error is None
    assert Path(result.path).parent == new_home
    assert trial_folders(result.path) == [f"ck-{i:04d}-s{i}" for i in range(4)]
    assert not os.path.exists(os.path.join(storage_path, "moving"))


def test_num_to_keep_evicts_by_index_not_by_string(ray_start_4_cpus, storage_path):
    from helpers import function_trainable

    result = Tuner(
        function_trainable,
        param_space={"num_reports": 12},
        run_config=tune_api.RunConfig(
            storage_path=storage_path,
            name="keep",
            verbose=0,
            checkpoint_config=CheckpointConfig(
                num_to_keep=2, checkpoint_dir_name="ck-{index}"
            ),
        ),
    ).fit()[0]
    assert result.error is None
    assert trial_folders(result.path) == ["ck-10", "ck-11"]
    assert [os.path.basename(c.path) for c, _ in result.best_checkpoints] == [
        "ck-10",
        "ck-11",
    ]


# -- bad input on a real Ray: a clear error, nothing lost ----------------------------------


def _run_fn(storage_path, name, template, **config):
    from helpers import function_trainable

    return Tuner(
        function_trainable,
        param_space=config,
        run_config=tune_api.RunConfig(
            storage_path=storage_path,
            name=name,
            verbose=0,
            checkpoint_config=CheckpointConfig(checkpoint_dir_name=template),
        ),
    ).fit()[0]


def test_missing_template_field_fails_the_trial_and_writes_nothing(
    ray_start_4_cpus, storage_path
):
    result = _run_fn(storage_path, "missing", "ck-{accuracy:.2f}", num_reports=2)
    assert "'accuracy'" in str(result.error)
    assert "Available keys" in str(result.error)
    assert [n for n in trial_folders(result.path) if n.startswith("ck")] == []


def test_metric_escaping_the_trial_folder_is_refused(ray_start_4_cpus, storage_path):
    result = _run_fn(
        storage_path, "escape", "{tag}", num_reports=1, extra={"tag": "../../evil"}
    )
    assert "single path component" in str(result.error)
    root = Path(storage_path)
    assert not list(root.rglob("evil")), "something was written outside the trial folder"
    assert not (root.parent / "evil").exists()


def test_two_checkpoints_with_one_name_never_overwrite(ray_start_4_cpus, storage_path):
    result = _run_fn(storage_path, "dup", "ck-{tag}", num_reports=3, extra={"tag": "same"})
    assert "Refusing to overwrite" in str(result.error)
    assert trial_folders(result.path).count("ck-same") == 1
    with open(Path(result.path, "ck-same", "state.json")) as f:
        assert json.load(f)["step"] == 0  # the first checkpoint, untouched


def test_policies_of_two_tuners_in_threads_do_not_interfere_and_ray_is_restored(
    ray_start_4_cpus, storage_path
):
    import threading

    from helpers import function_trainable

    before = Experiment.__dict__["_storage_context_cls"]
    results, errors = {}, []
    start = threading.Barrier(3)

    def run(name, template, delay):
        try:
            start.wait(timeout=60)
            # Tune's own trainable registry is not thread-safe (two threads
            # registering at the same instant fail in Ray's flush_values, with
            # ray.tune.Tuner alone too): the fits start a moment apart.
            time.sleep(delay)
            if template is None:  # a plain Ray Tuner beside them
                results[name] = ray.tune.Tuner(
                    function_trainable,
                    param_space={"num_reports": 4, "sleep_s": 1.5},
                    run_config=tune_api.RunConfig(
                        storage_path=storage_path, name=name, verbose=0
                    ),
                ).fit()[0]
            else:
                results[name] = _run_fn(
                    storage_path, name, template, num_reports=4, sleep_s=1.5
                )
        except BaseException as e:  # reported below, with the thread's name
            errors.append((name, e))

    threads = [
        threading.Thread(target=run, args=args)
        for args in [
            ("a", "alpha-{index}", 0),
            ("b", "beta-{index}", 1),
            ("plain", None, 2),
        ]
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    assert not errors, errors
    assert all(r.error is None for r in results.values()), results
    # The three fits overlapped in time.
    spans = [
        (r.metrics_dataframe["timestamp"].min(), r.metrics_dataframe["timestamp"].max())
        for r in results.values()
    ]
    assert max(s for s, _ in spans) <= min(e for _, e in spans)
    assert trial_folders(results["a"].path) == [f"alpha-{i}" for i in range(4)]
    assert trial_folders(results["b"].path) == [f"beta-{i}" for i in range(4)]
    assert trial_folders(results["plain"].path) == [f"checkpoint_{i:06d}" for i in range(4)]
    assert Experiment.__dict__["_storage_context_cls"] is before


@pytest.mark.quick
def test_a_plain_fit_that_read_the_dispatcher_just_before_uninstall_gets_rays_class(
    tmp_path,
):
    from ray_tt_ext._storage import checkpoint_policy_installed

    with checkpoint_policy_installed(CheckpointConfig(checkpoint_dir_name="x{index}")):
        # Another thread's plain Tune fit reads the class while ours is installed...
        read_by_plain_fit = Experiment._storage_context_cls
    # ... and builds its context after our fit ended.
    storage = read_by_plain_fit(storage_path=str(tmp_path), experiment_dir_name="exp")
    assert type(storage) is RayStorageContext


def test_ray_global_is_restored_when_fit_raises(ray_start_4_cpus, storage_path):
    before = Experiment.__dict__["_storage_context_cls"]
    tuner = Tuner(
        lambda config: None,
        run_config=tune_api.RunConfig(
            storage_path=storage_path,
            name="raises",
            verbose=0,
            checkpoint_config=CheckpointConfig(checkpoint_dir_name="x{index}"),
        ),
        _tuner_kwargs={"not_an_argument_of_tune_run": 1},
    )
    with pytest.raises(TypeError):
        tuner.fit()
    assert Experiment.__dict__["_storage_context_cls"] is before


@pytest.mark.extended
def test_trainer_fit_uses_the_policy_too(ray_start_4_cpus, storage_path):
    """`trainer.fit()` (Ray's own Tuner inside) names checkpoints by the policy."""
    trainer = ray_tt_ext.DataParallelTrainer(
        report_loop,
        train_loop_config={"num_reports": 2},
        scaling_config=ray.train.ScalingConfig(num_workers=1),
        run_config=tune_api.RunConfig(
            storage_path=storage_path,
            name="trainer_fit",
            verbose=0,
            checkpoint_config=CheckpointConfig(checkpoint_dir_name="fit-{step}"),
        ),
    )
    before = Experiment.__dict__["_storage_context_cls"]
    result = trainer.fit()
    assert trial_folders(result.path) == ["fit-0", "fit-1"]
    assert Experiment.__dict__["_storage_context_cls"] is before
