"""Score parsers for judge completions. Judge output is untrusted text: parsers only read it.

Each returns ``(score, error)``: a float score, or None and a short reason.
"""

from __future__ import annotations

import math
import re

MODES = ("likert", "binary", "pairwise", "choice", "numeric", "label")

_NUMBER = r"[-+]?\d+(?:\.\d+)?"


def parse_score(text: str | None, mode: str, *, scale_max: int = 5, scale_min: int = 1,
                choices: str = "ABCD", cut: bool = False, labels: tuple[str, ...] = ()) -> tuple[float | None,
                                                                                                str | None]:
    """Parse a completion in one of the scoring modes.

    likert: the last "score: N" / "rating: N" / "rating: [[N]]" (not a range "N-M"), else the last "[[N]]",
        else the last "N/k" with k the scale's maximum, else a completion that is only the number, within
        [min, max]. A number elsewhere in the
        text (list numbering, the prompt's own scale, a range, a denominator) is never a score;
    binary: yes/no, true/false, safe/unsafe, 1/0 (the last such token);
    pairwise: :func:`read_preference` (labels in double brackets, or a verdict line), 1.0 for A, 0.0 for B,
        0.5 for a tie; arena-hard's graded labels keep arena-hard's values (``[[A>B]]`` 0.75);
    choice: a letter among ``choices`` (the last standalone one), returned as its index;
    numeric: the last number;
    label: one of ``labels`` (:func:`read_label`), returned as its index in ``labels`` (a class, which the
        analysis reads back as its name: never averaged).

    ``cut``: the reply was cut at max_tokens; a likert or numeric verdict is read only when complete (its
    brackets closed, something after its number), a pairwise one only from a complete label.
    """
    if text is None or not text.strip():
        return None, "empty completion"
    t = text.strip()
    if mode == "likert":
        return _likert(t, scale_min, scale_max, cut)
    if mode == "binary":
        tokens = re.findall(r"\b(yes|no|true|false|unsafe|safe|1|0)\b", t, re.I)
        if not tokens:
            return None, "no yes/no answer found"
        last = tokens[-1].lower()
        return (1.0 if last in ("yes", "true", "1", "unsafe") else 0.0), None
    if mode == "pairwise":
        return read_preference(t, cut=cut)
    if mode == "choice":
        m = re.findall(rf"(?<![A-Za-z])([{re.escape(choices)}])(?![A-Za-z])", t)
        if not m:
            return None, f"no choice among {', '.join(choices)}"
        return float(choices.index(m[-1])), None
    if mode == "label":
        return read_label(t, labels, cut=cut)
    if mode == "numeric":
        found = list(re.finditer(_NUMBER, t))
        if not found:
            return None, "no number found"
        if cut and found[-1].end() == len(t) and not text.rstrip(" \t").endswith("\n"):  # nothing after it
            return None, _CUT
        return float(found[-1].group()), None
    raise ValueError(f"unknown scoring mode '{mode}'")


_CUT = "the reply was cut right after its number, which may be incomplete"
# "Score: 4", "Rating: [[4]]", "grade = [4]": the brackets, when opened, must close round the number
_LABELLED = re.compile(rf"(?:score|rating|grade)\s*[:=]?\s*\**\s*(\[{{0,2}})\s*({_NUMBER})(?!\s*(?:-|–|to\b)\s*\d)"
                       rf"(?!\w|\.\d)(\s*\]{{0,2}})", re.I)


def _likert(t: str, scale_min: int, scale_max: int, cut: bool) -> tuple[float | None, str | None]:
    labelled = [m for m in _LABELLED.finditer(t)
                if not cut or (m.group(3).strip() == "]" * len(m.group(1)) and (m.group(1) or m.end() < len(t)))]
    if labelled:
        value = float(labelled[-1].group(2))
    else:
        m = re.findall(rf"\[\[\s*({_NUMBER})\s*\]\]", t) \
            or re.findall(rf"(?<![\w.\-/])({_NUMBER})\s*/\s*{scale_max}\b", t) \
            or ([] if cut else re.findall(rf"^[\s*\"'(\[]*({_NUMBER})[\s*\"').\]]*$", t))
        if not m:
            return None, "no complete score in a reply cut at max_tokens" if cut else "no score found"
        value = float(m[-1])
    if not (scale_min <= value <= scale_max) or not math.isfinite(value):
        return None, f"score {value:g} outside {scale_min}..{scale_max}"
    return value, None


# -- pairwise: a preference read only where its direction is written ------------------------------------------
_PAIR_LABEL = re.compile(r"\[\[\s*(A|B|C|tie)\s*\]\]", re.I)
_GRADED_LABEL = re.compile(r"\[\[\s*([AB])\s*(>>|>|=|<<|<)\s*([AB])\s*\]\]")
#: a comparison of the two outputs written outside double brackets ("A>B", "[B>>A]", "A = B")
_COMPARISON = re.compile(r"(?<![\w\[])\[?\s*[AB]\s*(?:>>|>|=|<<|<)\s*[AB]\s*\]?(?![\w\]])")
#: a line that is the verdict: "B", "**Tie**", "Output (a)", "Final verdict: A", "Winner: Response B"
_VERDICT_LINE = re.compile(
    r"(?im)^[\s*_\"'`#>.-]*(?:(?:my\s+)?(?:final\s+)?(?:verdict|winner|decision|preference|choice|answer)"
    r"(?:\s+is)?\s*[:=]?\s*)?[\s*_\"'`]*(?:(?:output|response|assistant|answer|model)\s*)?\(?\s*(A|B|tie)\s*\)?"
    r"[\s*_\"'`).!]*$")
