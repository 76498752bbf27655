"""Ray's V1 TorchTrainer through ray_tt_ext: DDP over gloo on the CPU, real PyTorch.

The test setup installs exactly torch==2.13.0 (constraints/test.txt), a CPU
build on this machine's disk; without torch the module is skipped (and counted).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import ray
import ray.train
import ray.tune
import tune_api
from helpers import alive_actors

import ray_tt_ext

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.timeout(300)


def ddp_loop(config):
    """Rank 0 saves ``model.pt`` with ``torch.save``; every rank all-reduces."""
    import ray.train.torch
    import torch
    import torch.distributed as dist

    ctx = ray.train.get_context()
    rank = ctx.get_world_rank()
    token = torch.tensor([float(rank + 1)])
    dist.all_reduce(token)  # 1 + 2 with two workers
    torch.manual_seed(0)
    model = ray.train.torch.prepare_model(torch.nn.Linear(2, 1))  # DDP over gloo
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"])
    start = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            state = torch.load(os.path.join(d, "model.pt"))
        model.module.load_state_dict(state["model"])
        start = state["step"] + 1
    for step in range(start, config["steps"]):
        if step == config.get("fail_at") and rank == 1:
            marker = config["marker"]
            if not os.path.exists(marker):
                Path(marker).touch()
                os._exit(1)  # a worker dies mid-run, once
        loss = model(torch.ones(4, 2)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        metrics = {
            "step": step,
            "loss": loss.item(),
            "all_reduced": token.item(),
            f"pid_{rank}": os.getpid(),
        }
        if rank != 0:
            ray.train.report(metrics)
            continue
        with tempfile.TemporaryDirectory() as d:
            torch.save({"model": model.module.state_dict(), "step": step}, f"{d}/model.pt")
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(d))


def _tuner(storage_path, name, remote, steps=3, max_failures=0, param_space=None, **config):
    return ray_tt_ext.Tuner(
        ray_tt_ext.TorchTrainer(
            ddp_loop,
            train_loop_config={"steps": steps, **config},
            scaling_config=ray.train.ScalingConfig(num_workers=2),
            remote_executor=remote,
        ),
        param_space=param_space
        or {"train_loop_config": {"lr": ray.tune.grid_search([0.1, 0.01])}},
        run_config=tune_api.RunConfig(
            storage_path=storage_path,
            name=name,
            verbose=0,
            failure_config=tune_api.FailureConfig(max_failures=max_failures),
            checkpoint_config=ray_tt_ext.CheckpointConfig(
                checkpoint_dir_name="model-{step:03d}"
            ),
        ),
    )


def _assert_no_workers_left(results=()):
    """No training worker actor, and no worker process (with its process group)."""
    import time

    pids = {
        int(pid)
        for result in results
        for column, values in result.metrics_dataframe.items()
        if column.startswith("pid_")
        for pid in values.dropna()
    }
    deadline = time.monotonic() + 30
    while True:
        alive = [pid for pid in pids if _process_exists(pid)]
        actors = alive_actors("RayTrainWorker") + alive_actors("BackendExecutorHost")
        if not alive and not actors:
            return
        assert time.monotonic() < deadline, f"left after the run: {alive}, {actors}"
        time.sleep(0.5)


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.extended
def test_ddp_over_gloo_through_the_tuner_with_either_executor(
    ray_start_4_cpus, storage_path
):
    """Three trials of one Tuner: Ray's executor at lr 0.1, the remote one (one
    shared host) at lr 0.01 and 0.001."""
    by_lr = {
        "train_loop_config": {"lr": ray.tune.grid_search([0.1, 0.01, 0.001])},
        "remote_executor": ray.tune.sample_from(
            lambda spec: spec.config.train_loop_config.lr < 0.1
        ),
    }
    results = _tuner(storage_path, "ddp", remote=True, param_space=by_lr).fit()
    assert not results.errors, results.errors
    assert len(results) == 3
    assert sorted(r.config["remote_executor"] for r in results) == [False, True, True]
    for result in results:
        assert result.metrics["all_reduced"] == 3.0  # the process group spans both
        names = sorted(n for n in os.listdir(result.path) if n.startswith("model-"))
        assert names == ["model-000", "model-001", "model-002"]
        assert os.path.basename(result.checkpoint.path) == "model-002"
        with result.checkpoint.as_directory() as d:
            state = torch.load(os.path.join(d, "model.pt"))
        assert state["step"] == 2 and set(state["model"]) == {"weight", "bias"}
    # Three learning rates, three different models (two under the remote executor).
    weights = [
        torch.load(os.path.join(r.checkpoint.path, "model.pt"))["model"]["weight"]
        for r in results
    ]
    for i, j in [(0, 1), (0, 2), (1, 2)]:
        assert not torch.equal(weights[i], weights[j])
    _assert_no_workers_left(results)


def test_a_killed_worker_resumes_from_its_named_checkpoint(
    ray_start_4_cpus, storage_path, tmp_path
):
    # One trial, so the worker the marker kills is that trial's (a second trial would repeat
    # the same run, after the first, on the same 4 CPUs).
    results = _tuner(
        storage_path,
        "ddp_fail",
        remote=True,
        steps=4,
        max_failures=1,
        param_space={"train_loop_config": {"lr": 0.1}},
        fail_at=2,
        marker=str(tmp_path / "died"),
    ).fit()
    assert len(results) == 1 and not results.errors, results.errors
    assert os.path.exists(tmp_path / "died")
    for result in results:
        names = sorted(n for n in os.listdir(result.path) if n.startswith("model-"))
        assert names == ["model-000", "model-001", "model-002", "model-003"]
        for name in names:  # each folder holds its own step
            state = torch.load(os.path.join(result.path, name, "model.pt"))
            assert state["step"] == int(name[-3:])
        steps = list(result.metrics_dataframe["step"])
        assert steps[-1] == 3 and 2 in steps
    _assert_no_workers_left(results)


@pytest.mark.quick
def test_torch_trainer_is_rays_with_the_guarantees_and_its_signature():
    import inspect

    from ray.train.torch import TorchTrainer as RayTorchTrainer

    assert issubclass(ray_tt_ext.TorchTrainer, RayTorchTrainer)
    assert issubclass(ray_tt_ext.TorchTrainer, ray_tt_ext.BaseTrainer)
    params = inspect.signature(ray_tt_ext.TorchTrainer.__init__).parameters
    assert list(params)[:3] == ["self", "train_loop_per_worker", "train_loop_config"]
    assert params["remote_executor"].default is False
    trainer = ray_tt_ext.TorchTrainer(ddp_loop, train_loop_config={"lr": 0.1})
    assert trainer._param_dict["train_loop_per_worker"] is ddp_loop  # recorded by name
    with pytest.raises(TypeError, match="remote_executor must be True or False"):
        ray_tt_ext.TorchTrainer(ddp_loop, remote_executor="yes")


@pytest.mark.quick
@pytest.mark.parametrize(
    "name, module, package",
    [
        ("TorchTrainer", "ray.train.torch", "torch"),
        ("XGBoostTrainer", "ray.train.xgboost", "xgboost"),
        ("LightGBMTrainer", "ray.train.lightgbm", "lightgbm"),
    ],
)
def test_framework_trainers_take_rays_constructor_arguments_plus_remote_executor(
    name, module, package
):
    """The guide: their constructors are Ray's (same parameters, same defaults),
    plus ``remote_executor: bool = False``, keyword-only (Ray's
    ``BaseTrainer.__new__`` records arguments by this signature)."""
    import importlib
    import inspect

    pytest.importorskip(package)
    rays = getattr(importlib.import_module(module), name)
    ours = getattr(ray_tt_ext, name)
    theirs = inspect.signature(rays.__init__).parameters
    params = dict(inspect.signature(ours.__init__).parameters)
    flag = params.pop("remote_executor")
    assert (flag.kind, flag.default) == (inspect.Parameter.KEYWORD_ONLY, False)

    def described(parameters):
        return [(p.name, p.kind, p.default) for p in parameters.values()]

    assert described(params) == described(theirs)
    assert issubclass(ours, rays) and issubclass(ours, ray_tt_ext.BaseTrainer)


def test_import_ray_tt_ext_never_imports_torch_and_a_missing_framework_says_what_to_install():
    import subprocess
    import sys

    script = (
        "import sys, ray_tt_ext\n"
        "assert not {'torch', 'xgboost', 'lightgbm'} & set(sys.modules)\n"
        "for name in ('TorchTrainer', 'XGBoostTrainer', 'LightGBMTrainer'):\n"
        "    package = name[:-7].lower()\n"
        "    sys.modules[package] = None  # as if not installed (this one alone)\n"
        "    try:\n"
        "        getattr(ray_tt_ext, name)\n"
        "    except ImportError as e:\n"
        "        print('ERROR', e)\n"
        "    del sys.modules[package]\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    for package in ("torch", "xgboost", "lightgbm"):
        name = {"torch": "Torch", "xgboost": "XGBoost", "lightgbm": "LightGBM"}[package]
        assert f"ray_tt_ext.{name}Trainer needs {package}" in out.stdout, out.stdout
        assert f"pip install 'ray-tt-ext[{package}]'" in out.stdout
