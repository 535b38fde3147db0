"""`evalgauge compare`: its JSON contract and leaderboard, and `--df kenward-roger` against pbkrtest."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from conftest import FIXTURES
from evalgauge.cli import main
from evalgauge.simulate import PRESETS, simulate

REFS = FIXTURES / "lmertest"
RTOL = 1e-4


def test_json_contract_and_cli(tmp_path):
    frame = simulate(PRESETS["sizing"](systems=6, items=30, judges=3, replicates=2), seed=5)
    path = tmp_path / "j.csv"
    frame.to_csv(path, index=False)
    out = CliRunner().invoke(main, ["compare", str(path), "--bootstrap", "500", "--json", "-"])
    assert out.exit_code == 0, out.output
    payload = json.loads(out.stdout)
    for row in payload["systems"]:
        assert {"system", "mean", "rank", "rank_low", "rank_high", "rank_low_simultaneous",
                "rank_high_simultaneous"} <= set(row)
    assert [r["rank"] for r in payload["systems"]] == sorted(r["rank"] for r in payload["systems"])
    assert payload["systems"][0]["mean"] == max(r["mean"] for r in payload["systems"])  # rank 1 = highest
    for row in payload["pairs"]:
        assert {"a", "b", "diff", "se", "df", "low", "high", "low_simultaneous", "high_simultaneous", "p_holm",
                "naive_low", "naive_high"} <= set(row)
        assert row["low_simultaneous"] <= row["low"] <= row["diff"] <= row["high"] <= row["high_simultaneous"]
    assert len(payload["pairs"]) == 15
    text = CliRunner().invoke(main, ["compare", str(path), "--bootstrap", "500"])
    assert text.exit_code == 0 and "leaderboard" in text.output and " over " in text.output


@pytest.mark.slow
def test_compare_command_takes_kenward_roger(tmp_path):
    out = CliRunner().invoke(main, ["compare", str(REFS / "incomplete.csv"), "--df", "kenward-roger",
                                    "--bootstrap", "200", "--pair-gstudies", "none", "--json", "-"])
    assert out.exit_code == 0, out.output
    payload = json.loads(out.output)
    ref = json.loads((REFS / "incomplete_reference.json").read_text())["systems_kenward_roger"]
    got = {s["system"]: s for s in payload["systems"]}
    assert got["s1"]["df"] == pytest.approx(next(r["df"] for r in ref if r["system"] == "s1"), rel=RTOL)
    assert "Kenward-Roger" in payload["method"]
