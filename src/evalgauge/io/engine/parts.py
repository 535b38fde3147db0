"""A file's or a dataset's parts, their schemas compared before a scan, what reading them in memory would take,
and the paths as each engine names them."""

from __future__ import annotations

import re
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from ... import machine
from ...errors import DataError, EvalGaugeError
from ..datasets import PART_KINDS, dataset_parts, is_dataset, partition_keys

if TYPE_CHECKING:  # pandas is loaded when the cells are turned into a frame, after the scan has started
    pass


#: the memory a reading would take (:func:`in_memory_estimate`, a dataset's parts together) above which engine
#: "auto" reduces on DuckDB when nothing asked for needs the rows: from about 10 MB of CSV DuckDB is the faster
#: and the leaner (4.8M judgments: a 119 MB CSV in 2.0 s and 0.31 GB against 7.5 s and 0.91 GB in memory, its
#: 8 MB Parquet form in 1.1 s and 0.22 GB against 3.2 s and 0.75 GB; the same components)
ENGINE_ABOVE = 512 * 1024**2


#: the memory one value of a table takes once read (pandas' frame and the fit's copies; measured 31-40 bytes on
#: a CSV and a Parquet file of 4.8M rows x 4 columns), and a text file's bytes per value (that CSV: 6.2)
BYTES_PER_VALUE, TEXT_BYTES_PER_VALUE = 40, 6


#: the share of the machine's available memory a reading may plan to take
MEMORY_SHARE = 0.5
#: DuckDB's memory limit: a group-by with more cells than fit in it spills to a temporary file
DUCKDB_MEMORY = "1GB"


#: the widest span of whole-number replicates given bitmaps of their own (beyond it, the 32 slots and the exact look)
_SPAN_MAPS = 16


def replicate_span(parts: list[Path], column: str) -> tuple[int, int] | None:
    """The least and greatest value of a whole-number replicate column over Parquet parts, from their row groups'
    statistics (no rows read), when it spans more than 32 numbers and at most ``62 * _SPAN_MAPS``; None
    otherwise (text parts, another type, a part without statistics, or a span the 32 slots cover)."""
    if _kind(parts) != "parquet":
        return None
    least, greatest = None, None
    for part in parts:
        meta = parquet_footer(part)
        names = [meta.schema.column(j).name for j in range(meta.num_columns)]
        if column not in names:
            return None
        j = names.index(column)
        for g in range(meta.num_row_groups):
            stats = meta.row_group(g).column(j).statistics
            if stats is None or not stats.has_min_max or not isinstance(stats.min, int):
                return None
            least = stats.min if least is None else min(least, stats.min)
            greatest = stats.max if greatest is None else max(greatest, stats.max)
    if least is None or greatest - least < 32 or greatest - least >= 62 * _SPAN_MAPS:
        return None
    return least, greatest


def _parts(source) -> list[Path]:
    if is_dataset(source):
        return dataset_parts(source)
    path = Path(str(source))
    if not path.is_file():
        raise DataError(f"{path}: no such file.")
    if path.suffix.lower() not in PART_KINDS:
        raise DataError(f"{path}: the engine reads Parquet, CSV, TSV and JSONL, not '{path.suffix or '(none)'}'.")
    return [path]


def _kind(parts: list[Path]) -> str:
    return PART_KINDS[parts[0].suffix.lower()]


def _hive(parts: list[Path], root: Path | None) -> bool:
    return root is not None and any("=" in seg for p in parts for seg in p.relative_to(root).parts[:-1])


class Parts(NamedTuple):
    """What an engine scans: the parts (one kind of file), the dataset's folder (for hive partitions) and a text
    part's delimiter (None: a comma, a tab for TSV)."""

    files: list[Path]
    root: Path | None = None
    sep: str | None = None

    @property
    def delimiter(self) -> str:
        return self.sep or ("\t" if _kind(self.files) == "tsv" else ",")


def _file_columns(columns: list[str], data: Parts) -> list[str]:
    """The columns a text part's own fields fill (not the hive partition keys, not the file's name)."""
    keys = set(partition_keys(data.files[0], data.root)) if _hive(data.files, data.root) else set()
    return [c for c in columns if c not in keys and c != "filename"]


def literal_path(path: Path | str) -> str:
    """A file's path as DuckDB's readers take it literally: they read every path as a glob, so ``x[1].csv``
    would read ``x1.csv``; each glob character is written as a one-character class (``[[]``, ``[*]``, ``[?]``)."""
    return re.sub(r"([\[*?])", r"[\1]", str(path))


def hadoop_path(path: Path | str) -> str:
    """A file's path as Spark's (Hadoop's) readers take it literally: their glob characters escaped with a
    backslash."""
    return re.sub(r"([\\\[\]{}*?])", r"\\\1", str(path))


