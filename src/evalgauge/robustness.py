"""TEE E.1's robustness studies: how the decomposition and the D-study hold up when an assumption fails.

Five studies on E.1's design (N = 50 items in C = 5 categories, V = 4 prompt variants, H = 3 temperatures,
R = 5 calls; E.1 names no judge count, so Table 8's M = 3 judges, without which an item x variant x
temperature effect would be the model's own cell term and no violation), Table 8's components, every facet
random as in :mod:`evalgauge.simulate.montecarlo`:

* :func:`three_way_sweep`: an item x variant x temperature effect outside the two-way TEE model, its variance
  a fraction of the largest two-way component; Kendall's tau between the pilot's and the truth's D-study
  rankings, and the components' bias;
* :func:`heteroscedastic_strata`: a residual variance per temperature (0.005, 0.04, 0.08), fitted per
  temperature (TEE C.7) and pooled;
* :func:`prompt_count_sweep`: the bias of sigma2_phi (prompt variance) by the number of variants V, and
  :func:`knife_edge`: how often the pilot's D-study picks the right one of "more prompt variants" and "more
  calls" as their true gains approach each other;
* :func:`profile_transfer`: a frontier profile's components projected onto a noisier, cheaper model's
  design and the reverse;
* :func:`reml_convergence` (Fig. 7): the REML estimator's bias and RMSE by component as the observations grow
  (Table 8's own facets, its sizes varied).

Every fit is the balanced ANOVA estimator on the simulated factorial (the REML optimum when the estimates are
positive; negative estimates kept, so the estimators are unbiased): thousands of fits a study take seconds.
Where REML's boundary matters (sigma2_phi at small V) the estimate truncated at zero is shown beside it.
The numeric core: no I/O, no printing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .components import VarianceComponents
from .design import Design, Facet
from .estimate.anova import anova_from_cell_means
from .results import Result
from .simulate.montecarlo import CATEGORIES, MU, TABLE8, _map, component_bias
from .vocabulary import RESIDUAL

#: E.1's design: N = 50 items in C = 5 categories, V = 4, H = 3; M = 3 judges (Table 8's), R = 5
E1_COUNTS = {"category": CATEGORIES, "item": 10, "variant": 4, "temperature": 3, "judge": 3}
E1_REPLICATES = 5
#: the item x variant x temperature effect of the three-way sweep
THREE_WAY = "category:item:variant:temperature"
#: E.1's temperature-specific residual variances, in the order of the temperatures
STRATUM_RESIDUALS = (0.005, 0.04, 0.08)
#: the components that carry prompt sensitivity (their share of Var(theta-hat) places the knife-edge)
PROMPT_TERMS = ("variant", "category:item:variant", "variant:temperature", "variant:judge")
#: what E.1 prints, for the tables that set the tool's figures beside the paper's
PAPER = {"tau_no_violation": 0.895, "tau_max_violation": 0.877, "max_nonresidual_bias": 0.05,
         "stratum_bias": 0.003, "bias_v2": (0.04, 0.05), "bias_v3_up": (0.01, 0.04),
         "transfer_frontier_to_cheap": (0.55, 0.59), "transfer_cheap_to_frontier": (1.27, 1.54),
         "transfer_top1_wrong": (0.09, 0.13), "convergence_bias": 0.05, "convergence_observations": 1000}


def e1_design(counts: dict[str, int] | None = None, fixed: tuple[str, ...] = ()) -> Design:
    """The two-way TEE model on E.1's facets (the cell term is added by the design, the replicate is the
    residual)."""
    counts = counts or E1_COUNTS
    facets = []
    for name in counts:
        role = "object" if name == "item" else ("fixed" if name in fixed else "random")
        facets.append(Facet(name, role, "category" if name == "item" else None))
    terms = tuple(k for k in TABLE8 if k != RESIDUAL and all(f in counts for f in k.split(":")))
    return Design(tuple(facets), replicate="replicate", terms=terms)


def draw(components: dict[str, float], rng: np.random.Generator, counts: dict[str, int] | None = None,
         replicates: int = E1_REPLICATES, residual_by: tuple[str, tuple[float, ...]] | None = None) -> np.ndarray:
    """A dense factorial (one axis per facet of ``counts``, in order, then the replicates) from independent
    normal effects, one per component (any interaction of the facets, named lme4-style); ``residual_by``
    (facet, variances): a residual variance per level of that facet instead of ``components[RESIDUAL]``."""
    counts = counts or E1_COUNTS
    names = list(counts)
    shape = tuple(counts[n] for n in names)
    y = np.full((*shape, replicates), MU)
    for name, sigma2 in components.items():
        if name == RESIDUAL:
            continue  # a zero component is still drawn (times 0), so conditions share every other effect
        facets = set(name.split(":")) | ({"category"} if "item" in name.split(":") else set())
        dims = [counts[n] if n in facets else 1 for n in names] + [1]
        y += rng.normal(0.0, math.sqrt(sigma2), size=dims)
    if residual_by is None:
        y += rng.normal(0.0, math.sqrt(components.get(RESIDUAL, 0.0)), size=y.shape)
    else:
        facet, variances = residual_by
        axis = names.index(facet)
        sd = np.sqrt(np.asarray(variances, dtype=float)).reshape([-1 if k == axis else 1 for k in range(y.ndim)])
        y += rng.normal(0.0, 1.0, size=y.shape) * sd
    return y


def fit(y: np.ndarray, design: Design) -> VarianceComponents:
    """The balanced ANOVA estimates of a dense factorial whose axes are the design's facets, then replicates."""
    mean = y.mean(axis=-1)
    within = float(((y - mean[..., None]) ** 2).sum())
    return anova_from_cell_means(design, mean, y.shape[-1], within)


