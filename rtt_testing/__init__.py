"""Test support for ray_tt_ext's tests, release scenarios and scripts (not shipped).

Lives beside the package, not in it: the wheel holds product code only
(``tests/test_layout.py`` checks its file list). ``tests/``, ``release_tests/``
and ``scripts/`` put the repository root on ``sys.path`` (and on Ray workers'
``PYTHONPATH``) to import it.

* :class:`HeadNode` starts ``ray start --head --block`` on loopback with a Ray
  Client server and token authentication, and stops exactly what it started;
  :class:`MotoServer` does the same for moto's S3 server.
* :func:`init_local_ray`, :func:`connect_client`, :class:`CountingFileSystem`.
* :func:`resume_step` (where a training loop goes on after a restored
  ``state.json`` checkpoint) and :func:`counting_conversions` (a trainer class
  that counts its ``as_trainable()`` calls): the blocks the tests, the release
  scenarios, the bench and the demo used to repeat.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional

LOOPBACK = "127.0.0.1"

try:
    from pyarrow.fs import FileSystemHandler as _FileSystemHandler
except ImportError:  # pragma: no cover - pyarrow comes with ray[tune]
    _FileSystemHandler = object  # type: ignore[misc,assignment]


#: Test modules in tests/ whose subject is a fresh interpreter (or Ray without
#: Train: the release runner's report of the session's Ray), so the Train
#: version of the pytest process running them does not matter: they import no
#: ray_tt_ext name that turns Train V1 on. ``scripts/test`` runs them in the
#: Train V2 session, beside tests/v2, which would otherwise end minutes before
#: the Train V1 session (docs/testing.md, "The two sessions side by side");
#: ``python -m pytest`` alone runs them in the Train V1 session.
EITHER_SESSION_MODULES = ("test_readme.py", "test_release_runner.py", "test_train_v1.py")


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


def _wait_for_port(
    proc: subprocess.Popen, port: int, log: Path, timeout: float, interval: float = 0.2
) -> None:
    """Wait until ``proc`` listens on ``port`` on loopback.

    Raises ``RuntimeError`` with ``log`` if the process exits first,
    ``TimeoutError`` after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"{' '.join(map(str, proc.args[:3]))} exited with {proc.returncode}:\n"
                + log.read_text()
            )
        with socket.socket() as s:
            if s.connect_ex((LOOPBACK, port)) == 0:
                return
        time.sleep(interval)
    raise TimeoutError(f"port {port} did not open in {timeout} s")


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
        try:
            _wait_for_port(
                self.proc, self.client_port, Path(self.temp_dir, "ray_start.log"), timeout
            )
        except TimeoutError:
            self.stop()
            raise TimeoutError(
                "ray start --head did not open its client port in time"
            ) from None

    #: What a crashed Ray process leaves in its log (Python's fault handler,
    #: Ray's C++ checks, a signal, an exception).
    CRASH_SIGNS = ("Fatal Python error", "Segmentation fault", "SIGSEGV", "SIGABRT",
                   "Check failed", "terminate called", "core dumped",
                   "Traceback (most recent call last)")  # fmt: skip

    def crash_report(self, lines: int = 30) -> str:
        """Where this cluster's process logs show a crash (``""``: none do): in
        each such log (those of dead workers too, which Ray moves to
        ``logs/old``), ``lines`` lines from a few before its first sign. What a
        scenario prints when it fails, before :meth:`stop` removes the logs."""
        logs = Path(self.temp_dir, "session_latest", "logs")
        found = []
        for path in sorted(logs.rglob("*")) if logs.is_dir() else []:
            if not path.is_file():
                continue
            try:
                text = path.read_text(errors="replace").splitlines()
            except OSError:
                continue
            first = next(
                (
                    i
                    for i, line in enumerate(text)
                    if any(s in line for s in self.CRASH_SIGNS)
                ),
                None,
            )
            if first is not None:
                start = max(0, first - 5)
                excerpt = "\n".join(text[start : start + lines])
                name = path.relative_to(logs)
                found.append(f"--- {name}, lines {start + 1}-{start + lines}\n{excerpt}")
        return "\n".join(found)

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


