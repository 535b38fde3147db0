"""The judgments table: long format, one row per scored observation.

Input may be a pandas DataFrame, a polars DataFrame, or a CSV, TSV, Parquet or
JSONL file. Rows are reported to the user 1-based, counting data rows after any
header ("row 1" is the first judgment), so a message can be checked against the
file in a spreadsheet or with ``sed -n``.
"""

from __future__ import annotations

import codecs
import json
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
#: Scores beyond this are refused: past 2^53 (9e15) floats lose integer precision, and the variance
#: algebra (squares of squares in the REML criterion and its derivatives) overflows long before 1e308.
MAX_ABS_SCORE = 1e15


@dataclass(frozen=True)
class Judgments:
    """A judgments table and where it came from (for messages)."""

    frame: pd.DataFrame
    source: str

    @property
    def n_rows(self) -> int:
        return len(self.frame)


def read_judgments(data: Any, *, source: str | None = None, encoding: str | None = None,
                   sep: str | None = None, columns: dict[str, str] | None = None) -> Judgments:
    """Read judgments from a path or a data frame.

    Accepts a ``pandas.DataFrame``, any frame with ``to_pandas()`` (polars,
    pyarrow tables), or a path to a ``.csv``, ``.tsv``, ``.parquet`` or
    ``.jsonl`` file. Raises :class:`DataError` naming the file when it cannot
    be read. ``encoding`` (default UTF-8) and ``sep`` (default: sniffed among
    comma, semicolon, tab and bar) are for text files; ``columns`` maps a role to
    the file's column (``{"system": "exam_model"}``), renaming it. Control
    characters in text columns (terminal escape sequences) are shown escaped.
    """
    if isinstance(data, Judgments):
        judgments = data
    elif isinstance(data, pd.DataFrame):
        judgments = Judgments(data.reset_index(drop=True), source or "the data frame")
    elif hasattr(data, "to_pandas") and not isinstance(data, (str, Path)):
        judgments = Judgments(data.to_pandas().reset_index(drop=True), source or "the data frame")
    else:
        path = Path(data)
        judgments = Judgments(_escape_controls(_read_file(path, encoding, sep)), source or str(path))
    return rename_columns(judgments, columns) if columns else judgments


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
    return Judgments(frame.rename(columns=mapping), judgments.source)


_CONTROL = r"[\x00-\x08\x0b-\x1f\x7f-\x9f]"


def _escape_controls(frame: pd.DataFrame) -> pd.DataFrame:
    """Judge output and labels are untrusted: a terminal escape sequence in a label must not reach the
    terminal, so control characters become visible escapes (\\x1b) in every text column and header."""
    import re

    pattern = re.compile(_CONTROL)

    def esc(text: str) -> str:
        return pattern.sub(lambda m: f"\\x{ord(m.group()):02x}", text)

    frame.columns = [esc(str(c)) for c in frame.columns]
    for col in frame.columns:
        values = frame[col]
        if values.dtype == object or pd.api.types.is_string_dtype(values):
            has = values.astype("string").str.contains(_CONTROL, regex=True, na=False)
            if has.any():
                frame[col] = values.where(~has, values[has].astype(str).map(esc))
    return frame


def _read_file(path: Path, encoding: str | None = None, sep: str | None = None) -> pd.DataFrame:
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
    if kind in ("csv", "tsv", "jsonl"):
        _check_encoding(path, encoding)
    try:
        if kind in ("csv", "tsv"):
            # Facet labels stay text: '01' and '1' are different items.
            frame = pd.read_csv(path, sep=sep or _sniff_sep(path, kind, encoding), dtype=str,
                                keep_default_na=True, skipinitialspace=True, encoding=encoding or "utf-8")
        elif kind == "parquet":
            frame = _read_parquet(path)
        else:
            frame = _read_jsonl(path, encoding)
    except (pd.errors.ParserError, ValueError, OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: could not be read as {kind.upper()}: {_first_line(exc)}") from None
    except ImportError as exc:  # pragma: no cover - pyarrow is a dependency
        raise DataError(f"{path}: reading {kind} needs an extra package: {exc}") from None
    if frame.shape[1] == 0 or len(frame) == 0:
        raise DataError(f"{path}: has no data rows. A judgments file has a header and one row per score.")
    frame.columns = [str(c).strip() for c in frame.columns]
    return frame


def _read_parquet(path: Path) -> pd.DataFrame:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
        table.validate(full=True)  # invalid UTF-8 in a string column would only surface later, deep inside
        return table.to_pandas()
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"{path}: not a readable Parquet file ({_first_line(exc)}); it may be truncated or "
                        "damaged. Write it again, or export CSV.") from None


