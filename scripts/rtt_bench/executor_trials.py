"""Section ``executor_trials`` of scripts/bench.py: short trials of a 1-worker trainer that reports once: upstream Ray, ray_tt_ext with Ray's executor, with ``remote_executor=True``; fit() time and the memory of all Ray processes per running trial (RSS and PSS, sampled from /proc). ``time``: 24 trials (6 with --quick) on ``num_cpus=2``, one at a time; ``memory``: 8 trials at once (4 with --quick), two alternating pairs of Ray's executor and the remote one (one with --quick). Goals: remote / Ray's executor <= 1.10 in time, <= 50 MiB more memory per running trial (also printed: what it adds beyond the hosts' own memory)."""

from __future__ import annotations

import statistics
import time
from typing import Any

import ray
import ray.cloudpickle
import ray.train
import ray.tune
from ray.train.data_parallel_trainer import (
    DataParallelTrainer as RayDataParallelTrainer,
)

import ray_tt_ext
from ray_tt_ext import _compat
from rtt_bench.common import _fit_seconds, _sample_memory, _table, progress
from rtt_testing import init_local_ray

# -- executor_trials: the remote executor's cost per short trial -----------------------

_TRIAL_FLAVOURS = ("upstream", "rays_executor", "remote_executor")


def _one_report_loop(config):
    time.sleep(config.get("sleep_s", 0.0))  # the memory setup: trials overlap
    ray.train.report({"done": 1})


