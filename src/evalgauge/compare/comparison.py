"""The comparison itself: the estimates and their covariance, every pair's marginal and simultaneous test, the
leaderboard with each system's own interval and rank sets, and what cannot be said (see the package docstring)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import special  # not scipy.stats: the same functions, without its second of import

from .. import vocabulary
from ..components import VarianceComponents
from ..errors import DesignError
from ..inference import bounded_interval, satterthwaite_df, score_bounds
from ..inference.multiplicity import draws, holm, letters, rank_sets
from ..inference.mvt import simultaneous_critical
from ..results import Result, json_safe
from .adjacent import adjacent_pairs
from .covariance import mean_covariance
from .estimability import confounded_pairs, not_estimable, unmeasured
from .gls import GlsEstimates, adjusted_estimates, balanced
from .pair_gstudy import item_bootstrap, with_pair_gstudies

DDF_METHODS = vocabulary.DDF_METHODS
MIN_DF = vocabulary.MIN_DF


@dataclass(frozen=True)
class Comparison(Result):
    """Systems and pairs, JSON-ready (``to_dict``) and tidy (``systems``, ``pairs`` frames)."""

    object: str
    level: float
    systems: pd.DataFrame
    pairs: pd.DataFrame
    critical_simultaneous: float
    n_boot: int
    method: str
    notes: tuple[str, ...] = ()
    sentences: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict:
        systems = self.systems.rename(columns={"object": "system"})
        return json_safe({
            "object": self.object, "level": self.level, "method": self.method,
            "critical_simultaneous": self.critical_simultaneous, "bootstrap": self.n_boot,
            "systems": systems.to_dict(orient="records"), "pairs": self.pairs.to_dict(orient="records"),
            "notes": list(self.notes), "sentences": list(self.sentences), **self.extra,
        })

    def to_frame(self, which: str = "systems") -> pd.DataFrame:
        """The tidy table of the ``systems`` (one row each) or of the ``pairs`` (one row per pair)."""
        if which not in ("systems", "pairs"):
            raise DesignError(f"which must be 'systems' or 'pairs', not {which!r}.")
        return (self.systems if which == "systems" else self.pairs).copy()


@dataclass
class _Estimates:
    """The systems' estimates and their covariance: raw means, or GLS estimates where the design asks for them."""

    systems: list[str]
    mats: np.ndarray  # terms x S x S: Cov(raw means) = sum_t sigma2_t mats[t]
    raw_means: np.ndarray
    n_s: np.ndarray
    cov_raw: np.ndarray
    means: np.ndarray
    cov: np.ndarray
    gls: GlsEstimates | None
    method: str


@dataclass
class _Pairs:
    """Every pair, the higher estimate first: indices into the systems and the terms carrying each difference."""

    a: np.ndarray
    b: np.ndarray
    coef: np.ndarray  # terms x pairs
    frame: pd.DataFrame


