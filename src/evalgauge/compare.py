"""Which system is better: pair intervals, multiplicity, separable groups and rank confidence sets.

The sizing paper's question is *which* system is better. Every system's mean shares error with the
others (the same items, the same judges), so a reader comparing per-system intervals by eye uses the
wrong test. Here the covariance of the system means is computed exactly under the fitted random
effects model and the observed design (who was scored on what, by whom, how often):

    ybar_s = (1/n_s) sum of y over s's judgments,
    Cov(ybar_s, ybar_t) = sum over random terms T of sigma2_T * sum_l m_sl m_tl / (n_s n_t)   (T without s)
    Var(ybar_s)        += sum over terms T with s of sigma2_T * sum_l m_sl^2 / n_s^2,

with m_sl the number of s's judgments at level l of term T. For two systems scored on the same items
by the same judges the shared terms cancel from their difference and Var(ybar_a - ybar_b) is twice the
relative error sigma2_delta (sizing eq. 2 applied to one pair, what the two systems do not share).
Degrees of freedom are Satterthwaite's from the sampling covariance of the components.

Outputs (a :class:`Comparison`): the leaderboard with each system's own SE (its own cells), marginal
and simultaneous pair intervals (max-|t| over the joint law of all differences, which share items and
judges), Holm-adjusted p-values, a compact letter display of the groups the design cannot tell apart,
rank confidence sets (Mogstad, Romano, Shaikh & Wilhelm, "Inference for Ranks", REStud 2024: marginal
and simultaneous, with the stepdown refinement; :mod:`evalgauge.multiplicity`), the naive item-bootstrap
interval beside each pair, each pair's own G-study of its paired differences, and for adjacent systems
the probability of a rank inversion and the items or judges that would separate them at 80% power.

This module is pure: a judgments frame and fitted components in, a result out.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from . import dstudy, vocabulary
from .components import VarianceComponents
from .errors import DesignError
from .inference import bounded_interval, satterthwaite_df, score_bounds
from .multiplicity import draws, holm, letters, rank_sets
from .mvt import simultaneous_critical
from .results import Result, json_safe

#: power at which an adjacent pair's separating design is sized
POWER = 0.8
#: A separating count more than this many times the present one is no plan ("2,248,702 more items"): the pair
#: is reported as not separable by that facet alone at this panel
PRACTICAL_FACTOR = 100
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


# ---------------------------------------------------------------------------
# The covariance of the system means under the fitted model
# ---------------------------------------------------------------------------

def _term_levels(frame: pd.DataFrame, facets: tuple[str, ...]) -> np.ndarray:
    if not facets:
        return np.zeros(len(frame), dtype=np.int64)
    return frame.groupby(list(facets), sort=False, observed=True).ngroup().to_numpy()


def mean_covariance(frame: pd.DataFrame, vc: VarianceComponents, obj: str) -> tuple[np.ndarray, list[str],
                                                                                   np.ndarray, np.ndarray]:
    """(A, systems, means, counts): ``A[t]`` (terms x S x S) so that Cov(system means) = sum_t sigma2_t A[t].

    Terms made only of fixed facets have no sampling variance (zero matrices); the object's own
    component is the target, not error (zero too).
    """
    codes, systems = pd.factorize(frame[obj].astype(str), sort=False)
    y = frame["__y"].to_numpy(dtype=float)
    n_s = np.bincount(codes, minlength=len(systems)).astype(float)
    means = np.bincount(codes, weights=y, minlength=len(systems)) / n_s
    s = len(systems)
    mats = np.zeros((len(vc.components), s, s))
    for k, comp in enumerate(vc.components):
        if comp.kind == "fixed" or (comp.kind != vocabulary.RESIDUAL and set(comp.facets) == {obj}):
            continue
        if comp.kind == vocabulary.RESIDUAL:
            mats[k][np.diag_indices(s)] = 1.0 / n_s
            continue
        facets = tuple(f for f in comp.facets if f != obj and f in frame.columns)  # assumed facets: one level
        level = _term_levels(frame, facets)
        n_lev = int(level.max()) + 1 if level.size else 0
        m = np.zeros((s, n_lev))
        np.add.at(m, (codes, level), 1.0)
        if obj in comp.facets:  # the system's own effect at each level: only its own mean
            mats[k][np.diag_indices(s)] = (m**2).sum(axis=1) / n_s**2
        else:  # a shared effect (items, judges, item:judge): common to every system scored at that level
            mats[k] = (m @ m.T) / np.outer(n_s, n_s)
    return mats, [str(x) for x in systems], means, n_s


@dataclass(frozen=True)
class GlsEstimates:
    """The systems' estimated marginal means from the fit with the system as a fixed effect (emmeans' for lme4):
    ``estimates`` = L beta-hat, ``cov`` = L C L' with C = (X'V^-1X)^-1, and what Satterthwaite's df of any
    contrast w'L beta need (the variance parameters' covariance ``varpar_cov``, C's Jacobian ``jacobian``)."""

    estimates: np.ndarray
    cov: np.ndarray
    rows: np.ndarray  # L: systems x fixed-effect columns
    beta_cov: np.ndarray
    varpar_cov: np.ndarray | None = None
    jacobian: np.ndarray | None = None
    kenward_roger: Any = None  # evalgauge.kenward_roger.KenwardRoger when its df were asked for

    def df(self, weights: np.ndarray) -> np.ndarray:
        """Satterthwaite's df of the contrasts ``weights @ estimates`` (one per row of ``weights``), as lmerTest
        computes them (Kuznetsova et al. 2017, eq. 7): 2 (l C l')^2 / (g' A g), g_j = l J_j l', l = w L; or
        Kenward-Roger's when the estimates were made with them."""
        lrows = np.atleast_2d(weights) @ self.rows
        if self.kenward_roger is not None:
            return self.kenward_roger.df(lrows)
        var = np.einsum("kp,pq,kq->k", lrows, self.beta_cov, lrows)
        grad = np.einsum("kp,jpq,kq->kj", lrows, self.jacobian, lrows)
        denom = np.einsum("kj,jl,kl->k", grad, self.varpar_cov, grad)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(denom > 0, 2.0 * var**2 / denom, math.inf)


