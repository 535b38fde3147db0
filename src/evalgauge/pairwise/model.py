"""The Bradley-Terry model with ties and a position term (Davidson 1970; Agresti 2002 sec. 10.6), fitted by Newton's
method with its exact information; Elo (Chatbot Arena's scale and anchor); and which systems the battles connect."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import DesignError
from .data import ELO_SCALE, Battles


@dataclass(frozen=True)
class BTFit:
    systems: tuple[str, ...]
    reference: str
    theta: np.ndarray  # log strengths, reference at 0
    se: np.ndarray
    log_nu: float | None  # ties (Davidson)
    log_h: float | None  # first-slot (position) advantage
    loglik: float
    n: int

    @property
    def elo(self) -> np.ndarray:
        return ELO_SCALE * self.theta

    def win_probability(self, i: int, j: int) -> float:
        """P(i beats j) with ties counted half, order-balanced: the mean of i in slot A and i in slot B."""
        pa = _probs(self.theta[i], self.theta[j], self.log_nu, self.log_h)
        pb = _probs(self.theta[j], self.theta[i], self.log_nu, self.log_h)
        return 0.5 * (pa[0] + 0.5 * pa[2]) + 0.5 * (pb[1] + 0.5 * pb[2])

    def table(self) -> pd.DataFrame:
        ref = self.systems.index(self.reference)
        return pd.DataFrame({
            "system": self.systems, "log_strength": self.theta, "se": self.se, "elo": self.elo,
            "win_rate_vs_reference": [self.win_probability(k, ref) if k != ref else 0.5
                                      for k in range(len(self.systems))],
        }).sort_values("log_strength", ascending=False, kind="stable").reset_index(drop=True)


def _probs(ti, tj, log_nu, log_h):
    """(P(A wins), P(B wins), P(tie)) for strengths ti (slot A), tj (slot B)."""
    hi = ti + (log_h or 0.0)
    tie = math.exp(log_nu + 0.5 * (hi + tj)) if log_nu is not None else 0.0
    ea, eb = math.exp(hi), math.exp(tj)
    d = ea + eb + tie
    return ea / d, eb / d, tie / d


def fit_bt(battles: Battles, *, reference: str | None = None, ties: bool | None = None, position: bool = False,
           weights: np.ndarray | None = None, start: BTFit | None = None, se: bool = True,
           ridge: float = 0.0) -> BTFit:
    """Maximum-likelihood Bradley-Terry (Davidson ties, optional first-slot advantage).

    ``ties`` defaults to whether the data hold ties; ``weights`` multiply each
    judgment (counts, or bootstrap multiplicities). SEs from the inverse
    observed information (numerical Hessian at the optimum). ``ridge`` > 0
    maximises the likelihood penalised by ridge/2 * sum(theta^2) (a normal prior
    on the log strengths), which stays finite when a system won or lost every
    game (separation, where the maximum-likelihood estimate is infinite).
    """
    m = len(battles.systems)
    if m < 2:
        raise DesignError("Bradley-Terry needs at least two systems.")
    reference = reference or battles.systems[0]
    if reference not in battles.systems:
        raise DesignError(f"reference '{reference}' is not among the systems ({', '.join(battles.systems)}).")
    ref = battles.systems.index(reference)
    w = np.ones(battles.n) if weights is None else np.asarray(weights, float)
    y = battles.outcome
    has_ties = bool(np.any((y == 0.5) & (w > 0))) if ties is None else ties
    free = [k for k in range(m) if k != ref]
    n_par = len(free) + int(has_ties) + int(position)
    a, b = battles.a, battles.b
    win_a = w * (y == 1.0)
    win_b = w * (y == 0.0)
    tie = w * (y == 0.5)
    if not has_ties and tie.sum() > 0:
        win_a, win_b = win_a + 0.5 * tie, win_b + 0.5 * tie  # ties as half wins for plain BT
        tie = np.zeros_like(tie)
    # the likelihood depends on a judgment only through its ordered pair: one row per pair, three counts
    key = a * m + b
    pairs, row_of = np.unique(key, return_inverse=True)
    if pairs.size < key.size:
        win_a, win_b, tie = (np.bincount(row_of, weights=v, minlength=pairs.size) for v in (win_a, win_b, tie))
        a, b = np.divmod(pairs, m)
    structure = _information_structure(a, b, m, free, has_ties, position)

    def unpack(x):
        theta = np.zeros(m)
        theta[free] = x[:len(free)]
        k = len(free)
        log_nu = x[k] if has_ties else None
        log_h = x[k + int(has_ties)] if position else None
        return theta, log_nu, log_h

    total = win_a + win_b + tie

    def negll(x, grad=False):
        theta, log_nu, log_h = unpack(x)
        ha = theta[a] + (log_h or 0.0)
        hb = theta[b]
        terms = [ha, hb]
        if has_ties:
            terms.append(log_nu + 0.5 * (ha + hb))
        stack = np.vstack(terms)
        lse = np.logaddexp.reduce(stack, axis=0)
        ll = win_a @ (ha - lse) + win_b @ (hb - lse)
        if has_ties:
            ll += tie @ (stack[2] - lse)
        ll -= 0.5 * ridge * float(theta @ theta)
        if not grad:
            return -ll
        # d ll / d score of each outcome: observed minus expected counts
        prob = np.exp(stack - lse)
        r_a = win_a - total * prob[0]
        r_b = win_b - total * prob[1]
        r_t = tie - total * prob[2] if has_ties else np.zeros_like(r_a)
        g_theta = np.bincount(a, r_a + 0.5 * r_t, minlength=m) + np.bincount(b, r_b + 0.5 * r_t, minlength=m)
        g = list(g_theta[free] - ridge * theta[free])
        if has_ties:
            g.append(r_t.sum())
        if position:
            g.append((r_a + 0.5 * r_t).sum())
        return -ll, -np.asarray(g)

    x0 = np.zeros(n_par)
    if start is not None:  # warm start (bootstrap refits)
        x0[:len(free)] = start.theta[free]
        if has_ties and start.log_nu is not None:
            x0[len(free)] = start.log_nu
        if position and start.log_h is not None:
            x0[-1] = start.log_h
    x, value = _newton(negll, lambda z: _information(z, unpack, a, b, total, structure, has_ties, ridge), x0)
    if x is None:  # Newton could not make progress (a degenerate resample): quasi-Newton from the start
        from scipy.optimize import minimize  # the fallback only: Newton fits every well-posed case without it

        res = minimize(lambda z: negll(z, grad=True), x0, jac=True, method="BFGS",
                       options={"gtol": 1e-9, "maxiter": 10_000})
        x, value = res.x, float(res.fun)
    se_free = np.full(len(free), math.nan)
    if se:
        try:
            info = _information(x, unpack, a, b, total, structure, has_ties, ridge)
            cov = np.linalg.inv(info)
            se_free = np.sqrt(np.clip(np.diag(cov)[:len(free)], 0.0, None))
        except np.linalg.LinAlgError:
            pass
    theta, log_nu, log_h = unpack(x)
    ses = np.zeros(m)
    ses[free] = se_free
    return BTFit(battles.systems, reference, theta, ses, log_nu, log_h, -float(value), int(w.sum()))


def _newton(negll, information, x0: np.ndarray, max_iter: int = 100):
    """Newton's method with step halving on the negative log-likelihood; the Hessian is the exact observed
    information (the multinomial logit is an exponential family). Returns (x, value), or (None, None)."""
    x = x0.copy()
    value, grad = negll(x, grad=True)
    for _ in range(max_iter):
        try:
            step = np.linalg.solve(information(x), grad)
        except np.linalg.LinAlgError:
            return None, None
        t = 1.0
        while t > 1e-8:
            cand = x - t * step
            cand_value = negll(cand)
            if cand_value <= value + 1e-12 * abs(value):
                break
            t *= 0.5
        else:
            return (x, value) if np.max(np.abs(grad)) < 1e-6 * max(1.0, abs(value)) else (None, None)
        x, old = cand, value
        value, grad = negll(x, grad=True)
        if np.max(np.abs(t * step)) < 1e-10 or old - value < 1e-13 * max(1.0, abs(value)):
            return x, value
    return x, value


def _information_structure(a, b, m, free, has_ties, position) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Where each judgment's 4 x 4 information block lands in the parameters' matrix: computed once per
    fit (it depends only on who met whom), used at every Newton step."""
    n_free = len(free)
    pos = np.full(m, -1)
    pos[free] = np.arange(n_free)
    n_par = n_free + int(has_ties) + int(position)
    idx = np.stack([pos[a], pos[b], np.full(a.size, n_free if has_ties else -1),
                    np.full(a.size, n_par - 1 if position else -1)], axis=1)  # judgments x 4
    ii = np.repeat(idx, 4, axis=1)  # judgments x 16: (i, j) pairs row-major
    jj = np.tile(idx, (1, 4))
    ok = (ii >= 0) & (jj >= 0)
    return ok, ii[ok] * n_par + jj[ok], n_par, n_free


