"""Comparisons of systems: identities with the D-study, the studentized range, hand-computed rank sets,
Holm, the compact letter display, the JSON contract and the CLI."""

import json
import math

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from scipy import stats

import evalgauge as eg
from evalgauge import dstudy
from evalgauge.cli import main
from evalgauge.compare import compare
from evalgauge.estimate import estimate_components
from evalgauge.inference.multiplicity import holm, letters, rank_sets
from evalgauge.simulate import PRESETS, simulate


@pytest.fixture(scope="module")
def balanced():
    frame = simulate(PRESETS["sizing"](systems=6, items=30, judges=3, replicates=2), seed=5)
    return frame, estimate_components(frame)


def test_pair_variance_is_twice_the_relative_error(balanced):
    frame, vc = balanced
    result = compare(frame, vc, n_boot=500, pair_gstudies="none")
    two_delta = 2 * dstudy.project(vc).sigma2_delta  # sizing eq. 2 applied to one pair
    assert np.allclose(result.pairs["se"] ** 2, two_delta, rtol=1e-10)
    # each system's mean is the raw mean of its judgments
    means = frame.groupby("system")["score"].mean()
    assert np.allclose(result.systems.set_index("object")["mean"], means.loc[result.systems["object"]], rtol=1e-12)


def test_simultaneous_critical_value_is_the_studentized_range(balanced):
    frame, vc = balanced
    result = compare(frame, vc, n_boot=40_000, pair_gstudies="none", seed=1)
    df = float(result.pairs["df"].iloc[0])
    exact = stats.studentized_range.ppf(0.95, 6, df) / math.sqrt(2)  # Tukey: equicorrelated means
    # Monte Carlo s.e. of a 95% quantile from 40,000 draws is well under 1%
    assert result.critical_simultaneous == pytest.approx(exact, rel=0.02)


def test_rank_sets_by_hand():
    # three systems, independent estimates with SE 1 each: a pair difference has SE sqrt(2)
    means = np.array([10.0, 6.5, 6.0])
    cov = np.eye(3)
    z = np.random.default_rng(0).standard_normal((200_000, 3))
    # marginal, system 0: family {(1,0), (2,0)}; |t| = 3.5/sqrt2 = 2.47 and 4/sqrt2 = 2.83; the two-sided
    # max-|t| critical value over two correlated (rho = 1/2) statistics at 95% is about 2.21: both rejected
    lo, hi = rank_sets(means, cov, z, 0.95, simultaneous=False)
    assert (lo[0], hi[0]) == (1, 1)
    # system 1: against 0 (|t| 2.47 > 2.21, rejected: 0 above), against 2 (0.35, kept): ranks 2-3
    assert (lo[1], hi[1]) == (2, 3) and (lo[2], hi[2]) == (2, 3)
    # simultaneous: three pairs, critical value ~2.34 (studentized range q(3, inf)/sqrt2); the stepdown
    # rejects 0-2 (2.83) first, then with two pairs left (~2.21) rejects 0-1 (2.47) as well
    crit3 = stats.studentized_range.ppf(0.95, 3, np.inf) / math.sqrt(2)
    assert 2.47 > crit3 > 2.21
    lo_s, hi_s = rank_sets(means, cov, z, 0.95, simultaneous=True)
    assert list(zip(lo_s, hi_s, strict=True)) == [(1, 1), (2, 3), (2, 3)]
    # closer means: nothing rejected, every rank set is 1-3
    lo_c, hi_c = rank_sets(np.array([1.0, 0.5, 0.0]), cov, z, 0.95, simultaneous=True)
    assert list(lo_c) == [1, 1, 1] and list(hi_c) == [3, 3, 3]


def test_stepdown_refines_the_single_step():
    # pair SE 1; the outer pair (t = 4.6) is rejected by any procedure, the two inner pairs (t = 2.3) fall
    # below the single-step critical value for three pairs (2.34) but above the one for the two pairs left
    # after the first rejection (about 2.21, the two differences share a system: correlation -1/2)
    means = np.array([4.6, 2.3, 0.0])
    cov = np.eye(3) * 0.5
    z = np.random.default_rng(2).standard_normal((400_000, 3)) * math.sqrt(0.5)
    single_step = stats.studentized_range.ppf(0.95, 3, np.inf) / math.sqrt(2)
    assert single_step > 2.3
    lo, hi = rank_sets(means, cov, z, 0.95, simultaneous=True)
    assert list(zip(lo, hi, strict=True)) == [(1, 1), (2, 2), (3, 3)]
    # the single step alone would only have separated the outer pair: [1, 2], [1, 3], [2, 3]


