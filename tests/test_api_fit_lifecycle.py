"""The fitted object remembers its model: its formula and method reach every verb, a fit that did not converge
answers no question, and the D-study's domain checks hold for Python callers."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

import evalgauge as eg
from conftest import FIXTURES
from evalgauge.errors import ConvergenceError, DesignError

DATA = FIXTURES / "lmertest" / "incomplete.csv"
FORMULA = "score ~ 1 + (1 | system) + (1 | item) + (1 | judge)"


def test_a_formula_fit_reports_its_formula(tmp_path):
    fit = eg.fit(pd.read_csv(DATA), formula=FORMULA)
    assert fit.formula == FORMULA and fit.spec.formula == FORMULA
    html = fit.report(tmp_path / "r.html").read_text()
    assert FORMULA.replace(" ", "") in html.replace(" ", "")
    assert "system:judge" not in html.split("Variance components")[1].split("</table>")[0]  # not the default model


@pytest.mark.slow
def test_a_reml_fit_is_reported_as_reml(tmp_path):
    frame = pd.read_csv(FIXTURES / "lmertest" / "complete.csv")  # balanced: auto would pick ANOVA
    fit = eg.fit(frame, object="system", method="reml")
    assert fit.method == "reml" and fit.components.method == "reml"
    html = fit.report(tmp_path / "r.html").read_text()
    assert " · reml · " in html
    assert eg.fit(frame, object="system").components.method == "anova"


def test_verbs_refuse_a_fit_that_did_not_converge():
    fit = eg.fit(pd.read_csv(DATA), object="system")
    stalled = replace(fit.components, reml=replace(fit.components.reml, converged=False,
                                                   message="L-BFGS-B: ABNORMAL"))
    broken = replace(fit, components=stalled)
    assert fit.converged and not broken.converged
    for verb in (broken.compare, broken.interval, broken.ceiling, lambda: broken.plan(item=10)):
        with pytest.raises(ConvergenceError, match=r"did not converge \(L-BFGS-B: ABNORMAL\)"):
            verb()
    assert isinstance(ConvergenceError("x"), DesignError)  # the command line maps it to exit 2


@pytest.mark.slow
def test_the_analysis_derives_from_the_fit_without_reading_or_fitting_again(monkeypatch, tmp_path):
    import evalgauge.estimate as estimate
    import evalgauge.io as io
    from evalgauge.api import analyze

    frame = pd.read_csv(DATA)
    fit = eg.fit(frame, object="system")

    def refuse(*_args, **_kwargs):
        raise AssertionError("the analysis of a fit read its input again")

    real_fit = estimate.estimate_components

    def pair_fits_only(data, *args, **kwargs):  # each pair's own G-study of its differences is another model
        assert len(getattr(data, "frame", data)) < len(frame) / 2, "the analysis of a fit fitted it again"
        return real_fit(data, *args, **kwargs)

    monkeypatch.setattr(estimate, "estimate_components", pair_fits_only)
    monkeypatch.setattr(io, "read_input", refuse)
    derived = fit.analysis(n_boot_compare=200)
    fit.report(tmp_path / "r.html")
    monkeypatch.undo()
    # the same numbers as the path's read-fit-derive (evalgauge analyze)
    edge = analyze(frame, fit.design, n_boot_compare=200)
    assert derived.components.values.tolist() == edge.components.values.tolist()
    assert derived.theta.to_dict() == edge.theta.to_dict()
    pd.testing.assert_frame_equal(derived.comparison.pairs, edge.comparison.pairs)
    with pytest.raises(ConvergenceError):
        replace(fit, components=replace(fit.components, reml=replace(fit.components.reml, converged=False))).analysis()


def test_refit_and_update_keep_what_was_not_changed():
    frame = pd.read_csv(DATA)
    fit = eg.fit(frame, formula=FORMULA)
    half = fit.refit(frame[frame["replicate"] == 1])
    assert half.formula == FORMULA and half.components.n_obs == (frame["replicate"] == 1).sum()
    richer = fit.update(formula=FORMULA + " + (1 | system:judge)")
    assert "system:judge" in richer.components.names and richer.components.n_obs == fit.components.n_obs
    assert fit.update(method="reml").formula == FORMULA
    with pytest.raises(DesignError, match="not both"):
        fit.update(formula=FORMULA, design=eg.fit(frame, object="system").design)


def test_plan_refuses_a_negative_price_or_budget_in_python():
    vc = eg.fit(pd.read_csv(DATA), object="system").components
    with pytest.raises(DesignError, match="non-negative number of USD"):
        eg.plan(vc, prices={"*": -0.01}, budget=5)
    with pytest.raises(DesignError, match="not a positive number"):
        eg.plan(vc, prices={"*": 0.01}, budget=-5)


def test_a_stationary_fit_is_converged_whatever_the_line_search_said(monkeypatch):
    """L-BFGS-B's line search can end 'ABNORMAL' at the optimum (nothing lower to find in floating point): the
    fit is at an optimum when a Newton step would gain less than STATIONARY_GAIN, and is reported converged."""
    from types import SimpleNamespace

    from evalgauge.estimate import optimise as opt

    frame = pd.read_csv(DATA)
    reference = eg.fit(frame, object="system", method="reml").summary
    real_newton = opt._ai_newton

    def newton_that_gives_up(*args, **kwargs):  # reaches the optimum, then says it did not
        theta, cur, info = real_newton(*args, **kwargs)
        return theta, cur, {**info, "converged": False}

    monkeypatch.setattr(opt, "_ai_newton", newton_that_gives_up)
    monkeypatch.setattr(opt, "_lbfgsb", lambda theta, cur, ev: (theta, cur, SimpleNamespace(
        nit=0, message="ABNORMAL: ", success=False)))
    summary = eg.fit(frame, object="system", method="reml").summary
    assert summary.converged and "at an optimum" in summary.message and "ABNORMAL" in summary.message
    assert summary.criterion == pytest.approx(reference.criterion, abs=1e-6)


def _battle_log(seed: int = 5) -> pd.DataFrame:
    """5 systems x 30 items x 3 judges, every pair in both orders: a Bradley-Terry log with items and judges."""
    rng = np.random.default_rng(seed)
    theta = np.linspace(-0.8, 0.8, 5)
    rows = []
    for item in range(30):
        for judge in ("j1", "j2", "j3"):
            for i in range(5):
                for j in range(5):
                    if i != j:
                        p_a = 1 / (1 + np.exp(-(theta[i] - theta[j] + 0.2)))
                        rows.append((f"s{i}", f"s{j}", "model_a" if rng.random() < p_a else "model_b",
                                     f"q{item}", judge))
    return pd.DataFrame(rows, columns=["model_a", "model_b", "winner", "item", "judge"])


def test_a_pairwise_log_is_fitted_as_win_indicators_and_pairwise_is_its_verb():
    log = _battle_log()
    fit = eg.fit(log)
    assert fit.battles is not None and fit.design.object == "system"
    assert {"system", "item", "judge", "position"} <= set(fit.design.names)
    # the verb gives what the pairwise analysis of the same log gives, the components included
    from evalgauge.analysis.pairwise import analyze_pairwise

    direct = analyze_pairwise(eg.read(log), n_boot=100)
    verb = fit.pairwise(n_boot=100)
    pd.testing.assert_frame_equal(verb.table, direct.table)
    for comp in direct.components.components:
        assert fit.components.sigma2(comp.name) == pytest.approx(comp.variance, rel=1e-12, abs=1e-15)
    from evalgauge.simulate import simulate, sizing_preset

    scores = eg.fit(simulate(sizing_preset(systems=3, items=10, judges=2, replicates=1), seed=1), object="system")
    with pytest.raises(DesignError, match="this fit is of scores"):
        scores.pairwise()
    with pytest.raises(DesignError, match=r"need an 'item' column.*evalgauge pairwise FILE"):
        eg.fit(log.drop(columns=["item"]))
    with pytest.raises(DesignError, match=r"fit: object, facets do\(es\) not apply to a pairwise log"):
        eg.fit(log, object="judge", facets=["judge", "item"])