class MotoServer:
    """moto's S3 server (``moto[server]``) on loopback, as Ray's own CI uses.

    Started on a free port in a process group of its own; :meth:`stop` stops
    that process only. Credentials are moto's test ones; set them in the
    environment before Ray starts (:data:`S3_ENV`) so Ray's workers have them.
    """

    def __init__(self, bucket: str = "bucket"):
        self.port = free_port()
        self.bucket = bucket
        self.log = tempfile.NamedTemporaryFile(prefix="moto_", suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", LOOPBACK, "-p", str(self.port)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **S3_ENV},
        )
        self._wait_ready()
        self.filesystem(allow_bucket_creation=True).create_dir(bucket)

    @property
    def endpoint(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def filesystem(self, **kwargs: Any):
        """A pyarrow ``S3FileSystem`` on this server."""
        import pyarrow.fs

        return pyarrow.fs.S3FileSystem(
            **kwargs,
            endpoint_override=self.endpoint,
            scheme="http",
            access_key=S3_ENV["AWS_ACCESS_KEY_ID"],
            secret_key=S3_ENV["AWS_SECRET_ACCESS_KEY"],
            region=S3_ENV["AWS_DEFAULT_REGION"],
        )

    def uri(self, path: str) -> str:
        """``s3://bucket/path?endpoint_override=...&scheme=http`` (pyarrow's URI form)."""
        return (
            f"s3://{self.bucket}/{path}?endpoint_override={self.endpoint}&scheme=http"
            f"&region={S3_ENV['AWS_DEFAULT_REGION']}"
        )

    def _wait_ready(self, timeout: float = 60.0) -> None:
        try:
            _wait_for_port(self.proc, self.port, Path(self.log.name), timeout)
        except TimeoutError:
            self.stop()
            raise TimeoutError("moto.server did not open its port in time") from None

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)  # only its own process group
            self.proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=10)
        self.log.close()
        os.unlink(self.log.name)


#: moto's test credentials; Ray workers need them in their environment.
S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


