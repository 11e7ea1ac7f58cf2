"""Will the analysis fit in memory? An estimate made before any event is decoded.

The loader knows each big event table's row count before it reads a row (the direct reader's leaf
lists: the cell counts in the leaf pages' headers) and how many columns it decodes from it. The
peak of ``nsysan analyze`` grows linearly with those rows, so it is estimated as

    BASE + rows x columns x 9 bytes (the decoded int64 columns and their NULL masks; an upper
                                     bound since the ids load narrows decode into int32: 5 bytes)
         + rows x PER_ROW x fraction (frames, analyses and the report; measured, with a margin)
         + NVTX ranges x NVTX_ROW   (read whole through SQL, with a time range too)

With ``--time-range`` each part of a table (400,000 rows) keeps only its rows inside the range as
it is decoded, so both terms scale with the share of events kept, plus the parts being decoded.
The estimate is compared with the memory this process may still take: ``MemAvailable`` of
/proc/meminfo, lowered by a cgroup's limit (v2 ``memory.max`` - ``memory.current`` up the
hierarchy, or v1's), or ``NSYSAN_MEMORY_LIMIT`` (bytes, or with a K/M/G suffix) when set. A
trace that would not fit is analysed with its big arrays in files (``nsysan._spill``: the same
results, more slowly) when the spill directory has room for ``decoded + rest`` and the memory left
holds ``BASE + fixed + rows x SPILL_ROW``; otherwise (or with ``NSYSAN_SPILL=never``) it is refused
up front with ``MemoryLimitError`` (exit 13), which names the time range that would fit and why it
did not spill, instead of being killed by the kernel half-way through.

PER_ROW and NVTX_ROW are measured peaks with a margin, never an under-estimate: the estimate is
1.25-2.4x the whole-process peaks of replicated traces from 245 MB to 10 GB and of traces with up
to 1.2M NVTX ranges (docs/performance.md, "Huge traces: the memory estimate", gives the traces,
the machine and the figures). NVTX texts longer than the 55 characters measured cost more per
range. Rowid spans are bounded by what the file can hold (``Database.row_bound``): one row at rowid
2^62 is one row.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nsysan import _spill

BASE = 200 << 20  # interpreter, imports, the report's fixed parts
DECODED_BYTES = 9  # per decoded value: int64 + a one-byte NULL mask
PER_ROW = 50  # bytes per event row beyond its decoded columns (see the module doc)
# an NVTX range costs far more than its decoded columns: it is read through SQL (its text a Python
# string per row), becomes the ranges' frame and their nesting, and its name reaches the summaries
# and the gap breakdowns; measured, whole process, 690 bytes per range with 50 names and 1,410 with
# a name of 55 characters each (300,000 -> 1.2M ranges). It is read whole even with --time-range,
# so it is counted as a fixed cost, not scaled with the share of events kept
NVTX_ROW = 1_800
# with the big arrays in files (``_spill``): bytes per event row that stay in memory (small arrays,
# pandas' hash tables, the heap's free blocks). Measured: the 10 GB replica (197M event rows) peaked at
# 3.74 GiB of anonymous memory (RssAnon), 20 bytes a row with the 200 MiB base; 32 leaves a margin
SPILL_ROW = 32
LIMIT_ENV = "NSYSAN_MEMORY_LIMIT"


# tables read whole at analysis time, whatever --time-range says, and their bytes per row beyond
# the decoded values (GPU metrics: three columns of the selected metrics, means per range)
WHOLE_TABLES = {"gpu_metrics": 16}
# with --time-range each decoding thread holds one part of a table undecimated: 4 threads x 400,000
# rows x 20 columns x 9 bytes at most
IN_FLIGHT = 4 * 400_000 * 20 * DECODED_BYTES


@dataclass(frozen=True)
class Estimate:
    rows: int
    decoded: int  # bytes of the decoded columns
    rest: int  # bytes of everything built from the event tables, with the whole capture
    fixed: int = 0  # bytes of the tables read whole (WHOLE_TABLES)

    def peak(self, fraction: float = 1.0) -> int:
        if fraction >= 1.0:
            return BASE + self.decoded + self.fixed + self.rest
        return BASE + min(self.decoded, IN_FLIGHT) + self.fixed + int((self.decoded + self.rest) * max(0.0, fraction))

    def on_disk(self, fraction: float = 1.0) -> int:
        """Bytes the spill's files may hold at once (``_spill``): the decoded columns and what the
        analyses build from them, the same terms as ``peak``'s."""
        return self.decoded + self.rest if fraction >= 1.0 else int((self.decoded + self.rest) * max(0.0, fraction))

    def spilled_peak(self, fraction: float = 1.0) -> int:
        """The memory needed with the big arrays in files: the fixed part, the tables read whole,
        and ``SPILL_ROW`` bytes per event row (arrays under the spill's threshold, hash tables,
        the pages being worked on)."""
        rows = self.rest // PER_ROW if PER_ROW else 0
        return BASE + self.fixed + int(rows * SPILL_ROW * min(1.0, max(0.0, fraction)))

    def fitting_fraction(self, available: int) -> float:
        """The share of the events that fits (0 when none does)."""
        room = available - BASE - min(self.decoded, IN_FLIGHT) - self.fixed
        return 0.0 if room <= 0 or self.rest <= 0 else min(1.0, room / (self.decoded + self.rest))


