"""Tune's loop in a fit of ray_tt_ext's Tuners: its controller and its placement
groups (driver, or the Ray Client Tuner actor).

Inside :func:`tune_controller_fixed` (both Tuners' ``fit``), the
``TuneController`` that ``tune.run`` makes is :class:`_TuneController`, whose
resource manager is :class:`_PlacementGroupsRemovedOnceCreated`; a plain
``ray.tune.Tuner`` in the same process keeps Ray's.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import dataclasses
import logging
import math
import threading
import time
from collections.abc import Iterator
from typing import Any, Optional

import ray
from ray.air.execution.resources.placement_group import (
    PlacementGroupResourceManager as _RayPlacementGroupResourceManager,
)
from ray.tune.execution.cluster_info import _is_ray_cluster
from ray.tune.execution.tune_controller import TuneController as _RayTuneController
from ray.tune.experiment import Trial as _Trial
from ray.tune.trainable.function_trainable import FunctionTrainable

from ray_tt_ext._compat import tune_checkpoints as _tune

logger = logging.getLogger("ray_tt_ext")

# -- Tune's placement groups: none removed while it is being created (driver) -------

#: How long the end of a fit waits for the placement groups that Tune gave up while
#: they were being created to be created, so that they are removed whole (seconds).
_GIVEN_UP_PATIENCE_S = 5.0


class _PlacementGroupsRemovedOnceCreated(_RayPlacementGroupResourceManager):
    """Ray Tune's ``PlacementGroupResourceManager`` that removes a placement group
    Tune gave up before it was created (a cancelled request: a trial that took a
    cached actor under ``reuse_actors``, a pending trial at the end of a fit)
    only once the GCS created it. Runs in Tune's loop (driver, or the Ray Client
    Tuner actor).

    Ray's removes it at once. A placement group removed while the GCS waits for
    a raylet's reply to its prepare request keeps that raylet's prepared
    resources: its CPUs are lost until Ray restarts, with no placement group,
    actor or lease holding them (ray-project/ray#64693; a fix is proposed
    upstream in ray-project/ray#66188). Tune's request-then-cancel under
    ``reuse_actors`` hits that window: 200 of them in a row on a 4-CPU Ray
    2.60 lost 1 to 3 CPUs in 3 runs of 4, and synch PBT with
    ``reuse_actors=True`` lost one in about half of its fits. A created
    placement group is removed whole. A group given up stays a demand on the
    GCS (and on an autoscaler) until it is created and removed.
    """

    def __init__(self, update_interval_s: float = 0.1) -> None:
        super().__init__(update_interval_s=update_interval_s)
        #: The ``ready()`` futures of the placement groups given up, not yet created.
        self._given_up: dict[Any, Any] = {}

    def cancel_resource_request(self, resource_request: Any) -> None:
        """Overrides Ray's ``PlacementGroupResourceManager.cancel_resource_request``
        (Tune's loop). A created placement group of the request, if there is one,
        is removed at once (Ray's takes a staged one first; which of the two goes
        makes no difference to Tune, the request's count drops by one), and the
        staged one stays for a later acquisition. Otherwise the staged one is
        forgotten as Ray's does, and removed once created (:meth:`update_state`)."""
        if self._request_to_ready_pgs[resource_request]:
            return self._remove_ready(self._request_to_ready_pgs[resource_request])
        if not self._request_to_staged_pgs[resource_request]:
            return super().cancel_resource_request(resource_request)  # Ray's error
        self._give_up(self._request_to_staged_pgs[resource_request].pop())

    def _give_up(self, pg: Any) -> None:
        """Forget a staged placement group as Ray's cancel does; removed once created."""
        future = self._pg_to_staging_future.pop(pg)
        self._staging_future_to_pg.pop(future)
        self._pg_to_request.pop(pg)
        self._given_up[future] = pg

    def get_resource_futures(self) -> list:
        """Extends Ray's ``PlacementGroupResourceManager.get_resource_futures`` (Tune's
        loop): the placement groups given up wake Tune's loop once created too, whose
        ``update_state`` removes them."""
        return super().get_resource_futures() + list(self._given_up)

    def update_state(self) -> None:
        """Extends Ray's ``PlacementGroupResourceManager.update_state`` (Tune's loop):
        the placement groups given up that are created now are removed."""
        super().update_state()
        if self._given_up:
            self._remove_created(len(self._given_up), timeout=0)

    def clear(self) -> None:
        """Extends Ray's ``PlacementGroupResourceManager.clear`` (Tune's loop, at the
        end of a fit): the placement groups not created yet, given up or still
        requested, get up to :data:`_GIVEN_UP_PATIENCE_S` to be created (a fit's
        end frees the CPUs they wait for), then all are removed; then Ray's."""
        self._clear(_GIVEN_UP_PATIENCE_S)

    def __del__(self) -> None:
        """Overrides Ray's ``PlacementGroupResourceManager.__del__`` (wherever the
        manager is collected): :meth:`clear` without the wait (Ray's removal at
        once), which a garbage collection must not block on. A fit's end has
        cleared it already."""
        self._clear(0.0)

    def _clear(self, patience_s: float) -> None:
        """:meth:`clear`. With ``patience_s``: the created placement groups no trial
        took go first (Tune has removed the acquired ones already, at the end of
        a fit); those given up or still requested are removed one by one as the
        GCS creates them, for up to ``patience_s``; those still not created
        then. Without it (``__del__``): the ones not created, then the created
        ones (freeing CPUs after, not before). Then Ray's ``clear``."""
        if ray.is_initialized():
            if patience_s > 0:
                self._remove_all_ready()
            for staged in self._request_to_staged_pgs.values():
                while staged:
                    self._give_up(staged.pop())
            deadline = time.monotonic() + patience_s
            while self._given_up and time.monotonic() < deadline:
                self._remove_created(1, timeout=max(deadline - time.monotonic(), 0.0))
            for future, pg in self._given_up.items():
                ray.cancel(future)
                ray.util.remove_placement_group(pg)
            self._given_up.clear()
            self._remove_all_ready()  # __del__'s; none is left after the first
        super().clear()

    def _remove_created(self, num_returns: int, timeout: float) -> None:
        """Remove the placement groups given up that are created, waiting up to
        ``timeout`` for ``num_returns`` of them."""
        created, _ = ray.wait(
            list(self._given_up), num_returns=num_returns, timeout=timeout
        )
        for future in created:
            ray.util.remove_placement_group(self._given_up.pop(future))

    def _remove_ready(self, ready: set) -> None:
        """Remove one of ``ready``, a request's created placement groups no trial took."""
        pg = ready.pop()
        self._pg_to_request.pop(pg)
        ray.util.remove_placement_group(pg)

    def _remove_all_ready(self) -> None:
        for ready in self._request_to_ready_pgs.values():
            while ready:
                self._remove_ready(ready)


# -- Trials that leave their Ray Data pipelines CPUs (driver) -----------------------


@dataclasses.dataclass(frozen=True)
class DataCpus:
    """What a fit's trials keep free for their Ray Data pipelines: ``data_cpus``
    CPUs each, besides the ``trial_cpus`` its placement group takes (a trial
    of ``what``, a trainer with ``datasets``, under ``tuner``: the Tuner whose
    ``data_cpus_per_trial`` the messages name)."""

    what: str
    trial_cpus: float
    data_cpus: float
    tuner: str = "ray_tt_ext.Tuner"


def leaves_data_cpus(data: DataCpus) -> bool:
    """Whether a fit keeps its pipelines' CPUs here (driver, or the Ray Client
    Tuner actor): not on a cluster that grows by itself, where the autoscaler
    adds nodes for the trials' placement groups and their pipelines' tasks alike
    (one started by Ray's cluster launcher, which Ray Tune's own
    ``_is_ray_cluster`` detects, or a cluster with no CPU yet, which can only
    run anything once it grows); said once in a log line."""
    cpus = float(ray.cluster_resources().get("CPU", 0.0))
    if not _is_ray_cluster() and cpus > 0:
        return True
    logger.warning(
        "ray_tt_ext: %s has datasets, and this cluster grows by itself (%s): its "
        "trials are placed as Ray Tune places them, the autoscaler adding nodes for "
        "their Ray Data pipelines' tasks too; no CPU is kept for the pipelines "
        "(data_cpus_per_trial=%g is not applied).",
        data.what,
        "an autoscaling cluster" if _is_ray_cluster() else "no CPU yet",
        data.data_cpus,
    )
    return False


def _cpus(resource_request: Any) -> float:
    return float(resource_request.required_resources.get("CPU", 0.0))


#: How long the cluster's CPU count is kept before it is read again (seconds).
_CLUSTER_CPUS_TTL_S = 1.0


class _TrialsLeavingDataCpus(_PlacementGroupsRemovedOnceCreated):
    """:class:`_PlacementGroupsRemovedOnceCreated` for a fit whose trainer has
    ``datasets`` (Tune's loop: driver, or the Ray Client Tuner actor).

    A trial's Ray Data pipeline runs its tasks outside the trial's placement
    group, on the CPUs no placement group holds: trials whose workers take every
    CPU leave their pipelines none, and the sweep waits for ever (Ray Data's
    ``backpressured:tasks(ResourceBudget)`` at 0 rows; ray-project/ray#29662).
    Here a trial's placement group is requested only when the fit's placement
    groups (requested, created and taken), its own, and ``data_cpus`` per
    trial for each of their pipelines fit the cluster's CPUs, read again as
    the cluster grows; else the request waits, in order, and the trial stays
    PENDING, until a trial ends or the cluster grows. One trial is always let
    run (:func:`check_data_cpus` refuses a fit where even one cannot). Said
    once per fit, in one log line, when a trial first waits.
    """

    def __init__(
        self, update_interval_s: float = 0.1, data_cpus: Optional[DataCpus] = None
    ) -> None:
        super().__init__(update_interval_s=update_interval_s)
        self._data = data_cpus
        #: The requests that wait for CPUs (Tune sees them as not ready).
        self._waiting: collections.deque = collections.deque()
        self._cluster_cpus_read = (0.0, -math.inf)
        self._said = False
        self._warned_too_big = False

    def _cluster_cpus(self) -> float:
        cpus, at = self._cluster_cpus_read
        if time.monotonic() - at > _CLUSTER_CPUS_TTL_S:
            cpus = float(ray.cluster_resources().get("CPU", 0.0))
            self._cluster_cpus_read = (cpus, time.monotonic())
        return cpus

    def _fits(self, resource_request: Any) -> bool:
        """Whether the fit's placement groups, this one and each one's data CPUs
        fit the cluster's CPUs (always, with no other placement group)."""
        if not self._pg_to_request:
            return True
        keep = self._data.data_cpus if self._data is not None else 0.0
        requests = [*self._pg_to_request.values(), resource_request]
        need = sum(_cpus(r) + keep for r in requests)
        return need <= self._cluster_cpus() + 1e-9

    def request_resources(self, resource_request: Any) -> None:
        """Extends Ray's ``PlacementGroupResourceManager.request_resources`` (Tune's
        loop): a request that does not fit waits (:meth:`update_state` makes it
        once it does), behind any that wait already."""
        if self._data is not None:
            self._warn_if_too_big(resource_request)
        if self._data is None or (not self._waiting and self._fits(resource_request)):
            return super().request_resources(resource_request)
        self._waiting.append(resource_request)
        self._say_once(resource_request)

    def update_state(self) -> None:
        """Extends :meth:`_PlacementGroupsRemovedOnceCreated.update_state`: the
        requests that wait and fit now are made, in order."""
        super().update_state()
        while self._waiting and self._fits(self._waiting[0]):
            super().request_resources(self._waiting.popleft())

    def cancel_resource_request(self, resource_request: Any) -> None:
        """Extends :meth:`_PlacementGroupsRemovedOnceCreated.cancel_resource_request`:
        a request that waits is dropped (nothing was made for it)."""
        if resource_request in self._waiting:
            self._waiting.remove(resource_request)
            return
        super().cancel_resource_request(resource_request)

    def clear(self) -> None:
        """Extends :meth:`_PlacementGroupsRemovedOnceCreated.clear` (a fit's end)."""
        self._waiting.clear()
        super().clear()

    def _warn_if_too_big(self, resource_request: Any) -> None:
        """Once per fit: a trial (one whose ``param_space`` tuned its
        ``scaling_config``) whose own group and data CPUs exceed the cluster, which
        :func:`check_data_cpus` could not see before the fit; it is placed alone."""
        need = _cpus(resource_request) + self._data.data_cpus
        cluster = self._cluster_cpus()
        if self._warned_too_big or need <= cluster + 1e-9:
            return
        self._warned_too_big = True
        logger.warning(
            "ray_tt_ext: a trial of %s takes %g CPU for its placement group and keeps "
            "%g CPU for its Ray Data pipeline, %g in all, and the cluster has %g CPUs: "
            "it is placed alone, and its pipeline may wait for ever. Fix: smaller "
            "worker groups in param_space's scaling_config, a bigger cluster, or a "
            "lower %s(..., data_cpus_per_trial=...).",
            self._data.what,
            _cpus(resource_request),
            self._data.data_cpus,
            need,
            cluster,
            self._data.tuner,
        )

    def _say_once(self, resource_request: Any) -> None:
        if self._said or self._data is None:
            return
        self._said = True
        data, cluster = self._data, self._cluster_cpus()
        per_trial = _cpus(resource_request) + data.data_cpus
        at_once = max(1, int((cluster + 1e-9) // per_trial)) if per_trial else 1
        logger.warning(
            "ray_tt_ext: %s has datasets, so each of its trials keeps %g CPU free for "
            "its Ray Data pipeline besides the %g its placement group takes: on this "
            "cluster's %g CPUs, %d trial(s) run at once (more as the cluster grows; "
            "max_concurrent_trials stays a maximum). Change it with "
            "%s(..., data_cpus_per_trial=N) (0 keeps none, as Ray Tune "
            "does: then trials can take every CPU and their pipelines wait for ever).",
            data.what,
            data.data_cpus,
            _cpus(resource_request),
            cluster,
            at_once,
            data.tuner,
        )


def check_data_cpus(data: DataCpus) -> None:
    """Refuse a fit none of whose trials could run with its pipeline's CPUs: one
    trial's placement group and its data CPUs exceed the cluster's CPUs
    (driver, or the Ray Client Tuner actor, when Tune's controller is made:
    before any trial starts)."""
    cluster = float(ray.cluster_resources().get("CPU", 0.0))
    need = data.trial_cpus + data.data_cpus
    if need > cluster + 1e-9:
        raise ValueError(
            f"The trials of {data.what} cannot run on this cluster: each takes "
            f"{data.trial_cpus:g} CPU for its placement group (its workers and "
            f"trainer) and keeps {data.data_cpus:g} CPU free for its Ray Data "
            f"pipeline, {need:g} in all, and the cluster has {cluster:g} CPUs. "
            "Nothing was started. Fix: fewer workers or fewer CPUs per worker "
            f"(ScalingConfig), a bigger cluster, or a lower "
            f"{data.tuner}(..., data_cpus_per_trial=...) (0 keeps none: the "
            "pipeline then needs CPUs that no trial holds)."
        )


# -- Tune's controller: a pause while saving left a STOP (driver) -----------------

_FIXED = contextvars.ContextVar("ray_tt_ext_tune_controller_fixed", default=False)
_DATA_CPUS: contextvars.ContextVar[Optional[DataCpus]] = contextvars.ContextVar(
    "ray_tt_ext_data_cpus", default=None
)
_CONTROLLER_PATCH_LOCK = threading.Lock()


class _TuneController(_RayTuneController):
    """Ray's ``TuneController`` with :meth:`_schedule_trial_pause` extended and
    its placement groups in :class:`_PlacementGroupsRemovedOnceCreated`; it
    behaves as Ray's unless made inside :func:`tune_controller_fixed`."""

    _rtt_patched = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Extends Ray's ``TuneController.__init__`` (driver, or the Ray Client Tuner
        actor): inside :func:`tune_controller_fixed`, and unless a resource manager
        was given, Tune's placement groups are :class:`_PlacementGroupsRemovedOnceCreated`'s
        (:class:`_TrialsLeavingDataCpus`'s for a trainer with datasets, once
        :func:`check_data_cpus` let the fit run); a callback with
        ``attach_controller`` (``ray_tt_ext._sweep.SweepRetention``) is given this
        controller, to save the experiment's state through, and hears of each save
        (:meth:`save_to_dir`), which uploads the experiment's state once the
        callback took its upload (``_compat.tune_checkpoints.take_state_upload``)."""
        fixed = _FIXED.get()
        if fixed and kwargs.get("resource_manager_factory") is None:
            data = _DATA_CPUS.get()
            if data is None or not leaves_data_cpus(data):
                kwargs["resource_manager_factory"] = _PlacementGroupsRemovedOnceCreated
            else:
                check_data_cpus(data)
                kwargs["resource_manager_factory"] = lambda: _TrialsLeavingDataCpus(
                    data_cpus=data
                )
        super().__init__(*args, **kwargs)
        self._rtt_fixed_pause = fixed
        self._rtt_state_listeners = [
            callback
            for callback in kwargs.get("callbacks") or ()  # tune.run gives them by name
            if fixed and hasattr(callback, "attach_controller")
        ]
        for callback in self._rtt_state_listeners:  # the sweep's retention saves through it
            callback.attach_controller(self)

    def __getstate__(self) -> dict:
        """Extends Ray's ``TuneController.__getstate__`` (what the experiment's state
        saves of the controller; Tune's loop): without the callbacks it tells of
        each save, which hold this controller, nor the state of the uploads of
        the experiment's state."""
        state = super().__getstate__()
        for name in (
            "_rtt_state_listeners",
            "_rtt_state_on_storage",
            "_rtt_saves",
            *_tune.STATE_KEYS,
        ):
            state.pop(name, None)
        return state

    def save_to_dir(self) -> None:
        """Extends Ray's ``TuneController.save_to_dir`` (Tune's loop: driver, or the Ray
        Client Tuner actor): once a callback given this controller (the sweep's
        retention) took the upload of the experiment's state
        (``_compat.tune_checkpoints.take_state_upload``: Ray's upload of the
        staging folder leaves it out), the saved state is uploaded now
        (``upload_experiment_state``), and the callback is told what it names
        and whether it reached storage. The records of the trials that may run
        and have a checkpoint are written again at each such save (Ray keeps a
        trial's JSON from its
        last change it heard of; PBT's exploit changes a trial's latest
        checkpoint without telling): what the callback is told is what the
        saved state names."""
        self._rtt_state_on_storage = False
        listeners = getattr(self, "_rtt_state_listeners", ())
        taken = bool(listeners) and hasattr(self, _tune.STATE_TAKEN)
        if taken:  # those with a checkpoint: a trial not started yet has none
            _tune.records_changed(
                self,
                [
                    t
                    for t in self._trials
                    if t.status in _tune.MAY_RUN and _tune.trial_checkpoints(t)
                ],
            )
        super().save_to_dir()
        if not taken:
            return
        self._rtt_state_on_storage = _tune.upload_experiment_state(self)
        for callback in listeners:
            callback.experiment_state_saved(self._trials, self._rtt_state_on_storage)

    def _schedule_trial_pause(self, trial: Any, should_checkpoint: bool = True) -> None:
        """Extends Ray's ``TuneController._schedule_trial_pause``; runs in Tune's
        loop (driver, or the Ray Client Tuner actor).

        A pause without a checkpoint of a trial that is saving (synch PBT
        exploits a trial whose pause's save is under way) stops its actor
        through ``_schedule_trial_stop``, which caches a STOP for when the save
        resolves. That save never resolves (the actor's tasks are dropped), the
        trial is PAUSED, and the STOP stays: the trial's next save, once PBT
        restarted it, ends it as TERMINATED without an error, its remaining
        iterations never run, and a synch PBT fit can then hang, the other
        trials PAUSED at the next interval (ray-project/ray#57906; a fix
        proposed upstream, ray-project/ray#61448, caches a PAUSE instead). Here the decision is
        dropped, whichever it is: Ray's ``pause_trial`` cleared the trial's
        before this call, the pause is done and the actor gone, so nothing is
        left to act on (a synch PBT replay pauses the same way).
        """
        super()._schedule_trial_pause(trial, should_checkpoint=should_checkpoint)
        fixed = getattr(self, "_rtt_fixed_pause", False)  # set once __init__ ends
        if fixed and not should_checkpoint and trial.status == _Trial.PAUSED:
            self._cached_trial_decisions.pop(trial.trial_id, None)

    def _schedule_trial_save(self, trial: Any, result: Optional[dict] = None) -> Any:
        """Extends Ray's ``TuneController._schedule_trial_save`` (Tune's loop: driver,
        or the Ray Client Tuner actor): the save's ``ObjectRef`` is kept until
        Tune records the save (:meth:`_on_saving_result`), for
        :meth:`_schedule_trial_stop`."""
        future = super()._schedule_trial_save(trial, result=result)
        ref = getattr(future, "future", None)
        if getattr(self, "_rtt_fixed_pause", False) and isinstance(ref, ray.ObjectRef):
            self.__dict__.setdefault("_rtt_saves", {}).setdefault(
                trial.trial_id, []
            ).append(ref)
        return future

    def _on_saving_result(self, trial: Any, checkpoint_value: Any) -> None:
        """Extends Ray's ``TuneController._on_saving_result`` (Tune's loop: driver, or
        the Ray Client Tuner actor): the trial's oldest save kept by
        :meth:`_schedule_trial_save` is recorded (an actor's saves end in order)."""
        saves = getattr(self, "_rtt_saves", {}).get(trial.trial_id)
        if saves:
            saves.pop(0)
        super()._on_saving_result(trial, checkpoint_value)

    def _schedule_trial_stop(
        self, trial: Any, exception: Optional[Exception] = None
    ) -> None:
        """Extends Ray's ``TuneController._schedule_trial_stop``; runs in Tune's loop
        (driver, or the Ray Client Tuner actor).

        Ray drops the saves a class trainable's actor has not had recorded when
        it stops (or caches) that actor: PBT exploiting a trial that is saving,
        or a synch PBT interval whose better trial PBT saves again while its
        earlier save is being recorded (recording that one clears
        ``saving_to``, then its PAUSE stops the actor). The actor still
        finishes them and writes the folders of the trial's next indices; Ray
        started the trial's next actor at the first of them, which wrote its
        checkpoints into them: checkpoints overwritten, among them the one a
        PBT exploit was cloning. Here, with a sequential index, the trial's
        index moves past each save kept by :meth:`_schedule_trial_save` and
        not recorded, unless it failed (a gap in the numbering if it fails
        later). Not covered: a metric or callable index, whose names the next
        actor renders from its metrics.
        """
        dropped = self._dropped_saves(trial)
        super()._schedule_trial_stop(trial, exception=exception)
        if not dropped:
            return
        trainable_cls = trial.get_trainable_cls()
        if isinstance(trainable_cls, type) and issubclass(trainable_cls, FunctionTrainable):
            return  # its save hands back the latest reported checkpoint: no folder
        storage = trial.storage
        if getattr(storage, "checkpoint_index_policy", "sequential") == "sequential":
            storage.current_checkpoint_index += dropped

    def _dropped_saves(self, trial: Any) -> int:
        """How many of the trial's saves kept by :meth:`_schedule_trial_save` Tune has
        not recorded and did not fail (forgotten here: the trial's actor stops)."""
        count = 0
        for ref in getattr(self, "_rtt_saves", {}).pop(trial.trial_id, ()):
            ready, _ = ray.wait([ref], timeout=0, fetch_local=False)
            if ready:
                try:
                    ray.get(ref, timeout=0)
                except Exception:  # the save failed: no folder of its own
                    continue
            count += 1
        return count


@contextlib.contextmanager
def tune_controller_fixed(data_cpus: Optional[DataCpus] = None) -> Iterator[None]:
    """Tune's controllers made in this thread within the block drop the STOP
    that a pause while saving leaves, and remove no placement group while it
    is being created (:class:`_TuneController`); with ``data_cpus``, their trials
    leave their Ray Data pipelines CPUs (:class:`_TrialsLeavingDataCpus`).

    Patches ``ray.tune.tune.TuneController`` (the name ``tune.run`` makes its
    controller with) once, with a subclass that behaves as Ray's outside such
    a block: a plain ``ray.tune.Tuner`` in this process keeps Ray's behaviour.
    Runs on the driver (or the Ray Client Tuner actor), for a fit.
    """
    import ray.tune.tune as tune_module

    with _CONTROLLER_PATCH_LOCK:
        if not getattr(tune_module.TuneController, "_rtt_patched", False):
            tune_module.TuneController = _TuneController
    token = _FIXED.set(True)
    data_token = _DATA_CPUS.set(data_cpus)
    try:
        yield
    finally:
        _DATA_CPUS.reset(data_token)
        _FIXED.reset(token)
