"""Text from the data (labels, judge output, model ids, notes quoting them) as it is shown to a person.

Labels and judge output are untrusted: a model id can carry terminal escapes (``\\x1b]0;...\\x07``
retitles the window, ``\\x1b[2J`` clears it), a label can carry bidi overrides (U+202E reverses what
follows on screen and in a browser). :func:`shown` makes each such character visible as its escape,
so nothing is hidden and nothing acts; every renderer (the terminal console, the HTML report, the
figures) passes text through it.
"""

from __future__ import annotations

import re

#: C0/C1 controls (but newline and tab), zero-width and bidi controls, BOM, lone surrogates
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ud800-\udfff]")
#: a figure's tick label is cut here (a 10,000-character label would size the figure past memory)
PLOT_LABEL_LIMIT = 48


def shown(text: object) -> str:
    """``text`` with every control, zero-width or bidi character written as its escape (``\\x1b``, ``\\u202e``)."""
    value = str(text)
    if not _UNSAFE.search(value):
        return value
    return _UNSAFE.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                       else f"\\u{ord(m.group()):04x}", value)


def plot_label(text: object, limit: int = PLOT_LABEL_LIMIT) -> str:
    """A label for a figure: shown, and cut to ``limit`` characters with an ellipsis."""
    value = shown(text)
    return value if len(value) <= limit else value[: limit - 1] + "\u2026"


#: a compact letter display is read by eye up to a few letters per system; beyond, the rank sets say the same
LEGIBLE_LETTERS = 6


def letters_note(groups: list[str]) -> str | None:
    """None when the group letters can be shown; else why they are left out (too many overlapping groups to read
    by eye on a large board), for the terminal and the report alike."""
    if not groups or max(len(g) for g in groups) <= LEGIBLE_LETTERS:
        return None
    count = len(set("".join(groups)))
    return (f"{count} overlapping groups are too many to letter (the JSON has them); the rank sets say which systems "
            "the design separates")
