"""Tune's result logs kept whole when a trial restarts (driver).

Ray Tune's ``JsonLoggerCallback`` and ``CSVLoggerCallback`` write a trial's
``result.json`` and ``progress.csv`` in the driver's staging folder, which Tune
copies to the storage path every so often. Each time a trial with a checkpoint
(re)starts, both first copy the storage path's file back over the driver's:
a trial that PBT paused and resumed loses every row reported since the last
copy, and ``Result.metrics_dataframe`` lacks them (plain ``ray.tune.Tuner``
on Ray 2.60, PBT over 6 steps: 4 of 6 rows). Within one fit the driver's
file is never older than the storage path's, so these loggers copy the file
back only when the driver has none (``Tuner.restore`` in a new process).
"""

from __future__ import annotations

import os
from typing import Any, Optional

from ray_tt_ext._compat import CSVLoggerCallback, JsonLoggerCallback

#: Ray's switch that leaves out its default loggers; ours are left out with it.
_NO_AUTO_LOGGERS_ENV_VAR = "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"


class _DriverCopyFirst:
    def _restore_from_remote(self, file_name: str, trial: Any) -> None:
        """Copy ``file_name`` from the storage path only if the driver has none.

        Overrides Ray's ``LoggerCallback._restore_from_remote``; runs on the
        driver (or the Ray Client Tuner actor), when a trial (re)starts.
        """
        if os.path.exists(os.path.join(trial.local_path, file_name)):
            return
        super()._restore_from_remote(file_name, trial)  # type: ignore[misc]


class JsonLogger(_DriverCopyFirst, JsonLoggerCallback):
    """Ray's ``JsonLoggerCallback`` (``result.json``), whole across restarts."""


class CSVLogger(_DriverCopyFirst, CSVLoggerCallback):
    """Ray's ``CSVLoggerCallback`` (``progress.csv``), whole across restarts."""


def with_whole_result_logs(callbacks: Optional[list[Any]]) -> Optional[list[Any]]:
    """``callbacks`` with :class:`JsonLogger` and :class:`CSVLogger` in place
    of the Ray loggers Tune would add (driver).

    A logger of the kind already in ``callbacks`` (the user's) is left as it
    is, and so is everything when ``TUNE_DISABLE_AUTO_CALLBACK_LOGGERS=1``:
    Tune adds its own loggers only where these are missing.
    """
    if os.environ.get(_NO_AUTO_LOGGERS_ENV_VAR, "0") == "1":
        return callbacks
    callbacks = list(callbacks or [])
    for ray_cls, ours in ((CSVLoggerCallback, CSVLogger), (JsonLoggerCallback, JsonLogger)):
        if not any(isinstance(c, ray_cls) for c in callbacks):
            callbacks.append(ours())
    return callbacks
