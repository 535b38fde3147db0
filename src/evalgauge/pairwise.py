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

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .data import as_judgments, require_columns
from .errors import DataError, DesignError

WINNER_A = ("model_a", "a", "A")
WINNER_B = ("model_b", "b", "B")
TIES = ("tie", "tie (bothbad)", "draw", "C")
ELO_SCALE = 400.0 / math.log(10.0)


@dataclass(frozen=True)
class Battles:
    """Pairwise judgments coded: slot-A and slot-B system indices and the outcome for A (1, 0, 0.5)."""

    systems: tuple[str, ...]
    a: np.ndarray
    b: np.ndarray
    outcome: np.ndarray
    frame: pd.DataFrame  # the rows, with a 'battle' id and the optional facet columns

    @property
    def n(self) -> int:
        return int(self.outcome.size)


def item_column(columns) -> str | None:
    """The column that names a pairwise log's items: ``item``, else one of the item names of other tools
    (Chatbot Arena's ``question_id``, lm-eval's ``doc_id``, ``instruction_id``). Without it every battle is
    its own item and no item resampling is possible."""
    from . import vocabulary

    columns = list(columns)
    if "item" in columns:
        return "item"
    return next((c for c in vocabulary.ITEM_NAMES if c in columns), None)


def code_battles(data, *, winner: str = "winner") -> Battles:
    """Code model_a / model_b / winner rows (a judgments table or data frame) as integer battles; the items are
    in :func:`item_column` (renamed ``item``)."""
    judgments = as_judgments(data)
    require_columns(judgments, ["model_a", "model_b", winner])
    frame = judgments.frame.copy()
    named = item_column(frame.columns)
    if named not in (None, "item"):
        frame = frame.rename(columns={named: "item"})
    # code each column once: the checks run on the distinct values (a few hundred), not on every row
    coded = {}
    for col in ("model_a", "model_b", winner):
        codes, uniq = pd.factorize(frame[col], use_na_sentinel=True)
        labels = np.array([str(u).strip() for u in uniq], dtype=object)
        empty = np.flatnonzero((codes < 0) | np.isin(codes, np.flatnonzero(labels == "")))
        if empty.size:
            raise DataError(f"{judgments.source}: column '{col}' is empty on {empty.size} row(s): "
                            f"{judgments.rows(empty)}. Every battle needs both systems and a verdict; fill these in "
                            "or remove the rows.")
        coded[col] = (codes, labels)
    systems = tuple(sorted(set(coded["model_a"][1]) | set(coded["model_b"][1])))
    index = {s: k for k, s in enumerate(systems)}
    a = np.array([index[v] for v in coded["model_a"][1]], dtype=np.int64)[coded["model_a"][0]]
    b = np.array([index[v] for v in coded["model_b"][1]], dtype=np.int64)[coded["model_b"][0]]
    w_codes, w_labels = coded[winner]
    value, named = winner_codes(w_labels, index)
    outcome = value[w_codes]
    win_sys = named[w_codes]
    outcome[(win_sys >= 0) & (win_sys == a)] = 1.0
    outcome[(win_sys >= 0) & (win_sys == b)] = 0.0
    bad = np.flatnonzero(np.isnan(outcome))
    if bad.size:
        raise DataError(f"{judgments.source}: column '{winner}' must be model_a, model_b or tie (or a system's "
                        f"name); row {bad[0] + 1} has {w_labels[w_codes[bad[0]]]!r} ({bad.size} such rows).")
    same = np.flatnonzero(a == b)
    if same.size:
        raise DataError(f"{judgments.source}: row {same[0] + 1} compares {systems[a[same[0]]]!r} with "
                        "itself; remove self-comparisons.")
    pair = pd.DataFrame({"lo": np.minimum(a, b), "hi": np.maximum(a, b)})
    key_cols = [pair["lo"], pair["hi"]] + ([frame["item"].astype(str)] if "item" in frame else [])
    frame["battle"] = pd.MultiIndex.from_arrays(key_cols).factorize()[0] if "item" in frame else np.arange(len(frame))
    return Battles(systems, a, b, outcome, frame)


