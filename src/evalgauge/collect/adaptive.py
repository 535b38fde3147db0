"""From question to answer: collect to a target precision at the least cost (the sizing paper's workflow).

1. **Pilot**: a fully crossed factorial on a random subset of the item pool: every system, every
   candidate judge, up to two prompt variants and two replicates (sizing sec. 4: the pilot must estimate
   every component the design implies; by default enough items that system x item has 50 df).
2. **Fit and plan**: REML (or ANOVA when balanced) on everything collected, then the D-study over every
   design the pools allow (the cheapest J judges, V variants, R replicates, and the fewest items that
   reach the target, sizing eqs. 2-4), priced at each judge's observed cost per call. Designs are judged
   at the one-sided 90% bound of their error variance (:func:`evalgauge.planning.bound`, the MLS bound of
   a sum of components; the planning itself is :mod:`evalgauge.planning`), so that the target holds at the
   true components in about 9 runs of 10 (an internal pilot); at 75% when the pools allow nothing at 90%
   (the plan says which). The cheapest design that reaches the target, or, when none does (the
   single-judge ceiling, sizing eq. 4), the best value the pools can give and what would have to change,
   before anything more is spent.
3. **Collect only what is missing**: the chosen items (the pilot's first, then new ones drawn from the
   pool in a fixed random order), judges, variants and replicates, into the same run database: its
   unique keys make every call exactly once across stages, crashes and resumes, within the budget.
4. **Refit and stop**: refit on all data; stop when the target is met (at its bound) at the design
   collected, else plan and collect again (at most ``max_stages`` stages).

The loop is :func:`follow`, on any collector and fitter: :func:`adaptive_run` drives it with the run
database, ``bench/study_adaptive.py`` with simulated pools. The path taken (stages, the plan at each,
spend, achieved precision) is stored in the run database (metadata ``adaptive``) for the report.

Inference after adapting: the final sample size depends on the pilot's estimates (an internal pilot,
Wittes and Brittain 1990); ``bench/study_adaptive.py`` measures the coverage of the final intervals, how
often the target holds at the truth, and the spend against the design chosen knowing the truth."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..errors import DataError
from ..planning import (
    PLAN_CONFIDENCE,
    QUANTITIES,
    Pools,
    StageDesign,
    StagePlan,
    Target,
    achieved,
    level_words,
    plan_stage,
    price_words,
)
from ..results import Result
from .config import RunConfig

if TYPE_CHECKING:
    from .runner import RunPlan


@dataclass
class Stage:
    name: str
    design: StageDesign
    calls_sent: int
    spent_usd: float
    achieved: float | None = None
    plan: dict | None = None


def pools(cfg: RunConfig) -> Pools:
    """What a run's configuration lets a collection draw on, as the planner reads it."""
    return Pools(tuple(item_order(cfg)), tuple(j.name for j in cfg.judges), tuple(v.id for v in cfg.variants),
                 len(cfg.systems), len(cfg.temperatures), cfg.replicates, 2 if cfg.pairwise else 1)


def item_order(cfg: RunConfig) -> list[str]:
    """The pool's items in a fixed random order (the run's seed): the pilot takes the first ones, and
    each later stage the next, so a resumed or repeated run draws the same items."""
    ids = [i.id for i in cfg.items]
    rng = np.random.default_rng(cfg.seed)
    return [ids[k] for k in rng.permutation(len(ids))]


#: The pilot's default size: enough items that the system x item interaction, the component items
#: average away, has at least this many degrees of freedom ((systems - 1)(items - 1); a relative SE of
#: sqrt(2 / 50) = 0.2), and never fewer than MIN_PILOT_ITEMS; 30 items when there are no systems.
PILOT_SYSTEM_ITEM_DF = 50
MIN_PILOT_ITEMS = 10


