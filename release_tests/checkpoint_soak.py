"""Scenario 4: checkpoint soak with named checkpoints, worker failures and a driver restart.

N trials x M steps, a checkpoint per step named ``ck-{index:05d}-step{step}``.
Training workers die at injected steps (``max_failures`` retries them), and
the driver itself is killed (SIGKILL of its process group) part-way, then the
run is resumed with ``Tuner.restore`` in this process. Every trial must end
with every step reached and checkpoint folders that are named as the policy
says, unique, with continuous indices, each holding the content of its own step.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

from common import Context, main

import ray_tt_ext
from ray_tt_ext import _compat  # noqa: E402
from rtt_testing import init_local_ray, resume_step

NAME = re.compile(r"^ck-(?P<index>\d{5})-step(?P<step>\d+)$")


def train_loop(config):
    import ray.train

    start = resume_step(ray.train.get_checkpoint())
    for step in range(start, config["steps"]):
        marker = Path(config["markers"], f"{config['trial']}-{step}")
        if step in config["fail_at"] and not marker.exists():
            marker.touch()
            os._exit(1)  # a training worker dies
        time.sleep(config["sleep"])
        with tempfile.TemporaryDirectory() as d:
            Path(d, "state.json").write_text(json.dumps({"step": step}))
            ray.train.report(
                {"step": step}, checkpoint=ray.train.Checkpoint.from_directory(d)
            )


def make_trainer(steps: int, trials: int, markers: str, sleep: float):
    import ray.train
    import ray.tune

    trainer = ray_tt_ext.DataParallelTrainer(
        train_loop,
        train_loop_config={
            "steps": steps,
            "markers": markers,
            "sleep": sleep,
            "fail_at": [steps // 4, steps // 2],
        },
        scaling_config=ray.train.ScalingConfig(num_workers=1),
    )
    param_space = {
        "train_loop_config": {"trial": ray.tune.grid_search(list(range(trials)))}
    }
    return trainer, param_space


def run_config(storage_path: str):

    return _compat.TuneRunConfig(
        storage_path=storage_path,
        name="soak",
        verbose=0,
        failure_config=_compat.TuneFailureConfig(max_failures=5),
        checkpoint_config=ray_tt_ext.CheckpointConfig(
            checkpoint_dir_name="ck-{index:05d}-step{step}"
        ),
    )


def _fs(uri: str):
    """(pyarrow filesystem, path) for a local path or an ``s3://...?endpoint_override=`` URI."""
    import pyarrow.fs

    return pyarrow.fs.FileSystem.from_uri(uri)


def _dirs(fs, path: str, prefix: str = "") -> list[str]:
    import pyarrow.fs

    infos = fs.get_file_info(pyarrow.fs.FileSelector(path, allow_not_found=True))
    return sorted(
        i.base_name
        for i in infos
        if i.type == pyarrow.fs.FileType.Directory and i.base_name.startswith(prefix)
    )


def _has_file(fs, path: str) -> bool:
    import pyarrow.fs

    return fs.get_file_info(path).type == pyarrow.fs.FileType.File


def _count_checkpoints(fs, experiment: str) -> int:
    return sum(len(_dirs(fs, f"{experiment}/{t}", "ck-")) for t in _dirs(fs, experiment))


def _with_path(uri: str, sub: str) -> str:
    """``uri`` with ``/sub`` appended to its path (before any query)."""
    parts = urllib.parse.urlsplit(uri)
    if not parts.scheme:
        return str(Path(uri, sub))
    return urllib.parse.urlunsplit(parts._replace(path=f"{parts.path}/{sub}"))


def driver_phase(storage_path: str, steps: int, trials: int, markers: str, sleep: float):
    """The first driver: runs until the scenario kills it."""

    init_local_ray(4, log_to_driver=False)
    trainer, param_space = make_trainer(steps, trials, markers, sleep)
    ray_tt_ext.Tuner(
        trainer, param_space=param_space, run_config=run_config(storage_path)
    ).fit()


def run(ctx: Context) -> dict:
    import ray

    trials, steps, sleep = (2, 8, 0.3) if ctx.smoke else (4, 60, 0.5)
    markers = ctx.scratch("rtt_soak_")
    storage = ctx.storage_uri()
    fs, experiment = _fs(_with_path(storage, "soak"))
    ctx.progress(f"{trials} trials x {steps} steps; starting the first driver")
    args = [sys.executable, __file__, "--driver-phase", storage, str(steps), str(trials)]
    args += [markers, str(sleep)]
    driver = subprocess.Popen(args, start_new_session=True, env=os.environ.copy())
    # Killed as soon as enough folders exist: possibly while the newest one's
    # upload has not written its file yet (checked below).
    kill_after = trials * max(3, steps // 3)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and driver.poll() is None:
        if _count_checkpoints(fs, experiment) >= kill_after:
            break
        time.sleep(0.5)
    assert driver.poll() is None, "the first driver ended before it could be killed"
    os.killpg(driver.pid, signal.SIGKILL)  # the driver crashes, with its local Ray
    driver.wait()
    before = _count_checkpoints(fs, experiment)
    ctx.progress(f"killed the driver with {before} checkpoints on disk; restoring")

    ctx.init_ray()
    try:
        trainer, _ = make_trainer(steps, trials, markers, sleep)
        assert ray_tt_ext.Tuner.can_restore(_with_path(storage, "soak"))
        results = ray_tt_ext.Tuner.restore(
            _with_path(storage, "soak"),
            trainable=trainer,
            resume_unfinished=True,
            resume_errored=True,
        ).fit()
    finally:
        ray.shutdown()
    assert len(results) == trials and not results.errors, results.errors
    total = partial_total = 0
    for result in results:
        assert result.metrics["step"] == steps - 1
        names = _dirs(fs, result.path, "ck-")
        parsed = [NAME.match(n) for n in names]
        assert all(parsed), names
        indices = [int(m.group("index")) for m in parsed]
        assert indices == list(range(len(indices))), f"indices not continuous: {indices}"
        assert len(set(names)) == len(names)
        reached = set()
        partial = []
        for name, match in zip(names, parsed, strict=True):
            if not _has_file(fs, f"{result.path}/{name}/state.json"):
                # The driver is killed the moment a folder appears (see above),
                # which can be before the worker's upload wrote its file: lost
                # progress, which the restored run must skip past, never reuse.
                partial.append(name)
                continue
            with fs.open_input_stream(f"{result.path}/{name}/state.json") as f:
                content = json.loads(f.read())
            assert content["step"] == int(match.group("step")), name
            reached.add(content["step"])
        assert len(partial) <= 1, f"more than the driver kill's partial folder: {partial}"
        assert result.checkpoint.path.rsplit("/", 1)[-1] not in partial
        assert reached == set(range(steps)), sorted(set(range(steps)) - reached)
        total += len(names)
        partial_total += len(partial)
    failures = len(os.listdir(markers))
    ctx.progress(f"ok: {total} checkpoints, {failures} worker deaths, 1 driver restart")
    return {
        "storage": ctx.storage,
        "trials": trials,
        "steps": steps,
        "checkpoints": total,
        "partial_from_driver_kill": partial_total,
        "checkpoints_before_driver_kill": before,
        "worker_failures_injected": failures,
        "driver_restarts": 1,
    }


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--driver-phase":
        _, _, storage, steps, trials, markers, sleep = sys.argv
        driver_phase(storage, int(steps), int(trials), markers, float(sleep))
        raise SystemExit(0)
    raise SystemExit(main(run))
