"""report/studies.py: the Monte Carlo studies' terminal renderers read the studies' typed results (never their JSON),
and each result's JSON is the command's, key for key."""

import json

import pandas as pd
import pytest
from rich.console import Console

from evalgauge.report.studies import (
    print_ambiguity,
    print_intervention_accuracy,
    print_projection_bias,
    print_robustness,
    print_scoring_study,
)
from evalgauge.robustness import RobustnessStudy, robustness_study
from evalgauge.scoring import ScoringStudy
from evalgauge.simulate.montecarlo import AmbiguityStudy, InterventionAccuracy, ProjectionBias


def _text(render, result, *args) -> str:
    console = Console(record=True, width=200, markup=False)
    render(result, console, *args)
    return console.export_text()


@pytest.fixture()
def no_json(monkeypatch):
    """A result whose JSON cannot be made: a renderer that goes through it fails."""
    def refuse(self):
        raise AssertionError("a renderer read the JSON payload")

    for kind in (ProjectionBias, InterventionAccuracy, AmbiguityStudy, ScoringStudy, RobustnessStudy):
        monkeypatch.setattr(kind, "to_dict", refuse)


def test_projection_bias_renders_its_fields_and_its_json_is_the_commands():
    result = ProjectionBias("heavy-tails", 4, {"item": 20, "variant": 5}, 0.015953, 0.017503, 0.0971, 0.342)
    assert list(json.loads(result.to_json())) == ["scenario", "reps", "target", "true_var_abs", "mean_projected",
                                                  "relative_bias", "mc_se"]
    text = _text(print_projection_bias, result)
    assert text.startswith("heavy-tails: projected Var(theta-hat) at {'item': 20, 'variant': 5} is 0.017503")
    assert "relative bias +9.7% (Monte Carlo s.e. 34.2%, 4 pilots)" in text


def test_the_renderers_never_read_the_json(no_json):
    bias = ProjectionBias("baseline", 3, {"item": 60}, 1.0, 1.1, 0.1, 0.05)
    assert "+10.0%" in _text(print_projection_bias, bias)
    table = pd.DataFrame({"intervention": ["+2 variants", "judge x2"], "true_pct": [-30.0, -12.5],
                          "mean_projected_pct": [-28.0, float("nan")]})
    accuracy = InterventionAccuracy(10, True, "+2 variants", 0.9, table, pilot_items=30)
    text = _text(print_intervention_accuracy, accuracy)
    assert "10 pilots of 30 items" in text and "-12.5" in text and "in 90.0% of 10 pilots" in text
    scoring = ScoringStudy(pd.DataFrame({"kappa": [1.0, 0.5], "tau_likert": [0.7, 0.6], "tau_binary": [0.5, 0.5],
                                         "tau_pairwise": [0.6, 0.65]}), ("kappa",), 12, 3, 6, 4)
    text = _text(print_scoring_study, scoring)
    assert "(12 items, 6 calls" in text and "0.65" in text


def test_intervention_accuracy_json_and_frame():
    table = pd.DataFrame({"intervention": ["+2 variants"], "true_pct": [-30.0], "mean_projected_pct": [-28.0]})
    result = InterventionAccuracy(10, False, "+2 variants", 1.0, table)
    payload = json.loads(result.to_json())
    assert list(payload) == ["reps", "fixed_levels", "true_top", "top1_accuracy", "interventions"]
    assert payload["interventions"] == [{"intervention": "+2 variants", "true_pct": -30.0, "mean_projected_pct": -28.0}]
    assert result.to_frame().equals(table)


def test_the_ambiguity_table_shows_the_papers_figures_only_where_it_has_them():
    base = {"reps": 3, "coverage": 0.95, "coverage_mc_se": 0.1, "coverage_wald": 0.9, "max_abs_rel_bias": 0.05,
            "worst_component": "category:item", "max_bias_mc_se": 1.2, "residual_rel_bias": 0.0,
            "spearman_rho": 0.99}
    rows = pd.DataFrame([{**base, "gamma": 0.0, "paper_coverage": 90.5, "paper_max_abs_rel_bias": 8.0,
                          "paper_rho": 0.98},
                         {**base, "gamma": 1.5, "paper_coverage": None, "paper_max_abs_rel_bias": None,
                          "paper_rho": None}])
    result = AmbiguityStudy(3, rows)
    assert list(json.loads(result.to_json())) == ["reps", "rows"]
    text = _text(print_ambiguity, result)
    assert "90.0% [90.5]" in text and "0.99 [0.98]" in text and "3 studies per gamma" in text
    line = next(s for s in text.splitlines() if s.lstrip("│ ").startswith("1.5"))
    assert "[" not in line and "nan" not in line  # no paper figure for a gamma the paper did not run
    assert "1.2 Monte Carlo standard errors" in text


def test_the_robustness_study_is_typed_and_its_json_the_commands():
    result = robustness_study(["knife-edge", "strata"], reps=2, seed=0)
    assert isinstance(result.studies["knife-edge"], pd.DataFrame) and isinstance(result.studies["strata"], dict)
    payload = json.loads(result.to_json())
    assert list(payload) == ["reps", "seed", "design", "paper", "studies"]  # no convergence design without it
    assert payload["studies"]["knife-edge"] == result.studies["knife-edge"].to_dict(orient="records")
    frame = result.to_frame()
    assert set(frame["study"]) == {"knife-edge", "strata"}
    assert len(frame) == len(result.studies["knife-edge"]) + len(result.studies["strata"]["strata"])


def test_the_robustness_renderer_prints_each_study_run_from_the_typed_result(no_json):
    result = robustness_study(["three-way", "strata", "prompts", "knife-edge", "transfer"], reps=2, seed=1)
    text = _text(print_robustness, result)
    for title in ("A 3-way item x variant x temperature outside the model", "A residual variance per temperature",
                  "sigma2_phi by the number of prompt variants", '"+2 variants" or "+5 replicates"',
                  "Components of one model profile used for another's D-study"):
        assert title in text, title
    assert f"TEE E.1 on {result.design}; 2 studies per condition" in text
    assert "REML by the number of observations" not in text  # the convergence study was not run
    only = RobustnessStudy(2, 1, result.design, result.paper, {"knife-edge": result.studies["knife-edge"]})
    assert "sigma2_phi" not in _text(print_robustness, only)
