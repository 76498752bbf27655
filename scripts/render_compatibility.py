#!/usr/bin/env python3
"""Merge verdict lines from scripts/matrix.sh into docs/compatibility.{tsv,md}.

    python3 scripts/render_compatibility.py [--commit SHA] compat_results/matrix.txt
    python3 scripts/render_compatibility.py --same-code COMMIT   (exit 0: yes)

``--commit`` names the commit the verdicts were run on (default: HEAD).
``--code`` prints the digest of the code in the working tree (:func:`code_of`):
every file git would commit, but the matrix's own outputs and the CHANGELOG
(:data:`MATRIX_OUTPUTS`, the ``MATRIX_RAN`` line, the page's lines written from the
rows). ``--same-code REF`` (a commit, or a digest that ``--code`` printed) exits 0
when it is the working tree's code. ``--done VERSION CODE`` prints the verdict of
a row of VERSION that passed on CODE (its row file, else the committed page's
row) and exits 0, else exits 1: scripts/matrix.sh records each row's code and
does not run such a row again, so rows run at several commits of a session that
only added rows count as one run of that code, in any clone.

A verdict line is ``ray 2.60.0: PASS (tests/ 270 passed, 33 skipped; tests/v2 75
passed) in 845 s on 2026-12-06 at 1370021 code 0123456789abcdef`` (its wall
time, date, commit and code: scripts/matrix.sh writes them; without them, today,
``--commit`` and that commit's code). Rows of Ray versions not in the input are
kept. What the
page says about the supported releases comes from the package's own constants
(read from its source, not imported), and ``tests/test_compat_map.py`` checks
that the page, the errors and ``RAY_OVERRIDES`` agree. Standard library only.
"""

from __future__ import annotations

import datetime
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TSV = ROOT / "docs" / "compatibility.tsv"
MD = ROOT / "docs" / "compatibility.md"
LINE = re.compile(
    r"^ray (?P<version>\S+): (?P<verdict>PASS|FAIL)(?: \((?P<summary>.*)\))?"
    r"(?: in (?P<seconds>\d+) s)?(?: on (?P<date>\S+) at (?P<commit>\S+))?"
    r"(?: code (?P<code>[0-9a-f]+))?$"
)
COLUMNS = ["ray", "pins", "verdict", "summary", "date", "commit", "seconds", "code"]
#: Files scripts/matrix.sh itself writes, and the CHANGELOG (nothing a row runs
#: reads them): a row's code is every other file, with the lines of
#: :data:`WRITTEN_LINES` blanked.
MATRIX_OUTPUTS = ("compat_results/", "docs/compatibility.tsv", "CHANGELOG.md")
#: The lines the matrix writes into files that are code otherwise: the override
#: map's ``MATRIX_RAN`` (:func:`write_matrix_ran`), and the page's lines written
#: from the rows (its table and the two lists before it; the rest of the page,
#: which tests read, comes from the package's constants and this script).
WRITTEN_LINES = {
    "ray_tt_ext/_compat/overrides.py": re.compile(
        r"^MATRIX_RAN: tuple\[str, \.\.\.\] = \(.*\)(?:  # fmt: skip)?$", re.M
    ),
    "docs/compatibility.md": re.compile(
        r"^(?:\| \d+\.\d+\S* \|.*|Train V2 rows that pass: .*|"
        r"Ray minors with no row in the table: .*)\n?",
        re.M,
    ),
}
#: The length of a code digest (hex digits).
CODE_DIGITS = 16


def _constant(path: str, name: str) -> str:
    """The version string of ``name = Version("...")`` in a module of the package."""
    text = (ROOT / path).read_text()
    match = re.search(rf'^{name}\s*=\s*Version\("([^"]+)"\)', text, re.M)
    if match is None:
        raise SystemExit(f"{name} not found in {path}")
    return match.group(1)


MIN_RAY = _constant("ray_tt_ext/_compat/versions.py", "MIN_RAY_VERSION")
MAX_RAY = _constant("ray_tt_ext/_compat/versions.py", "MAX_RAY_VERSION")
MIN_TRAIN_V2 = _constant("ray_tt_ext/_compat/train_mode.py", "MIN_TRAIN_V2_RAY_VERSION")


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def pins(version: str) -> str:
    path = ROOT / "constraints" / f"ray-{_minor(version)}.txt"
    if not path.exists():
        return "none"
    lines = [
        line.strip()
        for line in path.read_text().splitlines()
        if line.strip() and not line.startswith("#") and not line.startswith("ray==")
    ]
    return ", ".join(lines) or "none"


