"""Checkpoints on S3: moto's S3 server on loopback (as Ray's own CI uses).

What holds on local disk holds here: template names, never overwriting a
folder already on S3, ``Tuner.restore`` continuing the index, ``num_to_keep``
evicting by index, readable ``Result.checkpoint`` and ``best_checkpoints``, for
function and class trainables and ``TorchTrainer``; both ways of naming the
store (``storage_filesystem=`` and an ``s3://`` URI with the endpoint in it).
"""

from __future__ import annotations

import json
import uuid

import pyarrow.fs
import pytest
import ray
import ray.train
import tune_api
from helpers import ClassTrainable, function_trainable, function_trainable_failing_once

from ray_tt_ext import CheckpointConfig, Tuner

pytestmark = pytest.mark.timeout(300)


def _names(fs, path: str, prefix: str = "") -> list[str]:
    infos = fs.get_file_info(pyarrow.fs.FileSelector(path))
    return sorted(
        i.base_name
        for i in infos
        if i.type == pyarrow.fs.FileType.Directory and i.base_name.startswith(prefix)
    )


def _read_json(fs, path: str) -> dict:
    with fs.open_input_stream(path) as f:
        return json.loads(f.read())


def _trial_path(result) -> str:
    return result.path  # "bucket/exp/trial" on the S3 filesystem


def test_function_trainable_named_checkpoints_on_s3(ray_start_4_cpus, s3_server):
    fs = s3_server.filesystem()
    exp = f"bucket/fn-{uuid.uuid4().hex[:8]}"
    result = Tuner(
        function_trainable,
        param_space={"num_reports": 5},
        run_config=tune_api.RunConfig(
            storage_path=exp,
            storage_filesystem=fs,
            name="exp",
            verbose=0,
            checkpoint_config=CheckpointConfig(
                checkpoint_index="step",
                checkpoint_dir_name="ckpt-{index:03d}-{loss:.2f}",
                num_to_keep=2,
                checkpoint_score_attribute="step",  # keep by score, evict by index
            ),
        ),
    ).fit()[0]
    assert result.error is None
    # num_to_keep=2: the two highest; evicted folders are gone from S3.
    assert _names(fs, _trial_path(result), "ckpt-") == ["ckpt-003-0.25", "ckpt-004-0.20"]
    assert [c.path.rsplit("/", 1)[1] for c, _ in result.best_checkpoints] == [
        "ckpt-003-0.25",
        "ckpt-004-0.20",
    ]
    with result.checkpoint.as_directory() as d:  # readable from S3
        with open(f"{d}/state.json") as f:
            assert json.load(f) == {"step": 4}


def test_restore_from_s3_continues_the_index_and_never_overwrites(
    ray_start_4_cpus, s3_server, tmp_path
):
    fs = s3_server.filesystem()
    exp = f"bucket/restore-{uuid.uuid4().hex[:8]}"

    def run_config():
        return tune_api.RunConfig(
            storage_path=exp,
            storage_filesystem=fs,
            name="exp",
            verbose=0,
            checkpoint_config=CheckpointConfig(
                checkpoint_dir_name="ck-{index:04d}-s{step}"
            ),
        )

    first = Tuner(
        function_trainable_failing_once,
        param_space={"num_reports": 5, "fail_at": 3, "marker": str(tmp_path / "failed")},
        run_config=run_config(),
    ).fit()[0]
    assert first.error is not None
    trial = _trial_path(first)
    assert _names(fs, trial, "ck-") == ["ck-0000-s0", "ck-0001-s1", "ck-0002-s2"]
    # A folder already on S3 at the next name, which the run never recorded.
    with fs.open_output_stream(f"{trial}/ck-0003-s93/state.json") as f:
        f.write(b'{"step": 93}')
    result = Tuner.restore(
        f"{exp}/exp",
        trainable=function_trainable_failing_once,
        resume_errored=True,
        storage_filesystem=fs,
    ).fit()[0]
    assert result.error is None
    assert _names(fs, trial, "ck-") == [
        "ck-0000-s0",
        "ck-0001-s1",
        "ck-0002-s2",
        "ck-0003-s93",  # untouched
        "ck-0004-s3",  # the index continued past it
        "ck-0005-s4",
    ]
    assert _read_json(fs, f"{trial}/ck-0003-s93/state.json") == {"step": 93}
    assert _read_json(fs, f"{trial}/ck-0004-s3/state.json") == {"step": 3}


def test_class_trainable_with_an_s3_uri(ray_start_4_cpus, s3_server):
    exp = f"restore-{uuid.uuid4().hex[:8]}"
    result = Tuner(
        ClassTrainable,
        run_config=tune_api.RunConfig(
            storage_path=s3_server.uri(exp),
            name="exp",
            verbose=0,
            stop={"training_iteration": 4},
            checkpoint_config=CheckpointConfig(
                checkpoint_frequency=2,
                checkpoint_index="training_iteration",
                checkpoint_dir_name="it-{index:03d}",
            ),
        ),
    ).fit()[0]
    assert result.error is None
    fs = s3_server.filesystem()
    assert _names(fs, _trial_path(result), "it-") == ["it-002", "it-004"]
    with result.checkpoint.as_directory() as d:
        with open(f"{d}/state.json") as f:
            assert json.load(f)["iteration"] == 4


def test_torch_trainer_on_s3(ray_start_4_cpus, s3_server):
    pytest.importorskip("torch")
    from test_torch import ddp_loop

    import ray_tt_ext

    fs = s3_server.filesystem()
    result = Tuner(
        ray_tt_ext.TorchTrainer(
            ddp_loop,
            train_loop_config={"steps": 2, "lr": 0.1},
            scaling_config=ray.train.ScalingConfig(num_workers=2),
        ),
        run_config=tune_api.RunConfig(
            storage_path=f"bucket/torch-{uuid.uuid4().hex[:8]}",
            storage_filesystem=fs,
            name="exp",
            verbose=0,
            checkpoint_config=CheckpointConfig(checkpoint_dir_name="model-{step:03d}"),
        ),
    ).fit()[0]
    assert result.error is None
    assert _names(fs, _trial_path(result), "model-") == ["model-000", "model-001"]
    import torch

    with result.checkpoint.as_directory() as d:
        assert torch.load(f"{d}/model.pt")["step"] == 1
