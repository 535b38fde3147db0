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
import math
import re
import zipfile
import zlib
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import DataError

FORMATS = ("inspect", "lm-eval", "arena-hard", "alpaca-eval", "mt-bench", "wide", "helm", "eee")


def _jsonl(path: Path) -> list[dict]:
    from .files import jsonl_records

    try:
        rows = jsonl_records(path)
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text (byte {exc.start}); these tools write UTF-8, so the file may be "
                        "damaged or not this format.") from None
    if not rows:
        raise DataError(f"{path}: no records; is the file empty?")
    return rows


def _json(path: Path, what: str):
    from .files import read_json

    return read_json(path, what)


#: where an importer is (file, record), for the message when a record has a shape the format does not allow
_CURSOR: dict[str, object] = {}


def _at(path: Path, where: str) -> None:
    _CURSOR["path"], _CURSOR["where"] = path, where


def _plain(exc: BaseException) -> str:
    """What went wrong, in words, without a Python exception name."""
    if isinstance(exc, KeyError):
        return f"no field {exc.args[0]!r}" if exc.args else "a field is missing"
    if isinstance(exc, IndexError):
        return "a list is shorter than expected"
    if isinstance(exc, zipfile.BadZipFile):
        return "not a zip archive, or a truncated one"
    text = str(exc).strip().splitlines()
    return (text[0] if text else "a value of the wrong type")[:120]


def _need(record: dict, keys: Iterable[str], path: Path, where: str) -> None:
    if not isinstance(record, dict):
        raise DataError(f"{path}: {where} is not a JSON object; is this the right format?")
    missing = [k for k in keys if k not in record]
    if missing:
        raise DataError(f"{path}: {where} has no {', '.join(missing)}; is this the right format?")


def _number(value, path: Path, where: str, field: str) -> float | None:
    """A per-record number; None for null; a message naming the field for anything else."""
    if value is None:
        return None
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    kind = "a list" if isinstance(value, list) else type(value).__name__
    raise DataError(f"{path}: {where}: '{field}' is {kind} ({str(value)[:40]}), not a number; choose a per-sample "
                    "numeric field.")


def _with_notes(frame: pd.DataFrame, notes: list[str]) -> pd.DataFrame:
    frame.attrs["notes"] = list(frame.attrs.get("notes", [])) + notes
    return frame


def _nest_in_task(frame: pd.DataFrame) -> pd.DataFrame:
    """Item ids restart in every task (Inspect ids at 1, lm-eval doc ids at 0): with several tasks, an
    item is named by its task too, so items of different tasks are never merged."""
    if "task" in frame and frame["task"].nunique() > 1:
        frame["item"] = frame["task"].astype(str) + "/" + frame["item"].astype(str)
        return _with_notes(frame, [f"{frame['task'].nunique()} tasks: items are named task/id, since ids restart "
                                   "in every task; analyse one task at a time or nest item in task "
                                   "(--facets task,item,... --nest task/item)."])
    return frame


# -- Inspect AI -------------------------------------------------------------------

