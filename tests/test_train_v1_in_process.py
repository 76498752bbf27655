"""Unit tests in the Train V1 session's own process: tests/conftest.py took
``ray_tt_ext.Tuner`` first, so Train V1 is on here (the fresh-interpreter tests
of Train V1 enablement are in ``test_train_v1.py``)."""

from __future__ import annotations

import pytest

from ray_tt_ext import _compat

needs_v2_default = pytest.mark.skipif(
    _compat.RAY_VERSION.release < _compat.MIN_TRAIN_V2_RAY_VERSION.release,
    reason="this Ray does not turn Train V2 on by default",
)


@pytest.mark.quick
def test_ray_tt_ext_v2_refuses_a_train_v1_process_or_an_old_ray():
    """This session runs Train V1 (tests/conftest.py took ray_tt_ext.Tuner first)."""
    import ray_tt_ext.v2 as v2
    from ray_tt_ext import _compat

    if _compat.RAY_VERSION.release < (2, 51):
        with pytest.raises(v2.UnsupportedRayVersionError, match="2.51"):
            v2.DataParallelTrainer  # noqa: B018
        return
    with pytest.raises(v2.TrainV2DisabledError, match="`ray_tt_ext.Tuner` was first used"):
        v2.DataParallelTrainer(lambda: None)
    with pytest.raises(v2.TrainV2DisabledError, match="RAY_TRAIN_V2_ENABLED=0"):
        v2.Tuner(lambda config: None)


@pytest.mark.quick
@needs_v2_default  # Ray < 2.51's V2 config module lacks these classes and fields
def test_v2_config_objects_convert_field_by_field_and_v2_only_settings_are_errors():
    """docs/guide/migrating.md, "Import order": Train V2's config objects (what
    ``from ray import train`` binds before the first ray_tt_ext name) become the V1
    classes field by field, nested ones too; a V2-only setting left at a value
    other than its default is an error naming it; Ray's own V1 trainers given a
    V2 config object get ``TrainV2EnabledError`` with the fix. In this process
    (Train V1 on), with V2's config module imported as ``ray.train`` would."""
    v2_config = pytest.importorskip("ray.train.v2.api.config")
    v2_callback = pytest.importorskip("ray.train.v2.api.callback")
    import ray.air.config
    import tune_api

    from ray_tt_ext import TrainV2EnabledError
    from ray_tt_ext._compat import train_mode

    converted = train_mode.to_train_v1(
        v2_config.RunConfig(
            name="run",
            checkpoint_config=v2_config.CheckpointConfig(num_to_keep=2),
            failure_config=v2_config.FailureConfig(max_failures=3),
        )
    )
    assert type(converted) is tune_api.RunConfig
    assert converted.name == "run"
    assert type(converted.checkpoint_config) is tune_api.CheckpointConfig
    assert converted.checkpoint_config.num_to_keep == 2
    assert type(converted.failure_config) is tune_api.FailureConfig
    assert converted.failure_config.max_failures == 3
    scaling = train_mode.to_train_v1(v2_config.ScalingConfig(num_workers=3))
    assert type(scaling) is ray.air.config.ScalingConfig and scaling.num_workers == 3

    with pytest.raises(TrainV2EnabledError, match=r"worker_runtime_env=.*Fix: drop"):
        train_mode.to_train_v1(
            v2_config.RunConfig(worker_runtime_env={"env_vars": {"A": "1"}})
        )
    with pytest.raises(TrainV2EnabledError, match=r"callbacks=.*Fix: pass Tune callbacks"):
        train_mode.to_train_v1(v2_config.RunConfig(callbacks=[v2_callback.UserCallback()]))
    # Ray's own V1 trainer accepts V2's ScalingConfig (a subclass of V1's); the
    # Tuner refuses it before anything runs (Ray refuses a V2 RunConfig itself).
    from ray.train.data_parallel_trainer import DataParallelTrainer as RaysTrainer

    import ray_tt_ext

    rays = RaysTrainer(lambda: None, scaling_config=v2_config.ScalingConfig(num_workers=1))
    with pytest.raises(
        TrainV2EnabledError, match=r"Got a Ray Train V2 `ScalingConfig`.*Fix:"
    ):
        ray_tt_ext.Tuner(rays)
