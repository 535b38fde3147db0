"""`evalgauge plan`: its options (--n, --component, --budget, --price, --replicate-price, --best-of), its JSON
against `evalgauge.dstudy`, and its exit codes."""

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from evalgauge import dstudy
from evalgauge.cli import main
from evalgauge.components import VarianceComponents
from evalgauge.estimate import estimate_components
from evalgauge.simulate import simulate, sizing_preset


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    spec = sizing_preset(systems=20, items=15, judges=5, replicates=2)
    frame = simulate(spec, seed=12)
    path = tmp_path_factory.mktemp("plan") / "c.json"
    vc = estimate_components(frame, spec.design())
    path.write_text(vc.to_json())
    return vc, path


def test_plan_json_rows_and_ceiling(fitted):
    vc, path = fitted
    out = CliRunner().invoke(main, ["plan", str(path), "--n", "item=30,500", "--n", "judge=1,2", "--n", "rep=1",
                                    "--target-erho2", "0.8", "--json", "-"])
    assert out.exit_code == 0, out.output
    payload = json.loads(out.stdout)
    rows = payload["designs"]
    assert len(rows) == 4
    assert {"n_item", "n_judge", "var_abs", "sigma2_delta", "erho2", "phi", "mdd95"} <= set(rows[0])
    p = dstudy.project(vc, {"item": 500, "judge": 2}, 1)
    row = next(r for r in rows if r["n_item"] == 500 and r["n_judge"] == 2)
    assert row["erho2"] == pytest.approx(p.erho2) and row["var_abs"] == pytest.approx(p.var_abs)
    assert payload["ceiling"] == pytest.approx(dstudy.ceiling(vc).erho2)
    assert payload["mdd_floor"] == pytest.approx(dstudy.ceiling(vc).mdd95)
    assert payload["interventions"] and payload["exchange"]["target"] == 0.8


def test_plan_budget_and_gaming(fitted):
    _, path = fitted
    out = CliRunner().invoke(main, ["plan", str(path), "--budget", "50", "--price", "0.001", "--best-of", "27"])
    assert out.exit_code == 0, out.output
    assert "Best design within 50" in out.output and "E[max of 27 normals]" in out.output


def test_plan_errors(fitted, tmp_path):
    _, path = fitted
    bad = CliRunner().invoke(main, ["plan", str(path), "--n", "items=3"])
    assert bad.exit_code == 2 and "unknown facet" in bad.output
    nofile = CliRunner().invoke(main, ["plan", str(tmp_path / "none.json")])
    assert nofile.exit_code == 2 and "evalgauge components DATA --json" in nofile.output
    junk = tmp_path / "junk.json"
    junk.write_text('{"a": 1}')
    notvc = CliRunner().invoke(main, ["plan", str(junk)])
    assert notvc.exit_code == 2 and "not a components result" in notvc.output
    nobudget = CliRunner().invoke(main, ["plan", str(path), "--budget", "10"])
    assert nobudget.exit_code == 2 and "needs prices" in nobudget.output


def test_the_requirements_answer_at_the_replicates_the_plan_names():
    """--component values carry no replicate count: --n rep=3 is the design the requirements are for, the same
    answer a components JSON with 3 replicates gives."""
    comps = ["--component", "system=0.08", "--component", "system:judge=0.004", "--component", "system:item=0.3",
             "--component", "residual=0.6"]
    given = CliRunner().invoke(main, ["plan", *comps, "--object", "system", "--n", "item=30", "--n", "judge=1",
                                      "--n", "rep=3", "--target-erho2", "0.8", "--json", "-"])
    stored = VarianceComponents.from_dict({"object": "system", "replicates": 3, "components": {
        "system": 0.08, "system:judge": 0.004, "system:item": 0.3, "residual": 0.6},
        "levels": {"system": 2, "item": 30, "judge": 1}})
    reference = dstudy.plan(stored, target_erho2=0.8)
    counts = {r["facet"]: r["count"] for r in json.loads(given.output)["requirements"]}
    assert counts == {r.facet: r.count for r in reference.requirements}
    one = dstudy.plan(replace(stored, replicates=1), target_erho2=0.8)
    assert counts["judge"] < next(r.count for r in one.requirements if r.facet == "judge")  # the rep counted


def test_plan_says_how_replicates_were_priced(tmp_path):
    args = ["plan", "--component", "system=0.08", "--component", "system:item=0.05", "--component",
            "system:judge=0.02", "--component", "system:item:judge=0.05", "--component", "residual=1.5",
            "--object", "system", "--n", "system=5", "--n", "item=100", "--n", "judge=2", "--budget", "20",
            "--price", "0.004", "--max", "item=100"]
    plain = CliRunner().invoke(main, [*args, "--json", str(tmp_path / "a.json")])
    cached = CliRunner().invoke(main, [*args, "--replicate-price", "0.0008", "--json", str(tmp_path / "b.json")])
    assert plain.exit_code == 0 and cached.exit_code == 0, cached.output
    a, b = (json.loads((tmp_path / f).read_text())["budget"] for f in ("a.json", "b.json"))
    assert a["replicates"] == 1 and b["replicates"] == 3 and "priced" not in a
    assert "a prompt the provider's cache holds" in b["priced"] and "each later replicate" in cached.output
    wrong = CliRunner().invoke(main, [*args, "--replicate-price", "j9=0.001"])
    assert wrong.exit_code == 2 and "--replicate-price" in wrong.output
