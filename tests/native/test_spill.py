"""Traces larger than memory (``nsysan/_spill.py``): numpy's big arrays in files of the spill directory.

Each check runs in a process of its own: once started, the spill stays for the rest of a process.
What is in a file is read from the kernel's own account (/proc/self/maps), not from nsysan; the
analysis with its arrays in files is compared with the same analysis in memory (the JSON, apart from
the note that says it spilled), and the refusal it replaces is checked as before."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import sqltruth

from nsysan._native import c_pass

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the spill is Linux-only"),
    pytest.mark.skipif(c_pass("spill_handler") is None, reason="the C extension is not built"),
]

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str, env: dict[str, str] | None = None) -> dict:
    """``code`` in a fresh interpreter; it prints one JSON object last."""
    e = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    out = subprocess.run([sys.executable, "-c", MAPS + textwrap.dedent(code)], capture_output=True, text=True, env=e,
                         timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


MAPS = textwrap.dedent("""
    def mapped(d):
        '''(size, path) of each shared mapping of a file in directory d (deleted: unlinked)'''
        got = []
        for line in open("/proc/self/maps"):
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[1].endswith("s") and parts[5].startswith(d + "/"):
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                got.append((hi - lo, parts[5].strip()))
        return got
""")


def test_big_arrays_live_in_unlinked_files_and_go_with_them(tmp_path):
    """An array at or above the threshold is a shared mapping of an unlinked file in the spill
    directory (its size plus a header page), with its values; np.zeros reads zeros; a resize keeps
    the values; a small array stays on the heap; a freed array's mapping is gone; the directory
    holds no file at any time; pool threads (``_executor.pool``) spill too, and so do the tasks of a
    growing pool whose thread started before the spill."""
    r = _run(f"""
        import json, os, numpy as np
        from nsysan import _spill, _executor
        d = {str(tmp_path)!r}
        early = _executor.Growing(1, "early")  # a pool whose thread started before the spill
        _spill.start(d, 1 << 20)
        page = os.sysconf("SC_PAGE_SIZE")
        a = np.arange(1 << 18, dtype=np.int64)            # 2 MiB: a file
        z = np.zeros(300_000, dtype=np.int64)             # 2.4 MB, calloc: a file of zeros
        small = np.arange(1000)                           # 8 kB: the heap
        out = dict(after_three=sorted(s for s, _ in mapped(d)), names=[p for _, p in mapped(d)],
                   listed=os.listdir(d), a_sum=int(a.sum()), z_any=bool(z.any()), page=page)
        a.resize(1 << 19, refcheck=False)                 # realloc into a bigger file
        out["resized_head"] = int(a[:1 << 18].sum()); out["resized_tail"] = int(a[1 << 18:].sum())
        del a, z
        out["after_free"] = mapped(d)
        with _executor.pool(2) as p:
            held = p.submit(lambda: np.ones(1 << 18)).result()
        out["from_thread"] = [s for s, _ in mapped(d)]
        held_early = early.submit(lambda: np.ones(1 << 18)).result()
        out["from_early"] = len(mapped(d))
        early.shutdown()
        out["stats"] = _spill.stats()
        print(json.dumps(out))
    """)
    page, mib2 = r["page"], 1 << 21
    # two files (a, z), the small array in none; each a header page plus its bytes, in whole pages
    assert r["after_three"] == sorted([mib2 + page, 2_400_000 + page + (-(2_400_000 + page)) % page])
    assert all(p.endswith("(deleted)") for p in r["names"]) and r["listed"] == []
    assert r["a_sum"] == (1 << 18) * ((1 << 18) - 1) // 2 and not r["z_any"]
    assert r["resized_head"] == (1 << 18) * ((1 << 18) - 1) // 2 and r["resized_tail"] == 0
    assert r["after_free"] == []
    assert r["from_thread"] == [mib2 + page] and r["from_early"] == 2
    assert r["stats"]["live"] == 2 * mib2 and r["stats"]["files"] == 5 and r["stats"]["fallbacks"] == 0


def test_a_file_that_cannot_be_made_leaves_the_array_on_the_heap(tmp_path):
    """The spill directory gone after the start: the allocation still succeeds (on the heap), and
    is counted as a fallback."""
    d = tmp_path / "gone"
    d.mkdir()
    r = _run(f"""
        import json, os, numpy as np
        from nsysan import _spill
        _spill.start({str(d)!r}, 1 << 20)
        os.rmdir({str(d)!r})
        a = np.full(1 << 18, 7, dtype=np.int64)
        print(json.dumps(dict(total=int(a.sum()), stats=_spill.stats())))
    """)
    assert r["total"] == 7 << 18
    assert r["stats"]["fallbacks"] == 1 and r["stats"]["files"] == 0


def test_a_library_process_gets_its_handler_back(fixture_dir, tmp_path):
    """In a library user's process (not nsysan's own), ``open_trace`` of a trace that does not fit
    starts the spill: the trace's columns are in files, ``analyze`` and the result's outputs spill
    their arrays too, and between nsysan's calls the caller's own big arrays stay in memory (the
    thread's handler given back), with the JSON equal to the command line's in-memory JSON."""
    path = fixture_dir / "launch_eager.sqlite"
    spill = tmp_path / "spill"
    spill.mkdir()
    r = _run(f"""
        import json, numpy as np, nsysan
        from numpy._core.multiarray import get_handler_name as name_of

        def get_handler_name(a):  # the handler of the array that owns the data (a column may be a view)
            while isinstance(a.base, np.ndarray):
                a = a.base
            return name_of(a) if a.nbytes >= 65536 else "small"

        tr = nsysan.open_trace({str(path)!r})
        out = dict(trace_cols=get_handler_name(tr.kernels["start_ns"].to_numpy()),
                   mine_after_load=get_handler_name(np.ones(1 << 20)))
        a = nsysan.analyze(tr)
        out["mine_after_analyze"] = get_handler_name(np.ones(1 << 20))
        out["result_col"] = get_handler_name(a.gaps["start_ns"].to_numpy()) if len(a.gaps) else "none"
        doc = a.to_json()
        out["mine_after_json"] = get_handler_name(np.ones(1 << 20))
        out["doc"] = json.loads(doc)
        print(json.dumps(out))
    """, {"NSYSAN_SPILL": "auto", "NSYSAN_MEMORY_LIMIT": _limit_between(path), "NSYSAN_SPILL_DIR": str(spill),
          "NSYSAN_SPILL_THRESHOLD": "65536"})
    assert r["trace_cols"] == "nsysan_spill" and r["result_col"] in ("nsysan_spill", "small", "none")
    assert r["mine_after_load"] == r["mine_after_analyze"] == r["mine_after_json"] == "default_allocator"
    base = _analyze(path, tmp_path / "mem.json", {"NSYSAN_SPILL": "never"})
    assert base["code"] == 0
    assert _without_warnings(r["doc"]) == _without_warnings(json.loads((tmp_path / "mem.json").read_text()))


def test_arrays_left_on_the_heap_are_told(fixture_dir, tmp_path):
    """The spill directory gone once the spill started: the analysis still succeeds (its arrays on
    the heap) with the same JSON, and the terminal's summary says how many arrays stayed in memory
    and names the directory."""
    d = tmp_path / "gone"
    d.mkdir()
    path = fixture_dir / "launch_eager.sqlite"
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import os
        from nsysan import _spill
        from nsysan.cli import main
        _spill.start({str(d)!r}, 65536)
        os.rmdir({str(d)!r})
        raise SystemExit(main(["analyze", {str(path)!r}, "--json", {str(tmp_path / "o.json")!r}, "--no-html"]))
    """)], capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT), "NSYSAN_NO_CACHE": "1", "NSYSAN_SPILL": "always"})
    assert p.returncode == 0, p.stderr[-2000:]
    said = " ".join((p.stdout + p.stderr).split())
    m = re.search(r"(\d+) big arrays? stayed in memory: the spill directory (\S+) could not hold", said)
    assert m and int(m.group(1)) > 0 and m.group(2) == str(d), said[-2000:]
    base = _analyze(path, tmp_path / "mem.json", {"NSYSAN_SPILL": "never"})
    assert base["code"] == 0
    assert _without_warnings(json.loads((tmp_path / "o.json").read_text())) == \
        _without_warnings(json.loads((tmp_path / "mem.json").read_text()))


