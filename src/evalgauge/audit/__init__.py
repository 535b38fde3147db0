"""Audit what others publish: does a leaderboard's order, or a reported improvement, exceed the noise?

A published leaderboard (system, score) or a list of reported improvements (claim, delta), with where known the
items, judges and replicates behind each, is read against variance components: a fit, values given by hand, or
a preset carrying the sizing paper's published components (:mod:`evalgauge.audit.published`). For each claim and each
adjacent pair of the board:

    sigma2_delta = the relative error at that design (sizing eq. 2; TEE eq. 3 for any facets),
    SE(difference) = sqrt(sigma2_delta,a + sigma2_delta,b)   (sqrt(2 sigma2_delta) on one design),
    MDD = z_(1+level)/2 SE                                     (sizing eq. 3),
    P(order inverted) = Phi(-|delta| / SE),

the last being the probability that a rerun at the same design orders the two the other way if the reported
difference were the true one. For the board as a whole, the pairs the simultaneous intervals separate (max-|z|
over every pair, :func:`evalgauge.inference.mvt.simultaneous_critical`) give its separable groups (a compact letter
display) and rank confidence sets (Mogstad et al. 2024): a board whose systems all share one group cannot rank
at all at its design.

A claim reported on another scale is converted by the scales' ranges, delta * (hi - lo)_components /
(hi - lo)_claim, as the sizing paper converts to its 0-5 basis (sec. 5.6); win rates are a different estimand
and are not converted.

This module is pure: components and a table in, an :class:`Audit` out.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from .. import dstudy
from ..components import VarianceComponents
from ..errors import DesignError
from ..results import Result, json_safe

#: the columns a table is read by: a board has system and score, a list of claims has delta
SYSTEM_COLUMNS = ("system", "model", "name")
DESIGN_COLUMNS = ("items", "judges", "replicates")
#: draws of the scores' error from which the rank sets' quantiles are read (as compare's default)
RANK_DRAWS = 2000


@dataclass(frozen=True)
class Audit(Result):
    """The verdicts: ``claims`` (one row per claim) or ``board`` and ``pairs`` (adjacent pairs), and sentences."""

    components: str
    level: float
    claims: pd.DataFrame | None
    board: pd.DataFrame | None
    pairs: pd.DataFrame | None
    sentences: tuple[str, ...]
    groups: int | None = None
    critical: float | None = None

    def to_dict(self) -> dict:
        out = {"components": self.components, "level": self.level, "sentences": list(self.sentences)}
        for name in ("claims", "board", "pairs"):
            frame = getattr(self, name)
            if frame is not None:
                out[name] = frame.to_dict(orient="records")
        if self.groups is not None:
            out.update(groups=self.groups, critical_simultaneous=self.critical)
        return json_safe(out)

    def to_frame(self, which: str = "claims") -> pd.DataFrame:
        frame = getattr(self, which, None)
        if frame is None:
            raise DesignError(f"this audit has no '{which}' table.")
        return frame


def audit(vc: VarianceComponents, table: pd.DataFrame, *, items: float | None = None, judges: float | None = None,
          replicates: float | None = None, scale: tuple[float, float] | None = None,
          components_scale: tuple[float, float] | None = None, level: float = 0.95, seed: int = 0,
          source: str = "the table", components: str = "the components") -> Audit:
    """Audit a leaderboard (columns ``system`` and ``score``) or a list of claims (column ``delta``, and ``claim``)
    against ``vc``. ``items``/``judges``/``replicates`` are the design of rows that do not state theirs (default:
    the components' own); ``scale`` is the table's score scale and ``components_scale`` the components' (the
    presets': 0-5), for rows without ``scale_min``/``scale_max`` columns."""
    if not 0 < level < 1:
        raise DesignError(f"level must lie between 0 and 1, not {level}.")
    if not vc.object:
        raise DesignError(f"{components}: no object of measurement (the systems compared); name it (object).")
    columns = {c.lower(): c for c in table.columns}
    system_col = next((columns[c] for c in SYSTEM_COLUMNS if c in columns), None)
    if "delta" in columns:
        kind = "claims"
    elif system_col is not None and "score" in columns:
        kind = "board"
    else:
        raise DesignError(f"{source}: a leaderboard needs the columns 'system' and 'score'; a list of claims the "
                          f"column 'delta' (and 'claim'); found {', '.join(map(str, table.columns)) or 'none'}.")
    frame = table.rename(columns={v: k for k, v in columns.items()})
    value_col = "delta" if kind == "claims" else "score"
    values = _numbers(frame, value_col, source)
    design = _designs(frame, vc, source, items, judges, replicates)
    factor, offset = _conversion(frame, source, scale, components_scale)
    published = values
    delta2 = np.array([_sigma2_delta(vc, *row) for row in design])
    z = stats.norm.ppf(0.5 + level / 2)
    if kind == "claims":
        labels = frame["claim"].astype(str) if "claim" in frame else pd.Series([f"row {k + 1}" for k in
                                                                                 range(len(frame))])
        return _audit_claims(labels, published, values * factor, delta2, design, z, level, components)
    systems = frame[system_col.lower()].astype(str)  # the board's own name column: system, model or name
    dup = systems[systems.duplicated()]
    if len(dup):
        raise DesignError(f"{source}: system '{dup.iloc[0]}' appears twice (row {dup.index[0] + 1}); a leaderboard "
                          "has one row per system.")
    if len(systems) < 2:
        raise DesignError(f"{source}: a leaderboard needs at least two systems.")
    return _audit_board(systems.to_numpy(), published, values * factor + offset, delta2, design, z, level, seed,
                        components)


def _numbers(frame: pd.DataFrame, column: str, source: str) -> np.ndarray:
    raw = frame[column]
    out = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=float)
    bad = np.flatnonzero(~np.isfinite(out))
    if bad.size:
        k = int(bad[0])
        raise DesignError(f"{source}: row {k + 1}, column '{column}': '{raw.iloc[k]}' is not a number "
                          f"({bad.size} such row(s)); give every row a number.")
    return out


