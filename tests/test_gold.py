"""Gold labels: PPI++ equal to ppi_py, DSL's pseudo-outcome mean, the Monte Carlo coverage of the corrected
intervals where the judges-only one fails, agreement per configuration, and bad gold files named."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from evalgauge.cli import main
from evalgauge.errors import DataError
from evalgauge.gold import (
    cohen_kappa,
    dsl_mean,
    gold_analysis,
    gold_only_mean,
    gold_study,
    join_gold,
    ppi_mean,
)

REFERENCE = Path(__file__).parent / "fixtures" / "gold" / "ppi_py_reference.json"


def test_ppi_plus_plus_equals_ppi_py():
    """The power-tuned PPI++ mean and its 95% interval, and the classical interval, as ppi_py 0.2.3 gives them
    (stored; tests/fixtures/gold/README.md), on four data sets from a poor to an excellent predictor."""
    cases = json.loads(REFERENCE.read_text())
    for case in cases:
        got = ppi_mean(case["y"], case["yhat"], case["yhat_unlabelled"], level=0.95)
        assert got.estimate == pytest.approx(case["estimate"], abs=1e-8)
        assert (got.low, got.high) == pytest.approx((case["low"], case["high"]), abs=1e-8)
        classical = gold_only_mean(case["y"], level=0.95)
        assert (classical.low, classical.high) == pytest.approx((case["classical_low"], case["classical_high"]),
                                                                abs=1e-8)
    assert {round(c["corr"], 2) for c in cases} == {0.1, 0.5, 0.8, 0.95}


def test_ppi_plus_plus_equals_ppi_py_live():
    ppi_py = pytest.importorskip("ppi_py", reason="ppi-python is not installed (the stored reference covers it)")
    rng = np.random.default_rng(11)
    truth = rng.normal(0.4, 0.2, 500)
    yhat = 0.1 + 0.7 * truth + rng.normal(0, 0.1, 500)
    got = ppi_mean(truth[:80], yhat[:80], yhat[80:])
    low, high = ppi_py.ppi_mean_ci(truth[:80], yhat[:80], yhat[80:], alpha=0.05)
    assert (got.low, got.high) == pytest.approx((float(np.squeeze(low)), float(np.squeeze(high))), abs=1e-8)


def test_lambda_ends():
    """lam = 0 is the gold-only mean; lam = 1 plain PPI (mean of predictions corrected by the mean residual)."""
    rng = np.random.default_rng(1)
    y, yhat, rest = rng.normal(size=30), rng.normal(size=30), rng.normal(size=200)
    assert ppi_mean(y, yhat, rest, lam=0.0).estimate == pytest.approx(y.mean(), abs=1e-12)
    assert ppi_mean(y, yhat, rest, lam=1.0).estimate == pytest.approx(rest.mean() + (y - yhat).mean(), abs=1e-12)
    # a useless predictor gets (nearly) no weight
    assert ppi_mean(y, rng.normal(size=30), rest).lam < 0.3


def test_dsl_pseudo_outcome_mean():
    """Ytilde = prediction + R (gold - prediction) / pi: by hand on five units; all units gold with pi = 1 is the
    gold mean; a perfect prediction leaves the predictions' mean."""
    prediction = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    gold = np.array([2.0, np.nan, 2.0, np.nan, 7.0])
    pi = np.array([0.5, np.nan, 0.25, np.nan, 0.5])
    got = dsl_mean(prediction, gold, pi)
    pseudo = np.array([1 + 1 / 0.5, 2.0, 3 - 1 / 0.25, 4.0, 5 + 2 / 0.5])
    assert got.estimate == pytest.approx(pseudo.mean(), abs=1e-12)
    assert got.se == pytest.approx(math.sqrt(((pseudo - pseudo.mean()) ** 2).sum()) / 5, abs=1e-12)
    full = np.array([2.0, 1.0, 2.0, 3.0, 7.0])
    assert dsl_mean(prediction, full, np.ones(5)).estimate == pytest.approx(full.mean(), abs=1e-12)
    assert dsl_mean(full, np.where(np.isnan(gold), np.nan, full), pi).estimate == pytest.approx(full.mean())


