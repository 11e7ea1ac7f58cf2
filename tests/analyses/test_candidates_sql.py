"""The iteration model's candidate ranges against the export's own rows.

For every repeated push/pop NVTX range nsysan considers as the iteration (``iterations.candidates``,
computed for all names at once since session 14), on the recorded fixtures (PyTorch eager and
compiled, JAX, LLM decoding and generate, dataloader threads, two processes on one GPU, two-GPU
DDP/FSDP/TP/pipeline, the ladder) and the public exports: its instance count, threads, most
instances on one thread, total CPU time, median latency (completion - start) and the share of
instances that launched GPU work are taken by SQL (``sqltruth.range_instances``: the closed push/pop
ranges of that text, with the GPU ops launched inside them on their thread)."""

from __future__ import annotations

from collections import Counter

import pytest
import sqltruth
from conftest import CORPUS, FIXTURE_NAMES, analyzed

PUBLIC = sorted(CORPUS.glob("*.sqlite")) if CORPUS.exists() else []
CHECKED_PER_TRACE = 40  # the most frequent plain push/pop names of each trace


def _plain_pushpop(conn, name: str) -> bool:
    """Only closed push/pop ranges carry this text (no domain, no start/end range of the same text)."""
    others = conn.execute(
        "SELECT count(*) FROM NVTX_EVENTS WHERE (text = :n OR textId IN (SELECT id FROM StringIds WHERE value = :n)) "
        "AND (eventType != :p OR COALESCE(domainId, 0) != 0)", {"n": name, "p": sqltruth._pushpop_type(conn)})
    return others.fetchone()[0] == 0


def _check(conn, a) -> int:
    if "NVTX_EVENTS" not in sqltruth.tables(conn) or "StringIds" not in sqltruth.tables(conn):
        return 0
    cands = sorted(a.iterations.candidates, key=lambda c: (-c.count, c.name))
    checked = 0
    for c in cands:
        if checked >= CHECKED_PER_TRACE:
            break
        if ":" in c.name or not _plain_pushpop(conn, c.name):
            continue
        inst = sqltruth.range_instances(conn, c.name)
        per_thread = Counter((r["pid"], r["tid"]) for r in inst)
        assert c.count == len(inst), c.name
        assert c.threads == len(per_thread), c.name
        assert c.per_thread_max == max(per_thread.values()), c.name
        assert c.total_ns == sum(r["end"] - r["start"] for r in inst), c.name
        assert c.median_ns == int(sqltruth.median([r["completion"] - r["start"] for r in inst])), c.name
        assert c.with_gpu_frac == round(sum(r["ops"] > 0 for r in inst) / len(inst), 4), c.name
        checked += 1
    return checked


WHY_SKIPPED = "no repeated plain push/pop NVTX range"


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_candidates_equal_sql_on_fixtures(analysis, name):
    sqltruth.check_export(sqltruth.open_fixture(name), analysis(name), _check, WHY_SKIPPED)


@pytest.mark.skipif(not PUBLIC, reason="public corpus not present (../shared)")
@pytest.mark.parametrize("path", PUBLIC, ids=lambda p: p.stem[:40])
def test_candidates_equal_sql_on_public_exports(path):
    sqltruth.check_public_export(path, analyzed(path), _check, WHY_SKIPPED)
