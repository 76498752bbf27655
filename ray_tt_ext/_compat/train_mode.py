"""Train V1 or Train V2: which one runs in this process, and V2 config objects converted to V1."""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any

from packaging.version import Version
from ray.air.config import ScalingConfig as AirScalingConfig

from ray_tt_ext._compat.versions import (
    MAX_RAY_VERSION,
    RAY_VERSION,
    TuneCheckpointConfig,
    TuneFailureConfig,
    TuneRunConfig,
    UnsupportedRayVersionError,
)
from ray_tt_ext._env import V2_ENV_VAR, train_v1_activated_by

# ---------------------------------------------------------------------------
# Train V2 detection after the fact.
# ---------------------------------------------------------------------------


class TrainV2EnabledError(RuntimeError):
    """Ray Train V2 is active where ray_tt_ext needs Train V1."""


def train_v2_enabled() -> bool:
    """What this process's Ray will do now (Ray's own check, read each call)."""
    try:
        from ray.train.v2._internal.constants import is_v2_enabled
    except ImportError:  # Ray without Train V2: always V1.
        return False
    return bool(is_v2_enabled())


_FIX = (
    f"leave {V2_ENV_VAR} unset (ray_tt_ext then sets it to 0 when its first Train V1 name is "
    f"taken, e.g. `from ray_tt_ext import Tuner`) or `export {V2_ENV_VAR}=0` before "
    "Python starts."
)


def ensure_train_v1(*objects: Any) -> None:
    """Fail fast, with the fix, when Train V2 would break a ray_tt_ext call.

    Runs on the driver where a V1 trainer enters (trainer construction, a
    Tuner given a trainer), and in the coordinator actor before the trainer is
    built. Function and class trainables never need it. ``objects`` are config
    objects that could not be converted by :func:`to_train_v1` (a trainer that
    is not ray_tt_ext's was given Train V2 config objects).
    """
    if train_v2_enabled():
        raise TrainV2EnabledError(
            f"Ray Train V2 is enabled ({V2_ENV_VAR}="
            f"{os.environ.get(V2_ENV_VAR, '<unset>')!s}), but this is a Ray Train V1 "
            f"trainer (Tuner(trainer) is Train V1's API). Fix: {_FIX} For Ray's "
            "default Train V2 stack, use ray_tt_ext.v2.Tuner with ray_tt_ext.v2's trainers."
        )
    v2_types = _train_v2_config_types()
    for obj in objects:
        if v2_types and isinstance(obj, tuple(v2_types.values())):
            name = type(obj).__name__
            raise TrainV2EnabledError(
                f"Got a Ray Train V2 `{name}`. It comes from `from ray.train import "
                f"{name}` run before the first Train V1 `ray_tt_ext` name while {V2_ENV_VAR} was unset, "
                f"so `ray.train` bound its Train V2 classes. ray_tt_ext's trainers "
                f"convert it for you; Ray's own V1 trainers need the V1 class. Fix: "
                f"use a ray_tt_ext trainer, or `ray.tune.{name}`/`ray.air.config.{name}`, "
                f"or {_FIX}"
            )


def _train_v2_config_types() -> dict[str, type]:
    """Train V2's config classes by name, if this process loaded them."""
    module = sys.modules.get("ray.train.v2.api.config")
    if module is None:
        return {}
    names = ("RunConfig", "ScalingConfig", "CheckpointConfig", "FailureConfig")
    return {
        n: getattr(module, n) for n in names if isinstance(getattr(module, n, None), type)
    }


def _v1_config_classes() -> dict[str, type]:
    return {
        "RunConfig": TuneRunConfig,
        "ScalingConfig": AirScalingConfig,
        "CheckpointConfig": TuneCheckpointConfig,
        "FailureConfig": TuneFailureConfig,
    }


