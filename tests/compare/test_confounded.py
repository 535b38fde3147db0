"""Comparisons the data cannot support (issue 25.4): two systems scored under no common level of another
column (judge, baseline, annotator, task, source file, items) differ by that column too; such pairs are
not compared, and that is said first with what to do."""

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from conftest import FIXTURES
from evalgauge.cli import main
from evalgauge.compare import confounded_pairs

AE = FIXTURES / "importers" / "alpaca-eval"


def test_two_alpacaeval_files_with_their_own_judge_and_baseline_are_not_compared(tmp_path):
    out = tmp_path / "ae2.csv"
    res = CliRunner().invoke(main, ["import", "alpaca-eval",
                                    str(AE / "alpaca-7b" / "alpaca_eval_gpt4" / "annotations.json"),
                                    str(AE / "gpt-3.5-turbo-1106" / "weighted_alpaca_eval_gpt4_turbo" /
                                        "annotations.json"), "-o", str(out)])
    assert res.exit_code == 0, res.output
    for command in ("analyze", "compare"):
        res = CliRunner().invoke(main, [command, str(out), "--json", str(tmp_path / f"{command}.json")])
        assert res.exit_code == 0, res.output
        assert res.output.startswith("not comparable: 1 of 1 pairs")
        assert "baseline, judge" in res.output and "--keep baseline=text_davinci_003" in res.output
        assert "by 0.2025: not comparable" in res.output and "by 0.2025: separable" not in res.output
        payload = json.loads((tmp_path / f"{command}.json").read_text())
        cmp = payload["comparison"] if command == "analyze" else payload
        pair = cmp["pairs"][0]
        assert pair["comparable"] is False and pair["separable"] is False and pair["low"] is None
        assert pair["p_holm"] is None
        assert {(s["rank_low"], s["rank_high"]) for s in cmp["systems"]} == {(1, 2)}
        assert cmp["confounded"] and cmp["systems"][0]["group"] == cmp["systems"][1]["group"]


def test_only_the_pairs_without_a_shared_level_are_set_aside():
    rng = np.random.default_rng(0)
    rows = []
    for system, judges in (("a", ("j1", "j2")), ("b", ("j1", "j2")), ("c", ("j3",))):
        for item in range(20):
            for judge in judges:
                rows.append({"system": system, "item": f"i{item}", "judge": judge, "score": rng.normal(),
                             "response_id": f"r{len(rows)}"})  # an identifier: one level per row
    frame = pd.DataFrame(rows)
    mask, said = confounded_pairs(frame, "system", ["a", "b", "c"], exclude={"score"})
    assert mask.tolist() == [[False, False, True], [False, False, True], [True, True, False]]
    assert said and said[0].startswith("2 of 3 pairs of systems are not comparable") and "judge" in said[0]
    assert "response_id" not in said[0]


def test_disjoint_items_confound_too():
    frame = pd.DataFrame({"system": ["a"] * 10 + ["b"] * 10, "item": [f"q{k}" for k in range(20)],
                          "score": np.arange(20.0)})
    mask, said = confounded_pairs(frame, "system", ["a", "b"], exclude={"score"})
    assert mask[0, 1] and "item" in said[0]


def test_a_column_that_renames_the_systems_is_no_condition():
    """AlpacaEval's long file carries results_dir_model beside generator_2_model: the same names, one to one
    (one folder named otherwise: NullModel holds 'example'). It once made every pair not comparable."""
    rng = np.random.default_rng(1)
    systems = ["m1", "m2", "m3", "example"]
    frame = pd.DataFrame([{"system": s, "results_dir_model": "NullModel" if s == "example" else s,
                           "item": f"i{k}", "score": rng.normal()} for s in systems for k in range(10)])
    mask, said = confounded_pairs(frame, "system", systems, exclude={"score"})
    assert not mask.any() and said == []
    # a one-to-one column with other names (each system its own baseline) is still a condition
    frame["baseline"] = frame["system"].map({s: f"base-{s}" for s in systems})
    mask, said = confounded_pairs(frame, "system", systems, exclude={"score"})
    assert mask.sum() == 12 and "baseline" in said[0] and "results_dir_model" not in said[0]


@pytest.mark.slow
def test_the_real_58_system_alpacaeval_file_gives_its_leaderboard_back(tmp_path):
    from conftest import shared_file

    data = shared_file("alpaca_eval_annotations", "alpaca_eval_annotations_long.csv")
    out = tmp_path / "c.json"
    res = CliRunner().invoke(main, ["compare", str(data), "--keep", "annotator=weighted_alpaca_eval_gpt4_turbo",
                                    "--drop-missing", "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert "not comparable" not in res.output
    payload = json.loads(out.read_text())
    assert len(payload["systems"]) == 58 and payload["confounded"] == []
    assert all(p["comparable"] for p in payload["pairs"])
    top = payload["systems"][0]
    assert (top["system"] if "system" in top else top["object"], top["rank_low"], top["rank_high"]) == \
        ("example", 1, 1)
