"""workloads/ by role (issue 50): every fixture has an entry in workloads/fixtures.toml (or is listed as not
recorded by these programs), every program the table names exists and compiles, the recorder builds a command
for every entry, and no workload reaches into tests/ through sys.path (the truth generators live in tests/truth/)."""

from __future__ import annotations

import ast
import importlib.util
import py_compile
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = ROOT / "workloads"
FIXTURES = ROOT / "tests" / "fixtures" / "traces"
ROLES = {"ladder", "training", "inference", "host", "memory", "cpu"}

pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")


def _recorder():
    spec = importlib.util.spec_from_file_location("workloads_recorder", WORKLOADS / "recorder.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_fixture_has_an_entry_or_is_listed_as_not_recorded():
    rec = _recorder()
    made = {f for e in rec.load().values() for f in rec.fixtures_of(e)}
    listed = set(rec.not_recorded())
    fixtures = {d.name for d in FIXTURES.iterdir() if d.is_dir()}
    assert fixtures - made - listed == set()
    assert listed <= fixtures and not listed & made


def test_every_program_exists_compiles_and_the_recorder_builds_its_command(tmp_path):
    rec = _recorder()
    for name, e in rec.load().items():
        prog = WORKLOADS / e["program"]
        assert prog.is_file(), (name, e["program"])
        py_compile.compile(str(prog), cfile=str(tmp_path / "x.pyc"), doraise=True)
        text = rec.provenance_command(rec.commands(e, tmp_path), tmp_path)
        assert f"workloads/{e['program']}" in text or e["from_report"], name


def test_workloads_are_laid_out_by_role():
    top = {p.name for p in WORKLOADS.iterdir() if not p.name.startswith((".", "__"))}
    assert ROLES <= top
    assert not [p for p in top if p.endswith(".sh") and p.startswith("record")]
    assert not [p for p in top if p.startswith("fixture_truth")]
    assert len([p for p in top if p.endswith(".py")]) <= 4  # shared modules, the recorder, trim.py


def _sys_path_inserts(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        call = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        if call and node.func.attr in ("insert", "append") and ast.unparse(node.func.value) == "sys.path":
            out.append(ast.unparse(node.args[-1]))
    return out


def test_no_workload_reaches_into_tests():
    for path in sorted(WORKLOADS.rglob("*.py")):
        for arg in _sys_path_inserts(path):
            assert "tests" not in arg, (path, arg)
        assert "import sqltruth" not in path.read_text(), path
    for path in sorted((ROOT / "tests" / "truth").glob("*.py")):
        assert not _sys_path_inserts(path), path


def test_programs_resolve_their_imports():
    """Each program's own imports name a module of its folder, of workloads/ (found through its sys.path line),
    or a package outside the repository: none is left pointing at a file that moved."""
    shared = {p.stem for p in WORKLOADS.glob("*.py")}
    for path in sorted(WORKLOADS.glob("*/**/*.py")):
        tree = ast.parse(path.read_text())
        here = {p.stem for p in path.parent.glob("*.py")}
        mods = {n.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for n in node.names}
        mods |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module and not node.level}
        local = mods & (shared | {p.stem for p in WORKLOADS.rglob("*.py")})
        for m in local:
            assert m in here or m in shared, (path, m)
            if m in shared and m not in here:
                assert _sys_path_inserts(path), (path, f"imports {m} without the sys.path line naming workloads/")