def compare(frame: pd.DataFrame, vc: VarianceComponents, *, score: str = "score", level: float = 0.95,
            n_boot: int = 2000, seed: int | None = 0, pair_gstudies: str = "adjacent",
            facets: list[str] | None = None, design=None, ddf: str = "satterthwaite") -> Comparison:
    """Compare every pair of objects (systems) of a fitted design. See the package docstring.

    ``frame`` holds the judgments (the object, facet columns and ``score``) the components ``vc`` were
    fitted on. When the systems were not all scored on the same cells (an incomplete design) and the
    ``design`` is given, each system's estimate is adjusted for who scored it and on what (GLS with the
    system as a fixed effect, :func:`evalgauge.compare.gls.adjusted_estimates`: estimates, SEs and df as lme4 +
    emmeans + lmerTest give them); on a complete balanced design it is the raw mean, which then equals the GLS
    estimate. ``n_boot`` draws set the rank sets (from the joint law of the estimates) and the naive item
    bootstrap; ``pair_gstudies``: "adjacent" (neighbours in the ranking), "all" or "none". ``ddf``:
    "satterthwaite" (lmerTest's, the default) or "kenward-roger" (pbkrtest's adjusted covariance and df; always
    through the GLS fit, up to :data:`evalgauge.inference.kenward_roger.MAX_ROWS` judgments).
    """
    obj = _check(vc, level, n_boot, ddf, design)
    frame = frame.assign(__y=pd.to_numeric(frame[score], errors="coerce")).dropna(subset=["__y"])
    rng = np.random.default_rng(seed)
    notes: list[str] = []
    if vc.estimand == "finite":
        n_items = frame[vc.item_facet].nunique() if vc.item_facet in frame else "these"
        notes.append(f"estimand: finite (TEE C.2): each {obj}'s score is on these {n_items} {vc.item_facet}s, so "
                     f"its {obj} x {vc.item_facet} effects are part of the score and no error; the intervals count "
                     "the judges, prompt variants and calls.")
    est = _estimates(frame, vc, obj, design, ddf, notes)
    order = np.argsort(-est.means, kind="stable")
    rank_of = np.empty(len(est.systems), dtype=int)
    rank_of[order] = np.arange(1, len(est.systems) + 1)
    pairs = _pair_tests(est, vc, level)
    critical, df_joint = _simultaneous(est, pairs, level, seed)
    confounded, confounding = confounded_pairs(frame, obj, est.systems, exclude={score, "__y"})
    z = draws(est.cov, df_joint, n_boot, rng)
    ranks = [rank_sets(est.means, est.cov, z, level, simultaneous=s, undecidable=confounded) for s in (False, True)]
    sys_naive = _naive_intervals(frame, vc, est, pairs, obj, n_boot, level, rng, notes)
    systems, why = _leaderboard(frame, vc, est, level, notes)
    why += _mask_pairs(frame, vc, est, pairs, confounded, obj)
    ordered = [est.systems[k] for k in order]
    sep = {frozenset((a, b)) for a, b, s in zip(pairs.frame["a"], pairs.frame["b"], pairs.frame["separable"],
                                                 strict=True) if s}
    cld = letters(ordered, sep)
    sys_frame = systems.assign(naive_low=sys_naive[0], naive_high=sys_naive[1], rank=rank_of,
                               rank_low=ranks[0][0], rank_high=ranks[0][1], rank_low_simultaneous=ranks[1][0],
                               rank_high_simultaneous=ranks[1][1], group=[cld[s] for s in est.systems]) \
        .sort_values("rank", kind="stable").reset_index(drop=True)
    pair_frame = pairs.frame.assign(_ra=rank_of[pairs.a], _rb=rank_of[pairs.b]) \
        .sort_values(["_ra", "_rb"], kind="stable").drop(columns=["_ra", "_rb"]).reset_index(drop=True)
    sentences, adjacent = adjacent_pairs(vc, pair_frame, ordered, obj, level)
    pair_frame = pair_frame.merge(adjacent, on=["a", "b"], how="left")
    if pair_gstudies != "none":
        pair_frame = with_pair_gstudies(frame, vc, pair_frame, obj, level, facets, pair_gstudies, notes)
    se = pairs.frame["se"].to_numpy()
    if se.size and np.ptp(se) > 1e-6 * max(float(se.max()), 1e-300):
        notes.append("pairs differ in their standard errors (systems scored on different items, judges or "
                     "numbers of runs): each pair's interval counts its own cells.")
    return Comparison(obj, level, sys_frame, pair_frame, critical.value, n_boot, est.method, tuple(notes),
                      tuple(why + sentences),
                      {"estimand": vc.estimand, "unmeasured": unmeasured(vc, list(frame.columns)),
                       "confounded": confounding,
                       "critical": {"value": critical.value, "error": critical.error, "method": critical.method,
                                    "points": critical.points, "df": df_joint}})


