"""Variance-component estimators: closed-form ANOVA for balanced data, REML for anything.

:func:`estimate_components` is the entry point: ``method="auto"`` uses ANOVA on a
complete balanced block (where, with all estimates positive, it is the exact
REML optimum) and REML otherwise, and the result says which it used and why.
"""

from __future__ import annotations

import pandas as pd

from .. import vocabulary
from ..components import VarianceComponents
from ..data import Judgments, as_judgments, without_empty
from ..design import Design, code_data
from ..errors import DesignError
from .anova import anova_bootstrap, anova_from_coded, anova_start, estimate_anova
from .model import MixedModel, model_from_design, parse_formula
from .reml import ModelTooLarge, fit_reml
from .spec import ModelSpec, resolve_model

METHODS = vocabulary.METHODS

__all__ = ["METHODS", "MixedModel", "ModelSpec", "cells_design", "estimate_anova", "estimate_components",
           "estimate_from_sums", "fit_reml", "parse_formula", "resolve_model"]


def estimate_components(data, design: Design | ModelSpec | None = None, *, method: str = "auto",
                        formula: str | None = None, drop_missing: bool = False, n_boot: int = 0,
                        level: float = 0.95, seed: int | None = None, progress=None,
                        **design_options) -> VarianceComponents:
    """Variance components of ``data`` by ANOVA, REML, or whichever fits the data (``auto``).

    The model comes from ``design`` (or one inferred from the columns and
    ``design_options``), or from an lme4-style ``formula`` (which implies REML).
    ``drop_missing`` removes rows with an empty score first and says how many.
    Every component carries a standard error; ``n_boot`` > 0 adds parametric
    bootstrap percentile intervals at ``level`` (ANOVA: mean squares drawn from
    their scaled chi-square laws; REML: simulate from the fit and refit).
    """
    if not 0 < level < 1:
        raise DesignError(f"the interval level must lie between 0 and 1, not {level}.")
    if n_boot < 0:
        raise DesignError("the number of bootstrap resamples cannot be negative.")
    boot = {"n_boot": n_boot, "level": level, "seed": seed, "progress": progress}
    if method not in METHODS:
        raise DesignError(f"method must be one of {', '.join(METHODS)}, not '{method}'.")
    judgments = as_judgments(data)
    try:
        return _estimate(judgments, design, method, formula, drop_missing, boot, design_options)
    except DesignError as exc:  # say which data a failed fit was about
        if judgments.source in str(exc):
            raise
        raise DesignError(f"{judgments.source}: {exc}") from None


#: A default model expected to take longer than this (10 minutes) is replaced by the two-way model.
AFFORDABLE_SECONDS = 600.0


def _estimate(judgments: Judgments, design, method, formula, drop_missing, boot, design_options):
    spec = resolve_model(judgments, design, formula, **design_options)
    # the default model (every interaction: no terms or max_order named, whether the design was inferred
    # here or by the command line) may be reduced when unaffordable; a model the user named, never
    inferred = spec.formula is None and spec.design.terms is None and spec.design.max_order is None
    dropped_note = None
    if drop_missing:
        total, read = len(judgments.frame), judgments
        judgments, rows = without_empty(judgments, spec.score)
        if rows.size == total:
            raise DesignError(f"{judgments.source}: every one of the {total} rows has an empty '{spec.score}': "
                              "nothing is left to estimate from. For a run database, the judges' replies gave no "
                              "readable verdict (see `evalgauge export` for the completions); set a protocol that "
                              "matches how the judge writes its verdict, output = \"json\", reask, or a larger "
                              "max_tokens, then `evalgauge rescore` or run again.")
        if rows.size:
            dropped_note = (f"{rows.size} row(s) with an empty score were dropped as requested "
                            f"({read.rows(rows)}); the design is then unbalanced unless whole levels were empty.")
    if spec.formula is not None:
        if method == "anova":
            raise DesignError("a formula is fitted by REML; use `method`=reml or auto, or give the design "
                              "options (`facets`, `nest`, ...) for ANOVA.")
        result = fit_reml(judgments, spec.mixed, method_reason="REML: the model was given as a formula", **boot)
        return _with_note(result, dropped_note)
    design = spec.design
    for note in design.notes:  # e.g. facets with one level left out of an inferred design
        dropped_note = note if dropped_note is None else f"{note} {dropped_note}"
    coded = code_data(judgments, design)
    if method == "anova" or (method == "auto" and coded.is_complete_block()):
        result = anova_from_coded(coded)
        if method == "auto":
            reason = ("auto: a complete balanced block, so closed-form ANOVA (expected mean squares), which is "
                      "the exact REML optimum when every estimate is positive")
            result = _replace(result, method_reason=reason)
        if boot["n_boot"]:
            result = anova_bootstrap(result, boot["n_boot"], boot["level"], boot["seed"])  # closed form: no REML
        return _with_note(result, dropped_note)
    if method == "auto":
        report = coded.balance()
        reason = f"auto: REML, because the data are {report.summary()}"
    else:
        reason = "REML (requested)"
    start = _moment_start(coded)
    del coded  # the rows' codes: REML codes its cells afresh, and a large fit needs the memory

    def fit(d: Design, cap: float | None) -> VarianceComponents:
        return fit_reml(judgments, model_from_design(d), object_facet=d.object, fixed_facets=d.fixed,
                        method_reason=reason, facet_order=d.names, max_seconds=cap,
                        start=start if d is spec.design else None, **boot)

    result = _affordable(fit, spec.design, inferred)
    return _with_note(result, dropped_note)


