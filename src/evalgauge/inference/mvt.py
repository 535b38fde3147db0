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
from scipy import special

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
    #: how it was computed: "Genz-Bretz" (randomised lattice rule, as mvtnorm) or "Monte Carlo"
    method: str = "Genz-Bretz"

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
        return np.sqrt(special.chdtri(self.df, 1 - np.clip(points[:, -1], 1e-15, 1 - 1e-15)) / self.df)

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
    one = special.stdtrit(df, 0.5 + level / 2) if math.isfinite(df) else special.ndtri(0.5 + level / 2)
    rect = _Rectangle(corr, df)
    if rect.r == 1:  # every statistic is the same one up to sign: the two-sided quantile itself
        return CriticalValue(float(one), 0.0, 0.0, 0)
    bonferroni = special.stdtrit(df, 1 - (1 - level) / (2 * m)) if math.isfinite(df) else \
        special.ndtri(1 - (1 - level) / (2 * m))
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


#: widenings of a bracket that missed the root (1.05^200: 17,000 times the start) before giving up
WIDEN_STEPS = 200


def _solve(rect: _Rectangle, level: float, sets: list[tuple], low: float, high: float,
           xtol: float) -> tuple[float, float, float]:
    """The root of P(c) = level over these points (safeguarded secant steps from the bracket: P is smooth
    and monotone on common points), its error, and the probability's error at it."""
    def per_shift(c: float) -> np.ndarray:
        return np.array([rect.probability(c, pts).mean() for pts in sets])

    a, b = low, high
    pa, pb = float(per_shift(a).mean()), float(per_shift(b).mean())
    for _ in range(WIDEN_STEPS):  # a bracket from a coarse pass can miss by more than its error: widen it
        if pa <= level:
            break
        a, pa = a * 0.95, float(per_shift(a * 0.95).mean())
    for _ in range(WIDEN_STEPS):
        if pb >= level:
            break
        b, pb = b * 1.05 + 1e-9, float(per_shift(b * 1.05 + 1e-9).mean())
    if not (pa <= level <= pb) or not math.isfinite(b):  # no bracket (a degenerate law): no value
        return math.inf, math.inf, math.inf
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


#: pairs up to which the simultaneous critical value is computed by the lattice rule (about half a second at
#: 15 pairs, 6 systems; it grows fast with the dimension), beyond which plain Monte Carlo reaches 0.1% sooner
LATTICE_PAIRS = 15
#: draws x pairs a Monte Carlo critical value may take (about 2 s of CPU), and draws at most (a t law on
#: very few df has tails no number of draws pins down to 0.1%: the error reached is reported)
MC_BUDGET = 3e8
MC_MAX_DRAWS = 10_000_000


def covariance_root(cov: np.ndarray) -> np.ndarray:
    """R with R R' = cov (symmetric eigen-root; a singular or slightly indefinite cov is clipped at zero)."""
    vals, vecs = np.linalg.eigh((cov + cov.T) / 2)
    return vecs * np.sqrt(np.clip(vals, 0.0, None))


