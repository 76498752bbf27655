"""Checkpoint retention across the whole sweep: ``ray_tt_ext.CheckpointConfig(
sweep_num_to_keep=..., sweep_max_bytes=...)`` with ``ray_tt_ext.Tuner`` (the Train V2
side: tests/v2/test_sweep_retention_v2.py)."""

from __future__ import annotations

import json
import logging
import os
import posixpath
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Optional

import pytest
import ray
import ray.tune
import tune_api
from helpers import (
    SavedStateNamesOnlyWhatExists,
    checkpoint_folders,
    quiet_run_config,
    sweep_loop,
)
from ray.tune.schedulers import HyperBandScheduler, PopulationBasedTraining

import ray_tt_ext
from ray_tt_ext import CheckpointConfig, Tuner
from ray_tt_ext._sweep import DELETING

STEPS = 5
XS = [1, 2, 3, 4, 5, 6]


def _tuner(storage_path, name, checkpoint_config, *, xs=XS, tune_config=None, **config):
    """A sweep over ``sweep_loop`` whose saved state is checked at each result
    (``SavedStateNamesOnlyWhatExists``) when only the sweep deletes checkpoints."""
    root = os.path.join(storage_path, name)
    return Tuner(
        sweep_loop,
        param_space={"x": ray.tune.grid_search(xs), "steps": STEPS, "root": root, **config},
        tune_config=tune_config
        or ray.tune.TuneConfig(metric="score", mode="max", max_concurrent_trials=2),
        run_config=quiet_run_config(
            storage_path,
            name,
            checkpoint_config=checkpoint_config,
            callbacks=[]
            if checkpoint_config.num_to_keep  # Tune's own deletions: see the callback
            else [SavedStateNamesOnlyWhatExists(root)],
        ),
    )


def _kept(grid) -> dict[int, list[str]]:
    """Each trial's checkpoints as the ResultGrid names them, checked to exist."""
    kept = {}
    for result in grid:
        assert result.error is None, result.error
        paths = [c.path for c, _ in result.best_checkpoints]
        if result.checkpoint is not None:
            paths.append(result.checkpoint.path)
        for path in paths:
            assert os.path.isdir(path), f"the ResultGrid names a deleted folder: {path}"
        kept[result.config["x"]] = sorted({os.path.basename(p) for p in paths})
    return kept


@pytest.mark.extended
def test_the_sweep_keeps_its_best_and_what_running_trials_need(
    ray_start_4_cpus, storage_path, monkeypatch
):
    """2 trials at a time, 6 trials of 5 checkpoints: the 2 best of the sweep (both
    trial x=6's: several may be one trial's) and the running trials' latest are
    on disk at every report, everything else is deleted while the sweep runs;
    the ResultGrid, and the one ``Tuner.restore`` reads, name only what is kept."""
    name = "best_of_sweep"
    # The experiment's state saved every second (Ray's default: every 10 s or
    # more), so that saved states name checkpoints the sweep deletes later.
    monkeypatch.setenv("TUNE_GLOBAL_CHECKPOINT_S", "1")
    grid = _tuner(storage_path, name, CheckpointConfig(sweep_num_to_keep=2)).fit()
    kept = _kept(grid)
    assert kept == {
        1: [],
        2: [],
        3: [],
        4: [],
        5: [],
        6: ["checkpoint_000003", "checkpoint_000004"],
    }
    on_disk = [os.path.relpath(p, storage_path) for p in checkpoint_folders(storage_path)]
    assert len(on_disk) == 2 and all("x=6" in p for p in on_disk), on_disk
    # At every report: the 2 best, each running trial's latest, and the other
    # running trial's newest (written, not yet decided on). Without the
    # sweep's retention the last reports would see up to 29.
    peak = max(max(r.metrics_dataframe["on_disk"]) for r in grid)
    assert peak <= 2 + 2 + 1, peak
    assert grid.get_best_result().checkpoint.path.endswith("checkpoint_000004")
    assert not [r for r in grid if r.config["x"] < 6 and r.checkpoint is not None]
    # What Tune saved (a restored Tuner's ResultGrid) names nothing deleted either.
    restored = Tuner.restore(os.path.join(storage_path, name), sweep_loop).get_results()
    assert _kept(restored) == kept


