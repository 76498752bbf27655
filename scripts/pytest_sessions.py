#!/usr/bin/env python3
"""Run the regression suite: tests/ (Train V1) and tests/v2 (Train V2).

    python scripts/pytest_sessions.py [--all | --quick] [--one-after-the-other] [pytest args...]

The CI tier by default: every test but those marked ``extended`` (the second
and later variants of a scenario whose guarantees a test of the CI tier also
asserts; docs/testing.md, "Tiers and markers"). ``--all`` runs them too, as
``scripts/compat.sh`` and so every row of ``scripts/matrix.sh`` do.

Ray reads ``RAY_TRAIN_V2_ENABLED`` once per process, so the two cannot share
a pytest session: ``tests/`` runs with the V1 integration (which turns V1 on),
``tests/v2`` with the variable unset, as Ray 2.51+ users have it.

The two sessions run side by side, each with a Ray of its own: one session
alone keeps the 2 cores about two thirds busy (its Ray waiting on process
starts, polls, a fresh interpreter), two keep them busy (docs/testing.md,
"Where the time goes"; a third stream, ``tests/`` over two pytest-xdist
workers, made the suite slower). Side by side, the modules of ``tests/`` that
run fresh interpreters (``rtt_testing.EITHER_SESSION_MODULES``: the README's
examples, Train V1 enablement, the release runner) run in the Train V2 session,
so that the two end near the same time. The Train V1 session prints as it
runs; the Train V2 session's output is printed whole once it ends (after the
Train V1 output), so the two never interleave. ``--one-after-the-other`` runs
``tests/`` then ``tests/v2``, each in one process, as before (to time one
session alone, or to read a failure with nothing beside it).

Uses the Python that runs this script; extra arguments go to both sessions
(``-k``, ``-m``, ``-x``...; a ``--basetemp`` gets ``-v2`` for the second).
Ends with one line for both, e.g. ``== both sessions: tests/ 275 passed;
tests/v2 (with 3 fresh-interpreter modules of tests/) 75 passed ==`` side by
side, ``tests/v2 60 passed`` one after the other (``scripts/compat.sh`` puts
it in its verdict; on a Ray without Train V2 by default, the Train V2 session's
count is the three modules' alone, its own tests skipped). Exit
status 0 only if both pass; a session that collects no test fails, unless a
``-k``/``-m`` filter deselected them all. ``--quick`` runs the quick tier only
(``-m quick``: unit and single-fit tests, a few minutes).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from rtt_testing import EITHER_SESSION_MODULES  # noqa: E402

COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)")
NO_TESTS_COLLECTED = 5
#: /proc's clock ticks per second (Linux; /proc is read only there).
_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class Session:
    """One pytest process; its output goes to ``sys.stdout`` as it comes
    (``live``) or to a file printed by :meth:`print_output`."""

    def __init__(
        self, label: str, paths: list[str], args: list[str], env: dict[str, str], live: bool
    ) -> None:
        self.label = label
        self.args = args
        self.last = ""
        self.live = live
        self._log = tempfile.TemporaryFile("w+", encoding="utf-8")
        self.started = time.monotonic()
        self.seconds = 0.0
        print(
            f"=== {label}: pytest {' '.join(paths + args)}"
            + ("" if live else " (beside; its output follows when it ends)"),
            flush=True,
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pytest", *paths, *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            encoding="utf-8",
            errors="replace",
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        """Copy the output until it ends. Whatever goes wrong here (this script's
        stdout closed, a full disk), the pipe is still drained: a pytest blocked
        on a full pipe would never end."""
        assert self.proc.stdout is not None
        try:
            for line in self.proc.stdout:
                if COUNT.search(line) and " in " in line:
                    self.last = line
                if self.live:
                    sys.stdout.write(line)
                    sys.stdout.flush()
                else:
                    self._log.write(line)
        finally:
            for line in self.proc.stdout:
                if COUNT.search(line) and " in " in line:
                    self.last = line
            self.proc.wait()
            self.seconds = time.monotonic() - self.started

    def wait(self) -> int:
        self._reader.join()
        return self.proc.wait()

    def interrupt(self, grace_s: float = 30.0) -> None:
        """Stop the pytest process (Ctrl-C, as a terminal sends it), then kill it
        if it has not ended within ``grace_s``."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._reader.join()

    def print_output(self) -> None:
        if not self.live:
            print(f"=== {self.label}: its output", flush=True)
            self._log.seek(0)
            for line in self._log:
                sys.stdout.write(line)
        self._log.close()
        sys.stdout.flush()

    def result(
        self, status: int, filtered: bool, extended_left_out: bool
    ) -> tuple[int, dict[str, int]]:
        """The exit status and the counts; ``filtered``: the caller gave -k/-m;
        ``extended_left_out``: the CI tier's ``-m "not extended"`` was added."""
        if status == NO_TESTS_COLLECTED and not filtered:
            print(f"=== {self.label}: no tests collected without a -k/-m filter: broken")
            status = 1
        elif status == NO_TESTS_COLLECTED and extended_left_out:
            print(
                f"=== {self.label}: no test ran; the extended tests were left out"
                " (the CI tier): add --all to run them"
            )
        counts: dict[str, int] = {}
        for n, kind in COUNT.findall(self.last):
            kind = "errors" if kind.startswith("error") else kind
            counts[kind] = counts.get(kind, 0) + int(n)
        return (0 if status == NO_TESTS_COLLECTED else status), counts  # filtered: fine


