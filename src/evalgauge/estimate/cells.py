"""Mixed models at the cell level: observations enter only through each cell's count, mean and
within-cell sum of squares (every random term is constant within a cell), shared by REML and the GLMM.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..data import Judgments, numeric_scores, require_columns
from ..errors import DesignError
from .model import MixedModel, Term

# ---------------------------------------------------------------------------
# Data at the cell level
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class CellData:
    """Cell sufficient statistics: one cell per observed combination of the model's columns."""

    n_obs: int
    count: np.ndarray  # n_c
    mean: np.ndarray  # cell mean of y
    ss_within: float  # sum over cells of squared deviations from the cell mean
    codes: dict[str, np.ndarray]  # per column: level code of each cell
    labels: dict[str, np.ndarray]  # per column: level labels
    notes: tuple[str, ...] = ()

    @property
    def n_cells(self) -> int:
        return int(self.count.size)


def cell_data(judgments: Judgments, model: MixedModel) -> CellData:
    """Collapse observations to cells of the model's columns (vectorised, no row loops)."""
    frame = judgments.frame
    columns = list(model.columns)
    require_columns(judgments, [*columns, model.response])
    y = numeric_scores(judgments, model.response)
    codes, labels = [], {}
    for col in columns:
        c, u = pd.factorize(frame[col], sort=True)
        if (c < 0).any():
            rows = np.flatnonzero(c < 0)
            raise DesignError(
                f"{judgments.source}: column '{col}' is empty on {rows.size} row(s): {judgments.rows(rows)}. "
                "Fill these in or remove the rows."
            )
        codes.append(np.asarray(c, dtype=np.int64))
        labels[col] = np.asarray(u)
    dims = tuple(len(labels[c]) for c in columns)
    if math.prod(dims) < 2**62:
        key = np.ravel_multi_index(tuple(codes), dims)
    else:  # pragma: no cover - astronomically many combinations
        key = pd.MultiIndex.from_arrays(codes).codes[0]
    cell, _uniq = pd.factorize(key, sort=True)
    cell = np.asarray(cell, dtype=np.int64)
    count = np.bincount(cell).astype(np.float64)
    mean = np.bincount(cell, weights=y) / count
    dev = y - mean[cell]
    first = np.empty(count.size, dtype=np.int64)
    first[cell[::-1]] = np.arange(cell.size)[::-1]
    # int32 where they fit: the cells' codes are kept through the whole fit
    cell_codes = {col: codes[k][first].astype(np.int32 if dims[k] < 2**31 else np.int64)
                  for k, col in enumerate(columns)}
    return CellData(int(y.size), count, mean, float(dev @ dev), cell_codes, labels)


def term_levels(cells: CellData, term: Term) -> tuple[np.ndarray, int]:
    """Level index (0..q-1) of a term at each cell: observed combinations only, as lme4."""
    if len(term.columns) == 1:
        c, u = pd.factorize(cells.codes[term.columns[0]], sort=True)
    else:
        dims = tuple(len(cells.labels[col]) for col in term.columns)
        key = np.ravel_multi_index(tuple(cells.codes[col] for col in term.columns), dims)
        c, u = pd.factorize(key, sort=True)
    # int32 where it fits: one code per cell and term is kept through the whole fit
    return np.asarray(c, dtype=np.int32 if len(u) < 2**31 else np.int64), len(u)


def fixed_matrix(cells: CellData, model: MixedModel) -> tuple[np.ndarray, list[str], list[str]]:
    """Treatment-coded X at the cell level (R's contr.treatment), full column rank.

    Columns that are linear combinations of earlier ones (empty combinations in
    unbalanced data) are dropped, as lme4 does, and returned by name.
    """
    cols = [np.ones(cells.n_cells)] if model.intercept else []
    names = ["(Intercept)"] if model.intercept else []
    for term in model.fixed:
        parts = []
        for col in term.columns:
            code = cells.codes[col]
            lab = cells.labels[col]
            start = 1 if (model.intercept or term is not model.fixed[0]) else 0
            parts.append([(f"{col}{lab[j]}", (code == j).astype(float)) for j in range(start, len(lab))])
        combos = [("", np.ones(cells.n_cells))]
        for part in parts:
            combos = [(f"{a}:{b}" if a else b, va * vb) for a, va in combos for b, vb in part]
        for name, v in combos:
            names.append(name)
            cols.append(v)
    x = np.column_stack(cols) if cols else np.zeros((cells.n_cells, 0))
    keep, dropped = _independent_columns(x * np.sqrt(cells.count)[:, None])
    return x[:, keep], [names[j] for j in keep], [names[j] for j in dropped]