def test_with_num_to_keep_1_and_a_byte_budget_it_keeps_the_best_trials_best(
    ray_start_4_cpus, storage_path
):
    """Each trial's own ``num_to_keep=1`` still applies, ranked by
    ``checkpoint_score_attribute`` (``loss``, ``min``) instead of TuneConfig's
    metric: the best checkpoint of each of the best trials. ``sweep_max_bytes``
    (250 kB, checkpoints of 100 kB) keeps 2 of the 3 best."""
    config = CheckpointConfig(
        num_to_keep=1,
        checkpoint_score_attribute="loss",
        checkpoint_score_order="min",
        sweep_num_to_keep=3,
        sweep_max_bytes=250_000,
    )
    tune_config = ray.tune.TuneConfig(max_concurrent_trials=2)  # no metric: the config's
    grid = _tuner(
        storage_path, "budget", config, tune_config=tune_config, blob=100_000
    ).fit()
    kept = _kept(grid)
    assert kept == {
        1: [],
        2: [],
        3: [],
        4: [],
        5: ["checkpoint_000004"],
        6: ["checkpoint_000004"],
    }
    assert len(checkpoint_folders(storage_path)) == 2


def test_a_budget_below_what_unfinished_trials_need_deletes_none_of_it(
    ray_start_4_cpus, storage_path, caplog
):
    """The running trials' latest checkpoints alone exceed ``sweep_max_bytes``: one
    warning names the sizes, none of them is deleted (every trial finishes, and
    a retry would find its checkpoint), and once the sweep is over nothing fits."""
    config = CheckpointConfig(sweep_num_to_keep=2, sweep_max_bytes=50_000)
    with caplog.at_level(logging.WARNING, logger="ray_tt_ext"):
        grid = _tuner(storage_path, "tiny", config, xs=[1, 2, 3], blob=100_000).fit()
    warnings = [
        r.getMessage() for r in caplog.records if "sweep_max_bytes=50000" in r.getMessage()
    ]
    assert len(warnings) == 1, warnings
    assert "more than the budget" in warnings[0] and "bytes" in warnings[0]
    assert _kept(grid) == {1: [], 2: [], 3: []}
    assert [r.metrics["step"] for r in grid] == [STEPS - 1] * 3
    assert checkpoint_folders(storage_path) == []


def test_named_checkpoints_follow_the_same_rules_and_a_link_is_unlinked_never_followed(
    ray_start_4_cpus, storage_path
):
    """Checkpoints named by a policy (``epoch_{step:03d}``, indexed by ``step``) are
    kept and deleted as Tune's names are. What each trial leaves in its folder
    after its last report: a folder named as a checkpoint that no report
    recorded is deleted; a symbolic link named as one is unlinked, and the
    folder outside the experiment it points to keeps its file; ``notes/``, not
    named as a checkpoint, is left."""
    outside = os.path.join(storage_path, "outside")
    config = CheckpointConfig(
        sweep_num_to_keep=2, checkpoint_index="step", checkpoint_dir_name="epoch_{step:03d}"
    )
    leave = {"outside": outside, "link": "epoch_099", "folder": "epoch_098"}
    grid = _tuner(storage_path, "named", config, xs=[1, 2, 3], leave=leave).fit()
    assert _kept(grid) == {1: [], 2: [], 3: ["epoch_003", "epoch_004"]}
    root = Path(storage_path, "named")
    trial_folders = [p for p in root.iterdir() if p.is_dir()]
    assert len(trial_folders) == 3, trial_folders
    for folder in trial_folders:
        left = sorted(p.name for p in folder.iterdir() if p.is_dir() or p.is_symlink())
        kept = ["epoch_003", "epoch_004"] if "x=3" in folder.name else []
        assert left == [*kept, "notes"], (folder.name, left)
    targets = sorted(Path(outside).iterdir())
    assert len(targets) == 3
    for target in targets:  # what the links pointed to is all there
        assert (target / "keep.txt").read_text() == target.name


