"""NVTX ranges around the calls that bound a training or inference step, added to a program nsysan
records (``nsysan profile --annotate``) without any edit to its code.

Loaded by nsysan's ``sitecustomize`` (this folder is put first on the profiled command's
PYTHONPATH): :func:`install` puts an import hook on ``sys.meta_path`` and nothing else. The wrappers
are installed when the framework's own module finishes importing (torch, Lightning, transformers,
JAX); a program that never imports one runs unchanged, and nothing here imports a framework.

The ranges are in the NVTX domain ``nsysan`` (``nsysan.analyses.recorder_ranges`` holds the same
names for the analyzer; a test keeps them equal):

* ``step``: a start/end range from the end of one ``Optimizer.step`` to the end of the next (the
  first from the first DataLoader ``__next__`` or model forward): one instance, one training
  iteration. Without an optimizer, one per top-level ``generate()`` call;
* push/pop ranges: ``input wait`` (DataLoader iterator ``__next__``), ``forward`` (the outermost
  ``torch.nn.Module.__call__`` of a module with parameters; ``token`` inside ``generate()``),
  ``backward`` (``Tensor.backward`` / ``torch.autograd.backward``, the outermost), ``optimizer``
  (``Optimizer.step``, through torch's global optimizer hooks), ``zero_grad``, Lightning's
  ``training_step``/``validation_step`` (its Strategy's calls of them), HF ``Trainer``'s
  ``training_step``/``evaluate``, ``generate`` (when the program also trains), and each call of a
  function ``jax.jit`` returned, named by the function's ``__name__``;
* marks ``synchronize FILE:LINE`` and ``item FILE:LINE`` where ``torch.cuda.synchronize`` and
  ``Tensor.item`` are called (the caller's file and line).

NVTX comes from libnvToolsExt / libnvtx3interop (CUDA's, the nvidia-nvtx wheel's) through ctypes,
with ASCII messages (nsys 2025.3 loses registered strings in JAX processes: ``[Unknown]``), else
from the ``nvtx`` package (registered strings); ``NSYSAN_ANNOTATE_NVTX=ctypes|package`` picks one.
A mark at the first range says which (``nsysan profile --annotate: sitecustomize, NVTX through ...``). Without either the program runs
unannotated, with one line on stderr. Standard library only; runs on Python 3.8+.
"""

from __future__ import annotations

import functools
import glob
import os
import sys
import threading
import weakref

DOMAIN = "nsysan"
STEP = "step"
INPUT_WAIT = "input wait"
FORWARD = "forward"
BACKWARD = "backward"
OPTIMIZER = "optimizer"
ZERO_GRAD = "zero_grad"
TRAINING_STEP = "training_step"
VALIDATION_STEP = "validation_step"
EVALUATE = "evaluate"
GENERATE = "generate"
TOKEN = "token"
SYNC_MARK = "synchronize"
ITEM_MARK = "item"

_installed = False
_backend = None  # (push, pop, start, end, mark) once chosen; False: none found
_step_id = None  # the open ``step`` range
_seen_optimizer = False


def _say(text):
    print(f"nsysan: --annotate: {text}", file=sys.stderr, flush=True)


# --- NVTX backends --------------------------------------------------------------------------------

def _package_backend():
    import nvtx  # the `nvtx` package (its own NVTX3 code, domains and registered strings)

    dom = nvtx.get_domain(DOMAIN)
    attrs = {}

    def attr(name):
        a = attrs.get(name)
        if a is None:
            a = attrs[name] = dom.get_event_attributes(message=name)
        return a

    def push(name):
        dom.push_range(attr(name))

    def start(name):
        return dom.start_range(attr(name))

    def mark(name):
        dom.mark(attr(name))

    return push, dom.pop_range, start, dom.end_range, mark


def _nvtx_libraries():
    """Candidate C libraries with the NVTX domain API, most likely first."""
    import ctypes.util

    names = ["libnvToolsExt.so.1", "libnvtx3interop.so.1"]
    found = [os.environ.get("NSYSAN_NVTX_LIBRARY", ""), ctypes.util.find_library("nvToolsExt") or ""]
    roots = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""), "/usr/local/cuda",
             *sorted(glob.glob("/usr/local/cuda-*"), reverse=True)]
    for root in filter(None, roots):
        for sub in ("lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"):
            found += [os.path.join(root, sub, n) for n in names if os.path.exists(os.path.join(root, sub, n))]
    for p in sys.path:  # the nvidia-nvtx wheel (nvidia/nvtx/lib, nvidia/cu13/lib)
        for n in names:
            found += glob.glob(os.path.join(p or ".", "nvidia", "*", "lib", n))
    return [*filter(None, found), *names]  # last: the loader's own search (LD_LIBRARY_PATH, ld.so.cache)


