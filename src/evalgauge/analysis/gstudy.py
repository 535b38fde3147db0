"""Everything `evalgauge analyze` reports, derived once from a fit: intervals, D-study, checklist.

From judgments, the model they were fitted with and the fitted components (what :class:`evalgauge.api.Fit`
holds), without reading or fitting again: theta-hat's full CI beside the naive one, the shares of
Var(theta-hat), the single-judge ceiling, MDD and judges needed when systems are compared, ranked
interventions, which system is better, and TEE's three-tier reporting checklist (Table 15) with the run's
integrity warnings when a run database's diagnostics are given.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .. import dstudy, vocabulary
from ..components import VarianceComponents
from ..data import Judgments
from ..errors import DesignError
from ..estimate.spec import ModelSpec
from ..inference import ObjectInterval, ThetaInterval, object_interval, theta_interval
from ..results import Result, json_safe
from .checklist import checklist
from .diagnostics import RunDiagnostics


@dataclass
class Analysis(Result):
    source: str
    components: VarianceComponents
    theta: ThetaInterval | None
    projection: dstudy.Projection
    interventions: pd.DataFrame
    judge_facet: str | None
    item_facet: str | None
    ceiling: dstudy.Ceiling | None = None
    judges_needed: dstudy.Requirement | None = None
    diagnostics: RunDiagnostics | None = None
    run_meta: dict = field(default_factory=dict)
    adaptive: dict | None = None  # the path of an adaptive run: target, stages, outcome
    checklist: list[dict] = field(default_factory=list)
    curves: dict[str, Any] = field(default_factory=dict)
    pairwise: dict | None = None  # Bradley-Terry table and position bias, for pairwise data
    object_interval: ObjectInterval | None = None  # one system's score: full vs naive error
    object_scores: pd.DataFrame | None = None  # each system's mean with both intervals
    comparison: Any = None  # evalgauge.compare.Comparison: which system is better
    #: the range a mean of the scores cannot leave (:func:`judgments_bounds`); every interval stays inside it
    bounds: tuple | None = None
    #: conditional modes of the facets' levels with intervals, the items judged most apart, Q-Q data (C.6)
    effects: EffectsSummary | None = None
    #: the fit it was derived from (:class:`evalgauge.api.Fit`), for its other verbs (strata, GLMM); not written
    fit: Any = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict:
        out = {
            "source": self.source,
            "components": self.components.to_dict(),
            "theta": self.theta.to_dict() if self.theta else None,
            "var_theta_shares": self.projection.shares(),
            "sensitivity_indices": self.projection.sensitivity,
            "design": self.projection.to_dict(),
            "interventions": _records(self.interventions),
            "checklist": self.checklist,
        }
        if self.ceiling:
            out["ceiling"] = {"facet": self.ceiling.facet, "erho2": self.ceiling.erho2,
                              "mdd_floor": self.ceiling.mdd95}
            out["mdd95"] = self.projection.mdd95
            out["erho2"] = self.projection.erho2
        if self.judges_needed:
            req = self.judges_needed
            out["judges_needed"] = {"target_erho2": req.target, "count": req.count, "reachable": req.reachable,
                                    "limit": req.limit, "text": str(req)}
        if self.diagnostics is not None:
            out["diagnostics"] = self.diagnostics.to_dict()
        if self.effects is not None:
            out["effects"] = self.effects.to_dict()
        if self.adaptive:
            out["adaptive"] = self.adaptive
        if self.pairwise:
            out["pairwise"] = self.pairwise
        if self.object_interval is not None:
            out["object_scores"] = {"interval": self.object_interval.to_dict(),
                                    "scores": _records(self.object_scores)}
        if self.comparison is not None:
            out["comparison"] = self.comparison.to_dict()
        return json_safe(out)  # the one sanitiser: no NaN in JSON


def _records(frame: pd.DataFrame) -> list[dict]:
    return [dict(r) for r in frame.to_dict(orient="records")]



def derive(judgments: Judgments, spec: ModelSpec, components: VarianceComponents, *, target_erho2: float = 0.8,
           n_boot_compare: int = 2000, ddf: str = "satterthwaite", assumed: dict | None = None,
           diagnostics: RunDiagnostics | None = None, run_meta: dict | None = None) -> Analysis:
    """Everything the analysis reports, from ``components`` fitted to ``judgments`` under ``spec``.

    ``assumed`` states components the data cannot measure ({"system:judge": 0.01} with one judge); every
    interval then counts them (:func:`evalgauge.compare.with_assumed`). ``ddf`` is the comparisons' df method
    (:func:`evalgauge.compare.compare`). ``diagnostics`` and ``run_meta`` are a run database's integrity
    checks and record (the checklist reads them). Raises :class:`evalgauge.errors.ConvergenceError` for a fit
    that did not converge: none of its intervals is a result.
    """
    vc = components
    run_meta = dict(run_meta or {})
    try:
        vc.require_converged("its intervals")
    except DesignError as exc:
        raise type(exc)(f"{judgments.source}: {exc}") from None
    if not any(c.kind != vocabulary.RESIDUAL for c in vc.components):
        raise DesignError(f"{judgments.source}: nothing to estimate besides the residual.")
    if assumed:
        from ..compare import with_assumed

        vc = with_assumed(vc, assumed)
    judge = vc.role("judge")
    # the items: a facet, or the object itself when items are what is measured (TEE): theta-hat's curve over N
    item = vc.role("item") or (vc.object if vocabulary.role_of(vc.object or "") == "item" else None)
    bounds = judgments_bounds(judgments, spec.score, run_meta)
    theta = _theta_or_none(vc, bounds)
    if theta is not None and theta.df < 1:  # an interval on less than one degree of freedom is not a result
        theta = None
    result = Analysis(judgments.source, vc, theta, dstudy.project(vc), dstudy.interventions(vc), judge, item,
                      diagnostics=diagnostics, run_meta=run_meta, bounds=bounds)
    if vc.object and judge and judge != vc.object:
        result.ceiling = dstudy.ceiling(vc, judge, 1)
        result.judges_needed = dstudy.needed(vc, judge, target_erho2)
    if vc.object and item and item != vc.object and vc.object in judgments.frame:
        result.object_interval = object_interval(vc, sampling_facet=item)
        result.object_scores = object_scores(judgments.frame, vc.object, spec.score, result.object_interval)
        if judgments.frame[vc.object].nunique() > 1 and spec.design is not None:
            from ..compare import compare_fitted

            # which system is better: each system's own interval (its own cells) and every pair
            result.comparison = compare_fitted(judgments, spec, vc, n_boot=n_boot_compare, ddf=ddf)
            sysf = result.comparison.systems
            result.object_scores = pd.DataFrame({
                vc.object: sysf["object"], "mean": sysf["mean"], "n": sysf["n"], "low": sysf["low"],
                "high": sysf["high"], "naive_low": sysf["naive_low"], "naive_high": sysf["naive_high"]})
        else:  # one object: its interval kept inside the scale here (a comparison's board keeps its own inside)
            result.object_scores = _bounded_rows(result.object_scores, bounds)
    if run_meta.get("adaptive"):
        result.adaptive = json.loads(run_meta["adaptive"])
    result.checklist = checklist(vc, run_meta, diagnostics)
    result.curves = _curves(vc, judge, item, theta)
    result.effects = effects_summary(judgments, spec, vc, item)
    return result


#: how many items the effects summary lists as the ones the judges (or variants) disagree on most
DISAGREED_ITEMS = 10


@dataclass
class EffectsSummary(Result):
    """The conditional modes the analysis shows (TEE C.6): ``levels`` (term, level, mode, sd, 95% low and high)
    of the judge, variant and other non-item facets; ``disagreed_items`` (item, spread, across: the judges or
    the variants) where they disagree most; ``qq`` each term's standardised modes, sorted, for a Q-Q plot;
    ``residuals`` cells' fitted values and residuals (a seeded sample) and the cell count."""

    levels: pd.DataFrame
    disagreed_items: list[dict[str, Any]]
    qq: dict[str, list[float]]
    residuals: dict[str, Any]

    def to_dict(self) -> dict:
        return json_safe({"levels": _records(self.levels), "disagreed_items": self.disagreed_items, "qq": self.qq,
                          "residuals": self.residuals})

    def to_frame(self) -> pd.DataFrame:
        return self.levels.copy()


