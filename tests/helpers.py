"""Trainables, trainers and spies shared by the tests (importable by Ray workers)."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import time
from typing import Any, Optional

import ray
import ray.train
import ray.tune
import tune_api
from ray.train.backend import Backend, BackendConfig

import ray_tt_ext
from rtt_testing import (
    CountingFileSystem,  # noqa: F401  (re-exported)
    counting_conversions,
    resume_step,
)

COUNTER_NAME = "ray_tt_ext_test_conversion_counter"
COUNTER_NAMESPACE = "ray_tt_ext_tests"


@ray.remote(num_cpus=0)
class Counter:
    """A named actor that counts events wherever they happen (driver, actors)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def incr(self, key: str) -> int:
        self.counts[key] = self.counts.get(key, 0) + 1
        return self.counts[key]

    def get(self, key: str) -> int:
        return self.counts.get(key, 0)

    def put(self, key: str, value: Any) -> None:
        self.counts[key] = value

    def value(self, key: str) -> Any:
        return self.counts.get(key)

    def append(self, key: str, value: Any) -> None:
        self.counts.setdefault(key, []).append(value)


def get_or_create_counter(node_id: Optional[str] = None):
    """The counter actor, detached: it lives as long as the Ray cluster the test uses.

    Pinned to ``node_id`` (default: the driver's node), so that tests which
    kill worker nodes keep it: they pass the head node's id.
    """
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return Counter.options(
        name=COUNTER_NAME,
        namespace=COUNTER_NAMESPACE,
        get_if_exists=True,
        lifetime="detached",
        scheduling_strategy=NodeAffinitySchedulingStrategy(
            node_id or ray.get_runtime_context().get_node_id(), soft=False
        ),
    ).remote()


def _count(key: str) -> None:
    counter = ray.get_actor(COUNTER_NAME, namespace=COUNTER_NAMESPACE)
    ray.get(counter.incr.remote(key))


def conversions(key: str) -> int:
    counter = ray.get_actor(COUNTER_NAME, namespace=COUNTER_NAMESPACE)
    return ray.get(counter.get.remote(key))


def _count_conversion(trainer: Any) -> None:
    _count((trainer.metadata or {}).get("spy_key", "default"))


#: A spy: counts every ``as_trainable()`` call, by ``metadata['spy_key']``.
CountingTrainer = counting_conversions(
    ray_tt_ext.DataParallelTrainer,
    _count_conversion,
    name="CountingTrainer",
    module=__name__,
)
#: Ray's own trainer with the same spy, to check the Tuner with upstream trainers.
CountingRayTrainer = counting_conversions(
    ray.train.data_parallel_trainer.DataParallelTrainer,
    _count_conversion,
    name="CountingRayTrainer",
    module=__name__,
)


def report_loop(config: dict[str, Any]) -> None:
    """Reports ``num_reports`` metrics; a checkpoint every ``checkpoint_every``."""
    ctx = ray.train.get_context()
    start = resume_step(ray.train.get_checkpoint())
    fail_at = config.get("fail_at_step")
    marker = config.get("fail_marker")
    for step in range(start, config.get("num_reports", 3)):
        if (
            fail_at is not None
            and step == fail_at
            and marker
            and not os.path.exists(marker)
        ):
            open(marker, "w").close()
            os._exit(1)  # a worker dies mid-run (once)
        metrics = {"step": step, "loss": 1.0 / (step + 1)}
        if "weights" in config:  # what the trial got (large: from the object store)
            metrics["weights_bytes"] = config["weights"].nbytes
        if config.get("report_rank"):
            metrics["rank"] = ctx.get_world_rank()
        every = config.get("checkpoint_every", 1)
        wants = every and (step + 1) % every == 0
        if wants and (ctx.get_world_rank() == 0 or config.get("all_ranks_checkpoint")):
            with tempfile.TemporaryDirectory() as d:
                with open(os.path.join(d, "state.json"), "w") as f:
                    json.dump({"step": step, "rank": ctx.get_world_rank()}, f)
                ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(d))
        else:
            ray.train.report(metrics)


