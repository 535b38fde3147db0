"""The readers by file type: :func:`read_judgments` picks one from the file's suffix in :data:`READERS` (a new
format is one :func:`register_reader` call); :func:`import_files` turns other tools' files into the same table.
Re-exported by :mod:`evalgauge.io`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ..data import Judgments, as_judgments, rename_columns
from ..errors import DataError


@dataclass(frozen=True)
class Reader:
    """How one kind of file becomes a frame: ``read(path, encoding, sep)``."""

    kind: str
    description: str
    read: Callable[[Path, str | None, str | None], pd.DataFrame]


#: suffix (lower case, with the dot) -> its reader
READERS: dict[str, Reader] = {}


def register_reader(suffixes: tuple[str, ...], reader: Reader) -> None:
    """Make :func:`read_judgments` read files ending in ``suffixes`` with ``reader``."""
    for suffix in suffixes:
        READERS[suffix.lower()] = reader


def _table(kind: str) -> Callable[[Path, str | None, str | None], pd.DataFrame]:
    def read(path: Path, encoding: str | None, sep: str | None) -> pd.DataFrame:
        from .files import read_table

        return read_table(path, kind, encoding, sep)

    return read


def _run(path: Path, encoding: str | None, sep: str | None) -> pd.DataFrame:
    from .runs import read_run

    return read_run(path)


register_reader((".csv",), Reader("csv", "comma-separated text", _table("csv")))
register_reader((".tsv",), Reader("tsv", "tab-separated text", _table("tsv")))
register_reader((".parquet", ".pq"), Reader("parquet", "Apache Parquet", _table("parquet")))
register_reader((".jsonl", ".ndjson"), Reader("jsonl", "JSON Lines, one object per judgment", _table("jsonl")))
register_reader((".sqlite", ".db"), Reader("run", "an `evalgauge run` database", _run))


def reader_for(path: str | Path) -> Reader:
    """The reader of ``path`` by its suffix, or a :class:`DataError` listing the supported ones."""
    path = Path(path)
    reader = READERS.get(path.suffix.lower())
    if reader is None:
        raise DataError(f"{path}: unsupported file type '{path.suffix or '(none)'}'. evalgauge reads "
                        f"{', '.join(sorted(READERS))}; convert the file or rename it if it is one of these.")
    return reader


def read_judgments(data: Any, *, source: str | None = None, encoding: str | None = None,
                   sep: str | None = None, columns: dict[str, str] | None = None) -> Judgments:
    """Judgments from a path (CSV, TSV, Parquet, JSONL, run database), a dataset (a folder of parts, a glob,
    hive-partitioned paths: :mod:`evalgauge.io.datasets`) or a data frame, read once.

    ``encoding`` (default UTF-8) and ``sep`` (default: sniffed among comma, semicolon, tab and bar) are for
    text files; ``columns`` maps a role to the file's column (``{"system": "exam_model"}``), renaming it.
    Control characters in text (terminal escape sequences) are shown escaped. A file that cannot be read
    raises :class:`DataError` naming the file, and the line or row where it can.
    """
    if isinstance(data, (str, Path)):
        from ..inputs import check_input_file
        from .datasets import is_dataset, read_dataset
        from .engine import check_fits_in_memory
        from .files import escape_controls

        path, origin = Path(data), None
        if path.suffix.lower() not in (".sqlite", ".db"):
            check_fits_in_memory(data)
        if is_dataset(data):  # a folder of parts, a glob, hive-partitioned paths
            frame, origin = read_dataset(data, encoding, sep)
        else:
            frame = reader_for(check_input_file(path)).read(path, encoding, sep)
        judgments = Judgments(escape_controls(frame), source or str(path), origin)
    else:
        judgments = as_judgments(data, source=source)
    return rename_columns(judgments, columns) if columns else judgments


def read_input(data: Any, *, encoding: str | None = None, sep: str | None = None,
               columns: dict[str, str] | None = None):
    """:func:`read_judgments`, and for a run database also its :class:`~evalgauge.io.runs.RunRecord` (the
    calls behind the collector's diagnostics), from one reading; ``(judgments, None)`` for anything else."""
    if isinstance(data, (str, Path)) and Path(data).suffix.lower() in (".sqlite", ".db") and Path(data).exists():
        from ..inputs import check_input_file
        from .files import escape_controls
        from .runs import read_run_record

        record = read_run_record(check_input_file(data))
        judgments = Judgments(escape_controls(record.judgments()), str(data))
        return (rename_columns(judgments, columns) if columns else judgments), record
    return read_judgments(data, encoding=encoding, sep=sep, columns=columns), None


__all__ = ["READERS", "Reader", "read_input", "read_judgments", "reader_for", "register_reader"]