def winner_codes(labels: np.ndarray, index: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """Each distinct verdict's outcome for slot A (1, 0, 0.5; NaN when it is none of them) and, for a verdict
    naming a system, that system's index (-1 otherwise): the one rule for rows and for an engine's counts."""
    ties = {t.lower() for t in TIES}
    value = np.array([1.0 if v in WINNER_A else 0.0 if v in WINNER_B else 0.5 if v.lower() in ties else np.nan
                      for v in labels], dtype=float)
    named = np.array([index.get(v, -1) for v in labels], dtype=np.int64)
    return value, named


@dataclass(frozen=True)
class BattleCounts:
    """Pairwise judgments reduced to what the Bradley-Terry fit and both bootstraps need: one entry per distinct
    (battle, slot-A system, slot-B system, outcome, weight) with its number of judgments.

    A battle is a pair of systems on one item (every judgment its own battle when there is no item column); the
    judgments within a battle (its judge x variant x order cells) that share a slot and an outcome are
    exchangeable, so resampling them (TEE R.1) needs only their count. ``entries`` holds the distinct rows as
    :class:`Battles` (their frame has the ``battle`` id), ``rows`` the judgments per entry, ``weight`` each
    judgment's weight (arena-hard's 3 for a ``>>`` verdict; 1 without a ``weight`` column). Built from rows by
    :func:`count_battles` or from a file's rows by an engine (:func:`battle_counts`); both give the same entries
    in the same order, so the fit and the seeded bootstraps agree exactly.
    """

    entries: Battles
    rows: np.ndarray
    weight: np.ndarray
    battles_are_rows: bool  # no item column: every judgment is its own battle
    presentation_order: bool = False  # an order/position column says slot A is the order shown
    weighted: bool = False  # a weight column was given
    #: an engine's distinct judgments (model_a, model_b, outcome, rows, and item, judge, variant where present):
    #: the win indicators' cell statistics come from them (analysis.pairwise.win_indicator_cells)
    judgments_counted: pd.DataFrame | None = field(default=None, repr=False)

    @property
    def systems(self) -> tuple[str, ...]:
        return self.entries.systems

    @property
    def judgments(self) -> int:
        return int(self.rows.sum())

    @property
    def weights(self) -> np.ndarray:
        """Each entry's weight in the likelihood: its judgments times their weight."""
        return self.rows * self.weight


def battle_counts(frame: pd.DataFrame, *, presentation_order: bool = False, keep: bool = False) -> BattleCounts:
    """Entries from a table of distinct judgments: ``model_a``, ``model_b``, ``outcome`` (1, 0, 0.5 for slot A),
    optionally ``item`` (the battle is the pair on it) and ``weight``, and ``rows`` (judgments per row); other
    columns (judge, variant) are summed over. Sorted canonically (pair, item, slot, outcome, weight, by the
    labels' sorted order), so any reduction of the same judgments gives the same entries. ``keep`` keeps the
    table as ``judgments_counted``."""
    weighted = "weight" in frame
    a_codes, a_names = pd.factorize(frame["model_a"].astype(str), sort=True)
    b_codes, b_names = pd.factorize(frame["model_b"].astype(str), sort=True)
    systems = tuple(sorted(set(a_names) | set(b_names)))
    a = np.searchsorted(systems, np.asarray(a_names, dtype=object))[a_codes].astype(np.int64)
    b = np.searchsorted(systems, np.asarray(b_names, dtype=object))[b_codes].astype(np.int64)
    items = _item_codes(frame["item"]) if "item" in frame else None
    return _counts(systems, a, b, frame["outcome"].to_numpy(float),
                   frame["weight"].to_numpy(float) if weighted else None, frame["rows"].to_numpy(np.int64), items,
                   presentation_order=presentation_order, judgments_counted=frame if keep else None)


def _item_codes(item: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Each row's code into the sorted item labels; a missing item is one label, "", however the rows or the
    engine spelt it."""
    codes, labels = pd.factorize(item.where(item.notna(), "").astype(str), sort=True)
    return codes, np.asarray(labels, dtype=object)


def _counts(systems: tuple[str, ...], a: np.ndarray, b: np.ndarray, outcome: np.ndarray, weight: np.ndarray | None,
            rows: np.ndarray, items: tuple[np.ndarray, np.ndarray] | None, *, presentation_order: bool,
            judgments_counted: pd.DataFrame | None = None) -> BattleCounts:
    """:class:`BattleCounts` from integer codes (``systems`` sorted; ``items``: codes into sorted labels)."""
    weighted = weight is not None
    weight = weight if weighted else np.ones(len(a))
    item_codes, item_labels = items if items is not None else (np.zeros(len(a), dtype=np.int64),
                                                               np.array([""], dtype=object))
    lo, hi, item_codes, a, outcome, weight, rows = _distinct_entries(
        np.minimum(a, b), np.maximum(a, b), item_codes, len(item_labels), a, outcome, weight, rows, len(systems))
    b = lo + hi - a
    if items is not None:
        battle_start = np.ones(len(a), dtype=bool)
        battle_start[1:] = (lo[1:] != lo[:-1]) | (hi[1:] != hi[:-1]) | (item_codes[1:] != item_codes[:-1])
        battle = np.cumsum(battle_start) - 1
    else:
        battle = np.arange(len(a))
    names = np.asarray(systems, dtype=object)
    out = pd.DataFrame({"model_a": names[a], "model_b": names[b], "battle": battle})
    if items is not None:
        out["item"] = item_labels[item_codes]
    entries = Battles(systems, a, b, outcome, out)
    return BattleCounts(entries, rows.astype(np.int64), weight, battles_are_rows=items is None,
                        presentation_order=presentation_order, weighted=weighted,
                        judgments_counted=judgments_counted)


#: the largest composite key of an entry (:func:`_distinct_entries`); beyond it the keys are sorted as columns
_KEY_LIMIT = 2**62


def _distinct_entries(lo, hi, item, n_items, a, outcome, weight, rows, m):
    """The distinct (pair, item, slot, outcome, weight) entries in sorted order, with their ``rows`` summed (the
    same entry given twice: pieces of a reduction). Integer keys only, so no string is compared row by row: one
    int64 per row whose order is the tuple's, counted by a bincount when its range is small (a log without
    items: pairs x slot x outcome x weight), sorted otherwise; as columns (lexsort) if it would overflow."""
    o_values, o_codes = _value_codes(outcome)
    w_values, w_codes = _value_codes(weight)
    radix = (m, m, max(n_items, 1), 2, len(o_values), len(w_values))
    if math.prod(radix) >= _KEY_LIMIT:
        keys = [lo, hi, item, a, outcome, weight]
        order = np.lexsort(keys[::-1])
        keys = [k[order] for k in keys]
        new = np.ones(len(rows), dtype=bool)
        new[1:] = np.any([k[1:] != k[:-1] for k in keys], axis=0) if len(rows) > 1 else new[1:]
        starts = np.flatnonzero(new)
        summed = np.add.reduceat(rows[order], starts) if len(rows) else rows
        return (*(k[starts] for k in keys), summed)
    key = lo.astype(np.int64)
    for digit, size in zip((hi, item, (a == hi).astype(np.int64), o_codes, w_codes), radix[1:], strict=True):
        key = key * size + digit
    if math.prod(radix) <= 8 * len(key) + 65536:
        totals = np.bincount(key, weights=rows, minlength=math.prod(radix))
        present = np.bincount(key, minlength=math.prod(radix)) > 0
        key = np.flatnonzero(present)
        summed = np.rint(totals[key]).astype(np.int64)
    else:
        order = np.argsort(key, kind="stable")
        key = key[order]
        starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if len(key) else np.zeros(0, dtype=np.int64)
        summed = np.add.reduceat(rows[order], starts) if len(key) else rows[order]
        key = key[starts]
    digits = []
    for size in radix[:0:-1]:
        key, digit = np.divmod(key, size)
        digits.append(digit)
    w_code, o_code, slot_hi, item, hi = digits
    lo = key
    return lo, hi, item, np.where(slot_hi == 1, hi, lo), o_values[o_code], w_values[w_code], summed


def _value_codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sorted distinct values and each row's code into them (the outcomes 0, 0.5, 1 without a sort)."""
    doubled = values * 2.0
    if len(values) and doubled.min() >= 0 and doubled.max() <= 2 and np.array_equal(doubled, np.rint(doubled)):
        codes = doubled.astype(np.int64)
        return np.array([0.0, 0.5, 1.0]), codes
    distinct, codes = np.unique(values, return_inverse=True)
    return distinct, codes.reshape(-1).astype(np.int64)


def count_battles(battles: Battles, weights: np.ndarray | None = None) -> BattleCounts:
    """The rows' :class:`BattleCounts` (``weights``: each judgment's weight, as arena-hard's); from the rows'
    codes, the same entries as :func:`battle_counts` on their labels."""
    f = battles.frame
    return _counts(battles.systems, battles.a, battles.b, battles.outcome,
                   None if weights is None else np.asarray(weights, float), np.ones(battles.n, dtype=np.int64),
                   _item_codes(f["item"]) if "item" in f else None,
                   presentation_order=any(c in f for c in ("order", "position")))


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
    import pandas as pd
    from scipy import stats

    from .compare import Comparison
    from .multiplicity import holm, letters, max_t_quantile, rank_sets

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


def system_win_rows(battles: Battles, baseline: str | None = None) -> pd.DataFrame:
    """Long rows for the variance decomposition: one per judgment and non-baseline system.

    ``score`` is that system's win indicator (ties 0.5) and ``position`` the
    slot it was shown in (A or B); against a fixed baseline each judgment
    gives one row, otherwise one per system in it. Facet columns present in
    the data (item, judge, variant, replicate) are carried over.
    """
    f = battles.frame
    rows = []
    for slot, idx, sign in (("A", battles.a, 1.0), ("B", battles.b, -1.0)):
        part = pd.DataFrame({"system": np.asarray(battles.systems)[idx], "position": slot,
                             "score": battles.outcome if sign > 0 else 1.0 - battles.outcome})
        for col in ("item", "judge", "variant", "replicate"):
            if col in f:
                part[col] = f[col].to_numpy()
        rows.append(part)
    out = pd.concat(rows, ignore_index=True)
    if baseline:
        out = out[out["system"] != baseline]
    return out.reset_index(drop=True)


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
