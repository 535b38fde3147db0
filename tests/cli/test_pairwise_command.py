"""`evalgauge pairwise`: its options (--reference, --baseline, --human, --aspect, --bootstrap) and its JSON, which
`evalgauge plan` reads."""

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from conftest import shared_file
from evalgauge.cli import main


def test_pairwise_cli(tmp_path):
    rng = np.random.default_rng(5)
    rows = []
    for item in range(40):
        for judge in ("j1", "j2"):
            for sys_ in ("x", "y", "z"):
                for order in ("AB", "BA"):
                    p = {"x": 0.7, "y": 0.5, "z": 0.3}[sys_] + (0.08 if order == "AB" else -0.08)
                    win = rng.random() < p
                    a, b = (sys_, "base") if order == "AB" else ("base", sys_)
                    winner = ("model_a" if order == "AB" else "model_b") if win else \
                        ("model_b" if order == "AB" else "model_a")
                    rows.append((a, b, winner, f"i{item}", judge, order))
    path = tmp_path / "pw.csv"
    pd.DataFrame(rows, columns=["model_a", "model_b", "winner", "item", "judge", "order"]).to_csv(path, index=False)
    out = CliRunner().invoke(main, ["pairwise", str(path), "--reference", "base", "--baseline", "base",
                                    "--bootstrap", "20", "--json", "-"])
    assert out.exit_code == 0, out.output
    payload = json.loads(out.stdout)
    bt = {r["system"]: r for r in payload["bradley_terry"]}
    assert bt["base"]["log_strength"] == 0 and bt["x"]["log_strength"] > bt["z"]["log_strength"]
    assert {"naive_low", "tee_high"} <= set(bt["x"])
    assert payload["position_bias"]["slot_a_advantage"] > 0
    assert payload["components"]["object"] == "system" and payload["mdd95_win_rate_points"] > 0
    assert "ceiling" in payload


@pytest.mark.slow
def test_pairwise_cli_human_votes_and_components_for_plan(tmp_path):
    path = shared_file("summeval_llm_judges", "llm_pairwise_h2h.csv")
    d = pd.read_csv(path)
    better1 = d["human_mean_expert_1"] > d["human_mean_expert_2"]
    tie = d["human_mean_expert_1"] == d["human_mean_expert_2"]
    first_is_1 = (d["order"] == "original").to_numpy()
    human = np.where(tie, "tie", np.where(better1 == first_is_1, "model_a", "model_b"))
    rows = pd.DataFrame({"model_a": d["presented_A"], "model_b": d["presented_B"],
                         "winner": d["parsed_choice"].map({"A": "model_a", "B": "model_b", "C": "tie"}),
                         "item": d["doc_id"], "variant": d["aspect"], "human": human})
    csv = tmp_path / "h2h.csv"
    rows.to_csv(csv, index=False)
    comps = tmp_path / "c.json"
    out = CliRunner().invoke(main, ["pairwise", str(csv), "--bootstrap", "0", "--human", "human",
                                    "--components-json", str(comps), "--json", "-"])
    assert out.exit_code == 0, out.output
    agree = json.loads(out.stdout)["human_agreement"]
    assert agree["n"] == len(rows) and 0 < agree["overall"] < agree["ab_only"] < 1
    plan = CliRunner().invoke(main, ["plan", str(comps), "--n", "item=30,805", "--json", "-"])
    assert plan.exit_code == 0, plan.output
    rows_plan = json.loads(plan.stdout)["designs"]
    assert rows_plan[0]["mdd95"] > rows_plan[1]["mdd95"] > 0
