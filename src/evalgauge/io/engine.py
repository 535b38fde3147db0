"""Reducing judgments where they live: DuckDB (here) or Spark (on a cluster) groups the rows to cell statistics.

Every estimator needs only cell statistics (REML: each cell's count, sum and sum of squares of the score), so a
log larger than memory is reduced by an engine on the files and only the cells reach Python. The reduction is
one SQL text (:func:`cells_sql`) that both engines execute over a view of the rows with plain column names: a
``GROUP BY`` of every facet column with, per cell, the count, sum and sum of squares of the score, and in the
same scan its judgments with an empty score and with one that is not a number (a NaN, an infinity or a score
too large shows in its cell's sum of squares, and only then does an exact scan set them apart). A text part's
fields are taken as pandas' CSV reader takes them (leading spaces dropped, its empty values empty), so every
reader sees the same judgments. A part whose columns or column
types differ from the others' is named before the scan, from the parts' schemas. With a replicate column the
scan also keeps a bitmap of each cell's replicates, which rules out a repeated or empty replicate in every cell
whose replicates fill as many slots as it has judgments. Only when a judgment has no numeric score (or no facet
label) does a further query name the first file (and value) holding one (:func:`first_bad_sql`), stopping at
its first such row, and only when a cell's slots fall short does an exact group-by of cells and replicates
(:func:`repeated_replicate_sql`) run: a clean log of whole-number replicates is scanned once. DuckDB works within
:data:`DUCKDB_MEMORY` and spills its group-by to disk beyond it.

This module is an edge (it reads files); :func:`evalgauge.estimate.estimate_from_sums` fits the cells.
"""

from __future__ import annotations

import re
import warnings
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import machine, vocabulary
from ..errors import DataError, EvalGaugeError
from ..vocabulary import MAX_ABS_SCORE
from .datasets import PART_KINDS, dataset_parts, is_dataset, partition_keys

if TYPE_CHECKING:  # pandas is loaded when the cells are turned into a frame, after the scan has started
    import pandas as pd

#: the columns of the reduced table besides the facets
N, SUM, SQUARES = "n", "sum", "sum_squares"
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
#: the engines that reduce rows to cells where they live (vocabulary.ENGINES adds pandas and auto)
CELL_ENGINES = ("duckdb", "spark")
#: the scan's per-cell counts of judgments without a usable score (checked, then left behind)
_CHECKS = ("empty", "not_numbers", "too_large")
#: the largest double: a value beyond it is infinite (NaN compares above it in both engines)
_DOUBLE_MAX = "1.7976931348623157E308"
#: the scan's per-cell count of the distinct slots its replicates fall in (a replicate column is checked)
_SLOTS = "replicate_slots"
#: the view's fixed column names (the facets are f0, f1, ...): plain identifiers both SQL dialects read alike
_SCORE, _FILE, _REPLICATE = "s", "src_file", "r"
#: the scan's columns carrying a bad score of each kind with the file holding it ("file\0text", the least such
#: per cell), so that its message never needs the files read again
_FIRST = {"not_numbers": "first_not_number", "too_large": "first_too_large"}


