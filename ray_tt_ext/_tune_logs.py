"""Tune's result logs kept whole when a trial restarts (driver).

Ray Tune's ``JsonLoggerCallback`` and ``CSVLoggerCallback`` write a trial's
``result.json`` and ``progress.csv`` in the driver's staging folder, which Tune
copies to the storage path every so often. Each time a trial with a checkpoint
(re)starts, both first copy the storage path's file back over the driver's:
a trial that PBT paused and resumed loses every row reported since the last
copy, and ``Result.metrics_dataframe`` lacks them (a plain ``ray.tune.Tuner``
under PBT too). Once a logger has started a
trial in this fit, the driver's file is the newest there is, so these loggers
copy the storage path's file back only when they start a trial for the first
time in the fit (a restored trial: as Ray does).
"""

from __future__ import annotations

import importlib
import os
from typing import Any, Optional

from ray_tt_ext._compat import CSVLoggerCallback, JsonLoggerCallback

#: Ray's switch that leaves out its default loggers; ours are left out with it.
_NO_AUTO_LOGGERS_ENV_VAR = "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"
#: Ray's list of callbacks Tune adds to every fit (a logger there replaces ours).
_ENV_CALLBACKS_ENV_VAR = "RAY_TUNE_CALLBACKS"


class _DriverCopyFirst:
    def __init__(self) -> None:
        super().__init__()
        #: (trial id, file name) this logger has started in this fit.
        self._started: set[tuple[str, str]] = set()

    def _restore_from_remote(self, file_name: str, trial: Any) -> None:
        """Copy ``file_name`` from the storage path when this logger starts
        ``trial`` for the first time in the fit, as Ray does; not when the
        trial restarts (the driver's file is newer then).

        Overrides Ray's ``LoggerCallback._restore_from_remote``; runs on the
        driver (or the Ray Client Tuner actor), when a trial (re)starts.
        """
        key = (trial.trial_id, file_name)
        if key in self._started and os.path.exists(
            os.path.join(trial.local_path, file_name)
        ):
            return
        self._started.add(key)
        super()._restore_from_remote(file_name, trial)  # type: ignore[misc]


class JsonLogger(_DriverCopyFirst, JsonLoggerCallback):
    """Ray's ``JsonLoggerCallback`` (``result.json``), whole across restarts."""


class CSVLogger(_DriverCopyFirst, CSVLoggerCallback):
    """Ray's ``CSVLoggerCallback`` (``progress.csv``), whole across restarts."""


def with_whole_result_logs(callbacks: Optional[list[Any]]) -> Optional[list[Any]]:
    """``callbacks`` with :class:`JsonLogger` and :class:`CSVLogger` in place
    of the Ray loggers Tune would add (driver).

    A logger of the kind already in ``callbacks`` or ``RAY_TUNE_CALLBACKS``
    (the user's) is left as it is, and so is everything when
    ``TUNE_DISABLE_AUTO_CALLBACK_LOGGERS=1``: Tune adds its own loggers only
    where these are missing.
    """
    if os.environ.get(_NO_AUTO_LOGGERS_ENV_VAR, "0") == "1":
        return callbacks
    callbacks = list(callbacks or [])
    given = [type(c) for c in callbacks] + _env_callback_classes()
    for ray_cls, ours in ((CSVLoggerCallback, CSVLogger), (JsonLoggerCallback, JsonLogger)):
        if not any(issubclass(c, ray_cls) for c in given):
            callbacks.append(ours())
    return callbacks


def _env_callback_classes() -> list[type]:
    """The classes of the callbacks Tune adds from ``RAY_TUNE_CALLBACKS``
    (Ray 2.44+: ``module.Class`` names, comma-separated); one that does not
    import is left to Tune, which reports it."""
    classes = []
    for path in os.environ.get(_ENV_CALLBACKS_ENV_VAR, "").split(","):
        module, _, name = path.strip().rpartition(".")
        try:
            cls = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError, ValueError):
            continue
        if isinstance(cls, type):
            classes.append(cls)
    return classes
