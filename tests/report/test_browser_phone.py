"""The report on a phone (390 px, touch) and the memory lane, in a real browser (issue 51): each kernel
bar's value beside its bar, the bars on one scale; short table words unbroken; the timeline's lane
labels a third of the width at most, its axis labels inside the canvas and apart; a touch hint and
touch panning; the memory lane says when it is drawn on a zoomed scale.

Skipped when Chromium or Playwright is missing, except in CI (NSYSAN_REQUIRE_BROWSER=1)."""

from __future__ import annotations

from pathlib import Path

import pytest
from browser_kit import SKIP, shots_dir
from conftest import FIXTURE_NAMES

from nsysan.report import html, view

pytestmark = SKIP

# every fillText of the timeline's axis row (y = 12), with its width: the axis labels as drawn
RECORD_AXIS = """
(function () {
  window.__axis = [];
  var f = CanvasRenderingContext2D.prototype.fillText;
  CanvasRenderingContext2D.prototype.fillText = function (t, x, y) {
    if (y === 12 && this.canvas.id === "tl") window.__axis.push([String(t), x, this.measureText(t).width]);
    return f.apply(this, arguments);
  };
})();
"""


@pytest.fixture(scope="module")
def pages(analysis, tmp_path_factory):
    d = tmp_path_factory.mktemp("phone")
    out = {}
    for name in [n for n in ("ladder_baseline", "mem_growth") if n in FIXTURE_NAMES]:
        out[name] = d / f"{name}.html"
        out[name].write_text(html.render(view.build(analysis(name))), encoding="utf-8")
    return out


def _open(browser, path: Path, width: int, touch: bool):
    ctx = browser.new_context(viewport={"width": width, "height": 900}, is_mobile=touch, has_touch=touch)
    ctx.add_init_script(RECORD_AXIS)
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    assert page.evaluate("window.nsysanTimeline.ready") is True
    return ctx, page, errors


def test_kernel_bars_on_a_phone_value_beside_its_bar_one_scale(browser, pages, tmp_path):
    ctx, page, errors = _open(browser, pages["ladder_baseline"], 390, True)
    page.locator("#plots").screenshot(path=str(shots_dir(tmp_path) / "plots-390.png"))
    rows = page.locator("#plots figure").first.locator(".bar-row")
    assert rows.count() >= 5
    widths = set()
    for i in range(rows.count()):
        track = rows.nth(i).locator(".bar-track").bounding_box()
        value = rows.nth(i).locator(".bar-value").bounding_box()
        label = rows.nth(i).locator(".bar-label").bounding_box()
        # THEN the value sits on its bar's line, right of it; the name above both (never beside the next)
        mid = value["y"] + value["height"] / 2
        assert track["y"] - 2 <= mid <= track["y"] + track["height"] + 2, (i, track, value)
        assert value["x"] >= track["x"] + track["width"] - 1 and label["y"] + label["height"] <= track["y"] + 1
        assert value["x"] + value["width"] <= 390
        widths.add(round(track["width"]))
    assert len(widths) == 1, widths  # every bar on the same scale
    assert errors == []
    ctx.close()


def test_short_words_in_tables_are_not_broken_on_a_phone(browser, pages):
    ctx, page, _ = _open(browser, pages["ladder_baseline"], 390, True)
    # THEN the NVTX table's Style cells ("PushPop") hold their word on one line
    broken = page.evaluate("""() => Array.from(document.querySelectorAll('#t-nvtx td.w')).filter(td => {
        const r = document.createRange(); r.selectNodeContents(td); return r.getClientRects().length > 1;
      }).map(td => td.textContent)""")
    assert page.locator("#t-nvtx td.w").count() > 0 and broken == []
    ctx.close()


