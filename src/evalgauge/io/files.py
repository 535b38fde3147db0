"""Judgment files: CSV, TSV, Parquet and JSON Lines, read with messages that point into the file.

Rows are reported 1-based, counting data rows after any header ("row 1" is the first judgment), so a
message can be checked against the file in a spreadsheet or with ``sed -n``.
"""

from __future__ import annotations

import codecs
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import DataError

_CONTROL = r"[\x00-\x08\x0b-\x1f\x7f-\x9f]"


def escape_controls(frame: pd.DataFrame) -> pd.DataFrame:
    """Judge output and labels are untrusted: a terminal escape sequence in a label must not reach the
    terminal, so control characters become visible escapes (\\x1b) in every text column and header."""
    import re

    pattern = re.compile(_CONTROL)

    def esc(text: str) -> str:
        return pattern.sub(lambda m: f"\\x{ord(m.group()):02x}", text)

    frame.columns = [esc(str(c)) for c in frame.columns]
    for col in frame.columns:
        values = frame[col]
        if (values.dtype == object or pd.api.types.is_string_dtype(values)) and _may_hold_controls(values):
            has = values.astype("string").str.contains(_CONTROL, regex=True, na=False)
            if has.any():
                frame[col] = values.where(~has, values[has].astype(str).map(esc))
    return frame


def _may_hold_controls(values: pd.Series) -> bool:
    """False when no value of an Arrow-backed text column can hold a control character of :data:`_CONTROL`
    (none of its bytes writes one: below 0x20 but tab and newline, 0x7f, or 0xc2, which leads U+0080-U+009F in
    UTF-8): a few passes over the column's bytes instead of a regular expression per value. True otherwise, and
    for a column of Python objects."""
    if not isinstance(values.array, pd.arrays.ArrowStringArray):
        return True
    import pyarrow as pa

    arrow = pa.array(values.array)
    for chunk in arrow.chunks if isinstance(arrow, pa.ChunkedArray) else [arrow]:
        if not (pa.types.is_string(chunk.type) or pa.types.is_large_string(chunk.type)):
            return True
        if len(chunk) == 0 or chunk.buffers()[2] is None:
            continue
        # a chunk may be a slice of a larger buffer: only its own bytes
        width = np.int64 if pa.types.is_large_string(chunk.type) else np.int32
        offsets = np.frombuffer(chunk.buffers()[1], dtype=width)
        data = np.frombuffer(chunk.buffers()[2], dtype=np.uint8)[
            offsets[chunk.offset]:offsets[chunk.offset + len(chunk)]]
        low = data[data < 0x20]
        if ((low != 0x09) & (low != 0x0a)).any() or (data == 0x7f).any() or (data == 0xc2).any():
            return True
    return False


