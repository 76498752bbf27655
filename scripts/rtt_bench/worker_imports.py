#!/usr/bin/env python3
"""What ray_tt_ext's modules add to a Train V2 worker's memory, module by module.

    .venv/bin/python scripts/rtt_bench/worker_imports.py

1. A fit of Ray's own Train V2 ``DataParallelTrainer`` (1 worker, one report
   with a checkpoint, as the ``v2_trials`` section's trials) records the
   modules its worker has loaded after the report: Ray's V2 worker code, Ray
   Tune (which ``ray.train`` loads at a checkpoint report), the controller's
   module (the worker holds the controller actor's handle, and Ray loads an
   actor's class where its handle is deserialized).
2. A fresh interpreter imports those, then, one at a time, the modules a
   ``ray_tt_ext.v2`` worker loads beyond them, and prints the unique memory
   (USS, from ``/proc/self/smaps_rollup``) each adds, and the Ray modules it
   brings.

A ``ray_tt_ext.v2`` worker loads ``_v2_trial`` because it holds the trial
actor's handle (its reports are committed through it), and ``_v2_trial``
imports the rest. The figures are of a plain interpreter, not of a Ray worker
process: the order of imports decides which module is charged with a shared
dependency. docs/benchmarks.md (section ``v2_trials``, "Memory") cites them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: In the order a ray_tt_ext.v2 worker's imports reach them.
STEPS = [
    "ray.tune.trainable.function_trainable",  # the trial class's base (Tune's)
    "ray_tt_ext._compat",
    "ray_tt_ext._train_v2",
    "ray_tt_ext._v2_controller",
    "ray_tt_ext._v2_trial",
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


def capture(out: str) -> None:
    """Step 1 (this process: a driver on a local Ray of its own)."""
    import ray.train
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    from rtt_testing import init_local_ray

    init_local_ray(2, log_to_driver=False)
    DataParallelTrainer(
        _loop,
        train_loop_config={"out": out},
        scaling_config=ray.train.ScalingConfig(num_workers=1),
        run_config=ray.train.RunConfig(storage_path=tempfile.mkdtemp()),
    ).fit()


def _uss_mib() -> float:
    import gc

    gc.collect()
    kib = 0
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith(("Private_Clean", "Private_Dirty")):
                kib += int(line.split()[1])
    return kib / 1024


def measure(modules_file: str) -> None:
    """Step 2 (a fresh interpreter)."""
    import importlib

    for name in json.loads(Path(modules_file).read_text()):
        if name == "__main__" or name.startswith("ray_tt_ext"):
            continue
        try:
            importlib.import_module(name)
        except Exception:  # a module only its own process can import
            pass
    before, loaded = _uss_mib(), set(sys.modules)
    print(f"Ray's own V2 worker's modules: {before:.1f} MiB")
    for name in STEPS:
        importlib.import_module(name)
        now, new = _uss_mib(), set(sys.modules) - loaded
        ray_modules = sorted(m for m in new if not m.startswith("ray_tt_ext"))
        shown = ", ".join(ray_modules[:6]) + (" ..." if len(ray_modules) > 6 else "")
        print(f"+ {name}: {now - before:+.1f} MiB; {len(ray_modules)} Ray modules: {shown}")
        before, loaded = now, set(sys.modules)


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] in ("--capture", "--measure"):
        sys.path.insert(0, str(ROOT))
        (capture if sys.argv[1] == "--capture" else measure)(sys.argv[2])
        return 0
    env = dict(os.environ, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    with tempfile.TemporaryDirectory() as d:
        modules = os.path.join(d, "modules.json")
        subprocess.run(
            [sys.executable, __file__, "--capture", modules],
            check=True,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        subprocess.run(
            [sys.executable, __file__, "--measure", modules], check=True, env=env
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
