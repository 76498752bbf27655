"""Ray's V1 XGBoostTrainer through ray_tt_ext (skipped, and counted, without xgboost).

The test setup installs ``xgboost-cpu`` (the CPU-only build of xgboost; the
``xgboost`` wheel pulls NVIDIA's NCCL for CUDA).
"""

from __future__ import annotations

import os

import pytest
import ray.data
import ray.train
import tune_api

import ray_tt_ext

xgboost = pytest.importorskip("xgboost")

pytestmark = pytest.mark.timeout(300)


def test_one_xgboost_trial_over_an_in_memory_dataset(ray_start_4_cpus, storage_path):
    dataset = ray.data.from_items([{"x": float(i), "y": 2.0 * i} for i in range(64)])
    trainer = ray_tt_ext.XGBoostTrainer(
        label_column="y",
        params={"objective": "reg:squarederror", "eta": 0.5},
        num_boost_round=4,
        datasets={"train": dataset},
        scaling_config=ray.train.ScalingConfig(num_workers=1),
    )
    assert isinstance(trainer, ray_tt_ext.BaseTrainer)
    tuner = ray_tt_ext.Tuner(
        trainer,
        run_config=tune_api.RunConfig(
            storage_path=storage_path,
            name="xgb",
            verbose=0,
            checkpoint_config=ray_tt_ext.CheckpointConfig(
                checkpoint_dir_name="boost-{index:02d}"
            ),
        ),
    )
    # What Tune registers is small: the dataset travels through the object store.
    payload = ray_tt_ext.inspect_payload(tuner._local_tuner.converted_trainable)
    assert payload.total_bytes < 64 * 1024
    result = tuner.fit()[0]
    assert result.error is None
    assert os.path.basename(result.checkpoint.path) == "boost-00"
    from ray.train.xgboost import RayTrainReportCallback

    model = RayTrainReportCallback.get_model(result.checkpoint)
    assert model.num_boosted_rounds() == 4
