"""inspect_payload, the payload guard and its limits, and the CLI."""

from __future__ import annotations

import functools
import json
import logging
import subprocess
import sys
import textwrap
import tracemalloc

import numpy as np
import pytest
import ray
import ray.cloudpickle
import ray.train
import ray.tune
import tune_api
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ray_tt_ext
from ray_tt_ext import PayloadTooLargeError, inspect_payload
from ray_tt_ext._payload import (
    PAYLOAD_LIMIT_ENV_VAR,
    check_registered_payload,
    resolve_payload_limit,
)

pytestmark = pytest.mark.quick  # unit tests: scripts/test --quick runs them


def assert_close_to_dumps(obj) -> None:
    expected = len(ray.cloudpickle.dumps(obj))
    got = inspect_payload(obj).total_bytes
    assert abs(got - expected) <= max(256, expected // 100), (got, expected)


# -- total_bytes ---------------------------------------------------------------


def _main_function(source: str, **globals_):
    """A function defined in ``__main__`` (pickled by value, like a script's)."""
    namespace = {"__name__": "__main__", **globals_}
    exec(textwrap.dedent(source), namespace)
    return namespace[source.split("def ", 1)[1].split("(", 1)[0]]


uses_global = _main_function(
    "def uses_global(config):\n    return GLOBAL_WEIGHTS.sum()\n",
    GLOBAL_WEIGHTS=np.ones(100_000),
)


def make_closure(n):
    weights = np.ones(n)

    def train_loop_per_worker(config):
        return weights.sum()

    return train_loop_per_worker


class Holder:
    class_blob = b"c" * 50_000

    def __init__(self):
        self.blob = b"x" * 200_000
        self.small = 3


@pytest.mark.parametrize(
    "obj",
    [
        {"a": np.zeros(1_000_000, dtype=np.uint8), "b": [1, 2, 3]},
        b"y" * 3_000_000,
        [np.arange(10_000), "s" * 10_000, {"k": (1, 2.0)}],
        make_closure(200_000),
        uses_global,
        Holder(),
        functools.partial(make_closure(1000), config={"x": 1}),
        np.arange(10).reshape(2, 5).T,  # non-contiguous array
    ],
    ids=["dict", "bytes", "mixed", "closure", "global", "object", "partial", "strided"],
)
def test_total_bytes_matches_cloudpickle(obj):
    assert_close_to_dumps(obj)


leaves = st.one_of(
    st.integers(),
    st.text(max_size=50),
    st.binary(max_size=5000),
    st.integers(min_value=0, max_value=50_000).map(lambda n: np.ones(n, dtype=np.uint8)),
)
nested = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(st.text(max_size=8), children, max_size=5),
    ),
    max_leaves=20,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nested)
def test_total_bytes_matches_cloudpickle_property(obj):
    assert_close_to_dumps(obj)


# -- contributors ----------------------------------------------------------------