def compare_fitted(judgments, spec, vc: VarianceComponents, **options: Any) -> Comparison:
    """:func:`compare` on the judgments (:class:`evalgauge.data.Judgments`) a model ``spec``
    (:class:`evalgauge.estimate.spec.ModelSpec`) was fitted to: the score column, facets and design come from
    the spec, so every caller passes the same ones."""
    return compare(judgments.frame, vc, score=spec.score, facets=spec.facets, design=spec.design, **options)


def _check(vc: VarianceComponents, level: float, n_boot: int, ddf: str, design) -> str:
    obj = vc.object
    if not obj:
        raise DesignError("a comparison needs an object of measurement (the systems compared).")
    vc.require_converged("a comparison of its systems")
    if not 0 < level < 1:
        raise DesignError(f"level must lie between 0 and 1, not {level}.")
    if n_boot < 100:
        raise DesignError("n_boot must be at least 100 (it sets the simultaneous critical values).")
    if ddf not in DDF_METHODS:
        raise DesignError(f"ddf must be one of {', '.join(DDF_METHODS)}, not '{ddf}'.")
    if ddf == "kenward-roger" and design is None:
        raise DesignError("Kenward-Roger's df need the design (the refit with the system as a fixed effect).")
    return obj


def _estimates(frame: pd.DataFrame, vc: VarianceComponents, obj: str, design, ddf: str,
               notes: list[str]) -> _Estimates:
    """Raw means with their exact covariance, replaced by the GLS estimates where the design is incomplete
    (or Kenward-Roger's df are asked for)."""
    mats, systems, means, n_s = mean_covariance(frame, vc, obj)
    if len(systems) < 2:
        raise DesignError(f"only one {obj}: nothing to compare.")
    sigma2 = np.clip(vc.values, 0.0, None)
    sigma2 = np.where(np.array([c.kind == "fixed" for c in vc.components]), 0.0, sigma2)
    cov = np.tensordot(sigma2, mats, axes=1)
    est = _Estimates(systems, mats, means, n_s, cov, means.copy(), cov, None,
                     "raw means with their exact covariance under the fitted random-effects model")
    if design is None or (ddf != "kenward-roger" and balanced(frame, obj, [f for f in design.names if f != obj])):
        return est
    if vc.estimand == "finite":  # the GLS refit treats the items as random; the raw means condition on them
        if ddf == "kenward-roger":
            raise DesignError("Kenward-Roger's df are for the GLS refit, whose items are random; the finite "
                              "estimand conditions on them: use --ddf satterthwaite.")
        notes.append("finite estimand on an incomplete design: each system's raw mean over its own cells, with "
                     "its covariance given these items (the GLS adjustment treats the items as random).")
        return est
    try:
        est.gls = adjusted_estimates(frame, design, obj, systems, ddf=ddf)
    except DesignError as exc:
        if ddf == "kenward-roger":  # asked for by name: say why it cannot be had
            raise
        # the adjusted refit is an improvement, not a requirement
        notes.append(f"the estimates could not be adjusted for who scored each system ({exc}); raw means "
                     "are reported.")
        return est
    est.means, est.cov = est.gls.estimates, est.gls.cov
    est.method = ("GLS estimates with the system as a fixed effect (REML), each system's estimated marginal mean "
                  "as emmeans gives it; " + ("Kenward-Roger's adjusted covariance and df as pbkrtest computes them"
                                             if ddf == "kenward-roger" else
                                             "covariance L(X'V^-1X)^-1L', Satterthwaite df as lmerTest computes them"))
    notes.append("the systems were not all scored on the same items, judges and runs, equally often: each "
                 "system's estimate is adjusted for who scored it and on what (GLS, the system as a fixed "
                 "effect); 'raw_mean' is the plain mean.")
    return est


def _t_quantile(df: np.ndarray, level: float) -> np.ndarray:
    """Student's t quantile at each df (the normal's where the df are infinite)."""
    finite = np.isfinite(df)
    return np.where(finite, special.stdtrit(np.where(finite, df, 1.0), 0.5 + level / 2), special.ndtri(0.5 + level / 2))