def truth(components: dict[str, float], counts: dict[str, int] | None = None,
          replicates: int = E1_REPLICATES) -> VarianceComponents:
    """The generating components as a fit the D-study can project."""
    counts = counts or E1_COUNTS
    levels = {f: (counts["category"] * counts["item"] if f == "item" else n) for f, n in counts.items()}
    return VarianceComponents.from_values(dict(components), levels, replicates, object="item",
                                          nesting={"item": "category"})


def _pct_changes(vc: VarianceComponents) -> pd.Series:
    from .dstudy import interventions

    table = interventions(vc, rank_by="var_abs")
    return pd.Series(table["pct_change_var_abs"].to_numpy(), index=table["intervention"].to_numpy())


def _estimates(vc: VarianceComponents) -> dict[str, float]:
    return {c.name: c.variance for c in vc.components}


def _worst_bias(runs: pd.DataFrame) -> dict:
    """:func:`evalgauge.simulate.montecarlo.component_bias` against Table 8, without the per-component dict."""
    out = component_bias(runs, TABLE8)
    del out["rel_bias"]
    return out


# ---------------------------------------------------------------------------
# Three-way interactions outside the model
# ---------------------------------------------------------------------------

def _three_way_once(task) -> dict:
    from scipy.stats import kendalltau

    fraction, seed = task
    rng = np.random.default_rng(seed)
    comps = {**TABLE8, THREE_WAY: fraction * _largest_two_way()}
    vc = fit(draw(comps, rng), e1_design())
    true = _pct_changes(truth(comps))
    projected = _pct_changes(vc).reindex(true.index)
    return {"tau": float(kendalltau(true.to_numpy(), projected.to_numpy()).statistic), **_estimates(vc)}


def _largest_two_way() -> float:
    return max(v for k, v in TABLE8.items() if k != RESIDUAL and len(k.split(":")) - ("item" in k) == 2)


