"""The release runner says where a scenario stood when its time budget ran out.

The runner's tests start no Ray: their scenario sleeps past its budget
without one. The report's Ray part (``rtt_testing.what_holds_resources``) is
tested on the session's Ray.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
from pathlib import Path

import pytest

from rtt_testing import what_holds_resources

pytestmark = pytest.mark.quick  # unit tests: scripts/test --quick runs them

ROOT = Path(__file__).resolve().parent.parent

SCENARIO = f"""
import sys, time
sys.path.insert(0, {str(ROOT / "release_tests")!r})
from common import main

def run(ctx):
    trial = ctx.out_dir / (ctx.name + "_ray_results") / "exp" / "trial_0"
    (trial / "ck-00000-step0").mkdir(parents=True)
    (trial / "ck-00001-step1").mkdir()
    time.sleep(SLEEP_S)  # stuck, as a run waiting on a placement group that never comes
    return {{"steps": 2}}

if __name__ == "__main__":
    raise SystemExit(main(run))
"""


def _run(tmp_path: Path, name: str, sleep_s: float, budget_s: int, args=()) -> dict:
    spec = importlib.util.spec_from_file_location(
        "run_release_tests", ROOT / "scripts" / "run_release_tests.py"
    )
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    script = tmp_path / "scenario.py"
    script.write_text(SCENARIO.replace("SLEEP_S", str(sleep_s)))
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    (out / f"{name}.diagnosis.txt").write_text("a diagnosis left by an earlier run\n")
    scenario = {
        "name": name,
        "script": str(script),
        "args": list(args),
        "cluster": "local",
        "budget_s": 999,
        "smoke_budget_s": budget_s,
    }
    return runner.run_one(scenario, argparse.Namespace(smoke=True, address=None), out)


def test_a_scenario_over_its_budget_leaves_its_diagnosis(tmp_path, capfd):
    record = _run(tmp_path, "scenario", sleep_s=60, budget_s=10)

    assert not record["passed"]
    assert record["error"] == "over its time budget of 10 s"
    assert "diagnosis" in record, record
    diagnosis = record["diagnosis"]
    # At max(10 - 20, 10 / 2) = 5 s: the trial folders (no Ray needed), then Ray.
    assert re.fullmatch(r"5 s into its 10 s budget, at \d\d:\d\d:\d\d:", diagnosis[0])
    assert diagnosis[1:] == [
        "exp/trial_0: 2 folders, last ck-00001-step1",
        "Ray: not imported",
    ]
    out = tmp_path / "out"
    assert json.loads((out / "scenario.json").read_text())["diagnosis"] == diagnosis
    # The driver's thread stacks went to its log (here, the runner's stderr).
    assert re.search(r'scenario\.py", line \d+ in run\n', capfd.readouterr().err)


def test_the_diagnosis_of_a_scenario_on_s3_is_found_under_its_name(tmp_path):
    # checkpoint_soak --storage s3 runs as checkpoint_soak_s3 (no S3 started here).
    record = _run(tmp_path, "scenario_s3", sleep_s=60, budget_s=8, args=["--storage", "s3"])

    assert "diagnosis" in record, record
    assert record["diagnosis"][1:] == ["results on s3: not listed", "Ray: not imported"]


def test_a_scenario_within_its_budget_leaves_no_diagnosis(tmp_path):
    record = _run(tmp_path, "scenario", sleep_s=0, budget_s=60)

    assert record["passed"], record
    assert record["metrics"] == {"steps": 2}
    assert "diagnosis" not in record
    # An earlier run's diagnosis is not kept beside this run's result.
    assert not (tmp_path / "out" / "scenario.diagnosis.txt").exists()


def test_what_holds_resources_names_nodes_and_where_placement_groups_sit(
    ray_start_4_cpus,
):
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    pg = placement_group([{"CPU": 1}])
    ray.get(pg.ready())
    try:
        report = what_holds_resources().splitlines()
    finally:
        remove_placement_group(pg)
    node = ray.get_runtime_context().get_node_id()[:8]
    assert any(re.fullmatch(rf"node {node} alive \{{.*'CPU': 4\.0.*\}}", x) for x in report)
    assert (
        f"placement group {pg.id.hex()} CREATED: [{{'CPU': 1.0}}] on nodes ['{node}']"
        in (report)
    ), report