def import_inspect(paths: Iterable[str | Path]) -> pd.DataFrame:
    """Inspect logs as one table (see :mod:`evalgauge.io.inspect_logs` for what becomes each facet)."""
    from . import inspect_logs as il

    paths = il.log_files(paths)
    rows, notes = [], []
    for p in paths:
        _at(p, "the log header")
        header, samples = il.read_log(p, _plain)
        _need(header, ["eval"], p, "the log")
        ev = header["eval"] if isinstance(header["eval"], dict) else {}
        model = str(ev.get("model", p.stem))
        task = str(ev.get("task", p.stem))
        temperature = il.temperature_of(header, ev)
        members = il.panel_members(ev)
        tallies: dict[str, il.PanelTally] = {}
        n_before = len(rows)
        for k, s in enumerate(samples):
            _at(p, f"sample {k + 1}")
            if not isinstance(s, dict):
                raise DataError(f"{p}: sample {k + 1} is not a JSON object.")
            epoch = _epoch(s.get("epoch", 1), p, k)
            cell = {"system": model, "task": task, "variant": il.variant_of(s.get("metadata"), ev.get("metadata")),
                    "temperature": temperature, "item": str(s.get("id")), "replicate": epoch}
            for scorer, score in (s.get("scores") or {}).items():
                raw = score.get("value") if isinstance(score, dict) else score
                panel = isinstance(raw, list) or scorer in members
                if not panel:
                    votes = il.reduced_panel_votes(s, scorer, raw)
                    if votes is None:
                        rows.append({**cell, "judge": scorer, "score": il.inspect_value(raw)})
                    else:
                        tallies.setdefault(scorer, il.PanelTally(sorted(j for j, _ in votes))).reduced += 1
                        rows += [{**cell, "judge": judge, "score": value} for judge, value in votes]
                    continue
                tally = tallies.setdefault(scorer, il.PanelTally(members.get(scorer) or []))
                votes = il.panel_votes(s, scorer, score, members.get(scorer), tally)
                if votes is not None:
                    rows += [{**cell, "judge": judge, "score": value} for judge, value in votes]
                elif isinstance(raw, list):
                    tally.left_out += 1
                else:  # a reduced verdict whose votes were not recorded: the panel as one judge, as before
                    tally.as_verdict += 1
                    rows.append({**cell, "judge": scorer, "score": il.inspect_value(raw)})
        notes += _inspect_completeness(p, header, ev, samples, len(rows) - n_before)
        for scorer, t in tallies.items():
            if t.reduced:  # samples of an unpacked panel whose replies did not match its value keep the value
                t.as_verdict += sum(r["judge"] == scorer for r in rows[n_before:])
            notes.append(_panel_note(p, scorer, t))
    if not rows:
        why = f" ({notes[-1].split(': ', 1)[1]})" if notes and "panel" in notes[-1] else ""
        raise DataError(f"{', '.join(map(str, paths))}: no scored samples found in the Inspect log(s){why}.")
    frame = pd.DataFrame(rows)
    for facet in ("variant", "temperature"):
        if frame[facet].isna().all():
            frame = frame.drop(columns=facet)
        elif frame[facet].isna().any():
            notes.append(f"{facet}: {int(frame[facet].isna().sum())} rows come from logs that record none; their "
                         f"{facet} is 'unrecorded'.")
            frame[facet] = frame[facet].astype(object).where(frame[facet].notna(), "unrecorded")
    return _nest_in_task(_with_notes(frame, notes))


def _panel_note(p: Path, scorer: str, t) -> str:
    """What was taken as each grader of a panel scorer, and what could not be."""
    who = f" ({', '.join(t.members)})" if t.members else ""
    read = []
    if t.reduced:
        read.append(f"{t.reduced} samples whose one recorded value reduces the graders' votes (a multi_scorer "
                    "with mode, mean, ...): each grader's own vote, from its reply, instead of the reduced value")
    if t.by_reply:
        read.append(f"{t.by_reply} samples by the grade in each grader's own reply")
    if t.by_position:
        read.append(f"{t.by_position} by position (every grader voted, so Inspect kept the scorers' order)")
    text = f"{p}: scorer '{scorer}' is a judge panel{who}: one row per grader, judge = the grader's model; " + (
        "; ".join(read) if read else "no sample could be read")
    if t.as_verdict:
        text += (f"; {t.as_verdict} samples' reduced panel value imported as one judge '{scorer}' (no votes per "
                 "grader recorded, or the graders' replies do not reduce to it)")
    if t.silent:
        text += f"; {t.silent} graders' replies carried no grade (rows with no score)"
    if t.left_out:
        text += (f"; {t.left_out} samples left out: a grader returned nothing, so Inspect dropped its vote "
                 "before collecting, and no vote says which grader gave it (a list position is no judge). "
                 "Log the graders' calls (the default) or score each grader as its own scorer (scorer=[...])")
    return text + "."


