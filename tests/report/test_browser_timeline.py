"""The report's canvas timeline in a real browser (Debian's headless Chromium driven by Playwright).

Truth comes from SQL on the fixture's sqlite file: the kernels of a stream, NVTX iteration ranges,
thread names, memcpy rows, kernel-name counts. The page supplies only its own geometry (where the
view is, where each lane is drawn) and the time base it declares (``data.t0``, the capture start).

Skipped cleanly when Chromium or Playwright is missing (``apt-get install chromium``;
``pip install playwright``: no browser download, the system Chromium is used). Screenshots go to
``$NSYSAN_SCREENSHOTS`` when set (else the test's temp folder).
"""

from __future__ import annotations

import sqlite3

import pytest

from nsysan.report import html, view

from browser_kit import SKIP, shots_dir

pytestmark = SKIP
WIDTH = 1440


@pytest.fixture
def report(browser, analysis, fixture_dir, tmp_path):
    """Open the HTML report of a fixture; yields (page, sqlite connection, analysis); checks at the
    end that the page logged no error, raised no dialog and fetched nothing."""
    opened = []

    def _open(name: str):
        out = tmp_path / f"{name}.html"
        a = analysis(name)
        out.write_text(html.render(view.build(a)), encoding="utf-8")
        page = browser.new_page(viewport={"width": WIDTH, "height": 1000})
        errors: list[str] = []
        requests: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("dialog", lambda d: (errors.append("dialog " + d.message), d.dismiss()))
        page.on("request", lambda r: requests.append(r.url) if not r.url.startswith(("file:", "data:")) else None)
        page.goto(out.as_uri())
        page.wait_for_load_state("load")
        assert page.evaluate("window.nsysanTimeline.ready") is True  # decoded
        con = sqlite3.connect(f"file:{fixture_dir / (name + '.sqlite')}?mode=ro", uri=True)
        opened.append((page, con, errors, requests))
        return page, con, a

    yield _open
    for page, con, errors, requests in opened:
        con.close()
        assert errors == [] and requests == []
        page.close()


def tl(page, expr: str):
    return page.evaluate(f"(() => {{ const T = window.nsysanTimeline; return {expr}; }})()")


def lane_index(page, prefix: str) -> int:
    labels = tl(page, "T.lanes.map(l => l.label)")
    hits = [i for i, lab in enumerate(labels) if lab.startswith(prefix)]
    assert hits, (prefix, labels)
    return hits[0]


def lane_pixels(page, i: int) -> dict:
    """The lane's plot area as painted: a 0/1 per pixel (a colour with min(r, g, b) < 200: an op,
    not the white/grey background or grid lines), rows top to bottom, in CSS pixels (dpr 1)."""
    return page.evaluate("""(i) => {
        const T = window.nsysanTimeline, g = T.geometry(), l = T.lanes[i], c = document.getElementById('tl');
        const y0 = l.y + 2, h = l.rows * g.row - 2;
        const d = c.getContext('2d').getImageData(g.label, y0, g.plotW, h).data, out = [];
        for (let y = 0; y < h; y++) { const row = [];
          for (let x = 0; x < g.plotW; x++) { const k = (y * g.plotW + x) * 4;
            row.push(Math.min(d[k], d[k + 1], d[k + 2]) < 200 ? 1 : 0); }
          out.push(row); }
        return {rows: out, w: g.plotW, h: h, a: T.view.a, b: T.view.b, t0: T.data.t0}; }""", i)


def stream_kernels(con, stream: int) -> list[tuple[int, int]]:
    return con.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE streamId = ? ORDER BY start",
                       (stream,)).fetchall()