def effects_summary(judgments: Judgments, spec: ModelSpec, vc: VarianceComponents,
                    item: str | None) -> EffectsSummary | None:
    """The conditional modes the report shows (TEE C.6): every level of the judge, variant and other non-item
    facets with its 95% interval (mode +- 1.96 conditional SD: who is harsh, and how surely), the items whose
    interaction modes with the judges (else the variants) spread the most (where the judges disagree), and each
    term's modes for a Q-Q plot. None where the model has no such term or no residual to weigh by."""
    from ..estimate.effects import fit_of, has_residual
    from ..estimate.spec import fitted_model

    model = fitted_model(spec, vc)
    main = [t.name for t in model.random if len(t.columns) == 1 and t.columns[0] != item]
    if not main or not has_residual(vc["residual"].variance, [c.variance_truncated for c in vc.components
                                                              if c.kind == "random"]):
        return None
    solved, cells = fit_of(judgments, model, vc, sd_of=main)
    effects = solved.effects
    levels = effects[effects["term"].isin(main)].assign(
        low=lambda f: f["mode"] - dstudy.Z95 * f["sd"], high=lambda f: f["mode"] + dstudy.Z95 * f["sd"])
    disagreed: list[dict[str, Any]] = []
    qq: dict[str, list[float]] = {}
    for other in (vc.role("judge"), vc.role("variant")):
        term = next((t for t in model.random if item and set(t.columns) == {item, other}), None) if other else None
        if term is None or vc[term.name].variance <= 0:
            continue
        modes = effects[effects["term"] == term.name]
        owner = modes["level"].str.split(":").str[term.columns.index(item)]
        spread = modes.groupby(owner)["mode"].std(ddof=0)
        # ties (items whose judges' modes spread alike, common with 0/1 scores) in the items' order: without
        # the rounding their order would follow the last bits of the solve
        ranked = sorted(spread.items(), key=lambda kv: (-float(f"{kv[1]:.10g}"), str(kv[0])))
        disagreed = [{"item": k, "spread": float(v), "across": other} for k, v in ranked[:DISAGREED_ITEMS]]
        break
    for name, modes in effects.groupby("term", sort=False)["mode"]:
        if modes.size >= 3 and vc[name].variance > 0:  # standardised by the term's SD: N(0, 1) if the model holds
            qq[name] = sorted(float(m) for m in modes / math.sqrt(vc[name].variance))
    # each cell's mean against its fitted value (X beta + Z u), a seeded sample of at most RESIDUAL_CELLS
    keep = np.random.default_rng(0).permutation(cells.n_cells)[:RESIDUAL_CELLS]
    residuals = {"fitted": solved.fitted[keep].tolist(), "residual": (cells.mean - solved.fitted)[keep].tolist(),
                 "cells": cells.n_cells}
    return EffectsSummary(levels, disagreed, qq, residuals)


