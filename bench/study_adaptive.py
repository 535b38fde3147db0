"""Monte Carlo study of adaptive collection (`evalgauge run --target-mdd`), in process.

Each run draws a full pool of judgments from known components (the linear model serve-sim scores
with: 8 systems x 300 items x 4 judges x 2 prompt variants x 3 replicates, system effects drawn and
kept as the truth), then runs the package's own loop (`evalgauge.collect.adaptive.follow`): a pilot
(default size, every judge, 2 variants, 2 replicates), a fit, the cheapest design at the judges' prices,
only the missing cells, a refit, at most 3 stages. "Collecting" a cell reads it from the drawn pool,
which is what serve-sim would have answered.

Per scenario it prints: how often the target was met at the TRUE components (at the last design's
counts), the coverage of the final 95% intervals of every pairwise system difference (`compare`,
marginal) for the true differences, the spend against the cheapest design chosen knowing the true
components, and what the fixed design a user would pick (all 300 items, one judge, one variant, one
replicate) gives at the truth and costs. Issue 15's targets: coverage 94-96%, target met in >= 90% of
runs, spend within 1.3x of the oracle's.

Scenarios e and f have a pool of 1,200 items (the others 300): a large benchmark whose error items
dominate; in f the systems do not interact with the judges or variants at all.

Run: `python bench/study_adaptive.py [--runs 200] [--scenarios a,b,c,d,e,f] [--pilot-items N]
[--yardstick-systems 16,32]`.
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np
import pandas as pd

from evalgauge import dstudy
from evalgauge.collect.adaptive import Collected, default_pilot_items, follow
from evalgauge.collect.adaptive import pools as planner_pools
from evalgauge.compare import compare
from evalgauge.components import VarianceComponents
from evalgauge.estimate import estimate_components
from evalgauge.planning import StageDesign, Target, plan_stage, pool_limited
from evalgauge.simulate import SimulationSpec, simulate

SYSTEMS, ITEMS, JUDGES, VARIANTS, REPS = 8, 300, 4, 2, 3
PRICES = {"j0": 1e-4, "j1": 1.5e-4, "j2": 2e-4, "j3": 4e-4}  # USD per call

#: scenarios b and d: a single judge's ceiling (system x judge 0.08) far above their targets
EDGE = {"item": 0.4, "judge": 0.2, "variant": 0.05, "system:item": 0.2, "system:judge": 0.08, "item:judge": 0.1,
        "system:variant": 0.01, "residual": 0.3}

SCENARIOS = {
    # name: (components without the system's own, sigma2_system, target MDD, what it shows)
    "a": ({"item": 0.4, "judge": 0.2, "variant": 0.05, "system:item": 0.25, "system:judge": 0.02,
           "item:judge": 0.1, "system:variant": 0.01, "residual": 0.3}, 0.3, 0.35,
          "items dominate: more items, few judges"),
    "b": (EDGE, 0.3, 0.45, "at the edge of the pools: only all four judges and both variants reach it"),
    "c": ({"item": 0.3, "judge": 0.1, "variant": 0.02, "system:item": 0.1, "system:judge": 0.01,
           "item:judge": 0.05, "system:variant": 0.0, "residual": 1.2}, 0.2, 0.3,
          "noisy calls: replicates and items"),
    "d": (EDGE, 0.3, 0.55, "b's components, a target one judge cannot reach (ceiling MDD 0.81) but three can"),
    "e": ({"item": 0.4, "judge": 0.2, "variant": 0.05, "system:item": 0.6, "system:judge": 0.004,
           "item:judge": 0.1, "system:variant": 0.002, "residual": 0.5}, 0.3, 0.22,
          "a large pool (1,200 items), items dominate: the pilot is small beside the design", 1200),
    "f": ({"item": 0.4, "judge": 0.2, "variant": 0.05, "system:item": 0.6, "system:judge": 0.0,
           "item:judge": 0.1, "system:variant": 0.0, "residual": 0.5}, 0.3, 0.22,
          "e without panel interactions: one judge and one variant suffice, the fixed design reaches it", 1200),
}


class PoolConfig:
    """The pools as a run's configuration states them (what `follow` reads; `pools()` gives the planner's)."""

    def __init__(self):
        from evalgauge.collect.config import Item, Judge, Variant

        self.items = tuple(Item(f"i{k:03d}", "") for k in range(ITEMS))
        self.judges = tuple(Judge(name, name) for name in PRICES)
        self.variants = tuple(Variant(f"v{k}", "{item}") for k in range(VARIANTS))
        self.replicates, self.systems, self.temperatures, self.pairwise = REPS, tuple(range(SYSTEMS)), (0.0,), False
        self.seed = 0


def draw(components: dict, sigma2_s: float, rng) -> tuple[pd.DataFrame, pd.Series]:
    spec = SimulationSpec({"system": SYSTEMS, "item": ITEMS, "judge": JUDGES, "variant": VARIANTS}, components,
                          replicates=REPS, object="system")
    frame = simulate(spec, rng)
    for col in ("system", "item", "judge", "variant"):
        frame[col] = frame[col].astype(str)
    frame["item"] = frame["item"].map(lambda s: f"i{int(s[1:]) - 1:03d}")
    effects = pd.Series(rng.normal(0, math.sqrt(sigma2_s), SYSTEMS), index=sorted(frame["system"].unique()))
    frame["score"] = frame["score"] + frame["system"].map(effects).to_numpy()
    return frame, effects


def cells(frame: pd.DataFrame, design: StageDesign) -> np.ndarray:
    return (frame["item"].isin(design.items) & frame["judge"].isin(design.judges)
            & frame["variant"].isin(design.variants) & (frame["replicate"].astype(int) <= design.replicates)).to_numpy()


def fit(frame: pd.DataFrame) -> VarianceComponents:
    return estimate_components(frame.reset_index(drop=True), object="system", max_order=2)


def truth(components: dict, sigma2_s: float) -> VarianceComponents:
    return VarianceComponents.from_dict({"object": "system", "replicates": REPS, "components": {
        "system": sigma2_s, **components}, "levels": {"system": SYSTEMS, "item": ITEMS, "judge": JUDGES,
                                                      "variant": VARIANTS}})


def one_run(components, sigma2_s, target: Target, pools: PoolConfig, seed: int, pilot_items: int) -> dict:
    rng = np.random.default_rng(seed)
    full, effects = draw(components, sigma2_s, rng)
    judge_names = sorted(full["judge"].unique())
    full["judge"] = full["judge"].map(dict(zip(judge_names, PRICES, strict=True)))
    variant_names = sorted(full["variant"].unique())
    full["variant"] = full["variant"].map({v: f"v{k}" for k, v in enumerate(variant_names)})
    order = [pools.items[k].id for k in rng.permutation(ITEMS)]
    pools_run = PoolConfig()
    pools_run.items = tuple(next(i for i in pools.items if i.id == x) for x in order)  # this run's item order
    collected = np.zeros(len(full), dtype=bool)

    def collect(design: StageDesign) -> Collected:  # "collecting" reads the cells from the drawn pool
        new = cells(full, design) & ~collected
        collected[new] = True
        return Collected(int(new.sum()), float(full.loc[collected, "judge"].map(PRICES).sum()))

    def fit_collected():
        return fit(full[collected]), PRICES

    # the package's own loop (evalgauge.collect.adaptive.follow), on the simulated pool
    result = follow(pools_run, target, StageDesign(tuple(order[:pilot_items]), tuple(PRICES), ("v0", "v1"), 2),
                    collect=collect, fit=fit_collected, max_stages=3, say=lambda text: None)
    design = result.stages[-1].design
    levels = [st.plan["confidence"] for st in result.stages if st.plan]
    data = full[collected].reset_index(drop=True)
    vc = fit(data)
    true_vc = truth(components, sigma2_s)
    at_truth = dstudy.project(true_vc, {"item": len(design.items), "judge": len(design.judges),
                                        "variant": len(design.variants)}, design.replicates).mdd95
    spend = float(data["judge"].map(PRICES).sum())
    comp = compare(data, vc, score="score", n_boot=200, facets=["system", "item", "judge", "variant"])
    pairs = comp.pairs
    true_diff = effects.reindex(pairs["a"]).to_numpy() - effects.reindex(pairs["b"]).to_numpy()
    covered = (pairs["low"].to_numpy() <= true_diff) & (true_diff <= pairs["high"].to_numpy())
    # Stein's two-stage interval: the final data's differences with the pilot's components (and df)
    pilot_vc = fit(full[cells(full, result.stages[0].design)])
    stein = compare(data, pilot_vc, score="score", n_boot=200, facets=["system", "item", "judge", "variant"]).pairs
    covered_stein = (stein["low"].to_numpy() <= true_diff) & (true_diff <= stein["high"].to_numpy())
    # the pilot's estimates only where later stages cannot re-estimate (the panel's interactions)
    mixed = compare(data, _panel_from_pilot(vc, pilot_vc), score="score", n_boot=200,
                    facets=["system", "item", "judge", "variant"]).pairs
    covered_mixed = (mixed["low"].to_numpy() <= true_diff) & (true_diff <= mixed["high"].to_numpy())
    return {"outcome": result.outcome, "met_at_truth": at_truth <= target.value, "covered": covered.mean(),
            "covered_stein": covered_stein.mean(), "covered_mixed": covered_mixed.mean(),
            "width_mixed": float(np.median((mixed["high"] - mixed["low"]) / (pairs["high"] - pairs["low"]))),
            "width_ratio": float(np.median((stein["high"] - stein["low"]) / (pairs["high"] - pairs["low"]))),
            "spend": spend, "items": len(design.items), "judges": len(design.judges),
            "level": min(levels) if levels else None}


PANEL = ("system:judge", "system:variant")  # components no later stage re-estimates (same realized effects)


def _panel_from_pilot(vc: VarianceComponents, pilot: VarianceComponents) -> VarianceComponents:
    """The refit's components with the panel interactions (and their sampling covariance) taken from the
    pilot: the decision to go on selected those estimates, so only the pilot's own are free of it in the
    sense of Stein's two-stage interval."""
    from dataclasses import replace

    comps, cov = list(vc.components), np.array(vc.covariance, dtype=float)
    pcov = np.array(pilot.covariance, dtype=float)
    ks = [(vc.names.index(n), pilot.names.index(n)) for n in PANEL if n in vc.names and n in pilot.names]
    for k, kp in ks:
        comps[k] = replace(comps[k], variance=pilot.components[kp].variance, se=pilot.components[kp].se)
        cov[k, :] = cov[:, k] = 0.0
    for k, kp in ks:
        for k2, kp2 in ks:
            cov[k, k2] = pcov[kp, kp2]
    return replace(vc, components=tuple(comps), covariance=cov)


