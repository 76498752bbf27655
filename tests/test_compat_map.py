"""The map of Ray overrides in ``_compat`` is complete and true on the installed Ray.

On a new Ray release (``scripts/compat.sh NEW``, ``scripts/matrix.sh``) the first
test names every Ray attribute ray_tt_ext overrides, extends or patches that
moved: the upgrade canary's map.
"""

from __future__ import annotations

import ast
import importlib
import os
import re
from pathlib import Path

import pytest
from packaging.version import Version

from ray_tt_ext import _compat
from ray_tt_ext._compat import ray_check

pytestmark = pytest.mark.quick  # unit tests: scripts/test --quick runs them

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "ray_tt_ext"
COMPAT = PACKAGE / "_compat"


def resolve(target: str):
    """``"module:Qualified.name"`` -> the object (AttributeError/ImportError if gone)."""
    module_name, _, qualname = target.partition(":")
    obj = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = (
            getattr(obj, part)
            if part in dir(obj) or hasattr(obj, part)
            else _source_attr(obj, part)
        )
    return obj


def _source_attr(cls, name: str):
    """An instance attribute Ray sets in ``__init__`` (not on the class)."""
    import inspect

    if isinstance(cls, type) and re.search(
        rf"self\.{re.escape(name)}\b", inspect.getsource(cls)
    ):
        return name
    raise AttributeError(f"{cls!r} has no attribute {name!r}")


def applies(entry: _compat.RayOverride) -> bool:
    """ray_tt_ext builds on it on the installed Ray (``since`` .. ``until``)."""
    return ray_check.applies(entry)


def is_train_v2(entry: _compat.RayOverride) -> bool:
    """An override of Ray Train V2 (Ray 2.51 or later)."""
    return ray_check.part_of(entry) == ray_check.TRAIN_V2


def test_every_listed_ray_attribute_exists_on_the_installed_ray():
    """What ``python -m ray_tt_ext check-ray`` and the Tuners' check look up: every
    attribute ray_tt_ext builds on with this Ray, where the map says it is."""
    missing = ray_check.missing_ray_attributes()
    assert not missing, f"Ray {_compat.RAY_VERSION} moved:\n" + "\n".join(map(str, missing))


def test_each_since_is_when_the_attribute_appeared():
    """``since`` is the oldest Ray that has it, above its part's oldest release
    (2.40; Train V2's: 2.51), where it only says "from the start": on an older
    Ray (a row of the matrix before it) the attribute is not there. (``until``
    is ray_tt_ext's last use: the attribute may live on.)"""
    for entry in _compat.RAY_OVERRIDES:
        since = Version(entry.since).release[:2]
        oldest = (2, 51) if is_train_v2(entry) else (2, 40)
        if _compat.RAY_VERSION.release[:2] >= since or since <= oldest:
            continue
        with pytest.raises((AttributeError, ImportError)):
            ray_check.resolve(entry.ray)


def test_every_listed_override_of_ours_exists_and_says_where_it_runs():
    for entry in _compat.RAY_OVERRIDES:
        assert entry.how in {"overrides", "extends", "replaces", "patches", "adds", "uses"}
        assert entry.where and re.fullmatch(r"2\.\d+ \.\. 2\.\d+|none", entry.checked)
        if is_train_v2(entry) and not _compat.train_v2_enabled():
            continue  # the V2 modules are checked in the Train V2 session
        ours = resolve(entry.ours)
        assert callable(ours) or isinstance(ours, property), entry.ours