def _trials_case(
    flavour: str, n: int, storage: str, sleep_s: float = 0.0, trainer_cpus: Any = None
) -> dict[str, Any]:
    import threading

    scaling = ray.train.ScalingConfig(
        num_workers=1,
        trainer_resources=None if trainer_cpus is None else {"CPU": trainer_cpus},
    )
    loop_config = {"sleep_s": sleep_s}
    name = f"trials_{flavour}_{time.time_ns()}"
    run_config = _compat.TuneRunConfig(storage_path=storage, name=name, verbose=0)
    tune_config = ray.tune.TuneConfig(num_samples=n)
    if flavour == "upstream":
        tuner = ray.tune.Tuner(
            RayDataParallelTrainer(
                _one_report_loop, train_loop_config=loop_config, scaling_config=scaling
            ),
            tune_config=tune_config,
            run_config=run_config,
        )
    else:
        tuner = ray_tt_ext.Tuner(
            ray_tt_ext.DataParallelTrainer(
                _one_report_loop,
                train_loop_config=loop_config,
                scaling_config=scaling,
                remote_executor=flavour == "remote_executor",
            ),
            tune_config=tune_config,
            run_config=run_config,
        )
    stop, samples = threading.Event(), []
    sampler = threading.Thread(target=_sample_memory, args=(stop, samples), daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    results = tuner.fit()
    seconds = time.perf_counter() - t0
    stop.set()
    sampler.join()
    assert not results.errors, results.errors
    mean = {
        k: statistics.mean(s[k] for s in samples) if samples else 0.0
        for k in ("running", "rss_mib", "pss_mib", "hosts", "host_rss_mib", "host_pss_mib")
    }
    return {"seconds": seconds, "seconds_per_trial": seconds / n, **mean}


def _memory_per_running_trial(out: dict[str, Any]) -> None:
    """Add each flavour's memory per running trial, and what the remote adds."""
    for measure in ("rss", "pss"):
        per_trial = {
            f: out[f][f"{measure}_mib"] / out[f]["running"] if out[f]["running"] else 0.0
            for f in _TRIAL_FLAVOURS
        }
        out[f"{measure}_mib_per_running_trial"] = per_trial
        out[f"extra_{measure}_mib_per_running_trial"] = (
            per_trial["remote_executor"] - per_trial["rays_executor"]
        )
        # The same without the hosts' own memory (a fixed cost per node while a
        # fit runs): what each further trial adds.
        remote = out["remote_executor"]
        beyond = (
            (remote[f"{measure}_mib"] - remote[f"host_{measure}_mib"]) / remote["running"]
            if remote["running"]
            else 0.0
        )
        out[f"extra_{measure}_mib_per_running_trial_beyond_hosts"] = (
            beyond - per_trial["rays_executor"]
        )


def _trials_setup(
    n: int, num_cpus: int, storage: str, pairs: int = 1, **case: Any
) -> dict[str, Any]:
    """Upstream once, then ``pairs`` runs of Ray's executor and the remote one,
    alternating which goes first; each flavour's figures are the mean of its runs
    (``seconds_by_run`` keeps each run's fit time)."""
    out: dict[str, Any] = {"trials": n, "num_cpus": num_cpus, "pairs": pairs}
    order = ["upstream"]
    for i in range(pairs):
        pair = ["rays_executor", "remote_executor"]
        order += pair if i % 2 == 0 else pair[::-1]
    runs: dict[str, list[dict[str, Any]]] = {f: [] for f in _TRIAL_FLAVOURS}
    for flavour in order:
        init_local_ray(num_cpus, log_to_driver=False)
        try:
            progress(f"executor_trials: {flavour}, {n} trials, num_cpus={num_cpus}")
            runs[flavour].append(_trials_case(flavour, n, storage, **case))
        finally:
            ray.shutdown()
        progress(f"executor_trials {flavour}: {runs[flavour][-1]['seconds']:.1f} s")
    for flavour, cases in runs.items():
        out[flavour] = {k: statistics.mean(c[k] for c in cases) for k in cases[0]}
        out[flavour]["seconds_by_run"] = [c["seconds"] for c in cases]
    _memory_per_running_trial(out)
    return out


def _trials_rows(out: dict[str, Any]) -> list[list[Any]]:
    return [
        [
            f,
            _fit_seconds(out[f], unit=""),
            f"{out[f]['seconds_per_trial']:.2f}",
            f"{out[f]['running']:.2f}",
            f"{out['rss_mib_per_running_trial'][f]:.0f}",
            f"{out['pss_mib_per_running_trial'][f]:.0f}",
            f"{out[f]['host_rss_mib']:.0f} / {out[f]['host_pss_mib']:.0f}",
        ]
        for f in _TRIAL_FLAVOURS
    ]


_TRIALS_HEADER = [
    "flavour",
    "fit s",
    "s/trial",
    "trials running",
    "RSS MiB/trial",
    "PSS MiB/trial",
    "host RSS / PSS MiB",
]


def _trials_goals(out: dict[str, Any]) -> dict[str, Any]:
    """The goals, in each setup: <= 1.10x Ray's executor's fit() time, and
    <= 50 MiB RSS more per running trial. Met only if met in both setups."""
    ratios = {
        setup: out[setup]["remote_executor"]["seconds"]
        / out[setup]["rays_executor"]["seconds"]
        for setup in ("time", "memory")
    }
    extra = {setup: out[setup]["extra_rss_mib_per_running_trial"] for setup in ratios}
    met = {setup: ratios[setup] <= 1.10 and extra[setup] <= 50 for setup in ratios}
    return {
        "time_ratio_by_setup": ratios,
        "extra_rss_mib_by_setup": extra,
        "goal_met_by_setup": met,
        "goal_met": all(met.values()),
    }


def bench_executor_trials(quick: bool, storage: str) -> dict[str, Any]:
    """Short trials with upstream Ray, ray_tt_ext with Ray's executor, with the
    remote executor, each in a Ray of its own, in two setups. ``time``: N trials
    (a 1-worker trainer that reports once) on ``num_cpus=2``, one at a time (a
    trial takes both CPUs). ``memory``: 8 trials at once (0-CPU coordinators,
    8 logical CPUs, each trial 8 s long), where a shared host is shared; two
    alternating pairs (one fit of 8 trials starting together on 2 cores swings
    by 20% from run to run). Goals: remote / Ray's executor <= 1.10 in time,
    and at most 50 MiB more memory per running trial."""
    n = 6 if quick else 24
    out: dict[str, Any] = {
        "time": _trials_setup(n, 2, storage),
        "memory": _trials_setup(
            4 if quick else 8,
            4 if quick else 8,
            storage,
            pairs=1 if quick else 2,
            sleep_s=8.0,
            trainer_cpus=0,
        ),
    }
    out.update(_trials_goals(out))
    for setup in ("time", "memory"):
        data = out[setup]
        print(
            _table(
                f"{setup}: {data['trials']} short trials, num_cpus={data['num_cpus']}; "
                f"remote adds {data['extra_rss_mib_per_running_trial']:+.0f} MiB RSS, "
                f"{data['extra_pss_mib_per_running_trial']:+.0f} MiB PSS per running trial "
                f"({data['extra_rss_mib_per_running_trial_beyond_hosts']:+.0f} MiB RSS "
                "beyond the host's own)",
                _TRIALS_HEADER,
                _trials_rows(data),
            )
        )
        print(
            f"{setup} setup: remote / Ray's executor "
            f"{out['time_ratio_by_setup'][setup]:.3f} in time, "
            f"{out['extra_rss_mib_by_setup'][setup]:+.0f} MiB RSS per running trial; "
            f"goal (<= 1.10x, <= 50 MiB): "
            f"{'met' if out['goal_met_by_setup'][setup] else 'NOT met'}"
        )
    return out
