"""Ray's core and Tune's driver: object-store pins, post-init hooks, actors, the experiment folder."""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import threading
import time
from collections.abc import Iterator
from typing import Any, Optional

import ray
import ray.train
import ray.tune
from ray._private import worker as _ray_worker
from ray.air.util.node import _force_on_current_node
from ray.train._internal.storage import StorageContext
from ray.tune.experiment import Experiment

logger = logging.getLogger("ray_tt_ext")

# -- Object-store lifetime of refs pickled out of band (driver) ------------------------

# ref.binary() -> (job id, pins Ray added in this process when it was pickled
# outside a Ray task), for the refs whose holders track them.
_OUT_OF_BAND_PINS: dict[bytes, list[Any]] = {}
# Reentrant: a release runs from a weakref finalizer, which a garbage
# collection inside a locked section of the same thread may call.
_PINS_LOCK = threading.RLock()


def count_out_of_band_pins(ref: Any) -> None:
    """Start counting the pins Ray adds for ``ref`` in this process (driver).

    Ray's ``SerializationContext.add_contained_object_ref`` (Ray 2.40 ..
    2.60) adds a local reference that is never removed each time an
    ``ObjectRef`` is pickled outside a Ray task (``cloudpickle.dumps`` of a
    class Tune registers, an actor class it exports), pinning the object for
    the life of the process. :func:`note_ref_pickled` counts them and
    :func:`release_out_of_band_pins` removes them. No-op under Ray Client (the
    client process has no core worker of its own).
    """
    if ray.util.client.ray.is_connected():
        return
    with _PINS_LOCK:
        _OUT_OF_BAND_PINS[ref.binary()] = [_ray_worker.global_worker.current_job_id, 0]


def note_ref_pickled(ref: Any) -> None:
    """Count the pin Ray adds if ``ref`` is being pickled out of band now (tracked refs).

    Call it only where ``ref`` is really serialized (a ``__reduce__`` whose
    result is pickled), not where a reduction is only looked at.
    """
    with _PINS_LOCK:
        entry = _OUT_OF_BAND_PINS.get(ref.binary())
        if entry is None:
            return
        try:
            context = _ray_worker.global_worker.get_serialization_context()
            in_band = context.is_in_band_serialization()
        except Exception:
            return
        if not in_band:
            entry[1] += 1


def release_out_of_band_pins(ref: Any) -> None:
    """Remove the pins counted for ``ref`` (``CoreWorker.remove_object_ref_reference``).

    Runs on the driver, when nothing of this process will use ``ref`` again;
    Ray's reference counting then frees the object once the last
    ``ObjectRef`` to it is gone.
    """
    with _PINS_LOCK:
        job_id, pins = _OUT_OF_BAND_PINS.pop(ref.binary(), (None, 0))
    worker = _ray_worker.global_worker
    if not pins or not ray.is_initialized() or worker.current_job_id != job_id:
        return  # Ray was shut down (and the pins with it) since
    # Never remove more than Ray holds beyond the ObjectRef passed in here.
    counts = worker.core_worker.get_all_reference_counts()
    local = counts.get(ref.hex().encode(), {}).get("local", 0)
    for _ in range(min(pins, local - 1)):
        worker.core_worker.remove_object_ref_reference(ref)


_TUNE_DRIVER_HERE: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "ray_tt_ext_tune_driver_here", default=False
)


@contextlib.contextmanager
def acting_as_tune_driver() -> Iterator[None]:
    """Tune's driver loop runs in this Ray worker, for the length of the block.

    For the Ray Client Tuner actor's calls and ``trainer.fit()`` sent to the
    cluster as a task: :func:`is_driver_process` is true inside the block (in
    this thread, and in threads started with a copy of its context), false
    after it, so a task worker process Ray reuses for other tasks is not
    taken for a driver.
    """
    token = _TUNE_DRIVER_HERE.set(True)
    try:
        yield
    finally:
        _TUNE_DRIVER_HERE.reset(token)


