"""Pairwise logs of known strengths for the tests: battles with ties, both orders and two judges, and an arena
log judged under judge x prompt variant x order configurations beside human votes."""

import numpy as np
import pandas as pd


def battle_log(n: int = 3000, systems: int = 6, items: int = 60, seed: int = 0) -> pd.DataFrame:
    """Battles of known strengths with ties, both presentation orders, two judges, and a first-slot advantage."""
    rng = np.random.default_rng(seed)
    strength = np.linspace(-1.0, 1.0, systems)
    a = rng.integers(0, systems, n)
    b = (a + rng.integers(1, systems, n)) % systems
    p_a = 1 / (1 + np.exp(-(strength[a] - strength[b] + 0.2)))
    u = rng.random(n)
    winner = np.where(u < 0.15, "tie", np.where(u < 0.15 + 0.85 * p_a, "model_a", "model_b"))
    names = np.array([f"sys-{k}" for k in range(systems)])
    return pd.DataFrame({"model_a": names[a], "model_b": names[b], "winner": winner,
                         "item": [f"q{k:03d}" for k in rng.integers(0, items, n)],
                         "judge": rng.choice(["judge-1", "judge-2"], n), "order": rng.choice(["AB", "BA"], n)})


def hive_folder(frame: pd.DataFrame, folder):
    """One folder per judge (hive partitions), two Parquet parts in each."""
    for judge, chunk in frame.groupby("judge"):
        (folder / f"judge={judge}").mkdir(parents=True)
        chunk = chunk.drop(columns="judge")
        for k, part in enumerate((chunk.iloc[: len(chunk) // 2], chunk.iloc[len(chunk) // 2:])):
            part.to_parquet(folder / f"judge={judge}" / f"part-{k}.parquet", index=False)
    return folder


def arena_log(seed: int = 0, systems: int = 6, matches: int = 600, config_bias: float = 0.6) -> pd.DataFrame:
    """Matches between random pairs; a human votes by the true strengths; each of 18 configurations (judge x
    variant x order) votes by the truth plus its own per-system bias (sd ``config_bias``) plus noise."""
    rng = np.random.default_rng(seed)
    truth = np.linspace(-1, 1, systems)
    names = [f"m{k}" for k in range(systems)]
    configs = [(j, v) for j in ("j0", "j1", "j2") for v in ("v0", "v1", "v2")]
    bias = {c: rng.normal(0, config_bias, systems) for c in configs}
    rows = []
    for match in range(matches):
        a, b = rng.choice(systems, 2, replace=False)
        diff = truth[a] - truth[b]
        human = "model_a" if rng.random() < 1 / (1 + np.exp(-diff)) else "model_b"
        for (j, v) in configs:
            for order in ("ab", "ba"):
                first, second = (a, b) if order == "ab" else (b, a)
                d = truth[first] - truth[second] + bias[(j, v)][first] - bias[(j, v)][second]
                won = rng.random() < 1 / (1 + np.exp(-d))
                vote = human if order == "ab" else {"model_a": "model_b", "model_b": "model_a"}[human]
                rows.append({"model_a": names[first], "model_b": names[second],
                             "winner": "model_a" if won else "model_b", "item": f"match{match}", "judge": j,
                             "variant": v, "order": order, "human": vote})
    return pd.DataFrame(rows)
