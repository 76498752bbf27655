"""RemoteBackendExecutor keeps Ray's BackendExecutor contract (ray-project/ray#20123, issue 22).

Each test drives an executor directly, as Ray Train's own unit tests
(``python/ray/train/tests/test_backend.py``) drive Ray's, and runs the same
assertions against Ray's ``BackendExecutor`` and ``ray_tt_ext``'s
``RemoteBackendExecutor``: Ray's behaviour is the contract.
"""

from __future__ import annotations

import os
import tempfile
import time

import pytest
import ray
from helpers import alive_actors
from ray.train import DataConfig
from ray.train.backend import BackendConfig
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from ray_tt_ext import RemoteBackendExecutor
from ray_tt_ext._compat import (
    BackendExecutor,
    InactiveWorkerGroup,
    InactiveWorkerGroupError,
    StartTraceback,
    StorageContext,
    TrainBackendError,
    TrainingWorkerError,
    get_session,
)

pytestmark = pytest.mark.timeout(180)

EXECUTORS = {"rays_executor": BackendExecutor, "remote_executor": RemoteBackendExecutor}


#: Ray's own executor is the reference these tests hold ours to: its runs are
#: in the ``extended`` tier (every matrix row), ours in CI's.
EXECUTOR_PARAMS = [
    pytest.param("rays_executor", marks=pytest.mark.extended),
    "remote_executor",
]


@pytest.fixture(params=EXECUTOR_PARAMS)
def executor_cls(request):
    return EXECUTORS[request.param]


def _start_training(executor, fn) -> None:
    """As Ray's test_backend.py starts training."""
    executor.start_training(
        train_func=fn,
        datasets={},
        metadata={},
        data_config=DataConfig(),
        storage=StorageContext(
            storage_path=tempfile.mkdtemp(),
            experiment_dir_name="exp_name",
            trial_dir_name="trial_name",
        ),
    )