def is_driver_process() -> bool:
    """Whether Tune's driver loop runs here (a driver, a process without Ray, or a
    Ray worker inside :func:`acting_as_tune_driver`), not a trial actor or a
    training worker."""
    if _TUNE_DRIVER_HERE.get():
        return True
    return getattr(_ray_worker.global_worker, "mode", None) != _ray_worker.WORKER_MODE


def add_post_init_hook(hook) -> None:
    """Run ``hook()`` right after the next ``ray.init()`` in this process."""
    _ray_worker._post_init_hooks.append(hook)


def force_on_current_node_options() -> dict[str, Any]:
    """Scheduling options that pin a task/actor to the caller's node."""
    return _force_on_current_node(None)


def set_experiment_storage_context_cls(cls) -> Any:
    """Swap the StorageContext class Tune's ``Experiment`` builds; return the old one.

    Ray reads ``Experiment._storage_context_cls`` when it builds the
    experiment in ``tune.run`` (driver), checked on Ray 2.40 .. 2.60.
    """
    old = Experiment.__dict__.get("_storage_context_cls", StorageContext)
    Experiment._storage_context_cls = cls
    return old


def actor_ready_ref(actor: Any) -> Any:
    """``actor.__ray_ready__.remote()``: an ``ObjectRef`` ready when the actor can
    take a call, failing with ``ActorDiedError`` once it is dead.

    ``__ray_ready__`` (Ray 2.40 .. 2.60): the method Ray's ``_modify_class`` gives every actor.
    Runs in the executor host (it watches the trials' coordinators).
    """
    return actor.__ray_ready__.remote()


def experiment_fs_path(
    storage_path: str, storage_filesystem: Optional[Any], experiment_dir_name: str
) -> str:
    """``StorageContext.experiment_fs_path`` (Ray 2.40 .. 2.60) without building one.

    Ray's ``StorageContext.__init__`` writes and reads a marker file in the
    experiment folder (requests, on S3); this is the same path from Ray's
    ``get_fs_and_path``. Runs on the driver (or the Ray Client Tuner actor).
    """
    from pathlib import Path

    from ray.train._internal.storage import get_fs_and_path

    _, fs_path = get_fs_and_path(storage_path, storage_filesystem)
    return Path(Path(fs_path).as_posix(), experiment_dir_name).as_posix()


def experiment_fs_and_path(
    storage_path: str, storage_filesystem: Optional[Any], experiment_dir_name: str
) -> tuple[Any, str]:
    """The experiment folder's ``pyarrow`` filesystem and path (driver); see
    :func:`experiment_fs_path`."""
    from ray.train._internal.storage import get_fs_and_path

    fs, _ = get_fs_and_path(storage_path, storage_filesystem)
    return fs, experiment_fs_path(storage_path, storage_filesystem, experiment_dir_name)


# -- Tune's trainable registry, one writer at a time (driver) ---------------------------

_REGISTRY_LOCK = threading.RLock()


def guard_tune_registry() -> None:
    """Make Tune's process-wide trainable registry safe for two Tuners in two threads.

    Ray's ``_Registry.register`` adds to a dict that ``_Registry.flush_values``
    iterates, unlocked: two fits registering at once in one process fail with
    ``RuntimeError: dictionary changed size during iteration``. Patches
    ``ray.tune.registry._global_registry``'s ``register``, ``flush_values`` and
    ``unregister`` to hold one lock; runs on the driver (or the Ray Client
    Tuner actor), once, when a ray_tt_ext Tuner first fits. Idempotent.
    """
    from ray.tune import registry

    target = registry._global_registry
    with _REGISTRY_LOCK:
        if getattr(target, "_ray_tt_ext_locked", False):
            return
        for name in ("register", "flush_values", "unregister"):
            setattr(target, name, _locked(getattr(target, name)))
        target._ray_tt_ext_locked = True


