"""Importers: turn other tools' judgment files into evalgauge's judgments table.

Each returns a long DataFrame (facet columns and ``score``, or for pairwise
sources ``model_a, model_b, winner`` plus facets) that `analyze`,
`components` and `pairwise` read. Judge output inside these files is
untrusted text: it is carried as data, never interpreted beyond the
documented score fields.

* Inspect AI eval logs (``.json``, or ``.eval`` zip archives): one row per
  sample x epoch x scorer; system = the evaluated model, item = sample id,
  replicate = epoch, judge = scorer. Score values C/I/P/N map to 1/0/0.5/0.
* lm-evaluation-harness per-sample outputs (``samples_*.jsonl`` from
  ``--log_samples``): item = doc_id, variant = the filter, score = a metric (acc).
* arena-hard-auto judgment files (``model_judgment/<judge>/<model>.jsonl``):
  pairwise, two games per question in both orders against the baseline.
* AlpacaEval annotation files (``annotations.json``): system = generator_2,
  judge = annotator, score = preference - 1 (1: preferred over the baseline).
* FastChat MT-bench judgment files: single-answer grading (``*_single.jsonl``,
  score 1-10 per question and turn) or pairwise (``*_pair.jsonl``, two games
  g1/g2 in both orders).
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from .errors import DataError

FORMATS = ("inspect", "lm-eval", "arena-hard", "alpaca-eval", "mt-bench")


def _jsonl(path: Path) -> list[dict]:
    rows = []
    with path.open(encoding="utf-8") as fh:
        for k, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}: line {k} is not JSON ({exc.msg}).") from None
    return rows


def _need(record: dict, keys: Iterable[str], path: Path, where: str) -> None:
    missing = [k for k in keys if k not in record]
    if missing:
        raise DataError(f"{path}: {where} has no {', '.join(missing)}; is this the right format?")


# -- Inspect AI -------------------------------------------------------------------

INSPECT_VALUES = {"C": 1.0, "I": 0.0, "P": 0.5, "N": 0.0}


def _inspect_value(value) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        return INSPECT_VALUES.get(value.strip().upper())
    return None


def import_inspect(paths: Iterable[str | Path]) -> pd.DataFrame:
    rows = []
    for p in map(Path, paths):
        if p.suffix == ".eval":
            with zipfile.ZipFile(p) as z:
                header = json.loads(z.read("header.json"))
                samples = [json.loads(z.read(n)) for n in z.namelist() if n.startswith("samples/")]
        else:
            try:
                log = json.loads(p.read_text(encoding="utf-8"))
            except json.JSONDecodeError as exc:
                raise DataError(f"{p}: not an Inspect log ({exc.msg}).") from None
            header, samples = log, log.get("samples") or []
        _need(header, ["eval"], p, "the log")
        model = header["eval"].get("model", p.stem)
        for s in samples:
            for scorer, score in (s.get("scores") or {}).items():
                value = _inspect_value(score.get("value") if isinstance(score, dict) else score)
                rows.append({"system": model, "item": str(s.get("id")), "replicate": int(s.get("epoch", 1)),
                             "judge": scorer, "score": value})
    if not rows:
        raise DataError("no scored samples found in the Inspect log(s).")
    return pd.DataFrame(rows)


# -- lm-evaluation-harness ---------------------------------------------------------

def import_lm_eval(paths: Iterable[str | Path], metric: str = "acc", system: str | None = None) -> pd.DataFrame:
    rows = []
    for p in map(Path, paths):
        for k, r in enumerate(_jsonl(p), start=1):
            _need(r, ["doc_id"], p, f"line {k}")
            if metric not in r:
                raise DataError(f"{p}: line {k} has no metric '{metric}' (it has "
                                f"{', '.join(x for x in r if isinstance(r[x], (int, float)) and x != 'doc_id')}); "
                                "choose one with --metric.")
            rows.append({"system": system or p.parent.name or p.stem, "item": str(r["doc_id"]),
                         "variant": str(r.get("filter", "none")), "task": p.stem.replace("samples_", ""),
                         "score": float(r[metric])})
    return pd.DataFrame(rows)


# -- arena-hard-auto ------------------------------------------------------------------

ARENA_LABELS = {"A>>B": ("model_a", True), "A>B": ("model_a", False), "A=B": ("tie", False),
                "B>A": ("model_b", False), "B>>A": ("model_b", True)}


def import_arena_hard(paths: Iterable[str | Path], baseline: str = "gpt-4-0314") -> pd.DataFrame:
    """Game 1 shows the baseline as A and the model as B; game 2 swaps them (arena-hard-auto's convention)."""
    rows = []
    for p in map(Path, paths):
        for k, r in enumerate(_jsonl(p), start=1):
            _need(r, ["question_id", "model", "games"], p, f"line {k}")
            judge = r.get("judge", p.parent.name)
            for g, game in enumerate(r["games"][:2]):
                label = (game.get("score") or "").strip()
                if label not in ARENA_LABELS:
                    continue  # an unparsed judgment: arena-hard leaves the score empty
                winner, strong = ARENA_LABELS[label]
                a, b = (baseline, r["model"]) if g == 0 else (r["model"], baseline)
                rows.append({"model_a": a, "model_b": b, "winner": winner, "strong": strong,
                             "item": str(r["question_id"]), "judge": judge, "order": "AB" if g == 0 else "BA"})
    return pd.DataFrame(rows)


# -- AlpacaEval -------------------------------------------------------------------------

def import_alpaca_eval(paths: Iterable[str | Path]) -> pd.DataFrame:
    rows = []
    for p in map(Path, paths):
        try:
            records = json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise DataError(f"{p}: not an AlpacaEval annotations file ({exc.msg}).") from None
        for k, r in enumerate(records):
            _need(r, ["instruction", "generator_2", "preference"], p, f"record {k + 1}")
            pref = r["preference"]
            rows.append({"system": r["generator_2"], "baseline": r.get("generator_1"), "item": r["instruction"],
                         "judge": r.get("annotator", p.parent.name),
                         "score": None if pref is None else float(pref) - 1.0})
    frame = pd.DataFrame(rows)
    # instructions are long texts: give them short stable ids, keep the text out of the facet
    frame["item"] = "i" + pd.factorize(frame["item"])[0].astype(str)
    return frame


# -- FastChat MT-bench ------------------------------------------------------------------

def import_mt_bench(paths: Iterable[str | Path]) -> pd.DataFrame:
    rows, pair_rows = [], []
    for p in map(Path, paths):
        for k, r in enumerate(_jsonl(p), start=1):
            judge = r.get("judge", ["", ""])
            judge_model, template = (judge[0], judge[1]) if isinstance(judge, list) and len(judge) > 1 else \
                (str(judge), "")
            item = f"{r.get('question_id')}/t{r.get('turn', 1)}"
            if "score" in r:
                score = float(r["score"])
                rows.append({"system": r["model"], "item": item, "judge": judge_model, "variant": template,
                             "score": None if score < 0 else score})  # FastChat writes -1 for unparsed
            elif "g1_winner" in r:
                for game, order in (("g1_winner", "AB"), ("g2_winner", "BA")):
                    w = r.get(game)
                    if w not in ("model_1", "model_2", "tie"):
                        continue
                    a, b = (r["model_1"], r["model_2"]) if order == "AB" else (r["model_2"], r["model_1"])
                    # FastChat maps both games' verdicts back to model_1 / model_2
                    winner = "tie" if w == "tie" else ("model_a" if r[w] == a else "model_b")
                    pair_rows.append({"model_a": a, "model_b": b, "winner": winner, "item": item,
                                      "judge": judge_model, "order": order})
            else:
                raise DataError(f"{p}: line {k} is neither a single-answer ('score') nor a pairwise "
                                "('g1_winner') MT-bench judgment.")
    if rows and pair_rows:
        raise DataError("single-answer and pairwise MT-bench judgments mixed: import them separately.")
    return pd.DataFrame(rows or pair_rows)


def import_files(fmt: str, paths: list[str], **kw) -> pd.DataFrame:
    if not paths:
        raise DataError("no input files given.")
    for p in paths:
        if not Path(p).exists():
            raise DataError(f"{p}: no such file.")
    if fmt == "inspect":
        return import_inspect(paths)
    if fmt == "lm-eval":
        return import_lm_eval(paths, kw.get("metric") or "acc", kw.get("system"))
    if fmt == "arena-hard":
        return import_arena_hard(paths, kw.get("baseline") or "gpt-4-0314")
    if fmt == "alpaca-eval":
        return import_alpaca_eval(paths)
    if fmt == "mt-bench":
        return import_mt_bench(paths)
    raise DataError(f"unknown format '{fmt}'; formats: {', '.join(FORMATS)}.")
