"""A cache of analyses, so ``compare`` and ``diff`` over traces analysed before do not analyse them again.

Where: ``$NSYSAN_CACHE_DIR``, else ``$XDG_CACHE_HOME/nsysan/results``, else ``~/.cache/nsysan/results``;
never beside the trace. ``NSYSAN_NO_CACHE=1`` turns it off.

What: the analysis as its JSON text (schema ``nsysan.analysis/2``, without the captured environment),
one file per key. The key is a hash of

- the trace's identity: its real path, device, inode, size and modification time (ns);
- its content stamp: a hash of its first and last 64 KiB (a file rewritten in place within the same
  clock tick, or copied over with its time kept, still differs in its header or its last pages);
- nsysan's code: the version and the size and modification time of every module of the package, so
  an edited or upgraded nsysan never reads an older one's results;
- the options that change the analysis (iteration range, gap threshold, warm-up factor, rule
  settings).

Safe when several processes share it: an entry is written under a unique temporary name and renamed
into place (readers see a whole file or none), and a damaged or foreign entry is ignored and
rewritten. Bounded: after a write, the oldest entries go until the folder is under
``$NSYSAN_CACHE_MAX_MB`` (default 512 MB).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from nsysan._atomic import replacing

STAMP_BYTES = 64 << 10
DEFAULT_MAX_MB = 512
_CODE_STAMP: str | None = None


def enabled() -> bool:
    return os.environ.get("NSYSAN_NO_CACHE", "") in ("", "0")


def root() -> Path:
    if os.environ.get("NSYSAN_CACHE_DIR"):
        return Path(os.environ["NSYSAN_CACHE_DIR"])
    from nsysan._cache import user_cache

    return user_cache("results")


def code_stamp() -> str:
    """nsysan's version and the size and time of each of its modules (computed once a process)."""
    global _CODE_STAMP
    if _CODE_STAMP is None:
        from nsysan._version import __version__

        h = hashlib.sha256(__version__.encode())
        pkg = Path(__file__).resolve().parent
        found: list[tuple[str, int, int]] = []
        for folder, _dirs, files in os.walk(pkg):  # os.walk + os.stat: a third of rglob's time
            rel = os.path.relpath(folder, pkg)
            for name in files:
                if name.endswith(".py"):
                    try:
                        st = os.stat(os.path.join(folder, name))
                    except OSError:
                        continue
                    found.append((name if rel == "." else f"{rel}/{name}", st.st_size, st.st_mtime_ns))
        for rel_name, size, mtime in sorted(found):
            h.update(f"{rel_name}:{size}:{mtime}\n".encode())
        _CODE_STAMP = h.hexdigest()
    return _CODE_STAMP


def key(trace: str | os.PathLike[str], options: dict[str, Any]) -> str | None:
    """The cache key of analysing ``trace`` with ``options``; None when the file cannot be read."""
    try:
        real = os.path.realpath(trace)
        st = os.stat(real)
        h = hashlib.sha256()
        h.update(f"{real}\0{st.st_dev}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\0".encode("utf-8", "replace"))
        for side in ("-wal", "-journal"):  # what SQLite reads (and nsysan with it) depends on them too
            try:
                s2 = os.stat(real + side)
            except OSError:
                continue
            h.update(f"{side}\0{s2.st_size}\0{s2.st_mtime_ns}\0".encode())
        with open(real, "rb") as f:
            h.update(f.read(STAMP_BYTES))
            if st.st_size > STAMP_BYTES:
                f.seek(max(STAMP_BYTES, st.st_size - STAMP_BYTES))
                h.update(f.read(STAMP_BYTES))
    except OSError:
        return None
    h.update(code_stamp().encode())
    h.update(json.dumps(options, sort_keys=True, default=str).encode())
    return h.hexdigest()[:40]


def get(k: str | None) -> dict[str, Any] | None:
    """The cached analysis of key ``k`` as a dict, or None (absent, damaged or not an analysis)."""
    if k is None or not enabled():
        return None
    p = root() / f"{k}.json"
    try:
        text = p.read_text(encoding="utf-8")
        from nsysan.saved import loads_saved

        d, bad = loads_saved(text)  # a number no float holds, NaN or Infinity: a tampered file
    except (OSError, ValueError, RecursionError):
        return None
    if bad:
        return None
    if not isinstance(d, dict) or d.get("schema") != "nsysan.analysis/2":
        return None
    from nsysan.saved import validate_saved

    if validate_saved(d):
        return None
    try:
        os.utime(p)  # recently used: the last to go when the cache is trimmed
    except OSError:
        pass
    return d


def put(k: str | None, text: str) -> None:
    """Store an analysis's JSON text under key ``k`` (silently nothing when the cache is off or
    cannot be written: the cache only ever saves time)."""
    if k is None or not enabled():
        return
    d = root()
    try:
        d.mkdir(parents=True, exist_ok=True)
        with replacing(d / f"{k}.json", prefix=".tmp-", suffix=".json", shared=False) as f:
            f.write(text.encode("utf-8"))
    except (OSError, UnicodeError):  # a file name that is not UTF-8 in the text: not cached
        return
    trim(d)


def trim(d: Path | None = None) -> None:
    """Remove the least recently used entries until the folder is under the size limit."""
    d = d or root()
    try:
        limit = float(os.environ.get("NSYSAN_CACHE_MAX_MB", DEFAULT_MAX_MB)) * (1 << 20)
    except ValueError:
        limit = DEFAULT_MAX_MB * (1 << 20)
    try:
        entries = []
        for e in os.scandir(d):
            if e.name.endswith(".json") and not e.name.startswith(".tmp-"):
                st = e.stat(follow_symlinks=False)
                entries.append((st.st_mtime_ns, st.st_size, e.path))
    except OSError:
        return
    total = sum(s for _, s, _ in entries)
    for _, size, path in sorted(entries):
        if total <= limit:
            break
        try:
            os.unlink(path)
            total -= size
        except OSError:
            pass


def options_of(iteration_range: str | None = None, min_gap_ns: int | None = None,
               warmup_factor: float | None = None, rule_config: dict[str, Any] | None = None) -> dict[str, Any]:
    """The options that change an analysis, with the defaults filled in (so ``analyze`` with no
    options and ``compare`` share entries)."""
    return {"iteration_range": iteration_range,
            "min_gap_ns": DEFAULT_MIN_GAP_NS if min_gap_ns is None else int(min_gap_ns),
            "warmup_factor": DEFAULT_WARMUP_FACTOR if warmup_factor is None else float(warmup_factor),
            "rule_config": rule_config or {}}


# analysis.Params' defaults (a test checks they agree), here so a cache hit does not import pandas
DEFAULT_MIN_GAP_NS = 10_000
DEFAULT_WARMUP_FACTOR = 1.5
