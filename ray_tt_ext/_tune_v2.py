"""Ray Tune over Ray's default Train V2 stack: ``ray_tt_ext.v2.Tuner``.

The Tune x Train V2 seam. Runs on the driver (or the Ray Client client); it
builds on the V1 Tuner's machinery (once-only conversion, the payload guard,
the checkpoint policy), but nothing here reaches a Train V2 training worker:
the V2 trainers (``_train_v2``) import neither this module nor the V1 ones.
"""

from __future__ import annotations

from typing import Any

from ray_tt_ext import _compat
from ray_tt_ext._tuner import Tuner as _V1Tuner


class Tuner(_V1Tuner):
    """``ray_tt_ext.Tuner`` for a Train V2 process: reachable without turning V1 on.

    Same arguments as ``ray_tt_ext.Tuner``. Runs function and class trainables
    with the payload guard and the checkpoint policy; Ray's Tune + Train V2
    pattern (a function that builds a V2 trainer with ``TuneReportCallback``
    and calls ``fit()``) runs under it as documented. Under Ray Client its
    Tuner actor keeps the cluster's Train version.

    Raises:
        TrainV2DisabledError: Train V2 is off in this process.
        TypeError: a Train V1 trainer (use ``ray_tt_ext.Tuner``), or a V2
            trainer given directly (tune a function that fits it).
    """

    _TRAIN_V1 = False

    @classmethod
    def _check_trainable(cls, trainable: Any) -> None:
        """Extends ``ray_tt_ext.Tuner._check_trainable``: Train V2 only (driver or client)."""
        _compat.ensure_train_v2("ray_tt_ext.v2.Tuner")
        if isinstance(trainable, _compat.BaseTrainer):
            raise TypeError(
                f"`{type(trainable).__name__}` is a Ray Train V1 trainer; "
                "ray_tt_ext.v2.Tuner runs Tune trainables on Ray's Train V2 stack. Fix: "
                "tune a function that builds a ray_tt_ext.v2 trainer and calls fit(), "
                "or run V1 trainers with ray_tt_ext.Tuner in a process with "
                f"{_compat.V2_ENV_VAR}=0."
            )
        super()._check_trainable(trainable)