def test_cohen_kappa_and_krippendorff_alpha_by_hand():
    from evalgauge.gold import alpha_with_gold

    said, gold = np.array([1, 1, 0, 0, 1]), np.array([1, 0, 0, 0, 1])
    # observed 0.8; chance 0.6 x 0.4 + 0.4 x 0.6 = 0.48; kappa = 0.32 / 0.52
    assert cohen_kappa(said, gold) == pytest.approx(0.32 / 0.52)
    # coincidences o11 = 4, o00 = 4, o10 = o01 = 1 (n = 10, n_1 = n_0 = 5): alpha = 1 - 9 x 2 / (100 - 50)
    assert alpha_with_gold(said, gold) == pytest.approx(0.64)


# 400 replications: the coverage's Monte Carlo s.e. at 95% is sqrt(0.95 x 0.05 / 400) = 0.011; three of them
BAND = 3 * math.sqrt(0.95 * 0.05 / 400)


def test_corrected_intervals_cover_where_the_judges_do_not():
    """Judges sharing a bias of 0.3 and an error per unit: the judges-only interval almost never covers the true
    mean; PPI++ and DSL cover 95% within Monte Carlo error, PPI++ narrower than the gold-only interval."""
    table = gold_study(400, seed=0).set_index("method")
    assert abs(table.loc["PPI++", "coverage"] - 0.95) < BAND and abs(table.loc["DSL", "coverage"] - 0.95) < BAND
    assert abs(table.loc["gold only", "coverage"] - 0.95) < BAND
    assert table.loc["judges only", "coverage"] < 0.2
    assert table.loc["PPI++", "width_vs_gold_only"] < 0.8  # the judges' gain over the gold alone


def test_a_stratified_gold_slice_needs_its_probabilities():
    """The harder half (lower true scores) labelled at four times the rate: DSL, weighting by the known
    probabilities, covers; the gold-only mean, unweighted, leans to the harder half and does not."""
    table = gold_study(400, seed=1, design="stratified").set_index("method")
    assert abs(table.loc["DSL", "coverage"] - 0.95) < BAND
    assert table.loc["gold only", "coverage"] < 0.5 and "PPI++" not in table.index


def panel(n_items=120, systems=("A", "B"), seed=0):
    rng = np.random.default_rng(seed)
    rows, truth = [], {}
    for s_, offset in zip(systems, (0.0, 0.5), strict=False):
        t = rng.normal(3 + offset, 1, n_items)
        for i in range(n_items):
            truth[(s_, f"q{i}")] = t[i]
        for judge, bias in (("j1", 0.2), ("j2", 0.6)):
            scores = t + bias + rng.normal(0, 0.5, n_items)
            rows += [{"system": s_, "item": f"q{i}", "judge": judge, "score": scores[i]} for i in range(n_items)]
    return pd.DataFrame(rows), truth


def test_agreement_per_configuration_and_per_system_means():
    frame, truth = panel()
    keys = [k for k in truth if int(k[1][1:]) % 4 == 0]
    gold = pd.DataFrame({"system": [k[0] for k in keys], "item": [k[1] for k in keys],
                         "gold": [truth[k] for k in keys]})
    result = gold_analysis(frame, gold, object_facet="system")
    table = result.agreement.set_index(["facet", "level"])
    assert table.loc[("judge", "j2"), "bias"] > table.loc[("judge", "j1"), "bias"] > 0
    assert table.loc[("aggregate", "all cells"), "bias"] == pytest.approx(
        (table.loc[("judge", "j1"), "bias"] + table.loc[("judge", "j2"), "bias"]) / 2, abs=1e-9)
    groups = {(e.group, e.method) for e in result.estimates}
    assert {("A", "PPI++"), ("B", "DSL"), ("A", "gold only"), ("B", "judges only")} <= groups
    judges = {e.group: e for e in result.estimates if e.method == "judges only"}
    ppi = {e.group: e for e in result.estimates if e.method == "PPI++"}
    for g, true_mean in (("A", np.mean([v for k, v in truth.items() if k[0] == "A"])),
                         ("B", np.mean([v for k, v in truth.items() if k[0] == "B"]))):
        assert abs(ppi[g].estimate - true_mean) < abs(judges[g].estimate - true_mean)
    assert result.error_components is not None
    payload = result.to_dict()
    assert payload["estimates"] and payload["agreement"] and json.dumps(payload)


