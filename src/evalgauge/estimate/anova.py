"""Closed-form ANOVA (expected mean squares) estimation for balanced designs.

For any complete balanced design built from crossed and nested facets:

* the sum of squares of an effect with primary facets P and nesting facets Q is
  the Moebius inversion of marginal means over the subsets of P (Brennan 2001,
  sec. 3.4, the "T-value" rules), computed here on centred means for accuracy;
  its degrees of freedom are prod_{f in P}(n_f - 1) prod_{f in Q} n_f;
* in the random-effects model every component sigma^2_b of an effect b that
  contains effect a appears in E[MS_a] with coefficient N / (number of cells of
  b) (Cornfield-Tukey / Brennan's rules; TEE Table 6 and sizing App. D are two
  instances). Solving E[MS] = A sigma^2 with the observed mean squares gives the
  unbiased ANOVA estimates, negative values kept.

Fixed facets enter the G-study as in the unrestricted mixed model that lme4 fits
(TEE C.1): interactions of a fixed facet with random facets are random
components, and a term made only of fixed facets is reported as its sensitivity
index (1/L) sum_l (tau_l - tau_bar)^2 (TEE eq. C.4), the random-model estimate
scaled by df/L.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

import numpy as np
from scipy.linalg import solve_triangular

from ..components import Component, VarianceComponents
from ..design import RESIDUAL, CodedData, Design, Effect, code_data, infer_design
from ..errors import DesignError


@dataclass(frozen=True)
class AnovaTerm:
    """A row of the ANOVA table after pooling omitted effects."""

    name: str
    facets: frozenset[str]
    ss: float
    df: float
    coefficient: float  # N / cells of the term: its multiplier in every EMS containing it
    pooled: tuple[str, ...] = ()
    confounded_with: str | None = None

    @property
    def mean_square(self) -> float:
        return self.ss / self.df


def estimate_anova(data, design: Design | None = None, **design_options) -> VarianceComponents:
    """ANOVA variance components of a complete balanced block.

    ``data`` is a judgments table or data frame. Without a
    ``design`` one is inferred from the columns and ``design_options`` (see
    :func:`evalgauge.design.infer_design`).
    """
    if design is None:
        design = infer_design(data, **design_options)
    return anova_from_coded(code_data(data, design))


def anova_from_coded(coded: CodedData) -> VarianceComponents:
    """ANOVA estimates from coded data; the data must form a complete balanced block."""
    if not coded.is_complete_block():
        report = coded.balance()
        raise DesignError(
            f"{coded.source}: the ANOVA estimator needs a complete balanced block, and this is "
            f"{report.summary()} Drop the incomplete levels to get a complete block, or use REML, "
            "which handles unbalanced data."
        )
    cell_mean, ss_within = _cell_means(coded)
    return anova_from_cell_means(coded.design, cell_mean, int(coded.cell_count[0]), ss_within)


def anova_start(coded: CodedData, max_empty: float = 0.01) -> VarianceComponents | None:
    """Approximate ANOVA components of nearly complete data (at most ``max_empty`` of the cells empty, as
    with a few rows lost from a factorial): the closed form on the cell means, the empty cells filled with
    the grand mean and the replicates taken as the cells' median count. Not an estimator to report: a
    start for REML (from it the AI-Newton fit needs about half the evaluations), None when the data are
    further from a complete block or the design has fixed facets."""
    counts = coded.cell_count
    if counts.size == 0 or np.mean(counts == 0) > max_empty or coded.design.fixed:
        return None
    cell_mean, ss_within = _cell_means(coded)
    try:
        return anova_from_cell_means(coded.design, cell_mean, max(int(np.median(counts[counts > 0])), 1),
                                     ss_within)
    except (DesignError, np.linalg.LinAlgError, ValueError, ZeroDivisionError):
        return None


def _cell_means(coded: CodedData) -> tuple[np.ndarray, float]:
    """The dense array of cell means (an empty cell at the grand mean) and the within-cell sum of squares."""
    counts = coded.cell_count
    sums = np.bincount(coded.cell, weights=coded.y, minlength=counts.size)
    mean = np.where(counts > 0, sums / np.maximum(counts, 1), float(np.mean(coded.y)))
    within = coded.y - mean[coded.cell]
    return mean.reshape(coded.shape), float(within @ within)


def anova_from_cell_means(design: Design, cell_mean: np.ndarray, replicates: int,
                          ss_within: float) -> VarianceComponents:
    """The pure core: ANOVA components from the dense array of cell means.

    ``cell_mean`` has one axis per facet (nested facets indexed within their
    parent), ``replicates`` observations per cell, and ``ss_within`` is the sum
    of squared deviations of observations from their cell mean.
    """
    terms, grand_mean = anova_table(design, cell_mean, replicates, ss_within)
    ems = ems_matrix(terms, frozenset(design.fixed))
    ms = np.array([t.mean_square for t in terms])
    sigma2 = solve_triangular(ems, ms, lower=False)
    levels = dict(zip(design.names, cell_mean.shape, strict=True))
    fixed = set(design.fixed)
    components = []
    notes = []
    for term, est in zip(terms, sigma2, strict=True):
        kind = RESIDUAL if term.name == RESIDUAL else "random"
        value = float(est)
        if term.facets and term.facets <= fixed and term.name != RESIDUAL:
            # Sensitivity index over the L chosen levels (TEE eq. C.4): the
            # random-model estimate targets sum(tau^2)/df; rescale to /L.
            kind = "fixed"
            value *= term.df / _cells(term.facets, levels)
        facets = tuple(n for n in design.names if n in term.facets)
        components.append(Component(term.name, facets, value, term.df, term.mean_square,
                                    kind, term.confounded_with, term.pooled))
        if value < 0:
            notes.append(f"{term.name}: the ANOVA estimate is negative ({value:.4g}); it is kept in the "
                         "estimate and counted as 0 in shares (its true value is likely near zero).")
        if term.pooled:
            shown = ", ".join(term.pooled[:4]) + (f" and {len(term.pooled) - 4} more" if len(term.pooled) > 4 else "")
            notes.append(f"{term.name}: pooled with the omitted term(s) {shown}, which the model assumes are zero.")
        if term.confounded_with:
            notes.append(f"one observation per cell: the {term.confounded_with} interaction and the "
                         "residual are confounded and reported together as 'residual'; add replicates "
                         "to separate them (sizing paper sec. 3).")
    n_obs = int(np.prod(cell_mean.shape)) * replicates
    result = VarianceComponents(
        method="anova",
        n_obs=n_obs,
        grand_mean=grand_mean,
        components=tuple(components),
        levels={f: int(np.prod([levels[a] for a in (f, *design.ancestors(f))])) for f in design.names},
        replicates=replicates,
        object=design.object,
        fixed=design.fixed,
        nesting={f.name: f.parent for f in design.facets if f.parent},
        ems=ems,
        notes=tuple(notes),
        method_reason="complete balanced block: closed-form ANOVA (expected mean squares)",
    )
    cov = sampling_covariance(result)
    se = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    return replace(result, components=tuple(replace(c, se=float(v)) for c, v in zip(components, se, strict=True)),
                   covariance=cov)


def anova_bootstrap(result: VarianceComponents, n_boot: int = 1000, level: float = 0.95,
                    seed: int | None = None) -> VarianceComponents:
    """Parametric-bootstrap percentile intervals for ANOVA components, without resimulating data.

    In a balanced normal design each mean square is E[MS] chi^2_df / df,
    independently (sizing App. D); draws use E[MS] = A sigma2 at the estimates
    truncated at zero, and each draw's components are A^-1 MS* (rescaled for
    fixed-only terms). Terms of fixed facets are drawn as central chi-squares,
    an approximation to their noncentral law that the note records.
    """
    comps = result.components
    rng = np.random.default_rng(seed)
    scale = np.array([report_scale(c, result.levels, result.nesting) for c in comps])
    theta = np.array([c.variance_truncated for c in comps]) / scale
    expected = result.ems @ theta
    df = np.array([c.df for c in comps])
    ms = expected[None, :] * rng.chisquare(df, size=(n_boot, df.size)) / df
    draws = solve_triangular(result.ems, ms.T, lower=False).T * scale
    return _with_percentiles(result, draws, level, {"method": "parametric bootstrap (mean squares)",
                                                    "level": level, "resamples": n_boot, "seed": seed,
                                                    "failed": 0})


def _with_percentiles(result: VarianceComponents, draws: np.ndarray, level: float, info: dict) -> VarianceComponents:
    lo, hi = np.nanquantile(draws, [(1 - level) / 2, (1 + level) / 2], axis=0)
    comps = tuple(replace(c, ci_low=float(a), ci_high=float(b)) for c, a, b in zip(result.components, lo, hi,
                                                                                   strict=True))
    return replace(result, components=comps, intervals=info, draws=draws)


def anova_table(design: Design, cell_mean: np.ndarray, replicates: int,
                ss_within: float) -> tuple[list[AnovaTerm], float]:
    """Sums of squares, df and EMS coefficients of the model's terms, after pooling."""
    names = design.names
    shape = cell_mean.shape
    levels = dict(zip(names, shape, strict=True))
    n_obs = int(np.prod(shape)) * replicates
    grand_mean = float(cell_mean.mean())
    means = _MarginalMeans(cell_mean - grand_mean, names)

    every = design.all_effects()
    included = design.model_effects(every)
    included_sets = [frozenset(e.facets) for e in included]
    ss: dict[frozenset[str], float] = {}
    df: dict[frozenset[str], float] = {}
    for e in every:
        key = frozenset(e.facets)
        ss[key] = (n_obs / _cells(key, levels)) * means.sum_of_squares(e)
        df[key] = float(np.prod([levels[f] - 1 for f in e.primary]) * np.prod([levels[f] for f in e.nesting]))

    host_of = {frozenset(e.facets): _host(e, included_sets) for e in every if frozenset(e.facets) not in included_sets}
    top = frozenset(names)
    terms = []
    for key, effect in zip(included_sets, included, strict=True):
        pooled = [o for o, h in host_of.items() if h == key]
        pooled_names = tuple(":".join(n for n in names if n in o) for o in sorted(pooled, key=_sort_key(names)))
        total_ss = ss[key] + sum(ss[o] for o in pooled)
        total_df = df[key] + sum(df[o] for o in pooled)
        if key == top and replicates == 1:
            terms.append(AnovaTerm(RESIDUAL, key, total_ss, total_df, 1.0, pooled_names,
                                   confounded_with=effect.name))
        else:
            terms.append(AnovaTerm(effect.name, key, total_ss, total_df,
                                   n_obs / _cells(key, levels), pooled_names))
    if replicates > 1:
        terms.append(AnovaTerm(RESIDUAL, top | {RESIDUAL}, ss_within, float(n_obs - np.prod(shape)), 1.0))
    if len(terms) < 2:
        raise DesignError(
            "nothing to estimate: with one observation per cell the only term is the residual. "
            "Add replicates or another facet."
        )
    return terms, grand_mean