def three_way_sweep(fractions: Iterable[float] = (0.0, 0.25, 0.5, 0.75, 1.0), reps: int = 200, seed: int = 0,
                    scheduler=None) -> pd.DataFrame:
    """TEE E.1: an item x variant x temperature effect outside the two-way TEE model.

    Per fraction f, ``reps`` studies of E.1's design with Table 8's components plus a 3-way effect of variance
    f x the largest two-way component (item x judge, 0.02), fitted with the two-way model. Kendall's tau
    (tau-b) between each pilot's single-factor interventions (% change of Var(theta-hat), :func:`dstudy.
    interventions`) and the truth's, whose Var(theta-hat) counts the 3-way over N'V'H', averaged over studies;
    the largest relative bias of a non-residual Table 8 component; the mean of the model's cell term, where
    the 3-way pools (its truth is 0). Every fraction draws the same studies but for the 3-way's size, so the
    sweep's differences are paired."""
    rows, first = [], None
    seeds = np.random.SeedSequence([seed, 3]).spawn(reps)  # the same studies at every fraction: a paired sweep
    for fraction in fractions:
        runs = pd.DataFrame(_map(_three_way_once, [(fraction, int(s.generate_state(1)[0])) for s in seeds],
                                 scheduler))
        cell = next(c for c in runs.columns if c.count(":") == 4)
        first = runs["tau"] if first is None else first
        change = runs["tau"].to_numpy() - first.to_numpy()  # paired with the sweep's first fraction
        rows.append({"fraction": fraction, "three_way": fraction * _largest_two_way(), "reps": reps,
                     "kendall_tau": float(runs["tau"].mean()),
                     "tau_mc_se": float(runs["tau"].std(ddof=1) / math.sqrt(reps)),
                     "tau_change": float(change.mean()),
                     "tau_change_mc_se": float(change.std(ddof=1) / math.sqrt(reps)),
                     **_worst_bias(runs),
                     "cell_term_mean": float(runs[cell].mean()),
                     "residual_rel_bias": float(runs[RESIDUAL].mean() / TABLE8[RESIDUAL] - 1)})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------
# Heteroscedastic residuals: one fit per temperature (TEE C.7)
# ---------------------------------------------------------------------------

def _strata_once(task) -> dict:
    residuals, seed = task
    rng = np.random.default_rng(seed)
    y = draw(TABLE8, rng, residual_by=("temperature", residuals))
    pooled = fit(y, e1_design())
    within_counts = {f: n for f, n in E1_COUNTS.items() if f != "temperature"}
    axis = list(E1_COUNTS).index("temperature")
    within = e1_design(within_counts)
    out = {"pooled": _estimates(pooled)}
    for h in range(len(residuals)):
        out[h] = _estimates(fit(np.take(y, h, axis=axis), within))
    return out


def heteroscedastic_strata(residuals: tuple[float, ...] = STRATUM_RESIDUALS, reps: int = 200, seed: int = 0,
                           scheduler=None) -> dict:
    """TEE E.1 / C.7: a residual variance per temperature, recovered by one fit per temperature.

    ``reps`` studies of E.1's design with Table 8's components and the residual (the calls' noise) of
    variance ``residuals[h]`` at temperature h. Per temperature: the mean of the within-temperature fit's
    residual and its relative bias; pooled: the one homoscedastic fit's residual beside the average of the
    strata's (what it estimates in a balanced design), and the largest relative bias of its non-residual
    components."""
    seeds = np.random.SeedSequence([seed, 7]).spawn(reps)
    runs = _map(_strata_once, [(tuple(residuals), int(s.generate_state(1)[0])) for s in seeds], scheduler)
    strata = []
    for h, value in enumerate(residuals):
        est = np.array([r[h][RESIDUAL] for r in runs])
        strata.append({"temperature": h + 1, "true": value, "mean": float(est.mean()),
                       "rel_bias": float(est.mean() / value - 1),
                       "mc_se": float(est.std(ddof=1) / math.sqrt(reps) / value)})
    pooled = pd.DataFrame([r["pooled"] for r in runs])
    average = float(np.mean(residuals))
    return {"reps": reps, "strata": strata, "pooled_residual": float(pooled[RESIDUAL].mean()),
            "average_residual": average, "pooled_rel_to_average": float(pooled[RESIDUAL].mean() / average - 1),
            "pooled_mc_se": float(pooled[RESIDUAL].std(ddof=1) / math.sqrt(reps) / average),
            "pooled": _worst_bias(pooled)}


