"""Pairwise at Arena scale (issues 13 and 16): Bradley-Terry on synthetic battles among 100 models with ties.

For 10k, 100k, 1M and 2M battles: evalgauge's fit (counts of identical battles, analytic standard
errors) and its Arena-comparable Elo against Chatbot Arena's method on the same battles (FastChat's
`compute_mle_elo`: scikit-learn logistic regression on win/tie tables, written out here), and 1,000
rounds of the battle bootstrap (a multinomial draw over the distinct battles). Prints the times, the
ratio to the Arena method (target: at least 2x faster at 2M), the largest rating difference (target
0.1 Elo) and the bootstrap time (target: seconds).
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import pandas as pd

from evalgauge.pairwise import BTFit, aggregate, arena_elo, bootstrap_bt, code_battles, fit_bt


def battles(n: int, models: int = 100, ties: float = 0.2, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    strength = rng.normal(0, 1, models)
    a = rng.integers(0, models, n)
    b = (a + rng.integers(1, models, n)) % models
    p = 1 / (1 + np.exp(-(strength[a] - strength[b])))
    u = rng.random(n)
    winner = np.where(u < ties, "tie", np.where(u < ties + (1 - ties) * p, "model_a", "model_b"))
    names = np.array([f"model-{k:03d}" for k in range(models)])
    return pd.DataFrame({"model_a": names[a], "model_b": names[b], "winner": winner})


def arena_method(df: pd.DataFrame, scale=400, base=10, init=1000) -> pd.Series:
    """Chatbot Arena's compute_mle_elo: win counts x2, ties once each way, logistic regression, 400 x coef."""
    from sklearn.linear_model import LogisticRegression

    a_win = pd.pivot_table(df[df["winner"] == "model_a"], index="model_a", columns="model_b", aggfunc="size",
                           fill_value=0)
    tie = pd.pivot_table(df[df["winner"] == "tie"], index="model_a", columns="model_b", aggfunc="size",
                         fill_value=0)
    tie = tie.add(tie.T, fill_value=0)
    b_win = pd.pivot_table(df[df["winner"] == "model_b"], index="model_a", columns="model_b", aggfunc="size",
                           fill_value=0)
    win = a_win.mul(2).add(b_win.T.mul(2), fill_value=0).add(tie, fill_value=0)
    models = pd.Series(np.arange(len(win.index)), index=win.index)
    p = len(models)
    rows, y, w = [], [], []
    for m_a in win.index:
        for m_b in win.columns:
            if m_a == m_b or pd.isna(win.loc[m_a, m_b]):
                continue
            x = np.zeros(p)
            x[models[m_a]], x[models[m_b]] = math.log(base), -math.log(base)
            rows += [x, x]
            y += [1.0, 0.0]
            w += [win.loc[m_a, m_b], win.loc[m_b, m_a] if m_b in win.index and m_a in win.columns else 0.0]
    lr = LogisticRegression(fit_intercept=False, penalty=None, tol=1e-6)
    lr.fit(np.array(rows), np.array(y), sample_weight=np.nan_to_num(np.array(w)))
    return pd.Series(scale * lr.coef_[0] + init, index=models.index)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000,1000000,2000000")
    ap.add_argument("--boot", type=int, default=1000)
    args = ap.parse_args()
    for n in (int(x) for x in args.sizes.split(",")):
        df = battles(n)
        t0 = time.perf_counter()
        bt = code_battles(df)
        agg, counts = aggregate(bt)
        fit = fit_bt(agg, weights=counts)  # Davidson ties, analytic SEs
        elo = arena_elo(agg, counts)
        t_ours = time.perf_counter() - t0
        t0 = time.perf_counter()
        ref = arena_method(df)
        t_ref = time.perf_counter() - t0
        diff = np.max(np.abs(elo - ref.reindex(list(bt.systems)).to_numpy()))
        t_boot = {}
        for method in ("naive", "tee"):
            t0 = time.perf_counter()
            boot = bootstrap_bt(bt, fit, method=method, n_boot=args.boot, seed=0)
            t_boot[method] = time.perf_counter() - t0
            assert isinstance(fit, BTFit) and boot.draws.shape[0] == args.boot
        print(f"{n:>9,} battles: evalgauge {t_ours:.2f} s (fit with SEs + Arena Elo) vs Chatbot Arena's method "
              f"{t_ref:.2f} s: {t_ref / t_ours:.1f}x; max |Elo difference| {diff:.4f}; {args.boot} bootstrap "
              f"rounds: naive {t_boot['naive']:.1f} s, TEE-aware {t_boot['tee']:.1f} s "
              f"(target: both in seconds, under 60 s together: "
              f"{'MET' if t_boot['naive'] + t_boot['tee'] < 60 else 'NOT MET'})")
        if n >= 2_000_000:
            print(f"  target at 2M: >= 2x faster: {'MET' if t_ref / t_ours >= 2 else 'NOT MET'}; "
                  f"Elo within 0.1: {'MET' if diff < 0.1 else 'NOT MET'}")


if __name__ == "__main__":
    main()
