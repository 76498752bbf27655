"""The remote BackendExecutor: placement, one result loop, faults, no leaks.

Upstream: ray-project/ray#20123 (Ray Train under Ray Client).
"""

from __future__ import annotations

import functools
import json
import os
import signal
import time
from pathlib import Path

import pytest
import ray
import ray.train
import ray.tune
import tune_api
from helpers import (
    CleanupBackendConfig,
    RecordingTrainer,
    StatusRecordingTrainer,
    alive_actors,
    dies_right_after_report_loop,
    get_or_create_counter,
    raising_loop,
    rank1_reports_after_rank0_passed_loop,
    record,
    recorded,
    report_loop,
    resume_step,
    slow_checkpointing_loop,
    slow_steps_loop,
)
from ray.train.backend import BackendConfig
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

import ray_tt_ext
from ray_tt_ext import RemoteBackendExecutor, Tuner, _compat
from ray_tt_ext._compat import BackendExecutor, InactiveWorkerGroupError
from ray_tt_ext._executor import _scheduling_options
from ray_tt_ext._executor_host import BackendExecutorHost, _HostedBackendExecutor
from rtt_testing import assert_every_cpu_free

pytestmark = pytest.mark.timeout(180)

#: ``remote``: ray_tt_ext's trainer with Ray's executor (False, the ``extended``
#: tier: the coordinator's shutdown and error paths it shares with the remote
#: executor run in CI through the True case and ``order_local``) or with the
#: remote executor (True).
RAY_EXECUTOR_EXTENDED = [pytest.param(False, marks=pytest.mark.extended), True]


def _run(
    storage_path,
    name,
    *,
    loop=report_loop,
    num_workers=2,
    remote=True,
    trainer_cls=None,
    max_failures=0,
    stop=None,
    **config,
):
    trainer_cls = trainer_cls or ray_tt_ext.DataParallelTrainer
    trainer = trainer_cls(
        loop,
        train_loop_config={"num_reports": 4, **config},
        scaling_config=ray.train.ScalingConfig(num_workers=num_workers),
        remote_executor=remote,
    )
    return Tuner(
        trainer,
        run_config=tune_api.RunConfig(
            storage_path=storage_path,
            name=name,
            verbose=0,
            stop=stop,
            failure_config=tune_api.FailureConfig(max_failures=max_failures),
        ),
    ).fit()[0]