def ems_matrix(terms: list[AnovaTerm], fixed: frozenset[str] = frozenset()) -> np.ndarray:
    """A[a, b] = coefficient of sigma^2_b in E[MS_a]: nonzero when b contains a.

    Terms are ordered so that a containing term comes later, so A is upper
    triangular. The residual (facets plus the replicate) contains every term.
    A term made only of fixed facets is a sum-to-zero quadratic form, so it
    appears in its own mean square only (Cornfield-Tukey: the factor
    1 - n/N vanishes for a fixed facet); random terms that contain fixed
    facets appear in every term they contain (the unrestricted model lme4 fits).
    """
    k = len(terms)
    a = np.zeros((k, k))
    for i, ti in enumerate(terms):
        for j, tj in enumerate(terms):
            fixed_only = tj.name != RESIDUAL and tj.facets <= fixed
            if i == j or (not fixed_only and (ti.facets <= tj.facets or tj.name == RESIDUAL)):
                a[i, j] = tj.coefficient
    return a


def report_scale(component: Component, levels: dict[str, int], nesting: dict[str, str] | None = None) -> float:
    """Reported value / random-model parameter: df/L for fixed-only terms (TEE C.4), else 1.

    L is the number of distinct levels of the term: the product of the total
    level counts of its facets that are not a parent of another of its facets.
    """
    if component.kind != "fixed":
        return 1.0
    parents = {(nesting or {}).get(f) for f in component.facets}
    return component.df / int(np.prod([levels[f] for f in component.facets if f not in parents]))


