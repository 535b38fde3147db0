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
``inspect-grade``         Inspect's model-graded scorers: ``GRADE: C`` (1), ``P`` (0.5), ``I`` (0) on the
                          reply's last line (Inspect's ``DEFAULT_GRADE_PATTERN``, searched as it does)
``prometheus``            Prometheus: ``[RESULT] N``
``score-line``            a line that reads ``Score: N`` (the last such line)
``json``                  a JSON object (alone, or in a fenced block) with a numeric ``score`` field
``pattern``               a user's regular expression with one group holding the number (the first match)
========================  ==============================================================================

A numeric verdict outside ``[scale_min, scale_max]`` is no verdict (with the reason); the preference and
grade protocols (:data:`UNSCALED`) are on their own 0-1 scale and take no bounds.

A reasoning block (``<think>...</think>``, also ``<thinking>`` and ``<reasoning>``, or the text before a lone
closing tag where a server dropped the opening one) is never read: a model thinking aloud writes "maybe
[[3]]... no, [[4]]" before its verdict (:func:`strip_reasoning`).

Structured answers (``[scoring] output = "json"`` or ``"logprobs"``) are read by :func:`read_structured`:
the ``score`` field of the object the endpoint was made to return (:func:`verdict_schema`), and with
log-probabilities the judge's distribution over the scale at the answer token (:func:`scale_distribution`).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

PROTOCOLS = ("mt-bench-single", "mt-bench-pair", "arena-hard", "inspect-grade", "prometheus", "score-line",
             "json", "pattern")

#: what a stored completion's parse error begins with when the reply was cut at max_tokens
TRUNCATED = "cut at max_tokens"

#: protocols whose verdict is a preference of A over B (1, tie 0.5, 0) or a grade in 0-1, not a score
UNSCALED = ("mt-bench-pair", "arena-hard", "inspect-grade")

_NUM = r"(\d+\.?\d*)"
_SINGLE = re.compile(r"\[\[" + _NUM + r"\]\]")
_SINGLE_BACKUP = re.compile(r"\[" + _NUM + r"\]")
_ARENA = re.compile(r"\[\[([AB<>=]+)\]\]")
ARENA_VALUES = {"A>>B": 1.0, "A>B": 0.75, "A=B": 0.5, "B>A": 0.25, "B>>A": 0.0,
                 "B<<A": 1.0, "B<A": 0.75, "B=A": 0.5, "A<B": 0.25, "A<<B": 0.0}
# Inspect's DEFAULT_GRADE_PATTERN, searched as Inspect searches it (no MULTILINE, no DOTALL): "(.*)$" cannot
# cross a newline, so the grade is read only from the reply's last line
_GRADE = re.compile(r"(?i)GRADE\s*:\s*([CPI])(.*)$")
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
    #: with log-probabilities: the judge's probability of each scale value at the answer token
    distribution: tuple[tuple[float, float], ...] | None = None

    @property
    def spread(self) -> float | None:
        """The standard deviation of the judge's own distribution over the scale (within one call)."""
        if not self.distribution:
            return None
        mean = sum(v * p for v, p in self.distribution)
        return math.sqrt(max(sum(p * (v - mean) ** 2 for v, p in self.distribution), 0.0))


_THINK = re.compile(r"<(think|thinking|reasoning)>.*?(?:</\1>|\Z)", re.S | re.I)
_THINK_CLOSE = re.compile(r"\A.*</(?:think|thinking|reasoning)>", re.S | re.I)


def strip_reasoning(text: str) -> str:
    """``text`` without its reasoning blocks: ``<think>...</think>`` (and ``thinking``/``reasoning``), an
    unclosed block to the end, and everything before a closing tag whose opening tag the server dropped."""
    if "<" not in text:  # every tag starts with one (this runs on every stored call)
        return text
    return _THINK_CLOSE.sub("", _THINK.sub("", text))


