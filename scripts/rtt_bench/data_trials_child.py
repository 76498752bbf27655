"""One run of the ``data_trials`` section (scripts/bench.py), in a process of its own
with a 4-CPU local Ray and Train V2 (Ray's default):

    python data_trials_child.py FLAVOUR N_TRIALS STORAGE

A sweep of N_TRIALS learning rates over a ``ray_tt_ext.v2.DataParallelTrainer`` with
2 workers of 1 CPU and ``datasets={"train": ray.data.range(200)}``, each trial
reading its shard. FLAVOUR: ``kept`` (``TuneConfig(max_concurrent_trials=2)``,
ray_tt_ext keeping 1 CPU per trial for its pipeline, the default) or ``by_hand``
(the best a user can set by hand on 4 CPUs: ``max_concurrent_trials=1``, nothing
kept). Prints one JSON line: fit() seconds, errors, rows, the most trials at once.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # rtt_testing
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import ray  # noqa: E402
import ray.data  # noqa: E402
import ray.train  # noqa: E402
import ray.tune  # noqa: E402

import ray_tt_ext.v2 as v2  # noqa: E402
from rtt_testing import init_local_ray, ran_when, rows_loop, trials_at_once  # noqa: E402


def main(flavour: str, n: int, storage: str) -> None:
    init_local_ray(4, log_to_driver=False)
    log_dir = tempfile.mkdtemp(prefix="rtt_data_trials_")
    trainer = v2.DataParallelTrainer(
        rows_loop,
        train_loop_config={"log_dir": log_dir},
        datasets={"train": ray.data.range(200)},
        scaling_config=ray.train.ScalingConfig(num_workers=2),
    )
    kept = flavour == "kept"
    tuner = v2.Tuner(
        trainer,
        param_space={"train_loop_config": {"lr": ray.tune.grid_search(list(range(n)))}},
        tune_config=ray.tune.TuneConfig(max_concurrent_trials=2 if kept else 1),
        run_config=ray.tune.RunConfig(
            name=f"data_{flavour}_{time.time_ns()}", storage_path=storage, verbose=0
        ),
        data_cpus_per_trial=None if kept else 0,
    )
    start = time.monotonic()
    results = tuner.fit()
    seconds = time.monotonic() - start
    print(
        json.dumps(
            {
                "seconds": seconds,
                "errors": len(results.errors),
                "rows": sorted(r.metrics.get("rows", 0) for r in results),
                "at_once": trials_at_once(ran_when(log_dir)),
            }
        )
    )
    ray.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