def test_every_unit_gold_says_so():
    frame, truth = panel(n_items=10, systems=("A",))
    gold = pd.DataFrame({"item": [k[1] for k in truth], "gold": list(truth.values())})
    result = gold_analysis(frame, gold, object_facet=None)
    assert any("gold mean is the estimate" in n for n in result.notes)
    assert [e.method for e in result.estimates] == ["judges only", "gold only"]


def test_bad_gold_files_are_named():
    frame, _ = panel(n_items=20, systems=("A",))
    base = pd.DataFrame({"item": ["q0", "q1", "q2"], "gold": ["3.1", "2.5", "4.0"]})
    with pytest.raises(DataError, match=r"row\(s\) 2 .*'high'"):
        join_gold(frame, base.assign(gold=["3.1", "high", "4.0"]), source="g.csv")
    with pytest.raises(DataError, match=r"g.csv: row\(s\) 3 are units the judgments do not have .*item=q999"):
        join_gold(frame, base.assign(item=["q0", "q1", "q999"]), source="g.csv")
    with pytest.raises(DataError, match=r"'probability' must be a probability in \(0, 1\].*row\(s\) 1"):
        join_gold(frame, base.assign(probability=["0", "0.5", "0.5"]), source="g.csv")
    with pytest.raises(DataError, match="no column 'gold'"):
        join_gold(frame, base.rename(columns={"gold": "human"}), source="g.csv")
    with pytest.raises(DataError, match=r"row\(s\) 1, 2 give the same unit"):
        join_gold(frame, base.assign(item=["q0", "q0", "q2"]), source="g.csv")
    with pytest.raises(DataError, match=r"row\(s\) 2, 4 give the same unit"):  # rows of the file, blanks counted
        join_gold(frame, pd.DataFrame({"item": ["q0", "q1", "q2", "q1"], "gold": [None, "2", "3", "4"]}),
                  source="g.csv")
    two = pd.concat([frame, frame.assign(system="B")])
    with pytest.raises(DataError, match="no column 'system'"):
        join_gold(two, base, object_facet="system", source="g.csv")


def scored_files(tmp_path: Path) -> tuple[Path, Path]:
    """One system's 60 items scored by two judges, and gold scores on every third item."""
    frame, truth = panel(n_items=60, systems=("A",))
    data = tmp_path / "scores.csv"
    frame.drop(columns="system").to_csv(data, index=False)
    keys = [k for k in truth if int(k[1][1:]) % 3 == 0]
    gold_file = tmp_path / "gold.csv"
    pd.DataFrame({"item": [k[1] for k in keys], "gold": [truth[k] for k in keys]}).to_csv(gold_file, index=False)
    return data, gold_file