def read_table(path: Path, kind: str, encoding: str | None = None, sep: str | None = None) -> pd.DataFrame:
    """A CSV, TSV, Parquet or JSONL file (``kind``) as a frame of text columns (CSV/TSV) or typed ones."""
    if kind in ("csv", "tsv", "jsonl"):
        _check_encoding(path, encoding)
    _check_width(path, kind, encoding, sep)
    try:
        if kind in ("csv", "tsv"):
            frame = _read_delimited(path, sep or _sniff_sep(path, kind, encoding), encoding or "utf-8")
        elif kind == "parquet":
            frame = _read_parquet(path)
        else:
            frame = _read_jsonl(path, encoding)
    except (pd.errors.ParserError, ValueError, OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: could not be read as {kind.upper()}: {_first_line(exc)}") from None
    except RecursionError:
        raise DataError(f"{path}: a JSON value is nested too deeply to read (thousands of levels); no judgment "
                        "file has that shape: the file is damaged or not a judgments file.") from None
    except ImportError as exc:  # pragma: no cover - pyarrow is a dependency
        raise DataError(f"{path}: reading {kind} needs an extra package: {exc}") from None
    if frame.shape[1] == 0 or len(frame) == 0:
        raise DataError(f"{path}: has no data rows. A judgments file has a header and one row per score.")
    frame.columns = [str(c).strip() for c in frame.columns]
    return frame


def _read_delimited(path: Path, sep: str, encoding: str) -> pd.DataFrame:
    """Every column as text: facet labels stay text ('01' and '1' are different items). pandas reads a column
    as text (``dtype=str``) at about four times the cost of its own inference, so where that inference makes
    Arrow strings (pandas 3) the file is read once with it and only the columns that did not come out as text
    (numbers, booleans, empty columns) are read again as text, when most columns are text in the first rows: the
    same frame as one reading with ``dtype=str``."""
    options = {"sep": sep, "keep_default_na": True, "skipinitialspace": True, "encoding": encoding}
    if not _mostly_text(pd.read_csv(path, nrows=1000, **options)):
        return pd.read_csv(path, dtype=str, **options)  # reading most columns twice would cost more
    frame = pd.read_csv(path, **options)
    again = [k for k, dtype in enumerate(frame.dtypes) if not _arrow_text(dtype)]
    if not again:
        return frame
    if not isinstance(frame.index, pd.RangeIndex):  # rows longer than the header: pandas' implicit index
        return pd.read_csv(path, dtype=str, **options)
    text = pd.read_csv(path, dtype=str, usecols=again, **options)
    if len(text) != len(frame):  # pragma: no cover - one tokenizer, the same rows
        return pd.read_csv(path, dtype=str, **options)
    for k, column in zip(again, range(text.shape[1]), strict=True):
        frame.isetitem(k, text.iloc[:, column])
    return frame


def _mostly_text(sample: pd.DataFrame) -> bool:
    """Whether more than half of a file's columns are Arrow text in its first rows (then the second reading is
    short; pandas before 3 infers no Arrow text, and reads once)."""
    return 2 * sum(map(_arrow_text, sample.dtypes)) > sample.shape[1]


def _arrow_text(dtype) -> bool:
    return isinstance(dtype, pd.StringDtype) and dtype.storage == "pyarrow"


#: a judgments table has a column per facet, a score and a few more; past this it is not one (a wide
#: export of 100,000 columns would take minutes and gigabytes to parse before any check could say so)
MAX_COLUMNS = 10_000


def _check_width(path: Path, kind: str, encoding: str | None, sep: str | None) -> None:
    """Refuse, before parsing, a table far wider than any judgments table (from its header or schema)."""
    if kind == "parquet":
        import pyarrow.parquet as pq

        try:
            width = len(pq.read_schema(path).names)
        except Exception:  # a damaged file: the reader says why
            return
    elif kind in ("csv", "tsv"):
        with path.open(encoding=encoding or "utf-8", errors="replace") as fh:
            header = fh.readline(64 * 1024 * 1024)
        width = header.count(sep or _sniff_sep(path, kind, encoding)) + 1
    else:
        return
    if width > MAX_COLUMNS:
        raise DataError(f"{path}: has {width:,} columns, more than the {MAX_COLUMNS:,} a judgments table can have "
                        "(one column per facet, a score, a few more). A wide table of scores, one column per "
                        "judge or item, becomes a judgments table with `evalgauge import wide`.")


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
        raise DataError(f"`encoding` {enc}: not an encoding Python knows (e.g. utf-8, latin-1, cp1252).") from None
    data = path.read_bytes()
    try:
        data.decode(enc)
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise DataError(f"{path}: line {line}, column {col}: byte 0x{data[exc.start]:02x} is not valid {enc}. The "
                        "file is in another encoding: re-save it as UTF-8, or name its encoding with `encoding` "
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


def files_in(paths, suffixes: tuple[str, ...], what: str, skip: frozenset[str] = frozenset()) -> list[Path]:
    """The files named, a folder standing for every file under it with one of ``suffixes`` (names in ``skip``
    left out), in a stable order; a folder with none of them is refused, naming ``what`` was looked for."""
    out = []
    for p in map(Path, paths):
        if not p.is_dir():
            out.append(p)
            continue
        found = sorted(q for q in p.rglob("*") if q.suffix in suffixes and q.name not in skip and q.is_file())
        if not found:
            raise DataError(f"{p}: a folder with no {what} ({', '.join(suffixes)}) in it.")
        out += found
    return out


def read_json(path: Path, what: str) -> Any:
    """A whole JSON file (another tool's log or result), with a message that names the file and what it was
    taken for, the line and column of a syntax error, or the byte that is not UTF-8."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: not {what} (JSON error at line {exc.lineno}, column {exc.colno}: "
                        f"{exc.msg}).") from None
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text (byte {exc.start}); is this {what}?") from None


def _json_kind(value: Any) -> str:
    return {list: "list", str: "string", int: "number", float: "number", bool: "true/false"}.get(type(value), "null")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