def claim_job_key(key: str) -> Optional[bool]:
    """Put ``key`` in the GCS key-value store unless it is there: ``True`` if
    this call put it, ``False`` if it was there, ``None`` without a Ray (no
    other process of the job yet). Keys are per job (Tune's registry is), in
    ray_tt_ext's namespace. Runs on the driver (or the Ray Client Tuner actor)."""
    if not ray.is_initialized():
        return None
    from ray.experimental.internal_kv import _internal_kv_put

    job_key = f"{ray.get_runtime_context().get_job_id()}/{key}"
    existed = _internal_kv_put(job_key, b"1", overwrite=False, namespace="ray_tt_ext")
    return not existed


def release_job_key(key: str) -> None:
    """Delete a key :func:`claim_job_key` put (driver, or the Ray Client Tuner actor)."""
    if not ray.is_initialized():
        return
    from ray.experimental.internal_kv import _internal_kv_del

    job_key = f"{ray.get_runtime_context().get_job_id()}/{key}"
    _internal_kv_del(job_key, namespace="ray_tt_ext")


def _locked(method: Any) -> Any:
    def locked(*args: Any, **kwargs: Any) -> Any:
        with _REGISTRY_LOCK:
            return method(*args, **kwargs)

    return locked


def connect_global_state() -> None:
    """Connect this process's Ray state accessor now, from one thread.

    Ray's ``ray._private.state.state`` (behind ``placement_group_table`` and
    ``PlacementGroup.bundle_specs``) connects on its first use. On Ray 2.40,
    ``GlobalState._check_connected`` does so without a lock and sets
    ``global_state_accessor`` before ``connect()`` has returned: a second
    thread's first use in that window aborts the process (``Check failed:
    placement_group_accessor_ != nullptr``; ray-project/ray#58181). Rays with
    ray-project/ray#58182 lock it (``GlobalState._connect_and_get_accessor``).
    Runs in the executor host actor's ``__init__``, before its threads start
    executors at once.
    """
    from ray._private.state import state

    if global_state_connects_locked():
        state._connect_and_get_accessor()
    else:
        state._check_connected()


def global_state_connects_locked() -> bool:
    """Whether this Ray connects its state accessor under a lock
    (ray-project/ray#58182), so that :func:`connect_global_state` is not needed."""
    from ray._private.state import state

    return hasattr(state, "_connect_and_get_accessor")


#: How long after its death a Train controller's process is still looked for at
#: the end of a fit (``dead_train_controllers_placement_groups``).
_DYING_WINDOW_S = 300.0


