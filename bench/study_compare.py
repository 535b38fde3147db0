"""Monte Carlo study of `compare` (issue 10): coverage of pair intervals and rank sets.

Own generator: y = mu + s + i + j + si + sj + ij + e on systems x items x judges x replicates, system
effects fixed across replications (so the true differences and ranks are fixed), everything else drawn
afresh. Per scenario and replication: fit (ANOVA when balanced, REML with 20% of rows missing), compare
(with 20% missing the systems' estimates are the GLS ones, as `compare` reports them),
and record
  * familywise coverage of the simultaneous difference intervals (all pairs covered at once),
  * the mean marginal coverage of the pair intervals,
  * simultaneous rank sets covering every true rank, and the mean marginal rank-set coverage,
  * the same for the naive item-only intervals (item bootstrap) and naive rank sets (item-only covariance),
with Monte Carlo standard errors. `python bench/study_compare.py --reps 400` prints the table the README
quotes (`--scenario NAME` runs one).
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import pandas as pd

from evalgauge.compare import compare
from evalgauge.compare.pair_gstudy import item_bootstrap
from evalgauge.design import Design, Facet
from evalgauge.estimate import estimate_components
from evalgauge.inference.multiplicity import rank_sets

TRUTH = {"item": 0.30, "judge": 0.10, "system:item": 0.20, "system:judge": 0.03, "item:judge": 0.05,
         "residual": 0.25}
SCENARIOS = {
    "balanced 8x40x3x2": dict(systems=8, items=40, judges=3, reps=2, missing=0.0),
    "20% missing 8x40x3x2": dict(systems=8, items=40, judges=3, reps=2, missing=0.2),
    "balanced 6x60x4x1": dict(systems=6, items=60, judges=4, reps=1, missing=0.0),
}


def generate(rng, s_eff, items, judges, reps, missing) -> pd.DataFrame:
    n_s = s_eff.size
    sd = {k: math.sqrt(v) for k, v in TRUTH.items()}
    i_eff = rng.normal(0, sd["item"], items)
    j_eff = rng.normal(0, sd["judge"], judges)
    si = rng.normal(0, sd["system:item"], (n_s, items))
    sj = rng.normal(0, sd["system:judge"], (n_s, judges))
    ij = rng.normal(0, sd["item:judge"], (items, judges))
    s, i, j, r = np.meshgrid(np.arange(n_s), np.arange(items), np.arange(judges), np.arange(reps), indexing="ij")
    s, i, j, r = s.ravel(), i.ravel(), j.ravel(), r.ravel()
    y = 3 + s_eff[s] + i_eff[i] + j_eff[j] + si[s, i] + sj[s, j] + ij[i, j] + rng.normal(0, sd["residual"], s.size)
    frame = pd.DataFrame({"system": [f"s{k}" for k in s], "item": [f"i{k}" for k in i],
                          "judge": [f"j{k}" for k in j], "replicate": r + 1, "score": y})
    if missing:
        frame = frame[rng.random(len(frame)) >= missing].reset_index(drop=True)
    return frame


def run(name: str, cfg: dict, reps: int, seed: int, n_boot: int) -> dict:
    rng = np.random.default_rng(seed)
    s_eff = np.linspace(0.45, 0, cfg["systems"])  # neighbours 0.45/(S-1) apart: some separable, some not
    true_rank = {f"s{k}": k + 1 for k in range(cfg["systems"])}
    design = Design((Facet("system", "object"), Facet("item", "random"), Facet("judge", "random")),
                    replicate="replicate" if cfg["reps"] > 1 or cfg["missing"] else None)
    out = {k: [] for k in ("fw", "marg", "rank_sim", "rank_marg", "naive_fw", "naive_marg", "naive_rank_sim")}
    for rep in range(reps):
        frame = generate(rng, s_eff, cfg["items"], cfg["judges"], cfg["reps"], cfg["missing"])
        if design.replicate is None:
            frame = frame.drop(columns=["replicate"])
        vc = estimate_components(frame, design)
        res = compare(frame, vc, n_boot=n_boot, seed=rep, pair_gstudies="none", design=design)
        pairs = res.pairs
        truth = np.array([s_eff[int(a[1:])] - s_eff[int(b[1:])] for a, b in zip(pairs["a"], pairs["b"],
                                                                                 strict=True)])
        inside = (pairs["low"] <= truth) & (truth <= pairs["high"])
        inside_s = (pairs["low_simultaneous"] <= truth) & (truth <= pairs["high_simultaneous"])
        naive = (pairs["naive_low"] <= truth) & (truth <= pairs["naive_high"])
        out["fw"].append(bool(inside_s.all()))
        out["marg"].append(float(inside.mean()))
        out["naive_fw"].append(bool(naive.all()))
        out["naive_marg"].append(float(naive.mean()))
        sysf = res.systems
        tr = sysf["object"].map(true_rank)
        cov_s = (sysf["rank_low_simultaneous"] <= tr) & (tr <= sysf["rank_high_simultaneous"])
        cov_m = (sysf["rank_low"] <= tr) & (tr <= sysf["rank_high"])
        out["rank_sim"].append(bool(cov_s.all()))
        out["rank_marg"].append(float(cov_m.mean()))
        # naive rank sets: the same procedure with the item-only (bootstrap) covariance
        systems = list(sysf["object"])
        boot = item_bootstrap(frame.assign(__y=frame["score"]), "system", "item", systems, n_boot,
                               np.random.default_rng(rep))
        z = boot - np.nanmean(boot, axis=0)
        lo, hi = rank_sets(sysf["mean"].to_numpy(), np.cov(boot.T), z, 0.95, simultaneous=True)
        out["naive_rank_sim"].append(bool(np.all((lo <= tr.to_numpy()) & (tr.to_numpy() <= hi))))
    return {k: (float(np.mean(v)), float(np.std(v, ddof=1) / math.sqrt(len(v)))) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--boot", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--scenario", choices=list(SCENARIOS), action="append",
                    help="run only these scenarios (repeatable; default: all)")
    args = ap.parse_args()
    labels = {"fw": "simultaneous pair intervals, familywise", "marg": "marginal pair intervals",
              "rank_sim": "simultaneous rank sets, all ranks", "rank_marg": "marginal rank sets",
              "naive_fw": "naive (item-only) pair intervals, familywise", "naive_marg": "naive pair intervals",
              "naive_rank_sim": "naive simultaneous rank sets, all ranks"}
    for k, (name, cfg) in enumerate(SCENARIOS.items()):
        if args.scenario and name not in args.scenario:
            continue
        t0 = time.perf_counter()
        res = run(name, cfg, args.reps, args.seed + k, args.boot)
        print(f"{name} ({args.reps} replications, {time.perf_counter() - t0:.0f} s):")
        for key, label in labels.items():
            m, se = res[key]
            print(f"  {label:48s} {100 * m:5.1f}% (MC s.e. {100 * se:.1f})")


if __name__ == "__main__":
    main()