@pytest.mark.parametrize("synch", [False, True], ids=["async", "synch"])
def test_pbt_never_exploits_or_resumes_from_a_deleted_checkpoint(
    ray_start_4_cpus, storage_path, synch
):
    """PBT copies a top trial's checkpoint into a bottom one, maybe long after the
    top trial moved on, and (synch) pauses every trial at each interval and
    resumes it from its own latest checkpoint: the sweep keeps each checkpoint
    PBT may still exploit, the one an exploited trial restores from and a
    paused trial's latest, and deletes what is left once the sweep is over
    (the checkpoints a paused trial wrote that Tune never recorded too)."""
    root = os.path.join(storage_path, "pbt")
    pbt = PopulationBasedTraining(
        time_attr="training_iteration",
        perturbation_interval=2,
        hyperparam_mutations={"x": [1, 2, 3, 4]},
        quantile_fraction=0.5,
        resample_probability=0.0,
        synch=synch,
    )
    tuner = Tuner(
        sweep_loop,
        param_space={
            "x": ray.tune.grid_search([1, 2, 3, 4]),
            "steps": 6,
            "root": root,
            # Async: the top trials (x=3, 4: 2 s a step) are between their 2nd
            # and 4th report when the bottom ones (3 s a step) exploit them at
            # their 2nd: the checkpoint PBT took at the top trial's 2nd is then
            # neither its latest nor the sweep's best (each trial's best is its
            # first), and only PBT's state still needs it.
            "declining": True,
            "step_s": ray.tune.sample_from(
                lambda spec: 0 if synch else (3 if spec.config.x <= 2 else 2)
            ),
        },
        tune_config=ray.tune.TuneConfig(
            metric="score", mode="max", scheduler=pbt, reuse_actors=True
        ),
        run_config=quiet_run_config(
            storage_path, "pbt", checkpoint_config=CheckpointConfig(sweep_num_to_keep=1)
        ),
    )
    grid = tuner.fit()
    _kept(grid)  # no trial errored (a restore from a deleted folder would)
    assert sum(int(r.metrics_dataframe["exploited"].max()) for r in grid) >= 1
    if synch:
        assert any(r.metrics_dataframe["resumed"].max() == 1 for r in grid), "none resumed"
    assert len(checkpoint_folders(root)) == 1


def test_hyperband_resumes_each_paused_trial_from_its_kept_latest(
    ray_start_4_cpus, storage_path
):
    """HyperBand (max_t=4, reduction_factor=2: a bracket of x=1..3 with its rung at
    4 iterations, one of x=4..6 with its rung at 2) pauses x=4..6 at their rung
    until the bracket's others get there, then stops the worst and resumes the
    others from their latest checkpoint. Each trial's best checkpoint is its
    first (``declining``), so a trial's latest while it waits at the rung is
    never the sweep's best: the sweep keeps it because the trial is paused, and
    deletes it once the trial moves on or is stopped. The trials end after 3
    iterations, before max_t: Ray's HyperBand can leave a trial paused at its
    last iteration for ever (seen with plain ``ray.tune.Tuner`` on Ray 2.60)."""
    hyperband = HyperBandScheduler(
        time_attr="training_iteration", max_t=4, reduction_factor=2
    )
    # Every trial added at once (no max_concurrent_trials), so that each
    # bracket fills before its first trial reaches its rung.
    tune_config = ray.tune.TuneConfig(metric="score", mode="max", scheduler=hyperband)
    grid = _tuner(
        storage_path,
        "hyperband",
        CheckpointConfig(sweep_num_to_keep=1),
        tune_config=tune_config,
        steps=3,
        declining=True,
    ).fit()
    kept = _kept(grid)
    # A paused trial whose latest was deleted would start again from step 0
    # (Tune drops the deleted checkpoint from the trial's record): resumed=0.
    # Of x=4..6, x=4 is stopped at the rung, and whichever reaches it last runs
    # on without a pause.
    resumed = [r.config["x"] for r in grid if r.metrics_dataframe["resumed"].max()]
    assert resumed and set(resumed) <= {5, 6}, resumed
    assert [r.config["x"] for r in grid if r.metrics["step"] < 2] == [4]
    assert kept == {1: [], 2: [], 3: [], 4: [], 5: [], 6: ["checkpoint_000000"]}
    assert len(checkpoint_folders(storage_path)) == 1


