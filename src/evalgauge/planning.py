"""Planning a collection to a target precision: the D-study at the pilot's upper confidence bound.

An internal pilot (Wittes & Brittain 1990) estimates the components; the next stage is the cheapest design the
pools allow whose error variance at its upper confidence bound meets the target (sizing eqs. 2-3: MDD, E rho^2;
TEE eq. 3: the SE of theta-hat). The bound of a linear combination of component estimates is the modified
large-sample bound (Graybill & Wang 1980; Burdick & Graybill 1992, sec. 3.1), each term's own from Satterthwaite's
chi-square approximation (Satterthwaite 1946; Brennan 2001, sec. 6.2).

The pools are described by :class:`Pools` (what can be collected: items in the order stages draw them, judges,
variants, how many systems, temperatures and replicates), not by a run's configuration, so the collector builds
one and any other caller can too. This module is pure: components, pools and prices in, a plan out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from .vocabulary import RESIDUAL

QUANTITIES = {"mdd95": "MDD", "erho2": "E rho^2", "se": "SE"}

@dataclass(frozen=True)
class Pools:
    """What a collection can draw on: the items in the order stages take them, the judges, the prompt variants,
    how many systems and temperatures each call is made for, the most replicates, and the presentation orders
    per call (2 for pairwise judging in both orders)."""

    items: tuple[str, ...]
    judges: tuple[str, ...]
    variants: tuple[str, ...]
    systems: int
    temperatures: int = 1
    replicates: int = 1
    positions: int = 1


@dataclass(frozen=True)
class Target:
    """What the user wants: ``mdd95`` or ``se`` at most ``value``, or ``erho2`` at least ``value``."""

    quantity: str
    value: float

    def met(self, achieved: float) -> bool:
        if not math.isfinite(achieved):
            return False
        return achieved >= self.value if self.quantity == "erho2" else achieved <= self.value

    def __str__(self) -> str:
        op = ">=" if self.quantity == "erho2" else "<="
        return f"{QUANTITIES[self.quantity]} {op} {self.value:g}"


@dataclass(frozen=True)
class StageDesign:
    """One stage's factorial: which items, judges, variants, and how many replicates."""

    items: tuple[str, ...]
    judges: tuple[str, ...]
    variants: tuple[str, ...]
    replicates: int

    def calls(self, n_systems: int, n_temperatures: int, positions: int = 1) -> int:
        return (len(self.items) * n_systems * len(self.variants) * n_temperatures * len(self.judges)
                * self.replicates * positions)


@dataclass
class StagePlan:
    """The D-study's answer after a fit: the cheapest design reaching the target, or why none does."""

    design: StageDesign | None
    predicted: float  # the target quantity at the chosen design (or at the best reachable one)
    cost_usd: float  # to collect what is missing
    reachable: bool
    message: str
    options: list[dict] = field(default_factory=list)  # every design considered, for the record
    confidence: float = 0.90  # of the bound the design was judged at (see PLAN_LEVELS)


#: Confidence of the planning bound: the design is sized, and the run stopped, on the error variance's
#: upper 90% bound, so the target holds at the true components in about 9 runs of 10.
PLAN_CONFIDENCE = 0.90
#: When no design the pools allow reaches the target at the 90% bound, the plan says so and tries the
#: 75% bound: a pilot whose fixed facets give few degrees of freedom (two variants and 8 systems: 7 for
#: system x variant) often cannot rule out a miss at 90% although the target is within reach. Not at the
#: estimates themselves: in bench/study_adaptive.py's scenario at the edge of the pools, a ladder ending
#: at the estimates said "met" in 89 of 200 runs, while the final design met the target at the true
#: components in 19; the estimates' answer is reported beside "out of reach" instead.
PLAN_LEVELS = (0.90, 0.75)


#: Satterthwaite df below this are not taken at face value: they come from an estimate near zero next
#: to a large standard error, where the chi-square model of the estimate fails (its bound would grow
#: without limit as the estimate shrinks); the bound then uses this many df, and never less than the
#: normal bound.
MIN_SATTERTHWAITE_DF = 4.0


