"""Variance-component estimators: closed-form ANOVA for balanced data, REML for anything.

:func:`estimate_components` is the entry point: ``method="auto"`` uses ANOVA on a
complete balanced block (where, with all estimates positive, it is the exact
REML optimum) and REML otherwise, and the result says which it used and why.
"""

from __future__ import annotations

from .. import vocabulary
from ..components import VarianceComponents
from ..data import Judgments, as_judgments, format_rows, without_empty
from ..design import Design, code_data
from ..errors import DesignError
from .anova import anova_bootstrap, anova_from_cell_means, anova_from_coded, estimate_anova
from .model import MixedModel, model_from_design, parse_formula
from .reml import ModelTooLarge, fit_reml
from .spec import ModelSpec, resolve_model

METHODS = vocabulary.METHODS

__all__ = ["METHODS", "MixedModel", "ModelSpec", "estimate_anova", "estimate_components", "fit_reml", "parse_formula",
           "resolve_model"]


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
        judgments, rows = without_empty(judgments, spec.score)
        if rows.size:
            dropped_note = (f"{rows.size} row(s) with an empty score were dropped as requested "
                            f"({format_rows(rows)}); the design is then unbalanced unless whole levels were empty.")
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
    try:
        result = fit_reml(judgments, model_from_design(spec.design), object_facet=spec.design.object,
                          fixed_facets=spec.design.fixed, method_reason=reason, facet_order=spec.design.names,
                          max_seconds=AFFORDABLE_SECONDS if inferred else None, start=_moment_start(coded),
                          **boot)
    except ModelTooLarge as exc:
        every = spec.design.model_effects()
        if not inferred or max(e.order for e in every[:-1] or every) <= 2:
            raise
        # The default model (every interaction) is more than this machine affords: fit the two-way model,
        # and say what the full one would cost and how to ask for it.
        smaller = resolve_model(judgments, None, None, **design_options, max_order=2).design
        note = (f"the model with every interaction ({exc.size}) is more than this machine affords, so "
                f"interactions of up to two facets were fitted; ask for more with `max_order` or `terms`.")
        result = fit_reml(judgments, model_from_design(smaller), object_facet=smaller.object,
                          fixed_facets=smaller.fixed, method_reason=reason, facet_order=smaller.names, **boot)
        result = _with_note(result, note)
    return _with_note(result, dropped_note)


#: the largest share of empty cells for which the closed-form ANOVA gives REML its start
START_MAX_EMPTY = 0.01


def _moment_start(coded) -> dict[frozenset, float] | None:
    """A start for REML on nearly complete data (at most START_MAX_EMPTY of the cells empty, as with a
    few rows lost from a factorial): the closed-form ANOVA of the cell means (sizing eqs. 5-11's EMS
    solution), the empty cells filled with the grand mean and the replicates taken as the cells' median
    count, as each term's variance over the residual's. Only a start: REML's optimum does not depend on
    it, but from it the AI-Newton fit needs fewer evaluations than from theta = 1."""
    import numpy as np

    counts = coded.cell_count
    if counts.size == 0 or np.mean(counts == 0) > START_MAX_EMPTY or coded.design.fixed:
        return None
    sums = np.bincount(coded.cell, weights=coded.y, minlength=counts.size)
    filled = counts > 0
    mean = np.where(filled, sums / np.maximum(counts, 1), float(np.mean(coded.y)))
    within = coded.y - mean[coded.cell]
    reps = max(int(np.median(counts[filled])), 1)
    try:
        vc = anova_from_cell_means(coded.design, mean.reshape(coded.shape), reps, float(within @ within))
    except (DesignError, np.linalg.LinAlgError, ValueError, ZeroDivisionError):
        return None
    residual = next(c.variance for c in vc.components if c.kind == "residual")
    if not residual > 0:
        return None
    return {frozenset(c.facets): c.variance / residual for c in vc.components if c.kind == "random"}


def _replace(result: VarianceComponents, **changes) -> VarianceComponents:
    from dataclasses import replace

    return replace(result, **changes)


def _with_note(result: VarianceComponents, note: str | None) -> VarianceComponents:
    return result if note is None else _replace(result, notes=(note, *result.notes))
