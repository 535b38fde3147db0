"""The D-study: what the estimated components imply for any proposed design.

Pure functions over a :class:`~evalgauge.components.VarianceComponents` result and
facet counts (the total number of levels of each facet in the proposed design,
N' items, V' variants, H temperatures, M judges; replicates R' separately).

Each component sigma2_k enters an error variance divided by the number of
distinct levels of its term in the proposed design, d_k (TEE eq. 3, C.5, C.8;
Brennan 2001 ch. 4): for ``category:item`` that is N' (items determine their
category), for ``item:judge`` N' M, for the residual every facet times R'. A fixed
facet's interaction with random facets, averaged over its L chosen levels, contributes
sigma2 / L like any other (TEE C.1); a term made only of fixed facets is TEE's Tier 2:
a sensitivity index reported beside the error, in no error variance (the estimand is
the mean over the chosen levels, TEE Table 2, C.4). ``condition_on`` drops terms the
estimand conditions on (the finite-benchmark estimand conditions on the items, TEE C.2).

Projections use the estimates truncated at zero. The sizing paper (App. D)
keeps raw ANOVA values in sigma2_delta because they are unbiased, but with
several negative estimates a raw sum can reach zero or below and promise an
MDD of nothing; truncation can only make a projected error larger, never
flatter it, so it is the safer default.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

# scipy.special, not scipy.stats: the quantiles are the same functions, and every command imports this
from scipy.special import ndtr, ndtri, stdtrit

from . import vocabulary
from .components import Component, VarianceComponents
from .errors import DesignError
from .results import Result, json_safe

RESIDUAL = vocabulary.RESIDUAL
Z95 = ndtri(0.975)


# ---------------------------------------------------------------------------
# Divisors
# ---------------------------------------------------------------------------

def observed_counts(vc: VarianceComponents) -> dict[str, float]:
    """The G-study's own counts: total levels of each facet."""
    return {k: float(v) for k, v in vc.levels.items()}


def term_facets(c: Component, vc: VarianceComponents) -> tuple[str, ...]:
    if c.name == RESIDUAL:
        return tuple(vc.levels)
    return c.facets


def _leaf_facets(facets: Iterable[str], nesting: Mapping[str, str]) -> list[str]:
    """Facets of a term that are not the parent of another facet in it (items determine categories)."""
    facets = list(facets)
    parents = {nesting.get(f) for f in facets}
    return [f for f in facets if f not in parents]


def divisor(c: Component, vc: VarianceComponents, counts: Mapping[str, float], replicates: float,
            exclude: Iterable[str] = ()) -> float:
    """d_k: distinct levels of the term under ``counts``, leaving out facets in ``exclude``.

    A parent facet (category) in a term without its child counts as :func:`sampled_levels` says: under the
    ``pooled`` sampling (TEE eq. 3, the default) the N' items drawn from the whole pool each bring their
    category's effect, so sigma2_kappa / N'; under ``categories`` (Brennan's i:c) the C' categories drawn.
    For the residual, replicates multiply in unless the residual is confounded
    with the top interaction (one observation per cell), where more replicates
    cannot be credited, so the divisor conservatively ignores them.
    """
    facets = [f for f in _leaf_facets(term_facets(c, vc), vc.nesting) if f not in set(exclude)]
    d = 1.0
    for f in facets:
        f = sampled_levels(vc, f)
        if f not in counts:
            raise DesignError(f"the D-study needs a count for facet '{f}' (component {c.name}).")
        d *= counts[f]
    if c.name == RESIDUAL and not c.confounded_with:
        d *= replicates
    return d


def sampled_levels(vc: VarianceComponents, facet: str) -> str:
    """The facet whose count divides a term of ``facet``: under ``pooled`` sampling a parent's deepest child
    (items drawn from the whole pool: every item a fresh draw of its category's effect, TEE sec. 3.1 and eq. 3),
    else the facet itself."""
    if vc.sampling != "pooled":
        return facet
    child = next((c for c, p in vc.nesting.items() if p == facet), None)
    while child is not None:
        facet = child
        child = next((c for c, p in vc.nesting.items() if p == facet), None)
    return facet


def parent_facets(vc: VarianceComponents) -> set[str]:
    """The facets other facets are nested in (category for category/item)."""
    return set(vc.nesting.values())


def chosen_facets(vc: VarianceComponents) -> set[str]:
    """The facets whose levels are the study's chosen conditions (TEE Table 2, Tier 2): those declared fixed,
    and under ``strata`` sampling the parents (every category kept as a stratum)."""
    return set(vc.fixed) | (parent_facets(vc) if vc.sampling == "strata" else set())


def fixed_facets(vc: VarianceComponents) -> set[str]:
    """The facets a projection holds at their present levels: the chosen conditions, and under the ``finite``
    estimand the benchmark's items and their parents (TEE C.2: the exact item set is the estimand; Brennan's
    mixed model with the items fixed, so a system x item effect is part of the system's score)."""
    item = vc.item_facet if vc.estimand == "finite" else None
    return chosen_facets(vc) | (universe_facets(vc, item) if item else set())


def is_tier2(c: Component, vc: VarianceComponents) -> bool:
    """Whether a term is made only of fixed facets: a Tier 2 sensitivity index (TEE Table 2) or, under the
    finite estimand, the items' own effects (TEE C.2); in no error either way."""
    if c.name == RESIDUAL or not c.facets:
        return False
    return c.kind == "fixed" or set(c.facets) <= fixed_facets(vc)


