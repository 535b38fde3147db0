"""TEE's arena studies on a simulated Chatbot Arena log judged under 3 judges x 3 prompt variants x both orders
(TEE R.1, Table 17, sec. 4.4): the three SEs, each pipeline's agreement with the human votes, and the gaming
surface by re-running per configuration, each against what the simulation's truth implies."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from battles import arena_log
from evalgauge.analysis.arena import _gaming, arena_studies
from evalgauge.analysis.pairwise import analyze_pairwise
from evalgauge.cli import main
from evalgauge.data import as_judgments
from evalgauge.pairwise import code_battles, fit_bt


@pytest.fixture(scope="module")
def log():
    return arena_log()


def test_three_ses_order_as_the_configurations_imply(log):
    battles = code_battles(as_judgments(log))
    fit = fit_bt(battles, position=True)
    studies = arena_studies(battles, fit, n_boot=200, seed=1, human="human")
    assert studies.n_configurations == 18 and studies.columns == ("judge", "variant", "order")
    r = studies.ratios
    # one configuration's per-system biases (sd 0.6 against a pooled-battle SE of about 0.05) dominate: the
    # single-cell SE is several times the naive one; the pipeline's averages 18 configurations' biases away
    assert r["single_cell_over_naive"] > 3 and 0.9 < r["tee_over_naive"] < r["single_cell_over_naive"]
    agree = studies.agreement.set_index("pipeline")
    tee = agree.loc["TEE aggregate (mean over the battle's cells)"]
    single = agree.loc["single cell, mean over configurations"]
    assert tee["per_battle"] > single["per_battle"] + 0.02  # TEE Table 17: the aggregate agrees more per battle
    assert 0.5 < single["per_judgment"] < tee["per_battle"] < 1
    g = studies.gaming
    assert g["k"] == 18 and g["rerun_elo_median"] > 0 and g["closed_form_elo_median"] > 0


def test_gaming_surface_is_the_exact_expected_maximum():
    """E[max of K draws with replacement] from n equally likely values, checked by brute force."""
    elo = np.array([[1000.0, 990.0], [1010.0, 1000.0], [1040.0, 995.0]])
    from itertools import product
    from types import SimpleNamespace

    out = _gaming(elo, 2, SimpleNamespace(systems=("a", "b")))
    brute = [np.mean([max(elo[i, s], elo[j, s]) for i, j in product(range(3), repeat=2)]) - elo[:, s].mean()
             for s in range(2)]
    assert [p["rerun_elo"] for p in out["per_system"]] == pytest.approx(brute)


def test_pairwise_command_prints_and_writes_the_studies(log, tmp_path):
    path = tmp_path / "arena.csv"
    log.to_csv(path, index=False)
    out = CliRunner().invoke(main, ["pairwise", str(path), "--human", "human", "--bootstrap", "100",
                                    "--no-components", "--best-of", "27", "--json", str(tmp_path / "p.json")])
    assert out.exit_code == 0, out.output
    payload = json.loads((tmp_path / "p.json").read_text())["arena_studies"]
    assert payload["gaming"]["k"] == 27 and len(payload["se"]) == 6
    assert "Median SE ratio to the naive bootstrap" in out.output and "Gaming surface, best of K = 27" in out.output
    assert "Agreement with the human votes (TEE Table 17)" in out.output
    single = analyze_pairwise(as_judgments(log.query("judge == 'j0' and variant == 'v0' and order == 'ab'")),
                              n_boot=50, components=False)
    assert "arena_studies" not in single.payload  # one configuration: nothing to choose among


def test_an_unaffordable_win_indicator_gstudy_is_left_out_before_it_starts(monkeypatch, tmp_path):
    """By default the win indicators' G-study runs only when its expected cost is within the budget; else a note
    says what was left out and how to fit it, before any work (40,000 Arena battles: 252 s of fitting before),
    on the rows and on an engine's counts alike. --components fits it anyway; --no-components never."""
    from battles import battle_log
    from evalgauge.analysis import pairwise as pw

    path = tmp_path / "a.csv"
    battle_log(n=1500).to_csv(path, index=False)
    runner = CliRunner()
    default = json.loads(runner.invoke(main, ["pairwise", str(path), "--bootstrap", "0", "--json", "-"]).output)
    assert "mdd95_win_rate_points" in default  # cheap: fitted as before
    monkeypatch.setattr(pw, "COMPONENTS_AUTO_SECONDS", 0.0)
    for engine in ("pandas", "duckdb"):
        out = runner.invoke(main, ["pairwise", str(path), "--bootstrap", "0", "--engine", engine, "--json", "-"])
        assert out.exit_code == 0, out.output
        payload = json.loads(out.stdout)
        assert "mdd95_win_rate_points" not in payload, engine
        assert any("G-study was left out" in n and "--components" in n for n in payload["notes"]), engine
        forced = json.loads(runner.invoke(main, ["pairwise", str(path), "--bootstrap", "0", "--engine", engine,
                                                 "--components", "--json", "-"]).stdout)
        assert "mdd95_win_rate_points" in forced, engine
