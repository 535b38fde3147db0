"""The D-study: closed-form identities, the papers' numbers, requirements, cost and gaming."""

import math

import numpy as np
import pandas as pd
import pytest

from conftest import FIXTURES
from evalgauge import dstudy, read
from evalgauge.components import VarianceComponents
from evalgauge.errors import DesignError
from evalgauge.estimate import estimate_components
from evalgauge.inference import theta_interval
from evalgauge.simulate import simulate, sizing_preset, tee_table8


def sizing_vc(s=0.0801, sj=0.00110, **kw):
    values = {"system": s, "item": 0.02, "judge": 0.004, "system:item": 0.05, "system:judge": sj,
              "item:judge": 0.01, "system:item:judge": 0.04, "residual": 0.12, **kw}
    return VarianceComponents.from_values(values, {"system": 11, "item": 24, "judge": 4}, 2, object="system")


def test_pairwise_arm_ceiling_table3():
    # sizing Table 3, balanced arm: sigma2_s = 0.0801, sigma2_sj = 0.00110 -> ceiling 0.986
    c = dstudy.ceiling(sizing_vc(), "judge", 1)
    assert c.erho2 == pytest.approx(0.0801 / (0.0801 + 0.0011))
    assert round(c.erho2, 3) == 0.986
    assert c.mdd95 == pytest.approx(1.959964 * math.sqrt(2 * 0.0011), rel=1e-6)


def test_ceiling_is_the_limit_in_items_and_mdd_floor():
    vc = sizing_vc(s=0.08, sj=0.0533)
    for n_items in (1e3, 1e5, 1e7):
        p = dstudy.project(vc, {"item": n_items, "judge": 1}, 1)
        assert p.erho2 < dstudy.ceiling(vc).erho2
    p = dstudy.project(vc, {"item": 1e9, "judge": 1}, 1)
    assert p.erho2 == pytest.approx(0.08 / (0.08 + 0.0533), rel=1e-6)
    assert p.mdd95 == pytest.approx(1.959964 * math.sqrt(2 * 0.0533), rel=1e-6)


def test_sizing_eq2_by_hand():
    vc = sizing_vc()
    p = dstudy.project(vc, {"item": 30, "judge": 3}, 2)
    delta = 0.05 / 30 + 0.0011 / 3 + 0.04 / 90 + 0.12 / 180
    assert p.sigma2_delta == pytest.approx(delta)
    assert p.erho2 == pytest.approx(0.0801 / (0.0801 + delta))
    big_delta = delta + 0.02 / 30 + 0.004 / 3 + 0.01 / 90
    assert p.phi == pytest.approx(0.0801 / (0.0801 + big_delta))
    assert p.mdd95 == pytest.approx(1.959964 * math.sqrt(2 * delta), rel=1e-6)
    assert dstudy.mdd(p, df=29) > p.mdd95  # the t quantile for small n_i
    # TEE eq. 3: the grand mean's variance divides every component by its levels
    var = 0.0801 / 11 + 0.02 / 30 + 0.004 / 3 + 0.05 / 330 + 0.0011 / 33 + 0.01 / 90 + 0.04 / 990 + 0.12 / 1980
    assert p.var_abs == pytest.approx(var)
    assert sum(p.shares().values()) == pytest.approx(1.0)


def test_tee_nested_and_fixed_divisors_and_finite_benchmark():
    spec = tee_table8(categories=4, items_per_category=5, variants=3, temperatures=3, judges=3, replicates=2)
    truth = dict(spec.true_components().items())
    levels = {"category": 4, "item": 20, "variant": 3, "temperature": 3, "judge": 3}
    # TEE eq. 3: the panel of judges averaged as sigma2_lambda / M; the temperature fixed (Tier 2, Table 2)
    vc = VarianceComponents.from_values(truth, levels, 2, object="item", fixed=("temperature",),
                                        nesting={"item": "category"})
    p = dstudy.project(vc, {"item": 40}, 2, object="")
    # items drawn from the whole pool (TEE eq. 3, the default): alpha_i = kappa_c(i) + delta_i|c over N'
    expected = (0.015 / 40 + 0.025 / 40 + 0.015 / 3 + 0.015 / 3 + 0.008 / 120 + 0.008 / 120
                + 0.02 / 120 + 0.003 / 9 + 0.003 / 9 + 0.03 / (40 * 27 * 2))
    assert p.var_abs == pytest.approx(expected)
    # Brennan's i:c: the 4 categories drawn, sigma2_kappa over C'; strata: every category kept, kappa no error
    brennan = dstudy.project(vc.with_sampling("categories"), {"item": 40}, 2, object="")
    assert brennan.var_abs == pytest.approx(expected - 0.015 / 40 + 0.015 / 4)
    strata = dstudy.project(vc.with_sampling("strata"), {"item": 40}, 2, object="")
    assert strata.var_abs == pytest.approx(expected - 0.015 / 40)
    assert strata.sensitivity == {"temperature": pytest.approx(0.015), "category": pytest.approx(0.015)}
    # the fixed temperature's main effect is its sensitivity index (C.4), beside the error and in no share
    assert p.sensitivity == {"temperature": pytest.approx(0.015)} and "temperature" not in p.shares()
    finite = dstudy.project(vc, {"item": 40}, 2, object="", condition_on=("item",))
    assert finite.var_abs == pytest.approx(expected - 0.015 / 40 - 0.025 / 40)
    single_judge = dstudy.project(vc, {"item": 40, "judge": 1}, 2, object="")
    assert single_judge.var_abs > p.var_abs  # the judge sensitivity loses its 1/M
    # judges declared fixed too: both main effects are Tier 2, their interactions with random facets stay
    both = VarianceComponents.from_values(truth, levels, 2, object="item", fixed=("temperature", "judge"),
                                          nesting={"item": "category"})
    pb = dstudy.project(both, {"item": 40}, 2, object="")
    assert pb.var_abs == pytest.approx(expected - 0.015 / 3)
    assert set(pb.sensitivity) == {"temperature", "judge"}


