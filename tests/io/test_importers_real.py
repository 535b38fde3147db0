"""Importers on real files written by each tool in other people's runs, reproducing the tools' own numbers.

Every test runs on the slices bundled in tests/fixtures/importers (provenance there) and again on the
originals in ../shared/data/importers when that folder is present. Expected values are those of
shared/data/importers/PROVENANCE.md (published numbers where the tool wrote them down).
"""

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from conftest import FIXTURES, SHARED_DATA
from evalgauge.cli import main
from evalgauge.errors import DataError
from evalgauge.io.importers import import_files
from evalgauge.pairwise import alpacaeval_win_rate

BUNDLED = FIXTURES / "importers"
SHARED = SHARED_DATA / "importers"
ROOTS = [pytest.param(BUNDLED, id="bundled"),
         pytest.param(SHARED, id="shared", marks=pytest.mark.skipif(
             not SHARED.is_dir(), reason="../shared/data/importers is not beside this clone"))]


@pytest.fixture(params=ROOTS)
def root(request) -> Path:
    return request.param


def test_inspect_eval_archive(root):
    frame = import_files("inspect", [root / "inspect/popularity_gpt-4o-mini.eval"])
    assert len(frame) == 100 and frame["item"].nunique() == 100
    assert set(frame["system"]) == {"openai/gpt-4o-mini"} and set(frame["judge"]) == {"match"}
    assert set(frame["replicate"]) == {1} and set(frame["task"]) == {"popularity"}
    assert frame["score"].mean() == pytest.approx(0.63, abs=1e-12)
    assert frame.attrs["notes"] == []  # a complete log: nothing to say


def test_inspect_json_log_with_a_sample_limit(root):
    frame = import_files("inspect", [root / "inspect/security-guide_gpt-4o-mini.json"])
    assert len(frame) == 3 and sorted(frame["item"]) == ["1", "2", "3"] and frame["score"].mean() == 1.0
    assert any("3 of the task's 16 samples" in n for n in frame.attrs["notes"])


def test_inspect_tasks_are_not_merged(root):
    frame = import_files("inspect", [root / "inspect/popularity_gpt-4o-mini.eval",
                                     root / "inspect/security-guide_gpt-4o-mini.json"])
    # sample ids 1-3 exist in both tasks: they are different items
    assert frame["item"].nunique() == 103 and "security_guide/1" in set(frame["item"])
    assert any("2 tasks" in n for n in frame.attrs["notes"])


def test_lm_eval_asdiv_equals_its_results_json(root):
    folder = root / "lm-eval/meta-llama__Meta-Llama-3-8B-Instruct"
    frame = import_files("lm-eval", [folder / "samples_asdiv_2024-08-21T03-44-09.494230.jsonl"])
    published = json.loads((folder / "results_2024-08-21T03-44-09.494230.json").read_text())["results"]["asdiv"]
    assert len(frame) == 50 and frame["item"].nunique() == 50 and set(frame["variant"]) == {"none"}
    assert set(frame["task"]) == {"asdiv"}  # not asdiv_2024-08-21T03-44-09.494230
    assert set(frame["system"]) == {"meta-llama/Meta-Llama-3-8B-Instruct"}  # from the results json
    assert frame["score"].mean() == pytest.approx(published["acc,none"], abs=1e-12)
    se = frame["score"].std(ddof=1) / math.sqrt(len(frame))
    assert se == pytest.approx(published["acc_stderr,none"], rel=1e-12)


@pytest.mark.parametrize("metric", ["bleu_acc", "rouge1_acc", "rouge2_acc", "rougeL_acc", "bleu_max", "rouge1_max",
                                    "bleu_diff"])
def test_lm_eval_truthfulqa_every_metric_equals_its_results_json(root, metric):
    folder = root / "lm-eval/results"
    frame = import_files("lm-eval", [folder / "samples_truthfulqa_gen_2025-05-31T14-30-51.983293.jsonl"],
                         metric=metric)
    res = json.loads((folder / "truthfulqa_gen_neo125_2025-05-31T14-30-51.983293.json").read_text())
    assert len(frame) == 20 and set(frame["task"]) == {"truthfulqa_gen"}
    # the folder is called results/: the model comes from the results json of the same run
    assert set(frame["system"]) == {"EleutherAI/gpt-neo-125M"}
    assert frame["score"].mean() == pytest.approx(res["results"]["truthfulqa_gen"][f"{metric},none"], rel=1e-12)


def test_lm_eval_without_a_model_name_asks_for_system(tmp_path, root):
    src = root / "lm-eval/results/samples_truthfulqa_gen_2025-05-31T14-30-51.983293.jsonl"
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / src.name).write_bytes(src.read_bytes())  # no results json beside it
    with pytest.raises(DataError, match="give it with --system"):
        import_files("lm-eval", [folder / src.name], metric="bleu_acc")
    frame = import_files("lm-eval", [folder / src.name], metric="bleu_acc", system="neo-125m")
    assert set(frame["system"]) == {"neo-125m"}