def _slot_bits(numbers: bool, dialect: str, span: tuple[int, int] | None = None) -> str:
    """The distinct slots a cell's replicates fill, as a SQL aggregate: each replicate sets one bit of a bitmap
    and the bitmaps' bits are counted. Without ``span``, one bitmap of 32 slots: a whole number's slot is its last
    five bits (so a cell's replicates within 32 consecutive numbers never share one), any other label's its
    hash's. With ``span`` (the column's least and greatest whole number, from the Parquet parts' statistics) a
    replicate ``v`` sets bit ``v - least`` of as many 62-bit bitmaps as the span needs, so no two replicates
    share a slot whatever their number. An empty replicate sets none. ``numbers``: the column holds numbers (no
    text to parse); ``dialect``: how the engine spells a left shift (the one word the two SQL texts differ in)."""
    r = _REPLICATE

    def shift(slot: str, wide: bool = True) -> str:
        if dialect == "spark":  # 64 bits always: Spark counts a negative int's bits sign-extended to 64
            return f"shiftleft(CAST(1 AS BIGINT), {slot})"
        # DuckDB: the 32 slots in an unsigned 32-bit map (a third of the bitmaps' cost at 100M rows; a signed
        # 1 << 31 overflows there)
        return f"(CAST(1 AS {'BIGINT' if wide else 'UINTEGER'}) << {slot})"

    def counted(bits: str) -> str:
        return f"COALESCE(BIT_COUNT(BIT_OR({bits})), 0)"

    if span is not None:
        v = f"(TRY_CAST({r} AS BIGINT) - {int(span[0])})"
        maps = range((int(span[1]) - int(span[0])) // 62 + 1)
        return " + ".join(counted(f"CASE WHEN {v} >= {62 * k} AND {v} < {62 * k + 62} THEN "
                                  f"{shift(f'CAST({v} - {62 * k} AS INT)')} END") for k in maps)
    whole = (f"TRY_CAST({r} AS BIGINT)" if numbers else
             f"COALESCE(TRY_CAST({r} AS BIGINT), CASE WHEN {r} IS NOT NULL THEN CAST(HASH(CAST({r} AS STRING)) "
             "% 32 AS BIGINT) END)")
    return counted(shift(f"CAST({whole} & 31 AS INT)", wide=False))


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


def cells_sql(n_facets: int, table: str = "judgments", *, text_scores: bool = True, replicates: str | None = None,
              dialect: str = "duckdb", span: tuple[int, int] | None = None, exact: bool = False) -> str:
    """The one SQL text both engines run: rows of ``table`` (columns ``f0..f{k-1}``, the score ``s`` as text or
    number) grouped by the facets, with each cell's count, sum and sum of squares of the numeric scores and, in
    the same scan, its judgments with an empty score (``empty``) and, when the scores are stored as text
    (``text_scores``), with a score that is not a number (``not_numbers``; a number column has none).

    The scan takes every number as it is; a NaN, an infinity or a value beyond the rows' bound
    (:data:`evalgauge.vocabulary.MAX_ABS_SCORE`) shows in its cell's sum of squares (NaN, infinite or above the bound's
    square: :func:`scores_need_exact_scan`), and only then is the ``exact`` text run: the sums over the usable
    scores alone, a NaN in a number column counted as ``empty`` (as the rows' reader counts it), an infinity or
    unreadable text as ``not_numbers``, and a finite value beyond the bound as ``too_large``.

    With ``replicates`` (the view has the replicate column ``r``, holding ``numbers`` or ``text``) the scan also
    counts, per cell, the distinct slots its replicates fall in (``replicate_slots``, bitmaps' bits, see
    :func:`_slot_bits`; ``span``: a whole-number column's least and greatest value): equal replicates share a
    slot and an empty one has none, so a cell whose slots are as many as its judgments holds neither; only a
    cell with fewer slots needs the exact look of :func:`repeated_replicate_sql`. ``dialect`` (``duckdb``,
    ``spark``) spells the bitmaps' shift."""
    keys = ", ".join(f"f{k}" for k in range(n_facets))
    raw = f"TRY_CAST({_SCORE} AS DOUBLE)" if text_scores else f"CAST({_SCORE} AS DOUBLE)"
    value = f"CASE WHEN ABS({raw}) <= {MAX_ABS_SCORE:.0e} THEN {raw} END" if exact else raw
    checks = f"CAST(COUNT(*) - COUNT({_SCORE}) AS INT) AS empty"
    if exact:
        finite = f"COUNT(CASE WHEN ABS({raw}) <= {_DOUBLE_MAX} THEN 1 END)"
        nans = "0" if text_scores else f"COUNT(CASE WHEN isnan({raw}) THEN 1 END)"
        checks = (f"CAST(COUNT(*) - COUNT({_SCORE}) + {nans} AS INT) AS empty, "
                  f"CAST(COUNT({_SCORE}) - {finite} - {nans} AS INT) AS not_numbers, "
                  f"CAST({finite} - COUNT({value}) AS INT) AS too_large")
        checks += "".join(f", {_carried(_bad_score(kind, text_scores))} AS {column}" for kind, column in _FIRST.items())
    elif text_scores:
        # text that is no number, carried with its file (a few percent of a text scan: see _FIRST)
        checks += (f", CAST(COUNT({_SCORE}) - COUNT({value}) AS INT) AS not_numbers, "
                   f"{_carried(f'{_SCORE} IS NOT NULL AND {raw} IS NULL')} AS {_FIRST['not_numbers']}")
    if replicates:
        checks += f", CAST({_slot_bits(replicates == 'numbers', dialect, span)} AS INT) AS {_SLOTS}"
    return (f"SELECT {', '.join(f'CAST(f{k} AS STRING) AS f{k}' for k in range(n_facets))}, "
            f"CAST(COUNT({value}) AS INT) AS {N}, SUM({value}) AS {SUM}, SUM({value} * {value}) AS {SQUARES}, "
            f"{checks} FROM {table} GROUP BY {keys}")


def scores_need_exact_scan(n, sum_squares) -> bool:
    """Whether a scan's cells (their counts ``n`` of numbers and sums of squares, Arrow arrays or anything Arrow
    takes) show a NaN, an infinity or a score beyond :data:`~evalgauge.vocabulary.MAX_ABS_SCORE` in some cell: any
    such value makes its cell's sum of squares NaN, infinite or above the bound's square, and scores within the
    bound keep it finite (the exact scan of :func:`cells_sql` tells which, rarely for a cell of extreme valid
    scores). A cell without a number (n = 0) has no sum. Arrow's kernels, chunk by chunk: no copy of the cells."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def arrow(values):
        return values if isinstance(values, (pa.Array, pa.ChunkedArray)) else pa.array(values)

    # a sum of squares is never negative: no absolute value (NaN compares false, a cell without a sum is null)
    within = pc.less_equal(arrow(sum_squares), MAX_ABS_SCORE**2)
    return bool(pc.any(pc.and_(pc.greater(arrow(n), 0), pc.invert(within))).as_py())


def repeated_replicate_sql(n_facets: int, table: str = "judgments") -> str:
    """The exact look, run only when the scan's slots leave a repeat possible: the first (cell, replicate) that
    is empty or judged more than once (its labels and replicate), the first file holding it, and the judgments
    that repeat another's cell and replicate (``repeats``, all such groups together) and that have no replicate
    (``empties``). None when there is neither."""
    keys = ", ".join(f"f{k}" for k in range(n_facets))
    labels = ", ".join(f"CAST(f{k} AS STRING)" for k in range(n_facets))
    return (f"SELECT {labels}, CAST({_REPLICATE} AS STRING), "
            f"SUM(CASE WHEN {_REPLICATE} IS NULL THEN 0 ELSE c END) OVER () AS repeats, "
            f"SUM(CASE WHEN {_REPLICATE} IS NULL THEN c ELSE 0 END) OVER () AS empties, w "
            f"FROM (SELECT {keys}, {_REPLICATE}, COUNT(*) AS c, MIN({_FILE}) AS w FROM {table} "
            f"GROUP BY {keys}, {_REPLICATE} HAVING COUNT(*) > 1 OR {_REPLICATE} IS NULL) AS g "
            f"ORDER BY CASE WHEN {_REPLICATE} IS NULL THEN 0 ELSE 1 END LIMIT 1")


def _bad_score(kind: str, text_scores: bool) -> str:
    """The SQL condition of a row's score of ``kind`` (``empty``, ``not_numbers``, ``too_large``, as the exact
    scan of :func:`cells_sql` counts them)."""
    raw = f"TRY_CAST({_SCORE} AS DOUBLE)" if text_scores else f"CAST({_SCORE} AS DOUBLE)"
    nan = "FALSE" if text_scores else f"isnan({raw})"
    return {"empty": f"({_SCORE} IS NULL OR {nan})",
            "not_numbers": f"{_SCORE} IS NOT NULL AND NOT COALESCE(ABS({raw}) <= {_DOUBLE_MAX} OR {nan}, FALSE)",
            "too_large": f"ABS({raw}) > {MAX_ABS_SCORE:.0e} AND ABS({raw}) <= {_DOUBLE_MAX}"}[kind]


def _carried(condition: str) -> str:
    """A cell's least "file\0score text" among its rows meeting ``condition`` (NULL when none): the scan carries
    a bad score to its message (:data:`_FIRST`). Both engines' SQL."""
    return f"MIN(CASE WHEN {condition} THEN {_FILE} || chr(0) || CAST({_SCORE} AS STRING) END)"


def _carried_scores(least: dict[str, str | None]) -> dict[str, tuple[str, str]]:
    """The bad scores a scan carried, kind -> (file, the score's text); ``least``: the least value of each
    carrying column (:data:`_FIRST`) the scan's cells have."""
    found = {}
    for kind, column in _FIRST.items():
        text = least.get(column)
        if text:
            where, _, value = text.partition("\0")  # a path holds no NUL: the first one ends it
            found[kind] = (where, value)
    return found


def first_bad_sql(table: str = "judgments", *, kind: str, text_scores: bool = True) -> str:
    """Where the checks' counts found a bad score the scan did not carry (``kind``: ``empty``, ``not_numbers`` or
    ``too_large``, as :func:`cells_sql` counts them): the first file (and value) holding one. Run only then, and
    it stops at the first such row."""
    return f"SELECT {_FILE}, CAST({_SCORE} AS STRING) FROM {table} WHERE {_bad_score(kind, text_scores)} LIMIT 1"


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


#: the fields pandas' CSV reader takes as empty (its default ``na_values``; tests/test_engine.py checks the list
#: against pandas'): a text part's field that reads as one of them, after its leading spaces, is empty on the
#: engines too, so that a CSV means the same judgments to every reader
CSV_EMPTY = ("", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "<NA>", "N/A",
             "NA", "NULL", "NaN", "None", "n/a", "nan", "null")