def _check_counts(counts: Mapping[str, float], replicates: float) -> None:
    for f, n in counts.items():
        if not n >= 1:
            raise DesignError(f"facet '{f}' needs at least one level in the D-study, not {n}.")
    if not replicates >= 1:
        raise DesignError(f"the D-study needs at least one replicate, not {replicates}.")


def _conditioned(c: Component, vc: VarianceComponents, condition_on: Iterable[str]) -> bool:
    cond = set().union(*(universe_facets(vc, f) for f in condition_on))
    return c.name != RESIDUAL and bool(c.facets) and set(c.facets) <= cond


# ---------------------------------------------------------------------------
# Projections
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Projection(Result):
    """Error variances and coefficients of one proposed design.

    ``var_abs`` is Var(theta-hat) of the grand mean (TEE eq. 3, C.8);
    ``contributions`` its terms sigma2_k / d_k. With an object of measurement:
    ``sigma2_delta`` relative error (sizing eq. 2), ``sigma2_Delta`` absolute
    error, ``erho2`` = sigma2_p / (sigma2_p + sigma2_delta), ``phi`` (dependability),
    ``mdd95`` = z sqrt(2 sigma2_delta) (sizing eq. 3). ``sensitivity`` holds the terms made only of fixed
    facets (TEE Table 2, Tier 2): their sensitivity index (the spread over the chosen levels, TEE C.4) and
    not error: the estimand is the mean over those levels, so they are in no error variance and no share.
    """

    counts: dict[str, float]
    replicates: float
    var_abs: float
    contributions: dict[str, float]
    object: str | None = None
    sigma2_object: float = math.nan
    sigma2_delta: float = math.nan
    sigma2_Delta: float = math.nan
    erho2: float = math.nan
    phi: float = math.nan
    mdd95: float = math.nan
    notes: tuple[str, ...] = field(default=(), compare=False)
    sensitivity: dict[str, float] = field(default_factory=dict)

    @property
    def se(self) -> float:
        return math.sqrt(max(self.var_abs, 0.0))

    def shares(self) -> dict[str, float]:
        """Each component's share of Var(theta-hat) at this design (TEE C.5), truncated at zero."""
        pos = {k: max(v, 0.0) for k, v in self.contributions.items()}
        total = sum(pos.values())
        return {k: (v / total if total > 0 else math.nan) for k, v in pos.items()}

    def to_dict(self) -> dict:
        out = {**{f"n_{k}": v for k, v in self.counts.items()}, "replicates": self.replicates,
               "var_abs": self.var_abs, "se": self.se, "sigma2_delta": self.sigma2_delta,
               "sigma2_Delta": self.sigma2_Delta, "erho2": self.erho2, "phi": self.phi, "mdd95": self.mdd95}
        return json_safe(out)


def project(vc: VarianceComponents, counts: Mapping[str, float] | None = None, replicates: float | None = None,
            *, condition_on: Iterable[str] = (), object: str | None = None,  # noqa: A002 - G-theory word
            z: float = Z95) -> Projection:
    """Project every error variance and coefficient to a proposed design (TEE eq. 3; sizing eqs. 2-3).

    ``counts`` overrides some facets' counts (the rest stay as observed);
    ``replicates`` likewise. ``object`` defaults to the result's object of
    measurement; pass ``object=""`` to compute only Var(theta-hat).
    """
    full = observed_counts(vc)
    unknown = set(counts or {}) - set(full)
    if unknown:
        raise DesignError(f"unknown facet(s) {', '.join(sorted(unknown))}; facets are {', '.join(full)}.")
    full.update({k: float(v) for k, v in (counts or {}).items()})
    reps = float(vc.replicates if replicates is None else replicates)
    _check_counts(full, reps)
    notes = []
    contributions = {}
    for c in vc.components:
        if _conditioned(c, vc, condition_on) or is_tier2(c, vc):
            continue
        contributions[c.name] = c.variance_truncated / divisor(c, vc, full, reps)
    sensitivity = sensitivity_indices(vc)
    var_abs = max(sum(contributions.values()), 0.0)
    res = next((c for c in vc.components if c.name == RESIDUAL), None)
    if res is not None and res.confounded_with and reps != vc.replicates:
        notes.append("the residual is confounded with the top interaction (one observation per cell), so "
                     "extra replicates are not credited.")
    obj = vc.object if object is None else (object or None)
    if not obj:
        return Projection(full, reps, var_abs, contributions, notes=tuple(notes), sensitivity=sensitivity)
    if obj not in full:
        raise DesignError(f"object of measurement '{obj}' is not a facet ({', '.join(full)}).")
    s2p, delta, big_delta = object_errors(vc, obj, full, reps, condition_on)
    erho2 = s2p / (s2p + delta) if s2p + delta > 0 else math.nan
    phi = s2p / (s2p + big_delta) if s2p + big_delta > 0 else math.nan
    return Projection(full, reps, var_abs, contributions, obj, s2p, delta, big_delta, erho2, phi,
                      z * math.sqrt(2 * delta), tuple(notes), sensitivity)


