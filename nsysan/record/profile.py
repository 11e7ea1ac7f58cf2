"""``nsysan profile``: a command run under ``nsys profile --export sqlite``. Outputs are checked first
(nsys itself writes to another name when the output exists, e.g. /tmp/nsys-report-XXXX or x(1), and
exits 0); nsys runs in its own process group, stopped as a whole on a timeout or Ctrl-C; the trace
reported is checked to be written by this run."""

from __future__ import annotations

import os
import stat
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nsysan.errors import OutputError, OutputExistsError, ResourceLimitError, ToolNotFoundError, UsageError
from nsysan.units import clean_text

PROFILE_SLACK_NS = 2_000_000_000  # file times are coarse on some file systems (FAT: 2 s)


def output_name(output: str) -> str:
    """``-o`` without a trace extension (``-o x.nsys-rep`` means x); a name nsys would expand, or no
    name, is a usage error."""
    out = output
    for suffix in (".nsys-rep", ".qdrep", ".sqlite"):
        if out.lower().endswith(suffix) and len(out) > len(suffix):
            out = out[: -len(suffix)]
            break
    if "%" in out:
        raise UsageError(f"-o {clean_text(out)}: nsys expands %p, %h, %q{{VAR}} in output names, so nsysan could not "
                         "tell which file it wrote", hint="give a plain name")
    if not out or out.endswith(("/", os.sep)) or os.path.isdir(out):
        raise UsageError(f"-o {clean_text(out)}: expected an output name without extension (e.g. -o runs/mytrace)")
    return out


def _prepare(out: str, force: bool) -> tuple[Path, Path, list[Path]]:
    """The report and export paths, and those that exist (refused without ``force``); a name over the
    file system's limits is an output error (exit 12), before nsys runs."""
    from nsysan.outputs import path_too_long

    report, sqlite = Path(out + ".nsys-rep"), Path(out + ".sqlite")
    too_long = path_too_long(report)
    if too_long:
        raise OutputError(f"-o {clean_text(out[:60])}...: {too_long}", hint="choose a shorter -o name")
    existing = [p for p in (report, sqlite) if p.exists() or p.is_symlink()]
    for p in existing:
        if p.is_dir() and not p.is_symlink():
            raise UsageError(f"{clean_text(p)}: is a directory", hint="choose another -o name")
    if existing and not force:
        raise OutputExistsError(f"{' and '.join(clean_text(p) for p in existing)}: exists; nsys would write its trace "
                                "under another name", hint="pass -f to overwrite, or choose another -o name")
    return report, sqlite, existing


def _clear(out: str, existing: list[Path], sqlite: Path) -> None:
    for p in existing:  # -f: the old files go first, so a file found afterwards is this run's
        try:
            p.unlink()
        except OSError as e:
            raise OutputError(f"{clean_text(p)}: cannot remove it to overwrite it: {e.strerror or e}") from e
    try:  # nsys 2022.4 writes /tmp/nsys-report-XXXX.* (and exits 0) when the folder is missing
        sqlite.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"-o {clean_text(out)}: cannot create its folder: {e.strerror or e}") from e


def annotate_env(command: Sequence[str], annotate: bool | None, *, diagnose: bool, trace: str,
                 say: Callable[[str], None]) -> dict[str, str] | None:
    """The environment nsys runs ``command`` in for ``--annotate`` (``record.annotate``), or None
    (nsysan's own: not annotated). ``annotate`` None: on with ``--diagnose``, where it can be; asked
    for and impossible (``python -I``, ``env -i``, no nvtx in ``--trace``): a usage error."""
    from nsysan.presets import is_python
    from nsysan.record import annotate as ann

    if annotate is False or (annotate is None and not diagnose):
        return None
    why = ann.blocked(command) or (None if "nvtx" in trace.split(",") else f"-t {trace} does not trace NVTX")
    if why:
        if annotate:
            raise UsageError(f"--annotate: {clean_text(why)}; drop that, or pass --no-annotate")
        say(f"nsysan: not annotated: {clean_text(why)}")
        return None
    if not is_python(command):
        say(f"nsysan: --annotate: {clean_text(os.path.basename(command[0]))} is not a Python program nsysan knows; "
            "the Python programs it starts are annotated (PYTHONPATH)")
    say("nsysan: annotating the frameworks' steps (NVTX domain nsysan; PYTHONPATH starts with "
        f"{clean_text(ann.SITE_DIR)})")
    return ann.annotate_env(os.environ)


def profile(command: Sequence[str], *, output: str, nsys: str | None, force: bool, timeout: float | None,
            say: Callable[[str], None], annotate: bool | None = None, **preset: Any) -> tuple[int, Path, bool]:
    """Record ``command``; returns (nsys' exit status, the SQLite export's path, whether this run
    wrote it). ``preset``: ``presets.profile_command``'s options; ``say``: progress lines;
    ``annotate``: ``--annotate`` / ``--no-annotate`` (None: on with ``--diagnose``)."""
    from nsysan import presets
    from nsysan.record import nsys as nsys_mod
    from nsysan.record.process import run_group

    cmd = list(command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UsageError("nothing to profile: nsysan profile [options] -- COMMAND ...")
    out = output_name(output)
    env = annotate_env(cmd, annotate, diagnose=bool(preset.get("diagnose")),
                       trace=preset.get("trace", "cuda,nvtx,osrt"), say=say)
    found = nsys_mod.find_nsys(nsys)
    if not found:
        raise ToolNotFoundError("nsys (Nsight Systems CLI) is not on PATH",
                                hint="install Nsight Systems, or pass --nsys /path/to/nsys (or set NSYSAN_NSYS)")
    nsys_mod.check_nsys(found)
    report, sqlite, existing = _prepare(out, force)
    try:  # --timeout bounds every wait of the run, the version check included
        nsys_mod.check_version(found, timeout, deadline_error=True)
    except subprocess.TimeoutExpired:
        raise ResourceLimitError(f"{clean_text(found)} --version did not answer within --timeout {timeout:g} s; "
                                 "it and every process it started were stopped",
                                 hint="raise --timeout, or check that this nsys runs") from None
    _clear(out, existing, sqlite)
    full = presets.profile_command(found, out, cmd, force=force, **preset)
    say("running: " + clean_text(" ".join(full)))
    started_ns = time.time_ns()
    try:
        rc = run_group(full, timeout=timeout, say=say, **({"env": env} if env is not None else {}))
        if preset.get("diagnose") and fresh(report, started_ns):  # the preset exports with blobs in a step of its own
            rc = presets.export_report(found, str(report), str(sqlite), timeout=timeout, say=say) or rc
    except subprocess.TimeoutExpired:
        kept = fresh(sqlite, started_ns)
        raise ResourceLimitError(
            f"nsys did not finish within --timeout {timeout:g} s; it and every process it started were stopped",
            hint=(f"nsys wrote {clean_text(sqlite)} before it stopped: nsysan analyze {clean_text(sqlite)}" if kept else
                  "raise --timeout, or make the run shorter (nsys profile --duration SECONDS)")) from None
    if not sqlite.exists():
        return rc, sqlite, False
    if not fresh(sqlite, started_ns):
        raise OutputError(f"{clean_text(sqlite)}: not written by this run (older than its start); nsys wrote its "
                          "trace elsewhere (see its \"Generated:\" lines above)", hint="pass -f to overwrite")
    return rc, sqlite, True


def fresh(path: Path, started_ns: int) -> bool:
    """A regular file written since ``started_ns`` (less the file system's slack)."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_mtime_ns >= started_ns - PROFILE_SLACK_NS
