#!/usr/bin/env python3
"""One flavour of the per-trial cost of short trials, in a process of its own.

    python scripts/bench_v2_trials.py FLAVOUR N    (prints one JSON line)

FLAVOUR: ``v2_tuner`` (``ray_tt_ext.v2.Tuner(trainer)``), ``rays_pattern``
(Ray's documented Tune + Train V2 pattern under ``ray.tune.Tuner``: a Tune
function that fits a V2 trainer with ``TuneReportCallback``; the function's
trial takes a CPU, its run's worker another, ``max_concurrent_trials=2``), ``v1_tuner`` (``ray_tt_ext.Tuner`` over a
Train V1 trainer with ``trainer_resources={"CPU": 0}``). Each: N trials of a
1-worker trainer (1 CPU) that reports once, on a local Ray with 4 CPUs. Prints the fit's seconds, per trial, the placement groups not removed
and the CPUs free after ``fit()``. Run by ``scripts/bench.py`` (section
``v2_trials``); Train V1 and V2 cannot share a process.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["PYTHONPATH"] = os.pathsep.join(
    p
    for p in [
        str(Path(__file__).resolve().parent),
        str(ROOT),
        os.environ.get("PYTHONPATH", ""),
    ]
    if p
)
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_TRAIN_ENABLE_V2_MIGRATION_WARNINGS", "0")
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")

CPUS = 4


def one_report(config):
    import ray.train

    ray.train.report({"loss": config.get("lr", 1.0)})


def rays_pattern(config):
    import ray.train
    import ray.tune
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
    from ray.tune.integration.ray_train import TuneReportCallback

    DataParallelTrainer(
        one_report,
        train_loop_config={"lr": config["lr"]},
        scaling_config=ray.train.ScalingConfig(num_workers=1),
        run_config=ray.train.RunConfig(
            name=ray.tune.get_context().get_trial_name(),
            storage_path=config["storage_path"],
            callbacks=[TuneReportCallback()],
        ),
    ).fit()


def run(flavour: str, n: int) -> dict:
    storage = tempfile.mkdtemp(prefix="rtt_bench_v2_")
    if flavour == "v1_tuner":
        import ray_tt_ext  # its first Train V1 name turns V1 on

        tuner_cls, trainer_cls = ray_tt_ext.Tuner, ray_tt_ext.DataParallelTrainer
    import ray
    import ray.train
    import ray.tune
    from ray.util import placement_group_table

    from rtt_testing import init_local_ray

    init_local_ray(CPUS, log_to_driver=False)
    lrs = ray.tune.grid_search([float(i + 1) for i in range(n)])
    run_config = ray.tune.RunConfig(name=flavour, storage_path=storage, verbose=0)
    if flavour == "v2_tuner":
        import ray_tt_ext.v2 as v2

        tuner = v2.Tuner(
            v2.DataParallelTrainer(
                one_report, scaling_config=ray.train.ScalingConfig(num_workers=1)
            ),
            param_space={"train_loop_config": {"lr": lrs}},
            run_config=run_config,
        )
    elif flavour == "rays_pattern":
        # As Ray documents it: the Tune function takes a CPU of its own (Tune
        # refuses a trial of none), its run's worker another, so that
        # max_concurrent_trials keeps the two from waiting on each other.
        tuner = ray.tune.Tuner(
            rays_pattern,
            param_space={"lr": lrs, "storage_path": os.path.join(storage, "runs")},
            tune_config=ray.tune.TuneConfig(max_concurrent_trials=CPUS // 2),
            run_config=run_config,
        )
    else:
        from ray.air.config import ScalingConfig

        tuner = tuner_cls(
            trainer_cls(
                one_report,
                scaling_config=ScalingConfig(num_workers=1, trainer_resources={"CPU": 0}),
            ),
            param_space={"train_loop_config": {"lr": lrs}},
            run_config=run_config,
        )
    start = time.perf_counter()
    results = tuner.fit()
    seconds = time.perf_counter() - start
    time.sleep(2.0)  # let Tune's removals land before counting what is left
    left = [pg for pg in placement_group_table().values() if pg["state"] != "REMOVED"]
    out = {
        "flavour": flavour,
        "trials": n,
        "errors": len(results.errors),
        "seconds": seconds,
        "seconds_per_trial": seconds / n,
        "placement_groups_left": len(left),
        "free_cpus": ray.available_resources().get("CPU", 0.0),
        "ray": ray.__version__,
    }
    ray.shutdown()
    return out


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], int(sys.argv[2]))))
