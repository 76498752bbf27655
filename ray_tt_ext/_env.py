"""Train V1 activation: the one piece of ray_tt_ext that runs before Ray is imported.

No Ray import here: ``ray_tt_ext.__getattr__`` calls :func:`activate_train_v1`
before the module behind a public name imports ``ray.train`` (which binds its
V1 or V2 names by the variable at that moment). ``_compat`` re-exports its
variable's name, ``V2_ENV_VAR``.
"""

from __future__ import annotations

import os

#: The environment variable Ray reads to pick Train V1 ("0") or V2 ("1").
V2_ENV_VAR = "RAY_TRAIN_V2_ENABLED"

#: ray_tt_ext's switch for kept workers under ``reuse_actors`` (``v2._tuner``);
#: a Ray Client's Tuner actor gets the client's value (``_tuner``).
REUSE_WORKERS_ENV_VAR = "RAY_TT_EXT_REUSE_WORKERS"

#: The public ``ray_tt_ext`` name whose first use set the variable (for messages).
_ACTIVATED_BY: list[str] = []


def activate_train_v1(by: str) -> None:
    """Turn Train V1 on for this process if ``RAY_TRAIN_V2_ENABLED`` is unset.

    Called by ``ray_tt_ext.__getattr__`` (driver) the first time a Train V1
    name of the package is taken (``from ray_tt_ext import Tuner``),
    before the module behind it imports ``ray.train``. Sets the variable to
    ``0``: Ray's V1 trainers check it when they are built, ``ray.train``
    binds its V1 names if it is imported after, and Tune copies it into every
    trial actor it starts (``_ActorClassCache``), whose training workers
    inherit it. An explicit value is never overridden; :func:`ensure_train_v1`
    turns ``1`` into a clear error where a V1 trainer is used.
    ``ray_tt_ext.v2`` never calls this.
    """
    if V2_ENV_VAR not in os.environ:
        os.environ[V2_ENV_VAR] = "0"
        _ACTIVATED_BY.append(by)


def train_v1_activated_by() -> str | None:
    """The ``ray_tt_ext`` name whose first use set the variable to 0, if any did."""
    if os.environ.get(V2_ENV_VAR) != "0" or not _ACTIVATED_BY:
        return None
    return _ACTIVATED_BY[0]