class CountingFileSystem(_FileSystemHandler):
    """Wraps a pyarrow filesystem and counts the requests made through it.

    Use as ``pyarrow.fs.PyFileSystem(CountingFileSystem(fs))``. ``counts``
    maps an operation ("list", "info", "read", "write", ...) to its count;
    ``fail_listing`` makes every folder listing raise (a storage error);
    ``slow_writes``: ``(name, seconds)``, each write of a file named ``name``
    takes that long first (a slow storage); ``fail_writes``: ``(prefix, n,
    then)``, once the file a write replaces holds ``then`` (any text), the next
    ``n`` writes (in this process) of files whose name starts with ``prefix``
    raise ``OSError`` (a storage failing for a while; ``failed_at``: when).
    ``named_deletions``: each folder deleted through it that an experiment
    state file on this storage (``experiment_state*.json`` of the folder two
    levels up, read just before) names, which ``Tuner.restore`` would miss. ``events``: each write, slow write's
    end and deletion, as ``(op, path, thread ident, time.monotonic())`` (op
    ``"write"``, ``"slow write ended"``, ``"delete"``), in this process.
    """

    _instances: dict[str, CountingFileSystem] = {}

    def __init__(
        self,
        fs: Any,
        fail_listing: bool = False,
        key: Optional[str] = None,
        slow_writes: Optional[tuple[str, float]] = None,
        fail_writes: Optional[tuple[str, int, str]] = None,
    ):
        self.fs = fs
        self.fail_listing = fail_listing
        self.slow_writes = slow_writes
        self.fail_writes = fail_writes
        self.failed_writes = 0
        self.failed_at: list[float] = []
        self.named_deletions: list[str] = []
        self.key = key or f"counting-{id(self)}"
        self.counts: collections.Counter = collections.Counter()
        self.events: list[tuple[str, str, int, float]] = []
        CountingFileSystem._instances[self.key] = self

    def __reduce__(self):
        # Copies unpickled in this process count into the same instance.
        return (
            _counting_file_system,
            (self.key, self.fs, self.fail_listing, self.slow_writes, self.fail_writes),
        )

    def _count(self, op: str, path: Optional[str] = None) -> None:
        self.counts[op] += 1
        if path is not None:
            self.events.append((op, path, threading.get_ident(), time.monotonic()))

    def __eq__(self, other: Any) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)

    def equals(self, other: Any) -> bool:
        return self is other

    def get_type_name(self) -> str:
        return f"counting+{self.fs.type_name}"

    def normalize_path(self, path: str) -> str:
        return self.fs.normalize_path(path)

    def get_file_info(self, paths):
        self._count("info")
        return self.fs.get_file_info(paths)

    def get_file_info_selector(self, selector):
        self._count("list")
        if self.fail_listing:
            raise OSError(f"Access Denied listing {selector.base_dir}")
        return self.fs.get_file_info(selector)

    def create_dir(self, path, recursive):
        self._count("mkdir")
        self.fs.create_dir(path, recursive=recursive)

    def delete_dir(self, path):
        self._count("delete", path)
        if self.named_by_state(path):
            self.named_deletions.append(path)
        self.fs.delete_dir(path)

    def named_by_state(self, path: str) -> bool:
        """Whether an ``experiment_state*.json`` of the experiment folder two
        levels above ``path`` (a checkpoint folder) names it."""
        import pyarrow.fs

        experiment = path.rstrip("/").rsplit("/", 2)[0]
        try:
            infos = self.fs.get_file_info(pyarrow.fs.FileSelector(experiment))
        except (OSError, FileNotFoundError):
            return False
        for info in infos:
            if info.base_name.startswith("experiment_state") and info.base_name.endswith(
                ".json"
            ):
                # Tune saves each trial's checkpoint record cloudpickled, as hex.
                name = path.rstrip("/")
                if self._holds(info.path, name, name.encode().hex()):
                    return True
        return False

    def delete_dir_contents(self, path, missing_dir_ok=False):
        self._count("delete")
        self.fs.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self):
        self._count("delete")
        self.fs.delete_dir_contents("/", accept_root_dir=True)

    def delete_file(self, path):
        self._count("delete", path)
        self.fs.delete_file(path)

    def move(self, src, dest):
        self._count("move")
        self.fs.move(src, dest)

    def copy_file(self, src, dest):
        self._count("copy")
        self.fs.copy_file(src, dest)

    def open_input_stream(self, path):
        self._count("read")
        return self.fs.open_input_stream(path)

    def open_input_file(self, path):
        self._count("read")
        return self.fs.open_input_file(path)

    def open_output_stream(self, path, metadata):
        self._count("write", path)
        if self.fail_writes and path.rsplit("/", 1)[-1].startswith(self.fail_writes[0]):
            prefix, n, then = self.fail_writes
            if self.failed_writes < n and (self.failed_writes or self._holds(path, then)):
                self.failed_writes += 1
                self.failed_at.append(time.monotonic())
                raise OSError(f"Service unavailable writing {path}")
        if self.slow_writes and path.rsplit("/", 1)[-1] == self.slow_writes[0]:
            time.sleep(self.slow_writes[1])  # a slow storage, not pacing a test
            self.events.append(
                ("slow write ended", path, threading.get_ident(), time.monotonic())
            )
        return self.fs.open_output_stream(path, metadata=metadata)

    def _holds(self, path: str, *texts: str) -> bool:
        """Whether the file at ``path`` holds any of ``texts`` (one read)."""
        try:
            with self.fs.open_input_stream(path) as f:
                data = f.read()
        except (OSError, FileNotFoundError):
            return False
        return any(text.encode() in data for text in texts)

    def open_append_stream(self, path, metadata):
        self._count("write")
        return self.fs.open_append_stream(path, metadata=metadata)


def _counting_file_system(
    key, fs, fail_listing, slow_writes=None, fail_writes=None
) -> CountingFileSystem:
    existing = CountingFileSystem._instances.get(key)
    if existing is not None:
        return existing
    return CountingFileSystem(
        fs,
        fail_listing=fail_listing,
        key=key,
        slow_writes=slow_writes,
        fail_writes=fail_writes,
    )


#: The machine-wide lock :func:`connect_client` holds while it connects.
CLIENT_CONNECT_LOCK = "/tmp/rtt_ray_client_connect.lock"