def _no_executor_left(timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive_actors("RayTrainWorker"):
            return
        time.sleep(0.5)
    raise AssertionError("training workers still alive")


def test_a_started_executor_keeps_rays_contract_through_shutdown_and_a_new_start(
    ray_start_4_cpus, executor_cls
):
    """One executor walked through Ray's test_start, the DataContext start() gives
    the workers, test_train_failure (calls out of order), test_initialization_hook
    and test_shutdown, then what Ray's executor does after a shutdown."""
    from ray.data import DataContext

    def init_hook():
        os.environ["RTT_CONTRACT_HOOK"] = "1"

    # Ray's start() gives the workers the DataContext of the process it runs in:
    # the caller's, for Ray's executor; the remote one sends the caller's along
    # (the one current when it is made).
    context = DataContext.get_current()
    before = context.target_max_block_size
    context.target_max_block_size = 12_345_678
    e = None
    try:
        try:
            e = executor_cls(BackendConfig(), num_workers=2)
            with pytest.raises(InactiveWorkerGroupError):  # test_start: not started
                _start_training(e, lambda: 1)
            e.start(initialization_hook=init_hook)
            sizes = e.worker_group.execute(
                lambda: (
                    __import__("ray.data")
                    .data.DataContext.get_current()
                    .target_max_block_size
                )
            )
        finally:
            context.target_max_block_size = before
        assert sizes == [12_345_678] * 2
        assert len(e.worker_group) == 2
        assert e.is_started()
        # test_train_failure: each call before start_training, and a second
        # start_training while one runs, raise StartTraceback from TrainBackendError.
        for call in (e.get_next_results, e.pause_reporting, e.finish_training):
            with pytest.raises(StartTraceback) as info:
                call()
            assert isinstance(info.value.__cause__, TrainBackendError), call
        # test_initialization_hook: the hook ran on every worker.
        _start_training(e, lambda: os.getenv("RTT_CONTRACT_HOOK", "0"))
        with pytest.raises(StartTraceback) as info:
            _start_training(e, lambda: 2)
        assert isinstance(info.value.__cause__, TrainBackendError)
        assert e.finish_training() == ["1", "1"]
    finally:
        if e is not None:
            e.shutdown()
    # test_shutdown, then what Ray's executor does after it.
    assert not e.is_started()
    with pytest.raises(InactiveWorkerGroupError):
        _start_training(e, lambda: 1)
    for call in (e.get_next_results, e.pause_reporting, e.finish_training):
        with pytest.raises(InactiveWorkerGroupError):
            call()
    assert isinstance(e.get_worker_group(), InactiveWorkerGroup)
    assert e._get_num_failures() == 0
    e.start()  # a new worker group, as Ray's executor starts one
    try:
        assert len(e.worker_group) == 2
        _start_training(e, _reports_twice)
        if isinstance(e, RemoteBackendExecutor):
            # The reports below are read from the workers by the proxy itself,
            # as Ray's executor reads them, not through the host.
            assert len(e._readers) == 2
        assert [r.metrics["i"] for r in e.get_next_results()] == [0, 0]
        assert [r.metrics["i"] for r in e.get_next_results()] == [1, 1]
        assert e.get_next_results() is None
        assert e.finish_training() == [7, 7]
    finally:
        e.shutdown()
    _no_executor_left()


def _reports_twice():
    import ray.train

    for i in range(2):
        ray.train.report({"i": i})
    return 7


def test_close_ends_a_remote_executor_and_its_dedicated_host(ray_start_4_cpus):
    e = RemoteBackendExecutor(BackendConfig(), num_workers=1)
    assert not e.shares_host  # made outside a Tuner's trial
    e.start()
    host_id = e.actor._actor_id.hex()
    e.close()
    assert e.actor is None and not e.is_started()
    with pytest.raises(InactiveWorkerGroupError):
        e.get_next_results()

    def host_alive():
        return any(a["ActorID"] == host_id for a in alive_actors("BackendExecutorHost"))

    deadline = time.monotonic() + 30
    while host_alive() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not host_alive()


def _rank0_dies_at_once():
    """Ray's single_worker_actor_failure: rank 0 exits at once, the other sleeps."""
    if get_session().world_rank == 0:
        os._exit(1)
    time.sleep(1)


def test_a_worker_dying_as_training_starts_fails_get_next_results(
    ray_start_4_cpus, executor_cls
):
    # Ray's test_single_worker_actor_failure: start_training returns, and
    # get_next_results raises TrainingWorkerError after restarting the group.
    e = executor_cls(BackendConfig(), num_workers=2, max_retries=3)
    e.start()
    try:
        _start_training(e, _rank0_dies_at_once)
        with pytest.raises(TrainingWorkerError):
            e.get_next_results()
        assert e._get_num_failures() == 1
        assert e.is_started() and len(e.worker_group) == 2  # restarted, as Ray does
        # Training starts again on the restarted group (as TrainingIterator
        # does after TrainingWorkerError), and its results are read from it.
        _start_training(e, _reports_twice)
        assert [r.metrics["i"] for r in e.get_next_results()] == [0, 0]
        assert [r.metrics["i"] for r in e.get_next_results()] == [1, 1]
        assert e.get_next_results() is None
    finally:
        e.shutdown()
    _no_executor_left()


def test_out_of_retries_raises_rays_error_with_its_cause(ray_start_4_cpus, executor_cls):
    e = executor_cls(BackendConfig(), num_workers=2, max_retries=1)
    e.start()
    try:
        _start_training(e, _rank0_dies_at_once)
        with pytest.raises(
            RuntimeError, match="Training has failed after 1 attempts"
        ) as info:
            e.get_next_results()
        # The worker's death is the cause, with either executor.
        assert isinstance(info.value.__cause__, ray.exceptions.RayActorError)
    finally:
        e.shutdown()
    _no_executor_left()


@ray.remote(num_cpus=1)
def _workers_placement(executor_name: str):
    """In a task: where an executor built here starts its workers."""
    e = EXECUTORS[executor_name](BackendConfig(), num_workers=2)
    e.start()
    try:
        ids = e.worker_group.execute(
            lambda: ray.get_runtime_context().get_placement_group_id()
        )
        # And where a task the training workers start goes (zero CPU: it fits a
        # bundle of the caller's full group if it joins it).
        child_ids = e.worker_group.execute(_a_task_placement_group)
    finally:
        e.shutdown()
    return ray.get_runtime_context().get_placement_group_id(), ids, child_ids


def _a_task_placement_group():
    @ray.remote(num_cpus=0)
    def where():
        return ray.get_runtime_context().get_placement_group_id()

    return ray.get(where.remote())


@pytest.mark.parametrize("executor_name", EXECUTOR_PARAMS)
@pytest.mark.parametrize("capture", [True, False], ids=["capture", "no_capture"])
def test_workers_go_where_the_callers_placement_group_says(
    ray_start_4_cpus, executor_name, capture
):
    # Ray's test_placement_group_parent: with capture the workers join the
    # caller's placement group; without, the executor makes one of its own.
    pg = placement_group([{"CPU": 1}] * (3 if capture else 1))
    ray.get(pg.ready())
    try:
        task = _workers_placement.options(
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=pg, placement_group_capture_child_tasks=capture
            )
        )
        own, workers, children = ray.get(task.remote(executor_name))
    finally:
        remove_placement_group(pg)
    assert own == pg.id.hex()
    if capture:  # the workers capture theirs in turn
        assert workers == [pg.id.hex()] * 2
        assert children == [pg.id.hex()] * 2
    else:
        assert len(set(workers)) == 1 and workers[0] not in (None, pg.id.hex())
        assert children == [None, None]
    _no_executor_left()


def test_the_backend_and_its_config_are_there_to_call(ray_start_4_cpus, executor_cls):
    # Ray's test_torch_start_shutdown: the caller runs the backend's shutdown
    # itself, on the executor's worker group.
    torch = pytest.importorskip("torch")
    from ray.train.torch import TorchConfig

    def process_group_up():
        import torch.distributed as dist

        return dist.is_initialized() and dist.get_world_size() == 2

    config = TorchConfig(backend="gloo")
    e = executor_cls(config, num_workers=2)
    assert e._backend_config is config
    e.start()
    try:
        _start_training(e, process_group_up)
        assert all(e.finish_training())
        e._backend.on_shutdown(e.worker_group, e._backend_config)
        _start_training(e, process_group_up)
        assert not any(e.finish_training())
    finally:
        # Not graceful: the process group is gone already (Ray 2.40's graceful
        # shutdown would fail destroying it again, with either executor).
        e.shutdown(graceful_termination=False)
    assert torch  # imported on the driver only to skip without it


def _raises_runtime_error():
    raise RuntimeError("the user's error")


def test_a_users_error_is_rays_start_traceback_with_it_as_cause(
    ray_start_4_cpus, executor_cls
):
    # Ray's test_single_worker_user_failure.
    e = executor_cls(BackendConfig(), num_workers=1)
    e.start()
    try:
        _start_training(e, _raises_runtime_error)
        with pytest.raises(StartTraceback) as info:
            e.get_next_results()
        assert isinstance(info.value.__cause__, RuntimeError)
        assert "the user's error" in str(info.value.__cause__)
    finally:
        e.shutdown()
