"""Training loops for ray_tt_ext.v2.Tuner(trainer) tests (importable on Ray's workers)."""

from __future__ import annotations

import json
import os
import tempfile
import time

import ray.train


def _state_checkpoint(state: dict, filename: str = "state.json") -> ray.train.Checkpoint:
    d = tempfile.mkdtemp()
    with open(os.path.join(d, filename), "w") as f:
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


def _wait_for_a_partner(log_dir: str, timeout_s: float) -> None:
    """Wait until two trainings have begun (this one included), up to ``timeout_s``;
    a training that waited in vain leaves an ``alone-*`` file in ``log_dir``."""
    open(os.path.join(log_dir, f"arrived-{os.getpid()}-{time.time_ns()}"), "w").close()
    deadline = time.monotonic() + timeout_s
    while sum(n.startswith("arrived-") for n in os.listdir(log_dir)) < 2:
        if time.monotonic() > deadline:
            open(os.path.join(log_dir, f"alone-{os.getpid()}"), "w").close()
            return
        time.sleep(0.05)


def steps_loop(config: dict) -> None:
    """``steps`` reports, each with a checkpoint from rank 0 holding its step.

    ``lr`` shapes the loss; ``list_reported``: each step's metrics name the
    checkpoints ``ray.train.get_all_reported_checkpoints()`` returns first;
    ``fail_at`` (with ``marker``) raises once; ``sleep_s`` paces the steps;
    ``log_dir`` gets one line per step, and one as training begins (the time), so tests can read the
    concurrency back; with ``rendezvous_s`` a training waits (up to that long)
    until a second one has begun, so two that can run at once do overlap.
    """
    ctx = ray.train.get_context()
    rank = ctx.get_world_rank()
    restored = restored_state()
    start = restored["step"] + 1 if restored else 0
    if config.get("log_dir"):  # the worker's training began
        with open(os.path.join(config["log_dir"], f"{os.getpid()}.log"), "a") as f:
            f.write(f"{config.get('trial_key', '')} {time.time()}\n")
    if config.get("rendezvous_s"):
        _wait_for_a_partner(config["log_dir"], config["rendezvous_s"])
    for step in range(start, config.get("steps", 3)):
        if config.get("fail_at") == step and rank == 0:
            marker = config["marker"]
            if not os.path.exists(marker):
                open(marker, "w").close()
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
        if config.get("list_reported"):  # the run's controller answers every rank
            metrics["reported_before"] = sorted(
                os.path.basename(r.checkpoint.path)
                for r in ray.train.get_all_reported_checkpoints()
            )
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
        scaling_config=ray.train.ScalingConfig(num_workers=config.get("num_workers", 1)),
        run_config=ray.train.RunConfig(
            name=ray.tune.get_context().get_trial_name(),
            storage_path=config["storage_path"],
            callbacks=[TuneReportCallback()],
        ),
    )
    trainer.fit()


def dying_loop(config: dict) -> None:
    """``steps`` reports, each with a checkpoint holding its step (rank 0's; every
    rank's shard with ``sharded``), without a pause anywhere.

    Once per step of ``die_after`` (a step, or a list of them; ``marker`` lists
    the steps it died at), right after the report of that step returned on
    rank ``victim_rank``, ``victim`` dies: ``"worker"`` (this process exits),
    ``"controller"`` or ``"trial"`` (the run's controller's process or the Tune trial
    actor, killed with SIGKILL; this worker then waits to be stopped);
    ``"driver"``: this worker waits, for the test to kill the driver.
    ``victim="upload"``: rank ``victim_rank`` dies inside its upload of step
    ``die_after``'s checkpoint instead (its part of the folder never written).
    ``upload="async"``: checkpoints go with ``checkpoint_upload_mode=ASYNC``, and
    a report of metrics alone follows each (its return proves the upload
    finished); the death comes after that one.
    """
    import signal
    import threading

    from ray_tt_ext import _compat

    ctx = ray.train.get_context()
    rank = ctx.get_world_rank()
    restored = restored_state()
    start = restored["step"] + 1 if restored else 0
    marker, victim = config["marker"], config["victim"]
    die_after = config["die_after"]
    die_after = set(die_after) if isinstance(die_after, (list, tuple)) else {die_after}
    died = set()
    if os.path.exists(marker):
        with open(marker) as f:
            died = {int(line) for line in f if line.strip()}
    # Looked up first, so that the kill comes microseconds after report() returned.
    pids = _compat.train_run_pids() if victim in ("controller", "trial") else {}
    for step in range(start, config["steps"]):
        dies_now = step in die_after - died and rank == (config.get("victim_rank") or 0)
        metrics = {
            "step": step,
            "start": start,
            "rank": rank,
            "worker_pid": os.getpid(),
            "loss": (step * 7) % 4,  # not in the steps' order: 0, 3, 2, 1
        }
        checkpoint = None
        if rank == 0 or config.get("sharded"):
            filename = "state.json" if rank == 0 else f"shard_{rank}.json"
            checkpoint = _state_checkpoint({"step": step, "rank": rank}, filename)
        kwargs: dict = {}
        if checkpoint is not None and config.get("upload") == "async":
            kwargs["checkpoint_upload_mode"] = ray.train.CheckpointUploadMode.ASYNC
        if dies_now and victim == "upload":

            def die_uploading(checkpoint, checkpoint_dir_name):
                _mark_death(marker, step)  # noqa: B023  (called in this step)
                os._exit(1)

            kwargs["checkpoint_upload_fn"] = die_uploading
        ray.train.report(metrics, checkpoint=checkpoint, **kwargs)
        if config.get("upload") == "async":
            ray.train.report(dict(metrics, after_upload=True))
        if dies_now and victim != "upload":
            _mark_death(marker, step)
            if victim == "worker":
                os._exit(1)
            if victim != "driver":  # else the test kills the driver
                os.kill(pids[victim], signal.SIGKILL)
            threading.Event().wait()  # until this worker is stopped with its run