def _epoch(value, p: Path, k: int) -> int:
    """A sample's epoch: a whole number from 1 (1.5 is not an epoch; 1e400 is no number at all)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value != int(value) or value < 1:
        raise DataError(f"{p}: sample {k + 1} has epoch {str(value)[:40]!r}, not a whole number from 1; the log "
                        "was changed or damaged.")
    return int(value)


def _dict_get(record, *keys):
    for key in keys:
        record = record.get(key) if isinstance(record, dict) else None
    return record


def _printable(text: str) -> str:
    """Untrusted text for a note: control characters (terminal escapes among them) as spaces."""
    return "".join(c if c.isprintable() else " " for c in text)


def _inspect_completeness(p: Path, header: dict, ev: dict, samples: list, n_rows: int) -> list[str]:
    """How many samples of how many: a cancelled or partial log, or a run with a sample limit."""
    status = header.get("status", "unknown")
    results = header.get("results") if isinstance(header.get("results"), dict) else {}
    dataset = ev.get("dataset") if isinstance(ev.get("dataset"), dict) else {}
    epochs = (ev.get("config") or {}).get("epochs", 1) if isinstance(ev.get("config"), dict) else 1
    ids = dataset.get("sample_ids")
    planned = results.get("total_samples") or (len(ids) * (epochs or 1) if isinstance(ids, list) else None)
    notes = []
    error = _dict_get(header, "error", "message")
    said = f" (Inspect: {_printable(error.splitlines()[0])[:160]})" if isinstance(error, str) and error else ""
    if planned and len(samples) >= planned and status != "success":
        notes.append(f"{p}: log status '{status}'{said}, but all {planned} samples are in the log and were "
                     "read: the error came after scoring.")
    elif status != "success" or (planned and len(samples) < planned):
        notes.append(f"{p}: log status '{status}'{said}: {len(samples)} of {planned or 'an unknown number of'} "
                     "samples were scored; the rest are missing, not failed.")
    in_dataset = dataset.get("samples")
    if isinstance(ids, list) and isinstance(in_dataset, int) and len(ids) < in_dataset:
        notes.append(f"{p}: {len(ids)} of the task's {in_dataset} samples were run (a sample limit).")
    return notes


# -- lm-evaluation-harness ---------------------------------------------------------

_TIMESTAMP = re.compile(r"_\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}(\.\d+)?$")


def lm_eval_task(path: Path) -> tuple[str, str]:
    """(task, timestamp) from ``samples_<task>_<timestamp>.jsonl``: the timestamp is the run, not the task."""
    stem = path.stem.removeprefix("samples_")
    m = _TIMESTAMP.search(stem)
    return (stem[:m.start()], stem[m.start() + 1:]) if m else (stem, "")


def _lm_eval_model(path: Path, stamp: str, records: list[dict]) -> str | None:
    """The model an lm-eval run evaluated: its results json (same timestamp) or the samples' metadata."""
    if stamp:
        for candidate in sorted(path.parent.glob(f"*{stamp}*.json")):
            try:
                res = json.loads(candidate.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError, UnicodeDecodeError):
                continue
            if isinstance(res, dict) and res.get("model_name"):
                return str(res["model_name"])
            args = (res.get("config") or {}).get("model_args") if isinstance(res, dict) else None
            if isinstance(args, str) and "pretrained=" in args:
                return args.split("pretrained=", 1)[1].split(",", 1)[0]
    meta = records[0].get("model") or records[0].get("model_name")
    return str(meta) if isinstance(meta, str) and meta else None


GENERIC_FOLDERS = {"results", "output", "outputs", "samples", "logs", "eval", "evals", ".", ""}


def import_lm_eval(paths: Iterable[str | Path], metric: str = "acc", system: str | None = None) -> pd.DataFrame:
    rows, notes = [], []
    for p in map(Path, paths):
        records = _jsonl(p)
        task, stamp = lm_eval_task(p)
        name = system or _lm_eval_model(p, stamp, records)
        if name is None:
            if p.parent.name.lower() in GENERIC_FOLDERS:
                raise DataError(f"{p}: the model's name is not in the file, its results json or its folder "
                                f"('{p.parent.name}'); give it with --system NAME.")
            name = p.parent.name
        bad = []
        for k, r in enumerate(records, start=1):
            _at(p, f"line {k}")
            _need(r, ["doc_id"], p, f"line {k}")
            if metric not in r:
                numeric = [x for x in r if isinstance(r[x], int | float) and not isinstance(r[x], bool)
                           and x != "doc_id"]
                raise DataError(f"{p}: line {k} has no metric '{metric}' (per-sample numbers there: "
                                f"{', '.join(numeric) or 'none'}); choose one with --metric.")
            value = _number(r[metric], p, f"line {k}", metric)
            if value is not None and not math.isfinite(value):
                bad.append(k)
                value = None
            rows.append({"system": name, "task": task, "item": str(r["doc_id"]),
                         "variant": str(r.get("filter", "none")), "score": value})
        if bad:
            notes.append(f"{p}: {len(bad)} non-finite '{metric}' value(s) (lines {', '.join(map(str, bad[:5]))}"
                         f"{' ...' if len(bad) > 5 else ''}) imported as missing scores.")
    return _nest_in_task(_with_notes(pd.DataFrame(rows), notes))


