"""Tune's record of each trial's checkpoints, read and changed for the sweep's
retention (``ray_tt_ext._sweep``); driver, or the Ray Client Tuner actor.

Tune keeps a trial's checkpoints in Ray's ``_CheckpointManager`` of the trial
(``Trial.run_metadata.checkpoint_manager``): ``_checkpoint_results`` (what
the trial's own ``num_to_keep`` kept, from which ``Result.best_checkpoints``
is made) and ``_latest_checkpoint_result`` (``Trial.checkpoint``: what a
retry, a restore or ``Result.checkpoint`` uses; PBT's exploit sets it to the
donor's checkpoint). The experiment's state, from which ``Tuner.restore``
rebuilds the trials, is what ``TuneController.save_to_dir`` writes.
"""

from __future__ import annotations

import copy
import dataclasses
import glob
import hashlib
import logging
import os
import posixpath
from typing import Any, Optional

from ray.train._internal.session import _FutureTrainingResult
from ray.tune.experiment import Trial
from ray.tune.impl.out_of_band_serialize_dataset import out_of_band_serialize_dataset

logger = logging.getLogger("ray_tt_ext")

#: A trial in this status never runs again in this fit (an ERROR trial may:
#: ``Tuner.restore(..., resume_errored=True)``).
FINISHED = Trial.TERMINATED
#: A trial in this status has no actor writing into its folder.
STOPPED = (Trial.PAUSED, Trial.TERMINATED, Trial.ERROR)
#: A trial in this status runs again in this fit, or may.
MAY_RUN = (Trial.PENDING, Trial.RUNNING, Trial.PAUSED)


@dataclasses.dataclass(frozen=True)
class TrialCheckpoint:
    """One checkpoint of a trial, as Tune records it."""

    #: The checkpoint's folder on the trial's storage filesystem.
    path: str
    metrics: dict
    #: ``Trial.checkpoint`` (the trial's latest, or the one PBT gave it).
    latest: bool


def path_of(checkpoint: Any) -> str:
    return str(checkpoint.path).rstrip("/")


def trial_checkpoints(trial: Any) -> list[TrialCheckpoint]:
    """The checkpoints Tune records for ``trial``: those its retention kept, then
    its latest (again if it is one of them)."""
    manager = trial.run_metadata.checkpoint_manager
    found = [
        TrialCheckpoint(path_of(r.checkpoint), dict(r.metrics or {}), False)
        for r in manager._checkpoint_results
        if r.checkpoint is not None
    ]
    latest = manager._latest_checkpoint_result
    if latest is not None and latest.checkpoint is not None:
        found.append(
            TrialCheckpoint(path_of(latest.checkpoint), dict(latest.metrics or {}), True)
        )
    return found


def drop_checkpoints(trial: Any, paths: set[str]) -> None:
    """Forget ``paths`` in ``trial``'s record: ``Result.best_checkpoints`` no longer
    lists them, and ``Trial.checkpoint`` (``Result.checkpoint``) is ``None`` if it
    was one of them."""
    manager = trial.run_metadata.checkpoint_manager
    manager._checkpoint_results = [
        r
        for r in manager._checkpoint_results
        if r.checkpoint is None or path_of(r.checkpoint) not in paths
    ]
    latest = manager._latest_checkpoint_result
    if (
        latest is not None
        and latest.checkpoint is not None
        and path_of(latest.checkpoint) in paths
    ):
        manager._latest_checkpoint_result = None
    trial.run_metadata.invalidate_cache()  # the JSON the experiment's state saves


def scheduler_checkpoints(scheduler: Any) -> set[str]:
    """What a scheduler may still restore a trial from: the checkpoint PBT took of
    each trial at its last interval (``PopulationBasedTraining._trial_state``),
    which it reads at an exploit. A save PBT still waits for is not known yet:
    its checkpoint is its trial's latest until then."""
    paths: set[str] = set()
    for state in dict(getattr(scheduler, "_trial_state", None) or {}).values():
        last = getattr(state, "last_checkpoint", None)
        if isinstance(last, _FutureTrainingResult):
            result = last.resolve(block=False)
            last = None if result is None else result.checkpoint
        if last is not None and getattr(last, "path", None):
            paths.add(path_of(last))
    return paths


def records_changed(controller: Any, changed: list) -> None:
    """The next save of the experiment's state writes the ``changed`` trials'
    records again (Ray's ``TuneController._mark_trial_to_checkpoint``: it keeps
    the JSON of the others from their last change)."""
    for trial in changed:
        trial.run_metadata.invalidate_cache()  # PBT's exploit changes it without
        controller._mark_trial_to_checkpoint(trial)