def csv_field_sql(column: str) -> str:
    """A text part's field as the rows' reader takes it (pandas' ``read_csv`` with ``skipinitialspace`` and its
    default empty values): without its leading spaces, and empty (NULL) when it is one of :data:`CSV_EMPTY`. One
    SQL expression both engines run; ``column`` is the field's identifier as the engine quotes it."""
    empty = ", ".join("'" + token + "'" for token in CSV_EMPTY)
    return f"CASE WHEN LTRIM({column}) IN ({empty}) THEN NULL ELSE LTRIM({column}) END"


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


def _duckdb_relation(con, data: Parts):
    """A DuckDB relation over every part (hive partition keys as columns, the file's name in ``filename``); a text
    part's fields as the rows' reader takes them (:func:`csv_field_sql`)."""
    kind, files, hive = _kind(data.files), [literal_path(p) for p in data.files], _hive(data.files, data.root)
    fields: set[str] = set()
    if kind == "parquet":
        rel = con.read_parquet(files, filename=True, hive_partitioning=hive)
    elif kind in ("csv", "tsv"):
        rel = con.read_csv(files, filename=True, hive_partitioning=hive, all_varchar=True, header=True,
                           delimiter=data.delimiter)
        fields = set(_file_columns(list(rel.columns), data))
    else:
        rel = con.read_json(files, filename=True, hive_partitioning=hive, format="newline_delimited")
    if not fields and all(c == c.strip() for c in rel.columns):
        return rel
    # the column names without surrounding spaces, as the rows' reader strips them
    return rel.select(", ".join(f"{csv_field_sql(_quoted(c)) if c in fields else _quoted(c)} AS {_quoted(c.strip())}"
                                for c in rel.columns))


def _quoted(column: str) -> str:
    """A column name as a SQL identifier: the file's own text, so quoted, its quotes doubled (never spliced)."""
    return '"' + column.replace('"', '""') + '"'


def _json_as_text(types: dict[str, str]):
    """A column of DuckDB's relation as the view selects it: quoted, and a JSON one (JSONL whose column mixes
    numbers and text) as its values' text, so that "q1" is the label q1 and "0.5" the score 0.5, as on the rows,
    not their JSON literals; JSON null is empty."""

    def select(column: str) -> str:
        name = _quoted(column)
        return f"json_extract_string({name}, '$')" if types.get(column) == "JSON" else name

    return select


def _spark_name(column: str) -> str:
    """A column name as Spark reads it literally (a dot in it is not a field of a struct)."""
    return "`" + column.replace("`", "``") + "`"


def _check_rows(judged: int, source) -> None:
    """A log without a single judgment is refused with the rows' words."""
    if not judged:
        raise DataError(f"{source}: has no data rows. A judgments file has a header and one row per score.")


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


@contextmanager
def _loading_meanwhile(modules: tuple[str, ...]):
    """Import ``modules`` on a thread while the body runs: the engine's scan leaves the interpreter free, so what
    the caller needs next (pandas, the analysis) loads in the scan's time rather than before it. Started once the
    scan is about to run (the work before it needs the interpreter), joined on the way out; a failed import is
    left for the caller's own import of the module to report."""
    if not modules:
        yield
        return
    import importlib
    import threading

    def load() -> None:
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception:
                return

    thread = threading.Thread(target=load, name="evalgauge-imports", daemon=True)
    thread.start()
    try:
        yield
    finally:
        thread.join()


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
                        "to disk, but this step could not. Reduce the log on Spark (--engine spark), or split it "
                        "(by system or judge) and fit each part.") from None
    except duckdb.Error as exc:
        text = str(exc)
        first = text.splitlines()[0][:200] if text else type(exc).__name__
        if "not utf-8" in text.lower() or "invalid unicode" in text.lower():
            raise DataError(f"{where}: not UTF-8 text ({first}); the engine reads UTF-8: re-save it as UTF-8, or "
                            "read it in memory with --engine pandas --encoding ENCODING (latin-1, cp1252).") from None
        raise DataError(f"{where}: DuckDB could not read it ({first}); check the file, or read it in memory with "
                        "--engine pandas for a message naming its row.") from None


def scan_size(source) -> tuple[int | None, int, int]:
    """(rows, files, bytes) of what a scan will read, before it starts: the rows from the Parquet parts' metadata
    or a run database's count of calls (None when a part is text, whose rows are known only by reading it)."""
    if is_run_database(source):
        from ..store import RunStore

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


def _facets(columns: list[str], score: str, source, replicate: str | None = None,
            chosen: list[str] | None = None) -> tuple[list[str], bool, str | None]:
    """The facet columns, by the rows' rule (:func:`evalgauge.design.infer_design`): ``chosen`` when given (the
    user's --facets), else the columns with a facet's usual name (system, item, judge, variant, temperature,
    category, ...; not the score, the file's name or a replicate column), so an extra column (a comment, a
    timestamp) is summed over on every engine rather than split into cells by one; whether repeated judgments
    of a cell are replicates (a replicate column numbers them, or ``replicate`` is ``auto``), and the column
    that numbers them: ``replicate``, or else the first of the usual names present (as the rows' design takes
    it); None for ``auto`` and without one."""
    named = ", ".join(c for c in columns if c != "filename")
    if score not in columns:
        glued = next((sep for sep in (";", "\t", "|") if any(sep in c for c in columns)), None)
        hint = (f"the header reads as one column: pass --sep '{glued}'" if glued
                else "name the score column with --score")
        raise DataError(f"{source}: no column '{score}' (columns: {named}); {hint}.")
    if replicate not in (None, "auto") and replicate not in columns:
        raise DataError(f"{source}: no column '{replicate}' for the replicate (columns: {named}).")
    numbering = {*vocabulary.REPLICATE_COLUMNS, *([replicate] if replicate else [])} & set(columns)
    if chosen:
        missing = [c for c in chosen if c not in columns]
        if missing:
            raise DataError(f"{source}: no column '{missing[0]}' for a facet (columns: {named}).")
        facets = [c for c in chosen if c not in {score, "filename", *numbering}]
    else:
        facets = [c for c in columns if c.lower() in vocabulary.FACET_NAMES and c not in {score, "filename",
                                                                                         *numbering}]
    if not facets:
        raise DataError(f"{source}: no facet columns recognised besides '{score}' (known names: "
                        f"{', '.join(vocabulary.FACET_NAMES)}; columns: {named}); name them with --facets.")
    if replicate == "auto":
        return facets, True, None
    column = replicate or next((c for c in vocabulary.REPLICATE_COLUMNS if c in columns), None)
    return facets, bool(numbering), column


