"""Framework advice as data: one ``Advice`` record per rule (the fix worded for each kind of program),
one function (``choose``) that picks the words for a trace's ``Program`` (``analyses/program.py``).

**Order.** The first field of ``ORDER`` that the record sets (not None) and that fits the program
wins; ``default`` (CUDA C/C++ terms) when none does:

- ``inference``: any inference program, whatever its framework;
- ``torch_training``, ``torch_inference``, ``torch``: PyTorch training, inference, either or unknown;
- ``jax_training``, ``jax``: JAX training, any JAX;
- ``torch_tensorrt``, ``tensorrt``: TensorRT with PyTorch, any TensorRT;
- ``cupy``; ``openacc``; ``openmp`` (OpenMP offload without OpenACC, as ``Program.directives``).

A rule whose own precedence differs names the fields to try before that order in ``first`` (its
TensorRT words before PyTorch's, say); a field left None is skipped, so a program of that kind gets
the next one that fits. Words that depend on more than the program (which collectives ran, a RAPIDS
allocator) stay a condition in the rule, before it calls ``choose``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from nsysan.analyses.program import OPENACC, OPENMP, Program

FITS: dict[str, Callable[[Program], bool]] = {
    "inference": lambda p: p.inference,
    "torch_training": lambda p: p.torch and p.training,
    "torch_inference": lambda p: p.torch and p.inference,
    "torch": lambda p: p.torch,
    "jax_training": lambda p: p.jax and p.training,
    "jax": lambda p: p.jax,
    "torch_tensorrt": lambda p: p.tensorrt and p.torch,
    "tensorrt": lambda p: p.tensorrt,
    "cupy": lambda p: p.cupy,
    "openacc": lambda p: p.directives == OPENACC,
    "openmp": lambda p: p.directives == OPENMP,
}
ORDER = tuple(FITS)


@dataclass(frozen=True, kw_only=True)
class Advice:
    """A rule's fix per kind of program (see the module's docstring for which one a program gets)."""

    default: str
    inference: str | None = None
    torch_training: str | None = None
    torch_inference: str | None = None
    torch: str | None = None
    jax_training: str | None = None
    jax: str | None = None
    torch_tensorrt: str | None = None
    tensorrt: str | None = None
    cupy: str | None = None
    openacc: str | None = None
    openmp: str | None = None
    first: tuple[str, ...] = ()  # fields tried before ORDER

    def __post_init__(self) -> None:
        unknown = [f for f in self.first if f not in FITS]
        if unknown:
            raise ValueError(f"Advice.first names no kind of program: {unknown}")

    def kinds(self) -> list[str]:
        """The fields set besides ``default``, in the order they are tried."""
        return [f for f in dict.fromkeys(self.first + ORDER) if getattr(self, f) is not None]


def choose(advice: Advice, p: Program) -> str:
    """The words of ``advice`` for program ``p``: the first field set that fits it, else ``default``."""
    for kind in advice.first + ORDER:
        text = getattr(advice, kind)
        if text is not None and FITS[kind](p):
            return text
    return advice.default


# phrases the precision advice of several rules shares (fp32-compute, tensor-cores-idle, memory-bound)
TORCH_BF16 = "``torch.autocast(\"cuda\", dtype=torch.bfloat16)``"
TORCH_FP16 = "``torch.autocast(\"cuda\", dtype=torch.float16)``"
TORCH_HALF = "``model.half()``/``model.to(torch.bfloat16)``"
TORCH_TF32 = "``torch.set_float32_matmul_precision(\"high\")``"
CUBLAS_TF32 = "``cublasSetMathMode(handle, CUBLAS_TF32_TENSOR_OP_MATH)``"
CUDNN_TENSOR_OPS = "``cudnnSetConvolutionMathType(desc, CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)``"
