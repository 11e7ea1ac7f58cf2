"""Framework advice as data (issue 50): ``rules/_advice.py``'s ``Advice`` records and the one chooser,
on hand-built programs (no trace): the order the fields are tried in, a record's own precedence
(``first``), and that every rule worded per framework declares its words as an ``Advice`` record."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import nsysan.rules
from nsysan.analyses.program import Program
from nsysan.rules._advice import FITS, ORDER, Advice, choose

KINDS = ORDER + ("default",)
EVERY = Advice(**{k: k for k in KINDS})  # each field's text is its own name


def prog(kind: str = "unknown", *frameworks: str, python: bool | None = None) -> Program:
    return Program(kind=kind, python=python, frameworks=frozenset(frameworks))


def test_fields_are_the_kinds_of_program_in_order():
    assert ORDER == ("inference", "torch_training", "torch_inference", "torch", "jax_training", "jax",
                     "torch_tensorrt", "tensorrt", "cupy", "openacc", "openmp")
    assert set(FITS) == set(ORDER)
    assert EVERY.kinds() == list(ORDER)


@pytest.mark.parametrize("p, words", [
    (prog(), "default"),
    (prog("training"), "default"),
    (prog("inference"), "inference"),  # any inference program, before its framework
    (prog("inference", "PyTorch", "TensorRT"), "inference"),
    (prog("training", "PyTorch", "JAX/XLA", "TensorRT", "CuPy", "OpenACC"), "torch_training"),
    (prog("unknown", "PyTorch", "JAX/XLA", "TensorRT", "CuPy"), "torch"),
    (prog("training", "JAX/XLA", "TensorRT", "CuPy"), "jax_training"),
    (prog("unknown", "JAX/XLA", "TensorRT", "CuPy"), "jax"),
    (prog("unknown", "TensorRT", "CuPy", "OpenACC"), "tensorrt"),
    (prog("unknown", "CuPy", "OpenACC", "OpenMP offload"), "cupy"),
    (prog("training", "OpenACC", "OpenMP offload"), "openacc"),  # OpenACC's words when both directives ran
    (prog("unknown", "OpenMP offload"), "openmp"),
    (prog("unknown", "cuDNN", "cuBLAS", "NCCL", "Julia", python=False), "default"),  # no words of their own
])
def test_the_first_field_that_fits_wins(p, words):
    assert choose(EVERY, p) == words


def test_a_field_left_none_passes_to_the_next_that_fits():
    a = Advice(torch="torch", cupy="cupy", default="cuda")
    assert choose(a, prog("training", "PyTorch")) == "torch"  # no torch_training words: PyTorch's
    assert choose(a, prog("inference", "PyTorch")) == "torch"  # no inference words either
    assert choose(a, prog("unknown", "JAX/XLA", "CuPy")) == "cupy"  # no JAX words: the next kind present
    assert choose(a, prog("unknown", "JAX/XLA")) == "cuda"
    assert choose(a, prog("unknown", "OpenACC")) == "cuda"
    both = Advice(torch_training="t", torch_inference="i", jax_training="jt", default="d")
    assert choose(both, prog("unknown", "PyTorch")) == "d"  # training or inference words need the kind
    assert choose(both, prog("training", "JAX/XLA")) == "jt"


def test_torch_tensorrt_needs_both():
    a = Advice(torch_tensorrt="both", tensorrt="trt", torch="torch", default="d")
    assert choose(a, prog("inference", "TensorRT")) == "trt"
    assert choose(a, prog("inference", "PyTorch")) == "torch"
    assert choose(a, prog("inference", "PyTorch", "TensorRT")) == "torch"  # PyTorch first in the usual order
    first = Advice(**{**vars(a), "first": ("torch_tensorrt",)})
    assert choose(first, prog("inference", "PyTorch", "TensorRT")) == "both"


def test_first_goes_before_the_usual_order_in_its_own_order():
    a = Advice(**{k: k for k in KINDS}, first=("jax", "tensorrt"))
    assert choose(a, prog("training", "PyTorch", "JAX/XLA", "TensorRT")) == "jax"
    assert choose(a, prog("training", "PyTorch", "TensorRT")) == "tensorrt"
    assert choose(a, prog("training", "PyTorch")) == "torch_training"
    assert choose(a, prog("inference", "CuPy")) == "inference"
    # a field named in first but left None is skipped there as anywhere
    b = Advice(torch="torch", default="d", first=("tensorrt",))
    assert choose(b, prog("unknown", "PyTorch", "TensorRT")) == "torch"


def test_first_names_only_kinds_of_program():
    with pytest.raises(ValueError, match="pytorch"):
        Advice(default="d", first=("pytorch",))
    with pytest.raises(ValueError):
        Advice(default="d", first=("default",))


def test_records_are_frozen_and_need_a_default():
    with pytest.raises(AttributeError):
        EVERY.torch = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        Advice(torch="t")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Advice("positional")  # type: ignore[misc]


# the rules' own precedence, where it differs from the usual order (as the if-chains had it)

def test_rules_whose_tensorrt_or_jax_words_come_first():
    from nsysan.rules import exposed_communication, fp32_compute, launch_bound, tensor_cores_idle, warmup_outlier

    torch_trt = prog("inference", "PyTorch", "TensorRT")
    assert choose(launch_bound.ADVICE, torch_trt) == launch_bound.ADVICE.tensorrt  # the engine's enqueue
    assert choose(tensor_cores_idle.ADVICE, torch_trt) == tensor_cores_idle.ADVICE.torch_inference
    assert choose(fp32_compute.ADVICE, torch_trt) == fp32_compute.ADVICE.torch_tensorrt
    assert choose(fp32_compute.ADVICE, prog("inference", "TensorRT")) == fp32_compute.ADVICE.tensorrt
    assert choose(fp32_compute.ADVICE, prog("training", "PyTorch", "TensorRT")) == fp32_compute.ADVICE.torch_training
    assert choose(fp32_compute.ADVICE, prog("training", "JAX/XLA", "TensorRT")) == fp32_compute.ADVICE.jax_training
    assert choose(fp32_compute.ADVICE, prog("unknown", "JAX/XLA", "TensorRT")) == fp32_compute.ADVICE.tensorrt
    both = prog("training", "PyTorch", "JAX/XLA", "TensorRT")
    assert choose(warmup_outlier.ADVICE, both) == warmup_outlier.ADVICE.jax
    assert choose(warmup_outlier.ADVICE, prog("training", "PyTorch", "TensorRT")) == warmup_outlier.ADVICE.tensorrt
    assert choose(exposed_communication.ADVICE, both) == exposed_communication.ADVICE.jax


def test_hidden_syncs_words_an_inference_loop_alike_for_every_framework():
    from nsysan.rules import hidden_syncs

    texts = {hidden_syncs.advice(prog("inference", *fw)) for fw in ((), ("PyTorch",), ("JAX/XLA",), ("CuPy",))}
    assert texts == {hidden_syncs.ADVICE.inference}
    assert hidden_syncs.advice(prog("training", "PyTorch")) == hidden_syncs.ADVICE.torch


def test_memory_bound_words_both_directives_alike():
    from nsysan.rules import memory_bound

    acc, omp = (memory_bound.advice(prog("unknown", d)) for d in ("OpenACC", "OpenMP offload"))
    assert acc == omp == memory_bound.ADVICE.openacc != memory_bound.ADVICE.default


def test_exposed_communication_words_by_collectives_for_pytorch_only():
    from nsysan.rules.exposed_communication import ADVICE, P2P, SHARDED, advice

    torch = prog("training", "PyTorch")
    assert advice(torch, {"SendRecv"}) == advice(torch, {"Send", "Recv"}) == P2P
    assert advice(torch, {"AllGather", "AllReduce"}) == advice(torch, {"ReduceScatter"}) == SHARDED
    assert advice(torch, {"AllReduce"}) == advice(torch, set()) == ADVICE.torch_training
    assert advice(prog("inference", "PyTorch"), {"AllReduce"}) == ADVICE.torch
    assert advice(prog("training", "PyTorch", "JAX/XLA"), {"SendRecv"}) == ADVICE.jax
    assert advice(prog("training", python=False), {"SendRecv"}) == ADVICE.default


def test_alloc_in_loop_tells_rapids_programs_of_rmm_first():
    from nsysan.rules import alloc_in_loop

    rapids = prog("unknown", "cuDF", "PyTorch", python=True)
    assert alloc_in_loop.advice(rapids) == alloc_in_loop.rmm_advice(rapids) != alloc_in_loop.ADVICE.torch
    assert alloc_in_loop.advice(prog("unknown", "PyTorch")) == alloc_in_loop.ADVICE.torch


# every rule worded per framework declares its words as data

FRAMEWORK_READS = {"torch", "jax", "cupy", "tensorrt", "directives", "rapids"}
# framework words that are not one choice among kinds of program, each with why
NOT_A_CHOICE = {
    "slow_iterations": "new_kernels_advice adds PyTorch's and JAX's sentences, both where both ran",
}
# advice functions that may still read the program's frameworks themselves, each with why
READS_ALLOWED = {
    ("alloc_in_loop", "advice"): "RAPIDS first: RMM's pool, worded by rmm_advice",
    ("alloc_in_loop", "rmm_advice"): "the libraries that share RMM's pool, listed together",
    ("exposed_communication", "advice"): "a PyTorch program's point-to-point or sharded collectives first",
    ("slow_iterations", "new_kernels_advice"): NOT_A_CHOICE["slow_iterations"],
}


def rule_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(nsysan.rules.__path__) if not m.name.startswith("_"))


def framework_reads(node: ast.AST) -> list[str]:
    """``p.torch``, ``prog.jax``...: a Program's framework read off a plain name (not ``ctx.a.tensorrt``,
    the analysis' TensorRT tables)."""
    return [n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
            and n.attr in FRAMEWORK_READS]