def sensitivity_indices(vc: VarianceComponents) -> dict[str, float]:
    """The Tier 2 terms (made only of fixed facets, TEE Table 2) and their sensitivity indices
    (1/L) sum (tau_l - tau_bar)^2 (TEE C.4): how far the estimate moves with the researcher's choice of
    levels. No design changes them, so they are reported beside the error, never inside it."""
    chosen = chosen_facets(vc)
    return {c.name: c.variance for c in vc.components
            if c.name != RESIDUAL and c.facets and (c.kind == "fixed" or set(c.facets) <= chosen)}


def object_errors(vc: VarianceComponents, obj: str, counts, reps, condition_on=()) -> tuple[float, float, float]:
    """(sigma2_tau, sigma2_delta, sigma2_Delta) for object ``obj`` (Brennan 2001 sec. 4.1; sizing eq. 2): the
    relative error counts every error term that holds the object or a facet it is nested in (a category x
    judge effect moves a nested item against the others), the absolute error every error term."""
    s2p, divisors = absolute_error_divisors(vc, obj, counts, reps, condition_on)
    terms = {name: vc[name].variance_truncated / d for name, d in divisors.items()}
    universe = universe_facets(vc, obj)
    delta = sum(share for name, share in terms.items() if universe & set(term_facets(vc[name], vc)))
    return s2p, max(delta, 0.0), max(sum(terms.values()), 0.0)


def universe_facets(vc: VarianceComponents, obj: str) -> set[str]:
    """The object and the facets it is nested in: the terms made of them are its universe score."""
    universe = {obj}
    parent = vc.nesting.get(obj)
    while parent:
        universe.add(parent)
        parent = vc.nesting.get(parent)
    return universe


def universe_divisors(vc: VarianceComponents, obj: str, counts) -> dict[str, float]:
    """The terms of an object's universe-score variance sigma2_tau and the divisor of each (Brennan 2001
    secs. 4.1 and 4.4): every term made of the object's universe facets (the object and the facets it is
    nested in: a nested item's score alpha_i = kappa_c(i) + delta_i|c counts sigma2_kappa and sigma2_delta,
    TEE sec. 3.1) and of fixed facets, divided by the levels of its fixed facets (the estimand averages over
    the chosen levels, TEE C.2); a term of fixed facets only is no variance of the object."""
    universe = universe_facets(vc, obj)
    fixed = fixed_facets(vc) - universe
    out = {}
    for c in vc.components:
        facets = set(term_facets(c, vc))
        if c.name == RESIDUAL or not facets & universe or not facets <= universe | fixed:
            continue
        out[c.name] = divisor(c, vc, counts, 1.0, exclude=universe)
    return out


def absolute_error_divisors(vc: VarianceComponents, obj: str, counts, reps,
                            condition_on=()) -> tuple[float, dict[str, float]]:
    """sigma2_tau (:func:`universe_divisors`) and the divisor d_k of each term sigma2_k / d_k of one object's
    absolute error sigma2_Delta (Brennan 2001 eq. 4.1.9): every component outside the object's universe
    score, divided by the levels of its term other than the object (and the object's parents)."""
    universe = universe_divisors(vc, obj, counts)
    s2p = sum(vc[name].variance_truncated / d for name, d in universe.items())
    inside = universe_facets(vc, obj)
    divisors = {}
    for c in vc.components:
        facets = set(term_facets(c, vc))
        if c.name in universe or is_tier2(c, vc) or (c.name != RESIDUAL and facets and facets <= inside):
            continue
        if _conditioned(c, vc, condition_on):
            continue
        divisors[c.name] = divisor(c, vc, counts, reps, exclude=inside)
    return s2p, divisors


def mdd(projection: Projection, level: float = 0.95, df: float | None = None) -> float:
    """Minimum detectable difference between two objects (sizing eq. 3), optionally with a t quantile.

    App. D: 1.96 sqrt(2 sigma2_delta) assumes normality of the difference; at
    small item counts substitute a t quantile on the error degrees of freedom.
    """
    q = ndtri(0.5 + level / 2) if df is None else stdtrit(df, 0.5 + level / 2)
    return float(q * math.sqrt(2 * projection.sigma2_delta))


# ---------------------------------------------------------------------------
# Ceilings, requirements, exchange rates
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Ceiling:
    """The limit of E rho^2 and MDD as every random facet but one grows without bound (sizing eq. 4)."""

    facet: str
    count: float
    erho2: float
    mdd95: float
    sigma2_delta: float


def ceiling(vc: VarianceComponents, facet: str = "judge", count: float = 1, *, object: str | None = None,  # noqa: A002
            z: float = Z95) -> Ceiling:
    """E rho^2 and the MDD floor with ``facet`` held at ``count`` and all other random facets -> infinity.

    For s x i x j x r at one judge this is sigma2_s / (sigma2_s + sigma2_sj) and
    1.96 sqrt(2 sigma2_sj) (sizing eq. 4). Fixed facets keep their chosen counts.
    """
    obj = object or vc.object
    if not obj:
        raise DesignError("the ceiling needs an object of measurement (`object`).")
    big = 1e15
    counts = {f: (float(count) if f == facet else (n if f in vc.fixed or f == obj else big))
              for f, n in observed_counts(vc).items()}
    if facet not in counts:
        raise DesignError(f"'{facet}' is not a facet ({', '.join(counts)}).")
    s2p, delta, _ = object_errors(vc, obj, counts, big)
    # drop what is left of terms divided by 'infinity'
    delta = 0.0 if delta < 1e-12 * max(s2p, 1e-300) else delta
    return Ceiling(facet, float(count), s2p / (s2p + delta) if s2p + delta > 0 else math.nan,
                   z * math.sqrt(2 * delta), delta)


