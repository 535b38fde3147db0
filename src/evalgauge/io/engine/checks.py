"""What a scan's counts say about the rows: a facet without a label, a repeated or missing replicate, a score that is
not a number; each named with its file and what to do, before any cell is fitted."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ... import vocabulary
from ...errors import DataError
from ...vocabulary import MAX_ABS_SCORE
from .parts import _path
from .sql import _CHECKS, _FILE, _FIRST, _SLOTS, SQUARES, SUM, N, first_bad_sql, repeated_replicate_sql

if TYPE_CHECKING:  # pandas is loaded when the cells are turned into a frame, after the scan has started
    import pandas as pd


def _check_rows(judged: int, source) -> None:
    """A log without a single judgment is refused with the rows' words."""
    if not judged:
        raise DataError(f"{source}: has no data rows. A judgments file has a header and one row per score.")


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
        hint = (f"the header reads as one column: pass `sep` '{glued}'" if glued
                else "name the score column with `score`")
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
                        f"{', '.join(vocabulary.FACET_NAMES)}; columns: {named}); name them with `facets`.")
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
                    "name the column that numbers them with `replicate` COL (or `replicate`=auto to count them as "
                    "replicates); if a facet is missing, add it to `facets`; if they are accidental duplicates, "
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
                        f"{where}); pass `drop_missing` to leave them out, or fill them in.")
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
