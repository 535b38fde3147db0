"""A board at arena size: the terminal shows the neighbours' pairs, the report folds the full
pair table behind a filter, the rank-set axis stays legible, and no sentence asks for millions of items."""

import re

import pytest
from click.testing import CliRunner

from conftest import ROOT
from evalgauge.cli import main
from evalgauge.simulate import simulate, sizing_preset


def _board(tmp_path, systems=30, items=60, judges=3):
    spec = sizing_preset(systems=systems, items=items, judges=judges, replicates=1)
    path = tmp_path / "board.csv"
    simulate(spec, seed=3).to_csv(path, index=False)
    return path


@pytest.mark.slow
def test_the_terminal_shows_the_neighbours_and_says_where_the_rest_are(tmp_path):
    path = _board(tmp_path)
    res = CliRunner().invoke(main, ["compare", str(path), "--pair-gstudies", "none"])
    assert res.exit_code == 0, res.output
    assert "Adjacent pairs (neighbours in the ranking" in res.output and "all 435 pairs at once" in res.output
    assert "(29 of 435 pairs shown; all of them in --json and the report)" in res.output


@pytest.mark.slow
def test_no_sentence_asks_for_an_impractical_number_of_items(tmp_path):
    path = _board(tmp_path)
    res = CliRunner().invoke(main, ["compare", str(path), "--pair-gstudies", "none", "--json", "-"])
    payload = __import__("json").loads(res.output)
    items = 60
    for sentence in payload["sentences"]:
        for count in re.findall(r"([\d,]+) more items", sentence):
            assert int(count.replace(",", "")) + items <= 100 * items, sentence
    assert any("no number of items or judges alone separates them" in s for s in payload["sentences"])


@pytest.mark.slow
def test_the_report_folds_a_long_pair_table_behind_a_filter(tmp_path):
    path = _board(tmp_path)
    report = tmp_path / "r.html"
    res = CliRunner().invoke(main, ["analyze", str(path), "--report", str(report)])
    assert res.exit_code == 0, res.output
    html = report.read_text()
    assert "<details><summary>all 435 pairs</summary><input type='search'" in html
    assert html.count("<tr>") > 435  # every pair is in it (and the leaderboard's rows)
    small = tmp_path / "small.csv"
    spec = sizing_preset(systems=5, items=40, judges=3, replicates=1)
    simulate(spec, seed=1).to_csv(small, index=False)
    CliRunner().invoke(main, ["analyze", str(small), "--report", str(tmp_path / "s.html")])
    assert "<details open><summary>all 10 pairs</summary>" in (tmp_path / "s.html").read_text()


@pytest.mark.slow
def test_a_board_with_dozens_of_groups_is_shown_by_rank_sets_not_letters(tmp_path):
    path = _board(tmp_path, systems=62, items=200, judges=2)
    report = tmp_path / "r.html"
    res = CliRunner().invoke(main, ["analyze", str(path), "--report", str(report), "--json", str(tmp_path / "a.json")])
    assert res.exit_code == 0, res.output
    payload = __import__("json").loads((tmp_path / "a.json").read_text())
    groups = [s["group"] for s in payload["comparison"]["systems"]]
    assert max(map(len, groups)) > 6  # the letters are in the JSON ...
    assert "overlapping groups are too many to letter" in res.output  # ... the terminal says why they are not shown
    html = report.read_text()
    assert "overlapping groups are too many to letter" in html
    assert "alt='pair matrix'" not in html and "No pair matrix above 60 systems" in html
    assert "<td class='nw'>[" in html  # an interval never breaks across lines


@pytest.mark.slow
def test_the_58_system_alpacaeval_board_in_chromium(tmp_path):
    # AlpacaEval 2's weighted_alpaca_eval_gpt4_turbo annotations: 58 systems x 805 instructions, one judge
    # (tests/fixtures/README.md); the report opened in headless Chromium and its screenshot kept
    import subprocess

    from conftest import chromium

    browser = chromium(tmp_path / "profile")
    root = ROOT
    data = root / "tests" / "fixtures" / "alpacaeval" / "weighted_gpt4_turbo_58_systems.parquet"
    report = tmp_path / "board.html"
    res = CliRunner().invoke(main, ["analyze", str(data), "--report", str(report)])
    assert res.exit_code == 0, res.output
    artifacts = root / "tests" / "artifacts"
    artifacts.mkdir(parents=True, exist_ok=True)
    shot = artifacts / "board58.png"
    proc = subprocess.run([*browser, "--window-size=1100,6000", f"--screenshot={shot}", report.as_uri()],
                          capture_output=True, text=True, timeout=180)
    assert shot.exists() and shot.stat().st_size > 100_000
    assert not [line for line in proc.stderr.splitlines() if "Uncaught" in line]
    dom = subprocess.run([*browser, "--dump-dom", report.as_uri()], capture_output=True, text=True,
                         timeout=180).stdout
    assert dom.count("<tr>") > 58 + 1653  # the leaderboard and every pair
    assert "<details><summary>all 1,653 pairs</summary>" in dom or "all 1653 pairs" in dom
    assert "overlapping groups are too many to letter" in dom
    assert "alt='leaderboard'" in dom.replace('"', "'") and "alt='rank sets'" in dom.replace('"', "'")