def _cpu_busy() -> tuple[float, float, float] | None:
    """(busy, all, steal) jiffies of the machine's CPUs so far, from /proc/stat
    (Linux). Steal, the time the hypervisor gave another guest, is in neither
    of the first two."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    steal = fields[7] if len(fields) > 7 else 0
    # user nice system idle iowait irq softirq (guest is counted in user)
    fields = fields[:7]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields), steal


class TreeCpu:
    """CPU-seconds of the processes under this one (the pytest sessions, their
    Rays, workers and fresh interpreters), read from /proc every ``interval_s``
    per (pid, start time) by a daemon thread (Linux; ``None`` elsewhere).

    Sampled, not summed from ``rusage``: Ray's raylet lets its workers go
    without adding their time to its own, so most of the suite's CPU time never
    reaches this process's children's times. A process's last ``interval_s``
    before it exits is missed, so the figure is a little low. The machine's busy
    CPU-seconds less this are the rest: other processes, the kernel's own work,
    and what the sampling missed."""

    def __init__(self, interval_s: float = 0.5) -> None:
        self._ticks: dict[tuple[int, int], int] = {}
        self._interval_s = interval_s
        self._stop = threading.Event()
        self.available = Path("/proc/self/stat").exists()
        self._thread: threading.Thread | None = None
        if self.available:
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()

    def _scan(self) -> None:
        children: dict[int, list[int]] = {}
        stats: dict[int, tuple[tuple[int, int], int]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
                fields = stat[stat.rfind(")") + 2 :].split()  # from field 3, state
                ppid, start = int(fields[1]), int(fields[19])
                ticks = int(fields[11]) + int(fields[12])  # utime + stime
            except (OSError, ValueError, IndexError):  # it exited, or an odd line
                continue
            pid = int(entry)
            children.setdefault(ppid, []).append(pid)
            stats[pid] = ((pid, start), ticks)
        stack = list(children.get(os.getpid(), ()))
        while stack:
            pid = stack.pop()
            if pid in stats:
                key, ticks = stats[pid]
                self._ticks[key] = ticks
            stack.extend(children.get(pid, ()))

    def _loop(self) -> None:
        try:
            while not self._stop.wait(self._interval_s):
                self._scan()
        except Exception:  # a figure for the summary line is not worth a traceback
            self.available = False

    def seconds(self) -> float | None:
        """The CPU-seconds so far (and stop sampling); ``None`` if unknown."""
        if self._thread is None:
            return None
        self._stop.set()
        self._thread.join()
        if not self.available:
            return None
        try:
            self._scan()
        except Exception:
            return None
        return sum(self._ticks.values()) / _CLK_TCK


def _own_basetemp(args: list[str], suffix: str) -> list[str]:
    """``args`` with a ``--basetemp`` of their own (pytest empties the basetemp
    when a session starts: side by side, a shared one would lose files)."""
    out = list(args)
    for i, a in enumerate(out):
        if a.startswith("--basetemp="):
            out[i] = a + suffix
        elif a == "--basetemp" and i + 1 < len(out):
            out[i + 1] = out[i + 1] + suffix
    return out


def _split_marker(args: list[str]) -> tuple[list[str], str | None]:
    """``args`` without their ``-m`` options, and the expression pytest would
    use: the last one, in any of pytest's forms (``-m EXPR``, ``-mEXPR``,
    ``-m=EXPR``)."""
    rest: list[str] = []
    expr = None
    i = 0
    while i < len(args):
        a = args[i]
        if a == "-m" and i + 1 < len(args):
            expr = args[i + 1]
            i += 2
            continue
        if a.startswith("-m") and len(a) > 2 and not a.startswith("--"):
            expr = a[3:] if a[2] == "=" else a[2:]
        else:
            rest.append(a)
        i += 1
    return rest, expr


def _quick(args: list[str]) -> list[str]:
    """Only the ``quick`` tests, within the caller's ``-m`` if any."""
    rest, expr = _split_marker([a for a in args if a != "--quick"])
    return rest + ["-m", "quick" if expr is None else f"quick and ({expr})"]