def upper_bound(value: float, variance: float, confidence: float = PLAN_CONFIDENCE) -> float:
    """One-sided upper confidence bound for a linear combination of variance components, by
    Satterthwaite's approximation (Satterthwaite 1946; Brennan 2001, sec. 6.2): the estimate ``value``
    with sampling ``variance`` is taken as value * chi2_nu / nu with nu = 2 value^2 / variance, so the
    bound is nu * value / chi2_nu(1 - confidence). A variance estimate from few degrees of freedom is
    skewed to the right; the normal bound (value + z SE) under-states its upper tail, which is what
    sizing on it must not do. The bound is at least the normal one, and nu is taken as at least
    MIN_SATTERTHWAITE_DF (continuous in the estimate; tends to value + z SE as nu grows)."""
    from scipy.stats import chi2, norm

    if variance <= 0 or not math.isfinite(variance):
        return value
    normal = value + float(norm.ppf(confidence)) * math.sqrt(variance)
    if value <= 0:
        return normal
    nu = max(2 * value**2 / variance, MIN_SATTERTHWAITE_DF)
    return max(normal, nu * value / float(chi2.ppf(1 - confidence, nu)))


def combination_bound(c: np.ndarray, values: np.ndarray, cov: np.ndarray,
                      confidence: float = PLAN_CONFIDENCE) -> float:
    """One-sided upper confidence bound for L = c' sigma2, a combination of variance-component estimates
    ``values`` with sampling covariance ``cov``, by the modified large-sample (MLS) method (Graybill and
    Wang 1980; Burdick and Graybill 1992, sec. 3.1): U = L + sqrt(h' R h), where each term's half-width
    h_k = c_k sigma2_k (nu_k / chi2_nu_k(1 - confidence) - 1) is its own chi-square bound's excess
    (nu_k = 2 sigma2_k^2 / Var_k, its Satterthwaite df), and R the estimates' correlation matrix.

    Why not Satterthwaite on L itself (:func:`upper_bound` with Var L): when L adds a precisely estimated
    part to one from few df (items' components beside system x judge from 21 df), L's df are large and
    its bound is the normal one, whose plug-in standard error shrinks with the estimate and under-covers
    the few-df part (the pool-limited check in bench/study_adaptive.py: 80% where 90% was asked). MLS
    keeps each term's own skew: exact for a single component, the normal bound when every nu_k is large.
    As in :func:`upper_bound`, nu_k is at least MIN_SATTERTHWAITE_DF, h_k at least the normal
    half-width z c_k SE_k (so an estimate at zero with a large SE still counts), and U at least the normal
    bound of L."""
    from scipy.stats import norm

    values = np.asarray(values, dtype=float)
    cov = np.nan_to_num(np.asarray(cov, dtype=float))
    point = float(c @ values)
    se = np.sqrt(np.clip(np.diagonal(cov), 0.0, None))
    z = float(norm.ppf(confidence))
    h = np.zeros(len(values))
    for k in np.flatnonzero((c != 0) & (se > 0)):  # each term c_k sigma2_k's own bound, less its estimate
        term = float(c[k] * values[k])
        h[k] = upper_bound(term, float((c[k] * se[k]) ** 2), confidence) - term
    live = se > 0
    corr = np.zeros_like(cov)
    corr[np.ix_(live, live)] = np.clip(cov[np.ix_(live, live)] / np.outer(se[live], se[live]), -1.0, 1.0)
    # the sign of each half-width follows its coefficient, so that correlations act as in c' cov c
    hs = h * np.sign(c)
    mls = point + math.sqrt(max(float(hs @ corr @ hs), 0.0))
    # never below the normal bound of the sum: with a strong negative correlation, growing one half-width
    # can shrink h'Rh, and the normal bound is already the lenient one for a skewed estimate
    return max(mls, point + z * math.sqrt(max(float(c @ cov @ c), 0.0)))


def bound(vc, quantity: str, counts: dict | None = None, replicates: float | None = None,
          confidence: float | None = PLAN_CONFIDENCE) -> float:
    """The target quantity at a design, taking the pilot's own uncertainty into account (an internal
    pilot, Wittes and Brittain 1990): the error variance that sets it (sigma2_delta for MDD and E rho^2,
    Var(theta-hat) for SE; linear in the components, sizing eqs. 2-3) at its upper ``confidence`` bound
    (:func:`combination_bound`, the MLS bound from the components' estimates and covariance), then
    MDD = 1.96 sqrt(2 sigma2_delta), E rho^2 = sigma2_s / (sigma2_s + sigma2_delta), SE = sqrt(Var).
    ``confidence=None`` (or 0.5) gives the D-study's point projection."""
    from . import dstudy
    from .inference import linear_coefficients

    kind = "var_abs" if quantity == "se" else "sigma2_delta"
    kw = {"counts": counts, "replicates": replicates}
    c = linear_coefficients(vc, kind, **kw)
    values = np.array([comp.variance_truncated for comp in vc.components])
    cov = _covariance(vc)
    point = float(c @ values)
    # at 0.5 the estimates themselves (a chi-square's median is below them)
    upper = point if confidence is None or confidence <= 0.5 else combination_bound(c, values, cov, confidence)
    if quantity == "mdd95":
        return dstudy.Z95 * math.sqrt(2 * max(upper, 0.0))
    if quantity == "se":
        return math.sqrt(max(upper, 0.0))
    s2p = float(linear_coefficients(vc, "sigma2_object", **kw) @ values)
    return s2p / (s2p + upper) if s2p + upper > 0 else math.nan