# ---------------------------------------------------------------------------
# sigma2_phi by the number of prompt variants; the knife-edge
# ---------------------------------------------------------------------------

def _prompt_once(task) -> tuple[float, float]:
    n_variants, sigma2_phi, seed = task
    rng = np.random.default_rng(seed)
    counts = {**E1_COUNTS, "variant": n_variants}
    vc = fit(draw({**TABLE8, "variant": sigma2_phi}, rng, counts), e1_design(counts))
    value = vc["variant"].variance
    return value, max(value, 0.0)


def prompt_count_sweep(variants: Iterable[int] = (2, 3, 4, 5, 7, 10), sigma2_phi: Iterable[float] = (0.0, 0.04, 0.10),
                       reps: int = 200, seed: int = 0, scheduler=None) -> pd.DataFrame:
    """TEE E.1, Fig. 8a: the estimate of sigma2_phi (prompt variance) by the number of variants V.

    Per (V, sigma2_phi), ``reps`` studies of E.1's design with V variants and Table 8's other components. The
    ANOVA estimate is unbiased at every V (its relative bias is Monte Carlo noise, whose standard error at V
    variants is about sqrt(2 / (V - 1)) / sqrt(reps) of the truth); the estimate truncated at zero (REML's
    boundary) is biased upwards where the variant mean square often falls below its expectation's other
    terms. With sigma2_phi = 0 the bias is given as the mean estimate (no relative bias)."""
    rows = []
    for v in variants:
        for s2 in sigma2_phi:
            seeds = np.random.SeedSequence([seed, v, round(1e6 * s2)]).spawn(reps)
            est = np.array(_map(_prompt_once, [(v, s2, int(s.generate_state(1)[0])) for s in seeds], scheduler))
            raw, truncated = est[:, 0], est[:, 1]
            rows.append({"variants": v, "sigma2_phi": s2, "reps": reps, "mean": float(raw.mean()),
                         "mean_truncated": float(truncated.mean()), "rel_bias": _relative(raw, s2),
                         "rel_bias_truncated": _relative(truncated, s2),
                         "mc_se": float(raw.std(ddof=1) / math.sqrt(reps) / s2) if s2 > 0 else math.nan,
                         "share_at_zero": float(np.mean(raw <= 0))})
    return pd.DataFrame(rows)


def _relative(estimates: np.ndarray, truth_value: float) -> float:
    return float(estimates.mean() / truth_value - 1) if truth_value > 0 else math.nan


#: the two interventions of the knife-edge: the D-study's own "+2 variants" and "+5 replicates"
KNIFE_PROMPTS, KNIFE_CALLS = "+2 variants", "+5 replicates"


def knife_edge_components(ratio: float) -> dict[str, float]:
    """Table 8 with the calls' noise (the residual) set so that on E.1's design the true gain of "+2 variants"
    (V 4 -> 6) is ``ratio`` times that of "+5 replicates" (R 5 -> 10).

    Both cut the noise term sigma2_rho / (N V H M R), by 1/3 and 1/2; "+2 variants" also cuts every prompt
    term P (sigma2_phi / V and its interactions) by 1/3. So the ratio is (P + noise) / (1.5 noise), which is
    above 2/3 whatever the noise, and 1 where the noise term is twice P."""
    if ratio <= 2 / 3:
        raise ValueError("the gain of +2 variants is at least 2/3 of +5 replicates' (both cut the calls' noise)")
    from .dstudy import project

    prompts = project(truth({k: (v if k in PROMPT_TERMS else 0.0) for k, v in TABLE8.items()})).var_abs
    calls_divisor = math.prod(E1_COUNTS.values()) * E1_REPLICATES
    return {**TABLE8, RESIDUAL: prompts / (1.5 * ratio - 1) * calls_divisor}