def to_train_v1(obj: Any) -> Any:
    """A Train V2 config object as its Train V1 class, field by field; else ``obj``.

    ``from ray import train`` before the first Train V1 ``ray_tt_ext`` name (the variable still
    unset on Ray 2.51+) binds ``train.RunConfig``, ``ScalingConfig``,
    ``CheckpointConfig`` and ``FailureConfig`` to Train V2's classes. Their
    common fields carry over (nested configs too); a V2-only setting that V1
    cannot honour, left at a value other than its default, is an error naming
    it. Runs wherever a ray_tt_ext trainer or Tuner is built (driver, and the
    coordinator actor).
    """
    v2_types = _train_v2_config_types()
    name = type(obj).__name__
    v2_cls = v2_types.get(name)
    if v2_cls is None or type(obj) is not v2_cls:
        return obj
    v1_cls = _v1_config_classes()[name]
    v1_fields = {f.name for f in dataclasses.fields(v1_cls)}
    deprecated = getattr(sys.modules["ray.train.v2.api.config"], "_DEPRECATED", object())
    baseline = v2_cls()  # V2's defaults, after its __post_init__
    kwargs = {}
    for field in dataclasses.fields(obj):
        value = getattr(obj, field.name)
        if value is deprecated or (isinstance(deprecated, str) and value == deprecated):
            continue  # V2's marker for "not set": V1's default applies
        if field.name in v1_fields:
            kwargs[field.name] = to_train_v1(value)
            continue
        if value is None or value == getattr(baseline, field.name, dataclasses.MISSING):
            continue  # left at its default (as V2's own __post_init__ fills it in)
        raise TrainV2EnabledError(
            f"`{name}({field.name}={value!r})` is a Ray Train V2 setting that the Train "
            f"V1 trainers ray_tt_ext extends cannot honour (this `{name}` is V2's: "
            f"`ray.train` was imported before Train V1 was turned on). Fix: drop `{field.name}`, "
            f"or use Ray's Train V2 trainers (outside a Tuner) for it."
        )
    if name == "RunConfig" and kwargs.get("callbacks"):
        raise TrainV2EnabledError(
            "`RunConfig(callbacks=...)` of Ray Train V2 holds V2 callbacks, which Tune "
            "(Train V1) cannot run. Fix: pass Tune callbacks in `ray.tune.RunConfig`."
        )
    return v1_cls(**kwargs)


class TrainV2DisabledError(RuntimeError):
    """``ray_tt_ext.v2`` was used where Ray Train V2 is off (or absent)."""


#: The first Ray release that turns Train V2 on by default (ray_tt_ext.v2's floor).
MIN_TRAIN_V2_RAY_VERSION = Version("2.51.0")


def ensure_train_v2(what: str) -> None:
    """Fail fast, with the fix, when ``ray_tt_ext.v2`` is used without Train V2.

    Runs where a ``ray_tt_ext.v2`` trainer or Tuner is built (driver, or the
    Tune trial actor that builds a V2 trainer).
    """
    if RAY_VERSION.release < MIN_TRAIN_V2_RAY_VERSION.release:
        raise UnsupportedRayVersionError(
            f"{what} needs ray>={MIN_TRAIN_V2_RAY_VERSION} (Ray Train V2 by default); "
            f"ray=={RAY_VERSION} is installed. Fix: pip install "
            f"'ray[tune,train]>={MIN_TRAIN_V2_RAY_VERSION},<{MAX_RAY_VERSION}', or use "
            "the Train V1 integration (`from ray_tt_ext import Tuner, ...`)."
        )
    if train_v2_enabled():
        return
    by = train_v1_activated_by()
    cause = (
        f"ray_tt_ext set it when `{by}` was first used in this process: the top-level "
        "`ray_tt_ext` names are the Train V1 integration. Fix: take every name from "
        "`ray_tt_ext.v2` in a Train V2 process (it has Tuner, CheckpointConfig, "
        "inspect_payload and the errors too)."
        if by
        else f"Fix: unset {V2_ENV_VAR} (Train V2 is Ray's default) or set it to 1."
    )
    raise TrainV2DisabledError(
        f"{what} runs on Ray Train V2, but Train V2 is off in this process "
        f"({V2_ENV_VAR}={os.environ.get(V2_ENV_VAR)}). {cause}"
    )


def is_train_v2_trainer(obj: Any) -> bool:
    """Whether ``obj`` is a Ray Train V2 trainer (never imports Train V2 itself)."""
    module = sys.modules.get("ray.train.v2.api.data_parallel_trainer")
    return module is not None and isinstance(obj, module.DataParallelTrainer)


def train_v1_runtime_env_vars() -> dict[str, str]:
    """Env vars a remote process needs to run Train V1 code."""
    return {V2_ENV_VAR: "0"}
