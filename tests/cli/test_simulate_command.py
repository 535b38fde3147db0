"""`evalgauge simulate` and `evalgauge screen`: each study's options, JSON, the paper figures it prints, and a
study or scenario it does not know."""

import json

from click.testing import CliRunner

from evalgauge.cli import main
from pilots import screening_pilot


def test_cli_coverage_json():
    out = CliRunner().invoke(main, ["simulate", "coverage", "--scenarios", "A,E", "--n", "20", "--reps", "10",
                                    "--json", "-"])
    assert out.exit_code == 0, out.output
    payload = json.loads(out.stdout)
    assert {(r["scenario"], r["n"]) for r in payload["results"]} == {("A", 20), ("E", 20)}
    assert set(payload["results"][0]) >= {"scenario", "n", "coverage", "mean_se"}
    bad = CliRunner().invoke(main, ["simulate", "coverage", "--scenarios", "Z", "--reps", "2"])
    assert bad.exit_code == 2 and "unknown scenario" in bad.output


def test_the_command_runs_a_chosen_study_and_says_the_paper_figures():
    run = CliRunner().invoke(main, ["simulate", "robustness", "--study", "knife-edge", "--study", "strata",
                                    "--reps", "8", "--json", "-"])
    assert run.exit_code == 0, run.output
    out = json.loads(run.stdout)
    assert set(out["studies"]) == {"knife-edge", "strata"} and out["reps"] == 8
    assert [r["ratio"] for r in out["studies"]["knife-edge"]] == [0.75, 0.9, 1.0, 1.1, 1.5, 2.0, 4.0]
    text = CliRunner().invoke(main, ["simulate", "robustness", "--study", "transfer", "--reps", "5"])
    assert text.exit_code == 0 and "2.3-2.5" in text.output
    bad = CliRunner().invoke(main, ["simulate", "robustness", "--study", "nope"])
    assert bad.exit_code == 2 and "nope" in bad.output


def test_the_command_prints_the_convergence_table():
    run = CliRunner().invoke(main, ["simulate", "robustness", "--study", "convergence", "--reps", "4", "--json", "-"])
    assert run.exit_code == 0, run.output
    out = json.loads(run.stdout)
    assert {r["observations"] for r in out["studies"]["convergence"]} == {540, 1080, 2700, 5400}
    assert "2 calls" in out["convergence_design"]
    text = CliRunner().invoke(main, ["simulate", "robustness", "--study", "convergence", "--reps", "3"])
    assert text.exit_code == 0 and "Fig. 7" in text.output and "5,400" in text.output


def test_simulate_scoring_command():
    out = CliRunner().invoke(main, ["simulate", "scoring", "--prevalence", "0.5,0.05", "--reps", "5", "--json", "-"])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.stdout)["results"]
    assert len(rows) == 2 and {"tau_likert", "tau_binary", "tau_pairwise"} <= set(rows[0])


def test_screen_cli_reports_what_screening_buys(tmp_path):
    path = tmp_path / "pilot.csv"
    screening_pilot().to_csv(path, index=False)
    out = CliRunner().invoke(main, ["screen", str(path), "--keep", "0.5", "--splits", "50", "--json", "-"])
    assert out.exit_code == 0, out.output
    payload = json.loads(out.stdout)
    assert payload["share_selected"]["system"] > payload["share_all"]["system"]
    assert len(payload["selected"]) == 20