class SlowToSend:
    """Pickles as ``0``, after a second: the result it is in takes that long to
    leave its worker (the window in which a worker that goes on at once dies
    before its result is out)."""

    def __reduce__(self):
        time.sleep(1.0)
        return (int, (0,))


def dies_right_after_report_loop(config: dict[str, Any]) -> None:
    """A checkpoint per step (rank 0's); once, rank ``die_rank`` dies the instant
    its ``train.report()`` of step ``die_after`` returns (that report's result
    takes a second to send: :class:`SlowToSend`). Reports ``resumed_at``, the
    step the run (or its retry) started at."""
    ctx = ray.train.get_context()
    start = resume_step(ray.train.get_checkpoint())
    marker = config["marker"]
    for step in range(start, config["num_reports"]):
        dying = (
            step == config["die_after"]
            and ctx.get_world_rank() == config["die_rank"]
            and not os.path.exists(marker)
        )
        if dying:
            open(marker, "w").close()
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "state.json"), "w") as f:
                json.dump({"step": step}, f)
            checkpoint = ray.train.Checkpoint.from_directory(d)
            metrics = {"step": step, "resumed_at": start}
            if dying:
                metrics["slow_to_send"] = SlowToSend()
            ray.train.report(
                metrics, checkpoint=checkpoint if ctx.get_world_rank() == 0 else None
            )
        if dying:
            os._exit(1)  # nothing between report() returning and the death


def rank1_reports_after_rank0_passed_loop(config: dict[str, Any]) -> None:
    """Each step, rank 0 reports first; rank 1 reports only once rank 0's
    ``train.report()`` has returned (a file says so), as a loop that reports on
    rank 0 and then broadcasts to the others would. Rank 1 raises if it waits
    ``wait_s`` in vain (rank 0's report waiting for rank 1's: a deadlock)."""
    rank = ray.train.get_context().get_world_rank()
    for step in range(config["num_reports"]):
        passed = os.path.join(config["dir"], f"rank0-passed-{step}")
        if rank == 0:
            ray.train.report({"step": step})
            open(passed, "w").close()
            continue
        deadline = time.monotonic() + config["wait_s"]
        while not os.path.exists(passed):
            if time.monotonic() > deadline:
                raise RuntimeError(f"rank 0's report of step {step} never returned")
            time.sleep(0.01)
        ray.train.report({"step": step})


def function_trainable(config: dict[str, Any]) -> None:
    """A Tune function trainable with a checkpoint per step."""
    start = resume_step(tune_api.get_checkpoint())
    for step in range(start, config.get("num_reports", 3)):
        time.sleep(config.get("sleep_s", 0))
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "state.json"), "w") as f:
                json.dump({"step": step}, f)
            tune_api.report(
                {"step": step, "loss": 1.0 / (step + 1), **config.get("extra", {})},
                checkpoint=tune_api.Checkpoint.from_directory(d),
            )


class ClassTrainable(ray.tune.Trainable):
    """A Tune class trainable; checkpoints carry the iteration they were taken at."""

    def setup(self, config: dict[str, Any]) -> None:
        self.value = 0

    def step(self) -> dict[str, Any]:
        self.value += 1
        return {"metric": self.iteration + 100, "value": self.value}

    def save_checkpoint(self, checkpoint_dir: str) -> Optional[dict]:
        with open(os.path.join(checkpoint_dir, "state.json"), "w") as f:
            json.dump({"value": self.value, "iteration": self.iteration}, f)
        return None

    def load_checkpoint(self, checkpoint_dir: str) -> None:
        with open(os.path.join(checkpoint_dir, "state.json")) as f:
            self.value = json.load(f)["value"]


def quiet_run_config(storage_path: str, name: str, **kwargs: Any) -> tune_api.RunConfig:
    return tune_api.RunConfig(storage_path=storage_path, name=name, verbose=0, **kwargs)