def dead_train_controllers_placement_groups(
    job_id: str, count_dying: bool = False
) -> tuple[list[Any], list[Any], int]:
    """The placement groups that dead Train V2 controller actors (Ray's
    ``TrainController``) of the job ``job_id`` (hex) created, that are still
    there and whose controller's process has exited, as ``PlacementGroup``
    handles: those the GCS has created, and those it has not yet (pending,
    prepared or rescheduling, by the same read of its table); and how many of the job's controllers are on their way out: dead
    with their process still running (a group's creator, whose group is left
    for a later call; with ``count_dying``, every one that died in the last
    :data:`_DYING_WINDOW_S` too, since it may still make a group), and, with
    ``count_dying``, not dead yet though an actor started them (a Tune trial
    actor, in Ray's pattern: at the end of a fit Tune has stopped or killed
    them all). From the GCS's tables (a placement group's creator, which
    ``ray.util.placement_group_table()`` leaves out; actors; nodes); no
    dashboard needed.

    Ray keeps a placement group that a non-detached actor created until the
    actor *and* its job are dead: a controller killed with its trial keeps
    its run's group, reserved or still pending (and reserved later), for the
    rest of the job. Ray's ``PlacementGroupCleaner`` learns of a group only
    once the run's workers have started (never of a pending one), and asks the
    State API whether the controller lives, which needs the dashboard and
    fails when the machine runs two Rays.

    The GCS marks an actor DEAD, and its worker not alive, before its process
    has exited: a controller process still running whose group is removed
    under it takes the removal for a worker group start that timed out and,
    by its ``FailureConfig``, starts again with a new group (seen here within
    half a second), which holds its CPUs until a later sweep of the job finds
    it, if any comes. So a group counts only once its controller's process
    has exited (:func:`_processes_running`) or its node died. Runs in the
    driver (or the Ray Client Tuner actor).
    """
    from ray._private.state import state
    from ray.core.generated import gcs_pb2
    from ray.util.placement_group import PlacementGroup

    if global_state_connects_locked():
        accessor = state._connect_and_get_accessor()
    else:
        state._check_connected()
        accessor = state.global_state_accessor
    job = ray.JobID.from_hex(job_id)
    actor_data = gcs_pb2.ActorTableData
    dead = actor_data.ActorState.Value("DEAD")
    # At the end of a fit every actor of the job; every few seconds of it, the
    # dead ones only.
    table = {
        d.actor_id: d
        for d in map(
            actor_data.FromString,
            accessor.get_actor_table(job, None if count_dying else "DEAD"),
        )
    }
    controllers = {a: d for a, d in table.items() if d.class_name == "TrainController"}
    groups = gcs_pb2.PlacementGroupTableData
    candidates = []
    for raw in accessor.get_placement_group_table():
        data = groups.FromString(raw)
        # The actor table says the creator is dead; the group's own
        # ``creator_actor_dead`` may not (seen false for a group still pending
        # when its creator died).
        if data.state == groups.REMOVED or data.is_detached:
            continue
        creator = controllers.get(data.creator_actor_id)
        if data.creator_job_id == job.binary() and creator and creator.state == dead:
            candidates.append((data, creator))
    # The dead controllers whose process may still run: a group's creator, and
    # at the end of a fit those that died lately (a killed process is gone
    # within a second; minutes, for the caller's clock against the GCS's; the
    # job's older ones are not asked about again).
    lately = time.time() * 1000 - _DYING_WINDOW_S * 1000
    dead_controllers = [
        d
        for d in controllers.values()
        if d.state == dead and (count_dying and d.end_time >= lately)
    ] + [creator for _, creator in candidates]
    running = _processes_running(
        list(
            {
                (d.address.node_id, d.pid, d.end_time / 1000 or time.time())
                for d in dead_controllers
                if d.pid
            }
        )
    )

    def exited(controller: Any) -> bool:
        return (controller.address.node_id, controller.pid) not in running

    created: list[Any] = []
    pending: list[Any] = []
    for data, creator in candidates:
        if exited(creator):
            (created if data.state == groups.CREATED else pending).append(
                PlacementGroup(ray.PlacementGroupID(data.placement_group_id))
            )
    dying = len({d.actor_id for d in dead_controllers if not exited(d)})
    if count_dying:
        # A trial actor's controller not dead yet: fate-shares with it soon.
        actors_at = {d.address.worker_id for d in table.values()}
        dying += sum(
            1
            for d in controllers.values()
            if d.state != dead and d.owner_address.worker_id in actors_at
        )
    return created, pending, dying


#: A process counts as a dead actor's if it started at most this long after the
#: actor's death (clocks of two nodes; the second of ``/proc/stat``'s boot time);
#: a later one has its pid again.
_PID_REUSE_SLACK_S = 2.0
#: How long a look at the processes of other nodes may take (a pass of the sweep).
_REMOTE_CHECK_TIMEOUT_S = 5.0


