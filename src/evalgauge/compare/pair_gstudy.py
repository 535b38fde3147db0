"""Each pair's own G-study of its paired differences, and the naive item bootstrap beside the full interval.

A pair's own G-study does not assume every pair shares one interaction variance (as the pooled fit does):
in closed form on a complete block (:func:`pair_gstudy_block`), by the general fit otherwise.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import special  # not scipy.stats: the same functions, without its second of import

from .. import vocabulary
from ..errors import DesignError


def item_bootstrap(frame: pd.DataFrame, obj: str, item: str, systems: list[str], n_boot: int,
                    rng: np.random.Generator) -> np.ndarray:
    """Bootstrap draws of the system means resampling items only (what a careful author does today)."""
    s_code = pd.Categorical(frame[obj].astype(str), categories=systems).codes
    i_code, _ = pd.factorize(frame[item].astype(str))
    n_items = int(i_code.max()) + 1
    sums = np.zeros((n_items, len(systems)))
    cnts = np.zeros((n_items, len(systems)))
    np.add.at(sums, (i_code, s_code), frame["__y"].to_numpy(dtype=float))
    np.add.at(cnts, (i_code, s_code), 1.0)
    # the resamples' item weights in pieces of at most BOOTSTRAP_CELLS numbers (500,000 items x 2,000
    # resamples at once is 7.45 GiB); the generator draws row after row, so the draws are the same
    out = np.empty((n_boot, len(systems)))
    step = max(1, BOOTSTRAP_CELLS // n_items)
    p = np.full(n_items, 1.0 / n_items)
    for start in range(0, n_boot, step):
        w = rng.multinomial(n_items, p, size=min(step, n_boot - start)).astype(float)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[start:start + len(w)] = (w @ sums) / (w @ cnts)
    return out


#: the most item weights one piece of the item bootstrap holds (8 bytes each: 128 MiB)
BOOTSTRAP_CELLS = 1 << 24


def pair_gstudy_block(cube: np.ndarray, a: int, b: int, level: float) -> dict:
    """The pair's G-study in closed form when every system has every item x judge cell r times.

    d = y_a - y_b on the item x judge x replicate grid; a crossed two-facet random ANOVA gives
    Var(dbar) = (MS_i + MS_j - MS_ij) / (n_i n_j n_r) (the expected mean squares combine exactly to
    sigma2_i/n_i + sigma2_j/n_j + sigma2_ij/(n_i n_j) + sigma2_e/N), with Satterthwaite's df.
    """
    d = cube[a] - cube[b]  # items x judges x replicates
    ni, nj, nr = d.shape
    cell = d.mean(axis=2)
    grand = cell.mean()
    mi, mj = cell.mean(axis=1), cell.mean(axis=0)
    ms_i = nj * nr * np.sum((mi - grand) ** 2) / (ni - 1)
    ms_j = ni * nr * np.sum((mj - grand) ** 2) / (nj - 1) if nj > 1 else 0.0
    resid = cell - mi[:, None] - mj[None, :] + grand
    ms_ij = nr * np.sum(resid**2) / ((ni - 1) * (nj - 1)) if nj > 1 else 0.0
    # with one judge the items carry their interaction with it: Var(dbar) = E[MS_i] / (n_i n_r)
    parts = [(ms_i, ni - 1), (ms_j, nj - 1), (-ms_ij, (ni - 1) * (nj - 1))] if nj > 1 else [(ms_i, ni - 1)]
    var = max(sum(m for m, _ in parts), 0.0) / (ni * nj * nr)
    denom = sum(m**2 / f for m, f in parts if f > 0)
    df = (sum(m for m, _ in parts) ** 2 / denom) if denom > 0 and var > 0 else math.inf
    se = math.sqrt(var)
    q = special.stdtrit(df, 0.5 + level / 2) if math.isfinite(df) and df > 0 else special.ndtri(0.5 + level / 2)
    return {"pair_se": se, "pair_df": df, "pair_low": grand - q * se, "pair_high": grand + q * se,
            "pair_n": int(d.size)}


def block_cube(frame: pd.DataFrame, obj: str, systems: list[str], facets: list[str]) -> np.ndarray | None:
    """systems x items x judges x replicates when the design is a complete block on (at most) two facets."""
    keys = [f for f in facets if f != obj]
    if not 1 <= len(keys) <= 2:
        return None
    s = pd.Categorical(frame[obj].astype(str), categories=systems).codes
    codes = [pd.factorize(frame[k].astype(str))[0] for k in keys]
    sizes = [int(c.max()) + 1 for c in codes]
    cell = np.ravel_multi_index((s, *codes), (len(systems), *sizes))
    count = np.bincount(cell, minlength=len(systems) * int(np.prod(sizes)))
    if count.min() == 0 or count.min() != count.max():
        return None
    nr = int(count[0])
    order = np.argsort(cell, kind="stable")
    y = frame["__y"].to_numpy(dtype=float)[order]
    cube = y.reshape(len(systems), *sizes, nr)
    return cube if len(keys) == 2 else cube[:, :, None, :]


def pair_gstudy(frame: pd.DataFrame, obj: str, a: str, b: str, facets: list[str], level: float) -> dict:
    """The pair's own G-study: components of d = y_a - y_b over their shared cells, and the CI of mean d.

    Does not assume every pair has the same interaction variance (as the pooled fit does).
    """
    from ..design import Design, Facet
    from ..estimate import estimate_components
    from ..inference import theta_interval

    keys = [f for f in facets if f != obj]
    sub = frame[frame[obj].astype(str).isin([a, b])]
    rep = "__rep"
    sub = sub.assign(**{rep: sub.groupby([obj, *keys], observed=True).cumcount() + 1})
    wide = sub.pivot_table(index=[*keys, rep], columns=obj, values="__y", aggfunc="first", observed=True)
    if a not in wide or b not in wide:
        raise DesignError("the two systems share no cells")
    d = (wide[a] - wide[b]).dropna().rename("d").reset_index()
    varying = [f for f in keys if d[f].nunique() > 1]
    if len(d) < 3 or not varying:
        raise DesignError("too few shared cells for a G-study of the differences")
    design = Design(tuple(Facet(f, "random") for f in varying), score="d",
                    replicate=rep if d[rep].nunique() > 1 else None)
    if design.replicate is None:
        d = d.drop(columns=[rep])
    d = d.assign(**{f: d[f].astype(str) for f in varying})
    vc = estimate_components(d, design)
    ti = theta_interval(vc, level=level, sampling_facet=vocabulary.facet_with_role("item", varying) or varying[0])
    return {"pair_se": ti.se, "pair_df": ti.df, "pair_low": ti.low, "pair_high": ti.high, "pair_n": len(d)}


def with_pair_gstudies(frame, vc, pairs, obj, level, facets, which, notes) -> pd.DataFrame:
    facets = facets or [f for f in vc.levels if f != obj]
    systems = sorted(set(pairs["a"]) | set(pairs["b"]))
    cube = block_cube(frame, obj, systems, [f for f in facets if f in frame.columns])
    index = {name: k for k, name in enumerate(systems)}
    rows = []
    for r in pairs.itertuples(index=False):
        if which == "adjacent" and r.adjacent is not True:
            rows.append({})
            continue
        try:
            if cube is not None:
                rows.append(pair_gstudy_block(cube, index[r.a], index[r.b], level))
                continue
            rows.append(pair_gstudy(frame, obj, r.a, r.b, facets, level))
        except Exception as exc:  # a pair whose own G-study cannot be fitted keeps the pooled interval
            rows.append({"pair_note": str(exc)[:160]})
    extra = pd.DataFrame(rows, index=pairs.index)
    for col in ("pair_se", "pair_df", "pair_low", "pair_high"):
        if col not in extra:
            extra[col] = np.nan
    notes.append("pair_* columns: each pair's own G-study of its paired differences "
                 f"({'adjacent pairs' if which == 'adjacent' else 'every pair'}), which does not assume every "
                 "pair shares one interaction variance.")
    return pd.concat([pairs, extra], axis=1)
