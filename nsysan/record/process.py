"""A program run as a process group that can be stopped as a whole: nsys (``nsysan profile``, the
``.nsys-rep`` export) and everything it starts, on a timeout or Ctrl-C. Standard library only."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import Any

# how a process group is stopped: each signal, then how long to wait for the group to be gone
STOP_STEPS: tuple[tuple[signal.Signals, float], ...] = (
    (signal.SIGINT, 5.0), (signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0))


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
              stop_rest: bool = False, **popen: Any) -> int:
    """Run ``cmd`` in its own session and process group and return its exit status. On a timeout
    (``subprocess.TimeoutExpired``) or Ctrl-C (``KeyboardInterrupt``) the whole group is stopped
    (``stop_group``) before the exception goes on: nothing it started is left running (a process
    that moved itself to another session with setsid is out of reach). Ctrl-C in a terminal reaches
    nsysan alone (the group is not the terminal's foreground), and nsysan passes it on as SIGINT.
    ``stop_rest``: also stop what is left of the group when ``cmd`` itself has ended (a tool whose
    work is done: ``nsys export``, ``nsys --version``; not a recording, whose program may start
    lasting processes on purpose)."""
    proc = subprocess.Popen(list(cmd), start_new_session=True, **popen)
    try:
        rc = proc.wait(timeout=timeout)
    except BaseException:  # TimeoutExpired, KeyboardInterrupt, anything: never leave the group behind
        stop_group(proc, say=say)
        raise
    if stop_rest and group_alive(proc):
        stop_group(proc, say=say)
    return rc


def run_capture(cmd: Sequence[str], *, timeout: float | None) -> tuple[int, bytes]:
    """``cmd``'s exit status and output (stdout and stderr, the last 1 MiB), run as ``run_group``
    with ``stop_rest``: the output goes to a temporary file, not a pipe, so a process it leaves behind
    holding the pipe cannot make the wait outlast ``timeout``; ``subprocess.TimeoutExpired`` once the
    group is stopped."""
    import tempfile

    with tempfile.TemporaryFile() as f:
        rc = run_group(cmd, timeout=timeout, stop_rest=True, stdin=subprocess.DEVNULL, stdout=f,
                       stderr=subprocess.STDOUT)
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - (1 << 20)))
        return rc, f.read()