def _ctypes_backend():
    import ctypes

    errors = []
    for path in _nvtx_libraries():
        try:
            lib = ctypes.CDLL(path)
            lib.nvtxDomainCreateA  # noqa: B018 - the domain API is there
            break
        except (OSError, AttributeError) as e:
            errors.append(str(e))
    else:
        raise OSError("no libnvToolsExt / libnvtx3interop: " + "; ".join(errors[-2:]))

    class Attr(ctypes.Structure):  # nvtxEventAttributes_t (v2, 48 bytes)
        _fields_ = [("version", ctypes.c_uint16), ("size", ctypes.c_uint16), ("category", ctypes.c_uint32),
                    ("color_type", ctypes.c_int32), ("color", ctypes.c_uint32), ("payload_type", ctypes.c_int32),
                    ("reserved0", ctypes.c_int32), ("payload", ctypes.c_uint64), ("message_type", ctypes.c_int32),
                    ("message", ctypes.c_void_p)]

    vp = ctypes.c_void_p
    lib.nvtxDomainCreateA.restype = vp
    lib.nvtxDomainCreateA.argtypes = [ctypes.c_char_p]
    lib.nvtxDomainRangePushEx.argtypes = [vp, ctypes.POINTER(Attr)]
    lib.nvtxDomainRangePop.argtypes = [vp]
    lib.nvtxDomainRangeStartEx.restype = ctypes.c_uint64
    lib.nvtxDomainRangeStartEx.argtypes = [vp, ctypes.POINTER(Attr)]
    lib.nvtxDomainRangeEnd.argtypes = [vp, ctypes.c_uint64]
    lib.nvtxDomainMarkEx.argtypes = [vp, ctypes.POINTER(Attr)]
    dom = lib.nvtxDomainCreateA(DOMAIN.encode())
    attrs = {}

    def attr(name):
        a = attrs.get(name)
        if a is None:  # an ASCII message, not a registered string (nsys 2025.3 loses those in JAX processes)
            text = ctypes.create_string_buffer(name.encode("utf-8", "replace"))
            a = Attr(version=3, size=ctypes.sizeof(Attr), message_type=1, message=ctypes.addressof(text))
            a._text = text  # the message must live as long as the attributes
            attrs[name] = a = ctypes.byref(a)
        return a

    push_ex, pop, start_ex, end, mark_ex = (lib.nvtxDomainRangePushEx, lib.nvtxDomainRangePop,
                                            lib.nvtxDomainRangeStartEx, lib.nvtxDomainRangeEnd, lib.nvtxDomainMarkEx)
    return (lambda name: push_ex(dom, attr(name)), lambda: pop(dom), lambda name: start_ex(dom, attr(name)),
            lambda rid: end(dom, rid), lambda name: mark_ex(dom, attr(name)))


def _load_backend():
    global _backend, _push, _pop, _start, _end, _mark
    if _backend is not None:
        return bool(_backend)
    choice = os.environ.get("NSYSAN_ANNOTATE_NVTX", "auto")
    errors = []
    for kind, make in (("ctypes", _ctypes_backend), ("package", _package_backend)):
        if choice not in ("auto", kind):
            continue
        try:
            _backend = make()
            break
        except Exception as e:  # noqa: BLE001 - ImportError, OSError, a missing symbol: try the next
            errors.append(f"{kind}: {type(e).__name__}: {e}")
    else:
        _backend = False
        _say("no NVTX library (pip install nvtx, or CUDA's libnvToolsExt / libnvtx3interop); "
             "running unannotated (" + "; ".join(errors)[:300] + ")")
        return False
    _push, _pop, _start, _end, _mark = _backend
    _mark(f"nsysan profile --annotate: sitecustomize, NVTX through {kind}")  # which path recorded the ranges
    return True


def _push(name):  # replaced by the backend's on first use
    if _load_backend():
        _push(name)


def _pop():
    if _load_backend():
        _pop()


def _start(name):
    return _start(name) if _load_backend() else None


def _end(rid):
    if _load_backend():
        _end(rid)


def _mark(name):
    if _load_backend():
        _mark(name)


# --- the step and per-thread nesting --------------------------------------------------------------

class _Nesting(threading.local):
    def __init__(self):
        self.module = 0
        self.backward = 0
        self.generate = 0


