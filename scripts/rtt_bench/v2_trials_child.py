#!/usr/bin/env python3
"""One flavour of the per-trial cost of short trials, in a process of its own.

    python scripts/rtt_bench/v2_trials_child.py FLAVOUR N [HOLD_S [cpu]]    (prints one JSON line)

FLAVOUR: ``v2_tuner`` (``ray_tt_ext.v2.Tuner(trainer)``; ``v2_reuse``: with
``TuneConfig(reuse_actors=True)``; ``torch`` and ``torch_reuse``: the same with
Ray's ``TorchTrainer``, 2 workers over gloo, an all-reduce before the report),
``function`` (a plain Tune function trial making the same report, 1 CPU;
``function_2cpu``: 2 CPUs, beside the 2-worker torch trials), ``rays_pattern``
(Ray's documented Tune + Train V2 pattern under ``ray.tune.Tuner``: a Tune
function that fits a V2 trainer with ``TuneReportCallback``; the function's
trial takes a CPU, its run's worker another, ``max_concurrent_trials=2``),
``v1_tuner`` (``ray_tt_ext.Tuner`` over a Train V1 trainer with
``trainer_resources={"CPU": 0}``). Each: N trials of a 1-worker trainer (1
CPU) that reports once, with a small checkpoint, on a local Ray with 4 CPUs.
Prints the fit's seconds, per trial, the placement groups not removed and the
CPUs free after ``fit()``.

With ``HOLD_S`` > 0 the loop waits that long after its report, so that the
trials' processes all run at once, and the memory of a running trial is
sampled: the unique memory (USS) and RSS of every Ray worker process that is
not idle (trial actors, controllers, workers, Ray's helper actors), divided
by the training workers running (one per trial), the median over the
samples with the most trials running. With ``cpu``, the CPU seconds of each
kind of process during the fit (:class:`CpuSampler`).

Run by ``scripts/bench.py`` (section ``v2_trials``); Train V1 and V2 cannot
share a process.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[2]
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


def one_report(config, api=None):
    """One report with a small checkpoint, through ``api`` (``ray.train``; the
    function trials pass ``ray.tune``)."""
    if api is None:
        import ray.train as api

    d = tempfile.mkdtemp()
    with open(os.path.join(d, "state.json"), "w") as f:
        json.dump({"lr": config.get("lr", 1.0)}, f)
    api.report({"loss": config.get("lr", 1.0)}, checkpoint=api.Checkpoint.from_directory(d))
    time.sleep(config.get("hold_s", 0))  # the memory run: every trial alive at once


class _Sampler:
    """Calls ``_sample()`` every ``INTERVAL_S`` in a thread while the ``with``
    block runs (bench only)."""

    INTERVAL_S = 0.25

    def __init__(self) -> None:
        import threading

        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.INTERVAL_S):
            self._sample()

    def _sample(self) -> None:
        raise NotImplementedError


def _actor_role(title: str) -> str:
    """``ray::<actor class>`` of a Ray worker's process title
    (``ray::RayTrainWorker.run_train_fn`` -> ``ray::RayTrainWorker``)."""
    return title.split()[0].split(".")[0].rstrip(":")


class MemorySampler(_Sampler):
    """Samples the memory of this machine's Ray worker processes (bench only)."""

    def __init__(self) -> None:
        super().__init__()
        #: (training workers, USS, RSS, {role: (processes, USS)}) per sample.
        self.samples: list[tuple[int, int, int, dict[str, tuple[int, int]]]] = []

    def _sample(self) -> None:
        import psutil

        workers = uss = rss = 0
        roles: dict[str, tuple[int, int]] = {}
        for proc in psutil.process_iter(["cmdline"]):
            title = " ".join(proc.info["cmdline"] or [])
            if not title.startswith("ray::") or title.startswith("ray::IDLE"):
                continue
            try:
                info = proc.memory_full_info()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            uss, rss = uss + info.uss, rss + info.rss
            workers += "RayTrainWorker" in title
            role = _actor_role(title)
            count, role_uss = roles.get(role, (0, 0))
            roles[role] = (count + 1, role_uss + info.uss)
        self.samples.append((workers, uss, rss, roles))

    def per_trial_mib(self) -> dict[str, Any]:
        """Per running trial (the samples with the most training workers), and
        each role's USS per process (``ray::<actor class>``: the trial actor,
        the training worker, Ray's shared actors) in those samples."""
        import statistics

        most = max((s[0] for s in self.samples), default=0)
        if not most:
            raise RuntimeError("no memory sample saw a training worker running")
        full = [s for s in self.samples if s[0] == most]
        by_role: dict[str, list[float]] = {}
        for _, _, _, roles in full:
            for role, (count, role_uss) in roles.items():
                by_role.setdefault(role, []).append(role_uss / count / 2**20)
        return {
            "trials_at_once": most,
            "uss_mib": statistics.median(u / w for w, u, _, _ in full) / 2**20,
            "rss_mib": statistics.median(r / w for w, _, r, _ in full) / 2**20,
            "uss_mib_per_process": {
                role: round(statistics.median(v), 1) for role, v in sorted(by_role.items())
            },
        }


