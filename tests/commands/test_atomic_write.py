"""``nsysan._atomic.replacing``, the one atomic-write helper (outputs, results cache, bundled
examples): the new content replaces the file only when the write finished; on an error the old file
is unchanged and no temp file is left; permissions as a new file's (0666 less the umask), or 0600."""

from __future__ import annotations

import os
import stat

import pytest

from nsysan._atomic import replacing


def _mode(p) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


def test_a_replaced_file_keeps_its_permissions_and_a_new_one_follows_the_umask(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old")
    os.chmod(target, 0o600)
    fresh = tmp_path / "new.json"
    umask = os.umask(0o022)
    try:
        with replacing(target, durable=True) as f:
            f.write(b"new")
        with replacing(fresh, durable=True) as f:
            f.write(b"fresh")
    finally:
        os.umask(umask)
    assert target.read_bytes() == b"new"
    assert _mode(target) == 0o600  # issue 40: a replaced report keeps the old file's permission bits
    assert _mode(fresh) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.json", "out.json"]


def test_private_files_stay_private(tmp_path):
    target = tmp_path / "k.json"
    with replacing(target, prefix=".tmp-", suffix=".json", shared=False) as f:
        f.write(b"{}")
    assert target.read_bytes() == b"{}" and _mode(target) == 0o600


@pytest.mark.parametrize("error", [OSError, UnicodeEncodeError, KeyboardInterrupt])
def test_an_error_leaves_the_old_file_and_no_temp(tmp_path, error):
    target = tmp_path / "report.html"
    target.write_bytes(b"old")

    def fail():
        if error is UnicodeEncodeError:
            "\udcff".encode("utf-8")
        raise error("disk full")

    with pytest.raises(error):
        with replacing(target) as f:
            f.write(b"half of the new")
            fail()
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]