#: "Output (a) is better", "Response B is preferred"
_BETTER = re.compile(r"(?i)\b(?:output|response|assistant|answer|model)\s*\(?\s*(a|b)\s*\)?\s+(?:is|was)\s+"
                     r"(?:better|preferred|superior|the\s+(?:better\s+(?:one|response|output)|winner))\b")
_PAIR_VALUES = {"a": 1.0, "b": 0.0, "c": 0.5, "tie": 0.5}


def read_preference(text: str, cut: bool = False) -> tuple[float | None, str | None]:
    """The preference of A over B a pairwise reply states (1, tie 0.5, 0), read where its direction is
    written, never from the last letter of a label.

    1. Labels in double brackets: MT-bench's ``[[A]]``/``[[B]]``/``[[C]]`` (also ``[[tie]]``) and
       arena-hard's ``[[A>>B]]``, ``[[A>B]]``, ``[[A=B]]``, ``[[B>A]]``, ``[[B>>A]]`` (and their ``<``
       forms, with arena-hard's values 1, 0.75, 0.5, 0.25, 0). Labels that disagree: no verdict.
    2. Otherwise a verdict written in words: the last line that is only the verdict ("B", "Tie",
       "Output (a)", "Final verdict: A") or "Output (a) is better".
    A comparison written outside double brackets ("A>B", "[B>>A]") with no bracketed label is no verdict:
    its last letter is the loser, and reading it as the winner is what inverts a leaderboard.
    ``cut`` (the reply was cut at max_tokens): a verdict in words that ends the text is not read ("Final
    verdict: A" may have gone on as "A>B").
    """
    from ..protocols import ARENA_VALUES

    values = {_PAIR_VALUES[m.lower()] for m in _PAIR_LABEL.findall(text)}
    values |= {ARENA_VALUES[f"{a}{op}{b}"] for a, op, b in _GRADED_LABEL.findall(text) if a != b}
    if any(a == b for a, _, b in _GRADED_LABEL.findall(text)):
        return None, "a label comparing an output with itself"
    if len(values) > 1:
        return None, f"labels that disagree ({len(values)} different verdicts)"
    if values:
        return values.pop(), None
    if _COMPARISON.search(text):
        return None, ("a comparison ('A>B') outside [[...]]: read arena-hard verdicts with protocol = "
                      "\"arena-hard\"")
    found = [*_VERDICT_LINE.finditer(text), *_BETTER.finditer(text)]
    words = [(m.start(), m.group(1)) for m in found if not cut or m.end() < len(text)]
    if not words:
        return None, "no A/B/tie verdict found"
    return _PAIR_VALUES[max(words)[1].lower()], None


# -- categorical labels -----------------------------------------------------------------------------------------
_LABEL_LINE = r"(?im)^[\s*_\"'`#>-]*(?:(?:final\s+)?(?:label|answer|stance|category|class|verdict|classification)" \
    r"\s*[:=-]\s*)?[\s*_\"'`(\[]*({})[\s*_\"'`)\].!]*$"


def read_label(text: str, labels, cut: bool = False) -> tuple[float | None, str | None]:
    """The class a reply gives, as its index in ``labels``: the last line that is only a label ("Neutral",
    "**Label: favor**"), else the one label the text names (case aside, as a whole word or phrase; a longer
    label such as "not hateful" is found before the "hateful" inside it). A reply naming several labels without
    a line that is one of them is no verdict; so is, in a reply cut at max_tokens, a label that ends the text."""
    names = sorted(labels, key=len, reverse=True)
    alternation = "|".join(re.escape(n) for n in names)
    lines = [m for m in re.finditer(_LABEL_LINE.format(alternation), text) if not cut or m.end() < len(text)]
    if lines:
        return _label_index(lines[-1].group(1), labels), None
    found, masked = [], text
    for name in names:  # longest first, each match masked so that "hateful" is not found inside "not hateful"
        pattern = re.compile(rf"(?i)(?<![\w-]){re.escape(name)}(?![\w-])")
        for m in pattern.finditer(masked):
            if not cut or m.end() < len(text):
                found.append(name)
        masked = pattern.sub(lambda m: "\0" * len(m.group()), masked)
    distinct = {n.lower() for n in found}
    if not distinct:
        return None, f"no label among {', '.join(labels)}"
    if len(distinct) > 1:
        return None, f"several labels named ({', '.join(sorted(distinct))}) and no line giving one"
    return _label_index(found[0], labels), None


def _label_index(name: str, labels) -> float:
    lowered = [lab.lower() for lab in labels]
    return float(lowered.index(name.lower()))