def _fewest_items(vc, target: Target, counts: dict, reps: int, pool: int,
                  confidence: float = PLAN_CONFIDENCE) -> int | None:
    """The fewest items (2..pool) whose planning bound meets the target, by bisection (the bound improves
    with items), or None when the whole pool does not."""
    def ok(n):
        return target.met(bound(vc, target.quantity, {**counts, "item": n}, reps, confidence))

    if not ok(pool):
        return None
    lo, hi = 2, pool
    if ok(lo):
        return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def plan_stage(vc, pools: Pools, target: Target, prices: dict[str, float | tuple[float, float]],
               done: StageDesign | list[StageDesign],
               budget_left: float = math.inf, levels: tuple[float, ...] = PLAN_LEVELS) -> StagePlan:
    """The cheapest design the pools allow that reaches ``target`` at the fitted components ``vc``.

    Designs: the J cheapest judges (J = 1..all), the first V variants, R replicates (up to the config's),
    and the fewest items reaching the target (up to the pool). Cost: the calls not yet in ``done`` at
    each judge's observed price, its first and later replicates apart where they differ (a replicate of a cached
    prompt costs less: ``prices[j]`` is then the pair). Each design is judged at the upper 90% bound of its
    error variance, else at the 75% bound (``PLAN_LEVELS``; the plan says which); without a design that reaches
    the target at 75%, the best the pools give, what would help, and what the estimates alone would say.
    ``levels`` replaces that ladder (``(0.5,)``: at the estimates only). ``done`` is the design collected
    so far, or the list of every design collected (their union is done).
    """
    done = [done] if isinstance(done, StageDesign) else list(done)
    for level in levels:
        plan = _plan_at(vc, pools, target, prices, done, budget_left, level)
        if any(o["reaches"] for o in plan.options):
            return plan
    at_estimates = _plan_at(vc, pools, target, prices, done, budget_left, 0.5)
    if at_estimates.design is not None:  # out of reach at the bound, not at the estimates: say so
        d = at_estimates.design
        plan.message += (f" At the estimates alone, {len(d.items)} items x {len(d.judges)} judge(s) x "
                         f"{len(d.variants)} variant(s) x {d.replicates} replicate(s) would reach it "
                         f"(${at_estimates.cost_usd:.4f}): the pilot cannot tell whether the target is within "
                         "reach. " + _could_items_tell(vc, pools, target, prices, done))
    return plan


def pool_limited(vc, pools: Pools):
    """The components' estimates with the least sampling covariance more items from these pools could
    leave: a component with the item facet in it (or the residual) taken as known, and one made only of
    facets whose every level the pools hold (system x judge, system x variant, judge, ...) with the
    chi-square spread of its realized effects, variance 2 sigma2^2 / df, df the product of (levels - 1)
    over its facets (the pools' levels: (8 - 1)(4 - 1) = 21 for system x judge with 8 systems and 4
    judges), whatever the item count. A component with a facet the pools do not bound keeps its own
    variance. What a plan on it cannot reach, no number of items can show (:func:`_could_items_tell`)."""
    pool = {"system": pools.systems, "judge": len(pools.judges), "variant": len(pools.variants),
            "temperature": pools.temperatures}
    k = len(vc.components)
    own = _covariance(vc)
    cov = np.zeros((k, k))
    for j, comp in enumerate(vc.components):
        facets = comp.name.split(":")
        if comp.name == RESIDUAL or "item" in facets:
            continue
        if all(f in pool for f in facets):
            df = math.prod(max(pool[f] - 1, 1) for f in facets)
            cov[j, j] = 2 * comp.variance_truncated**2 / df
        else:
            cov[j, j] = own[j, j]
    return replace(vc, covariance=cov)


