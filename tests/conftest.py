"""Real Ray fixtures for the regression suite, named by the resources they give.

Everything stays on loopback (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` makes Ray
pick 127.0.0.1; ``ray start`` gets ``--node-ip-address=127.0.0.1``), token
authentication stays on, and every fixture stops exactly what it started:
``ray.shutdown()``, ``Cluster.shutdown()``, or the process group of the
``ray start --block`` it launched. Never ``ray stop``.
"""

from __future__ import annotations

import os
import sys
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
REPO_ROOT = TESTS_DIR.parent
# The test support package (rtt_testing, beside ray_tt_ext, not in its wheel).
sys.path.insert(0, str(REPO_ROOT))
# Ray workers of a local cluster inherit this environment: let them import the
# test helpers (trainers, loops, rtt_testing) by module name, as the driver does.
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in [str(TESTS_DIR), str(REPO_ROOT), os.environ.get("PYTHONPATH", "")] if p
)

from rtt_testing import EITHER_SESSION_MODULES  # noqa: E402

#: The Train stack this pytest session tests. Train V1 and Train V2 cannot share
#: a process (Ray reads RAY_TRAIN_V2_ENABLED when ray.train is imported), so
#: tests/v2 runs in a session of its own: scripts/pytest_sessions.py runs both.
#: The modules of tests/ that run fresh interpreters (EITHER_SESSION_MODULES)
#: can run in either; scripts/pytest_sessions.py puts them in the Train V2 one.
TRAIN_STACK = os.environ.get("RAY_TT_EXT_TEST_TRAIN", "v1")
if TRAIN_STACK == "v2":
    collect_ignore = [
        p.name for p in TESTS_DIR.glob("test_*.py") if p.name not in EITHER_SESSION_MODULES
    ]
else:
    collect_ignore = ["v2"]

import ray  # noqa: E402

import ray_tt_ext  # noqa: E402  (changes nothing by itself)

if TRAIN_STACK != "v2":
    ray_tt_ext.Tuner  # noqa: B018  the first name taken turns Train V1 on, before any Ray starts
from rtt_testing import (  # noqa: E402
    S3_ENV,
    HeadNode,
    MotoServer,
    assert_every_cpu_free,
    connect_client,
    init_local_ray,
)

# S3 credentials for the moto server, set before any Ray starts so that Ray's
# workers inherit them.
for _key, _value in S3_ENV.items():
    os.environ.setdefault(_key, _value)


@pytest.fixture(scope="session")
def _session_ray_4_cpus():
    if ray.is_initialized():
        ray.shutdown()
    init_local_ray(4)
    yield
    ray.shutdown()


def _ensure_session_ray() -> None:
    if not ray.is_initialized():  # a test shut it down: start it again
        init_local_ray(4)


@pytest.fixture
def ray_start_4_cpus(_session_ray_4_cpus):
    """A local 4-CPU Ray, shared by the session (started once). In the Train V2
    session, a test leaves every CPU of it free (within 20 s): what a trial
    holds is given back when its Tuner ends."""
    _ensure_session_ray()
    yield
    assert not ray.util.client.ray.is_connected()
    if TRAIN_STACK == "v2" and ray.is_initialized():
        try:
            assert_every_cpu_free()
        except Exception:  # the check, or the report of what holds them
            # This test errors; the tests after it get a new Ray (the next one
            # starts it), not a Ray short of a CPU that every one of them would
            # fail on: one leak, one failure.
            ray.shutdown()
            raise


@pytest.fixture(scope="module")
def ray_4_cpus_for_module(_session_ray_4_cpus):
    """The session's 4-CPU Ray, for a module-scoped fixture (a fit shared by tests)."""
    _ensure_session_ray()


@pytest.fixture
def shutdown_only():
    """No Ray at start; whatever the test started is shut down after."""
    if ray.is_initialized():
        ray.shutdown()
    yield
    if ray.is_initialized():
        ray.shutdown()


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
    ctx = connect_client(ray_head_node.client_address)
    assert ray.util.client.ray.is_connected()
    yield ray_head_node
    ctx.disconnect()


@pytest.fixture(scope="module")
def s3_server():
    """moto's S3 server on loopback with a bucket ``bucket``; stops only its own process."""
    pytest.importorskip("moto")
    server = MotoServer()
    yield server
    server.stop()


@pytest.fixture
def storage_path(tmp_path) -> str:
    path = tmp_path / "results"
    path.mkdir()
    return str(path)


def pytest_report_header(config):
    """Say which Train session this is, and how to run the other one."""
    if TRAIN_STACK == "v2":
        return [
            "ray_tt_ext: the Train V2 session (tests/v2, RAY_TRAIN_V2_ENABLED unset); "
            "tests/ (Train V1) runs in a session of its own: scripts/test runs both, "
            "and runs the fresh-interpreter modules of tests/ here "
            f"({', '.join(EITHER_SESSION_MODULES)})"
        ]
    return [
        "ray_tt_ext: the Train V1 session (tests/); tests/v2 (Train V2) runs in a "
        "pytest session of its own and is not collected here: scripts/test runs both, "
        "or RAY_TT_EXT_TEST_TRAIN=v2 python -m pytest tests/v2 runs it alone",
        "ray_tt_ext: tiers: `-m quick` (unit and single-fit tests, scripts/test --quick); "
        "the rest are whole runs (docs/testing.md says which are slow and why); "
        "`-m extended` marks what scripts/test (CI) leaves out and --all runs",
    ]


def pytest_collection_modifyitems(config, items):
    """Run the tests that stop the session's Ray late, and the Ray Client tests last.

    A ``shutdown_only`` test stops the session's 4-CPU Ray, which the next test
    then starts again: they run after every test that shares it. After a Ray
    Client session, starting a local Ray in the same process segfaults on some
    Ray releases (seen on 2.44); no other test needs to run after them.
    """

    def order(item) -> int:
        if item.get_closest_marker("client") is not None:
            return 2
        return 1 if "shutdown_only" in getattr(item, "fixturenames", ()) else 0

    items.sort(key=order)
