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

import dataclasses
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


def save_experiment_state(controller: Any, wait_for_ray: bool = False) -> bool:
    """Save the experiment's state to storage now and wait until it is there, so
    that ``Tuner.restore`` never finds a checkpoint it names deleted. ``False``
    when the upload failed (and a warning), or, not trying, while an upload of
    Ray's runs (it holds an older state and could land after this one);
    ``wait_for_ray``: wait for that upload to end instead.

    Ray's ``TuneController.save_to_dir`` writes the experiment's state into the
    driver's staging folder (inside Ray's ``out_of_band_serialize_dataset``, as
    Ray's own saves are), and the files of that folder's top level go up: the
    ones ``Tuner.restore`` reads together (Ray's
    ``_ExperimentCheckpointManager.sync_down_experiment_state``: ``.json`` and
    ``.pkl``, the searcher's and the callbacks' state beside
    ``experiment_state-<session>.json``), the state file last. Not the trials'
    result files, which Ray's ``TuneController.checkpoint(force=True)`` would
    upload too (hundreds of requests per save on S3). On a local path each file
    is written beside and renamed (a killed driver leaves no half of one)."""
    storage = controller._checkpoint_manager._storage
    earlier = getattr(storage.syncer, "_sync_process", None)
    if earlier is not None and earlier.is_running:
        if not wait_for_ray:
            # On S3 Ray's whole-folder upload takes seconds, and Tune's loop would
            # stand still: the deletions wait for a later step instead.
            logger.debug("Ray's upload of the experiment's state is running: not now.")
            return False
        try:
            storage.syncer.wait()
        except Exception as e:  # its own error; a timeout leaves it running
            logger.debug("Ray's upload of the experiment's state failed: %s", e)
        if earlier.is_running:
            return False
    name = controller.experiment_state_file_name
    staging = storage.experiment_driver_staging_path
    fs = storage.storage_filesystem
    try:
        with out_of_band_serialize_dataset():
            controller.save_to_dir()
        files = sorted(
            f
            for f in os.listdir(staging)
            if f.endswith((".json", ".pkl"))
            and not f.startswith(".")  # a temporary file of Ray's
            and f != name
            and os.path.isfile(os.path.join(staging, f))
        )
        for file_name in [*files, name]:
            with open(os.path.join(staging, file_name), "rb") as f:
                data = f.read()
            target = posixpath.join(storage.experiment_fs_path, file_name)
            if getattr(fs, "type_name", "") == "local":
                partial = f"{target}.ray_tt_ext_partial"
                with open(partial, "wb") as f:
                    f.write(data)
                os.replace(partial, target)
            else:
                with fs.open_output_stream(target) as f:
                    f.write(data)
    except Exception as e:  # the filesystem's own error, whatever it is
        logger.warning(
            "Saving the experiment's state failed (%s: %s); the sweep's retention "
            "deletes nothing until a save succeeds.",
            type(e).__name__,
            e,
        )
        return False
    return True


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
