"""Multiplicity: what a family of comparisons needs beyond each pair's own interval.

The max-|t| quantile over draws of the estimates' error (the simultaneous critical value of a bootstrap), the
stepdown decisions and rank confidence sets of Mogstad, Romano, Shaikh & Wilhelm ("Inference for Ranks", REStud
2024, Algorithm 3.1, as their package csranks computes them), Holm's adjustment and the compact letter display
(Piepho 2004). The exact simultaneous critical value of a normal or t family is :mod:`evalgauge.inference.mvt`'s.

This module is pure: arrays in, arrays out.
"""

from __future__ import annotations

import numpy as np

from .mvt import covariance_root, error_draws


def draws(cov: np.ndarray, df: float, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Draws of the estimation error of the system means: N(0, cov), scaled to a multivariate t with ``df``."""
    return error_draws(covariance_root(cov), df, n_boot, rng)


def max_t_quantile(z: np.ndarray, pairs: np.ndarray, se: np.ndarray, level: float) -> float:
    """The ``level`` quantile over the draws ``z`` (draws x systems) of max over ``pairs`` of |z_a - z_b| / se_ab:
    the simultaneous critical value of a bootstrap (Tukey's studentized range when the draws are normal)."""
    if pairs.size == 0:
        return 0.0
    stat = np.abs(z[:, pairs[:, 0]] - z[:, pairs[:, 1]]) / se
    return float(np.quantile(stat.max(axis=1), level))


#: draws x ordered pairs held at once (about 64 MB): a family's statistics are kept across the stepdown's
#: rounds when they fit, else recomputed in blocks of draws each round
_CHUNK_VALUES = 8_000_000


class _Family:
    """The one-sided statistics (z_j - z_k) / sd_jk of a family of ordered pairs (j, k), over the draws."""

    def __init__(self, z: np.ndarray, sd: np.ndarray, rows: np.ndarray, cols: np.ndarray):
        self.z, self.rows, self.cols, self.scale = z, rows, cols, sd[rows, cols]
        self.kept = self._block(0, z.shape[0], np.arange(rows.size)) if z.shape[0] * rows.size <= _CHUNK_VALUES \
            else None

    def _block(self, start: int, stop: int, idx: np.ndarray) -> np.ndarray:
        block = self.z[start:stop]
        return (block[:, self.rows[idx]] - block[:, self.cols[idx]]) / self.scale[idx]

    def max_over(self, idx: np.ndarray) -> np.ndarray:
        """Per draw, the largest statistic among the pairs ``idx``."""
        if self.kept is not None:
            return self.kept[:, idx].max(axis=1)
        n = self.z.shape[0]
        step = max(1, _CHUNK_VALUES // max(idx.size, 1))
        return np.concatenate([self._block(a, min(a + step, n), idx).max(axis=1) for a in range(0, n, step)])


def _decided(means: np.ndarray, sd: np.ndarray, z: np.ndarray, family: np.ndarray, level: float) -> np.ndarray:
    """Which ordered pairs (j, k) of ``family`` (a boolean p x p mask) are decided theta_j > theta_k by stepdown
    lower confidence bounds (Mogstad, Romano, Shaikh & Wilhelm 2024, Algorithm 3.1 over one-sided hypotheses,
    as csranks computes it): L_jk = (x_j - x_k) - sd_jk * q, q the ``level`` quantile of the largest one-sided
    statistic over the pairs not yet decided. A decided pair leaves the family while its reverse (k, j) stays
    in it, and q is taken again until a round decides nothing more."""
    rows, cols = np.nonzero(family)
    statistics = _Family(z, sd, rows, cols)
    diff = means[rows] - means[cols]
    decided = np.zeros(rows.size, dtype=bool)
    while not decided.all():
        open_ = np.flatnonzero(~decided)
        q = float(np.quantile(statistics.max_over(open_), level))
        new = diff[open_] - sd[rows[open_], cols[open_]] * q > 0
        if not new.any():
            break
        decided[open_[new]] = True
    out = np.zeros(family.shape, dtype=bool)
    out[rows[decided], cols[decided]] = True
    return out


def rank_sets(means: np.ndarray, cov: np.ndarray, z: np.ndarray, level: float,
              simultaneous: bool, undecidable: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Confidence sets for the ranks (1 = the highest mean), Mogstad, Romano, Shaikh & Wilhelm (2024), eq. (12)
    and Algorithm 3.1: rank set of j = [1 + #{k: theta_k > theta_j decided}, p - #{k: theta_j > theta_k
    decided}], the pairs decided by stepdown lower bounds over one-sided hypotheses (:func:`_decided`).

    ``simultaneous``: one family of every ordered pair, so the sets cover all ranks at once (their Theorem
    3.3); otherwise, for each j, the family of the 2(p - 1) ordered pairs that involve j (its rank alone).
    ``z`` are draws of the estimates' error (normal, or multivariate t), from which each quantile is read.
    The construction is csranks' (``csranks(x, Sigma, simul=...)``, two-sided with stepdown), and its sets
    are csranks' on the PISA example and on a correlated design (tests/inference/test_rank_sets.py).
    ``undecidable`` (p x p, symmetric) marks pairs the data cannot order (confounded with another facet):
    they stay in every family but are never decided.
    """
    p = len(means)
    lo = np.ones(p, dtype=int)
    hi = np.full(p, p, dtype=int)
    if p < 2:
        return lo, hi
    var = np.diag(cov)
    sd = np.sqrt(np.maximum(var[:, None] + var[None, :] - 2 * cov, 1e-300))
    off = ~np.eye(p, dtype=bool)
    never = np.zeros((p, p), dtype=bool) if undecidable is None else undecidable
    if simultaneous:
        decided = _decided(means, sd, z, off, level) & ~never
        return 1 + decided.sum(axis=0), p - decided.sum(axis=1)
    for j in range(p):
        family = np.zeros((p, p), dtype=bool)
        family[j, :] = family[:, j] = True
        decided = _decided(means, sd, z, family & off, level) & ~never
        lo[j] = 1 + int(decided[:, j].sum())
        hi[j] = p - int(decided[j, :].sum())
    return lo, hi


def holm(p: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values (1979)."""
    p = np.asarray(p, dtype=float)
    order = np.argsort(p)
    m = p.size
    adj = np.empty(m)
    running = 0.0
    for rank, k in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[k]))
        adj[k] = running
    return adj


def letters(order: list[str], separated: set[frozenset]) -> dict[str, str]:
    """A compact letter display (Piepho 2004, insert-and-absorb): systems sharing a letter are not separated.

    ``order`` lists the systems best first; ``separated`` holds the pairs that differ significantly.
    Groups are bit masks over ``order``, so the absorb step is a few integer operations per pair of groups.
    """
    index = {name: k for k, name in enumerate(order)}
    groups = [(1 << len(order)) - 1]
    for pair in sorted(separated, key=lambda p: sorted(index[x] for x in p)):
        a, b = (1 << index[x] for x in pair)
        new = []
        for g in groups:
            if g & a and g & b:
                new += [g & ~a, g & ~b]
            else:
                new.append(g)
        new = list(dict.fromkeys(g for g in new if g))
        groups = [g for g in new if not any(g != h and g & h == g for h in new)]  # absorb subsets
    groups.sort(key=lambda g: (g & -g).bit_length())  # by the best system in the group
    alphabet = "abcdefghijklmnopqrstuvwxyz"
    out = dict.fromkeys(order, "")
    for k, g in enumerate(groups):
        mark = alphabet[k] if k < 26 else f"<{k}>"
        for name, j in index.items():
            if g >> j & 1:
                out[name] += mark
    return out