def _pair_tests(est: _Estimates, vc: VarianceComponents, level: float) -> _Pairs:
    """Every pair's difference, SE, df (Satterthwaite's or the GLS fit's), marginal interval and p-value."""
    pa, pb = np.triu_indices(len(est.systems), 1)
    swap = est.means[pa] < est.means[pb]
    pa, pb = np.where(swap, pb, pa), np.where(swap, pa, pb)
    mats, cov = est.mats, est.cov
    coef = mats[:, pa, pa] + mats[:, pb, pb] - 2 * mats[:, pa, pb]  # terms x pairs
    se = np.sqrt(np.clip(cov[pa, pa] + cov[pb, pb] - 2 * cov[pa, pb], 0.0, None))
    if est.gls is not None:
        contrasts = np.zeros((len(pa), len(est.systems)))
        contrasts[np.arange(len(pa)), pa], contrasts[np.arange(len(pa)), pb] = 1.0, -1.0
        df = est.gls.df(contrasts)
    else:
        df = np.array([satterthwaite_df(vc, coef[:, k]) for k in range(coef.shape[1])])
    diff = est.means[pa] - est.means[pb]
    tq = _t_quantile(df, level)
    with np.errstate(invalid="ignore", divide="ignore"):
        # no variance: a difference known exactly is certain unless it is 0, where there is nothing to test
        tstat = np.where(se > 0, diff / se, np.where(diff == 0, 0.0, np.inf))
    finite = np.isfinite(df)
    pval = np.where(finite, 2 * special.stdtr(np.where(finite, df, 1.0), -np.abs(tstat)),
                    2 * special.ndtr(-np.abs(tstat)))
    frame = pd.DataFrame({
        "a": [est.systems[k] for k in pa], "b": [est.systems[k] for k in pb], "diff": diff, "se": se, "df": df,
        "low": diff - tq * se, "high": diff + tq * se, "p": pval, "p_holm": holm(pval),
    })
    return _Pairs(pa, pb, coef, frame)


def _simultaneous(est: _Estimates, pairs: _Pairs, level: float, seed: int | None):
    """The simultaneous critical value of all differences (max-|t| over their joint law, to 0.1%: the lattice rule
    or Monte Carlo of :mod:`evalgauge.inference.mvt`, not the quantile of the rank sets' draws, which leave it 1-2%
    off), and each pair's simultaneous interval, never narrower than its own marginal one (a pair on fewer df than
    the family's)."""
    df = pairs.frame["df"].to_numpy()
    df_joint = float(np.median(df)) if np.all(np.isfinite(df)) else math.inf
    critical = simultaneous_critical(est.cov, np.column_stack([pairs.a, pairs.b]), df_joint, level,
                                     seed=0 if seed is None else seed)
    crit_k = np.maximum(critical.value, _t_quantile(df, level))
    diff, se = pairs.frame["diff"], pairs.frame["se"]
    pairs.frame["low_simultaneous"], pairs.frame["high_simultaneous"] = diff - crit_k * se, diff + crit_k * se
    pairs.frame = pairs.frame[["a", "b", "diff", "se", "df", "low", "high", "low_simultaneous", "high_simultaneous",
                               "p", "p_holm"]]
    return critical, df_joint


def _naive_intervals(frame, vc, est: _Estimates, pairs: _Pairs, obj: str, n_boot: int, level: float, rng,
                     notes: list[str]) -> np.ndarray:
    """The naive interval of each pair (columns of ``pairs.frame``) and of each system (returned, 2 x S):
    items resampled, nothing else, shifted by the GLS adjustment when there is one."""
    item = vc.role("item")
    if item is None:
        pairs.frame["naive_low"] = pairs.frame["naive_high"] = np.nan
        notes.append("no item facet: the naive item-bootstrap interval is not available.")
        return np.full((2, len(est.systems)), np.nan)
    boot = item_bootstrap(frame, obj, item, est.systems, n_boot, rng) + (est.means - est.raw_means)
    bd = boot[:, pairs.a] - boot[:, pairs.b]
    pairs.frame["naive_low"], pairs.frame["naive_high"] = np.nanquantile(bd, [(1 - level) / 2, (1 + level) / 2],
                                                                        axis=0)
    return np.nanquantile(boot, [(1 - level) / 2, (1 + level) / 2], axis=0)


