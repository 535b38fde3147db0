"""TEE E.1's robustness studies (evalgauge.robustness): the draws, the fits and what each study measures,
checked against closed forms and against Monte Carlo error derived from the estimators' sampling variance."""

import math

import numpy as np
import pandas as pd
import pytest

from evalgauge import robustness as rb
from evalgauge.design import code_data
from evalgauge.estimate.anova import anova_from_coded
from evalgauge.simulate.montecarlo import TABLE8
from evalgauge.vocabulary import RESIDUAL


def _as_frame(y: np.ndarray) -> pd.DataFrame:
    """The dense factorial as the long table a user would bring (items labelled within their category)."""
    grid = np.indices(y.shape).reshape(y.ndim, -1)
    names = list(rb.E1_COUNTS)
    frame = pd.DataFrame({n: [f"{n[0]}{k}" for k in grid[i]] for i, n in enumerate(names)})
    frame["item"] = frame["category"] + "-" + frame["item"]
    frame["replicate"] = grid[-1] + 1
    frame["score"] = y.ravel()
    return frame


def test_the_dense_fit_is_the_estimator_on_the_long_table():
    y = rb.draw(TABLE8, np.random.default_rng(4))
    design = rb.e1_design()
    dense = rb.fit(y, design)
    long = anova_from_coded(code_data(_as_frame(y), design))
    assert {c.name for c in dense.components} == {c.name for c in long.components}
    for c in long.components:
        assert dense[c.name].variance == pytest.approx(c.variance, rel=1e-9, abs=1e-12)


def test_the_knife_edge_components_give_the_asked_ratio_of_true_gains():
    for ratio in (0.75, 1.0, 1.5, 4.0):
        pct = rb._pct_changes(rb.truth(rb.knife_edge_components(ratio)))
        assert pct[rb.KNIFE_PROMPTS] / pct[rb.KNIFE_CALLS] == pytest.approx(ratio, rel=1e-9)
    with pytest.raises(ValueError, match="2/3"):
        rb.knife_edge_components(0.6)


def test_one_fit_per_temperature_recovers_each_residual_and_the_pooled_fit_their_average():
    out = rb.heteroscedastic_strata(reps=100, seed=2)
    # each residual's estimate has 2,400 df: relative s.d. sqrt(2/2400) per study; 4 Monte Carlo s.e. allowed
    for stratum in out["strata"]:
        assert stratum["mc_se"] == pytest.approx(math.sqrt(2 / 2400) / 10, rel=0.25)
        assert abs(stratum["rel_bias"]) <= 4 * stratum["mc_se"]
    assert abs(out["pooled_rel_to_average"]) <= 4 * out["pooled_mc_se"]


def test_an_omitted_three_way_pools_into_the_two_way_terms_that_hold_it():
    rows = rb.three_way_sweep(fractions=(0.0, 1.0), reps=60, seed=1).set_index("fraction")
    assert rows.loc[0.0, "cell_term_mean"] == pytest.approx(0.0, abs=3e-4)
    assert rows.loc[1.0, "worst_component"] == "category:item:variant"
    # E[MS item x variant] holds the 3-way at M R against H M R for its own variance (1/3 of 0.02), less what
    # the pooled cell term takes: the bias lies between half of that and all of it
    bias = rows.loc[1.0, "max_abs_rel_bias"] * TABLE8["category:item:variant"]
    assert 0.5 * 0.02 / 3 < bias < 0.02 / 3
    assert rows.loc[1.0, "cell_term_mean"] > 0.005
    assert abs(rows.loc[1.0, "residual_rel_bias"]) < 0.01  # the calls' noise: s.d. 1.7% per study (7,200 df)
    assert (rows["kendall_tau"] > 0.75).all()