def test_holm():
    p = np.array([0.01, 0.04, 0.03, 0.005])
    # sorted: 0.005*4=0.02, 0.01*3=0.03, 0.03*2=0.06, 0.04*1=0.04 -> monotone 0.06
    assert np.allclose(holm(p), [0.03, 0.06, 0.06, 0.02])


def test_compact_letter_display():
    order = ["A", "B", "C", "D"]
    # A differs from C and D; B from D
    cld = letters(order, {frozenset(("A", "C")), frozenset(("A", "D")), frozenset(("B", "D"))})
    assert cld == {"A": "a", "B": "ab", "C": "bc", "D": "c"}
    assert letters(order, set()) == dict.fromkeys(order, "a")


def test_unbalanced_pairs_count_their_own_cells():
    frame = simulate(PRESETS["sizing"](systems=4, items=40, judges=2, replicates=1), seed=8)
    # system s1 scored on half the items: its pairs are less precise than the others
    frame = frame[~((frame["system"] == "s1") & (frame["item"].str[1:].astype(int) % 2 == 0))]
    vc = estimate_components(frame)
    result = compare(frame, vc, n_boot=500, pair_gstudies="none")
    pairs = result.pairs.set_index(["a", "b"])
    with_s1 = result.pairs[(result.pairs["a"] == "s1") | (result.pairs["b"] == "s1")]["se"]
    without = result.pairs[(result.pairs["a"] != "s1") & (result.pairs["b"] != "s1")]["se"]
    assert with_s1.min() > without.max() and len(pairs) == 6
    assert any("each pair's interval counts its own cells" in n for n in result.notes)


def test_one_judge_is_said_and_can_be_assumed(tmp_path):
    frame = simulate(PRESETS["sizing"](systems=4, items=30, judges=1, replicates=2), seed=4)
    fitted = eg.fit(frame)
    plain = fitted.compare(n_boot=500)
    assert any("one judge only" in n and "`assume` system:judge=VALUE" in n for n in plain.extra["unmeasured"])
    more = fitted.compare(n_boot=500, assume={"system:judge": 0.05})
    se0, se1 = plain.pairs["se"].to_numpy(), more.pairs["se"].to_numpy()
    assert np.allclose(se1**2, se0**2 + 2 * 0.05)  # the assumed variance enters each difference twice
    assert not any("one judge" in n for n in more.extra["unmeasured"])  # what is stated is no longer unmeasured
    # the command line names its option
    frame.to_csv(tmp_path / "one.csv", index=False)
    out = CliRunner().invoke(main, ["compare", str(tmp_path / "one.csv"), "--bootstrap", "500", "--json", "-"])
    assert out.exit_code == 0, out.output
    assert any("--assume system:judge=VALUE" in n for n in json.loads(out.stdout)["unmeasured"])


def test_closed_form_pair_gstudy_equals_the_fitted_one():
    from evalgauge.compare.pair_gstudy import block_cube, pair_gstudy, pair_gstudy_block

    frame = simulate(PRESETS["sizing"](systems=3, items=25, judges=4, replicates=2), seed=11)
    frame = frame.assign(__y=frame["score"])
    systems = ["s1", "s2", "s3"]
    cube = block_cube(frame, "system", systems, ["system", "item", "judge", "replicate"][:3])
    fast = pair_gstudy_block(cube, 0, 1, 0.95)
    slow = pair_gstudy(frame, "system", "s1", "s2", ["item", "judge"], 0.95)
    assert fast["pair_se"] == pytest.approx(slow["pair_se"], rel=1e-9)
    assert fast["pair_low"] == pytest.approx(slow["pair_low"], rel=1e-6)


def test_pairwise_judgments_get_the_same_comparison(tmp_path):
    rng = np.random.default_rng(0)
    names, strength = ["a", "b", "c", "d"], np.array([1.2, 0.6, 0.0, -0.8])
    rows = []
    for item in range(60):
        for judge in ("j1", "j2"):
            for x in range(4):
                for y in range(x + 1, 4):
                    for first, second in ((x, y), (y, x)):
                        p = 1 / (1 + np.exp(-(strength[first] - strength[second])))
                        rows.append({"model_a": names[first], "model_b": names[second], "item": f"q{item}",
                                     "judge": judge, "winner": "model_a" if rng.random() < p else "model_b"})
    path = tmp_path / "battles.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    out = CliRunner().invoke(main, ["pairwise", str(path), "--bootstrap", "200", "--json", "-"])
    assert out.exit_code == 0, out.output
    comp = json.loads(out.stdout)["comparison"]
    assert [s["system"] for s in comp["systems"]] == names  # the true order, well separated
    assert all(p["low_simultaneous"] <= p["low"] <= p["diff"] for p in comp["pairs"]) and len(comp["pairs"]) == 6
    assert comp["systems"][0]["rank_low"] == 1