def _information(x, unpack, a, b, total, structure, has_ties, ridge) -> np.ndarray:
    """The observed information of the Bradley-Terry(-Davidson) likelihood, analytically.

    Each judgment's outcome is multinomial over (A wins, B wins, tie) with log-odds scores
    s = (theta_a + h, theta_b, log nu + (theta_a + h + theta_b) / 2); its information in the scores is
    n (diag(p) - p p'), mapped to the parameters through the (sparse) Jacobian of the scores. Exact and
    linear in the number of distinct judgments, where a numerical Hessian needs O(parameters^2)
    likelihood evaluations over every judgment.
    """
    theta, log_nu, log_h = unpack(x)
    ha = theta[a] + (log_h or 0.0)
    hb = theta[b]
    terms = [ha, hb] + ([log_nu + 0.5 * (ha + hb)] if has_ties else [])
    stack = np.vstack(terms)
    p = np.exp(stack - np.logaddexp.reduce(stack, axis=0))  # outcomes x judgments
    k = p.shape[0]
    # local parameters per judgment: theta_a, theta_b, log nu, h; rows: the scores' derivatives
    g = np.zeros((k, 4))
    g[0, 0] = g[1, 1] = 1.0
    g[0, 3] = 1.0
    if has_ties:
        g[2] = [0.5, 0.5, 1.0, 0.5]
    # G' n (diag p - p p') G per judgment = n (sum_k p_k g_k g_k' - q q'), q = G' p: two small products
    gg = np.einsum("ki,kj->kij", g, g).reshape(k, 16)
    q = p.T @ g
    local = total[:, None] * (p.T @ gg - (q[:, :, None] * q[:, None, :]).reshape(-1, 16))
    # scatter the 4 x 4 blocks into the parameters' matrix with one bincount
    ok, flat, n_par, n_free = structure
    info = np.bincount(flat, weights=local[ok], minlength=n_par * n_par).reshape(n_par, n_par)
    info[np.arange(n_free), np.arange(n_free)] += ridge
    return info