def _check_repeats(repeated: int, labels: list | None, facets: list[str], source, query,
                   label: str | None = None) -> None:
    """Without a replicate column a cell is one judgment: ``repeated`` judgments share their facet levels with
    another (counted from the cells judged more than once; ``labels`` the first such cell's, None when there is
    none), and that is a :class:`DataError` worded as for rows, naming the cell and the first file holding it
    (found by a query run only then, the labels passed as parameters)."""
    if labels is None:
        return
    cell = ", ".join(f"{f}={str(v)[:40]!r}" for f, v in zip(facets, labels, strict=True))
    where = label or _path(query(f"SELECT {_FILE} FROM judgments WHERE "
                                 + " AND ".join(f"CAST(f{k} AS STRING) = ?" for k in range(len(facets)))
                                 + " LIMIT 1", [str(v) for v in labels])[0])
    raise DataError(f"{source}: {repeated} rows share their facet levels with another row (for example the "
                    f"cell {cell}, in {where}), and there is no replicate column. If these are repeated calls, "
                    "name the column that numbers them with --replicate COL (or --replicate=auto to count them as "
                    "replicates); if a facet is missing, add it to --facets; if they are accidental duplicates, "
                    "remove them.")


def _check_replicates(short: bool, facets: list[str], replicate: str, source, query,
                      label: str | None = None) -> None:
    """With a replicate column each (cell, replicate) is one judgment, as the rows' design requires. ``short``:
    some cell's replicates fall in fewer slots than it has judgments (counted by the scan), so a replicate may be
    repeated or empty there; only then does the exact look (:func:`repeated_replicate_sql`) run, and what it
    finds is a :class:`DataError` naming the cell, the replicate and the first file holding it."""
    found = query(repeated_replicate_sql(len(facets))) if short else None
    if found is None:
        return
    *labels, value, repeats, empties, where = found
    cell = ", ".join(f"{f}={str(v)[:40]!r}" for f, v in zip(facets, labels, strict=True))
    where = label or _path(where)
    if empties:
        raise DataError(f"{where}: column '{replicate}' is empty in {empties} judgment(s) (for example in the cell "
                        f"{cell}); every judgment names its replicate: fill these in or remove the rows.")
    raise DataError(f"{source}: {repeats} rows repeat both the facet levels and the replicate '{replicate}' of "
                    f"another row (for example the cell {cell} with {replicate}={str(value)[:40]!r}, in {where}). "
                    "Each replicate of a cell must be one row: remove the duplicates, or add the column in which "
                    "they differ (a facet the files do not record).")


def _check_scores(counts: dict[str, int], score: str, source, drop_missing: bool, query, label: str | None = None,
                  text_scores: bool = True, carried: dict[str, tuple[str, str]] | None = None) -> int:
    """The judgments without a usable score (``counts``: the scan's totals of ``n`` and of :data:`_CHECKS`): none,
    or empty ones dropped (their number returned), or a :class:`DataError` naming a file holding one (or
    ``label``, what the parts were made from) and, for a value, the value, in the rows' words. A value the scan
    carried (``carried``: :func:`_carried_scores`) is named from it; only otherwise does ``query(sql)`` (returning
    its first row) look for the file, stopping at its first such row."""
    n, empty, not_numbers, too_large = (counts.get(c, 0) for c in (N, *_CHECKS))
    carried = carried or {}
    if too_large:
        where, value = carried.get("too_large") or query(first_bad_sql(kind="too_large", text_scores=text_scores))
        raise DataError(f"{_path(where)}: column '{score}' has {too_large} value(s) too large to compute with "
                        f"(|score| > {MAX_ABS_SCORE:.0e}), such as {str(value)[:80]!r}. Squares of such numbers "
                        "overflow; fix the rows or rescale the scores.")
    if not_numbers:
        where, value = carried.get("not_numbers") or query(first_bad_sql(kind="not_numbers", text_scores=text_scores))
        # the value is the file's text, shown escaped and cut short
        raise DataError(f"{_path(where)}: column '{score}' holds {str(value)[:80]!r}, which is not a number "
                        f"({not_numbers} such value(s), infinities counted); fix or remove them (every score is a "
                        "finite number).")
    if empty and not drop_missing:
        where = label or _path(query(first_bad_sql(kind="empty", text_scores=text_scores))[0])
        raise DataError(f"{source}: {empty} of {n + empty} judgment(s) have an empty '{score}' (the first in "
                        f"{where}); pass --drop-missing to leave them out, or fill them in.")
    return empty


def _check_labels(empty: list[int], facets: list[str], rows: int, query, label: str | None = None) -> None:
    """``empty[k]``: the judgments whose facet ``k`` is empty (counted from the cells). Any is a
    :class:`DataError` naming the facet's column and the first file holding one (or ``label``), found by a query
    that runs only then and stops at that row."""
    k = next((k for k, count in enumerate(empty) if count), None)
    if k is None:
        return
    where = label or _path(query(f"SELECT {_FILE} FROM judgments WHERE f{k} IS NULL LIMIT 1")[0])
    raise DataError(f"{where}: column '{facets[k]}' is empty in {empty[k]} of {rows} judgment(s); every judgment "
                    f"names its {facets[k]}: fill these in or remove the rows.")


def _cells(raw: pd.DataFrame, facets: list[str], rows: int, empty: int, files: int) -> tuple[pd.DataFrame, dict]:
    """The engine's checked groups renamed to the facets (cells whose every score was empty left out)."""
    kept = raw[N].to_numpy() > 0
    if not kept.all():
        raw = raw[kept].reset_index(drop=True)
    # renamed where they are: ten million cells are not copied for a name
    cells = raw.drop(columns=[c for c in (*_CHECKS, _SLOTS, *_FIRST.values()) if c in raw.columns])
    cells.columns = [*facets, N, SUM, SQUARES]
    if cells[N].dtype != "int64":
        cells[N] = cells[N].astype("int64")
    return cells, {"rows": rows, "files": files, "empty_dropped": empty, "cells": len(cells)}


def _path(name) -> str:
    """A part's name as the user gave it: Spark names it by URI (``file:///data/a.csv``)."""
    from urllib.parse import unquote, urlparse

    text = str(name)
    return unquote(urlparse(text).path) if text.startswith("file:") else text