def estimate(tables: dict[str, tuple[int, int]]) -> Estimate:
    """``tables``: name -> (rows, decoded columns). The NVTX ranges (``nvtx_raw``) count as events,
    at ``NVTX_ROW`` bytes each, in the fixed part."""
    events = sum(r for name, (r, _) in tables.items() if name not in WHOLE_TABLES)
    nvtx = tables.get("nvtx_raw", (0, 0))[0]
    return Estimate(events, sum(r * c * DECODED_BYTES for name, (r, c) in tables.items() if name != "nvtx_raw"),
                    (events - nvtx) * PER_ROW,
                    sum(r * WHOLE_TABLES[name] for name, (r, _) in tables.items() if name in WHOLE_TABLES)
                    + nvtx * NVTX_ROW)


def parse_size(text: str) -> int:
    """Bytes from ``123``, ``512M``, ``24G`` (powers of 1024); ValueError otherwise."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
    value = float(t[:-1] if scale > 1 else t)
    if not value >= 0 or value != value or value == float("inf"):
        raise ValueError(text)
    return int(value * scale)


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except (OSError, UnicodeError):
        return None
    return int(text) if text.isdigit() else None  # "max" (no limit) or unreadable: None


def _meminfo_available(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_room(root: Path = Path("/sys/fs/cgroup"), self_cgroup: Path = Path("/proc/self/cgroup")) -> int | None:
    """The smallest (limit - usage) over this process's memory cgroups, v2 or v1; None if unlimited."""
    try:
        lines = self_cgroup.read_text().splitlines()
    except OSError:
        return None
    rooms: list[int] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, rel = parts
        if controllers == "":  # v2: every level up to the root
            d = root / rel.lstrip("/")
            while True:
                limit, used = _read_int(d / "memory.max"), _read_int(d / "memory.current")
                if limit is not None:
                    rooms.append(limit - (used or 0))
                if d == root or root not in d.parents:
                    break
                d = d.parent
        elif "memory" in controllers.split(","):
            # v1, every level up; in a container the group's own folder is often the mount's root
            top = root / "memory"
            d = top / rel.lstrip("/")
            while True:
                limit, used = _read_int(d / "memory.limit_in_bytes"), _read_int(d / "memory.usage_in_bytes")
                if limit is not None and limit < (1 << 60):  # v1 writes a huge number for "no limit"
                    rooms.append(limit - (used or 0))
                if d == top or top not in d.parents:
                    break
                d = d.parent
    return min(rooms) if rooms else None


def available() -> tuple[int | None, str]:
    """Bytes this process may still take, and where the figure comes from (None: unknown)."""
    env = os.environ.get(LIMIT_ENV)
    if env:
        try:
            return parse_size(env), LIMIT_ENV
        except (ValueError, IndexError):
            pass  # a malformed override is ignored: the machine's own figures apply
    figures = [(v, src) for v, src in ((_meminfo_available(), "MemAvailable"), (_cgroup_room(), "cgroup limit"))
               if v is not None]
    return min(figures) if figures else (None, "unknown")


def fits(tables: dict[str, tuple[int, int]]) -> bool:
    """Whether the whole capture's analysis fits (the prefetch starts only then; otherwise
    ``open_trace`` refuses it, or reads the part ``--time-range`` keeps)."""
    avail, _ = available()
    return avail is None or estimate(tables).peak() <= avail


SAMPLES = 256  # start times read per event table (by evenly spaced rowids) to place a time range