def test_sigma2_phi_is_unbiased_at_every_v_and_truncation_lifts_it():
    rows = rb.prompt_count_sweep(variants=(2, 5), sigma2_phi=(0.0, 0.1), reps=150, seed=3)
    scored = rows[rows["sigma2_phi"] > 0]
    assert (abs(scored["rel_bias"]) <= 4 * scored["mc_se"]).all()
    assert (rows["mean_truncated"] >= rows["mean"]).all()
    zero = rows[rows["sigma2_phi"] == 0]
    assert zero["rel_bias"].isna().all() and (zero["share_at_zero"] > 0.3).all()


def test_profile_transfer_errs_by_the_noise_ratio():
    rows = rb.profile_transfer(cheap_noise=2.0, reps=60, seed=5).set_index("direction")
    # moved components are off by 1 - 1/k and k - 1 in expectation; estimation noise only adds (Jensen)
    assert 0.45 < rows.loc["frontier -> cheaper", "mean_rel_error"] < 0.65
    assert 0.9 < rows.loc["cheaper -> frontier", "mean_rel_error"] < 1.25
    assert set(rows["true_top_source"]) == {"temperature x2"}


def test_the_residual_is_left_alone_by_the_knife_edge_prompt_terms():
    comps = rb.knife_edge_components(1.0)
    assert {k: v for k, v in comps.items() if k != RESIDUAL} == {k: v for k, v in TABLE8.items() if k != RESIDUAL}


def test_reml_components_are_anova_inside_and_the_reml_fit_at_the_boundary():
    counts = rb.convergence_counts(10)
    design = rb.e1_design(counts)
    seen = set()
    for seed in range(6):
        y = rb.draw(TABLE8, np.random.default_rng(seed), counts, replicates=2)
        anova, reml = rb.fit(y, design), rb.reml_components(y, design, counts)
        negative = min(c.variance for c in anova.components) < 0
        seen.add(negative)
        if not negative:
            assert reml is anova or all(reml[c.name].variance == c.variance for c in anova.components)
            continue
        assert min(c.variance for c in reml.components) >= 0
        # the REML fit of the long table, not the ANOVA estimates truncated: the positive terms move too
        assert any(abs(reml[c.name].variance - c.variance) > 1e-6 for c in anova.components if c.variance > 0)
    assert seen == {True, False}  # both paths taken on these seeds


def test_the_long_frame_is_the_dense_factorial():
    counts = rb.convergence_counts(20)
    y = rb.draw(TABLE8, np.random.default_rng(2), counts, replicates=2)
    design = rb.e1_design(counts)
    long = anova_from_coded(code_data(rb._long_frame(y, counts), design))
    for c in long.components:
        assert rb.fit(y, design)[c.name].variance == pytest.approx(c.variance, rel=1e-9, abs=1e-12)
    with pytest.raises(ValueError, match="multiple of 5"):
        rb.convergence_counts(12)
    with pytest.raises(ValueError, match="two items a category"):
        rb.convergence_counts(5)


def test_reml_convergence_recovers_the_many_level_terms_and_their_rmse_falls():
    rows = rb.reml_convergence(items=(10, 50), reps=80, seed=3)
    assert set(rows["observations"]) == {540, 2700} and len(rows) == 2 * len(TABLE8)
    big = rows[rows["items"] == 50].set_index("component")
    # the item x facet terms have 90 degrees of freedom at 50 items and true values far from zero: REML's
    # boundary barely touches them and their bias is Monte Carlo noise (3 s.e.). The residual is not among them:
    # when the cell term (truth 0) is held at zero its mean square pools into the residual, biased down.
    for name in ("category:item:variant", "category:item:temperature", "category:item:judge"):
        assert abs(big.loc[name, "rel_bias"]) <= 3 * big.loc[name, "mc_se"], name
    assert big.loc[RESIDUAL, "rel_bias"] <= 3 * big.loc[RESIDUAL, "mc_se"]
    small = rows[rows["items"] == 10].set_index("component")
    for name in ("category:item", "category:item:variant", "category:item:judge", RESIDUAL):
        assert big.loc[name, "rel_rmse"] < small.loc[name, "rel_rmse"], name
    assert (rows["share_at_zero"].between(0, 1)).all()