def _knife_once(task) -> tuple[bool, bool]:
    """Whether the pilot ranks "+2 variants" before "+5 replicates": by the D-study (estimates truncated at
    zero, as every projection) and by the untruncated estimates (their difference is the truncation's)."""
    ratio, seed = task
    rng = np.random.default_rng(seed)
    vc = fit(draw(knife_edge_components(ratio), rng), e1_design())
    pct = _pct_changes(vc)
    levels = {**E1_COUNTS, "item": E1_COUNTS["category"] * E1_COUNTS["item"]}
    prompts = sum(c.variance / math.prod(levels[f] for f in c.facets if f != "category")
                  for c in vc.components if "variant" in c.facets and c.name != RESIDUAL)
    calls = vc[RESIDUAL].variance / (math.prod(E1_COUNTS.values()) * E1_REPLICATES)
    # gains: "+2 variants" cuts the prompt terms and the calls' noise by 1/3, "+5 replicates" the noise by 1/2
    return bool(pct[KNIFE_PROMPTS] < pct[KNIFE_CALLS]), bool((prompts + calls) / 3 > calls / 2)


def knife_edge(ratios: Iterable[float] = (0.75, 0.9, 1.0, 1.1, 1.5, 2.0, 4.0), reps: int = 200, seed: int = 0,
               scheduler=None) -> pd.DataFrame:
    """TEE E.1, Fig. 8b: directional accuracy of "add prompts vs add calls" near the boundary where both gain
    equally. Per ratio of the true gains (:func:`knife_edge_components`), the share of pilots whose D-study
    ranks the truth's better intervention first (at ratio 1, a tie: the share choosing prompts), by the
    D-study's projection (estimates truncated at zero) and by the untruncated estimates."""
    rows = []
    for ratio in ratios:
        seeds = np.random.SeedSequence([seed, round(1000 * ratio)]).spawn(reps)
        picks = np.array(_map(_knife_once, [(ratio, int(s.generate_state(1)[0])) for s in seeds], scheduler))
        right = picks if ratio >= 1 else ~picks
        accuracy, raw = (float(x) for x in right.mean(axis=0))
        rows.append({"ratio": ratio, "reps": reps, "accuracy": accuracy,
                     "mc_se": math.sqrt(accuracy * (1 - accuracy) / reps), "accuracy_untruncated": raw,
                     "sigma2_rho": knife_edge_components(ratio)[RESIDUAL]})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------
# Profile transfer
# ---------------------------------------------------------------------------

def profile(noise: float) -> dict[str, float]:
    """Table 8 with its noise (every interaction with an item and the calls' residual) times ``noise``: a
    frontier model at 1, a cheaper, noisier one above."""
    return {k: v * noise if (k == RESIDUAL or (k.startswith("category:item:"))) else v for k, v in TABLE8.items()}


def _transfer_once(task) -> dict:
    noises, seed = task
    rng = np.random.default_rng(seed)
    return {noise: _estimates(fit(draw(profile(noise), rng), e1_design())) for noise in noises}