def _documented_overrides() -> set[str]:
    """Functions of the package whose docstring says they override a Ray method."""
    found = set()
    # "Overrides Ray's ...", "Extends ``FunctionTrainable.setup``": a Ray method
    # (ray_tt_ext's own classes are named ``ray_tt_ext.X`` or ``_X``).
    said = re.compile(
        r"\b(Overrides|Extends|Replaces|Patches)\b[^.]*?(\bRay\b|``[A-Z]\w*\.)", re.S
    )
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())

        def walk(node, prefix, module):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.ClassDef)):
                    name = prefix + child.name
                    doc = ast.get_docstring(child) or ""
                    if isinstance(child, ast.FunctionDef) and said.search(doc):
                        found.add(f"ray_tt_ext.{module}:{name}")
                    walk(child, name + ".", module)

        parts = path.relative_to(PACKAGE).with_suffix("").parts
        walk(tree, "", ".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def test_every_override_the_code_documents_is_in_the_map():
    listed = {entry.ours for entry in _compat.RAY_OVERRIDES}
    unlisted = sorted(_documented_overrides() - listed)
    assert not unlisted, f"overrides of Ray missing from _compat.RAY_OVERRIDES: {unlisted}"


def _names_taken_from_compat() -> set[str]:
    names: set[str] = set()
    for folder in ("ray_tt_ext", "tests", "release_tests", "scripts", "rtt_testing"):
        for path in (ROOT / folder).rglob("*.py"):
            if COMPAT in path.parents:
                continue
            tree = ast.parse(path.read_text())
            aliases = {"_compat", "ray_tt_ext._compat"}
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module == "ray_tt_ext._compat":
                    names |= {a.name for a in node.names}
                if isinstance(node, ast.ImportFrom) and node.module == "ray_tt_ext":
                    aliases |= {
                        a.asname for a in node.names if a.name == "_compat" and a.asname
                    }
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and ast.unparse(node.value) in aliases:
                    names.add(node.attr)
    # ``from ray_tt_ext._compat import train_v2``: a module of the package, not a name
    modules = {p.stem for p in COMPAT.glob("*.py")}
    return {n for n in names if not n.startswith("__") and n not in modules}


def test_compat_all_is_exactly_what_other_code_takes_from_it():
    taken = _names_taken_from_compat()
    assert set(_compat.__all__) == taken
    assert all(hasattr(_compat, name) for name in _compat.__all__)


def test_no_other_private_module_keeps_an_all():
    stale = [
        p.name
        for p in PACKAGE.glob("_*.py")
        if p.name not in ("__init__.py", "__main__.py") and "__all__" in p.read_text()
    ]
    assert not stale, stale


@pytest.mark.parametrize(
    "entry", [e for e in _compat.RAY_OVERRIDES if e.how != "uses"], ids=lambda e: e.ours
)
def test_each_override_is_where_the_map_says(entry):
    if is_train_v2(entry) and not _compat.train_v2_enabled():
        pytest.skip("Train V2 modules: checked in the Train V2 session")
    module_name = entry.ours.partition(":")[0]
    source = Path(importlib.import_module(module_name).__file__).read_text()
    ray_name = entry.ray.rpartition(".")[2].rpartition(":")[2]
    assert ray_name.strip("_") in source or ray_name in source, (entry.ray, entry.ours)


# ---------------------------------------------------------------------------
# A Ray that lacks an attribute of the map: named before anything starts
# ---------------------------------------------------------------------------


def _remove(monkeypatch, target: str) -> None:
    """Take ``target`` (``"module:Qualified.name"``) out of the installed Ray for this
    test, as a fork or a nightly without it would be: a class's or module's
    attribute deleted where it is defined, a dataclass field or an attribute Ray
    sets in a method (``self.name = ...``) taken out of the class's source."""
    import inspect

    module_name, _, qualname = target.partition(":")
    *owners, name = qualname.split(".")
    owner = importlib.import_module(module_name)
    for part in owners:
        owner = getattr(owner, part)
    if isinstance(owner, type) and owner.__flags__ & (1 << 8):  # an immutable (Cython) type
        # Stands in for it where it is looked up: a class of its attributes but one.
        parent = importlib.import_module(module_name)
        for part in owners[:-1]:
            parent = getattr(parent, part)
        attrs = {k: v for k, v in vars(owner).items() if k not in (name, "__dict__")}
        monkeypatch.setattr(parent, owners[-1], type(owner.__name__, (), attrs))
        return
    if isinstance(owner, type):
        fields = getattr(owner, "__dataclass_fields__", {})
        if name in vars(owner) or name in fields:
            if name in vars(owner):
                monkeypatch.delattr(owner, name)
            if name in fields:  # a field (with a default: a class attribute too)
                without_it = {k: v for k, v in fields.items() if k != name}
                monkeypatch.setattr(owner, "__dataclass_fields__", without_it)
            return
        getsource = inspect.getsource
        assigned = re.compile(rf"\bself\.{re.escape(name)}\b")

        def without(obj):
            source = getsource(obj)
            return "\n".join(
                line for line in source.splitlines() if not assigned.search(line)
            )

        monkeypatch.setattr(ray_check.inspect, "getsource", without)
        return
    if inspect.ismodule(owner):
        monkeypatch.delattr(owner, name)
        return
    # Any other object (a Ray actor class): one that has all it has but the name.
    parent = importlib.import_module(module_name)
    for part in owners[:-1]:
        parent = getattr(parent, part)

    class Without:
        def __getattr__(self, attr):
            if attr == name:
                raise AttributeError(attr)
            return getattr(owner, attr)

    monkeypatch.setattr(parent, owners[-1], Without())


def _applying_entries() -> dict[str, _compat.RayOverride]:
    """One entry per Ray attribute that ray_tt_ext builds on with the installed Ray."""
    found: dict[str, _compat.RayOverride] = {}
    for entry in _compat.RAY_OVERRIDES:
        if applies(entry):
            found.setdefault(entry.ray, entry)
    return found


def test_each_attribute_of_the_map_that_ray_lacks_is_named(monkeypatch):
    """Every Ray attribute of ``RAY_OVERRIDES`` taken out in turn (a Ray build
    without it): ``missing_ray_attributes`` names it (and the entries of its own
    attributes, if it is a class), nothing else, with the ray_tt_ext part that
    needs it; with it back, nothing is missing."""
    pytest.importorskip("torch")  # its Ray modules are imported, not read, here
    importlib.import_module("ray.train.torch.config")
    assert ray_check.missing_ray_attributes() == []
    entries = _applying_entries()
    assert len(entries) > 60
    for target, entry in entries.items():
        with monkeypatch.context() as patch:
            _remove(patch, target)
            missing = ray_check.missing_ray_attributes()
        named = [m.entry.ray for m in missing]
        # It, and the entries of its own attributes (a class's methods), nothing else.
        assert target in named, (target, missing)
        assert all(n == target or n.startswith(target + ".") for n in named), named
        # Once under each part that builds on it (Train V1 and Train V2 may both).
        its = [m for m in missing if m.entry.ray == target]
        parts = [m.part for m in its]
        assert len(parts) == len(set(parts)), its
        needed_by = {
            ray_check.part_of(e)
            for e in _compat.RAY_OVERRIDES
            if e.ray == target and applies(e)
        }
        assert set(parts) == needed_by, (target, parts, needed_by)
        (it,) = [m for m in its if m.part == ray_check.part_of(entry)]
        assert target in str(it) and entry.ours in str(it)
    assert ray_check.missing_ray_attributes() == []


def test_check_ray_lists_what_is_missing_without_starting_ray(monkeypatch, capsys):
    """``python -m ray_tt_ext check-ray``: exit 0 and a line per part on this Ray;
    exit 1 and the missing attribute named when one is taken out. Ray is not
    started (this test runs without the session's Ray)."""
    import ray

    from ray_tt_ext.__main__ import main

    started = ray.is_initialized()
    assert main(["check-ray"]) == 0
    out = capsys.readouterr().out
    assert f"ray=={_compat.RAY_VERSION}" in out
    assert "Ray Tune (both Tuners): ok" in out and "Ray Train V1" in out
    target = "ray.tune.execution.tune_controller:TuneController._schedule_trial_pause"
    with monkeypatch.context() as patch:
        _remove(patch, target)
        assert main(["check-ray"]) == 1
    out = capsys.readouterr().out
    assert "missing 1 of" in out and target in out and "UnsupportedRayVersionError" in out
    assert ray.is_initialized() is started


def test_check_ray_runs_as_a_module():
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "ray_tt_ext", "check-ray"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok" in done.stdout


def test_a_ray_without_a_name_ray_tt_ext_imports_is_named_not_an_import_error():
    """A Ray build without a name that ``ray_tt_ext._compat`` imports when it is
    first used (here Tune's ``_is_ray_cluster``), in a fresh interpreter:
    ``import ray_tt_ext`` works, taking ``ray_tt_ext.Tuner`` raises
    ``UnsupportedRayVersionError`` naming the attribute, not Python's
    ``ImportError``, and ``check-ray`` lists it with exit status 1."""
    import subprocess
    import sys

    script = """if True:
        import ray.tune.execution.cluster_info as module
        del module._is_ray_cluster  # a Ray build without it
        import ray_tt_ext
        try:
            ray_tt_ext.Tuner
        except ray_tt_ext.UnsupportedRayVersionError as e:
            print("REFUSED", e)
        from ray_tt_ext.__main__ import main
        print("EXIT", main(["check-ray"]))
    """
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "REFUSED" in out and "cluster_info:_is_ray_cluster" in out, out
    assert "ImportError" not in out + done.stderr
    assert "EXIT 1" in out and "missing 1 of" in out, out


def test_a_tuner_on_a_ray_that_lacks_an_attribute_says_which_before_any_trial(
    monkeypatch,
):
    """``ray_tt_ext.Tuner(...)`` refuses a Ray without an attribute it builds on, at
    construction (nothing is converted, put in the object store or started),
    with ``UnsupportedRayVersionError`` naming it and the fix; looked up again
    once the check is forgotten. ``v2.Tuner``: tests/v2/test_tuner_v2.py."""
    import ray_tt_ext
    from ray_tt_ext._compat import ray_check

    target = "ray.tune.registry:_Registry.flush_values"
    ray_check.forget_checks()
    try:
        with monkeypatch.context() as patch:
            _remove(patch, target)
            with pytest.raises(ray_tt_ext.UnsupportedRayVersionError) as info:
                ray_tt_ext.Tuner(lambda config: None)
        message = str(info.value)
        assert target in message and "ray_tt_ext.Tuner builds on 1 Ray attribute" in message
        assert "Nothing was started" in message and "pip install" in message
        assert "check-ray" in message
        # Cached per process: the attribute back, the same answer until forgotten.
        with pytest.raises(ray_tt_ext.UnsupportedRayVersionError):
            ray_tt_ext.Tuner(lambda config: None)
    finally:
        ray_check.forget_checks()
    assert isinstance(ray_tt_ext.Tuner(lambda config: None), ray_tt_ext.Tuner)


# ---------------------------------------------------------------------------
# One truth about support: the map, the errors and the compatibility page agree
# ---------------------------------------------------------------------------


def _matrix_rows() -> dict[tuple[int, int], dict[str, str]]:
    """docs/compatibility.tsv (written by scripts/matrix.sh), by Ray minor."""
    lines = (ROOT / "docs" / "compatibility.tsv").read_text().splitlines()
    header = lines[0].split("\t")
    rows = {}
    for line in lines[1:]:
        row = dict(zip(header, line.split("\t"), strict=False))
        rows[Version(row["ray"]).release[:2]] = row
    return rows


def _minor(text: str) -> tuple[int, int]:
    return Version(text).release[:2]


@pytest.mark.skipif(
    bool(os.environ.get("RTT_MATRIX_ROW")),
    reason="a row of scripts/matrix.sh, which writes the rows this checks (it runs "
    "this test once the page is written)",
)
def test_checked_is_what_the_matrix_ran():
    """Each entry's ``checked`` is the range of matrix rows, between its ``since``
    and ``until``, whose session of its part passed (Train V2 entries: a
    ``tests/v2`` count with passes), with no row in it that failed."""
    from ray_tt_ext._compat.overrides import MATRIX_RAN

    rows = _matrix_rows()
    passed = {minor for minor, row in rows.items() if row["verdict"] == "PASS"}
    assert {_minor(m) for m in MATRIX_RAN} == passed, (
        "MATRIX_RAN (what `checked` is derived from) is not the page's passing rows"
    )
    wrong = []
    for entry in _compat.RAY_OVERRIDES:
        v2 = is_train_v2(entry)
        since, until = _minor(entry.since), _minor(entry.until or "9.99")
        if not v2:
            since = max(since, (2, 40))
        ran = []
        for minor, row in sorted(rows.items()):
            if not since <= minor <= until:
                continue
            sessions = row["summary"].split("; ")
            session = sessions[-1] if v2 else sessions[0]
            if row["verdict"] != "PASS" or not re.search(r"\d+ passed", session):
                wrong.append(
                    f"{entry.ray}: row {row['ray']} did not pass ({row['summary']})"
                )
            ran.append(minor)
        expected = (
            f"{'.'.join(map(str, ran[0]))} .. {'.'.join(map(str, ran[-1]))}"
            if ran
            else "none"
        )
        if entry.checked != expected:
            wrong.append(
                f"{entry.ray} ({entry.ours}): checked {entry.checked!r}, matrix {expected!r}"
            )
    assert not wrong, "\n".join(wrong)


def _render_compatibility():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "render_compatibility", ROOT / "scripts" / "render_compatibility.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rows_at_two_commits_ran_the_same_code_when_only_the_matrix_wrote_between(
    tmp_path,
):
    """scripts/matrix.sh keeps a passed row while the code is the same
    (``render_compatibility.code_of``): a commit that only adds rows (the rows,
    the page's table, ``MATRIX_RAN``) or a CHANGELOG entry leaves a row's code as
    it was; any other change to any file, the page's prose and the override
    map's other lines among them, makes it another code, and so does a file in
    the working tree that is not committed yet."""
    import subprocess

    render = _render_compatibility()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path)]

    def write(files: dict[str, str]) -> None:
        for path, text in files.items():
            (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / path).write_text(text)

    def commit(files: dict[str, str]) -> str:
        write(files)
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "commit", "-qm", "c"], check=True)
        return subprocess.run(
            [*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True
        ).stdout.strip()

    def page(prose: str, rows: list[str]) -> str:
        table = "".join(f"| {r} | none | PASS |\n" for r in rows)
        return (
            f"{prose}\nTrain V2 rows that pass: {', '.join(rows)}.\n"
            f"Ray minors with no row in the table: 2.40.\n\n{table}"
        )

    def matrix_ran(minors: str) -> str:
        return f"RAY = 1\nMATRIX_RAN: tuple[str, ...] = ({minors})\n"

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    overrides = "ray_tt_ext/_compat/overrides.py"
    # Files enough that the page's place among them, were they ordered by
    # content, would move as its table grows (the digest orders them by path).
    others = {f"pkg/m{i:02d}.py": f"i = {i}\n" for i in range(20)}
    first = commit(
        {
            **others,
            "a.py": "x = 1\n",
            overrides: matrix_ran('"2.60",'),
            "CHANGELOG.md": "- a\n",
            "docs/compatibility.md": page("Train V2: Ray >=2.51.", ["2.60.0"]),
        }
    )
    code = render.code_of(first, tmp_path)
    assert code is not None and render.same_code(first, tmp_path)
    rows = commit(
        {
            overrides: matrix_ran('"2.52", "2.60"'),
            "CHANGELOG.md": "- a\n- b\n",
            "docs/compatibility.md": page("Train V2: Ray >=2.51.", ["2.52.1", "2.60.0"]),
            "docs/compatibility.tsv": "ray\n",
            "compat_results/rows/2.52.txt": "ray 2.52.1: PASS\n",
        }
    )
    assert render.code_of(rows, tmp_path) == code
    assert render.same_code(first, tmp_path) and render.same_code(code, tmp_path)
    assert render.code_of(first + "-dirty", tmp_path) is None
    assert not render.same_code(first + "-dirty", tmp_path)
    write({"tests/test_new.py": "def test(): pass\n"})  # not committed yet
    assert not render.same_code(first, tmp_path)
    assert render.code_of(render.working_tree(tmp_path), tmp_path) != code
    (tmp_path / "tests" / "test_new.py").unlink()
    assert render.same_code(first, tmp_path)
    for change in (
        {"a.py": "x = 2\n"},
        {overrides: matrix_ran('"2.52", "2.60"').replace("RAY = 1", "RAY = 2")},
        {"docs/compatibility.md": page("Train V2: Ray >=2.52.", ["2.52.1", "2.60.0"])},
        {"docs/guide.md": "new\n"},
    ):
        changed = commit(change)
        assert render.code_of(changed, tmp_path) != code, change
        assert not render.same_code(first, tmp_path), change
        code = render.code_of(changed, tmp_path)
    # The CHANGELOG and the page's rows (compatibility.tsv) are left out because
    # nothing a row runs reads them (these only say so, or run after the rows).
    says_so = ("render_compatibility.py", "matrix.sh", Path(__file__).name)
    readers = [
        str(p.relative_to(ROOT))
        for folder in ("tests", "rtt_testing", "ray_tt_ext", "release_tests", "scripts")
        for p in (ROOT / folder).rglob("*")
        if p.is_file()
        and p.suffix in (".py", ".sh", ".toml", ".cfg", ".ini", "")
        and p.name not in says_so
        and re.search(r"CHANGELOG|compatibility\.tsv", p.read_text(errors="replace"))
    ]
    assert not readers, readers


def test_the_supported_releases_are_said_the_same_everywhere(monkeypatch):
    """The package's range (``MIN_RAY_VERSION``, ``MAX_RAY_VERSION``) and Train V2's
    (``MIN_TRAIN_V2_RAY_VERSION``) are what the errors name, what
    docs/compatibility.md and the README say, and what the package requires."""
    from ray_tt_ext._compat import train_mode, versions

    low, high, v2 = (
        versions.MIN_RAY_VERSION,
        versions.MAX_RAY_VERSION,
        train_mode.MIN_TRAIN_V2_RAY_VERSION,
    )
    assert ray_check.TRAIN_V2_SINCE == v2  # check-ray's, without train_mode
    page = (ROOT / "docs" / "compatibility.md").read_text()
    assert f"Ray\n  `>={low},<{high}`" in page or f"Ray `>={low},<{high}`" in page
    assert f"`>={v2},<{high}`" in page
    assert f"naming `ray>={v2}`" in page
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert (
        f'"ray[tune,train]>={low},<{Version(str(high)).base_version.rsplit(".", 1)[0]}"'
        in pyproject
    )
    readme = (ROOT / "README.md").read_text()
    assert (
        f"Ray `>={low.base_version.rsplit('.', 1)[0]},<{high.base_version.rsplit('.', 1)[0]}`"
        in readme
    )
    # The error of ray_tt_ext.v2 on a Ray before Train V2, and of the bridge.
    monkeypatch.setattr(train_mode, "RAY_VERSION", Version("2.50.0"))
    with pytest.raises(_compat.UnsupportedRayVersionError) as info:
        train_mode.ensure_train_v2("ray_tt_ext.v2.Tuner")
    assert f"ray>={v2}" in str(info.value)
    bridge = (ROOT / "ray_tt_ext" / "_compat" / "train_v2_bridge.py").read_text()
    assert "MIN_TRAIN_V2_RAY_VERSION" in bridge and ">=2.60" not in bridge