def test_why_a_spill_is_not_possible(tmp_path, monkeypatch):
    from nsysan import _spill

    assert _spill.unavailable(1, str(tmp_path)) is None
    assert "not a writable directory" in _spill.unavailable(1, str(tmp_path / "nope"))
    assert "GiB free" in _spill.unavailable(1 << 60, str(tmp_path))
    if _spill._filesystem("/dev/shm") == "tmpfs":
        assert "in memory (tmpfs)" in _spill.unavailable(1, "/dev/shm")
    monkeypatch.setenv("NSYSAN_SPILL", "bogus")
    assert _spill.mode() == "auto"


ANALYZE = """
    import json, sys
    from nsysan.cli import main
    from nsysan import _spill, pipeline
    pipeline._Lines.EVERY = 0.0  # every step a progress line (stderr is a pipe)
    code = main(["analyze", sys.argv[1], "--json", sys.argv[2], "--no-html"])
    print(json.dumps(dict(code=code, stats=_spill.stats())))
"""


def _analyze(trace: Path, out: Path, env: dict[str, str]) -> dict:
    e = {**os.environ, "PYTHONPATH": str(ROOT), "NSYSAN_NO_CACHE": "1", **env}
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(ANALYZE), str(trace), str(out)], capture_output=True,
                       text=True, env=e, timeout=600, check=False)
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    r["stderr"] = p.stderr
    return r