def _designs(frame: pd.DataFrame, vc: VarianceComponents, source: str, items, judges, replicates) -> list[tuple]:
    """(items, judges, replicates) for every row: its own columns, else the defaults, else the components'."""
    item, judge = vc.role("item"), vc.role("judge")
    defaults = {"items": items if items is not None else (vc.levels.get(item) if item else None),
                "judges": judges if judges is not None else (vc.levels.get(judge) if judge else None),
                "replicates": replicates if replicates is not None else vc.replicates}
    cols = {}
    for name in DESIGN_COLUMNS:
        if name in frame:
            given = pd.to_numeric(frame[name], errors="coerce").to_numpy(dtype=float)
            empty = frame[name].isna().to_numpy()
            if np.any(~empty & ~(given >= 1)):
                k = int(np.flatnonzero(~empty & ~(given >= 1))[0])
                raise DesignError(f"{source}: row {k + 1}, column '{name}': '{frame[name].iloc[k]}' is not a count "
                                  "of at least 1.")
            cols[name] = np.where(empty, np.nan, given)
    out = []
    for k in range(len(frame)):
        row = []
        for name in DESIGN_COLUMNS:
            value = cols[name][k] if name in cols and np.isfinite(cols[name][k]) else defaults[name]
            row.append(None if value is None else float(value))
        out.append((item, judge, *row))
    return out


def _sigma2_delta(vc: VarianceComponents, item, judge, n_items, n_judges, n_reps) -> float:
    counts = {}
    if item is not None and n_items is not None:
        counts[item] = n_items
    if judge is not None and n_judges is not None:
        counts[judge] = n_judges
    return dstudy.project(vc, counts, n_reps).sigma2_delta


def _conversion(frame: pd.DataFrame, source: str, scale, components_scale) -> tuple[np.ndarray, np.ndarray]:
    """(factor, offset) taking each row's score to the components' scale, score * factor + offset, by the scales'
    ranges (a difference takes the factor alone); ones and zeros where no scale is stated."""
    n = len(frame)
    lo = np.full(n, np.nan) if scale is None else np.full(n, float(scale[0]))
    hi = np.full(n, np.nan) if scale is None else np.full(n, float(scale[1]))
    for name, target in (("scale_min", lo), ("scale_max", hi)):
        if name in frame:
            given = pd.to_numeric(frame[name], errors="coerce").to_numpy(dtype=float)
            target[:] = np.where(np.isfinite(given), given, target)
    stated = np.isfinite(lo) & np.isfinite(hi)
    if not stated.any():
        return np.ones(n), np.zeros(n)
    if components_scale is None:
        raise DesignError(f"{source}: the scores are on a stated scale but the components' scale is unknown; give "
                          "the components' scale too (--components-scale LO-HI), or leave the scale out if they "
                          "share it.")
    if np.any(stated & ~(hi > lo)):
        k = int(np.flatnonzero(stated & ~(hi > lo))[0])
        raise DesignError(f"{source}: row {k + 1}: the scale's maximum must exceed its minimum.")
    factor = np.where(stated, (components_scale[1] - components_scale[0]) / np.where(stated, hi - lo, 1.0), 1.0)
    return factor, np.where(stated, components_scale[0] - np.where(stated, lo, 0.0) * factor, 0.0)