def function_trainable_failing_once(config: dict[str, Any]) -> None:
    """``function_trainable`` that raises once at step ``fail_at`` (a marker file remembers)."""
    start = resume_step(tune_api.get_checkpoint())
    for step in range(start, config["num_reports"]):
        if step == config.get("fail_at") and not os.path.exists(config["marker"]):
            open(config["marker"], "w").close()
            raise RuntimeError(f"injected failure at step {step}")
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "state.json"), "w") as f:
                json.dump({"step": step}, f)
            tune_api.report(
                {"step": step}, checkpoint=tune_api.Checkpoint.from_directory(d)
            )


def function_trainable_losing_progress_once(config: dict[str, Any]) -> None:
    """Saves ``ckpt_{step:06d}`` each step; once, at ``fail_at``, the process
    dies after that step's folder is on disk but before Tune recorded it."""
    start = resume_step(tune_api.get_checkpoint())
    for step in range(start, config["num_reports"]):
        if step == config["fail_at"] and not os.path.exists(config["marker"]):
            open(config["marker"], "w").close()
            storage = ray_tt_ext._compat.get_session().storage  # the persistent trial dir
            lost = os.path.join(storage.trial_fs_path, f"ckpt_{step:06d}")
            os.makedirs(lost)
            with open(os.path.join(lost, "state.json"), "w") as f:
                json.dump({"step": step, "lost": True}, f)
            os._exit(1)
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "state.json"), "w") as f:
                json.dump({"step": step}, f)
            tune_api.report(
                {"step": step}, checkpoint=tune_api.Checkpoint.from_directory(d)
            )


def record(key: str, value: Any) -> None:
    """Store ``value`` under ``key`` in the shared counter actor (any process)."""
    counter = ray.get_actor(COUNTER_NAME, namespace=COUNTER_NAMESPACE)
    ray.get(counter.put.remote(key, value))


def recorded(key: str) -> Any:
    counter = ray.get_actor(COUNTER_NAME, namespace=COUNTER_NAMESPACE)
    return ray.get(counter.value.remote(key))


class RecordingRemoteBackendExecutor(ray_tt_ext.RemoteBackendExecutor):
    """Records where its actor runs, next to where the coordinator runs."""

    record_key = "executor"

    def start(self, *args: Any, **kwargs: Any) -> None:
        super().start(*args, **kwargs)
        ctx = ray.get_runtime_context()
        info = ray.get(self.actor.placement_info.remote(self.session))
        info["shares_host"] = self.shares_host
        info = {
            "coordinator_node": ctx.get_node_id(),
            "coordinator_pg": ctx.get_placement_group_id(),
            **info,
        }
        record(self.record_key, info)  # the latest
        counter = ray.get_actor(COUNTER_NAME, namespace=COUNTER_NAMESPACE)
        ray.get(counter.append.remote(f"{self.record_key}s", info))  # every one


class RecordingTrainer(ray_tt_ext.DataParallelTrainer):
    _remote_backend_executor_cls = RecordingRemoteBackendExecutor


def _record_final_status(kwargs: dict[str, Any]) -> None:
    record(
        "final_run_status",
        {"errored": kwargs.get("errored"), "stack_trace": kwargs.get("stack_trace") or ""},
    )


class StatusRecordingExecutor(ray_tt_ext._compat.BackendExecutor):
    """Ray's executor, recording ``report_final_run_status`` (coordinator)."""

    def report_final_run_status(self, *args: Any, **kwargs: Any) -> None:
        _record_final_status(kwargs)
        super().report_final_run_status(*args, **kwargs)


class StatusRecordingRemoteExecutor(ray_tt_ext.RemoteBackendExecutor):
    def report_final_run_status(self, *args: Any, **kwargs: Any) -> None:
        _record_final_status(kwargs)
        super().report_final_run_status(*args, **kwargs)


