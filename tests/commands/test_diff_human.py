"""`nsysan diff` for a person: human metric names, verdicts that follow the noise test, distinct kernel
names, a gate threshold in percent, warnings when the runs are not like for like, a page that fits.

Truth: the iteration periods by SQL (tests/sqltruth.py) on the ladder fixtures, a Mann-Whitney p-value
computed here by counting pairs, and hand-made analyses whose differences are known by construction.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from itertools import product

import numpy as np
import pytest
import sqltruth
from conftest import ROOT

from nsysan import compare
from nsysan.cli import main
from nsysan.compare.gate import parse_threshold
from nsysan.compare.stats import ALPHA
from nsysan.report.names import ELLIPSIS, short_names


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # rich: one table row per line


# -- hand-made analyses --------------------------------------------------------------------------

def fake(periods, *, rng_name="step", gpus=("NVIDIA H100 80GB HBM3",), graph="none", nsys="2025.3.1.0",
         window="steady state", kernels=(), timed_ns=None, busy=None):
    """A minimal ``nsysan.analysis/2`` dict: one sequence of iterations with these periods (ns)."""
    periods = [float(p) for p in periods]
    rows = [{"period_ns": None, "latency_ns": periods[0] if periods else 1.0, "warmup": True}] + \
           [{"period_ns": p, "latency_ns": p, "warmup": False} for p in periods]
    stats = {"p50_ns": float(np.median(periods)), "mean_ns": float(np.mean(periods)),
             "throughput_per_s": 1e9 / float(np.mean(periods))} if periods else {}
    d = {"schema": "nsysan.analysis/2",
         "trace": {"gpus": [{"name": g} for g in gpus], "cuda_graph_trace": graph, "nsys_version": nsys},
         "windows": {"steady": {"label": window}},
         "iterations": {"range": rng_name if periods else None, "stats": stats,
                        "per_iteration": rows if periods else [],
                        "timed_regions": [{"cpu_ns": timed_ns, "with_gpu_ns": timed_ns}] if timed_ns else []},
         "kernels": {"by_name": [{"name": n, "total_ns": t, "count": 1, "med_ns": t} for n, t in kernels]},
         "findings": []}
    if busy is not None:
        d["gpu"] = {"steady": [{"busy_ns": busy, "idle_ns": 1_000_000 - busy}]}
    return d


def write(tmp_path, name, d):
    p = tmp_path / name
    p.write_text(json.dumps(d))
    return str(p)


def spread_periods(center, n=12, seed=0, rel=0.02):
    return list(np.random.default_rng(seed).normal(center, center * rel, n))


def rows(d):
    return {m["metric"]: m for m in d.metrics}


# -- 1. human names ------------------------------------------------------------------------------

def test_terminal_and_html_show_names_json_keeps_ids_beside_labels(fixture_dir, tmp_path, capsys):
    base, new = fixture_dir / "ladder_pinned.sqlite", fixture_dir / "ladder_baseline.sqlite"
    j, h = tmp_path / "d.json", tmp_path / "d.html"
    assert main(["diff", str(base), str(new), "--json", str(j), "--html", str(h)]) == 0
    out = capsys.readouterr().out
    html = h.read_text()
    ids = list(compare.METRICS)
    for text in (out, html):
        assert "Iteration time p50 (period)" in text and "GPU busy (steady)" in text
        assert not [i for i in ids if i in text], [i for i in ids if i in text]
    d = json.loads(j.read_text())
    by_id = {m["metric"]: m for m in d["metrics"]}
    assert set(by_id) == set(ids)
    assert by_id["iter_p50_ns"]["label"] == "Iteration time p50 (period)"
    assert all(m["label"] and m["label"] != m["metric"] for m in d["metrics"])


# -- 2. the verdict follows the test ------------------------------------------------------------

def _p_by_pairs(a, b):
    """Two-sided Mann-Whitney p by counting pairs (no ties), normal approximation with continuity."""
    u = sum(1.0 for x in a for y in b if x < y)
    n1, n2 = len(a), len(b)
    z = (abs(u - n1 * n2 / 2) - 0.5) / math.sqrt(n1 * n2 * (n1 + n2 + 1) / 12)
    return math.erfc(max(z, 0) / math.sqrt(2))


def test_numbers_and_p_value_match_sql(fixture_dir, analysis):
    """ladder_pinned -> ladder_baseline: p50 periods from SQL, the p-value from the SQL periods."""
    from nsysan.report.jsonout import analysis_to_dict

    truth = {}
    for n in ("ladder_pinned", "ladder_baseline"):
        con = sqltruth.open_export(fixture_dir / f"{n}.sqlite")
        per = sqltruth.periods(con, "infer")
        inst = sqltruth.range_instances(con, "infer")
        lat = [r["completion"] - r["start"] for r in inst]
        # one sequence, only the first iteration is warm-up (slower than 1.5x the median), and it has no period
        assert len({(r["pid"], r["tid"]) for r in inst}) == 1
        assert lat[0] > 1.5 * np.median(lat) and all(v <= 1.5 * np.median(lat) for v in lat[1:])
        truth[n] = per
    d = compare.diff(analysis_to_dict(analysis("ladder_pinned")), analysis_to_dict(analysis("ladder_baseline")))
    m = rows(d)["iter_p50_ns"]
    assert m["base"] == sqltruth.median(truth["ladder_pinned"])
    assert m["new"] == sqltruth.median(truth["ladder_baseline"])
    a, b = truth["ladder_pinned"], truth["ladder_baseline"]
    assert len(set(a) | set(b)) == len(a) + len(b)  # no ties: the plain formula applies
    p = _p_by_pairs(a, b)
    assert d.noise["p_value"] == pytest.approx(p, rel=1e-9) and p < ALPHA
    assert m["verdict"] == "worse" and m["verdict_text"].startswith("slower (+")
    assert f"p={p:.2g}" in m["verdict_text"]
    assert rows(d)["throughput_per_s"]["verdict_text"].startswith("slower (-")  # fewer iterations per second


def test_indistinguishable_periods_are_no_clear_change_never_better():
    base = spread_periods(10e6, 12, seed=3, rel=0.3)
    new = list(np.random.default_rng(5).permutation(base) * 0.95)  # 5% faster on paper, inside a 30% spread
    d = compare.diff(fake(base), fake(new))
    p = d.noise["p_value"]
    assert p is not None and p >= ALPHA
    for k in ("iter_p50_ns", "iter_mean_ns", "throughput_per_s"):
        m = rows(d)[k]
        assert m["delta"] != 0 and m["verdict"] == "no clear change", m
        assert m["verdict_text"].startswith("no clear change") and f"p={p:.3g}" in m["verdict_text"]
        assert "better" not in m["verdict_text"] and "faster" not in m["verdict_text"]


def test_identical_samples_are_the_same():
    base = spread_periods(10e6, 12, seed=1)
    d = compare.diff(fake(base), fake(list(reversed(base))))
    assert d.noise["p_value"] == pytest.approx(1.0) and rows(d)["iter_p50_ns"]["verdict"] == "same"
    assert rows(d)["iter_p50_ns"]["verdict_text"] == "no change"


def test_separated_periods_are_faster_and_throughput_reads_the_same_way():
    d = compare.diff(fake(spread_periods(10e6, 12)), fake(spread_periods(5e6, 12, seed=9)))
    assert d.noise["significant"]
    assert rows(d)["iter_p50_ns"]["verdict"] == "better" and rows(d)["iter_p50_ns"]["verdict_text"].startswith("faster")
    tp = rows(d)["throughput_per_s"]
    assert tp["delta"] > 0 and tp["verdict"] == "better" and tp["verdict_text"].startswith("faster")


def test_untested_metric_claims_nothing_without_a_noise_estimate():
    # no iterations at all: the timed region changed, but nothing says whether that is noise
    d = compare.diff(fake([], timed_ns=100e6), fake([], timed_ns=93e6))
    m = rows(d)["timed_region_ns"]
    assert m["verdict"] == "changed" and m["basis"] is None
    assert m["verdict_text"] == "changed by -7.0% (no noise estimate)"
    # too few iterations for the test: the iteration time says so instead of better/worse
    d = compare.diff(fake([10e6, 10e6, 10e6]), fake([12e6, 12e6, 12e6]))
    m = rows(d)["iter_p50_ns"]
    assert m["verdict"] == "changed" and "too few iterations" in m["verdict_text"]


def test_untested_metric_against_the_run_to_run_spread():
    # iteration periods with a 20% interquartile spread: a 10% change of the timed region is noise,
    # a 60% change is not; GPU busy going up is better
    base = [8e6, 9e6, 10e6, 11e6, 12e6] * 3
    spread = (np.percentile(base, 75) - np.percentile(base, 25)) / np.median(base)
    d = compare.diff(fake(base, timed_ns=100e6, busy=500_000), fake(base, timed_ns=110e6, busy=510_000))
    assert d.noise["spread"] == pytest.approx(spread)
    assert rows(d)["timed_region_ns"]["verdict"] == "no clear change"
    assert rows(d)["gpu_busy_frac"]["verdict"] == "no clear change"  # +2% relative
    d = compare.diff(fake(base, timed_ns=100e6, busy=500_000), fake(base, timed_ns=160e6, busy=900_000))
    assert rows(d)["timed_region_ns"]["verdict_text"].startswith("slower (+60.0%")
    assert rows(d)["gpu_busy_frac"]["verdict_text"].startswith("better (+40.0 pt")
    assert rows(d)["gpu_idle_ns"]["verdict"] == "better"  # idle fell from 500 us to 100 us


def test_terminal_html_and_json_say_the_same_verdict(tmp_path, capsys):
    base = spread_periods(10e6, 12, seed=3, rel=0.3)
    new = list(np.random.default_rng(5).permutation(base) * 0.95)
    a, b = write(tmp_path, "a.json", fake(base)), write(tmp_path, "b.json", fake(new))
    j, h = tmp_path / "d.json", tmp_path / "d.html"
    assert main(["diff", a, b, "--json", str(j), "--html", str(h)]) == 0
    out = capsys.readouterr().out
    m = {r["metric"]: r for r in json.loads(j.read_text())["metrics"]}["iter_p50_ns"]
    assert m["verdict"] == "no clear change"
    line = next(ln for ln in out.splitlines() if "Iteration time p50 (period)" in ln)
    assert line.split("│")[-2].strip() == m["verdict_text"]
    assert f'class="verdict v-no-clear-change">{m["verdict_text"]}</td>' in h.read_text()


# -- 3. kernel names ------------------------------------------------------------------------------

PREFIX = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8::Params, " \
         "cutlass::gemm::"
LONG_A = PREFIX + "GemmUniversal<128, 256, 64, float, true>(Params) [grid 132]"
LONG_B = PREFIX + "GemmUniversal<128, 128, 64, float, true>(Params) [grid 132]"


def test_short_names_of_a_shared_100_character_prefix_differ():
    assert len(PREFIX) >= 100 and LONG_A[:100] == LONG_B[:100] and LONG_A != LONG_B
    s = short_names([LONG_A, LONG_B, "short_kernel"], width=70)
    assert s["short_kernel"] == "short_kernel"
    assert s[LONG_A] != s[LONG_B]
    for name in (LONG_A, LONG_B):
        assert ELLIPSIS in s[name] and len(s[name]) < len(name)
        assert s[name].startswith(name[:20]) and s[name].endswith(name[-15:])
    assert "<128, 256" in s[LONG_A] and "<128, 128" in s[LONG_B]  # the part that tells them apart


def test_short_names_never_look_alike():
    """Many names built to share prefixes and suffixes: every short form is distinct."""
    parts = ["<128, 64>", "<128, 128>", "<64, 64>"]
    names = [f"{PREFIX}{x}::inner{y}::{'z' * 40}{z}(int)" for x, y, z in product(parts, parts, parts)]
    names += [n.replace("(int)", "(float)") for n in names]
    for width in (24, 40, 70, 120):
        s = short_names(names, width=width)
        assert len(set(s.values())) == len(set(names))
    # a name that looks like another one's short form: both stay distinct
    s = short_names([LONG_A, LONG_B], width=40)
    s2 = short_names([LONG_A, LONG_B, s[LONG_A]], width=40)
    assert len(set(s2.values())) == 3


def test_terminal_shows_distinct_kernel_names_and_html_whole_ones(tmp_path, capsys):
    per = spread_periods(10e6)
    a = write(tmp_path, "a.json", fake(per, kernels=[(LONG_A, 5_000_000), (LONG_B, 3_000_000)]))
    b = write(tmp_path, "b.json", fake(per, kernels=[(LONG_A, 9_000_000), (LONG_B, 1_000_000)]))
    h = tmp_path / "d.html"
    assert main(["diff", a, b, "--html", str(h)]) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.startswith("│ void cutlass")]
    assert len(lines) == 2 and lines[0].split("│")[1] != lines[1].split("│")[1]
    html = h.read_text()
    from markupsafe import escape

    assert str(escape(LONG_A)) in html and str(escape(LONG_B)) in html


# -- 4. the gate threshold ------------------------------------------------------------------------

@pytest.mark.parametrize("text, want", [("5", 0.05), ("5%", 0.05), (" 5 % ", 0.05), ("0.5", 0.005),
                                        ("0.05", 0.0005), ("0", 0.0), ("1000", 10.0), ("12.5%", 0.125)])
def test_threshold_is_always_percent(text, want):
    assert parse_threshold(text) == pytest.approx(want)


@pytest.mark.parametrize("text", ["-1", "-5%", "nan", "inf", "-inf", "1000.1", "5000%", "", "%", "five", "5%%",
                                  "0x10"])
def test_nonsense_thresholds_are_usage_errors(text, tmp_path, capsys):
    a = write(tmp_path, "a.json", fake(spread_periods(10e6)))
    assert main(["diff", a, a, f"--fail-on-regression={text}", "-q"]) == 2
    assert "--fail-on-regression" in capsys.readouterr().err


def test_a_221_percent_regression_fails_a_5_percent_gate(tmp_path, capsys):
    base = spread_periods(10e6, 12, seed=1)
    new = [v * 3.218 for v in spread_periods(10e6, 12, seed=2)]
    a, b = write(tmp_path, "a.json", fake(base)), write(tmp_path, "b.json", fake(new))
    change = float(np.median(new)) / float(np.median(base)) - 1
    assert 2.0 < change < 2.5
    for t in ("5", "5%"):
        j = tmp_path / f"g{t.strip('%')}{len(t)}.json"
        h = j.with_suffix(".html")
        assert main(["diff", a, b, "--fail-on-regression", t, "--json", str(j), "--html", str(h)]) == 11
        assert "REGRESSION" in h.read_text() and "gets more than 5.0% worse" in h.read_text()
        cap = capsys.readouterr()
        assert "gate: fail when iteration time p50 (period) gets more than 5.0% worse" in cap.out
        assert f"got {change:.1%} worse, more than the 5.0% allowed" in cap.err
        g = json.loads(j.read_text())["gate"]
        assert g["failed"] and g["threshold"] == pytest.approx(0.05) and g["threshold_pct"] == pytest.approx(5)
    # a threshold above the change passes
    assert main(["diff", a, b, "--fail-on-regression", "300", "-q"]) == 0
    # improvements never fail
    assert main(["diff", b, a, "--fail-on-regression", "0", "-q"]) == 0


def test_real_regression_fails_with_a_bare_number(fixture_dir, capsys):
    """ladder_pinned -> ladder_baseline: the iteration period p50 grows by SQL's ratio; '5' used to mean 500%."""
    per = {n: sqltruth.median(sqltruth.periods(sqltruth.open_export(fixture_dir / f"{n}.sqlite"), "infer"))
           for n in ("ladder_pinned", "ladder_baseline")}
    change = per["ladder_baseline"] / per["ladder_pinned"] - 1
    assert change > 0.5
    rc = main(["diff", str(fixture_dir / "ladder_pinned.sqlite"), str(fixture_dir / "ladder_baseline.sqlite"),
               "--fail-on-regression", "5", "-q"])
    assert rc == 11
    assert f"got {change:.1%} worse, more than the 5.0% allowed, and the change is significant" in \
        capsys.readouterr().err