def yardstick(components, sigma2_s, target: Target, pool_cfg: PoolConfig, runs: int, seed: int) -> dict:
    """The best an honest rule could do with these pools: every component known except the panel
    interactions, which no number of items from a pool of 4 judges and 2 variants estimates better than
    their realized spread over the 8 systems, a chi-square with (S-1)(J-1) = 21 and (S-1)(V-1) = 7 df
    (drawn here; their covariance from the package's own `pool_limited`). The package's plan at the 90%
    bound on such estimates (as in `follow`) gives how often an honest rule can meet the target at the
    truth and what it spends: the yardstick for issue 15's targets."""
    from dataclasses import replace

    rng = np.random.default_rng(seed)
    true_vc = truth(components, sigma2_s)
    df = {"system:judge": (SYSTEMS - 1) * (JUDGES - 1), "system:variant": (SYSTEMS - 1) * (VARIANTS - 1)}
    met, spend, out = [], [], 0
    for _ in range(runs):
        comps = [replace(c, variance=c.variance * rng.chisquare(df[c.name]) / df[c.name])
                 if c.name in df and c.variance > 0 else c for c in true_vc.components]
        drawn = pool_limited(replace(true_vc, components=tuple(comps)), planner_pools(pool_cfg))
        plan = plan_stage(drawn, planner_pools(pool_cfg), target, PRICES, StageDesign((), (), (), 1), levels=(0.9,))
        d = plan.design
        out += d is None
        met.append(d is not None and dstudy.project(true_vc, {"item": len(d.items), "judge": len(d.judges),
                                                              "variant": len(d.variants)}, d.replicates).mdd95
                   <= target.value)
        spend.append(plan.cost_usd if d is not None else math.nan)
    return {"met": float(np.mean(met)), "out": out, "spend": float(np.nanmedian(spend)) if out < runs else math.nan}


