"""The projections' conventions, named and chosen: how the items of a nested facet are drawn (TEE eq. 3's
pool by default, Brennan's i:c, strata), what the estimate is of (TEE eq. 3's domain, C.2's finite benchmark),
and calls that cost what they are (a category is no call). Checked on TEE Table 13's printed MMLU components and
its C.8 worked example (AILuminate)."""

import itertools
import json
import math

import pytest
from click.testing import CliRunner

import evalgauge as eg
from conftest import FIXTURES
from evalgauge import dstudy
from evalgauge.cli import main
from evalgauge.components import VarianceComponents

# TEE Table 13 (MMLU exact match; N = 200 items in 4 categories, V = 5 prompts, M = 3 SUT models, H = 3
# temperatures, R = 8): each component's printed sigma2 and % of Var(theta-hat). The SUTs are averaged as
# sigma2_lambda / M (eq. 3), which evalgauge does with the models random; the temperature has no printed term.
TABLE13 = {  # name: (sigma2 printed to 3 decimals, % of Var(theta-hat) printed to 1 decimal)
    "category:item": (0.063, 35.0), "model": (0.001, 25.0), "variant": (0.001, 14.7),
    "variant:model": (0.002, 13.8), "category:item:model": (0.028, 5.3), "category": (0.009, 5.1)}
LEVELS = {"category": 4, "item": 200, "variant": 5, "model": 3}


def _divisors(sampling: str) -> dict[str, float]:
    vc = VarianceComponents.from_values({k: v for k, (v, _) in TABLE13.items()} | {"residual": 0.0}, LEVELS, 8,
                                        nesting={"item": "category"}).with_sampling(sampling)
    return {c.name: dstudy.divisor(c, vc, dstudy.observed_counts(vc), 8) for c in vc.components if c.name in TABLE13}


@pytest.mark.parametrize("sampling, consistent", [("pooled", True), ("categories", False)])
def test_table13_printed_shares_follow_the_pooled_convention(sampling, consistent):
    """Each share is sigma2_k / d_k over Var(theta-hat). Backing each sigma2_k out of its printed share (Var from
    the within-category item term, the largest) must land within the rounding of the printed sigma2_k: it does
    for every term with items drawn from the whole pool (kappa over N' = 200), not with kappa over C' = 4."""
    d = _divisors(sampling)
    delta, delta_share = TABLE13["category:item"]
    fits = {}
    for name, (printed, share) in TABLE13.items():
        backed = [s / 100 * (dv / d["category:item"] / (ds / 100)) * d[name]  # sigma2 = share x Var x d
                  for s, dv, ds in itertools.product((share - 0.05, share + 0.05), (delta - 5e-4, delta + 5e-4),
                                                     (delta_share - 0.05, delta_share + 0.05))]
        fits[name] = min(backed) <= printed + 5e-4 and max(backed) >= printed - 5e-4
    assert all(fits.values()) is consistent
    assert fits["category"] is consistent and all(v for k, v in fits.items() if k != "category")


def test_table13_shares_and_recommendation_by_convention():
    printed = {k: v for k, (v, _) in TABLE13.items()} | {"residual": 0.0}
    vc = VarianceComponents.from_values(printed, LEVELS, 8, nesting={"item": "category"})
    pooled = dstudy.project(vc, object="").shares()
    brennan = dstudy.project(vc.with_sampling("categories"), object="").shares()
    assert 100 * brennan["category"] == pytest.approx(68.6, abs=0.05)  # Brennan's i:c: kappa over 4 categories
    assert 100 * pooled["category"] == pytest.approx(4.2, abs=0.05)  # within the rounding of the printed 5.1
    # the components as the printed shares imply them (Var from the item term), the paper's recommendation
    var = 0.063 / 200 / 0.350
    d = _divisors("pooled")
    implied = {k: share / 100 * var * d[k] for k, (_, share) in TABLE13.items()} | {"residual": 0.0}
    vc = VarianceComponents.from_values(implied, LEVELS, 8, nesting={"item": "category"})
    shares = dstudy.project(vc, object="").shares()
    for name, (_, share) in TABLE13.items():
        assert 100 * shares[name] == pytest.approx(share / 0.989, abs=0.05)  # the printed shares sum to 98.9%
    assert dstudy.interventions(vc)["intervention"].iloc[0] == "items x2"  # TEE: items first
    strata = dstudy.project(vc.with_sampling("strata"), object="")
    assert "category" not in strata.shares() and strata.sensitivity["category"] == pytest.approx(implied["category"])


# TEE C.8: AILuminate, N = 141 items in C = 12 hazard categories, V = 5, H = 3, M = 3 judges, R = 8; printed shares
# judge 43.8%, item x judge 16.7%, prompt x judge 12.4%, within-category item 20.8%, the rest each below 5% (here:
# category 2.5%, prompt 0.4% as "less than 0.5%", residual 3.4%), Var(theta-hat) = 0.000354, SE 0.019
C8_SHARES = {"judge": 43.8, "category:item:judge": 16.7, "variant:judge": 12.4, "category:item": 20.8,
             "category": 2.5, "variant": 0.4, "residual": 3.4}
