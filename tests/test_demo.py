"""The README's main job: `python -m ray_tt_ext demo` (here at a small size)."""

from __future__ import annotations

import re

import pytest

from ray_tt_ext._demo import run_demo

pytestmark = pytest.mark.timeout(180)


def test_demo_runs_and_shows_the_guarantees(ray_start_4_cpus, tmp_path, capsys):
    assert run_demo(size_mb=8, storage_path=str(tmp_path)) == 0
    out = capsys.readouterr().out
    assert "trials run:                       2 (errors: 0)" in out
    assert "trainer -> trainable conversions: 1 (once per Tuner)" in out
    names = re.findall(r"^\s+(checkpoint_\S+)$", out, flags=re.M)
    # num_to_keep=2 of 3 checkpoints per trial, named by the template.
    assert len(names) == 4
    assert all(re.fullmatch(r"checkpoint_\d{3}-loss_\d+\.\d{4}", n) for n in names)
    # Two learning rates, two loss curves.
    assert len(set(names)) == 4