@contextlib.contextmanager
def client_connect_lock():
    """Hold :data:`CLIENT_CONNECT_LOCK` (``flock``) for one Ray Client connection.

    Every Ray Client proxier on a machine, whatever its cluster, picks the port
    of the server it starts per connection from the same range (23000 to
    24000, ``ray.util.client.server.proxier``): it checks that the port is free,
    then starts a process that binds it seconds later, with gRPC's
    ``SO_REUSEPORT``. Two clusters connecting in that window (the two pytest
    sessions of ``scripts/test`` end with their Ray Client modules) both bind
    23000, and the kernel then splits connections between the two servers: a
    client's session runs in the other cluster, and fails when that cluster's
    test disconnects ("Attempted to reconnect a session that has already been
    cleaned up"). ``ray.init`` of a ``ray://`` address returns once the
    proxier's server answers, so holding this lock until then orders one
    cluster's check-then-bind before another's.
    A lock file this user cannot open (another user's) means no lock.
    """
    import fcntl

    try:
        fd = os.open(CLIENT_CONNECT_LOCK, os.O_RDONLY | os.O_CREAT, 0o666)
    except PermissionError:
        fd = None
    if fd is None:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def connect_client(address: str, attempts: int = 3):
    """``ray.init(address)`` for ``ray://``, under :func:`client_connect_lock`.

    Retries only one error, and says so on stderr: Ray's client proxier losing
    the per-connection server it just forked on a busy machine ("Starting Ray
    client server failed", or, on Ray 2.40, "Initialization failure from
    server" with psutil's ``ZombieProcess`` for it); a new connection gets a new
    server. Any other error, or the same one ``attempts`` times, is raised.
    """
    import ray

    lost_server = ("Starting Ray client server failed", "ZombieProcess")
    for attempt in range(1, attempts + 1):
        try:
            with client_connect_lock():
                return ray.init(address)
        except ConnectionAbortedError as e:
            if not any(s in str(e) for s in lost_server) or attempt == attempts:
                raise
            print(
                f"connect_client: Ray Client lost its server ({e}); connecting again",
                file=sys.stderr,
                flush=True,
            )
            time.sleep(2.0 * attempt)
    raise AssertionError("unreachable")


def resume_step(checkpoint: Any, key: str = "step") -> int:
    """The step after the one a restored checkpoint's ``state.json`` holds; 0 without one.

    Call it with ``ray.train.get_checkpoint()`` (or Tune's) at the top of a
    training loop; runs on a training worker or in a trial actor.
    """
    if not checkpoint:
        return 0
    with checkpoint.as_directory() as d:
        with open(os.path.join(d, "state.json")) as f:
            return json.load(f)[key] + 1


def counting_conversions(
    trainer_cls: type,
    count: Any,
    *,
    name: Optional[str] = None,
    module: Optional[str] = None,
) -> type:
    """A subclass of ``trainer_cls`` whose ``as_trainable()`` calls ``count(trainer)``
    first (a spy for once-only conversion); runs where the trainer is converted.

    With ``name`` and ``module`` (the module it is assigned in, at its top
    level) the class pickles by reference there, as a class written out would.
    """

    class Counted(trainer_cls):
        def as_trainable(self):
            count(self)
            return super().as_trainable()

    Counted.__name__ = Counted.__qualname__ = name or f"Counted{trainer_cls.__name__}"
    if module is not None:
        Counted.__module__ = module
    return Counted


def actors_started(class_name: str) -> int:
    """How many actors of ``class_name`` this Ray has started so far, alive or
    dead, from the GCS's actor table (no dashboard needed; ``ray._private.state``
    is Ray's internal view of it, as in ``tests/helpers.alive_actors``)."""
    from ray._private import state

    return sum(1 for a in state.actors().values() if a["ActorClassName"] == class_name)


def assert_every_cpu_free(timeout_s: float = 20.0) -> None:
    """Every CPU of the connected Ray is free within ``timeout_s`` (its resource
    view lags a release by a moment); if not, the message says what holds them."""
    import ray

    deadline = time.monotonic() + timeout_s
    while ray.available_resources().get("CPU", 0) != ray.cluster_resources()["CPU"]:
        if time.monotonic() > deadline:
            raise AssertionError("not every CPU came back:\n" + what_holds_resources())
        time.sleep(0.5)


def placement_group_ids() -> set[str]:
    """The ids of every placement group the connected Ray has had, removed or not."""
    import ray

    return set(ray.util.placement_group_table())


def removed_before_created(ids: set[str]) -> list[str]:
    """The placement groups of ``ids`` that were removed before the GCS created them
    (a creation latency of 0 in their stats). A removal then can leave a raylet's
    prepared resources held for good (ray-project/ray#64693; ray_tt_ext's Tune
    controller removes a placement group only once created)."""
    import ray

    table = ray.util.placement_group_table()
    return [
        pg_id
        for pg_id in sorted(ids)
        if table[pg_id]["state"] == "REMOVED"
        and not table[pg_id]["stats"]["end_to_end_creation_latency_ms"]
    ]


