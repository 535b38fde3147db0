"""`evalgauge audit`: a preset, a leaderboard CSV, claims and components from a JSON, the bundled examples as the
README reads them, and the messages that name what to fix."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner

from evalgauge.audit.published import preset
from evalgauge.cli import main
from evalgauge.errors import DesignError


def test_audit_command_on_a_preset_and_on_a_leaderboard_csv(tmp_path):
    runner = CliRunner()
    out = runner.invoke(main, ["audit", "--preset", "mt-bench", "--json", "-"])
    assert out.exit_code == 0, out.output
    payload = json.loads(out.output)
    assert round(payload["floors"]["mdd_30_items"], 2) == 0.63
    assert round(payload["floors"]["mdd_native_items"], 2) == 0.54
    board = tmp_path / "board.csv"
    board.write_text("system,score,items\nA,8.9,80\nB,8.7,80\nC,7.1,80\n")
    out = runner.invoke(main, ["audit", str(board), "--preset", "mt-bench", "--scale", "1-10"])
    assert out.exit_code == 0, out.output
    assert "Adjacent pairs" in out.output and "rank set" in out.output
    claims = tmp_path / "claims.csv"
    claims.write_text("claim,delta,items\npaper 1,0.17,80\npaper 2,0.9,80\n")
    out = runner.invoke(main, ["audit", str(claims), "--preset", "mt-bench", "--json", "-"])
    verdict = json.loads(out.output)
    assert [c["exceeds_mdd"] for c in verdict["claims"]] == [False, True]
    # components from a fit's JSON
    vc_json = tmp_path / "vc.json"
    vc = preset("alpacaeval2").components(items=100, judges=2)
    vc_json.write_text(vc.to_json())
    out = runner.invoke(main, ["audit", str(claims), "--components", str(vc_json)])
    assert out.exit_code == 0, out.output


@pytest.mark.parametrize(("content", "args", "message"), [
    ("system,points\nA,1\nB,2\n", [], "needs the columns 'system' and 'score'"),
    ("claim,delta\nA,0.2\nB,lots\n", [], "row 2, column 'delta': 'lots' is not a number"),
    ("system,score\nA,1\nA,2\n", [], "system 'A' appears twice"),
    ("claim,delta,items\nA,0.2,0\n", [], "row 1, column 'items'"),
    ("claim,delta\nA,0.2\n", ["--scale", "10-1"], "LO-HI"),
])
def test_audit_bad_input_names_what_to_fix(tmp_path, content, args, message):
    path = tmp_path / "t.csv"
    path.write_text(content)
    before = path.read_bytes()
    out = CliRunner().invoke(main, ["audit", str(path), "--preset", "mt-bench", *args])
    assert out.exit_code == 2, out.output
    assert message in out.output and "Traceback" not in out.output
    assert path.read_bytes() == before


def test_audit_needs_one_source_and_a_known_scale(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("claim,delta\nA,0.2\n")
    runner = CliRunner()
    out = runner.invoke(main, ["audit", str(path)])
    assert out.exit_code == 2 and "exactly one source" in out.output
    out = runner.invoke(main, ["audit", str(path), "--component", "system=0.1", "--component", "system:item=0.2",
                               "--component", "residual=0.3", "--items", "30", "--scale", "1-10"])
    assert out.exit_code == 2 and "components' scale is unknown" in out.output
    with pytest.raises(DesignError, match="unknown preset"):
        preset("chatbot-arena")


@pytest.mark.slow
def test_bundled_examples_read_as_the_readme_says():
    from conftest import FIXTURES

    examples = FIXTURES.parent.parent / "examples" / "audit"
    runner = CliRunner()
    out = runner.invoke(main, ["audit", str(examples / "mt_bench_claims.csv"), "--preset", "mt-bench", "--json", "-"])
    claims = json.loads(out.output)["claims"]
    assert [round(c["mdd"], 2) for c in claims] == [0.63, 0.54]
    assert not any(c["exceeds_mdd"] for c in claims)
    assert [round(100 * c["p_inverted"]) for c in claims] == [30, 27]
    # AlpacaEval 2's board of 223 systems in win-rate points against the paper's pairwise floor (9.8 at 805)
    out = runner.invoke(main, ["audit", str(examples / "alpacaeval2_leaderboard.csv"), "--preset", "pairwise",
                               "--scale", "0-100"])
    assert out.exit_code == 0, out.output
    assert "0 of 222 adjacent pairs exceed" in out.output
    assert "too many to letter" in out.output  # dozens of overlapping groups: the rank sets carry them


def test_a_board_whose_name_column_is_model_or_name_is_read(tmp_path):
    """arena-hard-auto's published leaderboard names its systems in 'model' (its show_result.py columns:
    model, score, rating_q025, rating_q975, CI, avg_tokens)."""
    runner = CliRunner()
    for column in ("model", "Name", "system"):
        path = tmp_path / f"{column}.csv"
        pd.DataFrame({column: ["gpt-4-turbo", "claude-3-opus", "llama-3-70b"], "score": [82.6, 60.4, 46.6],
                      "rating_q025": [81.1, 58.0, 44.0], "CI": ["(-1.5, 1.9)", "(-2.4, 2.5)", "(-2.6, 2.4)"],
                      "avg_tokens": [662, 541, 591]}).to_csv(path, index=False)
        out = runner.invoke(main, ["audit", str(path), "--preset", "pairwise", "--scale", "0-100", "--json", "-"])
        assert out.exit_code == 0, (column, out.output)
        assert "Traceback" not in out.output and "gpt-4-turbo" in out.output