def yardstick_with(n_systems: int, components, sigma2_s, target: Target, runs: int, seed: int) -> str:
    """The yardstick with another number of systems (the panel interactions' df grow with it; a pair's
    MDD and the spend ratio do not depend on it otherwise): whether larger pools would let an honest
    rule meet issue 15's targets."""
    global SYSTEMS
    saved, SYSTEMS = SYSTEMS, n_systems
    try:
        pools = PoolConfig()
        cost, _ = oracle(components, sigma2_s, target, pools)
        lim = yardstick(components, sigma2_s, target, pools, runs, seed)
    finally:
        SYSTEMS = saved
    return (f"with {n_systems} systems (system x judge {(n_systems - 1) * (JUDGES - 1)} df, system x variant "
            f"{(n_systems - 1) * (VARIANTS - 1)}): the honest rule's limit meets the target at the truth in "
            f"{100 * lim['met']:.1f}%, out of reach in {lim['out']} runs, median spend {lim['spend'] / cost:.2f}x")


def oracle(components, sigma2_s, target: Target, pool_cfg: PoolConfig) -> tuple[float, str]:
    plan = plan_stage(truth(components, sigma2_s), planner_pools(pool_cfg), target, PRICES, StageDesign((), (), (), 1))
    d = plan.design
    what = "unreachable" if d is None else (f"{len(d.items)} items x {len(d.judges)} judge(s) x {len(d.variants)} "
                                            f"variant(s) x {d.replicates} rep(s)")
    return (plan.cost_usd if d is not None else math.nan), what