#: the cells the residual-against-fitted plot shows at most (a seeded sample beyond)
RESIDUAL_CELLS = 2000


def derive_pairwise(judgments: Judgments, *, method: str = "auto", target_erho2: float = 0.8,
                    n_boot: int = 100, fitter=None) -> Analysis:
    """Pairwise rows: the analysis `evalgauge pairwise` prints (Bradley-Terry with both bootstraps,
    position bias) and the components of the win indicators with position a fixed facet (sizing sec. 5.4);
    ``fitter`` as in :func:`evalgauge.analysis.pairwise.analyze_pairwise`."""
    from .pairwise import analyze_pairwise

    if "item" not in judgments.frame:
        raise DesignError(f"{judgments.source}: pairwise rows need an 'item' column for the variance components "
                          "(which prompt each battle was on); `evalgauge pairwise` fits Bradley-Terry without it.")
    pw = analyze_pairwise(judgments, n_boot=n_boot, method=method, fitter=fitter)
    vc = pw.components
    if vc is None:
        raise DesignError(f"{judgments.source}: the win-indicator components could not be estimated"
                          + (f" ({pw.notes[-1]})" if pw.notes else "") + ".")
    info: dict[str, Any] = {"bradley_terry": _records(pw.table), "reference": pw.fit.reference,
                            "position_log_odds": pw.fit.log_h, "notes": list(pw.notes)}
    if "position_bias" in pw.payload:
        bias = pw.payload["position_bias"]
        info["position_bias"] = {k: bias[k] for k in ("slot_a_advantage", "spread_sd", "max")}
    judge = "judge" if "judge" in vc.levels else None
    result = Analysis(judgments.source, vc, _theta_or_none(vc), dstudy.project(vc), dstudy.interventions(vc),
                      judge, "item", pairwise=info)
    if judge:
        result.ceiling = dstudy.ceiling(vc, judge, 1)
        result.judges_needed = dstudy.needed(vc, judge, target_erho2)
    result.checklist = checklist(vc, {}, None)
    result.curves = _curves(vc, judge, "item", result.theta)
    return result