def what_holds_resources() -> str:
    """Ray's view of what may hold resources, for an assertion's message or a
    stuck run's report: each node (alive or dead, its resources), the free
    resources, the actors not dead (the GCS's actor table, as
    :func:`actors_started`; not under Ray Client, which has no such table), the
    placement groups not removed with the nodes their bundles sit on, and this
    machine's Ray worker processes."""
    import subprocess

    import ray

    def plain(resources: dict) -> dict:  # without the placement groups' own names
        return {k: v for k, v in resources.items() if "_group_" not in k}

    lines = []
    for node in ray.nodes():
        state = "alive" if node["Alive"] else "dead"
        lines.append(f"node {node['NodeID'][:8]} {state} {plain(node['Resources'])}")
    lines.append(f"available: {plain(ray.available_resources())}")
    if ray.util.client.ray.is_connected():
        lines.append("actors: not listed under Ray Client")
    else:
        from ray._private import state

        for actor in state.actors().values():
            if actor["State"] != "DEAD":
                lines.append(
                    f"actor {actor['ActorClassName']} {actor['State']} pid={actor['Pid']} "
                    f"resources={actor.get('RequiredResources')} "
                    f"pg={actor.get('PlacementGroupID')}"
                )
    for pg in ray.util.placement_group_table().values():
        if pg["state"] != "REMOVED":
            nodes = sorted({n[:8] for n in pg.get("bundles_to_node_id", {}).values()})
            lines.append(
                f"placement group {pg['placement_group_id']} {pg['state']}: "
                f"{list(pg['bundles'].values())} on nodes {nodes}"
            )
    ps = subprocess.run(
        ["ps", "-eo", "pid,etimes,stat,cmd"], capture_output=True, text=True
    )
    lines += [line for line in ps.stdout.splitlines() if "ray::" in line]
    return "\n".join(lines)