def test_a_small_bare_number_is_read_as_percent_and_says_so(tmp_path, capsys):
    a = write(tmp_path, "a.json", fake(spread_periods(10e6)))
    h = tmp_path / "d.html"
    assert main(["diff", a, a, "--fail-on-regression", "0.05", "--html", str(h)]) == 0
    out = re.sub(r"\s+", " ", capsys.readouterr().out)
    assert "gets more than 0.05% worse" in out and "read as 0.05 percent" in out and "write 5%" in out
    assert "read as 0.05 percent" in h.read_text()


def test_gate_on_a_metric_without_a_test_says_the_threshold_decides(tmp_path, capsys):
    a = write(tmp_path, "a.json", fake([], timed_ns=100e6))
    b = write(tmp_path, "b.json", fake([], timed_ns=110e6))
    assert main(["diff", a, b, "--fail-on-regression", "5", "--metric", "timed_region_ns"]) == 11
    cap = capsys.readouterr()
    assert "the threshold alone decides" in re.sub(r"\s+", " ", cap.out)
    assert "Timed region (CPU) got 10.0% worse" in cap.err and "no noise test" in cap.err


def test_help_and_readme_state_the_unit():
    from nsysan.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "cmd").choices["diff"]
    text = " ".join(sub.format_help().split())
    assert "5 and 5% both mean five percent" in text
    doc = (ROOT / "docs" / "compare.md").read_text()  # the README's "Comparing runs", moved to docs/
    section = doc[doc.index("# Comparing runs"):]
    assert "`--fail-on-regression 5` and `--fail-on-regression 5%` both mean five percent" in section


