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
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nsysan import _atomic
from nsysan.errors import NsysanError, UsageError

if TYPE_CHECKING:
    from nsysan.options import RunOptions


def _task(trace: str, opts: RunOptions) -> dict[str, Any]:
    """Runs on a worker."""
    from nsysan.pipeline import analyze_one

    try:
        return {"ok": analyze_one(trace, opts)}
    except NsysanError as e:
        return {"error": f"{type(e).__name__}: {e}", "exit_code": e.exit_code, "trace": trace}


def absolute(jobs: list[tuple[str, RunOptions]]) -> list[tuple[str, RunOptions]]:
    return [(str(Path(t).resolve()), replace(o, outputs={k: str(Path(v).resolve()) for k, v in o.outputs.items()}))
            for t, o in jobs]


_START_HINT = "start one with `dask scheduler` (and `dask worker ADDRESS` on each node)"
_MAX_WAIT_S = 86400.0  # a longer --scheduler-timeout is a day (thread waits take no larger number)


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _connect(client_cls: Any, address: str, timeout_s: float) -> Any:
    """A Dask client connected to ``address`` within ``timeout_s`` seconds, whatever is there: Dask
    bounds the TCP connection, not the handshake after it, so a server that accepts and never answers
    would hang; the client is made in a thread that is given up on at the deadline. Anything that is
    not a Dask scheduler (garbage in reply, a reset) is ``UsageError`` (exit 2), one line."""
    limit = min(float(timeout_s), _MAX_WAIT_S)
    box: dict[str, Any] = {}

    def connect() -> None:
        try:
            box["client"] = client_cls(address, timeout=limit)
        except BaseException as e:  # noqa: BLE001 - reported below, in the caller's thread
            box["error"] = e

    t = threading.Thread(target=connect, name="nsysan-dask-connect", daemon=True)
    t.start()
    t.join(limit)
    if t.is_alive():  # Dask's own timeout, when it applies, ends it at about this time: its words are better
        t.join(0.5)
    if t.is_alive():
        raise UsageError(f"the Dask scheduler at {address} did not answer within {timeout_s:g} s "
                         "(something accepts connections there, but not as a Dask scheduler)",
                         hint=_START_HINT + "; --scheduler-timeout SECONDS waits longer")
    e = box.get("error")
    if e is not None:
        if isinstance(e, KeyboardInterrupt):
            raise e
        why = _one_line(e) if isinstance(e, (OSError, TimeoutError)) else f"its reply is not Dask's ({_one_line(e)})"
        raise UsageError(f"cannot reach the Dask scheduler at {address}: {why}", hint=_START_HINT) from e
    return box["client"]


_POLL_S = 1.0  # how often a run whose tasks all wait checks that the scheduler still has workers


def _workers(client: Any) -> int:
    """The scheduler's workers now (a lost scheduler: its futures are cancelled, see ``run``)."""
    try:
        return len(client.scheduler_info().get("workers") or {})
    except Exception:  # noqa: BLE001 - a scheduler that cannot say: not "none"
        return 1


def _wait_for_workers(client: Any, address: str, timeout_s: float) -> None:
    """``UsageError`` when the scheduler has no worker within ``timeout_s`` (tasks would wait forever)."""
    try:
        client.wait_for_workers(1, timeout=min(float(timeout_s), _MAX_WAIT_S))
    except (TimeoutError, OSError) as e:
        raise UsageError(f"the Dask scheduler at {address} has no workers (waited {timeout_s:g} s)",
                         hint="start them with `dask worker ADDRESS` on each node") from e


def run(address: str, jobs: list[tuple[str, RunOptions]], *, timeout_s: float = 30,
        on_result: Callable[[dict[str, Any]], None] | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Submit one task per trace to the scheduler at ``address``; returns (results, errors) in the
    order the traces were given."""
    try:
        from distributed import Client, as_completed
    except ImportError as e:
        raise UsageError("--scheduler needs Dask distributed",
                         hint="pip install 'nsysan[cluster]'  (or: pip install distributed)") from e
    jobs = absolute(jobs)
    client = _connect(Client, address, timeout_s)
    with client:
        _wait_for_workers(client, address, timeout_s)
        futures = [client.submit(_task, t, o, pure=False, key=f"nsysan-{i}-{Path(t).name}")
                   for i, (t, o) in enumerate(jobs)]
        index = {f.key: i for i, f in enumerate(futures)}
        got: list[dict[str, Any] | None] = [None] * len(futures)
        ac = as_completed(futures)
        done, alone_since = 0, None

        def no_progress() -> None:
            """Tasks wait, for workers to finish them or for workers that left: ``UsageError`` once
            the scheduler has had none for ``timeout_s`` (they would wait forever)."""
            nonlocal alone_since
            _atomic.not_terminated()  # a signal whose exception was lost ends the wait
            alone_since = None if _workers(client) else (alone_since or time.monotonic())
            if alone_since is not None and time.monotonic() - alone_since >= min(timeout_s, _MAX_WAIT_S):
                raise UsageError(f"the Dask scheduler at {address} has had no workers for {timeout_s:g} s; "
                                 f"{len(futures) - done} of {len(futures)} traces were not analysed",
                                 hint="start workers with `dask worker ADDRESS` on each node")

        while done < len(futures):
            batch = ac.next_batch(block=False)
            if not batch:
                time.sleep(_POLL_S)
                no_progress()
                continue
            for fut in batch:
                i = index[fut.key]
                while True:  # a result kept on a worker that left is computed again: wait for it, bounded
                    try:
                        r = fut.result(timeout=_POLL_S)
                        break
                    except TimeoutError:
                        no_progress()
                    except Exception as e:  # noqa: BLE001 - the task died with its workers (KilledWorker), cancelled...
                        r = {"error": f"{type(e).__name__}: {jobs[i][0]}: the task did not complete on the cluster "
                                      f"({_one_line(e)})", "exit_code": 1, "trace": jobs[i][0]}
                        break
                alone_since = None
                got[i] = r
                done += 1
                if on_result:
                    on_result(r)
                print(f"nsysan: {done}/{len(futures)} traces done on {address}", file=sys.stderr)
    results = [r["ok"] for r in got if r and "ok" in r]
    errors = [r for r in got if r and "error" in r]
    return results, errors


def run_many(address: str, jobs: list[tuple[str, RunOptions]], *, timeout_s: float,
             on_error: Callable[[str], None]) -> tuple[list[dict[str, Any]], int]:
    """``pipeline.run_many`` on the cluster at ``address``: the summaries, each failure to ``on_error``
    (in the traces' order), and their number."""
    results, errors = run(address, jobs, timeout_s=timeout_s)
    for e in errors:
        on_error(e["error"])
    return results, len(errors)