@dataclass(frozen=True)
class Requirement:
    """How many levels of a facet a target needs, or why no number will do."""

    facet: str
    target: float
    quantity: str
    count: int | None
    reachable: bool
    limit: float  # the best the quantity can get by adding levels of this facet alone

    def __str__(self) -> str:
        if self.reachable:
            return f"{self.count:g} {self.facet}{'' if self.count == 1 else 's'}"
        return (f"unreachable: {self.quantity} {self.target:g} lies beyond the limit {self.limit:.4g} that adding "
                f"{self.facet}s alone can reach")


def _quantity(p: Projection, quantity: str) -> float:
    return {"erho2": p.erho2, "phi": p.phi, "mdd95": p.mdd95, "se": p.se, "sigma2_delta": p.sigma2_delta}[quantity]


def needed(vc: VarianceComponents, facet: str, target: float, quantity: str = "erho2",
           counts: Mapping[str, float] | None = None, replicates: float | None = None,
           max_count: int = 10**7, **kw) -> Requirement:
    """The least count of ``facet`` reaching ``target`` (E rho^2 / phi: at least; MDD / SE: at most).

    Answers "unreachable" with the limit when even infinitely many levels fall
    short: items against a single judge's ceiling (sizing sec. 5.2).
    """
    if quantity not in ("erho2", "phi", "mdd95", "se", "sigma2_delta"):
        raise DesignError(f"unknown quantity '{quantity}'; use erho2, phi, mdd95 or se.")
    higher_is_better = quantity in ("erho2", "phi")
    base = dict(counts or {})

    def value(n):
        return _quantity(project(vc, {**base, facet: n}, replicates, **kw), quantity)

    def ok(v):
        return v >= target if higher_is_better else v <= target

    limit = value(1e15)
    if not ok(limit) or (higher_is_better and limit - target < 1e-12):
        return Requirement(facet, target, quantity, None, False, limit)
    lo, hi = 1, 1
    while not ok(value(hi)):
        lo, hi = hi, hi * 2
        if hi > max_count:
            return Requirement(facet, target, quantity, None, False, limit)
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(value(mid)):
            hi = mid
        else:
            lo = mid + 1
    return Requirement(facet, target, quantity, int(hi), True, limit)


def exchange_rate(vc: VarianceComponents, *, judges: int = 2, items: int = 30, base_judges: int = 1,
                  judge_facet: str = "judge", item_facet: str = "item", **kw) -> Requirement:
    """Items needed at ``base_judges`` judges to match ``judges`` judges at ``items`` items (sizing sec. 5.2-5.3).

    "Two judges at thirty items match 77 items at one judge": the returned
    requirement counts those items, or is unreachable when the matched E rho^2
    lies at or above the single-judge ceiling.
    """
    target = project(vc, {judge_facet: judges, item_facet: items}, **kw).erho2
    return needed(vc, item_facet, target, "erho2", counts={judge_facet: base_judges}, **kw)


# ---------------------------------------------------------------------------
# Interventions
# ---------------------------------------------------------------------------

def default_interventions(vc: VarianceComponents) -> list[tuple[str, dict[str, float], float | None]]:
    """Single-factor changes for the facets present (TEE Figs. 13-14): label, counts, replicates."""
    n = observed_counts(vc)
    out = []
    for f in n:
        if (f == vc.object and f != "item") or f in fixed_facets(vc):
            # a fixed facet's levels are the study's chosen conditions (TEE Table 2, Tier 2): more of them changes
            # what is estimated, not how precisely; more measures of other constructs likewise
            continue
        if f in parent_facets(vc) and vc.sampling == "pooled":
            continue  # items drawn from the whole pool: the count of categories enters no divisor
        role = vocabulary.role_of(f)
        if role == "item":
            label = "items" if f == "item" else f
            out.append((f"{label} x2", {f: n[f] * 2}, None))
            out.append((f"{label} x0.5", {f: max(1.0, round(n[f] / 2))}, None))
        elif role == "judge":
            out.append((f"+1 {f}", {f: n[f] + 1}, None))
            if n[f] > 1:
                out.append((f"a single {f}", {f: 1.0}, None))
        elif role == "variant":
            out.append((f"+2 {f}s", {f: n[f] + 2}, None))
            if n[f] > 1:
                out.append((f"a single {f}", {f: 1.0}, None))
        elif f != vc.object:
            out.append((f"{f} x2", {f: n[f] * 2}, None))
    if vc.replicates > 1:  # with one replicate the residual holds the cell term: more replicates cannot be projected
        out.append(("+5 replicates", {}, vc.replicates + 5))
        out.append(("a single replicate", {}, 1.0))
    return out


#: an intervention that moves the ranked quantity by less than this (in %) is listed after every one that moves
#: it more, whatever its sign: it changes nothing a reader would notice
NEGLIGIBLE_PCT = 1.0


def ranking_quantity(vc: VarianceComponents) -> str:
    """What the interventions are ranked by: the relative error sigma2_delta when objects are compared
    (systems on a board), else Var(theta-hat), the error of the estimate itself (a share of texts labelled,
    a benchmark's mean over its items: with the items as object the question is still the mean)."""
    obj = vc.object
    is_item = bool(obj) and vocabulary.facet_with_role("item", {obj: vc.levels.get(obj, 0)}) == obj
    if obj and not is_item and vc.levels.get(obj, 0) > 1:
        return "sigma2_delta"
    return "var_abs"


