"""The simultaneous critical value by Genz-Bretz quasi-Monte Carlo (evalgauge.mvt) against closed
forms and R's mvtnorm."""

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from evalgauge.mvt import max_t_critical

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "mvtnorm" / "critical_values.json").read_text())


def _pairs_correlation(p: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    a = rng.normal(size=(p, p))
    cov = a @ a.T / p + np.eye(p)
    pa, pb = np.triu_indices(p, 1)
    c = np.zeros((len(pa), p))
    c[np.arange(len(pa)), pa] = 1
    c[np.arange(len(pa)), pb] = -1
    v = c @ cov @ c.T
    se = np.sqrt(np.diag(v))
    return v / np.outer(se, se)


def test_independent_statistics_give_the_sidak_value():
    for m, df in ((3, np.inf), (6, np.inf)):
        cv = max_t_critical(np.eye(m), df, 0.95)
        exact = stats.norm.ppf((1 + 0.95 ** (1 / m)) / 2)
        assert abs(cv.value - exact) <= max(cv.error, 1e-9) and cv.relative_error < 1e-3


def test_one_statistic_repeated_is_the_two_sided_quantile():
    assert max_t_critical(np.ones((4, 4)), 7, 0.95).value == pytest.approx(stats.t.ppf(0.975, 7))


@pytest.mark.parametrize("case", [c for c in FIXTURE["cases"] if c["p"] <= 4])  # 8 and 12: bench/bench_mvt.py
def test_all_pairs_match_mvtnorm_within_the_reported_error(case):
    corr = _pairs_correlation(case["p"])
    for df, key in ((np.inf, "normal"), (10.0, "t10")):
        cv = max_t_critical(corr, df, FIXTURE["level"])
        assert cv.relative_error < 1e-3
        # mvtnorm's own value carries a Monte Carlo error of the same order: 0.1% covers both
        assert cv.value == pytest.approx(case[key], rel=1e-3), (case["p"], key, cv)