def adjusted_estimates(frame: pd.DataFrame, design, obj: str, systems: list[str],
                       ddf: str = "satterthwaite") -> GlsEstimates:
    """GLS estimates of the systems adjusted for who scored them and on what, as lme4 + emmeans give them.

    The model is refitted by REML with the object of measurement as a fixed effect (every other facet as
    in ``design``; its interactions with the random facets stay random): beta-hat = (X'V^-1X)^-1 X'V^-1 y,
    so a system scored only by a lenient judge is not favoured. Each system's estimate is its estimated
    marginal mean (the intercept plus its effect, averaged with equal weights over the levels of any other
    fixed facet, emmeans' reference grid).
    """
    from .design import Design, Facet
    from .estimate.model import model_from_design
    from .estimate.reml import fit_reml

    facets = tuple(Facet(f.name, "fixed" if f.name == obj else f.role, f.parent) for f in design.facets)
    fixed_design = Design(facets, score="__y", replicate=design.replicate, terms=design.terms,
                          max_order=design.max_order)
    fixed = tuple(f.name for f in facets if f.role == "fixed")
    model = model_from_design(fixed_design)
    # started at theta = 1, not at the fit with the system random: its terms are not these, and from there the
    # optimiser took twice the evaluations on the real SummEval file
    fit = fit_reml(frame, model, fixed_facets=fixed, derivatives=ddf == "satterthwaite")
    if not fit.reml.converged:
        raise DesignError(f"the fit with the {obj} as a fixed effect did not converge ({fit.reml.message})")
    names = list(fit.reml["beta"])
    beta = np.array(list(fit.reml["beta"].values()))
    rows = _reference_grid_rows(frame, obj, systems, [f for f in fixed if f != obj], names)
    if ddf == "kenward-roger":
        kr = _kenward_roger(frame, fit, names, fixed)
        return GlsEstimates(rows @ beta, rows @ kr.phi_adjusted @ rows.T, rows, kr.phi_adjusted, kenward_roger=kr)
    bcov = np.asarray(fit.reml.beta_cov)
    return GlsEstimates(rows @ beta, rows @ bcov @ rows.T, rows, bcov, np.asarray(fit.reml.varpar_cov),
                        np.asarray(fit.reml.beta_cov_jacobian))


