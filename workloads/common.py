"""Shared helpers for the workloads: CUDA runtime calls through cuda-python, NVTX ranges.

Host buffers, streams, events and copies go through ``cuda.bindings.runtime`` exactly as a
user of the CUDA runtime API would write them, so the traces show the real API calls
(``cudaMalloc``, ``cudaMemcpy``, ``cudaMemcpyAsync``, ``cudaHostAlloc``, ``cudaEventRecord``...).

Workloads never import nsysan.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

try:  # cuda-python >= 12.6 layout
    from cuda.bindings import runtime as cudart
except ImportError:  # pragma: no cover - older cuda-python
    from cuda import cudart  # type: ignore[no-redef]

try:
    import nvtx as _nvtx

    def push(name: str) -> None:
        _nvtx.push_range(name)

    def pop() -> None:
        _nvtx.pop_range()

except ImportError:  # pragma: no cover - fall back to torch's NVTX bindings
    import torch

    def push(name: str) -> None:
        torch.cuda.nvtx.range_push(name)

    def pop() -> None:
        torch.cuda.nvtx.range_pop()


@contextlib.contextmanager
def nvtx_range(name: str) -> Iterator[None]:
    """An NVTX push/pop range on the calling thread."""
    push(name)
    try:
        yield
    finally:
        pop()


class CudaError(RuntimeError):
    pass


def check(result: Any) -> Any:
    """Unwrap a cuda-python ``(err, *values)`` tuple, raising on error."""
    if isinstance(result, tuple):
        err, *rest = result
    else:
        err, rest = result, []
    if int(err) != 0:
        _, msg = cudart.cudaGetErrorString(err)
        raise CudaError(f"{err}: {msg.decode() if isinstance(msg, bytes) else msg}")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else tuple(rest)


H2D = cudart.cudaMemcpyKind.cudaMemcpyHostToDevice
D2H = cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost
D2D = cudart.cudaMemcpyKind.cudaMemcpyDeviceToDevice


def malloc(nbytes: int) -> int:
    return int(check(cudart.cudaMalloc(nbytes)))


def free(ptr: int) -> None:
    check(cudart.cudaFree(ptr))


def stream_create() -> Any:
    return check(cudart.cudaStreamCreateWithFlags(cudart.cudaStreamNonBlocking))


def stream_sync(stream: Any) -> None:
    check(cudart.cudaStreamSynchronize(stream))


def event_create() -> Any:
    return check(cudart.cudaEventCreateWithFlags(cudart.cudaEventDisableTiming))


def timing_event() -> Any:
    return check(cudart.cudaEventCreate())


def event_record(event: Any, stream: Any) -> None:
    check(cudart.cudaEventRecord(event, stream))


def event_sync(event: Any) -> None:
    check(cudart.cudaEventSynchronize(event))


def event_elapsed_ms(start: Any, end: Any) -> float:
    return float(check(cudart.cudaEventElapsedTime(start, end)))


def stream_wait(stream: Any, event: Any) -> None:
    check(cudart.cudaStreamWaitEvent(stream, event, 0))


def device_sync() -> None:
    check(cudart.cudaDeviceSynchronize())


def memcpy(dst: int, src: int, nbytes: int, kind: Any) -> None:
    """Synchronous ``cudaMemcpy``."""
    check(cudart.cudaMemcpy(dst, src, nbytes, kind))


def memcpy_async(dst: int, src: int, nbytes: int, kind: Any, stream: Any) -> None:
    check(cudart.cudaMemcpyAsync(dst, src, nbytes, kind, stream))


@dataclass
class HostBuffer:
    """A host array, either pageable (numpy) or pinned (``cudaHostAlloc``)."""

    array: np.ndarray
    pinned: bool
    _ptr: int = 0

    @classmethod
    def pageable(cls, shape: tuple[int, ...], dtype: Any) -> HostBuffer:
        return cls(np.empty(shape, dtype=dtype), pinned=False)

    @classmethod
    def pinned_alloc(cls, shape: tuple[int, ...], dtype: Any) -> HostBuffer:
        dt = np.dtype(dtype)
        nbytes = int(np.prod(shape)) * dt.itemsize
        ptr = int(check(cudart.cudaHostAlloc(nbytes, cudart.cudaHostAllocDefault)))
        raw = (ctypes.c_byte * nbytes).from_address(ptr)
        arr = np.frombuffer(raw, dtype=dt).reshape(shape)
        return cls(arr, pinned=True, _ptr=ptr)

    @property
    def ptr(self) -> int:
        return int(self.array.ctypes.data)

    @property
    def nbytes(self) -> int:
        return int(self.array.nbytes)

    def release(self) -> None:
        if self.pinned and self._ptr:
            check(cudart.cudaFreeHost(self._ptr))
            self._ptr = 0


class DeviceArray:
    """A raw ``cudaMalloc`` allocation that torch/cupy can view via ``__cuda_array_interface__``."""

    def __init__(self, shape: tuple[int, ...], dtype: Any, ptr: int | None = None) -> None:
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.nbytes = int(np.prod(shape)) * self.dtype.itemsize
        self.owned = ptr is None
        self.ptr = malloc(self.nbytes) if ptr is None else ptr

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.ptr, False),
            "version": 3,
            "strides": None,
            "stream": None,
        }

    def free(self) -> None:
        if self.owned and self.ptr:
            free(self.ptr)
            self.ptr = 0


def stream_handle(stream: Any) -> int:
    """The integer ``cudaStream_t`` value (0 for the legacy default stream)."""
    if stream is None:
        return 0
    return int(stream)
