"""Standard errors and parametric-bootstrap intervals of the components."""

import numpy as np
import pandas as pd
import pytest

from evalgauge.estimate import estimate_components
from evalgauge.estimate.anova import sampling_covariance
from evalgauge.simulate import simulate, sizing_preset


@pytest.fixture(scope="module")
def balanced():
    spec = sizing_preset(systems=10, items=12, judges=5, replicates=3)
    return spec, simulate(spec, seed=3)


def test_reml_information_reproduces_the_exact_anova_variance_on_balanced_data(balanced):
    # REML = ANOVA here, and the inverse average information equals the exact normal-theory
    # variance of the ANOVA estimator (independent scaled chi-square mean squares).
    spec, frame = balanced
    anova = estimate_components(frame, spec.design(), method="anova")
    reml = estimate_components(frame, spec.design(), method="reml")
    for a in anova.components:
        assert reml[a.name].variance == pytest.approx(a.variance, rel=1e-6)
        assert reml[a.name].se == pytest.approx(a.se, rel=1e-4), a.name
    assert np.allclose([c.se for c in anova.components], np.sqrt(np.diag(sampling_covariance(anova))))


def test_anova_bootstrap_spread_matches_the_standard_error(balanced):
    spec, frame = balanced
    n = 4000
    result = estimate_components(frame, spec.design(), method="anova", n_boot=n, seed=7)
    assert result.intervals["resamples"] == n and result.intervals["level"] == 0.95
    # Reproduce the draws to compare their spread with the SE; the tolerance on SD/SE comes from
    # the draws' own kurtosis: se(s/sigma) ~ sqrt((kurtosis - 1) / (4 n)).
    from evalgauge.estimate.anova import report_scale
    rng = np.random.default_rng(7)
    comps = result.components
    scale = np.array([report_scale(c, result.levels, result.nesting) for c in comps])
    expected = result.ems @ (np.array([c.variance_truncated for c in comps]) / scale)
    df = np.array([c.df for c in comps])
    draws = np.linalg.solve(result.ems, (expected * rng.chisquare(df, size=(n, df.size)) / df).T).T * scale
    sd = draws.std(axis=0, ddof=1)
    kurt = ((draws - draws.mean(0)) ** 4).mean(0) / draws.var(0) ** 2
    tol = 4.5 * np.sqrt((kurt - 1) / (4 * n))
    se = np.array([c.se for c in comps])
    assert np.all(np.abs(sd / se - 1) < tol), dict(zip(result.names, np.round(sd / se, 3), strict=True))
    lo, hi = np.quantile(draws, [0.025, 0.975], axis=0)
    assert np.allclose(lo, [c.ci_low for c in comps]) and np.allclose(hi, [c.ci_high for c in comps])


def test_reml_bootstrap_intervals(balanced):
    spec, frame = balanced
    gappy = frame.drop(index=np.arange(0, len(frame), 7)).reset_index(drop=True)
    a = estimate_components(gappy, spec.design(), n_boot=60, seed=11)
    b = estimate_components(gappy, spec.design(), n_boot=60, seed=11)
    assert a.method == "reml" and a.intervals["failed"] == 0
    for c in a.components:
        assert c.ci_low <= c.variance_truncated <= c.ci_high or c.variance == 0.0, c.name
        assert c.ci_low == b[c.name].ci_low  # seeded: reproducible
        assert c.se > 0
    # the bootstrap spread and the information-based SE agree in size
    ratio = [(c.ci_high - c.ci_low) / (2 * 1.96 * c.se) for c in a.components]
    assert all(0.5 < r < 2.0 for r in ratio), ratio


def test_boundary_component_has_no_standard_error():
    from evalgauge.simulate import SimulationSpec
    spec = SimulationSpec({"system": 6, "item": 8, "judge": 3},
                          {"system": 0.3, "item": 0.3, "judge": 0.1, "system:item": 0.2, "residual": 1.0},
                          replicates=2, object="system")
    for seed in range(40):
        frame = simulate(spec, seed=seed)
        reml = estimate_components(frame, spec.design(), method="reml")
        if reml["system:judge"].variance == 0.0:
            break
    assert np.isnan(reml["system:judge"].se)
    assert reml["system"].se > 0 and reml.to_dict()["components"][4]["se"] is None


def test_bad_interval_options(balanced):
    spec, frame = balanced
    from evalgauge.errors import DesignError
    with pytest.raises(DesignError, match="level"):
        estimate_components(frame, spec.design(), level=1.5)


def test_theta_hats_interval_stays_inside_the_scale_with_its_method_named(tmp_path):
    """A share near 0 and five judges that disagree (rates 0-30%): the normal interval would reach below 0;
    the analysis gives the logit interval (inside 0-1) and names it, in the terminal and the JSON. A 1-5
    rating near its top (a run's declared scale) is clipped at 5, said as such."""
    import json

    from click.testing import CliRunner

    import evalgauge as eg
    from evalgauge.cli import main
    from evalgauge.inference import bounded_interval, theta_interval

    rng = np.random.default_rng(5)
    rows = []
    for i in range(40):
        for judge, rate in (("j1", 0.0), ("j2", 0.02), ("j3", 0.05), ("j4", 0.1), ("j5", 0.3)):
            for rep in (1, 2):
                rows.append({"item": f"t{i}", "judge": judge, "replicate": rep, "score": float(rng.random() < rate)})
    path = tmp_path / "labels.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    out = CliRunner().invoke(main, ["analyze", str(path), "--json", str(tmp_path / "a.json")])
    assert out.exit_code == 0, out.output
    theta = json.loads((tmp_path / "a.json").read_text())["theta"]
    assert theta["method"].startswith("logit") and theta["scale"] == [0.0, 1.0]
    assert 0.0 <= theta["low"] < theta["estimate"] < theta["high"] <= 1.0
    assert theta["estimate"] - 2 * theta["se"] < 0  # the normal one would have left the scale
    assert "logit (the normal interval left 0-1)" in out.output
    # a rating near the top of its declared scale
    ratings = pd.DataFrame(rows).assign(score=lambda f: 4.6 + f["score"] * 0.4)
    vc = estimate_components(ratings, eg.infer_design(ratings))
    ci = theta_interval(vc, bounds=("scale", 1.0, 5.0))
    assert ci.high <= 5.0 and ci.low >= 1.0
    _, high, how = bounded_interval(np.array([4.9]), np.array([0.2]), np.array([2.0]), ("scale", 1.0, 5.0))
    assert high[0] == 5.0 and "clipped" in how
