"""HELM run directories (``benchmark_output/runs/<suite>/<run>/``) as judgments.

A run directory holds ``run_spec.json`` (the run's name and adapter, whose ``model`` is the system),
``scenario_state.json`` (every request state: the instance, its train trial, its perturbation, the model's
result and the annotators' annotations) and ``per_instance_stats.json`` (each instance x train trial x
perturbation's metric statistics). One row per instance x train trial [x perturbation] [x judge x criterion]:

* system = the adapter's model; task = the run's name without its ``model=`` argument; item = the instance id.
* variant = the train trial: HELM draws the in-context examples anew in each trial, so trials are prompt
  variants (TEE's phi); perturbation = the perturbation's name and parameters ("none" for the original), a
  fixed facet (the perturbations were chosen).
* An LLM jury (HELM's ``LLMAsJuryAnnotator``: ``annotations[<annotator>][<judge>][<criterion>]["score"]``) gives
  one row per judge and criterion, judge = the jury member's name, criterion = the scored criterion; a member
  that returned no valid annotation for an instance has no row there, and the note counts them.
* Without a jury, score = one metric of ``per_instance_stats.json`` (``metric``; by default the first of
  :data:`DEFAULT_METRICS` the run has), on the ``test`` split (else ``valid``).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pandas as pd

from ..errors import DataError

#: the per-instance metrics taken as the score when none is named, in order
DEFAULT_METRICS = ("exact_match", "quasi_exact_match", "prefix_exact_match", "quasi_prefix_exact_match",
                   "f1_score", "rouge_l", "math_equiv", "math_equiv_chain_of_thought")
#: per-instance statistics HELM records that are bookkeeping, not a score of the answer
_BOOKKEEPING = ("num_", "finish_reason", "inference_runtime", "batch_size", "training_", "logprob", "max_prob",
                "prompt_truncated")
_RUN_FILES = ("scenario_state.json", "per_instance_stats.json")
_FLAGS = ("robustness", "fairness", "computed_on")


def run_directories(paths) -> list[Path]:
    """The run directories named, a suite folder standing for every run directory under it."""
    runs = []
    for p in map(Path, paths):
        if not p.is_dir():
            raise DataError(f"{p}: not a folder; give a HELM run directory (benchmark_output/runs/<suite>/<run>) "
                            "or the suite folder holding them.")
        if any((p / f).is_file() for f in _RUN_FILES):
            runs.append(p)
            continue
        found = sorted({f.parent for name in _RUN_FILES for f in p.rglob(name)})
        if not found:
            raise DataError(f"{p}: no HELM run in it (no scenario_state.json or per_instance_stats.json).")
        runs += found
    return runs


def _load(path: Path, what: str):
    from .files import read_json

    return read_json(path, f"HELM's {what}")


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def perturbation_name(value) -> str:
    """A perturbation as a level: its name and parameters (``typos(prob=0.1)``), "none" for the original."""
    p = _dict(value)
    if not p.get("name"):
        return "none"
    params = [f"{k}={v}" for k, v in sorted(p.items()) if k not in ("name", *_FLAGS) and v is not None]
    return f"{p['name']}({', '.join(params)})" if params else str(p["name"])


def _task(name: str) -> str:
    """``mmlu:subject=philosophy,model=openai_gpt2`` -> ``mmlu:subject=philosophy`` (the model is the system)."""
    scenario, _, args = name.partition(":")
    kept = [a for a in args.split(",") if a and not a.startswith("model=")]
    return f"{scenario}:{','.join(kept)}" if kept else scenario


def _jury_rows(states: list, cell) -> tuple[list[dict], Counter]:
    """Rows of every jury member's criterion scores; and per member, the instances it left unannotated."""
    rows, silent = [], Counter()
    members: set[str] = set()
    for state in states:
        for annotation in _dict(state.get("annotations")).values():
            for judge, scores in _dict(annotation).items():
                if isinstance(scores, dict) and any(isinstance(_dict(v).get("score"), int | float)
                                                    for v in scores.values()):
                    members.add(judge)
    for state in states:
        base = cell(state)
        seen = set()
        for annotation in _dict(state.get("annotations")).values():
            for judge, scores in _dict(annotation).items():
                if judge not in members or not isinstance(scores, dict):
                    continue
                for criterion, value in scores.items():
                    score = _dict(value).get("score")
                    if isinstance(score, int | float) and not isinstance(score, bool):
                        rows.append({**base, "judge": judge, "criterion": criterion, "score": float(score)})
                        seen.add(judge)
        for judge in members - seen:
            silent[judge] += 1
    return rows, silent


