"""The loader's columns without pyarrow (``trace/columns.py``, ``_startup.py``).

Truth: pyarrow itself. A column read from sqlite3's Python values must have the type
``pyarrow.array`` infers from the same values (it typed them before), the same values and the same
NULLs, and a column pyarrow refuses must be refused; a ``StringIds`` table must give the same sorted
categories as Arrow's dictionary encoding and sort. And ``nsysan analyze`` must not load pyarrow for
a trace whose tables are all small, with the same JSON as a process where pandas has pyarrow.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from nsysan.trace import columns
from nsysan.trace.strings import Strings

KIND_OF = {"int64": "int", "double": "float", "string": "str", "binary": "bytes", "null": "null"}

values = st.one_of(
    st.none(),
    st.integers(min_value=-(1 << 70), max_value=1 << 70),
    st.floats(allow_nan=False),
    st.text(max_size=5),
    st.binary(max_size=3),
)
homogeneous = st.sampled_from([
    st.one_of(st.none(), st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)),
    st.one_of(st.none(), st.integers(min_value=-(1 << 40), max_value=1 << 40), st.floats(allow_nan=False)),
    st.one_of(st.none(), st.text(max_size=5)),
    st.one_of(st.none(), st.binary(max_size=3)),
    st.none(),
]).flatmap(lambda s: st.lists(s, max_size=12))


def _arrow(vals: list) -> pa.Array | None:
    try:
        return pa.array(vals)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return None


def _same(a: float | str | bytes | None, b: float | str | bytes | None) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


@given(st.one_of(homogeneous, st.lists(values, max_size=12)))
@example([1, 2.5, None])
@example([1 << 63])
@example([1 << 70, 1.5])
@example([1, "a"])
@example([b"x", None])
@example([None, None])
@example([])
@example(["", b""])  # str and bytes: binary, as Arrow types it (found by the suite's derandomized run)
def test_from_values_types_as_pyarrow_does(vals):
    want = _arrow(vals)
    got = columns.from_values(vals)
    if want is None:
        assert got is None, vals
        return
    assert got is not None, vals
    assert got.kind == KIND_OF[str(want.type)], (vals, want.type)
    assert len(got) == len(want) and got.null_count == want.null_count
    assert all(_same(x, y) for x, y in zip(got.to_list(), want.to_pylist())), vals
    # and through the ADBC boundary: Arrow's column as Columns is the same column
    back = columns.from_arrow(pa.table({"c": want})).column("c")
    assert back.kind == got.kind and all(_same(x, y) for x, y in zip(back.to_list(), got.to_list()))


@given(st.lists(st.tuples(st.integers(min_value=0, max_value=50), st.one_of(st.none(), st.text(max_size=4))),
                max_size=30))
@example([(0, "b"), (1, "a"), (2, "\u00e9"), (3, "z"), (4, "\U0001f600"), (5, None), (6, "")])
def test_string_ids_sorted_as_arrow_sorted_them(rows):
    """Categories: the distinct values in Arrow's order (``dictionary_encode`` then
    ``array_sort_indices``, as the loader computed them before); each id names its own value."""
    by_id = dict(rows)  # the last row of an id wins in the direct-address table, as before
    s = Strings(columns.from_rows(["id", "value"], rows)[0])
    vals = pa.array(["" if v is None else v for _, v in rows], type=pa.string())
    enc = pc.dictionary_encode(vals)
    order = pc.array_sort_indices(enc.dictionary).to_numpy(zero_copy_only=False)
    assert list(s.categories) == enc.dictionary.take(pa.array(order)).to_pylist() if rows else list(s.categories) == []
    if rows:
        ids = np.array(sorted(by_id))
        got = list(s.resolve(ids, prune=False).astype(object))
        assert got == ["" if by_id[i] is None else by_id[i] for i in ids.tolist()]


def test_mixed_column_read_as_text():
    got, mixed = columns.from_rows(["a", "b"], [(1, "x"), (None, 2), (3, b"y")])
    assert mixed == [1]
    assert got.column("a").kind == "int" and got.column("a").to_list() == [1, None, 3]
    assert got.column("b").kind == "str" and got.column("b").to_list() == ["x", "2", "b'y'"]


def test_cli_without_pyarrow_same_json(fixture_dir, tmp_path):
    """A small trace through the command line (pandas imported with pyarrow hidden: nothing loads
    it) and through a process where pandas has pyarrow: the same JSON."""
    trace = fixture_dir / "ladder_baseline.sqlite"
    if not trace.exists():
        pytest.skip("no ladder_baseline fixture")
    env = {**os.environ, "NSYSAN_NO_CACHE": "1"}
    probe = ("import sys, runpy; sys.argv = ['nsysan', 'analyze', sys.argv[1], '--json', sys.argv[2], "
             "'--no-html', '-q', '-f']; {pre}from nsysan.cli import main; rc = main(); "
             "print(rc, sys.modules.get('pyarrow') is not None)")
    plain = subprocess.run([sys.executable, "-c", probe.format(pre=""), str(trace), str(tmp_path / "a.json")],
                           capture_output=True, text=True, env=env, check=True)
    assert plain.stdout.split() == ["0", "False"], plain.stdout + plain.stderr
    with_arrow = subprocess.run([sys.executable, "-c", probe.format(pre="import pyarrow, pandas; "), str(trace),
                                 str(tmp_path / "b.json")], capture_output=True, text=True, env=env, check=True)
    assert with_arrow.stdout.split() == ["0", "True"], with_arrow.stdout + with_arrow.stderr
    a = json.loads((tmp_path / "a.json").read_text())
    b = json.loads((tmp_path / "b.json").read_text())
    assert a == b


@given(st.lists(st.one_of(st.text(alphabet=st.characters(blacklist_characters="\x00"), max_size=6), st.none(),
                          st.integers(-5, 5)), max_size=40))
@example(["b", "a", "\u00e9", "\U0001f600", "", None, 3, "a"])
def test_unique_strings_as_numpy_unique(values):
    """``columns.unique_strings`` gives ``np.unique(np.asarray(values).astype(str), return_inverse=True)``
    (numpy's fixed-width strings drop trailing NULs, which no name has: left out here)."""
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    cats, codes = columns.unique_strings(arr)
    want_cats, want_codes = np.unique(arr.astype(str), return_inverse=True) if len(values) else ([], [])
    assert cats.dtype == object and list(cats) == [str(c) for c in want_cats]
    assert list(codes) == list(np.asarray(want_codes).reshape(-1))


def _nesting_by_numpy_scalars(r):
    """NVTX nesting as it was computed before (numpy int64 scalars, which wrap): the definition."""
    n = len(r)
    depth, parent, child_sum = np.zeros(n, np.int64), np.full(n, -1, np.int64), np.zeros(n, np.int64)
    starts, ends = r["start_ns"].to_numpy(), r["end_ns"].to_numpy()
    pushpop = (r["style"] == "PushPop").to_numpy()
    with np.errstate(over="ignore"):
        for idx in r.groupby(["pid", "tid"], sort=False).indices.values():
            stack = []
            for i in idx:
                if not pushpop[i]:
                    continue
                while stack and ends[stack[-1]] <= starts[i]:
                    stack.pop()
                if stack and ends[i] <= ends[stack[-1]]:
                    parent[i] = stack[-1]
                    depth[i] = len(stack)
                    child_sum[stack[-1]] += ends[i] - starts[i]
                stack.append(i)
        return depth, parent, (ends - starts) - child_sum


@given(st.lists(st.tuples(st.integers(0, 1), st.integers(-(1 << 62), 1 << 62), st.integers(0, (1 << 62) - 1),
                          st.booleans()), max_size=30))
@example([(0, -(1 << 62), 1 << 62, True), (0, -(1 << 62) + 1, (1 << 62) - 2, True),
          (0, 0, (1 << 62) - 5, True), (0, 1, (1 << 62) - 9, True)])
def test_nvtx_nesting_in_python_ints_as_in_numpy(rows):
    """The nesting loop over Python lists gives what it gave over numpy scalars, huge times included
    (child sums beyond int64 wrap as numpy's did)."""
    import pandas as pd

    from nsysan.analyses.nvtx import _nesting

    r = pd.DataFrame({"pid": [1] * len(rows), "tid": [t for t, *_ in rows],
                      "start_ns": np.array([s for _, s, _, _ in rows], dtype=np.int64),
                      "end_ns": np.array([s + d for _, s, d, _ in rows], dtype=np.int64),
                      "style": ["PushPop" if p else "StartEnd" for *_, p in rows]})
    r = r.sort_values(["start_ns", "end_ns"], ascending=[True, False], kind="stable").reset_index(drop=True)
    for got, want in zip(_nesting(r), _nesting_by_numpy_scalars(r)):
        assert list(got) == list(want)
