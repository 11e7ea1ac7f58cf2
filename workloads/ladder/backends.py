"""Inference engines for the ladder: TensorRT (the seed's path) and PyTorch (where TensorRT is absent).

Both expose the same small interface, modelled on a TensorRT execution context:

* ``Engine.create_context(profile)`` -> ``Context``
* ``Context.enqueue(d_in, d_out, stream, batch)``: read ``batch`` images from the device buffer
  ``d_in`` (float32, NCHW), write float32 logits to ``d_out``, all asynchronously on ``stream``.
* ``Context.capture(d_in, d_out, stream, batch)`` -> a callable that replays the same work as
  one CUDA Graph launch on ``stream``.

Device memory for inputs/outputs is owned by the caller (raw ``cudaMalloc`` pointers wrapped in
``common.DeviceArray``), exactly as in a TensorRT application.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # workloads/: common.py

from common import DeviceArray, check, cudart, nvtx_range, stream_handle

NUM_CLASSES = 1000
IMAGE_SHAPE = (3, 224, 224)


# --------------------------------------------------------------------------- PyTorch backend
class TorchEngine:
    """ResNet-18 (torchvision, random weights: nothing is downloaded) run by PyTorch."""

    name = "torch"

    def __init__(self, *, fp16: bool, profiles: Sequence[int]) -> None:
        import torch
        import torchvision

        torch.backends.cudnn.benchmark = True
        self.torch = torch
        self.fp16 = fp16
        self.profiles = list(profiles)
        with nvtx_range("build engine"):
            model = torchvision.models.resnet18(weights=None).eval().cuda()
            self.model = model.half() if fp16 else model

    def create_context(self, profile: int = 0) -> TorchContext:
        return TorchContext(self, self.profiles[profile])


class TorchContext:
    def __init__(self, engine: TorchEngine, max_batch: int) -> None:
        self.engine = engine
        self.max_batch = max_batch

    def _body(self, d_in: DeviceArray, d_out: DeviceArray, batch: int) -> None:
        torch = self.engine.torch
        with torch.inference_mode():
            x = torch.as_tensor(d_in, device="cuda")[:batch]
            if self.engine.fp16:
                x = x.half()
            y = self.engine.model(x)
            torch.as_tensor(d_out, device="cuda")[:batch].copy_(y.float())

    def enqueue(self, d_in: DeviceArray, d_out: DeviceArray, stream: Any, batch: int) -> None:
        torch = self.engine.torch
        handle = stream_handle(stream)
        if handle == 0:
            self._body(d_in, d_out, batch)  # legacy default stream, like the seed's baseline
            return
        with torch.cuda.stream(torch.cuda.ExternalStream(handle)):
            self._body(d_in, d_out, batch)

    def capture(self, d_in: DeviceArray, d_out: DeviceArray, stream: Any, batch: int) -> Callable[[], None]:
        torch = self.engine.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up on a side stream before capture (PyTorch's recipe)
            for _ in range(2):
                self._body(d_in, d_out, batch)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._body(d_in, d_out, batch)
        ext = torch.cuda.ExternalStream(stream_handle(stream))

        def replay() -> None:
            with torch.cuda.stream(ext):
                graph.replay()

        return replay


# --------------------------------------------------------------------------- TensorRT backend
class TensorRTEngine:
    """ResNet-18 exported to ONNX and built by TensorRT, as in the seed article.

    The engine is built with one optimization profile per entry of ``profiles`` (max batch of
    each profile), so that several execution contexts can run concurrently, each on its own
    profile. FP16 is a builder flag. Inference uses ``execute_async_v3`` with tensor addresses set
    on the context, and an input-consumed event so the next copy may start as soon as TensorRT has
    read the input.
    """

    name = "tensorrt"

    def __init__(self, *, fp16: bool, profiles: Sequence[int]) -> None:
        import tensorrt as trt
        import torch
        import torchvision

        self.trt = trt
        self.fp16 = fp16
        self.profiles = list(profiles)
        logger = trt.Logger(trt.Logger.WARNING)
        with nvtx_range("export onnx"):
            onnx_path = os.path.join(tempfile.mkdtemp(prefix="nsysan-wl-"), "resnet18.onnx")
            model = torchvision.models.resnet18(weights=None).eval()
            dummy = torch.randn(1, *IMAGE_SHAPE)
            torch.onnx.export(
                model, (dummy,), onnx_path, input_names=["input"], output_names=["output"],
                dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}}, opset_version=17,
            )
        with nvtx_range("build engine"):
            builder = trt.Builder(logger)
            network = builder.create_network(0)
            parser = trt.OnnxParser(network, logger)
            with open(onnx_path, "rb") as f:
                if not parser.parse(f.read()):
                    errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
                    raise RuntimeError("ONNX parse failed: " + "; ".join(errors))
            config = builder.create_builder_config()
            config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, 1 << 30)
            if fp16:
                config.set_flag(trt.BuilderFlag.FP16)
            for max_batch in self.profiles:
                profile = builder.create_optimization_profile()
                profile.set_shape("input", (1, *IMAGE_SHAPE), (max_batch, *IMAGE_SHAPE), (max_batch, *IMAGE_SHAPE))
                config.add_optimization_profile(profile)
            serialized = builder.build_serialized_network(network, config)
            if serialized is None:
                raise RuntimeError("TensorRT engine build failed")
            self.runtime = trt.Runtime(logger)
            self.engine = self.runtime.deserialize_cuda_engine(serialized)

    def create_context(self, profile: int = 0) -> TensorRTContext:
        return TensorRTContext(self, profile)


class TensorRTContext:
    def __init__(self, engine: TensorRTEngine, profile: int) -> None:
        self.engine = engine
        self.profile = profile
        self.context = engine.engine.create_execution_context()
        self.input_consumed = check(cudart.cudaEventCreateWithFlags(cudart.cudaEventDisableTiming))
        self._profile_set = False

    def _bind(self, d_in: DeviceArray, d_out: DeviceArray, stream: Any, batch: int) -> None:
        if not self._profile_set:
            self.context.set_optimization_profile_async(self.profile, stream_handle(stream))
            self._profile_set = True
        self.context.set_input_shape("input", (batch, *IMAGE_SHAPE))
        self.context.set_tensor_address("input", d_in.ptr)
        self.context.set_tensor_address("output", d_out.ptr)
        self.context.set_input_consumed_event(int(self.input_consumed))

    def enqueue(self, d_in: DeviceArray, d_out: DeviceArray, stream: Any, batch: int) -> None:
        self._bind(d_in, d_out, stream, batch)
        if not self.context.execute_async_v3(stream_handle(stream)):
            raise RuntimeError("execute_async_v3 failed")

    def capture(self, d_in: DeviceArray, d_out: DeviceArray, stream: Any, batch: int) -> Callable[[], None]:
        # TensorRT: run once outside capture (it may allocate/update state), then capture the
        # enqueue into a CUDA graph on the stream and launch the instantiated graph afterwards.
        self.enqueue(d_in, d_out, stream, batch)
        check(cudart.cudaStreamSynchronize(stream))
        check(cudart.cudaStreamBeginCapture(stream, cudart.cudaStreamCaptureMode.cudaStreamCaptureModeGlobal))
        self.enqueue(d_in, d_out, stream, batch)
        graph = check(cudart.cudaStreamEndCapture(stream))
        graph_exec = check(cudart.cudaGraphInstantiate(graph, 0))

        def replay() -> None:
            check(cudart.cudaGraphLaunch(graph_exec, stream))

        return replay


def make_engine(backend: str, *, fp16: bool, profiles: Sequence[int]) -> TorchEngine | TensorRTEngine:
    """``backend`` is ``tensorrt``, ``torch`` or ``auto`` (TensorRT when it can be imported)."""
    if backend == "auto":
        try:
            import tensorrt  # noqa: F401

            backend = "tensorrt"
        except ImportError:
            backend = "torch"
    if backend == "tensorrt":
        return TensorRTEngine(fp16=fp16, profiles=profiles)
    if backend == "torch":
        return TorchEngine(fp16=fp16, profiles=profiles)
    raise ValueError(f"unknown backend {backend!r}")
