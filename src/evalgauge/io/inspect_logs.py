"""Inspect AI eval logs (``.eval`` archives of every inspect-ai version in use, ``.json`` logs, log folders).

One row per sample x epoch x judge: system = the evaluated model, task = the task, item = the sample id,
replicate = the epoch, judge = the scorer, or for a judge panel (``multi_scorer([...])``) each grader, named by
its model. Score values C/I/P/N map to 1/0/0.5/0. A prompt variant (``prompt_variant`` or ``variant`` in the
task's or the sample's metadata) and a temperature (the model's or the task's generate config) become facets
when a log records them.

A panel collected with ``reducer="collect"`` stores each sample's votes as a list, and Inspect drops a grader
that returned no grade before it collects, so a list position does not identify a grader. Each grader's own
call is in the sample's events (a model event inside the scorer's span, with the grader's model and reply), so
a vote is given to the grader whose reply carries it: the grades read from the replies must be the votes (as
multisets) for the sample to be read that way; a grader whose reply had no grade gets a row with no score.
Where the replies cannot be read (another grade pattern, events not logged), the positions are used only when
every grader of the panel voted (Inspect keeps the scorers' order then); otherwise the sample's panel is left
out and counted.

Judge output inside a log is untrusted text: only grades are read from it.
"""

from __future__ import annotations

import json
import math
import re
import zipfile
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ..errors import DataError

INSPECT_VALUES = {"C": 1.0, "I": 0.0, "P": 0.5, "N": 0.0}
#: Inspect's spelled-out grades (model_graded_qa reads "GRADE: Correct" as C)
_GRADE_WORDS = {"correct": "C", "incorrect": "I", "partial": "P"}
_GRADE = re.compile(r"GRADE\s*:\s*([A-Za-z]+)")
#: task or sample metadata keys read as the prompt variant
VARIANT_KEYS = ("prompt_variant", "variant")

#: the most bytes one member of an Inspect .eval archive may decompress to (a sample with its whole transcript
#: is rarely above a few MB; a member past this is refused rather than read whole: a zip bomb)
EVAL_MEMBER_LIMIT = 256 * 1024 * 1024
#: the most bytes all the members of one archive may decompress to together
EVAL_ARCHIVE_LIMIT = 4 * 1024**3
#: the zip compression method of zstd (APPNOTE 4.4.5), which inspect-ai writes since 0.3.206
ZIP_ZSTANDARD = 93
#: files an eval set (and evalgauge's Inspect hook) write beside the logs that are not logs
_NOT_LOGS = {"logs.json", "eval-set.json", "listing.json", "evalgauge.json"}