def _mark_death(marker: str, step: int) -> None:
    with open(marker, "a") as f:
        f.write(f"{step}\n")


def _drain_this_node() -> None:
    """Drain this worker's node as a cloud provider's preemption notice does (Ray's
    GCS marks it draining, with a deadline well after the test)."""
    from ray._raylet import GcsClient
    from ray.core.generated.autoscaler_pb2 import DrainNodeReason

    node_id = ray.get_runtime_context().get_node_id()
    accepted, why = GcsClient(address=ray.get_runtime_context().gcs_address).drain_node(
        node_id,
        DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION"),
        "ray_tt_ext test: a spot node reclaimed",
        int(time.time() * 1000) + 300_000,
    )
    assert accepted, why


def drain_rank_one_loop(config: dict) -> None:
    """Two ranks on two nodes report; rank 1 writes its node id to
    ``config["dir"]``, drains its own node and is then as good as reclaimed: it
    joins no collective any more, and returns once rank 0's last report returned
    (or after ``wait_s``). Rank 0 asks ``ray.train.get_preemption_info()`` until
    the watcher's word arrives and reports a just-in-time checkpoint with what
    the notice said. Both collectives of rank 0 (the notice, the report's
    checkpoint name) release without rank 1 only once the run's controller
    relaxed the barrier to rank 0 (``relax_collectives_on_preemption``).

    ``config["rank_one_stays"]`` (Ray 2.58 .. 2.59, whose notice is a barrier of
    every rank and cannot be relaxed): rank 1 goes on stepping after draining
    its node, asking for the notice and reporting as rank 0 does."""
    rank = ray.train.get_context().get_world_rank()
    node_file, done_file = (os.path.join(config["dir"], n) for n in ("node", "done"))
    ray.train.report({"step": 0})
    deadline = time.monotonic() + config["wait_s"]
    if rank == 1:
        with open(node_file + ".tmp", "w") as f:  # before the notice exists
            f.write(ray.get_runtime_context().get_node_id())
        os.replace(node_file + ".tmp", node_file)
        _drain_this_node()
        if not config.get("rank_one_stays"):
            while not os.path.exists(done_file) and time.monotonic() < deadline:
                time.sleep(0.2)  # reclaimed: no step, no collective
            return
    info = None
    while info is None and time.monotonic() < deadline:
        info = ray.train.get_preemption_info()  # the watcher's word, per step
        if info is None:
            time.sleep(0.2)  # a training step
    with open(node_file) as f:
        drained = f.read()
    ray.train.report(
        {
            "step": 1,
            "preempted_ranks": info.preempted_ranks if info else None,
            "preempted_node_is_rank_1s": bool(info)
            and list(info.preempted_node_ids) == [drained],
        },
        checkpoint=_state_checkpoint({"step": 1}) if rank == 0 else None,
    )
    if rank == 0:
        open(done_file, "w").close()