def _kenward_roger(frame: pd.DataFrame, fit: VarianceComponents, names: list[str], fixed: tuple[str, ...]):
    """Kenward-Roger's quantities at the REML fit, from the judgments' rows (dense, as pbkrtest)."""
    from .kenward_roger import kenward_roger

    levels = {c: frame[c].astype(str) for c in fixed}
    parts = []
    for name in names:
        col = np.ones(len(frame))
        if name != "(Intercept)":
            for part in name.split(":"):
                facet = next(c for c in fixed if part.startswith(c) and part[len(c):] in set(levels[c]))
                col = col * (levels[facet] == part[len(facet):]).to_numpy()
        parts.append(col)
    x = np.column_stack(parts)
    random = [c for c in fit.components if c.kind == "random"]  # the terms fitted (a confounded one is not)
    term_levels = [_term_levels(frame, tuple(c.facets)) for c in random]
    sigma2 = np.array([c.variance for c in random] + [fit.sigma2(vocabulary.RESIDUAL)])
    return kenward_roger(x, term_levels, np.clip(sigma2, 0.0, None))


def _reference_grid_rows(frame: pd.DataFrame, obj: str, systems: list[str], others: list[str],
                         names: list[str]) -> np.ndarray:
    """L (systems x columns): each system's row of the treatment-coded X averaged over the grid of the other
    fixed facets' levels (emmeans' equal weights). A column named ``col1lev1:col2lev2`` is 1 at a grid point
    that has every one of those levels."""
    grids = list(itertools.product(*[sorted(frame[c].astype(str).unique()) for c in others])) or [()]
    out = np.zeros((len(systems), len(names)))
    for k, s in enumerate(systems):
        for point in grids:
            present = {f"{obj}{s}", *(f"{c}{v}" for c, v in zip(others, point, strict=True))}
            out[k] += [1.0 if n == "(Intercept)" or set(n.split(":")) <= present else 0.0 for n in names]
    return out / len(grids)


# ---------------------------------------------------------------------------
# Naive item bootstrap and each pair's own G-study
# ---------------------------------------------------------------------------

def _item_bootstrap(frame: pd.DataFrame, obj: str, item: str, systems: list[str], n_boot: int,
                    rng: np.random.Generator) -> np.ndarray:
    """Bootstrap draws of the system means resampling items only (what a careful author does today)."""
    s_code = pd.Categorical(frame[obj].astype(str), categories=systems).codes
    i_code, _ = pd.factorize(frame[item].astype(str))
    n_items = int(i_code.max()) + 1
    sums = np.zeros((n_items, len(systems)))
    cnts = np.zeros((n_items, len(systems)))
    np.add.at(sums, (i_code, s_code), frame["__y"].to_numpy(dtype=float))
    np.add.at(cnts, (i_code, s_code), 1.0)
    w = rng.multinomial(n_items, np.full(n_items, 1.0 / n_items), size=n_boot).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (w @ sums) / (w @ cnts)


def _pair_gstudy_block(cube: np.ndarray, a: int, b: int, level: float) -> dict:
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
    q = stats.t.ppf(0.5 + level / 2, df) if math.isfinite(df) and df > 0 else stats.norm.ppf(0.5 + level / 2)
    return {"pair_se": se, "pair_df": df, "pair_low": grand - q * se, "pair_high": grand + q * se,
            "pair_n": int(d.size)}


def _block_cube(frame: pd.DataFrame, obj: str, systems: list[str], facets: list[str]) -> np.ndarray | None:
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
    from .design import Design, Facet
    from .estimate import estimate_components
    from .inference import theta_interval

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


# ---------------------------------------------------------------------------
# The comparison
# ---------------------------------------------------------------------------

