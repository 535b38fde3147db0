"""The judgments coded for a fit: each facet's levels as integer codes (nested facets within their parent), the
observations' cells and the replicates' positions, with the checks that make a design fittable (a grid that fits
in memory, a nesting the labels keep, replicates that are replicates)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..data import Judgments, as_judgments, numeric_scores, require_columns
from ..errors import DesignError
from .types import Design

if TYPE_CHECKING:
    from .balance import BalanceReport


@dataclass(frozen=True)
class CodedData:
    """Judgments coded to integer levels, one axis per facet.

    ``codes[k]`` is the level of facet k within its parent (0..n_k-1), so the
    cells form a dense grid of shape ``shape`` when the design is balanced.
    """

    design: Design
    source: str
    y: np.ndarray
    codes: tuple[np.ndarray, ...]
    shape: tuple[int, ...]
    labels: tuple[tuple[str, ...], ...]  # level labels per facet (global, not within parent)
    cell: np.ndarray  # flat cell index per row
    cell_count: np.ndarray  # observations per cell, length prod(shape)
    #: per nested facet: (parent combination x within-parent level) -> global level, -1 if absent
    nested_levels: tuple[np.ndarray | None, ...]

    @property
    def n_obs(self) -> int:
        return int(self.y.size)

    def is_complete_block(self) -> bool:
        """Every cell has the same number (at least one) of observations: cheap, no report."""
        count = self.cell_count
        nested_full = all(g is None or bool((g >= 0).all()) for g in self.nested_levels)
        return nested_full and count.size > 0 and count.min() > 0 and count.min() == count.max()

    def balance(self) -> BalanceReport:
        from .balance import balance_report  # the report reads the codes; the codes do not need the report

        return balance_report(self)


def code_data(data, design: Design) -> CodedData:
    """Code every facet column to integers and validate what coding can see.

    Raises :class:`DataError`/:class:`DesignError` for non-numeric or missing
    scores, empty facet labels, a facet with one level, broken nesting (a child
    level under two parents), and duplicate observations without a replicate.
    """
    judgments = as_judgments(data)
    require_columns(judgments, list(design.names), what="facet column")
    y = numeric_scores(judgments, design.score)

    codes: list[np.ndarray] = []
    shape: list[int] = []
    labels: list[tuple[str, ...]] = []
    nested: list[np.ndarray | None] = []
    index_of = {name: k for k, name in enumerate(design.names)}
    global_codes: dict[str, np.ndarray] = {}
    for f in design.facets:
        g, uniques = _factorize(judgments, f.name)
        global_codes[f.name] = g
        labels.append(tuple(str(u) for u in uniques))
        if f.parent is None:
            codes.append(g)
            shape.append(len(uniques))
            nested.append(None)
            if len(uniques) < 2:
                _one_level(judgments, f.name, uniques)
            continue
        parent_key, n_parent = _ancestor_key(design, f.name, codes, shape, index_of)
        within, grid, relabel = _nest_within(judgments, design, f.name, g, len(uniques), parent_key, n_parent)
        if relabel is not None:
            labels[-1] = relabel
        codes.append(within)
        shape.append(grid.shape[1])
        nested.append(grid)
        if grid.shape[1] < 2:
            raise DesignError(
                f"{judgments.source}: facet '{f.name}' has one level within each level of '{f.parent}', "
                f"so it is the same facet as '{f.parent}'. Drop it from `facets` or drop the nesting."
            )
    _check_grid(judgments, design, shape, len(y))
    cell = np.ravel_multi_index(tuple(codes), tuple(shape)) if codes else np.zeros(len(y), np.int64)
    n_cells = int(np.prod(shape))
    count = np.bincount(cell, minlength=n_cells)
    _check_replicates(judgments, design, cell, count, n_cells)
    return CodedData(design, judgments.source, y, tuple(codes), tuple(shape), tuple(labels),
                     cell, count, tuple(nested))


#: the design's grid of cells (every combination of levels) is counted densely; past this many cells
#: and this many times the rows, it is refused before anything that size is allocated
MAX_GRID_CELLS = 2 * 10**8
MAX_GRID_PER_ROW = 100


def _check_grid(judgments: Judgments, design: Design, shape: list[int], n_rows: int) -> None:
    """Refuse, with the sizes and what to do, a grid of cells too large to count (before allocating it)."""
    import math

    n_cells = math.prod(shape)  # a Python int: no overflow however many levels
    if n_cells <= MAX_GRID_CELLS or n_cells <= MAX_GRID_PER_ROW * n_rows:
        return
    sizes = " x ".join(f"{f.name} {k:,}" for f, k in zip(design.facets, shape, strict=True))
    raise DesignError(
        f"{judgments.source}: the design's grid ({sizes}) has {n_cells:.3g} cells for {n_rows:,} rows, "
        f"{100 * n_rows / n_cells:.2g}% of them filled; counting it would take {8 * n_cells / 2**30:,.0f} GiB, "
        "and so sparse a design cannot estimate the interactions of these facets. Nest a facet in another "
        "(`nest`, e.g. item/judge when each item has its own judges), drop a facet (`facets`), or keep "
        "fewer levels of a facet.")


def _factorize(judgments: Judgments, column: str) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes for a column, levels in sorted order (hash first, then sort the few uniques)."""
    codes, uniques = pd.factorize(judgments.frame[column])
    codes = np.asarray(codes, dtype=np.int64)
    uniques = np.asarray(uniques)
    try:
        order = np.argsort(uniques, kind="stable")
    except TypeError:  # mixed types: keep first-seen order
        order = np.arange(len(uniques))
    if not np.array_equal(order, np.arange(len(uniques))):
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order))
        codes = np.where(codes >= 0, rank[codes], codes)
        uniques = uniques[order]
    if (codes < 0).any():
        rows = np.flatnonzero(codes < 0)
        raise DesignError(
            f"{judgments.source}: facet column '{column}' is empty on {rows.size} row(s): {judgments.rows(rows)}. "
            "Every judgment needs a level of every facet; fill these in or remove the rows."
        )
    return codes, uniques