def xgboost_loop(config: dict) -> None:
    """Ray's XGBoost example loop: this worker's shard of ``train`` as a DMatrix,
    ``xgboost.train`` over the workers' collective (Ray's ``XGBoostConfig``
    sets it up), each round reported with its model by Ray's callback."""
    import xgboost
    from ray.train.xgboost import RayTrainReportCallback

    frame = ray.train.get_dataset_shard("train").materialize().to_pandas()
    dtrain = xgboost.DMatrix(frame[["x"]], label=frame["y"])
    xgboost.train(
        {"objective": "reg:squarederror", "eta": config["eta"], "max_depth": 2},
        dtrain=dtrain,
        evals=[(dtrain, "train")],
        num_boost_round=config["rounds"],
        callbacks=[RayTrainReportCallback(frequency=1)],  # a checkpoint per round
    )


def validating_loop(config: dict) -> None:
    """Report a checkpoint asking Ray to validate it (Ray 2.51 .. 2.53's
    ``validate_fn``)."""
    ray.train.report(
        {"step": 0},
        checkpoint=_state_checkpoint({"step": 0}),
        validate_fn=lambda checkpoint, validate_config: {"score": 1.0},
    )


def dataset_loop(config: dict) -> None:
    """Count the rows of this worker's shard of ``train``; say what asking for a
    dataset the trainer was not given raises."""
    rows = sum(1 for _ in ray.train.get_dataset_shard("train").iter_rows())
    try:
        ray.train.get_dataset_shard("missing")
        missing = "no error"
    except KeyError as e:
        missing = str(e)
    ray.train.report({"rows": rows, "missing": missing})


def no_dataset_loop(config: dict) -> None:
    """Say what ``ray.train.get_dataset_shard`` raises for a trainer without datasets."""
    try:
        ray.train.get_dataset_shard("train")
        missing = "no error"
    except KeyError as e:
        missing = str(e)
    ray.train.report({"missing": missing})


#: The keys of the trials whose training function ran in this worker process (a
#: module global: it carries over to the next trial on a kept worker).
_RUNS_IN_THIS_PROCESS: list[str] = []
_LEFT_RUNNING: list = []


def reuse_probe_loop(config: dict) -> None:
    """Each rank writes ``<key>-<rank>.json`` in ``log_dir``: what this trial's
    worker sees (its actor, its config and context, its checkpoint, and what
    earlier trials in the same process left: a module global, an environment
    variable, a thread, the working directory), then reports once with a
    checkpoint (every rank its part, uploaded ASYNC) and once without.
    ``fail_key``: the trial whose rank 0 raises after the first report;
    ``crash_key``: the trial whose first worker group dies after the first report."""
    import threading

    ctx = ray.train.get_context()
    rank = ctx.get_world_rank()
    seen = {
        "key": config["key"],
        "actor_id": ray.get_runtime_context().get_actor_id(),
        "pid": os.getpid(),
        "had_checkpoint": ray.train.get_checkpoint() is not None,
        "experiment_name": ctx.get_experiment_name(),
        "world_rank": rank,
        "world_size": ctx.get_world_size(),
        "runs_before": list(_RUNS_IN_THIS_PROCESS),
        "env_left": os.environ.get("RTT_LEFT_BY_A_TRIAL"),
        "threads_left": sum(t.is_alive() for t in _LEFT_RUNNING),
        "cwd": os.getcwd(),
    }
    with open(os.path.join(config["log_dir"], f"{config['key']}-{rank}.json"), "w") as f:
        json.dump(seen, f)
    _RUNS_IN_THIS_PROCESS.append(config["key"])
    os.environ["RTT_LEFT_BY_A_TRIAL"] = config["key"]
    thread = threading.Thread(target=threading.Event().wait, daemon=True)
    thread.start()
    _LEFT_RUNNING.append(thread)
    filename = "state.json" if rank == 0 else f"shard_{rank}.json"
    ray.train.report(
        {"key": config["key"], "actor_id": seen["actor_id"]},
        checkpoint=_state_checkpoint({"step": 0, "key": config["key"]}, filename),
        checkpoint_upload_mode=ray.train.CheckpointUploadMode.ASYNC,
    )
    marker = os.path.join(config["log_dir"], f"crashed-{config['key']}")
    if config.get("crash_key") == config["key"] and not os.path.exists(marker):
        # This group's worker dies once, right after its report returned;
        # Train's FailureConfig starts a new group from that checkpoint.
        open(marker, "w").close()
        os._exit(1)
    if config.get("fail_key") == config["key"] and rank == 0:
        raise ValueError(f"trial {config['key']} failed on purpose")
    ray.train.report({"key": config["key"], "after_upload": True})
