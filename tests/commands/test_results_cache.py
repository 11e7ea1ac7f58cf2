"""The analysis cache that ``compare`` and ``diff`` reuse (nsysan/results.py).

Truth: a cached result equals a fresh analysis of the same trace (the JSON with the cache off), an
entry is found only for the same file, content, code and options, and the folder stays bounded.
"""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest

from nsysan import results
from nsysan.analysis import Params
from nsysan.cli import main
from nsysan.compare import load


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("NSYSAN_CACHE_DIR", str(d))
    monkeypatch.delenv("NSYSAN_NO_CACHE", raising=False)
    return d


def test_defaults_agree_with_the_analysis():
    p = Params()
    assert (results.DEFAULT_MIN_GAP_NS, results.DEFAULT_WARMUP_FACTOR) == (p.min_gap_ns, p.warmup_factor)


def test_compare_reuses_what_analyze_wrote_and_it_equals_a_fresh_analysis(cache, fixture_dir, tmp_path, monkeypatch):
    src = tmp_path / "t.sqlite"
    shutil.copy(fixture_dir / "ladder_pinned.sqlite", src)
    out = tmp_path / "t.json"
    assert main(["analyze", str(src), "--json", str(out), "--no-html", "-q"]) == 0
    entries = list(cache.glob("*.json"))
    assert len(entries) == 1 and entries[0].read_text() == out.read_text()  # the analysis, as written
    # a second load does not analyse: it would fail if it tried
    import nsysan.analysis

    def boom(*a, **k):
        raise AssertionError("analysed again")

    monkeypatch.setattr(nsysan.analysis, "analyze", boom)
    cached = load(src)
    monkeypatch.undo()
    monkeypatch.setenv("NSYSAN_NO_CACHE", "1")
    fresh = load(src)
    assert cached == json.loads(json.dumps(fresh))
    assert not (tmp_path / "t.sqlite").with_suffix(".sqlite.json").exists()  # never beside the trace


def test_the_key_follows_content_code_and_options(cache, fixture_dir, tmp_path):
    src = tmp_path / "t.sqlite"
    shutil.copy(fixture_dir / "ladder_pinned.sqlite", src)
    opts = results.options_of()
    k = results.key(src, opts)
    assert k == results.key(src, results.options_of(None, 10_000, 1.5, {}))
    assert k != results.key(src, results.options_of("infer"))
    assert k != results.key(src, results.options_of(rule_config={"launch-bound": {"min_kernels": 5}}))
    # the same bytes rewritten with the old modification time: the identity still changes (inode
    # or size), and a changed last page changes the content stamp
    st = os.stat(src)
    data = bytearray(src.read_bytes())
    data[-10] ^= 0xFF
    src.write_bytes(bytes(data))
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert results.key(src, opts) != k
    # another nsysan (code stamp) never reads this one's entries
    k_now = results.key(src, opts)
    old = results._CODE_STAMP
    try:
        results._CODE_STAMP = "another build"
        assert results.key(src, opts) != k_now
    finally:
        results._CODE_STAMP = old


def test_damaged_entries_are_ignored_and_the_cache_is_bounded(cache, fixture_dir, tmp_path, monkeypatch):
    src = tmp_path / "t.sqlite"
    shutil.copy(fixture_dir / "ladder_pinned.sqlite", src)
    k = results.key(src, results.options_of())
    cache.mkdir()
    (cache / f"{k}.json").write_text('{"schema": "nsysan.analysis/2", "iterations": 3}')
    assert results.get(k) is None  # damaged: analysed again
    d = load(src)
    assert results.get(k) == json.loads(json.dumps(d))
    # bounded: with a 1 MB limit, older entries go first
    monkeypatch.setenv("NSYSAN_CACHE_MAX_MB", "1")
    for i in range(6):
        results.put(f"{i:040d}", "x" * 300_000)
        time.sleep(0.01)
    left = sorted(p.name for p in cache.glob("*.json"))
    assert sum((cache / n).stat().st_size for n in left) <= 1 << 20
    assert f"{5:040d}.json" in left and f"{0:040d}.json" not in left
    assert not list(cache.glob(".tmp-*"))


def test_off_switch_and_unwritable_cache(fixture_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("NSYSAN_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("NSYSAN_NO_CACHE", "1")
    load(fixture_dir / "ladder_pinned.sqlite")
    assert not (tmp_path / "c").exists()
    monkeypatch.delenv("NSYSAN_NO_CACHE")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("NSYSAN_CACHE_DIR", str(blocker / "sub"))  # cannot be created: analysis still works
    assert load(fixture_dir / "ladder_pinned.sqlite")["schema"] == "nsysan.analysis/2"
