"""The pairwise protocol: Bradley-Terry strengths with ties and a position term, Elo, win rates,
naive and TEE-aware bootstraps, the position facet, and agreement with human votes.

Judgments are rows ``model_a, model_b, winner`` (``model_a``, ``model_b`` or ``tie``, as in
Chatbot Arena's data), optionally with ``item``, ``judge``, ``variant`` and ``order``
columns. Sizing sec. 5.4: run both presentation orders and treat position as a facet;
TEE E.3, H and R.1: the naive bootstrap resamples battles, the TEE-aware one also
resamples each battle's judge x variant (x order) cells.

Model (Davidson 1970 ties, with a first-slot advantage as in Agresti 2002 sec. 10.6):
for systems i in slot A and j in slot B with strengths pi = exp(theta),
P(A wins) = h pi_i / D, P(B wins) = pi_j / D, P(tie) = nu sqrt(h pi_i pi_j) / D,
D = h pi_i + pi_j + nu sqrt(h pi_i pi_j). Without ties nu = 0 (plain Bradley-Terry);
without a position term h = 1. Elo = 400 theta / ln 10 (+ an anchor).
"""

from .agreement import PositionBias, alpacaeval_win_rate, human_agreement, position_bias, slot_is_presentation_order
from .bootstrap import BTBootstrap, bootstrap_bt, compare_bt
from .data import (
    ELO_SCALE,
    TIES,
    WINNER_A,
    WINNER_B,
    BattleCounts,
    Battles,
    battle_counts,
    code_battles,
    count_battles,
    item_column,
    system_win_rows,
    winner_codes,
)
from .model import ARENA_ANCHOR, BTFit, aggregate, arena_elo, comparison_groups, fit_bt, separated_systems

__all__ = ["ARENA_ANCHOR", "ELO_SCALE", "TIES", "WINNER_A", "WINNER_B", "BTBootstrap", "BTFit", "BattleCounts",
           "Battles", "PositionBias", "aggregate", "alpacaeval_win_rate", "arena_elo", "battle_counts", "bootstrap_bt",
           "code_battles", "compare_bt", "comparison_groups", "count_battles", "fit_bt", "human_agreement",
           "item_column", "position_bias", "separated_systems", "slot_is_presentation_order", "system_win_rows",
           "winner_codes"]
