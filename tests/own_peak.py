"""A child process's own peak resident memory, for tests that bound it.

Not ``resource.getrusage(RUSAGE_SELF).ru_maxrss``: Linux carries the parent's high-water mark
across fork and exec into the child's (``exec_mmap`` keeps the old memory map's peak in the
process's ``maxrss``), so a child started by a pytest worker that once held 1 GB reads 1 GB
whatever the child itself used (test_huge_string_id_in_a_real_trace_costs_no_memory read
1,023,440 kB under the full suite; 139 MB alone). ``VmHWM`` in /proc/self/status is the peak of
the child's own memory map, which exec makes new.
"""

from __future__ import annotations

import os
import subprocess
import sys

# an expression a child evaluates last: its own peak resident memory in kB
OWN_PEAK_KB = "next(int(x.split()[1]) for x in open('/proc/self/status') if x.startswith('VmHWM:'))"

# `python -c MAIN_THEN_PEAK nsysan-args...`: nsysan's CLI in a fresh process, then its exit code and own peak
MAIN_THEN_PEAK = f"import sys; from nsysan.cli import main; rc = main(sys.argv[1:]); print(rc, {OWN_PEAK_KB})"


def cli_peak_kb(argv: list[str], *, root: str, timeout: float = 120) -> tuple[int, int, str]:
    """``nsysan`` with ``argv`` in a child process: its exit code, its own peak RSS (kB), its stderr."""
    r = subprocess.run([sys.executable, "-c", MAIN_THEN_PEAK, *argv], capture_output=True, text=True,
                       timeout=timeout, env={**os.environ, "PYTHONPATH": root}, check=False)
    assert r.returncode == 0 and r.stdout.split(), r.stderr[-3000:]
    rc, kb = r.stdout.split()[-2:]
    return int(rc), int(kb), r.stderr