def test_bad_settings_are_refused_before_anything_is_written(storage_path):
    """Nothing ranks the checkpoints, or a count or budget that is not a positive
    integer: a ``ValueError`` that says what to set, and no experiment folder."""
    with pytest.raises(
        ValueError, match="checkpoint_score_attribute.*TuneConfig has no metric"
    ):
        Tuner(
            sweep_loop,
            run_config=quiet_run_config(
                storage_path,
                "unranked",
                checkpoint_config=CheckpointConfig(sweep_num_to_keep=2),
            ),
        )
    with pytest.raises(ValueError, match="TuneConfig has no mode"):
        Tuner(
            sweep_loop,
            tune_config=ray.tune.TuneConfig(metric="score"),
            run_config=quiet_run_config(
                storage_path,
                "no_mode",
                checkpoint_config=CheckpointConfig(sweep_max_bytes=10),
            ),
        )
    assert os.listdir(storage_path) == []
    for name, bad in [
        ("sweep_num_to_keep", 0),
        ("sweep_num_to_keep", -1),
        ("sweep_num_to_keep", True),
        ("sweep_num_to_keep", 2.5),
        ("sweep_max_bytes", "10GB"),
        ("sweep_max_bytes", 0),
    ]:
        with pytest.raises(ValueError, match=f"{name}=.*must be a positive integer"):
            CheckpointConfig(**{name: bad})


def test_restore_after_the_driver_is_killed_finishes_a_deletion_in_flight(
    ray_start_4_cpus, storage_path
):
    """The driver is killed (SIGKILL) mid-sweep, with a decision in flight: a
    checkpoint chosen for deletion still on disk, next to one the saved state
    still names (the decision was not saved). ``Tuner.restore`` deletes the
    first, keeps the second until it decides again, resumes the unfinished
    trials from their latest checkpoints and keeps what an uninterrupted sweep
    keeps."""
    name = "killed"
    root = Path(storage_path, name)
    # The experiment's state saved every second (Ray's default: every 10 s or
    # more), so that one names running trials' checkpoints before the kill.
    driver = _driver(storage_path, name, TUNE_GLOBAL_CHECKPOINT_S="1")
    try:
        # A decision was made (it writes DELETING), and the saved state names an
        # unfinished trial's latest checkpoint.
        _wait_for(
            driver,
            lambda: (root / DELETING).exists() and _unfinished_latest(root),
            "its first deletion",
        )
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    named = Path(_unfinished_latest(root)[0])
    leftover = named.parent / "checkpoint_leftover"
    shutil.copytree(named, leftover)
    (root / DELETING).write_text(  # as the sweep writes it: relative to the experiment
        json.dumps([str(leftover.relative_to(root)), str(named.relative_to(root))])
    )

    grid = Tuner.restore(str(root), sweep_loop, resume_unfinished=True).fit()
    assert not leftover.exists()
    # The named one was not deleted before its trial resumed from it.
    (own,) = [r for r in grid if r.path == str(named.parent)]
    assert own.metrics_dataframe["resumed"].max() == 1
    _finishes_as_uninterrupted(grid, root)