def test_lm_eval_list_metric_and_infinity_are_named(tmp_path):
    path = tmp_path / "m" / "samples_t_2024-01-01T00-00-00.000000.jsonl"
    path.parent.mkdir()
    path.write_text(json.dumps({"doc_id": 0, "micro_f1": [1, 0], "acc": 1}) + "\n"
                    + '{"doc_id": 1, "micro_f1": [0, 1], "acc": Infinity}\n')
    with pytest.raises(DataError, match=r"line 1: 'micro_f1' is a list"):
        import_files("lm-eval", [path], metric="micro_f1", system="m")
    frame = import_files("lm-eval", [path], system="m")
    assert frame["score"].isna().sum() == 1 and any("non-finite" in n and "lines 2" in n for n in frame.attrs["notes"])


def test_arena_hard_reproduces_its_own_score_and_the_unweighted_one(root, tmp_path):
    path = root / "arena-hard/gpt-3.5-turbo-0125/Nexusflow__Athene-V2-Chat.jsonl"
    with pytest.raises(DataError, match="--baseline"):
        import_files("arena-hard", [path])
    frame = import_files("arena-hard", [path], baseline="gpt-4-0314")
    # 95 of the 96 questions: one has both games unparsed
    assert len(frame) == 190 and (frame["order"] == "AB").sum() == 95 and frame["item"].nunique() == 95
    model = "Nexusflow__Athene-V2-Chat"
    won = np.where(frame["winner"] == "tie", 0.5, np.where(
        ((frame["winner"] == "model_a") & (frame["model_a"] == model))
        | ((frame["winner"] == "model_b") & (frame["model_b"] == model)), 1.0, 0.0))
    assert won.mean() == pytest.approx(0.0394736842, abs=1e-10)  # unweighted (tie = 1/2)
    assert (won * frame["weight"]).sum() / frame["weight"].sum() == pytest.approx(0.023, abs=1e-12)
    out = tmp_path / "a.csv"
    CliRunner().invoke(main, ["import", "arena-hard", str(path), "--baseline", "gpt-4-0314", "-o", str(out)])
    res = CliRunner().invoke(main, ["pairwise", str(out), "--bootstrap", "0", "--json", "-"])
    assert res.exit_code == 0, res.output
    share = {r["system"]: r["win_share"] for r in json.loads(res.stdout)["weighted_win_share"]}
    assert share[model] == pytest.approx(0.023, abs=1e-12)
    flat = import_files("arena-hard", [path], baseline="gpt-4-0314", unweighted=True)
    assert set(flat["weight"]) == {1}


def test_alpaca_eval_reproduces_the_published_leaderboard_row(root):
    frame = import_files("alpaca-eval", [root / "alpaca-eval/alpaca-7b/alpaca_eval_gpt4/annotations.json"])
    assert len(frame) == 805 and set(frame["system"]) == {"alpaca-7b"} and set(frame["judge"]) == {"alpaca_eval_gpt4"}
    assert set(frame["score"]) == {0.0, 0.5, 1.0} and (frame["score"] == 0.5).sum() == 16
    win, se = alpacaeval_win_rate(frame["score"].to_numpy() + 1.0)
    assert abs(win - 26.459627329192543) < 1e-6 and abs(se - 1.535711469748) < 1e-6


def test_alpaca_eval_weighted_slice(root):
    path = root / "alpaca-eval/gpt-3.5-turbo-1106/weighted_alpaca_eval_gpt4_turbo/annotations.json"
    frame = import_files("alpaca-eval", [path])
    win, se = alpacaeval_win_rate(frame["score"].to_numpy() + 1.0)
    assert len(frame) == 279 and abs(win - 6.2082033031) < 1e-6 and abs(se - 1.2326862269) < 1e-6


def test_alpaca_eval_annotator_from_the_records(tmp_path, root):
    src = root / "alpaca-eval/alpaca-7b/alpaca_eval_gpt4/annotations.json"
    other = tmp_path / "alpaca-7b" / "my_annotator_folder" / "annotations.json"
    other.parent.mkdir(parents=True)
    other.write_bytes(src.read_bytes())
    frame = import_files("alpaca-eval", [other])
    assert set(frame["judge"]) == {"alpaca_eval_gpt4"}
    assert any("not the folder 'my_annotator_folder'" in n for n in frame.attrs["notes"])


def test_mt_bench_single(root):
    frame = import_files("mt-bench", [root / "mt-bench/phi-3-dpo_stefanstud/gpt-4_single.jsonl"])
    assert len(frame) == 160 and frame["item"].nunique() == 160 and set(frame["judge"]) == {"gpt-4"}
    assert frame["score"].mean() == pytest.approx(8.2, abs=1e-12)
    turn = frame["item"].str.endswith("/t1")
    assert frame.loc[turn, "score"].mean() == pytest.approx(8.3625) and frame.loc[~turn, "score"].mean() == \
        pytest.approx(8.0375)
    assert "variant" not in frame and frame["template"].nunique() == 4  # nested in the item, not crossed