def _sessions(summary: str) -> tuple[str, str]:
    """The Train V1 and Train V2 sessions' counts of a verdict's summary."""
    v1, _, v2 = summary.partition("; ")
    v1 = v1.removeprefix("tests/ ").strip()
    v2 = re.sub(r"^tests/v2( \(with [^)]*\))? ", "", v2.strip())
    return v1, v2


#: What differs between the Train V2 releases, as ``tests/v2`` asserts it on each
#: row (``test_the_compatibility_page_says_what_this_ray_does``): (its id in that
#: test, what, the oldest release that has it, the newest or ``None``, what the
#: other releases do).
V2_DIFFERENCES = [
    (
        "preemption_notice",
        "Ray's preemption notice in the training loop (`ray.train.get_preemption_info`)",
        "2.58",
        None,
        "Ray has no notice for the loop (ray_tt_ext adds none)",
    ),
    (
        "relax_collectives",
        "`FailureConfig(relax_collectives_on_preemption=True)`",
        "2.60",
        None,
        "Ray refuses the argument (`TypeError`)",
    ),
    (
        "watcher_in_controller",
        "a `v2.Tuner` trial's drained-node watcher kept in its controller",
        "2.57",
        None,
        "Ray has no drained-node watcher",
    ),
    (
        "barrier_in_controller",
        "a `v2.Tuner` trial's worker-group barrier kept in its controller",
        "2.56",
        None,
        "Ray's `SynchronizationActor`, an actor per worker group, as without ray_tt_ext",
    ),
    (
        "no_idle_dataset_manager",
        "no `DatasetManager` actor for a `v2.Tuner` trainer without datasets",
        "2.56",
        None,
        "Ray starts none either",
    ),
    (
        "validate_fn_refused",
        "`ray.train.report(validate_fn=...)`, refused under `v2.Tuner` (`ValueError`)",
        "2.51",
        "2.53",
        "Ray has `validation_config` instead, refused by `v2.Tuner` (`ValueError`)",
    ),
]


def _releases(since: str, until: str | None) -> str:
    return f"{since} .. {until}" if until else f"{since}+"