def interventions(vc: VarianceComponents, changes=None, rank_by: str | None = None, **kw) -> pd.DataFrame:
    """% change of Var(theta-hat) (and sigma2_delta with an object) per single-factor change, best first.

    Ranked by ``rank_by`` ("var_abs" or "sigma2_delta"; default :func:`ranking_quantity`), with every change
    that moves it by less than :data:`NEGLIGIBLE_PCT` after those that move it more."""
    base = project(vc, **kw)
    rows = []
    for label, counts, reps in changes or default_interventions(vc):
        p = project(vc, counts, reps, **kw)
        rows.append({
            "intervention": label,
            "var_abs": p.var_abs,
            "pct_change_var_abs": 100 * (p.var_abs / base.var_abs - 1) if base.var_abs > 0 else math.nan,
            "sigma2_delta": p.sigma2_delta,
            "pct_change_sigma2_delta": (100 * (p.sigma2_delta / base.sigma2_delta - 1)
                                        if base.sigma2_delta and base.sigma2_delta > 0 else math.nan),
        })
    frame = pd.DataFrame(rows)
    quantity = rank_by or ranking_quantity(vc)
    key = f"pct_change_{quantity}"
    if quantity == "sigma2_delta" and not frame[key].notna().any():
        key = "pct_change_var_abs"
    negligible = ~(frame[key].abs() >= NEGLIGIBLE_PCT)  # NaN (no such quantity) is negligible too
    frame = frame.assign(_negligible=negligible).sort_values(["_negligible", key], kind="stable")
    frame.attrs["ranked_by"] = key.removeprefix("pct_change_")
    return frame.drop(columns="_negligible").reset_index(drop=True)


# ---------------------------------------------------------------------------
# Cost, frontier, budget
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class CostModel:
    """Price of a design: calls = product of facet counts x replicates, priced per judge.

    ``price_per_call`` maps each judge of the panel, in the order judges are
    added, to its price per call (input tokens x input price + output tokens x
    output price, per million tokens each); a single price applies to every judge.
    ``parents`` are facets other facets are nested in: a category is no call of its own (N' items cost N'
    items whatever their categories, counts being totals).
    """

    price_per_call: tuple[float, ...]
    judge_facet: str = "judge"
    parents: tuple[str, ...] = ()
    #: each judge's price of a replicate after the first (a prompt the provider's cache holds, read at its cached
    #: price); None: every replicate at ``price_per_call``
    repeat_price_per_call: tuple[float, ...] | None = None

    def cost(self, counts: Mapping[str, float], replicates: float) -> float:
        m = round(counts.get(self.judge_facet, 1))
        prices = self.price_per_call
        panel = sum(prices[j] if j < len(prices) else prices[-1] for j in range(m))
        if self.repeat_price_per_call is not None:  # a first call per cell, then the replicates at their price
            repeats = self.repeat_price_per_call
            later = sum(repeats[j] if j < len(repeats) else repeats[-1] for j in range(m))
            cells = math.prod(v for f, v in counts.items() if f != self.judge_facet and f not in self.parents)
            return float(cells * (panel + (replicates - 1) * later))
        others = math.prod(v for f, v in counts.items()
                           if f != self.judge_facet and f not in self.parents) * replicates
        return float(others * panel)


def frontier(vc: VarianceComponents, grid: Mapping[str, Iterable[float]], cost: CostModel,
             replicates: Iterable[float] = (1,), objective: str = "se", **kw) -> pd.DataFrame:
    """Every design of the grid with its cost and objective, and which are Pareto-optimal."""
    names = list(grid)
    rows = []
    for values in _product([list(grid[n]) for n in names]):
        counts = dict(zip(names, values, strict=True))
        for r in replicates:
            p = project(vc, counts, r, **kw)
            rows.append({**{f"n_{n}": v for n, v in counts.items()}, "replicates": r,
                         "cost": cost.cost({**observed_counts(vc), **counts}, r),
                         "se": p.se, "var_abs": p.var_abs, "sigma2_delta": p.sigma2_delta, "erho2": p.erho2,
                         "mdd95": p.mdd95})
    frame = pd.DataFrame(rows).sort_values(["cost", objective]).reset_index(drop=True)
    best = math.inf
    pareto = []
    for v in frame[objective]:
        pareto.append(v < best - 1e-15)
        best = min(best, v)
    frame["pareto"] = pareto
    return frame


def _product(lists):
    if not lists:
        yield ()
        return
    for head in lists[0]:
        for tail in _product(lists[1:]):
            yield (head, *tail)


def budget_facets(vc: VarianceComponents, item_facet: str = "item") -> list[str]:
    """The facets the budget optimiser varies by default: every random facet a design can buy more levels of
    (judges, prompt variants, ...), not the items (bought last), the object or a facet named as one (the systems
    evaluated), a fixed facet (its levels are chosen) or a parent (counted through its children)."""
    skip = {item_facet, vc.object} | fixed_facets(vc) | parent_facets(vc)
    return [f for f in vc.levels if f not in skip and vocabulary.role_of(f) != "object"]