def _assert_nothing_leaked(timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    leaked = []
    while time.monotonic() < deadline:
        leaked = alive_actors("BackendExecutorHost") + alive_actors("RayTrainWorker")
        if not leaked:
            return
        time.sleep(0.5)
    raise AssertionError(f"actors still alive: {[a['ActorClassName'] for a in leaked]}")


def test_host_is_a_plain_class_testable_in_process(ray_start_4_cpus):
    host = BackendExecutorHost()
    opened = host.open(
        "s1",
        BackendExecutor,
        dict(backend_config=BackendConfig(), num_workers=1, max_retries=0),
    )
    assert opened is True
    assert host.call("s1", "is_started", (), {}) is False
    host.call("s1", "start", (), {})
    try:
        assert host.call("s1", "is_started", (), {}) is True
        assert len(host.call("s1", "get_worker_group", (), {})) == 1
        assert host.placement_info("s1")["sessions"] == 1
    finally:
        host.call("s1", "shutdown", (), {})
    assert host.call("s1", "is_started", (), {}) is False
    host.close("s1")
    assert host.sessions() == 0
    with pytest.raises(InactiveWorkerGroupError):  # a closed session is inactive
        host.call("s1", "start", (), {})
    assert host.placement_info()["node_id"] == ray.get_runtime_context().get_node_id()


def test_a_full_host_or_other_executor_settings_refuse_a_session(ray_start_4_cpus):
    host = BackendExecutorHost(capacity=1)
    kwargs = dict(backend_config=BackendConfig(), num_workers=1, max_retries=0)
    assert host.open("a", BackendExecutor, kwargs) is True
    assert host.open("b", BackendExecutor, kwargs) is False  # full
    host.close("a")
    # Ray's executor reads these variables in its own process: a caller whose
    # values differ gets a host of its own (with its values), not this one.
    other_env = {"TRAIN_ENABLE_WORKER_SPREAD": "1"}
    assert host.open("c", BackendExecutor, kwargs, env=other_env) is False
    from ray_tt_ext._compat import executor_env

    assert host.open("d", BackendExecutor, kwargs, env=executor_env()) is True
    host.close("d")


def _first_state_reads_at_once(_host, threads: int = 16) -> int:
    """In a host actor's process: ``threads`` threads read Ray's placement group
    table for the first time, a few ms apart (where Ray 2.40 is unlocked)."""
    import random
    import threading
    from concurrent.futures import ThreadPoolExecutor

    together = threading.Barrier(threads)

    def read(_):
        together.wait()
        time.sleep(random.random() * 0.004)
        return ray.util.placement_group_table()

    with ThreadPoolExecutor(threads) as pool:
        return len(list(pool.map(read, range(threads))))


@pytest.mark.skipif(
    _compat.global_state_connects_locked(),
    reason="this Ray connects its state accessor under a lock (ray-project/ray#58182)",
)
def test_a_hosts_threads_first_read_rays_state_at_once_without_a_crash(ray_start_4_cpus):
    """Ray 2.40's state accessor connects on first use, unlocked; the threads of
    a shared host starting several trials' executors at once aborted it
    (``Check failed: placement_group_accessor_ != nullptr``) about one time in
    six. The host connects it in ``__init__``. 20 hosts: without that, one dies."""
    from ray_tt_ext._executor_host import HostActor

    for _ in range(20):
        host = HostActor.options(num_cpus=0).remote()
        try:
            assert ray.get(host.__ray_call__.remote(_first_state_reads_at_once)) == 16
        finally:
            ray.kill(host)


def _three_reports():
    for step in range(3):
        ray.train.report({"step": step})
    return "done"


def _started_executor(train_func, storage_path, backend_config=None):
    from ray.train import DataConfig

    from ray_tt_ext._compat import StorageContext

    executor = _HostedBackendExecutor(
        backend_config=backend_config or BackendConfig(), num_workers=2, max_retries=0
    )
    executor.start()
    executor.start_training(
        train_func,
        datasets={},
        metadata={},
        data_config=DataConfig(),
        storage=StorageContext(
            storage_path=storage_path, experiment_dir_name="exp", trial_dir_name="trial"
        ),
    )
    return executor


def test_hosted_executor_keeps_rays_contract_in_process(ray_start_4_cpus, storage_path):
    executor = _started_executor(_three_reports, storage_path)
    try:
        steps = []
        while (results := executor.get_next_results()) is not None:
            assert len(results) == 2  # one per worker, the same step
            steps.append({r.metrics["step"] for r in results})
        assert steps == [{0}, {1}, {2}]
        assert executor.finish_training() == ["done", "done"]
    finally:
        executor.shutdown()
    _assert_nothing_leaked()


@pytest.mark.parametrize(
    "step_s",
    [3.0, pytest.param(120.0, marks=pytest.mark.extended)],
    ids=["step_ends_within_patience", "step_outlasts_patience"],
)
def test_graceful_shutdown_mid_step_runs_cleanup_and_writes_nothing(
    ray_start_4_cpus, storage_path, step_s
):
    # The coordinator shuts the remote executor down while the workers are in
    # a step that ends with a checkpoint (result 1 not yet asked for).
    # As with Ray's executor: the backend's on_shutdown runs on every worker,
    # the workers exit at once, and no checkpoint the driver never records
    # appears, neither if the step would have ended within Ray's 5 s patience
    # nor if it would have taken longer.
    from ray.train import DataConfig

    from ray_tt_ext._compat import StorageContext

    get_or_create_counter()
    key = f"on_shutdown_{step_s}_{time.monotonic_ns()}"
    executor = RemoteBackendExecutor(
        backend_config=CleanupBackendConfig(key=key), num_workers=2, max_retries=0
    )
    executor.start()
    try:
        executor.start_training(
            functools.partial(slow_checkpointing_loop, step_s),
            datasets={},
            metadata={},
            data_config=DataConfig(),
            storage=StorageContext(
                storage_path=storage_path, experiment_dir_name="exp", trial_dir_name="trial"
            ),
        )
        assert [r.metrics["step"] for r in executor.get_next_results()] == [0, 0]
    finally:
        executor.shutdown(graceful_termination=True)
    pids = recorded(key)
    assert pids is not None, "the backend's on_shutdown did not run"
    assert len(set(pids)) == 2
    assert not alive_actors("RayTrainWorker")
    # As Ray's, it could start() again; its dedicated host goes with its last handle.
    del executor
    _assert_nothing_leaked()
    time.sleep(min(step_s, 5.0) + 2.0)  # past the step's end, had a worker lived on
    trial_dir = Path(storage_path, "exp", "trial")
    written = (
        sorted(p.name for p in trial_dir.glob("checkpoint_*")) if trial_dir.exists() else []
    )
    assert written == []


def test_scheduling_options_outside_a_placement_group(ray_start_4_cpus, monkeypatch):
    monkeypatch.setenv("TRAIN_ENABLE_WORKER_SPREAD", "1")
    options = _scheduling_options()
    assert options["num_cpus"] == 0 and options["num_gpus"] == 0
    assert options["max_restarts"] == 0
    strategy = options["scheduling_strategy"]
    assert isinstance(strategy, NodeAffinitySchedulingStrategy)
    assert strategy.node_id == ray.get_runtime_context().get_node_id()
    assert strategy.soft is False
    env_vars = options["runtime_env"]["env_vars"]
    assert env_vars["RAY_TRAIN_V2_ENABLED"] == "0"
    assert env_vars["TRAIN_ENABLE_WORKER_SPREAD"] == "1"  # the caller's, as Ray reads it


@pytest.fixture(scope="module")
def report_runs(ray_4_cpus_for_module, tmp_path_factory):
    """One Tuner, three trials of ``report_loop`` on 2 workers, by variant:

    * ``order``: 6 reports, rank 0 checkpoints every second one, remote executor;
    * ``order_local``: the same with Ray's executor (``remote_executor=False``);
    * ``all_ranks``: 2 reports, every rank checkpoints each, remote executor.
    """
    get_or_create_counter()
    record("executors", [])
    variants = [
        {"variant": "order", "num_reports": 6, "checkpoint_every": 2},
        {"variant": "order_local", "num_reports": 6, "checkpoint_every": 2},
        {"variant": "all_ranks", "num_reports": 2, "all_ranks_checkpoint": True},
    ]
    trainer = RecordingTrainer(
        report_loop,
        train_loop_config={"num_reports": 4},
        scaling_config=ray.train.ScalingConfig(num_workers=2),
        remote_executor=True,
    )
    results = Tuner(
        trainer,
        param_space={
            "train_loop_config": ray.tune.grid_search(variants),
            "remote_executor": ray.tune.sample_from(
                lambda spec: spec.config.train_loop_config["variant"] != "order_local"
            ),
        },
        run_config=tune_api.RunConfig(
            storage_path=str(tmp_path_factory.mktemp("report_runs")),
            name="report_runs",
            verbose=0,
        ),
    ).fit()
    _assert_nothing_leaked()
    runs = {r.config["train_loop_config"]["variant"]: r for r in results}
    runs["executors"] = recorded("executors")  # this fit's, before other tests reset it
    return runs


def test_remote_executor_runs_in_a_zero_cpu_shared_host_and_its_workers_in_the_trial(
    report_runs,
):
    assert report_runs["order"].error is None
    assert report_runs["order"].config["remote_executor"] is True
    infos = report_runs["executors"]
    assert len(infos) == 2  # the two remote trials; Ray's executor records nothing
    for info in infos:
        assert info["shares_host"] is True  # the Tuner's host on this node
        assert info["node_id"] == info["coordinator_node"]
        assert info["placement_group_id"] is None  # the host is outside every trial
        assert info.get("assigned_resources", {}).get("CPU", 0) == 0
        assert info["pid"] != os.getpid()
        # The workers are in the trial's placement group, as with Ray's executor.
        assert info["worker_placement_group_ids"] == [info["coordinator_pg"]] * 2
    assert len({info["pid"] for info in infos}) == 1  # one host, shared


def test_remote_and_local_executors_give_the_same_results(report_runs):
    results = {
        remote: report_runs[v] for remote, v in [(True, "order"), (False, "order_local")]
    }
    assert results[False].config["remote_executor"] is False
    for result in results.values():
        assert result.error is None
        assert result.metrics["step"] == 5
        # Rank 0 alone reports checkpoints: "at least one worker" registers them.
        with open(Path(result.checkpoint.path, "state.json")) as f:
            assert json.load(f) == {"step": 5, "rank": 0}
    names = [sorted(os.listdir(r.path)) for r in results.values()]
    assert [n for n in names[0] if n.startswith("checkpoint_")] == [
        n for n in names[1] if n.startswith("checkpoint_")
    ]


@pytest.mark.parametrize("variant", ["order", "order_local"])
def test_reports_and_checkpoints_are_processed_in_order(report_runs, variant):
    result = report_runs[variant]
    assert result.error is None
    df = result.metrics_dataframe
    assert list(df["step"]) == list(range(6))
    names = [n if isinstance(n, str) else None for n in df["checkpoint_dir_name"]]
    assert names == [
        None,
        "checkpoint_000000",
        None,
        "checkpoint_000001",
        None,
        "checkpoint_000002",
    ]


def test_every_worker_checkpointing_is_one_checkpoint(report_runs):
    result = report_runs["all_ranks"]
    assert result.error is None
    assert sorted(n for n in os.listdir(result.path) if n.startswith("checkpoint_")) == [
        "checkpoint_000000",
        "checkpoint_000001",
    ]


@pytest.mark.extended
def test_worker_death_with_retries_restarts_from_checkpoint(
    ray_start_4_cpus, storage_path, tmp_path
):
    marker = str(tmp_path / "died")
    result = _run(
        storage_path,
        "retry",
        max_failures=1,
        num_reports=5,
        fail_at_step=3,
        fail_marker=marker,
    )
    assert os.path.exists(marker), "the worker was meant to die once"
    assert result.error is None
    assert result.metrics["step"] == 4
    _assert_nothing_leaked()


def test_a_worker_dying_right_after_its_report_returned_loses_no_report(
    ray_start_4_cpus, storage_path, tmp_path
):
    # Rank 1 dies the instant its report of step 1 returns: that report (and
    # rank 0's checkpoint of step 1) reached the coordinator, so the retry
    # resumes at step 2. (Ray's executor lets a worker go on before its result
    # has left it: a death in that instant loses the report.)
    marker = str(tmp_path / "died")
    result = _run(
        storage_path,
        "right_after_report",
        loop=dies_right_after_report_loop,
        max_failures=1,
        num_reports=4,
        die_after=1,
        die_rank=1,
        marker=marker,
    )
    assert os.path.exists(marker), "the worker was meant to die once"
    assert result.error is None
    assert result.metrics["step"] == 3
    assert result.metrics["resumed_at"] == 2, "the report of step 1 was lost"
    _assert_nothing_leaked()


@pytest.mark.parametrize("remote", RAY_EXECUTOR_EXTENDED, ids=["ray_executor", "remote"])
def test_a_workers_report_does_not_wait_for_the_other_workers_reports(
    ray_start_4_cpus, storage_path, tmp_path, remote
):
    # Rank 1 reports each step only after rank 0's report returned: with either
    # executor rank 0 goes on once its own result is taken, not once every
    # worker's is (that would deadlock this loop: rank 1 raises after 60 s).
    result = _run(
        storage_path,
        f"rank_order_{remote}",
        loop=rank1_reports_after_rank0_passed_loop,
        remote=remote,
        num_reports=3,
        dir=str(tmp_path),
        wait_s=60,
    )
    assert result.error is None, result.error
    assert result.metrics["step"] == 2


@pytest.mark.parametrize("remote", RAY_EXECUTOR_EXTENDED, ids=["ray_executor", "remote"])
@pytest.mark.parametrize("raise_at", ["start", "end"])
def test_users_error_reaches_the_result_with_its_type_and_message(
    ray_start_4_cpus, storage_path, remote, raise_at
):
    # The same assertions for both executors: Ray's own behaviour is the contract.
    get_or_create_counter()
    record("final_run_status", None)
    result = _run(
        storage_path,
        f"user_error_{raise_at}_{remote}",
        loop=raising_loop,
        remote=remote,
        trainer_cls=StatusRecordingTrainer,
        raise_at=raise_at,
    )
    assert isinstance(result.error, ray.exceptions.RayTaskError), repr(result.error)
    assert isinstance(result.error, ValueError), repr(result.error)
    assert "lr must be positive" in str(result.error)
    if raise_at == "start":  # raised to the get_next task, named as Ray names it
        assert "_RayTrainWorker__execute.get_next" in str(result.error), str(result.error)
    # The coordinator saw the user's error and reported the run as errored.
    status = recorded("final_run_status")
    assert status is not None and status["errored"] is True
    assert "lr must be positive" in status["stack_trace"]
    _assert_nothing_leaked()


@pytest.mark.parametrize("remote", RAY_EXECUTOR_EXTENDED, ids=["ray_executor", "remote"])
def test_worker_death_without_retries_names_the_worker(
    ray_start_4_cpus, storage_path, tmp_path, remote
):
    result = _run(
        storage_path,
        f"noretry_{remote}",
        remote=remote,
        num_reports=5,
        fail_at_step=1,
        fail_marker=str(tmp_path / "died"),
    )
    assert isinstance(result.error, ray.exceptions.RayActorError), repr(result.error)
    # A training worker died, not the executor actor (which is alive).
    assert "BackendExecutor actor died" not in str(result.error)
    assert "RayTrainWorker" in str(result.error)
    _assert_nothing_leaked()


def _kill_hosts(marker: str) -> None:
    """SIGKILL every executor host once (``marker`` says it was done), then wait
    for the worker to die with its owner (long before the 30 s are up)."""
    from helpers import alive_actors as _alive

    try:  # one caller kills: the marker's creation is the claim
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        pass
    else:
        for actor in _alive("BackendExecutorHost"):
            os.kill(actor["Pid"], signal.SIGKILL)
    time.sleep(30)


def _report_step(step: int, with_checkpoint: bool) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        Path(d, "state.json").write_text(json.dumps({"step": step}))
        checkpoint = ray.train.Checkpoint.from_directory(d) if with_checkpoint else None
        ray.train.report({"step": step}, checkpoint=checkpoint)


def kill_executor_loop(config):
    """Rank 0 SIGKILLs the executor host's process once, at step 1."""
    rank = ray.train.get_context().get_world_rank()
    for step in range(resume_step(ray.train.get_checkpoint()), 3):
        if step == 1 and rank == 0 and not os.path.exists(config["marker"]):
            _kill_hosts(config["marker"])
        _report_step(step, with_checkpoint=rank == 0)


@pytest.mark.parametrize("max_failures", [0, pytest.param(1, marks=pytest.mark.extended)])
def test_executor_actor_killed_mid_run(
    ray_start_4_cpus, storage_path, tmp_path, max_failures
):
    marker = str(tmp_path / "killed")
    result = _run(
        storage_path,
        f"killed{max_failures}",
        loop=kill_executor_loop,
        max_failures=max_failures,
        marker=marker,
    )
    assert os.path.exists(marker)  # (no hang: the module's timeout)
    if max_failures:
        assert result.error is None
        assert result.metrics["step"] == 2
    else:
        assert "BackendExecutor actor died" in str(result.error)
    _assert_nothing_leaked()


@pytest.mark.parametrize(
    "remote", RAY_EXECUTOR_EXTENDED, ids=["rays_executor", "remote_executor"]
)
def test_a_run_stopped_by_tune_mid_step_cleans_up_like_rays_executor(
    ray_start_4_cpus, storage_path, remote
):
    # Tune stops the trial after its first result, while the workers are in
    # their second step (8 s, then a checkpoint): the backend's on_shutdown
    # runs on every worker and the second checkpoint is never written, with
    # either executor and on every supported Ray (Ray 2.40's own loop does not
    # shut its executor down when Tune stops the trial; ray_tt_ext's does).
    get_or_create_counter()
    key = f"tune_stop_on_shutdown_{remote}_{time.monotonic_ns()}"
    trainer = ray_tt_ext.DataParallelTrainer(
        slow_steps_loop,
        train_loop_config={"step_s": 8.0},
        backend_config=CleanupBackendConfig(key=key),
        scaling_config=ray.train.ScalingConfig(num_workers=2),
        remote_executor=remote,
    )
    result = Tuner(
        trainer,
        run_config=tune_api.RunConfig(
            storage_path=storage_path,
            name=f"tune_stop_{remote}",
            verbose=0,
            stop={"training_iteration": 1},
        ),
    ).fit()[0]
    assert result.error is None
    assert result.metrics["step"] == 0
    _assert_nothing_leaked()
    pids = recorded(key)
    assert pids is not None and len(set(pids)) == 2, "on_shutdown did not run"
    time.sleep(8.0)  # past the second step's end, had a worker lived on
    assert sorted(p.name for p in Path(result.path).glob("checkpoint_*")) == [
        "checkpoint_000000"
    ]


def counting_loop(config):
    """Counts every step a worker starts in the test counter; a checkpoint per step."""
    import tempfile

    from helpers import _count

    for step in range(1000):
        _count(config["key"])
        with tempfile.TemporaryDirectory() as d:
            Path(d, "state.json").write_text(json.dumps({"step": step}))
            ray.train.report(
                {"step": step}, checkpoint=ray.train.Checkpoint.from_directory(d)
            )


def test_workers_run_no_further_ahead_than_with_rays_executor_and_a_stopped_run_leaks_nothing(
    ray_start_4_cpus, storage_path
):
    # The remote executor reads the workers itself and lets each go on once its
    # result is here; that must not let a worker start more steps, or write more
    # checkpoints, than Ray's executor.
    # Tune stops the trial after 3 results.
    counter = get_or_create_counter()
    steps, folders = {}, {}
    for remote in (False, True):
        key = f"steps_started_{remote}_{time.monotonic_ns()}"
        result = _run(
            storage_path,
            f"ahead_{remote}",
            loop=counting_loop,
            num_workers=1,
            remote=remote,
            stop={"training_iteration": 3},
            key=key,
        )
        # A run Tune stops (after 3 results) ends well and leaks no actor.
        assert result.error is None
        assert result.metrics["step"] == 2 and result.metrics["training_iteration"] == 3
        _assert_nothing_leaked()
        steps[remote] = ray.get(counter.get.remote(key))
        folders[remote] = {
            n for n in os.listdir(result.path) if n.startswith("checkpoint_")
        }
    # Ray releases a worker when its result is taken: it may start step 4, never 5.
    assert steps[False] in (3, 4)
    assert steps[True] <= steps[False], steps
    assert folders[True] <= folders[False], folders


def test_remote_executor_flag_is_checked(ray_start_4_cpus):
    with pytest.raises(TypeError, match="remote_executor must be True or False"):
        ray_tt_ext.DataParallelTrainer(report_loop, remote_executor="yes")
    trainer = ray_tt_ext.DataParallelTrainer(report_loop, remote_executor=True)
    assert trainer._backend_executor_cls is RemoteBackendExecutor
    assert (
        ray_tt_ext.DataParallelTrainer(report_loop)._backend_executor_cls is BackendExecutor
    )


# -- The Tuner's shared executor host (issue 22) ------------------------------------


def _no_placement_group_left(timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        alive = [
            pg
            for pg in ray.util.placement_group_table().values()
            if pg["state"] not in ("REMOVED",)
        ]
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert not alive, alive


def failing_or_reporting_loop(config):
    """Reports 3 times, with a second's step; raises at step 1 if ``fail``."""
    for step in range(3):
        time.sleep(1.0)
        if config.get("fail") and step == 1:
            raise ValueError("this trial's own error")
        ray.train.report({"step": step, "tag": config.get("tag")})


def test_trials_share_one_host_and_one_trials_error_leaves_the_others_alone(
    ray_start_4_cpus, storage_path
):
    counter = get_or_create_counter()
    ray.get(counter.put.remote("executors", []))
    trainer = RecordingTrainer(
        failing_or_reporting_loop,
        scaling_config=ray.train.ScalingConfig(num_workers=1),
        remote_executor=True,
    )
    results = Tuner(
        trainer,
        param_space={
            "train_loop_config": {"fail": ray.tune.grid_search([False, True, False, False])}
        },
        run_config=tune_api.RunConfig(storage_path=storage_path, name="shared", verbose=0),
    ).fit()
    by_fail = sorted(results, key=lambda r: r.config["train_loop_config"]["fail"])
    assert [r.error is None for r in by_fail] == [True, True, True, False]
    assert "this trial's own error" in str(by_fail[-1].error)
    assert [r.metrics["step"] for r in by_fail[:3]] == [2, 2, 2]
    executors = recorded("executors")
    assert len(executors) == 4
    assert all(e["shares_host"] for e in executors)
    assert len({e["pid"] for e in executors}) == 1  # one host for every trial
    # Trials ran side by side on it (4 CPUs, 1-CPU workers, 0-CPU coordinators).
    assert max(e["sessions"] for e in executors) >= 2
    # Each trial's workers were in its own placement group.
    assert all(e["worker_placement_group_ids"] == [e["coordinator_pg"]] for e in executors)
    assert len({e["coordinator_pg"] for e in executors}) == 4
    _assert_nothing_leaked()  # nothing outlives the Tuner
    _no_placement_group_left()


def kill_host_when_both_run_loop(config):
    """The (only) worker SIGKILLs the shared host once, at step 1, when both
    trials' loops run. Each trial's first run waits at step 1 for the host's
    death: the trial that did not kill it sees the marker before the kill (the
    killer looks the host up after writing it) and must not run on meanwhile."""
    from helpers import get_or_create_counter as _counter
    from helpers import recorded as _recorded

    start = resume_step(ray.train.get_checkpoint())
    trial_id = ray.train.get_context().get_trial_id()
    counter = _counter()  # a name for the handle: Ray 2.40 loses a temporary one
    ray.get(counter.append.remote("starts", (trial_id, start)))
    first_run = [t for t, _ in _recorded("starts")].count(trial_id) == 1
    for step in range(start, 3):
        if step == 1 and first_run:
            deadline = time.monotonic() + 60
            # Until both trials' loops run (each records its start above).
            while (
                len({t for t, _ in _recorded("starts")}) < 2 and time.monotonic() < deadline
            ):
                time.sleep(0.2)
            _kill_hosts(config["marker"])
        _report_step(step, with_checkpoint=True)


def test_a_shared_host_that_dies_is_an_executor_death_for_each_of_its_trials(
    ray_start_4_cpus, storage_path, tmp_path
):
    marker = str(tmp_path / "killed")
    counter = get_or_create_counter()
    ray.get(counter.put.remote("executors", []))
    ray.get(counter.put.remote("starts", []))
    trainer = RecordingTrainer(
        kill_host_when_both_run_loop,
        train_loop_config={"marker": marker},
        scaling_config=ray.train.ScalingConfig(num_workers=1),
        remote_executor=True,
    )
    results = Tuner(
        trainer,
        tune_config=ray.tune.TuneConfig(num_samples=2),
        run_config=tune_api.RunConfig(
            storage_path=storage_path,
            name="host_killed",
            verbose=0,
            failure_config=tune_api.FailureConfig(max_failures=1),
        ),
    ).fit()
    assert os.path.exists(marker)
    for result in results:
        assert result.error is None, result.error
        assert result.metrics["step"] == 2
    # Each trial failed once (the host's death) and ran again. Whether a retry
    # resumes from step 0's checkpoint depends on whether Tune had processed it
    # before the kill (test_executor_actor_killed_mid_run covers resuming). Not
    # read from metrics_dataframe: when a trial restores, Tune copies its
    # progress.csv back from storage, which lacks the rows not synced yet.
    starts = {}
    for trial_id, start in recorded("starts"):
        starts.setdefault(trial_id, []).append(start)
    assert len(starts) == 2 and all(
        len(s) == 2 and s[0] == 0 and s[1] in (0, 1) for s in starts.values()
    ), starts
    # Both trials ran on the shared host when it died; each retried once, on a
    # host of its own (the Tuner's is gone).
    shared = [e["shares_host"] for e in recorded("executors")]
    assert sorted(shared) == [False, False, True, True], shared
    _assert_nothing_leaked()
    _no_placement_group_left()


@ray.remote(num_cpus=0)
class _Coordinator:
    def ping(self) -> int:
        return 1


def test_a_shared_host_ends_the_session_of_a_coordinator_that_dies(
    ray_start_4_cpus, tmp_path
):
    from ray_tt_ext._executor_hosts import ExecutorHosts

    kwargs = dict(backend_config=BackendConfig(), num_workers=1, max_retries=0)
    hosts = ExecutorHosts(str(tmp_path))
    with hosts.running():
        host = ray.get_actor(hosts.name)
        doomed, other = _Coordinator.remote(), _Coordinator.remote()
        ray.get([doomed.ping.remote(), other.ping.remote()])
        for sid, coordinator in (("doomed", doomed), ("other", other)):
            assert ray.get(
                host.open.remote(
                    sid, _HostedBackendExecutor, kwargs, coordinator=coordinator
                )
            )
            ray.get(host.call.remote(sid, "start", (), {}))
        assert len(alive_actors("RayTrainWorker")) == 2
        ray.kill(doomed)
        deadline = time.monotonic() + 30
        while ray.get(host.sessions.remote()) > 1 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert ray.get(host.sessions.remote()) == 1
        assert len(alive_actors("RayTrainWorker")) == 1  # the doomed session's went
        assert ray.get(host.call.remote("other", "is_started", (), {})) is True
        ray.get(host.close.remote("other"))  # as its coordinator would
    _assert_nothing_leaked()
    assert_every_cpu_free()  # each executor's own placement group went with it


@pytest.mark.extended
def test_two_tuners_in_two_threads_each_have_their_hosts(ray_start_4_cpus, storage_path):
    import threading

    counter = get_or_create_counter()
    ray.get(counter.put.remote("executors", []))
    results, errors = {}, []

    start = threading.Barrier(2)

    def fit(name):
        try:
            trainer = RecordingTrainer(
                failing_or_reporting_loop,
                train_loop_config={"tag": name},
                scaling_config=ray.train.ScalingConfig(num_workers=1),
                remote_executor=True,
            )
            tuner = Tuner(
                trainer,
                run_config=tune_api.RunConfig(
                    storage_path=storage_path, name=name, verbose=0
                ),
            )
            # Both at the same instant: ray_tt_ext locks Tune's trainable registry,
            # and the second fit registers its trainer under a name of its own.
            start.wait(timeout=60)
            results[name] = tuner.fit()[0]
        except BaseException as e:  # reported below, with the thread's name
            errors.append((name, e))

    threads = [threading.Thread(target=fit, args=(f"thread{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=150)
    assert not any(t.is_alive() for t in threads), "a fit did not end"
    assert not errors, errors
    assert sorted(results) == ["thread0", "thread1"]
    assert all(r.error is None and r.metrics["step"] == 2 for r in results.values())
    # Each Tuner's trial ran its own trainer (its config), one of them
    # registered under the trainer's name and the other under the next free one.
    assert {name: r.metrics["tag"] for name, r in results.items()} == {
        "thread0": "thread0",
        "thread1": "thread1",
    }
    renamed = sorted(
        os.path.basename(r.path).startswith("RecordingTrainer_2_") for r in results.values()
    )
    assert renamed == [False, True], [r.path for r in results.values()]
    executors = recorded("executors")
    assert all(e["shares_host"] for e in executors)
    assert len({e["pid"] for e in executors}) == 2  # a host per Tuner
    _assert_nothing_leaked()
