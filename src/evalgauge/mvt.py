"""The simultaneous critical value of a family of t statistics: P(max_k |T_k| <= c) = level, computed as
R's mvtnorm computes it (Genz & Bretz 2002, 2009: separation of variables over a randomised lattice rule).

The family's statistics are linear in fewer variables than there are statistics (all pairs of p
systems: p(p-1)/2 differences of p means, rank p - 1), so their correlation is singular. As Genz and
Bretz do, a pivoted Cholesky factor L (m x r, r = rank) writes the statistics as x = L y with y
standard normal in r dimensions; each y_k is then drawn within the interval that every row whose last
non-zero column is k allows, and the probability is the mean of the products of those intervals'
normal masses. For a multivariate t with nu degrees of freedom the limits are scaled by
s = sqrt(chi2_nu / nu), drawn from one more lattice coordinate. The points are a Richtmyer lattice
(square roots of primes) with random shifts; the spread over the shifts gives the error, which is
reported as mvtnorm does (3.5 standard errors). The critical value is the root of
P(c) - level in c over the same points (common random numbers make P(c) smooth), and its error is
the probability's divided by the density dP/dc there.

Pure: arrays in, a dataclass out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import special, stats

_PRIMES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97, 101,
           103, 107, 109, 113, 127, 131, 137, 139, 149, 151, 157, 163, 167, 173, 179, 181, 191, 193, 197, 199)


@dataclass(frozen=True)
class CriticalValue:
    """``value``: c with P(max |T| <= c) = level; ``error``: its absolute error (3.5 standard errors);
    ``probability_error``: the error of P at c; ``points``: lattice points x shifts used."""

    value: float
    error: float
    probability_error: float
    points: int

    @property
    def relative_error(self) -> float:
        return self.error / self.value if self.value > 0 else 0.0


def _pivoted_cholesky(corr: np.ndarray, tol: float = 1e-10) -> tuple[np.ndarray, np.ndarray]:
    """L (m x r) and the row order, with corr[order][:, order] = L L' (rank r; Genz-Bretz ordering by the
    smallest variance left first is not needed for symmetric limits, so the largest pivot is taken)."""
    m = corr.shape[0]
    a = corr.astype(float).copy()
    order = np.arange(m)
    lower = np.zeros((m, m))
    r = 0
    for k in range(m):
        diag = np.diag(a)[k:] - np.sum(lower[k:, :k] ** 2, axis=1)
        j = k + int(np.argmax(diag))
        if diag[j - k] <= tol:
            break
        if j != k:  # swap rows/columns k and j
            a[[k, j]] = a[[j, k]]
            a[:, [k, j]] = a[:, [j, k]]
            lower[[k, j]] = lower[[j, k]]
            order[[k, j]] = order[[j, k]]
        pivot = math.sqrt(max(a[k, k] - lower[k, :k] @ lower[k, :k], tol))
        lower[k, k] = pivot
        lower[k + 1:, k] = (a[k + 1:, k] - lower[k + 1:, :k] @ lower[k, :k]) / pivot
        r += 1
    return lower[:, :r], order


def _lattice(n: int, dim: int, rng: np.random.Generator) -> np.ndarray:
    """n points of a randomly shifted Richtmyer lattice in [0, 1]^dim, folded (baker's transform)."""
    if dim > len(_PRIMES):
        raise ValueError(f"at most {len(_PRIMES)} dimensions")
    alpha = np.sqrt(np.array(_PRIMES[:dim], dtype=float))
    u = (np.outer(np.arange(1, n + 1), alpha) + rng.random(dim)) % 1.0
    return np.abs(2.0 * u - 1.0)


class _Rectangle:
    """P(|x_i| <= c for every i) for x = L y (y ~ N(0, I_r)), optionally divided by s ~ sqrt(chi2_nu/nu)."""

    def __init__(self, corr: np.ndarray, df: float):
        lower, _ = _pivoted_cholesky(corr)
        self.lower = lower
        self.r = lower.shape[1]
        # each row belongs to the last column where it is non-zero: it bounds that variable
        nz = np.abs(lower) > 1e-12 * np.max(np.abs(lower), axis=1, keepdims=True)
        self.last = np.array([np.flatnonzero(row).max() for row in nz])
        self.rows_of = [np.flatnonzero(self.last == k) for k in range(self.r)]
        self.df = df

    def scale(self, points: np.ndarray) -> np.ndarray:
        """Per point: the chi scale s of a t law (1 for the normal), the same at every c."""
        if not math.isfinite(self.df):
            return np.ones(points.shape[0])
        return np.sqrt(stats.chi2.ppf(np.clip(points[:, -1], 1e-15, 1 - 1e-15), self.df) / self.df)

    def probability(self, c: float, points: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        """Per point of (lattice points, their chi scales): the product of the intervals' masses (its mean
        over points is the probability)."""
        points, scale = points
        n = points.shape[0]
        limit = c * scale
        y = np.zeros((n, self.r))
        weight = np.ones(n)
        for k in range(self.r):
            rows = self.rows_of[k]
            partial = y[:, :k] @ self.lower[rows, :k].T  # n x rows
            coef = self.lower[rows, k]
            lo = (-limit[:, None] - partial) / coef
            hi = (limit[:, None] - partial) / coef
            lo, hi = np.minimum(lo, hi), np.maximum(lo, hi)
            a = np.max(lo, axis=1)
            b = np.min(hi, axis=1)
            pa, pb = special.ndtr(a), special.ndtr(b)
            mass = np.clip(pb - pa, 0.0, None)
            weight *= mass
            if k + 1 < self.r:
                y[:, k] = special.ndtri(np.clip(pa + points[:, k] * mass, 1e-300, 1 - 1e-16))
        return weight


def max_t_critical(corr: np.ndarray, df: float, level: float, *, tolerance: float = 1e-3, seed: int = 0,
                   shifts: int = 10, max_points: int = 2**21) -> CriticalValue:
    """c with P(max_k |T_k| <= c) = ``level`` for T ~ t_df(0, corr) (``df`` = inf: normal), to a relative
    error below ``tolerance`` (Genz & Bretz; see the module). ``corr`` may be singular.

    A coarse pass (1,024 points a shift) brackets c and measures the rule's error; the lattice for the
    final pass is sized from it (a lattice rule's error falls about as 1/n) and grown until the error is
    below the tolerance or ``max_points`` is reached (then ``relative_error`` says how far it got)."""
    corr = np.asarray(corr, dtype=float)
    m = corr.shape[0]
    if m == 0:
        return CriticalValue(0.0, 0.0, 0.0, 0)
    one = stats.t.ppf(0.5 + level / 2, df) if math.isfinite(df) else stats.norm.ppf(0.5 + level / 2)
    rect = _Rectangle(corr, df)
    if rect.r == 1:  # every statistic is the same one up to sign: the two-sided quantile itself
        return CriticalValue(float(one), 0.0, 0.0, 0)
    bonferroni = stats.t.ppf(1 - (1 - level) / (2 * m), df) if math.isfinite(df) else \
        stats.norm.ppf(1 - (1 - level) / (2 * m))
    rng = np.random.default_rng(seed)
    low, high = one * (1 - 1e-9), bonferroni * (1 + 1e-6) + 1e-9
    n = 1024
    while True:
        c, c_error, p_error = _solve(rect, level, _lattice_sets(n, rect, shifts, rng), low, high,
                                     xtol=tolerance * one / 20)
        if c_error <= tolerance * c or n * shifts >= max_points:
            return CriticalValue(c, c_error, p_error, n * shifts)
        # bracket the root by the coarse pass, and size the next lattice from its error
        low, high = max(low, c - 5 * c_error), min(high, c + 5 * c_error)
        grow = c_error / (0.7 * tolerance * c)
        n = int(min(max_points // shifts, max(2 * n, n * grow)))


def _lattice_sets(n: int, rect: _Rectangle, shifts: int, rng: np.random.Generator) -> list[tuple]:
    dim = rect.r + (1 if math.isfinite(rect.df) else 0)
    sets = [_lattice(n, dim, rng) for _ in range(shifts)]
    return [(pts, rect.scale(pts)) for pts in sets]


def _solve(rect: _Rectangle, level: float, sets: list[tuple], low: float, high: float,
           xtol: float) -> tuple[float, float, float]:
    """The root of P(c) = level over these points (safeguarded secant steps from the bracket: P is smooth
    and monotone on common points), its error, and the probability's error at it."""
    def per_shift(c: float) -> np.ndarray:
        return np.array([rect.probability(c, pts).mean() for pts in sets])

    a, b = low, high
    pa, pb = float(per_shift(a).mean()), float(per_shift(b).mean())
    while pa > level:  # a bracket from a coarse pass can miss by more than its error: widen it
        a, pa = a * 0.95, float(per_shift(a * 0.95).mean())
    while pb < level:
        b, pb = b * 1.05 + 1e-9, float(per_shift(b * 1.05 + 1e-9).mean())
    c, values = b, None
    for _ in range(60):
        # regula falsi with the Illinois modification, which converges superlinearly on smooth P
        c = b - (pb - level) * (b - a) / (pb - pa) if pb != pa else 0.5 * (a + b)
        if not a < c < b:
            c = 0.5 * (a + b)
        values = per_shift(c)
        pc = float(values.mean())
        if pc < level:
            a, pa = c, pc
            pb = level + (pb - level) / 2
        else:
            b, pb = c, pc
            pa = level + (pa - level) / 2
        if b - a < xtol or abs(pc - level) < 1e-12:
            break
    h = max(1e-3 * c, 10 * xtol)
    density = (float(per_shift(c + h).mean()) - float(per_shift(c - h).mean())) / (2 * h)
    p_error = 3.5 * values.std(ddof=1) / math.sqrt(len(sets))
    # the error counts the rule's (through the density) and the root's bracket
    return float(c), float(p_error / density + (b - a)) if density > 0 else math.inf, float(p_error)
