"""The command line's start: numpy without BLAS threads, the cyclic collector paused for the
imports only."""

from __future__ import annotations

import os

import pytest


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads through /proc")
def test_numpy_imported_without_blas_threads_and_nothing_passed_on():
    import subprocess
    import sys

    code = ("import os\nfrom nsysan._startup import numpy_without_blas_threads as f\nf()\n"
            "print(len(os.listdir('/proc/self/task')), 'OPENBLAS_NUM_THREADS' in os.environ)")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["1", "False"]  # one thread: OpenBLAS started none; the variable is gone


def test_the_collector_is_paused_for_the_imports_only(fixture_dir, tmp_path, monkeypatch):
    import gc

    from nsysan import _startup, cli

    monkeypatch.setenv("NSYSAN_NO_CACHE", "1")
    seen = []
    real = _startup.resume_collector

    def resume():
        seen.append(gc.isenabled())
        real()
        seen.append(gc.isenabled())

    monkeypatch.setattr(_startup, "resume_collector", resume)
    assert gc.isenabled()
    code = cli.main(["analyze", str(fixture_dir / "ladder_baseline.sqlite"), "--json", str(tmp_path / "a.json"),
                     "--html", str(tmp_path / "a.html"), "-q"])
    assert code == 0
    assert seen[:2] == [False, True]  # paused until after the imports, then running for the analysis
    assert gc.isenabled()
    gc.unfreeze()


# -- the dataclass methods compiled once (nsysan._dataclass_code) --------------------------------------

DESCRIBE = """
import dataclasses, json, sys, types
{setup}
import nsysan.cli.commands, nsysan.pipeline, nsysan.analysis, nsysan.rules, nsysan.report.view, nsysan.report.html
import nsysan.trace.load, nsysan.analyses

def code(c):  # everything that makes a code object what it is, in plain values
    return [c.co_name, c.co_qualname, c.co_filename, c.co_firstlineno, c.co_flags, c.co_argcount,
            c.co_posonlyargcount, c.co_kwonlyargcount, c.co_code.hex(), c.co_linetable.hex(),
            c.co_exceptiontable.hex(), list(c.co_names), list(c.co_varnames), list(c.co_freevars),
            list(c.co_cellvars), [code(k) if isinstance(k, types.CodeType) else repr(k) for k in c.co_consts]]

out = {{}}
for m in list(sys.modules.values()):
    for v in list(vars(m).values()) if (getattr(m, "__name__", "") or "").startswith("nsysan") else []:
        if isinstance(v, type) and dataclasses.is_dataclass(v) and v.__module__ == m.__name__:
            out[m.__name__ + "." + v.__qualname__] = {{
                k: [code(f.__code__), repr(f.__defaults__), repr(f.__kwdefaults__), repr(f.__annotations__)]
                for k, f in vars(v).items()
                if isinstance(f, types.FunctionType) and f.__code__.co_filename == "<string>"}}
from nsysan import _dataclass_code as d
print(json.dumps({{"classes": out, "compiled": d._compiled, "table": len(d._table),
                  "patched": getattr(dataclasses, "exec", None) is d._exec}}))
"""


def _cached_env(tmp_path):
    env = dict(os.environ)
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")  # the table there, not in the user's cache
    env["NSYSAN_NO_CACHE"] = "1"
    env["PYTHONHASHSEED"] = "0"  # a frozenset among a method's constants reads in one order in every process
    return env


def _table_file(env):
    import subprocess
    import sys

    code = "from nsysan import _dataclass_code as d; print(d._file())"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def _cli(args, env):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "nsysan", *args], env=env, capture_output=True, text=True)


def test_dataclass_methods_from_the_table_are_the_code_python_compiles(fixture_dir, tmp_path):
    import json
    import subprocess
    import sys

    env = _cached_env(tmp_path)
    trace = str(fixture_dir / "ladder_baseline.sqlite")
    path = _table_file(env)
    assert path.startswith(env["XDG_CACHE_HOME"]) and not os.path.exists(path)
    r = _cli(["analyze", trace, "--json", str(tmp_path / "a.json"), "--html", str(tmp_path / "a.html"), "-q"], env)
    assert r.returncode == 0, r.stderr
    assert os.path.getsize(path) > 0  # the first run wrote the table

    def describe(setup):
        out = subprocess.run([sys.executable, "-c", DESCRIBE.format(setup=setup)], env=env, capture_output=True,
                             text=True, check=True).stdout
        return json.loads(out)

    cached = describe("from nsysan import _dataclass_code as d; d.install()")
    plain = describe("")
    assert cached["patched"] and not plain["patched"]
    assert cached["compiled"] == 0 and cached["table"] > 0  # every method came from the table
    assert len(plain["classes"]) >= 50 and sum(map(len, plain["classes"].values())) >= 150
    assert cached["classes"] == plain["classes"]  # and each is the code Python compiles itself
    r2 = _cli(["analyze", trace, "--json", str(tmp_path / "b.json"), "-q"], env)
    assert r2.returncode == 0 and (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()


def test_an_unreadable_table_is_ignored_and_rewritten_and_an_unwritable_one_left(fixture_dir, tmp_path):
    import importlib.util
    import marshal

    env = _cached_env(tmp_path)
    trace = str(fixture_dir / "ladder_baseline.sqlite")
    path = _table_file(env)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"\x00garbage")
    r = _cli(["analyze", trace, "--json", str(tmp_path / "a.json"), "-q"], env)
    assert r.returncode == 0 and r.stderr == ""
    with open(path, "rb") as f:
        form, magic, table = marshal.loads(f.read())
    assert form == "nsysan-dataclass-code/1" and magic == importlib.util.MAGIC_NUMBER and len(table) > 100
    # a readable table whose entries are not code (another format at the same path): ignored, rewritten
    with open(path, "wb") as f:
        f.write(marshal.dumps((form, magic, {k: (0, v) for k, v in table.items()})))
    r = _cli(["analyze", trace, "--json", str(tmp_path / "c.json"), "-q"], env)
    assert r.returncode == 0 and r.stderr == ""
    with open(path, "rb") as f:
        assert all(type(v) is type(compile("", "", "exec")) for v in marshal.loads(f.read())[2].values())
    assert not [n for n in os.listdir(os.path.dirname(path)) if n != os.path.basename(path)]  # no temp file
    os.unlink(path)
    os.rmdir(os.path.dirname(path))
    open(os.path.dirname(path), "w").close()  # a file where the folder would be: nothing can be written
    r = _cli(["analyze", trace, "--json", str(tmp_path / "b.json"), "-q"], env)
    assert r.returncode == 0 and r.stderr == "" and os.path.isfile(os.path.dirname(path))
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "c.json").read_bytes()


def test_a_library_process_keeps_dataclasses_as_it_is(fixture_dir, tmp_path):
    import dataclasses

    import nsysan

    result = nsysan.analyze(str(fixture_dir / "ladder_baseline.sqlite"))
    result.to_json(str(tmp_path / "a.json"))
    assert "exec" not in vars(dataclasses)  # only the command line's own process installs the table
