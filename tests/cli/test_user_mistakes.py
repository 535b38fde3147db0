"""What real users' files and options do wrong, and what evalgauge says: never a traceback, never a NaN in JSON."""

import json
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from conftest import ROOT, SHARED_DATA
from evalgauge.cli import main
from evalgauge.simulate import PRESETS, simulate

SHARED = SHARED_DATA


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def judgments(tmp_path) -> pd.DataFrame:
    frame = simulate(PRESETS["sizing"](systems=4, items=12, judges=2, replicates=1), seed=3)
    return frame.drop(columns=[c for c in ("replicate",) if c in frame])


# -- pairwise -------------------------------------------------------------------------------------------------

def _winner_loser(path: Path) -> None:
    """BradleyTerry2's citations counts written as battles: the cited journal (the winner) always first."""
    src = SHARED / "bradleyterry2_reference" / "citations.csv"
    if src.exists():
        counts = pd.read_csv(src)
        counts = counts[counts["cited"] != counts["citing"]]
    else:  # the same shape, made up
        counts = pd.DataFrame({"cited": ["A", "B", "C", "A", "B", "C"], "citing": ["B", "C", "A", "C", "A", "B"],
                               "count": [30, 20, 5, 40, 10, 15]})
    rows = [(r.cited, r.citing, "model_a") for r in counts.itertuples() for _ in range(int(r.count))]
    pd.DataFrame(rows, columns=["model_a", "model_b", "winner"]).to_csv(path, index=False)


def test_winner_always_first_is_not_a_position_effect(tmp_path):
    path = tmp_path / "citations.csv"
    _winner_loser(path)
    out = run("pairwise", path, "--bootstrap", "20", "--json", "-")
    assert out.exit_code == 0, out.output
    payload = json.loads(out.stdout)
    assert payload["position_advantage_log_odds"] is None
    assert any("winner/loser listing" in n for n in payload["notes"])
    ses = [r["se"] for r in payload["bradley_terry"]]
    assert all(s is not None and np.isfinite(s) for s in ses)
    if (SHARED / "bradleyterry2_reference" / "citations.csv").exists():
        # BradleyTerry2's citation example: abilities relative to Biometrika
        theta = {r["system"]: r["log_strength"] for r in payload["bradley_terry"]}
        assert theta["JRSS-B"] - theta["Biometrika"] == pytest.approx(0.2689, abs=1e-3)
        assert theta["Comm Statist"] - theta["Biometrika"] == pytest.approx(-2.9486, abs=1e-3)
    plain = run("pairwise", path, "--bootstrap", "0")  # without --json: no crash writing output
    assert plain.exit_code == 0 and "Traceback" not in plain.output


def test_disconnected_comparisons_are_named(tmp_path):
    path = tmp_path / "d.csv"
    pd.DataFrame({"model_a": ["a", "a", "c", "c"], "model_b": ["b", "b", "d", "d"],
                  "winner": ["model_a", "model_b", "model_a", "model_b"]}).to_csv(path, index=False)
    out = run("pairwise", path)
    assert out.exit_code == 2 and "2 groups never compared" in out.output and "{a, b}" in out.output


def test_perfect_separation_is_bounded_and_said(tmp_path):
    path = tmp_path / "s.csv"
    rows = [("a", "b", "model_a"), ("b", "a", "model_b"), ("a", "c", "model_a"), ("c", "a", "model_b"),
            ("b", "c", "model_a"), ("c", "b", "model_a"), ("b", "c", "model_b")]
    pd.DataFrame(rows, columns=["model_a", "model_b", "winner"]).to_csv(path, index=False)
    out = run("pairwise", path, "--reference", "b", "--bootstrap", "0", "--json", "-")
    assert out.exit_code == 0, out.output
    payload = json.loads(out.stdout)
    assert any("won or lost every game" in n for n in payload["notes"])
    a = next(r for r in payload["bradley_terry"] if r["system"] == "a")
    assert 0 < a["log_strength"] < 10 and np.isfinite(a["se"]) and abs(a["elo"]) < 2000


def test_pairwise_options_are_checked(tmp_path):
    path = tmp_path / "s.csv"
    pd.DataFrame({"model_a": ["a", "b"], "model_b": ["b", "a"], "winner": ["model_a", "tie"]}).to_csv(path, index=False)
    for option in ("--baseline", "--reference"):
        out = run("pairwise", path, option, "nope")
        assert out.exit_code == 2 and "'nope' is not among the systems" in out.output


# -- readers ----------------------------------------------------------------------------------------------------

def test_latin1_file_names_the_line_and_encoding(tmp_path, judgments):
    judgments = judgments.assign(system=judgments["system"].astype(str))
    judgments.loc[5, "system"] = "café"
    path = tmp_path / "l.csv"
    judgments.to_csv(path, index=False, encoding="latin-1")
    out = run("analyze", path)
    assert out.exit_code == 2 and "line 7" in out.output and "--encoding" in out.output
    ok = run("components", path, "--encoding", "latin-1")
    assert ok.exit_code == 0, ok.output


def test_semicolon_file_is_sniffed(tmp_path, judgments):
    path = tmp_path / "semi.csv"
    judgments.to_csv(path, index=False, sep=";")
    assert run("components", path).exit_code == 0
    assert run("components", path, "--sep", ";").exit_code == 0


def test_huge_score_is_a_message(tmp_path, judgments):
    judgments = judgments.astype({"score": object})
    judgments.loc[3, "score"] = "1e308"
    path = tmp_path / "h.csv"
    judgments.to_csv(path, index=False)
    out = run("analyze", path)
    assert out.exit_code == 2 and "row 4" in out.output and "too large" in out.output


