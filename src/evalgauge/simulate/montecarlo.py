"""Monte Carlo studies over the simulator: CI coverage across N (TEE E.4) and D-study
projection bias (TEE E.2). Serial by default; on a Dask distributed cluster when
given a scheduler address.

Coverage study (TEE E.4, Tables 8-9). Each replicate draws one full factorial
from TEE eq. 1 with Table 8's components (V=3 variants, H=3 temperatures, M=3
judges, R=5 replicates, N items in 5 categories), then:

* A (naive): one observation per item at one randomly chosen configuration
  (variant, temperature, judge), SE = s / sqrt(N);
* B: V=3, M=1, H=1, R=5 at a random judge and temperature; model item + variant;
* C: V=3, M=3, H=1, R=5; + judge;
* D: V=3, M=3, H=3, R=5; + temperature;
* E: the data of D; + variant:judge and variant:temperature.

Every fitted model keeps the cell term; omitted effects pool into it (the
balanced ANOVA estimator, which is the REML optimum here when estimates are
positive). The CI is theta-hat +- t_df SE(theta-hat) with Satterthwaite df
(:func:`evalgauge.inference.theta_interval`). The estimand is the population
grand mean mu, so the design-side effects (variant, temperature, judge) are
drawn afresh in every replicate with Table 8's variances: a study that reports
one configuration is off by that configuration's effects, which do not shrink
with N.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.special import ndtri

from ..design import Design, Facet, code_data
from ..errors import DesignError
from ..estimate.anova import anova_from_coded
from ..inference import theta_interval
from ..results import Result
from ..simulate import SimulationSpec, simulate
from ..vocabulary import RESIDUAL

#: TEE Table 8 (E.4): variance components of the coverage simulation
TABLE8 = {
    "category": 0.015, "category:item": 0.025, "variant": 0.015, "temperature": 0.015, "judge": 0.015,
    "category:item:variant": 0.008, "category:item:temperature": 0.008, "category:item:judge": 0.02,
    "variant:temperature": 0.003, "variant:judge": 0.003, RESIDUAL: 0.03,
}
MU = 0.5
CATEGORIES = 5

SCENARIOS = {
    # sampled variants, temperatures, judges, replicates; facets modelled beyond category/item
    "A": (1, 1, 1, 1, ()),
    "B": (3, 1, 1, 5, ("variant",)),
    "C": (3, 1, 3, 5, ("variant", "judge")),
    "D": (3, 3, 3, 5, ("variant", "temperature", "judge")),
    "E": (3, 3, 3, 5, ("variant", "temperature", "judge", "variant:temperature", "variant:judge")),
}


def coverage_spec(n_items: int, fixed_levels: bool = False) -> SimulationSpec:
    """Table 8's design at N items; ``fixed_levels``: temperature and judge at Table 8's fixed levels
    {-0.15, 0, 0.15} (the paper's DGP) rather than drawn afresh, with the same variance, in every study."""
    if n_items % CATEGORIES:
        raise DesignError(f"N must be a multiple of {CATEGORIES} (items are spread over {CATEGORIES} categories).")
    return SimulationSpec(
        counts={"category": CATEGORIES, "item": n_items // CATEGORIES, "variant": 3, "temperature": 3, "judge": 3},
        components=TABLE8, nest={"item": "category"}, replicates=5, mu=MU, object="item",
        fixed=("temperature", "judge") if fixed_levels else (),
    )


def _replicate(task: tuple) -> list[dict]:
    """One simulated study: every scenario's estimate, SE and coverage at N items, by the interval's own
    quantile (Satterthwaite's t for the fitted models) and by the normal one (a Wald interval, as lme4's)."""
    n_items, seed, scenarios, level, *rest = task
    rng = np.random.default_rng(seed)
    frame = simulate(coverage_spec(n_items, bool(rest and rest[0])), rng)
    pick = {f: f"{f[0]}{rng.integers(1, 4)}" for f in ("variant", "temperature", "judge")}
    out = []
    for name in scenarios:
        v, h, m, r, modelled = SCENARIOS[name]
        sub = frame
        for facet, count in (("variant", v), ("temperature", h), ("judge", m)):
            if count == 1:
                sub = sub[sub[facet].astype(str) == pick[facet]]
        sub = sub[sub["replicate"] <= r]
        if name == "A":
            y = sub["score"].to_numpy()
            est, se = float(y.mean()), float(y.std(ddof=1) / math.sqrt(y.size))
            z = 1.959963984540054
            low, high = est - z * se, est + z * se
        else:
            facets = [Facet("category"), Facet("item", "object", "category")]
            facets += [Facet(f) for f in ("variant", "temperature", "judge") if f in modelled]
            terms = ("category", "category:item", *tuple(modelled))
            design = Design(tuple(facets), replicate="replicate", terms=terms)
            ci = theta_interval(anova_from_coded(code_data(sub, design)), level=level)
            est, se, low, high = ci.estimate, ci.se, ci.low, ci.high
        wald = float(ndtri(0.5 + level / 2)) * se
        out.append({"scenario": name, "n": n_items, "estimate": est, "se": se,
                    "covered": bool(low <= MU <= high), "covered_wald": bool(abs(est - MU) <= wald)})
    return out


@dataclass(frozen=True)
class CoverageResult(Result):
    results: pd.DataFrame  # scenario, n, coverage, mean_se, mc_se, reps
    raw: pd.DataFrame

    def to_dict(self) -> dict:
        return {"results": self.results.to_dict(orient="records"), "truth": MU,
                "components": TABLE8, "design": "5 categories x N/5 items x V=3 x H=3 x M=3 x R=5"}


def coverage_study(n_items: Iterable[int] = (20, 200, 2000), scenarios: Iterable[str] = "ABCDE",
                   reps: int = 200, seed: int = 0, level: float = 0.95,
                   scheduler: str | None = None, fixed_levels: bool = False) -> CoverageResult:
    """95 % CI coverage of the naive and progressively fuller models across N (TEE E.4, Fig. 1): ``coverage``
    by each interval's own quantile (Satterthwaite's t), ``coverage_wald`` by the normal quantile (lme4 gives
    no df: a Wald interval, the paper's reading); ``fixed_levels`` puts temperature and judge at Table 8's
    fixed levels (the paper's DGP) instead of drawing them afresh in each study.

    ``scheduler``: a Dask distributed scheduler address ("tcp://host:8786") or
    a ``dask.distributed.Client``; replicates then run as cluster tasks.
    """
    scenarios = tuple(s.strip().upper() for s in scenarios if s.strip() and s != ",")
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown:
        raise DesignError(f"unknown scenario(s) {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}.")
    seeds = np.random.SeedSequence(seed).spawn(reps * len(tuple(n_items)))
    tasks = [(int(n), int(s.generate_state(1)[0]), scenarios, level, fixed_levels)
             for n, block in zip(n_items, np.array_split(np.arange(len(seeds)), len(tuple(n_items))), strict=True)
             for s in (seeds[i] for i in block)]
    rows = _map(_replicate, tasks, scheduler)
    raw = pd.DataFrame([r for batch in rows for r in batch])
    summary = (raw.groupby(["scenario", "n"], sort=True)
               .agg(coverage=("covered", "mean"), coverage_wald=("covered_wald", "mean"), mean_se=("se", "mean"),
                    reps=("covered", "size"))
               .reset_index())
    summary["mc_se"] = np.sqrt(summary["coverage"] * (1 - summary["coverage"]) / summary["reps"])
    return CoverageResult(summary, raw)


def _map(func, tasks: list, scheduler):
    if scheduler is None:
        return [func(t) for t in tasks]
    try:
        from dask.distributed import Client
    except ImportError:  # pragma: no cover - dask is an optional extra
        raise DesignError("a scheduler address needs dask.distributed: pip install 'evalgauge[dask]'.") from None
    client = scheduler if hasattr(scheduler, "map") else Client(scheduler)
    try:
        return client.gather(client.map(func, tasks, pure=False))
    finally:
        if client is not scheduler:
            client.close()


# ---------------------------------------------------------------------------
# D-study projection bias (TEE E.2)
# ---------------------------------------------------------------------------

BIAS_SCENARIOS = ("baseline", "correlated", "non-exchangeable", "heavy-tails", "heterogeneous")


@dataclass(frozen=True)
class ProjectionBias(Result):
    """The D-study's projection bias from pilots (TEE E.2, Table 7): the mean projected Var(theta-hat) at
    ``target`` against the true one, its relative bias and that bias's Monte Carlo standard error."""

    scenario: str
    reps: int
    target: dict[str, float]
    true_var_abs: float
    mean_projected: float
    relative_bias: float
    mc_se: float

    def to_dict(self) -> dict:
        return {"scenario": self.scenario, "reps": self.reps, "target": self.target,
                "true_var_abs": self.true_var_abs, "mean_projected": self.mean_projected,
                "relative_bias": self.relative_bias, "mc_se": self.mc_se}


def projection_bias(reps: int = 200, seed: int = 0, scenario: str = "baseline", pilot_items: int = 30,
                    target: dict[str, float] | None = None, scheduler: str | None = None) -> ProjectionBias:
    """Relative bias of the projected Var(theta-hat) at a target design, from pilots (TEE E.2, Table 7).

    Each replicate draws a pilot (``pilot_items`` items in 5 categories, V=3,
    H=3, M=3, R=5) from Table 8's components, perturbed by the scenario, fits
    the standard model and projects Var(theta-hat) to ``target`` (default: 2x
    items, V=5); the bias is mean(projected) / true - 1 with the true value
    from the generating components (each perturbation keeps its component's
    average variance, so the truth is the same for every scenario). TEE's five
    scenarios, as defined here (the paper states only their key parameter):

    * ``baseline``: correctly specified;
    * ``correlated``: item x variant variance grows with item difficulty,
      var_i proportional to exp(2 z_i), z_i the standardised item effect (alpha = 2);
    * ``non-exchangeable``: variants from two clusters whose variances differ 8-fold;
    * ``heavy-tails``: residuals Student-t with 5 df, scaled to the same variance;
    * ``heterogeneous``: item x variant variance 0.25x in half the categories and 4x in
      the other half (rescaled to the same average).
    """
    if scenario not in BIAS_SCENARIOS:
        raise DesignError(f"scenario must be one of {', '.join(BIAS_SCENARIOS)}.")
    from ..components import VarianceComponents
    from ..dstudy import project

    target = target or {"item": 2 * pilot_items, "variant": 5}
    seeds = np.random.SeedSequence(seed).spawn(reps)
    tasks = [(pilot_items, int(s.generate_state(1)[0]), scenario, tuple(target.items())) for s in seeds]
    projected = np.array(_map(_projection_once, tasks, scheduler))
    spec = coverage_spec(pilot_items)
    truth_vc = VarianceComponents.from_values(
        dict(TABLE8),
        levels={"category": CATEGORIES, "item": pilot_items, "variant": 3, "temperature": 3, "judge": 3},
        replicates=spec.replicates, nesting={"item": "category"})
    true = project(truth_vc, target, object="").var_abs
    return ProjectionBias(scenario, reps, target, true, float(projected.mean()), float(projected.mean() / true - 1),
                          float(projected.std(ddof=1) / math.sqrt(reps) / true))


def _projection_once(task) -> float:
    from ..dstudy import project

    pilot_items, seed, scenario, target = task
    rng = np.random.default_rng(seed)
    frame = _perturbed_pilot(coverage_spec(pilot_items), scenario, rng)
    design = Design((Facet("category"), Facet("item", "object", "category"), Facet("variant"),
                     Facet("temperature"), Facet("judge")), replicate="replicate",
                    terms=tuple(k for k in TABLE8 if k != RESIDUAL))
    vc = anova_from_coded(code_data(frame, design))
    return project(vc, dict(target), object="").var_abs


def _perturbed_pilot(spec: SimulationSpec, scenario: str, rng: np.random.Generator) -> pd.DataFrame:
    """Draw a pilot from Table 8, with one component replaced by the scenario's perturbed version."""
    comps = dict(spec.components)
    perturbed = {"heavy-tails": RESIDUAL, "non-exchangeable": "variant", "correlated": "category:item:variant",
                 "heterogeneous": "category:item:variant"}.get(scenario)
    value = comps.pop(perturbed) if perturbed else None
    base = SimulationSpec(spec.counts, comps, spec.nest, spec.fixed, spec.replicates, spec.mu, spec.object)
    frame = simulate(base, rng)
    if scenario == "baseline":
        return frame
    n = len(frame)
    item = pd.factorize(frame["item"], sort=True)[0]
    variant = pd.factorize(frame["variant"], sort=True)[0]
    n_items, n_var = item.max() + 1, variant.max() + 1
    if scenario == "heavy-tails":
        noise = rng.standard_t(5, n) * math.sqrt(value * 3 / 5)  # Var(t_5) = 5/3
    elif scenario == "non-exchangeable":
        ratio = np.where(np.arange(n_var) % 2 == 0, 8.0, 1.0)
        effect = rng.normal(0.0, 1.0, n_var) * np.sqrt(value * ratio / ratio.mean())
        noise = effect[variant]
    else:
        if scenario == "correlated":
            # the item's own effect, recovered from its mean over everything else (z-scored)
            means = np.bincount(item, weights=frame["score"].to_numpy(), minlength=n_items) / np.bincount(item)
            z = (means - means.mean()) / means.std()
            scale = np.exp(2 * z)
        else:
            category = pd.factorize(frame["category"], sort=True)[0]
            cat_of_item = np.zeros(n_items, dtype=int)
            cat_of_item[item] = category
            scale = np.where(cat_of_item % 2 == 0, 0.25, 4.0)
        effect = rng.normal(0.0, 1.0, (n_items, n_var)) * np.sqrt(value * scale / scale.mean())[:, None]
        noise = effect[item, variant]
    frame["score"] = frame["score"].to_numpy() + noise
    return frame


# ---------------------------------------------------------------------------
# Intervention ranking (TEE E.2, Fig. 9a; sec. 3.3's "correct top-1 intervention")
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class InterventionAccuracy(Result):
    """How often the pilots' first intervention is the truth's (``top1_accuracy``; the truth's is ``true_top``),
    and ``interventions``: each single-factor intervention's true % change of Var(theta-hat) (``true_pct``)
    beside the pilots' mean projected one (``mean_projected_pct``), in the truth's order; ``pilot_items`` each
    pilot's items."""

    reps: int
    fixed_levels: bool
    true_top: str
    top1_accuracy: float
    interventions: pd.DataFrame
    pilot_items: int = 30

    def to_dict(self) -> dict:
        return {"reps": self.reps, "fixed_levels": self.fixed_levels, "true_top": self.true_top,
                "top1_accuracy": self.top1_accuracy, "interventions": self.interventions.to_dict(orient="records")}

    def to_frame(self) -> pd.DataFrame:
        return self.interventions.copy()


def intervention_accuracy(reps: int = 200, seed: int = 0, pilot_items: int = 30, fixed_levels: bool = False,
                          scheduler: str | None = None) -> InterventionAccuracy:
    """How often a pilot's D-study names the right first intervention (TEE sec. 3.3, E.2 Fig. 9a).

    Each replicate draws a pilot from Table 8 (``pilot_items`` items in 5 categories, V=3, H=3, M=3, R=5), fits
    it, and ranks the single-factor interventions by their projected % change of Var(theta-hat); the truth ranks
    them on the generating components. ``fixed_levels``: temperature and judge at Table 8's fixed levels and
    declared fixed (Tier 2: no intervention changes them), as the paper classifies them; otherwise both random.
    Returns the share of pilots whose first intervention is the truth's, and each intervention's mean projected
    % change beside the true one.
    """
    from ..components import VarianceComponents
    from ..dstudy import interventions

    fixed = ("temperature", "judge") if fixed_levels else ()
    levels = {"category": CATEGORIES, "item": pilot_items, "variant": 3, "temperature": 3, "judge": 3}
    truth = interventions(VarianceComponents.from_values(dict(TABLE8), levels, 5, object="item", fixed=fixed,
                                                         nesting={"item": "category"}))
    seeds = np.random.SeedSequence(seed).spawn(reps)
    tasks = [(pilot_items, int(s.generate_state(1)[0]), fixed_levels) for s in seeds]
    runs = _map(_interventions_once, tasks, scheduler)
    top = [r.iloc[0]["intervention"] for r in runs]
    projected = pd.concat(runs).groupby("intervention")["pct_change_var_abs"].mean()
    table = truth[["intervention", "pct_change_var_abs"]].rename(columns={"pct_change_var_abs": "true_pct"})
    table["mean_projected_pct"] = table["intervention"].map(projected)
    true_top = truth.iloc[0]["intervention"]
    return InterventionAccuracy(reps, fixed_levels, true_top, float(np.mean([t == true_top for t in top])),
                                table.reset_index(drop=True), pilot_items)


def _interventions_once(task) -> pd.DataFrame:
    from ..dstudy import interventions

    pilot_items, seed, fixed_levels = task
    rng = np.random.default_rng(seed)
    frame = simulate(coverage_spec(pilot_items, fixed_levels), rng)
    role = "fixed" if fixed_levels else "random"
    design = Design((Facet("category"), Facet("item", "object", "category"), Facet("variant"),
                     Facet("temperature", role), Facet("judge", role)), replicate="replicate",
                    terms=tuple(k for k in TABLE8 if k != RESIDUAL))
    return interventions(anova_from_coded(code_data(frame, design)))


# ---------------------------------------------------------------------------
# Latent item ambiguity (TEE E.5, Table 10)
# ---------------------------------------------------------------------------

#: TEE E.5's design: 30 items in 5 categories, 3 prompts, 2 temperatures, 3 judges, 3 replications (1,620 cells)
AMBIGUITY_COUNTS = {"category": CATEGORIES, "item": 6, "variant": 3, "temperature": 2, "judge": 3}
AMBIGUITY_REPLICATES = 3
#: the sparse 3-way item x prompt x judge variance of the ambiguous items (z_i > 1)
AMBIGUITY_THREE_WAY = 0.01
#: TEE Table 10 as printed: gamma -> (coverage %, max |relative bias| %, D-study Spearman rho)
TABLE10 = {0.0: (90.5, 8.8, 1.00), 0.5: (88.7, 6.7, 1.00), 1.0: (90.3, 3.4, 1.00), 2.0: (91.2, 6.0, 1.00)}
_SCALED = ("category:item:variant", "category:item:judge")


def ambiguity_truth(gamma: float) -> dict[str, float]:
    """The marginal components the TEE model estimates under E.5's DGP (Table 8's, with the item x prompt and item
    x judge variances scaled by E[1 + gamma z^2] = 1 + gamma; the 3-way of the ambiguous items is no term of the
    model, so it is not in this truth and pools into the residual)."""
    return {k: v * (1 + gamma) if k in _SCALED else v for k, v in TABLE8.items()}


def _ambiguity_once(task) -> dict:
    """One E.5 study: draw the factorial, fit the two-way TEE model (balanced ANOVA), and return theta-hat's
    coverage of mu, every component's estimate and the fitted intervention ranking."""
    from ..dstudy import interventions

    gamma, seed, level = task
    rng = np.random.default_rng(seed)
    base = {k: v for k, v in TABLE8.items() if k not in _SCALED}
    spec = SimulationSpec(counts=dict(AMBIGUITY_COUNTS), components=base, nest={"item": "category"},
                          replicates=AMBIGUITY_REPLICATES, mu=MU, object="item")
    frame = simulate(spec, rng)
    item = pd.factorize(frame["category"].astype(str) + "/" + frame["item"].astype(str), sort=True)[0]
    variant = pd.factorize(frame["variant"], sort=True)[0]
    judge = pd.factorize(frame["judge"], sort=True)[0]
    n_items, n_var, n_judge = item.max() + 1, variant.max() + 1, judge.max() + 1
    z = rng.standard_normal(n_items)  # each item's latent ambiguity
    scale = np.sqrt(1 + gamma * z**2)
    iv = rng.standard_normal((n_items, n_var)) * math.sqrt(TABLE8["category:item:variant"]) * scale[:, None]
    ij = rng.standard_normal((n_items, n_judge)) * math.sqrt(TABLE8["category:item:judge"]) * scale[:, None]
    three = rng.standard_normal((n_items, n_var, n_judge)) * math.sqrt(AMBIGUITY_THREE_WAY) \
        * (z > 1)[:, None, None]
    frame["score"] = frame["score"].to_numpy() + iv[item, variant] + ij[item, judge] + three[item, variant, judge]
    design = Design((Facet("category"), Facet("item", "object", "category"), Facet("variant"),
                     Facet("temperature"), Facet("judge")), replicate="replicate",
                    terms=tuple(k for k in TABLE8 if k != RESIDUAL))
    vc = anova_from_coded(code_data(frame, design))
    ci = theta_interval(vc, level=level)
    ranking = interventions(vc)[["intervention", "pct_change_var_abs"]]
    wald = float(ndtri(0.5 + level / 2)) * ci.se
    return {"covered": bool(ci.low <= MU <= ci.high), "covered_wald": bool(abs(ci.estimate - MU) <= wald),
            "estimates": {c.name: c.variance for c in vc.components},
            "ranking": dict(zip(ranking["intervention"], ranking["pct_change_var_abs"], strict=True))}


def component_bias(estimates: pd.DataFrame, truth: dict[str, float]) -> dict:
    """The studies' mean estimate of every non-residual component against ``truth``: each relative bias, the
    largest and its component, and the largest bias in Monte Carlo standard errors (with 2-5 levels of a facet
    one standard error is several percent)."""
    terms = [k for k in truth if k in estimates and k != RESIDUAL]
    bias = {k: float(estimates[k].mean() / truth[k] - 1) for k in terms}
    worst = max(bias, key=lambda k: abs(bias[k]))
    n = len(estimates)
    z = max(abs(estimates[k].mean() - truth[k]) / (estimates[k].std(ddof=1) / math.sqrt(n)) for k in terms)
    return {"max_abs_rel_bias": abs(bias[worst]), "worst_component": worst, "max_bias_mc_se": float(z),
            "rel_bias": bias}


@dataclass(frozen=True)
class AmbiguityStudy(Result):
    """TEE E.5's study (Table 10): ``rows``, one per gamma (see :func:`ambiguity_study`), of ``reps`` studies."""

    reps: int
    rows: pd.DataFrame

    def to_dict(self) -> dict:
        return {"reps": self.reps, "rows": self.rows.to_dict(orient="records")}

    def to_frame(self) -> pd.DataFrame:
        return self.rows.copy()


def ambiguity_study(gammas: Iterable[float] = (0.0, 0.5, 1.0, 2.0), reps: int = 200, seed: int = 0,
                    level: float = 0.95, scheduler: str | None = None) -> AmbiguityStudy:
    """TEE E.5 (Table 10): D-study stability under latent item ambiguity. Per gamma, ``reps`` studies of E.5's
    design (:data:`AMBIGUITY_COUNTS`, R = 3; Table 8's components, which E.5 does not restate) whose item x
    prompt and item x judge effects have variance scaled by 1 + gamma z_i^2 (z_i ~ N(0, 1), each item's latent
    ambiguity) and whose items with z_i > 1 carry a 3-way item x prompt x judge effect of variance 0.01, fitted
    with the two-way TEE model. Per gamma: the coverage of mu by theta-hat's interval (Satterthwaite's t, and the
    normal's: a Wald interval, as lme4's), the largest |relative
    bias| of a non-residual component against :func:`ambiguity_truth` (and the largest bias in Monte Carlo standard
    errors), the residual's relative bias (the 3-way pools into the model's cell term, not there), and the
    Spearman correlation of the mean projected intervention effects with the true ones."""
    from ..components import VarianceComponents
    from ..dstudy import interventions

    levels = {"category": CATEGORIES, "item": AMBIGUITY_COUNTS["item"] * CATEGORIES, "variant": 3,
              "temperature": 2, "judge": 3}
    rows = []
    for gamma in gammas:
        truth = ambiguity_truth(gamma)
        true_rank = interventions(VarianceComponents.from_values(dict(truth), levels, AMBIGUITY_REPLICATES,
                                                                 object="item", nesting={"item": "category"}))
        seeds = np.random.SeedSequence([seed, round(gamma * 1000)]).spawn(reps)
        runs = _map(_ambiguity_once, [(gamma, int(s.generate_state(1)[0]), level) for s in seeds], scheduler)
        est = pd.DataFrame([r["estimates"] for r in runs])
        bias = component_bias(est, truth)
        projected = pd.DataFrame([r["ranking"] for r in runs]).mean()
        true_pct = dict(zip(true_rank["intervention"], true_rank["pct_change_var_abs"], strict=True))
        common = [k for k in true_pct if k in projected]
        rho = float(pd.Series([true_pct[k] for k in common]).corr(pd.Series([projected[k] for k in common]),
                                                                   method="spearman"))
        coverage = float(np.mean([r["covered"] for r in runs]))
        rows.append({"gamma": gamma, "reps": reps, "coverage": coverage,
                     "coverage_mc_se": math.sqrt(coverage * (1 - coverage) / reps),
                     "coverage_wald": float(np.mean([r["covered_wald"] for r in runs])),
                     **bias,
                     "residual_rel_bias": float(est[RESIDUAL].mean() / truth[RESIDUAL] - 1), "spearman_rho": rho,
                     "paper_coverage": TABLE10.get(gamma, (None,) * 3)[0],
                     "paper_max_abs_rel_bias": TABLE10.get(gamma, (None,) * 3)[1],
                     "paper_rho": TABLE10.get(gamma, (None,) * 3)[2]})
    return AmbiguityStudy(reps, pd.DataFrame(rows))
