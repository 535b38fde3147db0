"""TEE's Chatbot Arena studies (sec. 4.3-4.4, R.1, Table 17) on a pairwise log whose battles were judged under
several configurations (judge x prompt variant x order cells):

* three standard errors of every system's Bradley-Terry strength: naive (battles resampled, Chatbot Arena's
  bootstrap), single-cell (each resample draws ONE configuration and scores every battle with it: the spread a
  researcher who had picked another configuration would have seen) and the TEE pipeline (battles resampled and,
  within each, its cells), with the median ratios to the naive SE;
* agreement with human votes per judgment and per battle for every single configuration and for the TEE
  aggregate of a battle's cells (its mean outcome: A, B, or a tie when the cells split evenly);
* the gaming surface by re-running the evaluation per configuration: a system's expected best rating over K
  configurations drawn from the observed ones, above its mean rating, beside the closed form E[max of K normals]
  x the configurations' SD (TEE 4.4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..dstudy import expected_max_normal
from ..pairwise import Battles, BTFit, aggregate, arena_elo, bootstrap_bt
from ..results import Result, json_safe

#: the columns that make a battle's cells: who judged, with which prompt, in which order
CONFIG_COLUMNS = ("judge", "variant", "order", "position")


def configurations(battles: Battles) -> list[str]:
    """The configuration columns of a log (those of :data:`CONFIG_COLUMNS` with more than one value)."""
    frame = battles.frame
    return [c for c in CONFIG_COLUMNS if c in frame and frame[c].nunique(dropna=False) > 1]


@dataclass(frozen=True)
class ArenaStudies(Result):
    """The arena studies of one log: ``se`` (one row per system: naive, single-cell and TEE-pipeline SEs of its
    log strength), the median ratios, ``agreement`` (per configuration and for the TEE aggregate, per judgment
    and per battle, when human votes are given) and ``gaming`` (best of K configurations)."""

    columns: tuple[str, ...]
    n_configurations: int
    se: pd.DataFrame
    ratios: dict[str, float]
    gaming: dict[str, Any]
    agreement: pd.DataFrame | None = None
    resamples: int = 0

    def to_dict(self) -> dict:
        out = {"configuration_columns": list(self.columns), "configurations": self.n_configurations,
               "resamples": self.resamples, "se": self.se.to_dict(orient="records"),
               "median_se_ratio": self.ratios, "gaming": self.gaming}
        if self.agreement is not None:
            out["human_agreement"] = self.agreement.to_dict(orient="records")
        return json_safe(out)

    def to_frame(self) -> pd.DataFrame:
        return self.se.copy()


def arena_studies(battles: Battles, fit: BTFit, *, n_boot: int = 200, seed: int | None = 0,
                  human: str | None = None, best_of: int | None = None, ridge: float = 0.0) -> ArenaStudies | None:
    """The three SEs, the human agreement of each pipeline and the per-configuration gaming surface; None when
    the log has a single configuration (nothing to pick among). ``best_of`` defaults to the number of
    configurations observed."""
    columns = configurations(battles)
    if not columns or "item" not in battles.frame:
        return None
    config = battles.frame[columns].astype(str).agg("|".join, axis=1)
    codes, labels = pd.factorize(config, sort=True)
    position = fit.log_h is not None
    rng = np.random.default_rng(seed)
    naive = bootstrap_bt(battles, fit, method="naive", n_boot=n_boot, seed=seed, position=position, ridge=ridge)
    tee = bootstrap_bt(battles, fit, method="tee", n_boot=n_boot, seed=seed, position=position, ridge=ridge)
    # single cell: resamples shared among the configurations at random, each scoring every battle with one
    per = np.bincount(rng.integers(0, len(labels), n_boot), minlength=len(labels))
    draws = [bootstrap_bt(_subset(battles, codes == k), fit, method="naive", n_boot=int(n), seed=int(
        rng.integers(2**31)), position=position, ridge=ridge).draws for k, n in enumerate(per) if n]
    single = np.vstack(draws)
    se = pd.DataFrame({"system": list(fit.systems), "naive_se": naive.sd, "single_cell_se": single.std(
        axis=0, ddof=1), "tee_se": tee.sd})
    free = se["naive_se"] > 0  # the reference system's strength is fixed at 0
    ratios = {"single_cell_over_naive": float(np.median(se.loc[free, "single_cell_se"] / se.loc[free, "naive_se"])),
              "tee_over_naive": float(np.median(se.loc[free, "tee_se"] / se.loc[free, "naive_se"]))}
    elo = np.vstack([arena_elo(*aggregate(_subset(battles, codes == k))) for k in range(len(labels))])
    agreement = _agreement(battles, codes, labels, human) if human else None
    return ArenaStudies(tuple(columns), len(labels), se, ratios, _gaming(elo, best_of or len(labels), fit),
                        agreement, n_boot)


def _subset(battles: Battles, keep: np.ndarray) -> Battles:
    frame = battles.frame.loc[keep].reset_index(drop=True)
    return Battles(battles.systems, battles.a[keep], battles.b[keep], battles.outcome[keep], frame)


def _gaming(elo: np.ndarray, k: int, fit: BTFit) -> dict[str, Any]:
    """A system's expected best Elo over ``k`` configurations drawn with replacement from the observed ones,
    above its mean over them (exact for the empirical distribution: E[max] = sum x_(j) ((j/n)^k - ((j-1)/n)^k)),
    and the closed form E[max of k normals] x the configurations' SD (TEE 4.4); medians over systems."""
    n = elo.shape[0]
    ordered = np.sort(elo, axis=0)
    j = np.arange(1, n + 1)[:, None]
    expected_max = (ordered * ((j / n) ** k - ((j - 1) / n) ** k)).sum(axis=0)
    rerun = expected_max - elo.mean(axis=0)
    closed = expected_max_normal(k) * elo.std(axis=0, ddof=1) if n > 1 else np.zeros(elo.shape[1])
    return {"k": k, "configurations": n, "rerun_elo_median": float(np.median(rerun)),
            "closed_form_elo_median": float(np.median(closed)),
            "per_system": [{"system": s, "rerun_elo": float(r), "closed_form_elo": float(c),
                            "config_sd_elo": float(sd)} for s, r, c, sd in
                           zip(fit.systems, rerun, closed, elo.std(axis=0, ddof=1) if n > 1 else closed,
                               strict=True)]}


