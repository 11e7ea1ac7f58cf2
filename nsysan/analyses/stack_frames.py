"""The frames of a sampled stack: which one is the user's own code (Python and native), and how a
frame, a symbol and a stack are written for the reader.

Own-code frame, Python: the innermost frame outside the interpreter's and site-packages' files
(``/lib/python3.X/``, ``site-packages``, ``dist-packages``, ``<frozen ...>``), else the innermost frame;
a comprehension or lambda counts for the function around it. Own-code frame, native: the innermost
frame of the best tier, tiers in this order: (0) a resolved symbol of the program's own modules;
(1) a resolved symbol of an installed library (``site-packages``, ``dist-packages``, conda, ``/usr/lib``,
``/lib``, ``/opt/nvidia``, ``/nix/store``, and Python extension modules ``*.cpython-*.so``: e.g. libtorch,
cuBLAS, OpenBLAS, numpy); (2) an unresolved address in own code, (3) in a library; (4) the runtime
below every program, never "self" unless nothing else is on the stack: libc, libpthread, libm, libdl,
librt, libstdc++, libgcc_s, the dynamic loader, the kernel (``[kernel.kallsyms]``, ``[vdso]``,
kernel-mode frames), the Python and Julia interpreters (``python3.X``, ``libpython``, its
``lib-dynload`` modules, ``libjulia``), the CUDA driver and runtime stack (``libcuda``, ``libcudart``,
``libcupti``, ``libnvidia-*``, ``libnvrtc``; and the statically linked runtime by its symbols:
``cuda*`` API names and templates, ``__cudart*``, ``libcudart_static_*``), nsys' own injection
libraries, and nsys' markers (``[Unknown]``, ``[Broken backtraces]``, ``[Max depth]``). An unresolved
address is counted as ``[unresolved]`` in its module. A stack whose own frame is the interpreter says
so: only Python sampling can tell which Python function ran.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

LIBRARY_FILE = re.compile(r"/lib/python3\.\d+/|site-packages|dist-packages|^<frozen |^<string>")
STACK_FRAMES = 14  # frames shown per stack (innermost kept)
INNER = ("<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>", "<lambda>")


def own_frame(stack: tuple[tuple[str, str, int], ...]) -> tuple[str, str, int] | None:
    """The innermost frame of the user's own code (not the interpreter's or an installed package's);
    a comprehension or lambda counts for the function around it (same file), at its own line."""
    for i, f in enumerate(stack):
        if not LIBRARY_FILE.search(f[1] or ""):
            j = i
            while stack[j][0] in INNER and j + 1 < len(stack) and stack[j + 1][1] == f[1]:
                j += 1
            return (stack[j][0], f[1], f[2])
    return stack[0] if stack else None


RUNTIME_MODULE = re.compile(
    r"(^|/)(libc|libpthread|libm|libdl|librt|libutil|libresolv|libgcc_s|libstdc\+\+|libc\+\+(abi)?|ld|ld-linux[^/]*|"
    r"libcuda|libcudart|libcupti|libnvidia-[^/]*|libnvrtc[^/]*|libnvrtc-builtins[^/]*|libToolsInjection[^/]*|"
    r"libpython[^/]*|libjulia[^/]*)([.-][^/]*)?$"
    r"|(^|/)python(\d(\.\d+)?)?[dmu]?$|(^|/)julia$|/lib/python\d\.\d+/lib-dynload/|^\[|kallsyms|^//anon|\.ko$|^$")
INTERPRETER_MODULE = re.compile(r"(^|/)(libpython[^/]*|python(\d(\.\d+)?)?[dmu]?|libjulia[^/]*|julia)$")
LIBRARY_MODULE = re.compile(r"site-packages|dist-packages|conda|/envs/|^/(usr/)?(local/)?lib(32|64|x32|exec)?/|"
                            r"^/opt/nvidia/|^/nix/store/|/nsight-systems|/cuda[-\d.]*/|\.cpython-\d+[^/]*\.so$|\.abi3\.so$")
_HEX = re.compile(r"^0x[0-9a-fA-F]+$")
# the CUDA runtime linked statically into a program (its API, its templates in cuda_runtime.h and its
# internals) is the runtime too, whatever module holds it
RUNTIME_SYMBOL = re.compile(r"^(cuda[A-Z]\w*(<.*>)?|__cudart\w*|libcudart_static_\w*|cudart::.*|"
                            r"cu(Launch|Mem|Ctx|Stream|Event|Module|Graph|Init|Device|Func|Library|Kernel)\w*)$")


def native_tier(symbol: str, module: str, unresolved: int) -> int:
    """0 own code, 1 an installed library, 2 unresolved own code, 3 unresolved library, 4 runtime.
    Remembered per frame (a capture's stacks repeat the same few thousand frames: waits_native's
    stacks asked 26,000 times for 346 frames), up to ``TIER_MEMO`` frames of short names."""
    key = (symbol, module, unresolved)
    t = _tiers.get(key)
    if t is None:
        t = _native_tier(symbol, module, unresolved)
        if len(_tiers) < TIER_MEMO and len(str(symbol)) + len(str(module)) < 1024:
            _tiers[key] = t
    return t


TIER_MEMO = 65_536
_tiers: dict[tuple[Any, Any, Any], int] = {}


def _native_tier(symbol: str, module: str, unresolved: int) -> int:
    if RUNTIME_MODULE.search(module or "") or RUNTIME_SYMBOL.match(symbol or ""):
        return 4
    lib = bool(LIBRARY_MODULE.search(module))
    if unresolved or _HEX.match(symbol or "") or not symbol or symbol.startswith("["):
        return 3 if lib else 2
    return 1 if lib else 0


UNRESOLVED = "[unresolved]"


def native_own_frame(stack: tuple[tuple[str, str, int], ...]) -> tuple[str, str, int] | None:
    """The innermost frame of the best tier (``native_tier``). An unresolved address counts as
    ``[unresolved]`` in its module (addresses alone would split one module's time into many rows)."""
    best, best_tier = None, 99
    for f in stack:
        t = native_tier(f[0], f[1], f[2])
        if t < best_tier:
            best, best_tier = f, t
            if t == 0:
                break
    if best is not None and (best[2] or _HEX.match(best[0] or "")):
        return (UNRESOLVED, best[1], best[2])
    return best


def short_symbol(symbol: str, limit: int = 100) -> str:
    """A C++ symbol without its parameter list (and return type): ``ns::Class::method``."""
    s = str(symbol).strip()
    s = s.removesuffix(" const")
    if s.endswith(")"):
        depth = 0
        for i in range(len(s) - 1, -1, -1):
            if s[i] == ")":
                depth += 1
            elif s[i] == "(":
                depth -= 1
                if depth == 0:
                    if i > 0 and not s[:i].endswith("operator"):
                        s = s[:i]
                    break
    # a return type before the name ("float ns::f<...>"): the last space outside template brackets
    depth, cut = 0, -1
    for i, ch in enumerate(s):
        if ch in "<({":
            depth += 1
        elif ch in ">)}" and not s[:i].endswith("operator-"):
            depth -= 1
        elif ch == " " and depth == 0 and not s[:i].endswith("operator"):
            cut = i
    if cut > 0:
        s = s[cut + 1:]
    if len(s) > 60:  # long template arguments: shown as <…>
        out: list[str] = []
        depth = 0
        for ch in s:
            if ch == "<" and not "".join(out).endswith("operator"):
                if depth == 0:
                    out.append("<…>")
                depth += 1
            elif ch == ">" and depth > 0:
                depth -= 1
            elif depth == 0:
                out.append(ch)
        s = "".join(out)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def module_name(module: str) -> str:
    return str(module).rsplit("/", 1)[-1]


def where(r: Mapping[str, Any]) -> str:
    """'tokenize() waits.py:37' (Python) or 'generate_tensor_2D in a.out' (native) for a table row."""
    if r.get("module"):
        return f"{short_symbol(r['function'])} in {module_name(r['module'])}"
    loc = f" {str(r['file']).rsplit('/', 1)[-1]}:{int(r['line'])}" if r.get("file") else ""
    return f"{r['function']}(){loc}"


def display_stack(stack: tuple[tuple[str, str, int], ...], source: str) -> tuple[tuple[str, bool], ...]:
    """A stack for display, outermost first: (text, own code?) per frame; runs of library/runtime
    frames are folded into one '[N frames: module, ...]'."""
    own = own_frame(stack) if source == "python" else native_own_frame(stack)
    items: list[tuple[str, bool]] = []
    run: list[str] = []

    def flush() -> None:
        if run:
            mods = list(dict.fromkeys(run))
            more = ", ..." if len(mods) > 3 else ""
            items.append((f"[{len(run)} frame{'s' if len(run) > 1 else ''}: {', '.join(mods[:3])}{more}]", False))
            run.clear()

    for f in reversed(stack):
        if source == "python":
            lib = bool(LIBRARY_FILE.search(f[1] or ""))
            text = f"{f[0]} ({str(f[1]).rsplit('/', 1)[-1]})"
            mod = "python" if f[1].startswith("<") or "/lib/python3" in f[1] else (
                str(f[1]).split("site-packages/")[-1].split("/", 1)[0] if "-packages/" in f[1] else "library")
        else:
            lib = native_tier(f[0], f[1], f[2]) >= 3
            text = f"{short_symbol(f[0], 80)} ({module_name(f[1])})"
            mod = module_name(f[1]) or "?"
        is_own = own is not None and (f[0], f[1]) == (own[0], own[1])
        if lib and not is_own:
            run.append(mod)
            continue
        flush()
        items.append((text, is_own))
    flush()
    return tuple(items[-STACK_FRAMES:])


def frame_key(f: tuple[str, str, int], source: str) -> tuple[str, str]:
    """(function, file or module) of a frame, an unresolved native address as ``[unresolved]``."""
    if source != "python" and (f[2] or _HEX.match(f[0] or "")):
        return (UNRESOLVED, f[1])
    return (f[0], f[1])