def test_analyze_with_gold_from_the_command_line(tmp_path):
    data, gold_file = scored_files(tmp_path)
    out = CliRunner().invoke(main, ["analyze", str(data), "--gold", str(gold_file), "--json", "-"])
    assert out.exit_code == 0, out.output
    gold = json.loads(out.stdout)["gold"]
    assert {e["method"] for e in gold["estimates"]} == {"judges only", "PPI++", "DSL", "gold only"}
    shown = CliRunner().invoke(main, ["analyze", str(data), "--gold", str(gold_file)])
    assert "Means corrected by the gold labels" in shown.output and "Agreement with the gold" in shown.output
    bad = tmp_path / "bad.csv"
    bad.write_text("item,gold\nq0,3\nnope,2\n")
    refused = CliRunner().invoke(main, ["analyze", str(data), "--gold", str(bad)])
    assert refused.exit_code == 2 and "units the judgments do not have" in refused.output
    assert "Traceback" not in refused.output
    same = CliRunner().invoke(main, ["analyze", str(data), "--gold", str(gold_file), "--json", str(gold_file)])
    assert same.exit_code == 2 and "that is the input" in same.output
    priced = CliRunner().invoke(main, ["analyze", str(data), "--gold", str(gold_file), "--gold-budget", "50",
                                       "--gold-cost", "1", "--call-cost", "0.01", "--json", "-"])
    assert priced.exit_code == 0, priced.output
    plan = json.loads(priced.stdout)["gold"]["plan"]
    assert plan["budget"] == 50 and {p["judges"] for p in plan["plans"]} >= {1, 2, 3}
    unpriced = CliRunner().invoke(main, ["analyze", str(data), "--gold", str(gold_file), "--gold-budget", "50"])
    assert unpriced.exit_code == 2 and "--gold-cost" in unpriced.output
    target = CliRunner().invoke(main, ["analyze", str(data), "--gold", str(gold_file), "--gold-target-se", "0.2",
                                       "--gold-cost", "1", "--call-cost", "0.01", "--json", "-"])
    assert target.exit_code == 0, target.output
    plans = json.loads(target.stdout)["gold"]["plan"]["plans"]
    assert plans[0]["reaches"] and plans[0]["cost"] == min(p["cost"] for p in plans if p["reaches"])
    log = tmp_path / "battles.csv"
    log.write_text("model_a,model_b,item,winner\n" + "".join(f"x,y,q{i},model_a\ny,x,q{i},tie\n" for i in range(20)))
    pairwise = CliRunner().invoke(main, ["analyze", str(log), "--gold", str(gold_file)])
    assert pairwise.exit_code == 2 and "pairwise log" in pairwise.output and "Bradley" not in pairwise.output
    both = CliRunner().invoke(main, ["analyze", str(data), "--gold", str(gold_file), "--gold-target-se", "0.2",
                                     "--gold-budget", "50", "--gold-cost", "1", "--call-cost", "0.01"])
    assert both.exit_code == 2 and "not both" in both.output


def test_the_gold_units_export_for_dsl_and_ppi_py_and_the_report_section(tmp_path):
    """--gold-export writes one row per unit (prediction, gold, labeled, sample_prob): from it ppi_py's inputs
    give the PPI++ mean analyze printed; --report gets a "Gold labels" section."""
    data, gold_file = scored_files(tmp_path)
    export, report = tmp_path / "units.csv", tmp_path / "report.html"
    out = CliRunner().invoke(main, ["analyze", str(data), "--gold", str(gold_file), "--gold-export", str(export),
                                    "--report", str(report), "--json", "-"])
    assert out.exit_code == 0, out.output
    units = pd.read_csv(export)
    assert list(units.columns) == ["item", "prediction", "gold", "labeled", "sample_prob"] and len(units) == 60
    assert units["labeled"].sum() == 20 and np.allclose(units["sample_prob"], 20 / 60)
    labelled, rest = units[units["labeled"] == 1], units[units["labeled"] == 0]
    again = ppi_mean(labelled["gold"], labelled["prediction"], rest["prediction"])
    printed = next(e for e in json.loads(out.stdout)["gold"]["estimates"] if e["method"] == "PPI++")
    assert again.estimate == pytest.approx(printed["estimate"], abs=1e-12)
    assert "<h2>Gold labels</h2>" in report.read_text()
    alone = CliRunner().invoke(main, ["analyze", str(data), "--gold-export", str(export)])
    assert alone.exit_code == 2 and "--gold FILE" in alone.output


POWER = Path(__file__).parent / "fixtures" / "gold" / "ppi_power_reference.json"