# -- arena-hard-auto ------------------------------------------------------------------

ARENA_LABELS = {"A>>B": ("model_a", True), "A>B": ("model_a", False), "A=B": ("tie", False),
                "B>A": ("model_b", False), "B>>A": ("model_b", True)}


def import_arena_hard(paths: Iterable[str | Path], baseline: str | None = None, weighted: bool = True) -> pd.DataFrame:
    """Game 1 shows the baseline as A and the model as B; game 2 swaps them (arena-hard-auto's convention).

    ``weight`` is arena-hard's own: a decisive (``>>``) verdict counts as 3 battles (``weighted=False``:
    every verdict once). The baseline comes from the records (``baseline``) or the user: the v0.1 files
    do not name it.
    """
    paths = list(paths)
    rows, notes, dropped = [], [], 0
    for p in map(Path, paths):
        for k, r in enumerate(_jsonl(p), start=1):
            _at(p, f"line {k}")
            _need(r, ["question_id", "model", "games"], p, f"line {k}")
            base = r.get("baseline") or baseline
            if not base:
                raise DataError(f"{p}: the records do not name the baseline model; give it with --baseline "
                                "(arena-hard v0.1's baseline is gpt-4-0314).")
            if baseline and r.get("baseline") and r["baseline"] != baseline:
                raise DataError(f"{p}: line {k} names baseline '{r['baseline']}', not --baseline '{baseline}'.")
            judge = str(r.get("judge") or p.parent.name)
            games = r["games"] if isinstance(r["games"], list) else []
            for g, game in enumerate(games[:2]):
                label = (game.get("score") or "").strip() if isinstance(game, dict) else ""
                if label not in ARENA_LABELS:
                    dropped += 1
                    continue  # an unparsed judgment: arena-hard leaves the score empty
                winner, strong = ARENA_LABELS[label]
                a, b = (base, str(r["model"])) if g == 0 else (str(r["model"]), base)
                rows.append({"model_a": a, "model_b": b, "winner": winner, "strong": strong,
                             "weight": 3 if strong and weighted else 1,
                             "item": str(r["question_id"]), "judge": judge, "order": "AB" if g == 0 else "BA"})
    if not rows:
        raise DataError(f"{', '.join(map(str, paths))}: no parsed arena-hard verdicts in the file(s).")
    if dropped:
        notes.append(f"{dropped} game(s) without a parsed verdict were left out.")
    notes.append("weight: arena-hard's own scoring, a >> verdict counts as 3 battles" if weighted else
                 "weight: every verdict counts once (--unweighted); arena-hard's own score counts >> as 3.")
    return _with_notes(pd.DataFrame(rows), notes)


# -- AlpacaEval -------------------------------------------------------------------------

def import_alpaca_eval(paths: Iterable[str | Path]) -> pd.DataFrame:
    """score = preference - 1 after AlpacaEval's own mapping of its legacy draw code 0 to 1.5 (a draw)."""
    rows, notes = [], []
    for p in map(Path, paths):
        records = _json(p, "an AlpacaEval annotations file")
        if not isinstance(records, list):
            raise DataError(f"{p}: not an AlpacaEval annotations file (a JSON list of records).")
        names = set()
        for k, r in enumerate(records):
            _at(p, f"record {k + 1}")
            _need(r, ["instruction", "generator_2", "preference"], p, f"record {k + 1}")
            pref = _number(r["preference"], p, f"record {k + 1}", "preference")
            if pref is not None and not math.isfinite(pref):
                raise DataError(f"{p}: record {k + 1}: preference is {pref}; it must lie in [1, 2] (or 0: a draw).")
            if pref == 0:
                pref = 1.5  # AlpacaEval's legacy draw code (alpaca_eval.metrics.helpers maps 0 to 1.5)
            if pref is not None and not 1 <= pref <= 2:
                raise DataError(f"{p}: record {k + 1}: preference {pref} is outside [1, 2] (0 and 1.5 are draws).")
            judge = str(r.get("annotator") or p.parent.name)
            names.add(judge)
            rows.append({"system": str(r["generator_2"]), "baseline": r.get("generator_1"),
                         "item": str(r["instruction"]), "judge": judge,
                         "score": None if pref is None else pref - 1.0})
        if names - {p.parent.name} and p.parent.name not in ("", "."):
            notes.append(f"{p}: the records name annotator(s) {', '.join(sorted(names))}, not the folder "
                         f"'{p.parent.name}'; the records' names are kept.")
    frame = pd.DataFrame(rows)
    # instructions are long texts: give them short stable ids, keep the text out of the facet
    frame["item"] = "i" + pd.factorize(frame["item"])[0].astype(str)
    return _with_notes(frame, notes)