def inspect_value(value) -> float | None:
    """A score value as a number: booleans and numbers as they are, Inspect's letters by INSPECT_VALUES."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        return INSPECT_VALUES.get(value.strip().upper())
    return None


def log_files(paths) -> list[Path]:
    """The logs named, a folder standing for every ``.eval`` and ``.json`` log under it (an eval set's log
    directory), in a stable order."""
    from .files import files_in

    return files_in(paths, (".eval", ".json"), "Inspect logs", frozenset(_NOT_LOGS))


# -- reading an archive ----------------------------------------------------------------------------------------

def read_log(p: Path, plain) -> tuple[dict, list]:
    """The header (``eval``, ``plan``, ``status``, ``results``) and the samples of one log."""
    if p.suffix == ".eval":
        return _read_eval(p, plain)
    from .files import read_json

    log = read_json(p, "an Inspect log")
    if not isinstance(log, dict):
        raise DataError(f"{p}: not an Inspect log (a JSON object with 'eval' and 'samples').")
    return log, log.get("samples") or []


def _read_eval(p: Path, plain) -> tuple[dict, list]:
    """The header and the samples of an Inspect ``.eval`` archive: every member read through
    :func:`_eval_member`, so a member that decompresses past its bound is refused, not read whole. A log whose
    run was stopped before it finished has no ``header.json``; its ``_journal/start.json`` names the eval and
    the log reads with status ``started``."""
    try:
        with zipfile.ZipFile(p) as z, open(p, "rb") as raw:
            budget = [EVAL_ARCHIVE_LIMIT]
            infos = {i.filename: i for i in z.infolist()}
            if "header.json" in infos:
                header = json.loads(_eval_member(p, z, raw, infos["header.json"], budget))
            elif "_journal/start.json" in infos:
                header = {**json.loads(_eval_member(p, z, raw, infos["_journal/start.json"], budget)),
                          "status": "started"}
            else:
                raise DataError(f"{p}: not an Inspect .eval archive (no header.json); it may be truncated.")
            samples = [json.loads(_eval_member(p, z, raw, i, budget)) for n, i in infos.items()
                       if n.startswith("samples/")]
    except (zipfile.BadZipFile, json.JSONDecodeError, UnicodeDecodeError, zlib.error, EOFError, OSError,
            ValueError) as exc:
        raise DataError(f"{p}: not an Inspect .eval archive ({plain(exc)}); it may be truncated.") from None
    return header, samples


def _eval_member(p: Path, z: zipfile.ZipFile, raw, info: zipfile.ZipInfo, budget: list[int]) -> bytes:
    """One member's bytes, decompressed in pieces and refused past :data:`EVAL_MEMBER_LIMIT` (or what is left
    of the archive's :data:`EVAL_ARCHIVE_LIMIT`): stored, deflate and the other methods zipfile reads, and
    zstd (method 93) with the ``zstandard`` package."""
    if info.flag_bits & 0x1:
        raise DataError(f"{p}: the member {info.filename} is encrypted; Inspect writes none. Export the log "
                        "again (inspect log convert) or decrypt it first.")
    limit = min(EVAL_MEMBER_LIMIT, budget[0])
    if info.file_size > limit:
        raise DataError(f"{p}: the member {info.filename} says it holds {info.file_size:,} bytes, more than the "
                        f"{limit:,} one member may; not read.")
    if info.compress_type == ZIP_ZSTANDARD:
        import zstandard

        raw.seek(info.header_offset)
        local = raw.read(30)
        if len(local) < 30 or local[:4] != b"PK\x03\x04":
            raise zipfile.BadZipFile(f"no local header for {info.filename}")
        name_len, extra_len = int.from_bytes(local[26:28], "little"), int.from_bytes(local[28:30], "little")
        raw.seek(info.header_offset + 30 + name_len + extra_len)
        compressed = _BoundedReader(raw, info.compress_size)
        stream = zstandard.ZstdDecompressor().stream_reader(compressed, read_across_frames=True)
    else:
        stream = z.open(info)
    chunks, size = [], 0
    with stream:
        while chunk := stream.read(1024 * 1024):
            size += len(chunk)
            if size > limit:
                raise DataError(f"{p}: the member {info.filename} decompresses to more than {limit:,} bytes "
                                "(a zip bomb, or a log far larger than any Inspect writes); not read further.")
            chunks.append(chunk)
    budget[0] -= size
    return b"".join(chunks)


class _BoundedReader:
    """A file object that reads at most ``size`` bytes from ``raw``'s current position (one member's data)."""

    def __init__(self, raw, size: int):
        self._raw, self._left = raw, size

    def read(self, n: int = -1) -> bytes:
        n = self._left if n is None or n < 0 else min(n, self._left)
        data = self._raw.read(n)
        self._left -= len(data)
        return data


# -- the log's design: system, task, variant, temperature, panels -----------------------------------------------

def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def _model_name(model) -> str | None:
    """A grader's model as a scorer's parameters record it (a name, or ``{"model": name, ...}``)."""
    if isinstance(model, str):
        return model
    if isinstance(model, dict) and isinstance(model.get("model"), str):
        return model["model"]
    return None


def panel_members(ev: dict) -> dict[str, list[str]]:
    """For each panel scorer (``multi_scorer``) the eval records, its graders in the scorers' order, named by
    their model (by scorer name where no model is recorded; a repeated name gets ``#k``)."""
    panels = {}
    for spec in ev.get("scorers") or []:
        members = _dict(_dict(spec).get("options")).get("scorers")
        if not isinstance(members, list) or not members:
            continue
        names = [_model_name(_dict(_dict(m).get("params")).get("model")) or str(_dict(m).get("name", "scorer"))
                 for m in members]
        counts = Counter(names)
        seen: Counter = Counter()
        unique = []
        for n in names:
            seen[n] += 1
            unique.append(f"{n}#{seen[n]}" if counts[n] > 1 else n)
        panels[str(spec["name"])] = unique
    return panels


def temperature_of(header: dict, ev: dict):
    """The temperature the log records: the model's generate config, else the task's; None when neither sets one."""
    for config in (_dict(ev.get("model_generate_config")), _dict(_dict(header.get("plan")).get("config"))):
        t = config.get("temperature")
        if isinstance(t, int | float) and not isinstance(t, bool) and math.isfinite(t):
            return float(t)
    return None


def variant_of(*metadata) -> str | None:
    """The prompt variant the first metadata naming one gives (``prompt_variant`` or ``variant``), else None."""
    for meta in metadata:
        for key in VARIANT_KEYS:
            value = _dict(meta).get(key)
            if isinstance(value, str | int | float) and not isinstance(value, bool):
                return str(value)
    return None


def _grade(text) -> str | None:
    """The grade a grader's reply ends with (Inspect's ``GRADE: X`` and its spelled-out words), else None."""
    if not isinstance(text, str):
        return None
    found = _GRADE.findall(text[-4000:])
    if not found:
        return None
    word = found[-1]
    if word.lower() in _GRADE_WORDS:
        return _GRADE_WORDS[word.lower()]
    return word.upper() if len(word) == 1 else None


def _reply_text(event: dict) -> str | None:
    output = _dict(event.get("output"))
    if isinstance(output.get("completion"), str):
        return output["completion"]
    choices = output.get("choices")
    if isinstance(choices, list) and choices:
        content = _dict(_dict(choices[0]).get("message")).get("content")
        if isinstance(content, str):
            return content
    return None


def grader_calls(sample: dict, scorer: str) -> list[tuple[str, str | None]]:
    """(model, grade read from its reply) of every model call made inside the scorer's span, in log order."""
    events = [e for e in sample.get("events") or [] if isinstance(e, dict)]
    parents = {e.get("id"): e.get("parent_id") for e in events if e.get("event") == "span_begin"}
    roots = {e.get("id") for e in events if e.get("event") == "span_begin" and e.get("type") == "scorer"
             and e.get("name") == scorer}

    def inside(span) -> bool:
        for _ in range(64):  # spans nest a few levels; a cycle in a damaged log must not loop
            if span is None:
                return False
            if span in roots:
                return True
            span = parents.get(span)
        return False

    return [(str(e.get("model")), _grade(_reply_text(e))) for e in events
            if e.get("event") == "model" and inside(e.get("span_id"))]


@dataclass
class PanelTally:
    """How a log's panel samples were read, for the import's notes."""

    members: list[str]
    by_reply: int = 0
    by_position: int = 0
    silent: int = 0
    left_out: int = 0
    as_verdict: int = 0
    reduced: int = 0


def panel_votes(sample: dict, scorer: str, score, members: list[str] | None,
                tally: PanelTally) -> list[tuple[str, float | None]] | None:
    """(grader, score) for each grader of one sample's panel, or None when the votes cannot be given to
    graders (see the module docstring)."""
    value = score.get("value") if isinstance(score, dict) else score
    recorded = _dict(_dict(_dict(score).get("metadata")).get("panel")).get("votes")
    votes = value if isinstance(value, list) else None
    calls = grader_calls(sample, scorer)
    if votes is not None and calls and (members is None or len(calls) == len(members)):
        graded = [str(g) for _, g in calls if g is not None]
        if Counter(graded) == Counter(str(v).strip().upper() for v in votes):
            names = _call_names(calls, members)
            tally.by_reply += 1
            tally.silent += sum(g is None for _, g in calls)
            return [(n, inspect_value(g) if g is not None else None) for n, (_, g) in zip(names, calls, strict=True)]
    if isinstance(recorded, list) and members and len(recorded) == len(members):
        tally.by_position += 1  # a majority panel's metadata keeps every position, None for no vote
        tally.silent += sum(v is None for v in recorded)
        return [(m, inspect_value(v)) for m, v in zip(members, recorded, strict=True)]
    if votes is not None and members and len(votes) == len(members):
        tally.by_position += 1
        return [(m, inspect_value(v)) for m, v in zip(members, votes, strict=True)]
    return None


def reduced_panel_votes(sample: dict, scorer: str, value) -> list[tuple[str, float | None]] | None:
    """A scorer whose one value reduces a panel's votes (``multi_scorer`` with ``mode``, ``mean``, ...; the only
    panel inspect-ai before the ``collect`` reducer could write): each grader's vote from its own reply, when two
    or more distinct graders replied with a grade inside the scorer's span and the recorded value is one of
    the reductions of those grades (mode, mean, median, max, min), so the replies are the votes it reduced.
    None otherwise (the value is read as one judge's)."""
    calls = grader_calls(sample, scorer)
    models = [m for m, _ in calls]
    if len(calls) < 2 or len(set(models)) != len(models) or any(g is None for _, g in calls):
        return None
    numbers = [inspect_value(g) for _, g in calls]
    target = inspect_value(value)
    if target is None or any(x is None for x in numbers):
        return None
    counts = Counter(numbers)
    top = max(counts.values())
    ordered = sorted(numbers)
    middle = (ordered[(len(ordered) - 1) // 2] + ordered[len(ordered) // 2]) / 2
    reductions = {x for x, c in counts.items() if c == top} | {sum(numbers) / len(numbers), middle, max(numbers),
                                                               min(numbers)}
    if not any(math.isclose(target, r, abs_tol=1e-9) for r in reductions):
        return None
    return list(zip(models, numbers, strict=True))


def _call_names(calls: list[tuple[str, str | None]], members: list[str] | None) -> list[str]:
    """The graders' names for their calls: the model, or the panel's member names in order where a model
    grades twice (then only the order of the calls tells them apart)."""
    models = [m for m, _ in calls]
    if len(set(models)) == len(models):
        return models
    return members if members and len(members) == len(calls) else [f"{m}#{k + 1}" for k, m in enumerate(models)]