def _affordable(fit, design: Design, inferred: bool) -> VarianceComponents:
    """``fit(design, max_seconds)``; the default model (``inferred``: every interaction, no terms or max_order
    named) expected to take longer than :data:`AFFORDABLE_SECONDS` is replaced by the two-way model, with a
    note of what the full one would cost and how to ask for it. A model the user named is fitted as given."""
    try:
        return fit(design, AFFORDABLE_SECONDS if inferred else None)
    except ModelTooLarge as exc:
        every = design.model_effects()
        if not inferred or max(e.order for e in every[:-1] or every) <= 2:
            raise
        # the same request with every option the user gave (score column, facets, nesting, roles), only
        # the interactions cut: re-inferring from the columns would drop what the command line resolved
        smaller = _replace(design, max_order=2)
        note = (f"the model with every interaction ({exc.size}) is more than this machine affords, so "
                f"interactions of up to two facets were fitted; ask for more with `max_order` or `terms`.")
        return _with_note(fit(smaller, None), note)


def cells_design(cells, *, score: str = "score", n: str = "n", total: str = "sum", squares: str = "sum_squares",
                 **design_options) -> Design:
    """The design of per-cell sums, inferred from the cells' columns as from the rows'
    (:func:`evalgauge.design.infer_design` on the cell means)."""
    from ..design import infer_design

    # the design is read from the column names and each facet's levels, never from the scores: the view shares
    # the cells' columns (no copy of ten million cells) and stands the counts in for the score column
    view = pd.DataFrame({**{c: cells[c] for c in cells.columns if c not in (n, total, squares)}, score: cells[n]},
                        copy=False)
    return infer_design(Judgments(view, "the cells"), score=score, **design_options)


def estimate_from_sums(cells, *, score: str = "score", n: str = "n", total: str = "sum",
                       squares: str = "sum_squares", source: str = "the cells", progress=None,
                       design: Design | None = None, **design_options) -> VarianceComponents:
    """Variance components from per-cell sums (one row per combination of the facets, with its judgment count
    ``n``, sum and sum of squares of the score), as an engine over files reduces them: no row reaches Python.
    The design is ``design``, or inferred from the cells' columns as from the rows' (:func:`cells_design`;
    ``design_options`` as for :func:`estimate_components`). A complete balanced block of crossed facets gets the
    closed-form ANOVA on its cell means (:func:`~evalgauge.estimate.anova.anova_from_cell_means`, as
    ``method="auto"`` on the rows); anything else the same REML as on the rows (:func:`fit_reml` on
    :class:`~evalgauge.estimate.cells.CellData`), whose ``progress`` says the model's size and expected cost from
    the cells before anything is allocated.
    """
    from .cells import cells_from_sums

    if design is None:
        design = cells_design(cells, score=score, n=n, total=total, squares=squares, **design_options)
    _check_levels(cells, design, source)
    closed = _anova_from_sums(cells, design, n, total, squares)
    if closed is not None:
        return _with_design_notes(closed, design)
    reason = "REML on cell statistics reduced from the files (engine)"

    def fit(d: Design, cap: float | None) -> VarianceComponents:
        model = model_from_design(d)
        return fit_reml(cells_from_sums(cells, list(model.columns), n, total, squares), model, object_facet=d.object,
                        fixed_facets=d.fixed, method_reason=reason, facet_order=d.names, progress=progress,
                        max_seconds=cap)

    try:
        # the default model is cut to two-facet interactions when unaffordable, as on the rows
        result = _affordable(fit, design, design.terms is None and design.max_order is None)
    except DesignError as exc:
        raise DesignError(f"{source}: {exc}") from None
    return _with_design_notes(result, design)


def _check_levels(cells, design: Design, source: str) -> None:
    """A facet of the design (not nested) with one level among the cells is refused as on the rows."""
    import numpy as np

    from ..design import one_level_error

    for facet in design.facets:
        if facet.parent is not None:
            continue
        column = cells[facet.name]
        if isinstance(column.dtype, pd.CategoricalDtype):  # an engine's labels: the categories in use
            codes = column.cat.codes.to_numpy()
            used = np.zeros(len(column.cat.categories) + 1, dtype=bool)
            used[codes] = True  # a missing label (-1) marks the extra last slot; no copy of the codes
            levels = column.cat.categories[np.flatnonzero(used[:-1])]
        else:
            levels = column.dropna().unique()
        if len(levels) < 2:
            raise one_level_error(source, facet.name, levels[0] if len(levels) else "(none)")


