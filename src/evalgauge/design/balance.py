"""The balance report: how far the judgments are from a complete crossed design (empty cells, unequal replicates),
which decides between the closed-form ANOVA and REML."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from .coding import CodedData


@dataclass(frozen=True)
class BalanceReport:
    """Whether the data form a complete balanced block, and where they do not.

    ``missing_by_facet`` maps each facet to ``{level: missing cells}`` for the
    levels with missing cells (worst first); ``replicates`` maps a replicate
    count to how many cells have it.
    """

    balanced: bool
    n_obs: int
    n_cells: int
    n_cells_observed: int
    replicates: dict[int, int]
    levels: dict[str, int]
    missing_by_facet: dict[str, dict[str, int]]
    unequal_nesting: dict[str, dict[int, int]]
    example_missing: tuple[dict[str, str], ...]

    @property
    def n_cells_missing(self) -> int:
        return self.n_cells - self.n_cells_observed

    def summary(self) -> str:
        """A plain-text paragraph for messages and the CLI."""
        if self.balanced:
            reps = next(iter(self.replicates))
            return (f"complete balanced block: {self.n_cells} cells "
                    f"({' x '.join(f'{n} {k}' for k, n in self.levels.items())}) x {reps} replicate(s).")
        lines = [f"not a complete balanced block: {self.n_cells_missing} of {self.n_cells} cells have no "
                 f"observation."]
        if len(self.replicates) > 1:
            dist = ", ".join(f"{n} cell(s) with {r}" for r, n in sorted(self.replicates.items()))
            lines.append(f"Observations per observed cell differ: {dist}.")
        for facet, per in self.unequal_nesting.items():
            dist = ", ".join(f"{n} parent level(s) with {k}" for k, n in sorted(per.items()))
            lines.append(f"'{facet}' has unequal numbers of levels per parent: {dist}.")
        for facet, per in self.missing_by_facet.items():
            worst = list(per.items())[:5]
            more = f" and {len(per) - 5} more" if len(per) > 5 else ""
            lines.append(f"Missing cells by {facet}: " + ", ".join(f"'{k}' {v}" for k, v in worst) + more + ".")
        if self.example_missing:
            ex = "; ".join(", ".join(f"{k}={v}" for k, v in cell.items()) for cell in self.example_missing)
            lines.append(f"For example: {ex}.")
        return " ".join(lines)


def balance_report(coded: CodedData) -> BalanceReport:
    """Describe how far the coded data are from a complete crossed block."""
    design = coded.design
    count = coded.cell_count
    grid = count.reshape(coded.shape)
    valid = _valid_cells(coded)
    observed = count[valid.ravel()] > 0
    per_cell = np.bincount(count[valid.ravel()][observed])
    reps = {int(k): int(v) for k, v in enumerate(per_cell) if v > 0}
    unequal = {}
    for f, grid_k in zip(design.facets, coded.nested_levels, strict=True):
        if grid_k is not None:
            per = (grid_k >= 0).sum(axis=1)
            vals = per[per > 0]
            if vals.size and vals.min() != vals.max():
                unequal[f.name] = {int(k): int(v) for k, v in pd.Series(vals).value_counts().items()}
    missing = (grid == 0) & valid
    by_facet: dict[str, dict[str, int]] = {}
    examples: list[dict[str, str]] = []
    if missing.any():
        cells = np.argwhere(missing)
        level_idx = [_level_index(coded, k, cells) for k in range(len(design.facets))]
        for k, f in enumerate(design.facets):
            tally = np.bincount(level_idx[k], minlength=len(coded.labels[k]))
            worst = np.lexsort((np.arange(tally.size), -tally))
            by_facet[f.name] = {coded.labels[k][i]: int(tally[i]) for i in worst if tally[i] > 0}
        for j in range(min(3, len(cells))):
            examples.append({f.name: coded.labels[k][level_idx[k][j]] for k, f in enumerate(design.facets)})
    n_cells = int(valid.sum())
    n_obs_cells = int(observed.sum())
    balanced = (n_obs_cells == n_cells and len(reps) == 1 and not unequal
                and bool(valid.all()))
    return BalanceReport(
        balanced=balanced,
        n_obs=coded.n_obs,
        n_cells=n_cells,
        n_cells_observed=n_obs_cells,
        replicates=reps,
        levels={f.name: len(lab) for f, lab in zip(design.facets, coded.labels, strict=True)},
        missing_by_facet=by_facet,
        unequal_nesting=unequal,
        example_missing=tuple(examples),
    )


def _valid_cells(coded: CodedData) -> np.ndarray:
    """Grid cells that exist: a nested child index beyond its parent's count does not."""
    valid = np.ones(coded.shape, dtype=bool)
    design = coded.design
    ndim = len(coded.shape)
    for k, (f, grid) in enumerate(zip(design.facets, coded.nested_levels, strict=True)):
        if grid is None:
            continue
        # Ancestors precede their children in design order, so outermost-first
        # ancestor axes are ascending and the parent key ravels in that order.
        anc = sorted(design.names.index(a) for a in design.ancestors(f.name))
        exists = (grid >= 0).reshape([coded.shape[i] for i in anc] + [coded.shape[k]])
        shape = [coded.shape[i] if i in anc or i == k else 1 for i in range(ndim)]
        valid &= exists.reshape(shape)
    return valid


def _level_index(coded: CodedData, k: int, cells: np.ndarray) -> np.ndarray:
    """Global level index of facet k at each grid cell (rows of ``cells``)."""
    design = coded.design
    grid = coded.nested_levels[k]
    if grid is None:
        return cells[:, k]
    anc = sorted(design.names.index(a) for a in design.ancestors(design.facets[k].name))
    key = np.ravel_multi_index(tuple(cells[:, i] for i in anc), tuple(coded.shape[i] for i in anc))
    return grid[key, cells[:, k]]
