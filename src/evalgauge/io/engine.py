"""Reducing judgments where they live: DuckDB groups the rows of a file or dataset to cell statistics.

Every estimator needs only cell statistics (REML: each cell's count, mean and within-cell sum of squares), so a
log larger than memory is reduced by DuckDB on the files and only the cells reach Python: ``GROUP BY`` every
facet column, with ``COUNT``, ``SUM`` and ``SUM`` of squares of the score. The checks a file gets in memory run
there too, each answer naming the file and the column: a part whose columns differ from the others', a score
that is not a number, an empty score.

This module is an edge (it reads files); :func:`evalgauge.estimate.estimate_from_sums` fits the cells.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .. import vocabulary
from ..errors import DataError
from .datasets import PART_KINDS, dataset_parts, is_dataset

#: the columns of the reduced table besides the facets
N, SUM, SQUARES = "n", "sum", "sum_squares"


def _parts(source) -> list[Path]:
    if is_dataset(source):
        return dataset_parts(source)
    path = Path(str(source))
    if not path.is_file():
        raise DataError(f"{path}: no such file.")
    if path.suffix.lower() not in PART_KINDS:
        raise DataError(f"{path}: the engine reads Parquet, CSV, TSV and JSONL, not '{path.suffix or '(none)'}'.")
    return [path]


def _relation(con, parts: list[Path], root: Path | None):
    """A DuckDB relation over every part (hive partition keys as columns, the file's name in ``filename``)."""
    kind = PART_KINDS[parts[0].suffix.lower()]
    files = [str(p) for p in parts]
    hive = root is not None and any("=" in seg for p in parts for seg in p.relative_to(root).parts[:-1])
    if kind == "parquet":
        return con.read_parquet(files, filename=True, hive_partitioning=hive)
    if kind in ("csv", "tsv"):
        return con.read_csv(files, filename=True, hive_partitioning=hive, all_varchar=True, header=True,
                            delimiter="\t" if kind == "tsv" else ",")
    return con.read_json(files, filename=True, hive_partitioning=hive, format="newline_delimited")


def _check_schemas(con, parts: list[Path]) -> None:
    """Every part has the first part's columns: a missing or extra one is named with its file, before the scan."""
    kind = PART_KINDS[parts[0].suffix.lower()]
    reader = {"parquet": con.read_parquet, "jsonl": con.read_json}.get(kind)
    first = None
    for part in parts:
        rel = reader(str(part)) if reader else con.read_csv(str(part), all_varchar=True, header=True,
                                                            delimiter="\t" if kind == "tsv" else ",")
        columns = list(rel.columns)
        if first is None:
            first = (part, columns)
            continue
        missing = [c for c in first[1] if c not in columns]
        extra = [c for c in columns if c not in first[1]]
        if missing or extra:
            what = f"has no column '{missing[0]}'" if missing else f"has a column '{extra[0]}'"
            raise DataError(f"{part}: {what} that {first[0]} " + ("has" if missing else "does not have")
                            + "; every part of a dataset has the same columns.")


def scan_size(source) -> tuple[int | None, int, int]:
    """(rows, files, bytes) of what a scan will read, before it starts: the rows from the Parquet parts' metadata
    (None when a part is text, whose rows are known only by reading it)."""
    import pyarrow.parquet as pq

    parts = _parts(source)
    size = sum(p.stat().st_size for p in parts)
    if PART_KINDS[parts[0].suffix.lower()] != "parquet":
        return None, len(parts), size
    try:
        rows = sum(pq.ParquetFile(p).metadata.num_rows for p in parts)
    except Exception:  # a damaged part: the scan names it
        return None, len(parts), size
    return int(rows), len(parts), size


def reduce_cells(source, *, score: str = "score", drop_missing: bool = False) -> tuple[pd.DataFrame, dict]:
    """The judgments of a file or dataset grouped by every facet column (every column but the score, the
    replicate index and the file name) in DuckDB: one row per cell with its count, sum and sum of squares
    of the score, and what was read (rows, files, empty scores dropped)."""
    import duckdb

    parts = _parts(source)
    root = Path(str(source)) if Path(str(source)).is_dir() else None
    con = duckdb.connect()
    try:
        _check_schemas(con, parts)
        rel = _relation(con, parts, root)
        if score not in rel.columns:
            named = ", ".join(c for c in rel.columns if c != "filename")
            raise DataError(f"{source}: no column '{score}' (columns: {named}); name the score column with --score.")
        con.register("judgments", rel)
        q = f'"{score}"'
        bad = con.execute(f"SELECT filename, {q}::VARCHAR FROM judgments WHERE {q} IS NOT NULL AND "
                          f"TRY_CAST({q} AS DOUBLE) IS NULL LIMIT 1").fetchall()
        if bad:
            raise DataError(f"{bad[0][0]}: column '{score}' holds '{bad[0][1]}', which is not a number; fix or remove "
                            "the value (every score is a number).")
        rows, empty = con.execute(f"SELECT COUNT(*), COUNT(*) - COUNT({q}) FROM judgments").fetchone()
        if empty and not drop_missing:
            where = con.execute(f"SELECT filename FROM judgments WHERE {q} IS NULL LIMIT 1").fetchone()[0]
            raise DataError(f"{source}: {empty} of {rows} judgment(s) have an empty '{score}' (the first in {where}); "
                            "pass --drop-missing to leave them out, or fill them in.")
        skip = {score, "filename", *vocabulary.REPLICATE_COLUMNS}
        facets = [c for c in rel.columns if c not in skip]
        if not facets:
            raise DataError(f"{source}: no facet columns besides '{score}'.")
        cols = ", ".join(f'"{c}"::VARCHAR AS "{c}"' for c in facets)
        keys = ", ".join(f'"{c}"' for c in facets)
        cells = con.execute(
            f"SELECT {cols}, COUNT(*) AS {N}, SUM(TRY_CAST({q} AS DOUBLE)) AS {SUM}, "
            f"SUM(TRY_CAST({q} AS DOUBLE) * TRY_CAST({q} AS DOUBLE)) AS {SQUARES} "
            f"FROM judgments WHERE {q} IS NOT NULL GROUP BY {keys}").df()
    finally:
        con.close()
    return cells, {"rows": int(rows), "files": len(parts), "empty_dropped": int(empty), "cells": len(cells)}