def compare(frame: pd.DataFrame, vc: VarianceComponents, *, score: str = "score", level: float = 0.95,
            n_boot: int = 2000, seed: int | None = 0, pair_gstudies: str = "adjacent",
            facets: list[str] | None = None, design=None, ddf: str = "satterthwaite") -> Comparison:
    """Compare every pair of objects (systems) of a fitted design. See the module docstring.

    ``frame`` holds the judgments (the object, facet columns and ``score``) the components ``vc`` were
    fitted on. When the systems were not all scored on the same cells (an incomplete design) and the
    ``design`` is given, each system's estimate is adjusted for who scored it and on what (GLS with the
    system as a fixed effect, :func:`adjusted_estimates`: estimates, SEs and df as lme4 + emmeans + lmerTest give
    them); on a complete balanced design it is the raw mean, which then equals the GLS estimate. ``n_boot``
    draws set the simultaneous critical values and rank sets
    (from the joint law of the estimates) and the naive item bootstrap; ``pair_gstudies``: "adjacent"
    (neighbours in the ranking), "all" or "none". ``ddf``: "satterthwaite" (lmerTest's, the default) or
    "kenward-roger" (pbkrtest's adjusted covariance and df; always through the GLS fit, up to
    :data:`evalgauge.kenward_roger.MAX_ROWS` judgments).
    """
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
    frame = frame.assign(__y=pd.to_numeric(frame[score], errors="coerce")).dropna(subset=["__y"])
    rng = np.random.default_rng(seed)
    notes: list[str] = []
    mats, systems, means, n_s = mean_covariance(frame, vc, obj)
    if len(systems) < 2:
        raise DesignError(f"only one {obj}: nothing to compare.")
    sigma2 = np.clip(vc.values, 0.0, None)
    sigma2 = np.where(np.array([c.kind == "fixed" for c in vc.components]), 0.0, sigma2)
    cov = np.tensordot(sigma2, mats, axes=1)
    raw_means = means.copy()
    method = "raw means with their exact covariance under the fitted random-effects model"
    gls = None
    if design is not None and (ddf == "kenward-roger" or not _balanced(frame, obj,
                                                                       [f for f in design.names if f != obj])):
        try:
            gls = adjusted_estimates(frame, design, obj, systems, ddf=ddf)
        except DesignError as exc:
            if ddf == "kenward-roger":  # asked for by name: say why it cannot be had
                raise
            # the adjusted refit is an improvement, not a requirement
            notes.append(f"the estimates could not be adjusted for who scored each system ({exc}); raw means "
                         "are reported.")
    cov_raw = cov
    if gls is not None:
        means, cov = gls.estimates, gls.cov
        method = ("GLS estimates with the system as a fixed effect (REML), each system's estimated marginal mean "
                  "as emmeans gives it; " + ("Kenward-Roger's adjusted covariance and df as pbkrtest computes them"
                                             if ddf == "kenward-roger" else
                                             "covariance L(X'V^-1X)^-1L', Satterthwaite df as lmerTest computes them"))
        notes.append("the systems were not all scored on the same items, judges and runs, equally often: each "
                     "system's estimate is adjusted for who scored it and on what (GLS, the system as a fixed "
                     "effect); 'raw_mean' is the plain mean.")
    order = np.argsort(-means, kind="stable")
    rank_of = np.empty(len(systems), dtype=int)
    rank_of[order] = np.arange(1, len(systems) + 1)

    # -- every pair, the higher mean first
    pa, pb = np.triu_indices(len(systems), 1)
    swap = means[pa] < means[pb]
    pa, pb = np.where(swap, pb, pa), np.where(swap, pa, pb)
    coef = mats[:, pa, pa] + mats[:, pb, pb] - 2 * mats[:, pa, pb]  # terms x pairs
    var = cov[pa, pa] + cov[pb, pb] - 2 * cov[pa, pb]
    se = np.sqrt(np.clip(var, 0.0, None))
    if gls is not None:
        contrasts = np.zeros((len(pa), len(systems)))
        contrasts[np.arange(len(pa)), pa], contrasts[np.arange(len(pa)), pb] = 1.0, -1.0
        df = gls.df(contrasts)
    else:
        df = np.array([satterthwaite_df(vc, coef[:, k]) for k in range(coef.shape[1])])
    diff = means[pa] - means[pb]
    tq = np.where(np.isfinite(df), stats.t.ppf(0.5 + level / 2, np.where(np.isfinite(df), df, 1.0)),
                  stats.norm.ppf(0.5 + level / 2))
    with np.errstate(invalid="ignore", divide="ignore"):
        tstat = np.where(se > 0, diff / se, np.inf)
    pval = np.where(np.isfinite(df), 2 * stats.t.sf(np.abs(tstat), np.where(np.isfinite(df), df, 1.0)),
                    2 * stats.norm.sf(np.abs(tstat)))

    # -- the joint law of all differences: simultaneous intervals and rank sets
    df_joint = float(np.median(df)) if np.all(np.isfinite(df)) else math.inf
    z = draws(cov, df_joint, n_boot, rng)
    pairs = np.column_stack([pa, pb])
    # the simultaneous critical value to 0.1% (lattice rule or Monte Carlo, evalgauge.mvt), not the quantile of
    # the n_boot draws the rank sets use (a few thousand draws leave it 1-2% off)
    critical = simultaneous_critical(cov, pairs, df_joint, level, seed=0 if seed is None else seed)
    crit = critical.value
    # no simultaneous interval is narrower than the pair's own marginal one (a pair on fewer df than the family's)
    crit_k = np.maximum(crit, tq)
    confounded, confounding = confounded_pairs(frame, obj, systems, exclude={score, "__y"})
    rank_lo, rank_hi = rank_sets(means, cov, z, level, simultaneous=False, undecidable=confounded)
    rank_lo_s, rank_hi_s = rank_sets(means, cov, z, level, simultaneous=True, undecidable=confounded)

    pair_frame = pd.DataFrame({
        "a": [systems[k] for k in pa], "b": [systems[k] for k in pb], "diff": diff, "se": se, "df": df,
        "low": diff - tq * se, "high": diff + tq * se,
        "low_simultaneous": diff - crit_k * se, "high_simultaneous": diff + crit_k * se,
        "p": pval, "p_holm": holm(pval),
    })

    # -- the naive interval: resample items only
    item = vc.role("item")
    if item is not None:
        boot = _item_bootstrap(frame, obj, item, systems, n_boot, rng) + (means - raw_means)
        bd = boot[:, pa] - boot[:, pb]
        lo_q, hi_q = np.nanquantile(bd, [(1 - level) / 2, (1 + level) / 2], axis=0)
        pair_frame["naive_low"], pair_frame["naive_high"] = lo_q, hi_q
        sys_naive = np.nanquantile(boot, [(1 - level) / 2, (1 + level) / 2], axis=0)
    else:
        pair_frame["naive_low"] = pair_frame["naive_high"] = np.nan
        sys_naive = np.full((2, len(systems)), np.nan)
        notes.append("no item facet: the naive item-bootstrap interval is not available.")

    # -- the leaderboard
    if gls is not None:  # emmeans' SE and df of each estimated marginal mean
        sys_df = gls.df(np.eye(len(systems)))
        sys_se = np.sqrt(np.clip(np.diag(gls.cov), 0.0, None))
    else:
        sys_df = np.array([satterthwaite_df(vc, mats[:, k, k]) for k in range(len(systems))])
        # a system's own error counts the shared terms too (its absolute error), from the raw-mean covariance
        sys_se = np.sqrt(np.clip(np.diag(cov_raw), 0.0, None))
    sq = np.where(np.isfinite(sys_df), stats.t.ppf(0.5 + level / 2, np.where(np.isfinite(sys_df), sys_df, 1.0)),
                  stats.norm.ppf(0.5 + level / 2))
    bounds = score_bounds(frame["__y"].to_numpy())
    sys_low, sys_high, how = bounded_interval(means, sys_se, sq, bounds)
    if how:
        notes.append(how)
    sys_ok = ~(sys_df < MIN_DF)
    sys_low, sys_high = np.where(sys_ok, sys_low, np.nan), np.where(sys_ok, sys_high, np.nan)
    comparable = ~confounded[pa, pb]
    pair_ok = ~(df < MIN_DF) & comparable
    width = bounds[2] - bounds[1] if bounds else math.inf
    for col in ("low", "high", "low_simultaneous", "high_simultaneous"):
        # a difference of two means on a bounded scale lies within +- its width; a non-estimable one has none
        pair_frame[col] = np.where(pair_ok, np.clip(pair_frame[col], -width, width), np.nan)
    pair_frame["estimable"] = pair_ok
    pair_frame["comparable"] = comparable
    if not comparable.all():  # a confounded pair has no test: Holm over the pairs that can be compared
        pair_frame["p"] = np.where(comparable, pair_frame["p"], np.nan)
        pair_frame["p_holm"] = np.nan
        pair_frame.loc[comparable, "p_holm"] = holm(pair_frame.loc[comparable, "p"].to_numpy())
        for col in ("naive_low", "naive_high"):
            pair_frame[col] = np.where(comparable, pair_frame[col], np.nan)
    pair_frame["separable"] = pair_ok & (pair_frame["low_simultaneous"] > 0)
    why = [_not_estimable(vc, mats[:, k, k], f"{systems[k]}'s mean", sys_df[k], obj)
           for k in range(len(systems)) if not sys_ok[k]]
    why += [_not_estimable(vc, coef[:, k], f"the difference {systems[pa[k]]} - {systems[pb[k]]}", df[k], obj)
            for k in range(len(pa)) if comparable[k] and df[k] < MIN_DF][:5]
    sep = {frozenset((a, b)) for a, b, s in zip(pair_frame["a"], pair_frame["b"], pair_frame["separable"],
                                                 strict=True) if s}
    ordered = [systems[k] for k in order]
    cld = letters(ordered, sep)
    sys_frame = pd.DataFrame({
        "object": systems, "mean": means, "raw_mean": raw_means, "n": n_s.astype(int), "se": sys_se, "df": sys_df,
        "low": sys_low, "high": sys_high, "estimable": sys_ok,
        "naive_low": sys_naive[0], "naive_high": sys_naive[1],
        "rank": rank_of, "rank_low": rank_lo, "rank_high": rank_hi,
        "rank_low_simultaneous": rank_lo_s, "rank_high_simultaneous": rank_hi_s,
        "group": [cld[s] for s in systems],
    }).sort_values("rank", kind="stable").reset_index(drop=True)
    pair_frame = pair_frame.assign(_ra=[rank_of[k] for k in pa], _rb=[rank_of[k] for k in pb]) \
        .sort_values(["_ra", "_rb"], kind="stable").drop(columns=["_ra", "_rb"]).reset_index(drop=True)

    sentences, adjacent = _adjacent(vc, pair_frame, ordered, obj, level)
    sentences = why + sentences
    pair_frame = pair_frame.merge(adjacent, on=["a", "b"], how="left")
    if pair_gstudies != "none":
        pair_frame = _with_pair_gstudies(frame, vc, pair_frame, obj, level, facets, pair_gstudies, notes)
    if se.size and np.ptp(se) > 1e-6 * max(float(se.max()), 1e-300):
        notes.append("pairs differ in their standard errors (systems scored on different items, judges or "
                     "numbers of runs): each pair's interval counts its own cells.")
    return Comparison(obj, level, sys_frame, pair_frame, crit, n_boot, method, tuple(notes), tuple(sentences),
                      {"unmeasured": unmeasured(vc, list(frame.columns)), "confounded": confounding,
                       "critical": {"value": critical.value, "error": critical.error, "method": critical.method,
                                    "points": critical.points, "df": df_joint}})


