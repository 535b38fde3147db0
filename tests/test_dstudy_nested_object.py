"""An object of measurement nested in a parent (issue 47): items nested in categories, TEE's
alpha_i = kappa_c(i) + delta_i|c. The universe score counts the parent's variance (and the terms of the object
and its parent with fixed facets, averaged over their chosen levels); E rho^2 and Phi equal Brennan's formulas
written out by hand in R (tests/fixtures/brennan_nested/brennan_nested.R, run to brennan_nested_expected.json);
the formula evalgauge prints is the model it fitted, and lme4 fits it to the same components."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import evalgauge as eg
from evalgauge import dstudy
from evalgauge.cli import main
from evalgauge.components import VarianceComponents

HERE = Path(__file__).resolve().parent / "fixtures" / "brennan_nested"
EXPECTED = json.loads((HERE / "brennan_nested_expected.json").read_text())


def _components(design: dict) -> VarianceComponents:
    return VarianceComponents.from_values(design["components"], design["levels"], design["replicates"],
                                          object="item", fixed=tuple(design["fixed"]), nesting=design["nesting"])


@pytest.mark.parametrize("name", ["design_a", "design_b"])
def test_erho2_and_phi_of_a_nested_object_equal_brennans_formulas(name):
    design = EXPECTED[name]
    vc = _components(design)
    assert design["components"]["category"] > 0.3  # a parent variance that matters
    for target in design["projections"]:
        counts = {f: target[f"n_{f}"] for f in ("variant", "temperature", "judge") if f"n_{f}" in target}
        p = dstudy.project(vc, counts, target["replicates"])
        for ours, theirs in (("sigma2_object", "sigma2_tau"), ("sigma2_delta", "sigma2_delta"),
                             ("sigma2_Delta", "sigma2_Delta"), ("erho2", "erho2"), ("phi", "phi")):
            assert getattr(p, ours) == pytest.approx(target[theirs], rel=1e-9, abs=1e-12), (name, counts, ours)


def test_the_plan_command_gives_brennans_numbers(tmp_path):
    design = EXPECTED["design_a"]
    path = tmp_path / "components.json"
    path.write_text(_components(design).to_json())
    out = CliRunner().invoke(main, ["plan", str(path), "--n", "judge=1,3,10", "--n", "rep=1,2", "--json", "-"])
    assert out.exit_code == 0, out.output
    rows = [r for r in _records(json.loads(out.stdout)) if "erho2" in r and "n_judge" in r]
    for target in design["projections"]:
        row = next(r for r in rows if r["n_judge"] == target["n_judge"] and r["replicates"] == target["replicates"])
        assert row["erho2"] == pytest.approx(target["erho2"], rel=1e-9)
        assert row["phi"] == pytest.approx(target["phi"], rel=1e-9)


def _records(payload):
    """Every dict in a JSON payload (the plan's rows, wherever the payload keeps them)."""
    if isinstance(payload, dict):
        yield payload
        for v in payload.values():
            yield from _records(v)
    elif isinstance(payload, list):
        for v in payload:
            yield from _records(v)


def test_the_printed_formula_is_the_fitted_model_and_lme4_fits_it_the_same():
    """One score per cell: the cell term is in the residual, so the printed formula leaves it out (lme4 refuses
    a random term with a level per observation). brennan_nested_expected.json holds lme4's fit of that formula."""
    fit = eg.fit(eg.read(HERE / "nested_one_per_cell.csv"), object="item",
                 design=eg.infer_design(eg.read(HERE / "nested_one_per_cell.csv").frame, object="item",
                                        nest=["category/item"]))
    ref = EXPECTED["lme4"]
    assert fit.formula == ref["formula"]
    ours = {frozenset(c.name.split(":")) if c.name != "residual" else "residual": c.variance
            for c in fit.components.components}
    for name, value in ref["components"].items():
        key = "residual" if name == "residual" else frozenset(name.split(":"))
        assert ours[key] == pytest.approx(value, rel=2e-4, abs=2e-5), name
    assert fit.components.reml["deviance"] == pytest.approx(ref["reml_criterion"], abs=1e-4)