class CpuSampler(_Sampler):
    """CPU seconds by process role while the fit runs (bench only): every 0.1 s
    the user + system CPU time of this machine's Ray processes, each process
    counted under the last role it was seen in (``ray::<actor class>``; a
    worker process still starting when last seen, which never ran an actor,
    counts as ``(started, never an actor)``; Ray's own daemons under
    ``Ray's daemons``; this process as ``driver``)."""

    INTERVAL_S = 0.1

    def __init__(self) -> None:
        super().__init__()
        self._seen: dict[int, tuple[str, float]] = {}
        self._base: dict[int, float] = {}

    @staticmethod
    def _role(cmdline: list[str], pid: int) -> Optional[str]:
        if pid == os.getpid():
            return "driver"
        title = " ".join(cmdline)
        if title.startswith("ray::"):
            return _actor_role(title)
        if "default_worker.py" in title:
            return "(started, never an actor)"
        if "/ray/" in title or "ray/core/src" in title:
            return "Ray's daemons"
        return None

    def __enter__(self) -> CpuSampler:
        import psutil

        for proc in psutil.process_iter():
            try:
                times = proc.cpu_times()
                self._base[proc.pid] = times.user + times.system
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        return super().__enter__()

    def _sample(self) -> None:
        import psutil

        for proc in psutil.process_iter(["cmdline"]):
            try:
                role = self._role(proc.info["cmdline"] or [], proc.pid)
                if role is None:
                    continue
                times = proc.cpu_times()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            before = self._seen.get(proc.pid)
            if before and before[0].startswith("ray::") and not role.startswith("ray::"):
                role = before[0]  # e.g. back to ray::IDLE after its actor
            if role == "ray::IDLE" and before and before[0] != "ray::IDLE":
                role = before[0]
            self._seen[proc.pid] = (role, times.user + times.system)

    def by_role(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for pid, (role, cpu) in self._seen.items():
            entry = out.setdefault(role, {"cpu_s": 0.0, "processes": 0})
            entry["cpu_s"] += cpu - self._base.get(pid, 0.0)
            entry["processes"] += 1
        return out


def torch_one_report(config):
    """``one_report`` after an all-reduce over the run's torch process group."""
    import torch
    import torch.distributed as dist

    total = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(total)
    one_report(dict(config, lr=config.get("lr", 1.0) + 0 * float(total.item())))


def function_report(config):
    """The same report from a plain Tune function trial (no Train run)."""
    import ray.tune

    one_report(config, api=ray.tune)


def rays_pattern(config):
    import ray.train
    import ray.tune
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
    from ray.tune.integration.ray_train import TuneReportCallback

    DataParallelTrainer(
        one_report,
        train_loop_config={"lr": config["lr"], "hold_s": config.get("hold_s", 0)},
        scaling_config=ray.train.ScalingConfig(num_workers=1),
        run_config=ray.train.RunConfig(
            name=ray.tune.get_context().get_trial_name(),
            storage_path=config["storage_path"],
            callbacks=[TuneReportCallback()],
        ),
    ).fit()


def run(flavour: str, n: int, hold_s: float = 0.0, cpu: bool = False) -> dict:
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
    hold = {"hold_s": hold_s} if hold_s else {}
    run_config = ray.tune.RunConfig(name=flavour, storage_path=storage, verbose=0)
    if flavour in ("v2_tuner", "v2_reuse", "torch", "torch_reuse"):
        import ray_tt_ext.v2 as v2

        if flavour.startswith("torch"):
            from ray.train.torch import TorchTrainer

            trainer = TorchTrainer(
                torch_one_report, scaling_config=ray.train.ScalingConfig(num_workers=2)
            )
        else:
            trainer = v2.DataParallelTrainer(
                one_report, scaling_config=ray.train.ScalingConfig(num_workers=1)
            )
        tuner = v2.Tuner(
            trainer,
            param_space={"train_loop_config": {"lr": lrs, **hold}},
            tune_config=ray.tune.TuneConfig(reuse_actors=flavour.endswith("_reuse")),
            run_config=run_config,
        )
    elif flavour in ("function", "function_2cpu"):
        # As many CPUs per trial as the trainer trials it is measured beside.
        cpus = 2 if flavour == "function_2cpu" else 1
        tuner = ray.tune.Tuner(
            ray.tune.with_resources(function_report, {"cpu": cpus}),
            param_space={"lr": lrs, **hold},
            run_config=run_config,
        )
    elif flavour == "rays_pattern":
        # As Ray documents it: the Tune function takes a CPU of its own (Tune
        # refuses a trial of none), its run's worker another, so that
        # max_concurrent_trials keeps the two from waiting on each other.
        tuner = ray.tune.Tuner(
            rays_pattern,
            param_space={
                "lr": lrs,
                "storage_path": os.path.join(storage, "runs"),
                **hold,
            },
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
            param_space={"train_loop_config": {"lr": lrs, **hold}},
            run_config=run_config,
        )
    sampler = MemorySampler() if hold_s else CpuSampler() if cpu else None
    start = time.perf_counter()
    if sampler is None:
        results = tuner.fit()
    else:
        with sampler:
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
    if isinstance(sampler, MemorySampler):
        out["memory"] = sampler.per_trial_mib()
    elif isinstance(sampler, CpuSampler):
        out["cpu_by_role"] = sampler.by_role()
    ray.shutdown()
    return out


if __name__ == "__main__":
    hold_s = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    cpu = len(sys.argv) > 4 and sys.argv[4] == "cpu"
    print(json.dumps(run(sys.argv[1], int(sys.argv[2]), hold_s, cpu)))