def test_gold_power_equals_ppi_mean_power():
    """One fixed prediction: the mix of gold labels and predicted units, its cost and effective sample size as
    ppi_py's ppi_mean_power gives them, over 20 settings (budgets, target sizes, caps on the units)."""
    from evalgauge.gold import gold_power, prediction_correlation

    cases = json.loads(POWER.read_text())
    assert len(cases) == 20
    for case in cases:
        rho = prediction_correlation(case["y"], case["yhat"])
        got = gold_power(rho, case["cost_Y"], case["cost_Yhat"], budget=case["budget"],
                         effective_n=case["effective_n"], n_max=case["n_max"])
        want = case["result"]
        assert (got.n, got.N, got.effective_n) == (want["n"], want["N"], want["effective_n"])
        assert got.cost == pytest.approx(want["cost"], abs=1e-9) and rho == pytest.approx(want["ppi_corr"], abs=1e-12)


def simulated_panel(units=1000, gold=200, seed=4):
    """Three judges twice each: an error per unit every judge shares (variance 0.1), per unit and judge (0.5) and
    per call (0.5); true scores of variance 1."""
    rng = np.random.default_rng(seed)
    truth = rng.normal(0, 1, units)
    shared = rng.normal(0, math.sqrt(0.1), units)
    rows = []
    for judge in ("j1", "j2", "j3"):
        unit_judge = rng.normal(0, math.sqrt(0.5), units)
        for rep in (1, 2):
            score = truth + 0.2 + shared + unit_judge + rng.normal(0, math.sqrt(0.5), units)
            rows.append(pd.DataFrame({"item": [f"u{i}" for i in range(units)], "judge": judge, "replicate": rep,
                                      "score": score}))
    chosen = rng.choice(units, gold, replace=False)
    return pd.concat(rows, ignore_index=True), pd.DataFrame({"item": [f"u{i}" for i in chosen],
                                                            "gold": truth[chosen]})


def test_a_panel_beats_every_single_judge_plan_at_equal_cost():
    """The gold slice's error components predict each panel's correlation with the truth (true: 1/sqrt(2.1) = 0.69
    with one judge and one call, 1/sqrt(1.35) = 0.86 with three judges twice); at a budget where calls are cheap
    next to gold labels the best plan is a panel, worth more gold labels than the best single-judge plan."""
    frame, gold = simulated_panel()
    result = gold_analysis(frame, gold, object_facet=None)
    plans = result.plan(cost_gold=1.0, cost_call=0.002, budget=150.0)
    one = plans[(plans["judges"] == 1) & (plans["replicates"] == 1)].iloc[0]
    three = plans[(plans["judges"] == 3) & (plans["replicates"] == 2)].iloc[0]
    # three times a correlation's sampling SD from 200 gold units, (1 - rho^2) / sqrt(200): 0.11 and 0.055
    assert one["correlation"] == pytest.approx(1 / math.sqrt(2.1), abs=3 * (1 - 1 / 2.1) / math.sqrt(200))
    assert three["correlation"] == pytest.approx(1 / math.sqrt(1.35), abs=3 * (1 - 1 / 1.35) / math.sqrt(200))
    best, single = plans.iloc[0], plans[plans["judges"] == 1].iloc[0]
    assert best["judges"] > 1 and best["effective_n"] > single["effective_n"]
    assert (plans["cost"] <= 150.0 + 1.0).all() and (plans["gold"] + plans["predicted_only"] <= 1000).all()
    # for a target SE instead of a budget: the cheapest plan that reaches it is a panel, cheaper than one judge
    needed = result.plan(cost_gold=1.0, cost_call=0.002, target_se=0.05, n_max=None)
    reaching = needed[needed["reaches"]]
    assert (reaching["se"] <= 0.05 * (1 + 1 / reaching["effective_n"])).all()
    assert reaching.iloc[0]["judges"] > 1
    assert reaching.iloc[0]["cost"] < reaching[reaching["judges"] == 1]["cost"].min()


