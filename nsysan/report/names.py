"""Short forms of long names (templated C++ kernels) that never make two names look alike: the
diff table's rows, the terminal's."""

from __future__ import annotations

ELLIPSIS = "\u2026"


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def short_names(names: list[str], width: int = 70) -> dict[str, str]:
    """A short form of each name that no other name in ``names`` shares: names up to ``width``
    characters stay whole; a longer one keeps its start, its end, and the part around the first
    character where it differs from its nearest names (templated C++ kernels share long prefixes),
    with an ellipsis for each cut. Where two short forms would still look the same, both names stay
    whole: two different names never look alike."""
    width = max(int(width), 24)
    uniq = sorted(set(names))
    out: dict[str, str] = {}
    head, tail, ctx, win = width // 3, width // 4, 8, width // 3
    for i, n in enumerate(uniq):
        if len(n) <= width:
            out[n] = n
            continue
        diffs = [_common_prefix(n, uniq[j]) for j in (i - 1, i + 1) if 0 <= j < len(uniq)]
        keep = [(0, head), (len(n) - tail, len(n))] + [(max(0, d - ctx), d - ctx + win) for d in diffs if d >= head]
        keep.sort()
        merged: list[list[int]] = []
        for s, e in keep:
            if merged and s <= merged[-1][1] + 1:  # overlapping, touching, or one character apart
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        out[n] = ELLIPSIS.join(n[s:min(e, len(n))] for s, e in merged)
    while True:  # any clash: those names stay whole (whole names are unique)
        seen: dict[str, list[str]] = {}
        for n, s in out.items():
            seen.setdefault(s, []).append(n)
        clash = [n for group in seen.values() if len(group) > 1 for n in group if out[n] != n]
        if not clash:
            return out
        for n in clash:
            out[n] = n
