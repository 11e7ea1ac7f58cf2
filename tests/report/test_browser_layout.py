"""The report's layout in a real browser (Debian's Chromium through Playwright): what the first
screen shows, steady-state tables, folded long tables, plots, dark mode, print and a phone's width.

Skipped when Chromium or Playwright is missing, except in CI (NSYSAN_REQUIRE_BROWSER=1), where a
missing browser fails. Screenshots go to ``$NSYSAN_SCREENSHOTS`` when set (CONTRIBUTING.md).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from nsysan.report import html, view
from nsysan.units import fmt_ns

from browser_kit import SKIP, shots_dir

pytestmark = SKIP


@pytest.fixture(scope="module")
def report(analysis, tmp_path_factory):
    a = analysis("ladder_baseline")
    out = tmp_path_factory.mktemp("layout") / "ladder_baseline.html"
    out.write_text(html.render(view.build(a)), encoding="utf-8")
    return a, out


def _page(browser, path: Path, width: int, height: int = 900, scheme: str = "light"):
    ctx = browser.new_context(viewport={"width": width, "height": height}, color_scheme=scheme)
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    return ctx, page, errors


def _luminance(rgb: str) -> float:
    r, g, b = (int(x) for x in rgb[rgb.index("(") + 1:rgb.index(")")].split(",")[:3])
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255


def test_first_screen_shows_the_time_breakdown_and_the_top_fixes(browser, report, tmp_path):
    a, path = report
    ctx, page, errors = _page(browser, path, 1440, 900)
    page.screenshot(path=str(shots_dir(tmp_path) / "first-screen-1440.png"))
    bd = page.locator(".breakdown .bd-bar").first.bounding_box()
    assert bd and bd["y"] + bd["height"] <= 900 and bd["width"] > 300
    fixes = page.locator("#top-fixes ol.fixes li")
    assert fixes.count() == min(5, len(a.findings))
    last = fixes.nth(fixes.count() - 1).bounding_box()
    assert last["y"] + last["height"] <= 900  # every top fix is on the first screen
    for i in range(fixes.count()):
        f = a.findings[i]
        text = fixes.nth(i).inner_text()
        assert f.title in text and f.rule in text and f.severity.name.lower() in text.lower()
        if f.impact_ns > 0:
            assert f"saves {fmt_ns(f.impact_ns)}" in text
        # the link lands on that finding's card
        href = fixes.nth(i).locator("a").get_attribute("href")
        assert f.title in page.locator(href).inner_text()
    assert errors == []
    ctx.close()


def _full_name(td) -> str:
    """A name cell's whole text: a long name is shortened in the cell, whole in its title (on hover)."""
    cut = td.locator("span.cut")
    if cut.count():
        title = cut.get_attribute("title")
        assert td.inner_text().rstrip("…") and title.startswith(td.inner_text().rstrip("…"))
        return title
    return td.inner_text()


def test_tables_default_to_the_steady_state_and_fold(browser, report, fixture_dir, tmp_path):
    a, path = report
    ctx, page, errors = _page(browser, path, 1440)
    w = a.steady
    con = sqlite3.connect(f"file:{fixture_dir / 'ladder_baseline.sqlite'}?mode=ro", uri=True)
    top = con.execute("""SELECT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k
        JOIN StringIds s ON s.id = k.demangledName WHERE k.start >= ? AND k.start < ?
        GROUP BY s.value ORDER BY SUM(k.end - k.start) DESC LIMIT 1""", (w.start_ns, w.end_ns)).fetchone()[0]
    n_names = con.execute("""SELECT COUNT(DISTINCT s.value) FROM CUPTI_ACTIVITY_KIND_KERNEL k
        JOIN StringIds s ON s.id = k.demangledName WHERE k.start >= ? AND k.start < ?""",
                          (w.start_ns, w.end_ns)).fetchone()[0]
    cap_top = con.execute("""SELECT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName
        GROUP BY s.value ORDER BY SUM(k.end - k.start) DESC LIMIT 1""").fetchone()[0]
    con.close()
    assert top != cap_top  # this fixture's warm-up changes the answer
    table = page.locator("#t-kernels")
    assert _full_name(table.locator("tbody tr").first.locator("td").first) == top
    assert "steady state" in page.locator("#sec-kernels h2").inner_text()
    # the whole capture's table is one click away
    alt = page.locator("#sec-kernels details.alt")
    assert not alt.locator("#t-kernels-capture").is_visible()
    alt.locator("summary").click()
    assert _full_name(alt.locator("#t-kernels-capture tbody tr").first.locator("td").first) == cap_top
    # long tables show 15 rows and unfold
    rows = table.locator("tbody tr")
    assert rows.count() == n_names > 15
    visible = page.evaluate("() => [...document.querySelectorAll('#t-kernels tbody tr')].filter(r => r.offsetParent).length")
    assert visible == 15
    button = page.locator("#sec-kernels button.more-rows").first
    assert button.inner_text() == f"Show all {n_names} rows"
    button.click()
    visible = page.evaluate("() => [...document.querySelectorAll('#t-kernels tbody tr')].filter(r => r.offsetParent).length")
    assert visible == n_names
    assert errors == []
    ctx.close()


def test_plots_have_axes_units_legends_and_warmup(browser, report, tmp_path):
    a, path = report
    ctx, page, _ = _page(browser, path, 1440)
    fig = page.locator("#plots figure").nth(1)
    ticks = fig.locator("g.axis text").all_text_contents()
    assert any(t.endswith(" ms") for t in ticks)  # the y axis in time units
    assert "iteration" in " ".join(ticks)  # the x axis label
    assert fig.locator("circle.dot-warm").count() == a.iterations.warmup > 0  # the warm-up shows
    assert "warm-up" in fig.locator(".legend").inner_text()
    util = page.locator("#plots figure").nth(2)
    assert "100%" in util.locator("g.axis text").all_text_contents()
    fig.scroll_into_view_if_needed()
    page.locator("#plots").screenshot(path=str(shots_dir(tmp_path) / "plots.png"))
    ctx.close()