def _reduce_duckdb(data: Parts, score: str, source, drop_missing: bool, label: str | None = None,
                   replicate: str | None = None, preload: tuple[str, ...] = (), facets: list[str] | None = None):
    import pyarrow.compute as pc

    con = _duckdb_connect()
    try:
        with _duckdb_errors(source):
            rel = _duckdb_relation(con, data)
        facets, numbered, column = _facets(list(rel.columns), score, source, replicate, facets)
        types = {c: str(t) for c, t in zip(rel.columns, rel.types, strict=True)}
        as_text = _json_as_text(types)
        view = rel.select(", ".join([f"{as_text(c)} AS f{k}" for k, c in enumerate(facets)]
                                    + [f"{as_text(score)} AS {_SCORE}", f"filename AS {_FILE}"]
                                    + ([f"{as_text(column)} AS {_REPLICATE}"] if column else [])))
        con.register("judgments", view)
        # through Arrow: ten million cells' labels never become Python strings (see _categorical_frame)
        text_scores = not _numeric(types[score])
        span = column and replicate_span(data.files, column)

        def scan(exact: bool):
            return _arrow(con, cells_sql(len(facets), text_scores=text_scores, exact=exact, span=span,
                                         replicates=column and ("numbers" if _numeric(types[column]) else "text")))

        with _duckdb_errors(source), _loading_meanwhile(preload):
            table = scan(exact=False)
            if scores_need_exact_scan(table[N], table[SQUARES]):
                table = scan(exact=True)  # a NaN, an infinity or a huge score somewhere: the sums without them
        counts = {c: int(pc.sum(table[c]).as_py() or 0) for c in (N, *_CHECKS) if c in table.column_names}
        total = sum(counts.values())
        _check_rows(total, source)
        def query(sql, params=()):  # the checks' queries, under the same words for DuckDB's failures
            with _duckdb_errors(source):
                return con.execute(sql, list(params)).fetchone()
        judged = table[N]
        for check in _CHECKS:
            if check in table.column_names:
                judged = pc.add(judged, table[check])
        _check_labels([int(pc.sum(pc.filter(judged, pc.is_null(table.column(k)))).as_py() or 0)
                       if table.column(k).null_count else 0 for k in range(len(facets))],
                      facets, total, query, label)
        if not numbered:
            repeated = pc.greater(judged, 1)
            first = pc.index(repeated, True).as_py()  # -1: no cell judged twice
            _check_repeats(int(pc.sum(pc.filter(judged, repeated)).as_py() or 0),
                           [table.column(k)[first].as_py() for k in range(len(facets))] if first >= 0 else None,
                           facets, source, query, label)
        elif column:
            _check_replicates(pc.any(pc.less(table[_SLOTS], judged)).as_py(), facets, column, source, query, label)
        carried = _carried_scores({c: pc.min(table[c]).as_py() for c in _FIRST.values() if c in table.column_names})
        dropped = _check_scores(counts, score, source, drop_missing, query, label, text_scores, carried)
    finally:
        con.close()  # DuckDB's buffers go before the cells become a frame
    raw = _categorical_frame(table, len(facets))
    del table
    return _cells(raw, facets, counts[N] + dropped, dropped, len(data.files))


def _categorical_frame(table, n_facets: int) -> pd.DataFrame:
    """The engine's cells (facets, count, sum, sum of squares) as a frame whose facet labels are categoricals, so
    that ten million cells' labels never become Python strings (:func:`_label_codes`; the facets side by side on
    two threads, Arrow's kernels leaving the interpreter free)."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    import pandas as pd

    with ThreadPoolExecutor(max_workers=2) as pool:
        columns = dict(zip(table.column_names[:n_facets], pool.map(_label_codes, table.columns[:n_facets]),
                           strict=True))
    # the counts widened while the batches are joined (one copy, not two); the checks' counts stay behind
    for name, dtype in ((N, np.int64), (SUM, np.float64), (SQUARES, np.float64)):
        chunks = [chunk.to_numpy(zero_copy_only=False) for chunk in table.column(name).chunks]
        columns[name] = np.concatenate(chunks, dtype=dtype) if chunks else np.empty(0, dtype)
    return pd.DataFrame(columns, copy=False)


def _label_codes(column) -> pd.Categorical:
    """A column of labels (an Arrow chunked array) as a categorical: Arrow's dictionary encoding of the whole
    column, whose batches share one dictionary (the labels in the order first seen), its codes written into one
    array made once. Fresh memory costs as much as the encoding here (about 1.2 s per GB touched for the first
    time), so no batch's codes are copied twice."""
    import numpy as np
    import pandas as pd
    import pyarrow.compute as pc

    if not column.num_chunks:
        return pd.Categorical([])
    encoded = pc.dictionary_encode(column)
    codes = np.empty(len(column), dtype=np.int32)
    at = 0
    for chunk in encoded.chunks:
        index = chunk.indices
        # an empty label (refused before the fit) is code -1, pandas' missing value
        codes[at:at + len(chunk)] = (index.fill_null(-1) if index.null_count else index).to_numpy()
        at += len(chunk)
    return pd.Categorical.from_codes(codes, categories=encoded.chunk(0).dictionary.to_pandas(), validate=False)


def _duckdb_connect():
    """A DuckDB connection within :data:`DUCKDB_MEMORY` (its group-by spills beyond it), rows in any order."""
    import duckdb

    con = duckdb.connect()
    con.execute(f"SET memory_limit = '{DUCKDB_MEMORY}'")
    con.execute("SET preserve_insertion_order = false")
    return con


def _arrow(con, sql: str):
    """A query's result as an Arrow table, without a copy through the DB-API (``to_arrow_table`` from DuckDB 1.4,
    ``arrow`` before)."""
    rel = con.sql(sql)
    fetch = getattr(rel, "to_arrow_table", None) or rel.arrow
    return fetch()


#: Spark's log while evalgauge drives it: errors only, on stderr (its default prints a page of notices at start)
_SPARK_LOG = """rootLogger.level = error
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def spark_session(master: str = "local[*]"):
    """A Spark session at ``master`` (``local[*]``: every core of this machine; a cluster's ``spark://`` or
    ``yarn`` URL), quiet: no web UI, no progress bars, and a log of errors only from the driver's start."""
    import tempfile

    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise DataError("--engine spark needs pyspark and a Java runtime: pip install 'evalgauge[spark]' (and, on "
                        "Debian, apt install default-jre-headless).") from None
    with tempfile.TemporaryDirectory(prefix="evalgauge-spark-") as tmp:
        log = Path(tmp) / "log4j2.properties"
        log.write_text(_SPARK_LOG, encoding="utf-8")
        try:
            with warnings.catch_warnings():  # pyspark's notice about pandas versions: the cells are plain columns
                warnings.simplefilter("ignore")
                spark = (SparkSession.builder.master(master).appName("evalgauge")
                         .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log}")
                         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                         .config("spark.sql.shuffle.partitions", "8")
                         # the cells come back as Arrow batches, not one pickled row at a time
                         .config("spark.sql.execution.arrow.pyspark.enabled", "true").getOrCreate())
        except Exception as exc:  # no Java, a master that does not answer
            raise DataError(f"Spark could not start at '{master}' ({str(exc).splitlines()[0][:200]}); check the "
                            "master URL and that Java is installed (java -version).") from None
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _spark_frame(spark, data: Parts):
    from pyspark.sql import functions as F

    kind, files = _kind(data.files), [hadoop_path(p) for p in data.files]
    base = {"basePath": str(data.root)} if data.root is not None and _hive(data.files, data.root) else {}
    if kind == "parquet":
        frame = spark.read.options(**base).parquet(*files)
    elif kind in ("csv", "tsv"):
        frame = spark.read.options(header="true", sep=data.delimiter, **base).csv(files)
    else:
        frame = spark.read.options(**base).json(files)
    fields = set(_file_columns(list(frame.columns), data)) if kind in ("csv", "tsv") else set()
    # a text part's fields as the rows' reader takes them, and every column's name without surrounding spaces
    frame = frame.select(*[(F.expr(csv_field_sql(_spark_name(c))) if c in fields else F.col(_spark_name(c)))
                           .alias(c.strip()) for c in frame.columns])
    return frame.withColumn("filename", F.input_file_name())


