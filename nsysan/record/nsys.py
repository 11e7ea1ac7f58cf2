"""Which nsys to run, whether it can, and what it can do (standard library only: ``profile`` must not
wait for pandas)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from nsysan.errors import ToolNotFoundError
from nsysan.units import clean_text

MIN_NSYS = (2021, 2)  # SQLite export with NVTX


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
        raise ToolNotFoundError(f"{clean_text(nsys)}: not an executable nsys",
                                hint="pass --nsys /path/to/nsys or set NSYSAN_NSYS")


CHECK_TIMEOUT_S = 60.0  # the most a capability check (``--version``, ``export --help``) may take


def _bounded(timeout: float | None) -> float:
    return CHECK_TIMEOUT_S if timeout is None else min(CHECK_TIMEOUT_S, max(0.0, timeout))


def check_version(nsys: str, timeout: float | None = None, *, deadline_error: bool = False) -> None:
    """``ToolNotFoundError`` when ``nsys`` cannot run or is older than ``MIN_NSYS``. The check takes
    at most ``timeout`` seconds (and 60), and leaves nothing it started running; with
    ``deadline_error``, running out of ``timeout`` (not of the 60 s) raises ``subprocess.TimeoutExpired``."""
    from nsysan.record.process import run_capture

    limit = _bounded(timeout)
    try:
        ver = run_capture([nsys, "--version"], timeout=limit)[1].decode("utf-8", "replace")
    except subprocess.TimeoutExpired as e:
        if deadline_error and timeout is not None and limit >= timeout:
            raise
        raise ToolNotFoundError(f"{clean_text(nsys)}: cannot run it ({clean_text(e)})") from e
    except OSError as e:
        raise ToolNotFoundError(f"{clean_text(nsys)}: cannot run it ({clean_text(e)})") from e
    m = re.search(r"(\d{4})\.(\d+)", ver)
    if not m or (int(m.group(1)), int(m.group(2))) < MIN_NSYS:
        raise ToolNotFoundError(f"{clean_text(nsys)}: version {clean_text(ver.strip()) or 'unknown'} is too old; need "
                                f"{MIN_NSYS[0]}.{MIN_NSYS[1]} or newer for SQLite export with NVTX")


def export_flags(nsys: str, timeout: float | None = None, *, deadline_error: bool = False) -> list[str]:
    """``--include-blobs=true`` where this nsys has it (2023 and later; not 2022.4): the Python
    samples' call stacks are stored as blobs, which an export leaves out by default. The check
    (``nsys export --help``) takes at most ``timeout`` seconds (and 60) and leaves nothing it started
    running; with ``deadline_error``, running out of ``timeout`` (not of the 60 s) raises
    ``subprocess.TimeoutExpired`` instead of meaning "no such flag"."""
    from nsysan.record.process import run_capture

    limit = _bounded(timeout)
    try:
        helptext = run_capture([nsys, "export", "--help"], timeout=limit)[1]
    except OSError:
        helptext = b""
    except subprocess.TimeoutExpired:
        if deadline_error and timeout is not None and limit >= timeout:
            raise
        helptext = b""
    return ["--include-blobs=true"] if b"--include-blobs" in helptext else []
