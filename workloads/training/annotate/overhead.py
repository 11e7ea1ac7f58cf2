"""The cost of one ``nsysan profile --annotate`` wrapper call, measured on trivial callables.

Each wrapper of ``nsysan/record/site/_nsysan_annotate.py`` (push/pop range, outermost module call,
start/end step range, mark with the caller's file:line, jitted-function range) wraps a function
that does nothing; the time per call minus the bare function's is the wrapper's overhead. The NVTX
backend is ``noop`` (Python functions that do nothing: the wrappers' own Python cost), ``ctypes``
(libnvToolsExt / libnvtx3interop) or ``package`` (the ``nvtx`` package); without a tool attached the
NVTX calls return at once, under ``nsys profile -t nvtx`` they are recorded.

    python3 workloads/training/annotate/overhead.py --backend noop
    nsys profile -t nvtx -s none -o /tmp/o python3 workloads/training/annotate/overhead.py --backend package

Prints one line per wrapper: ``[annotate] overhead <wrapper>: <ns> ns per call`` (best of 7 rounds).
"""

from __future__ import annotations

import argparse
import sys
import timeit
import types
from pathlib import Path

SITE = Path(__file__).resolve().parents[3] / "nsysan" / "record" / "site"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", choices=["noop", "ctypes", "package"], default="noop")
    ap.add_argument("--n", type=int, default=200_000)
    args = ap.parse_args()
    sys.path.insert(0, str(SITE))
    import _nsysan_annotate as w

    if args.backend == "noop":
        def nothing(*_a):
            return 0
        w._backend = (nothing, nothing, nothing, nothing, nothing)
        w._push, w._pop, w._start, w._end, w._mark = w._backend
    else:
        import os

        os.environ["NSYSAN_ANNOTATE_NVTX"] = args.backend
        assert w._load_backend(), "no NVTX backend"

    def bare(*_a, **_k):
        return None

    class Module:
        def parameters(self):
            yield 1

        def __call__(self, *a, **k):
            return None

    torch_nn = types.SimpleNamespace(Module=Module)
    w._patch_module(torch_nn)
    model = Module()
    ranged = w._ranged(bare, "input wait")
    backward = w._outermost_backward(bare)
    marked = w._marked(bare, "item")
    jitted = w._Jitted(bare, "train_step")

    def step_hooks():
        w._optimizer_pre(None, (), {})
        w._optimizer_post(None, (), {})

    cases = {"bare function": bare, "push/pop range (input wait, zero_grad, hooks)": ranged,
             "outermost module call (forward)": model, "backward": backward,
             "mark at the call site (item, synchronize)": marked, "jitted function": jitted,
             "optimizer hooks (optimizer range + step end/start)": step_hooks}
    base = None
    for name, fn in cases.items():
        best = min(timeit.repeat(fn, number=args.n, repeat=7)) / args.n * 1e9
        if base is None:
            base = best
            print(f"[annotate] overhead {name}: {best:.0f} ns per call (the baseline) backend={args.backend}")
        else:
            extra = best - (0 if name.startswith("optimizer") else base)
            print(f"[annotate] overhead {name}: {extra:.0f} ns per call backend={args.backend}")


if __name__ == "__main__":
    main()
