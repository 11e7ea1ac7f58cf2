"""``iterations.choice``: the GPU coverage of one thread's ops."""

from __future__ import annotations

import numpy as np
import pytest

from nsysan.analyses import intervals as iv
from nsysan.analyses import nvtx


@pytest.mark.parametrize("name", ["decode_eager", "launch_eager", "ladder_baseline"])
def test_gpu_coverage_of_one_thread_equals_its_rows_by_position(analysis, name):
    """The iteration model's GPU coverage with one thread's owned ops as every row (a slice, no
    positions; a sort only when the calls are out of order) equals it with the rows' positions."""
    from nsysan.analyses.iterations import choice as I

    a = analysis(name)
    owned = nvtx.owned_ops(a.trace, a.ops)
    assert len(owned) and owned["tid"].nunique() == 1 and owned["pid"].nunique() == 1
    rg = a.nvtx_ranges
    inst = rg.loc[rg["name"].astype(str) == a.iterations.range_name]
    assert len(inst) >= 3
    api_all = owned["api_start_ns"].to_numpy()
    st_all, en_all = owned["start_ns"].to_numpy(), owned["end_ns"].to_numpy()
    dur_all = en_all - st_all
    key = (int(owned["pid"].iloc[0]), int(owned["tid"].iloc[0]))
    inst_args = (inst["pid"].to_numpy(), inst["tid"].to_numpy(), inst["start_ns"].to_numpy(), inst["end_ns"].to_numpy())

    def coverage(rows):
        by_thread = {key: rows}
        return I._coverage(*inst_args, I._launch_sums(by_thread, api_all, st_all, en_all), int(dur_all.sum()),
                           by_thread)

    whole = coverage(slice(None))
    assert whole == coverage(np.arange(len(owned)))
    assert 0 < whole <= 1
    shuffled = np.random.default_rng(0).permutation(len(owned))  # out of order: sorted first
    assert whole == coverage(shuffled)
    # and by definition: the GPU time of the ops whose API call starts inside an instance's union
    us, ue = iv.merge(inst["start_ns"].to_numpy(), inst["end_ns"].to_numpy())
    pos = np.searchsorted(ue, api_all, side="left")
    inside = (pos < len(us)) & (us[np.minimum(pos, len(us) - 1)] <= api_all)
    assert whole == int(dur_all[inside].sum()) / int(dur_all.sum())