C8_LEVELS = {"category": 12, "item": 141, "variant": 5, "temperature": 3, "judge": 3}


def _c8_components() -> dict[str, float]:
    vc = VarianceComponents.from_values(dict.fromkeys(C8_SHARES, 1.0), C8_LEVELS, 8, nesting={"item": "category"},
                                        fixed=("temperature",))
    counts = dstudy.observed_counts(vc)
    return {c.name: C8_SHARES[c.name] / 100 * 0.000354 * dstudy.divisor(c, vc, counts, 8) for c in vc.components}


def test_c8_worked_example_from_json_and_from_the_command_line(tmp_path):
    values = _c8_components()
    payload = {"components": values, "levels": C8_LEVELS, "replicates": 8, "nesting": {"item": "category"},
               "fixed": ["temperature"]}
    (tmp_path / "c8.json").write_text(json.dumps(payload))
    runner = CliRunner()
    from_json = runner.invoke(main, ["plan", str(tmp_path / "c8.json"), "--json", "-"])
    given = [arg for name, v in values.items()
             for arg in ("--component", f"{name.replace('category:item', 'item')}={v!r}")]
    counts = [arg for f, n in C8_LEVELS.items() for arg in ("--n", f"{f}={n}")]
    from_cli = runner.invoke(main, ["plan", *given, "--nest", "category/item", "--fixed", "temperature", *counts,
                                    "--n", "rep=8", "--json", "-"])
    assert from_json.exit_code == from_cli.exit_code == 0, from_cli.output
    a, b = json.loads(from_json.output), json.loads(from_cli.output)
    for out in (a, b):
        design = out["designs"][0]
        assert design["var_abs"] == pytest.approx(0.000354, rel=1e-9)
        assert design["se"] == pytest.approx(0.0188, abs=5e-5)  # "SE 0.019", CI 0.942 +- 0.037
        assert 1.959964 * design["se"] == pytest.approx(0.037, abs=5e-4)
        assert out["sampling"] == "pooled" and out["estimand"] == "domain" and out["nesting"] == {"item": "category"}
    # the finite benchmark (C.2): the 141 items themselves, their own terms no error
    finite = json.loads(runner.invoke(main, ["plan", str(tmp_path / "c8.json"), "--estimand", "finite",
                                             "--json", "-"]).output)
    expected = 0.000354 * (1 - (C8_SHARES["category:item"] + C8_SHARES["category"]) / 100)
    assert finite["designs"][0]["var_abs"] == pytest.approx(expected, rel=1e-9) and finite["estimand"] == "finite"
    text = runner.invoke(main, ["plan", str(tmp_path / "c8.json"), "--sampling", "categories"]).output
    assert "Brennan's i:c" in text and "Conventions:" in text


def test_costs_count_calls_not_categories():
    vc = VarianceComponents.from_values({"category": 0.01, "category:item": 0.05, "judge": 0.01, "residual": 0.1},
                                        {"category": 12, "item": 141, "judge": 3}, 1, nesting={"item": "category"})
    out = dstudy.plan(vc, {"item": [141], "judge": [1]}, prices={"*": 1.0})
    assert out.designs["cost"].iloc[0] == 141  # 141 items x 1 judge x 1 replicate, whatever their categories


def test_analyze_names_and_applies_the_conventions():
    data = FIXTURES / "brennan_nested" / "nested_one_per_cell.csv"
    fitted = eg.fit(data, nest="category/item")
    out = {key: fitted.analysis(**{key: value} if key else {})
           for key, value in ((None, None), ("sampling", "categories"), ("estimand", "finite"))}
    default = out[None].components
    assert default.sampling == "pooled" and default.estimand == "domain"
    assert out["sampling"].components.sampling == "categories" and out["estimand"].components.estimand == "finite"
    se = {k: v.theta.se for k, v in out.items()}
    assert se["sampling"] > se[None] > se["estimand"] and not math.isnan(se[None])
    terminal = CliRunner().invoke(main, ["analyze", str(data), "--nest", "category/item"]).output
    assert "Conventions: nested category/item: items drawn from the whole pool" in terminal


def _table13_implied(residual_share: float = 0.011) -> VarianceComponents:
    """Table 13's components as its printed shares imply them (Var(theta-hat) from the item term), the 1.1% the
    printed shares leave for the residual."""
    var = 0.063 / 200 / 0.350
    d = _divisors("pooled")
    values = {k: share / 100 * var * d[k] for k, (_, share) in TABLE13.items()}
    values["residual"] = residual_share * var * 200 * 5 * 3 * 8
    return VarianceComponents.from_values(values, LEVELS, 8, nesting={"item": "category"})