def variant_panel(units=1000, gold=250, seed=6):
    """Two judges under three prompt variants, one call each: an error per unit every configuration shares (0.1),
    per unit and variant (0.6: the prompt matters), per unit and judge (0.1) and per call (0.2); truth variance 1."""
    rng = np.random.default_rng(seed)
    truth = rng.normal(0, 1, units)
    shared = rng.normal(0, math.sqrt(0.1), units)
    by_variant = {v: rng.normal(0, math.sqrt(0.6), units) for v in ("p1", "p2", "p3")}
    rows = []
    for judge in ("j1", "j2"):
        unit_judge = rng.normal(0, math.sqrt(0.1), units)
        for variant, unit_variant in by_variant.items():
            score = truth + shared + unit_judge + unit_variant + rng.normal(0, math.sqrt(0.2), units)
            rows.append(pd.DataFrame({"item": [f"u{i}" for i in range(units)], "judge": judge, "variant": variant,
                                      "score": score}))
    chosen = rng.choice(units, gold, replace=False)
    return pd.concat(rows, ignore_index=True), pd.DataFrame({"item": [f"u{i}" for i in chosen],
                                                            "gold": truth[chosen]})


def test_gold_plans_vary_the_prompt_variants_where_the_prompt_matters():
    """With the prompt's error (item x variant, 0.6) the largest, more variants raise the prediction's correlation
    with the truth more than more judges: the true correlation is 1 / sqrt(1 + 0.1 + 0.1/m + 0.6/v + 0.2/(m v))."""
    frame, gold = variant_panel()
    result = gold_analysis(frame, gold, object_facet=None)
    assert result.panel["observed"] == {"judge": 2, "variant": 3, "replicate": 1}
    plans = result.plan(cost_gold=1.0, cost_call=0.001, budget=200.0)
    assert set(plans["variants"]) == {1, 2, 3, 5}

    def truth(m, v):
        return 1 / math.sqrt(1 + 0.1 + 0.1 / m + 0.6 / v + 0.2 / (m * v))

    for m, v in ((1, 1), (2, 3), (4, 5)):
        row = plans[(plans["judges"] == m) & (plans["variants"] == v) & (plans["replicates"] == 1)].iloc[0]
        # three sampling SDs of a correlation from 250 gold units, (1 - rho^2) / sqrt(250)
        assert row["correlation"] == pytest.approx(truth(m, v), abs=3 * (1 - truth(m, v) ** 2) / math.sqrt(250))
        assert row["cost_per_unit"] == pytest.approx(m * v * 0.001)
    assert plans.iloc[0]["variants"] > 1  # the best plan buys prompt variants
    single_prompt = plans[plans["variants"] == 1]
    assert plans.iloc[0]["effective_n"] > single_prompt["effective_n"].max()


