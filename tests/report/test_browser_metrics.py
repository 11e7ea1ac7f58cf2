"""The GPU-metrics lane of the report's timeline in a real browser (headless Chromium via Playwright).

Truth by SQL on ``metrics_mix``: the phase ranges' times and the GPU_METRICS samples. The page gives
only its geometry (the view, where the lane is drawn). Skipped when Chromium or Playwright is missing.
"""

from __future__ import annotations

import sqlite3

import pytest

from nsysan.report import html, view

from browser_kit import SKIP, shots_dir
from tests.conftest import FIXTURE_NAMES

pytestmark = [SKIP, pytest.mark.skipif("metrics_mix" not in FIXTURE_NAMES, reason="fixture missing")]


def column_heights(page, lane: int, row: int) -> dict:
    """Painted pixels per column of one row of a lane (a colour with min(r, g, b) < 200)."""
    return page.evaluate("""([i, r]) => {
        const T = window.nsysanTimeline, g = T.geometry(), l = T.lanes[i], c = document.getElementById('tl');
        const y0 = l.y + 2 + r * g.row, h = g.row - 2;
        const d = c.getContext('2d').getImageData(g.label, y0, g.plotW, h).data, out = [];
        for (let x = 0; x < g.plotW; x++) { let n = 0;
          for (let y = 0; y < h; y++) { const k = (y * g.plotW + x) * 4; if (Math.min(d[k], d[k + 1], d[k + 2]) < 200) n++; }
          out.push(n); }
        return {cols: out, w: g.plotW, h: h, a: T.view.a, b: T.view.b, t0: T.data.t0}; }""", [lane, row])


def test_metrics_lane_draws_the_samples(browser, analysis, fixture_dir, tmp_path):
    out = tmp_path / "metrics_mix.html"
    out.write_text(html.render(view.build(analysis("metrics_mix"))), encoding="utf-8")
    page = browser.new_page(viewport={"width": 1440, "height": 1400})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(out.as_uri())
    assert page.evaluate("window.nsysanTimeline.ready") is True
    labels = page.evaluate("window.nsysanTimeline.lanes.map(l => l.label)")
    lane = next(i for i, lab in enumerate(labels) if "GPU metrics" in lab)
    con = sqlite3.connect(f"file:{fixture_dir / 'metrics_mix.sqlite'}?mode=ro", uri=True)
    ids = {n: (t, m) for t, m, n in con.execute("SELECT typeId, metricId, metricName FROM TARGET_INFO_GPU_METRICS")}
    phases = {}
    for name, s, e in con.execute("""SELECT coalesce(n.text, x.value), n.start, n."end" FROM NVTX_EVENTS n
                                     LEFT JOIN StringIds x ON x.id = n.textId WHERE n.eventType = 59 ORDER BY n.start"""):
        phases.setdefault(name, (s, e))  # the first instance of each phase
    s, e = phases["step"]
    t0 = page.evaluate("window.nsysanTimeline.data.t0")
    page.evaluate(f"window.nsysanTimeline.zoomTo({s - t0}, {e - t0})")
    page.locator("#timeline").scroll_into_view_if_needed()
    page.locator("#tl-wrap").screenshot(path=str(shots_dir(tmp_path) / "timeline-metrics_mix-metrics.png"))
    checked = 0
    for row, metric in ((0, "SMs Active [Throughput %]"), (1, "Tensor Active [Throughput %]")):
        px = column_heights(page, lane, row)
        w, h, va, vb = px["w"], px["h"], px["a"], px["b"]
        t, m = ids[metric]
        for phase in ("bf16_matmul", "h2d_copy", "tiny_kernels", "elementwise"):
            ps, pe = phases[phase]
            x = int(((ps + pe) / 2 - t0 - va) * w / (vb - va))  # a column in the middle of the phase
            ta, tb = va + x * (vb - va) / w + t0, va + (x + 1) * (vb - va) / w + t0
            vals = [v for (v,) in con.execute("SELECT value FROM GPU_METRICS WHERE typeId = ? AND metricId = ? AND "
                                              "timestamp >= ? AND timestamp < ?", (t, m, ta, tb))]
            assert vals, phase
            want = sum(vals) / len(vals) / 100 * h
            assert abs(px["cols"][x] - max(want, 1 if want > 0 else 0)) <= 1.01, (metric, phase, px["cols"][x], want)
            checked += 1
    assert checked == 8
    tip = page.evaluate("""(() => { const T = window.nsysanTimeline, l = T.lanes[%d];
        return [l.label, l.n, l.series.map(s => s.label)]; })()""" % lane)
    assert tip[2] == ["SMs active", "tensor active", "DRAM bandwidth"] and tip[1] > 50_000
    # hovering the tensor row in the middle of bf16_matmul names the series and its value
    ps, pe = phases["bf16_matmul"]
    geo = page.evaluate("""(i) => { const T = window.nsysanTimeline, g = T.geometry(), l = T.lanes[i],
        r = document.getElementById('tl').getBoundingClientRect(); return [r.left, r.top, g.label, g.plotW, l.y, g.row]; }""", lane)
    va, vb = page.evaluate("[window.nsysanTimeline.view.a, window.nsysanTimeline.view.b]")
    x = geo[0] + geo[2] + ((ps + pe) / 2 - t0 - va) / (vb - va) * geo[3]
    page.mouse.move(x, geo[1] + geo[4] + 2 + geo[5] * 1.5)
    text = page.locator("#tl-tip").inner_text()
    assert text.startswith("tensor active: ") and "% of peak" in text and float(text.split(": ")[1].split("%")[0]) > 80
    assert errors == []
    page.close()
