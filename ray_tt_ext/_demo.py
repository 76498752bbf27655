"""``python -m ray_tt_ext demo``: the four guarantees on a local Ray, in about a minute.

1. A Tuner over a trainer holding a large array converts it once.
2. What Tune registers in the GCS, beside what Ray's own trainer registers.
3. A function trainable capturing 600 MiB is caught by the guard, culprit
   named, before anything is sent (Ray would fail with its gRPC error).
4. The trials run with the remote BackendExecutor and name their checkpoints
   by a template.

It ends by naming the folder with the results and a PNG plot of the
registered payload against the data attached to a trainer.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from typing import Any, Optional

import numpy as np
import ray
import ray.tune

import ray_tt_ext
from ray_tt_ext import _compat
from ray_tt_ext._compat import AirScalingConfig
from ray_tt_ext._compat import DataParallelTrainer as RayDataParallelTrainer
from ray_tt_ext._payload import format_bytes

MiB = 1024 * 1024
_conversions = {"count": 0}


class DemoTrainer(ray_tt_ext.DataParallelTrainer):
    """Counts its conversions to a Tune trainable (on the driver)."""

    def as_trainable(self):
        _conversions["count"] += 1
        return super().as_trainable()


def _train_loop(config: dict[str, Any]) -> None:
    import ray.train

    # Gradient descent on x**2 from the weights' mean: the loss depends on lr.
    x = float(config["weights"][:1000].mean())
    rank = ray.train.get_context().get_world_rank()
    for step in range(3):
        x -= config["lr"] * 2 * x
        loss = x * x
        if rank != 0:  # rank 0 saves the checkpoint, every worker reports
            ray.train.report({"step": step, "loss": loss})
            continue
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "state.json"), "w") as f:
                json.dump({"step": step, "x": x}, f)
            ray.train.report(
                {"step": step, "loss": loss},
                checkpoint=ray.train.Checkpoint.from_directory(d),
            )


def _say(title: str) -> None:
    print(f"\n== {title}", flush=True)


def _registered_payloads(sizes_mib: list[int]) -> dict[str, list[int]]:
    """Bytes Tune registers for a trainer carrying ``size`` MiB: ours and Ray's."""
    out: dict[str, list[int]] = {"ray_tt_ext": [], "ray": []}
    for size in sizes_mib:
        # An array in train_loop_config, and JSON-serializable text in metadata.
        attached = dict(
            train_loop_config={"weights": np.ones(size * MiB // 8)},
            metadata={"notes": "x" * (size * MiB)},
        )
        ours = ray_tt_ext.DataParallelTrainer(_train_loop, **attached)
        theirs = RayDataParallelTrainer(_train_loop, **attached)
        out["ray_tt_ext"].append(
            ray_tt_ext.inspect_payload(ours.as_trainable()).total_bytes
        )
        out["ray"].append(ray_tt_ext.inspect_payload(theirs.as_trainable()).total_bytes)
    return out


def _plot(sizes_mib: list[int], payloads: dict[str, list[int]], path: str) -> Optional[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, values in (
        ("Ray's DataParallelTrainer", payloads["ray"]),
        ("ray_tt_ext.DataParallelTrainer", payloads["ray_tt_ext"]),
    ):
        ax.plot(sizes_mib, [v / MiB for v in values], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("data attached to the trainer (MiB, in train_loop_config and metadata)")
    ax.set_ylabel("payload Tune registers in the GCS (MiB)")
    ax.set_title(f"Registered payload against attached data (Ray {_compat.RAY_VERSION})")
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _guard_demo() -> None:
    weights = np.zeros(600 * MiB // 8)  # 600 MiB (zeros: not even touched in memory)

    def train_fn(config):
        ray.tune.report({"mean": float(weights.mean())})

    try:
        ray_tt_ext.Tuner(train_fn)
    except ray_tt_ext.PayloadTooLargeError as e:
        top = e.report.contributors[0]
        print(
            f"  ray_tt_ext.Tuner(train_fn) raised PayloadTooLargeError before anything "
            f"was sent:\n  {format_bytes(e.report.total_bytes)} registered, limit "
            f"{format_bytes(e.limit)}; culprit: {top.path} ({top.type_name}, "
            f"{format_bytes(top.nbytes)})"
        )
        print(
            "  ray.tune.Tuner(train_fn) would pickle it into one gRPC message and fail "
            "deep inside Ray with\n  `Sent message larger than max (... vs. "
            f"{ray_tt_ext.GRPC_MAX_MESSAGE_BYTES})`."
        )
    else:  # pragma: no cover - the guard is the point of this demo
        raise AssertionError("the payload guard did not catch a 600 MiB closure")


def run_demo(size_mb: int = 200, storage_path: Optional[str] = None) -> int:
    os.environ.setdefault("RAY_TRAIN_ENABLE_V2_MIGRATION_WARNINGS", "0")
    storage_path = storage_path or tempfile.mkdtemp(prefix="ray_tt_ext_demo_")
    weights = np.random.default_rng(0).random(size_mb * MiB // 8)
    print(f"ray_tt_ext {ray_tt_ext.__version__} demo on Ray {_compat.RAY_VERSION}")
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(
            address="local",  # a Ray of its own, never a cluster found on the machine
            num_cpus=4,
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            log_to_driver=False,
        )
    try:
        _say("1. Payload guard: a function trainable capturing 600 MiB")
        _guard_demo()

        _say(f"2. A Tuner over a trainer holding {format_bytes(weights.nbytes)}")
        kwargs = dict(
            train_loop_config={"weights": weights},
            scaling_config=AirScalingConfig(num_workers=2),
        )
        upstream = ray_tt_ext.inspect_payload(
            RayDataParallelTrainer(_train_loop, **kwargs).as_trainable()
        )
        t0 = time.monotonic()
        tuner = ray_tt_ext.Tuner(
            DemoTrainer(_train_loop, remote_executor=True, **kwargs),
            param_space={"train_loop_config": {"lr": ray.tune.grid_search([0.01, 0.1])}},
            run_config=_compat.TuneRunConfig(
                name="demo",
                storage_path=storage_path,
                verbose=0,
                checkpoint_config=ray_tt_ext.CheckpointConfig(
                    checkpoint_dir_name="checkpoint_{index:03d}-loss_{loss:.4f}",
                    num_to_keep=2,
                ),
            ),
        )
        ours = ray_tt_ext.inspect_payload(tuner._local_tuner.converted_trainable)
        results = tuner.fit()
        tuner.get_results()
        elapsed = time.monotonic() - t0
        print(
            f"  trials: {len(results)} (errors: {len(results.errors)}), "
            f"{elapsed:.0f} s, remote BackendExecutor on"
        )
        print(
            f"  trainer -> trainable conversions: {_conversions['count']} (once per Tuner)"
        )
        print(
            f"  payload Tune registered in the GCS: {format_bytes(ours.total_bytes)} "
            f"(Ray's own DataParallelTrainer: {format_bytes(upstream.total_bytes)}; "
            f"gRPC limit {format_bytes(ray_tt_ext.GRPC_MAX_MESSAGE_BYTES)})"
        )
        _say("3. Checkpoints named by checkpoint_{index:03d}-loss_{loss:.4f}, 2 kept")
        for result in results:
            names = sorted(os.path.basename(c.path) for c, _ in result.best_checkpoints)
            print(f"  {os.path.basename(result.path)}:")
            for name in names:
                print(f"    {name}")

        _say("4. Registered payload against attached data (train_loop_config + metadata)")
        sizes = [1, 8, 32, 128]
        payloads = _registered_payloads(sizes)
        for size, ours_b, ray_b in zip(
            sizes, payloads["ray_tt_ext"], payloads["ray"], strict=True
        ):
            print(
                f"  {size:4d} MiB attached: ray_tt_ext {format_bytes(ours_b):>10}, "
                f"Ray {format_bytes(ray_b):>10}"
            )
    finally:
        if started_here:
            ray.shutdown()
    plot = _plot(sizes, payloads, os.path.join(storage_path, "registered_payload.png"))
    _say("Results")
    print(f"  experiment folder: {os.path.join(storage_path, 'demo')}")
    print(f"  plot: {plot or '(install matplotlib for the plot)'}")
    return 0 if not results.errors else 1