def _one_level(judgments: Judgments, name: str, uniques) -> None:
    raise one_level_error(judgments.source, name, uniques[0] if len(uniques) else "(none)")


def one_level_error(source: str, name: str, level) -> DesignError:
    """A facet of the design with one level: its variance cannot be estimated (the rows' and the cells' refusal)."""
    return DesignError(
        f"{source}: facet '{name}' has one level ('{level}'), so its variance cannot be estimated. "
        f"Drop it from `facets` (its level is then part of the fixed conditions of the study)."
    )


def _ancestor_key(design: Design, name: str, codes, shape, index_of) -> tuple[np.ndarray, int]:
    """A flat code for the combination of a facet's ancestors' levels."""
    ancestors = design.ancestors(name)[::-1]  # outermost first
    idx = [index_of[a] for a in ancestors]
    dims = tuple(shape[i] for i in idx)
    key = np.ravel_multi_index(tuple(codes[i] for i in idx), dims)
    return key, int(np.prod(dims))


def _nest_within(judgments: Judgments, design: Design, name: str, g: np.ndarray, n_levels: int,
                 parent_key: np.ndarray, n_parent: int) -> tuple[np.ndarray, np.ndarray, tuple | None]:
    """Recode a nested facet's levels to levels within its parent.

    Returns the within-parent codes, the (parent x within) -> level grid, and
    new level labels 'parent/child' when labels restart within each parent.
    A child level seen under two parent levels otherwise breaks nesting and is
    reported with the rows that show it.
    """
    relabel = None
    owner = np.full(n_levels, -1, dtype=np.int64)
    first_rows = np.flatnonzero(~pd.Series(g).duplicated().to_numpy())
    owner[g[first_rows]] = parent_key[first_rows]  # the first parent seen wins; the rest are checked
    broken = owner[g] != parent_key
    if broken.any() and _labels_restart(g, parent_key, n_levels, n_parent):
        # Labels restart within each parent (item 1, 2, ... under every
        # category), as lme4 reads category/item: the child is the pair.
        pair, _ = pd.factorize(parent_key * n_levels + g, sort=True)
        pair = np.asarray(pair, dtype=np.int64)
        n_pairs = int(pair.max()) + 1
        owner = np.full(n_pairs, -1, dtype=np.int64)
        owner[pair] = parent_key
        g, n_levels, broken = pair, n_pairs, np.zeros(len(g), dtype=bool)
        first = np.empty(n_pairs, dtype=np.int64)
        first[pair[::-1]] = np.arange(len(pair))[::-1]
        parent = design.facet(name).parent
        at = judgments.frame.iloc[first]
        relabel = tuple(f"{a}/{b}" for a, b in zip(at[parent].astype(str), at[name].astype(str), strict=True))
    if broken.any():
        rows = np.flatnonzero(broken)
        r0 = rows[0]
        parent = design.facet(name).parent
        frame = judgments.frame
        level = frame[name].iloc[r0]
        first = np.flatnonzero((g == g[r0]) & ~broken)[0]
        raise DesignError(
            f"{judgments.source}: '{name}' is nested in '{parent}', but {name} '{level}' appears under "
            f"{parent} '{frame[parent].iloc[first]}' (row {first + 1}) and '{frame[parent].iloc[r0]}' "
            f"(row {r0 + 1}); {rows.size} row(s) disagree with the first parent seen. Give each {name} one "
            f"{parent} (if {name} labels restart within each {parent}, make them unique, e.g. "
            f"'{parent}1-{name}3'), or drop the nesting (`nest`=none)."
        )
    # Rank each child among the children of its parent, in label order.
    order = np.lexsort((np.arange(n_levels), owner))
    owner_sorted = owner[order]
    starts = np.r_[0, np.flatnonzero(np.diff(owner_sorted)) + 1]
    run_start = np.repeat(starts, np.diff(np.r_[starts, owner_sorted.size]))
    rank = np.empty(n_levels, dtype=np.int64)
    rank[order] = np.arange(n_levels) - run_start
    seen = owner >= 0
    grid = np.full((n_parent, int(rank[seen].max()) + 1), -1, dtype=np.int64)
    grid[owner[seen], rank[seen]] = np.flatnonzero(seen)
    return rank[g], grid, relabel