def sampling_covariance(result: VarianceComponents, sigma2: dict[str, float] | None = None) -> np.ndarray:
    """Covariance matrix of the reported ANOVA estimates under normality.

    Evaluated at ``sigma2`` (true components, keyed by name) or, by default, at
    the estimates themselves (negative values truncated at zero). In a balanced
    normal design the mean squares are independent with
    SS_a / E0_a ~ noncentral chi^2(df_a, lambda_a), where the noncentrality is
    nonzero only for terms made of fixed facets; so
    Var(MS_a) = 2 (E0_a^2 + 2 E0_a q_a) / df_a with q_a the fixed part of E[MS_a]
    (Searle, Casella & McCulloch 1992, sec. 4.5), and the estimates
    A^{-1} MS have covariance A^{-1} diag(Var MS) A^{-T}, rescaled to the
    reported units.
    """
    comps = result.components
    ems = result.ems
    if ems is None:
        raise DesignError("sampling covariance needs the expected-mean-square matrix of an ANOVA fit.")
    scale = np.array([report_scale(c, result.levels, result.nesting) for c in comps])
    if sigma2 is None:
        values = np.array([c.variance_truncated for c in comps])
    else:
        values = np.array([sigma2[c.name] for c in comps])
    theta = values / scale
    expected = ems @ theta
    q = np.array([ems[i, i] * theta[i] if c.kind == "fixed" else 0.0 for i, c in enumerate(comps)])
    e0 = expected - q
    df = np.array([c.df for c in comps])
    var_ms = 2.0 * (e0**2 + 2.0 * e0 * q) / df
    inv = np.linalg.inv(ems) * scale[:, None]
    return inv @ np.diag(var_ms) @ inv.T