def _covariance(vc) -> np.ndarray:
    """The components' sampling covariance (NaN as 0), or the squared standard errors when the fit kept none."""
    if vc.covariance is not None:
        return np.nan_to_num(np.asarray(vc.covariance, dtype=float))
    return np.diag(np.nan_to_num([comp.se for comp in vc.components]) ** 2)


def _could_items_tell(vc, pools: Pools, target: Target, prices: dict[str, float], done: list[StageDesign]) -> str:
    """Whether more items could show the target within reach: the plan at the 90% bound of
    :func:`pool_limited` (what no number of items narrows kept, the rest known). It is advice, not a stage:
    a stage chosen on it and stopped when the refit passes the 90% check lets on exactly the runs whose refit
    happens to show the panel interactions small, the selection the 90% bound on the pilot keeps out, and
    their final intervals under-cover (bench/study_adaptive.py)."""
    lim = _plan_at(pool_limited(vc, pools), pools, target, prices, done, math.inf, PLAN_CONFIDENCE)
    if lim.design is not None:
        d = lim.design
        return (f"More items can tell: were every component with items in it known, {len(d.items)} items x "
                f"{len(d.judges)} judge(s) x {len(d.variants)} variant(s) x {d.replicates} replicate(s) would "
                f"reach it at the upper {PLAN_CONFIDENCE:.0%} bound; a larger pilot (--pilot-items, every judge "
                "and variant on more items) would narrow what the pilot leaves open.")
    n_sys, n_j, n_v = pools.systems, len(pools.judges), len(pools.variants)
    df = (f" (system x judge ({n_sys} - 1)({n_j} - 1) = {(n_sys - 1) * (n_j - 1)}, system x variant "
          f"({n_sys} - 1)({n_v} - 1) = {(n_sys - 1) * (n_v - 1)})") if n_sys > 1 else ""
    return (f"No number of items from these pools can: the components without items have only the pools' "
            f"degrees of freedom{df}, which leave the upper {PLAN_CONFIDENCE:.0%} bound beyond the target; more "
            "systems, judges or variants would.")


def _plan_at(vc, pools: Pools, target: Target, prices: dict[str, float], done: list[StageDesign],
             budget_left: float, level: float) -> StagePlan:
    """plan_stage at one confidence level."""
    order = list(pools.items)
    pool = len(order)
    n_sys = max(pools.systems, 1)
    n_temp = pools.temperatures
    positions = pools.positions
    by_price = sorted(prices, key=lambda j: (_price_of(prices[j], 1), j))
    has = {f: f in vc.levels for f in ("judge", "variant", "item")}
    options, best, best_value = [], None, None
    for n_judges in range(1, len(by_price) + 1):
        for n_var in range(1, len(pools.variants) + 1):
            for reps in range(1, pools.replicates + 1):
                counts = {}
                if has["judge"]:
                    counts["judge"] = n_judges
                if has["variant"]:
                    counts["variant"] = n_var
                fewest = _fewest_items(vc, target, counts, reps, pool, level) if has["item"] else None
                n_items = pool if fewest is None else fewest
                value = bound(vc, target.quantity, {**counts, "item": n_items}, reps, level)
                design = StageDesign(tuple(order[:n_items]), tuple(by_price[:n_judges]),
                                     tuple(pools.variants[:n_var]), reps)
                cost = _missing_cost(design, done, prices, n_sys, n_temp, positions)
                options.append({"items": n_items, "judges": n_judges, "variants": n_var, "replicates": reps,
                                "value": value, "cost_usd": cost, "reaches": target.met(value)})
                # the cheapest; at equal cost (designs inside what is collected) the more precise
                if target.met(value) and (best is None or cost < best[1]
                                          or (cost == best[1] and _better(target, value, best[2]))):
                    best = (design, cost, value)
                if best_value is None or _better(target, value, best_value[0]):
                    best_value = (value, design, cost)
    at = level_words(level)
    if best is not None:
        design, cost, value = best
        fits = cost <= budget_left
        doubt = ("" if level == PLAN_CONFIDENCE else
                 f"; no design the pools allow reaches it at the upper {PLAN_CONFIDENCE:.0%} bound, so the "
                 f"pilot cannot rule out a miss: judged {at}")
        message = (f"cheapest design reaching {target}: {len(design.items)} items x {len(design.judges)} judge(s) "
                   f"({', '.join(design.judges)}) x {len(design.variants)} variant(s) x {design.replicates} "
                   f"replicate(s): {QUANTITIES[target.quantity]} {value:.4g} predicted ({at}), "
                   f"${cost:.4f} to collect" + doubt
                   + ("" if fits else f", more than the ${budget_left:.4f} left in the budget"))
        return StagePlan(design if fits else None, value, cost, fits, message, options, level)
    value, design, cost = best_value
    hint = _what_would_help(vc, target, pool, len(by_price), len(pools.variants), pools.replicates, level)
    message = (f"{target} is out of reach with these pools: the best is {QUANTITIES[target.quantity]} {value:.4g} "
               f"({at}) with all {pool} items, {len(design.judges)} judge(s), {len(design.variants)} variant(s) "
               f"and {design.replicates} replicate(s) (${cost:.4f} more). {hint}")
    return StagePlan(None, value, cost, False, message, options, level)