def _process_running(pid: int, started_by: float) -> bool:
    """Whether the process ``pid`` of this machine that started by ``started_by``
    (epoch seconds; a process that started later has the pid again) runs; a
    zombie does not."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        with open("/proc/stat") as machine:
            boot = next(
                float(line.split()[1]) for line in machine if line.startswith("btime")
            )
    except FileNotFoundError:  # no such process (or no /proc: see below)
        if os.path.isdir("/proc"):
            return False
        try:  # macOS: no start time to compare
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # another user's
            return True
        return True
    except (OSError, StopIteration):  # it exited meanwhile
        return False
    if fields[0] in ("Z", "X"):
        return False
    started = boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    return started <= started_by + _PID_REUSE_SLACK_S


def _processes_running_here(processes: list[tuple[int, float]]) -> list[int]:
    """Of ``processes`` (a pid, when its process died at the latest, epoch s),
    the pids that run on this node (:func:`_process_running`; a Ray task's body
    for another node)."""
    return [pid for pid, by in processes if _process_running(pid, by)]


_remote_check: Any = None


def _processes_running(
    processes: list[tuple[bytes, int, float]],
) -> set[tuple[bytes, int]]:
    """Of ``processes`` (a node's binary ID, a pid on it, when that process
    was seen dead at the latest, epoch s; Ray marks an actor dead before its
    process has exited), ``(node, pid)`` of those that run: on this process's
    node read from ``/proc``, on another one by a task of no CPU pinned to it
    (all at once, at most :data:`_REMOTE_CHECK_TIMEOUT_S`; a node that does not
    answer in time has its processes counted as running, to be asked again);
    a dead node's processes do not run. Ray's worker table says a worker is
    dead once it disconnected from its raylet, also before its process
    exits."""
    global _remote_check
    if not processes:
        return set()
    here = bytes.fromhex(ray.get_runtime_context().get_node_id())
    alive_nodes = {bytes.fromhex(n["NodeID"]) for n in ray.nodes() if n["Alive"]}
    by_node: dict[bytes, list[tuple[int, float]]] = {}
    for node, pid, by in processes:
        if node in alive_nodes:
            by_node.setdefault(node, []).append((pid, by))
    running = {(here, pid) for pid in _processes_running_here(by_node.pop(here, []))}
    if not by_node:
        return running
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if _remote_check is None:
        _remote_check = ray.remote(num_cpus=0, max_retries=0)(_processes_running_here)
    refs = {
        _remote_check.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node.hex(), soft=False)
        ).remote(asked): node
        for node, asked in by_node.items()
    }
    done, late = ray.wait(
        list(refs), num_returns=len(refs), timeout=_REMOTE_CHECK_TIMEOUT_S
    )
    for ref in late:
        ray.cancel(ref)
    alive_nodes = {bytes.fromhex(n["NodeID"]) for n in ray.nodes() if n["Alive"]}
    for ref in refs:
        node = refs[ref]
        try:
            if ref in done:
                running |= {(node, pid) for pid in ray.get(ref)}
                continue
        except Exception:  # the node died meanwhile, or the task failed
            logger.debug("asking node %s for its processes", node.hex(), exc_info=True)
        if node in alive_nodes:  # to be asked again
            running |= {(node, pid) for pid, _ in by_node[node]}
    return running


def current_actor_or_none() -> Any:
    """The handle of the actor this code runs in, or ``None`` (driver, task)."""
    try:
        return ray.get_runtime_context().current_actor
    except Exception:  # RuntimeError outside an actor
        return None


def train_run_pids() -> dict[str, int]:
    """On a Train V2 training worker: the pids of its run's controller and of the
    Tune trial actor that started it (one process under ``v2.Tuner(trainer)``,
    whose trial actor runs the controller; two for Ray's own controller actor),
    read from the GCS's actor table (no dashboard needed). For tests that kill one of them at a
    chosen moment."""
    from ray._private.state import actors

    from ray_tt_ext._compat.train_v2 import get_train_context

    controller = get_train_context().controller_actor
    table = actors(actor_state_name="ALIVE")
    info = table[controller._actor_id.hex()]
    if "Controller" not in info["ActorClassName"]:  # the trial actor runs it
        return {"controller": int(info["Pid"]), "trial": int(info["Pid"])}
    owner = info["OwnerAddress"]
    (trial_pid,) = [
        int(other["Pid"])
        for other in table.values()
        if other["Address"]["Port"] == owner["Port"]
        and other["Address"]["NodeID"] == owner["NodeID"]
    ]
    return {"controller": int(info["Pid"]), "trial": trial_pid}
