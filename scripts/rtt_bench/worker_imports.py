#!/usr/bin/env python3
"""What ray_tt_ext's modules add to a Train V2 worker's memory, module by module.

    .venv/bin/python scripts/rtt_bench/worker_imports.py

1. Two fits, each in a process of its own, record the modules their worker
   has loaded after one report with a checkpoint (as the ``v2_trials``
   section's trials): one of Ray's own Train V2 ``DataParallelTrainer``
   (Ray's V2 worker code; Ray Tune, which ``ray.train`` loads at a checkpoint
   report; Ray's controller module and what it imports, which the worker
   loads when it unpickles the callbacks the controller hands it: they live
   in ``ray.train.v2._internal.callbacks``, whose package imports the
   controller), and one under ``ray_tt_ext.v2.Tuner``.
2. A fresh interpreter imports the first worker's modules, then, one at a
   time, :data:`STEPS`, and prints the unique memory (USS: private clean and
   dirty pages, ``/proc/self/smaps_rollup``, the figure psutil reports as
   ``uss`` and the bench samples) and the CPU time (its imports' share of a
   worker's start) each adds, the modules it brings, and the total. It says which modules the ``ray_tt_ext.v2`` worker loaded that the
   steps did not, and which of the first worker's it could not import.

How a ``ray_tt_ext.v2`` worker comes to load them: its training function
(``v2._train.PolicyTrainFn``, pickled by reference) imports ``v2._train``
and, through it, ``_compat``; the trial actor's handle (its reports are
committed through it) loads the trial class, whose module ``v2._trial``
imports ``v2._controller``. The figures are of a plain interpreter, not of a
Ray worker process: the order of imports decides which module is charged with
a dependency they share. docs/benchmarks.md (section ``v2_trials``,
"Memory") cites them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: In the order a ray_tt_ext.v2 worker's imports reach them.
STEPS = [
    "ray.tune.trainable.function_trainable",  # the trial class's base (Tune's)
    "ray_tt_ext._compat",
    "ray_tt_ext.v2._train",
    "ray_tt_ext.v2._worker_group",
    "ray_tt_ext.v2._controller",
    "ray_tt_ext.v2._trial",
]


def _loop(config):
    import json
    import sys
    import tempfile

    import ray.train

    d = tempfile.mkdtemp()
    Path(d, "state").write_text("1")
    ray.train.report({"x": 1}, checkpoint=ray.train.Checkpoint.from_directory(d))
    Path(config["out"]).write_text(json.dumps(sorted(sys.modules)))


def capture(which: str, out: str) -> None:
    """Step 1 (this process: a driver on a local Ray of its own)."""
    import ray.train
    import ray.tune

    from rtt_testing import init_local_ray

    init_local_ray(2, log_to_driver=False)
    scaling = ray.train.ScalingConfig(num_workers=1)
    storage = tempfile.mkdtemp()
    if which == "ray":
        from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

        DataParallelTrainer(
            _loop,
            train_loop_config={"out": out},
            scaling_config=scaling,
            run_config=ray.train.RunConfig(storage_path=storage),
        ).fit()
    else:
        import ray_tt_ext.v2 as v2

        trainer = v2.DataParallelTrainer(
            _loop, train_loop_config={"out": out}, scaling_config=scaling
        )
        run_config = ray.tune.RunConfig(storage_path=storage, verbose=0)
        [result] = v2.Tuner(trainer, run_config=run_config).fit()
        if result.error is not None:
            raise result.error


def _uss_mib() -> float:
    import gc

    gc.collect()
    kib = 0
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith(("Private_Clean", "Private_Dirty")):
                kib += int(line.split()[1])
    return kib / 1024


def measure(ray_modules_file: str, ours_modules_file: str) -> None:
    """Step 2 (a fresh interpreter)."""
    import importlib

    failed = []
    for name in json.loads(Path(ray_modules_file).read_text()):
        if name == "__main__":
            continue
        try:
            importlib.import_module(name)
        except Exception:  # a module only its own process can import
            failed.append(name)
    start = before = _uss_mib()
    loaded = set(sys.modules)
    print(f"Ray's own V2 worker's modules: {before:.1f} MiB")
    cpu_total = 0.0
    for name in STEPS:
        cpu = time.process_time()
        importlib.import_module(name)
        cpu = time.process_time() - cpu
        cpu_total += cpu
        now, new = _uss_mib(), set(sys.modules) - loaded
        ray_modules = sorted(m for m in new if m.startswith("ray."))
        shown = ", ".join(ray_modules[:6]) + (" ..." if len(ray_modules) > 6 else "")
        print(
            f"+ {name}: {now - before:+.1f} MiB, {cpu:.2f} CPU s; {len(new)} modules, "
            f"Ray's: {shown}"
        )
        before, loaded = now, set(sys.modules)
    print(f"= all steps: {before - start:+.1f} MiB, {cpu_total:.2f} CPU s")
    ours = set(json.loads(Path(ours_modules_file).read_text()))
    missed = sorted(m for m in ours - set(sys.modules) if m != "__main__")
    print(f"loaded by a ray_tt_ext.v2 worker, not by the steps: {missed or 'none'}")
    if failed:
        print(f"not importable here, of Ray's worker's: {len(failed)}: {failed[:8]}")


def _run(*args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "RAY_TRAIN_V2_ENABLED"}
    env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    proc = subprocess.run(
        [sys.executable, __file__, *args], env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return proc.stdout


def main() -> int:
    if len(sys.argv) > 1:
        sys.path.insert(0, str(ROOT))
        if sys.argv[1] == "--capture":
            capture(sys.argv[2], sys.argv[3])
        else:
            measure(sys.argv[2], sys.argv[3])
        return 0
    with tempfile.TemporaryDirectory() as d:
        ray_file, ours_file = os.path.join(d, "ray.json"), os.path.join(d, "ours.json")
        _run("--capture", "ray", ray_file)
        _run("--capture", "ours", ours_file)
        print(_run("--measure", ray_file, ours_file), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