#: the replicates the budget optimiser tries (one is optimal whenever replicate noise is a small share)
BUDGET_REPLICATES = 5


def optimize_budget(vc: VarianceComponents, budget: float, cost: CostModel, *, objective: str = "sigma2_delta",
                    vary: Mapping[str, Iterable[int]] | None = None, item_facet: str = "item",
                    max_items: int = 10**6, facets: Iterable[str] | None = None,
                    limits: Mapping[str, int] | None = None, **kw) -> dict:
    """The integer design minimising ``objective`` (sigma2_delta or var_abs) subject to cost <= budget.

    Items are the facet bought last: for each combination of the other
    facets' counts (``vary``, default: every facet of :func:`budget_facets`, or those of ``facets``, from 1 to
    20 and widened while the best sits on the edge, and replicates 1..5) the
    objective falls with items, so the best affordable design takes as many
    items as the budget allows, up to the pool (``limits``: the most levels of a facet there are, e.g. 200
    items; or ``max_items``). Sizing App. A: optima are interior, with more
    judges as the budget grows and one replicate; TEE sec. 4.2: items until the pool is spent, then prompts.
    """
    if objective not in ("sigma2_delta", "var_abs"):
        raise DesignError("objective must be sigma2_delta or var_abs.")
    limits = dict(limits or {})
    unknown = set(limits) - set(vc.levels) - {"replicates"}
    if unknown:
        raise DesignError(f"budget limits name unknown facet(s) {', '.join(sorted(unknown))}; facets are "
                          f"{', '.join(vc.levels)} (and replicates).")
    max_items = min(max_items, int(limits.pop(item_facet, max_items)))
    if vary is None:
        names = list(budget_facets(vc, item_facet) if facets is None else facets)
        bad = [f for f in names if f not in vc.levels or f == item_facet]
        if bad:
            raise DesignError(f"the budget cannot vary {', '.join(bad)}: vary facets of the components other than "
                              f"the items ({', '.join(f for f in vc.levels if f != item_facet)}).")
        # each count up to where the optimum stops moving: widen a range while the best sits on its edge
        top = dict.fromkeys(names, 20)
        while True:
            grid: dict[str, Iterable[int]] = {f: range(1, min(top[f], limits.get(f, top[f])) + 1) for f in names}
            grid["replicates"] = range(1, min(BUDGET_REPLICATES, limits.get("replicates", BUDGET_REPLICATES)) + 1)
            best = optimize_budget(vc, budget, cost, objective=objective, item_facet=item_facet, vary=grid,
                                   max_items=max_items, **kw)
            edge = [f for f in names if best["counts"][f] >= top[f] and top[f] < min(limits.get(f, 5000), 5000)]
            if not edge:
                return best
            for f in edge:
                top[f] *= 4
    vary = dict(vary)
    reps = list(vary.pop("replicates", [vc.replicates]))
    names = list(vary)
    best = None
    for values in _product([list(vary[n]) for n in names]):
        counts = dict(zip(names, values, strict=True))
        for r in reps:
            unit = cost.cost({**observed_counts(vc), **counts, item_facet: 1}, r)
            # a hair of slack so a design costing exactly the budget is not lost to rounding in the prices
            n_items = min(math.floor(budget / unit * (1 + 1e-12)), max_items) if unit > 0 else max_items
            if n_items < 1:
                continue
            p = project(vc, {**counts, item_facet: n_items}, r, **kw)
            value = getattr(p, objective)
            if best is None or value < best["objective"] - 1e-15:
                best = {"objective": value, "counts": {**counts, item_facet: n_items}, "replicates": r,
                        "cost": cost.cost({**observed_counts(vc), **counts, item_facet: n_items}, r),
                        "projection": p}
    if best is None:
        raise DesignError(f"no design fits a budget of {budget:g}: one item already costs more.")
    return best


# ---------------------------------------------------------------------------
# Gaming surface and rank inversions
# ---------------------------------------------------------------------------

def expected_max_normal(k: int) -> float:
    """E[max of k iid standard normals], exact by quadrature of k x phi(x) Phi(x)^(k-1) (TEE 4.4).

    k = 2 gives 1/sqrt(pi).
    """
    if k < 1:
        raise DesignError("K must be at least 1.")
    if k == 1:
        return 0.0

    def integrand(x):
        return x * k * math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi) * ndtr(x) ** (k - 1)

    from scipy import integrate  # only for the expected maximum

    value, _ = integrate.quad(integrand, -12, 12, limit=200, epsabs=1e-13, epsrel=1e-12)
    return float(value)


def elo_from_winrate(p: float) -> float:
    """Elo difference implied by a win rate p against an opponent (Chatbot Arena's 400 log10 scale)."""
    p = min(max(p, 1e-12), 1 - 1e-12)
    return 400.0 * math.log10(p / (1 - p))


def gaming_surface(projection: Projection, k: int, base_rate: float | None = None) -> dict[str, float]:
    """Expected best-of-K inflation E[max of K standard normals] x sigma_pipeline (TEE 4.4).

    sigma_pipeline is the SE of the reported score at the design. With a
    ``base_rate`` (a win rate), the inflation is also given in Elo points.
    """
    inflation = expected_max_normal(k) * projection.se
    out = {"k": k, "sigma_pipeline": projection.se, "inflation": inflation}
    if base_rate is not None:
        out["inflation_elo"] = elo_from_winrate(base_rate + inflation) - elo_from_winrate(base_rate)
    return out