_st = _Nesting()


def _not_compiling():
    return False


_compiling = _not_compiling  # torch.compiler.is_compiling once torch is imported: no ranges inside a trace


def _begin_step():
    global _step_id
    if _step_id is None and _backend is not False:
        _step_id = _start(STEP)


def _next_step():
    global _step_id
    if _step_id is not None:
        _end(_step_id)
    _step_id = _start(STEP) if _backend is not False else None


def _ranged(orig, name, before=None):
    """``orig`` inside a push/pop range ``name`` (``before``: called first)."""
    @functools.wraps(orig)
    def wrapper(*args, **kwargs):
        if before is not None:
            before()
        _push(name)
        try:
            return orig(*args, **kwargs)
        finally:
            _pop()
    wrapper.__nsysan_wrapped__ = orig
    return wrapper


def _site(prefix, depth=2):
    f = sys._getframe(depth)
    return f"{prefix} {f.f_code.co_filename}:{f.f_lineno}"


# --- torch -----------------------------------------------------------------------------------------

_PARAMS = weakref.WeakKeyDictionary()  # module -> whether it has parameters (a model, not a loss)


def _has_params(module, _cache=_PARAMS):
    try:
        return _cache[module]
    except (KeyError, TypeError):
        pass
    try:
        has = next(iter(module.parameters()), None) is not None
    except Exception:  # noqa: BLE001 - a module whose parameters() fails: judged as a model
        has = True
    try:
        _cache[module] = has
    except TypeError:
        pass
    return has


def _patch_module(mod):
    Module = mod.Module
    orig = Module.__call__

    def __call__(self, *args, **kwargs):
        if _compiling():
            return orig(self, *args, **kwargs)
        st = _st
        if st.module or not _has_params(self):
            return orig(self, *args, **kwargs)
        st.module = 1
        if st.generate:
            name = TOKEN
        else:
            name = FORWARD
            _begin_step()
        _push(name)
        try:
            return orig(self, *args, **kwargs)
        finally:
            _pop()
            st.module = 0
    __call__.__nsysan_wrapped__ = orig
    Module.__call__ = __call__


def _outermost_backward(orig):
    @functools.wraps(orig)
    def backward(*args, **kwargs):
        if _compiling():
            return orig(*args, **kwargs)
        st = _st
        if st.backward:
            return orig(*args, **kwargs)
        st.backward = 1
        _push(BACKWARD)
        try:
            return orig(*args, **kwargs)
        finally:
            _pop()
            st.backward = 0
    backward.__nsysan_wrapped__ = orig
    return backward


def _marked(orig, prefix):
    @functools.wraps(orig)
    def call(*args, **kwargs):
        if not _compiling():
            _mark(_site(prefix))
        return orig(*args, **kwargs)
    call.__nsysan_wrapped__ = orig
    return call


def _patch_tensor(mod):
    Tensor = mod.Tensor
    Tensor.backward = _outermost_backward(Tensor.backward)
    Tensor.item = _marked(Tensor.item, ITEM_MARK)


def _patch_autograd(mod):
    mod.backward = _outermost_backward(mod.backward)


def _patch_cuda(mod):
    mod.synchronize = _marked(mod.synchronize, SYNC_MARK)


def _optimizer_pre(_optimizer, _args, _kwargs):
    global _seen_optimizer
    _seen_optimizer = True
    _push(OPTIMIZER)


def _optimizer_post(_optimizer, _args, _kwargs):
    _pop()
    _next_step()


def _patch_optimizer(mod):
    mod.register_optimizer_step_pre_hook(_optimizer_pre)
    mod.register_optimizer_step_post_hook(_optimizer_post)
    mod.Optimizer.zero_grad = _ranged(mod.Optimizer.zero_grad, ZERO_GRAD)


def _patch_dataloader(mod):
    it = mod._BaseDataLoaderIter
    it.__next__ = _ranged(it.__next__, INPUT_WAIT, before=_begin_step)


def _patch_torch(mod):
    global _compiling
    compiler = getattr(mod, "compiler", None)
    _compiling = getattr(compiler, "is_compiling", None) or _not_compiling


def _generate(orig):
    @functools.wraps(orig)
    def generate(*args, **kwargs):
        st = _st
        if st.generate:
            return orig(*args, **kwargs)
        st.generate = 1
        rid = None
        if _seen_optimizer:
            _push(GENERATE)
        else:
            rid = _start(STEP)
        try:
            return orig(*args, **kwargs)
        finally:
            if rid is None:
                _pop()
            else:
                _end(rid)
            st.generate = 0
    generate.__nsysan_wrapped__ = orig
    return generate