def test_opens_on_steady_iterations(report, tmp_path):
    # GIVEN the report of a trace with a repeated 'step' NVTX range
    page, con, a = report("launch_graph")
    shots = shots_dir(tmp_path)
    page.locator("#timeline").scroll_into_view_if_needed()
    page.locator("#tl-wrap").screenshot(path=str(shots / "timeline-launch_graph-open.png"))
    # WHEN it opens, THEN the view lies within the steady window ...
    va, vb, t0 = tl(page, "[T.view.a, T.view.b, T.data.t0]")
    assert a.steady.start_ns - t0 <= va < vb <= a.steady.end_ns - t0
    assert vb - va < (a.steady.end_ns - a.steady.start_ns) / 4  # a few iterations, not the whole window
    # ... and covers at least one whole 'step' range as recorded in the trace
    steps = con.execute("""SELECT e.start, e.end FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId
                           WHERE coalesce(e.text, s.value) = 'step' AND e.end IS NOT NULL""").fetchall()
    assert len(steps) >= 10
    inside = [(s, e) for s, e in steps if va <= s - t0 and e - t0 <= vb]
    assert 1 <= len(inside) < len(steps)
    # the buttons switch to the whole capture and to the steady window, and back
    page.get_by_role("button", name="whole capture").click()
    assert tl(page, "[T.view.a, T.view.b]") == [0, tl(page, "T.data.span")]
    page.get_by_role("button", name="steady state").click()
    assert tl(page, "[T.view.a, T.view.b]") == [a.steady.start_ns - t0, a.steady.end_ns - t0]
    page.get_by_role("button", name="3 steady iterations of 'step'").click()
    assert tl(page, "[T.view.a, T.view.b]") == [va, vb]


def test_every_op_drawn_and_busy_fraction_shown(report, tmp_path):
    # GIVEN launch_eager: one stream with ~10,600 short kernels, a few % busy over the capture
    page, con, _ = report("launch_eager")
    page.get_by_role("button", name="whole capture").click()
    page.locator("#timeline").scroll_into_view_if_needed()
    page.locator("#tl-wrap").screenshot(path=str(shots_dir(tmp_path) / "timeline-launch_eager-whole.png"))
    i = lane_index(page, "GPU 0 · stream 13")
    px = lane_pixels(page, i)
    w, h, va, vb, t0 = px["w"], px["h"], px["a"], px["b"], px["t0"]
    kernels = stream_kernels(con, 13)
    assert len(kernels) > 10_000
    busy = sum(e - s for s, e in kernels) / (vb - va)  # kernels on one stream do not overlap
    assert busy < 0.1
    # THEN every kernel's pixel column is painted (none dropped) ...
    cols = sorted({min(w - 1, int((s - t0 - va) * (w / (vb - va)))) for s, _ in kernels})  # as timeline.js maps
    painted = [any(px["rows"][y][x] for y in range(h)) for x in range(w)]
    missing = [x for x in cols if not painted[x]]
    assert missing == []
    # ... and the lane is not solid: the painted area follows the busy fraction (each column at least
    # 1 px high so a lone short op shows; a partly covered edge pixel may count whole)
    area = sum(map(sum, px["rows"])) / (w * h)
    assert area < 0.5
    assert busy * 0.9 <= area <= busy + 2 * len(cols) / (w * h) + 0.01
    # WHEN zoomed so that most kernels are under a pixel wide and alone in their column
    mid = len(kernels) // 2
    ks = kernels[mid - 200: mid + 200]
    tl(page, f"T.zoomTo({ks[0][0] - t0}, {ks[-1][1] - t0})")
    px = lane_pixels(page, i)
    w, h, va, vb = px["w"], px["h"], px["a"], px["b"]
    k = w / (vb - va)
    assert sum((e - s) * k < 1 for s, e in ks) > 300
    # THEN still every kernel's column is painted, and no column without one
    cols = {min(w - 1, int((s - t0 - va) * k)) for s, _ in ks} | {min(w - 1, int((e - t0 - va) * k)) for _, e in ks}
    painted = {x for x in range(w) if any(px["rows"][y][x] for y in range(h))}
    assert sorted(set(cols) - painted) == []
    spanned = {x for s, e in ks for x in range(int((s - t0 - va) * k), int((e - t0 - va) * k) + 1)}
    assert painted <= spanned