def compare_fitted(judgments, spec, vc: VarianceComponents, **options: Any) -> Comparison:
    """:func:`compare` on the judgments (:class:`evalgauge.data.Judgments`) a model ``spec``
    (:class:`evalgauge.estimate.spec.ModelSpec`) was fitted to: the score column, facets and design come from
    the spec, so every caller passes the same ones."""
    return compare(judgments.frame, vc, score=spec.score, facets=spec.facets, design=spec.design, **options)


def confounded_pairs(frame: pd.DataFrame, obj: str, systems: list[str],
                     exclude: set[str]) -> tuple[np.ndarray, list[str]]:
    """Pairs of systems whose difference includes another column's: for some column (a judge, a baseline, an
    annotator, a task, a source file, the items), the two systems share no level at all, so no cell of one
    can be set beside a cell of the other. Returns the symmetric p x p mask and what to say, first.

    A column with one level says nothing, and one with more levels than half the rows is an identifier
    (a response id, a timestamp), not a condition of the judgments, except the item facet."""
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


def _not_estimable(vc: VarianceComponents, coef: np.ndarray, what: str, df: float, obj: str) -> str:
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


def _balanced(frame: pd.DataFrame, obj: str, facets: list[str]) -> bool:
    """Whether every system was scored on the same cells equally often: then the raw means are the GLS estimates
    exactly (the system is orthogonal to every other effect) and no refit is needed. Any empty cell or unequal
    count (one missing score among thousands, or a judge that never scored a system) gets the GLS estimates."""
    facets = [f for f in facets if f in frame.columns]
    if not facets:
        return frame.groupby(obj, observed=True).size().nunique() == 1
    counts = frame.groupby([obj, *facets], observed=True).size().unstack(obj)
    values = counts.to_numpy()
    return bool(not np.isnan(values).any() and np.all(values == values.flat[0]))


