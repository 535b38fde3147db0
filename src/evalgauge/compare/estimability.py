"""What a comparison cannot say: pairs confounded with another column, estimates on too few degrees of
freedom, components the data cannot measure, and the values a user states for them instead."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from .. import vocabulary
from ..components import VarianceComponents
from ..errors import DesignError

MIN_DF = vocabulary.MIN_DF


def confounded_pairs(frame: pd.DataFrame, obj: str, systems: list[str],
                     exclude: set[str]) -> tuple[np.ndarray, list[str]]:
    """Pairs of systems whose difference includes another column's: for some column (a judge, a baseline, an
    annotator, a task, a source file, the items), the two systems share no level at all, so no cell of one
    can be set beside a cell of the other. Returns the symmetric p x p mask and what to say, first.

    A column with one level says nothing, and one with more levels than half the rows is an identifier
    (a response id, a timestamp), not a condition of the judgments, except the item facet. Nor is a second name
    of the systems (:func:`renames`: AlpacaEval's ``results_dir_model`` beside ``generator_2_model``)."""
    p = len(systems)
    mask = np.zeros((p, p), dtype=bool)
    owner = frame[obj].astype(str)
    why: dict[tuple[int, int], list[str]] = {}
    levels_of: dict[str, pd.Series] = {}
    for col in frame.columns:
        if col == obj or col in exclude or col in vocabulary.REPLICATE_COLUMNS:
            continue
        k = frame[col].nunique(dropna=True)
        if k < 2 or (k > len(frame) // 2 and vocabulary.role_of(col) != "item"):
            continue
        if renames(frame[col], owner):
            continue
        sets = frame[col].astype(str).groupby(owner, sort=False).agg(lambda v: frozenset(v.unique()))
        levels_of[col] = sets
        for a in range(p):
            for b in range(a + 1, p):
                if sets[systems[a]].isdisjoint(sets[systems[b]]):
                    mask[a, b] = mask[b, a] = True
                    why.setdefault((a, b), []).append(col)
    if not why:
        return mask, []
    cols = sorted({c for v in why.values() for c in v})
    shown = "; ".join(f"{systems[a]} vs {systems[b]}: {', '.join(v)}" for (a, b), v in list(why.items())[:5])
    own = {c: ", ".join(f"{s}: {'/'.join(sorted(levels_of[c][s]))[:60]}" for s in systems[:6]) for c in cols}
    keep = cols[0]
    first = sorted(levels_of[keep][systems[0]])[0]
    what = (f"{len(why)} of {p * (p - 1) // 2} pairs of {obj}s are not comparable: the two were scored under no "
            f"common level of {', '.join(cols)} ({shown}), so their difference includes that facet's difference "
            f"and is not reported ({'; '.join(f'{c} by {obj}: {own[c]}' for c in cols)}). Compare {obj}s scored "
            f"under the same conditions: keep one level (e.g. --keep {keep}={first}), or import files that share "
            "their judge and baseline.")
    return mask, [what]


def renames(column: pd.Series, owner: pd.Series) -> bool:
    """Whether ``column`` is another name for the systems in ``owner``: one level per system, one system per
    level, and the level is the system's own name for at least half of them (a folder named after the model).
    A one-to-one column with other names (each system with its own judge or baseline) stays a condition."""
    pairs = pd.DataFrame({"owner": owner.to_numpy(), "level": column.astype(str).to_numpy()}).drop_duplicates()
    if pairs["owner"].duplicated().any() or pairs["level"].duplicated().any():
        return False
    return bool((pairs["owner"] == pairs["level"]).mean() >= 0.5)


def not_estimable(vc: VarianceComponents, coef: np.ndarray, what: str, df: float, obj: str) -> str:
    """Why an estimate has no interval at this design: the components that carry its error, how few levels
    of which facets estimate them, and the cheapest change (more levels of the scarcest facet among them)."""
    sigma2 = np.clip(vc.values, 0.0, None)
    part = coef * sigma2
    total = float(part.sum())
    order = np.argsort(-part)
    top = [k for k in order[:3]
           if total > 0 and part[k] > 0.05 * total and vc.components[k].kind != vocabulary.RESIDUAL]
    carriers = [vc.components[k] for k in top]
    if not carriers:
        return (f"{what}: not estimable at this design ({df:.2g} Satterthwaite df): its error is too poorly "
                "estimated; more replicates or more levels of every facet would help.")
    said = ", ".join(f"{vc.components[k].name} ({100 * part[k] / total:.0f}%, over "
                     + " x ".join(f"{vc.levels.get(f, '?')} {f}" for f in vc.components[k].facets if f != obj)
                     + ")" for k in top)
    facets = [f for c in carriers for f in c.facets if f != obj and f in vc.levels and f not in vc.fixed]
    scarce = min(facets, key=lambda f: vc.levels[f]) if facets else None
    change = (f"more {scarce} levels than {vc.levels[scarce]} (each adds degrees of freedom to "
              f"{', '.join(c.name for c in carriers if scarce in c.facets)})") if scarce else "more levels"
    return (f"{what}: not estimable at this design ({df:.2g} Satterthwaite df, below {MIN_DF:g}): its error rests "
            f"on {said}. The cheapest change that makes it estimable: {change}.")


def unmeasured(vc: VarianceComponents, columns) -> list[str]:
    """What the intervals leave out because the data cannot measure it: with one judge (or one prompt
    variant) its interaction with the systems is part of every system's score and invisible."""
    out = []
    for role, what in (("judge", "judge"), ("variant", "prompt variant")):
        col = vocabulary.facet_with_role(role, columns, exclude=(vc.object,))
        if col is not None and col in vc.levels:
            continue
        term = f"{vc.object}:{col or role}"
        if term in vc.names:  # a value was assumed for it
            continue
        out.append(f"one {what} only{f' ({col})' if col else ''}: its variance ({term}) cannot be measured, "
                   f"and these intervals leave it out. Measure it with a second {what} on a pilot (evalgauge "
                   f"run), or state a value with `assume` {term}=VALUE.")
    return out


def with_assumed(vc: VarianceComponents, assumed: dict[str, float]) -> VarianceComponents:
    """Components with stated values for terms the data cannot measure (one judge: ``{"system:judge": 0.01}``).

    A facet the data do not have enters with one level, so its variance adds to every interval as a
    prior value would; the result says so in its notes.
    """
    from ..components import Component

    comps = list(vc.components)
    levels = dict(vc.levels)
    cov = vc.covariance
    for name, value in assumed.items():
        if value < 0 or not math.isfinite(value):
            raise DesignError(f"an assumed variance must be a non-negative number, not {value} ({name}).")
        facets = tuple(name.split(":"))
        if name in vc.names:
            k = vc.names.index(name)
            comps[k] = replace(comps[k], variance=value, se=math.nan)
            if cov is not None:  # a stated value is known: no sampling variance
                cov = cov.copy()
                cov[k, :] = cov[:, k] = np.nan
            continue
        for f in facets:
            levels.setdefault(f, 1)
        at = len(comps) - 1  # before the residual
        comps.insert(at, Component(name, facets, value, math.nan, math.nan, "random"))
        if cov is not None:
            cov = np.insert(np.insert(cov, at, np.nan, axis=0), at, np.nan, axis=1)
    note = "assumed (not estimated): " + ", ".join(f"{k} = {v:g}" for k, v in assumed.items())
    return replace(vc, components=tuple(comps), levels=levels, notes=(*vc.notes, note), ems=None, reml=None,
                   covariance=cov)