def test_zoom_in_shows_individual_ops(report):
    # GIVEN launch_eager zoomed on a few kernels of stream 13 (chosen from SQL)
    page, con, _ = report("launch_eager")
    kernels = stream_kernels(con, 13)
    t0 = tl(page, "T.data.t0")
    s, e = kernels[len(kernels) // 2]
    width = max(e - s, 1000) * 12
    tl(page, f"T.zoomTo({s - t0 - width / 2}, {e - t0 + width / 2})")
    px = lane_pixels(page, lane_index(page, "GPU 0 · stream 13"))
    w, h, va, vb = px["w"], px["h"], px["a"], px["b"]

    def col(t: float) -> float:
        return (t - t0 - va) / (vb - va) * w

    shown = [(col(ks), col(ke)) for ks, ke in kernels if ke - t0 >= va and ks - t0 <= vb]
    assert shown and all(x1 - x0 >= 3 for x0, x1 in shown)  # each kernel several pixels wide
    # THEN each kernel is a full-height block, and the columns between kernels are empty
    for x0, x1 in shown:  # (the op's name is written inside it in white, below its top row)
        for x in range(max(0, int(x0) + 1), min(w, int(x1) - 1)):
            assert px["rows"][0][x] == 1 and sum(px["rows"][y][x] for y in range(h)) >= 0.4 * h, (x0, x1, x)
    for x in range(w):
        if all(x + 1 < a0 or x > a1 + 1 for a0, a1 in shown):
            assert not any(px["rows"][y][x] for y in range(h)), x


def test_finding_evidence_zooms_to_its_interval(report, tmp_path):
    # GIVEN ladder_baseline, whose findings list copies (pageable-memcpy) with their start and duration
    page, con, _ = report("ladder_baseline")
    base, span = tl(page, "[T.data.t0, T.data.span]")
    spans = page.evaluate("Array.from(document.querySelectorAll('[data-t0]')).map(r => "
                          "[parseFloat(r.dataset.t0), parseFloat(r.dataset.t1)])")
    assert spans
    # the first evidence row whose interval is a memcpy of the trace
    k = next(j for j, (a, b) in enumerate(spans) if b > a and con.execute(
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE start = ? AND end = ?",
        (int(a) + base, int(b) + base)).fetchone()[0] == 1)
    t0, t1 = spans[k]
    row = page.locator("[data-t0]").nth(k)
    page.evaluate("(k) => { const d = document.querySelectorAll('[data-t0]')[k].closest('details'); "
                  "if (d) d.open = true; }", k)
    # WHEN the row is clicked
    row.click()
    va, vb, hl = tl(page, "[T.view.a, T.view.b, T.state.highlight]")
    # THEN the view holds the interval, with a margin, far narrower than the capture, highlighted
    assert va < t0 and t1 < vb and vb - va < span / 20 and vb - va < (t1 - t0) * 4
    assert hl == [t0, t1]
    assert 0 < page.evaluate("document.getElementById('tl-wrap').getBoundingClientRect().top") < 300  # scrolled to
    page.locator("#tl-wrap").screenshot(path=str(shots_dir(tmp_path) / "timeline-ladder_baseline-evidence.png"))


def test_search_counts_and_jumps(report):
    # GIVEN launch_eager and the most frequent kernel name in the trace
    page, con, _ = report("launch_eager")
    name, = con.execute("""SELECT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName
                           GROUP BY s.value ORDER BY count(*) DESC LIMIT 1""").fetchone()
    text = name[:40].upper()  # a case-insensitive prefix (shipped names keep their first 300 characters)
    like = "%" + text.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    expected = sum(con.execute(q, (like,)).fetchone()[0] for q in (
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName "
        "WHERE lower(s.value) LIKE ? ESCAPE '\\'",
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
        "WHERE lower(s.value) LIKE ? ESCAPE '\\'",
        "SELECT count(*) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId "
        "WHERE e.end IS NOT NULL AND lower(coalesce(e.text, s.value)) LIKE ? ESCAPE '\\'"))
    assert expected > 100
    # WHEN the text is typed in the search box
    page.get_by_placeholder("search op names").fill(text)
    # THEN the count shown equals the trace's
    assert page.locator(".tlx-count").inner_text() == f"{expected:,} matches"
    # and next/previous jump to the matches in time order: the first one at or after the view's middle
    mid, t0 = tl(page, "[(T.view.a + T.view.b) / 2, T.data.t0]")
    first, = con.execute("""SELECT min(k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s
                            ON s.id = k.demangledName WHERE lower(s.value) LIKE ? ESCAPE '\\' AND k.start - ? >= ?""",
                         (like, t0, mid)).fetchone()
    current = "T.state.matches[T.state.cur][0].s[T.state.matches[T.state.cur][1]]"
    page.get_by_role("button", name="\u25B6").click()
    va, vb, cur = tl(page, f"[T.view.a, T.view.b, {current}]")
    assert cur == first - t0 and va <= cur <= vb and vb - va < 1_000_000
    assert page.locator(".tlx-count").inner_text().endswith(f"of {expected:,}")
    page.get_by_role("button", name="\u25C0").click()
    va2, vb2, prev = tl(page, f"[T.view.a, T.view.b, {current}]")
    assert prev < first - t0 and va2 <= prev <= vb2  # the match before it


def test_lane_labels_name_threads_and_stream_roles(report):
    # GIVEN the thread that made the CUDA calls, named in the trace's ThreadNames
    page, con, _ = report("ladder_baseline")
    rows = con.execute("""SELECT DISTINCT r.globalTid % 16777216, s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME r
                          JOIN ThreadNames t ON t.globalTid = r.globalTid JOIN StringIds s ON s.id = t.nameId""").fetchall()
    assert rows
    labels = tl(page, "T.lanes.map(l => l.label)")
    # THEN a CUDA API lane carries the thread's name and tid
    for tid, tname in rows:
        assert any(lab == f"CUDA API · {tname} (tid {tid})" for lab in labels), (tid, tname, labels)
    # and each stream's lane says what it mostly does (here kernels: compute)
    streams = [r[0] for r in con.execute("SELECT DISTINCT streamId FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY 1")]
    for s in streams:
        k, = con.execute("SELECT coalesce(sum(end - start), 0) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE streamId = ?",
                         (s,)).fetchone()
        c, = con.execute("SELECT coalesce(sum(end - start), 0) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE streamId = ?",
                         (s,)).fetchone()
        # the larger first, the other too when it holds a quarter of the stream's time
        parts = sorted([("compute", k), ("copies", c)], key=lambda x: -x[1])
        want = [p for p, v in parts if v >= 0.25 * (k + c)]
        lab = next(lab for lab in labels if lab.startswith(f"GPU 0 · stream {s} ("))
        got = [p.split(" ")[0] for p in lab[lab.index("(") + 1:-1].split(" + ")]
        assert got == want, (s, lab, k, c)


def test_nvtx_nesting_rows_and_tooltip_text(report):
    # GIVEN launch_graph: 'step' ranges nested in a 'loop' range (depth 1 under depth 0)
    page, con, _ = report("launch_graph")
    i = lane_index(page, "NVTX · ")
    assert tl(page, f"T.lanes[{i}].rows") == 2
    # the lane is two rows high, and the first 'step' is drawn on the second row
    s, e = con.execute("""SELECT e.start, e.end FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId
                          WHERE coalesce(e.text, s.value) = 'step' ORDER BY e.start LIMIT 1""").fetchone()
    t0 = tl(page, "T.data.t0")
    tl(page, f"T.zoomTo({s - t0 - (e - s)}, {e - t0 + (e - s)})")
    g = tl(page, f"[T.geometry(), T.lanes[{i}].y]")
    page.locator("#tl").scroll_into_view_if_needed()  # (the first screen's bars above it may push it below the fold)
    box = page.locator("#tl").bounding_box()
    x = box["x"] + g[0]["label"] + g[0]["plotW"] / 2
    page.mouse.move(x, box["y"] + g[1] + 2 + g[0]["row"] + 6)  # second row, middle of the view
    tip = page.locator("#tl-tip")
    assert tip.is_visible()
    lines = tip.inner_text().split("\n")
    assert lines[0] == "step" and lines[1].startswith("NVTX range")
    assert "duration" in lines[2]
