"""The report's deflate: standard zlib streams from either backend."""

from __future__ import annotations

import numpy as np

from nsysan.trace import direct


def test_report_streams_are_standard_zlib_from_either_backend(monkeypatch):
    """The report's deflate (ISA-L where installed, else the standard library) writes zlib streams
    that the standard library reads back to the same bytes; without isal it falls back to zlib."""
    import importlib
    import sys
    import zlib

    from nsysan.report import deflate

    rng = np.random.default_rng(3)
    raws = [b"", b"x", bytes(rng.integers(0, 4, size=200_000, dtype=np.uint8)),
            direct._btree.varints([rng.integers(0, 10**6, size=50_000)]) if hasattr(direct._btree, "varints")
            else bytes(range(256)) * 100]
    for raw in raws:
        assert zlib.decompress(deflate.compress(raw)) == raw
    monkeypatch.setitem(sys.modules, "isal", None)  # an import of it fails, as where it is not installed
    try:
        plain = importlib.reload(deflate)
        assert plain.BACKEND == "zlib"
        for raw in raws:
            assert plain.compress(raw) == zlib.compress(raw, 1)
    finally:
        monkeypatch.delitem(sys.modules, "isal")
        importlib.reload(deflate)