# -- FastChat MT-bench ------------------------------------------------------------------

def import_mt_bench(paths: Iterable[str | Path]) -> pd.DataFrame:
    """The judge's prompt template is fixed by the question's category and the turn, so it is nested in the
    item: it is kept as ``template`` (not a crossed facet). Judgments FastChat appended again for the same
    question, turn, model(s) and judge are repeats: the last is kept, and the note says how many."""
    paths = list(paths)
    rows, pair_rows = [], []
    for p in map(Path, paths):
        for k, r in enumerate(_jsonl(p), start=1):
            _at(p, f"line {k}")
            judge = r.get("judge", ["", ""])
            judge_model, template = (str(judge[0]), str(judge[1])) if isinstance(judge, list) and len(judge) > 1 \
                else (str(judge), "")
            item = f"{r.get('question_id')}/t{r.get('turn', 1)}"
            if "score" in r:
                _need(r, ["model"], p, f"line {k}")
                score = _number(r["score"], p, f"line {k}", "score")
                rows.append({"system": str(r["model"]), "item": item, "judge": judge_model, "template": template,
                             "score": None if score is None or score < 0 else score})  # -1: unparsed
            elif "g1_winner" in r:
                _need(r, ["model_1", "model_2"], p, f"line {k}")
                for game, order in (("g1_winner", "AB"), ("g2_winner", "BA")):
                    w = r.get(game)
                    if w not in ("model_1", "model_2", "tie"):
                        continue
                    a, b = (r["model_1"], r["model_2"]) if order == "AB" else (r["model_2"], r["model_1"])
                    # FastChat maps both games' verdicts back to model_1 / model_2
                    winner = "tie" if w == "tie" else ("model_a" if r[w] == a else "model_b")
                    pair_rows.append({"model_a": str(a), "model_b": str(b), "winner": winner, "item": item,
                                      "judge": judge_model, "template": template, "order": order})
            else:
                raise DataError(f"{p}: line {k} is neither a single-answer ('score') nor a pairwise "
                                "('g1_winner') MT-bench judgment.")
    if rows and pair_rows:
        raise DataError(f"{', '.join(map(str, paths))}: single-answer and pairwise MT-bench judgments mixed: import "
                        "them separately.")
    frame = pd.DataFrame(rows or pair_rows)
    keys = ["system", "item", "judge"] if rows else ["model_a", "model_b", "item", "judge", "order"]
    repeats = frame.duplicated(keys, keep="last")
    notes = []
    if repeats.any():
        notes.append(f"{int(repeats.sum())} judgment(s) repeated for the same {', '.join(keys)} (FastChat appends "
                     "reruns): the last of each was kept.")
        frame = frame.loc[~repeats].reset_index(drop=True)
    if pair_rows:
        single = int((frame.groupby("item")["order"].nunique() < 2).sum())
        if single:
            notes.append(f"{single} question(s) have a valid game in one presentation order only.")
    return _with_notes(frame, notes)


# -- one score column per judge ------------------------------------------------------------