def test_dark_mode_follows_the_system(browser, report, tmp_path):
    _, path = report
    for scheme, dark in (("dark", True), ("light", False)):
        ctx, page, _ = _page(browser, path, 1440, scheme=scheme)
        bg = page.evaluate("getComputedStyle(document.body).backgroundColor")
        fg = page.evaluate("getComputedStyle(document.body).color")
        assert (_luminance(bg) < 0.2) == dark and (_luminance(fg) > 0.7) == dark, (scheme, bg, fg)
        card = page.evaluate("getComputedStyle(document.querySelector('.finding')).backgroundColor")
        assert (_luminance(card) < 0.3) == dark
        # the timeline canvas follows too: its lane label column is painted in the page's colours
        page.locator("#tl").scroll_into_view_if_needed()
        page.wait_for_timeout(300)
        px = page.evaluate("""() => { const c = document.getElementById('tl');
            const d = c.getContext('2d').getImageData(2, Math.round(c.height * 0.6), 1, 1).data;
            return `rgb(${d[0]}, ${d[1]}, ${d[2]})`; }""")
        assert (_luminance(px) < 0.3) == dark, (scheme, px)
        if dark:
            page.screenshot(path=str(shots_dir(tmp_path) / "dark-1440.png"))
        ctx.close()


def test_phone_width_scrolls_tables_sideways_instead_of_crushing_them(browser, report, tmp_path):
    _, path = report
    ctx, page, errors = _page(browser, path, 390, 844)
    page.screenshot(path=str(shots_dir(tmp_path) / "first-screen-390.png"))
    assert page.evaluate("document.documentElement.scrollWidth") <= 390  # the page itself never scrolls sideways
    outside = page.evaluate("""() => [...document.querySelectorAll('body *')].filter(e => {
        const r = e.getBoundingClientRect(); return r.width > 0 && r.right > 391 && !e.closest('.scroll, nav, #tl-wrap'); })
        .map(e => e.tagName + '.' + e.className)""")
    assert outside == []
    name = page.locator("#t-kernels tbody tr").first.locator("td").first.bounding_box()
    assert name["width"] >= 150  # kernel names stay readable, not 2 characters a line
    assert page.evaluate("(() => { const s = document.querySelector('#t-kernels').parentElement; "
                         "return s.classList.contains('scroll') && s.scrollWidth > s.clientWidth; })()")
    height = page.evaluate("document.documentElement.scrollHeight")
    assert height < 60_000, height  # was 215,015 px with crushed columns
    assert errors == []
    ctx.close()


def test_print_shows_every_row_and_column(browser, report, tmp_path):
    _, path = report
    ctx, page, _ = _page(browser, path, 1000)
    page.emulate_media(media="print")
    assert page.evaluate("getComputedStyle(document.querySelector('nav')).display") == "none"
    visible = page.evaluate("() => [...document.querySelectorAll('#t-kernels tbody tr')].filter(r => r.offsetParent).length")
    assert visible == page.locator("#t-kernels tbody tr").count()
    # every column of the widest table fits the printed width
    right = page.evaluate("""() => Math.max(...[...document.querySelectorAll('table.data th')].map(
        th => th.getBoundingClientRect().right))""")
    assert right <= 1000
    pdf = tmp_path / "report.pdf"
    page.pdf(path=str(pdf))
    assert pdf.stat().st_size > 10_000
    if os.environ.get("NSYSAN_SCREENSHOTS"):
        page.screenshot(path=str(shots_dir(tmp_path) / "print.png"), full_page=False)
    ctx.close()


@pytest.mark.parametrize("name", ["ddp_straggler", "fsdp"])
def test_phone_width_holds_on_a_multi_rank_report(browser, analysis, fixture_dir, tmp_path, name):
    """The ranks panel's table (13 columns) scrolls inside its own box: it made a 390 px page 755 px wide."""
    con = sqlite3.connect(f"file:{fixture_dir / f'{name}.sqlite'}?mode=ro", uri=True)
    ranks = con.execute("""SELECT COUNT(DISTINCT k.globalPid) FROM CUPTI_ACTIVITY_KIND_KERNEL k
        JOIN StringIds s ON s.id = k.shortName WHERE s.value LIKE 'nccl%'""").fetchone()[0]
    con.close()
    assert ranks > 1  # processes with communication kernels: the report has a ranks panel
    path = tmp_path / f"{name}.html"
    path.write_text(html.render(view.build(analysis(name))), encoding="utf-8")
    ctx, page, errors = _page(browser, path, 390, 844)
    rows = page.locator("#ranks-panel table tbody tr")
    assert rows.count() == ranks
    page.locator("#ranks-panel").scroll_into_view_if_needed()
    page.screenshot(path=str(shots_dir(tmp_path) / f"ranks-390-{name}.png"))
    assert page.evaluate("document.documentElement.scrollWidth") <= 390  # was 816 (ddp_straggler), 809 (fsdp)
    outside = page.evaluate("""() => [...document.querySelectorAll('body *')].filter(e => {
        const r = e.getBoundingClientRect();
        return r.width > 0 && r.right > 391 && !e.closest('.scroll, nav, #tl-wrap'); })
        .map(e => e.tagName + '.' + e.className)""")
    assert outside == []
    assert page.evaluate("(() => { const s = document.querySelector('#ranks-panel table').parentElement; "
                         "return s.classList.contains('scroll') && s.scrollWidth > s.clientWidth; })()")
    assert errors == []
    ctx.close()