def rank_inversion(separation: float, projection: Projection) -> float:
    """P(two objects at true separation d come out in the wrong order) = Phi(-d / sqrt(2 sigma2_delta))."""
    if not projection.object:
        raise DesignError("rank inversion needs an object of measurement.")
    sd = math.sqrt(2 * projection.sigma2_delta)
    return 0.5 if sd == 0 and separation == 0 else float(ndtr(-abs(separation) / sd)) if sd else 0.0


# ---------------------------------------------------------------------------
# The plan: everything the D-study calculator reports, JSON-ready
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Budgeted:
    """The integer design the budget optimiser chose."""

    budget: float
    counts: dict[str, int]
    replicates: float
    cost: float
    objective: float
    projection: Projection
    #: how the calls were priced, when not at one price each (a later replicate's own price)
    priced: str | None = None


@dataclass(frozen=True)
class Plan(Result):
    """What the D-study calculator answers (sizing secs. 3-5; TEE eq. 3 and 4.4).

    ``designs`` has one row per design tried (counts, SE, E rho^2, phi, MDD and, with prices, cost and
    the cost frontier); ``ceiling`` the single-judge limit; ``requirements`` the count of each facet a
    target needs; ``exchange`` items against judges at a target E rho^2; ``interventions`` the effect of
    doubling each facet; ``budget`` the optimiser's design; ``gaming`` the best-of-K surface.
    """

    object: str | None
    designs: pd.DataFrame
    interventions: pd.DataFrame
    ceiling: Ceiling | None = None
    requirements: tuple[Requirement, ...] = ()
    exchange: dict[str, Any] | None = None
    budget: Budgeted | None = None
    gaming: dict[str, Any] | None = None
    #: the conventions the projections follow: how nested facets are sampled, what the estimate is of, and the
    #: Tier 2 sensitivity indices (beside the error, in none of it)
    conventions: dict[str, Any] = field(default_factory=dict)

    def to_frame(self) -> pd.DataFrame:
        return self.designs.copy()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"object": self.object, "designs": self.designs.to_dict(orient="records"),
                               **self.conventions}
        if self.ceiling is not None:
            out.update(ceiling=self.ceiling.erho2, mdd_floor=self.ceiling.mdd95, ceiling_facet=self.ceiling.facet)
        if self.requirements:
            out["requirements"] = [{"facet": r.facet, "quantity": r.quantity, "target": r.target, "count": r.count,
                                    "reachable": r.reachable, "limit": r.limit, "text": str(r)}
                                   for r in self.requirements]
        if self.exchange is not None:
            out["exchange"] = self.exchange
        out["interventions"] = self.interventions.to_dict(orient="records")
        if self.budget is not None:
            b = self.budget
            out["budget"] = {"budget": b.budget, "counts": b.counts, "replicates": b.replicates, "cost": b.cost,
                             "objective": b.objective, "design": b.projection.to_dict()}
            if b.priced:
                out["budget"]["priced"] = b.priced
        if self.gaming is not None:
            out["gaming"] = self.gaming
        return json_safe(out)