def import_wide(paths: Iterable[str | Path], ids: dict[str, str], columns: tuple[str, list[str]]) -> pd.DataFrame:
    """A wide table (one score column per judge, as in Thakur et al.'s TriviaQA file) made long.

    ``ids`` maps a facet to the column that holds it (``{"system": "exam_model", "item": "question_id"}``);
    ``columns`` is (facet, [column, ...]): each named column (or glob) becomes a level of that facet.
    """
    from fnmatch import fnmatch

    from .readers import read_judgments

    facet, patterns = columns
    parts = []
    for p in map(Path, paths):
        frame = read_judgments(p).frame
        for name, col in ids.items():
            if col not in frame:
                raise DataError(f"{p}: no column '{col}' for --id {name}={col}; the columns are: "
                                f"{', '.join(map(str, frame.columns))}.")
        chosen = [c for c in frame.columns if any(c == pat or fnmatch(str(c), pat) for pat in patterns)]
        missing = [pat for pat in patterns if not any(c == pat or fnmatch(str(c), pat) for c in frame.columns)]
        if missing or not chosen:
            raise DataError(f"{p}: no column matches {', '.join(missing or patterns)} (--columns); the columns "
                            f"are: {', '.join(map(str, frame.columns))}.")
        long = frame[list(ids.values()) + chosen].melt(id_vars=list(ids.values()), value_vars=chosen,
                                                       var_name=facet, value_name="score")
        long = long.rename(columns={col: name for name, col in ids.items()})
        values = pd.to_numeric(long["score"], errors="coerce")
        bad = np.flatnonzero(values.isna().to_numpy() & long["score"].notna().to_numpy())
        if bad.size:
            r = bad[0]
            row = r % len(frame)
            raise DataError(f"{p}: row {row + 1}, column '{long[facet].iloc[r]}' holds {long['score'].iloc[r]!r}, "
                            f"not a number ({bad.size} such cells); fix them or blank them (a missing score).")
        long["score"] = values
        parts.append(long)
    return pd.concat(parts, ignore_index=True)


def import_files(fmt: str, paths: list[str], **kw) -> pd.DataFrame:
    """Import ``paths`` written by the tool ``fmt``; a record of the wrong shape is named (file, record)."""
    _CURSOR.clear()
    try:
        return _import(fmt, paths, **kw)
    except (TypeError, AttributeError, ValueError, KeyError, IndexError) as exc:
        where = f"{_CURSOR['path']}: {_CURSOR['where']}" if _CURSOR else ", ".join(map(str, paths))
        raise DataError(f"{where}: a field has a type or shape a {fmt} file does not have "
                        f"({_plain(exc)}); the file may be damaged or from another "
                        "tool.") from None
    except RecursionError:
        where = _CURSOR.get("path") or ", ".join(map(str, paths))
        raise DataError(f"{where}: a JSON value is nested too deeply to read (thousands of levels); no {fmt} file "
                        "has that shape: the file is damaged.") from None
    except (zlib.error, EOFError, OSError) as exc:
        where = _CURSOR.get("path") or ", ".join(map(str, paths))
        raise DataError(f"{where}: the archive or file is damaged ({_plain(exc)}); write it again.") from None


def _import(fmt: str, paths: list[str], **kw) -> pd.DataFrame:
    if not paths:
        raise DataError("no input files given.")
    from ..inputs import check_input_file

    if fmt == "inspect":  # an eval set's log directory stands for the logs in it
        from .inspect_logs import log_files

        paths = [str(p) for p in log_files(paths)]
    if fmt == "helm":  # run directories, not files
        from .helm import import_helm

        return _nest_in_task(_with_notes(import_helm(paths, kw.get("metric")), []))
    if fmt == "eee":
        from .eee import eee_files, import_eee

        paths = [str(p) for p in eee_files(paths)]
        for p in paths:
            check_input_file(p)
        return _nest_in_task(import_eee(paths))
    for p in paths:
        if Path(p).is_dir():
            raise DataError(f"{p}: is a folder; give the files inside it.")
        check_input_file(p)
    if fmt == "inspect":
        return import_inspect(paths)
    if fmt == "lm-eval":
        return import_lm_eval(paths, kw.get("metric") or "acc", kw.get("system"))
    if fmt == "arena-hard":
        return import_arena_hard(paths, kw.get("baseline"), weighted=not kw.get("unweighted"))
    if fmt == "alpaca-eval":
        return import_alpaca_eval(paths)
    if fmt == "mt-bench":
        return import_mt_bench(paths)
    if fmt == "wide":
        if not kw.get("ids") or not kw.get("columns"):
            raise DataError("wide: give the id columns (--id system=COL --id item=COL) and the score columns "
                            "(--columns judge=COL1,COL2 or a glob such as judge=judge_*).")
        return import_wide(paths, kw["ids"], kw["columns"])
    raise DataError(f"unknown format '{fmt}'; formats: {', '.join(FORMATS)}.")