def test_budget_over_every_random_facet_with_an_item_pool():
    """The optimiser varies the prompt variants too (not only judges and replicates), and never buys more items
    than the pool holds: once the 200 items are spent, the budget goes to prompts (TEE sec. 4.2)."""
    vc = _table13_implied()
    assert dstudy.budget_facets(vc) == ["variant"]  # the SUT models are what is evaluated; categories via items
    cost = dstudy.CostModel((1.0,), "judge", ("category",))
    designs = {b: dstudy.optimize_budget(vc, b, cost, objective="var_abs", limits={"item": 200})
               for b in (3000, 6000, 12000)}
    for b, best in designs.items():
        assert best["counts"]["item"] == 200 and best["cost"] <= b and best["replicates"] == 1
    assert designs[3000]["counts"]["variant"] < designs[6000]["counts"]["variant"] < designs[12000]["counts"]["variant"]
    # exhaustive: no affordable design of items <= 200, variants <= 40, replicates <= 5 does better
    for b in (600, 3000):
        best = dstudy.optimize_budget(vc, b, cost, objective="var_abs", limits={"item": 200})
        for v in range(1, 41):
            for r in range(1, 6):
                n = min(200, b // (3 * v * r))
                if n >= 1:
                    assert dstudy.project(vc, {"item": n, "variant": v}, r).var_abs >= best["objective"] - 1e-15
    runner = CliRunner()
    args = [arg for name, (v, _) in TABLE13.items() for arg in ("--component", f"{name.replace('category:', '')}={v}")]
    out = runner.invoke(main, ["plan", *args, "--component", "residual=0.05", "--nest", "category/item", "--n",
                               "category=4", "--n", "item=200", "--n", "variant=5", "--n", "model=3", "--n", "rep=8",
                               "--price", "1", "--budget", "6000", "--max", "item=200", "--json", "-"])
    assert out.exit_code == 0, out.output
    budget = json.loads(out.output)["budget"]
    assert budget["counts"]["item"] == 200 and budget["counts"]["variant"] > 1 and budget["cost"] <= 6000
    only_items = runner.invoke(main, ["plan", *args, "--component", "residual=0.05", "--nest", "category/item",
                                      "--n", "category=4", "--n", "item=200", "--n", "variant=5", "--n", "model=3",
                                      "--price", "1", "--budget", "6000", "--vary", "", "--json", "-"])
    assert only_items.exit_code == 0, only_items.output
    assert "variant" not in json.loads(only_items.output)["budget"]["counts"]
    refused = runner.invoke(main, ["plan", *args, "--component", "residual=0.05", "--n", "category=4",
                                   "--n", "item=200", "--n", "variant=5", "--n", "model=3", "--max", "item=0"])
    assert refused.exit_code == 2 and "--budget" in refused.output


def test_compare_under_the_finite_estimand_drops_the_system_by_item_term(tmp_path):
    """Balanced systems x items x judges x replicates: a pair's variance is 2 (s2_si / N + s2_sj / J + s2_sij /
    (N J) + s2_e / (N J R)) for the domain, and without s2_si / N for the benchmark's own items (TEE C.2)."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(5)
    n, j, r = 40, 3, 2
    rows = []
    effects = {"si": rng.normal(0, 0.3, (4, n)), "sj": rng.normal(0, 0.1, (4, j)), "i": rng.normal(0, 0.5, n),
               "j": rng.normal(0, 0.2, j)}
    for s, i, k, rep in itertools.product(range(4), range(n), range(j), range(r)):
        rows.append({"system": f"s{s}", "item": f"i{i}", "judge": f"j{k}", "replicate": rep,
                     "score": 0.2 * s + effects["i"][i] + effects["j"][k] + effects["si"][s, i]
                     + effects["sj"][s, k] + rng.normal(0, 0.4)})
    fit = eg.fit(pd.DataFrame(rows))
    v = {c.name: max(c.variance, 0.0) for c in fit.components.components}
    finite = 2 * (v["system:judge"] / j + v["system:item:judge"] / (n * j) + v["residual"] / (n * j * r))
    domain = finite + 2 * v["system:item"] / n
    for estimand, expected in (("domain", domain), ("finite", finite)):
        pairs = fit.compare(estimand=estimand, n_boot=200).pairs
        assert pairs["se"].to_numpy() == pytest.approx(np.sqrt(expected), rel=1e-9), estimand
    out = tmp_path / "c.json"
    pd.DataFrame(rows).to_csv(tmp_path / "rows.csv", index=False)
    res = CliRunner().invoke(main, ["compare", str(tmp_path / "rows.csv"), "--estimand", "finite", "--bootstrap",
                                    "200", "--json", str(out)])
    assert res.exit_code == 0, res.output
    payload = json.loads(out.read_text())
    assert payload["estimand"] == "finite" and any("estimand: finite" in n for n in payload["notes"])
    assert payload["pairs"][0]["se"] == pytest.approx(math.sqrt(finite), rel=1e-9)