def _driver(
    storage_path: str, name: str, hold_at_2: Optional[str] = None, **env: str
) -> subprocess.Popen:
    """A driver of its own (joining the session's Ray) that runs a 4-trial sweep
    with ``sweep_num_to_keep=2``, half a second a step (``hold_at_2``:
    ``sweep_loop``'s gate before step 2)."""
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import ray, ray.tune
        from test_sweep_retention import _tuner
        from ray_tt_ext import CheckpointConfig
        ray.init(address={ray.get_runtime_context().gcs_address!r})
        _tuner({storage_path!r}, {name!r}, CheckpointConfig(sweep_num_to_keep=2),
               xs=[1, 2, 3, 4], step_s=0.5, hold_at_2={hold_at_2!r}).fit()
        """
    )
    return subprocess.Popen([sys.executable, "-c", script], env=dict(os.environ, **env))


def _wait_for(driver: subprocess.Popen, condition, what: str) -> None:
    deadline = time.monotonic() + 180
    while not condition():
        assert driver.poll() is None, f"the driver ended before {what}"
        assert time.monotonic() < deadline, f"not {what} within 180 s"
        time.sleep(0.2)  # polling for the files, not pacing the run


def _finishes_as_uninterrupted(grid, root: Path) -> None:
    assert _kept(grid) == {
        1: [],
        2: [],
        3: [],
        4: ["checkpoint_000003", "checkpoint_000004"],
    }
    assert [r.metrics["step"] for r in grid] == [STEPS - 1] * 4
    assert len(checkpoint_folders(str(root))) == 2
    assert any(r.metrics_dataframe["resumed"].max() == 1 for r in grid), "no trial resumed"


def test_an_interrupted_sweep_stays_resumable(ray_start_4_cpus, storage_path):
    """Ctrl-C (SIGINT) ends the sweep with trials running: Tune saves the
    experiment's state, then stops them, and their latest checkpoints stay, so
    ``Tuner.restore`` resumes them and ends with what an uninterrupted sweep
    keeps."""
    name = "interrupted"
    root = Path(storage_path, name)

    def past_their_first_step() -> set[str]:
        """The trial folders holding a checkpoint of a step after the first. Tune
        runs a trial's next step only once it has recorded the checkpoint of its
        last report (a save after the report), so each of these trials has a
        recorded checkpoint. (A trial stopped during the save of its first report
        has none: it restarts from its first step, as with Ray's own Tuner.)"""
        return {
            p.parent.name
            for p in root.glob("*/checkpoint_*")
            if (index := re.fullmatch(r"checkpoint_(\d+)", p.name)) and int(index[1]) >= 1
        }

    # The first 2 trials (2 at a time) wait before step 2 until the sweep is
    # interrupted: both are running then, whatever the machine's speed (a
    # trial started late could otherwise run after the other had finished).
    gate = Path(storage_path, "interrupted_gate")
    driver = _driver(storage_path, name, hold_at_2=str(gate))
    try:
        _wait_for(driver, lambda: len(past_their_first_step()) >= 2, "2 trials at step 1")
        seen = past_their_first_step()
        driver.send_signal(signal.SIGINT)
        assert driver.wait(timeout=120) == 0
    finally:
        gate.touch()
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    trials = ray.tune.ExperimentAnalysis(str(root)).trials
    stopped = [t for t in trials if t.status != "TERMINATED" and Path(t.path).name in seen]
    assert stopped, (trials, seen)
    # Each still has its recorded latest checkpoint (the sweep keeps it).
    for trial in stopped:
        assert trial.checkpoint is not None, trial
        assert os.path.isdir(trial.checkpoint.path), trial.checkpoint
    grid = Tuner.restore(str(root), sweep_loop, resume_unfinished=True).fit()
    _finishes_as_uninterrupted(grid, root)


def _unfinished_latest(root: Path) -> list[str]:
    """The latest checkpoints of unfinished trials in the experiment's saved state."""
    if not list(root.glob("experiment_state*.json")):
        return []
    trials = ray.tune.ExperimentAnalysis(str(root)).trials
    return [t.checkpoint.path for t in trials if t.status != "TERMINATED" and t.checkpoint]


def _three_trials_on(handler, root: str) -> Tuner:
    """A sweep of 3 trials, 2 at a time, keeping 2, with its storage at ``root``
    through ``handler`` (a pyarrow ``FileSystemHandler`` over the local disk),
    its saved state checked at each result."""
    import pyarrow.fs

    fs = pyarrow.fs.PyFileSystem(handler)
    storage_path, name = os.path.split(root)
    return Tuner(
        sweep_loop,
        param_space={"x": ray.tune.grid_search([1, 2, 3]), "steps": STEPS, "root": root},
        tune_config=ray.tune.TuneConfig(
            metric="score", mode="max", max_concurrent_trials=2
        ),
        run_config=tune_api.RunConfig(
            name=name,
            storage_path=storage_path,
            storage_filesystem=fs,
            verbose=0,
            checkpoint_config=CheckpointConfig(sweep_num_to_keep=2),
            callbacks=[SavedStateNamesOnlyWhatExists(root, fs)],
        ),
    )


def _named_deletions_are_seen(handler, grid) -> None:
    """The check behind ``CountingFileSystem.named_deletions`` sees what the state
    on storage names: the best checkpoint, which it names at the end."""
    best = grid.get_best_result().checkpoint.path
    assert handler.named_by_state(best), best


def test_on_a_slow_storage_deletions_never_wait_for_tunes_upload(
    ray_start_4_cpus, storage_path, monkeypatch
):
    """On a slow storage (each trial's ``progress.csv`` takes 1.5 s to write, so
    Tune's own upload of the experiment folder, every half second, is running
    at almost every step), the experiment's state never goes up in Tune's
    upload, only in the sweep's own, in Tune's loop: deletions go on while
    Tune's upload runs, the folder holds no more checkpoints than on a fast
    storage, and no state on storage names a deleted checkpoint."""
    import pyarrow.fs

    from rtt_testing import CountingFileSystem

    monkeypatch.setenv("TUNE_GLOBAL_CHECKPOINT_S", "0.5")
    slow = CountingFileSystem(
        pyarrow.fs.LocalFileSystem(), slow_writes=("progress.csv", 1.5)
    )
    root = os.path.join(storage_path, "slow")
    tuner = _three_trials_on(slow, root)
    grid = tuner.fit()
    # The 2 best of the sweep, both one trial's; the ResultGrid, and the one
    # ``Tuner.restore`` reads, name only what is kept.
    kept = _kept(grid)
    assert kept == {1: [], 2: [], 3: ["checkpoint_000003", "checkpoint_000004"]}
    assert len(checkpoint_folders(root)) == 2, checkpoint_folders(root)
    assert grid.get_best_result().checkpoint.path.endswith("checkpoint_000004")
    assert _kept(Tuner.restore(root, sweep_loop).get_results()) == kept
    # As on a fast storage: the 2 best, each running trial's latest, and one
    # written and not decided on yet.
    peak = max(max(r.metrics_dataframe["on_disk"]) for r in grid)
    assert peak <= 2 + 2 + 1, peak
    # Deletions while Tune's upload was writing a progress.csv.
    started = {}
    uploading = []
    for op, path, thread, at in slow.events:
        if op == "write" and path.endswith("/progress.csv"):
            started[path, thread] = at
        elif op == "slow write ended":
            uploading.append((started.pop((path, thread)), at))
    deleted = [at for op, _, _, at in slow.events if op == "delete"]
    assert uploading and deleted, (uploading, deleted)
    assert [d for d in deleted if any(a < d < b for a, b in uploading)], (
        "no deletion while Tune's upload ran: the case is not there, or they waited"
    )
    assert not slow.named_deletions, slow.named_deletions
    _named_deletions_are_seen(slow, grid)
    # Every upload of the experiment's state (the files of the experiment
    # folder's top level; not Ray's temporary ones, dot files) was ray_tt_ext's,
    # in Tune's loop (this thread): none in Tune's upload, in a thread of its own.
    state_writes = {
        (posixpath.basename(path), thread)
        for op, path, thread, _ in slow.events
        if op == "write"
        and posixpath.dirname(path) == root
        and not posixpath.basename(path).startswith(".")
    }
    assert "experiment_state" in str(state_writes), state_writes
    assert {thread for _, thread in state_writes} == {threading.get_ident()}, state_writes


def test_while_the_state_cannot_be_uploaded_nothing_it_names_is_deleted(
    ray_start_4_cpus, storage_path, monkeypatch, caplog
):
    """Once the experiment's state on storage names a trial's second checkpoint,
    the storage refuses the next 2 uploads of the state (a storage failing for
    a while): one warning when they start failing and one when an upload
    succeeds again, no checkpoint the state on storage names is deleted
    meanwhile (those deletions wait for an upload that succeeds), and the
    sweep ends keeping what it keeps on a storage that never failed."""
    import pyarrow.fs

    from rtt_testing import CountingFileSystem

    monkeypatch.setenv("TUNE_GLOBAL_CHECKPOINT_S", "0.5")
    failing = CountingFileSystem(
        pyarrow.fs.LocalFileSystem(),
        fail_writes=("experiment_state", 2, "checkpoint_000001"),
    )
    root = os.path.join(storage_path, "failing")
    tuner = _three_trials_on(failing, root)
    with caplog.at_level(logging.WARNING, logger="ray_tt_ext"):
        grid = tuner.fit()
    said = [r.message for r in caplog.records if "experiment's state" in r.message]
    assert failing.failed_writes == 2
    assert len(said) == 2, said
    assert "Uploading the experiment's state failed (OSError" in said[0], said
    assert "Service unavailable" in said[0], said
    assert "again, after 2 failed upload(s)" in said[1], said
    # No deletion of a checkpoint the state on storage named (the deletions that
    # needed an upload waited for one), and deletions went on after.
    assert not failing.named_deletions, failing.named_deletions
    _named_deletions_are_seen(failing, grid)
    deleted = [at for op, _, _, at in failing.events if op == "delete"]
    assert [at for at in deleted if at > failing.failed_at[-1]]
    assert _kept(grid) == {1: [], 2: [], 3: ["checkpoint_000003", "checkpoint_000004"]}
    assert len(checkpoint_folders(root)) == 2, checkpoint_folders(root)


def test_on_s3(ray_start_4_cpus, s3_server, monkeypatch):
    """On S3 (moto's server): the same sweep keeps the same 2 checkpoints, and
    the experiment's state on S3 never names a deleted one."""
    import uuid

    import pyarrow.fs

    fs = s3_server.filesystem()
    name = f"sweep_{uuid.uuid4().hex[:8]}"
    # Saved every second: states on S3 name checkpoints the sweep deletes later.
    monkeypatch.setenv("TUNE_GLOBAL_CHECKPOINT_S", "1")
    tuner = Tuner(
        sweep_loop,
        param_space={
            "x": ray.tune.grid_search([1, 2, 3]),
            "steps": 3,
            "root": "/nonexistent",
        },
        tune_config=ray.tune.TuneConfig(
            metric="score", mode="max", max_concurrent_trials=2
        ),
        run_config=tune_api.RunConfig(
            name=name,
            storage_path="bucket/sweeps",
            storage_filesystem=fs,
            verbose=0,
            checkpoint_config=CheckpointConfig(sweep_num_to_keep=2),
            callbacks=[SavedStateNamesOnlyWhatExists(f"bucket/sweeps/{name}", fs)],
        ),
    )
    grid = tuner.fit()
    listed = fs.get_file_info(
        pyarrow.fs.FileSelector(f"bucket/sweeps/{name}", recursive=True)
    )
    on_s3 = sorted({i.path.rsplit("/", 1)[0] for i in listed if i.path.endswith("/blob")})
    named = []
    for result in grid:
        assert result.error is None
        named += [c.path for c, _ in result.best_checkpoints]
        if result.config["x"] != 3:
            assert result.checkpoint is None and not result.best_checkpoints
    # The 2 best (trial x=3's last two), and nothing else, on S3 and in the grid.
    assert sorted(named) == on_s3, (named, on_s3)
    assert [p.rsplit("/", 1)[-1] for p in on_s3] == [
        "checkpoint_000001",
        "checkpoint_000002",
    ]
    assert ray_tt_ext.CheckpointConfig is CheckpointConfig