def main() -> None:
    global ITEMS
    sys.stdout.reconfigure(line_buffering=True)
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--scenarios", default="a,b,c,d,e,f")
    parser.add_argument("--pilot-items", type=int, default=default_pilot_items(SYSTEMS, ITEMS))
    parser.add_argument("--yardstick-systems", default="",
                        help="also print the honest rule's limit with these numbers of systems (e.g. 16,32)")
    args = parser.parse_args()
    print(f"Adaptive collection, Monte Carlo: {args.runs} seeded runs per scenario; pool {SYSTEMS} systems x "
          f"{ITEMS} items (e, f: 1,200) x {JUDGES} judges x {VARIANTS} variants x {REPS} replicates; pilot "
          f"{args.pilot_items} items")
    for name in args.scenarios.split(","):
        components, sigma2_s, mdd, what, *pool = SCENARIOS[name]
        ITEMS = pool[0] if pool else 300  # the scenario's item pool (module-wide: the helpers read it)
        pools = PoolConfig()
        target = Target("mdd95", mdd)
        t = time.perf_counter()
        runs = [one_run(components, sigma2_s, target, pools, 1000 * ord(name) + r, args.pilot_items)
                for r in range(args.runs)]
        cost, best = oracle(components, sigma2_s, target, pools)
        true_vc = truth(components, sigma2_s)
        fixed = dstudy.project(true_vc, {"item": ITEMS, "judge": 1, "variant": 1}, 1).mdd95
        fixed_cost = ITEMS * SYSTEMS * PRICES["j0"]
        met = np.mean([r["met_at_truth"] for r in runs])
        cover = np.mean([r["covered"] for r in runs])
        mc_se = math.sqrt(0.95 * 0.05 / (args.runs * SYSTEMS * (SYSTEMS - 1) / 2))  # if pairs were independent
        spend = np.median([r["spend"] for r in runs])
        ratio = spend / cost if math.isfinite(cost) else math.nan
        outcomes = pd.Series([r["outcome"] for r in runs]).value_counts().to_dict()
        print(f"\nscenario {name} ({what}); target MDD <= {mdd}; {time.perf_counter() - t:.0f} s")
        print(f"  outcomes: {outcomes}; final design: median {np.median([r['items'] for r in runs]):.0f} items, "
              f"{np.median([r['judges'] for r in runs]):.0f} judge(s)")
        lv = pd.Series([r["level"] for r in runs if r["level"] is not None]).value_counts().sort_index(ascending=False)
        levels = ", ".join(f"{k:.0%}: {v} runs" for k, v in lv.items()) or "none"
        print(f"  lowest level a stage was planned at: {levels}")
        print(f"  target met at the true components: {100 * met:.1f}% of runs (target >= 90%: "
              f"{'met' if met >= 0.9 else 'NOT met'})")
        said = [r for r in runs if r["outcome"] == "met"]
        if said:
            print(f"  of the {len(said)} runs that said 'met', the target holds at the true components in "
                  f"{100 * np.mean([r['met_at_truth'] for r in said]):.1f}%")
        print(f"  coverage of the final 95% pair intervals: {100 * cover:.1f}% (MC SE >= {100 * mc_se:.1f}; "
              f"target 94-96%: {'met' if 0.94 <= cover <= 0.96 else 'NOT met'})")
        by_outcome = pd.DataFrame(runs).groupby("outcome")[["covered", "covered_stein"]].agg(["mean", "size"])
        print("    by outcome: " + ", ".join(f"{o} {100 * r[('covered', 'mean')]:.1f}% "
                                         f"({int(r[('covered', 'size')])} runs)" for o, r in by_outcome.iterrows()))
        stein = np.mean([r["covered_stein"] for r in runs])
        print(f"  with the pilot's components (Stein's two-stage interval): {100 * stein:.1f}% (by outcome: "
              + ", ".join(f"{o} {100 * r[('covered_stein', 'mean')]:.1f}%" for o, r in by_outcome.iterrows())
              + f"); median width {np.median([r['width_ratio'] for r in runs]):.2f}x the refit's")
        by_mixed = pd.DataFrame(runs).groupby("outcome")["covered_mixed"].mean()
        print(f"  with the pilot's {' and '.join(PANEL)} only: "
              f"{100 * np.mean([r['covered_mixed'] for r in runs]):.1f}% (by outcome: "
              + ", ".join(f"{o} {100 * v:.1f}%" for o, v in by_mixed.items())
              + f"); median width {np.median([r['width_mixed'] for r in runs]):.2f}x the refit's")
        pilot_cost = (args.pilot_items * SYSTEMS * VARIANTS * min(2, REPS) * sum(PRICES.values()))
        print(f"  median spend ${spend:.4f} against ${cost:.4f} for the cheapest design knowing the truth ({best}): "
              f"{ratio:.2f}x (target <= 1.3x: {'met' if ratio <= 1.3 else 'NOT met'}); the pilot alone "
              f"(every judge, 2 variants, 2 replicates) costs ${pilot_cost:.4f}, {pilot_cost / cost:.2f}x")
        lim = yardstick(components, sigma2_s, target, pools, args.runs, 7 * ord(name))
        print(f"  an honest rule's limit (everything known but the panel interactions' 21 and 7 df, planned at the "
              f"90% bound): target met at the truth in {100 * lim['met']:.1f}%, out of reach in {lim['out']} runs, "
              f"median spend {lim['spend'] / cost:.2f}x the oracle's (where reachable)")
        for n_sys in (int(x) for x in args.yardstick_systems.split(",") if x):
            print("  " + yardstick_with(n_sys, components, sigma2_s, target, args.runs, 7 * ord(name)))
        print(f"  the fixed design a user would pick (all {ITEMS} items, one judge, one variant, one replicate, "
              f"${fixed_cost:.4f}): MDD {fixed:.3f} at the truth, "
              + ("reaches the target" if fixed <= mdd else "does not reach the target"))


if __name__ == "__main__":
    main()
