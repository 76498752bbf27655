#!/usr/bin/env python
"""Run the release scenarios in release_tests/manifest.toml.

    scripts/run_release_tests.py [--smoke] [--only NAME ...] [--address ADDR] [--out DIR]

Each scenario runs as its own process (its own Ray; ``--address`` makes the
``local`` and ``client`` scenarios use an existing cluster instead) within its
time budget, streams its progress, and writes ``<out>/<name>.json``. A summary
table follows; the exit status is non-zero if any scenario failed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
RELEASE = ROOT / "release_tests"


def load_manifest() -> list:
    with open(RELEASE / "manifest.toml", "rb") as f:
        scenarios = tomllib.load(f)["scenario"]
    for s in scenarios:
        missing = {"name", "script", "cluster", "budget_s", "smoke_budget_s"} - set(s)
        if missing:
            raise SystemExit(f"manifest entry {s.get('name', s)} lacks {sorted(missing)}")
    return scenarios


def run_one(scenario: dict, args: argparse.Namespace, out: Path) -> dict:
    budget = scenario["smoke_budget_s"] if args.smoke else scenario["budget_s"]
    cmd = [sys.executable, str(RELEASE / scenario["script"]), "--out", str(out)]
    if args.smoke:
        cmd.append("--smoke")
    if args.address and scenario["cluster"] != "cluster3":
        cmd += ["--address", args.address]
    print(
        f"\n=== {scenario['name']} ({scenario['cluster']}, budget {budget} s)", flush=True
    )
    result_file = out / f"{scenario['name']}.json"
    result_file.unlink(missing_ok=True)
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=RELEASE, start_new_session=True, env=os.environ.copy())

    def failed(error: str) -> dict:
        record = {
            "name": scenario["name"],
            "passed": False,
            "duration_s": round(time.monotonic() - started, 2),
            "metrics": {},
            "error": error,
        }
        result_file.write_text(json.dumps(record, indent=2))
        return record

    try:
        proc.wait(timeout=budget)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the scenario's own process group only
        proc.wait()
        return failed(f"over its time budget of {budget} s")
    if not result_file.exists():
        return failed(f"exited {proc.returncode} without writing {result_file.name}")
    record = json.loads(result_file.read_text())
    if proc.returncode != 0:
        record["passed"] = False
    if record["passed"] and not record.get("metrics"):
        record["passed"] = False
        record["error"] = "no metrics recorded"
    return record


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--smoke", action="store_true", help="seconds per scenario, small sizes"
    )
    parser.add_argument("--only", nargs="*", help="scenario names to run")
    parser.add_argument("--address", help="an existing cluster (ray://... or host:port)")
    parser.add_argument(
        "--out", default="release_results", help="folder for the JSON files"
    )
    args = parser.parse_args(argv)
    scenarios = load_manifest()
    if args.only:
        unknown = set(args.only) - {s["name"] for s in scenarios}
        if unknown:
            parser.error(f"unknown scenario(s) {sorted(unknown)}")
        scenarios = [s for s in scenarios if s["name"] in args.only]
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    records = [run_one(s, args, out) for s in scenarios]
    print(f"\n{'scenario':24} {'result':7} {'seconds':>8}  metrics / error")
    for r in records:
        detail = r.get("error") or ", ".join(
            f"{k}={v}" for k, v in r["metrics"].items() if not isinstance(v, (list, dict))
        )
        print(
            f"{r['name']:24} {'PASS' if r['passed'] else 'FAIL':7} {r['duration_s']:8.1f}  "
            f"{detail[:120]}"
        )
    failed = [r["name"] for r in records if not r["passed"]]
    print(f"\n{len(records) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
