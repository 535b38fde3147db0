"""One system's score: the full interval (absolute error sigma2_Delta, Brennan eq. 4.1.9) beside the naive
one that counts item sampling only; checked in closed form and by coverage in seeded simulations."""

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from evalgauge.api import analyze
from evalgauge.cli import main
from evalgauge.components import VarianceComponents
from evalgauge.errors import DesignError
from evalgauge.estimate import estimate_components
from evalgauge.inference import object_interval
from evalgauge.simulate import simulate, sizing_preset


def test_object_interval_is_the_absolute_error_in_closed_form():
    s = sizing_preset()
    vc = VarianceComponents.from_values(s.components, {"system": 42, "item": 30, "judge": 9}, replicates=3,
                                        object="system")
    c, ni, nj, nr = s.components, 30, 9, 3
    delta = ((c["item"] + c["system:item"]) / ni + (c["judge"] + c["system:judge"]) / nj
             + (c["item:judge"] + c["system:item:judge"]) / (ni * nj) + c["residual"] / (ni * nj * nr))
    naive = (c["item"] + c["system:item"]) / ni + (c["item:judge"] + c["system:item:judge"]) / (ni * nj) \
        + c["residual"] / (ni * nj * nr)
    oi = object_interval(vc)
    assert oi.se**2 == pytest.approx(delta, rel=1e-12)
    assert oi.naive_se**2 == pytest.approx(naive, rel=1e-12)
    assert oi.sampling_facet == "item"
    assert math.isinf(oi.df)  # given numbers have no sampling covariance: the normal quantile
    full, naive_hw = oi.half_widths()
    assert full == pytest.approx(1.959964 * oi.se, rel=1e-6)
    assert naive_hw == pytest.approx(1.959964 * oi.naive_se, rel=1e-6)
    with pytest.raises(DesignError, match="sampled facet"):
        object_interval(vc, sampling_facet="system")


@pytest.mark.slow
def test_full_interval_covers_a_systems_score_and_the_naive_one_does_not():
    # every system has the same true score mu (sigma2_s = 0), so a system's mean misses mu by
    # exactly its absolute error: items and judges shared by all systems, and the interactions
    spec = sizing_preset(systems=6, items=80, judges=8, replicates=2)
    spec = replace(spec, components={**spec.components, "system": 0.0})
    rng = np.random.default_rng(20261130)
    reps, covered_full, covered_naive = 400, 0, 0
    for _ in range(reps):
        frame = simulate(spec, seed=rng)
        vc = estimate_components(frame, method="anova")
        full, naive = object_interval(vc).half_widths()
        miss = abs(frame.loc[frame["system"] == frame["system"].iloc[0], "score"].mean() - spec.mu)
        covered_full += miss <= full
        covered_naive += miss <= naive
    mc_se = math.sqrt(0.95 * 0.05 / reps)
    # the naive SE is sqrt(0.0113 / 0.0303) = 0.61 of the full one here: it should cover about 77%
    assert abs(covered_full / reps - 0.95) < 4.5 * mc_se
    assert covered_naive / reps < 0.95 - 4.5 * mc_se - 0.03


@pytest.mark.slow
def test_analyze_reports_each_systems_score(tmp_path):
    frame = simulate(sizing_preset(systems=5, items=20, judges=3, replicates=2), seed=5)
    result = analyze(frame)
    scores = result.object_scores
    assert list(scores.columns) == ["system", "mean", "n", "low", "high", "naive_low", "naive_high"]
    assert scores["mean"].is_monotonic_decreasing
    means = frame.groupby("system")["score"].mean()
    assert np.allclose(scores.set_index("system")["mean"], means[scores["system"]])
    assert (scores["high"] - scores["low"] > scores["naive_high"] - scores["naive_low"]).all()
    payload = result.to_dict()
    assert payload["object_scores"]["interval"]["naive_counts"] == "item"
    assert len(payload["object_scores"]["scores"]) == 5
    path = tmp_path / "j.csv"
    frame.to_csv(path, index=False)
    out = CliRunner().invoke(main, ["analyze", str(path), "--report", str(tmp_path / "r.html")])
    assert out.exit_code == 0, out.output
    assert "One system's score: 95% CI" in out.output
    html = (tmp_path / "r.html").read_text()
    assert "Which system is better" in html and "rank set" in html
    assert out.output.index("leaderboard") < out.output.index("Variance components")  # systems first


def test_item_named_question_id_is_what_the_naive_interval_resamples():
    frame = simulate(sizing_preset(systems=4, items=15, judges=3, replicates=1), seed=2)
    frame = frame.rename(columns={"item": "question_id"})
    result = analyze(pd.DataFrame(frame))
    assert result.theta.sampling_facet == "question_id"
    assert result.object_interval.sampling_facet == "question_id"


@pytest.mark.slow
def test_real_llm_judges_on_triviaqa():
    # Thakur et al. 2024 ("Judging the Judges"): 9 exam-taker models x 400 TriviaQA questions, each answer
    # judged correct or not by 9 LLM judges (provenance in ../shared/data/README.md, section 1)
    from conftest import shared_file

    wide = pd.read_csv(shared_file("judging_the_judges_triviaqa", "triviaqa_judgments_v1.csv"))
    judges = ["Mistral-7B", "Llama-7B", "Llama-13B", "Llama3-8B", "Gemma-2B", "Llama-70B", "Llama3-70B",
              "GPT-4", "JudgeLM"]
    frame = wide.melt(id_vars=["exam_model", "question_id"], value_vars=judges, var_name="judge",
                      value_name="score").rename(columns={"exam_model": "system", "question_id": "item"})
    result = analyze(frame, drop_missing=True)
    vc = result.components
    assert vc.method == "reml" and vc.n_obs == len(frame) - 175  # 135 + 8 x 5 blank judgments (data README)
    scores = result.object_scores.set_index("system")
    observed = frame.dropna().groupby("system")["score"].agg(["mean", "count"])
    # 175 of 32,400 judgments are missing, so the design is incomplete: each system's estimate is the GLS one
    # adjusted for who scored it; the raw mean stays beside it and differs by little here
    raw = result.comparison.systems.set_index("object")["raw_mean"]
    assert np.allclose(raw, observed.loc[raw.index, "mean"])
    assert np.allclose(scores["mean"], observed.loc[scores.index, "mean"], atol=0.005)
    assert (scores["n"] == observed.loc[scores.index, "count"]).all()
    # the judge terms are real here, so the honest interval must be the wider one, by the judge terms exactly
    oi = result.object_interval
    c = {comp.name: comp.variance_truncated for comp in vc.components}
    judge_part = (c["judge"] + c["system:judge"]) / 9
    assert oi.se**2 - oi.naive_se**2 == pytest.approx(judge_part, rel=1e-9)
    assert oi.se_ratio > 1.5
    # a system's per-judge accuracies spread as the model says: sigma2_j + sigma2_sj + item-level terms / 400
    per_judge = frame.dropna().groupby(["system", "judge"])["score"].mean().unstack()
    implied = c["judge"] + c["system:judge"] + (c["item:judge"] + c["residual"]) / 400
    # in a balanced block this is the ANOVA moment identity; with 0.5% of judgments missing REML is within 2%
    assert per_judge.var(axis=1, ddof=1).mean() == pytest.approx(implied, rel=0.02)
