"""Small tables read through sqlite3 give the frames ADBC gives, on every fixture."""

from __future__ import annotations

import pytest
from conftest import FIXTURE_NAMES, opened
from frame_check import assert_same_frames
from test_direct_reader import fixture_read

from nsysan.trace import load as load_mod


@pytest.mark.parametrize("name", FIXTURE_NAMES)
@pytest.mark.parametrize("all_columns", [False, True])
def test_small_tables_through_sqlite3_equal_adbc(fixture_dir, monkeypatch, all_columns, name):
    """Every fixture's frames, small tables read through sqlite3 (the default) and through ADBC
    (every table counted as big)."""
    path = fixture_dir / f"{name}.sqlite"
    monkeypatch.setattr(load_mod, "SMALL_ROWS", 0)
    through_adbc = load_mod.open_trace(path, all_columns=all_columns)
    monkeypatch.undo()
    # the default read (the run's shared one, ``conftest.opened``, when all_columns is off)
    # (with every column: the read test_direct_reader compares with SQLite's, shared)
    through_sqlite3 = fixture_read(path, last=True)[0] if all_columns else opened(path)
    assert through_adbc.meta == through_sqlite3.meta, name
    for table, df in through_adbc.tables().items():
        other = through_sqlite3.tables()[table]
        assert_same_frames(df, other, obj=f"{name}.{table}")
        assert list(df.dtypes) == list(other.dtypes), (name, table)