#: Set on a controller whose experiment's state the sweep's retention uploads
#: itself (:func:`take_state_upload`): each file's name, to the digest of what
#: was last uploaded of it.
STATE_TAKEN = "_rtt_state_upload_taken"
#: Set on such a controller: how many uploads in a row failed (one warning each
#: time uploads start failing).
_STATE_FAILURES = "_rtt_state_upload_failures"
#: The attributes :func:`take_state_upload` sets on a controller.
STATE_KEYS = (STATE_TAKEN, _STATE_FAILURES)


class RayUploadWithoutState:
    """Ray's syncer of the experiment (``StorageContext.syncer``), as Tune's
    ``_ExperimentCheckpointManager`` of one controller uses it, with the files of
    the experiment's state left out of Ray's uploads of the driver's staging
    folder: :func:`upload_experiment_state` uploads them, in Tune's loop, after
    each save. Everything else is Ray's syncer (a proxy: its ``wait``, its
    running upload, its other folders).

    Ray uploads the whole staging folder in a thread of its own, every 10 s or
    so (on S3 it takes seconds: every trial's result files). Had that upload
    carried the experiment's state, one started before a deletion could land
    after it, and name a deleted checkpoint: the sweep's deletions would wait
    for it. Left out, as Ray's ``exclude`` patterns (matched against each
    file's path in the staging folder): the files of the experiment's state
    there when the upload starts, any file named as Ray names them
    (``<what>-<session>.json`` or ``.pkl``, which a save may write while Ray
    lists the folder), and ``left_out``."""

    def __init__(
        self, syncer: Any, staging: str, session_suffix: str, left_out: tuple
    ) -> None:
        self._syncer = syncer
        self._staging = os.path.normpath(staging)
        # Patterns of the names Ray gives the files of a save in this session.
        self._patterns = [
            f"*{glob.escape(session_suffix)}{ext}" for ext in (".json", ".pkl")
        ]
        self._patterns += [glob.escape(name) for name in left_out]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_syncer", "_staging", "_patterns"):
            raise AttributeError(name)
        return getattr(self._syncer, name)

    def _excluding(self, local_dir: str, exclude: Optional[list]) -> Optional[list]:
        if os.path.normpath(local_dir) != self._staging:
            return exclude
        names = [glob.escape(f) for f in state_files(local_dir)]
        return [*(exclude or ()), *names, *self._patterns]

    def sync_up(
        self, local_dir: str, remote_dir: str, exclude: Optional[list] = None
    ) -> bool:
        """Extends Ray's ``Syncer.sync_up`` (driver, or the Ray Client Tuner actor:
        Tune's loop, from Ray's ``_ExperimentCheckpointManager.sync_up_experiment_state``):
        an upload of the staging folder leaves out the files the sweep uploads."""
        return self._syncer.sync_up(
            local_dir, remote_dir, exclude=self._excluding(local_dir, exclude)
        )

    def sync_up_if_needed(
        self, local_dir: str, remote_dir: str, exclude: Optional[list] = None
    ) -> bool:
        """Extends Ray's ``Syncer.sync_up_if_needed`` (driver, or the Ray Client Tuner
        actor; Ray's own calls it on a trial's storage, not on this one): the
        same as :meth:`sync_up`, which Ray's would call on its own syncer."""
        return self._syncer.sync_up_if_needed(
            local_dir, remote_dir, exclude=self._excluding(local_dir, exclude)
        )


def state_files(staging: str) -> list[str]:
    """The files of the experiment's state in the driver's staging folder: those
    ``Tuner.restore`` reads together (Ray's
    ``_ExperimentCheckpointManager.sync_down_experiment_state``: the ``.json``
    and ``.pkl`` files of the top level, the searcher's and the callbacks' state
    beside ``experiment_state-<session>.json``), not Ray's temporary ones."""
    try:
        names = os.listdir(staging)
    except FileNotFoundError:
        return []
    return sorted(
        f
        for f in names
        if f.endswith((".json", ".pkl"))
        and not f.startswith(".")
        and os.path.isfile(os.path.join(staging, f))
    )


