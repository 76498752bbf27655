"""Train V1 enablement, import order and explicit V2, each in a fresh interpreter."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest
from helpers import train_v2_is_rays_default  # noqa: E402

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


def test_import_sets_v1_when_unset_and_a_new_users_script_just_works(tmp_path):
    proc = run_script(
        f"""
        import os
        import ray_tt_ext
        print("ENV", os.environ["RAY_TRAIN_V2_ENABLED"])
        import ray, ray.train
        from ray_tt_ext import Tuner, DataParallelTrainer

        def loop(config):
            ray.train.report({{"ok": 1}})

        ray.init(address="local", num_cpus=2, include_dashboard=False)
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
    assert "ENV 0" in proc.stdout
    assert "ERROR None" in proc.stdout
    assert "OK 1" in proc.stdout


def test_explicit_zero_is_kept():
    proc = run_script(
        "import os, ray_tt_ext; print(os.environ['RAY_TRAIN_V2_ENABLED'])",
        {"RAY_TRAIN_V2_ENABLED": "0"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("0")


@needs_train_v2
@pytest.mark.parametrize("first_call", ["trainer", "tuner"])
def test_explicit_v2_fails_fast_at_first_call_with_the_fix(first_call):
    call = {
        "trainer": "ray_tt_ext.DataParallelTrainer(lambda: None)",
        "tuner": "ray_tt_ext.Tuner(lambda config: None)",
    }[first_call]
    proc = run_script(
        f"""
        import os
        import ray_tt_ext  # importing works; it never overrides an explicit value
        assert os.environ["RAY_TRAIN_V2_ENABLED"] == "1"
        try:
            {call}
        except ray_tt_ext._compat.TrainV2EnabledError as e:
            print("MESSAGE", e)
        else:
            print("NO ERROR")
        """,
        {"RAY_TRAIN_V2_ENABLED": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "MESSAGE" in proc.stdout, proc.stdout
    assert "RAY_TRAIN_V2_ENABLED=0" in proc.stdout  # the fix, by name
    assert "found `ray.train.RunConfig`" not in proc.stdout + proc.stderr


@needs_v2_default
def test_ray_train_imported_first_gives_our_message_not_rays():
    proc = run_script(
        """
        from ray.train import RunConfig, ScalingConfig  # V2 classes: env still unset
        import ray_tt_ext
        try:
            ray_tt_ext.DataParallelTrainer(
                lambda: None, run_config=RunConfig(name="x"),
                scaling_config=ScalingConfig(num_workers=1),
            )
        except ray_tt_ext._compat.TrainV2EnabledError as e:
            print("MESSAGE", e)
        """,
        {},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "MESSAGE" in proc.stdout
    assert "RAY_TRAIN_V2_ENABLED" in proc.stdout
    assert "import ray_tt_ext" in proc.stdout
    assert "should be an instance of" not in proc.stdout + proc.stderr


def test_ray_train_imported_first_still_works_with_v1_objects(tmp_path):
    """`ray.train` imported before us: V1 objects (from `ray.air`) still work."""
    proc = run_script(
        f"""
        import ray.train  # binds V2 names; env still unset
        import ray_tt_ext, ray, ray.tune
        from ray.air.config import RunConfig, ScalingConfig

        def loop(config):
            import ray.train
            ray.train.report({{"ok": 1}})

        ray.init(address="local", num_cpus=2, include_dashboard=False)
        result = ray_tt_ext.Tuner(
            ray_tt_ext.DataParallelTrainer(
                loop, scaling_config=ScalingConfig(num_workers=1)),
            run_config=RunConfig(storage_path={str(tmp_path)!r}, name="late"),
        ).fit()[0]
        print("ERROR", result.error)
        """,
        {},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ERROR None" in proc.stdout
