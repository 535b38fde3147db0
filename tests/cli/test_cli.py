"""The evalgauge command: output, JSON, exit codes, and no tracebacks for user mistakes."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from evalgauge import __version__
from evalgauge.cli import main
from evalgauge.simulate import simulate, sizing_preset


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "scores.csv"
    simulate(sizing_preset(systems=4, items=5, judges=3, replicates=2), seed=2).to_csv(path, index=False)
    return str(path)


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_version_and_help():
    assert __version__ in run("--version").output
    out = run("--help").output
    assert "components" in out and "simulate" in out and "balance" in out


def test_components_table(data):
    result = run("components", data)
    assert result.exit_code == 0
    for name in ("system:item:judge", "residual", "share", "Design: 4 system x 5 item x 3 judge x 2 replicate"):
        assert name in result.output


def test_components_json_stdout(data):
    result = run("components", data, "--json", "-")
    payload = json.loads(result.stdout)
    assert payload["method"] == "anova" and payload["n_obs"] == 120
    assert [c["component"] for c in payload["components"]][:3] == ["system", "item", "judge"]


def test_components_json_file(data, tmp_path):
    out = tmp_path / "c.json"
    result = run("components", data, "--json", str(out))
    assert result.exit_code == 0 and json.loads(out.read_text())["components"]


def test_user_error_exit_2_without_traceback(data):
    result = CliRunner().invoke(main, ["components", data, "--facets", "system,itm"])
    assert result.exit_code == 2
    assert "error:" in result.output and "'itm'" in result.output and "Traceback" not in result.output


def test_missing_file_exit_2(tmp_path):
    result = CliRunner().invoke(main, ["components", str(tmp_path / "nope.csv")])
    assert result.exit_code == 2 and "no such file" in result.output


def test_balance_command(data, tmp_path):
    ok = run("balance", data)
    assert ok.exit_code == 0 and "complete balanced block" in ok.output
    lines = Path(data).read_text().splitlines()
    gap = tmp_path / "gap.csv"
    gap.write_text("\n".join(lines[:1] + lines[3:]) + "\n")
    bad = run("balance", str(gap))
    assert bad.exit_code == 3 and "not a complete balanced block" in bad.output


def test_simulate_then_estimate(tmp_path):
    out = tmp_path / "tee.parquet"
    result = run("simulate", "tee", "--out", str(out), "--seed", "3", "--set", "items_per_category=4",
                 "--set", "replicates=2")
    assert result.exit_code == 0 and "True components" in result.output
    est = run("components", str(out), "--terms",
              "category,category:item,variant,temperature,judge,category:item:variant,"
              "category:item:temperature,category:item:judge,variant:temperature,variant:judge", "--json", "-")
    names = [c["component"] for c in json.loads(est.stdout)["components"]]
    assert "category:item:variant:temperature:judge" in names and "category:variant" not in names


def test_simulate_bad_set(tmp_path):
    result = CliRunner().invoke(main, ["simulate", "sizing", "-o", str(tmp_path / "x.csv"), "--set", "apples=3"])
    assert result.exit_code == 2 and "takes systems, items, judges, replicates" in result.output


def test_an_unaffordable_default_model_falls_back_on_the_command_line_too(tmp_path, monkeypatch):
    """`analyze`/`components` without --terms or --max-order fit the default model; when that is more than
    the machine affords they fit the two-way model and say so (the real SummEval file's every-interaction
    model was expected to take 36 minutes and ran to 24 GB through the CLI); --max-order asks for more."""
    import evalgauge.estimate as estimate

    rng = np.random.default_rng(4)
    grid = pd.MultiIndex.from_product([[f"s{k}" for k in range(4)], [f"i{k}" for k in range(8)],
                                       [f"j{k}" for k in range(3)], ["v1", "v2"], [1, 2]],
                                      names=["system", "item", "judge", "variant", "replicate"]).to_frame(index=False)
    grid["score"] = rng.normal(size=len(grid))
    path = tmp_path / "gappy.csv"
    grid.sample(frac=0.9, random_state=3).to_csv(path, index=False)
    monkeypatch.setattr(estimate, "AFFORDABLE_SECONDS", 1e-9)
    out = run("components", str(path), "--json", "-")
    assert out.exit_code == 0
    payload = json.loads(out.stdout)
    names = [c["component"] for c in payload["components"]]
    assert "system:item:judge" not in names and any("affords" in n for n in payload["notes"])
    full = json.loads(run("components", str(path), "--max-order", "4", "--json", "-").stdout)
    assert "system:item:judge" in [c["component"] for c in full["components"]]