def _check_encoding(path: Path, encoding: str | None) -> None:
    """A text file that is not in its encoding: the line and column of the first bad byte, and the fix."""
    enc = encoding or "utf-8"
    try:
        codecs.lookup(enc)
    except LookupError:
        raise DataError(f"--encoding {enc}: not an encoding Python knows (e.g. utf-8, latin-1, cp1252).") from None
    data = path.read_bytes()
    try:
        data.decode(enc)
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise DataError(f"{path}: line {line}, column {col}: byte 0x{data[exc.start]:02x} is not valid {enc}. The "
                        "file is in another encoding: re-save it as UTF-8, or name its encoding with --encoding "
                        "(latin-1 and cp1252 are common for spreadsheets).") from None


def _sniff_sep(path: Path, kind: str, encoding: str | None) -> str:
    """The delimiter of a delimited file, from its header: comma, semicolon (European spreadsheets), tab or bar."""
    default = "\t" if kind == "tsv" else ","
    with path.open(encoding=encoding or "utf-8", errors="replace") as fh:
        header = fh.readline()
    counts = {d: header.count(d) for d in (",", ";", "\t", "|")}
    if counts[default] > 0:
        return default
    best = max(counts, key=counts.get)
    return best if counts[best] > 0 else default


def _read_jsonl(path: Path, encoding: str | None) -> pd.DataFrame:
    return pd.DataFrame.from_records(jsonl_records(path, encoding))


def jsonl_records(path: Path, encoding: str | None = None) -> list[dict]:
    """JSON Lines as a list of objects, with the line number of a line that is not a JSON object."""
    records = []
    with path.open(encoding=encoding or "utf-8") as fh:
        for k, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}: line {k}, character {exc.pos + 1} is not valid JSON ({exc.msg}); each line "
                                "must be one JSON object (the file may be truncated).") from None
            if not isinstance(record, dict):
                raise DataError(f"{path}: line {k} is a JSON {_json_kind(record)}, not an object with one field "
                                "per column.")
            records.append(record)
    return records


def _json_kind(value: Any) -> str:
    return {list: "list", str: "string", int: "number", float: "number", bool: "true/false"}.get(type(value), "null")


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
    huge = np.flatnonzero(np.isfinite(y) & (np.abs(y) > MAX_ABS_SCORE))
    if huge.size:
        raise DataError(f"{judgments.source}: column '{column}' has {huge.size} value(s) too large to compute with "
                        f"(|score| > {MAX_ABS_SCORE:.0e}): {format_rows(huge, [str(v) for v in raw.iloc[huge[:5]]])}. "
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
                         f"{format_rows(idx, vals)}")
        if missing.any():
            idx = np.flatnonzero(missing)
            parts.append(f"{missing.sum()} empty score(s): {format_rows(idx)}")
        raise DataError(
            f"{judgments.source}: column '{column}' must hold a number on every row, but it has "
            + "; and ".join(parts)
            + ". Fix or remove these rows (an empty completion or a parse failure is a missing "
            "score, not a zero); evalgauge does not drop rows silently"
            + ("." if nonnum.any() else ": dropping missing scores (--drop-missing) removes them and says how many.")
        )
    return y


def without_empty(judgments: Judgments, column: str) -> tuple[Judgments, np.ndarray]:
    """The rows whose ``column`` is not empty, and the (0-based) positions of those dropped."""
    if column not in judgments.frame:
        return judgments, np.zeros(0, dtype=np.int64)
    missing = judgments.frame[column].isna().to_numpy()
    if not missing.any():
        return judgments, np.zeros(0, dtype=np.int64)
    kept = Judgments(judgments.frame.loc[~missing].reset_index(drop=True), judgments.source)
    return kept, np.flatnonzero(missing)


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
