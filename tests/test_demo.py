"""The README's main job: `python -m ray_tt_ext demo` (here at a small size)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ray_tt_ext._demo import run_demo

pytestmark = pytest.mark.timeout(180)


def test_demo_runs_and_shows_the_guarantees(ray_start_4_cpus, tmp_path, capsys):
    assert run_demo(size_mb=8, storage_path=str(tmp_path)) == 0
    out = capsys.readouterr().out
    # The guard caught the 600 MiB closure and named it.
    assert "raised PayloadTooLargeError before anything was sent" in out
    assert "culprit: _guard_demo.<locals>.train_fn.<closure>.weights" in out
    assert "trials: 2 (errors: 0)" in out and "remote BackendExecutor on" in out
    assert "trainer -> trainable conversions: 1 (once per Tuner)" in out
    names = re.findall(r"^\s+(checkpoint_\S+)$", out, flags=re.M)
    # num_to_keep=2 of 3 checkpoints per trial, named by the template.
    assert len(names) == 4
    assert all(re.fullmatch(r"checkpoint_\d{3}-loss_\d+\.\d{4}", n) for n in names)
    assert len(set(names)) == 4  # two learning rates, two loss curves
    # Ours stays flat while Ray's grows with the attached data.
    rows = re.findall(r"(\d+) MiB attached: ray_tt_ext\s+(.+?),\s+Ray\s+(.+)$", out, re.M)
    assert [int(r[0]) for r in rows] == [1, 8, 32, 128]
    ours = [r[1].strip() for r in rows]
    assert all(o.endswith(" B") or o.endswith("KiB") for o in ours), ours  # flat, small
    assert rows[-1][2].strip() == "128.0 MiB", rows  # Ray's carries the metadata
    assert f"experiment folder: {tmp_path / 'demo'}" in out
    plot = tmp_path / "registered_payload.png"
    assert f"plot: {plot}" in out
    assert Path(plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
