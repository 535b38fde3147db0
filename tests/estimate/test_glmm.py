"""TEE section G: the logit GLMM robustness check for binary scores."""

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

import evalgauge as eg
from conftest import FIXTURES
from evalgauge.cli import main
from evalgauge.errors import DesignError
from evalgauge.estimate.glmm import _Laplace, fit_glmm_logit
from evalgauge.estimate.model import parse_formula
from evalgauge.estimate.reml import RemlProblem, cell_data, fixed_matrix, random_structure
from evalgauge.io import read_judgments

BINARY = FIXTURES / "reml" / "binary.parquet"
FORMULA = "score ~ 1 + (1|system) + (1|item) + (1|judge) + (1|system:item) + (1|item:judge)"


def test_glmm_matches_lme4_glmer_nagq0():
    ref = json.loads((FIXTURES / "reml" / "lme4_binary.json").read_text())
    model = parse_formula(FORMULA)
    fit = fit_glmm_logit(read_judgments(BINARY), model)
    # the Laplace criterion at our estimates is no worse than at glmer's
    cells = cell_data(read_judgments(BINARY), model)
    terms, levels, sizes, cell_term, _ = random_structure(cells, model, [])
    x, _, _ = fixed_matrix(cells, model)
    laplace = _Laplace(RemlProblem(cells.n_obs, cells.count, cells.mean, 0.0, x, levels, sizes, cell_term),
                       cells.count, cells.mean)
    theirs = laplace.deviance(np.array([np.sqrt(ref["components"][t.name]) for t in terms]))
    ours = laplace.deviance(np.array(fit.reml["theta"]))
    assert ours <= theirs + 1e-6
    # components agree to the flatness of the criterion (glmer's bobyqa and our L-BFGS-B stop differently)
    for t in terms:
        assert fit[t.name].variance == pytest.approx(ref["components"][t.name], rel=1e-3), t.name
    assert fit.reml["beta"]["(Intercept)"] == pytest.approx(ref["fixef"]["(Intercept)"], rel=1e-3)
    assert fit["residual"].variance == pytest.approx(np.pi**2 / 3)


def test_glmm_check_ranks_and_rank_correlation():
    check = eg.fit(BINARY, formula=FORMULA).glmm()
    assert check.lpm.method == "reml" and check.glmm.method == "glmm-logit"
    assert list(check.table["component"]) == ["system", "item", "judge", "system:item", "item:judge"]
    assert check.table["glmm_rank"].tolist() == check.table["lpm_rank"].tolist()
    assert check.spearman == pytest.approx(1.0)
    payload = json.loads(check.to_json())
    assert payload["spearman"] == pytest.approx(1.0) and len(payload["components"]) == 5
    # TEE Table 11 ranks each component's share of Var(theta-hat) at the design, not its share of one call's variance
    from evalgauge import dstudy

    for fit, column in ((check.lpm, "lpm_share"), (check.glmm, "glmm_share")):
        shares = dstudy.project(fit, object="").shares()
        assert check.table[column].tolist() == pytest.approx([shares[n] for n in check.table["component"]])
    assert check.table["lpm_share"].tolist() != pytest.approx([check.lpm.share(n) for n in check.table["component"]])


def test_glmm_refuses_non_binary_scores():
    frame = read_judgments(BINARY).frame.copy()
    frame.loc[3, "score"] = 2
    with pytest.raises(DesignError, match="binary scores"):
        fit_glmm_logit(frame, parse_formula(FORMULA))


def test_components_glmm_prints_the_check_and_its_notes():
    out = CliRunner().invoke(main, ["components", str(BINARY), "--formula", FORMULA, "--glmm"])
    assert out.exit_code == 0 and "Spearman rank correlation" in out.output and "GLMM rank" in out.output
    js = CliRunner().invoke(main, ["components", str(BINARY), "--formula", FORMULA, "--glmm", "--json", "-"])
    assert json.loads(js.stdout)["glmm"]["method"] == "glmm-logit"
    out = CliRunner().invoke(main, ["components", str(FIXTURES / "reml" / "cbpp_binary.csv"), "--formula",
                                    "score ~ period + (1 | herd)", "--glmm"])
    assert out.exit_code == 0 and "No rank correlation of the shares with 1 random term" in out.output
    out = CliRunner().invoke(main, ["components", str(FIXTURES / "reml" / "glmm_boundary.csv"), "--object", "item",
                                    "--glmm"])
    assert out.exit_code == 0, out.output
    tail = out.output[out.output.index("linear probability model vs logit GLMM"):]  # the notes under the table
    assert "judge: boundary estimate" in tail and "item: boundary" not in tail


