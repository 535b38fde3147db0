"""The covariance of the system means under the fitted random-effects model (the comparison's first step).

    Cov(ybar_s, ybar_t) = sum over random terms T of sigma2_T * sum_l m_sl m_tl / (n_s n_t)   (T without s)
    Var(ybar_s)        += sum over terms T with s of sigma2_T * sum_l m_sl^2 / n_s^2,

with m_sl the number of s's judgments at level l of term T.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import vocabulary
from ..components import VarianceComponents


def term_levels(frame: pd.DataFrame, facets: tuple[str, ...]) -> np.ndarray:
    if not facets:
        return np.zeros(len(frame), dtype=np.int64)
    return frame.groupby(list(facets), sort=False, observed=True).ngroup().to_numpy()


def conditioned_on_items(comp, vc: VarianceComponents, obj: str) -> bool:
    """Under the finite estimand, whether a term is fixed with the items: every facet of it but the object is
    the item facet or one it nests in (item, category, system:item), so it is part of each system's score on
    these items, not error (Brennan 2001 sec. 4.4, the items fixed; TEE C.2)."""
    if vc.estimand != "finite" or comp.kind == vocabulary.RESIDUAL or vc.item_facet is None:
        return False
    from ..dstudy import universe_facets

    others = set(comp.facets) - {obj}
    return bool(others) and others <= universe_facets(vc, vc.item_facet)


def mean_covariance(frame: pd.DataFrame, vc: VarianceComponents, obj: str) -> tuple[np.ndarray, list[str],
                                                                                   np.ndarray, np.ndarray]:
    """(A, systems, means, counts): ``A[t]`` (terms x S x S) so that Cov(system means) = sum_t sigma2_t A[t].

    Terms made only of fixed facets have no sampling variance (zero matrices); the object's own
    component is the target, not error (zero too); under the finite estimand (TEE C.2: the benchmark's own items)
    so is every term whose other facets are the items and their parents (:func:`conditioned_on_items`).
    """
    codes, systems = pd.factorize(frame[obj].astype(str), sort=False)
    y = frame["__y"].to_numpy(dtype=float)
    n_s = np.bincount(codes, minlength=len(systems)).astype(float)
    means = np.bincount(codes, weights=y, minlength=len(systems)) / n_s
    s = len(systems)
    mats = np.zeros((len(vc.components), s, s))
    for k, comp in enumerate(vc.components):
        if comp.kind == "fixed" or (comp.kind != vocabulary.RESIDUAL and set(comp.facets) == {obj}) \
                or conditioned_on_items(comp, vc, obj):
            continue
        if comp.kind == vocabulary.RESIDUAL:
            mats[k][np.diag_indices(s)] = 1.0 / n_s
            continue
        facets = tuple(f for f in comp.facets if f != obj and f in frame.columns)  # assumed facets: one level
        level = term_levels(frame, facets)
        n_lev = int(level.max()) + 1 if level.size else 0
        m = np.zeros((s, n_lev))
        np.add.at(m, (codes, level), 1.0)
        if obj in comp.facets:  # the system's own effect at each level: only its own mean
            mats[k][np.diag_indices(s)] = (m**2).sum(axis=1) / n_s**2
        else:  # a shared effect (items, judges, item:judge): common to every system scored at that level
            mats[k] = (m @ m.T) / np.outer(n_s, n_s)
    return mats, [str(x) for x in systems], means, n_s
