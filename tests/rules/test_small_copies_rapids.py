"""Issue 51's leftovers: a copy too small to have a transfer rate, and a RAPIDS program's allocator.

1. pageable-memcpy printed "(0.00 GB/s; assumed 2x rate 0.00 GB/s)" for 188 bytes in 515 us (the
   public cuDF export, whose GPUs have no compute capability: no link rate) and the saving model
   divided by that rate. Copies of at most 64 KiB are latency: the message says they have no
   meaningful rate, and each counts as the latency floor (the shortest such copy).
2. alloc-in-loop told a cuDF program to use ``cudaMallocAsync``; a RAPIDS program allocates through
   RMM, so the advice is RMM's pool.

Truth: hand-built copies whose pinned times are stated below (CI), and the cuDF export by SQL
(pageable copies' sizes, durations and the ``cudf_python`` NVTX domain; skipped without the corpus).
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import factories as F
import numpy as np
import pandas as pd
import pytest
from conftest import CORPUS
from sqltruth import open_export

import nsysan
from nsysan.analyses.program import Program, program
from nsysan.analysis import analyze
from nsysan.rules._copy_rates import pinned_durations
from nsysan.rules.alloc_in_loop import advice as alloc_advice

CUDF = CORPUS / "quasiben__nvtx-examples__cudf.sqlite"
UNKNOWN_GPU = pd.DataFrame({"device_id": [0], "name": ["Quadro RTX 8000"], "sm_count": pd.array([pd.NA], dtype="Int64"),
                            "total_memory_bytes": pd.array([pd.NA], dtype="Int64"),
                            "compute_major": pd.array([pd.NA], dtype="Int64"),
                            "compute_minor": pd.array([pd.NA], dtype="Int64")})


def _copies(rows: list[tuple[int, int, str, int]]) -> pd.DataFrame:
    """rows: (start, end, kind, bytes), all from/to pageable memory on stream 7."""
    m = F.memcpy([(s, e, 7, k, 0) for s, e, k, _ in rows])
    return m.assign(bytes=np.array([b for *_, b in rows], np.int64))


def _tiny_dtoh_trace():
    # 20 pageable DtoH copies of 4 bytes: one of 1 us, nineteen of 10 us (200 us apart), a kernel around them
    copies = _copies([(i * 200_000, i * 200_000 + (1_000 if i == 0 else 10_000), "DtoH", 4) for i in range(20)])
    k = F.kernels([(-10_000, -5_000, 7), (4_000_000, 4_010_000, 7)])
    return F.make_trace(kernels=k, memcpy=copies, gpus=UNKNOWN_GPU)


def test_tiny_copies_have_no_rate_and_count_as_the_latency_floor():
    # GIVEN copies of 4 bytes on a GPU whose link is unknown (no measured pinned copy, no compute capability)
    trace = _tiny_dtoh_trace()
    # WHEN the pinned times are modelled
    pin = pinned_durations(SimpleNamespace(trace=trace), trace.memcpy, 2.0)
    # THEN each is the floor, the shortest such copy (1 us): no rate divided by
    assert pin.tolist() == [1_000] * 20
    # AND the finding says the copies are too small for a rate, and never prints 0.00 GB/s
    a = analyze(trace)
    f = next(f for f in a.findings if f.rule == "pageable-memcpy")
    assert "0.00 GB/s" not in f.message and "assumed" not in f.message
    assert "DtoH: 20 copies, 80 B in 191.0 us (none over 64 KiB: too small to have a meaningful transfer rate" \
        in f.message
    assert "counted as the shortest such copy's 1.0 us" in f.message
    assert 0 < f.impact_ns <= 19 * 9_000  # at most each copy's time over the floor


def test_a_mixed_direction_takes_its_assumed_rate_from_the_large_copies():
    # GIVEN two pageable HtoD copies of 1 MiB in 100 us each (10.49 GB/s) and two of 4 bytes in 2 and 5 us
    mib = 1 << 20
    copies = _copies([(0, 100_000, "HtoD", mib), (200_000, 300_000, "HtoD", mib), (400_000, 402_000, "HtoD", 4),
                      (500_000, 505_000, "HtoD", 4)])
    trace = F.make_trace(memcpy=copies, gpus=UNKNOWN_GPU)
    # WHEN the pinned times are modelled at 2x the large copies' rate (20.97 GB/s), plus the 2 us floor
    pin = pinned_durations(SimpleNamespace(trace=trace), trace.memcpy, 2.0)
    # THEN a large copy takes 2 us + 50 us, a small one the floor (+ 4 bytes at 20.97 GB/s: under 1 ns)
    assert pin.tolist() == [52_000, 52_000, 2_000, 2_000]


def test_a_rapids_program_is_told_rmm_pool_not_cuda_malloc_async():
    # GIVEN a loop of libcudf kernels (no NVTX) that calls cudaMalloc/cudaFree 12 times each between them
    k = F.kernels([(i * 100_000, i * 100_000 + 50_000, 7) for i in range(13)],
                  name="void cudf::detail::gather_kernel<int>(cudf::column_device_view)")
    calls = [(i * 100_000 + 60_000, i * 100_000 + 70_000, "cudaMalloc", 500 + 2 * i) for i in range(12)]
    calls += [(i * 100_000 + 75_000, i * 100_000 + 80_000, "cudaFree", 501 + 2 * i) for i in range(12)]
    calls += [(-1_000, -500, "cudaMalloc", 499)]  # the context's first allocation: set-up
    trace = F.make_trace(kernels=k, cuda_api=F.api(sorted(calls)))
    # WHEN it is analysed
    a = analyze(trace)
    # THEN the program is cuDF by its kernels, with no claim of Python from a C++ library's kernels
    assert "cuDF" in a.program.frameworks and a.program.rapids
    assert "kernels such as" in a.program.evidence["framework:cuDF"]
    assert a.program.python is None
    f = next(f for f in a.findings if f.rule == "alloc-in-loop")
    assert "rmm.reinitialize(pool_allocator=True" in f.suggestion
    assert "cudaMallocAsync" not in f.suggestion


def test_rmm_advice_in_the_programs_terms():
    # a C++ libcudf program: RMM's C++ pool; Python with CuPy and Dask-CUDA: the pool, CuPy on it, the cluster's
    cpp = alloc_advice(Program(python=False, frameworks=frozenset({"cuDF"})))
    assert "rmm::mr::pool_memory_resource" in cpp and "set_current_device_resource" in cpp
    assert "rmm.reinitialize" not in cpp
    py = alloc_advice(Program(python=True, frameworks=frozenset({"cuDF", "CuPy", "Dask-CUDA"})))
    assert "rmm.reinitialize(pool_allocator=True" in py and "rmm.mr.PoolMemoryResource" in py
    assert "rmm_cupy_allocator" in py and "rmm_pool_size" in py and "torch" not in py
    assert "cudaMallocAsync" not in py
    # not RAPIDS: CUDA's own pool, as before
    assert "cudaMallocAsync" in alloc_advice(Program(python=False))


def test_cudf_kernels_alone_do_not_say_python():
    k = F.kernels([(0, 10, 7)], name="void thrust::cuda_cub::core::_kernel_agent<cudf::row_lexicographic_comparator>")
    p = program(F.make_trace(kernels=k))
    assert p.rapids and p.python is None


needs_cudf = pytest.mark.skipif(not CUDF.exists(), reason="public cuDF export absent")


@needs_cudf
def test_public_cudf_export():
    conn = open_export(CUDF)
    # by SQL: every pageable DtoH copy (copyKind 2, dstKind 0) is at most 64 KiB, the GPUs have no compute
    # capability column (no link rate), and cuDF's Python layer pushed NVTX ranges
    dtoh = conn.execute("SELECT max(bytes), sum(end - start), min(end - start), count(*) "
                        "FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 2 AND dstKind = 0").fetchone()
    assert dtoh[0] <= 64 << 10 and dtoh[3] > 0
    small_floor = conn.execute("SELECT min(end - start) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 2 "
                               "AND bytes <= 65536").fetchone()[0]
    cols = {r[1] for r in conn.execute("PRAGMA table_info(TARGET_INFO_GPU)")}
    assert not cols & {"computeMajor", "computeCapabilityMajor"}
    # this pre-2021 export names its NVTX domains in DomainStrings
    n_cudf = conn.execute("SELECT count(*) FROM NVTX_EVENTS n JOIN DomainStrings d ON d.id = n.domainId "
                          "WHERE d.domainName = 'cudf_python'").fetchone()[0]
    assert n_cudf > 0
    a = analyze(nsysan.open_trace(CUDF))
    f = next(f for f in a.findings if f.rule == "pageable-memcpy")
    assert "0.00 GB/s" not in f.message
    m = re.search(r"DtoH: (\d+) copies, \d+ B in [\d.]+ \w+ \(none over 64 KiB: too small to have a meaningful "
                  r"transfer rate; pinned, each would still take the per-copy latency, counted as the shortest such "
                  r"copy's ([\d.]+) us\)", f.message)
    assert m, f.message
    assert int(m.group(1)) <= dtoh[3]
    assert float(m.group(2)) == pytest.approx(small_floor / 1000, abs=0.05)
    # the saving: no more than the pageable copies' time over the floor (SQL, every such copy of the capture)
    over = conn.execute("SELECT sum(max(0, (end - start) - ?)) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE "
                        "(copyKind = 2 AND dstKind = 0)", (small_floor,)).fetchone()[0]
    htod_over = conn.execute("SELECT sum(max(0, (end - start) - (SELECT min(end - start) FROM "
                             "CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 1 AND bytes <= 65536))) FROM "
                             "CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 1 AND srcKind = 0").fetchone()[0]
    assert 0 < f.impact_ns <= over + htod_over
    # the allocator advice: RMM's pool, for a program cuDF's Python layer marked
    assert a.program.rapids and "cudf_python" in a.program.evidence["framework:cuDF"] and a.program.python
    g = next(f for f in a.findings if f.rule == "alloc-in-loop")
    assert "rmm.reinitialize(pool_allocator=True" in g.suggestion and "cudaMallocAsync" not in g.suggestion
