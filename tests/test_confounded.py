"""Comparisons the data cannot support (issue 25.4): two systems scored under no common level of another
column (judge, baseline, annotator, task, source file, items) differ by that column too; such pairs are
not compared, and that is said first with what to do."""

import json

import numpy as np
import pandas as pd
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
