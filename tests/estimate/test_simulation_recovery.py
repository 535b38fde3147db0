"""Seeded simulations with known components: the ANOVA estimator is unbiased, and its
sampling variance is the normal-theory one.

Tolerances are derived, not tuned: the Monte Carlo mean of n_sim estimates has
standard error sqrt(Var(estimate) / n_sim), with Var(estimate) from the
independent scaled (noncentral) chi-square laws of the mean squares
(`sampling_covariance`). A |z| above 4.5 for any component fails (for ~20
independent checks the chance of a false alarm is about 1e-4).
"""

import numpy as np
import pytest

from evalgauge.design import code_data
from evalgauge.estimate.anova import anova_from_coded, report_scale, sampling_covariance
from evalgauge.simulate import SimulationSpec, simulate, sizing_preset, tee_table8

Z_MAX = 4.5


def _run(spec: SimulationSpec, n_sim: int, seed: int):
    rng = np.random.default_rng(seed)
    design = spec.design()
    draws = []
    result = None
    for _ in range(n_sim):
        result = anova_from_coded(code_data(simulate(spec, rng), design))
        draws.append([c.variance for c in result.components])
    return result, np.array(draws)


def _truth(spec: SimulationSpec, names, pooled_top=None):
    truth = spec.true_components()
    out = {n: truth.get(n, 0.0) for n in names}
    if pooled_top:  # one replicate: the residual carries the top interaction too
        out["residual"] = truth.get("residual", 0.0) + truth.get(pooled_top, 0.0)
    return out


def _check(result, draws, truth):
    names = list(result.names)
    cov = sampling_covariance(result, truth)
    sd = np.sqrt(np.diag(cov))
    n_sim = draws.shape[0]
    mean = draws.mean(axis=0)
    expected = np.array([truth[n] for n in names])
    z = (mean - expected) / (sd / np.sqrt(n_sim))
    bad = {n: (round(m, 6), e, round(float(zz), 2)) for n, m, e, zz in zip(names, mean, expected, z, strict=True)
           if abs(zz) > Z_MAX}
    assert not bad, f"biased components (mean, truth, z): {bad}"
    # The spread matches theory too: s^2 / sigma^2 - 1 has standard error
    # sqrt(2/(n-1) + excess_kurtosis/n), the kurtosis from the chi-square cumulants.
    ratio = draws.var(axis=0, ddof=1) / np.diag(cov)
    se = np.sqrt(2 / (n_sim - 1) + _excess_kurtosis(result, truth) / n_sim)
    z_var = (ratio - 1) / se
    bad = {n: (round(float(r), 3), round(float(zz), 2)) for n, r, zz in zip(names, ratio, z_var, strict=True)
           if abs(zz) > Z_MAX}
    assert not bad, f"sampling variance off (var ratio, z): {bad}"
    return z


def _excess_kurtosis(result, truth):
    """Excess kurtosis of each estimate, a linear combination of independent (noncentral) chi-squares.

    MS = (E0/df) chi'^2(df, lambda) has cumulants k2 = (E0/df)^2 2(df + 2 lambda) and
    k4 = (E0/df)^4 48(df + 4 lambda), lambda = df q / E0.
    """
    comps = result.components
    scale = np.array([report_scale(c, result.levels, result.nesting) for c in comps])
    theta = np.array([truth[c.name] for c in comps]) / scale
    ems = result.ems
    q = np.array([ems[i, i] * theta[i] if c.kind == "fixed" else 0.0 for i, c in enumerate(comps)])
    e0 = ems @ theta - q
    df = np.array([c.df for c in comps])
    lam = np.where(e0 > 0, df * q / np.where(e0 > 0, e0, 1), 0.0)
    s = e0 / df
    k2 = s**2 * 2 * (df + 2 * lam)
    k4 = s**4 * 48 * (df + 4 * lam)
    b = np.linalg.inv(ems) * scale[:, None]
    return (b**4 @ k4) / (b**2 @ k2) ** 2


@pytest.mark.slow
def test_sizing_design_recovery():
    spec = sizing_preset(systems=6, items=8, judges=4, replicates=3)
    result, draws = _run(spec, n_sim=600, seed=11)
    _check(result, draws, _truth(spec, result.names))


@pytest.mark.slow
def test_tee_design_with_fixed_facets_and_pooled_interactions():
    spec = tee_table8(categories=3, items_per_category=4, variants=3, temperatures=3, judges=3, replicates=2)
    result, draws = _run(spec, n_sim=600, seed=12)
    assert result["temperature"].kind == "fixed" and result["judge"].kind == "fixed"
    assert "category:variant" in result["category:item:variant"].pooled
    _check(result, draws, _truth(spec, result.names))


@pytest.mark.slow
def test_nested_raters_one_observation_per_cell():
    # Brennan's p x (r:t): raters nested in tasks, one score per cell.
    spec = SimulationSpec(
        counts={"p": 8, "t": 3, "r": 4},
        components={"p": 0.5, "t": 0.3, "t:r": 0.6, "p:t": 0.5, "p:t:r": 1.0, "residual": 1.4},
        nest={"r": "t"}, replicates=1, object="p",
    )
    result, draws = _run(spec, n_sim=600, seed=13)
    assert result["residual"].confounded_with == "p:t:r"
    _check(result, draws, _truth(spec, result.names, pooled_top="p:t:r"))


def test_check_detects_a_wrong_truth():
    """The checks are not vacuous: a residual truth off by a factor of two is caught."""
    spec = sizing_preset(systems=5, items=6, judges=3, replicates=2)
    result, draws = _run(spec, n_sim=300, seed=14)
    truth = _truth(spec, result.names)
    truth["residual"] *= 2
    with pytest.raises(AssertionError):
        _check(result, draws, truth)


@pytest.mark.slow
def test_pairwise_design_with_a_fixed_position_facet():
    # Win indicators in both presentation orders: position is a fixed facet (slot A vs slot B,
    # an 8.6-point slot-A advantage as in sizing Table 3), and the slot advantage varies by system.
    spec = SimulationSpec(
        counts={"system": 6, "item": 8, "judge": 3, "position": 2},
        components={"system": 0.03, "item": 0.01, "judge": 0.002, "position": 0.043**2,
                    "system:item": 0.05, "system:judge": 0.002, "system:position": 0.005,
                    "item:judge": 0.004, "system:item:judge": 0.02, "residual": 0.15},
        fixed=("position",), replicates=2, mu=0.5, object="system",
    )
    result, draws = _run(spec, n_sim=600, seed=15)
    assert result["position"].kind == "fixed"
    assert {"system:position", "item:position", "system:item:judge:position"} <= set(result.names)
    _check(result, draws, _truth(spec, result.names))
