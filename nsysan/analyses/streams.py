"""What each GPU stream mostly does, by GPU time: compute, communication (NCCL), copies of each
direction, memsets. The report's timeline names its stream lanes with it."""

from __future__ import annotations

import numpy as np
import pandas as pd

from nsysan.analyses.frames import distinct

ALL = slice(None)  # every op


def stream_role(role: pd.Series, kind: pd.Series, dur: np.ndarray, comm_names: list[str],
                rows: np.ndarray | slice = ALL) -> str:
    """What a stream mostly does, by GPU time: ``compute``, ``NCCL`` (or ``communication`` for other
    libraries' collectives), ``copies H2D`` / ``D2H`` / ``D2D`` ..., ``memsets``. ``role`` and ``kind``
    are the ops' ``role`` and (memcpy) ``kind`` columns, ``dur`` their durations, ``comm_names`` the
    stream's communication kernels' names; ``rows``: the stream's ops among them (positions,
    ascending), all by default."""
    # GPU time per (role, kind) present, rows with a missing key left out (as a group-by drops them),
    # on codes (a categorical's own: no text per op); the label does not depend on the codes' order.
    # A stream's ops are a mask over the columns and each (role, kind) sum a masked sum: no copy of
    # the stream's durations or a key per op (a stream of a million kernels: 47 -> 3 MiB)
    r_codes, r_vals = _factor(role)
    k_codes, k_vals = _factor(kind)
    d = np.asarray(dur, dtype=np.int64)
    ok = r_codes >= 0
    ok &= k_codes >= 0
    if not isinstance(rows, slice) and len(rows) != len(d):
        sel = np.zeros(len(d), dtype=bool)
        sel[rows] = True
        ok &= sel
        del sel
    if not ok.any():
        return "empty"
    per = []
    for r in distinct(r_codes[ok]).tolist():
        on_r = ok & (r_codes == r)
        for k in distinct(k_codes[on_r]).tolist():
            m = on_r & (k_codes == k)
            per.append(((r_vals[r], k_vals[k]), int(np.sum(d, where=m, dtype=np.int64))))  # exact int64
    return role_label(per, comm_names)


def _factor(col: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Codes (-1 for a missing value) and the value of each code: a categorical's own codes and
    categories, else ``pd.factorize``'s."""
    arr = col.array
    if isinstance(arr, pd.Categorical):
        return np.asarray(arr.codes), np.asarray(arr.categories, dtype=object)
    return pd.factorize(np.asarray(arr))


def role_label(per: list[tuple[tuple[object, object], int]], comm_names: list[str]) -> str:
    """``stream_role``'s label from the GPU time per (role, kind): the roles with a quarter of the
    stream's time or more, the largest first."""
    totals: dict[str, int] = {}
    for (r, k), d in per:
        lab = {"compute": "compute", "communication": "communication", "memset": "memsets"}.get(
            str(r), "copies " + {"HtoD": "H2D", "DtoH": "D2H", "DtoD": "D2D", "HtoH": "H2H", "PtoP": "P2P"}.get(str(k), str(k)))
        totals[lab] = totals.get(lab, 0) + int(d)
    nccl = any(n.lower().startswith("nccl") for n in comm_names)
    whole = sum(totals.values()) or 1
    # e.g. "copies H2D + compute"
    ranked = sorted(totals, key=lambda x: (-totals[x], x))
    shown = [r for r in ranked if totals[r] >= 0.25 * whole] or ranked[:1]
    return " + ".join("NCCL" if r == "communication" and nccl else r for r in shown)