def _theta_or_none(vc, bounds=None):
    try:
        return theta_interval(vc, bounds=bounds)
    except DesignError:
        return None


def judgments_bounds(judgments: Judgments, score: str, run_meta: dict | None = None):
    """The range a mean of the scores cannot leave: the run's own scale (its ``scale`` record, "low,high": a
    likert run's scale_min..scale_max, 0-1 for binary and pairwise verdicts), else what the scores show
    (:func:`evalgauge.inference.score_bounds`)."""
    from ..inference import score_bounds

    text = (run_meta or {}).get("scale")
    if text:
        try:
            low, high = (float(v) for v in str(text).split(","))
            return ("proportion" if (low, high) == (0.0, 1.0) else "scale", low, high)
        except ValueError:
            pass
    if score not in judgments.frame:
        return None
    return score_bounds(pd.to_numeric(judgments.frame[score], errors="coerce").to_numpy())


def _bounded_rows(frame: pd.DataFrame, bounds) -> pd.DataFrame:
    """Each object's full and naive intervals around its ``mean`` kept inside ``bounds``
    (:func:`evalgauge.inference.keep_inside`, from each row's own half-width)."""
    from ..inference import keep_inside

    if bounds is None or frame.empty:
        return frame
    out = frame.copy()
    for lo, hi in (("low", "high"), ("naive_low", "naive_high")):
        out[lo], out[hi], _ = keep_inside(out["mean"].to_numpy(dtype=float), out[lo], out[hi], bounds)
    return out


def single_run(judgments: Judgments, spec: ModelSpec, *, level: float = 0.95, assumed: dict | None = None):
    """One model's run, where only the items vary and each is scored once (an lm-eval or Inspect log): its
    :class:`evalgauge.inference.SingleRunInterval` (TEE eq. 3 with one judge, one variant, one call), or None
    when the data hold more than that."""
    from ..inference import single_run_interval

    if spec.design is None or len(spec.design.names) != 1 or vocabulary.role_of(spec.design.names[0]) != "item":
        return None
    item, frame = spec.design.names[0], judgments.frame
    if frame[item].duplicated().any():  # several calls per item: item and call noise separate, the fit applies
        return None
    one_level = {c: str(frame[c].iloc[0]) for c in frame.columns
                 if c not in (item, spec.score) and frame[c].nunique(dropna=False) == 1}
    if not any(c in one_level for c in vocabulary.REPLICATE_COLUMNS):
        one_level["run"] = "1"  # no replicate column: one call per item
    return single_run_interval(pd.to_numeric(frame[spec.score], errors="coerce").to_numpy(), item, level=level,
                               assumed=assumed, one_level=one_level)


@dataclass
class ComponentsSummary(Result):
    """A fit's components with what a reader asks of them next: theta-hat's interval (inside the scores'
    bounds; ``theta_unavailable`` says why there is none), the object's score interval, each component's share
    of Var(theta-hat) and, with a bootstrap, the derived numbers' intervals. What ``components`` prints and
    writes, built once for both."""

    components: VarianceComponents
    theta: ThetaInterval | None
    theta_unavailable: str | None
    object_score: ObjectInterval | None
    #: component -> share of Var(theta-hat) at the observed design (None where it takes no part)
    shares: dict[str, float | None]
    derived: pd.DataFrame | None = None

    def to_dict(self) -> dict:
        payload = self.components.to_dict()
        payload["theta"] = self.theta.to_dict() if self.theta is not None else {"unavailable": self.theta_unavailable}
        if self.object_score is not None:
            payload["object_score"] = self.object_score.to_dict()
        for comp in payload["components"]:
            comp["share_var_theta"] = self.shares.get(comp["component"])
        if self.derived is not None:
            payload["derived"] = self.derived.to_dict(orient="records")
        return json_safe(payload)

    def to_frame(self) -> pd.DataFrame:
        """One row per component with its share of Var(theta-hat)."""
        return self.components.to_frame().assign(
            share_var_theta=lambda f: f["component"].map(self.shares))


