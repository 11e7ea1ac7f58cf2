from __future__ import annotations

import json
import os
import re
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

import factories as F
from nsysan.analysis import Params, analyze
from nsysan.cli import main
from nsysan.report import html, jsonout, view

HOSTILE = "</script><script>alert(1)</script>"
KNAME = "void k<128, float>(T*) & <b>bold</b>"


def hostile_trace():
    k = F.kernels([(0, 100, 7), (1000, 1100, 7)], name=KNAME)
    api = F.api([(-50, -40, "cudaLaunchKernel", 1), (900, 910, "cudaLaunchKernel", 2)])
    nv = F.nvtx([(150, 850, HOSTILE), (0, 2000, "=cmd|' /C calc'!A0")])
    return F.make_trace(kernels=k, cuda_api=api, nvtx=nv)


def test_html_escapes_every_trace_string():
    a = analyze(hostile_trace(), Params(min_gap_ns=100))
    out = html.render(view.build(a))
    assert HOSTILE not in out and "<b>bold</b>" not in out
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in out  # shown as text in tables
    # the JSON island cannot close its script tag
    island = re.search(r'<script type="application/json" id="tl-data">(.*?)</script>', out, re.S).group(1)
    assert "<" not in island and json.loads(island)["names"]
    assert out.count("<script") == 3  # the JSON island and our two scripts, nothing injected


def test_csv_neutralises_formulas():
    a = analyze(hostile_trace(), Params(min_gap_ns=100))
    text = jsonout.to_csv(a.nvtx)
    assert "'=cmd" in text and "\n=cmd" not in text and ",=cmd" not in text


@pytest.mark.parametrize("name", ["ladder_baseline", "launch_graph", "timing"])
def test_json_schema_and_bounds(name, analysis):
    d = json.loads(jsonout.to_json(analysis(name)))
    assert d["schema"] == "nsysan.analysis/2"
    for key in ("trace", "kernels", "cuda_api", "memcpy", "memset", "nvtx", "launch", "overlap", "gpu", "gaps",
                "iterations", "findings"):
        assert key in d
    for row in d["gpu"]["capture"] + d["gpu"]["steady"]:
        assert 0 <= row["busy_frac"] <= 1 and row["busy_ns"] <= d["windows"]["capture"]["dur_ns"]
    assert all(isinstance(r["total_ns"], int) for r in d["kernels"]["by_name"])
    assert "capture" not in d["trace"]  # env/command lines hidden by default


def test_render_empty_trace():
    a = analyze(F.make_trace())
    assert "No rule fired" in html.render(view.build(a))


def test_cli_writes_outputs_atomically_and_refuses_overwrite(fixture_dir, tmp_path, capsys):
    trace = str(fixture_dir / "ladder_worker.sqlite")
    out = tmp_path / "r.json"
    assert main(["analyze", trace, "--json", str(out), "--csv", str(tmp_path / "csv"), "-q"]) == 0
    assert out.exists() and (tmp_path / "r.html").exists() and (tmp_path / "csv" / "kernels.csv").exists()
    assert main(["analyze", trace, "--json", str(out), "-q"]) == 0  # nsysan's own outputs are replaced
    mine = tmp_path / "mine.json"  # a file nsysan did not write needs --force
    mine.write_text("{}\n")
    assert main(["analyze", trace, "--json", str(mine), "--no-html", "-q"]) == 8
    assert "--force" in capsys.readouterr().err and mine.read_text() == "{}\n"
    assert main(["analyze", trace, "--json", str(out), "-q", "--force", "--set", "launch-bound.min_kernels=100000"]) == 0
    assert "launch-bound" not in {f["rule"] for f in json.loads(out.read_text())["findings"]}
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_show_env_is_opt_in(fixture_dir, tmp_path):
    trace = str(fixture_dir / "launch_graph.sqlite")
    assert main(["analyze", trace, "--json", str(tmp_path / "a.json"), "-q"]) == 0
    assert "ENVIRONMENT_VARIABLE" not in (tmp_path / "a.html").read_text()
    assert main(["analyze", trace, "--json", str(tmp_path / "b.json"), "-q", "--show-env"]) == 0
    assert "ENVIRONMENT_VARIABLE" in (tmp_path / "b.html").read_text()


def test_several_traces_in_parallel(fixture_dir, tmp_path, capsys):
    traces = [str(fixture_dir / f"{n}.sqlite") for n in ("ladder_graph", "ladder_multictx")]
    assert main(["analyze", *traces, "--out-dir", str(tmp_path), "-q", "--jobs", "2"]) == 0
    out = capsys.readouterr().out
    assert "ladder_graph.sqlite" in out and "ladder_multictx.sqlite" in out
    assert (tmp_path / "ladder_graph.json").exists()


def test_rules_command(capsys):
    assert main(["rules"]) == 0
    assert "host-bound-gap" in capsys.readouterr().out


@pytest.mark.skipif(shutil.which("uv") is None and sys.version_info < (3, 10), reason="needs venv")
def test_templates_reach_the_installed_wheel(tmp_path, fixture_dir):
    root = ROOT
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"), str(root)],
                   check=True)
    wheel = next((tmp_path / "dist").glob("nsysan-*.whl"))
    venv = tmp_path / "venv"
    # a fresh venv that sees this environment's packages (pandas, jinja2 ...) through a .pth file:
    # ``--system-site-packages`` would give the base interpreter's, which a venv user does not have
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)  # this pip installs
    py = venv / "bin" / "python"
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    deps = [p for p in site.getsitepackages() + [site.getusersitepackages()] if Path(p).is_dir()]
    Path(purelib, "_nsysan_test_deps.pth").write_text("\n".join(deps) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--force-reinstall",
                    str(wheel)], check=True)
    out = tmp_path / "w.html"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the installed wheel, not a checkout
    r = subprocess.run([str(py), "-c", "import nsysan.cli,sys; sys.exit(nsysan.cli.main(sys.argv[1:]))", "analyze",
                        str(fixture_dir / "launch_eager.sqlite"), "--html", str(out), "-q"],
                       cwd=tmp_path, capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    loc = subprocess.run([str(py), "-c", "import nsysan;print(nsysan.__file__)"], cwd=tmp_path, capture_output=True,
                         text=True, env=env).stdout
    assert str(venv) in loc
    assert "<canvas" in out.read_text()


def test_profile_reports_missing_nsys(capsys, tmp_path):
    assert main(["profile", "--nsys", str(tmp_path / "nsys"), "--", "true"]) == 10
    assert "Traceback" not in capsys.readouterr().err


def test_json_sorted_keys_one_section_per_line(analysis):
    from nsysan.report.jsonout import to_json

    text = to_json(analysis("ladder_overlap"))
    unsorted = []

    def hook(pairs):
        keys = [k for k, _ in pairs]
        if keys != sorted(keys):
            unsorted.append(keys)
        return dict(pairs)

    d = json.loads(text, object_pairs_hook=hook)
    assert unsorted == []
    lines = text.splitlines()
    assert lines[0] == "{" and lines[-1] == "}" and len(lines) == len(d) + 2
    assert [ln.split('"')[1] for ln in lines[1:-1]] == sorted(d)


def test_nsysan_alone_prints_help_and_example_takes_the_readme_name(capsys):
    assert main([]) == 0
    assert "usage: nsysan" in capsys.readouterr().out
    assert main(["example", "example:launch_eager"]) == 0
    assert capsys.readouterr().out.strip().endswith("launch_eager.sqlite")
