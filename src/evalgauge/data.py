"""The judgments table: long format, one row per scored observation, in memory.

Files are read at the edge (:mod:`evalgauge.io`); this module holds the table and the checks every
analysis shares. Rows are reported to the user 1-based, counting data rows after any header ("row 1" is
the first judgment), so a message can be checked against the file in a spreadsheet or with ``sed -n``.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .errors import DataError
from .vocabulary import MAX_ABS_SCORE

#: How many offending rows a message lists before it says "and N more".
MAX_ROWS_LISTED = 5


@dataclass(frozen=True)
class RowOrigin:
    """Where the rows of a judgments table were read: the parts of a dataset (``parts``, each starting at frame
    position ``starts[k]``), and, after rows were left out, the position each remaining row had when read
    (``positions``). Messages then name a row as the user finds it: its part and its row there."""

    parts: tuple[str, ...] = ()
    starts: tuple[int, ...] = ()
    positions: np.ndarray | None = field(default=None, compare=False, repr=False)

    def label(self, position: int) -> str:
        """'row 61 of b.csv' (a dataset's part) or 'row 61' (a file) for a 0-based position in the table."""
        read = int(self.positions[position]) if self.positions is not None else int(position)
        if self.parts:
            k = bisect.bisect_right(self.starts, read) - 1
            return f"row {read - self.starts[k] + 1} of {self.parts[k]}"
        return f"row {read + 1}"

    def subset(self, kept: np.ndarray) -> RowOrigin:
        """The origin of the rows at positions ``kept`` (in order), the others left out."""
        kept = np.asarray(kept, dtype=np.int64)
        return replace(self, positions=kept if self.positions is None else self.positions[kept])


@dataclass(frozen=True)
class Judgments:
    """A judgments table and where it came from (for messages): ``source`` names it, ``origin`` (when its rows
    are not simply the rows of ``source`` in order) where each row was read."""

    frame: pd.DataFrame
    source: str
    origin: RowOrigin | None = field(default=None, compare=False, repr=False)

    @property
    def n_rows(self) -> int:
        return len(self.frame)

    def rows(self, positions: np.ndarray, values: Any = None) -> str:
        """:func:`format_rows` with each row named where it was read."""
        return format_rows(positions, values, self.origin)

    def subset(self, kept: np.ndarray, source: str | None = None) -> Judgments:
        """The rows at positions ``kept``, their origin kept for messages."""
        kept = np.asarray(kept, dtype=np.int64)
        return Judgments(self.frame.iloc[kept].reset_index(drop=True), source or self.source,
                         (self.origin or RowOrigin()).subset(kept))


def as_judgments(data: Any, *, source: str | None = None) -> Judgments:
    """The judgments table of an in-memory frame: a :class:`Judgments`, a ``pandas.DataFrame`` or any frame
    with ``to_pandas()`` (polars, pyarrow tables).

    The numeric core takes tables, never paths: read a file first with :func:`evalgauge.read` (which is
    :func:`evalgauge.io.read_judgments`), once, at the edge.
    """
    if isinstance(data, Judgments):
        return data
    if isinstance(data, pd.DataFrame):
        return Judgments(data.reset_index(drop=True), source or "the data frame")
    if isinstance(data, (str, Path)):
        raise DataError(f"{data}: a path was given where a judgments table is expected; read the file first "
                        f"with evalgauge.read({str(data)!r}) and pass its result.")
    if hasattr(data, "to_pandas"):
        return Judgments(data.to_pandas().reset_index(drop=True), source or "the data frame")
    raise DataError(f"expected a judgments table (evalgauge.read(...), a pandas or polars data frame), not "
                    f"{type(data).__name__}.")


def rename_columns(judgments: Judgments, columns: dict[str, str]) -> Judgments:
    """``{role: column}``: the file's column takes the role's name (``--system exam_model``)."""
    frame = judgments.frame
    mapping = {}
    for role, column in columns.items():
        if column == role:
            continue
        if column not in frame.columns:
            raise DataError(f"{judgments.source}: no column '{column}' (for the {role}). The columns are: "
                            f"{', '.join(map(str, frame.columns))}.")
        if role in frame.columns and role not in columns.values():
            raise DataError(f"{judgments.source}: the file already has a column '{role}'; it cannot also take "
                            f"'{column}' as the {role}. Rename one of them.")
        mapping[column] = role
    if not mapping:
        return judgments
    return Judgments(frame.rename(columns=mapping), judgments.source, judgments.origin)


def format_rows(rows: np.ndarray, values: Any = None, origin: RowOrigin | None = None) -> str:
    """'row 3 ('abc'), row 9 ('') and 4 more' for 0-based row positions; with ``origin``, each row where it was
    read ('row 61 of b.csv')."""
    rows = np.asarray(rows)
    shown = []
    for k, r in enumerate(rows[:MAX_ROWS_LISTED]):
        label = origin.label(int(r)) if origin is not None else f"row {int(r) + 1}"
        if values is not None:
            label += f" ({values[k]!r})"
        shown.append(label)
    text = ", ".join(shown)
    if len(rows) > MAX_ROWS_LISTED:
        text += f" and {len(rows) - MAX_ROWS_LISTED} more"
    return text


def numeric_scores(judgments: Judgments, column: str) -> np.ndarray:
    """The score column as float64, or a :class:`DataError` listing bad rows.

    Empty cells and text that is not a number are both reported, with the first
    rows that hold them, because silently dropping them would change the design.
    """
    frame = judgments.frame
    require_columns(judgments, [column], what="score column")
    raw = frame[column]
    if pd.api.types.is_datetime64_any_dtype(raw) or pd.api.types.is_timedelta64_dtype(raw) \
            or isinstance(raw.dtype, pd.PeriodDtype):
        raise DataError(f"{judgments.source}: column '{column}' holds dates or times ({raw.dtype}), not scores; "
                        "name the score column with `score`.")
    if pd.api.types.is_bool_dtype(raw):
        raw = raw.astype(np.int8)
    values = pd.to_numeric(raw, errors="coerce")
    y = values.to_numpy(dtype=np.float64, na_value=np.nan)
    huge = np.flatnonzero(np.isfinite(y) & (np.abs(y) > MAX_ABS_SCORE))
    if huge.size:
        shown = judgments.rows(huge, [str(v) for v in raw.iloc[huge[:MAX_ROWS_LISTED]]])
        raise DataError(f"{judgments.source}: column '{column}' has {huge.size} value(s) too large to compute with "
                        f"(|score| > {MAX_ABS_SCORE:.0e}): {shown}. "
                        "Squares of such numbers overflow; fix the rows or rescale the scores.")
    bad = ~np.isfinite(y)
    if bad.any():
        missing = raw.isna().to_numpy()
        nonnum = bad & ~missing
        parts = []
        if nonnum.any():
            idx = np.flatnonzero(nonnum)
            vals = [str(v) for v in raw.iloc[idx[:MAX_ROWS_LISTED]]]
            parts.append(f"{nonnum.sum()} value(s) that are not numbers or are infinite: "
                         f"{judgments.rows(idx, vals)}")
        if missing.any():
            idx = np.flatnonzero(missing)
            parts.append(f"{missing.sum()} empty score(s): {judgments.rows(idx)}")
        raise DataError(
            f"{judgments.source}: column '{column}' must hold a number on every row, but it has "
            + "; and ".join(parts)
            + ". Fix or remove these rows (an empty completion or a parse failure is a missing "
            "score, not a zero); evalgauge does not drop rows silently"
            + ("." if nonnum.any() else ": dropping missing scores (`drop_missing`) removes them and says how many.")
        )
    return y


def without_empty(judgments: Judgments, column: str) -> tuple[Judgments, np.ndarray]:
    """The rows whose ``column`` is not empty, and the (0-based) positions of those dropped."""
    if column not in judgments.frame:
        return judgments, np.zeros(0, dtype=np.int64)
    missing = judgments.frame[column].isna().to_numpy()
    if not missing.any():
        return judgments, np.zeros(0, dtype=np.int64)
    return judgments.subset(np.flatnonzero(~missing)), np.flatnonzero(missing)


def require_columns(judgments: Judgments, columns: list[str], *, what: str = "column") -> None:
    """Raise a :class:`DataError` naming any missing column and listing the real ones."""
    have = list(judgments.frame.columns)
    missing = [c for c in columns if c not in have]
    if missing:
        names = ", ".join(f"'{c}'" for c in missing)
        raise DataError(
            f"{judgments.source}: no {what} {names}. The columns are: {', '.join(have)}. "
            "Name the right column (for example `score`, `facets`) or rename it in the file."
        )


def keep_levels(judgments: Judgments, column: str, levels: list[str]) -> Judgments:
    """Only the rows whose ``column`` is one of ``levels`` (a judge universe, an item subset).

    The sizing paper refits on judge subsets (sec. 5.5): every quantity is
    conditional on the universe of judges admitted. Unknown levels are an error
    that lists the real ones.
    """
    require_columns(judgments, [column])
    present = judgments.frame[column].astype(str)
    have = sorted(present.unique())
    unknown = [lv for lv in levels if lv not in set(have)]
    if unknown:
        raise DataError(f"{judgments.source}: {column} has no level(s) {', '.join(repr(u) for u in unknown)}; "
                        f"the levels are {', '.join(have)}.")
    mask = present.isin(levels).to_numpy()
    return judgments.subset(np.flatnonzero(mask), f"{judgments.source} [{column} in {', '.join(levels)}]")
