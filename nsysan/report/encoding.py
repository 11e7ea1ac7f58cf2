"""Unsigned LEB128 varints: the columns of the timeline's lanes (``timeline``) and of the GPU-metric
lanes (``metrics_view``), read back by ``templates/static/timeline.js`` and ``metrics_lane.js``."""

from __future__ import annotations

import numpy as np

_VARINT_LIMITS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)  # 1 more byte from each


def varint(values: np.ndarray) -> bytes:
    """Unsigned LEB128 of each value (7 bits a byte, low first, high bit = more follows)."""
    v = np.asarray(values, dtype=np.int64)
    if len(v) and int(v.min()) < 0:
        raise ValueError("varint: negative value")
    if len(v) == 0 or int(v.max()) < 0x80:  # one byte each (kinds, depths, most name ids)
        return v.astype(np.uint8).tobytes()
    v = v.astype(np.uint64)
    nb = np.searchsorted(_VARINT_LIMITS, v, side="right").astype(np.int64) + 1
    off = np.cumsum(nb) - nb
    out = np.zeros(int(nb.sum()), dtype=np.uint8)
    for k in range(int(nb.max()) if len(v) else 0):
        m = nb > k
        b = ((v[m] >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
        out[off[m] + k] = b | np.where(nb[m] > k + 1, 0x80, 0).astype(np.uint8)
    return out.tobytes()
