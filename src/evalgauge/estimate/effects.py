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

from collections.abc import Mapping

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.sparse.linalg import splu

from ..errors import DesignError
from .cells import CellData, fixed_matrix, term_levels
from .model import MixedModel

#: above this many random effects the conditional variances come from sparse solves in blocks of columns
#: rather than one dense inverse (a dense q x q matrix of 4,000 is 128 MB)
DENSE_UP_TO = 4000
COLUMNS = ("term", "level", "mode", "sd")


def conditional_modes(cells: CellData, model: MixedModel, variances: Mapping[str, float],
                      residual: float) -> pd.DataFrame:
    """One row per level of every random term of ``model``: its conditional mode and conditional SD.

    ``variances`` maps each random term's name to its fitted variance (truncated at zero), ``residual`` is the
    within-cell variance sigma2_e; a term left out of ``variances`` (not identifiable in these data) is skipped.
    """
    if not residual > 0:
        raise DesignError("conditional modes need a positive residual variance (a fit with one observation per "
                          "cell and no within-cell spread has none).")
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
    active = g > 0  # a zero variance: its effects are zero, exactly, and leave the equations
    w = cells.count / residual
    za = z[:, active]
    zw = za.T.multiply(w)
    c_uu = (zw @ za + sp.diags(1.0 / g[active])).tocsc()
    c_ux = zw @ x
    c_xx = (x.T * w) @ x
    rhs_u = zw @ cells.mean
    rhs_x = (x.T * w) @ cells.mean
    lu = splu(c_uu)
    # the fixed effects by the Schur complement of the random block, then the modes at that beta
    s = c_xx - c_ux.T @ lu.solve(np.asarray(c_ux))
    beta = np.linalg.solve(s, rhs_x - c_ux.T @ lu.solve(rhs_u)) if x.shape[1] else np.zeros(0)
    u = np.zeros(g.size)
    u[active] = lu.solve(rhs_u - c_ux @ beta)
    sd = np.zeros(g.size)
    sd[active] = np.sqrt(np.maximum(_inverse_diagonal(lu, int(active.sum())), 0.0))
    starts = np.cumsum([0, *sizes])
    frames = [pd.DataFrame({"term": name, "level": lab, "mode": u[a:b], "sd": sd[a:b]})
              for name, lab, a, b in zip(names, labels, starts[:-1], starts[1:], strict=True)]
    return pd.concat(frames, ignore_index=True)


def _level_labels(cells: CellData, columns: tuple[str, ...], codes: np.ndarray, q: int) -> list[str]:
    """Each level's label as lme4 writes it: the columns' labels joined with ':'."""
    first = np.empty(q, dtype=np.int64)
    first[codes[::-1]] = np.arange(codes.size)[::-1]
    parts = [cells.labels[col][cells.codes[col][first]].astype(str) for col in columns]
    out = parts[0]
    for part in parts[1:]:
        out = np.char.add(np.char.add(out, ":"), part)
    return list(out)


def _inverse_diagonal(lu, q: int) -> np.ndarray:
    """diag(C^-1) of the factorised random block: one dense inverse when small, else solves in column blocks."""
    if q <= DENSE_UP_TO:
        return np.diag(lu.solve(np.eye(q)))
    out = np.empty(q)
    step = 512
    for start in range(0, q, step):
        stop = min(start + step, q)
        rhs = np.zeros((q, stop - start))
        rhs[np.arange(start, stop), np.arange(stop - start)] = 1.0
        out[start:stop] = lu.solve(rhs)[np.arange(start, stop), np.arange(stop - start)]
    return out
