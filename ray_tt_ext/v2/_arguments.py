"""A Train V2 trainer's constructor arguments as Tune's ``param_space`` (V1's
meaning: its keys are trainer arguments; ``train_loop_config`` and
``scaling_config`` merged key by key), for ``ray_tt_ext.v2.Tuner(trainer)``.

Where each piece runs: the driver reads a trainer's arguments back
(:func:`trainer_kwargs`), checks ``param_space`` (:func:`check_param_space`)
and what a trial reserves (:func:`resource_request`) before anything runs; the
Tune trial actor merges a trial's hyperparameters into them
(:func:`merged_kwargs`). Imported on demand (Ray Train V2's config classes).
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Optional

from ray_tt_ext import _compat
from ray_tt_ext._compat.train_v2 import ScalingConfig

#: Trainer constructor parameter -> the attribute Ray's V2 trainers keep it in
#: (a framework's ``<name>_config``, e.g. ``torch_config``, ``xgboost_config``,
#: is its ``backend_config``).
_ATTRIBUTE_OF = {"dataset_config": "data_config"}
_OWN_CONFIGS = {"train_loop_config", "scaling_config", "run_config", "validation_config"}
#: Parameters that V2 trainers refuse (deprecated): never passed on.
_DEPRECATED = {"resume_from_checkpoint", "metadata"}


def trainer_parameters(trainer_cls: type) -> list[str]:
    """The keyword arguments ``trainer_cls``'s constructor takes (its ``param_space`` keys)."""
    params = inspect.signature(trainer_cls.__init__).parameters.values()
    return [
        p.name
        for p in params
        if p.name != "self"
        and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        and p.name not in _DEPRECATED
    ]


def trainer_kwargs(trainer: Any) -> dict[str, Any]:
    """The arguments that rebuild ``trainer`` (a V2 trainer, Ray's or ours), read
    back from the attributes its constructor set. Runs on the driver."""
    kwargs = {}
    for name in trainer_parameters(type(trainer)):
        attribute = _ATTRIBUTE_OF.get(name, name)
        if not hasattr(trainer, attribute) and name.endswith("_config"):
            if name not in _OWN_CONFIGS:
                attribute = "backend_config"  # torch_config, xgboost_config, ...
        if hasattr(trainer, attribute):
            kwargs[name] = getattr(trainer, attribute)
    if getattr(trainer, "validation_config", None) is not None:
        raise ValueError(
            f"{type(trainer).__name__}(validation_config=...) is not supported by "
            "ray_tt_ext.v2.Tuner: Ray Train keeps checkpoints whose validation is "
            "pending, which Tune's retention would delete. Fix: validate inside the "
            "training loop and report the metric, or fit the trainer outside a Tuner."
        )
    return kwargs


def check_param_space(trainer_cls: type, param_space: Optional[dict[str, Any]]) -> None:
    """Every ``param_space`` key must be a trainer argument (driver, before anything runs)."""
    allowed = trainer_parameters(trainer_cls)
    for key in param_space or {}:
        if key not in allowed:
            raise ValueError(
                f"param_space key {key!r} is not an argument of {trainer_cls.__name__}: "
                "with a trainer, param_space's keys are trainer arguments (V1's meaning). "
                f"Its arguments: {allowed}. Fix: put hyperparameters under "
                "'train_loop_config' (merged key by key into the trainer's), e.g. "
                f"param_space={{'train_loop_config': {{{key!r}: tune.grid_search([...])}}}}."
            )
    for key in ("train_loop_config", "scaling_config"):
        value = (param_space or {}).get(key)
        if value is not None and (not isinstance(value, dict) or "grid_search" in value):
            example = "'num_workers': tune.grid_search([1, 2])"
            if key == "train_loop_config":
                example = "'lr': tune.grid_search([0.01, 0.1])"
            raise ValueError(
                f"param_space[{key!r}] must be a dict of the fields to tune (merged "
                f"key by key into the trainer's {key}), got {_described(value)}. Fix: "
                f"tune each field, e.g. {{{key!r}: {{{example}}}}}."
            )
    fields = {f.name for f in dataclasses.fields(ScalingConfig)}
    for field in (param_space or {}).get("scaling_config") or {}:
        if field not in fields:
            raise ValueError(
                f"param_space['scaling_config'] key {field!r} is not a field of "
                f"ray.train.ScalingConfig. Its fields: {sorted(fields)}. Fix: tune "
                "one of those fields, e.g. {'scaling_config': {'num_workers': "
                "tune.grid_search([1, 2])}}."
            )


def _described(value: Any) -> str:
    if isinstance(value, dict) and "grid_search" in value:
        return "a grid_search over whole configs"
    return type(value).__name__


def _merged_dict(base: dict, update: dict) -> dict:
    """``base`` updated key by key with ``update``, nested dicts too, as Ray's
    ``deep_update`` with new keys allowed, but into new dicts: ``base`` and the
    dicts in it are left as they are (their large values are shared, not copied)."""
    merged = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merged_dict(merged[key], value)
        else:
            merged[key] = value
    return merged


def merged_kwargs(base: dict[str, Any], config: dict[str, Any], trainer_cls: type) -> dict:
    """The trainer's arguments with the trial's hyperparameters (trial actor, driver)."""
    check_param_space(trainer_cls, config)
    merged = dict(base)
    for key, value in config.items():
        if key == "train_loop_config":
            merged[key] = _merged_dict(base.get(key) or {}, value)
        elif key == "scaling_config":
            scaling = base.get(key) or ScalingConfig()
            merged[key] = dataclasses.replace(scaling, **value)
        else:
            merged[key] = value
    return merged


def resource_request(scaling_config: Any) -> Any:
    """What a trial reserves: one bundle per worker, the trial actor and the run's
    controller take none (nothing waits holding a CPU). Driver."""
    num_workers = scaling_config.num_workers
    if not isinstance(num_workers, int) or num_workers < 1:
        raise ValueError(
            f"ScalingConfig(num_workers={num_workers!r}) cannot be reserved by a Tune "
            "trial of ray_tt_ext.v2.Tuner (an elastic range, or Ray Train's local mode). "
            "Fix: a fixed num_workers >= 1 (tune it with "
            "param_space={'scaling_config': {'num_workers': ...}})."
        )
    if getattr(scaling_config, "use_tpu", False) or getattr(
        scaling_config, "label_selector", None
    ):
        raise ValueError(
            "ScalingConfig(use_tpu=..., label_selector=...) is not supported by "
            "ray_tt_ext.v2.Tuner(trainer): a trial reserves its workers' bundles itself, "
            "without TPU slices or label selectors. Fix: drop them, or tune a function "
            "that fits the trainer (Ray's pattern) under ray_tt_ext.v2.Tuner."
        )
    bundle = dict(scaling_config._resources_per_worker_not_none)
    return _compat.PlacementGroupFactory(
        [{}] + [bundle] * scaling_config.num_workers,
        strategy=scaling_config.placement_strategy,
    )


#: The retention fields Tune's and Train V2's ``CheckpointConfig`` share.
RETENTION = ("num_to_keep", "checkpoint_score_attribute", "checkpoint_score_order")
