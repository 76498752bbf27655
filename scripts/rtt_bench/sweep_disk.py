"""Section ``sweep_disk`` of scripts/bench.py: the bytes a sweep keeps on storage.

40 trials x 8 checkpoints x 4 MiB, 2 trials at a time (8 x 4 x 1 MiB with
--quick), with ``ray_tt_ext.Tuner`` over a function trainable, three ways:
``none`` (no retention), ``per_trial`` (Tune's ``num_to_keep=1``, the best a
user can do without ray_tt_ext) and ``sweep`` (``sweep_num_to_keep=3``). A
thread of the driver adds up the bytes in the experiment's checkpoint folders
every 0.1 s (the peak) and once the fit returned (the final). ``none`` and
``sweep`` run in alternating pairs: the time ratio is the median of the pairs'.
Goals (issue #48): a peak of at most (3 + trials at a time + 1) checkpoints'
bytes, and sweep / none <= 1.05 in fit() time.
"""

from __future__ import annotations

import collections
import os
import re
import statistics
import tempfile
import threading
import time
from typing import Any

import ray
import ray.tune

from ray_tt_ext._sweep import DELETING
from rtt_bench.common import MiB, _table, progress
from rtt_testing import S3_ENV

_FLAVOURS = ("none", "per_trial", "sweep")
_AT_ONCE = 2
_KEEP = 3


def _loop(config: dict) -> None:
    """``steps`` checkpoints of ``bytes`` each; ``score`` grows with ``x`` and the step."""
    from ray_tt_ext import _compat

    blob = os.urandom(1024) * (config["bytes"] // 1024)
    for step in range(config["steps"]):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "model.bin"), "wb") as f:
                f.write(blob)
            _compat.tune_report(
                {"score": config["x"] * 100 + step},
                checkpoint=_compat.TuneCheckpoint.from_directory(d),
            )


def _checkpoint_bytes(root: str) -> int:
    total = 0
    for folder, _, files in os.walk(root):
        if "/checkpoint_" not in folder + "/":
            continue
        for name in files:
            try:
                total += os.path.getsize(os.path.join(folder, name))
            except OSError:  # deleted meanwhile
                pass
    return total


def _fit(
    flavour: str, trials: int, steps: int, size: int, storage: str, s3: Any = None
) -> dict[str, Any]:
    """One sweep; on moto's S3 when ``s3`` (a ``MotoServer``) is given, with the
    requests the sweep's processes made (``requests``: by kind)."""
    from ray_tt_ext import CheckpointConfig, Tuner

    checkpoint_config = {
        "none": CheckpointConfig(),
        "per_trial": CheckpointConfig(
            num_to_keep=1, checkpoint_score_attribute="score", checkpoint_score_order="max"
        ),
        "sweep": CheckpointConfig(sweep_num_to_keep=_KEEP),
    }[flavour]
    name = f"sweep_disk_{flavour}_{time.time_ns()}"
    root = os.path.join(storage, name)
    where: dict[str, Any] = {"storage_path": storage}
    measure = _checkpoint_bytes
    if s3 is not None:
        where = {"storage_path": "bucket/sweep_disk", "storage_filesystem": s3.filesystem()}
        root = f"sweep_disk/{name}/"
        measure = _s3_checkpoint_bytes(s3)
        log_start = os.path.getsize(s3.log.name)
    tuner = Tuner(
        _loop,
        param_space={
            "x": ray.tune.grid_search(list(range(trials))),
            "steps": steps,
            "bytes": size,
        },
        tune_config=ray.tune.TuneConfig(
            metric="score", mode="max", max_concurrent_trials=_AT_ONCE
        ),
        run_config=ray.tune.RunConfig(
            name=name, verbose=0, checkpoint_config=checkpoint_config, **where
        ),
    )
    peak = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.1):
            peak[0] = max(peak[0], measure(root))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.monotonic()
    grid = tuner.fit()
    seconds = time.monotonic() - start
    stop.set()
    sampler.join()
    final = measure(root)
    peak[0] = max(peak[0], final)
    errors = sum(r.error is not None for r in grid)
    out = {
        "seconds": seconds,
        "peak_bytes": peak[0],
        "final_bytes": final,
        "errors": errors,
    }
    if s3 is not None:
        with open(s3.log.name, "rb") as f:
            f.seek(log_start)
            out["requests"] = _requests(f.read().decode("utf-8", "replace"))
        out["checkpoints_deleted"] = trials * steps - final // size
    return out


_REQUEST = re.compile(r'"(?:\x1b\[[0-9;]*m)*([A-Z]+) (\S+) HTTP/')
_SAMPLER_KEYS = 999  # the sampler's listings (max-keys=999) are not the sweep's


