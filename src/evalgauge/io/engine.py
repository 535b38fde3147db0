"""Reducing judgments where they live: DuckDB (here) or Spark (on a cluster) groups the rows to cell statistics.

Every estimator needs only cell statistics (REML: each cell's count, sum and sum of squares of the score), so a
log larger than memory is reduced by an engine on the files and only the cells reach Python. The reduction is
one SQL text (:func:`cells_sql`) that both engines execute over a view of the rows with plain column names: a
``GROUP BY`` of every facet column with, per cell, the count, sum and sum of squares of the score, and in the
same scan the counts the checks need (rows, empty scores, scores that are not numbers). A part whose columns or
column types differ from the others' is named before the scan, from the parts' schemas. Only when the counts
find a bad score does a second query (:func:`first_bad_sql`, stopping at its first row) name its file and value:
a clean log is read once.

This module is an edge (it reads files); :func:`evalgauge.estimate.estimate_from_sums` fits the cells.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pandas as pd

from .. import vocabulary
from ..errors import DataError
from .datasets import PART_KINDS, dataset_parts, is_dataset

#: the columns of the reduced table besides the facets
N, SUM, SQUARES = "n", "sum", "sum_squares"
#: the engines that reduce rows to cells where they live (vocabulary.ENGINES adds pandas and auto)
CELL_ENGINES = ("duckdb", "spark")
#: the view's fixed column names (the facets are f0, f1, ...): plain identifiers both SQL dialects read alike
_SCORE, _FILE = "s", "src_file"


def cells_sql(n_facets: int, table: str = "judgments") -> str:
    """The one SQL text both engines run: rows of ``table`` (columns ``f0..f{k-1}``, the score ``s`` as text or
    number) grouped by the facets, with each cell's count, sum and sum of squares of the numeric scores, and the
    checks' counts (rows, empty scores, scores that are not numbers)."""
    keys = ", ".join(f"f{k}" for k in range(n_facets))
    value = f"TRY_CAST({_SCORE} AS DOUBLE)"
    return (f"SELECT {', '.join(f'CAST(f{k} AS STRING) AS f{k}' for k in range(n_facets))}, "
            f"COUNT({value}) AS {N}, SUM({value}) AS {SUM}, SUM({value} * {value}) AS {SQUARES}, "
            f"COUNT(*) AS rows_read, COUNT(*) - COUNT({_SCORE}) AS empty, "
            f"COUNT({_SCORE}) - COUNT({value}) AS not_numbers "
            f"FROM {table} GROUP BY {keys}")


def first_bad_sql(table: str = "judgments", *, empty: bool) -> str:
    """Where the checks' counts found a bad score: the first file (and value) holding one. Run only then, and it
    stops at the first such row."""
    where = f"{_SCORE} IS NULL" if empty else f"{_SCORE} IS NOT NULL AND TRY_CAST({_SCORE} AS DOUBLE) IS NULL"
    return f"SELECT {_FILE}, CAST({_SCORE} AS STRING) FROM {table} WHERE {where} LIMIT 1"


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


def _duckdb_relation(con, parts: list[Path], root: Path | None):
    """A DuckDB relation over every part (hive partition keys as columns, the file's name in ``filename``)."""
    kind, files, hive = _kind(parts), [str(p) for p in parts], _hive(parts, root)
    if kind == "parquet":
        return con.read_parquet(files, filename=True, hive_partitioning=hive)
    if kind in ("csv", "tsv"):
        return con.read_csv(files, filename=True, hive_partitioning=hive, all_varchar=True, header=True,
                            delimiter="\t" if kind == "tsv" else ",")
    return con.read_json(files, filename=True, hive_partitioning=hive, format="newline_delimited")