def wait_until(condition, what: str, timeout_s: float = 30.0) -> None:
    """Poll ``condition`` (a state Ray reaches on its own: an actor marked dead,
    a killed process gone) every 0.05 s until it holds; fail after
    ``timeout_s`` naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        time.sleep(0.05)


def alive_actor_ids(class_name: str) -> set[str]:
    """The ids of this Ray's alive actors of ``class_name`` (the GCS's actor
    table, as :func:`actors_started`)."""
    from ray._private import state

    return {
        a["ActorID"]
        for a in state.actors().values()
        if a["ActorClassName"] == class_name and a["State"] == "ALIVE"
    }


def settled_object_store_used_mib(timeout_s: float = 15.0) -> float:
    """Plasma memory in use once it stops changing (Ray frees objects
    asynchronously, and earlier tests' objects may still be going)."""
    import time

    deadline = time.monotonic() + timeout_s
    last = object_store_used_mib(settle_s=0)
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = object_store_used_mib(settle_s=0)
        if now == last:
            return now
        last = now
    return last


def object_store_used_mib(settle_s: float = 10.0, below: Optional[float] = None) -> float:
    """Plasma memory in use on this Ray (MiB), from Ray's memory summary.

    Freeing is asynchronous: with ``below``, polls up to ``settle_s`` seconds
    for the usage to drop below it, and returns the last reading.
    """
    import re
    import time

    import ray
    from ray._private.internal_api import memory_summary

    deadline = time.monotonic() + settle_s
    while True:
        # This Ray's address: another Ray on the machine would make it ambiguous.
        address = ray.get_runtime_context().gcs_address
        summary = memory_summary(address=address, stats_only=True)
        match = re.search(r"Plasma memory usage (\d+) MiB", summary)
        used = float(match.group(1)) if match else 0.0
        if below is None or used < below or time.monotonic() > deadline:
            return used
        time.sleep(0.25)


#: Runs each command of a JSON list in this one interpreter, in order, as
#: ``python SCRIPT`` or ``python -m MODULE ARGS...`` would (``__main__``, its
#: own ``sys.argv``, stdout and stderr); the exit status is what the process's
#: would be. Prints one line: ``RTT_RUNS`` and a JSON list of
#: ``[returncode, stdout, stderr]``.
_ONE_INTERPRETER = """
import contextlib, io, json, runpy, sys, traceback
runs = []
for command in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    code = 0
    sys.argv = command[1:] if command[0] == "-m" else command
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            if command[0] == "-m":
                runpy.run_module(command[1], run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(command[0], run_name="__main__")
        except SystemExit as e:
            if isinstance(e.code, int) or e.code is None:
                code = e.code or 0
            else:
                print(e.code, file=sys.stderr)
                code = 1
        except BaseException:
            traceback.print_exc()
            code = 1
    runs.append([code, out.getvalue(), err.getvalue()])
sys.__stdout__.write("\\nRTT_RUNS " + json.dumps(runs) + "\\n")
"""


def run_in_one_interpreter(
    commands: list[list[str]], timeout: float, **kwargs: Any
) -> list[subprocess.CompletedProcess]:
    """Run ``commands`` (``[SCRIPT]`` or ``["-m", MODULE, *ARGS]``) one after another
    in one fresh interpreter, each as its own ``python ...`` would run: a
    ``CompletedProcess`` each. For tests whose subject is not a fresh process
    but what a command prints and exits with. ``kwargs`` go to
    ``subprocess.run`` (``cwd``, ``env``). The interpreter itself must exit 0.
    """
    proc = subprocess.run(
        [sys.executable, "-c", _ONE_INTERPRETER, json.dumps(commands)],
        capture_output=True,
        text=True,
        timeout=timeout,
        **kwargs,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RTT_RUNS ")]
    if proc.returncode != 0 or not lines:
        raise AssertionError(
            f"the interpreter exited with {proc.returncode}:\n{proc.stderr[-4000:]}"
        )
    runs = json.loads(lines[-1][len("RTT_RUNS ") :])
    return [
        subprocess.CompletedProcess(command, code, out, err)
        for command, (code, out, err) in zip(commands, runs, strict=True)
    ]


def train_v2_is_rays_default() -> bool:
    """Whether this Ray turns Train V2 on when the variable is unset (Ray >= 2.51)."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_TRAIN_V2_ENABLED"}
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import ray.train, ray.air.config; "
            "print(ray.train.RunConfig is not ray.air.config.RunConfig)",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.strip().endswith("True")


def rows_loop(config: dict) -> None:
    """A training loop (Train V1 or V2) that reads this worker's shard of ``train``
    (its Ray Data pipeline) and reports its rows; rank 0 records when it ran
    in ``config["log_dir"]`` (``started-<lr>`` when it starts, ``<lr>.json``
    with its start, end and rows). With ``config["wait_for"]`` (a file), rank 0
    waits for it first, up to 120 s; with ``config["together"]`` (a number),
    until that many trials have started, up to 120 s (trials that may run at
    once then run at once, however long each takes to start)."""
    import ray.train

    rank = ray.train.get_context().get_world_rank()
    started = time.time()
    if rank == 0:  # for a test that acts once a trial runs
        open(os.path.join(config["log_dir"], f"started-{config['lr']}"), "w").close()
    wait_for, together = config.get("wait_for"), config.get("together", 0)
    deadline = time.monotonic() + 120
    while rank == 0 and time.monotonic() < deadline:
        started_n = sum(
            1 for n in os.listdir(config["log_dir"]) if n.startswith("started-")
        )
        if (not wait_for or os.path.exists(wait_for)) and started_n >= together:
            break
        time.sleep(0.1)  # the test's signal and the other trials, polled
    rows = sum(1 for _ in ray.train.get_dataset_shard("train").iter_rows())
    if rank == 0:
        record = {"lr": config["lr"], "start": started, "end": time.time(), "rows": rows}
        path = os.path.join(config["log_dir"], f"{config['lr']}.json")
        with open(path, "w") as f:
            json.dump(record, f)
    ray.train.report({"rows": rows})


def ran_when(log_dir: Any) -> list[tuple[float, float]]:
    """When each trial of a :func:`rows_loop` sweep ran: ``(start, end)``, sorted."""
    records = [json.loads(p.read_text()) for p in Path(log_dir).glob("*.json")]
    return sorted((r["start"], r["end"]) for r in records)


def trials_at_once(intervals: list[tuple[float, float]]) -> int:
    """The most of ``intervals`` that overlap at one moment."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    running = most = 0
    for _, change in events:
        running += change
        most = max(most, running)
    return most