def parse(text: str | None, protocol: str = "score-line", *, scale_min: float | None = None,
          scale_max: float | None = None, pattern: str | None = None, cut: bool = False) -> Verdict:
    """The verdict ``text`` gives under ``protocol`` (see the module's table); reasoning blocks are not read.

    ``cut``: the reply was cut at max_tokens (``finish_reason`` "length"). Only a verdict complete in the
    protocol's final form is read then: no ``[N]`` fallback, and a number is a verdict only when something
    follows it (a closing bracket, the line's end), since the next token might have been another digit."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol '{protocol}'; one of {', '.join(PROTOCOLS)}")
    if text is None or not text.strip():
        return Verdict(None, "empty completion")
    text = strip_reasoning(text)
    if not text.strip():
        return Verdict(None, "only a reasoning block, no verdict after it")
    if protocol == "mt-bench-single":
        m = _SINGLE.search(text)
        rule = "[[N]]"
        if m is None and cut:
            return Verdict(None, "no complete [[N]] rating (the [N] fallback is not read in a cut reply)")
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
        if label not in ARENA_VALUES:
            return Verdict(None, f"unknown verdict [[{label}]]")
        return Verdict(ARENA_VALUES[label], f"verdict [[{label}]]", f"[[{label}]]")
    if protocol == "inspect-grade":
        m = _GRADE.search(text)
        if m is None:
            return Verdict(None, "no GRADE: C/P/I on the last line")
        grade = m.group(1).upper()
        return Verdict(_GRADE_VALUES[grade], f"GRADE: {grade}", "GRADE: X")
    if protocol == "prometheus":
        m = _PROMETHEUS.search(text)
        if m is None:
            return Verdict(None, "no [RESULT] N")
        if cut and _at_end(text, m):
            return Verdict(None, _CUT_NUMBER)
        return _in_scale(float(m.group(1)), "[RESULT] N", scale_min, scale_max)
    if protocol == "score-line":
        found = list(_SCORE_LINE.finditer(text))
        if not found:
            return Verdict(None, "no line reading 'Score: N'")
        if cut and _at_end(text, found[-1]):
            return Verdict(None, _CUT_NUMBER)
        return _in_scale(float(found[-1].group(1)), "Score: N", scale_min, scale_max)
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
    if cut and _at_end(text, m):
        return Verdict(None, _CUT_NUMBER)
    try:
        value = float(m.group(1))
    except (TypeError, ValueError):
        return Verdict(None, f"the pattern matched {m.group(1)!r}, not a number")
    return _in_scale(value, "pattern", scale_min, scale_max)


_CUT_NUMBER = "the reply was cut right after its number, which may be incomplete"


def _at_end(text: str, match: re.Match) -> bool:
    """Whether the number ``match`` read ends the text: a reply cut there may have been cut inside it (any
    character after it, a space or a newline included, shows that the number was finished)."""
    return match.end(1) >= len(text)


def _score_field(text: str) -> tuple[object, Verdict | None]:
    """The ``score`` of a JSON object (alone, or in a fenced block), or the Verdict saying why there is none."""
    body = text.strip()
    fenced = _FENCE.search(body)
    try:
        obj = json.loads(fenced.group(1) if fenced else body)
    except (ValueError, RecursionError):
        return None, Verdict(None, "not a JSON object")
    if not isinstance(obj, dict) or "score" not in obj:
        return None, Verdict(None, "no 'score' field")
    return obj["score"], None


def _json_score(text: str, scale_min, scale_max) -> Verdict:
    value, none = _score_field(text)
    if none is not None:
        return none
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


#: the labels a structured answer may give in each scoring mode, and the number each reads as
_LABELS = {"pairwise": {"A": 1.0, "B": 0.0, "tie": 0.5}, "binary": {"yes": 1.0, "no": 0.0}}


def verdict_schema(mode: str, scale_min: int = 1, scale_max: int = 5, choices: str = "ABCD",
                   labels: tuple[str, ...] = ()) -> dict:
    """The JSON schema a structured answer must follow: an object whose ``score`` is one of the mode's values.

    The values are an ``enum``, not a ``minimum``/``maximum``: a grammar compiled from a schema (llama.cpp,
    vLLM's guided decoding) enforces the allowed tokens but not numeric bounds, so a bounded integer can
    come back as 45 on a 1-5 scale. Every value is still validated when read."""
    if mode == "likert":
        score: dict = {"type": "integer", "enum": list(range(scale_min, scale_max + 1))}
    elif mode == "numeric":
        score = {"type": "number"}
    elif mode == "choice":
        score = {"type": "string", "enum": list(choices)}
    elif mode == "label":
        score = {"type": "string", "enum": list(labels)}
    else:
        score = {"type": "string", "enum": list(_LABELS[mode])}
    return {"type": "object", "properties": {"score": score}, "required": ["score"], "additionalProperties": False}


def read_structured(text: str | None, mode: str, *, scale_min: int = 1, scale_max: int = 5, choices: str = "ABCD",
                    tokens: list | None = None, labels: tuple[str, ...] = ()) -> Verdict:
    """The verdict of a structured answer (an object with ``score``, see :func:`verdict_schema`).

    With ``tokens`` (the completion's tokens, each ``(text, [(alternative, logprob), ...])``) the value is
    G-Eval's probability-weighted score: the mean of the judge's distribution over the scale at the answer
    token (Liu et al. 2023, eq. 1), and the distribution is kept (:func:`scale_distribution`)."""
    if text is None or not text.strip():
        return Verdict(None, "empty completion")
    raw, none = _score_field(strip_reasoning(text))
    if none is not None:
        return none
    rule = '{"score": N}'
    if mode in _LABELS or mode in ("choice", "label"):
        named = _LABELS.get(mode) or {c: float(i) for i, c in enumerate(labels if mode == "label" else choices)}
        if not isinstance(raw, str) or raw not in named:
            return Verdict(None, f"'score' is {raw!r}, not one of {', '.join(named)}", rule)
        return Verdict(named[raw], f"verdict {raw}", rule)
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        return Verdict(None, f"'score' is {raw!r}, not a number", rule)
    if mode == "likert" and float(raw) != int(raw):
        return Verdict(None, f"'score' is {raw!r}, not a whole number of the scale", rule)
    verdict = _in_scale(float(raw), rule, scale_min if mode == "likert" else None,
                        scale_max if mode == "likert" else None)
    if tokens is None or verdict.value is None:
        return verdict
    at = _value_offset(text)
    dist = scale_distribution(tokens, at, range(scale_min, scale_max + 1))
    if dist is None:
        return Verdict(None, "no log-probabilities of the scale's values at the answer token", "logprobs")
    mean = sum(v * p for v, p in dist)
    return Verdict(mean, f"probability-weighted score {mean:.4g} (verdict {verdict.value:g})", "logprobs", dist)


_SCORE_VALUE = re.compile(r'"score"\s*:\s*"?')


def _value_offset(text: str) -> int | None:
    """Where the score's value begins in the completion ``text`` (None when it cannot be placed)."""
    m = _SCORE_VALUE.search(text)
    return m.end() if m else None


def scale_distribution(tokens: list, at: int | None, scale) -> tuple[tuple[float, float], ...] | None:
    """The judge's probability of each scale value at the answer token, renormalised over the scale.

    ``tokens``: each generated token as ``(text, [(alternative, logprob), ...])``; ``at``: the character
    offset of the answer in the completion. The answer token is the one covering ``at`` when the tokens
    spell the completion, else the first token that is a scale value. Alternatives are read with their
    surrounding spaces stripped (" 4" and "4" are the same value); only the top alternatives an endpoint
    returns are known, so mass outside them is not counted (with 20 alternatives on a 5-point scale,
    every value is among them unless the judge is certain)."""
    values = {str(v): float(v) for v in scale}
    index = None
    if at is not None:
        pos = 0
        for k, (tok, _) in enumerate(tokens):
            if pos <= at < pos + len(tok) and tok.strip() in values:
                index = k
                break
            pos += len(tok)
    if index is None:
        index = next((k for k, (tok, _) in enumerate(tokens) if tok.strip() in values), None)
    if index is None:
        return None
    chosen, alternatives = tokens[index]
    mass: dict[float, float] = {}
    for alt, logprob in alternatives or [(chosen, 0.0)]:
        value = values.get(str(alt).strip())
        if value is not None and isinstance(logprob, int | float) and math.isfinite(logprob):
            mass[value] = mass.get(value, 0.0) + math.exp(min(logprob, 0.0))
    total = sum(mass.values())
    if total <= 0:
        return None
    return tuple((v, mass[v] / total) for v in sorted(mass))


#: how each protocol's verdict is written, for a follow-up turn that asks for it again
_FORMS = {"mt-bench-single": "'Rating: [[N]]'", "mt-bench-pair": "'[[A]]', '[[B]]' or '[[C]]' for a tie",
          "arena-hard": "one of '[[A>>B]]', '[[A>B]]', '[[A=B]]', '[[B>A]]', '[[B>>A]]'",
          "inspect-grade": "'GRADE: C', 'GRADE: P' or 'GRADE: I'", "prometheus": "'[RESULT] N'",
          "score-line": "a line 'Score: N'", "json": "a JSON object {\"score\": N}"}
_MODE_FORMS = {"likert": "'Score: N'", "binary": "'yes' or 'no'", "pairwise": "'[[A]]', '[[B]]' or '[[C]]' for a tie",
               "choice": "one letter", "numeric": "'Score: N'", "label": "one of the labels, alone on a line"}


def verdict_form(protocol: str | None, mode: str, scale_min: int, scale_max: int, output: str = "text") -> str:
    """The form a verdict takes under ``protocol`` (or the scoring mode), with the scale where it has one."""
    if output != "text":
        form = "a JSON object {\"score\": ...}"
    elif protocol == "pattern":
        form = "the form the instructions give"
    else:
        form = _FORMS.get(protocol or "", _MODE_FORMS.get(mode, "the form the instructions give"))
    scaled = mode == "likert" and protocol not in UNSCALED
    return f"{form}, N from {scale_min} to {scale_max}" if scaled and "N" in form else form