def reduce_spark_frame(frame, *, score: str = "score", drop_missing: bool = False, source: str = "the Spark frame",
                       files: int = 0, replicate: str | None = None,
                       facets: list[str] | None = None) -> tuple[pd.DataFrame, dict]:
    """A pyspark DataFrame of judgments reduced on its cluster by :func:`cells_sql`: only the cells travel."""
    import numpy as np
    from pyspark.sql import functions as F

    columns = list(frame.columns)
    facets, numbered, column = _facets(columns, score, source, replicate, facets)
    file_col = F.col("filename") if "filename" in columns else F.lit(source)
    view = frame.select(*[F.col(_spark_name(c)).alias(f"f{k}") for k, c in enumerate(facets)],
                        F.col(_spark_name(score)).alias(_SCORE), file_col.alias(_FILE),
                        *([F.col(_spark_name(column)).alias(_REPLICATE)] if column else []))
    name = f"evalgauge_judgments_{id(view)}"
    view.createOrReplaceTempView(name)
    spark = view.sparkSession
    try:
        with warnings.catch_warnings():  # pyspark's notices about pandas versions: the cells are plain columns
            warnings.simplefilter("ignore")
            text_scores = not _numeric(view.schema[_SCORE].dataType.simpleString())
            numbers = column and _numeric(view.schema[_REPLICATE].dataType.simpleString())

            def scan(exact: bool):
                return spark.sql(cells_sql(len(facets), table=name, text_scores=text_scores, dialect="spark",
                                           exact=exact, replicates=column and ("numbers" if numbers else "text"))
                                 ).toPandas()

            raw = scan(exact=False)
            if scores_need_exact_scan(raw[N], raw[SQUARES]):
                raw = scan(exact=True)  # a NaN, an infinity or a huge score somewhere: the sums without them
        counts = {c: int(raw[c].sum()) for c in (N, *_CHECKS) if c in raw.columns}
        total = sum(counts.values())
        _check_rows(total, source)

        def query(sql, params=()):
            row = spark.sql(sql.replace("FROM judgments", f"FROM {name}"), args=list(params) or None).first()
            return None if row is None else tuple(row)

        judged = raw[N] + sum(raw[c] for c in _CHECKS if c in raw.columns)
        _check_labels([int(judged[raw[f"f{k}"].isna()].sum()) for k in range(len(facets))], facets, total, query)
        if not numbered:
            repeated = np.flatnonzero(judged.to_numpy() > 1)
            _check_repeats(int(judged.iloc[repeated].sum()),
                           [raw[f"f{k}"].iloc[repeated[0]] for k in range(len(facets))] if repeated.size else None,
                           facets, source, query)
        elif column:
            _check_replicates(bool((raw[_SLOTS] < judged).any()), facets, column, source, query)
        carried = _carried_scores({c: raw[c].dropna().min() for c in _FIRST.values()
                                   if c in raw.columns and raw[c].notna().any()})
        dropped = _check_scores(counts, score, source, drop_missing, query, text_scores=text_scores, carried=carried)
        return _cells(raw, facets, counts[N] + dropped, dropped, files)
    finally:
        spark.catalog.dropTempView(name)


def _reduce_spark(data: Parts, score: str, source, drop_missing: bool, master: str, replicate: str | None,
                  facets: list[str] | None = None):
    frame = _spark_frame(spark_session(master), data)
    return reduce_spark_frame(frame, score=score, drop_missing=drop_missing, source=str(source),
                              files=len(data.files), replicate=replicate, facets=facets)


def reduce_cells(source: Any, *, score: str = "score", drop_missing: bool = False, engine: str = "duckdb",
                 master: str = "local[*]", replicate: str | None = None, sep: str | None = None,
                 encoding: str | None = None, preload: tuple[str, ...] = (),
                 facets: list[str] | None = None) -> tuple[pd.DataFrame, dict]:
    """The judgments of a file, a dataset (folder, glob, hive partitions), a run database or a pyspark DataFrame
    grouped by every facet column (``facets``, else the columns with a facet's usual name, as the rows' design
    takes them: :func:`_facets`) where they
    live: one row per cell with its count, sum and sum of squares of the score, and what was read (rows, files,
    empty scores dropped, cells). ``engine`` is ``duckdb`` (this machine) or ``spark`` (at ``master``); a pyspark
    DataFrame is reduced on its own session. A run database's judgments are first streamed, a piece at a time,
    to a temporary Parquet file that DuckDB reduces. ``replicate`` names the column numbering a cell's repeated
    judgments (by default one of the usual names, ``replicate``, ``rep``, ...), or is ``auto`` to count repeated
    judgments as replicates; without either, a cell judged twice is refused, as the rows' reader refuses it.
    ``sep`` is a text part's delimiter; the engines read UTF-8 text (another ``encoding`` is refused).
    ``preload`` names modules to import while DuckDB scans (what the caller needs next)."""
    _check_engine(engine)
    _check_encoding(encoding)
    if is_spark_frame(source):
        return reduce_spark_frame(source, score=score, drop_missing=drop_missing, replicate=replicate, facets=facets)
    if is_run_database(source):
        return _reduce_run(Path(str(source)), score, drop_missing, engine)
    try:
        data = _checked_parts(source, sep)
        if engine == "spark":
            return _reduce_spark(data, score, source, drop_missing, master, replicate, facets)
        return _reduce_duckdb(data, score, source, drop_missing, replicate=replicate, preload=preload,
                              facets=facets)
    finally:
        _footer.cache_clear()  # the footers serve one command: a later call reads the parts as they are then


def _check_engine(engine: str) -> None:
    if engine not in CELL_ENGINES:
        raise DataError(f"engine '{engine}': choose one of {', '.join(CELL_ENGINES)}.")


def _check_encoding(encoding: str | None) -> None:
    if encoding and encoding.lower().replace("-", "").replace("_", "") not in ("utf8", "utf8sig"):
        raise DataError(f"--encoding {encoding}: the engines read UTF-8 text; re-save the files as UTF-8, or read "
                        f"them in memory with --engine pandas --encoding {encoding}.")


def _checked_parts(source, sep: str | None = None) -> Parts:
    """A file's or a dataset's parts, their root folder (for hive partitions) and their schemas compared."""
    parts = _parts(source)
    check_schemas(parts, sep)
    return Parts(parts, Path(str(source)) if Path(str(source)).is_dir() else None, sep)


def is_run_database(source: Any) -> bool:
    """Whether ``source`` names an `evalgauge run` database (by its suffix, as the readers tell files apart)."""
    return isinstance(source, (str, Path)) and Path(str(source)).suffix.lower() in (".sqlite", ".db")


