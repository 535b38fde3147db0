"""Battles as the pairwise protocol reads them: rows ``model_a, model_b, winner`` coded once (with their item,
judge, variant and order columns), their distinct entries counted (:class:`BattleCounts`, what an engine reduces a
log to), and each system's win indicator per judgment."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..data import as_judgments, require_columns
from ..errors import DataError

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
    from .. import vocabulary

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