def default_pilot_items(n_systems: int, pool: int) -> int:
    """The default pilot size (see PILOT_SYSTEM_ITEM_DF): small, since every pilot call is paid for with
    every judge, two variants and two replicates, while most designs it leads to use fewer of each."""
    n = 30 if n_systems < 2 else max(MIN_PILOT_ITEMS, math.ceil(PILOT_SYSTEM_ITEM_DF / (n_systems - 1)) + 1)
    return min(pool, n)


def pilot_design(cfg: RunConfig, items: int | None = None) -> StageDesign:
    """Every system and candidate judge, up to two variants and two replicates, on ``items`` pool items
    (default :func:`default_pilot_items`, or the whole pool when smaller)."""
    order = item_order(cfg)
    n = min(len(order), items or default_pilot_items(len(cfg.systems), len(order)))
    if n < 2:
        raise DataError(f"{cfg.path}: the item pool has {len(order)} item(s); a pilot needs at least 2.")
    return StageDesign(tuple(order[:n]), tuple(j.name for j in cfg.judges), tuple(v.id for v in cfg.variants[:2]),
                       min(2, cfg.replicates))


def pilot_df(cfg: RunConfig, design: StageDesign) -> str:
    """What the pilot can estimate, in degrees of freedom of each facet's main effect (the interactions
    have the products): the statement the sizing paper asks a pilot to make (sec. 4)."""
    facets = [("items", len(design.items)), ("judges", len(design.judges)), ("variants", len(design.variants))]
    if cfg.systems:
        facets.insert(0, ("systems", len(cfg.systems)))
    parts = [f"{name} {n - 1}" for name, n in facets if n > 1]
    reps = f"; replicates {design.replicates} per cell" if design.replicates > 1 else ""
    return "degrees of freedom: " + ", ".join(parts) + reps


def stage_config(cfg: RunConfig, design: StageDesign) -> RunConfig:
    """The pool's configuration restricted to one design, with the pool's fingerprint: a stage is part
    of the pool's factorial, so its calls share the run database and its keys."""
    items = {i.id: i for i in cfg.items}
    judges = {j.name: j for j in cfg.judges}
    variants = {v.id: v for v in cfg.variants}
    return replace(cfg, items=tuple(items[i] for i in design.items), judges=tuple(judges[j] for j in design.judges),
                   variants=tuple(variants[v] for v in design.variants), replicates=design.replicates,
                   fingerprint_override=cfg.fingerprint())


def cost_per_call(calls, judges: list[str]) -> dict[str, float | tuple[float, float]]:
    """Each judge's mean recorded cost per call in the run so far (what the provider billed, from usage); where
    its first replicates and its later ones cost differently (a replicate repeats a prompt the provider's cache
    holds), the pair (first replicate, each later one): the effective cost of a call of each kind."""
    out: dict[str, float | tuple[float, float]] = {}
    for j in judges:
        mine = calls.loc[calls["judge"].astype(str) == j]
        rows = mine["cost_usd"]
        mean = float(rows.mean()) if len(rows) and rows.notna().any() else 0.0
        out[j] = mean
        if "replicate" in mine and len(rows) and rows.notna().any():
            later = pd.to_numeric(mine["replicate"], errors="coerce") > 1
            first, repeat = rows[~later].mean(), rows[later].mean()
            if later.any() and (~later).any() and math.isfinite(first) and math.isfinite(repeat) \
                    and not math.isclose(first, repeat, rel_tol=0.02):
                out[j] = (float(first), float(repeat))
    return out


def record(store, stages: list[Stage], target: Target, outcome: str) -> None:
    """The path taken, in the run database's metadata (read by the report)."""
    store.set_meta("adaptive", json.dumps({"target": asdict(target), "outcome": outcome,
                                          "stages": [_stage_dict(s) for s in stages]}, default=str))


def _stage_dict(stage: Stage) -> dict:
    d = asdict(stage)
    d["design"] = {"items": len(stage.design.items), "judges": list(stage.design.judges),
                   "variants": list(stage.design.variants), "replicates": stage.design.replicates}
    return d


