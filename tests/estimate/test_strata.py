"""TEE C.7: per-stratum fits recover temperature-specific residual variance."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from evalgauge.cli import main
from evalgauge.errors import DesignError
from evalgauge.estimate.strata import estimate_by_stratum
from evalgauge.simulate import SimulationSpec, simulate

# TEE E.1: sigma2_epsilon,h = 0.005, 0.04, 0.08 at T = 0, 0.7, 1.0
RESIDUAL = {"t1": 0.005, "t2": 0.04, "t3": 0.08}


@pytest.fixture(scope="module")
def heteroscedastic():
    spec = SimulationSpec({"item": 60, "variant": 4, "temperature": 3, "judge": 3},
                          {"item": 0.04, "variant": 0.01, "temperature": 0.015, "judge": 0.015,
                           "item:variant": 0.008, "item:judge": 0.02},
                          fixed=("temperature", "judge"), replicates=4, object="item")
    frame = simulate(spec, seed=31)
    rng = np.random.default_rng(32)
    sd = frame["temperature"].astype(str).map({k: np.sqrt(v) for k, v in RESIDUAL.items()}).to_numpy(float)
    frame["score"] = frame["score"] + rng.normal(0.0, 1.0, len(frame)) * sd
    return spec, frame


def test_per_stratum_residuals_recovered(heteroscedastic):
    spec, frame = heteroscedastic
    result = estimate_by_stratum(frame, "temperature", spec.design())
    for level, truth in RESIDUAL.items():
        fit = result.fits[level]
        est = fit["residual"]
        # within 4.5 standard errors of the truth (SE from the fit's own information)
        assert abs(est.variance - truth) < 4.5 * est.se, (level, est.variance, est.se)
        assert fit.method == "anova"  # each stratum is a complete balanced block
    # the pooled homoscedastic fit averages them (TEE E.1)
    assert result.pooled["residual"].variance == pytest.approx(np.mean(list(RESIDUAL.values())), rel=0.05)
    assert result.spread("residual") > 10
    assert any("merge into the same terms" in n for n in result.notes)
    assert set(result.to_frame()["temperature"]) == {"(pooled)", "t1", "t2", "t3"}


def test_stratified_formula_route_and_unbalanced(heteroscedastic):
    _spec, frame = heteroscedastic
    gappy = frame.drop(index=np.arange(0, len(frame), 9)).reset_index(drop=True)
    result = estimate_by_stratum(gappy, "temperature", formula="score ~ temperature + judge + (1|item) + "
                                 "(1|variant) + (1|item:variant) + (1|item:judge) + (1|item:temperature)")
    assert all(fit.method == "reml" for fit in result.fits.values())
    for level, truth in RESIDUAL.items():
        est = result.fits[level]["residual"]
        assert abs(est.variance - truth) < 4.5 * est.se


def test_stratum_errors(heteroscedastic):
    spec, frame = heteroscedastic
    with pytest.raises(DesignError, match="one level"):
        estimate_by_stratum(frame[frame["temperature"] == "t1"], "temperature", spec.design())


def test_cli_by(heteroscedastic, tmp_path):
    _spec, frame = heteroscedastic
    path = tmp_path / "h.csv"
    frame.to_csv(path, index=False)
    out = CliRunner().invoke(main, ["components", str(path), "--by", "temperature", "--fixed", "temperature,judge"])
    assert out.exit_code == 0 and "temperature = t3" in out.output and "Residual spread" in out.output
    js = CliRunner().invoke(main, ["components", str(path), "--by", "temperature", "--json", "-"])
    payload = json.loads(js.stdout)
    assert set(payload["strata"]) == {"t1", "t2", "t3"} and payload["stratum"] == "temperature"
