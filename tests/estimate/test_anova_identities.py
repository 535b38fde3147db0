"""Closed-form identities of the balanced ANOVA, on arbitrary (non-normal) data."""

import numpy as np
import pandas as pd
import pytest

import evalgauge as eg
from evalgauge.design import Design, Facet, code_data
from evalgauge.estimate.anova import anova_table, ems_matrix
from evalgauge.simulate import SimulationSpec, simulate, sizing_preset, tee_table8


def _table(df, design):
    coded = code_data(df, design)
    r = next(iter(coded.balance().replicates))
    cm = np.bincount(coded.cell, weights=coded.y).reshape(coded.shape) / r
    within = coded.y - cm.ravel()[coded.cell]
    return anova_table(design, cm, r, float(within @ within))


SPECS = {
    "crossed": sizing_preset(systems=4, items=5, judges=3, replicates=2),
    "nested": tee_table8(categories=3, items_per_category=3, variants=2, temperatures=2, judges=2, replicates=2),
    "one-per-cell": SimulationSpec({"p": 5, "t": 3, "r": 2}, {"p": 1.0, "residual": 1.0}, nest={"r": "t"}),
}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_sums_of_squares_and_df_partition_the_total(name):
    spec = SPECS[name]
    df = simulate(spec, seed=3)
    # Skewed, discrete scores: the identities are algebra, not normal theory.
    df["score"] = np.round(np.exp(df["score"]), 1)
    terms, mean = _table(df, spec.design())
    y = df["score"].to_numpy()
    assert sum(t.ss for t in terms) == pytest.approx(float(((y - y.mean()) ** 2).sum()), rel=1e-10)
    assert sum(t.df for t in terms) == len(y) - 1
    assert mean == pytest.approx(y.mean(), rel=1e-12)


def test_pooling_adds_sums_of_squares_of_omitted_terms():
    spec = SPECS["nested"]
    df = simulate(spec, seed=4)
    full, _ = _table(df, Design(spec.design().facets, replicate="replicate"))
    pooled, _ = _table(df, spec.design())
    full_ss = {t.name: t.ss for t in full}
    pooled_by_name = {t.name: t for t in pooled}
    host = pooled_by_name["category:item:variant"]
    assert host.pooled == ("category:variant",)
    assert host.ss == pytest.approx(full_ss["category:item:variant"] + full_ss["category:variant"], rel=1e-12)
    assert sum(t.ss for t in pooled) == pytest.approx(sum(t.ss for t in full), rel=1e-12)


def test_ems_matrix_is_upper_triangular_with_cornfield_tukey_coefficients():
    spec = sizing_preset(systems=4, items=5, judges=3, replicates=2)
    terms, _ = _table(simulate(spec, seed=5), spec.design())
    a = ems_matrix(terms)
    assert np.allclose(a, np.triu(a))
    names = [t.name for t in terms]
    # E[MS_system] = s_e + 2 s_sij + 2*3 s_si + 2*5 s_sj + 2*5*3 s_s (sizing App. D; Brennan's rules)
    row = dict(zip(names, a[names.index("system")], strict=True))
    assert row == {"system": 30, "item": 0, "judge": 0, "system:item": 6, "system:judge": 10,
                   "item:judge": 0, "system:item:judge": 2, "residual": 1}


def test_fixed_by_fixed_interaction_stays_out_of_its_main_effects():
    facets = (Facet("item"), Facet("temperature", "fixed"), Facet("judge", "fixed"))
    terms, _ = _table(simulate(SimulationSpec({"item": 4, "temperature": 2, "judge": 3}, {"item": 1.0},
                                              replicates=2), seed=6),
                      Design(facets, replicate="replicate"))
    a = ems_matrix(terms, frozenset({"temperature", "judge"}))
    names = [t.name for t in terms]
    tj = names.index("temperature:judge")
    assert a[names.index("temperature"), tj] == 0 and a[names.index("judge"), tj] == 0
    assert a[names.index("item"), names.index("item:temperature")] > 0  # random x fixed stays in


def test_estimates_do_not_depend_on_row_order_or_labels():
    spec = SPECS["nested"]
    df = simulate(spec, seed=7)
    base = eg.estimate_anova(df, spec.design()).to_frame()
    shuffled = df.sample(frac=1.0, random_state=1).reset_index(drop=True)
    shuffled["judge"] = shuffled["judge"].astype(str).map({"j1": "zeta", "j2": "alpha"})
    again = eg.estimate_anova(shuffled, spec.design()).to_frame()
    pd.testing.assert_frame_equal(base, again, rtol=1e-10)


def test_shift_and_scale():
    spec = SPECS["crossed"]
    df = simulate(spec, seed=8)
    base = eg.estimate_anova(df, spec.design())
    df2 = df.assign(score=3 * df["score"] + 10)
    scaled = eg.estimate_anova(df2, spec.design())
    for c in base.components:
        assert scaled[c.name].variance == pytest.approx(9 * c.variance, rel=1e-9, abs=1e-12)
    assert scaled.grand_mean == pytest.approx(3 * base.grand_mean + 10)


def test_zero_within_cell_variance_is_exactly_zero():
    # A caching gateway returns byte-identical replicates: the residual reads 0 up to round-off.
    spec = sizing_preset(systems=3, items=4, judges=2, replicates=3)
    df = simulate(spec, seed=9)
    df["score"] = df.groupby(["system", "item", "judge"], observed=True)["score"].transform("first")
    result = eg.estimate_anova(df, spec.design())
    assert abs(result["residual"].variance) < 1e-12 * result.total_variance


def test_json_and_frame_forms():
    spec = SPECS["crossed"]
    result = eg.estimate_anova(simulate(spec, seed=10), spec.design())
    import json

    payload = json.loads(result.to_json())
    assert payload["method"] == "anova" and payload["n_obs"] == 4 * 5 * 3 * 2
    first = payload["components"][0]
    assert {"component", "variance", "variance_truncated", "df", "mean_square", "share"} <= set(first)
    frame = result.to_frame()
    assert frame["share"].sum() == pytest.approx(1.0)
    assert list(frame["component"]) == list(result.names)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_slabs_of_the_effect_sums_change_nothing(name, monkeypatch):
    """Each effect's sum of squares is accumulated a slab of cells at a time; slabs of one row, of a few rows
    and of everything give the same table (to rounding)."""
    import evalgauge.estimate.anova as anova

    spec = SPECS[name]
    df = simulate(spec, seed=5)
    whole, _ = _table(df, spec.design())
    for slab in (1, 7):
        monkeypatch.setattr(anova, "_SLAB", slab)
        sliced, _ = _table(df, spec.design())
        assert [t.ss for t in sliced] == pytest.approx([t.ss for t in whole], rel=1e-12, abs=1e-12)


def test_within_cell_sum_of_squares_from_cell_sums_in_slabs():
    """sum over cells of (squares - sum^2 / n), each cell clipped at zero, whatever the slab size."""
    from evalgauge.estimate import _within_cells

    rng = np.random.default_rng(2)
    # a mean 1000 times the spread: each cell loses about 6 of 16 digits to the subtraction, so 1e-9 holds
    y = rng.normal(1000.0, 1.0, size=(101, 4))
    y[3] = 7.0  # a cell of equal scores: exactly no spread
    sums, squares = y.sum(axis=1), (y * y).sum(axis=1)
    want = float(((y - y.mean(axis=1, keepdims=True)) ** 2).sum())
    for slab in (1, 10, 1 << 18):
        assert _within_cells(sums, squares, 4.0, slab=slab) == pytest.approx(want, rel=1e-9)