def _numeric(type_name: str) -> bool:
    return type_name.upper().split("(")[0] in {"TINYINT", "SMALLINT", "INT", "INTEGER", "BIGINT", "HUGEINT", "FLOAT",
                                               "DOUBLE", "DECIMAL", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT"}


def check_schemas(parts: list[Path], sep: str | None = None) -> None:
    """Every part has the first part's columns, and (Parquet, JSONL) numbers where the first has numbers: a
    missing or extra column, or text among numbers, is named with its file and column before the scan, from the
    parts' schemas (a Parquet part's footer, read by Arrow; a text part's header, read by DuckDB)."""
    schemas = _parquet_schemas(parts) if _kind(parts) == "parquet" else _text_schemas(Parts(parts, sep=sep))
    first = None
    for part, schema in zip(parts, schemas, strict=True):
        if first is None:
            first = (part, schema)
            continue
        missing = [c for c in first[1] if c not in schema]
        extra = [c for c in schema if c not in first[1]]
        if missing or extra:
            what = f"has no column '{missing[0]}'" if missing else f"has a column '{extra[0]}'"
            raise DataError(f"{part}: {what} that {first[0]} " + ("has" if missing else "does not have")
                            + "; every part of a dataset has the same columns.")
        # a column of nothing but nulls has no type of its own: it is not text among numbers
        odd = next((c for c in schema if first[1][c][1] and not schema[c][1] and schema[c][0] != "null"), None)
        if odd is not None:
            raise DataError(f"{part}: column '{odd}' holds {schema[odd][0]} where {first[0]} holds numbers "
                            f"({first[1][odd][0]}); a value that is not a number is in this part.")


def parquet_footer(part: Path):
    """A Parquet part's footer (``pyarrow.parquet.FileMetaData``: its schema, rows and row groups' statistics),
    read once per command: the scan's progress line, the schema check and the replicate span all ask for it, and
    a dataset of thousands of parts (on a network file system, say) would otherwise have each footer fetched three
    times before the scan. Kept until the reduction ends (:func:`reduce_cells`, :func:`reduce_battles` clear
    them) and keyed by the file's inode, size and modification time, so a part rewritten in between is read
    afresh."""
    stat = Path(part).stat()
    return _footer(str(part), stat.st_ino, stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=4096)
def _footer(path: str, inode: int, size: int, mtime_ns: int):
    import pyarrow.parquet as pq

    return pq.read_metadata(path)


def _parquet_schemas(parts: list[Path]):
    """Each part's columns as {name: (type, is a number)} from its footer (a few kilobytes, no rows read)."""
    import pyarrow as pa

    for part in parts:
        try:
            schema = parquet_footer(part).schema.to_arrow_schema()
        except (OSError, pa.ArrowException) as exc:
            raise DataError(f"{part}: not a readable Parquet file ({str(exc).splitlines()[0][:200]}).") from None
        yield {f.name.strip(): (_type_word(str(f.type)), pa.types.is_integer(f.type) or pa.types.is_floating(f.type)
                                or pa.types.is_decimal(f.type)) for f in schema}


def _type_word(name: str) -> str:
    """A column type as the messages name it: text for any string type (Arrow's, DuckDB's), null for a column
    of nulls, the engine's own name otherwise."""
    plain = name.strip('"').lower()
    if plain in ("string", "large_string", "string_view", "varchar", "utf8", "large_utf8"):
        return "text"
    return plain if plain == "null" else name


def _text_schemas(data: Parts):
    """Each text part's columns as {name: (type, is a number)}, as DuckDB reads its header (JSONL: its types)."""
    import duckdb

    kind = _kind(data.files)
    con = duckdb.connect()
    try:
        for part in data.files:
            with _duckdb_errors(part):
                if kind == "jsonl":
                    rel = con.read_json(literal_path(part), format="newline_delimited")
                else:
                    rel = con.read_csv(literal_path(part), all_varchar=True, header=True, delimiter=data.delimiter)
            # names without surrounding spaces, as the rows' reader and the scan's view take them
            yield {c.strip(): (_type_word(str(t)), _numeric(str(t)))
                   for c, t in zip(rel.columns, rel.types, strict=True)}
    finally:
        con.close()


def scan_size(source) -> tuple[int | None, int, int]:
    """(rows, files, bytes) of what a scan will read, before it starts: the rows from the Parquet parts' metadata
    or a run database's count of calls (None when a part is text, whose rows are known only by reading it)."""
    if is_run_database(source):
        from ...store import RunStore

        store = RunStore(Path(str(source)))
        try:
            return store.count(), 1, Path(str(source)).stat().st_size
        finally:
            store.close()
    parts = _parts(source)
    size = sum(p.stat().st_size for p in parts)
    if _kind(parts) != "parquet":
        return None, len(parts), size
    try:
        rows = sum(parquet_footer(p).num_rows for p in parts)
    except Exception:  # a damaged part: the scan names it
        return None, len(parts), size
    return int(rows), len(parts), size


def _path(name) -> str:
    """A part's name as the user gave it: Spark names it by URI (``file:///data/a.csv``)."""
    from urllib.parse import unquote, urlparse

    text = str(name)
    return unquote(urlparse(text).path) if text.startswith("file:") else text


def _check_encoding(encoding: str | None) -> None:
    if encoding and encoding.lower().replace("-", "").replace("_", "") not in ("utf8", "utf8sig"):
        raise DataError(f"`encoding` {encoding}: the engines read UTF-8 text; re-save the files as UTF-8, or read "
                        f"them in memory with `engine` pandas `encoding` {encoding}.")


def _checked_parts(source, sep: str | None = None) -> Parts:
    """A file's or a dataset's parts, their root folder (for hive partitions) and their schemas compared."""
    parts = _parts(source)
    check_schemas(parts, sep)
    return Parts(parts, Path(str(source)) if Path(str(source)).is_dir() else None, sep)


def in_memory_estimate(data: str | Path) -> tuple[int, int]:
    """(bytes of input, bytes of memory a reading into memory takes) for a file or dataset: a Parquet part's rows x
    columns from its footer, a text file's bytes / :data:`TEXT_BYTES_PER_VALUE`, each value
    :data:`BYTES_PER_VALUE`."""
    parts = dataset_parts(data) if is_dataset(data) else [Path(data)]
    size = values = 0
    for part in parts:
        nbytes = part.stat().st_size
        size += nbytes
        if part.suffix.lower() in (".parquet", ".pq"):
            values += _parquet_values(part, nbytes)
        else:
            values += nbytes // TEXT_BYTES_PER_VALUE
    return size, values * BYTES_PER_VALUE


def _parquet_values(path: Path, nbytes: int) -> int:
    try:
        import pyarrow.parquet as pq

        meta = pq.ParquetFile(path).metadata
        return int(meta.num_rows) * int(meta.num_columns)
    except Exception:
        return nbytes


def check_fits_in_memory(data: str | Path, why: str = "") -> None:
    """Refuse, before reading, a file or dataset whose reading into memory would take more than the machine has
    available: a :class:`DataError` naming it and the way to fit it over the files instead."""
    free = machine.available_memory()
    if free is None:
        return
    try:
        size, needed = in_memory_estimate(data)
    except (OSError, EvalGaugeError):
        return  # the reader says what is wrong
    if needed <= MEMORY_SHARE * free:
        return
    raise DataError(
        f"{data}: reading its {size / 1e9:.2f} GB into memory would take about {needed / 1e9:.0f} GB, more than "
        f"half of the {free / 1e9:.0f} GB this machine has available{why}. `evalgauge components DATA --engine "
        "duckdb` fits its cells over the file (without --bootstrap, --by, --glmm or --keep, which need the rows); "
        "or fit a sample of its items.")


@contextmanager
def _duckdb_errors(where):
    """DuckDB refusing to read a part (text that is not UTF-8, a malformed line, a damaged file) as a
    :class:`DataError` naming ``where`` with DuckDB's first line, never a traceback; the rest of DuckDB's message
    (which quotes the file's text) is left out."""
    import duckdb

    try:
        yield
    except duckdb.OutOfMemoryException as exc:
        first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise DataError(f"{where}: DuckDB ran out of the {DUCKDB_MEMORY} it may use ({first}); the group-by spills "
                        "to disk, but this step could not. Reduce the log on Spark (`engine` spark), or split it "
                        "(by system or judge) and fit each part.") from None
    except duckdb.Error as exc:
        text = str(exc)
        first = text.splitlines()[0][:200] if text else type(exc).__name__
        if "not utf-8" in text.lower() or "invalid unicode" in text.lower():
            raise DataError(f"{where}: not UTF-8 text ({first}); the engine reads UTF-8: re-save it as UTF-8, or "
                            "read it in memory with `engine` pandas `encoding` ENCODING (latin-1, cp1252).") from None
        raise DataError(f"{where}: DuckDB could not read it ({first}); check the file, or read it in memory with "
                        "`engine` pandas for a message naming its row.") from None


def is_run_database(source: Any) -> bool:
    """Whether ``source`` names an `evalgauge run` database (by its suffix, as the readers tell files apart)."""
    return isinstance(source, (str, Path)) and Path(str(source)).suffix.lower() in (".sqlite", ".db")


#: the engines that reduce rows to cells where they live (vocabulary.ENGINES adds pandas and auto)
CELL_ENGINES = ("duckdb", "spark")


def _check_engine(engine: str) -> None:
    if engine not in CELL_ENGINES:
        raise DataError(f"engine '{engine}': choose one of {', '.join(CELL_ENGINES)}.")