def _ci_tier(args: list[str]) -> tuple[list[str], bool]:
    """Leave out the ``extended`` tests (the CI tier), unless ``--all`` is given
    or the caller's ``-m`` names the marker; and whether they were left out."""
    if "--all" in args:
        return [a for a in args if a != "--all"], False
    rest, expr = _split_marker(args)
    if expr is None:
        return rest + ["-m", "not extended"], True
    if "extended" in expr:
        return rest + ["-m", expr], False
    return rest + ["-m", f"not extended and ({expr})"], True


def main(args: list[str]) -> int:
    if "--quick" in args:  # the quick tier: unit and single-fit tests
        args = _quick(args)
    filtered = any(a[:2] in ("-k", "-m") for a in args)
    args, extended_left_out = _ci_tier(args)
    side_by_side = "--one-after-the-other" not in args
    args = [a for a in args if a != "--one-after-the-other"]
    v1_env = dict(os.environ)
    v2_env = {k: v for k, v in os.environ.items() if k != "RAY_TRAIN_V2_ENABLED"}
    v2_env["RAY_TT_EXT_TEST_TRAIN"] = "v2"
    v2_args = _own_basetemp(args, "-v2")
    v1_paths, v2_paths = ["tests"], ["tests/v2"]
    if side_by_side:  # balance the two: the fresh-interpreter modules beside tests/v2
        either = [f"tests/{name}" for name in EITHER_SESSION_MODULES]
        v1_paths += [f"--ignore={path}" for path in either]
        v2_paths += either
    started, cpu_at_start, suite_cpu = time.monotonic(), _cpu_busy(), TreeCpu()
    sessions: list[Session] = []
    try:
        if side_by_side:
            v2 = Session("Train V2 (tests/v2)", v2_paths, v2_args, v2_env, live=False)
            sessions.append(v2)
            v1 = Session("Train V1 (tests/)", v1_paths, args, v1_env, live=True)
            sessions.append(v1)
            status_v1 = v1.wait()
            v1.print_output()
            status_v2 = v2.wait()
            v2.print_output()
        else:
            v1 = Session("Train V1 (tests/)", ["tests"], args, v1_env, live=True)
            sessions.append(v1)
            status_v1 = v1.wait()
            v1.print_output()
            v2 = Session("Train V2 (tests/v2)", ["tests/v2"], v2_args, v2_env, live=True)
            sessions.append(v2)
            status_v2 = v2.wait()
            v2.print_output()
    except KeyboardInterrupt:  # stop both sessions, and show what the buffered one said
        for session in sessions:
            session.interrupt()
        for session in sessions:
            if not session._log.closed:
                session.print_output()
        print("=== interrupted", flush=True)
        return 130
    status_v1, counts_v1 = v1.result(status_v1, filtered, extended_left_out)
    status_v2, counts_v2 = v2.result(status_v2, filtered, extended_left_out)
    order = ["failed", "errors", "passed", "skipped", "xfailed", "xpassed", "deselected"]

    def fmt(counts: dict[str, int]) -> str:
        return (
            ", ".join(f"{counts[k]} {k}" for k in order if counts.get(k)) or "no tests ran"
        )

    how = "side by side" if side_by_side else "one after the other"
    cpu_at_end = _cpu_busy()
    busy = ""
    if cpu_at_start and cpu_at_end and cpu_at_end[1] > cpu_at_start[1]:
        share = (cpu_at_end[0] - cpu_at_start[0]) / (cpu_at_end[1] - cpu_at_start[1])
        busy = f"; the machine's {os.cpu_count()} CPUs {share:.0%} busy"
        machine_s = (cpu_at_end[0] - cpu_at_start[0]) / _CLK_TCK
        steal_s = (cpu_at_end[2] - cpu_at_start[2]) / _CLK_TCK
        own_s = suite_cpu.seconds()
        # the rest, and the hypervisor's steal, tell a busy machine from a slow run
        if own_s is not None:
            busy += (
                f" ({machine_s:.0f} CPU-s: the suite's processes {own_s:.0f},"
                f" the rest {max(machine_s - own_s, 0):.0f}; steal {steal_s:.0f})"
            )
    v2_label = "tests/v2"
    if side_by_side:
        v2_label += (
            f" (with {len(EITHER_SESSION_MODULES)} fresh-interpreter modules of tests/)"
        )
    print(
        f"== session times ({how}): tests/ {v1.seconds:.0f} s, {v2_label} {v2.seconds:.0f} s,"
        f" both {time.monotonic() - started:.0f} s{busy} =="
    )
    print(f"== both sessions: tests/ {fmt(counts_v1)}; {v2_label} {fmt(counts_v2)} ==")
    return 0 if status_v1 == 0 and status_v2 == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
