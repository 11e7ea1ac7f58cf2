"""The HTML report in a real browser: Debian's headless Chromium driven by Playwright.

Skipped cleanly when either is missing (``apt-get install chromium``; ``pip install playwright`` --
no browser download is needed, the system Chromium is used through ``executable_path``).
Screenshots go to ``$NSYSAN_SCREENSHOTS`` when set (else the test's temp folder).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nsysan.analysis import Params, analyze
from nsysan.report import html, view

from browser_kit import SKIP, shots_dir

pytestmark = SKIP


def open_report(browser, path: Path):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    dialogs: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.on("request", lambda r: requests.append(r.url) if not r.url.startswith(("file:", "data:")) else None)
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    return page, errors, dialogs, requests


@pytest.mark.parametrize("name", ["ladder_baseline", "launch_eager", "ladder_overlap"])
def test_report_works_in_chromium(name, browser, analysis, tmp_path):
    out = tmp_path / f"{name}.html"
    out.write_text(html.render(view.build(analysis(name))), encoding="utf-8")
    page, errors, dialogs, requests = open_report(browser, out)
    shots = shots_dir(tmp_path)
    page.screenshot(path=str(shots / f"{name}-top.png"))
    assert errors == [] and dialogs == [] and requests == []  # offline: nothing fetched
    # the timeline draws
    assert page.evaluate("window.nsysanTimeline.lanes.length") > 0
    canvas = page.locator("#tl")
    canvas.scroll_into_view_if_needed()
    page.screenshot(path=str(shots / f"{name}-timeline.png"), full_page=False)
    box = canvas.bounding_box()
    # zoom in with the wheel: the visible window shrinks
    span0 = page.evaluate("window.nsysanTimeline.view.b - window.nsysanTimeline.view.a")
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + 10)
    for _ in range(4):
        page.mouse.wheel(0, -200)
    page.wait_for_timeout(100)
    span1 = page.evaluate("window.nsysanTimeline.view.b - window.nsysanTimeline.view.a")
    assert span1 < span0 * 0.6
    page.mouse.dblclick(box["x"] + box["width"] * 0.6, box["y"] + 10)  # reset
    # tables sort when a header is clicked
    table = page.locator("#sec-kernels table.sortable")
    assert table.locator("tbody tr").count() > 1
    col = table.locator("th").nth(0)  # kernel name: distinct values
    col.click()
    first_asc = table.locator("tbody tr").first.inner_text()
    assert "asc" in (col.get_attribute("class") or "")
    col.click()
    assert "desc" in (col.get_attribute("class") or "")
    assert table.locator("tbody tr").first.inner_text() != first_asc
    assert errors == []
    page.close()


def test_hostile_strings_show_as_text_and_run_nothing(browser, tmp_path):
    from test_report import HOSTILE, hostile_trace

    a = analyze(hostile_trace(), Params(min_gap_ns=100))
    out = tmp_path / "hostile.html"
    out.write_text(html.render(view.build(a)), encoding="utf-8")
    page, errors, dialogs, _ = open_report(browser, out)
    page.wait_for_timeout(200)
    assert dialogs == [] and errors == []
    assert HOSTILE in page.locator("body").inner_text()
    assert page.evaluate("document.querySelectorAll('script').length") == 3  # the JSON island, report.js, timeline.js
    page.screenshot(path=str(shots_dir(tmp_path) / "hostile.png"), full_page=True)
    page.close()


def test_tables_render_without_javascript(browser, tmp_path, analysis):
    ctx = browser.new_context(java_script_enabled=False)
    page = ctx.new_page()
    out = tmp_path / "nojs.html"
    out.write_text(html.render(view.build(analysis("ladder_baseline"))), encoding="utf-8")
    page.goto(out.as_uri())
    assert page.locator("table.sortable tbody tr").count() > 20
    assert "Findings" in page.locator("body").inner_text()
    ctx.close()
