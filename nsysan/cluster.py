"""Run the per-trace work on a Dask distributed cluster (``nsysan analyze --scheduler ADDRESS``).

Each trace is one task: the worker opens the trace, runs every analysis and rule, and writes that
trace's JSON/HTML itself; only the small per-trace summary travels back to the client, which prints
the cross-trace (per-rank) table. So the traces and ``--out-dir`` must be on a filesystem every
worker sees under the same path (as with ``nsys recipe`` on a cluster); paths are made absolute
before they are sent.

Errors on a worker come back as data (the error class, message and exit code), so one bad trace is
reported like a local one and does not fail the others.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nsysan.errors import NsysanError, UsageError


def _task(trace: str, opts: dict[str, Any]) -> dict[str, Any]:
    """Runs on a worker."""
    from nsysan.pipeline import analyze_one

    try:
        return {"ok": analyze_one(trace, opts)}
    except NsysanError as e:
        return {"error": f"{type(e).__name__}: {e}", "exit_code": e.exit_code, "trace": trace}


def absolute(jobs: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for trace, opts in jobs:
        o = dict(opts)
        for k in ("json", "html", "csv"):
            if o.get(k):
                o[k] = str(Path(o[k]).resolve())
        out.append((str(Path(trace).resolve()), o))
    return out


def run(address: str, jobs: list[tuple[str, dict[str, Any]]], *, timeout_s: float = 30,
        on_result: Callable[[dict[str, Any]], None] | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Submit one task per trace to the scheduler at ``address``; returns (results, errors) in the
    order the traces were given."""
    try:
        from distributed import Client, as_completed
    except ImportError as e:
        raise UsageError("--scheduler needs Dask distributed",
                         hint="pip install 'nsysan[cluster]'  (or: pip install distributed)") from e
    jobs = absolute(jobs)
    try:
        client = Client(address, timeout=timeout_s)
    except (OSError, TimeoutError) as e:
        raise UsageError(f"cannot reach the Dask scheduler at {address}: {e}",
                         hint="start one with `dask scheduler` (and `dask worker ADDRESS` on each node)") from e
    with client:
        futures = [client.submit(_task, t, o, pure=False, key=f"nsysan-{i}-{Path(t).name}")
                   for i, (t, o) in enumerate(jobs)]
        index = {f.key: i for i, f in enumerate(futures)}
        got: list[dict[str, Any] | None] = [None] * len(futures)
        done = 0
        for fut in as_completed(futures):
            got[index[fut.key]] = r = fut.result()
            done += 1
            if on_result:
                on_result(r)
            print(f"nsysan: {done}/{len(futures)} traces done on {address}", file=sys.stderr)
    results = [r["ok"] for r in got if r and "ok" in r]
    errors = [r for r in got if r and "error" in r]
    return results, errors


def run_many(address: str, jobs: list[tuple[str, dict[str, Any]]], *, timeout_s: float,
             on_error: Callable[[str], None]) -> tuple[list[dict[str, Any]], int]:
    """``pipeline.run_many`` on the cluster at ``address``: the summaries, each failure to ``on_error``
    (in the traces' order), and their number."""
    results, errors = run(address, jobs, timeout_s=timeout_s)
    for e in errors:
        on_error(e["error"])
    return results, len(errors)
