"""Section ``s3`` of scripts/bench.py: requests to S3 (moto's server on loopback) for one checkpoint and one ``Tuner.restore``, ray_tt_ext beside upstream Ray."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import ray
import ray.cloudpickle
import ray.train
import ray.tune

import ray_tt_ext
from ray_tt_ext import _compat
from rtt_bench.common import _table, progress
from rtt_testing import init_local_ray

# -- requests to S3 (moto's server on loopback) -----------------------------------------


def _s3_trainable(config):
    """Saves 2 checkpoints, then reports the requests its own process made for each."""
    import tempfile as _tempfile

    from ray_tt_ext import _compat as compat

    def counts():
        handler = compat.get_session().storage.storage_filesystem.handler
        return dict(handler.counts)

    checkpoint = compat.get_checkpoint()
    before = counts()
    marks = [before]
    for step in range(2):
        with _tempfile.TemporaryDirectory() as d:
            Path(d, "state.json").write_text(json.dumps({"step": step}))
            compat.tune_report(
                {"step": step, "loss": 1.0 / (step + 1)},
                checkpoint=compat.TuneCheckpoint.from_directory(d),
            )
        marks.append(counts())
    diff = [
        sum(marks[i + 1].values()) - sum(marks[i].values()) for i in range(len(marks) - 1)
    ]
    compat.tune_report(
        {
            "step": 2,
            "restored": bool(checkpoint),
            "first_checkpoint_requests": diff[0],
            "next_checkpoint_requests": diff[1],
            "start_requests": sum(before.values()),
        }
    )


def _s3_case(flavour: str, server: Any) -> dict[str, int]:
    import pyarrow.fs

    from rtt_testing import CountingFileSystem

    handler = CountingFileSystem(
        server.filesystem(), key=f"bench-{flavour}-{time.time_ns()}"
    )
    fs = pyarrow.fs.PyFileSystem(handler)
    tuner_cls = ray_tt_ext.Tuner if flavour == "ray_tt_ext" else ray.tune.Tuner
    config_cls = (
        ray_tt_ext.CheckpointConfig
        if flavour == "ray_tt_ext"
        else (_compat.TuneCheckpointConfig)
    )
    exp = f"bucket/bench-{flavour}-{time.time_ns()}"
    run_config = _compat.TuneRunConfig(
        storage_path=exp,
        storage_filesystem=fs,
        name="exp",
        verbose=0,
        checkpoint_config=config_cls(),
    )
    progress(f"s3: {flavour}, a run with 2 checkpoints")
    before = sum(handler.counts.values())
    first = tuner_cls(_s3_trainable, run_config=run_config).fit()[0]
    assert first.error is None, first.error
    run_driver = sum(handler.counts.values()) - before
    progress(f"s3: {flavour}, Tuner.restore")
    before = sum(handler.counts.values())
    restored = tuner_cls.restore(
        f"{exp}/exp",
        trainable=_s3_trainable,
        storage_filesystem=fs,
        restart_errored=True,
        resume_unfinished=True,
    )
    restore_driver = sum(handler.counts.values()) - before
    return {
        "first checkpoint (trial process)": first.metrics["first_checkpoint_requests"],
        "next checkpoint (trial process)": first.metrics["next_checkpoint_requests"],
        "trial start, before any checkpoint (trial process)": first.metrics[
            "start_requests"
        ],
        "whole run (driver)": run_driver,
        "Tuner.restore (driver)": restore_driver,
        "_restored": restored is not None,
    }


def bench_s3(quick: bool, storage: str) -> dict[str, Any]:
    from rtt_testing import S3_ENV, MotoServer

    for key, value in S3_ENV.items():
        os.environ.setdefault(key, value)
    server = MotoServer()
    init_local_ray(2, log_to_driver=False)
    try:
        out = {f: _s3_case(f, server) for f in ("ray_tt_ext", "upstream")}
    finally:
        ray.shutdown()
        server.stop()
    for flavour in out.values():
        flavour.pop("_restored")
    rows = [
        [key, str(out["ray_tt_ext"][key]), str(out["upstream"][key])]
        for key in out["ray_tt_ext"]
    ]
    print(
        _table(
            "Requests to S3 (moto on loopback), a function trainable with 2 checkpoints",
            ["requests", "ray_tt_ext", "upstream Ray"],
            rows,
        )
    )
    return out