class StatusRecordingTrainer(ray_tt_ext.DataParallelTrainer):
    """Records the final run status the coordinator reports, with either executor."""

    _backend_executor_cls = StatusRecordingExecutor
    _remote_backend_executor_cls = StatusRecordingRemoteExecutor


def raising_loop(config: dict[str, Any]) -> None:
    """The user's loop raises ``ValueError`` before its first report or after its last."""
    if config["raise_at"] == "start":
        raise ValueError("lr must be positive")
    for step in range(2):
        ray.train.report({"step": step})
    raise ValueError("lr must be positive")


def alive_actors(class_name: str) -> list:
    """Alive actors of a class, from the GCS (no dashboard needed).

    ``ray._private.state`` is Ray's internal view of the GCS actor table; the
    public state API needs the dashboard, which these tests do not start.
    """
    from ray._private import state

    return [
        a
        for a in state.actors().values()
        if a["ActorClassName"].endswith(class_name) and a["State"] == "ALIVE"
    ]


class CleanupBackend(Backend):
    """A backend whose ``on_shutdown`` is a call on every worker, like Torch's
    process-group teardown; it records the workers' pids under the config's key."""

    def on_shutdown(self, worker_group: Any, backend_config: CleanupBackendConfig) -> None:
        record(backend_config.key, worker_group.execute(os.getpid))


@dataclasses.dataclass
class CleanupBackendConfig(BackendConfig):
    key: str = "on_shutdown"

    @property
    def backend_cls(self) -> type[Backend]:
        return CleanupBackend


def slow_checkpointing_loop(step_s: float) -> None:
    """Reports step 0, then spends ``step_s`` seconds on step 1 and checkpoints it."""
    ray.train.report({"step": 0})
    time.sleep(step_s)
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "state.json"), "w") as f:
            json.dump({"step": 1}, f)
        ray.train.report({"step": 1}, checkpoint=ray.train.Checkpoint.from_directory(d))


def slow_steps_loop(config: dict[str, Any]) -> None:
    """Steps of ``config["step_s"]`` seconds, each ending with a checkpoint."""
    for step in range(config.get("num_reports", 100)):
        time.sleep(config["step_s"])
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "state.json"), "w") as f:
                json.dump({"step": step}, f)
            ray.train.report(
                {"step": step}, checkpoint=ray.train.Checkpoint.from_directory(d)
            )


def _this_trial_id() -> str:
    get_context = getattr(ray.tune, "get_context", None) or ray.train.get_context
    return get_context().get_trial_id()


def trial_folders(trial_path: str) -> list[str]:
    """The names of the folders in a trial's folder (its checkpoints), sorted;
    not the hidden ones."""
    return sorted(
        name
        for name in os.listdir(trial_path)
        if not name.startswith(".") and os.path.isdir(os.path.join(trial_path, name))
    )


def checkpoint_folders(root: str) -> list[str]:
    """The checkpoint folders (``checkpoint_*``) under ``root``, sorted."""
    found = []
    for folder, names, _ in os.walk(root):
        found += [os.path.join(folder, n) for n in names if n.startswith("checkpoint_")]
    return sorted(found)


def sweep_loop(config: dict[str, Any]) -> None:
    """``steps`` reports, each with a checkpoint of ``blob`` bytes holding its step
    and the trial that wrote it; ``score`` is ``10 x + step`` and ``loss`` its
    negative. Resumes from its checkpoint (``resumed``: 1 when it holds this
    trial's own step, ``exploited``: 1 when another trial wrote it). Each
    report says how many checkpoint folders the experiment folder ``root``
    holds just before it (``on_disk``). ``step_s``: seconds per step.
    ``hold_at_2``: a path; step 2 waits until it exists (the test opens it)."""
    trial = _this_trial_id()
    start, resumed, exploited = 0, 0, 0
    checkpoint = tune_api.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            with open(os.path.join(d, "state.json")) as f:
                state = json.load(f)
        start = state["step"] + 1
        resumed, exploited = int(state["trial"] == trial), int(state["trial"] != trial)
    for step in range(start, config["steps"]):
        if step == 2 and config.get("hold_at_2"):
            while not os.path.exists(config["hold_at_2"]):
                time.sleep(0.05)  # a gate the test opens, not pacing the run
        time.sleep(config.get("step_s", 0))
        score = 10 * config["x"] + (-step if config.get("declining") else step)
        metrics = {"step": step, "score": score, "loss": -score, "resumed": resumed}
        metrics.update(exploited=exploited, on_disk=len(checkpoint_folders(config["root"])))
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "state.json"), "w") as f:
                json.dump({"step": step, "trial": trial}, f)
            with open(os.path.join(d, "blob"), "wb") as f:
                f.write(b"\0" * config.get("blob", 1000))
            tune_api.report(metrics, checkpoint=tune_api.Checkpoint.from_directory(d))
    if config.get("leave"):
        _leave_in_trial_folder(config, trial)