def test_var_theta_equals_squared_se_of_the_grand_mean():
    pen = estimate_components(read(FIXTURES / "lme4" / "Penicillin.csv"),
                              formula="diameter ~ 1 + (1|plate) + (1|sample)")
    assert dstudy.project(pen, object="").se == pytest.approx(pen.reml["marginal_mean_se"], rel=1e-9)
    assert pen.reml["marginal_mean_se"] == pytest.approx(0.8085954, rel=1e-4)  # lme4's SE of the intercept
    spec = sizing_preset(systems=6, items=8, judges=3, replicates=2)
    frame = simulate(spec, seed=4)
    reml = estimate_components(frame, spec.design(), method="reml")
    assert dstudy.project(reml, object="").se == pytest.approx(reml.reml["marginal_mean_se"], rel=1e-6)


def test_requirements_and_unreachable_targets():
    vc = sizing_vc(s=0.08, sj=0.0533)  # ceiling 0.600
    req = dstudy.needed(vc, "item", 0.8, counts={"judge": 1})
    assert not req.reachable and req.limit == pytest.approx(0.6, abs=1e-3) and "unreachable" in str(req)
    judges = dstudy.needed(vc, "judge", 0.8, counts={"item": 30})
    assert judges.reachable
    p = dstudy.project(vc, {"item": 30, "judge": judges.count})
    q = dstudy.project(vc, {"item": 30, "judge": judges.count - 1})
    assert p.erho2 >= 0.8 > q.erho2
    mdd_req = dstudy.needed(vc, "item", 0.5, "mdd95", counts={"judge": 4})
    assert dstudy.project(vc, {"item": mdd_req.count, "judge": 4}).mdd95 <= 0.5
    rate = dstudy.exchange_rate(vc, judges=2, items=30)
    target = dstudy.project(vc, {"judge": 2, "item": 30}).erho2
    if rate.reachable:
        assert dstudy.project(vc, {"judge": 1, "item": rate.count}).erho2 >= target
    else:
        assert target >= dstudy.ceiling(vc).erho2 - 1e-9


def test_interventions_are_ranked():
    frame = dstudy.interventions(sizing_vc())
    assert frame["pct_change_sigma2_delta"].is_monotonic_increasing
    row = frame.set_index("intervention").loc["a single judge"]
    assert row["pct_change_var_abs"] > 0


