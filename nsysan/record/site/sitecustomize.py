"""``nsysan profile --annotate``: this folder is first on the profiled command's PYTHONPATH, so
Python runs this file at start-up (``site``). It installs nsysan's import hook
(``_nsysan_annotate.install``: NVTX ranges around the framework calls that bound a step, added when
the framework is imported), then runs the ``sitecustomize`` this one hides, if the program's path
has one, as Python would have."""

import os
import sys


def _nsysan_annotate():
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        import _nsysan_annotate

        _nsysan_annotate.install()
    except Exception as e:  # noqa: BLE001 - never stop the user's program
        print(f"nsysan: --annotate: not installed ({type(e).__name__}: {e})", file=sys.stderr)
    from importlib.machinery import PathFinder
    from importlib.util import module_from_spec

    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:  # the user's own: it becomes `sitecustomize`
        module = module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)


_nsysan_annotate()
