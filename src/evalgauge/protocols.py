"""Verdict protocols: how a judge writes its verdict and how it is read, each the exact rule of the tool
it comes from. Judge output is untrusted text: a protocol only reads it.

Strict by construction: a verdict is read only where the protocol puts it. There is no fallback to a
lone number, so list numbering ("1. Meryl Streep"), the prompt's own scale ("a 1-5 scale"), a range or a
fraction's denominator is never a score.

========================  ==============================================================================
``mt-bench-single``       FastChat llm_judge: the first ``[[N]]``, else the first ``[N]`` (``single-v1``)
``mt-bench-pair``         FastChat ``pair-v2``: ``[[A]]`` (1), else ``[[B]]`` (0), else ``[[C]]`` (tie, 0.5)
``arena-hard``            arena-hard-auto: the ``[[...]]`` labels; exactly one distinct label among
                          ``A>>B`` (1), ``A>B`` (0.75), ``A=B`` (0.5), ``B>A`` (0.25), ``B>>A`` (0)
``inspect-grade``         Inspect's model-graded scorers: the first ``GRADE: C`` (1), ``P`` (0.5), ``I`` (0)
``prometheus``            Prometheus: ``[RESULT] N``
``score-line``            a line that reads ``Score: N`` (the last such line)
``json``                  a JSON object (alone, or in a fenced block) with a numeric ``score`` field
``pattern``               a user's regular expression with one group holding the number (the first match)
========================  ==============================================================================

A numeric verdict outside ``[scale_min, scale_max]`` is no verdict (with the reason); the preference and
grade protocols (:data:`UNSCALED`) are on their own 0-1 scale and take no bounds.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

PROTOCOLS = ("mt-bench-single", "mt-bench-pair", "arena-hard", "inspect-grade", "prometheus", "score-line",
             "json", "pattern")

#: protocols whose verdict is a preference of A over B (1, tie 0.5, 0) or a grade in 0-1, not a score
UNSCALED = ("mt-bench-pair", "arena-hard", "inspect-grade")

_NUM = r"(\d+\.?\d*)"
_SINGLE = re.compile(r"\[\[" + _NUM + r"\]\]")
_SINGLE_BACKUP = re.compile(r"\[" + _NUM + r"\]")
_ARENA = re.compile(r"\[\[([AB<>=]+)\]\]")
_ARENA_VALUES = {"A>>B": 1.0, "A>B": 0.75, "A=B": 0.5, "B>A": 0.25, "B>>A": 0.0,
                 "B<<A": 1.0, "B<A": 0.75, "B=A": 0.5, "A<B": 0.25, "A<<B": 0.0}
_GRADE = re.compile(r"(?i)GRADE\s*:\s*([CPI])")
_GRADE_VALUES = {"C": 1.0, "P": 0.5, "I": 0.0}
_PROMETHEUS = re.compile(r"\[RESULT\]\s*\(?\s*" + _NUM)
_SCORE_LINE = re.compile(r"(?im)^\s*\**\s*score\s*\**\s*:\s*\**\s*" + r"([-+]?\d+(?:\.\d+)?)" + r"\s*\**\s*$")
_FENCE = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.S)


@dataclass(frozen=True)
class Verdict:
    """``value``: the verdict as a number (None: no verdict); ``reason``: why none, or what was read;
    ``rule``: the protocol's rule that matched (stored with each call)."""

    value: float | None
    reason: str
    rule: str | None = None


def parse(text: str | None, protocol: str = "score-line", *, scale_min: float | None = None,
          scale_max: float | None = None, pattern: str | None = None) -> Verdict:
    """The verdict ``text`` gives under ``protocol`` (see the module's table)."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol '{protocol}'; one of {', '.join(PROTOCOLS)}")
    if text is None or not text.strip():
        return Verdict(None, "empty completion")
    if protocol == "mt-bench-single":
        m = _SINGLE.search(text)
        rule = "[[N]]"
        if m is None:
            m, rule = _SINGLE_BACKUP.search(text), "[N]"
        if m is None:
            return Verdict(None, "no [[N]] or [N] rating")
        return _in_scale(float(m.group(1)), rule, scale_min, scale_max)
    if protocol == "mt-bench-pair":
        for label, value in (("[[A]]", 1.0), ("[[B]]", 0.0), ("[[C]]", 0.5)):
            if label in text:
                return Verdict(value, f"verdict {label}", label)
        return Verdict(None, "no [[A]], [[B]] or [[C]] verdict")
    if protocol == "arena-hard":
        labels = {m.strip("\n") for m in _ARENA.findall(text)}
        if not labels:
            return Verdict(None, "no [[A>B]]-style verdict")
        if len(labels) > 1:
            return Verdict(None, f"ambiguous: {len(labels)} different verdicts ({', '.join(sorted(labels))})")
        label = labels.pop()
        if label not in _ARENA_VALUES:
            return Verdict(None, f"unknown verdict [[{label}]]")
        return Verdict(_ARENA_VALUES[label], f"verdict [[{label}]]", f"[[{label}]]")
    if protocol == "inspect-grade":
        m = _GRADE.search(text)
        if m is None:
            return Verdict(None, "no GRADE: C/P/I")
        grade = m.group(1).upper()
        return Verdict(_GRADE_VALUES[grade], f"GRADE: {grade}", "GRADE: X")
    if protocol == "prometheus":
        m = _PROMETHEUS.search(text)
        if m is None:
            return Verdict(None, "no [RESULT] N")
        return _in_scale(float(m.group(1)), "[RESULT] N", scale_min, scale_max)
    if protocol == "score-line":
        found = _SCORE_LINE.findall(text)
        if not found:
            return Verdict(None, "no line reading 'Score: N'")
        return _in_scale(float(found[-1]), "Score: N", scale_min, scale_max)
    if protocol == "json":
        return _json_score(text, scale_min, scale_max)
    if not pattern:
        raise ValueError("protocol 'pattern' needs a pattern: a regular expression with one group")
    regex = re.compile(pattern)
    if regex.groups != 1:
        raise ValueError(f"the pattern {pattern!r} must have exactly one group (the number); it has "
                         f"{regex.groups}")
    m = regex.search(text)
    if m is None:
        return Verdict(None, "the pattern does not match")
    try:
        value = float(m.group(1))
    except (TypeError, ValueError):
        return Verdict(None, f"the pattern matched {m.group(1)!r}, not a number")
    return _in_scale(value, "pattern", scale_min, scale_max)


def _json_score(text: str, scale_min, scale_max) -> Verdict:
    body = text.strip()
    fenced = _FENCE.search(body)
    try:
        obj = json.loads(fenced.group(1) if fenced else body)
    except (ValueError, RecursionError):
        return Verdict(None, "not a JSON object")
    if not isinstance(obj, dict) or "score" not in obj:
        return Verdict(None, "no 'score' field")
    value = obj["score"]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return Verdict(None, f"'score' is {value!r}, not a number")
    return _in_scale(float(value), '{"score": N}', scale_min, scale_max)


def _in_scale(value: float, rule: str, scale_min, scale_max) -> Verdict:
    if not math.isfinite(value):
        return Verdict(None, f"{value} is not a finite number", rule)
    if (scale_min is not None and value < scale_min) or (scale_max is not None and value > scale_max):
        lo = "-inf" if scale_min is None else f"{scale_min:g}"
        hi = "inf" if scale_max is None else f"{scale_max:g}"
        return Verdict(None, f"score {value:g} outside {lo}..{hi}", rule)
    return Verdict(value, f"score {value:g}", rule)