# -- 5. warnings when the runs are not like for like ---------------------------------------------

@pytest.mark.parametrize("change, code, level", [
    ({"gpus": ("NVIDIA A100-SXM4-80GB",)}, "gpu-model", "warning"),
    ({"graph": "node"}, "cuda-graph-trace", "warning"),
    ({"rng_name": "train_step"}, "iteration-range", "warning"),
    ({"nsys": "2024.5.1.113"}, "nsys-version", "note"),
    ({"window": "capture"}, "steady-window", "warning"),
])
def test_each_difference_is_warned_about_everywhere(change, code, level, tmp_path, capsys):
    per = spread_periods(10e6)
    base_kw = {"graph": "graph"} if code == "cuda-graph-trace" else {}
    a = write(tmp_path, "a.json", fake(per, **base_kw))
    b = write(tmp_path, "b.json", fake(per, **change))
    j, h = tmp_path / "d.json", tmp_path / "d.html"
    assert main(["diff", a, b, "--json", str(j), "--html", str(h)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    ws = json.loads(j.read_text())["warnings"]
    assert [(w["code"], w["level"]) for w in ws] == [(code, level)]
    msg = ws[0]["message"]
    assert f"{level}: {msg}" in out
    from markupsafe import escape

    assert str(escape(msg)) in h.read_text()


def test_one_run_without_iterations_is_warned_about():
    d = compare.diff(fake(spread_periods(10e6)), fake([]))
    assert [w["code"] for w in d.warnings] == ["iteration-range"]
    assert "only the base run has an iteration range" in d.warnings[0]["message"]


def test_like_for_like_runs_get_no_warning(analysis):
    from nsysan.report.jsonout import analysis_to_dict

    d = compare.diff(analysis_to_dict(analysis("ladder_pinned")), analysis_to_dict(analysis("ladder_baseline")))
    assert d.warnings == []
    # eager -> CUDA Graphs is the change being measured, not a tracing difference
    d = compare.diff(analysis_to_dict(analysis("decode_eager")), analysis_to_dict(analysis("decode_graph")))
    assert d.warnings == []


def test_graph_vs_node_tracing_is_warned_about_on_real_traces(analysis):
    from nsysan.report.jsonout import analysis_to_dict

    d = compare.diff(analysis_to_dict(analysis("decode_graph")), analysis_to_dict(analysis("decode_graph_nodes")))
    assert [w["code"] for w in d.warnings] == ["cuda-graph-trace"]


# -- 6. the page fits and prints -----------------------------------------------------------------

def test_page_css_wraps_names_scrolls_and_prints():
    tpl = (ROOT / "templates" / "compare.html.j2").read_text()
    assert "overflow-wrap:anywhere" in tpl and "overflow-x:auto" in tpl and "@media print" in tpl


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FITS = """() => {
    const out = {page: document.documentElement.scrollWidth, cut: []};
    for (const t of document.querySelectorAll('#diff table')) {
        const box = t.parentElement.getBoundingClientRect();
        for (const th of t.querySelectorAll('thead th')) {
            const r = th.getBoundingClientRect();
            if (r.right > box.right + 1 || r.right > window.innerWidth + 1) out.cut.push(th.textContent);
        }
    }
    return out; }"""


@pytest.mark.skipif(not CHROMIUM, reason="no chromium executable (apt-get install chromium)")
def test_page_fits_a_1440_pixel_window_and_a_printed_page(fixture_dir, tmp_path):
    """Real kernel names (sm90_xmma_..., 130 characters without a space): the page is no wider than
    the window, and every column header of every table is inside it, on screen and in print."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed")
    h = tmp_path / "d.html"
    assert main(["diff", str(fixture_dir / "ladder_pinned.sqlite"), str(fixture_dir / "ladder_baseline.sqlite"),
                 "--html", str(h), "-q"]) == 0
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                              args=["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        try:
            # 1440 px: a laptop window; 720 px: a Letter/A4 page's printable width at 96 dpi
            for width, media in ((1440, "screen"), (720, "print")):
                page = b.new_page(viewport={"width": width, "height": 900})
                page.emulate_media(media=media)
                page.goto(h.as_uri())
                got = page.evaluate(FITS)
                assert got["page"] <= width and got["cut"] == [], (media, got)
                page.close()
        finally:
            b.close()


def test_names_from_files_are_escaped_in_the_page(tmp_path):
    evil = "</script><img src=x onerror=alert(1)>void k<128, float>(T*)"
    per = spread_periods(10e6)
    a = write(tmp_path, "a.json", fake(per, kernels=[(evil, 1_000_000)], gpus=(evil,), rng_name=evil))
    b = write(tmp_path, "b.json", fake(per, kernels=[(evil, 2_000_000)], rng_name="step"))
    h = tmp_path / "d.html"
    assert main(["diff", a, b, "--html", str(h), "-q"]) == 0
    html = h.read_text()
    assert "<img src=x" not in html and "</script><img" not in html
    assert "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;void k&lt;128, float&gt;(T*)" in html