def page(rows: list[list[str]]) -> str:
    v2_rows = [
        r[0]
        for r in rows
        if r[2] == "PASS" and _minor_tuple(r[0]) >= _minor_tuple(MIN_TRAIN_V2)
    ]
    have = {_minor(r[0]) for r in rows}
    missing = sorted(
        (
            p.stem.removeprefix("ray-")
            for p in (ROOT / "constraints").glob("ray-*.txt")
            if p.stem.removeprefix("ray-") not in have
        ),
        key=_minor_tuple,
    )
    lines = [
        "# Compatibility",
        "",
        "Generated by `scripts/matrix.sh` (do not edit by hand; run it again).",
        "",
        "## Supported Ray releases",
        "",
        "- **Train V1** (`ray_tt_ext.Tuner(trainer)`, `ray_tt_ext`'s trainers) and",
        "  function and class trainables under either Tuner: Ray",
        f"  `>={MIN_RAY},<{MAX_RAY}`.",
        "- **Train V2** (`ray_tt_ext.v2`: `v2.Tuner(trainer)`, its trainers and",
        f"  `CheckpointConfig`): Ray `>={MIN_TRAIN_V2},<{MAX_RAY}`, every release with",
        "  Train V2 on by default. Every guarantee of `ray_tt_ext.v2` holds on each of",
        "  them, with the differences below (where Ray itself lacks what a guarantee",
        f"  needs). On Ray < {MIN_TRAIN_V2}, `ray_tt_ext.v2`'s names raise",
        f"  `ray_tt_ext.UnsupportedRayVersionError` naming `ray>={MIN_TRAIN_V2}`.",
        "- **Anything else** (a release outside the range, or a build of Ray such as a",
        "  fork or a nightly that lacks a Ray attribute ray_tt_ext builds on):",
        "  constructing `ray_tt_ext.Tuner` or `ray_tt_ext.v2.Tuner` raises",
        "  `UnsupportedRayVersionError` naming each missing attribute, before any trial",
        "  starts; `python -m ray_tt_ext check-ray` prints the same list without",
        "  starting Ray (exit status 1 when something is missing). A newer release",
        "  that has them all runs with a warning: run `scripts/compat.sh VERSION`.",
        "",
        "## What differs between the Train V2 releases",
        "",
        "| what | Ray releases | on the other releases |",
        "| --- | --- | --- |",
    ]
    for _, what, since, until, otherwise in V2_DIFFERENCES:
        lines.append(f"| {what} | {_releases(since, until)} | {otherwise} |")
    lines += [
        "",
        "Everything else holds alike on every Train V2 release, worker groups reused",
        "between trials (`reuse_actors=True`) among it.",
        "",
        "## The matrix",
        "",
        "Each row is the whole regression suite against one Ray release, in a venv",
        "of its own (`scripts/compat.sh VERSION`, the pins in `constraints/`):",
        "`tests/` (Train V1) and `tests/v2` (Train V2, with the fresh-interpreter",
        "modules of `tests/`) in sessions of their own, side by side; a test that",
        "needs what a release lacks is skipped there, and counted. On Ray <",
        f"{MIN_TRAIN_V2} the `tests/v2` tests are skipped (the modules of `tests/`",
        "still run). The wall time is the row's, its venv's install included.",
        f"Train V2 rows that pass: {', '.join(v2_rows) or 'none'}.",
        f"Ray minors with no row in the table: {', '.join(missing) or 'none'}.",
        "",
        "The code column is a digest of the code a row ran: every file of the",
        "working tree git would commit, but what the matrix writes (the rows, this",
        "table, `MATRIX_RAN`) and the CHANGELOG (`scripts/render_compatibility.py",
        "--code`). Rows with the same digest ran the same code, whatever their",
        "commit; `-` is a row run before the digest was recorded, on a tree with",
        "changes not committed.",
        "",
        "| Ray | pins | verdict | Train V1 (`tests/`) | Train V2 (`tests/v2`) "
        "| wall time | date | ray_tt_ext commit | code |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        v1, v2 = _sessions(r[3])
        seconds = f"{int(r[6]) // 60} min {int(r[6]) % 60} s" if r[6] else "-"
        code = (r[7] or "-")[:8]
        lines.append(
            f"| {r[0]} | {r[1]} | {r[2]} | {v1} | {v2} | {seconds} | {r[4]} | {r[5]} "
            f"| {code} |"
        )
    return "\n".join(lines) + "\n"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, capture_output=True, text=True, check=True
    ).stdout


def working_tree(repo: Path = ROOT) -> str:
    """The git tree of the working tree as it is: tracked files as edited and
    files git does not ignore, committed or not (a temporary index; the
    repository's own index is left alone)."""
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "GIT_INDEX_FILE": os.path.join(tmp, "index")}
        for args in (["read-tree", "HEAD"], ["add", "-A"]):
            subprocess.run(["git", *args], cwd=repo, env=env, check=True)
        return subprocess.run(
            ["git", "write-tree"],
            cwd=repo,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()


def code_of(ref: str, repo: Path = ROOT) -> str | None:
    """A digest of the code at ``ref`` (a commit or a tree): every file but
    :data:`MATRIX_OUTPUTS`, with the lines of :data:`WRITTEN_LINES` blanked.
    None for a name git does not know (``abc1234-dirty``)."""
    import hashlib

    try:
        listing = _git(repo, "ls-tree", "-r", "-z", "--full-tree", ref)
    except subprocess.CalledProcessError:
        return None
    digest = hashlib.sha256()
    entries = (e.split("\t", 1) for e in listing.split("\0") if e)
    for path, meta in sorted((path, meta) for meta, path in entries):  # by path
        if path.startswith(MATRIX_OUTPUTS):
            continue
        if path in WRITTEN_LINES:
            # Each written line removed, with its end (a table's length aside).
            text = WRITTEN_LINES[path].sub("", _git(repo, "show", f"{ref}:{path}"))
            meta = hashlib.sha256(text.encode()).hexdigest()
        digest.update(f"{meta}\t{path}\n".encode())
    return digest.hexdigest()[:CODE_DIGITS]


def same_code(ref: str, repo: Path = ROOT) -> bool:
    """Whether ``ref`` (a commit, a tree, or a digest :func:`code_of` gave) is the
    code of the working tree."""
    if re.fullmatch(rf"[0-9a-f]{{{CODE_DIGITS}}}", ref) and code_of(ref, repo) is None:
        row = ref
    else:
        row = code_of(ref, repo)
    return row is not None and row == code_of(working_tree(repo), repo)


def page_rows() -> list[list[str]]:
    """docs/compatibility.tsv's rows (cells in :data:`COLUMNS`' order), each with
    its code (that of its commit when the row did not record one)."""
    rows = []
    for line in TSV.read_text().splitlines()[1:] if TSV.exists() else []:
        cells = line.split("\t")
        cells += [""] * (len(COLUMNS) - len(cells))
        cells[7] = cells[7] or code_of(cells[5]) or ""
        rows.append(cells)
    return rows


def done(version: str, code: str) -> str | None:
    """The verdict line of a row of ``version`` that passed on ``code``: its row
    file (compat_results/rows/VERSION.txt, this checkout's) or else the page's
    row (docs/compatibility.tsv, committed); None when neither did."""
    row = ROOT / "compat_results" / "rows" / f"{version}.txt"
    if row.exists():
        m = LINE.match(row.read_text().splitlines()[0].strip())
        if (
            m
            and m["verdict"] == "PASS"
            and (m["code"] or code_of(m["commit"] or "")) == code
        ):
            return m.group(0)
    for ray, _, verdict, summary, date, commit, seconds, row_code in page_rows():
        if _minor(ray) == _minor(version) and verdict == "PASS" and row_code == code:
            return f"ray {ray}: PASS ({summary}) in {seconds} s on {date} at {commit} code {code}"
    return None


def _minor_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in _minor(version).split("."))


