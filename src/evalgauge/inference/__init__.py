"""Honest intervals: the CI of theta-hat from the components beside the naive one, and
bootstrap intervals for every derived number.

* :func:`theta_interval`: theta-hat +- t_df sqrt(Var(theta-hat)) with Var(theta-hat)
  from the D-study at the observed design (TEE eq. 3) and Satterthwaite degrees of
  freedom from the estimates' sampling covariance, beside the naive s/sqrt(N)
  interval that counts item sampling only, and their SE ratio (TEE Table 14).
* :func:`bootstrap_derived`: percentile intervals for E rho^2, Phi, MDD, the
  single-judge ceiling and its MDD floor, and the judges needed for a target, from
  the parametric-bootstrap draws of the components (sizing Table 1 and App. D),
  with P(ceiling >= 0.8).
* :func:`single_run_interval`: one model's run (one system, one judge, one prompt, one call per
  item: an lm-eval or Inspect log), where only items vary: the item-sampling interval plus any
  component the user states, with what one run cannot measure said.
* :func:`score_bounds`, :func:`bounded_interval`: intervals kept inside a bounded score's range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from scipy.special import ndtri, stdtrit

from .. import dstudy, vocabulary
from ..components import VarianceComponents
from ..errors import DesignError
from ..results import Result, json_safe

#: the method of an interval that is estimate +- q SE
NORMAL = "normal"


@dataclass(frozen=True)
class ThetaInterval(Result):
    """theta-hat with the full (TEE) interval and the naive one."""

    estimate: float
    se: float
    df: float
    low: float
    high: float
    naive_se: float
    naive_low: float
    naive_high: float
    level: float
    sampling_facet: str
    #: the range a mean of the scores cannot leave (:func:`score_bounds`), and how the intervals were kept
    #: inside it (:func:`bounded_interval`; "normal" when estimate +- q SE did not reach past it)
    scale: tuple[float, float] | None = None
    method: str = NORMAL

    @property
    def se_ratio(self) -> float:
        """Full SE over naive SE: how much the naive interval understates the error."""
        return self.se / self.naive_se if self.naive_se > 0 else math.inf

    def to_dict(self) -> dict:
        out = {"estimate": self.estimate, "se": self.se, "df": self.df, "low": self.low, "high": self.high,
               "naive_se": self.naive_se, "naive_low": self.naive_low, "naive_high": self.naive_high,
               "se_ratio": self.se_ratio, "level": self.level, "naive_counts": self.sampling_facet,
               "method": self.method}
        if self.scale:
            out["scale"] = list(self.scale)
        return json_safe(out)


def theta_hat(vc: VarianceComponents) -> float:
    """The estimate of theta: the grand mean (ANOVA, balanced) or the REML marginal mean over the fixed levels."""
    if vc.reml and "marginal_mean" in vc.reml and math.isfinite(vc.reml["marginal_mean"]):
        return float(vc.reml["marginal_mean"])
    return float(vc.grand_mean)


def satterthwaite_df(vc: VarianceComponents, coefficients: np.ndarray) -> float:
    """Degrees of freedom of the estimate c' sigma2: 2 (c' sigma2)^2 / Var(c' sigma2-hat) (Satterthwaite 1946).

    Var(c' sigma2-hat) = c' Cov c with the estimates' sampling covariance
    (ANOVA: the chi-square laws of the mean squares; REML: inverse average
    information). Components without a sampling variance (fixed-effect
    sensitivities, boundary estimates) count as known.
    """
    cov = vc.covariance
    if cov is None:
        return math.inf
    known = ~np.isfinite(np.diag(cov))
    c = np.where(known, 0.0, coefficients)
    cov = np.where(np.isfinite(cov), cov, 0.0)
    var = float(c @ cov @ c)
    value = float(coefficients @ np.clip(vc.values, 0.0, None))  # projections truncate at zero
    return math.inf if var <= 0 else 2.0 * value**2 / var


def theta_interval(vc: VarianceComponents, level: float = 0.95, sampling_facet: str | None = None,
                   bounds: tuple[str, float, float] | None = None, **project_kw) -> ThetaInterval:
    """The full CI of theta-hat at the observed design, with Satterthwaite df, beside the naive CI.

    The naive variance keeps only the terms that contain the sampling facet
    (default: item, else the object of measurement): what s/sqrt(N) over item
    means, or a bootstrap over items, estimates. Var(theta-hat) at the observed
    design equals the squared SE of the grand mean from the fit (tested). With ``bounds`` (a share in 0-1, a
    1-5 rating: :func:`score_bounds`) both intervals stay inside them (:func:`bounded_interval`).
    """
    facet = sampling_facet or default_sampling_facet(vc)
    if facet not in vc.levels:
        raise DesignError(f"naive interval: '{facet}' is not a facet; name the sampled facet (usually the items).")
    projection = dstudy.project(vc, object="", **project_kw)
    counts = projection.counts
    coef = np.array([
        1.0 / dstudy.divisor(c, vc, counts, projection.replicates) if c.name in projection.contributions else 0.0
        for c in vc.components
    ])
    df = satterthwaite_df(vc, coef)
    q = float(ndtri(0.5 + level / 2) if not math.isfinite(df) else stdtrit(df, 0.5 + level / 2))
    est = theta_hat(vc)
    se = projection.se
    naive_var = sum(projection.contributions[c.name] for c in vc.components
                    if c.name in projection.contributions and facet in dstudy.term_facets(c, vc))
    naive_se = math.sqrt(max(naive_var, 0.0))
    z = float(ndtri(0.5 + level / 2))
    low, high, method = _inside(est, se, q, bounds)
    naive_low, naive_high, _ = _inside(est, naive_se, z, bounds)
    return ThetaInterval(est, se, df, low, high, naive_se, naive_low, naive_high, level, facet,
                         (bounds[1], bounds[2]) if bounds else None, method)


def _inside(est: float, se: float, q: float, bounds) -> tuple[float, float, str]:
    """est +- q SE kept inside ``bounds`` (:func:`keep_inside`), with the method."""
    (low,), (high,), leaves = keep_inside(np.array([est]), np.array([est - q * se]), np.array([est + q * se]), bounds)
    if not leaves[0]:
        return float(low), float(high), NORMAL
    how = "logit" if bounds[0] == "proportion" else "clipped"
    return float(low), float(high), f"{how} (the normal interval left {bounds[1]:g}-{bounds[2]:g})"


def keep_inside(est: np.ndarray, low: np.ndarray, high: np.ndarray, bounds):
    """(low, high, leaves): each interval around ``est`` as it is, or, only where it leaves ``bounds``,
    :func:`bounded_interval`'s from the same half-width (an interval inside the scale is the plain one)."""
    low, high = np.asarray(low, dtype=float), np.asarray(high, dtype=float)
    if bounds is None:
        return low, high, np.zeros(low.shape, dtype=bool)
    leaves = np.isfinite(low) & np.isfinite(high) & ((low < bounds[1]) | (high > bounds[2]))
    if leaves.any():
        new_low, new_high, _ = bounded_interval(np.asarray(est, dtype=float), (high - low) / 2, np.ones_like(low),
                                                bounds)
        low, high = np.where(leaves, new_low, low), np.where(leaves, new_high, high)
    return low, high, leaves


def default_sampling_facet(vc: VarianceComponents) -> str | None:
    """The facet a naive interval resamples: the items (by their usual column names), else the object."""
    return vc.role("item") or vc.object


@dataclass(frozen=True)
class ObjectInterval(Result):
    """The error of one object's score (a system's benchmark score) at the observed design.

    ``se`` is sqrt(sigma2_Delta), the absolute error (Brennan 2001 eq. 4.1.9; TEE eq. 3 with
    the object held fixed); ``naive_se`` keeps only its terms that contain the sampling facet,
    what a bootstrap over one system's items estimates."""

    object: str
    se: float
    df: float
    naive_se: float
    level: float
    sampling_facet: str

    @property
    def se_ratio(self) -> float:
        return self.se / self.naive_se if self.naive_se > 0 else math.inf

    def half_widths(self) -> tuple[float, float]:
        """(full, naive) half-widths: t_df SE and z SE."""
        p = 0.5 + self.level / 2
        q = float(ndtri(p) if not math.isfinite(self.df) else stdtrit(self.df, p))
        return q * self.se, float(ndtri(p)) * self.naive_se

    def to_dict(self) -> dict:
        full, naive = self.half_widths()
        out = {"object": self.object, "se": self.se, "df": self.df, "naive_se": self.naive_se,
               "se_ratio": self.se_ratio, "level": self.level, "naive_counts": self.sampling_facet,
               "half_width": full, "naive_half_width": naive}
        return json_safe(out)


def object_interval(vc: VarianceComponents, level: float = 0.95, sampling_facet: str | None = None,
                    object: str | None = None) -> ObjectInterval:  # noqa: A002 - G-theory word
    """The full and naive error of one object's score at the observed design.

    Full: sigma2_Delta = sum of sigma2_k / d_k over the components outside the object's
    universe score (Brennan eq. 4.1.9), with Satterthwaite df; naive: the terms that contain
    the sampling facet (default: the items). For a system scored by judges the naive
    interval misses sigma2_j / n_j and sigma2_sj / n_j, which do not shrink with more items.
    """
    obj = object or vc.object
    if not obj or obj not in vc.levels:
        raise DesignError("an object's interval needs an object of measurement (for example the system).")
    facet = sampling_facet or default_sampling_facet(vc)
    if facet not in vc.levels or facet == obj:
        raise DesignError(f"naive interval: name the sampled facet (usually the items), not '{facet}'.")
    projection = dstudy.project(vc, object="")
    _, divisors = dstudy.absolute_error_divisors(vc, obj, projection.counts, projection.replicates)
    coef = np.array([1.0 / divisors[c.name] if c.name in divisors else 0.0 for c in vc.components])
    terms = {c.name: c.variance_truncated * k for c, k in zip(vc.components, coef, strict=True) if k}
    se = math.sqrt(max(sum(terms.values()), 0.0))
    naive = sum(v for name, v in terms.items() if facet in dstudy.term_facets(vc[name], vc))
    return ObjectInterval(obj, se, satterthwaite_df(vc, coef), math.sqrt(max(naive, 0.0)), level, facet)


# ---------------------------------------------------------------------------
# Bootstrap of derived numbers
# ---------------------------------------------------------------------------

def _with_values(vc: VarianceComponents, values: np.ndarray) -> VarianceComponents:
    comps = tuple(replace(c, variance=float(v)) for c, v in zip(vc.components, values, strict=True))
    return replace(vc, components=comps, covariance=None, draws=None)


def linear_coefficients(vc: VarianceComponents, quantity: str, **project_kw) -> np.ndarray:
    """c with quantity = c' sigma2 at a fixed design (every error variance is linear in the components)."""
    k = len(vc.components)
    out = np.zeros(k)
    for j in range(k):
        unit = np.zeros(k)
        unit[j] = 1.0
        p = dstudy.project(_with_values(vc, unit), **project_kw)
        if quantity == "var_abs":
            out[j] = sum(p.contributions.values())
        else:
            s2p, delta, big = dstudy.object_errors(_with_values(vc, unit), p.object, p.counts, p.replicates,
                                                    project_kw.get("condition_on", ()))
            out[j] = {"sigma2_object": s2p, "sigma2_delta": delta, "sigma2_Delta": big}[quantity]
    return out


def bootstrap_derived(vc: VarianceComponents, draws: np.ndarray | None = None, *, facet: str = "judge",
                      target_erho2: float = 0.8, level: float = 0.95, counts=None, replicates=None,
                      threshold: float = 0.8) -> pd.DataFrame:
    """Percentile intervals of the derived numbers over parametric-bootstrap draws of the components.

    Rows: erho2, phi, mdd95, sigma2_delta and var_abs at the design; the
    single-``facet`` ceiling and MDD floor (sizing eq. 4); ``facet``s needed
    for ``target_erho2`` at the design's other counts (infinite when the draw's
    ceiling lies below the target); and P(ceiling >= threshold) as an estimate
    with no interval (sizing Table 1). Everything is linear in the components at
    a fixed design, so the draws are processed as one matrix product.
    """
    draws = vc.draws if draws is None else draws
    if draws is None:
        raise DesignError("no bootstrap draws: estimate the components with n_boot > 0 (`n_boot`).")
    if not vc.object:
        raise DesignError("the derived numbers need an object of measurement.")
    kw = {"counts": counts, "replicates": replicates}
    big = 1e15
    s2p_c = linear_coefficients(vc, "sigma2_object", **kw)
    delta_c = linear_coefficients(vc, "sigma2_delta", **kw)
    abs_c = linear_coefficients(vc, "sigma2_Delta", **kw)
    var_c = linear_coefficients(vc, "var_abs", **kw)
    base = dstudy.project(vc, **kw).counts
    ceil_counts = {f: (1.0 if f == facet else (n if f in vc.fixed or f == vc.object else big))
                   for f, n in base.items()}
    ceil_c = linear_coefficients(vc, "sigma2_delta", counts=ceil_counts, replicates=big)
    one = linear_coefficients(vc, "sigma2_delta", counts={**base, facet: 1.0}, replicates=replicates)
    inf = linear_coefficients(vc, "sigma2_delta", counts={**base, facet: big}, replicates=replicates)

    def compute(values: np.ndarray) -> dict[str, np.ndarray]:
        values = np.clip(np.atleast_2d(values), 0.0, None)  # as the D-study does
        s2p = np.clip(values @ s2p_c, 0.0, None)
        delta = np.clip(values @ delta_c, 0.0, None)
        big_delta = np.clip(values @ abs_c, 0.0, None)
        ceil_delta = np.clip(values @ ceil_c, 0.0, None)
        a = np.clip(values @ inf, 0.0, None)
        b = np.clip(values @ one - a, 0.0, None)
        allowed = s2p * (1 / target_erho2 - 1) - a
        with np.errstate(divide="ignore", invalid="ignore"):
            need = np.where(allowed > 0, np.ceil(np.maximum(b / allowed, 1.0) - 1e-12), np.inf)
            return {
                "erho2": s2p / (s2p + delta),
                "phi": s2p / (s2p + big_delta),
                "mdd95": dstudy.Z95 * np.sqrt(2 * delta),
                "sigma2_delta": delta,
                "var_abs": np.clip(values @ var_c, 0.0, None),
                "ceiling": s2p / (s2p + ceil_delta),
                "mdd_floor": dstudy.Z95 * np.sqrt(2 * ceil_delta),
                f"{facet}s_needed": need,
            }

    point = {k: float(v[0]) for k, v in compute(vc.values).items()}
    boot = compute(draws[np.all(np.isfinite(draws), axis=1)])
    lo_q, hi_q = (1 - level) / 2, (1 + level) / 2
    rows = []
    for name, values in boot.items():
        # inverted-CDF quantiles return draws, so an unreachable (infinite) requirement stays infinite
        low, high = np.quantile(values, [lo_q, hi_q], method="inverted_cdf")
        rows.append({"quantity": name, "estimate": point[name], "low": float(low), "high": float(high),
                     "resamples": int(values.size)})
    rows.append({"quantity": f"P(ceiling >= {threshold:g})", "estimate": float(np.mean(boot["ceiling"] >= threshold)),
                 "low": math.nan, "high": math.nan, "resamples": int(boot["ceiling"].size)})
    return pd.DataFrame(rows)


def score_bounds(y: np.ndarray) -> tuple[str, float, float] | None:
    """The range a mean of these scores cannot leave: ("proportion", 0, 1) for scores within 0-1 (binary
    verdicts, win rates, probabilities), ("scale", min, max) for whole-number ratings (the observed ends of
    the scale), None for unbounded scores."""
    y = y[np.isfinite(y)]
    if y.size == 0:
        return None
    if y.min() >= 0 and y.max() <= 1:
        return ("proportion", 0.0, 1.0)
    if np.all(y == np.round(y)) and np.unique(y).size <= 11:
        return ("scale", float(y.min()), float(y.max()))
    return None


def cells_bounds(cells) -> tuple[str, float, float] | None:
    """:func:`score_bounds` from cell statistics alone (an engine's reduction: n, sum and sum of squares per
    cell): 0-1 scores hold y^2 = y, so every cell's sum of squares equals its sum exactly when every score is
    0 or 1."""
    total, squares = np.asarray(cells["sum"], dtype=float), np.asarray(cells["sum_squares"], dtype=float)
    n = np.asarray(cells["n"], dtype=float)
    if total.size and np.allclose(squares, total, rtol=1e-12, atol=1e-9) and (total >= 0).all() and (total <= n).all():
        return ("proportion", 0.0, 1.0)
    return None


def bounded_interval(est: np.ndarray, se: np.ndarray, quantile: np.ndarray,
                     bounds: tuple[str, float, float] | None) -> tuple[np.ndarray, np.ndarray, str | None]:
    """(low, high, what was done) of est +- quantile x se, kept inside the scores' range: for proportions the
    interval of the logit, back-transformed (the delta method, se / (p (1 - p)) on the logit scale), so it
    stays within 0-1 and is asymmetric near the ends; for a rating scale the interval clipped to its ends."""
    low, high = est - quantile * se, est + quantile * se
    if bounds is None:
        return low, high, None
    kind, lo, hi = bounds
    if kind == "proportion":
        p = np.clip(est, 1e-6, 1 - 1e-6)
        logit, s = np.log(p / (1 - p)), se / (p * (1 - p))
        return (1 / (1 + np.exp(-(logit - quantile * s))), 1 / (1 + np.exp(-(logit + quantile * s))),
                "each proportion's interval is the interval of its logit, back-transformed, so it stays within "
                "0-1 (asymmetric near the ends).")
    clipped = bool(np.any(low < lo) or np.any(high > hi))
    return (np.clip(low, lo, hi), np.clip(high, lo, hi),
            f"intervals reaching past the scale's observed ends ({lo:g}-{hi:g}) are clipped to them." if clipped
            else None)


#: what one level of a facet hides, and the terms a user may state for it (--assume)
_HIDDEN = (
    ("judge", "judge", "the judge's own leniency and its item-by-item disagreement are", ("judge", "item:judge")),
    ("variant", "prompt variant", "the prompt wording's effect and its item-by-item interaction are",
     ("variant", "item:variant")),
    ("replicate", "run", "the run-to-run noise of repeated calls is", ("replicate",)),
)


@dataclass(frozen=True)
class SingleRunInterval(Result):
    """One run's mean with its interval: item sampling plus the stated components (``assumed``)."""

    mean: float
    n: int
    sd: float
    se_items: float
    se: float
    df: float
    low: float
    high: float
    level: float
    item: str
    assumed: dict
    unmeasured: tuple[str, ...]
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return json_safe({"single_run": {
            "mean": self.mean, "n": self.n, "sd": self.sd, "se_items": self.se_items, "se": self.se, "df": self.df,
            "low": self.low, "high": self.high, "level": self.level, "item": self.item, "assumed": self.assumed,
            "unmeasured": list(self.unmeasured), "notes": list(self.notes)}})


def single_run_interval(y: np.ndarray, item: str, *, level: float = 0.95, assumed: dict[str, float] | None = None,
                        one_level: dict[str, str] | None = None) -> SingleRunInterval:
    """The honest interval of one run's mean score over N items, one call each (TEE eq. 3 at n = 1 of every
    facet but the items): Var(theta-hat) = s^2 / N for the items (s^2 holds sigma2_item and the call's own
    noise, which one call per item cannot tell apart) plus each stated component sigma2_t divided by N when
    the term contains the item facet and by 1 otherwise (one judge, one prompt, one run). The df are
    Satterthwaite's with the stated values known: (N - 1) (SE^2 / (s^2 / N))^2. ``one_level``: the facets
    held at one level ({column: level}), whose variance the data cannot show."""
    y = np.asarray(y, dtype=float)
    y = y[np.isfinite(y)]
    n = int(y.size)
    if n < 2:
        raise DesignError(f"one run with {n} scored {item}(s): an interval needs at least two.")
    assumed = dict(assumed or {})
    for name, value in assumed.items():
        if not (math.isfinite(value) and value >= 0):
            raise DesignError(f"an assumed variance must be a non-negative number, not {value} ({name}).")
    sd = float(np.std(y, ddof=1))
    var_items = sd**2 / n
    var_assumed = sum(v / (n if item in name.split(":") else 1.0) for name, v in assumed.items())
    se = math.sqrt(var_items + var_assumed)
    df = (n - 1) * (se**2 / var_items) ** 2 if var_items > 0 else math.inf
    q = float(stdtrit(df, 0.5 + level / 2)) if math.isfinite(df) else float(ndtri(0.5 + level / 2))
    mean = float(y.mean())
    low, high, how = bounded_interval(np.array([mean]), np.array([se]), np.array([q]), score_bounds(y))
    unmeasured = []
    for role, what, hides, terms in _HIDDEN:
        col = vocabulary.facet_with_role(role, one_level or {})
        if col is not None and not any(t in assumed for t in terms):
            unmeasured.append(f"one {what} ({col} = {one_level[col]!r}): {hides} part of this score and not in "
                              f"the interval; state it with " + " ".join(f"--assume {t}=VARIANCE" for t in terms)
                              + " (from a pilot with more levels, or published components)")
    notes = [how] if how else []
    if assumed:
        notes.append("assumed (not estimated): " + ", ".join(f"{k} = {v:g}" for k, v in assumed.items()))
    return SingleRunInterval(mean, n, sd, math.sqrt(var_items), se, df, float(low[0]), float(high[0]), level, item,
                             assumed, tuple(unmeasured), tuple(notes))


@dataclass(frozen=True)
class LikelihoodRatio(Result):
    """A likelihood-ratio test of one variance component against zero (TEE C.6): the REML criteria (-2 log
    restricted likelihood) of the model with and without the term, ``statistic`` their difference, and
    ``p`` under the boundary's 50:50 mixture of chi-square(0) and chi-square(1) (Self & Liang 1987: a variance
    tested at zero sits on the edge of its space, where the plain chi-square(1) p-value is twice too large)."""

    term: str
    criterion_full: float
    criterion_reduced: float
    statistic: float
    p: float
    p_chi2: float
    formula_full: str
    formula_reduced: str

    @classmethod
    def of(cls, term: str, full: float, reduced: float, formula_full: str, formula_reduced: str):
        from scipy.stats import chi2

        stat = max(reduced - full, 0.0)  # the reduced model cannot fit better; rounding can say otherwise
        p_chi2 = float(chi2.sf(stat, 1))
        return cls(term, full, reduced, stat, 1.0 if stat == 0 else 0.5 * p_chi2, p_chi2, formula_full,
                   formula_reduced)

    def to_dict(self) -> dict:
        return json_safe(dict(self.__dict__))

    def __str__(self) -> str:
        return (f"LRT of {self.term}: REML criterion {self.criterion_reduced:.4f} without it against "
                f"{self.criterion_full:.4f} with it, statistic {self.statistic:.4g}, p = {self.p:.3g} (50:50 mixture "
                f"of chi-square(0) and chi-square(1); plain chi-square(1): {self.p_chi2:.3g})")