def _leaderboard(frame, vc: VarianceComponents, est: _Estimates, level: float,
                 notes: list[str]) -> tuple[pd.DataFrame, list[str]]:
    """Each system's estimate with its own SE, df and interval (bounded by the score's scale), and why the
    ones on fewer than MIN_DF df have none."""
    s = len(est.systems)
    if est.gls is not None:  # emmeans' SE and df of each estimated marginal mean
        sys_df = est.gls.df(np.eye(s))
        sys_se = np.sqrt(np.clip(np.diag(est.gls.cov), 0.0, None))
    else:
        sys_df = np.array([satterthwaite_df(vc, est.mats[:, k, k]) for k in range(s)])
        # a system's own error counts the shared terms too (its absolute error), from the raw-mean covariance
        sys_se = np.sqrt(np.clip(np.diag(est.cov_raw), 0.0, None))
    bounds = score_bounds(frame["__y"].to_numpy())
    low, high, how = bounded_interval(est.means, sys_se, _t_quantile(sys_df, level), bounds)
    if how:
        notes.append(how)
    ok = ~(sys_df < MIN_DF)
    why = [not_estimable(vc, est.mats[:, k, k], f"{est.systems[k]}'s mean", sys_df[k], vc.object)
           for k in range(s) if not ok[k]]
    board = pd.DataFrame({
        "object": est.systems, "mean": est.means, "raw_mean": est.raw_means, "n": est.n_s.astype(int), "se": sys_se,
        "df": sys_df, "low": np.where(ok, low, np.nan), "high": np.where(ok, high, np.nan), "estimable": ok})
    return board, why


def _mask_pairs(frame, vc: VarianceComponents, est: _Estimates, pairs: _Pairs, confounded: np.ndarray,
                obj: str) -> list[str]:
    """Clip the pair intervals to the scale, blank the non-estimable and the confounded ones (Holm then runs over
    the comparable pairs), mark the separable ones, and say why the first few have no interval."""
    pf, df = pairs.frame, pairs.frame["df"].to_numpy()
    bounds = score_bounds(frame["__y"].to_numpy())
    comparable = ~confounded[pairs.a, pairs.b]
    pair_ok = ~(df < MIN_DF) & comparable
    width = bounds[2] - bounds[1] if bounds else math.inf
    for col in ("low", "high", "low_simultaneous", "high_simultaneous"):
        # a difference of two means on a bounded scale lies within +- its width; a non-estimable one has none
        pf[col] = np.where(pair_ok, np.clip(pf[col], -width, width), np.nan)
    pf["estimable"] = pair_ok
    pf["comparable"] = comparable
    if not comparable.all():  # a confounded pair has no test: Holm over the pairs that can be compared
        pf["p"] = np.where(comparable, pf["p"], np.nan)
        pf["p_holm"] = np.nan
        pf.loc[comparable, "p_holm"] = holm(pf.loc[comparable, "p"].to_numpy())
        for col in ("naive_low", "naive_high"):
            pf[col] = np.where(comparable, pf[col], np.nan)
    pf["separable"] = pair_ok & (pf["low_simultaneous"] > 0)
    return [not_estimable(vc, pairs.coef[:, k], f"the difference {est.systems[pairs.a[k]]} - "
                          f"{est.systems[pairs.b[k]]}", df[k], obj)
            for k in range(len(pairs.a)) if comparable[k] and df[k] < MIN_DF][:5]
