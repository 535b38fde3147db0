"""Score parsers for judge completions. Judge output is untrusted text: parsers only read it.

Each returns ``(score, error)``: a float score, or None and a short reason.
"""

from __future__ import annotations

import math
import re

MODES = ("likert", "binary", "pairwise", "choice", "numeric")

_NUMBER = r"[-+]?\d+(?:\.\d+)?"


def parse_score(text: str | None, mode: str, *, scale_max: int = 5, scale_min: int = 1,
                choices: str = "ABCD") -> tuple[float | None, str | None]:
    """Parse a completion in one of the scoring modes.

    likert: the last "score: N" / "rating: N" / "rating: [[N]]" (not a range "N-M"), else the last "[[N]]",
        else the last "N/k" with k the scale's maximum, else a completion that is only the number, within
        [min, max]. A number elsewhere in the
        text (list numbering, the prompt's own scale, a range, a denominator) is never a score;
    binary: yes/no, true/false, safe/unsafe, 1/0 (the last such token);
    pairwise: "A", "B" or "tie" (also [[A]], "Output (a)"), returned as 1.0, 0.0, 0.5 for A;
    choice: a letter among ``choices`` (the last standalone one), returned as its index;
    numeric: the last number.
    """
    if text is None or not text.strip():
        return None, "empty completion"
    t = text.strip()
    if mode == "likert":
        m = re.findall(rf"(?:score|rating|grade)\s*[:=]?\s*\**\s*\[{{0,2}}\s*({_NUMBER})(?!\s*(?:-|–|to\b)\s*\d)"
                       rf"(?!\w|\.\d)", t, re.I) \
            or re.findall(rf"\[\[\s*({_NUMBER})\s*\]\]", t) \
            or re.findall(rf"(?<![\w.\-/])({_NUMBER})\s*/\s*{scale_max}\b", t) \
            or re.findall(rf"^[\s*\"'(\[]*({_NUMBER})[\s*\"').\]]*$", t)
        if not m:
            return None, "no score found"
        value = float(m[-1])
        if not (scale_min <= value <= scale_max) or not math.isfinite(value):
            return None, f"score {value:g} outside {scale_min}..{scale_max}"
        return value, None
    if mode == "binary":
        tokens = re.findall(r"\b(yes|no|true|false|unsafe|safe|1|0)\b", t, re.I)
        if not tokens:
            return None, "no yes/no answer found"
        last = tokens[-1].lower()
        return (1.0 if last in ("yes", "true", "1", "unsafe") else 0.0), None
    if mode == "pairwise":
        m = re.findall(r"\[\[\s*(A|B|C|tie)\s*\]\]", t, re.I) or \
            re.findall(r"\b(?:output|response|answer|winner)\s*\(?\s*(a|b)\b\)?", t, re.I) or \
            re.findall(r"(?<![\w])(A|B|tie)(?![\w])", t)
        if not m:
            return None, "no A/B/tie verdict found"
        v = m[-1].lower()
        return {"a": 1.0, "b": 0.0, "c": 0.5, "tie": 0.5}[v], None
    if mode == "choice":
        m = re.findall(rf"(?<![A-Za-z])([{re.escape(choices)}])(?![A-Za-z])", t)
        if not m:
            return None, f"no choice among {', '.join(choices)}"
        return float(choices.index(m[-1])), None
    if mode == "numeric":
        m = re.findall(_NUMBER, t)
        if not m:
            return None, "no number found"
        return float(m[-1]), None
    raise ValueError(f"unknown scoring mode '{mode}'")
