"""The judgments table: long format, one row per scored observation.

Input may be a pandas DataFrame, a polars DataFrame, or a CSV, TSV, Parquet or
JSONL file. Rows are reported to the user 1-based, counting data rows after any
header ("row 1" is the first judgment), so a message can be checked against the
file in a spreadsheet or with ``sed -n``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .errors import DataError

SUPPORTED_SUFFIXES = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".sqlite": "run",
    ".db": "run",
}

#: How many offending rows a message lists before it says "and N more".
MAX_ROWS_LISTED = 5


@dataclass(frozen=True)
class Judgments:
    """A judgments table and where it came from (for messages)."""

    frame: pd.DataFrame
    source: str

    @property
    def n_rows(self) -> int:
        return len(self.frame)


def read_judgments(data: Any, *, source: str | None = None) -> Judgments:
    """Read judgments from a path or a data frame.

    Accepts a ``pandas.DataFrame``, any frame with ``to_pandas()`` (polars,
    pyarrow tables), or a path to a ``.csv``, ``.tsv``, ``.parquet`` or
    ``.jsonl`` file. Raises :class:`DataError` naming the file when it cannot
    be read.
    """
    if isinstance(data, Judgments):
        return data
    if isinstance(data, pd.DataFrame):
        return Judgments(data.reset_index(drop=True), source or "the data frame")
    if hasattr(data, "to_pandas") and not isinstance(data, (str, Path)):
        return Judgments(data.to_pandas().reset_index(drop=True), source or "the data frame")
    path = Path(data)
    return Judgments(_read_file(path), source or str(path))


def _read_file(path: Path) -> pd.DataFrame:
    if not path.exists():
        raise DataError(f"{path}: no such file. Check the path (relative paths start at {Path.cwd()}).")
    if path.is_dir():
        raise DataError(f"{path}: is a directory; give a CSV, TSV, Parquet or JSONL file.")
    kind = SUPPORTED_SUFFIXES.get(path.suffix.lower())
    if kind is None:
        supported = ", ".join(sorted(SUPPORTED_SUFFIXES))
        raise DataError(
            f"{path}: unsupported file type '{path.suffix or '(none)'}'. "
            f"evalgauge reads {supported}; convert the file or rename it if it is one of these."
        )
    if kind == "run":  # a collector run database: its judgments (facet levels and scores)
        from .collect.store import judgments_from_run

        return judgments_from_run(path)
    try:
        if kind in ("csv", "tsv"):
            # Facet labels stay text: '01' and '1' are different items.
            frame = pd.read_csv(path, sep="\t" if kind == "tsv" else ",", dtype=str,
                                keep_default_na=True, skipinitialspace=True)
        elif kind == "parquet":
            frame = pd.read_parquet(path)
        else:
            frame = pd.read_json(path, lines=True, dtype=False)
    except (pd.errors.ParserError, ValueError, OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: could not be read as {kind.upper()}: {_first_line(exc)}") from None
    except ImportError as exc:  # pragma: no cover - pyarrow is a dependency
        raise DataError(f"{path}: reading {kind} needs an extra package: {exc}") from None
    if frame.shape[1] == 0 or len(frame) == 0:
        raise DataError(f"{path}: has no data rows. A judgments file has a header and one row per score.")
    frame.columns = [str(c).strip() for c in frame.columns]
    return frame


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def format_rows(rows: np.ndarray, values: Any = None) -> str:
    """'row 3 ('abc'), row 9 ('') and 4 more' for 0-based row positions."""
    rows = np.asarray(rows)
    shown = []
    for k, r in enumerate(rows[:MAX_ROWS_LISTED]):
        label = f"row {int(r) + 1}"
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
    if pd.api.types.is_bool_dtype(raw):
        raw = raw.astype(np.int8)
    values = pd.to_numeric(raw, errors="coerce")
    y = values.to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(y)
    if bad.any():
        missing = raw.isna().to_numpy()
        nonnum = bad & ~missing
        parts = []
        if nonnum.any():
            idx = np.flatnonzero(nonnum)
            vals = [str(v) for v in raw.iloc[idx[:MAX_ROWS_LISTED]]]
            parts.append(f"{nonnum.sum()} value(s) that are not numbers or are infinite: "
                         f"{format_rows(idx, vals)}")
        if missing.any():
            idx = np.flatnonzero(missing)
            parts.append(f"{missing.sum()} empty score(s): {format_rows(idx)}")
        raise DataError(
            f"{judgments.source}: column '{column}' must hold a number on every row, but it has "
            + "; and ".join(parts)
            + ". Fix or remove these rows (an empty completion or a parse failure is a missing "
            "score, not a zero); evalgauge does not drop rows silently"
            + ("." if nonnum.any() else ": --drop-missing (drop_missing=True) drops empty scores and says so.")
        )
    return y


def require_columns(judgments: Judgments, columns: list[str], *, what: str = "column") -> None:
    """Raise a :class:`DataError` naming any missing column and listing the real ones."""
    have = list(judgments.frame.columns)
    missing = [c for c in columns if c not in have]
    if missing:
        names = ", ".join(f"'{c}'" for c in missing)
        raise DataError(
            f"{judgments.source}: no {what} {names}. The columns are: {', '.join(have)}. "
            "Name the right column (for example --score, --facets) or rename it in the file."
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
    return Judgments(judgments.frame.loc[mask].reset_index(drop=True),
                     f"{judgments.source} [{column} in {', '.join(levels)}]")