def test_every_rule_worded_per_framework_declares_an_advice_record():
    seen = []
    for name in rule_modules():
        path = Path(nsysan.rules.__file__).parent / f"{name}.py"
        tree = ast.parse(path.read_text("utf-8"))
        advice_fns = [f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name.endswith("advice")]
        if not framework_reads(tree) and not advice_fns:
            continue
        seen.append(name)
        if name in NOT_A_CHOICE:
            continue
        mod = importlib.import_module(f"nsysan.rules.{name}")
        records = [v for v in vars(mod).values() if isinstance(v, Advice)]
        assert records, f"{name} words its fix per framework but declares no Advice record"
        for r in records:
            assert r.default and all(isinstance(getattr(r, k), str) for k in r.kinds()), (name, r)
        for f in advice_fns:
            if (name, f.name) not in READS_ALLOWED:
                assert not framework_reads(f), f"{name}.{f.name} chooses by framework itself: {framework_reads(f)}"
    # the rules that word their fix per framework (issue 50's fifteen and those since)
    assert len(seen) >= 18 and {"fp32_compute", "memory_bound", "tensor_cores_idle", "launch_bound"} <= set(seen)


def test_allowlists_hold_only_what_is_still_there():
    for (name, fn), _ in READS_ALLOWED.items():
        tree = ast.parse((Path(nsysan.rules.__file__).parent / f"{name}.py").read_text("utf-8"))
        f = next(f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == fn)
        assert framework_reads(f), (name, fn)