def check(label: str, tables: dict[str, tuple[int, int]], *, fraction: float = 1.0,
          when: Callable[[float], tuple[float, float, float]] | None = None,
          warnings: list[str] | None = None) -> None:
    """Raise ``MemoryLimitError`` when the estimated peak exceeds the memory available and the
    arrays cannot be kept in files instead (``_spill``: then they are, from here on, with a note in
    ``warnings``). ``when(share)`` gives (start, end, share of events) of a time range, in seconds,
    that holds about ``share`` of the events, for the hint."""
    from nsysan.errors import MemoryLimitError

    est = estimate(tables)
    avail, source = available()
    need = est.peak(fraction)
    over = avail is not None and need > avail
    why = _spilled(est, fraction, avail, source, need, over, warnings) if over or _spill.mode() == "always" else None
    if avail is None or not over or _spill.active():
        return
    fits = est.fitting_fraction(avail)
    what = f"{label}: analysing {est.rows:,} events needs about {_size(need)} of memory; " \
           f"{_size(max(avail, 0))} available ({source})"
    if fits <= 0.001:
        hint = ("not even a part of it fits: use a machine with more memory, or record a shorter capture (nsys "
                "profile --duration, or --capture-range)")
    else:
        hint = f"analyse part of the capture with --time-range START:END (seconds from its start): {fits:.0%} of " \
               "its events fit"
        if when is not None:
            a, b, share = when(fits * 0.9)  # a margin for the sampling
            if b > a:
                hint += f", e.g. --time-range {a:.3f}:{b:.3f} (about {share:.0%} of them)"
    if why:
        hint += f"; not spilled to disk: {why}"
    raise MemoryLimitError(what, hint=hint + f"; {LIMIT_ENV} overrides the available figure")


def _spilled(est: Estimate, fraction: float, avail: int | None, source: str, need: int, over: bool,
             warnings: list[str] | None) -> str | None:
    """Start the spill (``_spill``) when ``NSYSAN_SPILL`` allows it and it can hold the arrays; None
    when it started, else why not (in words)."""
    if _spill.mode() == "never":
        return f"{_spill.MODE_ENV}=never"
    ram = est.spilled_peak(fraction)
    why = _spill.unavailable(est.on_disk(fraction))
    if why is None and avail is not None and ram > avail:
        why = f"even with its arrays in files it needs about {_size(ram)}"
    if why is not None:
        if not over and warnings is not None:  # NSYSAN_SPILL=always, and it cannot
            warnings.append(f"{_spill.MODE_ENV}=always: not spilled to disk: {why}")
        return why
    _spill.start()
    if warnings is not None:
        reason = f"it needs about {_size(need)} of memory, {_size(max(avail or 0, 0))} available ({source})" if over \
            else f"{_spill.MODE_ENV}=always"
        warnings.append(f"analysed with its big arrays in files in {_spill.where()} ({reason}): the same results, "
                        f"more slowly; {_spill.MODE_ENV}=never refuses such a trace instead")
    return None


def _size(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.0f} MiB"


