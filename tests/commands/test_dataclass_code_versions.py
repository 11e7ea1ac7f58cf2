"""``nsysan._dataclass_code`` on every Python nsysan supports that this machine has (3.10 to 3.13: each
version's ``dataclasses`` generates its methods its own way; 3.13 compiles a class's methods at
once): the methods made with the table, cold and warm, are the code that version compiles itself,
and the classes behave the same. The module runs alone there (it and ``_atomic`` need only the
standard library)."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess

import pytest
from conftest import ROOT

SCRIPT = r'''
import importlib.util, json, sys, types, dataclasses
from pathlib import Path
pkg = types.ModuleType("nsysan"); pkg.__path__ = []; sys.modules["nsysan"] = pkg
cache = types.ModuleType("nsysan._cache"); cache.user_cache = lambda kind: Path(sys.argv[2]) / kind
sys.modules["nsysan._cache"] = cache
def load(name):  # a module of nsysan from its file (these two import only the standard library)
    spec = importlib.util.spec_from_file_location(f"nsysan.{name}", f"{sys.argv[1]}/{name}.py")
    m = importlib.util.module_from_spec(spec); sys.modules[spec.name] = m; setattr(pkg, name, m)
    spec.loader.exec_module(m)
    return m
load("_atomic")
d = load("_dataclass_code")
if sys.argv[3] == "table":
    d.install()
SRC = """
import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar, Any
@dataclass(frozen=True)
class A:
    x: int
    y: str = "s"
    z: list = field(default_factory=list)
    c: ClassVar[int] = 3
@dataclass(order=True, unsafe_hash=True)
class B:
    a: float = 1.5
    b: tuple = ()
@dataclass(frozen=True, slots=True)
class C:
    p: int = 0
    q: Any = None
@dataclass(kw_only=True)
class D(B):
    k: int = 7
"""
out = {}
for i, src in enumerate((SRC, "from __future__ import annotations\n" + SRC)):
    mod = types.ModuleType(f"m{i}"); sys.modules[f"m{i}"] = mod; ns = mod.__dict__
    exec(compile(src, f"m{i}", "exec"), ns)
    for name in "ABCD":
        for k, f in vars(ns[name]).items():
            if isinstance(f, types.FunctionType) and f.__code__.co_filename == "<string>":
                c = f.__code__
                out[f"{i}.{name}.{k}"] = [c.co_code.hex(), c.co_flags, list(c.co_names), list(c.co_varnames),
                                          repr(c.co_consts), repr(f.__annotations__), repr(f.__defaults__)]
    a, b = ns["A"](1), ns["B"]()
    try:
        a.x = 5
        frozen = False
    except dataclasses.FrozenInstanceError:
        frozen = True
    out[f"{i}.behaviour"] = [repr(a), a == ns["A"](1), hash(b) == hash(ns["B"]()), b < ns["B"](2.0),
                             repr(ns["C"]()), repr(ns["D"](k=2)), frozen]
d.save()
print(json.dumps({"classes": out, "compiled": d._compiled, "patched": getattr(dataclasses, "exec", None) is d._exec}))
'''


def _python(version: str) -> str | None:
    """An interpreter of ``version`` that runs: on PATH, else one pyenv installed (its shims may not
    answer for a version that is not selected)."""
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    pyenv = sorted(glob.glob(f"{root}/versions/{version}.*/bin/python{version}"))
    for exe in [shutil.which(f"python{version}"), *pyenv]:
        if exe and subprocess.run([exe, "-c", "pass"], capture_output=True).returncode == 0:
            return exe
    return None


@pytest.mark.parametrize("version", ["3.10", "3.11", "3.12", "3.13"])
def test_the_table_gives_each_python_its_own_code(version, tmp_path):
    exe = _python(version)
    if exe is None:
        pytest.skip(f"no python{version} on this machine")
    env = {**os.environ, "PYTHONHASHSEED": "0"}  # a frozenset constant reads in one order in every process
    env.pop("PYTHONPATH", None)

    def run(mode):
        r = subprocess.run([exe, "-c", SCRIPT, str(ROOT / "nsysan"), str(tmp_path), mode],
                           env=env, capture_output=True, text=True, timeout=120)
        if r.returncode != 0 and "SyntaxError" in r.stderr:
            pytest.skip(f"python{version} cannot read the module: {r.stderr[-200:]}")
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    plain, cold, warm = run("plain"), run("table"), run("table")
    assert not plain["patched"] and cold["patched"] and warm["patched"]
    assert cold["compiled"] == 0 and warm["compiled"] == 0  # saved at the end of each run
    assert len(plain["classes"]) >= 20
    assert cold["classes"] == plain["classes"] and warm["classes"] == plain["classes"]
    assert all(v[-1] for k, v in plain["classes"].items() if k.endswith("behaviour"))  # frozen: assignment refused
    assert (tmp_path / "code").is_dir() and len(list((tmp_path / "code").iterdir())) == 1