@dataclass
class AdaptiveResult(Result):
    target: Target
    stages: list[Stage]
    outcome: str  # "met", "unreachable", "not confirmed", "stages exhausted", "budget", "awaiting --yes", "stopped"
    message: str
    plan: StagePlan | None = None
    achieved: float | None = None

    def to_dict(self) -> dict:
        return {"target": asdict(self.target), "outcome": self.outcome, "message": self.message,
                "achieved": self.achieved, "stages": [_stage_dict(s) for s in self.stages],
                "plan": None if self.plan is None else {"reachable": self.plan.reachable, "message": self.plan.message,
                                                        "cost_usd": self.plan.cost_usd,
                                                        "predicted": self.plan.predicted}}


@dataclass
class AdaptivePlan(Result):
    """What ``run --target ... --dry-run`` says before anything is spent: the target, the pilot's design and
    degrees of freedom (``pilot_df``), and the pilot's run plan (a collector's ``RunPlan``)."""

    target: Target
    pilot: StageDesign
    pool_items: int
    pilot_df: str
    plan: RunPlan

    def to_dict(self) -> dict:
        return {"target": str(self.target), "pilot": {"items": len(self.pilot.items),
                                                      "judges": list(self.pilot.judges),
                                                      "variants": list(self.pilot.variants),
                                                      "replicates": self.pilot.replicates, "df": self.pilot_df},
                **self.plan.to_dict()}


@dataclass(frozen=True)
class Collected:
    """What collecting one design did: calls sent now, the run's total spend after it, and whether it
    finished (``note`` says why not)."""

    calls: int
    spent_usd: float
    ok: bool = True
    stopped_by_budget: bool = False
    note: str = ""


def follow(cfg, target: Target, pilot: StageDesign, *, collect, fit, max_stages: int = 3, proceed: bool = True,
           budget_usd: float = math.inf, say=print) -> AdaptiveResult:
    """The adaptive loop itself, on any collector and fitter (the run database's, or a simulation's).

    ``collect(design)`` collects a design's missing calls and returns :class:`Collected`; ``fit()``
    returns the components of everything collected and each judge's price per call. Each stage is planned
    at the planning bound (PLAN_LEVELS: 90%, else 75%); the run stops when the target
    is met at the 90% bound at the design collected, whatever level the plan was made at. Each stage buys the
    plan's whole design at once: every extra look is another chance for a noisy bound to pass, and plans made on
    what the refit is expected to show put the stop check at the edge of the data (bench/study_adaptive.py
    measures the spend against an oracle's and how often a "met" holds at the true components;
    docs/benchmarks.md).
    """
    got = collect(pilot)
    stages = [Stage("pilot", pilot, got.calls, got.spent_usd)]
    say(f"pilot: {len(pilot.items)} items x {len(pilot.judges)} judge(s) x {len(pilot.variants)} variant(s) x "
        f"{pilot.replicates} replicate(s); {pilot_df(cfg, pilot)}")
    if not got.ok or got.stopped_by_budget:
        return AdaptiveResult(target, stages, "stopped", "the pilot did not complete: " + got.note)
    plan, done, level = None, pilot, PLAN_CONFIDENCE  # the stop check's level
    for stage_no in range(1, max_stages + 1):
        vc, prices = fit()
        if price_words(prices):
            say(price_words(prices))
        now = achieved(vc, target, done, level)
        stages[-1].achieved = now
        say(f"after the {stages[-1].name}: {QUANTITIES[target.quantity]} {now:.4g} ({level_words(level)}) at "
            f"the design collected (target {target}); spent ${got.spent_usd:.4f}")
        if target.met(now):
            return AdaptiveResult(target, stages, "met", f"{target} met: {QUANTITIES[target.quantity]} {now:.4g} "
                                  f"({level_words(level)}).", plan, now)
        plan = plan_stage(vc, pools(cfg), target, prices, [st.design for st in stages], budget_usd - got.spent_usd)
        stages[-1].plan = {"message": plan.message, "cost_usd": plan.cost_usd, "predicted": plan.predicted,
                           "confidence": plan.confidence}
        say(plan.message)
        if plan.design is None:
            outcome = "unreachable" if not any(o["reaches"] for o in plan.options) else "budget"
            return AdaptiveResult(target, stages, outcome, plan.message, plan, now)
        if plan.cost_usd == 0:  # the plan is collected already and did not pass the check
            return AdaptiveResult(target, stages, "not confirmed", f"the design reaching {target} at the "
                                  f"{level_words(plan.confidence)} is collected, but at the "
                                  f"{level_words(PLAN_CONFIDENCE)} it gives {QUANTITIES[target.quantity]} "
                                  f"{now:.4g}: not confirmed. More judges or variants, or a larger pilot, would "
                                  "narrow the bound.", plan, now)
        if not proceed:
            return AdaptiveResult(target, stages, "awaiting --yes", plan.message + ". Run again with --yes to "
                                  "collect it (the pilot is kept).", plan, now)
        # the stop check stays at the 90% bound: a design planned at 75% must still pass it ("met" at a
        # lower level held at the truth in 16% of runs at the edge of the pools, bench/study_adaptive.py b)
        done = plan.design
        got = collect(done)
        stages.append(Stage(f"stage {stage_no}", done, got.calls, got.spent_usd))
        if not got.ok or got.stopped_by_budget:
            return AdaptiveResult(target, stages, "budget" if got.stopped_by_budget else "stopped",
                                  got.note or "the stage did not complete.", plan)
    vc, _ = fit()
    now = achieved(vc, target, done, level)
    stages[-1].achieved = now
    outcome = "met" if target.met(now) else "stages exhausted"
    return AdaptiveResult(target, stages, outcome, f"{QUANTITIES[target.quantity]} {now:.4g} "
                          f"({level_words(level)}) after {max_stages} stage(s) "
                          f"({'met' if target.met(now) else 'not met'}: {target}).", plan, now)