def test_plan_gold_from_an_analysis_json(tmp_path):
    data, gold_file = scored_files(tmp_path)
    analysis = tmp_path / "analysis.json"
    ran = CliRunner().invoke(main, ["analyze", str(data), "--gold", str(gold_file), "--gold-budget", "50",
                                    "--gold-cost", "1", "--call-cost", "0.01", "--json", str(analysis)])
    assert ran.exit_code == 0, ran.output
    from_analyze = json.loads(analysis.read_text())["gold"]["plan"]["plans"]
    planned = CliRunner().invoke(main, ["plan", "--gold", str(analysis), "--budget", "50", "--gold-cost", "1",
                                        "--call-cost", "0.01", "--json", "-"])
    assert planned.exit_code == 0, planned.output
    out = json.loads(planned.stdout)["gold_plan"]
    assert out["plans"] == from_analyze and out["units"] == 60
    shown = CliRunner().invoke(main, ["plan", "--gold", str(analysis), "--target-se", "0.2", "--gold-cost", "1",
                                      "--call-cost", "0.01", "--n", "judge=1,2", "--n", "rep=1", "--max", "item=40"])
    assert shown.exit_code == 0, shown.output
    assert "Gold labels against judge calls for an SE of 0.2" in shown.output
    capped = json.loads(CliRunner().invoke(main, ["plan", "--gold", str(analysis), "--target-se", "0.2",
                                                  "--gold-cost", "1", "--call-cost", "0.01", "--n", "judge=1,2",
                                                  "--max", "item=40", "--json", "-"]).stdout)["gold_plan"]
    assert {p["judges"] for p in capped["plans"]} == {1, 2} and capped["units"] == 40
    assert all(p["gold"] + p["predicted_only"] <= 40 for p in capped["plans"])
    for args, said in ((["--budget", "50", "--gold-cost", "1"], "--call-cost"),
                       (["--gold-cost", "1", "--call-cost", "0.01"], "--budget USD or --target-se"),
                       (["--budget", "5", "--gold-cost", "1", "--call-cost", "1", "--n", "item=3"], "judge="),
                       (["--budget", "5", "--gold-cost", "1", "--call-cost", "1", "--target-erho2", "0.8"],
                        "--target-erho2 belong(s) to the D-study")):
        refused = CliRunner().invoke(main, ["plan", "--gold", str(analysis), *args])
        assert refused.exit_code == 2 and said in refused.output, (args, refused.output)
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({"components": {}}))
    missing = CliRunner().invoke(main, ["plan", "--gold", str(plain), "--budget", "5", "--gold-cost", "1",
                                        "--call-cost", "1"])
    assert missing.exit_code == 2 and "no gold slice to plan from" in missing.output
    assert "Traceback" not in missing.output
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    bad = CliRunner().invoke(main, ["plan", "--gold", str(broken), "--budget", "5", "--gold-cost", "1",
                                    "--call-cost", "1"])
    assert bad.exit_code == 2 and "not a JSON file" in bad.output
    alone = CliRunner().invoke(main, ["plan", "--gold-cost", "1"])
    assert alone.exit_code == 2 and "give --gold ANALYSIS.json" in alone.output


def label_panel(n=200, seed=2):
    """Three judges labelling stances, each pulling some texts to 'neutral' (10%, 25%, 40%), and the truth."""
    rng = np.random.default_rng(seed)
    classes = ["against", "favor", "neutral"]
    truth = rng.choice(classes, n, p=[0.3, 0.5, 0.2])
    rows = []
    for judge, flip in (("j1", 0.1), ("j2", 0.25), ("j3", 0.4)):
        pulled = rng.random(n) < flip
        said = np.where(pulled, np.where(truth == "neutral", "favor", "neutral"), truth)
        rows += [{"item": f"t{i}", "judge": judge, "label": said[i]} for i in range(n)]
    return pd.DataFrame(rows), truth


def test_gold_labels_for_classes():
    """Each class's share corrected by gold labels (the judges over-call 'neutral'), each judge's accuracy and
    kappa against the gold, and a gold label outside the label set refused with its row."""
    from evalgauge.gold import gold_label_analysis

    frame, truth = label_panel()
    chosen = np.arange(0, 200, 4)
    gold = pd.DataFrame({"item": [f"t{i}" for i in chosen], "gold": truth[chosen]})
    result = gold_label_analysis(frame, gold)
    means = {(e.group, e.method): e for e in result.estimates}
    true_neutral = float(np.mean(truth == "neutral"))
    assert means[("neutral", "judges only")].low > true_neutral  # the judges' share misses the truth
    assert means[("neutral", "PPI++")].low <= true_neutral <= means[("neutral", "PPI++")].high
    shares = sum(means[(k, "gold only")].estimate for k in ("against", "favor", "neutral"))
    assert shares == pytest.approx(1.0)
    table = result.agreement.set_index("level")
    assert table.loc["j1", "accuracy"] > table.loc["j2", "accuracy"] > table.loc["j3", "accuracy"]
    assert table.loc["j1", "kappa"] > table.loc["j3", "kappa"] and table.loc["j1", "alpha"] > table.loc["j3", "alpha"]
    with pytest.raises(DataError, match=r"g.csv: row\(s\) 2 give a gold label outside the label set \('pro'"):
        gold_label_analysis(frame, gold.assign(gold=["favor", "pro", *gold["gold"][2:]]), source="g.csv")