class _MarginalMeans:
    """Marginal means of a centred cell-mean array, cached, with kept dims for broadcasting."""

    def __init__(self, centred: np.ndarray, names: tuple[str, ...]):
        self._axis = {n: k for k, n in enumerate(names)}
        self._cache: dict[frozenset[str], np.ndarray] = {frozenset(names): centred}

    def mean(self, facets: frozenset[str]) -> np.ndarray:
        if facets not in self._cache:
            # from the smallest cached margin that holds these facets: in a complete block the mean of means is
            # the mean, and a margin is far smaller than the cells
            source = min((k for k in self._cache if facets <= k), key=lambda k: self._cache[k].size)
            drop = tuple(self._axis[n] for n in source - facets)
            self._cache[facets] = self._cache[source].mean(axis=drop, keepdims=True)
        return self._cache[facets]

    def sum_of_squares(self, effect: Effect) -> float:
        """The sum over the effect's levels of its squared estimated level effects: the Moebius inversion over
        its primary facets, accumulated in place a slab at a time (the highest interaction spans every cell: a
        slab that stays in the processor's cache instead of temporaries the size of the cell array)."""
        nesting = frozenset(effect.nesting)
        primary = effect.primary
        top = self.mean(nesting | frozenset(primary))
        signed = [(self.mean(nesting | frozenset(sub)), (len(primary) - r) % 2 == 0)
                  for r in range(len(primary)) for sub in itertools.combinations(primary, r)]
        # slabs along the first axis with more than one level (the rest of the axes whole in each slab)
        axis = next((k for k, size in enumerate(top.shape) if size > 1), 0)
        step = max(1, _SLAB * top.shape[axis] // max(1, top.size))
        total = 0.0
        for start in range(0, top.shape[axis], step):
            slab = (slice(None),) * axis + (slice(start, start + step),)
            out = np.array(top[slab], dtype=np.float64, copy=True)
            for term, add in signed:
                (np.add if add else np.subtract)(out, term if term.shape[axis] == 1 else term[slab], out=out)
            flat = out.reshape(-1)
            total += float(flat @ flat)
        return total


#: cells per slab of the in-place effect sums (2 MB of doubles)
_SLAB = 1 << 18


def _cells(facets: frozenset[str], levels: dict[str, int]) -> int:
    return int(np.prod([levels[f] for f in facets if f in levels]))


def _host(effect: Effect, included: list[frozenset[str]]) -> frozenset[str]:
    """The included term an omitted effect pools into: the unique smallest superset.

    Pooling is unbiased only when every included term containing the omitted
    effect also contains the host (their EMS then coincide under the reduced
    model), so anything else is refused with the terms to add.
    """
    key = frozenset(effect.facets)
    supersets = [s for s in included if key < s]
    smallest = min(len(s) for s in supersets)
    minimal = [s for s in supersets if len(s) == smallest]
    host = minimal[0]
    if len(minimal) > 1 or not all(host <= s for s in supersets):
        options = " or ".join(":".join(sorted(s)) for s in minimal)
        raise DesignError(
            f"the omitted term {effect.name} cannot be pooled into a single term ({options} both contain it); "
            "include it in the model, or omit the terms that contain it too."
        )
    return host


def _sort_key(names: tuple[str, ...]):
    order = {n: k for k, n in enumerate(names)}
    return lambda s: (len(s), sorted(order[n] for n in s))
