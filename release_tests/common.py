"""What every release scenario shares: arguments, Ray startup, the JSON result.

A scenario is ``def run(ctx: Context) -> dict`` (the metrics); it raises (or
fails an ``assert``) when the guarantee does not hold. ``main(run)`` parses
``--smoke --address --out --storage``, times the run and writes
``<out>/<name>.json`` with ``name``, ``passed``, ``duration_s``, ``metrics``
and, on failure, ``error``. With ``--diagnose-at T`` (the runner passes the
time 20 s before its budget ends), a run still going at T writes where it
stands to ``<out>/<name>.diagnosis.txt`` and its thread stacks to stderr.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
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
    _scratch: list = field(default_factory=list)

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
    def results_dir(self) -> Path:
        """The local folder of the scenario's results (not made here)."""
        return self.out_dir / f"{self.name}_ray_results"

    @property
    def storage_path(self) -> str:
        path = self.results_dir
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

    def scratch(self, prefix: str) -> str:
        """A new empty folder under /tmp for the scenario's own files (markers,
        a checkpoint to resume from), removed when the scenario ends."""
        path = tempfile.mkdtemp(prefix=prefix)
        self._scratch.append(path)
        return path

    def close(self) -> None:
        if self._s3 is not None:
            self._s3.stop()
            self._s3 = None
        while self._scratch:
            shutil.rmtree(self._scratch.pop(), ignore_errors=True)


#: How long a stuck run's report waits for Ray's answer (Ray's calls take no timeout).
CLUSTER_REPORT_TIMEOUT_S = 10.0


def cluster_report() -> list[str]:
    """What the connected Ray says now (``rtt_testing.what_holds_resources``)."""
    if "ray" not in sys.modules:
        return ["Ray: not imported"]
    import ray

    if not ray.is_initialized():
        return ["Ray: not connected"]
    from rtt_testing import what_holds_resources

    return what_holds_resources().splitlines()


def _results_report(ctx: Context) -> list[str]:
    """The local results' trial folders and what each holds (checkpoints, by
    whatever name the scenario gives them)."""
    if ctx.storage != "local":
        return [f"results on {ctx.storage}: not listed"]
    if not ctx.results_dir.exists():
        return ["no results folder yet"]
    lines = []
    trials = sorted(p for p in ctx.results_dir.glob("*/*") if p.is_dir())
    for trial in trials[:10]:
        folders = sorted(p.name for p in trial.iterdir() if p.is_dir())
        last = folders[-1] if folders else "-"
        lines.append(
            f"{trial.relative_to(ctx.results_dir)}: {len(folders)} folders, last {last}"
        )
    if len(trials) > 10:
        lines.append(f"... and {len(trials) - 10} trial folders more")
    return lines or ["no trial folder yet"]


#: How long after the watchdog's turn ``faulthandler``'s C thread writes the stacks
#: itself, in case the watchdog cannot run (seconds).
STACKS_FALLBACK_S = 2.0


def _watchdog(ctx: Context, delay_s: float, done: threading.Event) -> None:
    """After ``delay_s``, a run not done says where it stands in
    ``<out>/<name>.diagnosis.txt``: its results first (no Ray needed), then
    Ray's view, waited for at most :data:`CLUSTER_REPORT_TIMEOUT_S` (a stuck
    cluster may not answer). A thread of the scenario's driver. It writes the
    driver's thread stacks first, holding the interpreter (``faulthandler``
    walks each thread's frames; from its own C thread, as a running Python
    thread changes them, it crashed the driver with SIGSEGV once), and calls off
    :func:`main`'s C fallback, which fires only if this thread cannot run."""
    if done.wait(delay_s):
        return
    faulthandler.dump_traceback(all_threads=True)
    faulthandler.cancel_dump_traceback_later()
    path = ctx.out_dir / f"{ctx.name}.diagnosis.txt"
    lines = [f"at {time.strftime('%H:%M:%S')}:", *_results_report(ctx)]
    path.write_text("\n".join(lines) + "\n")
    report: list[str] = []

    def ask_ray() -> None:
        try:
            report.extend(cluster_report())
        except Exception as e:  # the report must not take the run down
            report.append(f"cluster report failed: {type(e).__name__}: {e}")

    asking = threading.Thread(target=ask_ray, daemon=True)
    asking.start()
    asking.join(CLUSTER_REPORT_TIMEOUT_S)
    if asking.is_alive():
        lines.append(f"Ray did not answer in {CLUSTER_REPORT_TIMEOUT_S:.0f} s")
    else:
        lines += report
    path.write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)


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
        "--diagnose-at",
        type=float,
        default=None,
        help="a time (seconds since the epoch): a run still going then reports "
        "where it stands and its thread stacks",
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
    watchdog = None
    if args.diagnose_at is not None:
        delay = max(args.diagnose_at - time.time(), 0.0)
        # The stacks from C if the watchdog cannot run (the interpreter held),
        # a moment after it would have written them itself.
        faulthandler.dump_traceback_later(delay + STACKS_FALLBACK_S)
        watchdog = threading.Thread(target=_watchdog, args=(ctx, delay, done), daemon=True)
        watchdog.start()
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
        if watchdog is not None:
            faulthandler.cancel_dump_traceback_later()
            watchdog.join(CLUSTER_REPORT_TIMEOUT_S + 5)  # a report under way ends first
        ctx.close()
    record["duration_s"] = round(time.monotonic() - started, 2)
    path = ctx.out_dir / f"{name}.json"
    path.write_text(json.dumps(record, indent=2, default=str))
    ctx.progress(f"{'PASSED' if record['passed'] else 'FAILED'} -> {path}")
    return 0 if record["passed"] else 1