def _independent_columns(x: np.ndarray, tol: float = 1e-7) -> tuple[list[int], list[int]]:
    """Greedy left-to-right rank check: keep a column unless earlier kept ones span it."""
    keep, dropped = [], []
    q = np.zeros((x.shape[0], 0))
    for j in range(x.shape[1]):
        v = x[:, j] - q @ (q.T @ x[:, j])
        norm = np.linalg.norm(v)
        if norm > tol * max(1.0, np.linalg.norm(x[:, j])):
            keep.append(j)
            q = np.column_stack([q, v / norm])
        else:
            dropped.append(j)
    return keep, dropped


def total_levels(cells: CellData, column: str, nesting: dict[str, str]) -> int:
    """Distinct levels of a column in all; a nested column's labels may restart within its parent."""
    chain = [column]
    while chain[-1] in nesting:
        chain.append(nesting[chain[-1]])
    return term_levels(cells, Term(tuple(reversed(chain))))[1]



def random_structure(cells: CellData, model: MixedModel, notes: list[str]):
    """The identifiable random terms: their level codes, sizes, the cell term, and what was dropped.

    Leaves out, with a note, a term with one level, a term with exactly the
    levels of an earlier one, and the cell term when there is one observation
    per cell (it is then the residual).
    """
    terms, levels, sizes = [], [], []
    for term in model.random:
        lv, q = term_levels(cells, term)
        if q < 2:
            notes.append(f"{term.name}: one level in the data, so its variance is not identifiable; left out.")
            continue
        twin = next((t for t, other, q2 in zip(terms, levels, sizes, strict=True) if q2 == q
                     and _same_partition(lv, other, q)), None)
        if twin is not None:
            notes.append(f"{term.name} has exactly the levels of {twin.name} in these data (for example an item "
                         f"id unique across categories), so the two are one term; {term.name} was left out.")
            continue
        terms.append(term)
        levels.append(lv)
        sizes.append(q)
    cell_term = next((k for k, q in enumerate(sizes) if q == cells.n_cells), None)
    confounded = None
    if cell_term is not None and cells.count.max() <= 1:
        notes.append(f"one observation per cell: the {terms[cell_term].name} term and the residual are "
                     "confounded and reported together as 'residual'; add replicates to separate them.")
        confounded = terms[cell_term].name
        del terms[cell_term], levels[cell_term], sizes[cell_term]
        cell_term = None
    if not terms:
        raise DesignError("nothing to estimate: the model has no identifiable random term besides the residual.")
    return terms, levels, sizes, cell_term, confounded


def _same_partition(a: np.ndarray, b: np.ndarray, q: int) -> bool:
    """Whether two level codings split the cells identically."""
    owner = np.full(q, -1, dtype=np.int64)
    owner[a] = b
    return bool(np.all(owner[a] == b)) and np.unique(owner).size == q


def grouping_candidates(cells: CellData, terms) -> list[np.ndarray]:
    """Each facet of the random terms coded per cell: the columns the block-arrow factorisation may group
    by (terms nested in the chosen one become local blocks; the others form the dense Schur part)."""
    group_of = []
    for col in dict.fromkeys(c for t in terms for c in t.columns):
        code, _ = pd.factorize(cells.codes[col])
        group_of.append(np.asarray(code, dtype=np.int64))
    return group_of


def cells_from_sums(frame: pd.DataFrame, columns: list[str], n: str = "n", total: str = "sum",
                    squares: str = "sum_squares") -> CellData:
    """Cell statistics from per-group sums, as an engine over files reduces them (one row per combination of at
    least ``columns``, with its judgment count, sum and sum of squares): grouped again by ``columns``, then
    count, mean and the within-cell sum of squares sum(y^2) - (sum y)^2 / n, exactly what :func:`cell_data`
    computes from the rows (up to rounding: the difference of two sums loses digits when a cell's spread is
    tiny against its mean)."""
    grouped = frame.groupby(columns, sort=True, observed=True)[[n, total, squares]].sum().reset_index()
    count = grouped[n].to_numpy(dtype=np.float64)
    sums = grouped[total].to_numpy(dtype=np.float64)
    within = np.clip(grouped[squares].to_numpy(dtype=np.float64) - sums**2 / count, 0.0, None)
    codes, labels = {}, {}
    for col in columns:
        c, u = pd.factorize(grouped[col], sort=True)
        if (c < 0).any():
            raise DesignError(f"column '{col}' is empty in {int((c < 0).sum())} cell(s): fill it in or remove them.")
        codes[col], labels[col] = np.asarray(c, dtype=np.int64), np.asarray(u)
    return CellData(int(count.sum()), count, sums / count, float(within.sum()), codes, labels)