class FreshBytes:
    """Pickles as bytes made anew by every ``__reduce__`` (a temporary each time)."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes

    def __reduce__(self):
        return (bytes, (b"\x07" * self.nbytes,))


_fresh = st.integers(min_value=4096, max_value=60_000).map(FreshBytes)
_with_fresh = st.recursive(
    st.one_of(_fresh, st.integers(), st.text(max_size=20)),
    lambda children: st.one_of(
        st.lists(children, max_size=6),
        st.dictionaries(st.text(max_size=8), children, max_size=6),
    ),
    max_leaves=12,
)


def _fresh_leaves(obj, path="root"):
    if isinstance(obj, FreshBytes):
        yield path, obj
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _fresh_leaves(v, f"{path}[{i}]")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _fresh_leaves(v, f"{path}[{k!r}]")


def test_temporaries_from_reduce_are_each_blamed_for_their_own_bytes():
    # Six objects whose __reduce__ makes 200 KB of bytes each: freed ids are
    # reused, and once made the inspector skip parts as already counted.
    report = inspect_payload([FreshBytes(200_000) for _ in range(6)], name="parts")
    leaves = {c.path: c.nbytes for c in report.contributors if c.type_name == "bytes"}
    assert sorted(leaves) == [f"parts[{i}].<args>[0]" for i in range(6)]
    assert all(200_000 <= n < 200_100 for n in leaves.values())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_with_fresh)
def test_parts_add_up_to_the_total_and_every_large_leaf_is_named_property(obj):
    report = inspect_payload(obj, name="root", min_bytes=4096)
    named = {c.path for c in report.contributors}
    for path, leaf in _fresh_leaves(obj):
        assert f"{path}.<args>[0]" in named, (path, leaf.nbytes, report.format(50))
    # Each part's bytes are its own: they add up to the total, less what
    # parts under min_bytes (folded into no listed part) cost.
    listed = sum(c.nbytes for c in report.contributors)
    assert listed <= report.total_bytes
    unlisted = report.total_bytes - listed
    assert unlisted < 4096 * (1 + len(list(_fresh_leaves(obj)))), report.format(50)


def test_closure_variable_named_weights_shows_as_weights():
    report = inspect_payload(make_closure(1_000_000))
    top = report.contributors[0]
    assert top.path == "make_closure.<locals>.train_loop_per_worker.<closure>.weights"
    assert top.type_name == "numpy.ndarray"
    assert top.nbytes >= 8_000_000


def test_paths_for_globals_keys_attributes_and_class_attributes():
    report = inspect_payload(uses_global)
    assert report.contributors[0].path.endswith(".<globals>.GLOBAL_WEIGHTS")

    report = inspect_payload({"outer": {"inner": np.ones(100_000)}}, name="cfg")
    assert report.contributors[0].path == "cfg['outer']['inner']"

    report = inspect_payload(Holder(), name="holder")
    assert report.contributors[0].path == "holder.blob"

    local_cls = type("Local", (), {"table": b"t" * 300_000})
    report = inspect_payload(local_cls)
    assert report.contributors[0].path == "Local.table"

    # A class defined by value pickles its bases by value too: the path goes
    # through them (docs/guide/payload-guard.md, "The payload inspector and guard").
    child_cls = type("Child", (local_cls,), {"small": 1})
    report = inspect_payload(child_cls)
    assert report.contributors[0].path == "Child.<bases>[0].table"


def test_contributors_are_largest_first_and_account_for_the_total():
    obj = {"big": np.ones(500_000), "medium": np.ones(100_000), "small": b"s" * 20_000}
    report = inspect_payload(obj, name="obj")
    sizes = [c.nbytes for c in report.contributors]
    assert sizes == sorted(sizes, reverse=True)
    assert [c.path for c in report.contributors[:3]] == [
        "obj['big']",
        "obj['medium']",
        "obj['small']",
    ]
    # Each part alone repeats a few memoized bytes (e.g. numpy's reconstructor).
    assert abs(sum(sizes) - report.total_bytes) <= max(256, report.total_bytes // 100)


def test_shared_objects_are_counted_once():
    shared = np.ones(200_000)
    report = inspect_payload({"a": shared, "b": shared}, name="d")
    paths = [c.path for c in report.contributors]
    assert paths.count("d['a']") + paths.count("d['b']") == 1


def test_inspection_does_not_copy_large_buffers():
    big = np.ones(32 * 1024 * 1024)  # 256 MiB
    tracemalloc.start()
    try:
        report = inspect_payload({"weights": big})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.total_bytes >= big.nbytes
    assert peak < 8 * 1024 * 1024, peak  # constant extra memory, not a copy


def test_unpicklable_objects_raise_what_pickle_raises():
    import threading

    with pytest.raises(TypeError):
        inspect_payload({"lock": threading.Lock()})


def test_report_formats_table_and_json():
    report = inspect_payload({"w": np.ones(200_000)}, name="cfg")
    text = report.format()
    assert "cfg['w']" in text and "MiB" in text and "numpy.ndarray" in text
    data = json.loads(report.to_json())
    assert data["total_bytes"] == report.total_bytes
    assert data["contributors"][0]["path"] == "cfg['w']"


# -- limits --------------------------------------------------------------------------


def test_limit_defaults_to_rays_error_threshold(monkeypatch):
    from ray._private import ray_constants

    monkeypatch.delenv(PAYLOAD_LIMIT_ENV_VAR, raising=False)
    assert resolve_payload_limit() == ray_constants.FUNCTION_SIZE_ERROR_THRESHOLD


def test_limit_from_env_and_explicit(monkeypatch):
    monkeypatch.setenv(PAYLOAD_LIMIT_ENV_VAR, "12345")
    assert resolve_payload_limit() == 12345
    assert resolve_payload_limit(999) == 999


@pytest.mark.parametrize("bad", [0, -5, "lots", ray_tt_ext.GRPC_MAX_MESSAGE_BYTES + 1])
def test_bad_limits_are_rejected_with_the_reason(bad):
    with pytest.raises(ValueError, match="payload_limit"):
        resolve_payload_limit(bad)


def test_bad_env_limit_is_rejected(monkeypatch):
    monkeypatch.setenv(PAYLOAD_LIMIT_ENV_VAR, str(2**40))
    with pytest.raises(ValueError, match=PAYLOAD_LIMIT_ENV_VAR):
        resolve_payload_limit()


def test_grpc_override_is_honoured():
    code = "import ray_tt_ext; print(ray_tt_ext.GRPC_MAX_MESSAGE_BYTES)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**__import__("os").environ, "RAY_max_grpc_message_size": "104857600"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == "104857600"


# -- the guard -----------------------------------------------------------------------


def test_guard_raises_with_culprit_and_fix():
    fn = make_closure(2_000_000)  # 16 MB
    with pytest.raises(PayloadTooLargeError) as info:
        check_registered_payload(fn, what="The trainable", limit=1_000_000)
    err = info.value
    assert isinstance(err, ray.tune.error.TuneError)
    assert err.limit == 1_000_000
    assert err.report.contributors[0].path.endswith("<closure>.weights")
    message = str(err)
    assert "<closure>.weights" in message
    assert "tune.with_parameters" in message and "ray.put" in message


def test_guard_warns_above_rays_warning_threshold(caplog):
    fn = make_closure(1_500_000)  # 12 MB > 10 MB
    with caplog.at_level(logging.WARNING, logger="ray_tt_ext"):
        check_registered_payload(fn, what="The trainable")
    assert any("<closure>.weights" in r.getMessage() for r in caplog.records)


def test_tuner_catches_a_function_trainable_capturing_120_mb(
    ray_start_4_cpus, storage_path
):
    weights = np.ones(15_000_000)  # 120 MB

    def train_fn(config):
        tune_api.report({"s": float(weights.sum())})

    with pytest.raises(PayloadTooLargeError, match="weights") as info:
        ray_tt_ext.Tuner(
            train_fn, run_config=tune_api.RunConfig(storage_path=storage_path, name="big")
        )
    assert info.value.report.total_bytes > 120_000_000
    # Caught before Tune wrote or registered anything.
    import os

    assert not os.path.exists(os.path.join(storage_path, "big", "tuner.pkl"))


def test_tuner_payload_limit_is_per_tuner(ray_start_4_cpus, storage_path):
    blob = b"z" * 50_000

    def train_fn(config):
        tune_api.report({"n": len(blob)})

    with pytest.raises(PayloadTooLargeError):
        ray_tt_ext.Tuner(
            train_fn,
            payload_limit=10_000,
            run_config=tune_api.RunConfig(storage_path=storage_path, name="strict"),
        )
    tuner = ray_tt_ext.Tuner(
        train_fn, run_config=tune_api.RunConfig(storage_path=storage_path, name="ok")
    )
    assert not tuner.fit().errors


def noop_loop(config):
    pass


def test_tuner_payload_limit_governs_a_trainers_conversion(
    ray_start_4_cpus, storage_path, monkeypatch, caplog
):
    class ShipsATable(ray_tt_ext.DataParallelTrainer):  # local: pickled by value
        table = b"t" * 12_000_000  # 12 MB in what Tune registers

    monkeypatch.setenv("RAY_TT_EXT_PAYLOAD_LIMIT", "5000000")
    trainer = ShipsATable(noop_loop, scaling_config=ray.train.ScalingConfig(num_workers=1))
    with pytest.raises(PayloadTooLargeError, match="table"):
        trainer.as_trainable()  # the default limit (the variable) governs a direct call
    with caplog.at_level(logging.WARNING, logger="ray_tt_ext"):
        tuner = ray_tt_ext.Tuner(
            trainer,
            payload_limit=20_000_000,  # the Tuner raises the limit for its conversion
            run_config=tune_api.RunConfig(storage_path=storage_path, name="raised"),
        )
    assert tuner._local_tuner.converted_trainable._trainer_cls is ShipsATable
    # Measured once: Ray's >10 MB warning is logged once.
    warnings = [r for r in caplog.records if "when pickled" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    with pytest.raises(PayloadTooLargeError, match="table"):
        ray_tt_ext.Tuner(
            trainer,
            payload_limit=1_000_000,
            run_config=tune_api.RunConfig(storage_path=storage_path, name="lowered"),
        )


# -- CLI ---------------------------------------------------------------------------

CLI_MODULE = """
import numpy as np

