"""Ray's V1 framework trainers with the four guarantees, loaded on first use.

``ray_tt_ext.TorchTrainer``, ``ray_tt_ext.XGBoostTrainer`` and
``ray_tt_ext.LightGBMTrainer`` are built here, the first time one is named
(``import ray_tt_ext`` never imports torch, xgboost or lightgbm). Each is
``class X(ray_tt_ext.BaseTrainer, ray.train.<framework>.X)`` with Ray's own
constructor signature plus ``remote_executor: bool = False``: Ray's
``BaseTrainer.__new__`` records constructor arguments by the signature of
``__init__``, so the signature is Ray's, not ``*args, **kwargs``.
"""

from __future__ import annotations

import importlib
import inspect
import threading
from typing import Any

from ray_tt_ext import _compat
from ray_tt_ext._trainer import BaseTrainer, _check_remote_executor_flag

#: name -> (the Ray module defining the V1 class, the class, the package it
#: needs, the pip extra). The defining module, not ``ray.train.<framework>``,
#: whose name is bound to Train V2's class if it was imported while V2 was on.
FRAMEWORKS = {
    "TorchTrainer": ("ray.train.torch.torch_trainer", "TorchTrainer", "torch", "torch"),
    "XGBoostTrainer": (
        "ray.train.xgboost.xgboost_trainer",
        "XGBoostTrainer",
        "xgboost",
        "xgboost",
    ),
    "LightGBMTrainer": (
        "ray.train.lightgbm.lightgbm_trainer",
        "LightGBMTrainer",
        "lightgbm",
        "lightgbm",
    ),
}

_BUILT: dict[str, type] = {}
_BUILD_LOCK = threading.Lock()


def _ray_class(name: str) -> type:
    module_name, attr, package, extra = FRAMEWORKS[name]
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ImportError(
            f"ray_tt_ext.{name} needs {package}, which could not be imported ({e}). "
            f"Fix: pip install 'ray-tt-ext[{extra}]' (or install {package} yourself)."
        ) from e
    ray_cls = getattr(module, attr, None)
    if ray_cls is None:  # pragma: no cover - a Ray release without it
        raise ImportError(
            f"ray {_compat.RAY_VERSION} has no {module_name}.{attr}; ray_tt_ext.{name} "
            "needs a Ray release that has it."
        )
    if not issubclass(
        ray_cls, _compat.BaseTrainer
    ):  # pragma: no cover - a Ray layout change
        raise ImportError(
            f"{module_name}.{attr} is not a Ray Train V1 trainer in ray "
            f"{_compat.RAY_VERSION}; ray_tt_ext.{name} needs Ray's V1 class."
        )
    return ray_cls


def _with_remote_executor(signature: inspect.Signature) -> inspect.Signature:
    params = list(signature.parameters.values())
    flag = inspect.Parameter(
        "remote_executor", inspect.Parameter.KEYWORD_ONLY, default=False, annotation=bool
    )
    at = next(
        (i for i, p in enumerate(params) if p.kind is inspect.Parameter.VAR_KEYWORD),
        len(params),
    )
    return signature.replace(parameters=[*params[:at], flag, *params[at:]])


def build(name: str) -> type:
    """The hardened framework trainer ``name`` (built once per process)."""
    with _BUILD_LOCK:  # one class per name, or pickling by reference breaks
        if name not in _BUILT:
            _BUILT[name] = _build(name)
        return _BUILT[name]


def _build(name: str) -> type:
    ray_cls = _ray_class(name)

    def __init__(self, *args: Any, remote_executor: bool = False, **kwargs: Any) -> None:
        self.remote_executor = _check_remote_executor_flag(remote_executor)
        ray_cls.__init__(self, *args, **kwargs)

    __init__.__signature__ = _with_remote_executor(inspect.signature(ray_cls.__init__))
    __init__.__qualname__ = f"{name}.__init__"
    cls = type(
        name,
        (BaseTrainer, ray_cls),
        {
            "__init__": __init__,
            "__module__": __name__,
            "__qualname__": name,
            "__doc__": (
                f"Ray's V1 ``{ray_cls.__module__}.{ray_cls.__qualname__}`` with "
                "ray_tt_ext's guarantees (self-free, size-checked ``as_trainable()``, "
                "checkpoint policies) and ``remote_executor: bool = False``. All other "
                "arguments are Ray's."
            ),
        },
    )
    return cls


def __getattr__(name: str) -> type:
    """``ray_tt_ext._frameworks.TorchTrainer`` (how pickle finds the class)."""
    if name in FRAMEWORKS:
        return build(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
