"""What the user passed on the command line, made into the path of an SQLite export; and nsys run
as a process group that can be stopped as a whole.

nsysan reads SQLite exports, but users mostly hold ``.nsys-rep`` reports. When nsys can be found
(``--nsys``, then ``NSYSAN_NSYS``, then ``nsys`` on PATH), a report is exported once, with
``nsys export --type sqlite``, into a private cache folder (``$XDG_CACHE_HOME/nsysan/exports``, else
``~/.cache/nsysan/exports``), one folder per report keyed by its real path, size and modification
time, so a second run reuses it. The export is written under a temporary name in the cache and
renamed when complete: nothing is ever written next to, or over, the user's files, and an
interrupted export leaves no half file behind. Each export file keeps the report's own name
(``<key>/x.sqlite``), which is the name reports and summaries show.

Only the standard library is imported here (the ``profile`` command must not wait for pandas), and
nothing is opened before ``os.stat`` says it is a regular file: opening a FIFO blocks until a writer
comes, and reading ``/dev/zero`` never ends.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
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
from nsysan.units import clean_text as _say

REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
# the first bytes of a report written by nsys 2022.4 and 2025.3 (a .nsys-rep under another name)
REPORT_MAGIC = b"NVIDIA Tegra Profiler Report"
SQLITE_MAGIC = b"SQLite format 3\x00"
EXPORT_TIMEOUT_S = 1800.0  # default limit of one `nsys export`; NSYSAN_EXPORT_TIMEOUT changes it (0: none)
# how a process group is stopped: each signal, then how long to wait for the group to be gone
STOP_STEPS: tuple[tuple[signal.Signals, float], ...] = (
    (signal.SIGINT, 5.0), (signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0))




# -- what kind of file ------------------------------------------------------------------------

def file_kind(mode: int) -> str:
    """``st_mode`` in words, for "not a regular file (a FIFO)"."""
    for test, words in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                        (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return words
    return "an unknown kind of file"


def regular_file(path: str | os.PathLike[str], what: str = "") -> os.stat_result:
    """``os.stat`` of an input that must be a regular file; ``TraceNotFoundError`` naming the path
    (and ``what`` it is, e.g. "saved analysis") otherwise. Nothing is opened."""
    shown = (what + " " if what else "") + _say(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise TraceNotFoundError(f"{shown}: no such file") from None
    except (OSError, ValueError) as e:  # a name too long, a loop of links, a parent that is a file, a NUL
        raise TraceNotFoundError(f"{shown}: {getattr(e, 'strerror', None) or e}") from None
    if stat.S_ISDIR(st.st_mode):
        raise TraceNotFoundError(f"{shown}: is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise TraceNotFoundError(f"{shown}: not a regular file ({file_kind(st.st_mode)})")
    return st


def _head(path: str | os.PathLike[str], n: int = 64) -> bytes:
    """The first bytes of a regular file, opened without waiting (O_NONBLOCK): should the path have
    become a FIFO since the stat, the open returns at once and the fstat refuses it."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise TraceUnreadableError(f"{_say(path)}: cannot read: {e.strerror or e}") from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TraceNotFoundError(f"{_say(path)}: not a regular file ({file_kind(st.st_mode)})")
        return os.pread(fd, n, 0)
    except OSError as e:
        raise TraceUnreadableError(f"{_say(path)}: cannot read: {e.strerror or e}") from e
    finally:
        os.close(fd)


def is_report(path: str | os.PathLike[str], head: bytes) -> bool:
    """An Nsight Systems report (not its export): named ``.nsys-rep``/``.qdrep`` or starting with the
    report header. A file so named that is an SQLite file, empty, or a Git LFS pointer is not one
    (the loader explains those better than an export would)."""
    if head.startswith(SQLITE_MAGIC) or not head or head.startswith(b"version https://git-lfs"):
        return False
    return Path(path).suffix.lower() in REPORT_SUFFIXES or head.startswith(REPORT_MAGIC)


# -- nsys ------------------------------------------------------------------------------------

def find_nsys(explicit: str | None = None) -> str | None:
    """The nsys to run: ``explicit`` (``--nsys``), else ``$NSYSAN_NSYS``, else ``nsys`` on PATH."""
    if explicit:
        return explicit
    env = os.environ.get("NSYSAN_NSYS")
    if env:
        return env
    return shutil.which("nsys")


def check_nsys(nsys: str) -> None:
    if not (Path(nsys).is_file() and os.access(nsys, os.X_OK)):
        raise ToolNotFoundError(f"{_say(nsys)}: not an executable nsys",
                                hint="pass --nsys /path/to/nsys or set NSYSAN_NSYS")


