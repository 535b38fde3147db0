"""The position facet (sizing sec. 5.4: is the first slot favoured, were both orders run), AlpacaEval's win rate,
and a judge's agreement with human votes."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..errors import DesignError
from .data import BattleCounts, Battles


def slot_is_presentation_order(battles: Battles | BattleCounts) -> tuple[bool, str | None]:
    """Whether slot A is a presentation order the data let us estimate an advantage for.

    It is when an ``order``/``position`` column says so, or when some pair was shown in both orders,
    unless the slot is confounded with the outcome: in a "winner, loser" listing model_a always wins,
    and a first-slot term would absorb the whole outcome (a log odds near +30).
    """
    declared = isinstance(battles, BattleCounts) and battles.presentation_order
    if isinstance(battles, BattleCounts):
        battles = battles.entries
    y = battles.outcome
    if np.all(y == 1.0) or np.all(y == 0.0):
        side = "model_a" if np.all(y == 1.0) else "model_b"
        return False, (f"{side} wins every row: the slot is the outcome (a winner/loser listing), not a "
                       "presentation order, so no first-slot term was fitted.")
    if declared or any(c in battles.frame for c in ("order", "position")):
        return True, None
    if _shown_both_ways(battles.a, battles.b, len(battles.systems)):
        return True, None
    return False, "no pair was shown in both orders, so no first-slot term was fitted."


def _shown_both_ways(a: np.ndarray, b: np.ndarray, m: int) -> bool:
    """Whether some pair of systems appears as (a, b) and as (b, a): on the m x m grid of pairs shown when it is
    small, on the distinct pairs otherwise (vectorised: an arena's twenty million rows are not a Python loop)."""
    key = a.astype(np.int64) * m + b
    if m * m <= 1 << 24:
        shown = np.zeros(m * m, dtype=bool)
        shown[key] = True
        grid = shown.reshape(m, m)
        return bool((grid & grid.T).any())
    distinct = np.unique(key)
    return bool(np.isin((distinct % m) * m + distinct // m, distinct).any())


# ---------------------------------------------------------------------------
# Bootstraps
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PositionBias:
    """Slot-A advantage: how much more often a system wins presented first than second (sizing 5.4)."""

    advantage: float  # mean over systems of (win rate in slot A - win rate in slot B)
    spread: float  # SD of that advantage across systems
    maximum: float
    per_system: dict[str, float] = field(default_factory=dict)


def position_bias(battles: Battles, weights: np.ndarray | None = None) -> PositionBias:
    """Per system, its win rate when in slot A minus when in slot B (ties half), then across systems;
    ``weights`` count each entry (its judgments, for :class:`BattleCounts` entries)."""
    y = battles.outcome
    w = np.ones(battles.n) if weights is None else np.asarray(weights, float)
    per = {}
    for k, s in enumerate(battles.systems):
        first, second = battles.a == k, battles.b == k
        if w[first].sum() > 0 and w[second].sum() > 0:
            per[s] = float(np.average(y[first], weights=w[first]) - np.average(1.0 - y[second], weights=w[second]))
    if not per:
        raise DesignError("position bias needs each system presented in both slots (run both orders).")
    values = np.array(list(per.values()))
    return PositionBias(float(values.mean()), float(values.std(ddof=1)) if values.size > 1 else 0.0,
                        float(values.max()), per)


def alpacaeval_win_rate(preference: np.ndarray) -> tuple[float, float]:
    """AlpacaEval's win rate and standard error from preferences in [1, 2] (2: the model preferred).

    win_rate = 100 mean(preference - 1), SE = 100 sd(preference - 1) / sqrt(n), sd with n - 1,
    missing preferences left out (as alpaca_eval's leaderboard does).
    """
    p = np.asarray(preference, dtype=float)
    p = p[np.isfinite(p)] - 1.0
    return 100.0 * float(p.mean()), 100.0 * float(p.std(ddof=1) / math.sqrt(p.size))


def human_agreement(judge_winner: pd.Series, human_winner: pd.Series,
                    judgments: np.ndarray | None = None) -> dict[str, float]:
    """Per-judgment agreement with human votes (TEE Table 17): overall (a tie matches a tie) and AB-only
    (both decisive). ``judgments``: how many judgments each row stands for (an engine's counts of distinct
    votes); one each by default."""
    j = judge_winner.astype(str).str.lower().replace({"model_a": "a", "model_b": "b", "draw": "tie"})
    h = human_winner.astype(str).str.lower().replace({"model_a": "a", "model_b": "b", "draw": "tie"})
    w = np.ones(len(j)) if judgments is None else np.asarray(judgments, dtype=float)
    same = (j == h).to_numpy()
    decisive = (j.isin(["a", "b"]) & h.isin(["a", "b"])).to_numpy()
    n, n_ab = float(w.sum()), float(w[decisive].sum())
    overall = float(w[same].sum() / n) if n else math.nan
    ab = float(w[same & decisive].sum() / n_ab) if n_ab else math.nan
    return {"overall": overall, "n": round(n), "ab_only": ab, "n_ab": round(n_ab)}
