"""The Python API (issue #19): ``nsysan.analyze`` takes the CLI's options as keywords and gives the
CLI's result and the CLI's error messages; ``dir(nsysan)``; short reprs; ``write_html`` / ``to_json``
with the CLI's overwrite protections; the notebook fragment escapes trace text."""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import subprocess
import sys
from pathlib import Path

import factories as F
import pytest

import nsysan
from nsysan.analysis import Params
from nsysan.cli import main
from nsysan.errors import OutputExistsError, UsageError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
ROOT = Path(__file__).resolve().parents[2]
HOSTILE = "<script>alert(1)</script><b>x</b>"


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("api") / "ladder_baseline.sqlite"
    p.write_bytes(lzma.decompress((FIXTURES / "ladder_baseline" / "trace.sqlite.xz").read_bytes()))
    return p


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _cli_json(trace: Path, out: Path, *opts: str) -> dict:
    assert main(["analyze", str(trace), *opts, "--json", str(out), "--no-html", "-q"]) == 0
    return json.loads(out.read_text())


OPTIONS = dict(iteration_range="Print Result", min_gap_us=20, warmup_factor=2.0,
               set={"host-bound-gap.min_frac": 0.1}, disable=["sync-api"])
CLI_OPTIONS = ["--iteration-range", "Print Result", "--min-gap-us", "20", "--warmup-factor", "2",
               "--set", "host-bound-gap.min_frac=0.1", "--disable", "sync-api"]


def test_keywords_give_the_cli_result(trace_path, tmp_path):
    # GIVEN the CLI's JSON with options that change the analysis (another iteration range among them)
    cli = _cli_json(trace_path, tmp_path / "cli.json", *CLI_OPTIONS)
    default = _cli_json(trace_path, tmp_path / "default.json")
    # WHEN the API gets the same options as keywords (a path, then a loaded Trace)
    a = nsysan.analyze(trace_path, **OPTIONS)
    b = nsysan.analyze(nsysan.open_trace(trace_path), **OPTIONS)
    # THEN the same dict as the CLI's JSON, which differs from the default analysis
    assert json.loads(json.dumps(a.to_dict())) == cli
    assert json.loads(json.dumps(b.to_dict())) == cli
    assert cli != default and a.iterations.range_name == "Print Result"
    assert cli["iterations"]["range"] == "Print Result" != default["iterations"]["range"]
    assert {r["rule"]: r["status"] for r in a.rule_log}["sync-api"] == "disabled"


def test_config_and_rule_config_as_the_cli(trace_path, tmp_path):
    cfg = tmp_path / "rules.json"
    cfg.write_text(json.dumps({"rules": {"launch-bound": {"min_kernels": 5}, "sync-api": {"min_frac": 0.01}}}))
    cli = _cli_json(trace_path, tmp_path / "cli.json", "--config", str(cfg))
    by_file = nsysan.analyze(trace_path, config=cfg)
    by_dict = nsysan.analyze(trace_path, rule_config={"launch-bound": {"min_kernels": 5}, "sync-api": {"min_frac": 0.01}})
    assert json.loads(json.dumps(by_file.to_dict())) == cli == json.loads(json.dumps(by_dict.to_dict()))


def test_old_params_path_still_works(trace_path):
    t = nsysan.open_trace(trace_path)
    old = nsysan.analyze(t, Params(iteration_range="Print Result", min_gap_ns=20_000, warmup_factor=2.0))
    new = nsysan.analyze(t, iteration_range="Print Result", min_gap_us=20, warmup_factor=2.0)
    assert old.to_dict() == new.to_dict()
    with pytest.raises(TypeError, match="not both"):
        nsysan.analyze(t, Params(), min_gap_us=5)
    with pytest.raises(TypeError):
        nsysan.analyze(t, no_such_option=1)


def _cli_error(capsys, trace: Path, *opts: str) -> str:
    try:
        rc = main(["analyze", str(trace), "--no-html", "-q", *opts])
    except SystemExit as e:  # argparse's own errors
        rc = e.code
    assert rc == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("kw, cli, api_name, cli_name", [
    ({"set": {"no-such-rule.x": 1}}, ["--set", "no-such-rule.x=1"], "set", "--set"),
    ({"set": ["host-bound-gap.min_frac=-1"]}, ["--set", "host-bound-gap.min_frac=-1"], "set", "--set"),
    ({"set": {"host-bound-gap.nope": 1}}, ["--set", "host-bound-gap.nope=1"], "set", "--set"),
    ({"set": ["bad"]}, ["--set", "bad"], "set", "--set"),
    ({"disable": ["nope", "sync-api"]}, ["--disable", "nope", "--disable", "sync-api"], "disable", "--disable"),
])
def test_invalid_rule_options_raise_the_cli_message(trace_path, capsys, kw, cli, api_name, cli_name):
    with pytest.raises(ValueError) as e:
        nsysan.analyze(trace_path, **kw)
    err = _cli_error(capsys, trace_path, *cli)
    assert f"nsysan: error: {str(e.value).replace(api_name, cli_name, 1)}\n" == err.splitlines(keepends=True)[0]


