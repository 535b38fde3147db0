"""The reduction on DuckDB: a view of the parts with plain column names, the scan within its memory limit, and
its errors as messages."""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING

from .checks import _cells, _check_labels, _check_repeats, _check_replicates, _check_rows, _check_scores, _facets
from .parts import (
    DUCKDB_MEMORY,
    Parts,
    _duckdb_errors,
    _file_columns,
    _hive,
    _kind,
    _numeric,
    literal_path,
    replicate_span,
)
from .sql import (
    _CHECKS,
    _FILE,
    _FIRST,
    _REPLICATE,
    _SCORE,
    _SLOTS,
    SQUARES,
    SUM,
    N,
    _carried_scores,
    _json_as_text,
    _quoted,
    cells_sql,
    csv_field_sql,
    scores_need_exact_scan,
)

if TYPE_CHECKING:  # pandas is loaded when the cells are turned into a frame, after the scan has started
    import pandas as pd


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
