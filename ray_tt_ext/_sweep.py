"""Checkpoint retention over the whole sweep, not per trial (driver, or the Ray
Client Tuner actor).

Ray Tune's ``CheckpointConfig(num_to_keep=k)`` keeps ``k`` checkpoints for
*each* trial, so a sweep of 200 trials keeps ``200 k`` until it ends.
``ray_tt_ext.CheckpointConfig(sweep_num_to_keep=n, sweep_max_bytes=b)`` keeps,
at every moment of the sweep:

* the ``n`` best checkpoints over all trials (ranked by
  ``checkpoint_score_attribute``/``checkpoint_score_order``, else by
  ``TuneConfig(metric, mode)``), within ``b`` bytes beyond the protected ones;
* protected: the latest checkpoint of every trial that may still run
  (pending, running, paused by a scheduler, errored: a retry or
  ``Tuner.restore(resume_errored=True)`` resumes from it; PBT's exploit gives
  a trial its donor's checkpoint as its latest), and each checkpoint PBT may
  still exploit;

and deletes the rest while the sweep runs. One :class:`SweepRetention` (a Tune
callback, in Tune's loop) decides after each step in which a trial reported,
saved, started, stopped or failed: it records the decision in the experiment
folder (:data:`DELETING`), drops the checkpoints from Tune's record of their
trials (``ResultGrid`` never names a deleted folder), and, when the
experiment's state on storage may name one of them, saves the experiment's
state and uploads it (``Tuner.restore`` never finds a checkpoint it names
deleted); then it deletes the folders. The experiment's state reaches storage
only through uploads of ray_tt_ext's, one at a time in Tune's loop (after each
of Tune's saves, and before such a deletion): Ray's own upload of
the experiment folder, in a thread of its own, leaves it out, so no older
state lands after a deletion, and no deletion waits for Ray's upload
(``_compat.tune_checkpoints.take_state_upload``). ``Tuner.restore``
after a kill deletes what a decision in flight left, unless the restored state
still names it. Nothing is deleted outside the experiment folder, and no
symbolic link is followed.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import math
import numbers
import os
import posixpath
import re
import shutil
import time
from typing import Any, Optional

import pyarrow.fs
import ray.tune

from ray_tt_ext._compat import tune_checkpoints as _tune
from ray_tt_ext._naming import DEFAULT_DIR_NAME_TEMPLATE, name_pattern

logger = logging.getLogger("ray_tt_ext")

#: The names Tune (``checkpoint_000007``) and Ray Train V2
#: (``checkpoint_<date>_<time>.<µs>``) give checkpoints by default.
_DEFAULT_NAMES = re.compile(r"^checkpoint_(\d{6}|\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d\.\d{6})$")
#: The decision in flight, in the experiment folder: the checkpoints it deletes.
DELETING = ".ray_tt_ext_sweep_deleting.json"


@dataclasses.dataclass(frozen=True)
class SweepPolicy:
    """What the sweep keeps: the ``num_to_keep`` best within ``max_bytes``,
    ranked by ``metric`` (``mode``: ``"max"`` or ``"min"``)."""

    num_to_keep: Optional[int]
    max_bytes: Optional[int]
    metric: str
    mode: str

    def score(self, metrics: dict) -> tuple[bool, float]:
        """A checkpoint's rank (higher is better): a missing, non-numeric or NaN
        metric ranks below every number."""
        value: Any = metrics
        for part in self.metric.split("/"):
            value = value.get(part) if isinstance(value, dict) else None
        if value is None and self.metric in metrics:
            value = metrics[self.metric]
        if not isinstance(value, numbers.Real) or isinstance(value, bool):
            return (False, -math.inf)
        value = float(value)
        if math.isnan(value):
            return (False, -math.inf)
        return (True, value if self.mode == "max" else -value)


def sweep_policy(
    checkpoint_config: Any, tune_config: Any, tuner: str = "ray_tt_ext.Tuner"
) -> Optional[SweepPolicy]:
    """The sweep's retention of ``checkpoint_config`` (``None``: Tune's per-trial
    retention only). Raises ``ValueError`` when nothing ranks the checkpoints."""
    num = getattr(checkpoint_config, "sweep_num_to_keep", None)
    max_bytes = getattr(checkpoint_config, "sweep_max_bytes", None)
    if num is None and max_bytes is None:
        return None
    metric = checkpoint_config.checkpoint_score_attribute
    mode = checkpoint_config.checkpoint_score_order
    if metric is None:
        metric = getattr(tune_config, "metric", None)
        mode = getattr(tune_config, "mode", None)
        if metric is None or mode is None:
            missing = "mode" if metric is not None else "metric"
            raise ValueError(
                f"{tuner}: CheckpointConfig(sweep_num_to_keep={num!r}, "
                f"sweep_max_bytes={max_bytes!r}) keeps the sweep's best checkpoints, "
                "but nothing says which are best: CheckpointConfig has no "
                f"checkpoint_score_attribute and TuneConfig has no {missing}. Fix: set "
                "CheckpointConfig(checkpoint_score_attribute='loss', "
                "checkpoint_score_order='min') (any reported metric), or "
                "TuneConfig(metric='loss', mode='min') (a scheduler's or search "
                "algorithm's own metric is not read)."
            )
    return SweepPolicy(num, max_bytes, metric, mode)


class SweepRetention(ray.tune.Callback):
    """The sweep's retention, in Tune's loop (driver, or the Ray Client Tuner
    actor); see the module's docstring. One per fit."""

    def __init__(
        self,
        policy: SweepPolicy,
        scheduler: Any = None,
        runs_resume_unrecorded: bool = False,
    ) -> None:
        self._policy = policy
        self._scheduler = scheduler
        # ray_tt_ext.v2.Tuner: a trial's run resumes from a checkpoint it
        # recorded and Tune had not (see v2._controller.TrialController._replay).
        self._runs_resume_unrecorded = runs_resume_unrecorded
        self._statuses: dict[str, str] = {}  # trial id -> status at the last decision
        # The checkpoints the experiment's state on storage may name: those of the
        # last save that reached storage, and of each save since whose upload failed.
        self._saved: set[str] = set()
        self._controller: Any = None
        self._dirty = True
        self._recovered = False
        self._ended = False  # no trial may run: the last folders were listed
        # Dropped from the records, not deleted yet: the state's upload failed.
        self._pending: set[str] = set()
        # After a failed upload, the next is tried no sooner than _retry_at
        # (time.monotonic()), _backoff_s after it (doubled each time, to 30 s).
        self._retry_at = 0.0
        self._backoff_s = 0.0
        self._written: list[str] = []  # the last decision written (DELETING)
        self._seen = itertools.count()
        self._order: dict[str, int] = {}  # path -> when the sweep first saw it
        self._sizes: dict[str, int] = {}
        self._never: set[str] = set()  # not deletable (outside the folder): kept
        self._warned_budget = False

    # -- Tune's hooks ------------------------------------------------------------

    def attach_controller(self, controller: Any) -> None:
        """Called by ray_tt_ext's ``TuneController`` (``_compat.tune_loop``) as it is
        made: the experiment's state is saved through it before any deletion,
        and uploaded only by ray_tt_ext from now on (Ray's upload of the
        experiment folder leaves it out, and this callback's decision file)."""
        self._controller = controller
        _tune.take_state_upload(controller, left_out=(DELETING,))

    def experiment_state_saved(self, trials: list, on_storage: bool = False) -> None:
        """Called by ray_tt_ext's ``TuneController.save_to_dir``: the state saved
        names these trials' checkpoints, and it is the one on storage
        (``on_storage``: its upload, the only one of the experiment's state,
        ended) or may be."""
        named = {c.path for t in trials for c in _tune.trial_checkpoints(t)}
        self._saved = named if on_storage else self._saved | named
        if on_storage:  # the storage is back: no backoff for the next upload
            self._retry_at, self._backoff_s = 0.0, 0.0

    def on_step_begin(self, iteration: int, trials: list, **info: Any) -> None:
        if not self._recovered:
            self._recovered = True
            # A restored fit: the state it was restored from names these.
            self.experiment_state_saved(trials)
            self._finish_decision_in_flight(trials)

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        # No decision once Tune's loop ended (on_experiment_end): an interrupted
        # sweep's trials are stopped then, and stay resumable.
        if self._dirty:
            self._dirty = False
            self.decide(trials)

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        """Tune's loop ended: deletions still waiting (the upload of the
        experiment's state failed) are done, once a save that no longer names
        them is on storage. Nothing is decided anew: an interrupted sweep's
        trials stay resumable."""
        where = _storage(trials)
        if not self._pending or where is None or self._controller is None:
            return
        if self._pending & self._saved:
            if not _tune.save_experiment_state(self._controller):
                return  # left on storage; DELETING lists them for Tuner.restore
        for path in sorted(self._pending):
            self._delete(where[0], path)
        self._pending = set()

    def _changed(self, *args: Any, **kwargs: Any) -> None:
        self._dirty = True

    on_trial_start = on_trial_restore = on_trial_save = on_checkpoint = _changed
    on_trial_result = on_trial_complete = on_trial_error = _changed

    # -- the decision ------------------------------------------------------------

    def decide(self, trials: list) -> list[str]:
        """Delete what the sweep no longer keeps; returns the deleted paths."""
        where = _storage(trials)
        if where is None or self._controller is None:  # nothing deleted unsaved
            return []
        fs, root = where
        scores: dict[str, tuple[bool, float]] = {}
        owners: dict[str, list[Any]] = {}
        protected: set[str] = set()
        running = [t for t in trials if t.status in _tune.MAY_RUN]
        if self._scheduler is not None and running:  # PBT may still exploit
            protected |= _tune.scheduler_checkpoints(self._scheduler)
        for trial in trials:
            for checkpoint in _tune.trial_checkpoints(trial):
                path = checkpoint.path
                owners.setdefault(path, []).append(trial)
                scores.setdefault(path, self._policy.score(checkpoint.metrics))
                self._order.setdefault(path, next(self._seen))
                if checkpoint.latest and trial.status != _tune.FINISHED:
                    protected.add(path)
        unrecorded = self._unrecorded(fs, trials, set(owners), all_ended=not running)
        kept = protected | self._never
        ranked = sorted(scores, key=lambda p: (scores[p], self._order[p]), reverse=True)
        best = (
            ranked
            if self._policy.num_to_keep is None
            else ranked[: self._policy.num_to_keep]
        )
        if self._policy.max_bytes is None:
            kept |= set(best)
        else:
            kept |= self._within_budget(fs, best, protected & set(scores))
        doomed = [p for p in scores if p not in kept]
        doomed += [p for p in unrecorded if p not in kept]
        doomed = [p for p in doomed if self._deletable(fs, root, p)]
        if not doomed and not self._pending:
            return []
        gone = set(doomed) | (self._pending - kept)
        if sorted(gone) != self._written:  # again only when what it deletes changed
            self._write_decision(fs, root, sorted(gone))
            self._written = sorted(gone)
        changed = list({id(t): t for p in doomed for t in owners.get(p, ())}.values())
        for trial in changed:
            _tune.drop_checkpoints(trial, gone)
        # Every trial that may run too: PBT's exploit changes its latest without
        # Tune writing its record again.
        _tune.records_changed(self._controller, [*changed, *running])
        # The state on storage may name one: this one goes up first (Ray's upload
        # of the staging folder never carries it: none lands later).
        if gone & self._saved and not self._saved_now():
            self._pending = gone  # deleted once an upload succeeded
            self._dirty = True
            return []
        self._pending = set()
        for path in sorted(gone):
            self._delete(fs, path)
            self._sizes.pop(path, None)
        logger.debug(
            "Sweep retention deleted %d checkpoint(s): %s", len(gone), sorted(gone)
        )
        return sorted(gone)

    def _saved_now(self) -> bool:
        """Save and upload the experiment's state; after a failed upload, not
        again before the backoff ended (a storage that is down is not asked at
        every step of Tune's loop; Tune's own saves, every 10 s or so, upload
        it meanwhile)."""
        now = time.monotonic()
        if now < self._retry_at:
            return False
        if _tune.save_experiment_state(self._controller):
            return True  # experiment_state_saved ended the backoff
        self._backoff_s = min(max(2 * self._backoff_s, 1.0), 30.0)
        self._retry_at = now + self._backoff_s
        return False

    def _unrecorded(
        self, fs: Any, trials: list, recorded: set[str], all_ended: bool
    ) -> list[str]:
        """Checkpoint folders that no trial's record names, in the folders of the
        trials that stopped since the last decision, and once more in every
        trial's folder when the last trial ended (``all_ended``): a checkpoint a
        trial wrote just before Tune paused or stopped it, whose report Tune
        never processed (PBT's pauses leave them), or one the driver did not
        record before it died. One listing per trial and stop. Only folders
        named as the trial's checkpoints are (by the template of
        ``CheckpointConfig(checkpoint_dir_name=...)``; a callable's are left).
        Under ``ray_tt_ext.v2.Tuner`` only once a trial is finished: its run
        resumes from the checkpoint it recorded last, whether Tune had it or not."""
        found: list[str] = []
        last_look = all_ended and not self._ended
        self._ended = all_ended
        for trial in trials:
            status, before = trial.status, self._statuses.get(trial.trial_id)
            self._statuses[trial.trial_id] = status
            if last_look:
                before = None
            stopped = status == _tune.FINISHED or (
                not self._runs_resume_unrecorded and status in _tune.STOPPED
            )
            folder = _tune.trial_folder(trial)
            policy = getattr(trial.storage, "checkpoint_dir_name_policy", None)
            pattern = name_pattern(policy or DEFAULT_DIR_NAME_TEMPLATE)
            if policy in (None, DEFAULT_DIR_NAME_TEMPLATE):  # Tune's or Train V2's names
                pattern = _DEFAULT_NAMES
            if not stopped or status == before or folder is None or pattern is None:
                continue
            try:
                infos = fs.get_file_info(
                    pyarrow.fs.FileSelector(folder, allow_not_found=True)
                )
            except OSError as e:
                logger.debug("Could not list %s: %s", folder, e)
                continue
            found += [
                i.path.rstrip("/")
                for i in infos
                if i.type == pyarrow.fs.FileType.Directory
                and pattern.match(i.base_name)
                and i.path.rstrip("/") not in recorded
            ]
        return found

    def _within_budget(self, fs: Any, best: list[str], protected: set[str]) -> set[str]:
        """The best checkpoints (in rank order) kept while everything kept stays
        within ``max_bytes``; the protected ones always are."""
        budget = self._policy.max_bytes
        total = sum(self._size(fs, p) for p in protected)
        if total > budget and not self._warned_budget:
            self._warned_budget = True
            logger.warning(
                "CheckpointConfig(sweep_max_bytes=%d): the %d checkpoint(s) that "
                "unfinished trials still need take %d bytes, more than the budget; "
                "none of them is deleted, and no other checkpoint is kept. Fix: raise "
                "sweep_max_bytes, or run fewer trials at a time "
                "(TuneConfig(max_concurrent_trials=...)).",
                budget,
                len(protected),
                total,
            )
        kept: set[str] = set()
        for path in best:
            if path in protected:
                continue
            size = self._size(fs, path)
            if total + size > budget:
                break
            kept.add(path)
            total += size
        return kept

    def _size(self, fs: Any, path: str) -> int:
        """Bytes in a checkpoint folder: one listing, once."""
        if path not in self._sizes:
            try:
                infos = fs.get_file_info(pyarrow.fs.FileSelector(path, recursive=True))
                self._sizes[path] = sum(
                    i.size or 0 for i in infos if i.type == pyarrow.fs.FileType.File
                )
            except (OSError, FileNotFoundError):
                self._sizes[path] = 0
        return self._sizes[path]

    def _deletable(self, fs: Any, root: str, path: str) -> bool:
        """Inside a trial folder of the experiment, reached without a symbolic link."""
        normal = posixpath.normpath(path)
        relative = posixpath.relpath(normal, root) if normal.startswith(root + "/") else ""
        ok = bool(relative) and ".." not in relative.split("/") and "/" in relative
        if ok and _is_local(fs):
            parent = os.path.realpath(os.path.dirname(normal))
            ok = parent.startswith(os.path.realpath(root) + os.sep)
        if not ok:
            self._never.add(path)
            logger.warning(
                "Sweep retention keeps %s: it is not a folder inside a trial folder of "
                "the experiment (%s), and nothing outside is ever deleted.",
                path,
                root,
            )
        return ok

    @staticmethod
    def _delete(fs: Any, path: str) -> None:
        try:
            if _is_local(fs):
                if os.path.islink(path):  # the link goes, never what it points to
                    os.unlink(path)
                else:
                    shutil.rmtree(path)  # links inside are removed, not followed
            else:
                fs.delete_dir(path)  # on S3: one listing, its objects' deletes batched
        except FileNotFoundError:
            pass
        except Exception as e:  # whatever the filesystem raises: the sweep goes on
            try:  # some (GCS) say a folder already gone is an OSError
                gone = fs.get_file_info(path).type == pyarrow.fs.FileType.NotFound
            except Exception:
                gone = False
            if not gone:
                logger.warning("Sweep retention could not delete %s: %s", path, e)

    # -- a decision in flight when the driver died -------------------------------

    def _write_decision(self, fs: Any, root: str, paths: list[str]) -> None:
        """One small write: the paths, relative to the experiment folder (it may move)."""
        relative = [posixpath.relpath(p, root) for p in paths]
        with fs.open_output_stream(posixpath.join(root, DELETING)) as f:
            f.write(json.dumps(relative).encode("utf-8"))

    def _finish_decision_in_flight(self, trials: list) -> None:
        """At the first step of a fit (``Tuner.restore`` after the driver died):
        delete what the last decision chose and had not deleted yet, unless the
        restored state still names it (the decision was not saved: it is made
        again)."""
        where = _storage(trials)
        if where is None:
            return
        fs, root = where
        try:
            with fs.open_input_stream(posixpath.join(root, DELETING)) as f:
                paths = json.loads(f.read().decode("utf-8"))
        except (OSError, FileNotFoundError, ValueError):
            return
        named = {c.path for t in trials for c in _tune.trial_checkpoints(t)}
        for relative in paths:
            path = posixpath.normpath(posixpath.join(root, str(relative)))
            if path not in named and self._deletable(fs, root, path):
                self._delete(fs, path)


def _storage(trials: list) -> Optional[tuple[Any, str]]:
    """``(filesystem, experiment folder)`` of the first trial that has storage."""
    return next((s for s in map(_tune.storage_of, trials) if s is not None), None)


def _is_local(fs: Any) -> bool:
    return getattr(fs, "type_name", "") == "local"
