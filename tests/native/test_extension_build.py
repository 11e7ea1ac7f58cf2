"""The C extension: built where a compiler exists, and a stale build never used."""

from __future__ import annotations

import numpy as np
import pytest

from nsysan.trace import direct


def test_the_c_extension_was_built_where_a_compiler_exists():
    """The fast paths fall back silently when ``_btree.c`` fails to compile (the install only warns),
    so a broken C source would pass every other test: where a C compiler and Python's headers are
    present, the extension must be there."""
    import shutil
    import sysconfig
    from pathlib import Path

    if not (shutil.which("cc") or shutil.which("gcc")) or not (Path(sysconfig.get_paths()["include"]) / "Python.h").exists():
        pytest.skip("no C compiler or Python headers: nsysan reads through SQLite")
    from nsysan import _native

    assert _native.loaded() is not None, "the C source did not compile"


def test_a_stale_build_of_the_extension_is_not_used(monkeypatch):
    """The C passes are used only from a build of the source this code goes with: a module of
    another VERSION (an editable install not rebuilt after a pull) gives None, so the numpy paths
    run, with the same results."""
    import types

    from nsysan import _native
    from nsysan.analyses import intervals as iv

    if direct._btree is not None:
        assert direct._btree.VERSION == direct.VERSION
    stale = types.SimpleNamespace(**{k: getattr(direct._btree, k) for k in dir(direct._btree) if not k.startswith("_")}) \
        if direct._btree is not None else types.SimpleNamespace()
    stale.VERSION = direct.VERSION - 1
    monkeypatch.setattr(_native, "_btree", stale)
    assert direct.c_pass("lane") is None and direct.c_pass("clipped_sums") is None and not direct.available()
    hay = np.arange(0, 50_000, 3, dtype=np.int64)
    nee = np.arange(0, 50_000, 7, dtype=np.int64)
    assert iv.search(hay, nee).tolist() == np.searchsorted(hay, nee).tolist()
