"""An Nsight Systems report made into the path of an SQLite export.

nsysan reads SQLite exports, but users mostly hold ``.nsys-rep`` reports. When nsys can be found
(``--nsys``, then ``NSYSAN_NSYS``, then ``nsys`` on PATH), a report is exported once, with
``nsys export --type sqlite``, into a private cache folder (``$XDG_CACHE_HOME/nsysan/exports``, else
``~/.cache/nsysan/exports``), one folder per report keyed by its real path, size and modification
time, so a second run reuses it. The export is written under a temporary name in the cache and
renamed when complete: nothing is ever written next to, or over, the user's files, and an
interrupted export leaves no half file behind. Each export file keeps the report's own name
(``<key>/x.sqlite``), which is the name reports and summaries show.

Only the standard library is imported here, and nothing is opened before ``os.stat`` says it is a
regular file (``nsysan.inputs``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nsysan.errors import (
    NotSQLiteError,
    OutputError,
    ResourceLimitError,
    ToolNotFoundError,
    TraceNotFoundError,
    TraceUnreadableError,
    UsageError,
)
from nsysan.inputs import REPORT_SUFFIXES, SQLITE_MAGIC, is_report, read_head, regular_file
from nsysan.record.nsys import check_nsys, export_flags, find_nsys
from nsysan.record.process import run_group
from nsysan.units import clean_text

EXPORT_TIMEOUT_S = 1800.0  # default limit of one `nsys export`; NSYSAN_EXPORT_TIMEOUT changes it (0: none)


def cache_root() -> Path:
    from nsysan._cache import user_cache

    return user_cache("exports")


def cache_key(path: str | os.PathLike[str], st: os.stat_result) -> str:
    """The report's real path, size and modification time (ns): a report written again (or another
    report at that path) gets a new export."""
    real = os.fsencode(os.path.realpath(path))
    return hashlib.sha256(real + b"\0%d\0%d" % (st.st_size, st.st_mtime_ns)).hexdigest()[:24]


def export_path(path: str | os.PathLike[str], st: os.stat_result) -> Path:
    """Where the export of report ``path`` is cached: ``<cache>/<key>/<name>.sqlite``."""
    name = Path(path).name
    for suffix in REPORT_SUFFIXES:
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
            break
    raw = os.fsencode(name or "report")[:255 - len(".sqlite")]  # one path component (NAME_MAX); the folder is unique
    return cache_root() / cache_key(path, st) / (os.fsdecode(raw) + ".sqlite")


def export_timeout() -> float | None:
    raw = os.environ.get("NSYSAN_EXPORT_TIMEOUT")
    if raw is None or raw.strip() == "":
        return EXPORT_TIMEOUT_S
    try:
        v = float(raw)
    except ValueError:
        v = -1.0
    if not (v >= 0 and v != float("inf")):
        raise UsageError(f"NSYSAN_EXPORT_TIMEOUT={clean_text(raw)!r}: expected seconds >= 0 (0: no limit)")
    return v or None


def _usable(cached: Path) -> bool:
    try:
        st = os.lstat(cached)
        return stat.S_ISREG(st.st_mode) and st.st_size >= 100 and read_head(cached, 16) == SQLITE_MAGIC
    except (OSError, TraceNotFoundError, TraceUnreadableError):
        return False


def _tail(path: Path) -> str:
    try:
        text = path.read_bytes()[-4000:].decode("utf-8", "replace")
    except OSError:
        return ""
    # progress bars redraw with \r: keep what a terminal would show last
    shown = [ln.rsplit("\r", 1)[-1].strip() for ln in text.splitlines()]
    return " | ".join(ln for ln in shown if ln)[-600:] if any(shown) else ""


def export(report: str | os.PathLike[str], st: os.stat_result, nsys: str | None, *, timeout: float | None,
           say: Callable[[str], None]) -> Path:
    """Export ``report`` with ``nsys export --type sqlite`` into the cache (see the module's doc) and
    return the export's path; a cached export of the same report (path, size, time) is reused, also
    when no nsys is at hand."""
    shown = clean_text(report)
    final = export_path(report, st)
    if _usable(final):
        say(f"nsysan: {shown}: using its SQLite export cached at {clean_text(final)}")
        return final
    if not nsys:
        raise NotSQLiteError(
            f"{shown}: an Nsight Systems report, not its SQLite export, and nsys is not on PATH to export it",
            hint=f"export it first: nsys export --type sqlite {shown} (then analyse the .sqlite), or put nsys "
                 "on PATH (or set NSYSAN_NSYS=/path/to/nsys) and nsysan exports it into its cache")
    check_nsys(nsys)
    deadline = None if timeout is None else time.monotonic() + timeout  # the whole export, checks included

    def left() -> float | None:
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    if os.sep in nsys:  # nsys runs in a temporary folder: a relative path to it must not break
        nsys = os.path.abspath(nsys)
    try:
        final.parent.mkdir(parents=True, exist_ok=True, mode=0o700)  # reports hold command lines, env
        work = Path(tempfile.mkdtemp(prefix=".export-", dir=final.parent.parent))
    except OSError as e:
        raise OutputError(f"cannot create the export cache {clean_text(final.parent)}: {e.strerror or e}",
                          hint=f"set XDG_CACHE_HOME to a writable folder, or export it by hand: "
                               f"nsys export --type sqlite {shown}") from e
    try:
        out = work / final.name
        log = work / "nsys-export.log"
        say(f"nsysan: exporting {shown} with nsys ... (cached at {clean_text(final)})")
        t0 = time.monotonic()
        try:
            flags = export_flags(nsys, left(), deadline_error=True)
            cmd = [nsys, "export", "--type", "sqlite", *flags, "--output", str(out), os.path.abspath(report)]
            with open(log, "wb") as f:
                rc = run_group(cmd, timeout=left(), stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                               cwd=work, stop_rest=True)
        except subprocess.TimeoutExpired:
            raise ResourceLimitError(
                f"{shown}: nsys export did not finish within {timeout:g} s; stopped it",
                hint="raise the limit with NSYSAN_EXPORT_TIMEOUT=SECONDS (0: none), or export it by hand: "
                     f"nsys export --type sqlite {shown}") from None
        except OSError as e:
            raise ToolNotFoundError(f"{clean_text(nsys)}: cannot run it ({e.strerror or e})",
                                    hint="pass --nsys /path/to/nsys or set NSYSAN_NSYS") from e
        if rc != 0 or not _usable(out):
            why = _tail(log)
            raise NotSQLiteError(
                f"{shown}: nsys export failed (exit {rc}){': ' + clean_text(why) if why else ''}",
                hint=f"is it an Nsight Systems report? Try by hand: nsys export --type sqlite {shown}")
        os.replace(out, final)
        say(f"nsysan: exported {shown} in {time.monotonic() - t0:.1f} s")
        return final
    finally:
        shutil.rmtree(work, ignore_errors=True)


def stderr_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


DEFAULT = object()


def resolve(path: str | os.PathLike[str], *, nsys: str | None = None, timeout: Any = DEFAULT,
            say: Callable[[str], None] | None = stderr_line) -> str:
    """The SQLite file to read for input ``path``: ``path`` itself, or for an Nsight Systems report
    its export (made or reused, see the module's doc). A path that is not a regular file is refused
    here, before anything opens it. ``timeout``: seconds for the export (default:
    ``NSYSAN_EXPORT_TIMEOUT``, else 30 minutes; None: no limit). ``say``: progress lines (None: quiet)."""
    st = regular_file(path)
    if not is_report(path, read_head(path)):
        return os.fspath(path)
    limit = export_timeout() if timeout is DEFAULT else timeout
    return str(export(path, st, find_nsys(nsys), timeout=limit, say=say or (lambda _line: None)))
