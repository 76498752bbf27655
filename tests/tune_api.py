"""Tune/Train names that moved between Ray releases, so the suite runs on 2.40 .. 2.60.

Ray 2.50 added ``ray.tune.RunConfig``/``CheckpointConfig``/``FailureConfig``/
``Checkpoint``/``report``/``get_checkpoint``; before it, Tune used Train V1's.
"""

import ray.train
import ray.tune

RunConfig = getattr(ray.tune, "RunConfig", ray.train.RunConfig)
FailureConfig = getattr(ray.tune, "FailureConfig", ray.train.FailureConfig)
CheckpointConfig = getattr(ray.tune, "CheckpointConfig", ray.train.CheckpointConfig)
Checkpoint = getattr(ray.tune, "Checkpoint", ray.train.Checkpoint)
report = getattr(ray.tune, "report", ray.train.report)
get_checkpoint = getattr(ray.tune, "get_checkpoint", ray.train.get_checkpoint)
