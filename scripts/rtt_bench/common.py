"""What the sections share: units, progress lines, tables, the Ray processes' memory."""

from __future__ import annotations

import os
import time
from typing import Any

MiB = 1024 * 1024
GiB = 1024 * MiB


_STARTED = time.monotonic()


def progress(message: str) -> None:
    """One line per measurement, as it happens (long runs show progress)."""
    print(f"[{time.monotonic() - _STARTED:6.0f} s] {message}", flush=True)


def _table(title: str, header: list[str], rows: list[list[Any]]) -> str:
    cells = [header] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = [
        f"\n## {title}",
        "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)),
    ]
    lines.append("  ".join("-" * w for w in widths))
    lines += [
        "  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells[1:]
    ]
    return "\n".join(lines)


def _ray_processes() -> list[dict[str, Any]]:
    """This machine's Ray worker processes (titled ``ray::...``), with their memory.

    From /proc: RSS (``VmRSS``) and PSS (``smaps_rollup``: shared pages split
    between the processes that map them, so PSS sums to physical memory).
    """
    procs = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                title = f.read().split(b"\0")[0].decode(errors="replace")
            if not title.startswith("ray::"):
                continue
            fields = {}
            with open(f"/proc/{entry}/smaps_rollup") as f:
                for line in f:
                    parts = line.split()
                    if len(parts) >= 2 and parts[0].endswith(":"):
                        fields[parts[0][:-1]] = int(parts[1])
        except OSError:  # gone meanwhile
            continue
        procs.append(
            {
                "title": title,
                "rss_mib": fields.get("Rss", 0) / 1024,
                "pss_mib": fields.get("Pss", 0) / 1024,
            }
        )
    return procs


def _sample_memory(stop: Any, samples: list) -> None:
    """Every 0.5 s while trials run: Ray's processes' memory, and how many trials run."""
    while not stop.wait(0.5):
        procs = _ray_processes()
        running = sum("RayTrainWorker" in p["title"] for p in procs)  # 1 worker a trial
        if not running:
            continue
        hosts = [p for p in procs if "BackendExecutorHost" in p["title"]]
        samples.append(
            {
                "running": running,
                "rss_mib": sum(p["rss_mib"] for p in procs),
                "pss_mib": sum(p["pss_mib"] for p in procs),
                "hosts": len(hosts),
                "host_rss_mib": sum(p["rss_mib"] for p in hosts),
                "host_pss_mib": sum(p["pss_mib"] for p in hosts),
            }
        )


def _fit_seconds(case: dict[str, Any], unit: str = " s") -> str:
    """A flavour's mean fit() time, with each run's in brackets when it ran twice."""
    runs = case.get("seconds_by_run", [])
    each = f" ({' / '.join(f'{x:.1f}' for x in runs)})" if len(runs) > 1 else ""
    return f"{case['seconds']:.1f}{unit}{each}"
