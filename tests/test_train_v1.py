"""Train V1 enablement, import order and explicit V2, each in a fresh interpreter.

The subject is the fresh interpreter's process state, not this one's: the module
imports no ray_tt_ext name and runs in either pytest session (``scripts/test``
runs it beside tests/v2: ``rtt_testing.EITHER_SESSION_MODULES``). The unit tests
that need this process's Train V1 are in ``test_train_v1_in_process.py``."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import textwrap

import pytest

from rtt_testing import train_v2_is_rays_default

V2_DEFAULT = train_v2_is_rays_default()
needs_train_v2 = pytest.mark.skipif(
    importlib.util.find_spec("ray.train.v2") is None,
    reason="this Ray has no Train V2 to switch on (Ray < 2.41)",
)
needs_v2_default = pytest.mark.skipif(
    not V2_DEFAULT, reason="this Ray does not turn Train V2 on by default"
)


def run_script(
    code: str, env_update: dict, timeout: float = 240
) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "RAY_TRAIN_V2_ENABLED"}
    env.update(env_update)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.extended
def test_first_name_sets_v1_when_unset_and_a_new_users_script_just_works(tmp_path):
    proc = run_script(
        f"""
        import os
        import ray_tt_ext
        print("IMPORT", os.environ.get("RAY_TRAIN_V2_ENABLED"))  # changes nothing
        import ray
        # Ray starts before the first ray_tt_ext name: its processes never saw
        # the variable; Tune carries it into the trial actors.
        ray.init(address="local", num_cpus=2, include_dashboard=False)
        from ray_tt_ext import Tuner, DataParallelTrainer
        print("ENV", os.environ["RAY_TRAIN_V2_ENABLED"])
        import ray.train

        def loop(config):
            ray.train.report({{"ok": 1}})

        trainer = DataParallelTrainer(
            loop, scaling_config=ray.train.ScalingConfig(num_workers=1),
            run_config=ray.train.RunConfig(storage_path={str(tmp_path)!r}, name="new_user"),
        )
        result = Tuner(trainer).fit()[0]
        print("ERROR", result.error)
        print("OK", result.metrics["ok"])
        """,
        {},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "IMPORT None" in proc.stdout
    assert "ENV 0" in proc.stdout
    assert "ERROR None" in proc.stdout
    assert "OK 1" in proc.stdout


def test_explicit_values_are_kept_and_neutral_names_change_nothing():
    code = """
        import os, sys
        import ray_tt_ext
        # import ray_tt_ext alone imports nothing of Ray (what lets ray_tt_ext.v2,
        # which runs this file, leave the variable to Ray).
        print("RAY_IMPORTED", sorted(m for m in sys.modules if m.split(".")[0] == "ray"))
        ray_tt_ext.PayloadTooLargeError, ray_tt_ext.inspect_payload, ray_tt_ext.CheckpointConfig
        print("NEUTRAL", os.environ.get("RAY_TRAIN_V2_ENABLED"))
        ray_tt_ext.Tuner
        print("V1NAME", os.environ.get("RAY_TRAIN_V2_ENABLED"))
        """
    proc = run_script(code, {"RAY_TRAIN_V2_ENABLED": "0"})
    assert proc.returncode == 0, proc.stderr
    assert "RAY_IMPORTED []" in proc.stdout
    assert "NEUTRAL 0\nV1NAME 0" in proc.stdout
    proc = run_script(code, {})
    assert proc.returncode == 0, proc.stderr
    assert "NEUTRAL None\nV1NAME 0" in proc.stdout


@needs_train_v2
def test_function_and_class_trainables_work_with_v2_on_and_a_v1_trainer_is_refused(
    tmp_path,
):
    """V2 forced on: function and class trainables work, a V1 trainer is refused."""
    proc = run_script(
        f"""
        import os, json, tempfile
        import ray_tt_ext  # importing works; it never overrides an explicit value
        assert os.environ["RAY_TRAIN_V2_ENABLED"] == "1"
        # (Ray's own V1 trainers cannot even be built with V2 on: Ray refuses them.)
        try:
            ray_tt_ext.DataParallelTrainer(lambda: None)
        except ray_tt_ext.TrainV2EnabledError as e:
            print("MESSAGE", e)
        else:
            print("NO ERROR")
        # A Tuner (and Tuner.restore) given a V1 trainer: refused before anything
        # else (the instance made without Ray's constructor, which refuses it).
        from ray.train.data_parallel_trainer import DataParallelTrainer as V1Trainer
        v1 = object.__new__(V1Trainer)
        for call in (lambda: ray_tt_ext.Tuner(v1),
                     lambda: ray_tt_ext.Tuner.restore("/nonexistent/exp", trainable=v1)):
            try:
                call()
            except ray_tt_ext.TrainV2EnabledError as e:
                print("TUNER REFUSED", "RAY_TRAIN_V2_ENABLED=0" in str(e))
            else:
                print("TUNER NOT REFUSED")
        from ray import train, tune  # the everyday header, V2 on
        import numpy as np
        import ray

        def fn(config):
            for step in range(2):
                with tempfile.TemporaryDirectory() as d:
                    open(os.path.join(d, "s"), "w").write(str(step))
                    tune.report({{"step": step}}, checkpoint=tune.Checkpoint.from_directory(d))

        class Cls(tune.Trainable):
            def step(self):
                return {{"v": self.iteration}}
            def save_checkpoint(self, d):
                open(os.path.join(d, "s"), "w").write("x")
            def load_checkpoint(self, d):
                pass

        ray.init(address="local", num_cpus=2, include_dashboard=False)
        ckpt = ray_tt_ext.CheckpointConfig(checkpoint_dir_name="c-{{index}}")
        r = ray_tt_ext.Tuner(fn, run_config=tune.RunConfig(
            storage_path={str(tmp_path)!r}, name="fn", checkpoint_config=ckpt)).fit()[0]
        print("FN", r.error, sorted(n for n in os.listdir(r.path) if n.startswith("c-")))
        r = ray_tt_ext.Tuner(Cls, run_config=tune.RunConfig(
            storage_path={str(tmp_path)!r}, name="cls", stop={{"training_iteration": 2}},
            checkpoint_config=ray_tt_ext.CheckpointConfig(
                checkpoint_frequency=1, checkpoint_dir_name="k-{{index}}"))).fit()[0]
        print("CLS", r.error, sorted(n for n in os.listdir(r.path) if n.startswith("k-")))
        weights = np.zeros(20_000_000)  # 160 MB in a closure: the guard still runs
        def big(config):
            tune.report({{"m": float(weights.mean())}})
        try:
            ray_tt_ext.Tuner(big)
        except ray_tt_ext.PayloadTooLargeError as e:
            print("GUARD", e.report.contributors[0].path)
        print("ENV", os.environ["RAY_TRAIN_V2_ENABLED"])
        """,
        {"RAY_TRAIN_V2_ENABLED": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    refusal = next(line for line in proc.stdout.splitlines() if line.startswith("MESSAGE"))
    assert "RAY_TRAIN_V2_ENABLED=0" in refusal  # the fix, by name
    assert "found `ray.train.RunConfig`" not in proc.stdout + proc.stderr
    assert proc.stdout.count("TUNER REFUSED True") == 2, proc.stdout
    assert "FN None ['c-0', 'c-1']" in proc.stdout, proc.stdout
    assert "CLS None ['k-0', 'k-1']" in proc.stdout, proc.stdout
    assert "GUARD big.<globals>.weights" in proc.stdout, proc.stdout
    assert "ENV 1" in proc.stdout  # left as the user set it


def test_ray_train_imported_first_then_v1_trainers_just_work(tmp_path):
    """`ray.train` (and the everyday header) imported before us, the variable unset:
    V1 objects from `ray.air` work, and so do Train V2's config classes, converted."""
    proc = run_script(
        f"""
        from ray import train, tune  # V2 config classes bound on Ray >= 2.51: env unset
        import ray.train
        import ray, ray_tt_ext
        from ray.air.config import RunConfig, ScalingConfig

        def loop(config):
            import ray.train
            ray.train.report({{"ok": 1}})

        ray.init(address="local", num_cpus=2, include_dashboard=False)
        if {V2_DEFAULT!r}:  # the everyday header's names are Train V2's
            trainer = ray_tt_ext.DataParallelTrainer(
                loop,
                scaling_config=train.ScalingConfig(num_workers=1),
                run_config=train.RunConfig(
                    storage_path={str(tmp_path)!r}, name="late",
                    checkpoint_config=train.CheckpointConfig(num_to_keep=2),
                    failure_config=train.FailureConfig(max_failures=1),
                ),
            )
            print("TYPES", type(trainer.scaling_config).__module__, type(trainer.run_config).__module__)
            print("KEEP", trainer.run_config.checkpoint_config.num_to_keep,
                  trainer.run_config.failure_config.max_failures)
            result = ray_tt_ext.Tuner(trainer, run_config=train.RunConfig(
                storage_path={str(tmp_path)!r}, name="late2")).fit()[0]
            print("ERROR", result.error)
            import dataclasses  # a V2-only field: label_selector from Ray 2.53, TPUs before
            only = (
                {{"label_selector": {{"a": "b"}}}}
                if "label_selector" in {{f.name for f in dataclasses.fields(train.ScalingConfig)}}
                else {{"use_tpu": True, "topology": "2x2", "accelerator_type": "TPU-V4"}}
            )
            try:
                ray_tt_ext.DataParallelTrainer(
                    loop, scaling_config=train.ScalingConfig(num_workers=1, **only))
            except ray_tt_ext.TrainV2EnabledError as e:
                print("V2ONLY", e)
        result = ray_tt_ext.Tuner(
            ray_tt_ext.DataParallelTrainer(
                loop, scaling_config=ScalingConfig(num_workers=1)),
            run_config=RunConfig(storage_path={str(tmp_path)!r}, name="air"),
        ).fit()[0]
        print("AIR ERROR", result.error)
        """,
        {},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "AIR ERROR None" in proc.stdout, proc.stdout
    if not V2_DEFAULT:
        return
    assert "\nERROR None" in proc.stdout, proc.stdout
    assert "TYPES ray.air.config" in proc.stdout, proc.stdout
    assert "KEEP 2 1" in proc.stdout, proc.stdout
    assert re.search(
        r"V2ONLY `ScalingConfig\((label_selector=\{'a': 'b'\}|use_tpu=True|topology='2x2')\)`",
        proc.stdout,
    ), proc.stdout
    assert "should be an instance of" not in proc.stdout + proc.stderr


@needs_v2_default
def test_framework_trainers_after_ray_bound_its_v2_trainer_names():
    pytest.importorskip("torch")
    proc = run_script(
        """
        from ray import train, tune
        import ray.train.torch  # bound to Train V2's TorchTrainer: the variable unset
        from ray.train.torch.torch_trainer import TorchTrainer as V1TorchTrainer
        import ray_tt_ext
        print("RAY", ray.train.torch.TorchTrainer.__module__)
        trainer = ray_tt_ext.TorchTrainer(
            lambda: None, scaling_config=train.ScalingConfig(num_workers=1)
        )
        print("OURS", isinstance(trainer, V1TorchTrainer), type(trainer.scaling_config).__module__)
        """,
        {},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "RAY ray.train.v2.torch.torch_trainer" in proc.stdout, proc.stdout
    assert "OURS True ray.air.config" in proc.stdout, proc.stdout
