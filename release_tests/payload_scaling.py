"""Scenario 2: registered payload against attached size, ours vs a regressed trainer.

For 1 MiB .. 1 GiB attached (``train_loop_config``), measure the payload Tune
would register for a ray_tt_ext trainer and for a deliberately regressed one
whose generated trainable captures ``self`` (Ray #43146). Writes a table
(``payload_scaling.csv``) and a plot (``payload_scaling.png``) next to the JSON.
The regressed trainer is measured with ``inspect_payload`` only: nothing of it
is ever sent.
"""

from __future__ import annotations

from common import Context, GiB, MiB, main

import ray_tt_ext
from ray_tt_ext._payload import inspect_registered


def noop(config):
    pass


def _regressed_cls():
    from ray.tune.trainable import wrap_function

    class RegressedTrainer(ray_tt_ext.DataParallelTrainer):
        def _generate_trainable_cls(self):
            trainer = self  # the #43146 regression

            def train_coordinator_fn(config):
                trainer.training_loop()

            return wrap_function(train_coordinator_fn)

    return RegressedTrainer


def run(ctx: Context) -> dict:
    import numpy as np
    import ray.train

    sizes = [MiB, 4 * MiB, 16 * MiB] if ctx.smoke else [MiB, 16 * MiB, 128 * MiB, GiB]
    ctx.init_ray(num_cpus=2)
    regressed_cls = _regressed_cls()
    rows = []
    try:
        for size in sizes:
            weights = np.ones(size // 8)
            kwargs = dict(
                train_loop_config={"weights": weights},
                scaling_config=ray.train.ScalingConfig(num_workers=1),
            )
            ours = ray_tt_ext.DataParallelTrainer(noop, **kwargs).as_trainable()
            ours_bytes = inspect_registered(ours).total_bytes
            regressed = regressed_cls(noop, **kwargs)._generate_trainable_cls()
            regressed_report = ray_tt_ext.inspect_payload(regressed)
            rows.append(
                {
                    "attached_bytes": size,
                    "ray_tt_ext_bytes": ours_bytes,
                    "regressed_bytes": regressed_report.total_bytes,
                    "regressed_top": regressed_report.contributors[0].path,
                }
            )
            ctx.progress(
                f"{size / MiB:7.0f} MiB attached: ours {ours_bytes} B, "
                f"regressed {regressed_report.total_bytes / MiB:.1f} MiB"
            )
            del ours, regressed, weights
    finally:
        ray.shutdown()
    baseline = rows[0]["ray_tt_ext_bytes"]
    for row in rows:
        assert abs(row["ray_tt_ext_bytes"] - baseline) < 4096, row
        assert row["regressed_bytes"] >= row["attached_bytes"], row
        assert "<closure>.trainer" in row["regressed_top"], row
    csv = ctx.out_dir / "payload_scaling.csv"
    csv.write_text(
        "attached_bytes,ray_tt_ext_bytes,regressed_bytes\n"
        + "".join(
            f"{r['attached_bytes']},{r['ray_tt_ext_bytes']},{r['regressed_bytes']}\n"
            for r in rows
        )
    )
    png = ctx.out_dir / "payload_scaling.png"
    _plot(rows, png)
    return {
        "rows": rows,
        "max_ray_tt_ext_bytes": max(r["ray_tt_ext_bytes"] for r in rows),
        "table": str(csv),
        "plot": str(png),
    }


def _plot(rows, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [r["attached_bytes"] / MiB for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.loglog(
        x, [r["regressed_bytes"] for r in rows], "o-", label="trainable capturing self"
    )
    ax.loglog(x, [r["ray_tt_ext_bytes"] for r in rows], "s-", label="ray_tt_ext")
    ax.axhline(ray_tt_ext.GRPC_MAX_MESSAGE_BYTES, color="red", ls="--", label="gRPC limit")
    ax.set_xlabel("attached to the trainer (MiB)")
    ax.set_ylabel("payload registered in the GCS (bytes)")
    ax.set_title("What Tune registers per trainer")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main(run))