def level_words(level: float) -> str:
    return "at the estimates" if level == 0.5 else f"upper {level:.0%} bound"


def _better(target: Target, a: float, b: float) -> bool:
    return a > b if target.quantity == "erho2" else a < b


def _missing_cost(design: StageDesign, done: list[StageDesign], prices: dict[str, float | tuple[float, float]],
                  n_sys: int, n_temp: int, positions: int) -> float:
    """Calls of ``design`` not in any design of ``done`` (the run database's union), priced per judge: a price, or
    (first replicate, each later one) where a replicate of a cached prompt costs less (:func:`_price_of`)."""
    total = 0.0
    for j in design.judges:
        want = {(i, v, r) for i in design.items for v in design.variants for r in range(1, design.replicates + 1)}
        for d in done:
            if j in d.judges:
                want -= {(i, v, r) for i in d.items for v in d.variants for r in range(1, d.replicates + 1)}
        total += n_sys * n_temp * positions * sum(_price_of(prices[j], r) for _, _, r in want)
    return total


def _price_of(price: float | tuple[float, float], replicate: int) -> float:
    """A judge's effective cost of a call: one price, or (first replicate, each later one)."""
    if isinstance(price, tuple):
        return price[0] if replicate == 1 else price[1]
    return price


def price_words(prices: dict[str, float | tuple[float, float]]) -> str | None:
    """What the plan says of the judges whose later replicates cost less than their first (a cached prompt)."""
    cheaper = [f"{j} ${p[0]:.6f} a first replicate, ${p[1]:.6f} a later one" for j, p in prices.items()
               if isinstance(p, tuple)]
    return ("designs priced at each call's effective cost: " + "; ".join(cheaper)) if cheaper else None


def _what_would_help(vc, target: Target, pool: int, n_judges: int, n_var: int, reps: int,
                     level: float = PLAN_CONFIDENCE) -> str:
    """The cheapest change beyond the pools, judged at the same planning bound: more judges, more items,
    or neither (the judges' disagreement sets a ceiling, sizing eq. 4)."""
    base = {"variant": n_var} if "variant" in vc.levels else {}
    parts = []
    if "judge" in vc.levels:
        more = next((j for j in range(n_judges + 1, n_judges + 21)
                     if target.met(bound(vc, target.quantity, {**base, "item": pool, "judge": j}, reps, level))), None)
        if more is not None:
            parts.append(f"With the {pool} items, {more} judges would reach it ({n_judges} are configured): add "
                         "judges to the panel.")
    if "item" in vc.levels:
        counts = {**base, **({"judge": n_judges} if "judge" in vc.levels else {})}
        items = _fewest_items(vc, target, counts, reps, 10**7, level)
        if items is not None:
            parts.append(f"With {n_judges} judge(s), {items} items would reach it (the pool has {pool}): add items.")
        else:
            parts.append(f"No number of items reaches it with {n_judges} judge(s): the judges' disagreement "
                         "about the systems sets a ceiling (sizing eq. 4).")
    return " ".join(parts) or "Lower the target."


def achieved(vc, target: Target, design: StageDesign, confidence: float = PLAN_CONFIDENCE) -> float:
    """The target quantity at the planning bound (see :func:`bound`) for ``design``, the last design
    collected in full. The data hold more (the pilot's extra judges, variants and replicates on its items),
    but not across every item: the levels of the unbalanced union would overstate its precision, while
    the full design is a floor under it."""
    counts = {"item": len(design.items), "judge": len(design.judges), "variant": len(design.variants)}
    return bound(vc, target.quantity, {f: n for f, n in counts.items() if f in vc.levels}, design.replicates,
                 confidence)
