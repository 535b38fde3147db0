"""Every Eval Ever (EEE, PyPI ``every-eval-ever``): its instance-level and aggregate files as judgments, and
evalgauge's interval written into an aggregate file's ``score_details.uncertainty``.

An EEE evaluation is an aggregate file (``<uuid>.json``: the model, and ``evaluation_results``, each an
evaluation's score with its metric, its LLM scoring and its uncertainty) and, for a run, an instance-level file
beside it (``<uuid>_samples.jsonl``: one record per sample and aggregate result). Read as judgments:

* instance-level records: system = ``model_id``, task = ``evaluation_name``, item = ``sample_id``, score =
  ``evaluation.score``, replicate = the record's ``metadata.epoch`` when present; judge = the scorer: the
  aggregate result's LLM judge when it names one (``metric_config.llm_scoring.judges``), else the scorer part of
  ``evaluation_result_id`` (``match`` of ``match:accuracy``). A sample is written once per aggregate result
  (``match:accuracy`` and ``match:stderr`` repeat the same score), so a repeat of the same system, task, item,
  judge and replicate is read once; a repeat with another score is refused.
* aggregate files alone (a leaderboard's reported numbers): one row per model and evaluation result: system,
  item = the evaluation (``evaluation_name``), metric, score; the file's own standard error as ``reported_se``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from ..errors import DataError

#: how a standard error evalgauge writes is described (``score_details.uncertainty.standard_error.method``)
TEE_METHOD = "evalgauge TEE (variance components: items, judges, prompt variants, repeated calls)"


def eee_files(paths) -> list[Path]:
    """The EEE files named, a folder standing for every ``.json`` and ``.jsonl`` under it."""
    from .files import files_in

    return files_in(paths, (".json", ".jsonl"), "Every Eval Ever files")


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def read_aggregate(path: Path) -> dict:
    """One aggregate file (a JSON object with ``evaluation_results``)."""
    from .files import read_json

    record = read_json(path, "an Every Eval Ever aggregate file")
    if not isinstance(record, dict) or not isinstance(record.get("evaluation_results"), list):
        raise DataError(f"{path}: not an Every Eval Ever aggregate file (a JSON object with evaluation_results).")
    return record


def records_of(path: Path) -> list[dict]:
    """The records of a JSON Lines file (instance-level records, or aggregates one per line)."""
    from .files import jsonl_records

    try:
        records = jsonl_records(path)
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text (byte {exc.start}).") from None
    if not records:
        raise DataError(f"{path}: no records; is the file empty?")
    return records


def judge_of(result: dict) -> str | None:
    judges = _dict(_dict(result.get("metric_config")).get("llm_scoring")).get("judges")
    if not isinstance(judges, list) or not judges:
        return None
    names = [str(_dict(_dict(j).get("model_info")).get("id") or _dict(_dict(j).get("model_info")).get("name"))
             for j in judges]
    return names[0] if len(names) == 1 else f"jury({', '.join(names)})"


def _scorer(result_id: str | None, name: str) -> str:
    if not result_id:
        return name
    return result_id.rsplit(":", 1)[0] if ":" in result_id else result_id


def import_eee(paths) -> pd.DataFrame:
    """EEE files as one judgments table (module docstring); notes in ``frame.attrs["notes"]``."""
    aggregates, instance_files = [], []
    for p in map(Path, paths):
        if p.suffix == ".jsonl":
            records = records_of(p)
            if "evaluation_results" in records[0]:  # aggregates written one per line
                aggregates += [(p, r) for r in records]
            else:
                instance_files.append((p, records))
        else:
            aggregates.append((p, read_aggregate(p)))
    judges, notes = {}, []
    for _, agg in aggregates:
        for result in agg.get("evaluation_results") or []:
            judge = judge_of(_dict(result))
            if judge:
                judges[(agg.get("evaluation_id"), _dict(result).get("evaluation_result_id"))] = judge
    frame = instance_rows(instance_files, judges, notes) if instance_files else _aggregate_rows(aggregates, notes)
    frame.attrs["notes"] = notes
    return frame


def instance_rows(files, judges: dict, notes: list[str]) -> pd.DataFrame:
    rows = []
    for p, records in files:
        for k, r in enumerate(records):
            missing = [f for f in ("model_id", "evaluation_name", "sample_id", "evaluation") if f not in r]
            if missing:
                raise DataError(f"{p}: record {k + 1} has no {', '.join(missing)}; is this an Every Eval Ever "
                                "instance-level file?")
            score = _dict(r["evaluation"]).get("score")
            if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
                score = None
            result_id = r.get("evaluation_result_id")
            row = {"system": str(r["model_id"]), "task": str(r["evaluation_name"]), "item": str(r["sample_id"]),
                   "judge": judges.get((r.get("evaluation_id"), result_id))
                   or _scorer(result_id, str(r["evaluation_name"])), "score": score}
            epoch = _dict(r.get("metadata")).get("epoch")
            if epoch is not None:
                row["replicate"] = str(epoch)
            rows.append(row)
    frame = pd.DataFrame(rows)
    keys = [c for c in ("system", "task", "item", "judge", "replicate") if c in frame]
    repeated = frame.duplicated(keys, keep="first")
    if repeated.any():
        same = frame.groupby(keys, dropna=False)["score"].nunique(dropna=False).le(1).all()
        if not same:
            raise DataError("Every Eval Ever: a sample has two different scores for the same system, task, judge "
                            "and epoch (two metrics of one scorer?); import one evaluation result at a time.")
        notes.append(f"{int(repeated.sum())} records repeat a sample already read (one per aggregate metric of the "
                     "same scorer, e.g. accuracy and stderr): read once.")
        frame = frame[~repeated].reset_index(drop=True)
    if "replicate" in frame and frame["replicate"].isna().any():
        frame["replicate"] = frame["replicate"].fillna("1")
    judge_kind = "the aggregate's LLM judge or the scorer of evaluation_result_id"
    notes.append(f"system = model_id, task = evaluation_name, item = sample_id, judge = {judge_kind}"
                 + (", replicate = metadata.epoch" if "replicate" in frame else "") + ".")
    return frame


def _aggregate_rows(aggregates, notes: list[str]) -> pd.DataFrame:
    rows = []
    for p, agg in aggregates:
        model = _dict(agg.get("model_info")).get("id") or _dict(agg.get("model_info")).get("name")
        if not model:
            raise DataError(f"{p}: model_info has no id or name.")
        for result in agg["evaluation_results"]:
            result = _dict(result)
            details = _dict(result.get("score_details"))
            se = _dict(_dict(details.get("uncertainty")).get("standard_error")).get("value")
            rows.append({"system": str(model), "item": str(result.get("evaluation_name")),
                         "metric": str(_dict(result.get("metric_config")).get("metric_id") or ""),
                         "score": details.get("score"),
                         "reported_se": se if isinstance(se, int | float) else None})
    notes.append("aggregate scores only (no instance-level file): one row per model and evaluation, the "
                 "evaluations as items; the files' own standard errors are in 'reported_se'. Give the "
                 "*_samples.jsonl files to analyse the samples.")
    return pd.DataFrame(rows)


def with_uncertainty(aggregate: dict, intervals: dict[str, dict]) -> dict:
    """A copy of ``aggregate`` whose evaluation results named in ``intervals`` (by ``evaluation_result_id``, else
    ``evaluation_name``) carry evalgauge's interval in ``score_details.uncertainty`` (``standard_error``,
    ``confidence_interval``, ``num_samples``); an uncertainty the file had is kept, as JSON text, in
    ``score_details.details["uncertainty_before_evalgauge"]``."""
    out = json.loads(json.dumps(aggregate))
    for result in out["evaluation_results"]:
        key = result.get("evaluation_result_id") or result.get("evaluation_name")
        interval = intervals.get(key) or intervals.get(result.get("evaluation_name"))
        if not interval:
            continue
        details = result.setdefault("score_details", {})
        if details.get("uncertainty"):
            details.setdefault("details", {})["uncertainty_before_evalgauge"] = json.dumps(details["uncertainty"])
        details["uncertainty"] = {
            "standard_error": {"value": interval["se"], "method": interval.get("method", TEE_METHOD)},
            "confidence_interval": {"lower": interval["low"], "upper": interval["high"],
                                    "confidence_level": interval["level"], "method": interval.get("ci_method",
                                                                                                  TEE_METHOD)},
            "num_samples": int(interval["n"]),
        }
    return out