def _requests(log: str) -> dict[str, int]:
    """The S3 requests in moto's request log, by kind; ``decisions``: the writes
    of the retention's decision file (one per decision)."""
    counts: collections.Counter = collections.Counter()
    for line in log.splitlines():
        match = _REQUEST.search(line)
        if match is None or f"max-keys={_SAMPLER_KEYS}" in line:
            continue
        method, target = match.groups()
        if method == "GET":
            kind = "listings" if "list-type=" in target else "downloads"
        elif method == "HEAD":
            kind = "heads"
        elif method == "DELETE" or (method == "POST" and target.endswith("?delete")):
            kind = "deletions"
        else:  # PUT, or POST ?uploads / ?uploadId= (a multipart upload's start and end)
            kind = "uploads"
        counts[kind] += 1
        counts["all"] += 1
        if DELETING in target and (method == "PUT" or target.endswith("?uploads")):
            if "partNumber=" not in target:
                counts["decisions"] += 1
    return dict(counts)


def _s3_checkpoint_bytes(s3: Any):
    """The bytes in checkpoint folders under a prefix of moto's bucket, listed
    with a client of its own (its requests are told apart by their max-keys)."""
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=f"http://{s3.endpoint}",
        aws_access_key_id=S3_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=S3_ENV["AWS_SECRET_ACCESS_KEY"],
        region_name=S3_ENV["AWS_DEFAULT_REGION"],
    )

    def measure(prefix: str) -> int:
        total = 0
        pages = client.get_paginator("list_objects_v2").paginate(
            Bucket=s3.bucket, Prefix=prefix, PaginationConfig={"PageSize": _SAMPLER_KEYS}
        )
        for page in pages:
            total += sum(
                o["Size"] for o in page.get("Contents", ()) if "/checkpoint_" in o["Key"]
            )
        return total

    return measure


def _setup(trials: int, steps: int, size: int) -> dict[str, Any]:
    """What a section measured, as its results name it."""
    return {
        "trials": trials,
        "checkpoints_per_trial": steps,
        "checkpoint_bytes": size,
        "at_once": _AT_ONCE,
        "sweep_num_to_keep": _KEEP,
    }


def bench_sweep_disk(quick: bool, storage: str) -> dict[str, Any]:
    from rtt_testing import init_local_ray

    trials, steps, size, pairs = (8, 4, MiB, 1) if quick else (40, 8, 4 * MiB, 3)
    init_local_ray(4, log_to_driver=False)
    try:
        runs: dict[str, list] = {f: [] for f in _FLAVOURS}
        ratios = []
        for i in range(pairs):
            order = ("none", "sweep") if i % 2 == 0 else ("sweep", "none")
            got = {}
            for flavour in order:
                got[flavour] = _fit(flavour, trials, steps, size, storage)
                runs[flavour].append(got[flavour])
                progress(f"sweep_disk {flavour}: {got[flavour]}")
            ratios.append(got["sweep"]["seconds"] / got["none"]["seconds"])
        runs["per_trial"].append(_fit("per_trial", trials, steps, size, storage))
        progress(f"sweep_disk per_trial: {runs['per_trial'][-1]}")
    finally:
        ray.shutdown()
    goal_bytes = (_KEEP + _AT_ONCE + 1) * size
    out: dict[str, Any] = {
        **_setup(trials, steps, size),
        "pairs": pairs,
        "flavours": {
            f: {
                "seconds": statistics.median(r["seconds"] for r in rs),
                "peak_bytes": max(r["peak_bytes"] for r in rs),
                "final_bytes": max(r["final_bytes"] for r in rs),
                "errors": sum(r["errors"] for r in rs),
            }
            for f, rs in runs.items()
        },
        "pair_ratios": ratios,
        "ratio": statistics.median(ratios),
        "goal_peak_bytes": goal_bytes,
    }
    sweep = out["flavours"]["sweep"]
    out["peak_goal_met"] = sweep["peak_bytes"] <= goal_bytes
    out["time_goal_met"] = out["ratio"] <= 1.05
    print(
        _table(
            "sweep_disk",
            ["flavour", "fit() s", "peak MiB", "final MiB", "errors"],
            [
                [
                    f,
                    f"{v['seconds']:.1f}",
                    f"{v['peak_bytes'] / MiB:.0f}",
                    f"{v['final_bytes'] / MiB:.0f}",
                    v["errors"],
                ]
                for f, v in out["flavours"].items()
            ],
        )
    )
    print(
        f"sweep peak {sweep['peak_bytes'] / MiB:.0f} MiB (goal <= {goal_bytes / MiB:.0f} MiB: "
        f"{'met' if out['peak_goal_met'] else 'not met'}); sweep / none fit(): "
        f"{out['ratio']:.3f} (pairs: {', '.join(f'{r:.3f}' for r in ratios)}; goal <= 1.05: "
        f"{'met' if out['time_goal_met'] else 'not met'})"
    )
    return out