def main(argv: list[str]) -> int:
    if argv[:1] == ["--code"]:
        print(code_of(working_tree()))
        return 0
    if argv[:1] == ["--done"]:
        if len(argv) != 3:
            raise SystemExit("usage: render_compatibility.py --done VERSION CODE")
        line = done(argv[1], argv[2])
        if line is not None:
            print(line)
        return 0 if line is not None else 1
    if argv[:1] == ["--same-code"]:
        if len(argv) != 2:
            raise SystemExit("usage: render_compatibility.py --same-code COMMIT_OR_CODE")
        return 0 if same_code(argv[1]) else 1
    rows = {_minor(cells[0]): cells for cells in page_rows()}
    today = datetime.date.today().isoformat()
    commit = None
    if argv[:1] == ["--commit"]:
        commit, argv = argv[1], argv[2:]
    commit = commit or (
        subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
        or "?"
    )
    for path in argv:
        for line in Path(path).read_text().splitlines():
            m = LINE.match(line.strip())
            if m:
                v = m["version"]
                rows[_minor(v)] = [
                    v,
                    pins(v),
                    m["verdict"],
                    m["summary"] or "",
                    m["date"] or today,
                    m["commit"] or commit,
                    m["seconds"] or "",
                    m["code"] or code_of(m["commit"] or commit) or "",
                ]
    TSV.parent.mkdir(exist_ok=True)
    ordered = sorted(rows.values(), key=lambda r: _minor_tuple(r[0]))
    TSV.write_text(
        "\t".join(COLUMNS) + "\n" + "".join("\t".join(r) + "\n" for r in ordered)
    )
    MD.write_text(page(ordered))
    write_matrix_ran(ordered)
    print(f"wrote {MD} and MATRIX_RAN in {OVERRIDES.relative_to(ROOT)}")
    return 0


OVERRIDES = ROOT / "ray_tt_ext" / "_compat" / "overrides.py"


def write_matrix_ran(rows: list[list[str]]) -> None:
    """``MATRIX_RAN`` in the override map: the minors of the rows that passed,
    from which each entry's ``checked`` is derived."""
    passed = [_minor(r[0]) for r in rows if r[2] == "PASS"]
    items = ", ".join(f'"{m}"' for m in passed) + ("," if len(passed) == 1 else "")
    text = OVERRIDES.read_text()
    new, n = WRITTEN_LINES["ray_tt_ext/_compat/overrides.py"].subn(
        # One line, which the formatter leaves (WRITTEN_LINES reads it so).
        f"MATRIX_RAN: tuple[str, ...] = ({items})  # fmt: skip",
        text,
    )
    if n != 1:
        raise SystemExit(f"MATRIX_RAN not found (once) in {OVERRIDES}")
    OVERRIDES.write_text(new)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