def _reduce_run(path: Path, score: str, drop_missing: bool, engine: str) -> tuple[pd.DataFrame, dict]:
    import tempfile

    from ..inputs import check_input_file
    from .runs import write_judgments_parquet

    if engine != "duckdb":
        raise DataError(f"{path}: a run database is a file on this machine; reduce it with --engine duckdb.")
    check_input_file(path)
    with tempfile.TemporaryDirectory(prefix="evalgauge-run-") as tmp:
        part = Path(tmp) / "judgments.parquet"
        write_judgments_parquet(path, str(part))
        # the run's replicate index is left out of the part: its repeated calls of a cell are the replicates
        return _reduce_duckdb(Parts([part]), score, path, drop_missing, label=f"{path} (calls)", replicate="auto")


# ---------------------------------------------------------------------------
# Pairwise judgments: counts of (slot-A system, slot-B system, verdict[, item][, weight])
# ---------------------------------------------------------------------------

#: the roles of a pairwise log and the view's plain names for them
_PAIR_VIEW = {"model_a": "pa", "model_b": "pb", "winner": "pw", "item": "pi", "weight": "pwt", "judge": "pj",
              "variant": "pv", "human": "ph"}


def pairs_sql(roles: list[str], table: str = "battles") -> str:
    """The one SQL text both engines run for a pairwise log: its rows (columns ``pa, pb, pw`` and, when present,
    ``pi`` for the item, ``pwt`` for the weight, ``pj`` and ``pv`` for the judge and variant, ``ph`` for the human
    vote when asked for) grouped by every role, with the judgments per group. The verdicts are coded afterwards,
    on the distinct values, by the rule the rows use."""
    keys = [_PAIR_VIEW[r] for r in roles]
    return (f"SELECT {', '.join(f'CAST({k} AS STRING) AS {r}' for k, r in zip(keys, roles, strict=True))}, "
            f"COUNT(*) AS rows_read FROM {table} GROUP BY {', '.join(keys)}")


def _pair_roles(columns: list[str], rename: dict[str, str], source) -> tuple[dict[str, str], bool]:
    """Each role's column in the file (model_a, model_b, winner required; item, weight, judge and variant when
    present; the human vote when named; a column named in ``rename`` must exist) and whether an order/position
    column says slot A is the order shown."""
    from ..pairwise import item_column

    roles = {}
    for role in _PAIR_VIEW:
        if role == "human" and role not in rename:  # the human votes only when asked for, by their column
            continue
        column = rename.get(role, role)
        if role == "item" and role not in rename:  # Chatbot Arena's question_id and the like name the items
            column = item_column(columns) or column
        if column in columns:
            roles[role] = column
        elif role in rename:  # a column the user named: never left out in silence
            named = ", ".join(c for c in columns if c != "filename")
            raise DataError(f"{source}: no column '{column}' (for the {role}). The columns are: {named}.")
        elif role in ("model_a", "model_b", "winner"):
            named = ", ".join(c for c in columns if c != "filename")
            raise DataError(f"{source}: no column '{column}' (columns: {named}); a pairwise log has model_a, "
                            "model_b and winner columns (name others with --model-a, --model-b, --winner).")
    return roles, any(c in columns for c in ("order", "position"))


def _finish_pairs(raw: pd.DataFrame, roles: list[str], source, order: bool, files: int, first_file):
    """The engine's groups checked with the rows' rule (an empty system or verdict, a verdict that is not
    model_a, model_b, tie or a system's name, a self-comparison, a bad weight: named with the first file holding
    it, found by ``first_file(kind, role, value)`` only then; kinds in :func:`_bad_pair_sql`) and coded as
    :class:`~evalgauge.pairwise.BattleCounts`; with a human vote column, what was read carries the judge's
    agreement with it (:func:`~evalgauge.pairwise.human_agreement` on the distinct votes and their judgments)."""
    import numpy as np
    import pandas as pd

    from ..pairwise import battle_counts, winner_codes

    def locate(kind, role, value) -> str:
        found = first_file(kind, role, value)
        return _path(found) if found is not None else str(source)

    _check_rows(int(raw["rows_read"].sum()), source)
    raw = raw.copy()
    for role in ("model_a", "model_b", "winner"):
        text = raw[role].astype("string").str.strip()
        empty = text.isna() | (text == "")
        if empty.any():
            n = int(raw.loc[empty, "rows_read"].sum())
            where = locate("empty", role, None)
            raise DataError(f"{where}: column '{role}' is empty on {n} row(s). Every battle needs both systems and "
                            "a verdict; fill these in or remove the rows.")
        raw[role] = text
    systems = sorted(set(raw["model_a"].unique()) | set(raw["model_b"].unique()))
    index = {s: k for k, s in enumerate(systems)}
    codes, labels = pd.factorize(raw["winner"])
    value, named = winner_codes(np.asarray(labels, dtype=object), index)
    # codes against the sorted systems: no row-by-row lookups for a million distinct battles
    a = pd.Categorical(raw["model_a"], categories=systems).codes.astype(np.int64)
    b = pd.Categorical(raw["model_b"], categories=systems).codes.astype(np.int64)
    outcome, win_sys = value[codes], named[codes]
    outcome[(win_sys >= 0) & (win_sys == a)] = 1.0
    outcome[(win_sys >= 0) & (win_sys == b)] = 0.0
    bad = np.flatnonzero(np.isnan(outcome))
    if bad.size:
        label = raw["winner"].iloc[bad[0]]
        n = int(raw["rows_read"].iloc[bad].sum())
        where = locate("verdict", "winner", label)
        raise DataError(f"{where}: column 'winner' must be model_a, model_b or tie (or a system's name); it holds "
                        f"{str(label)[:80]!r} ({n} such rows).")
    same = np.flatnonzero(a == b)
    if same.size:
        name = raw["model_a"].iloc[same[0]]
        where = locate("self", "model_a", name)
        raise DataError(f"{where}: a row compares {str(name)[:80]!r} with itself; remove self-comparisons.")
    frame = pd.DataFrame({"model_a": raw["model_a"], "model_b": raw["model_b"], "outcome": outcome,
                          "rows": raw["rows_read"].to_numpy(np.int64)})
    for role in ("item", "judge", "variant"):
        if role in roles:
            frame[role] = raw[role].to_numpy()
    if "weight" in roles:
        weight = pd.to_numeric(raw["weight"], errors="coerce").to_numpy(float)
        bad = np.flatnonzero(~(np.isfinite(weight) & (weight >= 0)))
        if bad.size:
            label = raw["weight"].iloc[bad[0]]
            held = "is empty on a row" if pd.isna(label) else f"holds {str(label)[:80]!r}"
            where = locate("empty", "weight", None) if pd.isna(label) else locate("equals", "weight", label)
            raise DataError(f"{where}: column 'weight' {held}; it must hold non-negative numbers on every row.")
        frame["weight"] = weight
    counts = battle_counts(frame, presentation_order=order, keep="item" in roles)
    battles = int(counts.entries.frame["battle"].max()) + 1 if len(frame) else 0
    info = {"rows": counts.judgments, "files": files, "entries": len(counts.rows),
            "battles": counts.judgments if counts.battles_are_rows else battles}
    if "human" in roles:  # the group-by kept each distinct human vote, with its judgments
        from ..pairwise import human_agreement

        judge_vote = pd.Series(np.where(outcome == 1.0, "a", np.where(outcome == 0.0, "b", "tie")))
        info["human_agreement"] = human_agreement(judge_vote, raw["human"].reset_index(drop=True),
                                                  raw["rows_read"].to_numpy(np.int64))
    return counts, info


