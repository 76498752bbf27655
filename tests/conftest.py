"""Real Ray fixtures for the regression suite, named by the resources they give.

Everything stays on loopback (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` makes Ray
pick 127.0.0.1; ``ray start`` gets ``--node-ip-address=127.0.0.1``), token
authentication stays on, and every fixture stops exactly what it started:
``ray.shutdown()``, ``Cluster.shutdown()``, or the process group of the
``ray start --block`` it launched. Never ``ray stop``.
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

import pytest

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
# Token authentication stays on; Ray reads the mode when it is imported, so a
# Ray Client connection made later in this process needs it set now.
os.environ.setdefault("RAY_AUTH_MODE", "token")
os.environ.setdefault("RAY_TRAIN_ENABLE_V2_MIGRATION_WARNINGS", "0")
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")

TESTS_DIR = Path(__file__).resolve().parent
LOOPBACK = "127.0.0.1"
# Ray workers of a local cluster inherit this environment: let them import the
# test helpers (trainers, loops) by module name, as the driver does.
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in [str(TESTS_DIR), os.environ.get("PYTHONPATH", "")] if p
)

import ray  # noqa: E402

import ray_tt_ext  # noqa: E402,F401  (sets RAY_TRAIN_V2_ENABLED=0 first)


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def short_tmpdir(prefix: str) -> str:
    """A short temp dir under /tmp: Ray's socket paths must stay short."""
    return tempfile.mkdtemp(prefix=prefix, dir="/tmp")


def _init_kwargs(num_cpus: int) -> dict:
    return dict(num_cpus=num_cpus, include_dashboard=False)


@pytest.fixture(scope="session")
def _session_ray_4_cpus():
    if ray.is_initialized():
        ray.shutdown()
    ray.init(**_init_kwargs(4))
    yield
    ray.shutdown()


@pytest.fixture
def ray_start_4_cpus(_session_ray_4_cpus):
    """A local 4-CPU Ray, shared by the session (started once)."""
    if not ray.is_initialized():  # a test shut it down: start it again
        ray.init(**_init_kwargs(4))
    yield
    assert not ray.util.client.ray.is_connected()


@pytest.fixture
def shutdown_only():
    """No Ray at start; whatever the test started is shut down after."""
    if ray.is_initialized():
        ray.shutdown()
    yield
    if ray.is_initialized():
        ray.shutdown()


@pytest.fixture
def ray_3_node_cluster():
    """A head and two worker nodes (2 CPUs each) with ray.cluster_utils.Cluster."""
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 2, "include_dashboard": False},
    )
    nodes = [cluster.add_node(num_cpus=2) for _ in range(2)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    yield cluster, nodes
    ray.shutdown()
    cluster.shutdown()


class HeadNode:
    """A ``ray start --head --block`` process group this fixture started."""

    def __init__(self, num_cpus: int = 4):
        self.temp_dir = short_tmpdir("rtt_")
        self.gcs_port = free_port()
        self.client_port = free_port()
        # The cluster starts with Ray's defaults (Train V2 on): ray_tt_ext must
        # bring Train V1 to its own processes there by itself.
        self.env = {k: v for k, v in os.environ.items() if k != "RAY_TRAIN_V2_ENABLED"}
        self.env.update(
            {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "token"}
        )
        cmd = [
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
        ]
        self.log = open(Path(self.temp_dir, "ray_start.log"), "w")
        self.proc = subprocess.Popen(
            cmd,
            env=self.env,
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
        """Stop what we started: SIGTERM to `ray start --block`, which drains the
        node and stops its children; then SIGKILL whatever is left in its group."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # only our own process group
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)
        self.log.close()
        shutil.rmtree(self.temp_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def ray_head_node():
    """A `ray start --head` cluster on loopback with a Ray Client server."""
    if ray.is_initialized():
        ray.shutdown()
    head = HeadNode()
    yield head
    head.stop()


@pytest.fixture(scope="module")
def ray_client(ray_head_node):
    """This process connected to ``ray_head_node`` through ``ray://`` (token auth).

    One connection per module: Ray Client starts a server process per
    connection, and reconnecting in quick succession is flaky on older Rays.
    """
    if ray.is_initialized():
        ray.shutdown()
    assert os.environ["RAY_AUTH_MODE"] == "token"
    ctx = ray.init(ray_head_node.client_address)
    assert ray.util.client.ray.is_connected()
    yield ray_head_node
    ctx.disconnect()


@pytest.fixture
def storage_path(tmp_path) -> str:
    path = tmp_path / "results"
    path.mkdir()
    return str(path)


def pytest_collection_modifyitems(config, items):
    """Run the Ray Client tests last.

    After a Ray Client session, starting a local Ray in the same process
    segfaults on some Ray releases (seen on 2.44); no other test needs to run
    after them.
    """
    items.sort(key=lambda item: item.get_closest_marker("client") is not None)