def _labels_restart(g: np.ndarray, parent_key: np.ndarray, n_levels: int, n_parent: int) -> bool:
    """Whether child labels are relative to their parent rather than one stray duplicate.

    Relative labelling (Brennan's i:p data, lme4's category/item) reuses labels
    under every parent: each parent shares a label with another parent and at
    least half of the labels occur under several parents. A unique-id column
    with an item filed under two categories does neither.
    """
    pairs = pd.unique(parent_key * n_levels + g)
    child, parent = pairs % n_levels, pairs // n_levels
    parents_per_label = np.bincount(child, minlength=n_levels)
    shared_label = parents_per_label[child] > 1
    parents_sharing = np.unique(parent[shared_label])
    used = parents_per_label > 0
    return (parents_sharing.size == np.unique(parent).size
            and (parents_per_label[used] > 1).mean() >= 0.5)


def _columns_differing(judgments: Judgments, design: Design, rows: np.ndarray) -> list[str]:
    """Columns outside the design whose values differ between rows of one cell (a left-out facet)."""
    frame = judgments.frame
    skip = {*design.names, design.score, design.replicate}
    out = []
    for col in frame.columns:
        if col in skip:
            continue
        if frame[col].iloc[rows].nunique(dropna=False) > 1:
            out.append(str(col))
    return out[:3]


def _check_replicates(judgments: Judgments, design: Design, cell: np.ndarray, count: np.ndarray,
                      n_cells: int) -> None:
    if design.replicate is None:
        dup = count[cell] > 1
        if dup.any():
            rows = np.flatnonzero(dup)
            first = rows[cell[rows] == cell[rows[0]]]
            differs = _columns_differing(judgments, design, first)
            hint = (f" They differ in {', '.join(repr(c) for c in differs)}: a facet the design left out? Add it "
                    "to `facets`." if differs else "")
            raise DesignError(
                f"{judgments.source}: {rows.size} rows share their facet levels with another row (for example "
                f"{judgments.rows(first)} are the same cell of {', '.join(design.names)}), and there is no "
                f"replicate column.{hint} If these are repeated calls, name the column that numbers them with "
                "`replicate` COL (or `replicate`=auto to number them in file order); if a facet is missing, "
                "add it to `facets`; if they are accidental duplicates, remove them."
            )
        return
    if design.replicate == "auto":
        return
    rep = _replicate_codes(judgments, design.replicate)
    n_rep = int(rep.max()) + 1
    if n_cells * n_rep <= 50_000_000:
        key = cell * n_rep + rep
        seen = np.bincount(key, minlength=n_cells * n_rep)
        if seen.max() <= 1:  # the common case: no per-row work
            return
        dup = seen[key] > 1
    else:  # pragma: no cover - huge grids: hash instead of a dense table
        dup = pd.Series(cell * n_rep + rep).duplicated(keep=False).to_numpy()
    if dup.any():
        rows = np.flatnonzero(dup)
        raise DesignError(
            f"{judgments.source}: {rows.size} rows repeat both the facet levels and the replicate "
            f"'{design.replicate}' of another row ({judgments.rows(rows)}). Each replicate of a cell must be "
            "one row: remove the duplicates, or check that no facet column is missing from `facets`."
        )


def _replicate_codes(judgments: Judgments, column: str) -> np.ndarray:
    """Codes of the replicate column; small non-negative integers are used as they are."""
    values = judgments.frame[column]
    if pd.api.types.is_integer_dtype(values.dtype) and not values.isna().any():
        v = values.to_numpy(dtype=np.int64)
        low = int(v.min())
        if int(v.max()) - low < 1_000_000:
            return v - low
    return _factorize(judgments, column)[0]


# ---------------------------------------------------------------------------
# Balance
# ---------------------------------------------------------------------------


def balance_of_cells(cells: pd.DataFrame, design: Design, n: str = "n") -> BalanceReport:
    """The balance report of per-cell counts (one row per observed combination of the facets with its number of
    judgments ``n``, as an engine reduces them): the same report as the rows' (:func:`balance_report`)."""
    from .balance import balance_report

    coded = code_data(cells.assign(**{design.score: 0.0}), replace(design, replicate=None))
    count = np.bincount(coded.cell, weights=cells[n].to_numpy(dtype=float), minlength=coded.cell_count.size)
    report = balance_report(replace(coded, cell_count=count.astype(np.int64)))
    return replace(report, n_obs=int(cells[n].sum()))