def _with_design_notes(result: VarianceComponents, design: Design) -> VarianceComponents:
    """The design's notes (a facet with one level left out of an inferred design) before the fit's own."""
    return _replace(result, notes=(*design.notes, *result.notes)) if design.notes else result


def _anova_from_sums(cells, design: Design, n: str, total: str, squares: str) -> VarianceComponents | None:
    """The closed form from per-cell sums when every combination of the (crossed) facets holds the same number
    of judgments; None otherwise (nesting, a fixed facet's sensitivity, an empty or unequal cell)."""
    import numpy as np

    from .anova import anova_from_cell_means

    if any(f.parent for f in design.facets):
        return None
    keys = list(design.names)
    grouped = cells
    coded = _grid_codes(cells, keys)
    if coded is None:  # other columns besides the facets, or a cell given twice: summed to the design's cells
        grouped = cells.groupby(keys, sort=True, observed=True)[[n, total, squares]].sum().reset_index()
        coded = _grid_codes(grouped, keys, one_per_cell=True)
    flat, shape = coded
    counts = grouped[n].to_numpy()
    if len(grouped) != int(np.prod(shape)) or counts.min() != counts.max() or counts.min() <= 0:
        return None
    per_cell = float(counts[0])
    sums = grouped[total].to_numpy(dtype=np.float64)
    mean = np.empty(shape)
    mean.reshape(-1)[flat] = sums  # every cell is written: the grid is complete
    mean /= per_cell
    within = _within_cells(sums, grouped[squares].to_numpy(dtype=np.float64), per_cell)
    vc = anova_from_cell_means(design, mean, int(per_cell), within)
    return _replace(vc, method_reason="a complete balanced block reduced from the files (engine): closed-form ANOVA "
                                      "on the cell means")


def _within_cells(sums, squares, per_cell: float, slab: int = 1 << 18) -> float:
    """The within-cell sum of squares, the sum over cells of ``squares - sums^2 / n`` (each cell's difference
    taken on its own and a rounding below zero counted as zero: subtracting the totals instead would lose the
    digits a large mean takes), a slab of cells at a time so that no temporary is the size of the cells."""
    import numpy as np

    total = 0.0
    buffer = np.empty(min(slab, sums.size))
    for start in range(0, sums.size, slab):
        part = buffer[: min(slab, sums.size - start)]
        np.square(sums[start:start + slab], out=part)
        part /= -per_cell
        part += squares[start:start + slab]
        total += float(np.maximum(part, 0.0, out=part).sum())
    return total


def _level_codes(column: pd.Series):
    """A facet's level codes and number of levels. A categorical column (an engine's labels, dictionary-encoded)
    keeps its own small codes when every category occurs and none is missing; the sums of squares do not depend
    on the levels' order."""
    import numpy as np

    if isinstance(column.dtype, pd.CategoricalDtype):
        codes = column.cat.codes.to_numpy()
        size = len(column.cat.categories)
        if codes.size and codes.min() >= 0 and np.bincount(codes, minlength=size).min() > 0:
            return codes, size
    c, u = pd.factorize(column, sort=True)
    return c, len(u)


def _grid_codes(cells, keys: list[str], *, one_per_cell: bool = False):
    """Each row's flat index in the grid of ``keys`` and the grid's shape when the rows are the complete grid, one
    row per cell (the engine's GROUP BY of a balanced block gives exactly that; ``one_per_cell`` when already
    grouped); None when other columns, a repeated combination or a missing one need a group-by first."""
    import numpy as np

    codes, shape = [], []
    for name in keys:
        c, size = _level_codes(cells[name])
        codes.append(c)
        shape.append(size)
    flat = np.ravel_multi_index(codes, shape) if codes else np.zeros(len(cells), dtype=np.intp)
    if one_per_cell:
        return flat, shape
    if len(cells.columns) != len(keys) + 3 or len(cells) != int(np.prod(shape)) or not len(cells):
        return None
    # as many rows as the grid has cells: the complete grid exactly when every cell is reached
    seen = np.zeros(len(cells), dtype=bool)
    seen[flat] = True
    if not seen.all():
        return None
    return flat, shape


def _moment_start(coded) -> dict[frozenset, float] | None:
    """REML's start on nearly complete data (:func:`anova.anova_start`, sizing eqs. 5-11's EMS solution on
    the cell means): each random term's variance over the residual's, keyed by its facets."""
    vc = anova_start(coded)
    residual = None if vc is None else next(c.variance for c in vc.components if c.kind == vocabulary.RESIDUAL)
    if residual is None or not residual > 0:
        return None
    return {frozenset(c.facets): c.variance / residual for c in vc.components if c.kind == "random"}


def _replace(result: VarianceComponents, **changes) -> VarianceComponents:
    from dataclasses import replace

    return replace(result, **changes)


def _with_note(result: VarianceComponents, note: str | None) -> VarianceComponents:
    return result if note is None else _replace(result, notes=(note, *result.notes))