def _own(name: dict) -> bool:
    """A per-instance statistic of the instance itself: no perturbation, or computed on the perturbed instance
    (HELM names a perturbed instance's statistics with its perturbation, ``computed_on: perturbed``)."""
    perturbation = name.get("perturbation")
    return not perturbation or _dict(perturbation).get("computed_on", "perturbed") == "perturbed"


def _metric_rows(stats_path: Path, metric: str | None, cell) -> tuple[list[dict], str]:
    records = _load(stats_path, "per-instance statistics")
    if not isinstance(records, list):
        raise DataError(f"{stats_path}: not HELM's per-instance statistics (a list of instances).")
    available: dict[str, set] = {}
    for r in records:
        for s in _dict(r).get("stats") or []:
            name = _dict(_dict(s).get("name"))
            if name.get("name") and _own(name):
                available.setdefault(name["name"], set()).add(name.get("split"))
    chosen = metric or next((m for m in DEFAULT_METRICS if m in available), None)
    if chosen not in available:
        scores = sorted(m for m in available if not m.startswith(_BOOKKEEPING))
        raise DataError(f"{stats_path}: no per-instance metric '{metric or ' / '.join(DEFAULT_METRICS[:4])}'; "
                        f"this run has {', '.join(scores[:20]) or 'none'}. Name one with --metric.")
    split = "test" if "test" in available[chosen] else sorted(s for s in available[chosen] if s)[0]
    rows = []
    for r in records:
        for s in _dict(r).get("stats") or []:
            name = _dict(_dict(s).get("name"))
            if name.get("name") == chosen and name.get("split") == split and _own(name):
                mean = s.get("mean")
                if mean is None and s.get("count"):
                    mean = s.get("sum", 0) / s["count"]
                rows.append({**cell(r), "score": float(mean) if isinstance(mean, int | float) else None})
    return rows, f"{chosen} ({split} split)"


def import_helm(paths, metric: str | None = None) -> pd.DataFrame:
    """HELM run directories as one judgments table (module docstring); ``frame.attrs["notes"]`` says what was
    taken as each facet."""
    rows, notes = [], []
    for run in run_directories(paths):
        spec = _dict(_load(run / "run_spec.json", "run spec")) if (run / "run_spec.json").is_file() else {}
        name = str(spec.get("name") or run.name)
        state = _dict(_load(run / "scenario_state.json", "scenario state")) \
            if (run / "scenario_state.json").is_file() else {}
        adapter = _dict(spec.get("adapter_spec")) or _dict(state.get("adapter_spec"))
        model = adapter.get("model") or adapter.get("model_deployment") or name

        def cell(record, model=model, name=name):
            instance = _dict(record.get("instance")) if "instance" in record else record
            return {"system": str(model), "task": _task(name),
                    "item": str(instance.get("id") or record.get("instance_id")),
                    "variant": f"train trial {int(record.get('train_trial_index') or 0)}",
                    "perturbation": perturbation_name(instance.get("perturbation") or record.get("perturbation"))}

        states = [s for s in state.get("request_states") or [] if isinstance(s, dict)]
        jury, silent = _jury_rows(states, cell)
        if jury:
            rows += jury
            judges = sorted({r["judge"] for r in jury})
            text = (f"{run}: an LLM jury of {len(judges)} ({', '.join(judges)}): one row per member and "
                    f"criterion ({', '.join(sorted({r['criterion'] for r in jury}))}) from scenario_state.json")
            if silent:
                text += "; " + ", ".join(f"{j} annotated {n} request(s) with nothing valid (no rows there)"
                                         for j, n in sorted(silent.items()))
            notes.append(text + ".")
        elif (run / "per_instance_stats.json").is_file():
            metric_rows, used = _metric_rows(run / "per_instance_stats.json", metric, cell)
            rows += metric_rows
            notes.append(f"{run}: no LLM jury; score = {used} from per_instance_stats.json.")
        else:
            raise DataError(f"{run}: no jury annotations in scenario_state.json and no per_instance_stats.json; "
                            "nothing to score.")
    frame = pd.DataFrame(rows)
    if frame.empty:
        raise DataError(f"{', '.join(map(str, paths))}: no scored instances in the HELM run(s).")
    if (frame["perturbation"] == "none").all():
        frame = frame.drop(columns="perturbation")
    else:
        notes.append("perturbation: a fixed facet (the perturbations were chosen, not drawn); 'none' is the "
                     "original instance.")
    notes.append("variant = the train trial (HELM draws the in-context examples anew in each): prompt variants.")
    frame.attrs["notes"] = notes
    return frame
