"""Every Eval Ever and HELM: files written by those tools (bundled, with their provenance in
tests/fixtures/importers/PROVENANCE.md) and a HELM run directory with an LLM jury written here in HELM's layout."""

from __future__ import annotations

import json
import math
from pathlib import Path

import jsonschema
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import evalgauge as eg
from conftest import FIXTURES
from evalgauge.cli import main
from evalgauge.errors import DataError
from evalgauge.io import import_files

IMPORTERS = FIXTURES / "importers"
EEE = IMPORTERS / "eee"
POPULARITY = EEE / "popularity" / "openai" / "gpt-4o-mini-2024-07-18" / "9598a50e-1671-4bef-a373-d7dd8a38fabe.json"
SCHEMA = json.loads((IMPORTERS.parent / "eee-schema" / "eval.schema.json").read_text())
INSTANCE_SCHEMA = json.loads((IMPORTERS.parent / "eee-schema" / "instance_level_eval.schema.json").read_text())
HELM_RUN = IMPORTERS / "helm" / "mmlu-subject=philosophy,method=multiple_choice_joint,model=openai_gpt2"


def _analyze(rows: pd.DataFrame, tmp_path: Path) -> dict:
    rows.to_csv(tmp_path / "rows.csv", index=False)
    out = CliRunner().invoke(main, ["analyze", str(tmp_path / "rows.csv"), "--json", "-"])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


# -- Every Eval Ever -----------------------------------------------------------------------------------------

def test_files_written_by_every_eval_ever_import_and_reproduce_its_score():
    """every-eval-ever 0.3.0's own Inspect converter wrote these from the bundled Inspect logs."""
    aggregate = json.loads(POPULARITY.read_text())
    jsonschema.validate(aggregate, SCHEMA)
    for line in POPULARITY.with_name(POPULARITY.stem + "_samples.jsonl").read_text().splitlines()[:5]:
        jsonschema.validate(json.loads(line), INSTANCE_SCHEMA)
    frame = import_files("eee", [str(EEE / "popularity")])
    assert len(frame) == 100 and set(frame["judge"]) == {"match"} and set(frame["replicate"]) == {"1"}
    assert frame["system"].unique().tolist() == ["openai/gpt-4o-mini-2024-07-18"]
    assert frame["score"].mean() == pytest.approx(aggregate["evaluation_results"][0]["score_details"]["score"])
    both = import_files("eee", [str(EEE / "popularity"), str(EEE / "security_guide")])
    assert sorted(both["task"].unique()) == ["popularity", "security_guide"] and len(both) == 103


def test_the_packages_own_reference_file_imports():
    """The frozen output of every-eval-ever's conversion skill, from its own tests (one sample)."""
    folder = EEE / "demo-source"
    aggregate = json.loads((folder / "f3a1c0de-4b2e-4c1a-9f6d-1b7e5a2c8d40.json").read_text())
    jsonschema.validate(aggregate, SCHEMA)
    frame = import_files("eee", [str(folder)])
    assert frame[["system", "task", "item", "score"]].iloc[0].tolist() == [
        "demo-org/demo-model", "demo-source.demo_bench", "demo_0001", 1.0]
    out = CliRunner().invoke(main, ["import", "eee", str(folder), "-o", "-"])
    assert "nothing varies: 1 judgment(s)" in out.output


def test_aggregate_files_alone_read_as_reported_numbers():
    frame = import_files("eee", [str(POPULARITY)])
    assert frame[["system", "item", "metric"]].iloc[0].tolist() == ["openai/gpt-4o-mini-2024-07-18", "popularity",
                                                                     "accuracy"]
    assert frame["score"].iloc[0] == 0.63 and frame["reported_se"].iloc[0] == pytest.approx(0.0485236587)
    assert "aggregate scores only" in " ".join(frame.attrs["notes"])


def test_export_writes_the_interval_into_the_aggregate_and_it_validates(tmp_path):
    out = tmp_path / "agg.json"
    before = POPULARITY.read_bytes()
    done = CliRunner().invoke(main, ["export", str(POPULARITY), "--format", "eee", "-o", str(out)])
    assert done.exit_code == 0, done.output
    assert POPULARITY.read_bytes() == before  # the input is never written
    updated = json.loads(out.read_text())
    jsonschema.validate(updated, SCHEMA)
    details = updated["evaluation_results"][0]["score_details"]
    theta = _analyze(import_files("eee", [str(EEE / "popularity")]), tmp_path)["single_run"]
    u = details["uncertainty"]
    assert u["standard_error"]["value"] == pytest.approx(theta["se"], rel=1e-12)
    assert (u["confidence_interval"]["lower"], u["confidence_interval"]["upper"]) == \
        pytest.approx((theta["low"], theta["high"]), rel=1e-12)
    assert u["num_samples"] == 100 and "item sampling only" in u["standard_error"]["method"]
    assert json.loads(details["details"]["uncertainty_before_evalgauge"])["standard_error"]["method"] == "analytic"
    same = CliRunner().invoke(main, ["export", str(POPULARITY), "--format", "eee", "-o", str(POPULARITY)])
    assert same.exit_code != 0 and POPULARITY.read_bytes() == before


