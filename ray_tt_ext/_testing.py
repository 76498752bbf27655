"""Helpers for ray_tt_ext's own tests and release scenarios (not public API).

:class:`HeadNode` starts ``ray start --head --block`` on loopback with a Ray
Client server and token authentication, and stops exactly what it started.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def init_local_ray(num_cpus: int, **kwargs):
    """``ray.init`` of a new local Ray on loopback, never a ``ray start`` cluster
    that happens to run on this machine (a bare ``ray.init()`` joins that one)."""
    import ray

    return ray.init(
        address="local",
        num_cpus=num_cpus,
        include_dashboard=False,
        _node_ip_address=LOOPBACK,
        **kwargs,
    )


class HeadNode:
    """A ``ray start --head --block`` process group on loopback.

    The cluster starts with Ray's defaults (Train V2 on from Ray 2.51), so
    ray_tt_ext must bring Train V1 to its own processes there by itself. Its
    temp dir is a short path under /tmp (Ray's socket paths must stay short).
    """

    def __init__(self, num_cpus: int = 4):
        self.temp_dir = tempfile.mkdtemp(prefix="rtt_", dir="/tmp")
        self.gcs_port = free_port()
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
                f"--port={self.gcs_port}",
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
        self._wait_ready()

    @property
    def client_address(self) -> str:
        return f"ray://{LOOPBACK}:{self.client_port}"

    @property
    def gcs_address(self) -> str:
        return f"{LOOPBACK}:{self.gcs_port}"

    def _wait_ready(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"ray start exited with {self.proc.returncode}:\n"
                    + Path(self.temp_dir, "ray_start.log").read_text()
                )
            with socket.socket() as s:
                if s.connect_ex((LOOPBACK, self.client_port)) == 0:
                    return
            time.sleep(0.5)
        self.stop()
        raise TimeoutError("ray start --head did not open its client port in time")

    def stop(self) -> None:
        """SIGTERM to `ray start --block` (it drains the node and stops its
        children), then SIGKILL whatever is left in its own process group."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # only our own process group
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)
        self.log.close()
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def connect_client(address: str, attempts: int = 3):
    """``ray.init(address)`` for ``ray://``, retrying only Ray Client's server start.

    Ray's client proxier sometimes loses the per-connection server it just
    forked ("Starting Ray client server failed", a zombie process) when the
    machine is busy; a new connection gets a new server. Any other error, or
    the same one ``attempts`` times, is raised.
    """
    import ray

    for attempt in range(1, attempts + 1):
        try:
            return ray.init(address)
        except ConnectionAbortedError as e:
            if "Starting Ray client server failed" not in str(e) or attempt == attempts:
                raise
            time.sleep(2.0 * attempt)
    raise AssertionError("unreachable")