@pytest.mark.parametrize("formula", [FORMULA, FORMULA + " + (1|system:judge) + (1|system:item:judge)"])
def test_laplace_gradient_is_exact(formula):
    """The analytic gradient of the Laplace deviance (envelope term, log|A| at fixed W, and the weights'
    dependence through d eta~/d theta) equals central differences, with and without a cell term.

    Tolerance from the numerics, not fitted: PIRLS stops within 1e-11 (1 + |L|) of its optimum, so a
    central difference with step h carries up to 2e-11 (1 + |L|) / (2h) of error, and its truncation
    error is O(h^2) (negligible at h = 1e-5); a factor 10 of margin on the former."""
    from evalgauge.estimate.cells import grouping_candidates

    model = parse_formula(formula)
    cells = cell_data(read_judgments(BINARY), model)
    terms, levels, sizes, cell_term, _ = random_structure(cells, model, [])
    assert (cell_term is not None) == ("system:item:judge" in formula)
    x, _, _ = fixed_matrix(cells, model)
    groups = grouping_candidates(cells, terms)

    def laplace():
        args = (cells.n_obs, cells.count, cells.mean, 0.0)
        return _Laplace(RemlProblem(*args, x, levels, sizes, cell_term, groups, diagonal=False), cells.count,
                        cells.mean, RemlProblem(*args, np.zeros((cells.n_cells, 0)), levels, sizes, cell_term,
                                                groups, diagonal=False))

    h = 1e-5
    for theta in (np.full(len(terms), 0.5), np.linspace(0.3, 1.2, len(terms))):
        value, grad = laplace().value_and_gradient(theta)
        for k in range(theta.size):
            up, down = theta.copy(), theta.copy()
            up[k] += h
            down[k] -= h
            central = (laplace().deviance(up) - laplace().deviance(down)) / (2 * h)
            assert abs(grad[k] - central) <= 10 * 2e-11 * (1 + abs(value)) / (2 * h), (k, grad[k], central)


def test_glmm_with_one_random_term_matches_glmer_on_cbpp(capfd):
    """lme4's cbpp (one binary row per animal): score ~ period + (1 | herd), glmer nAGQ = 0 (lme4_cbpp.json,
    made by fit_lme4_small.R). A model whose only random term is local has no global random effect."""
    ref = json.loads((FIXTURES / "reml" / "lme4_cbpp.json").read_text())
    data = read_judgments(FIXTURES / "reml" / "cbpp_binary.csv")
    fit = fit_glmm_logit(data, parse_formula("score ~ period + (1 | herd)"))
    assert fit["herd"].variance == pytest.approx(ref["herd"], rel=1e-3)
    for name, value in ref["fixef"].items():
        assert fit.reml["beta"][name] == pytest.approx(value, rel=1e-3, abs=1e-4), name
    check = eg.fit(FIXTURES / "reml" / "cbpp_binary.csv", formula="score ~ period + (1 | herd)").glmm()
    assert len(check.table) == 1 and math.isnan(check.spearman)  # a rank correlation needs three terms
    assert "DPOTRI" not in capfd.readouterr().err  # LAPACK is never handed an empty matrix


def test_a_component_is_found_off_the_boundary_and_a_boundary_term_is_named():
    """tests/fixtures/reml/glmm_boundary.csv: glmer's optimum has the item term at theta 0.4043182786 and the
    judge term at exactly 0 (a singular fit). The deviance's gradient is 0 at theta = 0, so an optimiser that
    steps there must probe off it; the judge term is named as a boundary term in the notes the terminal
    prints under the GLMM table."""
    path = FIXTURES / "reml" / "glmm_boundary.csv"
    vc = fit_glmm_logit(read_judgments(path), parse_formula("score ~ 1 + (1 | item) + (1 | judge)"))
    assert vc.reml.theta[0] == pytest.approx(0.4043182786, abs=2e-5) and vc.reml.theta[1] == 0.0
    assert vc.reml.criterion == pytest.approx(331.6750354723, abs=1e-5)
    assert vc.reml.boundary == ("judge",)
    check = eg.fit(path, object="item").glmm()
    assert check.glmm.reml.boundary == ("judge",)
    assert any(n.startswith("judge: boundary estimate") for n in check.glmm.notes)
    assert not any(n.startswith("item: boundary") for n in check.glmm.notes)