def _table() -> dict[int, tuple[bytes, int, int, int]] | None:
    """pid -> (state, parent, process group, session) of every process, from /proc; None without it."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    table = {}
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            table[int(name)] = (fields[0], int(fields[1]), int(fields[2]), int(fields[3]))
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
    return table


def _agents(root: int, table: dict[int, tuple[bytes, int, int, int]]) -> set[int]:
    """nsys' agents for the run whose nsys is ``root``: ``nsys --start-agent --session-name
    profile-<root>`` (2025.3; 2022.4: ``--session-name=profile-<program>-<root>``) daemonizes (its own
    session, its parent gone), so neither the process group nor the parent links reach it."""
    found = set()
    tag = b"-%d" % root
    for pid, (_state, _ppid, _pgrp, sid) in table.items():
        if sid != pid:  # an agent leads its own session
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if b"--start-agent" not in args:
            continue
        names = [a.split(b"=", 1)[1] for a in args if a.startswith(b"--session-name=")]
        names += [args[i + 1] for i, a in enumerate(args[:-1]) if a == b"--session-name"]
        if any(n.endswith(tag) for n in names):
            found.add(pid)
    return found


def _related(root: int, table: dict[int, tuple[bytes, int, int, int]], known: set[int]) -> set[int]:
    """What the process ``root`` started, as far as can be seen: its group and session, every
    descendant of those (nsys 2022.4 starts the profiled program in a session of its own), and its
    nsys agents; plus ``known`` (seen before: a process whose parent died is reparented and can no
    longer be traced to ``root``)."""
    out = {p for p, (_s, _pp, pgrp, sid) in table.items() if pgrp == root or sid == root} | {root}
    children: dict[int, list[int]] = {}
    for p, (_s, ppid, _pg, _sid) in table.items():
        children.setdefault(ppid, []).append(p)
    stack = [*out, *known]
    while stack:
        for c in children.get(stack.pop(), ()):
            if c not in out:
                out.add(c)
                stack.append(c)
    return (out | _agents(root, table) | known) & set(table)


def _live(pids: set[int], table: dict[int, tuple[bytes, int, int, int]] | None) -> set[int]:
    return {p for p in pids if table is not None and p in table and table[p][0] not in (b"Z", b"X")}


def group_alive(proc: subprocess.Popen[Any]) -> bool:
    """Whether any process of the group led by ``proc`` still runs (its leader reaped if done)."""
    proc.poll()
    table = _table()
    if table is not None:
        return any(pgrp == proc.pid and st not in (b"Z", b"X") for st, _pp, pgrp, _sid in table.values())
    try:
        os.killpg(proc.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal(pid: int, sig: signal.Signals, group: bool) -> None:
    try:
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):  # gone, or changed its user (setuid)
        pass


def stop_group(proc: subprocess.Popen[Any], steps: Sequence[tuple[signal.Signals, float]] = STOP_STEPS,
               say: Callable[[str], None] | None = None) -> list[str]:
    """Stop every process ``proc`` started: SIGINT to its process group (nsys then stops the program,
    its agent and itself, and writes what it has), then SIGTERM, then SIGKILL to the group and to
    each process that left it (``_related``: the program nsys 2022.4 starts in a session of its own,
    nsys' agent), each signal after a short wait for all of them to be gone. A Ctrl-C while waiting
    moves on to the next signal at once. Returns the signals sent."""
    sent: list[str] = []
    known: set[int] = set()
    for i, (sig, wait) in enumerate(steps):
        proc.poll()
        table = _table()
        if table is None:  # no /proc: the process group alone
            if not group_alive(proc):
                break
            _signal(proc.pid, sig, group=True)
        else:
            known = _related(proc.pid, table, known)
            live = _live(known, table)
            if not live:
                break
            in_group = {p for p in live if table[p][2] == proc.pid}
            if in_group:
                _signal(proc.pid, sig, group=True)
            if sig != signal.SIGINT or not in_group:  # SIGINT: nsys, when still there, stops the rest
                for p in sorted(live - in_group):
                    _signal(p, sig, group=table[p][2] == p)
        sent.append(sig.name)
        if say:
            more = f"; Ctrl-C: {steps[i + 1][0].name} at once" if i + 1 < len(steps) else ""
            say(f"nsysan: sent {sig.name} to nsys (process group {proc.pid}) and what it started; "
                f"waiting up to {wait:g} s{more}")
        deadline = time.monotonic() + wait
        try:
            while time.monotonic() < deadline:
                proc.poll()
                t = _table()
                if t is None:
                    if not group_alive(proc):
                        break
                else:
                    known = _related(proc.pid, t, known) if sig == signal.SIGINT else known
                    if not _live(known, t) and not any(pg == proc.pid and st not in (b"Z", b"X")
                                                       for st, _pp, pg, _sid in t.values()):
                        break
                time.sleep(0.1)
        except KeyboardInterrupt:
            continue
    try:
        proc.wait(timeout=1)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL was sent; only a D-state process stays
        pass
    return sent


def run_group(cmd: Sequence[str], *, timeout: float | None = None, say: Callable[[str], None] | None = None,
              **popen: Any) -> int:
    """Run ``cmd`` in its own session and process group and return its exit status. On a timeout
    (``subprocess.TimeoutExpired``) or Ctrl-C (``KeyboardInterrupt``) the whole group is stopped
    (``stop_group``) before the exception goes on: nothing it started is left running (a process
    that moved itself to another session with setsid is out of reach). Ctrl-C in a terminal reaches
    nsysan alone (the group is not the terminal's foreground), and nsysan passes it on as SIGINT."""
    proc = subprocess.Popen(list(cmd), start_new_session=True, **popen)
    try:
        return proc.wait(timeout=timeout)
    except BaseException:  # TimeoutExpired, KeyboardInterrupt, anything: never leave the group behind
        stop_group(proc, say=say)
        raise


# -- the export cache -------------------------------------------------------------------------

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
        raise UsageError(f"NSYSAN_EXPORT_TIMEOUT={_say(raw)!r}: expected seconds >= 0 (0: no limit)")
    return v or None


def _usable(cached: Path) -> bool:
    try:
        st = os.lstat(cached)
        return stat.S_ISREG(st.st_mode) and st.st_size >= 100 and _head(cached, 16) == SQLITE_MAGIC
    except (OSError, TraceNotFoundError, TraceUnreadableError):
        return False


def _export_flags(nsys: str) -> list[str]:
    """``--include-blobs=true`` where this nsys has it (2023 and later; not 2022.4): the Python
    samples' call stacks are stored as blobs, which an export leaves out by default."""
    try:
        r = subprocess.run([nsys, "export", "--help"], capture_output=True, timeout=60,
                           stdin=subprocess.DEVNULL, start_new_session=True)
        helptext = r.stdout + r.stderr
    except (OSError, subprocess.TimeoutExpired):
        helptext = b""
    return ["--include-blobs=true"] if b"--include-blobs" in helptext else []


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
    shown = _say(report)
    final = export_path(report, st)
    if _usable(final):
        say(f"nsysan: {shown}: using its SQLite export cached at {_say(final)}")
        return final
    if not nsys:
        raise NotSQLiteError(
            f"{shown}: an Nsight Systems report, not its SQLite export, and nsys is not on PATH to export it",
            hint=f"export it first: nsys export --type sqlite {shown} (then analyse the .sqlite), or put nsys "
                 "on PATH (or set NSYSAN_NSYS=/path/to/nsys) and nsysan exports it into its cache")
    check_nsys(nsys)
    if os.sep in nsys:  # nsys runs in a temporary folder: a relative path to it must not break
        nsys = os.path.abspath(nsys)
    try:
        final.parent.mkdir(parents=True, exist_ok=True, mode=0o700)  # reports hold command lines, env
        work = Path(tempfile.mkdtemp(prefix=".export-", dir=final.parent.parent))
    except OSError as e:
        raise OutputError(f"cannot create the export cache {_say(final.parent)}: {e.strerror or e}",
                          hint=f"set XDG_CACHE_HOME to a writable folder, or export it by hand: "
                               f"nsys export --type sqlite {shown}") from e
    try:
        out = work / final.name
        log = work / "nsys-export.log"
        cmd = [nsys, "export", "--type", "sqlite", *_export_flags(nsys), "--output", str(out),
               os.path.abspath(report)]
        say(f"nsysan: exporting {shown} with nsys ... (cached at {_say(final)})")
        t0 = time.monotonic()
        try:
            with open(log, "wb") as f:
                rc = run_group(cmd, timeout=timeout, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                               cwd=work)
        except subprocess.TimeoutExpired:
            raise ResourceLimitError(
                f"{shown}: nsys export did not finish within {timeout:g} s; stopped it",
                hint="raise the limit with NSYSAN_EXPORT_TIMEOUT=SECONDS (0: none), or export it by hand: "
                     f"nsys export --type sqlite {shown}") from None
        except OSError as e:
            raise ToolNotFoundError(f"{_say(nsys)}: cannot run it ({e.strerror or e})",
                                    hint="pass --nsys /path/to/nsys or set NSYSAN_NSYS") from e
        if rc != 0 or not _usable(out):
            why = _tail(log)
            raise NotSQLiteError(
                f"{shown}: nsys export failed (exit {rc}){': ' + _say(why) if why else ''}",
                hint=f"is it an Nsight Systems report? Try by hand: nsys export --type sqlite {shown}")
        os.replace(out, final)
        say(f"nsysan: exported {shown} in {time.monotonic() - t0:.1f} s")
        return final
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


DEFAULT = object()


def resolve(path: str | os.PathLike[str], *, nsys: str | None = None, timeout: Any = DEFAULT,
            say: Callable[[str], None] | None = _stderr) -> str:
    """The SQLite file to read for input ``path``: ``path`` itself, or for an Nsight Systems report
    its export (made or reused, see the module's doc). A path that is not a regular file is refused
    here, before anything opens it. ``timeout``: seconds for the export (default:
    ``NSYSAN_EXPORT_TIMEOUT``, else 30 minutes; None: no limit). ``say``: progress lines (None: quiet)."""
    st = regular_file(path)
    if not is_report(path, _head(path)):
        return os.fspath(path)
    limit = export_timeout() if timeout is DEFAULT else timeout
    return str(export(path, st, find_nsys(nsys), timeout=limit, say=say or (lambda _line: None)))
