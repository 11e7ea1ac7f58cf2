"""Advice that fits the program (issue 38, item 8): training or inference, Python or not, the libraries.

Truth comes from the export by SQL (backward-pass and optimizer kernels, NVTX ranges and domains,
the profiled processes' names, OpenACC's kernels, pageable copies); the assertions are on the
``Program`` nsysan derives (``analyses/program.py``) and on the findings' texts worded by it.
"""

from __future__ import annotations

import re

import pytest
from conftest import CORPUS
from sqltruth import open_export, open_fixture, tables

import nsysan
from nsysan.analysis import analyze

TRAINING_FIXTURES = ["train_inline", "compile_train", "ddp_serial", "fsdp", "tp", "two_procs"]
PYTORCH_WORDS = re.compile(r"torch|pin_memory|DataLoader")
PYTHON_NAME = re.compile(r"(^|/)python[\d.]*$", re.I)


def _kernel_count(conn, like: str) -> int:
    if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables(conn):  # a capture without GPU activity (WSL2)
        return 0
    return conn.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName "
                        "WHERE s.value LIKE ?", (like,)).fetchone()[0]


def _backward_or_optimizer_kernels(conn) -> int:
    return sum(_kernel_count(conn, p) for p in ("%backward%", "%multi_tensor_apply%"))


def _nvtx_names(conn) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT DISTINCT coalesce(n.text, s.value) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
        "WHERE n.eventType IN (59, 60) OR n.eventType = 75")]


def _profiled_process_names(conn) -> list[str]:
    if "PROCESSES" not in tables(conn):
        return []
    return [r[0] for r in conn.execute(
        "SELECT DISTINCT name FROM PROCESSES WHERE pid IN "
        "(SELECT DISTINCT (globalTid >> 24) & 16777215 FROM CUPTI_ACTIVITY_KIND_RUNTIME)")]


def _pageable_copies(conn) -> int:
    # the export's memory kinds: 0 pageable; copyKind 1 HtoD (host source), 2 DtoH (host destination)
    return conn.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE (copyKind = 1 AND srcKind = 0) "
                        "OR (copyKind = 2 AND dstKind = 0)").fetchone()[0]


def _texts(a) -> list[tuple[str, str]]:
    return [(f.rule, f.message + " " + f.suggestion) for f in a.findings]


@pytest.mark.parametrize("name", TRAINING_FIXTURES)
def test_training_fixtures_are_training_and_get_mixed_precision_advice(name, analysis):
    conn = open_fixture(name)
    bwd = _backward_or_optimizer_kernels(conn)
    assert bwd > 0  # the trace itself: backward-pass or optimizer kernels ran
    a = analysis(name)
    p = a.program
    assert p.kind == "training", p.evidence
    assert "backward" in p.evidence["kind"] or "optimizer" in p.evidence["kind"]
    assert p.python is True and "PyTorch" in p.frameworks
    for f in a.findings:
        if f.rule in ("fp32-compute", "tensor-cores-idle"):
            assert "autocast" in f.suggestion and "bfloat16" in f.suggestion, (f.rule, f.suggestion)
            assert "BuilderFlag" not in f.suggestion and "TensorRT" not in f.suggestion, (f.rule, f.suggestion)
        if f.rule == "pageable-memcpy":
            assert "DataLoader(" in f.suggestion and "pin_memory=True" in f.suggestion


def test_fp32_gemms_of_a_training_loop_get_autocast_not_builder_flags(analysis):
    """ddp_serial trains (SQL: backward and optimizer kernels) with FP32 GEMMs (SQL: the f32/tf32 cuBLAS
    kernels): the fp32 advice is mixed-precision training, never TensorRT's builder flags."""
    conn = open_fixture("ddp_serial")
    assert _backward_or_optimizer_kernels(conn) > 0
    assert _kernel_count(conn, "%gemm_f32f32%") > 0
    f = next(f for f in analysis("ddp_serial").findings if f.rule == "fp32-compute")
    assert "torch.autocast" in f.suggestion and "torch.bfloat16" in f.suggestion
    assert "BuilderFlag" not in f.suggestion and "trtexec" not in f.suggestion


def test_ladder_baseline_is_pytorch_inference_without_tensorrt(analysis):
    conn = open_fixture("ladder_baseline")
    assert _backward_or_optimizer_kernels(conn) == 0 and _kernel_count(conn, "%adam%") == 0
    names = _nvtx_names(conn)
    assert "infer" in names  # the ladder's per-batch range
    assert not any(n and (n.startswith("ExecutionContext") or n.lower() == "tensorrt") for n in names)
    assert _kernel_count(conn, "%at::native%") > 0
    a = analysis("ladder_baseline")
    p = a.program
    assert p.kind == "inference", p.evidence
    assert "TensorRT" not in p.frameworks and "PyTorch" in p.frameworks
    f = next(f for f in a.findings if f.rule == "fp32-compute")
    assert "model.half()" in f.suggestion
    assert "BuilderFlag" not in f.suggestion and "GradScaler" not in f.suggestion
    pm = next(f for f in a.findings if f.rule == "pageable-memcpy")
    assert "pin_memory=True" in pm.suggestion and "DataLoader(" not in pm.suggestion  # no data loader here


def test_jax_training_is_recognised_from_its_differentiated_thunks(analysis):
    conn = open_fixture("jax_train")
    names = _nvtx_names(conn)
    assert any("transpose(jvp(" in (n or "") for n in names)  # JAX's backward pass
    p = analysis("jax_train").program
    assert p.kind == "training" and "JAX/XLA" in p.frameworks and "PyTorch" not in p.frameworks
    from nsysan.rules.fp32_compute import advice

    text = advice(p)
    assert "jax" in text and "torch" not in text and "BuilderFlag" not in text