def _panel_eee(tmp_path: Path) -> Path:
    """An EEE evaluation of the bundled Inspect panel log (3 graders x 3 epochs x 20 samples), written in the
    layout every-eval-ever's Inspect converter uses (one aggregate result per scorer, the epoch in metadata)."""
    log = IMPORTERS / "inspect" / "panel-0.3.285" / "panel_sys-a.eval"
    rows = import_files("inspect", [str(log)])
    folder = tmp_path / "eee"
    folder.mkdir()
    aggregate = json.loads(POPULARITY.read_text())
    template = aggregate["evaluation_results"][0]
    aggregate["model_info"] = {**aggregate["model_info"], "name": "mockllm/sys-a", "id": "mockllm/sys-a"}
    aggregate["evaluation_results"] = []
    records = []
    for judge, own in rows.groupby("judge"):
        result_id = f"{judge}:accuracy"
        aggregate["evaluation_results"].append({**template, "evaluation_result_id": result_id,
                                                "evaluation_name": "sums",
                                                "score_details": {"score": float(own["score"].mean())}})
        records += [{"schema_version": "0.3.0", "evaluation_id": aggregate["evaluation_id"],
                     "model_id": "mockllm/sys-a", "evaluation_name": "sums", "evaluation_result_id": result_id,
                     "sample_id": r.item, "interaction_type": "single_turn",
                     "input": {"raw": "", "reference": []}, "output": {"raw": [""]},
                     "answer_attribution": [], "evaluation": {"score": r.score, "is_correct": r.score == 1.0},
                     "metadata": {"epoch": str(r.replicate)}} for r in own.itertuples()]
    for r in records[:3]:
        jsonschema.validate(r, INSTANCE_SCHEMA)
    (folder / "panel.json").write_text(json.dumps(aggregate))
    (folder / "panel_samples.jsonl").write_text("\n".join(map(json.dumps, records)) + "\n")
    return folder


def test_an_eee_evaluation_with_scorers_and_epochs_gets_the_tee_interval(tmp_path):
    folder = _panel_eee(tmp_path)
    frame = import_files("eee", [str(folder / "panel_samples.jsonl")])
    assert len(frame) == 180 and frame["judge"].nunique() == 3 and frame["replicate"].nunique() == 3
    theta = _analyze(frame, tmp_path)["theta"]
    fit = eg.fit(frame).interval()
    assert (fit.low, fit.high) == pytest.approx((theta["low"], theta["high"]), rel=1e-12)
    out = tmp_path / "agg.json"
    done = CliRunner().invoke(main, ["export", str(folder / "panel.json"), "--format", "eee", "-o", str(out)])
    assert done.exit_code == 0, done.output
    updated = json.loads(out.read_text())
    jsonschema.validate(updated, SCHEMA)
    for result in updated["evaluation_results"]:  # each scorer's own mean over 20 items x 3 epochs
        judge = result["evaluation_result_id"].rsplit(":", 1)[0]
        own = frame[frame["judge"] == judge]
        u = result["score_details"]["uncertainty"]
        expected = eg.fit(own).interval()
        assert u["standard_error"]["value"] == pytest.approx(expected.se, rel=1e-12)
        assert u["standard_error"]["method"].startswith("evalgauge TEE")
        assert u["num_samples"] == 20


def test_a_result_whose_samples_do_not_average_to_its_score_is_left_as_it_was(tmp_path):
    folder = _panel_eee(tmp_path)
    aggregate = json.loads((folder / "panel.json").read_text())
    aggregate["evaluation_results"][0]["score_details"]["score"] = 0.99
    (folder / "panel.json").write_text(json.dumps(aggregate))
    out = tmp_path / "agg.json"
    done = CliRunner().invoke(main, ["export", str(folder / "panel.json"), "--format", "eee", "-o", str(out)])
    assert done.exit_code == 0 and "is not the reported score 0.99" in done.output
    first = json.loads(out.read_text())["evaluation_results"][0]
    assert "uncertainty" not in first["score_details"]


def test_a_damaged_eee_file_is_named(tmp_path):
    bad = tmp_path / "x_samples.jsonl"
    bad.write_text('{"model_id": "m"}\n')
    with pytest.raises(DataError, match="record 1 has no evaluation_name"):
        import_files("eee", [str(bad)])
    agg = tmp_path / "agg.json"
    agg.write_text('{"evaluation_results": ')
    out = CliRunner().invoke(main, ["import", "eee", str(agg), "-o", str(tmp_path / "o.csv")])
    assert out.exit_code == 2 and "agg.json" in out.output and "Traceback" not in out.output


# -- HELM ------------------------------------------------------------------------------------------------------

