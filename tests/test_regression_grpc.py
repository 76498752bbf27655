"""Regression suite for "Sent message larger than max".

Upstream: fixed by ray-project/ray#28826, broken again by ray-project/ray#43146,
fixed again by ray-project/ray#43234.

What Tune registers for a trainer must not depend on what the trainer carries.
Run this file against a new Ray release to see whether upstream regressed it.
"""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest
import ray
import ray.train
import ray.tune
import tune_api
from helpers import RecordingRemoteBackendExecutor
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ray.train.data_parallel_trainer import DataParallelTrainer as RayDataParallelTrainer
from ray.tune.execution.placement_groups import PlacementGroupFactory
from ray.tune.trainable import wrap_function

import ray_tt_ext
from ray_tt_ext import PayloadTooLargeError
from ray_tt_ext._payload import inspect_registered

MiB = 1024 * 1024
GiB = 1024 * MiB
# Far under the gRPC limit, and close to what an empty trainer registers.
SMALL_PAYLOAD = 64 * 1024


def noop_loop(config):
    ray.train.report({"done": 1})


def _closure_loop(nbytes: int):
    weights = np.ones(max(nbytes // 8, 0))

    def train_loop_per_worker(config):
        ray.train.report({"n": float(weights.size)})

    return train_loop_per_worker


def _trainer(where: str, nbytes: int, tmp_path=None, cls=ray_tt_ext.DataParallelTrainer):
    data = np.ones(nbytes // 8)
    kwargs = {}
    loop = noop_loop
    if where == "train_loop_config":
        kwargs["train_loop_config"] = {"weights": data}
    elif where == "metadata":
        kwargs["metadata"] = {"notes": "x" * nbytes}
    elif where == "closure":
        loop = _closure_loop(nbytes)
    elif where == "resume_from_checkpoint":
        ckpt_dir = tmp_path / f"ckpt_{nbytes}"
        ckpt_dir.mkdir(exist_ok=True)
        data.tofile(ckpt_dir / "weights.bin")
        kwargs["resume_from_checkpoint"] = ray.train.Checkpoint.from_directory(
            str(ckpt_dir)
        )
    trainer = cls(loop, scaling_config=ray.train.ScalingConfig(num_workers=1), **kwargs)
    if where == "attribute":
        trainer.big_attribute = data
    return trainer


def registered_bytes(trainable) -> int:
    return inspect_registered(trainable).total_bytes


@pytest.mark.quick
@pytest.mark.parametrize(
    "where",
    ["attribute", "train_loop_config", "metadata", "closure", "resume_from_checkpoint"],
)
@pytest.mark.parametrize("nbytes", [0, MiB, 64 * MiB])
def test_registered_payload_does_not_depend_on_attached_data(
    ray_start_4_cpus, tmp_path, where, nbytes
):
    baseline = registered_bytes(_trainer(where, 0, tmp_path).as_trainable())
    trainable = _trainer(where, nbytes, tmp_path).as_trainable()
    size = registered_bytes(trainable)
    assert size < SMALL_PAYLOAD
    assert abs(size - baseline) < 4 * 1024, (where, nbytes, size, baseline)
    # What Tune sends is what we measured: Ray's own pickling agrees.
    assert len(ray.cloudpickle.dumps(trainable)) < SMALL_PAYLOAD


@pytest.mark.large
@pytest.mark.parametrize("where", ["train_loop_config", "closure"])
def test_registered_payload_is_small_with_1_gib_attached(ray_start_4_cpus, where):
    trainable = _trainer(where, GiB).as_trainable()
    assert registered_bytes(trainable) < SMALL_PAYLOAD
    assert len(ray.cloudpickle.dumps(trainable)) < SMALL_PAYLOAD
    del trainable
    gc.collect()


@pytest.mark.quick
@settings(
    max_examples=12,
    deadline=None,
    # The fixture is a shared, session-wide Ray: nothing to reset between inputs.
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=4 * MiB), min_size=1, max_size=4),
    places=st.lists(
        st.sampled_from(["attribute", "train_loop_config", "metadata", "closure"]),
        min_size=1,
        max_size=4,
    ),
)
def test_payload_does_not_grow_with_attached_data_property(ray_start_4_cpus, sizes, places):
    baseline = registered_bytes(_trainer("attribute", 0).as_trainable())
    for nbytes, where in zip(sizes, places, strict=False):
        size = registered_bytes(_trainer(where, nbytes).as_trainable())
        assert abs(size - baseline) < 4 * 1024


def test_as_trainable_before_ray_init_is_no_false_positive_and_hooks_do_not_pile_up(
    shutdown_only,
):
    """Trainables converted before ``ray.init()``: their pending data does not count,
    one post-init hook serves them all, and ``ray.init`` puts every one."""
    from ray._private import worker

    before = len(worker._post_init_hooks)
    # 150 MB is over Ray's FUNCTION_SIZE_ERROR_THRESHOLD (100 MB): pending data
    # must not count, because it goes to the object store, not to the GCS.
    trainer = _trainer("train_loop_config", 150 * 1000 * 1000)
    trainable = trainer.as_trainable()
    assert registered_bytes(trainable) < SMALL_PAYLOAD
    trainables = [_trainer("train_loop_config", 1000).as_trainable() for _ in range(5)]
    assert len(worker._post_init_hooks) - before <= 1  # one hook for all holders
    ray.init(address="local", num_cpus=2, include_dashboard=False)
    assert all(t._params._ref is not None for t in trainables)
    assert trainable._params._ref is not None  # flushed by ray.init's hook
    assert len(ray.cloudpickle.dumps(trainable)) < SMALL_PAYLOAD
    assert trainable._params.get()["train_loop_config"]["weights"].nbytes == 150_000_000


class RegressedTrainer(ray_tt_ext.DataParallelTrainer):
    """Re-introduces #43146: its generated trainable captures ``self``."""

    def _generate_trainable_cls(self):
        trainer = self  # the regression: `self` in the coordinator's closure

        def train_coordinator_fn(config):
            trainer.training_loop()

        trainable_cls = wrap_function(train_coordinator_fn)

        class TrainTrainable(trainable_cls):
            @classmethod
            def default_resource_request(cls, config):
                return PlacementGroupFactory([{"CPU": 1}])

        return TrainTrainable


@pytest.mark.quick
def test_regressed_trainer_is_caught_before_the_gcs_naming_the_attribute(ray_start_4_cpus):
    trainer = RegressedTrainer(
        noop_loop, scaling_config=ray.train.ScalingConfig(num_workers=1)
    )
    trainer.embedding_table = np.ones(15_000_000)  # 120 MB on the instance
    with pytest.raises(PayloadTooLargeError) as info:
        trainer.as_trainable()
    message = str(info.value)
    assert "<closure>.trainer.embedding_table" in message
    top = info.value.report.contributors[0]
    assert top.path.endswith("<closure>.trainer.embedding_table")
    assert top.nbytes >= 120_000_000


@pytest.mark.quick
def test_upstream_ray_trainer_payload_grows_with_metadata(ray_start_4_cpus):
    """The canary for Ray itself: upstream still captures ``metadata``.

    If this starts failing, upstream stopped carrying trainer data in what it
    registers; update the README's comparison.
    """
    from ray.train.data_parallel_trainer import DataParallelTrainer as RayDPT

    small = RayDPT(noop_loop, metadata={"notes": ""}).as_trainable()
    large = RayDPT(noop_loop, metadata={"notes": "x" * MiB}).as_trainable()
    assert registered_bytes(large) - registered_bytes(small) >= MiB


@pytest.mark.large
def test_fit_with_600_mb_attached_succeeds(ray_start_4_cpus, storage_path):
    """Over the 512 MiB gRPC limit in total, and it still runs on a real Ray."""
    weights = np.ones(75_000_000)  # 600 MB

    def loop(config):
        ray.train.report({"total": float(config["weights"][:10].sum())})

    results = ray_tt_ext.Tuner(
        ray_tt_ext.DataParallelTrainer(
            loop,
            train_loop_config={"weights": weights},
            scaling_config=ray.train.ScalingConfig(num_workers=1),
        ),
        run_config=tune_api.RunConfig(storage_path=storage_path, name="big", verbose=0),
    ).fit()
    assert not results.errors, results.errors
    assert results[0].metrics["total"] == 10.0
    assert os.path.isdir(results[0].path)


class UsersOwnTrainer(RayDataParallelTrainer):
    """A user's subclass of Ray's own DataParallelTrainer, with its own argument."""

    def __init__(
        self, train_loop_per_worker, *, tables=None, scaling_config=None, run_config=None
    ):
        self.tables = tables
        super().__init__(
            train_loop_per_worker,
            train_loop_config={"tables": tables},
            scaling_config=scaling_config,
            run_config=run_config,
        )


class HardenedUsersTrainer(ray_tt_ext.BaseTrainer, UsersOwnTrainer):
    """The documented one line: put ray_tt_ext.BaseTrainer first."""


def test_one_line_hardens_any_data_parallel_trainer_subclass(
    ray_start_4_cpus, storage_path
):
    tables = np.ones(8_000_000)  # 64 MB
    plain = UsersOwnTrainer(noop_loop, tables=tables).as_trainable()
    hardened_trainer = HardenedUsersTrainer(
        lambda config: ray.train.report({"n": float(config["tables"].size)}),
        tables=tables,
        scaling_config=ray.train.ScalingConfig(num_workers=1),
    )
    hardened = hardened_trainer.as_trainable()
    from ray_tt_ext._trainer import _TrainCoordinator

    # Ray's conversion for Ray's class; ray_tt_ext's self-free coordinator for ours.
    assert not issubclass(plain, _TrainCoordinator)
    assert issubclass(hardened, _TrainCoordinator)
    assert hardened._trainer_cls is HardenedUsersTrainer
    assert hardened_trainer._param_dict["tables"] is tables  # its own signature recorded
    # What Tune registers does not grow with the data (64 MB against 8 bytes).
    tiny = HardenedUsersTrainer(noop_loop, tables=np.ones(1)).as_trainable()
    assert abs(registered_bytes(hardened) - registered_bytes(tiny)) < 1024
    assert registered_bytes(hardened) < SMALL_PAYLOAD
    results = ray_tt_ext.Tuner(
        hardened_trainer,
        run_config=tune_api.RunConfig(
            storage_path=storage_path, name="hardened", verbose=0
        ),
    ).fit()
    assert not results.errors
    assert results[0].metrics["n"] == 8_000_000


class RemoteUsersTrainer(ray_tt_ext.BaseTrainer, UsersOwnTrainer):
    """The documented class-level switch: every instance runs the remote executor."""

    remote_executor = True


class ConfigurableUsersTrainer(ray_tt_ext.BaseTrainer, UsersOwnTrainer):
    """The documented per-instance switch, in the user's own constructor."""

    # Records where the executor actor ran (tests only; users keep the default).
    _remote_backend_executor_cls = RecordingRemoteBackendExecutor

    def __init__(
        self, train_loop, *, tables=None, scaling_config=None, remote_executor=False
    ):
        self.remote_executor = remote_executor
        super().__init__(train_loop, tables=tables, scaling_config=scaling_config)


def pid_loop(config):
    ray.train.report({"n": float(config["tables"].size)})


def test_users_own_subclass_gets_the_remote_executor(ray_start_4_cpus, storage_path):
    from helpers import (
        RecordingRemoteBackendExecutor,
        get_or_create_counter,
        record,
        recorded,
    )

    from ray_tt_ext._compat import BackendExecutor

    scaling = ray.train.ScalingConfig(num_workers=1)
    assert (
        RemoteUsersTrainer(noop_loop, tables=np.ones(1))._backend_executor_cls
        is ray_tt_ext.RemoteBackendExecutor
    )
    on = ConfigurableUsersTrainer(noop_loop, tables=np.ones(1), remote_executor=True)
    off = ConfigurableUsersTrainer(noop_loop, tables=np.ones(1))
    assert on._backend_executor_cls is RecordingRemoteBackendExecutor
    assert off._backend_executor_cls is BackendExecutor
    assert on._param_dict["remote_executor"] is True  # its own signature, recorded
    with pytest.raises(TypeError, match="remote_executor must be True or False"):
        ConfigurableUsersTrainer(noop_loop, remote_executor="yes")
    # Run through a Tuner: the coordinator rebuilds it with the remote executor.
    get_or_create_counter()
    record("executor", None)
    results = ray_tt_ext.Tuner(
        ConfigurableUsersTrainer(
            pid_loop, tables=np.ones(10), scaling_config=scaling, remote_executor=True
        ),
        run_config=tune_api.RunConfig(storage_path=storage_path, name="users_remote"),
    ).fit()
    assert not results.errors
    assert results[0].metrics["n"] == 10
    executor = recorded("executor")  # the executor ran in its own zero-CPU actor
    assert executor is not None and executor["node_id"] == executor["coordinator_node"]
    assert executor["assigned_resources"].get("CPU", 0) == 0
