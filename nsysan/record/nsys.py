"""Which nsys to run, whether it can, and what it can do (standard library only: ``profile`` must not
wait for pandas)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from nsysan.errors import ToolNotFoundError
from nsysan.units import clean_text as _say

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
        raise ToolNotFoundError(f"{_say(nsys)}: not an executable nsys",
                                hint="pass --nsys /path/to/nsys or set NSYSAN_NSYS")


def check_version(nsys: str) -> None:
    """``ToolNotFoundError`` when ``nsys`` cannot run or is older than ``MIN_NSYS``."""
    try:
        ver = subprocess.run([nsys, "--version"], capture_output=True, text=True, timeout=60,
                             stdin=subprocess.DEVNULL).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ToolNotFoundError(f"{_say(nsys)}: cannot run it ({_say(e)})") from e
    m = re.search(r"(\d{4})\.(\d+)", ver)
    if not m or (int(m.group(1)), int(m.group(2))) < MIN_NSYS:
        raise ToolNotFoundError(f"{_say(nsys)}: version {_say(ver.strip()) or 'unknown'} is too old; need "
                                f"{MIN_NSYS[0]}.{MIN_NSYS[1]} or newer for SQLite export with NVTX")


def export_flags(nsys: str) -> list[str]:
    """``--include-blobs=true`` where this nsys has it (2023 and later; not 2022.4): the Python
    samples' call stacks are stored as blobs, which an export leaves out by default."""
    try:
        r = subprocess.run([nsys, "export", "--help"], capture_output=True, timeout=60,
                           stdin=subprocess.DEVNULL, start_new_session=True)
        helptext = r.stdout + r.stderr
    except (OSError, subprocess.TimeoutExpired):
        helptext = b""
    return ["--include-blobs=true"] if b"--include-blobs" in helptext else []