def guard(db: Any, label: str, direct_plans: dict[str, Any], prefetched: dict[str, Any],
          by_sql: list[tuple[Any, str]], time_range: tuple[float, float] | None,
          warnings: list[str] | None = None) -> tuple[int, int] | None:
    """The loader's hook, called once the tables are planned and before any is read: refuses a trace
    that would not fit (``check``) unless its arrays can be kept in files (``_spill``; noted in
    ``warnings``), and turns ``time_range`` (seconds from the capture's start) into
    ``[lo, hi)`` on the event clock (None without one). Where the events lie in time comes from
    ``SAMPLES`` start times per table, read by evenly spaced rowids (b-tree descents, a few ms): the
    share of a table's rows inside a range is the share of its samples inside it."""
    from nsysan.trace.schema import INTERVAL_TABLES

    tables: dict[str, tuple[int, int]] = {}
    sources: dict[str, str] = {}
    for name, (p, leaves) in direct_plans.items():
        tables[name] = (int(leaves[:, 1].sum(dtype="int64")) if leaves is not None else 0, len(p.slots))
        sources[name] = p.table
    for name, job in prefetched.items():
        tables[name] = (len(job.data[0]) if job.data else 0, len(job.data))
        sources[name] = job.plan.table
    for spec, src in by_sql:
        if spec.name in INTERVAL_TABLES + ("nvtx_raw",):
            tables[spec.name] = (_rows(db, src), len(db.caps.columns(src)))
            sources[spec.name] = src
    if db.caps.has("GPU_METRICS", "value"):
        tables["gpu_metrics"] = (_rows(db, "GPU_METRICS"), 3)
    shift = _shift(db) if time_range is not None or not fits(tables) else 0
    samples: dict[str, list[int]] = {}
    weights: dict[str, float] = {}

    def sample() -> None:  # only for a time range or a refusal: about 10 ms
        if not samples:
            samples.update({name: _sample_starts(db, src) for name, src in sources.items()})
            weights.update({name: tables[name][0] / len(v) for name, v in samples.items() if len(v)})

    def share_in(lo: int, hi: int) -> float:
        sample()
        total = sum(tables[n][0] for n in weights)
        kept = sum(weights[n] * sum(1 for v in samples[n] if lo <= v < hi) for n in weights)
        return 1.0 if total == 0 else kept / total

    def when(share: float) -> tuple[float, float, float]:
        sample()
        points = sorted((v, weights[n]) for n in weights for v in samples[n])
        if not points:
            return (0.0, 0.0, 0.0)
        total, acc, end = sum(w for _, w in points), 0.0, points[0][0]
        for v, w in points:
            if acc + w > share * total:
                break
            acc, end = acc + w, v
        a = max(0, points[0][0] - shift) // 1_000_000 / 1e3  # ms, rounded down / up to stay inside
        b = (end - shift) // 1_000_000 / 1e3
        return (a, b, share_in(shift + int(a * 1e9), shift + int(b * 1e9)))

    window = None
    fraction = 1.0
    if time_range is not None:
        window = (shift + int(time_range[0] * 1e9), shift + int(time_range[1] * 1e9))
        kept = share_in(*window)
        if weights:
            fraction = min(1.0, kept + 1.0 / SAMPLES)  # one sample's width of margin
    check(label, tables, fraction=fraction, when=when, warnings=warnings)
    return window


def _rows(db: Any, src: str) -> int:
    """A bound on the rows of ``src``: its rowid span (two b-tree descents), else a count (no rowid,
    or a span beyond what the file can hold: sparse rowids, one row at 2^62, are not 2^62 rows)."""
    return int(db.row_bound(src))


def _shift(db: Any) -> int:
    """The event clock's shift (EXPORT_CONFIG_TIME_SHIFT): the capture's start on that clock."""
    try:
        if db.caps.has("META_DATA_EXPORT", "name"):
            rows = db.rows("SELECT value FROM \"META_DATA_EXPORT\" WHERE name = 'EXPORT_CONFIG_TIME_SHIFT'")
            if rows and str(rows[0][0]).lstrip("-").isdigit():
                return int(rows[0][0])
    except Exception:  # noqa: BLE001 - an odd table: no shift
        pass
    return 0


def _sample_starts(db: Any, src: str) -> list[int]:
    """Up to ``SAMPLES`` start times of ``src``, at evenly spaced rowids (rows nsys wrote are about
    in time order, and each stands for its stretch of rowids)."""
    try:
        lo, hi = db.rows(f'SELECT (SELECT min(rowid) FROM "{src}"), (SELECT max(rowid) FROM "{src}")')[0]
        if lo is None:
            return []
        lo, hi = int(lo), int(hi)
        ids = sorted({lo + (hi - lo) * i // max(1, SAMPLES - 1) for i in range(SAMPLES)})
        got = []
        for i in range(0, len(ids), 500):  # SQLite's parameter limit
            chunk = ids[i:i + 500]
            got += db.rows(f'SELECT "start" FROM "{src}" WHERE rowid IN ({",".join("?" * len(chunk))})',
                           tuple(chunk))
        return [int(r[0]) for r in got if isinstance(r[0], int)]
    except Exception:  # noqa: BLE001 - no rowid, no start column: nothing known about when
        return []


def restrict(frames: dict[str, Any], window: tuple[int, int], warnings: list[str]) -> dict[str, Any]:
    """Keep the events that start inside ``window`` in every table with a start time (the direct
    reader dropped the others of its tables while decoding; this covers the tables read by SQL)."""
    lo, hi = window
    out = {}
    for name, df in frames.items():
        if "start_ns" in getattr(df, "columns", ()):
            st = df["start_ns"].to_numpy()
            keep = (st >= lo) & (st < hi)
            df = df if keep.all() else df.loc[keep].reset_index(drop=True)
        out[name] = df
    warnings.append("--time-range: only the events that start inside the range were analysed (a GPU op inside "
                    "it may have been launched before it)")
    return out
