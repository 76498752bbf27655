"""The Train V2 session: ray_tt_ext.v2 on Ray's default Train stack.

Runs in a pytest session of its own (``RAY_TT_EXT_TEST_TRAIN=v2``, see
``tests/conftest.py``; ``scripts/pytest_sessions.py`` runs both), with
``RAY_TRAIN_V2_ENABLED`` unset as users have it. On Ray < 2.51 every test of
tests/v2 is skipped, and counted (the fresh-interpreter modules of tests/ that
``scripts/test`` also runs in this session still run).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

V2_TESTS_DIR = Path(__file__).resolve().parent
# Ray workers import this folder's loops by module name, as the driver does.
os.environ["PYTHONPATH"] = os.pathsep.join([str(V2_TESTS_DIR), os.environ["PYTHONPATH"]])

from ray_tt_ext import _compat  # noqa: E402  (private: never turns Train V1 on)

V2_BY_DEFAULT = _compat.RAY_VERSION.release >= _compat.MIN_TRAIN_V2_RAY_VERSION.release


def pytest_collection_modifyitems(config, items):
    if V2_BY_DEFAULT:
        if not _compat.train_v2_enabled():
            raise pytest.UsageError(
                "tests/v2 needs Train V2: run it without RAY_TRAIN_V2_ENABLED=0 "
                "(scripts/pytest_sessions.py does)."
            )
        return
    skip = pytest.mark.skip(
        reason=f"ray_tt_ext.v2 needs Ray >= 2.51, not {_compat.RAY_VERSION}"
    )
    for item in items:  # not the fresh-interpreter modules of tests/ this session also runs
        if V2_TESTS_DIR in Path(item.path).parents:
            item.add_marker(skip)
