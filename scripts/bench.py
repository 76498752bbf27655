#!/usr/bin/env python
"""Benchmarks, side by side with upstream Ray on the same machine, in one run.

    python scripts/bench.py [--quick] [--out bench_results] [--only NAME ...]

Sections (ratios are ray_tt_ext / upstream; lower is better unless noted):

* ``tuner``: a Tuner over a trainer with a large array attached (1 GiB; 64 MiB
  with --quick): conversions, bytes put into the object store, the payload
  registered in the GCS, and the time from ``Tuner()`` to the first trial
  running. Upstream is ``ray.tune.Tuner`` with Ray's ``DataParallelTrainer``.
* ``inspect``: ``inspect_payload`` against ``ray.cloudpickle.dumps``, time and
  peak traced memory, 1 MiB to 1 GiB (speed-up: higher is better).
* ``executor``: reports per second through the remote executor against the
  local one, 1,000 reports (200 with --quick), the median overhead of 9
  alternating pairs (3 with --quick; which executor runs first alternates
  too), in two setups: ``full`` (``num_cpus=2`` on this 2-core machine: the
  coordinator and one worker fill it) and ``roomy`` (``num_cpus=4``). The goal
  (<= 5% overhead) holds only if it holds in both.
* ``executor_trials``: short trials of a 1-worker trainer that reports once:
  upstream Ray, ray_tt_ext with Ray's executor, with ``remote_executor=True``;
  fit() time and the memory of all Ray processes per running trial (RSS and
  PSS, sampled from /proc). ``time``: 24 trials (6 with --quick) on
  ``num_cpus=2``, one at a time; ``memory``: 8 trials at once (4 with --quick),
  two alternating pairs of Ray's executor and the remote one (one with --quick).
  Goals: remote / Ray's executor <= 1.10 in time, <= 50 MiB more memory per
  running trial (also printed: what it adds beyond the hosts' own memory).
* ``s3``: requests to S3 (moto's server on loopback) for one checkpoint and
  one ``Tuner.restore``, ray_tt_ext beside upstream Ray.
* ``train_loop_config``: ``trainer.fit()`` of a trainer with a large array in
  ``train_loop_config`` (100 MiB; 16 MiB with --quick) and 3 reports, beside
  ``ray_tt_ext.Tuner(trainer).fit()`` and upstream Ray's ``trainer.fit()``: time
  and the size of Tune's JSON files. Goals: fit / Tuner <= 1.1, JSON <= 1 MiB.
* ``data_trials``: a sweep over a trainer with ``datasets`` under ``v2.Tuner`` on 4
  CPUs (2-worker trials, ``max_concurrent_trials=2``), which ray_tt_ext runs one
  trial at a time so that each trial's Ray Data pipeline keeps a CPU, beside the
  best a user could set by hand (``max_concurrent_trials=1``): fit() time, 5
  alternating pairs of 4 trials (1 of 2 with --quick). Goal: <= 1.1.
* ``sweep_disk``: 40 trials x 8 checkpoints x 4 MiB, 2 at a time (8 x 4 x
  1 MiB with --quick): peak and final bytes of checkpoints on storage and
  fit() time with no retention, Tune's per-trial ``num_to_keep=1`` and
  ``CheckpointConfig(sweep_num_to_keep=3)``; 3 alternating pairs of none and
  sweep (1 with --quick). Goals: a peak of at most (3 + 2 + 1) checkpoints,
  sweep / none <= 1.05 in time.
* ``sweep_disk_s3``: the same on moto's S3 server (loopback), with the requests
  each sweep made; 3 alternating pairs of none and sweep (1 with --quick),
  per_trial once. The same goals.
* ``lifetime``: object-store memory still in use after N Tuners in a row, each
  over a trainer with a large ``train_loop_config``, each deleted and
  garbage-collected before the next (4 x 300 MiB; 3 x 64 MiB with --quick),
  ray_tt_ext beside upstream Ray, each in a Ray of its own.

Each measurement is printed as it runs. Prints a table per section, writes
``<out>/bench.json`` and, unless ``--no-docs``, ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# The test support package (rtt_testing) lives at the repository root; Ray
# workers import it too (the counting filesystem pickles by reference). The
# sections (rtt_bench, beside this script) are pickled by value, as functions
# of a script are.
_ROOT = str(Path(__file__).resolve().parent.parent)
sys.path.insert(0, _ROOT)
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in [_ROOT, os.environ.get("PYTHONPATH", "")] if p
)
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # loopback only
os.environ.setdefault("RAY_TRAIN_ENABLE_V2_MIGRATION_WARNINGS", "0")
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")

import ray_tt_ext  # noqa: E402,I001
from ray_tt_ext import Tuner  # noqa: E402,F401  (the first name: Train V1 on, before ray.train)
import ray  # noqa: E402
import ray.cloudpickle  # noqa: E402
import rtt_bench  # noqa: E402
from rtt_bench.data_trials import bench_data_trials  # noqa: E402
from rtt_bench.executor import bench_executor  # noqa: E402
from rtt_bench.executor_trials import bench_executor_trials  # noqa: E402
from rtt_bench.lifetime import bench_lifetime  # noqa: E402
from rtt_bench.payload import bench_inspect  # noqa: E402
from rtt_bench.render import DOCS, render  # noqa: E402
from rtt_bench.s3 import bench_s3  # noqa: E402
from rtt_bench.sweep_disk import bench_sweep_disk, bench_sweep_disk_s3  # noqa: E402
from rtt_bench.train_loop_config import bench_train_loop_config  # noqa: E402
from rtt_bench.reuse_trials import bench_reuse_trials  # noqa: E402
from rtt_bench.tuner import bench_tuner  # noqa: E402
from rtt_bench.v2_trials import bench_v2_trials  # noqa: E402
from rtt_testing import init_local_ray  # noqa: E402

from rtt_bench.common import progress  # noqa: E402

ray.cloudpickle.register_pickle_by_value(rtt_bench)


SECTIONS = {
    "tuner": bench_tuner,
    "inspect": bench_inspect,
    "executor": bench_executor,
    "executor_trials": bench_executor_trials,
    "lifetime": bench_lifetime,
    "s3": bench_s3,
    "v2_trials": bench_v2_trials,
    "reuse_trials": bench_reuse_trials,
    "data_trials": bench_data_trials,
    "train_loop_config": bench_train_loop_config,
    "sweep_disk": bench_sweep_disk,
    "sweep_disk_s3": bench_sweep_disk_s3,
}

# Sections that start (and stop) Ray themselves, in the setups they measure.
_OWN_RAY = {
    "executor",
    "executor_trials",
    "lifetime",
    "s3",
    "v2_trials",
    "reuse_trials",
    "data_trials",
    "sweep_disk",
    "sweep_disk_s3",
}


def measured_commit() -> str:
    """The short commit of the code measured, ``+changes`` when the code that runs
    or measures (ray_tt_ext/, rtt_testing/, scripts/) differs from it; ``""``
    without git."""

    def git(*args: str) -> str:
        try:
            proc = subprocess.run(
                ["git", *args], cwd=_ROOT, capture_output=True, text=True, check=False
            )
        except OSError:
            return ""
        return proc.stdout.strip()

    commit = git("rev-parse", "--short", "HEAD")
    changed = git("status", "--porcelain", "ray_tt_ext", "rtt_testing", "scripts")
    return commit + ("+changes" if commit and changed else "")


def write_docs(results: dict[str, Any]) -> Path:
    """Merge this run's sections into docs/benchmarks.json and render the page."""
    DOCS.mkdir(exist_ok=True)
    data_file = DOCS / "benchmarks.json"
    sections = json.loads(data_file.read_text()) if data_file.exists() else {}
    meta = {
        **results["machine"],
        "quick": results["quick"],
        "date": results["date"],
        "commit": results["commit"],
    }
    for name in SECTIONS:
        if name in results:
            sections[name] = [meta, results[name]]
    data_file.write_text(json.dumps(sections, indent=2, default=float) + "\n")
    page = DOCS / "benchmarks.md"
    page.write_text(render({k: sections[k] for k in SECTIONS if k in sections}))
    return page


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a minute)")
    parser.add_argument("--out", default="bench_results", help="folder for bench.json")
    parser.add_argument(
        "--only", nargs="*", choices=sorted(SECTIONS), help="sections to run"
    )
    parser.add_argument(
        "--no-docs", action="store_true", help="do not rewrite docs/benchmarks.md"
    )
    args = parser.parse_args(argv)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    storage = str((out_dir / "ray_results").resolve())
    machine = {
        "python": sys.version.split()[0],
        "ray": ray.__version__,
        "ray_tt_ext": ray_tt_ext.__version__,
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
    }
    print(f"# ray_tt_ext benchmarks ({'quick' if args.quick else 'full'}): {machine}")
    results: dict[str, Any] = {
        "machine": machine,
        "quick": args.quick,
        "date": time.strftime("%Y-%m-%d"),
        "commit": measured_commit(),
    }
    for name in args.only or list(SECTIONS):
        fn = SECTIONS[name]
        progress(f"section {name}")
        if name in _OWN_RAY:
            results[name] = fn(args.quick, storage)
            continue
        init_local_ray(4, log_to_driver=False)
        try:
            results[name] = fn(args.quick) if name == "inspect" else fn(args.quick, storage)
        finally:
            ray.shutdown()
    (out_dir / "bench.json").write_text(json.dumps(results, indent=2, default=float))
    print(f"\nwrote {out_dir / 'bench.json'}")
    if not args.no_docs:
        path = write_docs(results)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
