"""TEE C.7 heteroscedastic extension: components per stratum of a fixed facet.

Greedy and sampled decoding can have different cell-level and replicate
variance. TEE replaces the common sigma2_epsilon and sigma2_rho by
sigma2_epsilon,h and sigma2_rho,h and estimates them by fitting the model
separately within each level h of the fixed facet (per-stratum REML, bias under
0.3 % in TEE's E.1). Within a stratum the stratum facet has one level, so every
term that contains it merges into the same term without it (item:temperature
into item); the per-stratum fits say so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..components import VarianceComponents
from ..data import Judgments, as_judgments, require_columns
from ..design import Design, Facet
from ..errors import DesignError
from ..results import Result
from ..vocabulary import RESIDUAL
from .model import MixedModel, Term


@dataclass(frozen=True)
class StratifiedComponents(Result):
    """One fit per level of ``stratum``, beside the pooled (homoscedastic) fit."""

    stratum: str
    fits: dict[str, VarianceComponents]
    pooled: VarianceComponents
    notes: tuple[str, ...] = ()

    def to_frame(self) -> pd.DataFrame:
        """Long form: one row per (stratum level, component), the pooled fit as level '(pooled)'."""
        frames = []
        for level, fit in [("(pooled)", self.pooled), *self.fits.items()]:
            frame = fit.to_frame()
            frame.insert(0, self.stratum, level)
            frame.insert(1, "method", fit.method)
            frames.append(frame)
        return pd.concat(frames, ignore_index=True)

    def to_dict(self) -> dict[str, Any]:
        return {
            "stratum": self.stratum,
            "pooled": self.pooled.to_dict(),
            "strata": {level: fit.to_dict() for level, fit in self.fits.items()},
            "notes": list(self.notes),
        }

    def spread(self, component: str = RESIDUAL) -> float:
        """Largest over smallest per-stratum estimate of a component (1 = homoscedastic)."""
        values = [fit[component].variance for fit in self.fits.values() if component in fit]
        low = min(values)
        return math.inf if low <= 0 else max(values) / low


def estimate_by_stratum(data, stratum: str, design: Design | None = None, *, formula: str | None = None,
                        method: str = "auto", pooled: VarianceComponents | None = None,
                        **options) -> StratifiedComponents:
    """Fit the model within each level of ``stratum`` (TEE C.7), and once pooled (``pooled``: the pooled fit
    already made with the same model and options, e.g. :meth:`evalgauge.api.Fit.strata`'s own).

    ``options`` are passed to :func:`evalgauge.estimate.estimate_components`
    (``drop_missing``, ``n_boot``, ``level``, ``seed``) or, without a design or
    formula, to :func:`evalgauge.design.infer_design`.
    """
    from . import estimate_components
    from .spec import resolve_model

    judgments = as_judgments(data)
    require_columns(judgments, [stratum], what="stratum column")
    fit_options = {k: options.pop(k) for k in ("drop_missing", "n_boot", "level", "seed") if k in options}
    notes: list[str] = []
    spec = resolve_model(judgments, design, formula, **options)
    if pooled is None:
        pooled = estimate_components(judgments, spec, method=method, **fit_options)
    if spec.formula is not None:
        within_formula = _without_stratum(spec.mixed, stratum, notes).formula()
        within_design = None
    else:
        within_design = _design_without(spec.design, stratum, notes)
        within_formula = None
    fits = {}
    for level, rows in _levels(judgments, stratum):
        subset = judgments.subset(np.flatnonzero(rows), f"{judgments.source} [{stratum} = {level}]")
        if within_formula is not None:
            fits[level] = estimate_components(subset, method=method, formula=within_formula, **fit_options)
        else:
            fits[level] = estimate_components(subset, within_design, method=method, **fit_options)
    if len(fits) < 2:
        raise DesignError(f"'{stratum}' has one level, so there is nothing to stratify; pick a facet with several.")
    return StratifiedComponents(stratum, fits, pooled, tuple(notes))


def _levels(judgments: Judgments, stratum: str):
    column = judgments.frame[stratum]
    if column.isna().any():
        rows = np.flatnonzero(column.isna().to_numpy())
        raise DesignError(f"{judgments.source}: the stratum column '{stratum}' is empty on {rows.size} row(s), "
                          f"first {judgments.rows(rows[:1])}; fill it in or remove those rows.")
    codes, uniques = pd.factorize(column, sort=True)
    for k, level in enumerate(uniques):
        yield str(level), codes == k


def _design_without(design: Design, stratum: str, notes: list[str]) -> Design:
    facet = design.facet(stratum)
    children = [f.name for f in design.facets if f.parent == stratum]
    if children:
        raise DesignError(f"'{', '.join(children)}' is nested in '{stratum}', so '{stratum}' cannot be a stratum.")
    if facet.role != "fixed":
        notes.append(f"'{stratum}' is a {facet.role} facet; TEE C.7 stratifies by a fixed facet.")
    facets = tuple(Facet(f.name, f.role, f.parent) for f in design.facets if f.name != stratum)
    merged = [e.name for e in design.model_effects() if stratum in e.facets and len(e.facets) > 1]
    if merged:
        notes.append(f"within a level of '{stratum}', {', '.join(merged)} merge into the same terms without "
                     f"'{stratum}'; the per-stratum residual and cell terms are sigma2_rho,h and sigma2_epsilon,h.")
    terms = None
    if design.terms is not None:
        terms = tuple(t for t in design.terms if stratum not in design.effect_named(t).facets)
    return Design(facets, design.score, design.replicate, terms, design.max_order)


def _without_stratum(model: MixedModel, stratum: str, notes: list[str]) -> MixedModel:
    fixed = tuple(t for t in model.fixed if stratum not in t.columns)
    random: list[Term] = []
    merged = []
    for term in model.random:
        if stratum not in term.columns:
            if term not in random:
                random.append(term)
            continue
        reduced = Term(tuple(c for c in term.columns if c != stratum))
        merged.append(term.name)
        if reduced.columns and reduced not in random and reduced not in model.random:
            random.append(reduced)
    if merged:
        notes.append(f"within a level of '{stratum}', {', '.join(merged)} become the same terms without "
                     f"'{stratum}'.")
    if not random:
        raise DesignError(f"without '{stratum}' the model has no random term left.")
    nesting = tuple((c, p) for c, p in model.nesting if stratum not in (c, p))
    return MixedModel(model.response, fixed, tuple(random), model.intercept, nesting)