def _numeric(type_name: str) -> bool:
    return type_name.upper().split("(")[0] in {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "FLOAT",
                                               "DOUBLE", "DECIMAL", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT"}


def check_schemas(parts: list[Path]) -> None:
    """Every part has the first part's columns, and (Parquet, JSONL) numbers where the first has numbers: a
    missing or extra column, or text among numbers, is named with its file and column before the scan, from the
    parts' schemas (DuckDB reads a Parquet part's footer, a text part's header)."""
    import duckdb

    kind = _kind(parts)
    con = duckdb.connect()
    try:
        first = None
        for part in parts:
            if kind == "parquet":
                rel = con.read_parquet(str(part))
            elif kind == "jsonl":
                rel = con.read_json(str(part), format="newline_delimited")
            else:
                rel = con.read_csv(str(part), all_varchar=True, header=True, delimiter="\t" if kind == "tsv" else ",")
            schema = dict(zip(rel.columns, (str(t) for t in rel.types), strict=True))
            if first is None:
                first = (part, schema)
                continue
            missing = [c for c in first[1] if c not in schema]
            extra = [c for c in schema if c not in first[1]]
            if missing or extra:
                what = f"has no column '{missing[0]}'" if missing else f"has a column '{extra[0]}'"
                raise DataError(f"{part}: {what} that {first[0]} " + ("has" if missing else "does not have")
                                + "; every part of a dataset has the same columns.")
            odd = next((c for c in schema if _numeric(first[1][c]) and not _numeric(schema[c])
                        and schema[c].upper() != '"NULL"'), None)
            if odd is not None:
                raise DataError(f"{part}: column '{odd}' holds {schema[odd]} where {first[0]} holds numbers "
                                f"({first[1][odd]}); a value that is not a number is in this part.")
    finally:
        con.close()


def scan_size(source) -> tuple[int | None, int, int]:
    """(rows, files, bytes) of what a scan will read, before it starts: the rows from the Parquet parts' metadata
    (None when a part is text, whose rows are known only by reading it)."""
    import pyarrow.parquet as pq

    parts = _parts(source)
    size = sum(p.stat().st_size for p in parts)
    if _kind(parts) != "parquet":
        return None, len(parts), size
    try:
        rows = sum(pq.ParquetFile(p).metadata.num_rows for p in parts)
    except Exception:  # a damaged part: the scan names it
        return None, len(parts), size
    return int(rows), len(parts), size


def _facets(columns: list[str], score: str, source) -> list[str]:
    if score not in columns:
        named = ", ".join(c for c in columns if c != "filename")
        raise DataError(f"{source}: no column '{score}' (columns: {named}); name the score column with --score.")
    skip = {score, "filename", *vocabulary.REPLICATE_COLUMNS}
    facets = [c for c in columns if c not in skip]
    if not facets:
        raise DataError(f"{source}: no facet columns besides '{score}'.")
    return facets


def _finish(raw: pd.DataFrame, facets: list[str], score: str, source, drop_missing: bool, files: int,
            first_bad) -> tuple[pd.DataFrame, dict]:
    """The engine's cells checked (a non-numeric or empty score named with its file, found by ``first_bad(empty)``
    only when the counts say there is one) and renamed to the facets."""
    not_numbers = int(raw["not_numbers"].sum())
    if not_numbers:
        where, value = first_bad(False)
        # the value is the file's text, shown escaped and cut short
        raise DataError(f"{_path(where)}: column '{score}' holds {str(value)[:80]!r}, which is not a number "
                        f"({not_numbers} such value(s)); fix or remove them (every score is a number).")
    rows, empty = int(raw["rows_read"].sum()), int(raw["empty"].sum())
    if empty and not drop_missing:
        where = _path(first_bad(True)[0])
        raise DataError(f"{source}: {empty} of {rows} judgment(s) have an empty '{score}' (the first in {where}); "
                        "pass --drop-missing to leave them out, or fill them in.")
    cells = raw[raw[N] > 0][[f"f{k}" for k in range(len(facets))] + [N, SUM, SQUARES]]
    cells = cells.rename(columns={f"f{k}": c for k, c in enumerate(facets)}).reset_index(drop=True)
    cells[N] = cells[N].astype("int64")
    return cells, {"rows": rows, "files": files, "empty_dropped": empty, "cells": len(cells)}


def _path(name) -> str:
    """A part's name as the user gave it: Spark names it by URI (``file:///data/a.csv``)."""
    from urllib.parse import unquote, urlparse

    text = str(name)
    return unquote(urlparse(text).path) if text.startswith("file:") else text


def _reduce_duckdb(parts: list[Path], root: Path | None, score: str, source, drop_missing: bool):
    import duckdb

    con = duckdb.connect()
    try:
        rel = _duckdb_relation(con, parts, root)
        facets = _facets(list(rel.columns), score, source)
        view = rel.select(", ".join([f'"{c}" AS f{k}' for k, c in enumerate(facets)]
                                    + [f'"{score}" AS {_SCORE}', f"filename AS {_FILE}"]))
        con.register("judgments", view)
        raw = con.execute(cells_sql(len(facets))).df()
        return _finish(raw, facets, score, source, drop_missing, len(parts),
                       lambda empty: con.execute(first_bad_sql(empty=empty)).fetchone())
    finally:
        con.close()


def spark_session(master: str = "local[*]"):
    """A Spark session at ``master`` (``local[*]``: every core of this machine; a cluster's ``spark://`` or
    ``yarn`` URL), quiet: no web UI, no progress bars, errors only in its log."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise DataError("--engine spark needs pyspark and a Java runtime: pip install 'evalgauge[spark]' (and, on "
                        "Debian, apt install default-jre-headless).") from None
    try:
        spark = (SparkSession.builder.master(master).appName("evalgauge")
                 .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "8").getOrCreate())
    except Exception as exc:  # no Java, a master that does not answer
        raise DataError(f"Spark could not start at '{master}' ({str(exc).splitlines()[0][:200]}); check the "
                        "master URL and that Java is installed (java -version).") from None
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _spark_frame(spark, parts: list[Path], root: Path | None):
    from pyspark.sql import functions as F

    kind, files = _kind(parts), [str(p) for p in parts]
    base = {"basePath": str(root)} if root is not None and _hive(parts, root) else {}
    if kind == "parquet":
        frame = spark.read.options(**base).parquet(*files)
    elif kind in ("csv", "tsv"):
        frame = spark.read.options(header="true", sep="\t" if kind == "tsv" else ",", **base).csv(files)
    else:
        frame = spark.read.options(**base).json(files)
    return frame.withColumn("filename", F.input_file_name())


def reduce_spark_frame(frame, *, score: str = "score", drop_missing: bool = False, source: str = "the Spark frame",
                       files: int = 0) -> tuple[pd.DataFrame, dict]:
    """A pyspark DataFrame of judgments reduced on its cluster by :func:`cells_sql`: only the cells travel."""
    from pyspark.sql import functions as F

    columns = list(frame.columns)
    facets = _facets(columns, score, source)
    file_col = F.col("filename") if "filename" in columns else F.lit(source)
    view = frame.select(*[F.col(c).alias(f"f{k}") for k, c in enumerate(facets)],
                        F.col(score).alias(_SCORE), file_col.alias(_FILE))
    name = f"evalgauge_judgments_{id(view)}"
    view.createOrReplaceTempView(name)
    spark = view.sparkSession
    try:
        with warnings.catch_warnings():  # pyspark's notices about pandas versions: the cells are plain columns
            warnings.simplefilter("ignore")
            raw = spark.sql(cells_sql(len(facets), table=name)).toPandas()
        return _finish(raw, facets, score, source, drop_missing, files,
                       lambda empty: tuple(spark.sql(first_bad_sql(name, empty=empty)).first()))
    finally:
        spark.catalog.dropTempView(name)


def _reduce_spark(parts: list[Path], root: Path | None, score: str, source, drop_missing: bool, master: str):
    frame = _spark_frame(spark_session(master), parts, root)
    return reduce_spark_frame(frame, score=score, drop_missing=drop_missing, source=str(source), files=len(parts))


def reduce_cells(source: Any, *, score: str = "score", drop_missing: bool = False, engine: str = "duckdb",
                 master: str = "local[*]") -> tuple[pd.DataFrame, dict]:
    """The judgments of a file, a dataset (folder, glob, hive partitions) or a pyspark DataFrame grouped by every
    facet column (every column but the score, the replicate index and the file name) where they live: one row
    per cell with its count, sum and sum of squares of the score, and what was read (rows, files, empty scores
    dropped, cells). ``engine`` is ``duckdb`` (this machine) or ``spark`` (at ``master``); a pyspark DataFrame
    is reduced on its own session."""
    if engine not in CELL_ENGINES:
        raise DataError(f"engine '{engine}': choose one of {', '.join(CELL_ENGINES)}.")
    if _is_spark_frame(source):
        return reduce_spark_frame(source, score=score, drop_missing=drop_missing)
    parts = _parts(source)
    root = Path(str(source)) if Path(str(source)).is_dir() else None
    check_schemas(parts)
    if engine == "spark":
        return _reduce_spark(parts, root, score, source, drop_missing, master)
    return _reduce_duckdb(parts, root, score, source, drop_missing)


def _is_spark_frame(obj) -> bool:
    return type(obj).__module__.startswith("pyspark.sql") and type(obj).__name__ == "DataFrame"
