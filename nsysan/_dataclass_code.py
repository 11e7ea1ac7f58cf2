"""The methods ``dataclasses`` generates, compiled once and kept in the user's cache, for the
command line's own process. Standard library only.

``@dataclass`` writes the source of each class's ``__init__``, ``__repr__``, ``__eq__``,
``__setattr__``... and compiles it with ``exec`` every time the class is created, that is on every
start: nsysan's 58 dataclasses took 75-100 ms of its ~190 ms of own imports on the 2-core machine
(a 5 MB trace's whole run is ~1.1 s). ``install`` gives the ``dataclasses`` module an ``exec`` of
its own that looks each source text up in a table of code objects read from one file, compiling
only what is not there, with the flags ``exec`` would have used (``dataclasses``' own); ``save``
writes the table back when something was compiled. The same text compiled with the same flags is
the same code, so every class is what it would have been; only the compiling is skipped.

The table is one file in the user's cache, ``$XDG_CACHE_HOME/nsysan/code/dataclasses.<tag>.marshal``
(else ``~/.cache/...``, beside the compiled report templates; ``<tag>`` is the interpreter's, as
in ``cpython-311``), and carries the interpreter's bytecode magic number (another Python reads it as
empty). It is written atomically, at the command's exit, when something was compiled, never above
``MAX_ENTRIES`` (then only what this run used); only entries of a source text and a code object
are read from it. A file that cannot be read is ignored; one that cannot
be written is not written. Installations and versions of nsysan share it safely: an entry is the
source text itself.

Only ``nsysan.cli.run`` installs it (``_startup.own_process``): a program that imports nsysan as a
library keeps ``dataclasses`` exactly as it is.
"""

from __future__ import annotations
import __future__

import builtins
import importlib.util
import marshal
import os
import sys
import types
from typing import Any

FORMAT = "nsysan-dataclass-code/1"
MAX_ENTRIES = 1000  # (a run of ``analyze`` uses ~370; reading 5,000 would cost more than compiling)
_table: dict[str, Any] = {}
_used: set[str] = set()
_compiled = 0
_path: str | None = None
_flags = 0


def _file() -> str | None:
    """The table's path in the user's cache (None where Python has no cache tag or there is no home)."""
    from nsysan._cache import user_cache

    if sys.implementation.cache_tag is None:
        return None
    try:
        return str(user_cache("code") / f"dataclasses.{sys.implementation.cache_tag}.marshal")
    except (OSError, RuntimeError, KeyError):  # no home directory to find
        return None


def _read(path: str) -> dict[str, Any]:
    """The table in ``path``: only str -> code entries of this format and interpreter; else empty."""
    try:
        with open(path, "rb") as f:
            data = f.read()  # then ``loads``: ``marshal.load`` on the file took 20 ms for 0.5 MB
        form, magic, table = marshal.loads(data)
    except (OSError, EOFError, ValueError, TypeError):
        return {}
    if form != FORMAT or magic != importlib.util.MAGIC_NUMBER or not isinstance(table, dict):
        return {}
    return {k: v for k, v in table.items() if type(k) is str and type(v) is types.CodeType}


def _exec(source: Any, globals: Any = None, locals: Any = None, /, **kw: Any) -> Any:
    """``exec`` for ``dataclasses``: a source text it generated, compiled once across runs."""
    global _compiled
    if not isinstance(source, str) or kw:
        return builtins.exec(source, globals, locals, **kw)
    code = _table.get(source)
    if code is None:
        code = compile(source, "<string>", "exec", flags=_flags, dont_inherit=True)
        _table[source] = code
        _compiled += 1
    _used.add(source)
    return builtins.exec(code, globals, locals)


def install() -> None:
    """Read the table and give ``dataclasses`` the caching ``exec`` (once; nothing where there is
    no cache tag)."""
    import dataclasses

    global _path, _flags
    if getattr(dataclasses, "exec", None) is _exec:
        return
    path = _file()
    if path is None:
        return
    # the future features of dataclasses' own code, which its ``exec`` of a string compiles with
    # (the features' flags above 0xFFFF: nested_scopes' is an ordinary code flag, generators' is 0)
    own = dataclasses.dataclass.__code__.co_flags
    features = (getattr(__future__, n) for n in __future__.all_feature_names)
    _flags = sum(f.compiler_flag for f in features if f.compiler_flag > 0xFFFF and own & f.compiler_flag)
    _path = path
    _table.update(_read(path))
    dataclasses.exec = _exec  # type: ignore[attr-defined]


def save() -> None:
    """Write the table back if anything was compiled since it was read (atomically, through
    ``_atomic.replacing``: no temp file is left, even by a signal; never raises an ``OSError``)."""
    global _compiled
    if not _compiled or _path is None:
        return
    from nsysan import _atomic

    table = _table if len(_table) <= MAX_ENTRIES else {s: _table[s] for s in list(_used)}
    try:
        os.makedirs(os.path.dirname(_path), exist_ok=True)
        with _atomic.replacing(_path, shared=False) as f:
            f.write(marshal.dumps((FORMAT, importlib.util.MAGIC_NUMBER, table)))
        _compiled = 0
    except (OSError, ValueError):
        pass