def _limit_between(path: Path) -> str:
    """A memory figure between the estimate with the arrays in files and the one in memory."""
    from planned import spill_limit

    return str(spill_limit(path))


def _without_warnings(doc: dict) -> dict:
    doc["trace"].pop("warnings")
    return doc


@pytest.mark.parametrize("trace", ["launch_eager", "ddp_overlap", "annotate_lightning"])
def test_a_trace_that_would_not_fit_is_analysed_in_files_with_the_same_results(fixture_dir, tmp_path, trace):
    """With less memory than the estimate (NSYSAN_MEMORY_LIMIT, but more than the estimate with the
    arrays in files) the trace is analysed with its
    arrays in files (from 64 kB: the small fixtures' columns and temporaries too), and the JSON equals
    the in-memory analysis' apart from the note; nothing is left in the spill directory. With
    NSYSAN_SPILL=never the same limit refuses it (exit 13), the hint saying why it did not spill."""
    path = fixture_dir / f"{trace}.sqlite"
    spill = tmp_path / "spill"
    spill.mkdir()
    base = _analyze(path, tmp_path / "mem.json", {"NSYSAN_SPILL": "never"})
    assert base["code"] == 0 and base["stats"] is None
    env = {"NSYSAN_SPILL": "auto", "NSYSAN_MEMORY_LIMIT": _limit_between(path), "NSYSAN_SPILL_DIR": str(spill),
           "NSYSAN_SPILL_THRESHOLD": "65536"}
    got = _analyze(path, tmp_path / "spilled.json", env)
    assert got["code"] == 0 and got["stats"]["files"] > 0 and got["stats"]["fallbacks"] == 0
    doc = json.loads((tmp_path / "spilled.json").read_text())
    assert any(w.startswith(f"analysed with its big arrays in files in {spill}") for w in doc["trace"]["warnings"])
    assert _without_warnings(doc) == _without_warnings(json.loads((tmp_path / "mem.json").read_text()))
    # and against the trace itself: each kernel name's count, shortest and longest run (SQL)
    truth = {name: (n, lo, hi) for name, n, lo, hi in sqltruth.query(
        path, 'SELECT s.value, count(*), min(k."end" - k.start), max(k."end" - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k '
              "JOIN StringIds s ON s.id = k.demangledName GROUP BY s.value")}
    by_name = {r["name"]: (r["count"], r["min_ns"], r["max_ns"]) for r in doc["kernels"]["by_name"]}
    assert by_name == truth
    assert list(spill.iterdir()) == []
    assert f"(arrays in files in {spill})" in got["stderr"]  # the progress says so from the load on
    assert "arrays in files" not in base["stderr"]
    refused = _analyze(path, tmp_path / "refused.json", {**env, "NSYSAN_SPILL": "never"})
    assert refused["code"] == 13 and "not spilled to disk: NSYSAN_SPILL=never" in refused["stderr"]
    assert not (tmp_path / "refused.json").exists()


def test_a_spill_directory_without_room_refuses_as_before(fixture_dir, tmp_path):
    """A spill directory that does not exist: the trace that would not fit is refused (exit 13) and
    the hint names the directory."""
    r = _analyze(fixture_dir / "launch_eager.sqlite", tmp_path / "o.json",
                 {"NSYSAN_SPILL": "auto", "NSYSAN_MEMORY_LIMIT": _limit_between(fixture_dir / "launch_eager.sqlite"),
                  "NSYSAN_SPILL_DIR": str(tmp_path / "nope")})
    assert r["code"] == 13 and f"the spill directory {tmp_path / 'nope'} is not a writable directory" in r["stderr"]
