"""Training loops for the Train V2 tests, importable by name on Ray's workers."""

from __future__ import annotations

import json
import os
import sys
import tempfile

import ray.train


def _checkpoint(payload: dict, filename: str) -> ray.train.Checkpoint:
    d = tempfile.mkdtemp()
    with open(os.path.join(d, filename), "w") as f:
        json.dump(payload, f)
    return ray.train.Checkpoint.from_directory(d)


def read_state(path: str) -> dict:
    with open(os.path.join(path, "state.json")) as f:
        return json.load(f)


def epochs_loop(config: dict) -> None:
    """Report ``epochs`` checkpoints, continuing after the one restored; every
    rank reports the same metrics, each writes its own file (sharded)."""
    start = 0
    restored = ray.train.get_checkpoint()
    if restored is not None:
        with restored.as_directory() as d:
            start = read_state(d)["epoch"] + 1
    rank = ray.train.get_context().get_world_rank()
    for epoch in range(start, start + config["epochs"]):
        if config.get("fail_at") == epoch and not os.path.exists(config["marker"]):
            open(config["marker"], "w").close()
            raise RuntimeError(f"worker failure at epoch {epoch}")
        # Rank 0 writes state.json; with "sharded", every other rank adds its file.
        filename = "state.json" if rank == 0 else f"shard-{rank}.json"
        ckpt = _checkpoint({"epoch": epoch, "rank": rank}, filename)
        metrics = {"epoch": epoch, "loss": 1.0 / (epoch + 1)}
        if config.get("report_modules"):  # the ray_tt_ext modules this worker loaded
            metrics["modules"] = ",".join(
                sorted(m for m in sys.modules if m.startswith("ray_tt_ext"))
            )
        ray.train.report(
            metrics,
            checkpoint=ckpt if (rank == 0 or config.get("sharded")) else None,
            checkpoint_dir_name=config.get("names", {}).get(str(epoch)),
        )


def v2_enabled_loop(config: dict) -> None:
    from ray.train.v2._internal.constants import is_v2_enabled

    ray.train.report({"v2": int(is_v2_enabled()), "lr": config["lr"]})


def tune_fn(config: dict) -> None:
    """Ray's documented Tune + Train V2 pattern: a Tune function fits a V2 trainer."""
    from ray.tune.integration.ray_train import TuneReportCallback

    import ray_tt_ext.v2 as v2

    trainer = v2.DataParallelTrainer(
        v2_enabled_loop,
        train_loop_config={"lr": config["lr"]},
        scaling_config=ray.train.ScalingConfig(num_workers=1),
        run_config=ray.train.RunConfig(
            name=f"train_lr{config['lr']}",
            storage_path=config["storage_path"],
            callbacks=[TuneReportCallback()],
        ),
    )
    trainer.fit()


#: The default torch process groups this worker's loops ran in (held, so that no
#: later group is taken for one of them), the subgroups they made, and the
#: all-reduces they left pending.
_WORLD_GROUPS: list = []
_SUBGROUPS: list = []
_PENDING: list = []


def torch_loop(config: dict) -> None:
    """DDP on gloo: all-reduce a tensor, Ray Train's barrier and broadcast, save
    the model with torch.save. Reports whether an earlier loop in this process
    ran in the same process group; with ``destroy_after_step``, the loop of
    ``step`` 0 makes a subgroup of every rank, step 1's all-reduces over it
    (``subgroup_sum``); when the loop's ``step`` is ``destroy_after_step``, rank
    0 destroys the groups when it is done, and when it is
    ``pending_after_step``, rank 0 leaves an all-reduce pending."""
    import ray.train.collective
    import ray.train.torch
    import torch
    import torch.distributed as dist

    world = dist.group.WORLD
    same_process_group = any(group is world for group in _WORLD_GROUPS)
    _WORLD_GROUPS.append(world)
    subgroup_sum = None
    if "destroy_after_step" in config and config["step"] == 0:
        _SUBGROUPS.append(dist.new_group(list(range(dist.get_world_size()))))
    if "destroy_after_step" in config and config["step"] == 1:
        ones = torch.tensor([1.0])
        dist.all_reduce(ones, group=_SUBGROUPS[-1])
        subgroup_sum = float(ones.item())
    model = ray.train.torch.prepare_model(torch.nn.Linear(4, 1))
    rank = ray.train.get_context().get_world_rank()
    for epoch in range(config["epochs"]):
        total = torch.tensor([float(rank + 1)])
        dist.all_reduce(total)
        # Ray Train's own collectives (its barrier): rank 0's value on every rank.
        ray.train.collective.barrier()
        sent = ray.train.collective.broadcast_from_rank_zero(
            f"epoch {epoch} of rank {rank}"
        )
        agreed = torch.tensor([float(sent == f"epoch {epoch} of rank 0")])
        dist.all_reduce(agreed)
        d = tempfile.mkdtemp()
        if ray.train.get_context().get_world_rank() == 0:
            torch.save(model.state_dict(), os.path.join(d, "model.pt"))
        ray.train.report(
            {
                "epoch": epoch,
                "allreduce": float(total.item()),
                "ranks_given_rank_0s": float(agreed.item()),
                "worker_actor": ray.get_runtime_context().get_actor_id(),
                "same_process_group": same_process_group,
                "subgroup_sum": subgroup_sum,
                # Ray 2.60's preemption notice (a barrier too); older Rays: none.
                "preempted": getattr(ray.train, "get_preemption_info", lambda: None)()
                is not None,
            },
            checkpoint=ray.train.Checkpoint.from_directory(d)
            if ray.train.get_context().get_world_rank() == 0
            else None,
        )
    if "step" in config and rank == 0:
        if config["step"] == config.get("destroy_after_step"):
            dist.destroy_process_group()  # on rank 0 only: the others still hold it
        if config["step"] == config.get("pending_after_step"):
            # an all-reduce no other rank joins, never waited for: out of step
            _PENDING.append(dist.all_reduce(torch.ones(1), async_op=True))


def no_upload_loop(config: dict) -> None:
    """Write each checkpoint into the run folder yourself; Ray records it in place."""
    from ray.train import CheckpointUploadMode

    for step in range(2):
        path = os.path.join(config["run_dir"], f"mine_{step}")
        os.makedirs(path)
        with open(os.path.join(path, "state.json"), "w") as f:
            json.dump({"step": step}, f)
        ray.train.report(
            {"step": step},
            checkpoint=ray.train.Checkpoint.from_directory(path),
            checkpoint_dir_name=f"mine_{step}",
            checkpoint_upload_mode=CheckpointUploadMode.NO_UPLOAD,
        )


def tune_checkpoints_fn(config: dict) -> None:
    import ray.tune

    for step in range(2):
        d = tempfile.mkdtemp()
        with open(os.path.join(d, "state.json"), "w") as f:
            json.dump({"step": step}, f)
        ray.tune.report({"step": step}, checkpoint=ray.tune.Checkpoint.from_directory(d))


def own_process_group_loop(config: dict) -> None:
    """A loop under Ray's base ``BackendConfig`` that makes torch's process group
    itself (1 rank, gloo) and reports whether this worker held one when it began."""
    import socket

    import torch.distributed as dist

    held = dist.is_initialized()
    if not held:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1
        )
    ray.train.report(
        {
            "held_a_group_at_start": held,
            "worker_actor": ray.get_runtime_context().get_actor_id(),
        }
    )
