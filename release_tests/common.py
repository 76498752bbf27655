"""What every release scenario shares: arguments, Ray startup, the JSON result.

A scenario is ``def run(ctx: Context) -> dict`` (the metrics); it raises (or
fails an ``assert``) when the guarantee does not hold. ``main(run)`` parses
``--smoke --address --out --storage``, times the run and writes
``<out>/<name>.json`` with ``name``, ``passed``, ``duration_s``, ``metrics``
and, on failure, ``error``. With ``--diagnose-after S`` (the runner passes its
budget less 20 s), a run still going after S seconds writes where it stands to
``<out>/<name>.diagnosis.txt`` and its thread stacks to stderr.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

# Loopback only, token authentication on: set before Ray is imported.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_AUTH_MODE", "token")
os.environ.setdefault("RAY_TRAIN_ENABLE_V2_MIGRATION_WARNINGS", "0")
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
_HERE = Path(__file__).resolve().parent
# The test support package (rtt_testing) lives at the repository root.
sys.path.insert(0, str(_HERE.parent))
# Scenario modules and rtt_testing must be importable by Ray workers.
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in [str(_HERE), str(_HERE.parent), os.environ.get("PYTHONPATH", "")] if p
)

from rtt_testing import S3_ENV  # noqa: E402

MiB = 1024 * 1024
GiB = 1024 * MiB


# S3 credentials for moto's server (--storage s3), before any Ray starts.
for _key, _value in S3_ENV.items():
    os.environ.setdefault(_key, _value)


@dataclass
class Context:
    name: str
    smoke: bool
    address: Optional[str]
    out_dir: Path
    storage: str = "local"
    _s3: Any = None

    def progress(self, message: str) -> None:
        print(f"[{self.name}] {time.strftime('%H:%M:%S')} {message}", flush=True)

    def init_ray(self, num_cpus: int = 4) -> None:
        """Connect to ``--address``, or start a local Ray on loopback."""
        import ray

        from rtt_testing import init_local_ray

        if self.address:
            ray.init(address=self.address)
        else:
            init_local_ray(num_cpus, log_to_driver=False)

    @property
    def storage_path(self) -> str:
        path = self.out_dir / f"{self.name}_ray_results"
        path.mkdir(parents=True, exist_ok=True)
        return str(path.resolve())

    def storage_uri(self, sub: str = "") -> str:
        """Where results go: a local path, or with ``--storage s3`` an ``s3://`` URI
        on moto's server (started on first use, stopped when the scenario ends)."""
        if self.storage == "local":
            return str(Path(self.storage_path, sub)) if sub else self.storage_path
        if self._s3 is None:
            from rtt_testing import MotoServer

            self._s3 = MotoServer()
            self.progress(f"moto S3 server on {self._s3.endpoint}")
        return self._s3.uri(f"{self.name}/{sub}".rstrip("/"))

    def close(self) -> None:
        if self._s3 is not None:
            self._s3.stop()
            self._s3 = None


def cluster_report() -> list[str]:
    """What the connected Ray says now: its nodes, free resources, placement groups.

    Public Ray calls only (no dashboard needed: a ``Cluster`` head runs none).
    """
    import ray

    if not ray.is_initialized():
        return ["Ray: not connected"]
    lines = []
    for node in ray.nodes():
        state = "alive" if node["Alive"] else "dead"
        resources = {k: v for k, v in node["Resources"].items() if "_group_" not in k}
        lines.append(f"node {node['NodeID'][:8]} {state} {resources}")
    free = {k: v for k, v in ray.available_resources().items() if "_group_" not in k}
    lines.append(f"free: {free}")
    for pg_id, pg in ray.util.placement_group_table().items():
        if pg["state"] == "REMOVED":
            continue
        nodes = sorted({n[:8] for n in pg.get("bundles_to_node_id", {}).values()})
        lines.append(
            f"placement group {pg_id[:8]} {pg['name'] or '-'} {pg['state']}: "
            f"{list(pg['bundles'].values())} on {nodes}"
        )
    return lines


def _watchdog(ctx: Context, after_s: float, done: threading.Event) -> None:
    """Past ``after_s`` (the runner's budget less a margin), say where the run is:
    ``<out>/<name>.diagnosis.txt`` (the runner prints it if the budget runs out)
    and the driver's thread stacks on stderr. A thread of the scenario's driver."""
    if done.wait(after_s):
        return
    lines = [f"{ctx.name} after {after_s:.0f} s:"]
    try:
        lines += cluster_report()
    except Exception as e:  # the report must not take the run down
        lines.append(f"cluster report failed: {type(e).__name__}: {e}")
    results = ctx.out_dir / f"{ctx.name}_ray_results"
    if results.exists():
        checkpoints = sorted(
            str(p.relative_to(results)) for p in results.glob("*/*/checkpoint_*")
        )
        lines.append(f"{len(checkpoints)} checkpoint folders: {checkpoints[-6:]}")
    (ctx.out_dir / f"{ctx.name}.diagnosis.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)
    faulthandler.dump_traceback(all_threads=True)


def main(run: Callable[[Context], dict[str, Any]]) -> int:
    name = Path(sys.argv[0]).stem
    parser = argparse.ArgumentParser(prog=name)
    parser.add_argument("--smoke", action="store_true", help="seconds, small sizes")
    parser.add_argument("--address", default=None, help="an existing Ray cluster")
    parser.add_argument("--out", default="release_results", help="folder for the JSON")
    parser.add_argument(
        "--storage", choices=["local", "s3"], default="local", help="where results go"
    )
    parser.add_argument(
        "--diagnose-after",
        type=float,
        default=None,
        help="seconds; a run still going then reports its cluster and stacks",
    )
    args = parser.parse_args()
    if args.storage != "local":
        name = f"{name}_{args.storage}"
    ctx = Context(
        name=name,
        smoke=args.smoke,
        address=args.address,
        out_dir=Path(args.out),
        storage=args.storage,
    )
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    record: dict[str, Any] = {"name": name, "smoke": args.smoke}
    done = threading.Event()
    (ctx.out_dir / f"{name}.diagnosis.txt").unlink(missing_ok=True)
    if args.diagnose_after is not None:
        threading.Thread(
            target=_watchdog, args=(ctx, args.diagnose_after, done), daemon=True
        ).start()
    try:
        metrics = run(ctx)
        record.update(passed=True, metrics=metrics)
    except BaseException as e:  # the JSON must say why, whatever it was
        record.update(
            passed=False,
            metrics={},
            error=f"{type(e).__name__}: {e}",
            traceback=traceback.format_exc(),
        )
        traceback.print_exc()
    finally:
        done.set()
        ctx.close()
    record["duration_s"] = round(time.monotonic() - started, 2)
    path = ctx.out_dir / f"{name}.json"
    path.write_text(json.dumps(record, indent=2, default=str))
    ctx.progress(f"{'PASSED' if record['passed'] else 'FAILED'} -> {path}")
    return 0 if record["passed"] else 1