def error_draws(root: np.ndarray, df: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """n draws of N(0, R R') in the precision of ``root``, scaled to a multivariate t on ``df`` (inf: normal).

    With df far below 1 a chi-square draw can be exactly 0: it is kept positive, so the draw is huge (no
    information) rather than infinite, and differences of draws are never inf - inf = NaN."""
    z = rng.standard_normal((n, root.shape[0]), dtype=root.dtype) @ root.T
    if math.isfinite(df) and df > 0:
        z *= np.sqrt(df / np.maximum(rng.chisquare(df, size=(n, 1)), 1e-300)).astype(root.dtype)
    return z


def pair_se(cov: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """The SEs of the differences x_a - x_b of ``pairs`` of means with covariance ``cov``."""
    a, b = pairs[:, 0], pairs[:, 1]
    return np.sqrt(np.maximum(cov[a, a] + cov[b, b] - 2 * cov[a, b], 1e-300))


def pair_correlation(cov: np.ndarray, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The correlation of the differences x_a - x_b of ``pairs`` of means with covariance ``cov``, and their SEs
    (pairs x pairs: for the lattice rule's few pairs only)."""
    a, b = pairs[:, 0], pairs[:, 1]
    se = pair_se(cov, pairs)
    cross = cov[a][:, a] - cov[a][:, b] - cov[b][:, a] + cov[b][:, b]
    return cross / np.outer(se, se), se


def simultaneous_critical(cov: np.ndarray, pairs: np.ndarray, df: float, level: float, *,
                          tolerance: float = 1e-3, seed: int = 0, budget: float = MC_BUDGET) -> CriticalValue:
    """c with P(max over ``pairs`` of |T_ab| <= c) = ``level``, T_ab = (x_a - x_b) / SE_ab for means with
    covariance ``cov`` and a multivariate t law on ``df`` (inf: normal), to a relative error below
    ``tolerance``: by the lattice rule (:func:`max_t_critical`, as mvtnorm's qmvt) for up to
    :data:`LATTICE_PAIRS` pairs, else by Monte Carlo (:func:`max_t_monte_carlo`), which reaches the same
    accuracy at a cost linear in the pairs. The error (3.5 standard errors, mvtnorm's convention) is
    reported either way; a Monte Carlo run that hits ``budget`` reports the error it reached. A pair whose
    difference has no variance (the design fixes it exactly, e.g. systems scored identically) bounds nothing
    and is left out."""
    if len(pairs):
        a, b = pairs[:, 0], pairs[:, 1]
        spread = cov[a, a] + cov[b, b] - 2 * cov[a, b]
        pairs = pairs[spread > 1e-12 * max(float(np.max(np.abs(np.diag(cov)))), 1e-300)]
    if len(pairs) == 0:
        return CriticalValue(0.0, 0.0, 0.0, 0, "no difference varies")
    if len(pairs) == 1:  # one pair: the two-sided quantile itself
        q = special.stdtrit(df, 0.5 + level / 2) if math.isfinite(df) else special.ndtri(0.5 + level / 2)
        return CriticalValue(float(q), 0.0, 0.0, 0, "exact")
    if _all_pairs_of_exchangeable_means(cov, pairs):
        # every pair of means with equal variances and equal covariances: max |T| is the studentized range of
        # k independent normals over sqrt(2) (the shared part cancels in each difference; Tukey's HSD)
        k = cov.shape[0]
        from scipy.stats import studentized_range  # only here: scipy.stats takes a second to import

        q = studentized_range.ppf(level, k, df if df > 0 else math.inf)
        if math.isfinite(q):
            return CriticalValue(float(q / math.sqrt(2.0)), 0.0, 0.0, 0, "studentized range")
    if len(pairs) <= LATTICE_PAIRS and df >= 1:  # below 1 df the t law's tail defeats the lattice's bracket
        corr, _ = pair_correlation(cov, pairs)
        with np.errstate(all="ignore"):
            lattice = max_t_critical(corr, df, level, tolerance=tolerance, seed=seed)
        if math.isfinite(lattice.value) and math.isfinite(lattice.error):
            return lattice
    with np.errstate(over="ignore"):
        return max_t_monte_carlo(cov, pairs, df, level, tolerance=tolerance, seed=seed, budget=budget)


def _all_pairs_of_exchangeable_means(cov: np.ndarray, pairs: np.ndarray, rtol: float = 1e-10) -> bool:
    """Whether ``pairs`` are all the pairs of ``cov``'s means and ``cov`` is compound symmetric (one variance,
    one covariance): the structure of a complete balanced design's system means."""
    k = cov.shape[0]
    if k < 3 or len(pairs) != k * (k - 1) // 2:
        return False
    diag = np.diag(cov)
    off = cov[~np.eye(k, dtype=bool)]
    scale = float(np.max(np.abs(diag))) or 1.0
    return bool(np.ptp(diag) <= rtol * scale and np.ptp(off) <= rtol * scale and diag[0] - off[0] > rtol * scale
                and len({(int(a), int(b)) for a, b in np.sort(pairs, axis=1)}) == len(pairs))


def max_t_monte_carlo(cov: np.ndarray, pairs: np.ndarray, df: float, level: float, *, tolerance: float = 1e-3,
                      seed: int = 0, budget: float = MC_BUDGET) -> CriticalValue:
    """The ``level`` quantile of max |x_a - x_b| / SE_ab over draws of x ~ N(0, cov) (scaled to a multivariate
    t on ``df``), drawn in batches until 3.5 standard errors of the quantile fall below ``tolerance`` of it
    or ``budget`` draws x pairs are spent. The standard error is the order statistic's: the spread of the
    sorted maxima over +- sqrt(n level (1 - level)) ranks around the quantile's."""
    rng = np.random.default_rng(seed)
    root = covariance_root(cov).astype(np.float32)
    se = pair_se(cov, pairs)
    # the pairs grouped by their first member: each group is one contiguous slice op per draw block
    by_first = [(int(first), pairs[pairs[:, 0] == first, 1], (1.0 / se[pairs[:, 0] == first]).astype(np.float32))
                for first in np.unique(pairs[:, 0])]
    batch = int(max(2_000, min(200_000, 2e7 // len(pairs))))
    cap = int(max(batch, min(MC_MAX_DRAWS, budget // len(pairs))))

    def draw(count: int) -> np.ndarray:
        out = []
        for start in range(0, count, batch):
            m = min(batch, count - start)
            # single precision: the maxima need 4 significant digits, and it halves the memory traffic
            out.append(_max_pair_statistic(error_draws(root, df, m, rng), by_first))
        return np.concatenate(out).astype(np.float64)

    maxima = draw(min(cap, 50_000))
    while True:
        value, error = _quantile_and_error(maxima, level)
        n = maxima.size
        if error <= tolerance * value or n >= cap:
            return CriticalValue(value, error, 3.5 * math.sqrt(level * (1 - level) / n), n, "Monte Carlo")
        # the quantile's error falls as 1/sqrt(n): draw what the target needs (with 10% to spare), within the cap
        more = int(min(cap - n, max(n // 2, n * ((error / (tolerance * value)) ** 2 * 1.1 - 1))))
        maxima = np.concatenate([maxima, draw(more)])


def _max_pair_statistic(z: np.ndarray, by_first: list) -> np.ndarray:
    """Per draw, max over the pairs of |z_a - z_b| / SE_ab, accumulated one first member at a time."""
    best = np.zeros(z.shape[0], dtype=z.dtype)
    for first, others, inv_se in by_first:
        np.maximum(best, (np.abs(z[:, others] - z[:, first:first + 1]) * inv_se).max(axis=1), out=best)
    return best


def _quantile_and_error(sample: np.ndarray, level: float) -> tuple[float, float]:
    """The ``level`` quantile and 3.5 of its standard errors, from three order statistics (a partition, not a
    sort)."""
    n = sample.size
    k = level * (n - 1)
    spread = math.sqrt(n * level * (1 - level))
    lo, hi = int(max(0, math.floor(k - spread))), int(min(n - 1, math.ceil(k + spread)))
    below, above = math.floor(k), int(min(n - 1, math.floor(k) + 1))
    part = np.partition(sample, sorted({lo, below, above, hi}))
    value = float(part[below] + (k - below) * (part[above] - part[below]))  # numpy's linear quantile
    return value, 3.5 * float(part[hi] - part[lo]) / 2