def test_mt_bench_pair_and_its_analysis(root, tmp_path):
    path = root / "mt-bench/phi-3-dpo_stefanstud/gpt-4_pair.jsonl"
    frame = import_files("mt-bench", [path])
    assert len(frame) == 147 and (frame["order"] == "AB").sum() == 74 and frame["item"].nunique() == 74
    won = {m: float(np.where(frame["winner"] == "tie", 0.5, np.where(
        ((frame["winner"] == "model_a") & (frame["model_a"] == m))
        | ((frame["winner"] == "model_b") & (frame["model_b"] == m)), 1.0, 0.0)).mean()) for m in ("phi-3",
                                                                                                 "phi-3-dpo")}
    assert won["phi-3"] == pytest.approx(0.4931972789, abs=1e-10)
    assert won["phi-3-dpo"] == pytest.approx(0.5068027211, abs=1e-10)
    assert (frame["winner"] == "model_a").sum() == 79
    assert any("one presentation order only" in n for n in frame.attrs["notes"])
    out = tmp_path / "p.csv"
    frame.to_csv(out, index=False)
    res = CliRunner().invoke(main, ["pairwise", str(out), "--bootstrap", "20", "--json", "-"])
    assert res.exit_code == 0, res.output
    json.loads(res.stdout)


def test_mt_bench_repeated_judgments_are_reported_and_analysed(root, tmp_path):
    src = (root / "mt-bench/phi-3-dpo_stefanstud/gpt-4_pair.jsonl").read_text()
    path = tmp_path / "gpt-4_pair.jsonl"
    path.write_text(src + "".join(src.splitlines(keepends=True)[:20]))  # FastChat appended a rerun
    frame = import_files("mt-bench", [path])
    assert len(frame) == 147 and any("repeated" in n and "the last of each was kept" in n
                                     for n in frame.attrs["notes"])
    out = tmp_path / "p.csv"
    frame.to_csv(out, index=False)
    res = CliRunner().invoke(main, ["pairwise", str(out), "--bootstrap", "0"])
    assert res.exit_code == 0, res.output


def test_import_then_the_suggested_command_works(root, tmp_path):
    out = tmp_path / "ae.csv"
    res = CliRunner().invoke(main, ["import", "alpaca-eval",
                                    str(root / "alpaca-eval/alpaca-7b/alpaca_eval_gpt4/annotations.json"), "-o",
                                    str(out)])
    assert res.exit_code == 0
    # one system, one judge, one run: the suggested command gives its interval and says what it cannot measure
    assert f"evalgauge analyze {out}" in res.output and "one run" in res.output
    single = CliRunner().invoke(main, ["analyze", str(out)])
    assert single.exit_code == 0 and "One run: mean 0.2646 over 805" in single.output
    # two files of one system under two judges: analyze works, the one-level system facet left out with a note
    one = pd.read_csv(out)
    two = pd.concat([one, one.assign(judge="other", score=1 - one["score"])])
    both = tmp_path / "two.csv"
    two.to_csv(both, index=False)
    again = CliRunner().invoke(main, ["analyze", str(both)])
    assert again.exit_code == 0, again.output
    assert "facet 'system' has one level" in again.output.replace("\n", " ")


def test_wide_triviaqa_layout(tmp_path):
    frame = pd.DataFrame({"exam_model": ["a", "a", "b", "b"], "question_id": ["q1", "q2", "q1", "q2"],
                          "gpt4_judge": [1, 0, 1, 1], "llama_judge": [1, "", 0, 1], "note": ["x"] * 4})
    path = tmp_path / "wide.csv"
    frame.to_csv(path, index=False)
    out = tmp_path / "long.csv"
    res = CliRunner().invoke(main, ["import", "wide", str(path), "--id", "system=exam_model", "--id",
                                    "item=question_id", "--columns", "judge=*_judge", "-o", str(out)])
    assert res.exit_code == 0, res.output
    long = pd.read_csv(out)
    assert len(long) == 8 and set(long["judge"]) == {"gpt4_judge", "llama_judge"} and long["score"].isna().sum() == 1
    frame["gpt4_judge"] = frame["gpt4_judge"].astype(object)
    frame.loc[1, "gpt4_judge"] = "yes"
    frame.to_csv(path, index=False)
    bad = CliRunner().invoke(main, ["import", "wide", str(path), "--id", "system=exam_model", "--id",
                                    "item=question_id", "--columns", "judge=*_judge", "-o", str(out)])
    assert bad.exit_code == 2 and "row 2, column 'gpt4_judge'" in bad.output