def profile_transfer(cheap_noise: float = 2.0, reps: int = 200, seed: int = 0, scheduler=None) -> pd.DataFrame:
    """TEE E.1: components estimated on one model profile used for another's D-study.

    ``reps`` pilots of E.1's design under each profile (:func:`profile`: frontier 1, cheaper ``cheap_noise``).
    Per direction: the mean relative error |estimate - other profile's truth| / truth over the components that
    differ between the profiles, and how often the pilot's top intervention is not the other profile's true
    top one (and, for reference, not its own profile's)."""
    noises = (1.0, float(cheap_noise))
    seeds = np.random.SeedSequence([seed, 11]).spawn(reps)
    runs = _map(_transfer_once, [(noises, int(s.generate_state(1)[0])) for s in seeds], scheduler)
    truths = {n: profile(n) for n in noises}
    tops = {n: _pct_changes(truth(truths[n])).idxmin() for n in noises}
    rows = []
    for source, target, name in ((noises[0], noises[1], "frontier -> cheaper"),
                                 (noises[1], noises[0], "cheaper -> frontier")):
        moved = [k for k in TABLE8 if truths[source][k] != truths[target][k]]
        errors, wrong, own_wrong = [], [], []
        for run in runs:
            est = run[source]
            errors.append(np.mean([abs(est[k] - truths[target][k]) / truths[target][k] for k in moved]))
            top = _pct_changes(truth(est)).idxmin()  # the fit's estimates, the cell term kept, as given
            wrong.append(top != tops[target])
            own_wrong.append(top != tops[source])
        rows.append({"direction": name, "noise_ratio": cheap_noise, "reps": reps,
                     "mean_rel_error": float(np.mean(errors)), "top1_wrong": float(np.mean(wrong)),
                     "top1_wrong_own_profile": float(np.mean(own_wrong)),
                     "true_top_source": tops[source], "true_top_target": tops[target]})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------
# REML's convergence with the number of observations (Fig. 7)
# ---------------------------------------------------------------------------

#: Fig. 7's designs: Table 8's facets (V = H = M = 3) at R = 2 calls, N items in 5 categories (540 to 5,400
#: observations); the figure states neither its designs nor its sizes
CONVERGENCE_ITEMS = (10, 20, 50, 100)
CONVERGENCE_REPLICATES = 2