def summarize_components(result: VarianceComponents, bounds=None) -> ComponentsSummary:
    """The summary of a fit's components (:class:`ComponentsSummary`); theta-hat's interval inside ``bounds``
    (:func:`judgments_bounds`)."""
    from ..inference import bootstrap_derived, default_sampling_facet

    theta, unavailable = None, None
    try:
        theta = theta_interval(result, bounds=bounds)
        if theta.df < 1:  # never printed as a result
            raise DesignError(
                f"theta-hat's interval rests on {theta.df:.2g} degree(s) of freedom (Satterthwaite): the components "
                "that dominate it are barely estimated (too few levels of a facet, or a fit at its limits). More "
                "levels of the dominant facets, or a smaller model (`max_order`=2), would make it estimable.")
    except DesignError as exc:
        theta, unavailable = None, str(exc)
    sampled = default_sampling_facet(result)
    score = (object_interval(result, sampling_facet=sampled)
             if result.object and sampled and sampled != result.object else None)
    shares = dstudy.project(result, object="").shares()
    judge = result.role("judge")
    derived = None
    if result.draws is not None and result.object and judge:  # the derived rows include the one-judge ceiling
        derived = bootstrap_derived(result, facet=judge)
    return ComponentsSummary(result, theta, unavailable, score, {c.name: shares.get(c.name)
                                                                for c in result.components}, derived)


def components_summary(result: VarianceComponents, bounds=None) -> dict:
    """The JSON of :func:`summarize_components`: the result's JSON plus theta-hat's intervals, Var(theta-hat)
    shares and bootstrapped derived numbers."""
    return summarize_components(result, bounds).to_dict()


def object_scores(frame: pd.DataFrame, obj: str, score: str, interval: ObjectInterval) -> pd.DataFrame:
    """Each object's mean score (a leaderboard) with the full and the naive interval.

    Both half-widths are those of the observed design (sigma2_Delta and its item-sampling part); an
    object with fewer observations than the others has a somewhat wider interval than shown."""
    y = pd.to_numeric(frame[score], errors="coerce")
    stats = y.groupby(frame[obj].astype(str)).agg(["mean", "count"]).sort_values("mean", ascending=False)
    full, naive = interval.half_widths()
    return pd.DataFrame({
        obj: stats.index, "mean": stats["mean"].to_numpy(), "n": stats["count"].to_numpy(),
        "low": stats["mean"].to_numpy() - full, "high": stats["mean"].to_numpy() + full,
        "naive_low": stats["mean"].to_numpy() - naive, "naive_high": stats["mean"].to_numpy() + naive,
    }).reset_index(drop=True)


def _curves(vc: VarianceComponents, judge: str | None, item: str | None, theta: ThetaInterval | None) -> dict:
    """Data for the figures: nomogram, CI half-width across N, frontier."""
    out: dict[str, Any] = {}
    if item:
        ns = np.unique(np.round(np.geomspace(5, max(2000, 10 * vc.levels[item]), 40)).astype(int))
        full, naive = [], []
        for n in ns:
            p = dstudy.project(vc, {item: float(n)}, object="")
            full.append(1.96 * p.se)
            naive_var = sum(p.contributions[c.name] for c in vc.components
                            if c.name in p.contributions and item in dstudy.term_facets(c, vc))
            naive.append(1.96 * math.sqrt(max(naive_var, 0.0)))
        out["ci_vs_n"] = {"n": ns.tolist(), "full": full, "naive": naive, "observed": vc.levels[item]}
    if item and judge and vc.object and judge != vc.object:
        ns = np.unique(np.round(np.geomspace(5, 5000, 50)).astype(int))
        lines = {}
        for m in (1, 2, 3, 5, 10):
            lines[m] = [dstudy.project(vc, {item: float(n), judge: float(m)}).erho2 for n in ns]
        out["nomogram"] = {"n": ns.tolist(), "lines": lines,
                           "ceilings": {m: dstudy.ceiling(vc, judge, m).erho2 for m in lines}}
        grid = {item: [10, 20, 30, 50, 100, 200, 500], judge: [1, 2, 3, 4, 6, 9]}
        calls = dstudy.CostModel((1.0,), judge, tuple(sorted(dstudy.parent_facets(vc))))  # one per call
        frontier = dstudy.frontier(vc, grid, calls, objective="se")
        frontier["calls"] = frontier["cost"]
        out["frontier"] = {"rows": _records(frontier), "current": {"calls": calls.cost(
            dstudy.observed_counts(vc), vc.replicates), "se": dstudy.project(vc).se}}
    return out