@pytest.mark.parametrize("kw, cli, expected", [
    ({"min_gap_us": -1}, ["--min-gap-us", "-1"], "expected a number >= 0"),
    ({"min_gap_us": float("nan")}, ["--min-gap-us", "nan"], "expected a number >= 0"),
    ({"warmup_factor": 0}, ["--warmup-factor", "0"], "expected a number > 0"),
    ({"max_events": 1.5}, ["--max-events", "1.5"], "expected an integer >= 0"),
])
def test_invalid_numbers_raise_the_cli_message(trace_path, capsys, kw, cli, expected):
    (name,) = kw
    with pytest.raises(ValueError) as e:
        nsysan.analyze(trace_path, **kw)
    err = _cli_error(capsys, trace_path, *cli)
    assert str(e.value).startswith(f"{name}: ") and str(e.value).endswith(expected)
    assert f"argument {cli[0]}: {cli[1]!r}: {expected}" in err


def test_invalid_config_file_raises_the_cli_message(trace_path, tmp_path, capsys):
    cfg = tmp_path / "bad.json"
    cfg.write_text('{"rules": {"launch-bound": {"min_kernels": 1.5}}}')
    with pytest.raises(ValueError) as e:
        nsysan.analyze(trace_path, config=cfg)
    err = _cli_error(capsys, trace_path, "--config", str(cfg))
    assert err.startswith(f"nsysan: error: --{e.value}")


def test_dir_lists_public_names_without_importing_pandas():
    assert {"open_trace", "analyze", "Trace", "TraceMeta", "__version__"} <= set(dir(nsysan))
    code = ("import sys, nsysan; names = dir(nsysan); assert 'open_trace' in names, names; "
            "assert 'pandas' not in sys.modules; from nsysan.cli import main\n"
            "try:\n    main(['--version'])\nexcept SystemExit:\n    pass\n"
            "assert 'pandas' not in sys.modules, 'pandas imported'; print('ok')")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr


def test_repr_is_short_and_says_the_range(trace_path):
    a = nsysan.analyze(trace_path, iteration_range="Print Result")
    text = repr(a)
    assert len(text) < 1000 and len(text.splitlines()) <= 6
    assert "'Print Result' x" in text and "ladder_baseline.sqlite" in text
    top = a.findings[0]
    assert top.rule in text and "findings: %d" % len(a.findings) in text
    assert len(repr(a.trace)) < 1000 and "kernels" in repr(a.trace)


def _hostile_analysis(name: str = HOSTILE):
    # five iterations of a range named with markup, each launching a kernel
    starts = [i * 10_000 for i in range(5)]
    k = F.kernels([(s + 2_000, s + 6_000, 7) for s in starts], name=name)
    api = F.api([(s + 1_000, s + 1_500, "cudaLaunchKernel", i + 1) for i, s in enumerate(starts)])
    nv = F.nvtx([(s, s + 8_000, name) for s in starts])
    return nsysan.analyze(F.make_trace(kernels=k, cuda_api=api, nvtx=nv), iteration_range=name, min_gap_us=0.1)


def test_repr_html_escapes_trace_strings():
    a = _hostile_analysis()
    assert a.iterations.range_name == HOSTILE  # the hostile name is shown
    frag = a._repr_html_()
    assert "<script" not in frag and "<b>x</b>" not in frag
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&lt;b&gt;x&lt;/b&gt;" in frag
    assert "Where one iteration" in frag  # the iteration breakdown is there
    text = repr(a)
    assert len(text) < 1000


def test_repr_of_a_huge_name_stays_short():
    a = _hostile_analysis("r" * 5000 + "\x1b[31m")
    assert len(repr(a)) < 1000 and "\x1b" not in repr(a)


def test_write_html_is_the_cli_report_and_protects_files(trace_path, tmp_path):
    a = nsysan.analyze(trace_path)
    cli_html = tmp_path / "cli.html"
    assert main(["analyze", str(trace_path), "--html", str(cli_html), "-q"]) == 0
    out = tmp_path / "api.html"
    assert a.write_html(out) == out
    assert out.read_text() == cli_html.read_text()
    # an existing file: refused without force, unchanged; replaced with force
    out.write_text("keep")
    with pytest.raises(OutputExistsError):
        a.write_html(out)
    assert out.read_text() == "keep"
    a.write_html(out, force=True)
    assert out.read_text() == cli_html.read_text()
    # the trace itself: refused even with force, also through a link; the trace is unchanged
    before = _sha(trace_path)
    link = tmp_path / "link.html"
    link.symlink_to(trace_path)
    for target in (trace_path, link):
        with pytest.raises(UsageError, match="input"):
            a.write_html(target, force=True)
    assert _sha(trace_path) == before


def test_to_json_writes_the_cli_json(trace_path, tmp_path):
    a = nsysan.analyze(trace_path)
    cli = tmp_path / "cli.json"
    _cli_json(trace_path, cli)
    out = tmp_path / "api.json"
    text = a.to_json(out)
    assert out.read_text() == cli.read_text() == text
    a.to_json(out)  # its own earlier output is replaced
    mine = tmp_path / "mine.json"
    mine.write_text("{}\n")
    with pytest.raises(OutputExistsError):
        a.to_json(mine)
    assert mine.read_text() == "{}\n"
    with pytest.raises(UsageError):
        a.to_json(trace_path, force=True)