# --- Lightning, transformers, JAX ------------------------------------------------------------------

def _patch_lightning(mod):
    s = mod.Strategy
    s.training_step = _ranged(s.training_step, TRAINING_STEP)
    s.validation_step = _ranged(s.validation_step, VALIDATION_STEP)


def _patch_trainer(mod):
    t = mod.Trainer
    t.training_step = _ranged(t.training_step, TRAINING_STEP)
    t.evaluate = _ranged(t.evaluate, EVALUATE)


def _patch_generation(mod):
    g = mod.GenerationMixin
    g.generate = _generate(g.generate)


class _Jitted:
    """A function ``jax.jit`` returned, each call in an NVTX range named by the function; anything
    else (``lower``, ``trace``, ``eval_shape`` ...) goes to the jitted function itself."""

    __slots__ = ("__wrapped__", "_jitted", "_range")

    def __init__(self, jitted, name):
        self._jitted = jitted
        self._range = name
        self.__wrapped__ = jitted

    def __call__(self, *args, **kwargs):
        _push(self._range)
        try:
            return self._jitted(*args, **kwargs)
        finally:
            _pop()

    def __getattr__(self, name):
        return getattr(self._jitted, name)

    def __get__(self, obj, objtype=None):  # a jitted method
        return self if obj is None else functools.partial(self, obj)

    def __repr__(self):
        return repr(self._jitted)


def _function_name(fun):
    while isinstance(fun, functools.partial):
        fun = fun.func
    return str(getattr(fun, "__name__", None) or type(fun).__name__)


def _patch_jax(mod):
    orig = mod.jit

    @functools.wraps(orig)
    def jit(*args, **kwargs):
        out = orig(*args, **kwargs)
        fun = args[0] if args else kwargs.get("fun")
        if fun is None or not callable(fun):  # jax.jit(static_argnums=...) as a decorator factory
            return (lambda f: _Jitted(out(f), _function_name(f))) if callable(out) else out
        return _Jitted(out, _function_name(fun))
    jit.__nsysan_wrapped__ = orig
    mod.jit = jit


# module -> what to wrap once it has run; torch's parts are watched one by one, so a part imported
# lazily is wrapped when it comes
PATCHES = {
    "torch": _patch_torch,
    "torch.nn.modules.module": _patch_module,
    "torch._tensor": _patch_tensor,
    "torch.autograd": _patch_autograd,
    "torch.cuda": _patch_cuda,
    "torch.optim.optimizer": _patch_optimizer,
    "torch.utils.data.dataloader": _patch_dataloader,
    "lightning.pytorch.strategies.strategy": _patch_lightning,
    "pytorch_lightning.strategies.strategy": _patch_lightning,
    "transformers.trainer": _patch_trainer,
    "transformers.generation.utils": _patch_generation,
    "jax": _patch_jax,
}
_done = set()


def _apply(name, module):
    if name in _done:
        return
    _done.add(name)
    if not _load_backend():  # no NVTX: nothing is wrapped
        return
    try:
        PATCHES[name](module)
    except Exception as e:  # noqa: BLE001 - a version without that attribute: the rest still works
        _say(f"{name}: not annotated ({type(e).__name__}: {e})"[:300])


class _Loader:
    """The framework module's own loader; runs the wrappers' installation after the module."""

    def __init__(self, loader, name):
        self._loader = loader
        self._name = name

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        try:
            self._loader.exec_module(module)
        finally:  # the module keeps its real loader
            module.__loader__ = self._loader
            if getattr(module, "__spec__", None) is not None:
                module.__spec__.loader = self._loader
        _apply(self._name, module)

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _Finder:
    """On ``sys.meta_path``: finds nothing itself; hands the watched modules' specs, found by the
    finders after it, a loader that installs the wrappers once the module has run."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in PATCHES or fullname in _done:
            return None
        seen = False
        for finder in list(sys.meta_path):
            if finder is self:
                seen = True
                continue
            find = getattr(finder, "find_spec", None)
            if not seen or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is None:
                continue
            if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _Loader(spec.loader, fullname)
            return spec
        return None

    def invalidate_caches(self):
        pass


def install():
    """Put the import hook first on ``sys.meta_path`` (once); modules already imported are wrapped now."""
    global _installed
    if _installed:
        return
    _installed = True
    sys.meta_path.insert(0, _Finder())
    for name in PATCHES:
        if name in sys.modules:
            _apply(name, sys.modules[name])
