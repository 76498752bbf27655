"""No reported checkpoint is lost under ``ray_tt_ext.v2.Tuner(trainer)``.

Once ``ray.train.report(..., checkpoint=...)`` returned on every rank that
reported one, that checkpoint is what the run resumes from, whatever dies
next and however soon: a worker (rank 0 or another), the Tune trial actor
(which runs the run's controller), the driver. A folder that some rank never finished
writing is never resumed from, never shown to Tune, and is moved aside as
lost progress. The loops (``v2_tune_loops.dying_loop``) never pause: each
death comes right after a report returned.

Real Train V2 under real Tune, on the session's 4-CPU local Ray; one Tuner
whose trials are the cases.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import ray
import ray.train
import ray.tune
from v2_tune_loops import dying_loop

import ray_tt_ext.v2 as v2

pytestmark = pytest.mark.usefixtures("ray_start_4_cpus")

STEPS, DIE_AFTER = 4, 1
#: case -> how it dies, its worker group, Ray Train's retries (0: Tune's retry).
CASES = {
    "worker_train": {"victim": "worker", "workers": 1, "train_retries": 1},
    "worker_tune": {"victim": "worker", "workers": 1, "train_retries": 0},
    # Dies again right after the first report of the group Ray Train restarted
    # (before Ray 2.54 that group numbers its reports from 1 again).
    "worker_twice": {
        "victim": "worker",
        "workers": 1,
        "train_retries": 2,
        "die_after": [1, 2],
    },
    "rank1_of_2": {"victim": "worker", "victim_rank": 1, "workers": 2, "train_retries": 1},
    "rank0_of_2": {"victim": "worker", "workers": 2, "train_retries": 0},
    "trial_actor": {"victim": "trial", "workers": 1, "train_retries": 0},
    "async_upload": {
        "victim": "worker",
        "workers": 1,
        "train_retries": 1,
        "upload": "async",
    },
    "mid_upload": {
        "victim": "upload",
        "victim_rank": 1,
        "workers": 2,
        "sharded": True,
        "train_retries": 1,
    },
}


def _of_case(key: str, default=None):
    return ray.tune.sample_from(
        lambda spec: CASES[spec.config.train_loop_config.case].get(key, default)
    )


def _run_config_of_case(spec) -> ray.train.RunConfig:
    retries = CASES[spec.config.train_loop_config.case]["train_retries"]
    return ray.train.RunConfig(
        failure_config=ray.train.FailureConfig(max_failures=retries),
        checkpoint_config=v2.CheckpointConfig(),
    )


def fit_cases(cases, marker_dir, reuse_actors=False, **run_config):
    trainer = v2.DataParallelTrainer(
        dying_loop,
        train_loop_config={"steps": STEPS, "die_after": DIE_AFTER},
        scaling_config=ray.train.ScalingConfig(num_workers=1),
    )
    param_space = {
        "train_loop_config": {
            "case": ray.tune.grid_search(list(cases)),
            "marker": ray.tune.sample_from(
                lambda spec: os.path.join(marker_dir, spec.config.train_loop_config.case)
            ),
            **{
                key: _of_case(key) for key in ("victim", "victim_rank", "sharded", "upload")
            },
            "die_after": _of_case("die_after", DIE_AFTER),
        },
        "scaling_config": {"num_workers": _of_case("workers")},
        "run_config": ray.tune.sample_from(_run_config_of_case),
    }
    results = v2.Tuner(
        trainer,
        param_space=param_space,
        tune_config=ray.tune.TuneConfig(reuse_actors=reuse_actors),
        run_config=ray.tune.RunConfig(
            failure_config=ray.tune.FailureConfig(max_failures=1), **run_config
        ),
    ).fit()
    return {r.config["train_loop_config"]["case"]: r for r in results}


def _read(fs, path: str) -> dict:
    with fs.open_input_stream(path) as f:
        return json.loads(f.read())


def _entries(fs, path: str, directories: bool = True) -> list[str]:
    """The folders (or the files) directly in ``path``, by name."""
    import pyarrow.fs

    kind = pyarrow.fs.FileType.Directory if directories else pyarrow.fs.FileType.File
    infos = fs.get_file_info(pyarrow.fs.FileSelector(path))
    return sorted(i.base_name for i in infos if i.type == kind)


def check_nothing_lost(case: str, result, marker_dir, fs) -> None:
    assert os.path.exists(os.path.join(marker_dir, case)), f"{case}: nothing died"
    assert result.error is None, (case, result.error)
    rows = result.metrics_dataframe
    starts = [s for s in rows["start"] if s > 0]
    # The first report after each death starts right after the last report that
    # returned; a folder some rank never finished is not one.
    deaths = CASES[case].get("die_after", [DIE_AFTER])
    resumed_at = [d if CASES[case]["victim"] == "upload" else d + 1 for d in deaths]
    assert list(dict.fromkeys(starts)) == resumed_at, (case, list(rows["start"]))
    expected = resumed_at[0]
    assert result.metrics["step"] == STEPS - 1
    if not CASES[case]["train_retries"]:
        # Tune restarted the trial; its iteration count went on from the step the
        # run resumed at (one report per step).
        resumed = next(i for i, start in enumerate(rows["start"]) if start > 0)
        assert rows["training_iteration"].iloc[resumed] == expected + 1, case
    trial = result.path
    names = _entries(fs, trial)
    checkpoints = [n for n in names if n.startswith("checkpoint_")]
    sequence = [f"checkpoint_{i:06d}" for i in range(STEPS)]
    if CASES[case]["victim"] == "upload":
        # The partial folder moved aside, intact (rank 0's part, not rank 1's),
        # when the retry's checkpoint of the same step took its name.
        lost = f"checkpoint_{DIE_AFTER:06d}.unrecorded"
        assert checkpoints == sorted([*sequence, lost]), (case, names)
        files = _entries(fs, f"{trial}/{lost}", directories=False)
        assert files == ["state.json"], files
        assert _read(fs, f"{trial}/{lost}/state.json")["step"] == DIE_AFTER
    else:
        assert checkpoints == sequence, (case, names)
    # Tune's checkpoints: every one the run recorded (also one whose report reached
    # the run but not Tune before the death), whole (every shard), none moved aside.
    seen = [c.path for c, _ in result.best_checkpoints]
    assert sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in seen) == sequence, (case, seen)
    if CASES[case].get("sharded"):
        for path in seen:
            assert _entries(fs, path, directories=False) == [
                "shard_1.json",
                "state.json",
            ], path


@pytest.mark.parametrize(
    "reuse_actors",
    [pytest.param(False, marks=pytest.mark.compat_tier), True],
    ids=["new_actors", "reuse_actors"],
)
def test_a_report_that_returned_is_never_lost_whatever_dies_next(
    storage_path, tmp_path, reuse_actors
):
    """With ``reuse_actors=True`` too: a trial actor Tune reuses, and (Ray 2.60+)
    a worker group kept from a trial that ended cleanly, lose nothing either."""
    import pyarrow.fs

    results = fit_cases(
        CASES,
        str(tmp_path),
        reuse_actors=reuse_actors,
        name="nothing_lost",
        storage_path=storage_path,
    )
    assert sorted(results) == sorted(CASES)
    for case, result in results.items():
        check_nothing_lost(case, result, str(tmp_path), pyarrow.fs.LocalFileSystem())
    # Ray Train's own retry kept the trial in one Tune attempt: the worker
    # process changed once, the run went on.
    for case in ("worker_train", "rank1_of_2", "async_upload", "mid_upload"):
        pids = list(results[case].metrics_dataframe["worker_pid"])
        assert len(set(pids)) == 2, (case, pids)
    assert len(set(results["worker_twice"].metrics_dataframe["worker_pid"])) == 3


def test_on_s3_nothing_is_lost_and_a_partial_folder_is_moved_aside(s3_server, tmp_path):
    fs = s3_server.filesystem()
    cases = {k: CASES[k] for k in ("worker_train", "mid_upload")}
    results = fit_cases(
        cases,
        str(tmp_path),
        name="nothing_lost_s3",
        storage_path="bucket/nothing_lost",
        storage_filesystem=fs,
    )
    for case, result in results.items():
        check_nothing_lost(case, result, str(tmp_path), fs)


@pytest.mark.parametrize(
    "scored",
    [pytest.param(False, marks=pytest.mark.extended), True],
    ids=["in_order", "by_score"],
)
def test_restore_after_the_driver_is_killed_resumes_from_the_last_report(
    storage_path, tmp_path, scored
):
    """The driver dies right after rank 0's report of step 1 returned (killed with
    SIGKILL, its trial with it): ``v2.Tuner.restore`` resumes from that step,
    whatever Tune had recorded before. With a ``checkpoint_score_attribute``
    too, whose order is not the order the run recorded its checkpoints in (Ray
    < 2.54 keeps no report indices in its snapshot: ray_tt_ext's entry does)."""
    # dying_loop's loss orders its steps 0, 3, 2, 1
    policy = (
        {"checkpoint_score_attribute": "loss", "checkpoint_score_order": "min"}
        if scored
        else {}
    )
    marker = tmp_path / "reported"
    experiment = Path(storage_path, "driver_killed")
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import ray, ray.train, ray.tune
        import ray_tt_ext.v2 as v2
        from v2_tune_loops import dying_loop

        ray.init(address={ray.get_runtime_context().gcs_address!r})
        trainer = v2.DataParallelTrainer(
            dying_loop,
            train_loop_config={{"steps": {STEPS}, "die_after": {DIE_AFTER},
                                "victim": "driver", "marker": {str(marker)!r}}},
            scaling_config=ray.train.ScalingConfig(num_workers=1),
            run_config=ray.train.RunConfig(checkpoint_config=v2.CheckpointConfig(**{policy!r})),
        )
        v2.Tuner(trainer, run_config=ray.tune.RunConfig(
            name="driver_killed", storage_path={storage_path!r})).fit()
        """
    )
    driver = subprocess.Popen([sys.executable, "-c", script])
    try:
        # The loop writes the marker right after its report returned, then waits;
        # Tune must have written the experiment's state once to be restorable.
        deadline = time.monotonic() + 180
        while not (marker.exists() and list(experiment.glob("experiment_state*.json"))):
            assert driver.poll() is None, "the driver ended before its report"
            assert time.monotonic() < deadline, "no report within 180 s"
            time.sleep(0.1)  # polling for the files, not pacing the run
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    trainer = v2.DataParallelTrainer(  # the same trainer, as restore needs it
        dying_loop,
        train_loop_config={
            "steps": STEPS,
            "die_after": DIE_AFTER,
            "victim": "driver",
            "marker": str(marker),
        },
        scaling_config=ray.train.ScalingConfig(num_workers=1),
        run_config=ray.train.RunConfig(checkpoint_config=v2.CheckpointConfig(**policy)),
    )
    tuner = v2.Tuner.restore(str(experiment), trainer, resume_unfinished=True)
    (result,) = tuner.fit()
    assert result.error is None
    starts = [s for s in result.metrics_dataframe["start"] if s > 0]
    assert starts[0] == DIE_AFTER + 1, list(result.metrics_dataframe["start"])
    assert result.metrics["step"] == STEPS - 1
    # Tune records every checkpoint of the run, step 1's too, whether or not the
    # killed driver had heard of it.
    names = sorted(os.path.basename(c.path.rstrip("/")) for c, _ in result.best_checkpoints)
    assert names == [f"checkpoint_{i:06d}" for i in range(STEPS)], names
