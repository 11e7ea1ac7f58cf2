"""The command lines ``nsysan profile`` runs: the plain recording, and the ``--diagnose`` preset that
records what explains why the GPU waits and how hard it works.

Plain: ``nsys profile -t cuda,nvtx,osrt -s none --export sqlite -o NAME -f false|true COMMAND``.

``--diagnose``: ``nsys profile`` with, on top of the traced APIs,

* ``-s process-tree --cpuctxsw=process-tree``: CPU samples of the program's threads with native call
  chains (``COMPOSITE_EVENTS``, ``SAMPLING_CALLCHAINS``), and their context switches (``SCHED_EVENTS``:
  whether a launching thread was running or blocked, ``analyses/sched.py``);
* ``--cuda-memory-usage=true``: every device allocation and free with its size
  (``CUDA_GPU_MEMORY_USAGE_EVENTS``: live memory over time, growth per iteration, ``analyses/memory.py``);
* ``--cuda-um-gpu-page-faults=true --cuda-um-cpu-page-faults=true``: unified memory page faults
  (``analyses/unified.py``; they cost only where managed memory faults);
* ``--cudabacktrace=sync,memory``: the native call chain of each synchronization, copy and allocation
  call in ``CUDA_CALLCHAINS`` (nsys 2025.3 takes one for every such call, whatever its duration);
  kernel launches are left out, since backtracing them all slows a launch-bound program and inflates
  the launch costs nsysan measures (``--cuda-backtrace all`` records them too);
* for a Python program only, ``--python-sampling=true --python-backtrace=cuda``: Python frames of
  the samples and of those CUDA calls (stored as blobs). A command is taken for Python when its
  program's name is ``python``/``python3``/``python3.12``..., ``ipython``, ``pytest``, ``torchrun``,
  ``accelerate``, ``deepspeed`` or ends in ``.py``; ``--python-sampling on|off`` overrides the guess;
* ``--gpu-metrics-devices=all --gpu-metrics-frequency=10000``: GPU metrics (SMs active, tensor
  active, DRAM and PCIe throughput...) at 10 kHz (``--gpu-metrics-devices none`` leaves them out:
  they need access to the GPU's performance counters);

and no ``--export``: ``nsys profile --export sqlite`` leaves the Python frames out, so the report is
exported by a second step, ``nsys export --type sqlite --include-blobs=true``, into NAME.sqlite.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence

PYTHON_PROGRAMS = re.compile(r"^(python[\d.]*|pypy[\d.]*|ipython[\d.]*|pytest|torchrun|accelerate|deepspeed)$|\.py$")
GPU_METRICS_FREQUENCY = 10_000  # Hz: nsys' default, stated so that the command line says it
# syncs, copies, allocations: the calls whose call sites the findings name. Not launches: nsys 2025.3 takes a
# backtrace of every traced call, and on a launch-bound loop (H200, 200 launches a step) backtraces of all calls
# took the step from 3.70 ms (plain tracing) to 4.92 ms, inflating the launch costs nsysan measures; sync,memory
# took 3.67 ms (docs/inputs.md, "Recording for a diagnosis").
CUDA_BACKTRACE = "sync,memory"
# device memory, unified memory faults (the context switches ride on -s process-tree): measured on an H200
# (workloads/README.md) within the run-to-run noise, except the fault flags on a loop that faults
# (+2% to +8.5% a step over plain tracing)
BEYOND_TIME = ("--cuda-memory-usage=true", "--cuda-um-gpu-page-faults=true", "--cuda-um-cpu-page-faults=true")


def is_python(command: Sequence[str]) -> bool:
    """Whether ``command`` runs a Python program (by its program's name; ``env python3 x`` too)."""
    words = list(command)
    if words and os.path.basename(words[0]) == "env":  # env [-i] [VAR=value ...] program
        words = words[1:]
        while words and (words[0].startswith("-") or "=" in words[0]):
            words = words[1:]
    return bool(words) and bool(PYTHON_PROGRAMS.search(os.path.basename(words[0])))


def diagnose_flags(command: Sequence[str], *, python: str = "auto", gpu_metrics_devices: str = "all",
                   cuda_backtrace: str = CUDA_BACKTRACE) -> list[str]:
    """The ``nsys profile`` flags the ``--diagnose`` preset adds (after ``-t``; replaces ``-s none``)."""
    flags = ["-s", "process-tree", "--cpuctxsw=process-tree", *BEYOND_TIME, f"--cudabacktrace={cuda_backtrace}"]
    if python == "on" or (python == "auto" and is_python(command)):
        flags += ["--python-sampling=true", "--python-backtrace=cuda"]
    if gpu_metrics_devices != "none":
        flags += [f"--gpu-metrics-devices={gpu_metrics_devices}", f"--gpu-metrics-frequency={GPU_METRICS_FREQUENCY}"]
    return flags


def profile_command(nsys: str, out: str, command: Sequence[str], *, trace: str = "cuda,nvtx,osrt",
                    force: bool = False, graph_nodes: bool = False, diagnose: bool = False, python: str = "auto",
                    gpu_metrics_devices: str = "all", cuda_backtrace: str = CUDA_BACKTRACE) -> list[str]:
    """``nsys profile ...`` for ``nsysan profile``: plain (exports SQLite itself) or the ``--diagnose``
    preset (writes only NAME.nsys-rep; :func:`export_command` exports it)."""
    what = (diagnose_flags(command, python=python, gpu_metrics_devices=gpu_metrics_devices,
                           cuda_backtrace=cuda_backtrace) if diagnose
            else ["-s", "none", "--export", "sqlite"])
    return [nsys, "profile", "-t", trace, *what, "-o", out, "-f", "true" if force else "false",
            *(["--cuda-graph-trace=node"] if graph_nodes else []), *command]


def export_command(nsys: str, report: str, sqlite: str, export_flags: Sequence[str]) -> list[str]:
    """``nsys export`` of the preset's report into ``sqlite``; ``export_flags`` is
    ``["--include-blobs=true"]`` where this nsys has it (see ``record.nsys.export_flags``)."""
    return [nsys, "export", "--type", "sqlite", *export_flags, "--force-overwrite", "true", "--output", sqlite, report]


def export_report(nsys: str, report: str, sqlite: str, *, timeout: float | None, say: Callable[[str], None]) -> int:
    """Run :func:`export_command` (in its own process group, stopped on ``timeout`` as the recording
    is) and return nsys' exit status; ``say`` tells what it runs, and when this nsys cannot keep the
    Python frames."""
    from nsysan.record.nsys import export_flags
    from nsysan.record.process import run_group
    from nsysan.units import clean_text

    flags = export_flags(nsys)
    if not flags:
        say("nsysan: this nsys has no `nsys export --include-blobs`: Python frames will be missing")
    cmd = export_command(nsys, report, sqlite, flags)
    say("running: " + clean_text(" ".join(cmd)))
    return run_group(cmd, timeout=timeout, say=say)
