"""Bootstraps of the Bradley-Terry strengths: the naive one resamples battles, the TEE-aware one also each battle's
judge x variant (x order) cells (TEE E.3, H and R.1), on rows or on counts; and the two compared."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .data import BattleCounts, Battles, count_battles
from .model import BTFit, _collapse, fit_bt


@dataclass(frozen=True)
class BTBootstrap:
    method: str
    resamples: int
    low: np.ndarray
    high: np.ndarray
    sd: np.ndarray
    draws: np.ndarray | None = None  # resamples x systems: the log strengths, for pairs and rank sets


def bootstrap_bt(battles: Battles | BattleCounts, fit: BTFit, *, method: str = "naive", n_boot: int = 200,
                 level: float = 0.95, seed: int | None = None, position: bool = False,
                 base_weights: np.ndarray | None = None, ridge: float = 0.0) -> BTBootstrap:
    """Percentile intervals of the log strengths, drawn on the judgments' counts (:class:`BattleCounts`; rows are
    counted first, ``base_weights`` being each row's weight).

    ``naive`` resamples battles (Chatbot Arena's bootstrap). ``tee`` (TEE R.1)
    also resamples, within each battle, its judge x variant (x order) cells,
    so the interval carries the pipeline's variance too.
    """
    from threadpoolctl import threadpool_limits

    counts = battles if isinstance(battles, BattleCounts) else count_battles(battles, base_weights)
    # each refit solves a small (systems x systems) system: BLAS threads only cost here
    with threadpool_limits(limits=1, user_api="blas"):
        return _bootstrap_counts(counts, fit, method, n_boot, level, seed, position, ridge)


def _bootstrap_counts(counts: BattleCounts, fit, method, n_boot, level, seed, position, ridge) -> BTBootstrap:
    rng = np.random.default_rng(seed)
    ties = fit.log_nu is not None
    entries, n_k = counts.entries, counts.rows
    draws = np.zeros((n_boot, len(counts.systems)))
    if counts.battles_are_rows:
        # every judgment its own battle (no judge x variant cells within one: both bootstraps coincide), so
        # resampling battles is one multinomial draw over the distinct entries
        total = int(n_k.sum())
        p = n_k / total
        resample = lambda: rng.multinomial(total, p)  # noqa: E731
    else:
        battle = entries.frame["battle"].to_numpy()
        n_battles = int(battle.max()) + 1
        within = _WithinBattles(battle, n_k, n_battles) if method == "tee" else None

        def resample():
            drawn = np.bincount(rng.integers(0, n_battles, n_battles), minlength=n_battles)
            return within.draw(rng, drawn) if within is not None else drawn[battle] * n_k
    # the likelihood sees a resample only through its (slot A, slot B, outcome) totals: the entries are collapsed
    # to those once, and each resample's weights summed onto them, so a refit costs the same for a million battles
    # on items as for the pair table
    collapsed, onto = _collapse(entries)
    for r in range(n_boot):
        weights = np.bincount(onto, weights=resample() * counts.weight, minlength=collapsed.n)
        draws[r] = fit_bt(collapsed, reference=fit.reference, ties=ties, position=position, weights=weights,
                          start=fit, se=False, ridge=ridge).theta
    lo, hi = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2], axis=0)
    return BTBootstrap(method, n_boot, lo, hi, draws.std(axis=0, ddof=1), draws)


class _WithinBattles:
    """TEE R.1's second stage on counts: a battle drawn c times contributes c x (its judgments) picks among its
    judgments, with replacement; grouped by entry that is a multinomial over the battle's entries with
    probabilities (entry's judgments) / (battle's judgments). Battles with one entry need no draw."""

    def __init__(self, battle: np.ndarray, rows: np.ndarray, n_battles: int):
        self.battle, self.rows = battle, rows
        self.size = np.bincount(battle, weights=rows, minlength=n_battles).astype(np.int64)
        per = np.bincount(battle, minlength=n_battles)
        multi = np.flatnonzero(per > 1)
        self.multi = multi
        if multi.size:
            # entries are sorted by battle: each battle's entries are contiguous. Laid out right-aligned in a
            # (battles x widest) matrix, so the multinomial's implied last category is a real entry.
            width = int(per[multi].max())
            first = np.concatenate([[0], np.cumsum(per)[:-1]])
            mask = per[battle] > 1
            self.idx = np.flatnonzero(mask)
            row = np.searchsorted(multi, battle[self.idx])
            col = width - per[battle[self.idx]] + (self.idx - first[battle[self.idx]])
            self.cell = (row, col)
            self.p = np.zeros((multi.size, width))
            self.p[row, col] = rows[self.idx] / self.size[battle[self.idx]]

    def draw(self, rng, drawn: np.ndarray) -> np.ndarray:
        out = (drawn * self.size)[self.battle].astype(np.int64)  # single-entry battles: every pick is that entry
        if self.multi.size:
            picks = rng.multinomial(drawn[self.multi] * self.size[self.multi], self.p)
            out[self.idx] = picks[self.cell]
        return out


def compare_bt(fit: BTFit, tee: BTBootstrap, naive: BTBootstrap, level: float = 0.95):
    """Which system is better from pairwise judgments: every pair's log-strength difference, marginal and
    simultaneous intervals, Holm p-values, separable groups and rank sets, from the TEE-aware bootstrap
    (items and judges resampled) beside the naive one (battles resampled).

    The bootstrap draws give the joint law of the estimates: the covariance of the differences and the
    max-|t| critical value over all pairs, as ``evalgauge.compare`` does for scored judgments.
    """
    from scipy import stats

    from ..compare import Comparison
    from ..inference.multiplicity import holm, letters, max_t_quantile, rank_sets

    theta = fit.theta
    p = len(fit.systems)
    z = tee.draws - tee.draws.mean(axis=0)
    cov = np.cov(tee.draws.T)
    pa, pb = np.triu_indices(p, 1)
    swap = theta[pa] < theta[pb]
    pa, pb = np.where(swap, pb, pa), np.where(swap, pa, pb)
    diff = theta[pa] - theta[pb]
    se = np.sqrt(np.maximum(cov[pa, pa] + cov[pb, pb] - 2 * cov[pa, pb], 1e-300))
    zq = stats.norm.ppf(0.5 + level / 2)
    crit = max_t_quantile(z, np.column_stack([pa, pb]), se, level)
    pval = 2 * stats.norm.sf(np.abs(diff / se))
    nd = naive.draws[:, pa] - naive.draws[:, pb]
    n_lo, n_hi = np.quantile(nd, [(1 - level) / 2, (1 + level) / 2], axis=0)
    order = np.argsort(-theta, kind="stable")
    rank_of = np.empty(p, dtype=int)
    rank_of[order] = np.arange(1, p + 1)
    names = list(fit.systems)
    pairs = pd.DataFrame({"a": [names[k] for k in pa], "b": [names[k] for k in pb], "diff": diff, "se": se,
                          "df": np.inf, "low": diff - zq * se, "high": diff + zq * se,
                          "low_simultaneous": diff - crit * se, "high_simultaneous": diff + crit * se,
                          "p": pval, "p_holm": holm(pval), "naive_low": n_lo, "naive_high": n_hi})
    pairs["separable"] = pairs["low_simultaneous"] > 0
    pairs = pairs.assign(_r=[(rank_of[a], rank_of[b]) for a, b in zip(pa, pb, strict=True)]) \
        .sort_values("_r", kind="stable").drop(columns="_r").reset_index(drop=True)
    lo, hi = rank_sets(theta, cov, z, level, simultaneous=False)
    lo_s, hi_s = rank_sets(theta, cov, z, level, simultaneous=True)
    ordered = [names[k] for k in order]
    cld = letters(ordered, {frozenset((a, b)) for a, b, s in zip(pairs["a"], pairs["b"], pairs["separable"],
                                                                  strict=True) if s})
    systems = pd.DataFrame({
        "object": names, "mean": theta, "n": 0, "se": np.sqrt(np.diag(cov)), "df": np.inf,
        "low": tee.low, "high": tee.high, "naive_low": naive.low, "naive_high": naive.high,
        "rank": rank_of, "rank_low": lo, "rank_high": hi, "rank_low_simultaneous": lo_s,
        "rank_high_simultaneous": hi_s, "group": [cld[n] for n in names]}).sort_values("rank").reset_index(drop=True)
    notes = (f"log strengths (reference {fit.reference} at 0); intervals and rank sets from the TEE-aware bootstrap "
             f"({tee.resamples} resamples of items and of each battle's judge x variant x order cells), the naive "
             "ones from resampling battles.",)
    return Comparison("system", level, systems, pairs, crit, tee.resamples,
                      "Bradley-Terry log strengths with the TEE-aware bootstrap", notes)


# ---------------------------------------------------------------------------
# Position, win rates, human agreement
# ---------------------------------------------------------------------------
