"""Tune's loop in a fit of ray_tt_ext's Tuners: its controller and its placement
groups (driver, or the Ray Client Tuner actor).

Inside :func:`tune_controller_fixed` (both Tuners' ``fit``), the
``TuneController`` that ``tune.run`` makes is :class:`_TuneController`, whose
resource manager is :class:`_PlacementGroupsRemovedOnceCreated`; a plain
``ray.tune.Tuner`` in the same process keeps Ray's.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from collections.abc import Iterator
from typing import Any

import ray
from ray.air.execution.resources.placement_group import (
    PlacementGroupResourceManager as _RayPlacementGroupResourceManager,
)
from ray.tune.execution.tune_controller import TuneController as _RayTuneController
from ray.tune.experiment import Trial as _Trial

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


# -- Tune's controller: a pause while saving left a STOP (driver) -----------------

_FIXED = contextvars.ContextVar("ray_tt_ext_tune_controller_fixed", default=False)
_CONTROLLER_PATCH_LOCK = threading.Lock()


class _TuneController(_RayTuneController):
    """Ray's ``TuneController`` with :meth:`_schedule_trial_pause` extended and
    its placement groups in :class:`_PlacementGroupsRemovedOnceCreated`; it
    behaves as Ray's unless made inside :func:`tune_controller_fixed`."""

    _rtt_patched = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Extends Ray's ``TuneController.__init__`` (driver, or the Ray Client Tuner
        actor): inside :func:`tune_controller_fixed`, and unless a resource manager
        was given, Tune's placement groups are :class:`_PlacementGroupsRemovedOnceCreated`'s."""
        fixed = _FIXED.get()
        if fixed and kwargs.get("resource_manager_factory") is None:
            kwargs["resource_manager_factory"] = _PlacementGroupsRemovedOnceCreated
        super().__init__(*args, **kwargs)
        self._rtt_fixed_pause = fixed

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


@contextlib.contextmanager
def tune_controller_fixed() -> Iterator[None]:
    """Tune's controllers made in this thread within the block drop the STOP
    that a pause while saving leaves, and remove no placement group while it
    is being created (:class:`_TuneController`).

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
    try:
        yield
    finally:
        _FIXED.reset(token)
