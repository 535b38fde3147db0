"""The simultaneous critical value by Genz-Bretz quasi-Monte Carlo (evalgauge.inference.mvt) against closed
forms and R's mvtnorm."""

import json

import numpy as np
import pytest
from scipy import stats

from conftest import FIXTURES
from evalgauge.inference.mvt import max_t_critical, simultaneous_critical

FIXTURE = json.loads((FIXTURES / "mvtnorm" / "critical_values.json").read_text())


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


def _pairs_cov(p: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    a = rng.normal(size=(p, p))
    return a @ a.T / p + np.eye(p), np.column_stack(np.triu_indices(p, 1))


@pytest.mark.parametrize("case", FIXTURE["cases"])
def test_the_critical_value_compare_uses_matches_mvtnorm_to_0_1_percent(case):
    """simultaneous_critical: the lattice rule for few pairs, Monte Carlo beyond; either way within 0.1% of
    mvtnorm's qmvnorm/qmvt at 4, 8 and 12 systems, with its reported error below 0.1%."""
    cov, pairs = _pairs_cov(case["p"])
    cv = simultaneous_critical(cov, pairs, np.inf, FIXTURE["level"])
    assert cv.method == ("Genz-Bretz" if len(pairs) <= 15 else "Monte Carlo")
    assert cv.relative_error < 1e-3 and cv.value == pytest.approx(case["normal"], rel=1e-3)


@pytest.mark.slow
def test_the_monte_carlo_error_covers_its_distance_from_the_exact_value():
    """Independent statistics: P(max |Z_k| <= c) = (2 Phi(c) - 1)^m, so the Sidak value is exact; 3.5
    standard errors of the Monte Carlo quantile cover it (and the reported error is below 0.1%)."""
    cov = np.eye(2 * 20)
    pairs = np.column_stack([np.arange(0, 40, 2), np.arange(1, 40, 2)])  # 20 disjoint pairs: independent
    cv = simultaneous_critical(cov, pairs, np.inf, 0.95)
    exact = stats.norm.ppf((1 + 0.95 ** (1 / 20)) / 2)
    assert cv.method == "Monte Carlo" and cv.relative_error < 1e-3
    assert abs(cv.value - exact) <= cv.error


@pytest.mark.parametrize("k,df", [(4, np.inf), (5, 12.0), (12, np.inf), (12, 30.0)])
def test_exchangeable_means_take_the_studentized_range(k, df):
    """A complete balanced board's means have one variance and one covariance: max |T| over every pair is the
    studentized range / sqrt(2) (Tukey's HSD), exact where the lattice or Monte Carlo estimates it. The
    general path's value agrees within its own reported error."""
    cov = np.full((k, k), 0.3) + 0.7 * np.eye(k)
    pairs = np.column_stack(np.triu_indices(k, 1))
    exact = simultaneous_critical(cov, pairs, df, 0.95)
    assert exact.method == "studentized range" and exact.error == 0.0
    assert exact.value == pytest.approx(stats.studentized_range.ppf(0.95, k, df) / np.sqrt(2), rel=1e-12)
    # the general path on the same law (a covariance perturbed by 1e-6: no longer exactly exchangeable)
    jitter = cov + np.diag(np.linspace(0, 1e-6, k))
    general = simultaneous_critical(jitter, pairs, df, 0.95)
    assert general.method != "studentized range"
    assert abs(general.value - exact.value) <= general.error + 2e-3 * exact.value


def test_a_difference_without_variance_bounds_nothing():
    """Systems scored identically: their differences have no variance, so they leave the family (the lattice
    rule's Cholesky of their correlation had no column: a traceback from `analyze`)."""
    same = np.full((3, 3), 0.002)
    out = simultaneous_critical(same, np.array([[0, 1], [0, 2], [1, 2]]), 10.0, 0.95)
    assert out.value == 0.0 and out.method == "no difference varies"
    # systems 0 and 1 identical, 2 apart: the two pairs that vary are one difference, so the family's value is
    # that difference's own two-sided t quantile
    cov = np.array([[0.002, 0.002, 0.0], [0.002, 0.002, 0.0], [0.0, 0.0, 0.003]])
    both = simultaneous_critical(cov, np.array([[0, 1], [0, 2], [1, 2]]), 10.0, 0.95)
    assert both.value == pytest.approx(stats.t.ppf(0.975, 10), rel=1e-3)


def test_analyze_on_systems_scored_identically_says_their_pairs_are_not_separated(tmp_path):
    from click.testing import CliRunner

    from evalgauge.cli import main

    path = tmp_path / "same.csv"
    rows = ["system,item,judge,score"] + [f"{s},i{i},j{j},{(i * j + i) % 2}" for s in "abc" for i in range(20)
                                          for j in range(3)]
    path.write_text("\n".join(rows) + "\n")
    out = CliRunner().invoke(main, ["analyze", str(path), "--json", str(tmp_path / "a.json")])
    assert out.exit_code == 0, out.output
    pairs = json.loads((tmp_path / "a.json").read_text())["comparison"]["pairs"]
    assert pairs and all(p["diff"] == 0 and p["p_holm"] == 1 for p in pairs)
    assert "their scores do not differ in these data" in out.output and "nan" not in out.output