def _leave_in_trial_folder(config: dict[str, Any], trial: str) -> None:
    """After the last report, in the trial's folder: a symbolic link named
    ``config["leave"]["link"]`` to a folder outside the experiment
    (``config["leave"]["outside"]/<trial id>``, holding ``keep.txt``), a folder
    named ``config["leave"]["folder"]`` that no report recorded, and ``notes/``
    (a user's own artifacts)."""
    leave = config["leave"]
    (folder,) = [
        os.path.join(config["root"], n) for n in os.listdir(config["root"]) if trial in n
    ]
    outside = os.path.join(leave["outside"], trial)
    os.makedirs(outside)
    with open(os.path.join(outside, "keep.txt"), "w") as f:
        f.write(trial)
    os.symlink(outside, os.path.join(folder, leave["link"]))
    for name in (leave["folder"], "notes"):
        os.makedirs(os.path.join(folder, name))
        with open(os.path.join(folder, name, "state.json"), "w") as f:
            f.write("{}")


class SavedStateNamesOnlyWhatExists(ray.tune.Callback):
    """Checks, at each result and when the sweep ends (Tune's loop, between two
    of its steps: no deletion runs meanwhile), that every checkpoint the
    experiment's newest state on storage names is still there: the promise
    that lets ``Tuner.restore`` after a killed driver find what it resumes
    from. Raises ``AssertionError`` (the fit ends with it) naming what is gone.
    ``fs``: the storage's pyarrow filesystem (``root`` a path on it), else a
    local folder. The state file is never being written meanwhile: with the
    sweep's retention only ray_tt_ext uploads it, in Tune's loop, where this
    check runs too (a state it cannot read fails the check). Not for trials with Tune's
    own ``num_to_keep``: Tune deletes a trial's worst checkpoints when it
    registers a new one, and the saved state names them until its next save
    lands (Ray's behaviour, not the sweep's)."""

    def __init__(self, root: str, fs: Any = None) -> None:
        self.root = root
        self.fs = fs

    def _check(self) -> None:
        import pyarrow.fs

        fs = self.fs or pyarrow.fs.LocalFileSystem()
        listed = fs.get_file_info(pyarrow.fs.FileSelector(self.root, allow_not_found=True))
        if not [i for i in listed if i.base_name.startswith("experiment_state")]:
            return
        saved = ray.tune.ExperimentAnalysis(self.root, storage_filesystem=self.fs)
        named = set()
        for t in saved.trials:
            manager = t.run_metadata.checkpoint_manager
            named |= {r.checkpoint.path for r in manager.best_checkpoint_results}
            if manager.latest_checkpoint_result is not None:
                named.add(manager.latest_checkpoint_result.checkpoint.path)
        gone = sorted(
            p for p in named if fs.get_file_info(p).type == pyarrow.fs.FileType.NotFound
        )
        assert not gone, f"the experiment's saved state names deleted checkpoints: {gone}"

    def on_trial_result(
        self, iteration: int, trials: list, trial: Any, result: dict, **info
    ):
        self._check()

    def on_experiment_end(self, trials: list, **info):
        self._check()