def _bad_pair_sql(kind: str, role: str) -> str:
    """Where a bad battle is (both engines' SQL; each ``?`` stands for the value): an empty ``role``; ``role``
    equal to the value; a self-comparison; a verdict equal to the value naming neither system of its row."""
    text = f"TRIM(CAST({_PAIR_VIEW[role]} AS STRING))"
    a, b = (f"TRIM(CAST({_PAIR_VIEW[r]} AS STRING))" for r in ("model_a", "model_b"))
    if kind == "empty":
        return f"{_PAIR_VIEW[role]} IS NULL OR {text} = ''"
    if kind == "self":
        return f"{a} = {b}"
    if kind == "verdict":
        return f"{text} = ? AND {a} <> ? AND {b} <> ?"
    return f"{text} = ?"


def _reduce_pairs_duckdb(data: Parts, rename: dict[str, str], source, preload: tuple[str, ...] = ()):
    con = _duckdb_connect()
    try:
        with _duckdb_errors(source):
            rel = _duckdb_relation(con, data)
        found, order = _pair_roles(list(rel.columns), rename, source)
        as_text = _json_as_text({c: str(t) for c, t in zip(rel.columns, rel.types, strict=True)})
        view = rel.select(", ".join([f"{as_text(c)} AS {_PAIR_VIEW[r]}" for r, c in found.items()]
                                    + [f"filename AS {_FILE}"]))
        con.register("battles", view)
        with _duckdb_errors(source), _loading_meanwhile(preload):
            table = _arrow(con, pairs_sql(list(found)))
        raw = table.to_pandas()  # Arrow is the cheaper hand-over from DuckDB

        def first_file(kind, role, value):
            where = _bad_pair_sql(kind, role)
            row = con.execute(f"SELECT {_FILE} FROM battles WHERE {where} LIMIT 1",
                              [str(value)] * where.count("?")).fetchone()
            return row[0] if row else None

        counts, info = _finish_pairs(raw, list(found), source, order, len(data.files), first_file)
        if found.get("item") not in (None, "item"):  # items under another tool's name (question_id)
            info["item_column"] = found["item"]
        return counts, info
    finally:
        con.close()


def reduce_spark_pairs(frame, *, rename: dict[str, str] | None = None, source: str = "the Spark frame",
                       files: int = 0):
    """A pyspark DataFrame of pairwise judgments reduced on its cluster by :func:`pairs_sql`."""
    from pyspark.sql import functions as F

    columns = list(frame.columns)
    found, order = _pair_roles(columns, rename or {}, source)
    file_col = F.col("filename") if "filename" in columns else F.lit(source)
    view = frame.select(*[F.col(_spark_name(c)).alias(_PAIR_VIEW[r]) for r, c in found.items()],
                        file_col.alias(_FILE))
    name = f"evalgauge_battles_{id(view)}"
    view.createOrReplaceTempView(name)
    spark = view.sparkSession

    def first_file(kind, role, value):
        # the value as a column, not spliced into the SQL text: it is the file's untrusted text
        probe = view.withColumn("evalgauge_value", F.lit(str(value)))
        row = probe.filter(F.expr(_bad_pair_sql(kind, role).replace("?", "evalgauge_value"))).select(_FILE).first()
        return row[0] if row else None

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            raw = spark.sql(pairs_sql(list(found), table=name)).toPandas()
        return _finish_pairs(raw, list(found), source, order, files, first_file)
    finally:
        spark.catalog.dropTempView(name)


def reduce_battles(source: Any, *, engine: str = "duckdb", master: str = "local[*]",
                   columns: dict[str, str] | None = None, sep: str | None = None, encoding: str | None = None,
                   preload: tuple[str, ...] = ()):
    """A pairwise log (model_a, model_b, winner; optional item and weight) of a file, a dataset or a pyspark
    DataFrame reduced where it lives to :class:`~evalgauge.pairwise.BattleCounts` (the distinct slot-A system,
    slot-B system, verdict, item and weight with their judgments), and what was read. ``columns`` maps a role to
    the file's column (``{"winner": "verdict"}``); ``sep`` a text part's delimiter (UTF-8 text only);
    ``preload`` modules to import while DuckDB scans."""
    rename = columns or {}
    _check_engine(engine)
    _check_encoding(encoding)
    if is_spark_frame(source):
        return reduce_spark_pairs(source, rename=rename)
    try:
        data = _checked_parts(source, sep)
        if engine == "spark":
            frame = _spark_frame(spark_session(master), data)
            return reduce_spark_pairs(frame, rename=rename, source=str(source), files=len(data.files))
        return _reduce_pairs_duckdb(data, rename, source, preload)
    finally:
        _footer.cache_clear()


def engine_for(engine: str, data: Any, *, rows: str = "prefer") -> str | None:
    """The engine that reduces ``data`` (``duckdb`` or ``spark``), or None to read it in memory: the engine
    asked for, ``spark`` for a pyspark DataFrame; for ``auto`` on a file or dataset (a run database and a frame
    are read in memory) it depends on ``rows``, what the caller does with the rows: ``"no"`` (it fits the cells
    alone) DuckDB when reading would take more than :data:`ENGINE_ABOVE`; ``"prefer"`` (a fit that keeps its
    rows for later) in memory unless reading them would not fit (:func:`in_memory_estimate`); ``"need"`` in
    memory always (the read refuses a file that would not fit, :func:`check_fits_in_memory`)."""
    if engine not in vocabulary.ENGINES:
        raise DataError(f"engine '{engine}': choose one of {', '.join(vocabulary.ENGINES)}.")
    if is_spark_frame(data):
        return "spark"
    if engine != "auto" or not isinstance(data, (str, Path)):
        return engine if engine in CELL_ENGINES else None
    if rows == "need" or Path(data).suffix.lower() in (".sqlite", ".db"):
        return None
    try:
        _, needed = in_memory_estimate(data)
    except (OSError, EvalGaugeError):
        return None  # the in-memory reader says what is wrong
    if rows == "no" and needed > ENGINE_ABOVE:
        return "duckdb"
    free = machine.available_memory()
    return "duckdb" if free is not None and needed > MEMORY_SHARE * free else None


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


def is_spark_frame(obj) -> bool:
    """Whether ``obj`` is a pyspark DataFrame (told by its type's module and name: pyspark is not imported)."""
    return type(obj).__module__.startswith("pyspark.sql") and type(obj).__name__ == "DataFrame"