_KINDS = ("uploads", "listings", "heads", "downloads", "deletions")


def bench_sweep_disk_s3(quick: bool, storage: str) -> dict[str, Any]:
    """Section ``sweep_disk_s3``: the same sweeps on moto's S3 server (loopback),
    ``none`` and ``sweep`` in alternating pairs, then ``per_trial`` once, with the
    requests each made (moto's request log; a flavour's: the median of its runs,
    kind by kind)."""
    from rtt_testing import MotoServer, init_local_ray

    trials, steps, size, pairs = (8, 4, MiB, 1) if quick else (40, 8, 4 * MiB, 3)
    for key, value in S3_ENV.items():  # before Ray starts: its workers need them
        os.environ.setdefault(key, value)
    server = MotoServer()
    init_local_ray(4, log_to_driver=False)
    every: dict[str, list] = {f: [] for f in _FLAVOURS}
    ratios = []
    try:
        for i in range(pairs):
            order = ("none", "sweep") if i % 2 == 0 else ("sweep", "none")
            got = {}
            for flavour in order:
                got[flavour] = _fit(flavour, trials, steps, size, storage, s3=server)
                every[flavour].append(got[flavour])
                progress(f"sweep_disk_s3 {flavour}: {got[flavour]}")
            ratios.append(got["sweep"]["seconds"] / got["none"]["seconds"])
        every["per_trial"].append(
            _fit("per_trial", trials, steps, size, storage, s3=server)
        )
        progress(f"sweep_disk_s3 per_trial: {every['per_trial'][-1]}")
    finally:
        ray.shutdown()
        server.stop()
    runs = {
        f: {
            "seconds": statistics.median(r["seconds"] for r in rs),
            "peak_bytes": max(r["peak_bytes"] for r in rs),
            "final_bytes": max(r["final_bytes"] for r in rs),
            "errors": sum(r["errors"] for r in rs),
            "requests": {
                k: round(statistics.median(r["requests"].get(k, 0) for r in rs))
                for k in {k for r in rs for k in r["requests"]}
            },
            "checkpoints_deleted": round(
                statistics.median(r["checkpoints_deleted"] for r in rs)
            ),
            "runs": len(rs),
        }
        for f, rs in every.items()
    }
    sweep, none = runs["sweep"], runs["none"]
    extra = {k: sweep["requests"].get(k, 0) - none["requests"].get(k, 0) for k in _KINDS}
    decisions = sweep["requests"].get("decisions", 0)
    deleted = sweep["checkpoints_deleted"]
    goal_bytes = (_KEEP + _AT_ONCE + 1) * size
    out: dict[str, Any] = {
        **_setup(trials, steps, size),
        "pairs": pairs,
        "flavours": runs,
        "pair_ratios": ratios,
        "ratio": statistics.median(ratios),
        "goal_peak_bytes": goal_bytes,
        "peak_goal_met": sweep["peak_bytes"] <= goal_bytes,
        "time_goal_met": statistics.median(ratios) <= 1.05,
        "sweep_extra_requests": extra,
        "decisions": decisions,
        "deletions_per_deleted_checkpoint": extra["deletions"] / deleted if deleted else 0,
        "requests_per_decision": sum(extra.values()) / decisions if decisions else 0,
    }
    print(
        _table(
            "sweep_disk_s3",
            ["flavour", "fit() s", "peak MiB", "final MiB", "errors", "requests"]
            + list(_KINDS),
            [
                [
                    f,
                    f"{v['seconds']:.1f}",
                    f"{v['peak_bytes'] / MiB:.0f}",
                    f"{v['final_bytes'] / MiB:.0f}",
                    v["errors"],
                    v["requests"].get("all", 0),
                ]
                + [v["requests"].get(k, 0) for k in _KINDS]
                for f, v in runs.items()
            ],
        )
    )
    print(
        f"sweep on S3: peak {sweep['peak_bytes'] / MiB:.0f} MiB (goal <= "
        f"{goal_bytes / MiB:.0f} MiB: {'met' if out['peak_goal_met'] else 'not met'}); "
        f"sweep / none fit(): {out['ratio']:.3f} (pairs: "
        f"{', '.join(f'{r:.3f}' for r in ratios)}; goal <= 1.05: "
        f"{'met' if out['time_goal_met'] else 'not met'}); {decisions} decisions, "
        f"{deleted} checkpoints deleted; requests beyond none's: {extra} "
        f"({out['requests_per_decision']:.1f} per decision, "
        f"{out['deletions_per_deleted_checkpoint']:.1f} deletions per checkpoint)"
    )
    return out
