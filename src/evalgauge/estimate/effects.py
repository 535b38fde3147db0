"""Conditional modes of the random effects (BLUPs) with their conditional standard deviations (TEE C.6), as lme4's
``ranef(fit, condVar = TRUE)`` gives them: which judge is harsh, which prompt variant lenient, which items are
ambiguous, each with how sure the data are of it.

Henderson's mixed-model equations at the cell level (exact: a cell's count and mean carry everything the rows say
about effects constant within the cell), at the fitted variance components::

    [X'WX   X'WZ        ] [beta]   [X'W ybar]
    [Z'WX   Z'WZ + G^-1 ] [ u  ] = [Z'W ybar],   W = diag(n_c / sigma2_e),  G = diag(sigma2_k per level)

whose solution is the GLS estimate of beta and the conditional modes u (Robinson 1991). The conditional variance
of u is lme4's: the inverse of Z'WZ + G^-1 at the estimated beta (``condVar`` holds the fixed effects at their
estimate). A component estimated at zero has modes and standard deviations of zero, as in lme4.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.sparse.linalg import splu

from ..errors import DesignError
from .cells import CellData, cell_data, fixed_matrix, term_levels
from .model import MixedModel

#: above this many random effects the conditional variances come from sparse solves in blocks of columns
#: rather than one dense inverse (a dense q x q matrix of 4,000 is 128 MB)
DENSE_UP_TO = 4000
COLUMNS = ("term", "level", "mode", "sd")


@dataclass(frozen=True)
class ConditionalFit:
    """The mixed-model equations' solution: ``effects`` (term, level, mode, sd), ``beta`` (the GLS fixed effects)
    and ``fitted`` (each cell's fitted mean, X beta + Z u: beside the cell means, the residuals of TEE C.6)."""

    effects: pd.DataFrame
    beta: np.ndarray
    fitted: np.ndarray


#: a variance below this share of the fit's total is rounding (a fit of identical scores leaves 1e-32): as 0
NEGLIGIBLE = 1e-12


def _rounding(residual: float, variances) -> float:
    """The size below which a variance of this fit is rounding: :data:`NEGLIGIBLE` of its total."""
    return NEGLIGIBLE * (residual + sum(max(float(v), 0.0) for v in variances))


def has_residual(residual: float, variances) -> bool:
    """Whether the residual variance is more than rounding of the fit's total (its inverse weighs the cells)."""
    return residual > _rounding(residual, variances)


def conditional_fit(cells: CellData, model: MixedModel, variances: Mapping[str, float],
                    residual: float, sd_of: Iterable[str] | None = None) -> ConditionalFit:
    """One row per level of every random term of ``model``: its conditional mode and conditional SD.

    ``variances`` maps each random term's name to its fitted variance (truncated at zero), ``residual`` is the
    within-cell variance sigma2_e; a term left out of ``variances`` (not identifiable in these data) is skipped.
    ``sd_of`` names the terms whose conditional SDs are wanted (default: all; the others' are NaN): a few levels'
    SDs take a few solves, every level's a solve per level.
    """
    if not has_residual(residual, variances.values()):
        raise DesignError("conditional modes need a positive residual variance (a fit with one observation per "
                          "cell and no within-cell spread has none).")
    tiny = _rounding(residual, variances.values())
    x, _, _ = fixed_matrix(cells, model)
    blocks, names, labels, sigma2 = [], [], [], []
    for term in model.random:
        if term.name not in variances:
            continue
        codes, q = term_levels(cells, term)
        blocks.append(sp.csr_matrix((np.ones(cells.n_cells), (np.arange(cells.n_cells), codes)),
                                    shape=(cells.n_cells, q)))
        names.append(term.name)
        labels.append(_level_labels(cells, term.columns, codes, q))
        sigma2.append(max(float(variances[term.name]), 0.0))
    if not blocks:
        raise DesignError("conditional modes: the model has no random term with a fitted variance.")
    z = sp.hstack(blocks, format="csr")
    sizes = [b.shape[1] for b in blocks]
    g = np.repeat(sigma2, sizes)
    active = g > tiny  # a zero variance (or one at rounding level): its effects are zero and leave the equations
    w = cells.count / residual
    za = z[:, active]
    zw = za.T.multiply(w)
    c_uu = (zw @ za + sp.diags(1.0 / g[active])).tocsc()
    c_ux = zw @ x
    c_xx = (x.T * w) @ x
    rhs_u = zw @ cells.mean
    rhs_x = (x.T * w) @ cells.mean
    # C_uu is symmetric positive definite: a minimum-degree ordering of its pattern and diagonal pivots keep
    # the factor sparse (crossed terms, as items x judges on SummEval: 1.2M non-zeros against COLAMD's 41M)
    lu = splu(c_uu, permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0, options={"SymmetricMode": True})
    # the fixed effects by the Schur complement of the random block, then the modes at that beta
    s = c_xx - c_ux.T @ lu.solve(np.asarray(c_ux))
    beta = np.linalg.solve(s, rhs_x - c_ux.T @ lu.solve(rhs_u)) if x.shape[1] else np.zeros(0)
    u = np.zeros(g.size)
    u[active] = lu.solve(rhs_u - c_ux @ beta)
    starts = np.cumsum([0, *sizes])
    wanted = np.ones(g.size, dtype=bool)
    if sd_of is not None:
        chosen = set(sd_of)
        wanted = np.concatenate([np.full(q, name in chosen) for name, q in zip(names, sizes, strict=True)])
    sd = np.where(wanted, 0.0, np.nan)
    columns = np.flatnonzero(wanted[active])  # positions among the active effects
    sd[np.flatnonzero(active)[columns]] = np.sqrt(np.maximum(_inverse_diagonal(lu, int(active.sum()), columns),
                                                             0.0))
    frames = [pd.DataFrame({"term": name, "level": lab, "mode": u[a:b], "sd": sd[a:b]})
              for name, lab, a, b in zip(names, labels, starts[:-1], starts[1:], strict=True)]
    fitted = (x @ beta if x.shape[1] else np.zeros(cells.n_cells)) + z @ u
    return ConditionalFit(pd.concat(frames, ignore_index=True), beta, np.asarray(fitted))


def effects_of(data, model: MixedModel, components, sd_of: Iterable[str] | None = None) -> pd.DataFrame:
    """The conditional modes and SDs (:func:`conditional_fit`'s ``effects``) of a fit: ``data`` the judgments
    it fitted (rows without a score left out, as the fit left them) or their :class:`CellData`, ``components``
    its variance components."""
    return fit_of(data, model, components, sd_of)[0].effects


def fit_of(data, model: MixedModel, components, sd_of: Iterable[str] | None = None):
    """(:func:`conditional_fit`, the :class:`CellData`) of a fit, ``data`` and ``components`` as
    :func:`effects_of`."""
    from ..data import without_empty

    cells = data if isinstance(data, CellData) else cell_data(without_empty(data, model.response)[0], model)
    variances = {c.name: c.variance_truncated for c in components.components if c.kind == "random"}
    return conditional_fit(cells, model, variances, components["residual"].variance, sd_of), cells


def _level_labels(cells: CellData, columns: tuple[str, ...], codes: np.ndarray, q: int) -> list[str]:
    """Each level's label as lme4 writes it: the columns' labels joined with ':'."""
    first = np.empty(q, dtype=np.int64)
    first[codes[::-1]] = np.arange(codes.size)[::-1]
    parts = [cells.labels[col][cells.codes[col][first]].astype(str) for col in columns]
    out = parts[0]
    for part in parts[1:]:
        out = np.char.add(np.char.add(out, ":"), part)
    return list(out)


def _inverse_diagonal(lu, q: int, columns: np.ndarray) -> np.ndarray:
    """diag(C^-1) at ``columns`` of the factorised random block: one dense inverse when every column of a small
    block is wanted, else solves in blocks of columns."""
    if columns.size == q and q <= DENSE_UP_TO:
        return np.diag(lu.solve(np.eye(q)))
    out = np.empty(columns.size)
    step = 512
    for start in range(0, columns.size, step):
        cols = columns[start:start + step]
        rhs = np.zeros((q, cols.size))
        rhs[cols, np.arange(cols.size)] = 1.0
        out[start:start + cols.size] = lu.solve(rhs)[cols, np.arange(cols.size)]
    return out