def _design_text(design: tuple) -> str:
    _, _, n_i, n_j, n_r = design
    parts = []
    for n, word in ((n_i, "item"), (n_j, "judge"), (n_r, "run")):
        if n is not None:
            parts.append(f"{n:,.0f} {word}{'' if n == 1 else 's'}")
    return " x ".join(parts)


def _audit_claims(labels, published, values, delta2, design, z, level, components) -> Audit:
    se = np.sqrt(2.0 * delta2)
    mdd = z * se
    with np.errstate(divide="ignore"):
        p_inv = stats.norm.sf(np.abs(values) / se)
    below = np.abs(values) < mdd
    frame = pd.DataFrame({"claim": labels.to_numpy(), "published": published, "delta": values, "se": se,
                          "mdd": mdd, "exceeds_mdd": ~below, "p_inverted": p_inv,
                          "design": [_design_text(d) for d in design]})
    verdicts = [f"{c}: {d:.3g} {'exceeds' if not b else 'is below'} the MDD {m:.3g} at {t}; P(order inverted) "
                f"{100 * p:.0f}%" for c, d, m, b, t, p in zip(frame["claim"], values, mdd, below, frame["design"],
                                                             p_inv, strict=True)]
    frame["verdict"] = verdicts
    median = float(np.median(np.abs(values)))
    head = (f"{int(below.sum())} of {len(values)} claims fall below the minimum detectable difference at their "
            f"design ({100 * level:g}%); the median claim, {median:.3g}, ")
    med_mdd = float(np.median(mdd))
    head += (f"is below the median MDD {med_mdd:.3g}." if median < med_mdd else
             f"exceeds the median MDD {med_mdd:.3g}.")
    return Audit(components, level, frame, None, None, (head,))


def _audit_board(systems, published, scores, delta2, design, z, level, seed, components) -> Audit:
    from ..inference.multiplicity import letters, rank_sets
    from ..inference.mvt import covariance_root, error_draws, simultaneous_critical

    order = np.argsort(-scores, kind="stable")
    systems, published, scores, delta2 = systems[order], published[order], scores[order], delta2[order]
    design = [design[k] for k in order]
    n = len(systems)
    cov = np.diag(delta2)  # what two systems on the same items and judges do not share (the rest cancels)
    pa, pb = np.triu_indices(n, 1)
    se_all = np.sqrt(delta2[pa] + delta2[pb])
    critical = simultaneous_critical(cov, np.column_stack([pa, pb]), math.inf, level, seed=seed).value
    separated = {frozenset((systems[a], systems[b])) for a, b, s in zip(pa, pb, se_all, strict=True)
                 if abs(scores[a] - scores[b]) > critical * s}
    groups = letters(list(systems), separated)
    draws = error_draws(covariance_root(cov), math.inf, RANK_DRAWS, np.random.default_rng(seed))
    lo, hi = rank_sets(scores, cov, draws, level, simultaneous=True)
    board = pd.DataFrame({"system": systems, "published": published, "score": scores, "rank": np.arange(1, n + 1),
                          "rank_low": lo, "rank_high": hi, "group": [groups[s] for s in systems],
                          "se": np.sqrt(delta2), "design": [_design_text(d) for d in design]})
    diff = scores[:-1] - scores[1:]
    se = np.sqrt(delta2[:-1] + delta2[1:])
    mdd = z * se
    p_inv = stats.norm.sf(np.abs(diff) / se)
    pairs = pd.DataFrame({"a": systems[:-1], "b": systems[1:], "delta": diff, "se": se, "mdd": mdd,
                          "exceeds_mdd": np.abs(diff) >= mdd, "p_inverted": p_inv,
                          "separable": [frozenset(pair) in separated for pair in itertools.pairwise(systems)]})
    n_groups = len(set("".join(groups.values())))
    exceeding = int(pairs["exceeds_mdd"].sum())
    sentences = [f"{exceeding} of {n - 1} adjacent pairs exceed the minimum detectable difference at their design "
                 f"({100 * level:g}%)."]
    if not separated:
        sentences.insert(0, f"This board cannot rank at all at its design: no pair of its {n} systems is separable "
                            f"with the {100 * level:g}% simultaneous intervals (one group).")
    else:
        sentences.append(f"{len(separated)} of {len(pa)} pairs are separable with the simultaneous intervals; the "
                         f"systems fall into {n_groups} overlapping groups (letters).")
    return Audit(components, level, None, board, pairs, tuple(sentences), n_groups, float(critical))
