"""The systems' estimates adjusted for who scored them and on what: GLS with the system as a fixed effect.

emmeans' estimated marginal means for lme4, with lmerTest's Satterthwaite df or pbkrtest's Kenward-Roger
covariance and df. Used where the systems were not all scored on the same cells equally often
(:func:`balanced`); on a balanced design the raw means are these estimates exactly.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from .. import vocabulary
from ..components import VarianceComponents
from ..errors import DesignError
from .covariance import term_levels


@dataclass(frozen=True)
class GlsEstimates:
    """The systems' estimated marginal means from the fit with the system as a fixed effect (emmeans' for lme4):
    ``estimates`` = L beta-hat, ``cov`` = L C L' with C = (X'V^-1X)^-1, and what Satterthwaite's df of any
    contrast w'L beta need (the variance parameters' covariance ``varpar_cov``, C's Jacobian ``jacobian``)."""

    estimates: np.ndarray
    cov: np.ndarray
    rows: np.ndarray  # L: systems x fixed-effect columns
    beta_cov: np.ndarray
    varpar_cov: np.ndarray | None = None
    jacobian: np.ndarray | None = None
    kenward_roger: Any = None  # evalgauge.inference.kenward_roger.KenwardRoger when its df were asked for

    def df(self, weights: np.ndarray) -> np.ndarray:
        """Satterthwaite's df of the contrasts ``weights @ estimates`` (one per row of ``weights``), as lmerTest
        computes them (Kuznetsova et al. 2017, eq. 7): 2 (l C l')^2 / (g' A g), g_j = l J_j l', l = w L; or
        Kenward-Roger's when the estimates were made with them."""
        lrows = np.atleast_2d(weights) @ self.rows
        if self.kenward_roger is not None:
            return self.kenward_roger.df(lrows)
        var = np.einsum("kp,pq,kq->k", lrows, self.beta_cov, lrows)
        grad = np.einsum("kp,jpq,kq->kj", lrows, self.jacobian, lrows)
        denom = np.einsum("kj,jl,kl->k", grad, self.varpar_cov, grad)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(denom > 0, 2.0 * var**2 / denom, math.inf)


def adjusted_estimates(frame: pd.DataFrame, design, obj: str, systems: list[str],
                       ddf: str = "satterthwaite") -> GlsEstimates:
    """GLS estimates of the systems adjusted for who scored them and on what, as lme4 + emmeans give them.

    The model is refitted by REML with the object of measurement as a fixed effect (every other facet as
    in ``design``; its interactions with the random facets stay random): beta-hat = (X'V^-1X)^-1 X'V^-1 y,
    so a system scored only by a lenient judge is not favoured. Each system's estimate is its estimated
    marginal mean (the intercept plus its effect, averaged with equal weights over the levels of any other
    fixed facet, emmeans' reference grid).
    """
    from ..design import Design, Facet
    from ..estimate.model import model_from_design
    from ..estimate.reml import fit_reml

    facets = tuple(Facet(f.name, "fixed" if f.name == obj else f.role, f.parent) for f in design.facets)
    fixed_design = Design(facets, score="__y", replicate=design.replicate, terms=design.terms,
                          max_order=design.max_order)
    fixed = tuple(f.name for f in facets if f.role == "fixed")
    model = model_from_design(fixed_design)
    # started at theta = 1, not at the fit with the system random: its terms are not these, and from there the
    # optimiser took twice the evaluations on the real SummEval file
    fit = fit_reml(frame, model, fixed_facets=fixed, derivatives=ddf == "satterthwaite")
    if not fit.reml.converged:
        raise DesignError(f"the fit with the {obj} as a fixed effect did not converge ({fit.reml.message})")
    names = list(fit.reml["beta"])
    beta = np.array(list(fit.reml["beta"].values()))
    rows = _reference_grid_rows(frame, obj, systems, [f for f in fixed if f != obj], names)
    if ddf == "kenward-roger":
        kr = _kenward_roger(frame, fit, names, fixed)
        return GlsEstimates(rows @ beta, rows @ kr.phi_adjusted @ rows.T, rows, kr.phi_adjusted, kenward_roger=kr)
    bcov = np.asarray(fit.reml.beta_cov)
    return GlsEstimates(rows @ beta, rows @ bcov @ rows.T, rows, bcov, np.asarray(fit.reml.varpar_cov),
                        np.asarray(fit.reml.beta_cov_jacobian))


def _kenward_roger(frame: pd.DataFrame, fit: VarianceComponents, names: list[str], fixed: tuple[str, ...]):
    """Kenward-Roger's quantities at the REML fit, from the judgments' rows (dense, as pbkrtest)."""
    from ..inference.kenward_roger import kenward_roger

    levels = {c: frame[c].astype(str) for c in fixed}
    parts = []
    for name in names:
        col = np.ones(len(frame))
        if name != "(Intercept)":
            for part in name.split(":"):
                facet = next(c for c in fixed if part.startswith(c) and part[len(c):] in set(levels[c]))
                col = col * (levels[facet] == part[len(facet):]).to_numpy()
        parts.append(col)
    x = np.column_stack(parts)
    random = [c for c in fit.components if c.kind == "random"]  # the terms fitted (a confounded one is not)
    levels_of_terms = [term_levels(frame, tuple(c.facets)) for c in random]
    sigma2 = np.array([c.variance for c in random] + [fit.sigma2(vocabulary.RESIDUAL)])
    return kenward_roger(x, levels_of_terms, np.clip(sigma2, 0.0, None))


def _reference_grid_rows(frame: pd.DataFrame, obj: str, systems: list[str], others: list[str],
                         names: list[str]) -> np.ndarray:
    """L (systems x columns): each system's row of the treatment-coded X averaged over the grid of the other
    fixed facets' levels (emmeans' equal weights). A column named ``col1lev1:col2lev2`` is 1 at a grid point
    that has every one of those levels."""
    grids = list(itertools.product(*[sorted(frame[c].astype(str).unique()) for c in others])) or [()]
    out = np.zeros((len(systems), len(names)))
    for k, s in enumerate(systems):
        for point in grids:
            present = {f"{obj}{s}", *(f"{c}{v}" for c, v in zip(others, point, strict=True))}
            out[k] += [1.0 if n == "(Intercept)" or set(n.split(":")) <= present else 0.0 for n in names]
    return out / len(grids)


def balanced(frame: pd.DataFrame, obj: str, facets: list[str]) -> bool:
    """Whether every system was scored on the same cells equally often: then the raw means are the GLS estimates
    exactly (the system is orthogonal to every other effect) and no refit is needed. Any empty cell or unequal
    count (one missing score among thousands, or a judge that never scored a system) gets the GLS estimates."""
    facets = [f for f in facets if f in frame.columns]
    if not facets:
        return frame.groupby(obj, observed=True).size().nunique() == 1
    counts = frame.groupby([obj, *facets], observed=True).size().unstack(obj)
    values = counts.to_numpy()
    return bool(not np.isnan(values).any() and np.all(values == values.flat[0]))
