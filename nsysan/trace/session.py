"""What an export says of its capture: the capture's settings, the session's extent on the event
clock and its UTC offset, the metadata rows and the nsys version (inferred where not written), and
the capture window the trace reports."""

from __future__ import annotations

from typing import Any

import pandas as pd

from nsysan.trace import schema as S
from nsysan.trace.db import Database
from nsysan.trace.model import INTERVAL_TABLES


def _session(db: Database, meta: dict[str, str]) -> tuple[tuple[tuple[str, str], ...], tuple[int, int] | None,
                                                           int | None]:
    """The capture's settings (``META_DATA_CAPTURE``), the session's extent on the event clock and
    the offset from it to UTC epoch ns, each where the export has it."""
    caps = db.caps
    capture: tuple[tuple[str, str], ...] = ()
    if caps.has("META_DATA_CAPTURE", "name"):
        capture = tuple((str(k), str(v)) for k, v in db.rows('SELECT name, value FROM "META_DATA_CAPTURE"'))
    session = None
    if caps.has("ANALYSIS_DETAILS", "duration"):
        # only ``duration`` is on the event clock (startTime/stopTime are not, in most exports):
        # events lie in [0, duration], shifted by EXPORT_CONFIG_TIME_SHIFT when normalised
        rows = db.rows('SELECT max(duration) FROM "ANALYSIS_DETAILS"')
        shift = _int_or_none(meta.get("EXPORT_CONFIG_TIME_SHIFT")) or 0
        dur = _int_or_none(rows[0][0]) if rows else None
        if dur is not None and dur > 0:
            session = (shift, shift + dur)
    epoch_offset = None
    if caps.has("TARGET_INFO_SESSION_START_TIME", "utcEpochNs"):
        rows = db.rows('SELECT min(utcEpochNs) FROM "TARGET_INFO_SESSION_START_TIME"')
        utc = _int_or_none(rows[0][0]) if rows else None
        if utc is not None:
            epoch_offset = utc - (_int_or_none(meta.get("EXPORT_CONFIG_TIME_SHIFT")) or 0)
    return capture, session, epoch_offset


def _int_or_none(v: Any) -> int | None:
    try:
        i = int(v)
    except (TypeError, ValueError, OverflowError):
        return None
    return i if -(2 ** 63) <= i < 2 ** 63 else None


def _capture_window(frames: dict[str, pd.DataFrame], session: tuple[int, int] | None,
                    warnings: list[str]) -> tuple[int, int] | None:
    """The capture window, on the event clock: the session ``[shift, shift + duration]`` when every
    event lies inside it, else the extent of the events themselves (first start to last end over the
    GPU, API, OS runtime and NVTX tables). Events are never clipped away."""
    starts: list[int] = []
    ends: list[int] = []
    for n, f in frames.items():
        if n not in INTERVAL_TABLES + ("nvtx",) or not len(f):
            continue
        starts.append(int(f["start_ns"].min()))
        e = f["end_ns"].max()
        ends.append(int(e) if pd.notna(e) else int(f["start_ns"].max()))
    if not starts:
        return session
    extent = (min(starts), max(ends))
    if session is None:
        return extent
    if session[0] <= extent[0] and extent[1] <= session[1]:
        return session
    warnings.append("the session window (ANALYSIS_DETAILS.duration) does not contain every event: "
                    "the capture window is the extent of the events")
    return extent


def _meta_rows(db: Database) -> tuple[dict[str, str], str]:
    for table in S.META_TABLES:
        if db.caps.has(table, "name") and db.caps.has(table, "value"):
            rows = db.rows(f'SELECT name, value FROM "{table}"')
            return {str(k): str(v) for k, v in rows}, table
    return {}, "inferred"


def _infer_version(caps: object) -> str | None:
    c = caps  # fingerprints from NSYS-SCHEMA.md §1, for exports without a metadata table
    assert hasattr(c, "has")
    if c.has("TARGET_INFO_CUDA_GPU") or c.has("TARGET_INFO_GPU", "deviceId"):
        return "2020.x (inferred)"
    if c.has("CUPTI_ACTIVITY_KIND_KERNEL") and not c.has("CUPTI_ACTIVITY_KIND_KERNEL", "mangledName"):
        return "2021.x or earlier (inferred)"
    return "2021.x (inferred)"
