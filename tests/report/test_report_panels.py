"""The report shows a panel only when it has something (issue 51): on a trace without GPU activity the
kernel bars, utilization and overlap plots and the samples panel are left out, said once with why;
the overlap chart has bars only where copies ran; what the trace lacks is one list; ``code`` markup
in messages and notes is rendered; the headline names the window it judged; the header names the
GPUs the program used; summary.html and compare --html have the report's look."""

from __future__ import annotations

import json
import re
from html import unescape

import factories as F
import pytest
from conftest import FIXTURE_NAMES

from nsysan.analysis import Params, analyze
from nsysan.report import html, view
from nsysan.report.cross import cross_summary, render_cross_html
from nsysan.report.html import code_spans
from nsysan.report.summary import FixLine, RunSummary


def _text(page: str) -> str:
    """The page's visible text: no scripts, no styles, no tags."""
    page = re.sub(r"<(script|style)\b.*?</\1>", "", page, flags=re.S)
    return unescape(re.sub(r"<[^>]+>", " ", page))


def _section(page: str, sid: str) -> str:
    i = page.index(f'<section id="{sid}"')
    return page[i:page.index("</section>", i)]


@pytest.mark.skipif("cpu_nsys2022" not in FIXTURE_NAMES, reason="fixture absent")
def test_a_trace_without_gpu_activity_shows_no_empty_panel(analysis):
    # GIVEN a CPU-only trace (no kernel, copy or memset table)
    a = analysis("cpu_nsys2022")
    page = html.render(view.build(a))
    plots = _section(page, "plots")
    # THEN no heading over nothing: no kernel bars, utilization or overlap figure, no samples panel
    for caption in ("GPU time by kernel", "GPU utilization over the capture", "Copy time that ran under compute"):
        assert f"<figcaption>{caption}" not in page
    assert '<div class="bars">\n</div>' not in page and '<section id="samples">' not in page
    # and why is said once, in one line, each reason once for every panel it empties
    note = _text(plots[plots.index('id="not-shown"'):])
    assert note.count("GPU activity was not recorded") == 1
    assert "GPU time by kernel, GPU utilization and Copy/compute overlap (GPU activity was not recorded)" in note
    assert "Who kept the GPU waiting (no CPU or Python samples" in note
    # the plot that has data stays
    assert "<figcaption>Time per iteration" in plots
    assert "0 ns of 0 ns" not in page and "0.0% of 0 ns" not in page


def test_overlap_bars_only_where_copies_ran(analysis):
    a = analysis("ladder_baseline")
    rep = view.build(a)
    ov = a.overlap
    # THEN one bar per device and direction with copy time, each saying the share of how much
    want = ov.loc[ov["copy_ns"] > 0]
    assert len(rep.overlap_bars) == len(want) > 0
    for b, (_, r) in zip(rep.overlap_bars, want.iterrows()):
        assert b.frac == pytest.approx(float(r["overlap_frac_of_copy"]))
        assert b.value.endswith(" of " + view.fmt_ns(r["copy_ns"]))


def test_what_the_trace_lacks_is_one_list(analysis):
    # GIVEN the example: no samples, no backtraces, no metrics, no memory usage events
    a = analysis("ladder_baseline")
    page = html.render(view.build(a))
    # THEN each flag is listed once, in one table, and no other list of what it lacks is on the page
    lacks = _section(page, "sec-inputs_missing")
    flags = [m["flag"] for m in a.idle_samples.missing] + [m["flag"] for m in a.inputs_missing]
    for flag in flags:
        assert lacks.count(f">{flag}<") == 1, flag
    assert "It lacks" not in page


def test_code_markup_is_rendered_never_shown_raw(analysis):
    # single and double backticks become <code>, escaped; a C++ name's lone backtick stays as it is
    assert code_spans("record with `nsys profile -s process-tree` (and ``--python-sampling=true``).") == (
        "record with <code>nsys profile -s process-tree</code> (and <code>--python-sampling=true</code>).")
    assert code_spans("`<b>`") == "<code>&lt;b&gt;</code>"
    assert code_spans("void `anonymous namespace'::k()") == "void `anonymous namespace&#39;::k()"
    # THEN no report of these traces shows a backtick to its reader
    for name in [n for n in ("ladder_baseline", "cpu_nsys2022", "mem_growth", "waits_python") if n in FIXTURE_NAMES]:
        text = _text(html.render(view.build(analysis(name))))
        assert "`" not in text, (name, text[max(0, text.find("`") - 80):text.find("`") + 80])


def test_the_headline_names_the_window_it_judged():
    # GIVEN a trace without NVTX: no steady state, the GPU-active part is judged
    k = F.kernels([(1_000, 5_000, 7), (8_000, 9_000, 7), (20_000, 30_000, 7)])
    a = analyze(F.make_trace(kernels=k), Params(min_gap_ns=10))
    assert a.steady.label != "steady state"
    keys = [k for k, _ in view.build(a).headline]
    # THEN the busy number says which window it is of
    assert f"GPU busy ({a.steady.label})" in keys and not [k for k in keys if "(steady)" in k]


@pytest.mark.skipif("busy_input" not in FIXTURE_NAMES, reason="fixture absent")
def test_the_header_names_the_gpus_the_program_used(analysis):
    # GIVEN a machine with two GPUs, the program on one
    a = analysis("busy_input")
    assert len(a.trace.gpus) == 2 and a.ops["device_id"].nunique() == 1
    rep = view.build(a)
    gpus = dict(rep.info)["GPUs"]
    # THEN the header names one, and says the other was idle
    assert gpus.endswith("(used; 1 more GPU idle)") and gpus.count("SMs") == 1
    assert rep.subtitle.startswith(gpus)


def test_summary_page_has_the_report_s_look_and_escapes_trace_names(analysis, tmp_path):
    # GIVEN the summary of three traces, one with a hostile name
    rows = []
    for name, p50 in (("<img src=x onerror=alert(1)>#1.sqlite", 20_000_000), ("b.sqlite", 10_000_000),
                      ("c.sqlite", 11_000_000)):
        rows.append(RunSummary(trace=name, p50_ns=p50, iterations=9, busy=[(0, 0.5, 1000)],
                               fixes=[FixLine("host-bound-gap", "warning", 1, None, "", "", "")], slowest_kernel="k<float>",
                               program="p"))
    s = cross_summary(rows)
    page = render_cross_html(json.loads(json.dumps(s)))
    # THEN the headline cards, a bar per trace and a styled, sortable table with numbers right-aligned
    assert page.count('<div class="metric">') == 3 and page.count('<div class="bar-row">') == 3
    assert '<table class="data sortable"' in page and '<td class="num" data-k="20000000">20.00 ms</td>' in page
    assert "<img" not in page and "&lt;img src=x onerror=alert(1)&gt;#1.sqlite" in page
    assert 'href="%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E%231.html"' in page  # its own report, beside
    assert "k&lt;float&gt;" in page


def test_compare_page_has_the_report_s_look(fixture_dir, tmp_path, capsys):
    from nsysan.cli import main

    out = tmp_path / "c.html"
    assert main(["compare", str(fixture_dir / "ladder_baseline.sqlite"), str(fixture_dir / "ladder_pinned.sqlite"),
                 "--html", str(out)]) == 0
    page = out.read_text()
    # THEN every table is the report's (styled, in a box that scrolls on a phone), the bars follow the theme
    assert page.count("<table") == page.count('<table class="data sortable"') >= 1
    assert page.count('<div class="scroll"><table') == page.count("<table")
    assert 'svg class="ladder"' in page and 'fill="#' not in page
