"""Section ``reuse_trials`` of scripts/bench.py: many short trainer trials under
``ray_tt_ext.v2.Tuner(trainer)`` with ``TuneConfig(reuse_actors=True)`` (a reused
trial actor's next trial runs on its last run's workers), beside the same trials
without reuse and a plain Tune function trial making the same report, in
alternating order; a 1-worker ``DataParallelTrainer`` and Ray's ``TorchTrainer``
(2 workers over gloo). Each run in a process of its own (``v2_trials_child.py``)."""

from __future__ import annotations

import statistics
from typing import Any

from rtt_bench.common import _table, progress
from rtt_bench.v2_trials import _v2_trials_run

#: (trainer, flavour with reuse, without, the function trial with as many CPUs).
REUSE_KINDS = (
    ("data_parallel", "v2_reuse", "v2_tuner", "function"),
    ("torch", "torch_reuse", "torch", "function_2cpu"),
)


def bench_reuse_trials(quick: bool, storage: str) -> dict[str, Any]:
    """N one-report trials per run; for each trainer, rounds of (with reuse,
    without, a function trial), the order rotating each round; each ratio is
    the median over rounds of the round's ratio. Goals (issue #28): with reuse
    <= 2x the function trial and <= 0.5x the same trials without reuse."""
    # 16 trials, 4 at a time (1-CPU trials; 2 at a time for the 2-worker torch
    # trials): each reused trial actor runs 4 (8) trials one after another. With
    # 8, each ran 2, and with reuse at best half the start-ups went away.
    n, rounds = (4, 1) if quick else (16, 2)
    out: dict[str, Any] = {"trials": n, "rounds": rounds, "kinds": {}}
    for kind, reuse, plain, function in REUSE_KINDS:
        runs: dict[str, list] = {reuse: [], plain: [], function: []}
        to_function, to_plain = [], []
        for i in range(rounds):
            order = [reuse, plain, function]
            order = order[i % 3 :] + order[: i % 3]
            got = {}
            for flavour in order:
                got[flavour] = _v2_trials_run(flavour, n)
                if got[flavour]["errors"]:
                    raise RuntimeError(f"{flavour}: {got[flavour]['errors']} trials failed")
                runs[flavour].append(got[flavour])
                progress(f"reuse_trials {kind} {flavour}: {got[flavour]['seconds']:.1f} s")
            to_function.append(got[reuse]["seconds"] / got[function]["seconds"])
            to_plain.append(got[reuse]["seconds"] / got[plain]["seconds"])
        entry = {
            f: {
                "seconds": statistics.median(r["seconds"] for r in rs),
                "seconds_per_trial": statistics.median(r["seconds"] for r in rs) / n,
                "placement_groups_left": max(r["placement_groups_left"] for r in rs),
                "free_cpus": min(r["free_cpus"] for r in rs),
            }
            for f, rs in runs.items()
        }
        entry["flavours"] = {"reuse": reuse, "plain": plain, "function": function}
        # Where the CPU goes (a run of its own each: sampling costs CPU too).
        for flavour in (reuse, plain, function):
            sampled = _v2_trials_run(flavour, n, cpu=True)
            if sampled["errors"]:
                raise RuntimeError(f"{flavour}: {sampled['errors']} trials failed")
            roles = sampled["cpu_by_role"]
            entry[flavour]["cpu_by_role"] = roles
            total = sum(r["cpu_s"] for r in roles.values())
            progress(f"reuse_trials {kind} {flavour}: {total / n:.1f} CPU s per trial")
        entry["reuse_over_function"] = statistics.median(to_function)
        entry["reuse_over_plain"] = statistics.median(to_plain)
        entry["round_ratios"] = {"function": to_function, "plain": to_plain}
        entry["goal_met"] = (
            entry["reuse_over_function"] <= 2.0 and entry["reuse_over_plain"] <= 0.5
        )
        out["kinds"][kind] = entry
        print(
            _table(
                f"{n} one-report trials, {kind}: with reuse / function = "
                f"{entry['reuse_over_function']:.2f} (goal <= 2), with reuse / "
                f"without = {entry['reuse_over_plain']:.2f} (goal <= 0.5)",
                ["flavour", "fit s", "s/trial", "PGs left", "free CPUs"],
                [
                    [
                        f,
                        f"{entry[f]['seconds']:.1f}",
                        f"{entry[f]['seconds_per_trial']:.2f}",
                        entry[f]["placement_groups_left"],
                        f"{entry[f]['free_cpus']:.0f}",
                    ]
                    for f in runs
                ],
            )
        )
    return out