def convergence_counts(n_items: int) -> dict[str, int]:
    """Table 8's facets at ``n_items`` items spread over the 5 categories."""
    if n_items % CATEGORIES or n_items < 2 * CATEGORIES:
        raise ValueError(f"the number of items must be a multiple of {CATEGORIES} and at least {2 * CATEGORIES} "
                         f"(two items a category, or category and item are one facet), not {n_items}")
    return {"category": CATEGORIES, "item": n_items // CATEGORIES, "variant": 3, "temperature": 3, "judge": 3}


def _long_frame(y: np.ndarray, counts: dict[str, int]) -> pd.DataFrame:
    """A dense factorial (axes: the facets of ``counts``, then replicates) as judgment rows; items numbered
    within categories, so the item's label carries its category."""
    names = [*counts, "replicate"]
    index = np.indices(y.shape).reshape(y.ndim, -1)
    frame = pd.DataFrame({name: index[k] for k, name in enumerate(names)})
    frame["item"] = frame["category"] * counts["item"] + frame["item"]
    frame["score"] = y.reshape(-1)
    return frame


def reml_components(y: np.ndarray, design: Design, counts: dict[str, int]) -> VarianceComponents:
    """REML's estimates of a balanced factorial: the ANOVA estimates when none is negative (then they are the
    REML optimum), else the REML fit itself (some components at the boundary, the others moved)."""
    vc = fit(y, design)
    if min(c.variance for c in vc.components) >= 0:
        return vc
    from .estimate import estimate_components

    return estimate_components(_long_frame(y, counts), design, method="reml")


def _convergence_once(task) -> dict[str, float]:
    n_items, replicates, seed = task
    counts = convergence_counts(n_items)
    y = draw(TABLE8, np.random.default_rng(seed), counts, replicates=replicates)
    return _estimates(reml_components(y, e1_design(counts), counts))


def reml_convergence(items: Iterable[int] = CONVERGENCE_ITEMS, replicates: int = CONVERGENCE_REPLICATES,
                     reps: int = 200, seed: int = 0, scheduler=None) -> pd.DataFrame:
    """TEE E.1, Fig. 7: the REML estimator's bias and RMSE by component as the observations grow.

    Per size N (:func:`convergence_counts`: N items in 5 categories x 3 variants x 3 temperatures x 3 judges x
    ``replicates`` calls, Table 8's components, every facet random), ``reps`` studies fitted by REML
    (:func:`reml_components`). One row per (size, component): the mean estimate, its relative bias with the
    Monte Carlo standard error, the relative RMSE, and the share of studies with the component at zero. A
    component with 3 levels keeps a relative standard error near 1 whatever N (its own levels do not grow), so
    its RMSE falls only through the noise in its mean square."""
    rows = []
    for n_items in items:
        counts = convergence_counts(n_items)
        observations = math.prod(counts.values()) * replicates
        seeds = np.random.SeedSequence([seed, 17, n_items]).spawn(reps)
        runs = pd.DataFrame(_map(_convergence_once, [(n_items, replicates, int(s.generate_state(1)[0]))
                                                     for s in seeds], scheduler))
        for name, value in TABLE8.items():
            est = runs[name].to_numpy()
            rows.append({"items": n_items, "observations": observations, "reps": reps, "component": name,
                         "truth": value, "mean": float(est.mean()), "rel_bias": float(est.mean() / value - 1),
                         "mc_se": float(est.std(ddof=1) / math.sqrt(reps) / value),
                         "rel_rmse": float(np.sqrt(np.mean((est - value) ** 2)) / value),
                         "share_at_zero": float(np.mean(est <= 0))})
    return pd.DataFrame(rows)


STUDIES = ("three-way", "strata", "prompts", "knife-edge", "transfer", "convergence")


@dataclass(frozen=True)
class RobustnessStudy(Result):
    """The chosen E.1 studies: ``studies`` maps each study's name to its table (``strata``: a dict, the
    per-temperature table under ``"strata"`` beside the pooled fit), ``paper`` holds E.1's figures, ``design`` and
    ``convergence_design`` (with the convergence study) say what was simulated."""

    reps: int
    seed: int
    design: str
    paper: dict
    studies: dict[str, pd.DataFrame | dict]
    convergence_design: str | None = None

    def records(self) -> dict[str, list[dict] | dict]:
        """Each study's rows as records (the strata study is a dict already)."""
        return {name: rows.to_dict(orient="records") if isinstance(rows, pd.DataFrame) else rows
                for name, rows in self.studies.items()}

    def to_dict(self) -> dict:
        out = {"reps": self.reps, "seed": self.seed, "design": self.design, "paper": self.paper,
               "studies": self.records()}
        if self.convergence_design is not None:
            out["convergence_design"] = self.convergence_design
        return out

    def to_frame(self) -> pd.DataFrame:
        """The tabular studies' rows, one frame with a ``study`` column (the strata study as its table)."""
        frames = [(rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows["strata"])).assign(study=name)
                  for name, rows in self.studies.items()]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def robustness_study(studies: Iterable[str] = STUDIES, reps: int = 200, seed: int = 0,
                     scheduler=None) -> RobustnessStudy:
    """Every chosen E.1 study (:class:`RobustnessStudy`) and E.1's figures."""
    studies = tuple(studies)
    unknown = [s for s in studies if s not in STUDIES]
    if unknown:
        raise ValueError(f"unknown stud{'ies' if len(unknown) > 1 else 'y'} {', '.join(unknown)}; "
                         f"choose from {', '.join(STUDIES)}")
    run = {"three-way": three_way_sweep, "prompts": prompt_count_sweep, "knife-edge": knife_edge,
           "transfer": profile_transfer, "convergence": reml_convergence}
    done: dict[str, pd.DataFrame | dict] = {}
    for name in studies:
        if name == "strata":
            done[name] = heteroscedastic_strata(reps=reps, seed=seed, scheduler=scheduler)
        else:
            done[name] = run[name](reps=reps, seed=seed, scheduler=scheduler)
    convergence = (f"{', '.join(map(str, CONVERGENCE_ITEMS))} items in 5 categories x 3 variants x 3 temperatures x "
                   f"3 judges x {CONVERGENCE_REPLICATES} calls, Table 8's components, REML"
                   if "convergence" in studies else None)
    return RobustnessStudy(reps, seed, "50 items in 5 categories x 4 variants x 3 temperatures x 3 judges x 5 calls, "
                           "Table 8's components", PAPER, done, convergence)