@pytest.mark.parametrize("width", [390, 1440])
def test_timeline_labels_and_axis_fit_the_width(browser, pages, width):
    ctx, page, errors = _open(browser, pages["ladder_baseline"], width, width < 600)
    g = page.evaluate("window.nsysanTimeline.geometry()")
    cw = page.evaluate("document.getElementById('tl').clientWidth")
    # THEN the lane labels take a third of a phone's width at most (270 px on a wide screen)
    assert g["label"] <= 0.31 * cw if width < 600 else g["label"] == 270
    # and every axis label of the last draw lies inside the canvas, apart from the next
    for zoom in ("window.nsysanTimeline.zoomTo(0, window.nsysanTimeline.data.span)",
                 "window.nsysanTimeline.zoomTo(...window.nsysanTimeline.data.steady)"):
        page.evaluate("window.__axis = []")
        page.evaluate(zoom)
        axis = [a for a in page.evaluate("window.__axis") if not a[0].startswith("time: ")]
        assert len(axis) >= 2, axis
        for text, x, w in axis:
            assert g["label"] <= x and x + w <= cw, (text, x, w, cw)
        for (_, x0, w0), (_, x1, _) in zip(axis, axis[1:]):
            assert x0 + w0 < x1, axis
    assert errors == []
    ctx.close()


def test_touch_screen_gets_a_touch_hint_and_pans_with_a_finger(browser, pages):
    # GIVEN a phone (touch, coarse pointer) and a desktop (mouse)
    ctx, page, errors = _open(browser, pages["ladder_baseline"], 390, True)
    hint = page.locator("#tl-hint").inner_text()
    assert hint.startswith("Pinch to zoom") and "Wheel" not in hint
    # WHEN a finger drags the timeline to the left
    before = page.evaluate("[window.nsysanTimeline.view.a, window.nsysanTimeline.view.b]")
    box = page.locator("#tl").bounding_box()
    page.evaluate("""([x0, y]) => {
        const c = document.getElementById('tl');
        const ev = (type, x) => c.dispatchEvent(new PointerEvent(type, {pointerId: 7, pointerType: 'touch',
                                                  clientX: x, clientY: y, bubbles: true}));
        ev('pointerdown', x0); ev('pointermove', x0 - 60); ev('pointerup', x0 - 60);
      }""", [box["x"] + box["width"] - 20, box["y"] + 40])
    after = page.evaluate("[window.nsysanTimeline.view.a, window.nsysanTimeline.view.b]")
    # THEN the view moves later in time by the same width
    assert after[0] > before[0] and after[1] - after[0] == pytest.approx(before[1] - before[0], rel=1e-6)
    assert errors == []
    ctx.close()
    ctx, page, _ = _open(browser, pages["ladder_baseline"], 1440, False)
    assert page.locator("#tl-hint").inner_text().startswith("Wheel to zoom")
    ctx.close()


@pytest.mark.skipif("mem_growth" not in FIXTURE_NAMES, reason="fixture absent")
def test_memory_lane_says_it_is_zoomed(browser, pages, tmp_path):
    # GIVEN a loop that keeps 128 MiB a step alive, opened on three iterations
    ctx, page, errors = _open(browser, pages["mem_growth"], 1440, False)
    lane = "window.nsysanTimeline.lanes.filter(l => l.metric && l.series && l.series[0].key === 'memory')[0]"
    zoom = page.evaluate(f"{lane}.zoom")
    page.locator("#timeline").screenshot(path=str(shots_dir(tmp_path) / "memory-lane-zoomed.png"))
    # THEN the lane is drawn from its lowest to its highest value in view, and says so
    assert zoom and zoom[0] < zoom[1], zoom
    drawn = page.evaluate("""() => { const out = [], P = CanvasRenderingContext2D.prototype, f = P.fillText;
        P.fillText = function (t) { out.push(String(t)); return f.apply(this, arguments); };
        window.nsysanTimeline.draw(); P.fillText = f; return out; }""")
    assert any(t.startswith(f"zoomed: {zoom[0]:.0f}\u2013{zoom[1]:.0f}% of peak") for t in drawn), drawn
    # and on the whole capture, on the scale of its peak, with no note
    page.evaluate("window.nsysanTimeline.zoomTo(0, window.nsysanTimeline.data.span)")
    assert page.evaluate(f"{lane}.zoom") is None
    assert errors == []
    ctx.close()
