"""evalgauge analyze and the HTML report: content, escaping, bad input, and a real browser."""

import base64
import json
import subprocess

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from conftest import ROOT, chromium
from evalgauge.api import analyze
from evalgauge.cli import main
from evalgauge.report.html import render, write_report
from evalgauge.simulate import simulate, sizing_preset, tee_table8

ALPACA = ROOT / "examples" / "alpacaeval" / "alpacaeval_5x805x2.csv"
ARTIFACTS = ROOT / "tests" / "artifacts"


def test_bundled_alpacaeval_slice_reproduces_the_leaderboard():
    frame = pd.read_csv(ALPACA)
    gem = frame[(frame["system"] == "gemini-pro") & (frame["judge"] == "alpaca_eval_gpt4_turbo_fn")]
    assert len(gem) == 805
    assert 100 * gem["score"].mean() == pytest.approx(20.372670807453417, abs=1e-9)


@pytest.mark.slow
def test_analyze_cli_json_and_report(tmp_path):
    report = tmp_path / "report.html"
    out = CliRunner().invoke(main, ["analyze", str(ALPACA), "--drop-missing", "--report", str(report),
                                    "--json", str(tmp_path / "a.json")])
    assert out.exit_code == 0, out.output
    payload = json.loads((tmp_path / "a.json").read_text())
    assert payload["components"]["method"] == "reml"  # one empty score: not a complete block
    assert payload["theta"]["se_ratio"] > 1
    assert payload["ceiling"]["facet"] == "judge" and 0 < payload["ceiling"]["erho2"] <= 1
    assert {i["tier"] for i in payload["checklist"]} == {"Minimum", "Standard", "Comprehensive"}
    html = report.read_text()
    images = html.count("<img ")
    assert images == 10  # 5 + the leaderboard, the rank sets, the pair matrix, the Q-Q and residual plots
    for chunk in html.split("data:image/png;base64,")[1:]:
        assert base64.b64decode(chunk.split("'", 1)[0])[:8] == b"\x89PNG\r\n\x1a\n"
    for phrase in ("Variance components", "What to change", "Reporting checklist", "single-judge ceiling"):
        assert phrase in html
    # the headline the terminal and the JSON give of one system's number, in the report too
    o = payload["object_scores"]["interval"]
    assert f"+-{o['half_width']:.4g} counting every source of error" in html
    assert f"against +-{o['naive_half_width']:.4g}" in html and "+-0.03704" in html and "+-0.02335" in html


def test_log_axes_tick_labels_read_as_numbers_not_mathtext_source():
    """Mathtext is off for every label (labels are data); the log axes' ticks must still read 1, 10, 100."""
    import matplotlib.pyplot as plt

    from evalgauge.report.figures import STYLE, _log_axes

    with plt.rc_context(STYLE):
        fig, ax = plt.subplots()
        ax.plot([1, 10, 100, 1000], [0.001, 0.01, 0.1, 1])
        _log_axes(ax, "xy")
        fig.canvas.draw()
        labels = [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels() if t.get_text()]
        plt.close(fig)
    assert labels and not any("$" in t or "mathdefault" in t for t in labels)
    assert {"10", "100", "0.01"} <= set(labels)


@pytest.mark.slow
def test_report_escapes_untrusted_labels(tmp_path):
    spec = sizing_preset(systems=4, items=5, judges=3, replicates=2)
    frame = simulate(spec, seed=1)
    frame["judge"] = frame["judge"].astype(str).replace({"j1": "<script>alert(1)</script>"})
    frame["system"] = frame["system"].astype(str).replace({"s1": "a&b<i>", "s3": "<script>alert(2)</script>"})
    result = analyze(frame)
    html = render(result)
    assert "<script>" not in html and "a&b<i>" not in html
    # each hostile system label is shown, escaped, wherever a plain one is (leaderboard, comparison,
    # figures): a report that dropped or mangled them would fail here, not pass
    shown = html.count(">s2<") + html.count(">s2 ")
    assert shown >= 2
    assert html.count("a&amp;b&lt;i&gt;") >= shown
    assert html.count("&lt;script&gt;alert(2)&lt;/script&gt;") >= shown