def test_incomplete_designs_adjust_for_who_scored():
    # s1 is scored only by a lenient judge, s2 only by a harsh one, s3 by both; the systems are equal
    rng = np.random.default_rng(4)
    lenient = {"j1": 1.0, "j2": -1.0, "j3": 0.0}
    rows = []
    for item in range(40):
        ie = rng.normal(0, 0.3)
        for system, judges in (("s1", ["j1", "j3"]), ("s2", ["j2", "j3"]), ("s3", ["j1", "j2", "j3"])):
            for judge in judges:
                for rep in (1, 2):
                    rows.append({"system": system, "item": f"q{item}", "judge": judge, "replicate": rep,
                                 "score": 3 + ie + lenient[judge] + rng.normal(0, 0.3)})
    frame = pd.DataFrame(rows)
    from evalgauge.design import infer_design

    design = infer_design(frame)
    vc = estimate_components(frame, design)
    result = compare(frame, vc, n_boot=500, pair_gstudies="none", design=design)
    sysf = result.systems.set_index("object")
    raw_gap = sysf.loc["s1", "raw_mean"] - sysf.loc["s2", "raw_mean"]
    adj_gap = sysf.loc["s1", "mean"] - sysf.loc["s2", "mean"]
    assert raw_gap > 0.8 and abs(adj_gap) < 0.25  # the judges' leniency is taken out
    pair = result.pairs[((result.pairs["a"] == "s1") & (result.pairs["b"] == "s2"))
                        | ((result.pairs["a"] == "s2") & (result.pairs["b"] == "s1"))].iloc[0]
    assert pair["low"] < 0 < pair["high"]
    assert "GLS" in result.method and any("adjusted for who scored" in n for n in result.notes)


def test_the_report_says_first_what_one_judge_cannot_measure(tmp_path):
    from evalgauge.api import analyze
    from evalgauge.report.html import render

    frame = simulate(PRESETS["sizing"](systems=4, items=20, judges=1, replicates=2), seed=6)
    html = render(analyze(frame))
    which = html.index("Which system is better")
    assert "Not measured:</b> one judge only" in html and html.index("Not measured") > which
    assert html.index("Not measured") < html.index("Variance components")


def test_draws_with_almost_no_degrees_of_freedom_stay_finite():
    """A Satterthwaite df far below 1 (a fuzzed run database gave one) makes some chi-square draws exactly
    0; the multivariate-t draws must stay finite so the simultaneous critical value is huge, not NaN."""
    from evalgauge.inference.multiplicity import draws, max_t_quantile

    rng = np.random.default_rng(1)
    z = draws(np.eye(3), 1e-3, 2000, rng)
    assert np.isfinite(z).all()
    crit = max_t_quantile(z, np.array([[0, 1], [0, 2], [1, 2]]), np.full(3, np.sqrt(2.0)), 0.95)
    assert np.isfinite(crit) and crit > 1e6


def test_the_item_bootstrap_draws_in_pieces_the_same_resamples(monkeypatch):
    """500,000 items x 2,000 resamples once asked for 7.45 GiB of weights at once: the weights are drawn in
    pieces, and the draws are those of one piece (the generator's stream is the same)."""
    import importlib

    pg = importlib.import_module("evalgauge.compare.pair_gstudy")  # the package exports a function of that name

    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"system": np.repeat(["a", "b", "c"], 300), "item": np.tile([f"i{k}" for k in range(300)], 3),
                          "__y": rng.normal(size=900)})
    whole = pg.item_bootstrap(frame, "system", "item", ["a", "b", "c"], 50, np.random.default_rng(1))
    monkeypatch.setattr(pg, "BOOTSTRAP_CELLS", 300 * 7)  # pieces of 7 resamples
    pieces = pg.item_bootstrap(frame, "system", "item", ["a", "b", "c"], 50, np.random.default_rng(1))
    np.testing.assert_allclose(whole, pieces, rtol=1e-13, atol=0)  # the same weights; BLAS sums in its order