def adaptive_run(cfg: RunConfig, target: Target, *, fit_run, pilot_items: int | None = None, max_stages: int = 3,
                 proceed: bool = False, run_stage=None, say=print) -> AdaptiveResult:
    """Pilot, fit, plan, collect what is missing, refit (:func:`follow`) into the run database.

    ``fit_run(database)`` fits everything collected so far and returns (the components, the run's calls): the
    caller's fitter (the command line's is :func:`evalgauge.api.fit_run`), so the collector reads and fits
    nothing itself. ``run_stage(stage_cfg)`` runs one stage's configuration (the collector's ``run``; returns its
    summary). Without ``proceed`` the loop stops after planning the first stage beyond the pilot and says what it
    would collect and spend. Spending never passes ``cfg.budget_usd``.
    """
    from .runner import run as run_config

    run_stage = run_stage or run_config

    def collect(design: StageDesign) -> Collected:
        summary = run_stage(stage_config(cfg, design))
        why = [*summary.notes, *(f"judge '{name}' was stopped: {reason}" for name, reason in summary.fatal.items())]
        return Collected(summary.completed, summary.cost_usd, summary.ok, summary.stopped_by_budget,
                         "; ".join(why) or (f"{summary.failed} call(s) failed" if summary.failed else ""))

    def fit():
        vc, calls = fit_run(cfg.database)
        return vc, cost_per_call(calls, [j.name for j in cfg.judges])

    result = follow(cfg, target, pilot_design(cfg, pilot_items), collect=collect, fit=fit, max_stages=max_stages,
                    proceed=proceed, budget_usd=cfg.budget_usd, say=say)
    return _finish(cfg, result)


def _finish(cfg: RunConfig, result: AdaptiveResult) -> AdaptiveResult:
    """Record the path taken in the run database (for the report)."""
    from ..store import RunStore

    store = RunStore(cfg.database, writer=True)
    try:
        record(store, result.stages, result.target, result.outcome)
    finally:
        store.close()
    return result
