"""The report's compiled templates kept in the user's cache: the same page cold, warm, without a
cache, and with a damaged, stale or unwritable cache."""

from __future__ import annotations

import os

import pytest

from nsysan.report import html as html_mod
from nsysan.report import view


@pytest.fixture()
def fresh_environment(monkeypatch, tmp_path):
    """html.environment() rebuilt with the user cache in tmp_path (and rebuilt again afterwards)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    html_mod.environment.cache_clear()
    yield tmp_path / "xdg" / "nsysan" / "templates"
    html_mod.environment.cache_clear()


def _page(a) -> str:
    html_mod.environment.cache_clear()
    return html_mod.render(view.build(a, generated_by="test"))


def test_cached_templates_give_the_same_page(analysis, fresh_environment, monkeypatch):
    a = analysis("ladder_baseline")
    cold = _page(a)
    files = sorted(fresh_environment.glob("*.jinja"))
    assert len(files) >= 2  # report.html.j2 and the macros it imports
    stamps = [f.stat().st_mtime_ns for f in files]
    warm = _page(a)
    assert warm == cold
    assert [f.stat().st_mtime_ns for f in files] == stamps  # read, not written again
    monkeypatch.setattr(html_mod, "template_cache", lambda: None)
    assert _page(a) == cold  # no cache at all
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(fresh_environment.parents[1]))
    for f in files:  # damaged: a cut file, garbage after a valid header
        data = f.read_bytes()
        f.write_bytes(data[: len(data) // 2])
    assert _page(a) == cold
    assert [f.read_bytes() for f in files] != [b""] * len(files)
    for f in files:
        head = f.read_bytes().split(b"\n", 4)
        f.write_bytes(b"\n".join(head[:4]) + b"\n" + b"\x00garbage" * 10)
    assert _page(a) == cold


def test_a_template_cache_for_other_source_is_not_used(analysis, fresh_environment):
    a = analysis("ladder_baseline")
    cold = _page(a)
    for f in fresh_environment.glob("*.jinja"):  # the source's hash in the header no longer matches
        lines = f.read_bytes().split(b"\n", 4)
        lines[3] = b"0" * 64
        f.write_bytes(b"\n".join(lines))
    assert _page(a) == cold


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_an_unwritable_template_cache_is_ignored(analysis, fresh_environment):
    fresh_environment.mkdir(parents=True)
    fresh_environment.chmod(0o500)
    try:
        assert _page(analysis("ladder_baseline")) == _page(analysis("ladder_baseline"))
    finally:
        fresh_environment.chmod(0o700)


def test_a_template_cache_that_cannot_be_created_is_ignored(analysis, fresh_environment):
    fresh_environment.parent.mkdir(parents=True)
    fresh_environment.write_text("a file where the folder should be")
    a = analysis("ladder_baseline")
    page = _page(a)
    assert fresh_environment.read_text() == "a file where the folder should be"
    html_mod.environment.cache_clear()
    assert page == html_mod.environment().get_template("report.html.j2").render(
        r=view.build(a, generated_by="test"))