ARENA_ANCHOR = ("mixtral-8x7b-instruct-v0.1", 1114.0)


def arena_elo(battles: Battles, weights: np.ndarray | None = None) -> np.ndarray:
    """Ratings on Chatbot Arena's scale: ties as half wins, no position term, 1000 + 400 log10-odds around
    the mean (the maximum-likelihood fit Chatbot Arena's ``compute_mle_elo`` computes by logistic
    regression), shifted so that mixtral-8x7b-instruct-v0.1 is at 1114 when it is present, as Arena does.

    The model's own Elo (``BTFit.elo``) keeps Davidson's ties and the first-slot term, so with ties the
    two scales differ (about x1.33 at 20% ties): this one is for comparing with published Arena ratings.
    """
    fit = fit_bt(battles, ties=False, position=False, weights=weights, se=False)
    elo = 1000.0 + ELO_SCALE * (fit.theta - fit.theta.mean())
    name, value = ARENA_ANCHOR
    if name in battles.systems:
        elo += value - elo[battles.systems.index(name)]
    return elo


def aggregate(battles: Battles, weights: np.ndarray | None = None) -> tuple[Battles, np.ndarray]:
    """Battles with the same slot-A system, slot-B system and outcome, as one row with a count.

    Sufficient for the Bradley-Terry fit and the battle-resampling (naive) bootstrap: a million battles
    among 100 models become at most 100 x 99 x 3 rows.
    """
    collapsed, onto = _collapse(battles)
    w = np.ones(battles.n) if weights is None else np.asarray(weights, float)
    return collapsed, np.bincount(onto, weights=w, minlength=collapsed.n)


