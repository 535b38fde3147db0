"""`evalgauge audit` and the sizing paper's published presets (evalgauge.audit.published, evalgauge.audit)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from evalgauge import dstudy, vocabulary
from evalgauge.audit import audit
from evalgauge.audit.published import PRESETS, mdd95, preset
from evalgauge.cli import main
from evalgauge.components import VarianceComponents
from evalgauge.errors import DesignError


def test_preset_names_are_the_vocabulary():
    assert tuple(PRESETS) == vocabulary.AUDIT_PRESETS


@pytest.mark.parametrize("name", list(PRESETS))
def test_each_preset_reproduces_printed_figures_it_did_not_use(name):
    # a figure printed to d decimals is reproduced when it lies within half a unit of its last digit of the
    # values the derivation takes over every rounding of its own printed inputs
    p = preset(name)
    assert p.checks
    for check in p.checks:
        lo, hi = p.check_range(check)
        half = check.figure.half_unit
        assert lo - half <= check.figure.value <= hi + half, (name, check.what, lo, hi)
    assert all(v >= 0 for v in p.values.values())


def test_mt_bench_preset_gives_the_papers_floor_and_its_verdict_on_the_median_claim():
    p = preset("mt-bench")
    assert round(mdd95(p.values, 30), 2) == 0.63
    assert round(mdd95(p.values, 80), 2) == 0.54  # sec. 5.6: "still 0.54 at MT-Bench's native 80 items"
    # the 17 MT-Bench improvements recovered from papers have median 0.17 (0-5 basis): below the floor at 30
    # items and at the native 80
    for items in (30, 80):
        result = audit(p.components(items=items), pd.DataFrame({"claim": ["median"], "delta": [0.17]}))
        row = result.claims.iloc[0]
        assert not row["exceeds_mdd"]
        assert row["mdd"] == pytest.approx(mdd95(p.values, items))
        assert row["p_inverted"] == pytest.approx(_phi(-0.17 / row["se"]))
        assert row["se"] == pytest.approx(np.sqrt(2 * dstudy.project(p.components(items=items)).sigma2_delta))
    # a claim on MT-Bench's 1-10 scale is converted by the ranges: 0.2 -> 0.11 on 0-5 (sec. 5.6)
    converted = audit(p.components(), pd.DataFrame({"claim": ["x"], "delta": [0.2]}), scale=(1, 10),
                      components_scale=p.scale)
    assert converted.claims.iloc[0]["delta"] == pytest.approx(0.2 * 5 / 9)


def _phi(x: float) -> float:
    from scipy import stats

    return float(stats.norm.cdf(x))


def test_board_pairs_use_each_systems_own_design():
    vc = VarianceComponents.from_values({"system": 0.05, "system:item": 0.3, "system:judge": 0.03,
                                         "system:item:judge": 0.2, "residual": 0.1},
                                        {"system": 4, "item": 50, "judge": 2}, 1, object="system")
    board = pd.DataFrame({"system": ["a", "b", "c", "d"], "score": [4.1, 3.2, 3.15, 2.0],
                          "items": [50, 200, 50, None], "judges": [1, 1, 3, None]})
    result = audit(vc, board)

    def delta(items, judges):
        return dstudy.project(vc, {"item": items, "judge": judges}, 1).sigma2_delta

    d = [delta(50, 1), delta(200, 1), delta(50, 3), delta(50, 2)]  # d: the components' own design
    pairs = result.pairs
    for k in range(3):
        assert pairs["se"].iloc[k] == pytest.approx(np.sqrt(d[k] + d[k + 1]), rel=1e-12)
        assert pairs["mdd"].iloc[k] == pytest.approx(1.959963984540054 * pairs["se"].iloc[k])
    # a pair is separable exactly when its difference exceeds the simultaneous critical value times its SE
    assert list(pairs["separable"]) == list(pairs["delta"].abs() > result.critical * pairs["se"])
    assert result.board["rank"].tolist() == [1, 2, 3, 4]
    assert (result.board["rank_low"] <= result.board["rank"]).all()
    assert (result.board["rank"] <= result.board["rank_high"]).all()


def test_a_board_inside_the_noise_cannot_rank_at_all():
    p = preset("mt-bench")
    board = pd.DataFrame({"system": [f"m{k}" for k in range(8)], "score": np.linspace(8.0, 7.6, 8)})
    result = audit(p.components(), board, scale=(1, 10), components_scale=p.scale)
    assert result.groups == 1 and result.sentences[0].startswith("This board cannot rank at all")
    assert (result.board["rank_low"] == 1).all() and (result.board["rank_high"] == 8).all()
    spread = pd.DataFrame({"system": ["a", "b", "c"], "score": [9.0, 6.0, 3.0]})
    clear = audit(p.components(), spread, scale=(1, 10), components_scale=p.scale)
    assert clear.pairs["separable"].all() and clear.groups == 3
    assert clear.board["rank_low"].tolist() == [1, 2, 3] == clear.board["rank_high"].tolist()


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
