"""Everything `evalgauge analyze` reports, computed once: components, intervals, D-study, checklist.

Reads the data (any judgments file or a run database), infers or takes the
design, fits (auto: ANOVA on a complete balanced block, REML otherwise) and
derives what a reader needs: theta-hat's full CI beside the naive one, the
shares of Var(theta-hat), the single-judge ceiling, MDD and judges needed when
systems are compared, ranked interventions, the collector's integrity
warnings, and TEE's three-tier reporting checklist (Table 15).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .. import dstudy, vocabulary
from ..components import VarianceComponents
from ..design import Design
from ..errors import DesignError
from ..estimate import estimate_components, resolve_model
from ..inference import ObjectInterval, ThetaInterval, object_interval, theta_interval
from ..io import read_input
from ..results import Result, json_safe


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
    diagnostics: dict | None = None
    run_meta: dict = field(default_factory=dict)
    adaptive: dict | None = None  # the path of an adaptive run: target, stages, outcome
    checklist: list[dict] = field(default_factory=list)
    curves: dict[str, Any] = field(default_factory=dict)
    pairwise: dict | None = None  # Bradley-Terry table and position bias, for pairwise data
    object_interval: ObjectInterval | None = None  # one system's score: full vs naive error
    object_scores: pd.DataFrame | None = None  # each system's mean with both intervals
    comparison: Any = None  # evalgauge.compare.Comparison: which system is better

    def to_dict(self) -> dict:
        out = {
            "source": self.source,
            "components": self.components.to_dict(),
            "theta": self.theta.to_dict() if self.theta else None,
            "var_theta_shares": self.projection.shares(),
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
        if self.diagnostics:
            out["diagnostics"] = self.diagnostics
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


def analyze(data, design: Design | None = None, *, run=None, method: str = "auto", formula: str | None = None,
            drop_missing: bool | None = None, target_erho2: float = 0.8, n_boot: int = 0, level: float = 0.95,
            seed: int | None = None, n_boot_compare: int = 2000, progress=None, assumed: dict | None = None,
            ddf: str = "satterthwaite", components=None, **design_options) -> Analysis:
    """Fit and derive everything the analysis reports.

    ``data`` is a path (a run database brings the collector's diagnostics with it), a judgments table or a
    frame; ``run`` is the :class:`evalgauge.io.runs.RunRecord` of a run database already read. ``assumed``
    states components the data cannot measure ({"system:judge": 0.01} with one judge); every interval
    then counts them (:func:`evalgauge.compare.with_assumed`). ``ddf`` is the comparisons' df method
    (:func:`evalgauge.compare.compare`). ``components`` (a fit of these judgments under this model, as
    :class:`evalgauge.api.Fit` holds it) is used as it is instead of fitting again.
    """
    judgments, record = read_input(data)
    record = run if run is not None else record
    if {"model_a", "model_b", "winner"} <= set(judgments.frame.columns) and formula is None:
        return _analyze_pairwise(judgments, method=method, target_erho2=target_erho2)
    diagnostics, run_meta = None, {}
    if record is not None:
        diagnostics, run_meta = _run_info(record)
        drop_missing = True if drop_missing is None else drop_missing  # failed parses are in the diagnostics
        _refuse_unscored(judgments.source, record.calls, diagnostics["missing_answers"])
    spec = resolve_model(judgments, design, formula, **design_options)
    vc = components if components is not None else estimate_components(
        judgments, spec, method=method, drop_missing=bool(drop_missing), n_boot=n_boot, level=level, seed=seed,
        progress=progress)
    try:  # never shown as a result
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
    projection = dstudy.project(vc)
    try:
        theta = theta_interval(vc)
    except DesignError:
        theta = None
    if theta is not None and theta.df < 1:  # an interval on less than one degree of freedom is not a result
        theta = None
    result = Analysis(judgments.source, vc, theta, projection, dstudy.interventions(vc), judge, item,
                      diagnostics=diagnostics, run_meta=run_meta)
    if vc.object and judge and judge != vc.object:
        result.ceiling = dstudy.ceiling(vc, judge, 1)
        result.judges_needed = dstudy.needed(vc, judge, target_erho2)
    if vc.object and item and item != vc.object and vc.object in judgments.frame:
        score = spec.score
        result.object_interval = object_interval(vc, sampling_facet=item)
        result.object_scores = object_scores(judgments.frame, vc.object, score, result.object_interval)
        if judgments.frame[vc.object].nunique() > 1 and spec.design is not None:
            from ..compare import compare

            # which system is better: each system's own interval (its own cells) and every pair
            result.comparison = compare(judgments.frame, vc, score=score, n_boot=n_boot_compare,
                                        facets=spec.facets, design=spec.design, ddf=ddf)
            sysf = result.comparison.systems
            result.object_scores = pd.DataFrame({
                vc.object: sysf["object"], "mean": sysf["mean"], "n": sysf["n"], "low": sysf["low"],
                "high": sysf["high"], "naive_low": sysf["naive_low"], "naive_high": sysf["naive_high"]})
    if run_meta.get("adaptive"):
        result.adaptive = json.loads(run_meta["adaptive"])
    result.checklist = checklist(vc, run_meta, diagnostics)
    result.curves = _curves(vc, judge, item, theta)
    return result


def _refuse_unscored(source: str, calls: pd.DataFrame, missing: dict) -> None:
    """A run whose every stored call lacks a score: say why (the commonest parse errors), not what a fit of
    nothing would say about its facets."""
    if missing["calls"] == 0 or missing["unscored"] < missing["calls"]:
        return
    reasons = calls["parse_error"].dropna().astype(str).str.replace(r"^cut at max_tokens \(\d+ tokens\) before a "
                                                                    r"verdict: ", "", regex=True)
    common = "; ".join(f"'{r}' ({n})" for r, n in reasons.value_counts().head(3).items())
    raise DesignError(f"{source}: {missing_sentence(missing)}: no call has a readable verdict, so there is nothing "
                      f"to analyse. The commonest reasons: {common}. Read the completions (`evalgauge export`), "
                      "then set a protocol that matches how the judge writes its verdict, output = \"json\", "
                      "reask = N or a larger max_tokens, and `evalgauge rescore` or run again.")


def single_run(data, design: Design | None = None, *, level: float = 0.95, assumed: dict | None = None,
               formula: str | None = None, **design_options):
    """One model's run, where only the items vary and each is scored once (an lm-eval or Inspect log): its
    :class:`evalgauge.inference.SingleRunInterval`, or None when the data hold more than that."""
    from ..inference import single_run_interval

    judgments, _ = read_input(data)
    if formula is not None:
        return None
    spec = resolve_model(judgments, design, None, **design_options)
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


def components_summary(result: VarianceComponents) -> dict:
    """The result's JSON plus theta-hat's intervals, Var(theta-hat) shares and bootstrapped derived numbers."""
    from ..inference import bootstrap_derived, default_sampling_facet, object_interval

    payload = result.to_dict()
    try:
        theta = theta_interval(result)
        if theta.df < 1:  # never printed as a result
            raise DesignError(
                f"theta-hat's interval rests on {theta.df:.2g} degree(s) of freedom (Satterthwaite): the components "
                "that dominate it are barely estimated (too few levels of a facet, or a fit at its limits). More "
                "levels of the dominant facets, or a smaller model (`max_order`=2), would make it estimable.")
        payload["theta"] = theta.to_dict()
    except DesignError as exc:
        payload["theta"] = {"unavailable": str(exc)}
    sampled = default_sampling_facet(result)
    if result.object and sampled and sampled != result.object:
        payload["object_score"] = object_interval(result, sampling_facet=sampled).to_dict()
    shares = dstudy.project(result, object="").shares()
    for comp in payload["components"]:
        comp["share_var_theta"] = shares.get(comp["component"])
    judge = result.role("judge")
    if result.draws is not None and result.object and judge:  # the derived rows include the one-judge ceiling
        table = bootstrap_derived(result, facet=judge)
        payload["derived"] = table.to_dict(orient="records")
    return json_safe(payload)


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


def _analyze_pairwise(judgments, *, method: str, target_erho2: float, n_boot: int = 100) -> Analysis:
    """Pairwise rows: the analysis `evalgauge pairwise` prints (Bradley-Terry with both bootstraps,
    position bias) and the components of the win indicators with position a fixed facet (sizing sec. 5.4)."""
    from .pairwise import analyze_pairwise

    if "item" not in judgments.frame:
        raise DesignError(f"{judgments.source}: pairwise rows need an 'item' column for the variance components "
                          "(which prompt each battle was on); `evalgauge pairwise` fits Bradley-Terry without it.")
    pw = analyze_pairwise(judgments, n_boot=n_boot, method=method)
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


def _theta_or_none(vc):
    try:
        return theta_interval(vc)
    except DesignError:
        return None


def _run_info(record) -> tuple[dict, dict]:
    from ..collect.diagnostics import diagnose, missing_answers

    calls, meta = record.calls, dict(record.meta)
    diag = diagnose(calls).to_dict()
    diag["missing_answers"] = missing_answers(calls).to_dict()
    if "spread" in calls and calls["spread"].notna().any():  # output = "logprobs": each call's own uncertainty
        spread = calls.groupby(calls["judge"].astype(str))["spread"].agg(["mean", "count"]).reset_index()
        diag["within_call_spread"] = [{"judge": r["judge"], "mean_spread": float(r["mean"]), "calls": int(r["count"])}
                                      for _, r in spread.iterrows()]
    meta["models"] = sorted(calls["model"].dropna().astype(str).unique())
    meta["first_call"] = float(calls["started_at"].min()) if len(calls) else None
    meta["temperatures"] = sorted(calls["temperature"].dropna().unique().tolist(), key=str)
    reps = pd.to_numeric(calls["replicate"], errors="coerce")
    meta["replicates"] = int(reps.max()) if reps.notna().any() else 0
    config = meta.get("config")
    if config and Path(config).exists():
        try:
            from ..collect.config import load_config

            cfg = load_config(config)
            meta["variants"] = [{"id": v.id, "template": v.template} for v in cfg.variants]
            meta["system_prompt"] = cfg.system_prompt
            meta["judges"] = [{"name": j.name, "model": j.model, "provider": j.provider} for j in cfg.judges]
        except Exception:  # the report still works without the configuration
            pass
    return diag, meta


def checklist(vc: VarianceComponents, meta: dict, diagnostics: dict | None) -> list[dict]:
    """TEE Table 15's three tiers, each item met or missing from what the data and run record show."""
    levels = vc.levels
    variants, judge = vc.role("variant"), vc.role("judge")
    n_var = levels.get(variants, 1) if variants else 1
    items = []

    def add(tier, name, met, evidence, todo):
        items.append({"tier": tier, "item": name, "met": bool(met), "evidence": evidence if met else todo})

    add("Minimum", "Prompt text", "variants" in meta,
        f"{len(meta.get('variants', []))} template(s) recorded in the run configuration",
        "attach the exact text of every prompt variant and the system prompt")
    add("Minimum", "Model identity", bool(meta.get("models")),
        f"models echoed by the provider: {', '.join(meta.get('models', []))}",
        "report each judge's model name, version (dated snapshot), API provider and date" +
        (f"; the data name judges ({levels.get(judge)}) but not their versions" if judge else ""))
    add("Minimum", "Temperature", bool(meta.get("temperatures")) or "temperature" in levels,
        f"temperatures {meta.get('temperatures') or levels.get('temperature')}",
        "report the temperature (and top-p/top-k) of every call")
    add("Minimum", "Replications", vc.replicates >= 1 and ("replicates" in meta or vc.replicates > 1),
        f"{vc.replicates} replicate(s) per cell; scoring {meta.get('mode') or 'as recorded'}",
        "report the number of calls per cell (R) and the scoring/extraction logic")
    add("Standard", "Prompt variants", n_var >= 2, f"{n_var} prompt variants in the design",
        "use at least 2 prompt variants (3+ to estimate prompt sensitivity well) and say how they were made")
    sens = variants is not None and variants in {f for c in vc.components for f in c.facets}
    add("Standard", "Sensitivity flag", sens, "prompt sensitivity estimated as a variance component",
        "assess prompt sensitivity: cross prompt variants with the items")
    crossed = sum(1 for f in levels if levels[f] >= 2) >= 3 and vc.replicates >= 2
    add("Comprehensive", "Factorial pilot", crossed,
        f"{' x '.join(f'{n} {f}' for f, n in levels.items())} x {vc.replicates} replicates",
        "run a factorial pilot crossing items, prompts, judges (and temperatures) with replicates")
    add("Comprehensive", "D-study projection", True, "projections and interventions in this report", "")
    if diagnostics and diagnostics.get("warnings"):
        add("Minimum", "Integrity (no caching, empty completions, snapshot drift)", False, "",
            "; ".join(diagnostics["warnings"]))
    missing = (diagnostics or {}).get("missing_answers")
    if missing:
        add("Minimum", "Missing answers", missing["unscored"] == 0, f"all {missing['calls']} stored calls scored",
            missing_sentence(missing))
    return items


def missing_sentence(missing: dict) -> str:
    """The calls without a score in one sentence: how many, how many cut at max_tokens, and the test by system."""
    text = (f"{missing['unscored']} of {missing['calls']} stored calls have no score "
            f"({missing['truncated']} cut at max_tokens); report the failure rates by judge, variant and system")
    test = missing.get("test")
    if test:
        text += (f"; their rate {'depends' if test['p'] < 0.05 else 'shows no dependence'} on the system "
                 f"({test['method']}, df {test['df']}, p = {test['p']:.2g})")
    return text


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
        frontier = dstudy.frontier(vc, grid, dstudy.CostModel((1.0,), judge), objective="se")
        frontier["calls"] = frontier["cost"]
        out["frontier"] = {"rows": _records(frontier), "current": {"calls": dstudy.CostModel((1.0,), judge).cost(
            dstudy.observed_counts(vc), vc.replicates), "se": dstudy.project(vc).se}}
    return out
