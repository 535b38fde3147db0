"""Conditional modes (BLUPs) with conditional SDs against lme4's ranef(condVar = TRUE), and the likelihood-ratio
test of a variance component with the boundary mixture (TEE C.6), on two designs made with R here
(tests/fixtures/ranef/ranef.R: Penicillin's crossed plate x sample, and an unbalanced system x item x judge
log with a fixed temperature, missing cells and unequal replicates)."""

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from scipy.stats import chi2

import evalgauge as eg
from conftest import FIXTURES
from evalgauge.simulate import simulate, sizing_preset

HERE = FIXTURES
EXPECTED = json.loads((HERE / "ranef" / "ranef_expected.json").read_text())


def _fit(name: str):
    if name == "penicillin":
        return eg.fit(HERE / "lme4" / "Penicillin.csv", formula=EXPECTED[name]["formula"])
    frame = pd.read_csv(HERE / "ranef" / "unbalanced.csv", dtype={"temperature": str})
    return eg.fit(frame, formula=EXPECTED[name]["formula"])


@pytest.mark.parametrize("name", ["penicillin", "unbalanced"])
def test_effects_equal_lme4_ranef_with_condvar(name):
    fit = _fit(name)
    for comp, value in EXPECTED[name]["components"].items():
        assert fit.components[comp].variance == pytest.approx(value, rel=2e-4)  # both optimisers stop near it
    effects = fit.effects()
    assert list(effects.columns) == ["term", "level", "mode", "sd"]
    for term, ref in EXPECTED[name]["effects"].items():
        ours = effects[effects["term"] == term].set_index("level")
        assert sorted(ours.index) == sorted(ref["level"]), term
        np.testing.assert_allclose(ours.loc[ref["level"], "mode"], ref["mode"], atol=1e-4)
        np.testing.assert_allclose(ours.loc[ref["level"], "sd"], ref["sd"], atol=1e-4)


def test_lrt_of_a_component_with_the_boundary_mixture():
    fit = _fit("unbalanced")
    ref = EXPECTED["unbalanced"]["lrt"]
    test = fit.lrt(drop="item:judge")
    assert test.statistic == pytest.approx(ref["statistic"], rel=1e-5)
    assert test.p == pytest.approx(ref["p_mixture"], rel=1e-4)
    assert test.p == pytest.approx(0.5 * chi2.sf(test.statistic, 1)) and test.p_chi2 == pytest.approx(2 * test.p)
    assert "item:judge" not in test.formula_reduced and "LRT of item:judge" in str(test)
    with pytest.raises(eg.DesignError, match="not a random term"):
        fit.lrt(drop="item:system:judge")


def test_effects_of_an_anova_fit_and_a_zero_component():
    """A balanced fit by ANOVA has the modes of the REML fit (the REML optimum when every estimate is positive);
    a component at zero has modes and SDs of exactly zero, as lme4 gives them."""
    frame = simulate(sizing_preset(systems=4, items=10, judges=3, replicates=2), seed=1)
    anova = eg.fit(frame, method="anova")
    reml = eg.fit(frame, method="reml")
    assert all(c.variance > 0 for c in anova.components.components)
    a, r = anova.effects(), reml.effects()
    np.testing.assert_allclose(a["mode"], r["mode"], atol=1e-5)
    np.testing.assert_allclose(a["sd"], r["sd"], atol=1e-5)
    vc = anova.components
    zeroed = replace(vc, components=tuple(replace(c, variance=0.0) if c.name == "system:judge" else c
                                          for c in vc.components))
    out = replace(anova, components=zeroed).effects()
    assert (out.loc[out["term"] == "system:judge", ["mode", "sd"]].to_numpy() == 0).all()
    assert (out.loc[out["term"] == "system", "sd"] > 0).all()


def test_effects_of_a_fit_of_cells_equal_the_rows(tmp_path):
    frame = pd.read_csv(HERE / "ranef" / "unbalanced.csv", dtype={"temperature": str})
    path = tmp_path / "u.csv"
    frame.to_csv(path, index=False)
    rows = eg.fit(frame, facets="system,item,judge,temperature", replicate="auto")
    cells = eg.fit(str(path), engine="duckdb", facets="system,item,judge,temperature", replicate="auto")
    assert cells.judgments is None
    both = rows.effects().merge(cells.effects(), on=["term", "level"], how="outer", suffixes=("_rows", "_cells"))
    assert len(both) == len(rows.effects()) and both.notna().all().all()
    np.testing.assert_allclose(both["mode_rows"], both["mode_cells"], atol=1e-6)
    np.testing.assert_allclose(both["sd_rows"], both["sd_cells"], atol=1e-6)


