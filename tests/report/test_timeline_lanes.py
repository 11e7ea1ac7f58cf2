"""The report's timeline lanes: read through their rows as copies give, and decoded back to
the columns they encode."""

from __future__ import annotations

import numpy as np
import pytest

from nsysan.report import timeline


def test_the_timeline_lanes_decode_to_the_encoded_columns(analysis):
    """Every lane's text is base64 of a zlib stream of its varint columns, whichever backend wrote
    it: decoded, the first column's start deltas sum to the last op's start (relative to t0)."""
    import base64
    import zlib

    a = analysis("launch_eager")
    tl = timeline.build_timeline(a)
    for lane in tl["lanes"]:
        raw = zlib.decompress(base64.b64decode(lane["data"]))
        vals, cur, shift = [], 0, 0
        for byte in raw:
            cur |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                vals.append(cur)
                cur, shift = 0, 0
        n = lane["n"]
        assert len(vals) == 5 * n
        if n and lane["group"] == "api":
            api = a.trace.cuda_api
            assert sum(vals[:n]) == int(api["start_ns"].max()) - tl["t0"]


def test_the_timeline_reads_a_big_lane_through_its_rows(analysis, monkeypatch):
    """The stream of all but a handful of a trace's kernels is read through its positions (no copies
    of its times), and the report's lanes are what copies give."""
    a = analysis("launch_eager")
    ops = a.ops
    keys = ops["stream_id"].to_numpy()
    if len(np.unique(keys)) < 2:
        pytest.skip("one stream: its lane is the columns themselves")
    used = []
    real = timeline.encode_lane_rows
    monkeypatch.setattr(timeline, "encode_lane_rows", lambda *x: used.append(1) or real(*x))
    through = timeline._build_timeline(a)
    monkeypatch.setattr(timeline, "encode_lane_rows", lambda *x: None)
    copied = timeline._build_timeline(a)
    assert used and through == copied