def _adjacent(vc: VarianceComponents, pairs: pd.DataFrame, ordered: list[str], obj: str,
              level: float) -> tuple[list[str], pd.DataFrame]:
    """For neighbours in the ranking: P(rank inversion), and the items or judges separating them at 80% power."""
    judge, item = vc.role("judge"), vc.role("item")
    z = stats.norm.ppf(0.5 + level / 2) + stats.norm.ppf(POWER)
    rows, sentences = [], []
    key = pairs.set_index(["a", "b"])
    for a, b in itertools.pairwise(ordered):
        r = key.loc[(a, b)]
        diff, se = float(r["diff"]), float(r["se"])
        p_inv = float(stats.norm.cdf(-abs(diff) / se)) if se > 0 else 0.0
        row = {"a": a, "b": b, "adjacent": True, "p_inversion": p_inv, "items_needed": None,
               "judges_needed": None}
        # the relative error that detects this difference at 80% power: 2 sigma2_delta (z_a + z_b)^2 <= diff^2
        target = diff**2 / (2 * z**2) if diff > 0 else 0.0
        what, blocked = [], []
        if target > 0:
            for facet, col in ((item, "items_needed"), (judge, "judges_needed")):
                if facet is None:
                    continue
                req = dstudy.needed(vc, facet, target, quantity="sigma2_delta")
                row[col] = req.count if req.reachable else None
                practical = req.reachable and req.count <= PRACTICAL_FACTOR * vc.levels[facet]
                if practical and req.count > vc.levels[facet]:
                    what.append(f"{req.count - vc.levels[facet]:,} more {facet}s")
                elif not practical:  # unreachable, or millions of items: no number of them, in practice
                    blocked.append(facet)
        if "comparable" in r and not bool(r["comparable"]):
            sentences.append(f"{a} over {b} by {diff:.4g}: not comparable (their difference includes another "
                             "facet's, see above).")
            rows.append(row)
            continue
        sep = bool(r["separable"])
        text = (f"{a} over {b} by {diff:.4g}: " + ("separable at this design (simultaneous interval "
                f"[{r['low_simultaneous']:.3g}, {r['high_simultaneous']:.3g}])" if sep else
                f"not separable at this design (P(order inverted) {p_inv:.0%})"))
        if not sep and what:
            text += "; " + " or ".join(what) + f" would separate them at {POWER:.0%} power"
            if item in blocked and judge is not None:
                n_j = vc.levels[judge]
                text += (f" (no item count would with {n_j} {judge}{'' if n_j == 1 else 's'}: the "
                         f"{'single-' if n_j == 1 else ''}{judge} ceiling)")
        elif not sep and blocked:
            text += (f"; no number of {' or '.join(f + 's' for f in blocked)} alone separates them at {POWER:.0%} "
                     f"power at this panel (within {PRACTICAL_FACTOR} times the present count): it takes both "
                     "(see evalgauge plan)" if len(blocked) > 1 else
                     f"; no number of {blocked[0]}s alone separates them at {POWER:.0%} power at this panel "
                     f"(within {PRACTICAL_FACTOR} times the present count)")
        sentences.append(text + ".")
        rows.append(row)
    return sentences, pd.DataFrame(rows, columns=["a", "b", "adjacent", "p_inversion", "items_needed",
                                                  "judges_needed"])


def _with_pair_gstudies(frame, vc, pairs, obj, level, facets, which, notes) -> pd.DataFrame:
    facets = facets or [f for f in vc.levels if f != obj]
    systems = sorted(set(pairs["a"]) | set(pairs["b"]))
    cube = _block_cube(frame, obj, systems, [f for f in facets if f in frame.columns])
    index = {name: k for k, name in enumerate(systems)}
    rows = []
    for r in pairs.itertuples(index=False):
        if which == "adjacent" and r.adjacent is not True:
            rows.append({})
            continue
        try:
            if cube is not None:
                rows.append(_pair_gstudy_block(cube, index[r.a], index[r.b], level))
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


def with_assumed(vc: VarianceComponents, assumed: dict[str, float]) -> VarianceComponents:
    """Components with stated values for terms the data cannot measure (one judge: ``{"system:judge": 0.01}``).

    A facet the data do not have enters with one level, so its variance adds to every interval as a
    prior value would; the result says so in its notes.
    """
    from .components import Component

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
