"""Tune names that moved between Ray releases, so the suite runs on 2.40 .. 2.60.

A re-export of ``ray_tt_ext._compat`` (the one place for version-neutral names).
"""

from ray_tt_ext._compat import TuneCheckpoint as Checkpoint
from ray_tt_ext._compat import TuneCheckpointConfig as CheckpointConfig
from ray_tt_ext._compat import TuneFailureConfig as FailureConfig
from ray_tt_ext._compat import TuneRunConfig as RunConfig
from ray_tt_ext._compat import get_checkpoint
from ray_tt_ext._compat import tune_report as report

__all__ = [
    "Checkpoint",
    "CheckpointConfig",
    "FailureConfig",
    "RunConfig",
    "get_checkpoint",
    "report",
]