def test_tee_design_report(tmp_path):
    spec = tee_table8(categories=3, items_per_category=4, variants=3, temperatures=3, judges=3, replicates=2)
    frame = simulate(spec, seed=2)
    result = analyze(frame, spec.design())
    path = write_report(result, tmp_path / "tee.html")
    html = path.read_text()
    # items are the object: the ceiling is that of item scores (annotation reliability) under one judge
    assert "Naive and honest intervals" in html and result.ceiling.facet == "judge"
    checklist = {i["item"]: i["met"] for i in result.checklist}
    assert checklist["Prompt variants"] and checklist["Sensitivity flag"] and checklist["Factorial pilot"]


@pytest.mark.parametrize("args,content,needle", [
    (["--score", "rating"], None, "no column 'rating'"),
    ([], "x.xlsx", "analyze reads CSV, TSV, Parquet, JSONL and run databases"),
    (["--facets", "judge"], "one-facet", "nothing to estimate"),
])
def test_analyze_bad_input_exit_2(tmp_path, args, content, needle):
    if content == "x.xlsx":
        path = tmp_path / "x.xlsx"
        path.write_text("not a spreadsheet")
    elif content == "one-facet":
        path = tmp_path / "one.csv"
        pd.DataFrame({"judge": ["a", "b", "c"], "score": [1.0, 2.0, 3.0]}).to_csv(path, index=False)
    else:
        path = ALPACA
    out = CliRunner().invoke(main, ["analyze", str(path), *args])
    assert out.exit_code == 2, out.output
    assert needle in out.output and "Traceback" not in out.output
    assert out.output.count("\n") <= 3  # one paragraph


@pytest.mark.subprocess
def test_report_in_headless_chromium(tmp_path):
    browser = chromium(tmp_path / "profile")
    report = tmp_path / "report.html"
    CliRunner().invoke(main, ["analyze", str(ALPACA), "--drop-missing", "--report", str(report)])
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "report.png"
    proc = subprocess.run([*browser, "--window-size=1100,4000", f"--screenshot={shot}", report.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 50_000
    console = [line for line in proc.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert not console, console
    dom = subprocess.run([*browser, "--dump-dom", report.as_uri()], capture_output=True, text=True,
                         timeout=120).stdout
    assert dom.count("<img ") == 10 and "Reporting checklist" in dom and "Which system is better" in dom


@pytest.mark.slow
def test_pairwise_data_get_the_pairwise_sections(tmp_path):
    rng = np.random.default_rng(3)
    rows = []
    for item in range(30):
        for judge in ("j1", "j2"):
            for sys_, p in (("x", 0.7), ("y", 0.5), ("z", 0.35)):
                for order in ("AB", "BA"):
                    win = rng.random() < p + (0.05 if order == "AB" else -0.05)
                    a, b = (sys_, "base") if order == "AB" else ("base", sys_)
                    first_won = win if order == "AB" else not win
                    rows.append((a, b, "model_a" if first_won else "model_b", f"i{item}", judge))
    path = tmp_path / "pairs.csv"
    pd.DataFrame(rows, columns=["model_a", "model_b", "winner", "item", "judge"]).to_csv(path, index=False)
    report = tmp_path / "pw.html"
    out = CliRunner().invoke(main, ["analyze", str(path), "--report", str(report), "--json", "-"])
    assert out.exit_code == 0, out.output
    payload = json.loads(out.stdout)
    assert payload["pairwise"]["bradley_terry"] and "position_bias" in payload["pairwise"]
    html = report.read_text()
    assert "Bradley-Terry strengths" in html and "Position bias" in html and "TEE-aware" in html