def _agreement(battles: Battles, codes: np.ndarray, labels, human: str) -> pd.DataFrame:
    """Agreement with the human vote per judgment and per battle, for each configuration alone and for the TEE
    aggregate of a battle's cells (TEE Table 17)."""
    frame = battles.frame
    # both verdicts as the share won by the pair's first system (by index), so that cells judged in either order
    # and the human's vote (its row's slots, or a system's name) are on one footing
    first = battles.a < battles.b
    judged = np.where(first, battles.outcome, 1.0 - battles.outcome)
    human_won = _vote_for_first(frame[human], battles, first)
    battle = frame["battle"].to_numpy()
    rows = []
    for k, label in enumerate(labels):
        mine = codes == k
        rows.append({"pipeline": f"single cell {label}",
                     "per_judgment": _share_equal(judged[mine], human_won[mine]),
                     "per_battle": _battle_agreement(_battle_verdicts(battle[mine], judged[mine]), battle, human_won)})
    rows.append({"pipeline": "TEE aggregate (mean over the battle's cells)",
                 "per_judgment": _share_equal(judged, human_won),
                 "per_battle": _battle_agreement(_battle_verdicts(battle, judged), battle, human_won)})
    out = pd.DataFrame(rows)
    singles = out.iloc[:-1]
    summary = pd.DataFrame([{"pipeline": "single cell, mean over configurations",
                             "per_judgment": singles["per_judgment"].mean(),
                             "per_battle": singles["per_battle"].mean()}])
    return pd.concat([out, summary], ignore_index=True)


def _vote_for_first(votes: pd.Series, battles: Battles, first: np.ndarray) -> np.ndarray:
    """Human votes as the share won by the pair's first system: 1, 0, 0.5 for a tie, NaN when unreadable."""
    text = votes.astype(str).str.strip().str.lower()
    slot = text.replace({"model_a": "a", "model_b": "b", "draw": "tie", "tie (bothbad)": "tie"}).to_numpy()
    names = np.asarray(battles.systems, dtype=object)
    raw = votes.astype(str).str.strip().to_numpy()
    for_a = np.where(slot == "a", 1.0, np.where(slot == "b", 0.0, np.where(slot == "tie", 0.5, np.nan)))
    for_a = np.where(raw == names[battles.a], 1.0, np.where(raw == names[battles.b], 0.0, for_a))
    return np.where(first, for_a, 1.0 - for_a)


def _share_equal(judged: np.ndarray, human: np.ndarray) -> float:
    known = ~np.isnan(human)
    return float((judged[known] == human[known]).mean()) if known.any() else math.nan


def _battle_verdicts(battle: np.ndarray, judged: np.ndarray) -> pd.Series:
    """Each battle's verdict from its judgments' mean share for the first system: 1 above 1/2, 0 below, else
    0.5 (a tie: the cells split evenly)."""
    mean = pd.Series(judged).groupby(battle).mean()
    return pd.Series(np.where(mean > 0.5, 1.0, np.where(mean < 0.5, 0.0, 0.5)), index=mean.index)


def _battle_agreement(verdicts: pd.Series, battle: np.ndarray, human: np.ndarray) -> float:
    """The share of battles whose verdict is the human vote (the battle's first readable vote: one per match)."""
    votes = pd.Series(human).groupby(battle).first().dropna()
    common = verdicts.index.intersection(votes.index)
    return float((verdicts.loc[common] == votes.loc[common]).mean()) if len(common) else math.nan


__all__ = ["ArenaStudies", "arena_studies", "configurations"]
