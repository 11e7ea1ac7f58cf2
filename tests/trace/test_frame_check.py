"""The suite's fast exact frame comparison (tests/frame_check.py) finds every difference pandas' own finds."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from frame_check import assert_same_frames


def _frame(names=("a", "b", None, "a"), cats=("a", "b"), ints=(1, 2, 3, 4), floats=(0.5, 1.0, 1.5, 2.0)):
    return pd.DataFrame({"name": pd.Categorical(list(names), categories=list(cats)),
                         "n": np.array(ints, dtype=np.int64),
                         "x": np.array(floats, dtype=np.float64),
                         "id": pd.array([1, None, 3, 4], dtype="Int64")})


def test_equal_frames_pass_both_ways():
    assert_same_frames(_frame(), _frame())
    assert_same_frames(_frame(), _frame(), categories="values")
    empty = _frame().iloc[:0]
    assert_same_frames(empty, empty.copy())


@pytest.mark.parametrize("other", [
    _frame(names=("a", "a", None, "a")),         # one value
    _frame(names=("a", "b", "a", "a")),          # a NULL filled
    _frame(cats=("b", "a")),                     # same values, categories in another order
    _frame(cats=("a", "b", "c")),                # an unused category more
    _frame(ints=(1, 2, 3, 5)),                   # an integer
    _frame(floats=(0.5, 1.0, 1.5, 2.0 + 1e-12)),  # a float, below pandas' default tolerance
    _frame().astype({"n": np.int32}),            # a dtype
    _frame()[["n", "name", "x", "id"]],          # the column order
    _frame().set_axis([0, 1, 2, 5]),             # the index
    _frame().assign(name=lambda f: f["name"].astype(object)),  # categorical on one side only
])
def test_every_difference_is_found(other):
    with pytest.raises(AssertionError):
        assert_same_frames(_frame(), other)
    with pytest.raises(AssertionError):
        assert_same_frames(other, _frame())


def test_values_mode_compares_what_each_row_shows():
    """Other category lists, or plain objects, showing the same values per row: equal; a value or a
    NULL moved: not."""
    assert_same_frames(_frame(), _frame(cats=("b", "a", "c")), categories="values")
    assert_same_frames(_frame(), _frame().assign(name=lambda f: f["name"].astype(object)), categories="values")
    for other in (_frame(names=("a", "a", None, "a")), _frame(names=("a", "b", "a", "a")),
                  _frame(names=("a", "b", "a", None), cats=("a", "b"))):
        with pytest.raises(AssertionError):
            assert_same_frames(_frame(), other, categories="values")
    with pytest.raises(AssertionError):
        assert_same_frames(_frame(), _frame(ints=(1, 2, 3, 5)), categories="values")