def test_budget_optimum_shape_sizing_app_a():
    # App. A: optima are interior, judges grow with the budget, one replicate is optimal.
    vc = sizing_vc(s=0.08, sj=0.0533)
    cost = dstudy.CostModel((1.0 / 11,))  # one unit per (item, judge, replicate) across the 11 systems
    plans = [dstudy.optimize_budget(vc, b, cost) for b in (120, 360, 1080)]
    judges = [p["counts"]["judge"] for p in plans]
    assert judges == sorted(judges) and judges[0] < judges[-1]
    assert all(p["replicates"] == 1 for p in plans)
    assert all(p["cost"] <= b + 1e-9 for p, b in zip(plans, (120, 360, 1080), strict=True))
    # brute force confirms the optimum at the smallest budget
    best = min((dstudy.project(vc, {"item": b // j, "judge": j}, r).sigma2_delta, j, r)
               for j in range(1, 121) for r in range(1, 4) for b in [120 // r] if b // j >= 1)
    assert plans[0]["objective"] == pytest.approx(best[0])


def test_frontier_is_pareto():
    vc = sizing_vc()
    f = dstudy.frontier(vc, {"item": [10, 30, 100], "judge": [1, 2, 4]}, dstudy.CostModel((0.01,)))
    pareto = f[f["pareto"]]
    assert pareto["cost"].is_monotonic_increasing and pareto["se"].is_monotonic_decreasing
    assert len(f) == 9


def test_gaming_surface_and_order_statistics():
    assert dstudy.expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), abs=1e-12)
    rng = np.random.default_rng(0)
    mc = rng.standard_normal((200_000, 27)).max(axis=1)
    assert dstudy.expected_max_normal(27) == pytest.approx(mc.mean(), abs=4.5 * mc.std() / math.sqrt(mc.size))
    p = dstudy.project(sizing_vc())
    g = dstudy.gaming_surface(p, 27, base_rate=0.5)
    assert g["inflation"] == pytest.approx(dstudy.expected_max_normal(27) * p.se)
    assert g["inflation_elo"] == pytest.approx(400 * math.log10((0.5 + g["inflation"]) / (0.5 - g["inflation"])))


def test_rank_inversion():
    p = dstudy.project(sizing_vc())
    assert dstudy.rank_inversion(0.0, p) == 0.5
    d = math.sqrt(2 * p.sigma2_delta)
    assert dstudy.rank_inversion(d, p) == pytest.approx(0.158655, abs=1e-6)


def test_bad_counts():
    with pytest.raises(DesignError, match="unknown facet"):
        dstudy.project(sizing_vc(), {"items": 3})
    with pytest.raises(DesignError, match="at least one level"):
        dstudy.project(sizing_vc(), {"item": 0})


def test_theta_interval_naive_vs_full():
    spec = tee_table8(categories=4, items_per_category=6, variants=3, temperatures=3, judges=3, replicates=2)
    frame = simulate(spec, seed=8)
    vc = estimate_components(frame, spec.design())
    ci = theta_interval(vc)
    assert ci.se > ci.naive_se and ci.se_ratio > 1
    assert ci.low < ci.estimate < ci.high and 1 < ci.df < 1000
    # the naive SE keeps exactly the terms with items: what s/sqrt(N) over item means estimates
    item_means = frame.groupby("item", observed=True)["score"].mean()
    assert ci.naive_se == pytest.approx(item_means.std(ddof=1) / math.sqrt(len(item_means)), rel=0.35)
    assert pd.Series(ci.to_dict()).notna().all()


def test_interventions_are_ranked_by_the_quantity_asked_and_negligible_ones_last():
    """A share of texts labelled (items the object, the question the share itself): more replicates shrink the
    items' relative error a lot but the share's Var(theta-hat) by under 1%, so they are not first; comparing
    systems, the relative error ranks."""
    share = VarianceComponents.from_values(
        {"item": 0.2, "variant": 0.002, "item:variant": 0.01, "judge": 0.01, "item:judge": 0.01, "residual": 0.05},
        {"item": 300, "variant": 2, "judge": 2}, 2, object="item")
    table = dstudy.interventions(share)
    assert table.attrs["ranked_by"] == "var_abs"
    reps = table.set_index("intervention").filter(like="replicates", axis=0)
    assert not reps.empty and (reps["pct_change_var_abs"].abs() < 1).all()
    assert (reps["pct_change_sigma2_delta"] < -5).all()  # what the old ranking put first
    first = table.iloc[0]
    assert abs(first["pct_change_var_abs"]) >= 1 and "replicates" not in first["intervention"]
    moved = table["pct_change_var_abs"].abs() >= 1
    assert not (moved.astype(int).diff() > 0).any()  # every negligible row after every one that moves
    board = VarianceComponents.from_values({"system": 0.08, "item": 0.3, "system:item": 0.3, "judge": 0.02,
                                            "system:judge": 0.01, "residual": 0.2},
                                           {"system": 10, "item": 50, "judge": 3}, 2, object="system")
    assert dstudy.interventions(board).attrs["ranked_by"] == "sigma2_delta"


def test_no_intervention_changes_a_fixed_facets_levels():
    """A temperature declared fixed is one of the study's chosen conditions (TEE Table 2, Tier 2): 'temperature
    x2' is no way to shrink the error of the estimate at those conditions, so it is never offered; the random
    facets keep theirs."""
    vc = VarianceComponents.from_values({"item": 0.2, "temperature": 0.05, "judge": 0.02, "item:judge": 0.01,
                                         "residual": 0.1}, {"item": 100, "temperature": 2, "judge": 3}, 2,
                                        object="item", fixed=("temperature",))
    names = list(dstudy.interventions(vc)["intervention"])
    assert not any("temperature" in n for n in names) and "+1 judge" in names