def test_gold_labels_from_the_command_line(tmp_path):
    frame, truth = label_panel()
    data, gold_file = tmp_path / "labels.csv", tmp_path / "gold.csv"
    frame.to_csv(data, index=False)
    chosen = np.arange(0, 200, 4)
    pd.DataFrame({"item": [f"t{i}" for i in chosen], "gold": truth[chosen]}).to_csv(gold_file, index=False)
    out = CliRunner().invoke(main, ["analyze", str(data), "--gold", str(gold_file), "--json", "-"])
    assert out.exit_code == 0, out.output
    payload = json.loads(out.stdout)
    assert "shares" in payload and {e["group"] for e in payload["gold"]["estimates"]} == {"against", "favor",
                                                                                         "neutral"}
    refused = CliRunner().invoke(main, ["analyze", str(data), "--gold", str(gold_file), "--gold-export",
                                        str(tmp_path / "units.csv")])
    assert refused.exit_code == 2 and "writes scored units" in refused.output
    analysis = tmp_path / "labels-analysis.json"
    priced = CliRunner().invoke(main, ["analyze", str(data), "--gold", str(gold_file), "--gold-budget", "60",
                                       "--gold-cost", "1", "--call-cost", "0.01", "--json", str(analysis)])
    assert priced.exit_code == 0, priced.output
    plans = json.loads(analysis.read_text())["gold"]["plan"]["plans"]
    assert plans[0]["class"] in {"against", "favor", "neutral"} and plans[0]["cost"] <= 60 + 1
    shown = CliRunner().invoke(main, ["plan", "--gold", str(analysis), "--target-se", "0.05", "--gold-cost", "1",
                                      "--call-cost", "0.01"])
    assert shown.exit_code == 0 and "for an SE of 0.05" in shown.output, shown.output


def test_class_plans_serve_every_class_and_one_class_is_gold_power():
    """One plan (n gold labels among n + N units) serves every class's share: at a budget the worst class's SE
    is the smallest over the whole numbers n and N, for a target every class reaches it; with one class it is
    ppi_mean_power's answer (gold_power) up to the rounding of its closed form."""
    from evalgauge.gold import class_plan, gold_label_analysis, gold_power, panel_correlation

    frame, truth = label_panel(n=400, seed=5)
    chosen = np.arange(0, 400, 4)
    result = gold_label_analysis(frame, pd.DataFrame({"item": [f"t{i}" for i in chosen], "gold": truth[chosen]}))
    panels = result.panel["classes"]
    assert set(panels) == {"against", "favor", "neutral"} and result.panel["n_max"] == 400
    at_budget = result.plan(cost_gold=1.0, cost_call=0.01, budget=120.0)
    best = at_budget.iloc[0]
    assert best["se"] == at_budget["se"].min() and best["cost"] <= 120.0 + 1e-9
    assert best["se"] < at_budget[at_budget["judges"] == 1]["se"].min()  # independent judges: a panel helps
    target = result.plan(cost_gold=1.0, cost_call=0.01, target_se=0.05)
    top = target.iloc[0]
    assert top["reaches"] and top["cost"] == target[target["reaches"]]["cost"].min()
    planned = {"judge": int(top["judges"]), "replicate": int(top["replicates"])}
    for p in panels.values():  # every class's share has the SE asked for
        rho = panel_correlation(p["covariance"], p["gold_variance"], p["prediction_variance"], p["error_terms"],
                                p["observed"], {**p["observed"], **planned})
        n, big_n = top["gold"], top["predicted_only"]
        eff = n * (n + big_n) / (n + (1 - rho**2) * big_n)
        assert math.sqrt(p["gold_variance"] / eff) <= 0.05 + 1e-12
    one = {"neutral": panels["neutral"]}
    alone = class_plan(one, cost_gold=1.0, cost_call=0.01, budget=80.0, judges=(3,), replicates=(1,)).iloc[0]
    closed = gold_power(alone["correlation"], 1.0, alone["cost_per_unit"], budget=80.0)
    assert abs(alone["effective_n"] - closed.effective_n) <= 1 and abs(alone["gold"] - closed.n) <= 2
