"""ray_tt_ext.v2.Tuner(trainer) with ``TuneConfig(reuse_actors=True)``: a trial
actor's next trial runs on the workers of its last run, when that run ended
cleanly; everything a trial sees is still its own.

Real Train V2 under real Tune, on the session's 4-CPU local Ray.
"""

from __future__ import annotations

import json
import os
import time

import pytest
import ray
import ray.train
import ray.tune
from v2_tune_loops import reuse_probe_loop

import ray_tt_ext.v2 as v2
from rtt_testing import actors_started, alive_actor_ids, assert_every_cpu_free

pytestmark = pytest.mark.usefixtures("ray_start_4_cpus")


def _seen(log_dir) -> dict[tuple[str, int], dict]:
    """What each rank of each trial saw, by (trial key, rank)."""
    seen = {}
    for path in log_dir.glob("*.json"):
        record = json.loads(path.read_text())
        seen[record["key"], record["world_rank"]] = record
    return seen


def _settled(probe, want, timeout_s: float = 20.0):
    """``probe()`` once it returns ``want`` (Ray frees resources and ends actors
    asynchronously after ``fit()``), or its last value."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value == want or time.monotonic() > deadline:
            return value
        time.sleep(0.5)


def _two_trial_tuner(name: str, tmp_path, storage_path) -> v2.Tuner:
    """A ``v2.Tuner`` named ``name`` of a 1-worker probe trainer writing into
    ``tmp_path / name``: trials ``<name>1`` then ``<name>2``, ``reuse_actors=True``."""
    log_dir = tmp_path / name
    log_dir.mkdir()
    trainer = v2.DataParallelTrainer(
        reuse_probe_loop,
        train_loop_config={"log_dir": str(log_dir)},
        scaling_config=ray.train.ScalingConfig(num_workers=1),
    )
    return v2.Tuner(
        trainer,
        param_space={
            "train_loop_config": {"key": ray.tune.grid_search([f"{name}1", f"{name}2"])}
        },
        tune_config=ray.tune.TuneConfig(reuse_actors=True, max_concurrent_trials=1),
        run_config=ray.tune.RunConfig(name=name, storage_path=storage_path),
    )


@pytest.mark.compat_tier
def test_a_reused_trial_actor_runs_the_next_trial_on_its_workers(storage_path, tmp_path):
    """6 trials of a 2-worker trainer, 2 at a time, ``reuse_actors=True``; trial
    ``c`` raises. Every clean trial's workers run the next trial of their trial
    actor; each trial sees its own config, context, checkpoint and folder; a
    group whose trial raised is never reused; nothing outlives ``fit()``."""
    log_dir = tmp_path / "seen"
    log_dir.mkdir()
    keys = ["a", "b", "c", "d", "e", "f"]
    trainer = v2.DataParallelTrainer(
        reuse_probe_loop,
        train_loop_config={"log_dir": str(log_dir), "fail_key": "c"},
        scaling_config=ray.train.ScalingConfig(num_workers=2),
        run_config=ray.train.RunConfig(checkpoint_config=v2.CheckpointConfig()),
    )
    workers_before = actors_started("RayTrainWorker")
    trial_actors_before = actors_started("V2TrainTrainable")
    results = v2.Tuner(
        trainer,
        param_space={"train_loop_config": {"key": ray.tune.grid_search(keys)}},
        tune_config=ray.tune.TuneConfig(reuse_actors=True, max_concurrent_trials=2),
        run_config=ray.tune.RunConfig(name="reuse", storage_path=storage_path),
    ).fit()
    seen = _seen(log_dir)
    assert sorted(seen) == [(k, r) for k in keys for r in (0, 1)]
    by_key = {r.config["train_loop_config"]["key"]: r for r in results}

    # Trial c's error is its own; every other trial finished.
    assert [k for k in keys if by_key[k].error] == ["c"]
    assert "trial c failed on purpose" in str(by_key["c"].error)

    # Workers were reused: 12 groups' worth of ranks ran on far fewer actors, and
    # each actor's trials ran one after another in one process (a kept worker).
    actor_of = {(k, r): s["actor_id"] for (k, r), s in seen.items()}
    actors = set(actor_of.values())
    assert len(actors) <= 6, actor_of  # without reuse: 12
    assert actors_started("RayTrainWorker") - workers_before == len(actors)
    assert actors_started("V2TrainTrainable") - trial_actors_before <= 3
    # The trials each worker actor ran, in order (its process counts its runs).
    trials_on: dict[str, list[str]] = {}
    for (k, _rank), actor in sorted(
        actor_of.items(), key=lambda item: len(seen[item[0]]["runs_before"])
    ):
        trials_on.setdefault(actor, []).append(k)
    # A group whose trial raised is never reused: c is the last trial of its workers.
    for rank in (0, 1):
        assert trials_on[actor_of["c", rank]][-1] == "c"
    # A kept group keeps its ranks: both ranks of a trial ran the same earlier trial.
    for k in keys:
        earlier = [trials_on[actor_of[k, r]] for r in (0, 1)]
        assert earlier[0] == earlier[1], earlier

    for k in keys:
        result = by_key[k]
        for rank in (0, 1):
            s = seen[k, rank]
            # Its own config, context and (no) checkpoint.
            assert s["had_checkpoint"] is False
            assert s["experiment_name"] == os.path.basename(result.path)
            assert s["world_size"] == 2
        if k == "c":
            continue
        # Its own checkpoint, in its own folder, written by both ranks (ASYNC
        # uploads on a kept worker: the per-run upload pool).
        assert result.metrics["key"] == k and result.metrics["after_upload"] is True
        assert os.path.dirname(result.checkpoint.path) == result.path
        with result.checkpoint.as_directory() as d:
            assert sorted(os.listdir(d)) == ["shard_1.json", "state.json"]
            with open(os.path.join(d, "state.json")) as f:
                assert json.load(f)["key"] == k

    # What carries over on a kept worker (docs/guide/train-v2.md, "Reused workers"): module
    # globals, environment variables, threads the loop left running; the
    # working directory is the new trial's.
    followers = [(k, r) for (k, r) in seen if trials_on[actor_of[k, r]].index(k) > 0]
    assert len(followers) >= 6, trials_on
    for k, r in followers:
        s = seen[k, r]
        before = trials_on[actor_of[k, r]]
        previous = before[before.index(k) - 1]
        assert s["runs_before"][-1] == previous
        assert s["env_left"] == previous
        assert s["threads_left"] == len(s["runs_before"])
        assert s["cwd"] != seen[previous, r]["cwd"]
        assert os.path.basename(by_key[k].path) in s["cwd"]

    # Nothing outlives fit(): no worker, trial actor (nor its controller) or placement
    # group; every CPU free.
    assert _settled(lambda: alive_actor_ids("RayTrainWorker") & actors, set()) == set()
    assert _settled(lambda: alive_actor_ids("V2TrainTrainable"), set()) == set()
    from ray.util import placement_group_table

    assert not [pg for pg in placement_group_table().values() if pg["state"] != "REMOVED"]
    assert_every_cpu_free()


@pytest.mark.quick
def test_workers_are_kept_only_with_reuse_actors_and_can_be_turned_off(monkeypatch):
    """The trainable ``v2.Tuner`` registers keeps its workers between trials exactly
    when Tune reuses actors, unless ``RAY_TT_EXT_REUSE_WORKERS`` is 0/false/off."""
    trainer = v2.DataParallelTrainer(
        reuse_probe_loop, scaling_config=ray.train.ScalingConfig(num_workers=1)
    )

    def keeps(reuse_actors: bool) -> bool:
        tuner = v2.Tuner(
            trainer, tune_config=ray.tune.TuneConfig(reuse_actors=reuse_actors)
        )
        return tuner._local_tuner.converted_trainable._keep_workers

    monkeypatch.delenv("RAY_TT_EXT_REUSE_WORKERS", raising=False)
    assert keeps(True) is True  # every Train V2 release
    assert keeps(False) is False
    for off in ("0", "false", "Off"):
        monkeypatch.setenv("RAY_TT_EXT_REUSE_WORKERS", off)
        assert keeps(True) is False


@pytest.mark.parametrize("workers", [pytest.param(1, marks=pytest.mark.extended), 2])
def test_a_kept_torch_worker_group_keeps_its_process_group_while_it_stays_valid(
    storage_path, workers
):
    """Ray's ``TorchTrainer`` over gloo, 6 trials one after the other with
    ``reuse_actors=True`` on one trial actor and run controller. Steps 0 to 2
    run on step 0's workers: step 1 in step 0's process group (same workers,
    ranks, world size and backend), with the subgroup step 0's loop made; rank
    0 of step 1 destroys the group, so step 2 gets a new one from Ray's setup.
    Step 3's backend configuration differs (another timeout): new workers,
    which step 4 runs on in their group; rank 0 of step 4 leaves an all-reduce
    pending, so with 2 workers the group is out of step and step 5 gets new
    workers (with 1 it completes). Every all-reduce adds up every rank."""
    pytest.importorskip("torch")
    from ray.train.torch import TorchConfig, TorchTrainer
    from v2_loops import torch_loop

    def backend_of(spec) -> TorchConfig:  # from step 3 on, another one
        return TorchConfig(
            timeout_s=600 if spec.config.train_loop_config.step >= 3 else 900
        )

    trainer = TorchTrainer(
        torch_loop,
        train_loop_config={"epochs": 1, "destroy_after_step": 1, "pending_after_step": 4},
        scaling_config=ray.train.ScalingConfig(num_workers=workers),
    )
    trial_actors_before = actors_started("V2TrainTrainable")
    results = v2.Tuner(
        trainer,
        param_space={
            "train_loop_config": {"step": ray.tune.grid_search(list(range(6)))},
            "torch_config": ray.tune.sample_from(backend_of),
        },
        tune_config=ray.tune.TuneConfig(reuse_actors=True, max_concurrent_trials=1),
        run_config=ray.tune.RunConfig(
            name=f"torch_reuse_{workers}", storage_path=storage_path
        ),
    ).fit()
    assert not results.errors
    by_step = {r.config["train_loop_config"]["step"]: r.metrics for r in results}
    expected = sum(range(1, workers + 1))  # ranks 1 + ... + workers
    assert [by_step[s]["allreduce"] for s in range(6)] == [expected] * 6
    # one trial actor (which runs the controller): every refusal below is ray_tt_ext's
    assert actors_started("V2TrainTrainable") - trial_actors_before == 1
    rank_0 = [by_step[s]["worker_actor"] for s in range(6)]
    assert rank_0[0] == rank_0[1] == rank_0[2] != rank_0[3] == rank_0[4]
    assert (rank_0[5] == rank_0[4]) is (workers == 1)  # out of step: not kept
    # kept from step 0 to 1 and from 3 to 4; left by step 1's rank 0: new at step 2
    assert [by_step[s]["same_process_group"] for s in range(6)] == [
        False,
        True,
        False,
        False,
        True,
        workers == 1,
    ]
    assert by_step[1]["subgroup_sum"] == workers  # step 0's subgroup, kept with it


def test_a_process_group_the_loop_made_itself_goes_when_its_workers_are_kept(
    storage_path,
):
    """Ray's base ``BackendConfig`` makes no process group; a loop that makes one
    itself leaves none to the next trial on the same worker."""
    pytest.importorskip("torch")
    from v2_loops import own_process_group_loop

    trainer = v2.DataParallelTrainer(
        own_process_group_loop, scaling_config=ray.train.ScalingConfig(num_workers=1)
    )
    results = v2.Tuner(
        trainer,
        param_space={"train_loop_config": {"step": ray.tune.grid_search([0, 1])}},
        tune_config=ray.tune.TuneConfig(reuse_actors=True, max_concurrent_trials=1),
        run_config=ray.tune.RunConfig(name="own_group", storage_path=storage_path),
    ).fit()
    assert not results.errors
    by_step = {r.config["train_loop_config"]["step"]: r.metrics for r in results}
    assert by_step[0]["worker_actor"] == by_step[1]["worker_actor"]  # kept
    assert [by_step[s]["held_a_group_at_start"] for s in (0, 1)] == [False, False]


#: The (number of workers, CPUs per worker) of each trial of the test below.
_SHAPES = {"a": (1, 1.0), "b": (2, 1.0), "c": (1, 0.5)}


def _shape(spec, field: int):
    return _SHAPES[spec.config.train_loop_config.key][field]


def test_a_group_of_another_size_or_resources_runs_on_new_workers(storage_path, tmp_path):
    """Trials one after the other with ``reuse_actors=True`` whose scaling differs
    (``param_space``): 1 worker, 2 workers, then 1 worker with half a CPU. No
    trial runs on a worker of another: Tune reuses a trial actor only for the
    same bundles, and ray_tt_ext keeps a group only for the same number of
    workers and resources; the test holds either to it (a canary for a Ray
    whose Tune would reuse across shapes)."""
    log_dir = tmp_path / "seen"
    log_dir.mkdir()
    trainer = v2.DataParallelTrainer(
        reuse_probe_loop,
        train_loop_config={"log_dir": str(log_dir)},
        scaling_config=ray.train.ScalingConfig(num_workers=1),
    )
    results = v2.Tuner(
        trainer,
        param_space={
            "train_loop_config": {"key": ray.tune.grid_search(list(_SHAPES))},
            "scaling_config": {
                "num_workers": ray.tune.sample_from(lambda spec: _shape(spec, 0)),
                "resources_per_worker": ray.tune.sample_from(
                    lambda spec: {"CPU": _shape(spec, 1)}
                ),
            },
        },
        tune_config=ray.tune.TuneConfig(reuse_actors=True, max_concurrent_trials=1),
        run_config=ray.tune.RunConfig(name="reuse_shapes", storage_path=storage_path),
    ).fit()
    assert not results.errors
    actors: dict[str, set] = {}
    for (key, _), seen in _seen(log_dir).items():
        actors.setdefault(key, set()).add(seen["actor_id"])
    assert {k: len(v) for k, v in actors.items()} == {"a": 1, "b": 2, "c": 1}
    assert not actors["a"] & actors["b"]
    assert not actors["c"] & (actors["a"] | actors["b"])


def test_a_stopped_run_keeps_no_workers_and_a_retried_run_keeps_its_last_group(
    storage_path, tmp_path
):
    """One trial at a time on one reused trial actor: Tune stops ``x`` after its
    first report (mid-run), so ``w`` starts new workers and a new controller;
    ``w``'s first group dies and Train's ``FailureConfig`` replaces it, and the
    group that finished is the one ``z`` runs on."""
    log_dir = tmp_path / "seen"
    log_dir.mkdir()
    trainer = v2.DataParallelTrainer(
        reuse_probe_loop,
        train_loop_config={"log_dir": str(log_dir), "crash_key": "w"},
        scaling_config=ray.train.ScalingConfig(num_workers=1),
        run_config=ray.train.RunConfig(
            checkpoint_config=v2.CheckpointConfig(),
            failure_config=ray.train.FailureConfig(max_failures=1),
        ),
    )
    trial_actors_before = actors_started("V2TrainTrainable")
    results = v2.Tuner(
        trainer,
        param_space={"train_loop_config": {"key": ray.tune.grid_search(["x", "w", "z"])}},
        tune_config=ray.tune.TuneConfig(reuse_actors=True, max_concurrent_trials=1),
        run_config=ray.tune.RunConfig(
            name="reuse_stop",
            storage_path=storage_path,
            stop=lambda trial_id, result: result.get("key") == "x",
        ),
    ).fit()
    assert not results.errors
    by_key = {r.config["train_loop_config"]["key"]: r for r in results}
    assert "after_upload" not in by_key["x"].metrics  # stopped mid-run
    assert by_key["w"].metrics["after_upload"] and by_key["z"].metrics["after_upload"]
    assert (log_dir / "crashed-w").exists()  # w's first group died
    actor = {k: s["actor_id"] for (k, _), s in _seen(log_dir).items()}
    assert actor["w"] != actor["x"]  # x's workers were not kept
    assert actor["z"] == actor["w"]  # the group that finished w is z's
    # One trial actor ran all three: x's run aborted, w's controller (kept) ran z.
    assert actors_started("V2TrainTrainable") - trial_actors_before == 1


def test_a_loop_of_tuners_keeps_each_tuners_workers_apart(storage_path, tmp_path):
    """Three ``v2.Tuner`` fits with ``reuse_actors=True``, one after another in one
    process: each Tuner's second trial runs on its own first trial's worker,
    and each later Tuner starts its own (the earlier Tuners' workers went with
    their ``fit()``)."""

    def fit(name: str) -> dict[str, str]:
        results = _two_trial_tuner(name, tmp_path, storage_path).fit()
        assert not results.errors
        return {k: s["actor_id"] for (k, _), s in _seen(tmp_path / name).items()}

    seen = {name: fit(name) for name in ("a", "b", "c")}
    for name in ("a", "b", "c"):
        assert seen[name][f"{name}1"] == seen[name][f"{name}2"], seen  # kept
    assert len({seen[name][f"{name}1"] for name in ("a", "b", "c")}) == 3, seen
    used = {a for actors in seen.values() for a in actors.values()}
    assert _settled(lambda: alive_actor_ids("RayTrainWorker") & used, set()) == set()


def test_two_tuners_in_two_threads_keep_their_trainables_and_workers_apart(
    storage_path, tmp_path
):
    """Two ``v2.Tuner`` fits of the same trainer class, started at the same
    instant in two threads, ``reuse_actors=True``: Tune's registry holds one
    trainable per name, so the second fit registers its trainer as
    ``DataParallelTrainer_2`` and each Tuner's trials run its own trainer (its
    ``log_dir``) on its own kept worker; nothing outlives either ``fit()``."""
    import threading

    start = threading.Barrier(2)
    results, errors = {}, []

    def fit(name: str) -> None:
        try:
            tuner = _two_trial_tuner(name, tmp_path, storage_path)
            start.wait(timeout=60)
            results[name] = tuner.fit()
        except BaseException as e:  # reported below, with the thread's name
            errors.append((name, e))

    threads = [threading.Thread(target=fit, args=(name,)) for name in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a fit did not end"
    assert not errors, errors
    seen = {name: _seen(tmp_path / name) for name in ("a", "b")}
    for name in ("a", "b"):
        assert not results[name].errors
        # Each Tuner's trials ran its own trainer: they wrote into its log_dir only.
        assert sorted(seen[name]) == [(f"{name}1", 0), (f"{name}2", 0)], seen
        # Its second trial ran on its first trial's (kept) worker.
        assert (
            seen[name][f"{name}1", 0]["actor_id"] == seen[name][f"{name}2", 0]["actor_id"]
        )
    actors = {name: {s["actor_id"] for s in seen[name].values()} for name in ("a", "b")}
    assert not actors["a"] & actors["b"], actors
    # One Tuner's trials are registered under the trainer's name, the other's
    # under the next free one (the trial names show it).
    renamed = {
        name: {
            os.path.basename(r.path).startswith("DataParallelTrainer_2_")
            for r in results[name]
        }
        for name in ("a", "b")
    }
    assert sorted(renamed.values(), key=str) == [{False}, {True}], renamed
    used = actors["a"] | actors["b"]
    assert _settled(lambda: alive_actor_ids("RayTrainWorker") & used, set()) == set()
    assert _settled(lambda: alive_actor_ids("V2TrainTrainable"), set()) == set()
