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

This package is an edge (it reads files); :func:`evalgauge.estimate.estimate_from_sums` fits the cells. Its
rooms: ``sql`` (the texts), ``parts`` (the files and their schemas), ``checks`` (what a scan's counts say),
``on_duckdb`` and ``on_spark`` (a runner each), ``pairs`` (the battles); here the engine is chosen.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ... import machine, vocabulary
from ...errors import DataError, EvalGaugeError
from .on_duckdb import _reduce_duckdb
from .on_spark import _reduce_spark, is_spark_frame, reduce_spark_frame, spark_session
from .pairs import reduce_battles, reduce_spark_pairs
from .parts import (
    BYTES_PER_VALUE,
    CELL_ENGINES,
    DUCKDB_MEMORY,
    ENGINE_ABOVE,
    MEMORY_SHARE,
    TEXT_BYTES_PER_VALUE,
    Parts,
    _check_encoding,
    _check_engine,
    _checked_parts,
    _footer,
    check_fits_in_memory,
    check_schemas,
    in_memory_estimate,
    is_run_database,
    parquet_footer,
    replicate_span,
    scan_size,
)
from .sql import CSV_EMPTY, SQUARES, SUM, N, cells_sql, csv_field_sql, first_bad_sql, pairs_sql, repeated_replicate_sql

__all__ = [
    "BYTES_PER_VALUE",
    "CELL_ENGINES",
    "CSV_EMPTY",
    "DUCKDB_MEMORY",
    "ENGINE_ABOVE",
    "MEMORY_SHARE",
    "SQUARES",
    "SUM",
    "TEXT_BYTES_PER_VALUE",
    "N",
    "Parts",
    "cells_sql",
    "check_fits_in_memory",
    "check_schemas",
    "csv_field_sql",
    "engine_for",
    "first_bad_sql",
    "in_memory_estimate",
    "is_run_database",
    "is_spark_frame",
    "pairs_sql",
    "parquet_footer",
    "reduce_battles",
    "reduce_cells",
    "reduce_spark_frame",
    "reduce_spark_pairs",
    "repeated_replicate_sql",
    "replicate_span",
    "scan_size",
    "spark_session",
]

if TYPE_CHECKING:  # pandas is loaded when the cells are turned into a frame, after the scan has started
    import pandas as pd


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


def _reduce_run(path: Path, score: str, drop_missing: bool, engine: str) -> tuple[pd.DataFrame, dict]:
    import tempfile

    from ...inputs import check_input_file
    from ..runs import write_judgments_parquet

    if engine != "duckdb":
        raise DataError(f"{path}: a run database is a file on this machine; reduce it with `engine` duckdb.")
    check_input_file(path)
    with tempfile.TemporaryDirectory(prefix="evalgauge-run-") as tmp:
        part = Path(tmp) / "judgments.parquet"
        write_judgments_parquet(path, str(part))
        # the run's replicate index is left out of the part: its repeated calls of a cell are the replicates
        return _reduce_duckdb(Parts([part]), score, path, drop_missing, label=f"{path} (calls)", replicate="auto")


# ---------------------------------------------------------------------------
# Pairwise judgments: counts of (slot-A system, slot-B system, verdict[, item][, weight])
# ---------------------------------------------------------------------------


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
