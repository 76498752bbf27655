"""What every release scenario shares: arguments, Ray startup, the JSON result.

A scenario is ``def run(ctx: Context) -> dict`` (the metrics); it raises (or
fails an ``assert``) when the guarantee does not hold. ``main(run)`` parses
``--smoke --address --out``, times the run and writes ``<out>/<name>.json`` with
``name``, ``passed``, ``duration_s``, ``metrics`` and, on failure, ``error``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
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
# Scenario modules must be importable by Ray workers.
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in [str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH", "")] if p
)

LOOPBACK = "127.0.0.1"
MiB = 1024 * 1024
GiB = 1024 * MiB


@dataclass
class Context:
    name: str
    smoke: bool
    address: Optional[str]
    out_dir: Path

    def progress(self, message: str) -> None:
        print(f"[{self.name}] {time.strftime('%H:%M:%S')} {message}", flush=True)

    def init_ray(self, num_cpus: int = 4) -> None:
        """Connect to ``--address``, or start a local Ray on loopback."""
        import ray

        if self.address:
            ray.init(address=self.address)
        else:
            ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)

    @property
    def storage_path(self) -> str:
        path = self.out_dir / f"{self.name}_ray_results"
        path.mkdir(parents=True, exist_ok=True)
        return str(path.resolve())


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


class HeadNode:
    """A ``ray start --head --block`` on loopback; ``stop()`` ends only its processes."""

    def __init__(self, num_cpus: int = 4):
        self.temp_dir = tempfile.mkdtemp(prefix="rtt_rel_", dir="/tmp")
        self.client_port = free_port()
        env = {k: v for k, v in os.environ.items() if k != "RAY_TRAIN_V2_ENABLED"}
        env.update({"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "token"})
        self.log = open(Path(self.temp_dir, "ray_start.log"), "w")
        self.proc = subprocess.Popen(
            [
                str(Path(sys.executable).with_name("ray")),
                "start",
                "--head",
                "--block",
                f"--node-ip-address={LOOPBACK}",
                f"--port={free_port()}",
                f"--ray-client-server-port={self.client_port}",
                f"--num-cpus={num_cpus}",
                "--include-dashboard=false",
                f"--temp-dir={self.temp_dir}",
                "--disable-usage-stats",
            ],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(Path(self.temp_dir, "ray_start.log").read_text())
            with socket.socket() as s:
                if s.connect_ex((LOOPBACK, self.client_port)) == 0:
                    return
            time.sleep(0.5)
        self.stop()
        raise TimeoutError("ray start --head did not open its client port")

    @property
    def client_address(self) -> str:
        return f"ray://{LOOPBACK}:{self.client_port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)
        self.log.close()


def main(run: Callable[[Context], dict[str, Any]]) -> int:
    name = Path(sys.argv[0]).stem
    parser = argparse.ArgumentParser(prog=name)
    parser.add_argument("--smoke", action="store_true", help="seconds, small sizes")
    parser.add_argument("--address", default=None, help="an existing Ray cluster")
    parser.add_argument("--out", default="release_results", help="folder for the JSON")
    args = parser.parse_args()
    ctx = Context(name=name, smoke=args.smoke, address=args.address, out_dir=Path(args.out))
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    record: dict[str, Any] = {"name": name, "smoke": args.smoke}
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
    record["duration_s"] = round(time.monotonic() - started, 2)
    path = ctx.out_dir / f"{name}.json"
    path.write_text(json.dumps(record, indent=2, default=str))
    ctx.progress(f"{'PASSED' if record['passed'] else 'FAILED'} -> {path}")
    return 0 if record["passed"] else 1