def take_state_upload(controller: Any, left_out: tuple = ()) -> None:
    """Patches Ray's ``_ExperimentCheckpointManager._storage`` of ``controller``
    (driver, or the Ray Client Tuner actor; at the start of a fit) with a copy
    of the experiment's storage whose ``StorageContext.syncer`` is
    :class:`RayUploadWithoutState`: from now on the experiment's state reaches
    storage only through :func:`upload_experiment_state`, which ray_tt_ext's
    ``TuneController.save_to_dir`` calls after each save; Ray's uploads of the
    staging folder leave it out, and the files named in ``left_out`` (files of
    the caller's own in the experiment folder, which a restore's download of
    the experiment's state copies into the staging folder). The trials'
    storage is Ray's."""
    manager = controller._checkpoint_manager
    storage = copy.copy(manager._storage)
    # experiment_state-<session>.json: Ray's files of a save end in -<session>.
    stem = os.path.splitext(controller.experiment_state_file_name)[0]
    storage.syncer = RayUploadWithoutState(
        storage.syncer,
        storage.experiment_driver_staging_path,
        "-" + stem.split("-", 1)[-1],
        tuple(left_out),
    )
    manager._storage = storage
    setattr(controller, STATE_TAKEN, {})
    setattr(controller, _STATE_FAILURES, 0)


def upload_experiment_state(controller: Any) -> bool:
    """Upload the experiment's state that ``TuneController.save_to_dir`` just wrote
    (a controller given to :func:`take_state_upload`; Tune's loop), and return
    when it is on storage: ``Tuner.restore`` never finds a checkpoint it names
    deleted. The files whose content changed since the last upload go up
    first, the experiment's state file last; on a local path each is written
    beside and renamed (a killed driver leaves no half of one). ``False`` (and
    a warning) when the upload failed: the state on storage is an older one."""
    uploaded: dict = getattr(controller, STATE_TAKEN)  # file name -> its digest
    storage = controller._checkpoint_manager._storage
    name = controller.experiment_state_file_name
    staging = storage.experiment_driver_staging_path
    fs = storage.storage_filesystem
    try:
        files = []
        for file_name in state_files(staging):
            with open(os.path.join(staging, file_name), "rb") as f:
                data = f.read()
            digest = hashlib.sha256(data).digest()
            if file_name == name or uploaded.get(file_name) != digest:
                files.append((file_name, data, digest))
        files.sort(key=lambda f: f[0] == name)  # the state file last
        for file_name, data, digest in files:
            target = posixpath.join(storage.experiment_fs_path, file_name)
            if getattr(fs, "type_name", "") == "local":
                partial = f"{target}.ray_tt_ext_partial"
                with open(partial, "wb") as f:
                    f.write(data)
                os.replace(partial, target)
            else:
                with fs.open_output_stream(target) as f:
                    f.write(data)
            uploaded[file_name] = digest
    except Exception as e:  # the filesystem's own error, whatever it is
        failures = getattr(controller, _STATE_FAILURES, 0)
        setattr(controller, _STATE_FAILURES, failures + 1)
        (logger.debug if failures else logger.warning)(
            "Uploading the experiment's state failed (%s: %s); the sweep's retention "
            "deletes nothing a state on storage may name until an upload succeeds "
            "(tried again at Tune's next saves; failures after this one are "
            "logged at DEBUG).",
            type(e).__name__,
            e,
        )
        return False
    failures = getattr(controller, _STATE_FAILURES, 0)
    if failures:
        logger.warning(
            "Uploaded the experiment's state again, after %d failed upload(s).",
            failures,
        )
        setattr(controller, _STATE_FAILURES, 0)
    return True


def save_experiment_state(controller: Any) -> bool:
    """Save the experiment's state and upload it now (Tune's loop: a controller
    given to :func:`take_state_upload`; ``TuneController.save_to_dir``, inside
    Ray's ``out_of_band_serialize_dataset`` as Ray's own saves are, writes it
    and uploads it). ``False`` when the save or the upload failed (a warning):
    the sweep goes on, as Ray's loop goes on when its own save fails."""
    try:
        with out_of_band_serialize_dataset():
            controller.save_to_dir()
    except Exception as e:  # writing the staging folder, whatever it raised
        logger.warning(
            "Saving the experiment's state failed (%s: %s); the sweep's retention "
            "deletes nothing a state on storage may name until a save succeeds.",
            type(e).__name__,
            e,
        )
        return False
    return bool(getattr(controller, "_rtt_state_on_storage", False))


def storage_of(trial: Any) -> Optional[tuple[Any, str]]:
    """``(filesystem, experiment folder)`` of ``trial``'s storage."""
    storage = getattr(trial, "storage", None)
    if storage is None:
        return None
    return storage.storage_filesystem, storage.experiment_fs_path.rstrip("/")


def trial_folder(trial: Any) -> Optional[str]:
    """The trial's folder on its storage filesystem (Ray's ``StorageContext.trial_fs_path``)."""
    storage = getattr(trial, "storage", None)
    return None if storage is None else storage.trial_fs_path.rstrip("/")