def _collapse(battles: Battles) -> tuple[Battles, np.ndarray]:
    """The distinct (slot-A system, slot-B system, outcome) of ``battles``, in key order, and which of them each
    battle is: weights are summed onto them with one bincount (linear, no sort)."""
    m = len(battles.systems)
    y_code = np.rint(battles.outcome * 2).astype(np.int64)  # 0 (B wins), 1 (tie), 2 (A wins)
    key = (battles.a * m + battles.b) * 3 + y_code
    present = np.flatnonzero(np.bincount(key, minlength=m * m * 3))
    position = np.zeros(m * m * 3, dtype=np.int64)
    position[present] = np.arange(present.size)
    a, rest = np.divmod(present, m * 3)
    b, y_code = np.divmod(rest, 3)
    frame = pd.DataFrame({"model_a": np.asarray(battles.systems)[a], "model_b": np.asarray(battles.systems)[b],
                          "battle": np.arange(len(a))})
    return Battles(battles.systems, a, b, y_code / 2.0, frame), position[key]


def _reaches_all(m: int, src: np.ndarray, dst: np.ndarray, *, both_ways: bool, rounds: int = 64) -> bool | None:
    """Whether every system is reached from the first along the edges ``src -> dst`` (``both_ways``: along
    either direction): True or False when the search settles within ``rounds`` frontier steps (an arena's graph
    settles in two or three), None when it has not (a long chain: the caller asks scipy instead)."""
    reached = np.zeros(m, dtype=bool)
    reached[0] = True
    for _ in range(rounds):
        if reached.all():
            return True
        new = dst[reached[src] & ~reached[dst]]
        if both_ways:
            new = np.concatenate([new, src[reached[dst] & ~reached[src]]])
        if not new.size:
            return bool(reached.all())
        reached[new] = True
    return True if reached.all() else None


def comparison_groups(battles: Battles) -> list[list[str]]:
    """The connected parts of the comparison graph: strengths in different parts are not comparable."""
    m = len(battles.systems)
    # the usual case, one connected graph, found by a few vectorised frontier steps; scipy labels the parts
    if m and _reaches_all(m, battles.a, battles.b, both_ways=True):
        return [list(battles.systems)]
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    graph = coo_matrix((np.ones(battles.n), (battles.a, battles.b)), shape=(m, m))
    n, labels = connected_components(graph, directed=False)
    return [[battles.systems[k] for k in np.flatnonzero(labels == g)] for g in range(n)]


def separated_systems(battles: Battles, weights: np.ndarray | None = None) -> list[str]:
    """Systems in a part of the win graph that never lost to (or never beat) the rest.

    The maximum-likelihood Bradley-Terry estimate is finite exactly when the directed graph "i beat j
    at least once" (a tie counts both ways) is strongly connected (Zermelo 1929; Ford 1957); otherwise
    some strengths run off to +-infinity. Returns the systems outside the largest strongly connected part.
    """
    m = len(battles.systems)
    w = np.ones(battles.n) if weights is None else np.asarray(weights, float)
    y, a, b = battles.outcome, battles.a, battles.b
    keep = w > 0
    src = np.concatenate([a[keep & (y >= 0.5)], b[keep & (y <= 0.5)]])
    dst = np.concatenate([b[keep & (y >= 0.5)], a[keep & (y <= 0.5)]])
    # strongly connected exactly when the first system reaches every other and every other reaches it
    if m <= 1 or (_reaches_all(m, src, dst, both_ways=False) and _reaches_all(m, dst, src, both_ways=False)):
        return []
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    graph = coo_matrix((np.ones(src.size), (src, dst)), shape=(m, m))
    n, labels = connected_components(graph, directed=True, connection="strong")
    if n == 1:
        return []
    biggest = np.bincount(labels).argmax()
    return [battles.systems[k] for k in range(m) if labels[k] != biggest]
