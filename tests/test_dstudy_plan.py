"""The D-study plan's numbers: the bootstrap of derived numbers, the components' JSON round trip, replicates
priced apart from first calls (the `plan` command: tests/cli/test_plan_command.py)."""

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from evalgauge import dstudy
from evalgauge.components import VarianceComponents
from evalgauge.estimate import estimate_components
from evalgauge.inference import bootstrap_derived
from evalgauge.simulate import simulate, sizing_preset


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    spec = sizing_preset(systems=20, items=15, judges=5, replicates=2)
    frame = simulate(spec, seed=12)
    path = tmp_path_factory.mktemp("plan") / "c.json"
    vc = estimate_components(frame, spec.design(), n_boot=800, seed=1)
    path.write_text(vc.to_json())
    return vc, path


def test_bootstrap_derived_numbers(fitted):
    vc, _ = fitted
    table = bootstrap_derived(vc, target_erho2=0.8).set_index("quantity")
    p = dstudy.project(vc)
    c = dstudy.ceiling(vc)
    assert table.loc["erho2", "estimate"] == pytest.approx(p.erho2)
    assert table.loc["ceiling", "estimate"] == pytest.approx(c.erho2)
    assert table.loc["mdd_floor", "estimate"] == pytest.approx(c.mdd95)
    need = dstudy.needed(vc, "judge", 0.8)
    assert table.loc["judges_needed", "estimate"] == (need.count if need.reachable else math.inf)
    for q in ("erho2", "ceiling", "mdd95", "sigma2_delta"):
        assert table.loc[q, "low"] <= table.loc[q, "estimate"] <= table.loc[q, "high"]
    # every derived number, recomputed draw by draw with the D-study's own functions (not the matrix
    # shortcut under test): the ceiling's exceedance probability and the percentile intervals
    ceilings, erho2s, needs = [], [], []
    for row in vc.draws:
        comps = tuple(replace(c, variance=float(v)) for c, v in zip(vc.components, row, strict=True))
        drawn = replace(vc, components=comps)
        ceilings.append(dstudy.ceiling(drawn).erho2)
        erho2s.append(dstudy.project(drawn).erho2)
        req = dstudy.needed(drawn, "judge", 0.8)
        needs.append(req.count if req.reachable else math.inf)
    assert table.loc["P(ceiling >= 0.8)", "estimate"] == pytest.approx(np.mean(np.array(ceilings) >= 0.8))
    assert 0.0 < table.loc["P(ceiling >= 0.8)", "estimate"] < 1.0  # this fixture straddles the threshold
    def q(values, p):  # percentiles that are draws (an infinite requirement stays infinite)
        return np.quantile(values, p, method="inverted_cdf")

    assert table.loc["erho2", "low"] == pytest.approx(q(erho2s, 0.025), rel=1e-9)
    assert table.loc["erho2", "high"] == pytest.approx(q(erho2s, 0.975), rel=1e-9)
    assert table.loc["ceiling", "high"] == pytest.approx(q(ceilings, 0.975), rel=1e-9)
    assert table.loc["judges_needed", "high"] == q(needs, 0.975)
    # the MDD's bootstrap interval is narrow relative to E rho^2's (sizing sec. 3: MDD is precisely estimable)
    rel_mdd = (table.loc["mdd95", "high"] - table.loc["mdd95", "low"]) / table.loc["mdd95", "estimate"]
    rel_erho2 = (table.loc["erho2", "high"] - table.loc["erho2", "low"]) / table.loc["erho2", "estimate"]
    assert rel_mdd < rel_erho2


def test_components_json_round_trip(fitted):
    vc, path = fitted
    from evalgauge.components import VarianceComponents

    back = VarianceComponents.from_dict(json.loads(path.read_text()))
    assert back.names == vc.names and np.allclose(back.values, vc.values)
    assert back.levels == vc.levels and back.object == vc.object


def test_cheaper_later_replicates_buy_more_replicates_at_the_same_budget():
    """A replicate of a prompt the provider's cache holds costs less than a cell's first call: the budget
    optimiser prices each at its own, and with replicate noise dominating it buys replicates it did not before."""
    from evalgauge.dstudy import CostModel, plan
    from evalgauge.errors import DesignError

    same = CostModel((0.004, 0.002), repeat_price_per_call=(0.004, 0.002))
    plain = CostModel((0.004, 0.002))
    for counts, r in (({"system": 5, "item": 40, "judge": 2}, 3), ({"system": 2, "item": 7, "judge": 1}, 1)):
        assert same.cost(counts, r) == pytest.approx(plain.cost(counts, r), rel=1e-14)
    cheap = CostModel((0.004, 0.002), repeat_price_per_call=(0.001, 0.0005))
    # 200 cells of the two judges: their first calls, then two later replicates each at the cached price
    assert cheap.cost({"system": 5, "item": 40, "judge": 2}, 3) == pytest.approx(200 * (0.006 + 2 * 0.0015))
    vc = VarianceComponents.from_dict({"object": "system", "components": {
        "system": 0.08, "system:item": 0.05, "system:judge": 0.02, "system:item:judge": 0.05, "residual": 1.5},
        "levels": {"system": 5, "item": 100, "judge": 2}})
    before = plan(vc, budget=20, prices={"*": 0.004}, limits={"item": 100})
    after = plan(vc, budget=20, prices={"*": 0.004}, replicate_prices={"*": 0.0008}, limits={"item": 100})
    assert before.budget.replicates == 1 and after.budget.replicates > 1
    assert after.budget.objective < before.budget.objective and after.budget.cost <= 20
    assert before.budget.priced is None and "$0.0008 each later replicate" in after.budget.priced
    with pytest.raises(DesignError, match="each priced judge"):
        plan(vc, budget=20, prices={"*": 0.004}, replicate_prices={"j1": 0.001})