def test_terminal_escapes_in_labels_never_reach_the_terminal(tmp_path, judgments):
    judgments = judgments.assign(system=judgments["system"].astype(str))
    judgments.loc[judgments["system"] == judgments["system"].iloc[0], "system"] = "\x1b[31mevil\x1b[0m"
    path = tmp_path / "e.csv"
    judgments.to_csv(path, index=False)
    out = run("analyze", path)
    assert out.exit_code == 0, out.output
    assert "\x1b" not in out.output and "\\x1b[31mevil" in out.output


def test_duplicate_cells_name_the_column_that_differs(tmp_path, judgments):
    frame = pd.concat([judgments.assign(prompt_kind="a"), judgments.assign(prompt_kind="b")])
    path = tmp_path / "dup.csv"
    frame.to_csv(path, index=False)
    out = run("components", path)
    assert out.exit_code == 2 and "They differ in 'prompt_kind'" in out.output


def test_column_roles_and_recognised_names(tmp_path, judgments):
    renamed = judgments.rename(columns={"system": "exam_model", "item": "qid", "judge": "grader"})
    path = tmp_path / "r.csv"
    renamed.to_csv(path, index=False)
    out = run("components", path, "--item", "qid", "--judge", "grader", "--json", "-")
    assert out.exit_code == 0, out.output
    payload = json.loads(out.stdout)
    assert set(payload["levels"]) == {"exam_model", "item", "judge"} and payload["object"] == "exam_model"
    bad = run("components", path, "--item", "nope")
    assert bad.exit_code == 2 and "no column 'nope'" in bad.output


@pytest.mark.parametrize("command", ["balance", "screen"])
def test_drop_missing_is_offered_where_suggested(tmp_path, judgments, command):
    judgments = judgments.astype({"score": object})
    judgments.loc[2, "score"] = None
    path = tmp_path / "m.csv"
    judgments.to_csv(path, index=False)
    first = run(command, path)
    assert first.exit_code == 2 and "--drop-missing" in first.output
    again = run(command, path, "--drop-missing")
    assert again.exit_code in (0, 3), again.output  # balance: 3 = not a complete block
    assert "dropped" in again.output


# -- planning ------------------------------------------------------------------------------------------------------

def test_a_facet_named_like_a_replicate_alias_is_that_facet(tmp_path):
    rng = np.random.default_rng(0)
    rows = [(p, t, r, rng.normal()) for p in range(8) for t in range(3) for r in range(4)]
    path = tmp_path / "prt.csv"
    pd.DataFrame(rows, columns=["p", "t", "r", "score"]).to_csv(path, index=False)
    comps = tmp_path / "c.json"
    fitted = run("components", path, "--facets", "p,t,r", "--nest", "t/r", "--object", "p", "--json", comps)
    assert fitted.exit_code == 0
    out = run("plan", comps, "--n", "r=8", "--json", "-")
    assert out.exit_code == 0, out.output
    row = json.loads(out.stdout)["designs"][0]
    assert row["n_r"] == 8 and row["replicates"] == 1  # r is the facet, not the replicates


def test_plan_from_published_values_and_from_analyze_json(tmp_path, judgments):
    given = run("plan", "--component", "system=0.0801", "--component", "system:judge=0.0011", "--component",
                "system:item=0.3", "--component", "residual=0.2", "--object", "system", "--n", "item=500",
                "--n", "judge=1", "--json", "-")
    assert given.exit_code == 0, given.output
    assert json.loads(given.stdout)["ceiling"] == pytest.approx(0.0801 / (0.0801 + 0.0011), rel=1e-9)
    minimal = tmp_path / "m.json"
    minimal.write_text(json.dumps({"object": "system", "components": {"system": 0.08, "system:item": 0.3,
                                                                      "residual": 0.2}}))
    assert run("plan", minimal, "--n", "item=100").exit_code == 0
    missing = run("plan", minimal)
    assert missing.exit_code == 2 and "--n item=N" in missing.output and "KeyError" not in missing.output
    data = tmp_path / "j.csv"
    judgments.to_csv(data, index=False)
    analysed = tmp_path / "a.json"
    assert run("analyze", data, "--json", analysed).exit_code == 0
    assert run("plan", analysed, "--n", "item=50").exit_code == 0


@pytest.mark.parametrize("args,expect", [
    (["--target-erho2", "1.5"], "0<x<1"),
    (["--price", "judge=-1", "--budget", "10"], "non-negative"),
    (["--budget", "10"], "a budget needs prices"),
    (["--ceiling-facet", "nope"], "'nope' is not a facet"),
    (["--n", "item=abc"], "--n"),
])
def test_plan_options_are_validated(tmp_path, judgments, args, expect):
    data = tmp_path / "j.csv"
    judgments.to_csv(data, index=False)
    comps = tmp_path / "c.json"
    assert run("components", data, "--json", comps).exit_code == 0
    out = run("plan", comps, *args)
    assert out.exit_code == 2 and expect in out.output, out.output
    assert "Traceback" not in out.output and "None judge" not in out.output


# -- servers and help ----------------------------------------------------------------------------------------------

def test_serve_sim_on_a_port_in_use(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "evalgauge.cli", "serve-sim",
                               str(ROOT / "examples" / "sim" / "run.toml"), "--port", str(port)],
                              capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "cannot listen" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("command", [["components"], ["balance"], ["analyze"], ["plan"], ["pairwise"], ["screen"],
                                     ["import"], ["run"], ["export"], ["serve-sim"], ["simulate", "sizing"],
                                     ["simulate", "coverage"], ["simulate", "bias"]])
def test_every_help_has_an_example(command):
    out = run(*command, "--help")
    assert out.exit_code == 0 and "Example" in out.output