def test_analyze_shows_the_facets_effects_and_the_items_judged_apart(tmp_path):
    from click.testing import CliRunner

    from evalgauge.cli import main

    data = HERE / "ranef" / "unbalanced.csv"
    out = CliRunner().invoke(main, ["analyze", str(data), "--replicate", "auto", "--facets",
                                    "system,item,judge,temperature", "--json", str(tmp_path / "a.json"),
                                    "--report", str(tmp_path / "r.html")])
    assert out.exit_code == 0, out.output
    effects = json.loads((tmp_path / "a.json").read_text())["effects"]
    fit = eg.fit(pd.read_csv(data, dtype={"temperature": str}), facets="system,item,judge,temperature",
                 replicate="auto")
    reference = fit.effects().set_index(["term", "level"])
    judges = [r for r in effects["levels"] if r["term"] == "judge"]
    assert len(judges) == 3
    for r in judges:
        mode, sd = reference.loc[("judge", r["level"]), ["mode", "sd"]]
        assert r["mode"] == pytest.approx(mode, abs=1e-9) and r["sd"] == pytest.approx(sd, abs=1e-9)
        assert r["low"] == pytest.approx(mode - 1.959964 * sd) and r["high"] == pytest.approx(mode + 1.959964 * sd)
    spread = effects["disagreed_items"]
    assert spread and spread[0]["across"] == "judge" and spread[0]["spread"] >= spread[-1]["spread"]
    top = reference.loc["item:judge"].reset_index()
    top = top[top["level"].str.startswith(spread[0]["item"] + ":")]["mode"].std(ddof=0)
    assert spread[0]["spread"] == pytest.approx(top)
    assert "Effects: conditional modes" in out.output and "Items the judges disagree on most" in out.output
    html = (tmp_path / "r.html").read_text()
    assert "Effects: who scores high, who low" in html and "Q-Q plot of the conditional modes" in html
    assert "residuals against fitted values" in html
    res = effects["residuals"]
    assert len(res["fitted"]) == len(res["residual"]) == res["cells"] <= 2000


def test_fitted_values_are_the_shrunken_group_means():
    """One-way random effects, balanced: the BLUP fitted value of group g is mu + k (ybar_g - mu) with
    k = sigma2_g / (sigma2_g + sigma2_e / n) and mu the grand mean (closed form)."""
    from evalgauge.estimate.effects import fit_of
    from evalgauge.estimate.model import parse_formula

    rng = np.random.default_rng(5)
    groups, n = 8, 5
    g = np.repeat(np.arange(groups), n)
    score = rng.normal(0, 1, groups)[g] + rng.normal(0, 1, g.size)
    frame = pd.DataFrame({"item": [f"i{k}" for k in g], "score": score})
    fit = eg.fit(frame, formula="score ~ 1 + (1 | item)")
    solved, cells = fit_of(fit.judgments, parse_formula(fit.formula), fit.components)
    s2g, s2e = fit.components["item"].variance, fit.components["residual"].variance
    k = s2g / (s2g + s2e / n)
    mu = frame["score"].mean()
    means = frame.groupby("item")["score"].mean()
    expected = mu + k * (means - mu)
    np.testing.assert_allclose(solved.fitted, expected.loc[cells.labels["item"][cells.codes["item"]]].to_numpy(),
                               atol=1e-9)
    assert solved.beta[0] == pytest.approx(mu)


def test_items_tied_in_their_judges_spread_are_listed_in_label_order():
    """0/1 scores give many items the same spread of judge modes; the list must not follow the solve's last bits
    (it changed with the row order and with the sparse factor's ordering)."""
    rng = np.random.default_rng(5)
    patterns = np.array([[1, 1, 0], [0, 1, 1], [1, 0, 1], [1, 1, 1]])
    rows = [{"system": s, "item": f"i{i:02d}", "judge": f"j{j}",
             "score": int(patterns[i % 4, j] ^ (rng.random() < 0.1))}
            for s in ("a", "b", "c") for i in range(40) for j in range(3)]
    frame = pd.DataFrame(rows)
    lists = []
    for order in (np.arange(len(frame)), rng.permutation(len(frame))):
        lists.append(eg.analyze(frame.iloc[order].reset_index(drop=True)).effects.disagreed_items)
    assert [d["item"] for d in lists[0]] == [d["item"] for d in lists[1]]
    keys = [(-float(f"{d['spread']:.10g}"), d["item"]) for d in lists[0]]
    assert keys == sorted(keys) and len({k[0] for k in keys}) < len(keys)  # ties, in label order
