"""The release runner says where a scenario stood when its time budget ran out.

No Ray starts here: the scenario below sleeps past its budget without one.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.quick  # unit tests: scripts/test --quick runs them

ROOT = Path(__file__).resolve().parent.parent

STUCK_SCENARIO = f"""
import sys, time
sys.path.insert(0, {str(ROOT / "release_tests")!r})
from common import main

def run(ctx):
    ckpt = ctx.out_dir / (ctx.name + "_ray_results") / "exp" / "trial" / "checkpoint_000000"
    ckpt.mkdir(parents=True)
    time.sleep(60)  # stuck, as a run waiting on a placement group that never comes
    return {{}}

if __name__ == "__main__":
    raise SystemExit(main(run))
"""


def _runner():
    spec = importlib.util.spec_from_file_location(
        "run_release_tests", ROOT / "scripts" / "run_release_tests.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_scenario_over_its_budget_leaves_its_diagnosis(tmp_path, capfd):
    runner = _runner()
    script = tmp_path / "stuck.py"
    script.write_text(STUCK_SCENARIO)
    out = tmp_path / "out"
    out.mkdir()
    scenario = {
        "name": "stuck",
        "script": str(script),
        "cluster": "local",
        "budget_s": 99,
        "smoke_budget_s": 6,
    }
    record = runner.run_one(scenario, argparse.Namespace(smoke=True, address=None), out)

    assert not record["passed"]
    assert record["error"] == "over its time budget of 6 s"
    # Reported at max(6 - 20, 6 / 2) = 3 s: Ray not connected, the checkpoint folder.
    assert record["diagnosis"][0] == "stuck after 3 s:"
    assert "Ray: not connected" in record["diagnosis"]
    assert "1 checkpoint folders: ['exp/trial/checkpoint_000000']" in record["diagnosis"]
    assert json.loads((out / "stuck.json").read_text())["diagnosis"] == record["diagnosis"]
    # The driver's thread stacks went to its log (the runner's output here).
    assert re.search(r'stuck\.py", line \d+ in run\n', capfd.readouterr().err)


def test_a_scenario_within_its_budget_leaves_no_diagnosis(tmp_path):
    runner = _runner()
    script = tmp_path / "quick.py"
    script.write_text(
        STUCK_SCENARIO.replace("time.sleep(60)", "pass").replace("{}", "{'ok': 1}")
    )
    out = tmp_path / "out"
    out.mkdir()
    scenario = {
        "name": "quick",
        "script": str(script),
        "cluster": "local",
        "budget_s": 99,
        "smoke_budget_s": 60,
    }
    record = runner.run_one(scenario, argparse.Namespace(smoke=True, address=None), out)

    assert record["passed"], record
    assert "diagnosis" not in record
    assert not (out / "quick.diagnosis.txt").exists()