def _make():
    weights = np.ones(2_000_000)

    def big_fn(config):
        return weights.sum()

    return big_fn

# A module-level function is pickled by reference (tiny); a closure by value.
big_fn = _make()

def small_fn(config):
    return 1

import threading
raises_on_pickle = {"lock": threading.Lock()}

import ray_tt_ext
from ray.air.config import ScalingConfig

# 16 MB attached: its constructor arguments travel through the object store.
trainer = ray_tt_ext.DataParallelTrainer(
    small_fn,
    train_loop_config={"weights": np.ones(2_000_000)},
    scaling_config=ScalingConfig(num_workers=1),
)
"""


#: Every invocation the CLI tests make: ``python -m ray_tt_ext inspect ARGS``, all
#: in one fresh interpreter (``rtt_testing.run_in_one_interpreter``), each with
#: its own output and exit status; one more runs in an interpreter of its own.
CLI_INVOCATIONS = [
    ("cli_target:small_fn",),
    ("cli_target:big_fn", "--limit", "1000000", "--top", "3"),
    ("cli_target:trainer", "--limit", "1000000", "--json"),
    ("cli_target:big_fn", "--json"),
    ("no_colon",),
    ("missing_module_xyz:fn",),
    ("broken_module:fn",),
    ("cli_target:nope",),
    ("cli_target:raises_on_pickle",),
    ("cli_target:small_fn", "--limit", "-1"),
    (),  # no target: argparse's own error
]


@pytest.fixture(scope="module")
def cli_module(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli")
    (path / "cli_target.py").write_text(textwrap.dedent(CLI_MODULE))
    (path / "broken_module.py").write_text("raise RuntimeError('boom at import')\n")
    return path


@pytest.fixture(scope="module")
def cli_runs(cli_module):
    """``{args: CompletedProcess}`` for every invocation, from one fresh interpreter."""
    from rtt_testing import run_in_one_interpreter

    commands = [["-m", "ray_tt_ext", "inspect", *args] for args in CLI_INVOCATIONS]
    runs = run_in_one_interpreter(commands, timeout=120, cwd=cli_module)
    return dict(zip(CLI_INVOCATIONS, runs, strict=True))


def run_cli(runs, *args):
    return runs[args]


def test_cli_runs_as_a_module_with_its_exit_status(cli_module):
    """The entry point itself: ``python -m ray_tt_ext inspect`` exits 1 over the limit."""
    proc = subprocess.run(
        [sys.executable, "-m", "ray_tt_ext", "inspect", "cli_target:big_fn"]
        + ["--limit", "1000000"],
        cwd=cli_module,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    assert "big_fn.<closure>.weights" in proc.stdout
    assert "OVER the limit" in proc.stdout


def test_cli_within_limit_exits_0_with_table(cli_runs):
    proc = run_cli(cli_runs, "cli_target:small_fn")
    assert proc.returncode == 0, proc.stderr
    assert "within the limit" in proc.stdout
    assert "small_fn" in proc.stdout


def test_cli_over_limit_exits_1_and_names_the_culprit(cli_runs):
    proc = run_cli(cli_runs, "cli_target:big_fn", "--limit", "1000000", "--top", "3")
    assert proc.returncode == 1, proc.stderr
    assert "big_fn.<closure>.weights" in proc.stdout
    assert "MiB" in proc.stdout
    assert "OVER the limit" in proc.stdout


def test_cli_on_a_trainer_measures_what_tune_registers(cli_runs):
    proc = run_cli(cli_runs, "cli_target:trainer", "--limit", "1000000", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert data["over_limit"] is False
    assert data["total_bytes"] < 100_000  # the registered class, not the instance
    assert data["root"] == "the Tune trainable of DataParallelTrainer"


def test_cli_json(cli_runs):
    proc = run_cli(cli_runs, "cli_target:big_fn", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["over_limit"] is False
    assert data["contributors"][0]["path"] == "_make.<locals>.big_fn.<closure>.weights"
    assert data["total_bytes"] > 16_000_000


@pytest.mark.parametrize(
    "args, message",
    [
        (["no_colon"], "expected MODULE:ATTR"),
        (["missing_module_xyz:fn"], "could not import module"),
        (["broken_module:fn"], "boom at import"),
        (["cli_target:nope"], "has no attribute"),
        (["cli_target:raises_on_pickle"], "cannot be pickled"),
        (["cli_target:small_fn", "--limit", "-1"], "positive"),
    ],
)
def test_cli_bad_usage_exits_2_with_a_clear_message(cli_runs, args, message):
    proc = run_cli(cli_runs, *args)
    assert proc.returncode == 2
    assert message in proc.stderr


def test_cli_argparse_errors_exit_2(cli_runs):
    proc = run_cli(cli_runs)  # missing target
    assert proc.returncode == 2