def test_program_is_in_the_json_and_the_report_info(analysis):
    a = analysis("train_inline")
    d = a.to_dict()
    assert d["program"]["kind"] == "training" and "PyTorch" in d["program"]["frameworks"]
    assert d["program"]["evidence"]["kind"]
    from nsysan.report import view

    info = dict(view.build(a, generated_by="test").info)
    assert info["Program"].startswith("training") and "backward" in info["Program kind evidence"]


OPENACC = CORPUS / "PolPuigPuy__OpenACC_Project_PolPuig__report12.sqlite"


@pytest.mark.skipif(not OPENACC.exists(), reason="public export absent")
def test_openacc_export_gets_openacc_advice_not_pytorch():
    conn = open_export(OPENACC)
    assert _kernel_count(conn, "%__pgi_uacc_%") > 0  # NVHPC's OpenACC runtime kernels
    assert _kernel_count(conn, "%at::native%") == 0
    allocs = conn.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
                          "WHERE s.value LIKE 'cuMemAlloc%'").fetchone()[0]
    assert allocs > 100  # the runtime allocates per compute construct
    a = analyze(nsysan.open_trace(OPENACC))
    mine = [(r, t) for r, t in _texts(a) if r not in OTHERS_RULES]
    assert mine and not [r for r, t in mine if PYTORCH_WORDS.search(t)]
    # alloc-in-loop where it fires (it needs allocations in half the iterations: the loop inferred from
    # the GPU work, a 2-launch unit, is finer than the constructs that allocate); the OpenACC words in
    # every finding that gives directive advice
    f = next((f for f in a.findings if f.rule == "alloc-in-loop"), None)
    assert f is None or "#pragma acc" in f.suggestion
    assert [x for x in a.findings if "acc" in x.suggestion and "OpenACC" in x.suggestion or "#pragma acc" in x.suggestion
            or "async" in x.suggestion]
    p = a.program
    assert "OpenACC" in p.frameworks and p.python is False and not p.torch


# every rule writes its advice from the Program: none is left out of the checks
OTHERS_RULES: set[str] = set()

CPP_EXPORTS = ["IkerCanut__fire_spread__report1", "IllusiveAldebaran__nussinov-gpu__report6",
               "purdue-ece60827-sp25__cuda-assignment-1-li3878__profile_report", "wenscarl__cutlass_benchmark__report1",
               "enleeyee__kNN-Benchmark__profile_report", "unschlagbar__neural-networks__prof",
               "RajaATAli__SC23_Programming-Your-GPU-with-OpenMP_Tutorial__report3"]


@pytest.mark.parametrize("stem", CPP_EXPORTS)
def test_native_exports_get_no_pytorch_advice(stem):
    path = CORPUS / f"{stem}.sqlite"
    if not path.exists():
        pytest.skip("public export absent")
    conn = open_export(path)
    procs = _profiled_process_names(conn)
    assert procs and not any(PYTHON_NAME.search(p) for p in procs)  # a native binary, not Python
    assert _kernel_count(conn, "%at::native%") == 0
    assert _pageable_copies(conn) > 0  # pageable copies: where the old advice said tensor.pin_memory()
    a = analyze(nsysan.open_trace(path))
    texts = _texts(a)
    assert not [r for r, t in texts if PYTORCH_WORDS.search(t)], texts
    pm = [f for f in a.findings if f.rule == "pageable-memcpy"]
    for f in pm:
        assert ("cudaMallocHost" in f.suggestion or "#pragma omp" in f.suggestion), f.suggestion
    assert a.program.python is False and a.program.native


def test_one_backward_kernel_in_a_test_run_is_not_a_training_loop():
    """NVIDIA Fuser's pytest export ran one ``nll_loss_backward`` kernel among a handful (SQL): a test
    that calls backward once is not a training loop, so no training advice (DataLoader, autocast)."""
    path = CORPUS / "NVIDIA__Fuser__report1.sqlite"
    if not path.exists():
        pytest.skip("public exports absent")
    conn = open_export(path)
    n_bwd = _backward_or_optimizer_kernels(conn)
    assert 0 < n_bwd < 3
    a = analyze(nsysan.open_trace(path))
    assert a.program.kind != "training"
    assert not [r for r, t in _texts(a) if "DataLoader" in t or "GradScaler" in t]


@pytest.mark.parametrize("stem", ["cestwc__balinski-and-gomory-cuda__report11", "kmcho2019__Rodinia_3.1_Gaussian__report2",
                                  "caoye310__Lower-Triangular-Solves__report1"])
def test_launch_and_timing_advice_of_native_programs_names_no_pytorch(stem):
    """Native programs where launch-bound, timing-unsynchronized or gpu-low-util fire: their advice is
    CUDA's (graphs, events), never torch.compile / torch.cuda.CUDAGraph (no PyTorch kernel by SQL,
    the profiled process is not Python)."""
    path = CORPUS / f"{stem}.sqlite"
    if not path.exists():
        pytest.skip("public export absent")
    conn = open_export(path)
    procs = _profiled_process_names(conn)
    assert procs and not any(PYTHON_NAME.search(p) for p in procs)
    assert _kernel_count(conn, "%at::native%") == 0
    a = analyze(nsysan.open_trace(path))
    texts = _texts(a)
    assert texts and not [r for r, t in texts if PYTORCH_WORDS.search(t)], texts