def test_a_real_helm_run_imports_and_its_mean_is_helms_own_statistic():
    """HELM's mmlu philosophy run of gpt2 (10 instances, 9 in the test split): the mean of the imported
    exact_match equals the run's stats.json (test split, no perturbation)."""
    frame = import_files("helm", [str(HELM_RUN)])
    assert len(frame) == 9 and frame["system"].unique().tolist() == ["openai/gpt2"]
    assert frame["task"].unique().tolist() == ["mmlu:subject=philosophy,method=multiple_choice_joint"]
    stats = json.loads((HELM_RUN / "stats.json").read_text())
    helm = next(s["mean"] for s in stats if s["name"] == {"name": "exact_match", "split": "test"})
    assert frame["score"].mean() == pytest.approx(helm)
    other = import_files("helm", [str(HELM_RUN)], metric="quasi_exact_match")
    assert len(other) == 9
    with pytest.raises(DataError, match=r"no per-instance metric 'f1'.*exact_match"):
        import_files("helm", [str(HELM_RUN)], metric="f1")


JUDGES = ("gpt", "claude", "llama")


def _jury_run(root: Path, model: str, leniency: dict[str, float], silent: tuple[str, int] | None,
              seed: int) -> Path:
    """A run directory in HELM's layout whose annotations are LLMAsJuryAnnotator's: annotations[<scenario>] =
    {"prompt_text": ..., <judge>: {<criterion>: {"score": int, "explanation": str}}}; 6 instances x 2 train
    trials, and a typo perturbation of instance 0."""
    run = root / f"wildbench-subset=v2,model={model.replace('/', '_')}"
    run.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    name = f"wildbench:subset=v2,model={model.replace('/', '_')}"
    (run / "run_spec.json").write_text(json.dumps({"name": name, "adapter_spec": {"model": model}}))
    states = []
    for trial in range(2):
        for k in range(6):
            for perturbation in ([None, {"name": "typos", "robustness": True, "prob": 0.1}] if k == 0 else [None]):
                annotation: dict = {"prompt_text": "Rate the response."}
                for judge in JUDGES:
                    if silent and (judge, k) == silent and trial == 0 and perturbation is None:
                        continue  # the member's reply was not valid JSON: HELM leaves it out
                    score = int(np.clip(np.rint(5 + k % 3 + leniency[judge] + rng.normal(0, 1.2)), 1, 10))
                    annotation[judge] = {"accuracy": {"score": score, "explanation": "..."}}
                instance = {"id": f"id{k}", "input": {"text": f"q{k}"}, "split": "test"}
                if perturbation:
                    instance["perturbation"] = perturbation
                states.append({"instance": instance, "train_trial_index": trial, "request": {"model": model},
                               "annotations": {"wildbench": annotation}})
    (run / "scenario_state.json").write_text(json.dumps({"adapter_spec": {"model": model},
                                                         "request_states": states}))
    return run


def test_a_helm_jury_imports_one_row_per_member_with_trials_and_perturbations(tmp_path):
    leniency = {"gpt": 0.0, "claude": 1.0, "llama": -1.0}
    _jury_run(tmp_path / "suite", "openai/gpt-4o", leniency, ("llama", 3), seed=1)
    _jury_run(tmp_path / "suite", "meta/llama-3-8b", leniency, None, seed=2)
    frame = import_files("helm", [str(tmp_path / "suite")])
    # 2 models x (6 instances + 1 perturbed) x 2 trials x 3 members, less the one silent annotation
    assert len(frame) == 2 * 7 * 2 * 3 - 1
    assert set(frame["judge"]) == set(JUDGES) and set(frame["criterion"]) == {"accuracy"}
    assert set(frame["variant"]) == {"train trial 0", "train trial 1"}
    assert set(frame["perturbation"]) == {"none", "typos(prob=0.1)"}
    notes = " ".join(frame.attrs["notes"])
    assert "llama annotated 1 request(s) with nothing valid" in notes and "an LLM jury of 3" in notes
    by_judge = frame.groupby("judge")["score"].mean()
    assert by_judge["claude"] > by_judge["gpt"] > by_judge["llama"]  # the members' leniency, read by name
    analysis = _analyze(frame[frame["perturbation"] == "none"].drop(columns="perturbation"), tmp_path)
    design = analysis["design"]
    assert (design["n_system"], design["n_item"], design["n_judge"], design["n_variant"]) == (2, 6, 3, 2)
    assert all(math.isfinite(row["se"]) for row in analysis["comparison"]["systems"])


def test_a_folder_without_a_helm_run_is_named(tmp_path):
    (tmp_path / "empty").mkdir()
    out = CliRunner().invoke(main, ["import", "helm", str(tmp_path / "empty"), "-o", str(tmp_path / "o.csv")])
    assert out.exit_code == 2 and "no HELM run in it" in out.output
    run = tmp_path / "r"
    run.mkdir()
    (run / "scenario_state.json").write_text("{")
    out = CliRunner().invoke(main, ["import", "helm", str(run), "-o", str(tmp_path / "o.csv")])
    assert out.exit_code == 2 and "scenario_state.json: not HELM's scenario state" in out.output
