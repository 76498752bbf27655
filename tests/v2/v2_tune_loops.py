"""Training loops for ray_tt_ext.v2.Tuner(trainer) tests (importable on Ray's workers)."""

from __future__ import annotations

import json
import os
import tempfile
import time

import ray.train


def _state_checkpoint(state: dict) -> ray.train.Checkpoint:
    d = tempfile.mkdtemp()
    with open(os.path.join(d, "state.json"), "w") as f:
        json.dump(state, f)
    return ray.train.Checkpoint.from_directory(d)


def restored_state() -> dict:
    """The restored checkpoint's state (``{}`` without one)."""
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        return {}
    with checkpoint.as_directory() as d:
        with open(os.path.join(d, "state.json")) as f:
            return json.load(f)


def steps_loop(config: dict) -> None:
    """``steps`` reports, each with a checkpoint from rank 0 holding its step.

    ``lr`` shapes the loss; ``fail_at`` (with ``marker``) raises or kills the
    worker once; ``sleep_s`` paces the steps; ``log_dir`` gets one line per
    step (the trial's pid, time) so tests can read the concurrency back.
    """
    ctx = ray.train.get_context()
    rank = ctx.get_world_rank()
    restored = restored_state()
    start = restored["step"] + 1 if restored else 0
    for step in range(start, config.get("steps", 3)):
        if config.get("fail_at") == step and rank == 0:
            marker = config["marker"]
            if not os.path.exists(marker):
                open(marker, "w").close()
                if config.get("fail_how") == "kill":
                    os._exit(1)
                raise ValueError(f"lr={config.get('lr')} diverged at step {step}")
        time.sleep(config.get("sleep_s", 0))
        if config.get("log_dir"):
            with open(os.path.join(config["log_dir"], f"{os.getpid()}.log"), "a") as f:
                f.write(f"{config.get('trial_key', '')} {time.time()}\n")
        metrics = {
            "step": step,
            "start": start,
            "loss": config.get("lr", 1.0) / (step + 1),
            "rank": rank,
            "world_size": ctx.get_world_size(),
            "restored_lr": restored.get("lr", -1.0),
            "worker_pid": os.getpid(),
        }
        checkpoint = _state_checkpoint({"step": step, "lr": config.get("lr")})
        ray.train.report(metrics, checkpoint=checkpoint if rank == 0 else None)


def rays_pattern(config: dict) -> None:
    """Ray's documented Tune + Train V2 pattern: a Tune function that builds Ray's
    own V2 trainer, names its run after the trial, adds TuneReportCallback, fits."""
    import ray.tune
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
    from ray.tune.integration.ray_train import TuneReportCallback

    trainer = DataParallelTrainer(
        steps_loop,
        train_loop_config={"steps": config["steps"], "lr": config["lr"], "sleep_s": 0.3},
        scaling_config=ray.train.ScalingConfig(num_workers=1),
        run_config=ray.train.RunConfig(
            name=ray.tune.get_context().get_trial_name(),
            storage_path=config["storage_path"],
            callbacks=[TuneReportCallback()],
        ),
    )
    trainer.fit()