def plan(vc: VarianceComponents, grid: Mapping[str, Iterable[float]] | None = None, *,
         object: str | None = None,  # noqa: A002 - the G-theory word
         target_erho2: float | None = None, target_mdd: float | None = None, target_se: float | None = None,
         budget: float | None = None, prices: Mapping[str, float] | None = None, best_of: int | None = None,
         base_rate: float | None = None, ceiling_facet: str = "judge", separation: float | None = None,
         vary: Iterable[str] | None = None, limits: Mapping[str, int] | None = None,
         replicate_prices: Mapping[str, float] | None = None) -> Plan:
    """The D-study calculator: one row per design of ``grid``, ceilings, requirements, interventions, budget.

    ``grid`` maps facets (and ``rep``) to the counts to try; facets left out
    keep their observed counts. ``prices`` maps judges to USD per call (or
    ``{"*": price}`` for all) for the budget optimiser and the cost column; ``vary`` names the facets the
    budget optimiser varies besides items and replicates (default :func:`budget_facets`), ``limits`` the most
    levels of a facet there are (``{"item": 200}``: a pool). ``replicate_prices`` (same keys as ``prices``) is the
    price of each replicate after a cell's first: a prompt the provider's prompt cache holds costs less to ask
    again (``evalgauge run`` records each call's cached tokens), so cheap replicates can buy more precision.
    """
    obj = vc.object if object is None else (object or None)
    vc = replace(vc, object=obj) if obj != vc.object else vc
    grid = {k: [float(x) for x in v] for k, v in (grid or {}).items()}
    # a facet the user names is that facet, even when its name is a replicate alias (Brennan's r in p x (r:t))
    named = next((grid.pop(k) for k in list(grid) if k in vocabulary.REPLICATE_ALIASES and k not in vc.levels), None)
    reps = [float(x) for x in named] if named is not None else [float(vc.replicates)]
    # requirements and the item-judge exchange answer at the replicates the plan names (the first value),
    # as the counts of facets the components did not carry come from the first value of --n
    plan_reps = reps[0] if named is not None else None
    unknown = set(grid) - set(vc.levels)
    if unknown:
        raise DesignError(f"`counts` names unknown facet(s) {', '.join(sorted(unknown))}; facets are "
                          f"{', '.join(vc.levels)} (and rep for replicates).")
    names = list(grid)
    cost = _cost_model(vc, prices, ceiling_facet, replicate_prices)
    rows = []
    for values in _product([grid[n] for n in names]):
        counts = dict(zip(names, values, strict=True))
        for r in reps:
            p = project(vc, counts, r)
            row = p.to_dict()
            if separation is not None and obj:
                row["p_inversion"] = rank_inversion(separation, p)
            if cost is not None:
                row["cost"] = cost.cost(p.counts, r)
            rows.append(row)
    if cost is not None:  # the cost-efficiency frontier among the designs tried
        best = math.inf
        for row in sorted(rows, key=lambda x: (x["cost"], x["se"])):
            row["pareto"] = row["se"] < best - 1e-15
            best = min(best, row["se"])
    the_ceiling = ceiling(vc, ceiling_facet, 1) if obj and ceiling_facet in vc.levels and ceiling_facet != obj \
        else None
    requirements = []
    for quantity, target in (("erho2", target_erho2), ("mdd95", target_mdd), ("se", target_se)):
        if target is None:
            continue
        if quantity != "se" and not obj:
            raise DesignError(f"a target {quantity} needs an object of measurement (`object`).")
        requirements += [needed(vc, facet, target, quantity, replicates=plan_reps) for facet in vc.levels
                         if facet != obj and facet not in vc.fixed]
    exchange = None
    judge, item = vc.role("judge"), vc.role("item")  # by their names, whatever the columns are called
    if target_erho2 is not None and obj and judge and item:
        single = needed(vc, item, target_erho2, "erho2", counts={judge: 1}, replicates=plan_reps)
        exchange = {"target": target_erho2, "items_at_one_judge": single.count,
                    "reachable_at_one_judge": single.reachable,
                    "judges_at_observed_items": needed(vc, judge, target_erho2, "erho2",
                                                       replicates=plan_reps).count}
    budgeted = None
    if budget is not None:
        if not (isinstance(budget, int | float) and math.isfinite(budget) and budget > 0):
            raise DesignError(f"budget: {budget!r} is not a positive number of USD.")
        if cost is None:
            raise DesignError("a budget needs prices: `cost` (JUDGE=USD per call, or USD for every judge).")
        best = optimize_budget(vc, budget, cost, objective="sigma2_delta" if obj else "var_abs", facets=vary,
                               limits=limits)
        budgeted = Budgeted(budget, best["counts"], best["replicates"], best["cost"], best["objective"],
                            best["projection"], _priced_words(prices, replicate_prices))
    return Plan(obj, pd.DataFrame(rows), interventions(vc), the_ceiling, tuple(requirements), exchange, budgeted,
                gaming_surface(project(vc), best_of, base_rate) if best_of else None, conventions(vc))


def conventions(vc: VarianceComponents) -> dict[str, Any]:
    """The conventions a projection of ``vc`` follows, JSON-ready: ``estimand`` (TEE eq. 3's domain or C.2's
    finite benchmark), with nested facets their ``sampling`` and ``nesting``, and the Tier 2 ``sensitivity``
    indices (TEE Table 2, C.4)."""
    out: dict[str, Any] = {"estimand": vc.estimand}
    if vc.nesting:
        out.update(sampling=vc.sampling, nesting=dict(vc.nesting))
    sensitivity = sensitivity_indices(vc)
    if sensitivity:
        out["sensitivity"] = sensitivity
    return out


def _cost_model(vc: VarianceComponents, prices: Mapping[str, float] | None, judge_facet: str,
                repeats: Mapping[str, float] | None = None) -> CostModel | None:
    if not prices:
        if repeats:
            raise DesignError("replicate prices need the first call's prices too (`prices`).")
        return None
    for judge, price in [*prices.items(), *(repeats or {}).items()]:  # the command line's checks, for Python too
        value = float(price) if isinstance(price, int | float) else math.nan
        if not math.isfinite(value) or value < 0:
            who = "every judge" if judge == "*" else f"judge '{judge}'"
            raise DesignError(f"prices: the price of {who} is {price!r}; a price is a non-negative number of USD "
                              "per call.")
    parents = tuple(sorted(parent_facets(vc)))
    if repeats and set(repeats) != set(prices):
        raise DesignError(f"replicate prices name {', '.join(sorted(repeats))} but the prices name "
                          f"{', '.join(sorted(prices))}: give a later replicate's price for each priced judge.")
    later = None
    if repeats:
        later = (float(repeats["*"]),) if "*" in repeats else tuple(float(repeats[j]) for j in prices)
    if "*" in prices:
        return CostModel((float(prices["*"]),), judge_facet, parents, later)
    ordered = tuple(float(v) for v in prices.values())
    return CostModel(ordered, judge_facet, parents, later)


def _priced_words(prices: Mapping[str, float] | None, repeats: Mapping[str, float] | None) -> str | None:
    """What the plan says when a later replicate has its own price (a cached prompt)."""
    if not prices or not repeats:
        return None
    who = {j: ("every judge" if j == "*" else f"judge '{j}'") for j in prices}
    parts = [f"{who[j]} ${float(prices[j]):.6g} a cell's first call, ${float(repeats[j]):.6g} each later replicate"
             for j in prices]
    return ("designs priced at each call's effective cost (a replicate repeats a prompt the provider's cache "
            "holds): " + "; ".join(parts))
