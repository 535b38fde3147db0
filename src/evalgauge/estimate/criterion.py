"""The profiled REML criterion (Bates et al. 2015, eq. 41) of a cell-level problem, its exact gradient and
average-information Hessian, with the block-arrow factorisation described in :mod:`evalgauge.estimate.reml`.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import numpy as np
from scipy.linalg import cho_solve, solve_triangular

from ..errors import DesignError

LOG_2PI = math.log(2 * math.pi)

# ---------------------------------------------------------------------------
# The REML problem: structure fixed at set-up, numbers at each evaluation
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class ModelSize:
    """The size of a REML problem, known before it is fitted, and what fitting it is expected to cost.

    ``seconds`` assumes 8 + 1.5 evaluations per random term (:attr:`evaluations`) at a rate measured on
    a 2-core machine; it is an order of magnitude, shown so that a user can stop an unaffordable fit.
    Evaluations counted (line-search trials included): 8 with 3 terms (InstEval), 7-8 with 7-9
    (sizing, TEE, 1% missing), 43 with 37 and 75 with 46 (the demo's run, most terms at the boundary:
    each boundary round re-runs Newton), more than 57 with 31 (the real SummEval file, stopped at 25
    minutes while a dozen evaluations had been expected): the many-term default models are the ones
    whose cost decides whether the two-way model is fitted instead.
    """

    n_obs: int
    cells: int
    effects: int
    dense: int  # random effects (and fixed columns) in the dense Schur part
    blocks: int
    block_size: int
    flops: float  # per evaluation of the criterion with its gradient
    memory: int  # bytes of the dense work arrays of one evaluation
    terms: int = 0  # random terms

    #: floating-point operations per second of the dense factorisations, and seconds per cell and
    #: evaluation of the scatter-adds (bench/bench_reml.py, 2-core machine)
    RATE = 1.5e10
    PER_CELL = 2e-6
    @property
    def evaluations(self) -> float:
        return 8.0 + 1.5 * self.terms

    @property
    def seconds(self) -> float:
        return self.evaluations * (self.flops / self.RATE + self.PER_CELL * self.cells)

    def __str__(self) -> str:
        return (f"REML: {self.n_obs:,} judgments in {self.cells:,} cells; {self.effects:,} random effects "
                f"({self.dense:,} in the dense part); expected about {_duration(self.seconds)} and "
                f"{self.memory / 2**20:,.0f} MiB")


class ModelTooLarge(DesignError):
    """A REML problem whose dense work arrays would not fit in memory; raised before any work."""

    def __init__(self, size: ModelSize, limit: int | None, why: str | None = None):
        self.size = size
        why = why or (f"available: {limit / 2**30:.1f} GiB" if limit else "too much memory")
        super().__init__(f"the model is too large for this machine: {size} ({why}). "
                         "Fit fewer interactions (`max_order`=2, or `terms` naming the terms you need), or fit "
                         "a subset of the levels.")


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{max(seconds, 0.1):.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


@dataclass
class Evaluation:
    deviance: float
    gradient: np.ndarray | None
    sigma2: float  # residual variance at the profiled optimum for this theta
    beta: np.ndarray
    r2: float
    extra: dict = field(default_factory=dict)


class RemlProblem:
    """Precomputed index structure of a variance-component REML problem at the cell level.

    ``levels[k]`` gives the level of random term k at each cell; ``cell_term`` is
    the index of the term with one level per cell (eliminated in closed form),
    or None.

    Glossary of the fields (A = Lambda' M' W M Lambda + I, M = [Z, X] at the cells, in the block-arrow layout
    of :mod:`evalgauge.estimate.reml`):

    * the data: ``n_obs`` judgments, ``m`` cells, ``count``/``mean`` per cell, ``ss_within``, ``x`` (X at
      the cells, ``p`` columns), ``levels``/``sizes`` per random term, ``n_terms``, ``cell_term``;
      ``others`` the terms but the cell term;
    * the layout: ``grouping`` (each cell's level of the grouping facet; ``block_of_cell``), ``local`` (terms
      nested in it: one dense block per level, ``nb`` blocks of at most ``bmax`` effects), ``glob`` (the other
      terms, in the dense Schur part: ``gr`` random effects, then the ``p`` fixed columns, ``g`` in all;
      ``g_off[k]`` where term k starts), ``diag`` (a local term eliminated first, diagonal in A; ``n0`` its
      levels, ``lev0`` each cell's, ``blk0`` each level's block), ``owner_l``/``owner_g`` (the term of each
      local/global position);
    * slots: ``slots_l`` (term, each cell's position in its block) and ``slots_g`` (term or X column, each
      cell's global position, its values or None for 1): what a cell's row of M touches;
    * scatters, the cross-products M' W M by part: ``ll_*`` (local x local), ``lg_*`` (local x global),
      ``gg_*`` (global x global), ``rl_*``/``rg_*`` (right-hand sides M' W v), each as ``*_idx`` (where each
      entry adds: an array for ``rl``/``rg``; for the others :class:`_Plain`, or on a large problem
      (``segmented``) :class:`_LazyIndex`, made a segment at a time), ``*_cell`` (its cell: :class:`_Cells`)
      and ``*_val`` (its value, None for 1); ``sparse_ok`` and ``lg_row``/``lg_col``/``lg_nz``/``nz_*`` the
      sparse path's CSR pattern of A_LG (scalar blocks);
    * the eliminated term's pattern ``t0_*``: B (its coupling to the rest) in CSR by its level, its local
      entries then its global ones (``t0_lrow``/``t0_lcol``/``t0_lptr`` and ``t0_grow``/``t0_gcol``/``t0_gptr``:
      rows, columns, row pointers); ``t0_nz`` each scatter entry's place in it, ``t0_col``/``t0_cell``/
      ``t0_val`` per entry; ``t0_pairs`` the pairs within a row (:class:`_RowPairs`, made on first use);
    * ``_pinned``: a factorisation kept at one theta (bootstrap refits start there).
    """

    def __init__(self, n_obs: int, count: np.ndarray, mean: np.ndarray, ss_within: float,
                 x: np.ndarray, levels: list[np.ndarray], sizes: list[int], cell_term: int | None,
                 group_of: list[np.ndarray | None] | None = None, diagonal: bool = True):
        self.n_obs = n_obs
        self.count = count
        self.mean = mean
        self.ss_within = ss_within
        self.x = x
        self.p = x.shape[1]
        self.m = count.size
        self.levels = levels
        self.sizes = sizes
        self.n_terms = len(levels)
        self.cell_term = cell_term
        self.others = [k for k in range(self.n_terms) if k != cell_term]
        self._plan(group_of)
        self.diag = self._diagonal_term() if diagonal else None
        if self.diag is not None:
            self.local = [k for k in self.local if k != self.diag]
        self._index()

    # -- structure ------------------------------------------------------------
    def _plan(self, group_of) -> None:
        """Choose the grouping that makes the dense part smallest (cost model: flops)."""
        best = (self._cost(set(), None), None, set())
        for g, grouping in enumerate(group_of or []):
            if grouping is None:
                continue
            local = {k for k in self.others if _functional(self.levels[k], grouping, self.sizes[k])}
            if not local:
                continue
            cost = self._cost(local, grouping)
            if cost < best[0]:
                best = (cost, g, local)
        _, g, local = best
        self.grouping = None if g is None else group_of[g]
        self.local = [k for k in self.others if k in local]
        self.glob = [k for k in self.others if k not in local]

    def _cost(self, local: set[int], grouping: np.ndarray | None, diag: int | None = None) -> float:
        """Flops of one evaluation with these local terms (``diag``: eliminated first, in neither part)."""
        g_size = sum(self.sizes[k] for k in self.others if k not in local and k != diag) + self.p
        if not local:
            return g_size**3 / 3
        nb, bmax = self._block_sizes(local, grouping)
        return nb * (bmax**3 + 3 * bmax**2 * g_size + 3 * bmax * g_size**2) + g_size**3

    def _block_sizes(self, local, grouping) -> tuple[int, int]:
        nb = int(grouping.max()) + 1
        per_block = np.zeros(nb, dtype=np.int64)
        for k in local:
            owner = np.zeros(self.sizes[k], dtype=np.int64)
            owner[self.levels[k]] = grouping
            per_block += np.bincount(owner, minlength=nb)
        return nb, int(per_block.max())

    #: a local term with at least this many levels in some block is eliminated first (see _diagonal_term)
    DIAGONAL_MIN_LEVELS = 8
    #: flops of dense BLAS work one gathered pair of the elimination costs as much time as (numpy, 2 cores)
    PAIR_FLOPS = 100.0

    def _diagonal_term(self) -> int | None:
        """The local term to eliminate before the blocks, or None.

        A term's own block of A is diagonal (each cell has one level of it), so the local term with the
        most levels per block (e.g. system x item, 100 of them in each item's block of 106 effects) can be
        eliminated first with sparse products: the blocks shrink to the other local terms (6 there) and
        the dense coupling of the blocks to the global effects shrinks with them, from 106 x 606 to 6 x 606
        numbers per item; that coupling is what makes large unbalanced fits slow. Only when
        another local term remains, so that the blocks keep their structure."""
        if len(self.local) < 2 or self.grouping is None:
            return None
        nb = int(self.grouping.max()) + 1
        best, most = None, 0
        for k in self.local:
            owner = np.zeros(self.sizes[k], dtype=np.int64)
            owner[self.levels[k]] = self.grouping
            per_block = int(np.bincount(owner, minlength=nb).max())
            if per_block > most:
                best, most = k, per_block
        if most < self.DIAGONAL_MIN_LEVELS:
            return None
        # Only when cheaper: the elimination's gathers (every pair of a level's global entries, each worth
        # about a hundred flops of dense BLAS work) against the dense blocks it saves. With many global
        # terms (a many-facet model) the pairs outgrow the blocks.
        cells_per_level = np.bincount(self.levels[best], minlength=self.sizes[best]).astype(np.float64)
        n_global = len([k for k in self.others if k not in self.local]) + self.p
        pairs = float(np.sum((cells_per_level * n_global) ** 2))
        rest = set(self.local) - {best}
        with_diag = self._cost(rest, self.grouping, diag=best) + self.PAIR_FLOPS * pairs
        return best if with_diag < self._cost(set(self.local), self.grouping) else None

    def _index(self) -> None:
        """Positions of every effect and the scatter indices of all cross-products."""
        m = self.m
        cells = np.arange(m, dtype=_index_dtype(m))  # the cell of every scatter entry: 4 bytes, not 8
        # global random effects first, then X
        g_off = {}
        off = 0
        for k in self.glob:
            g_off[k] = off
            off += self.sizes[k]
        self.gr = off
        self.g = off + self.p
        # local effects: block and position within block
        if self.local:
            self.nb = int(self.grouping.max()) + 1
            fill = np.zeros(self.nb, dtype=np.int64)
            pos_of = {}
            for k in self.local:
                owner = np.zeros(self.sizes[k], dtype=np.int64)
                owner[self.levels[k]] = self.grouping
                # levels of k in order, numbered within their block after what is there
                order = np.argsort(owner, kind="stable")
                ranks = np.empty(self.sizes[k], dtype=np.int64)
                counts = np.bincount(owner, minlength=self.nb)
                starts = np.r_[0, np.cumsum(counts)[:-1]]
                ranks[order] = np.arange(self.sizes[k]) - np.repeat(starts, counts)
                pos_of[k] = (owner, fill[owner] + ranks)
                fill += counts
            self.bmax = int(fill.max())
            self.block_of_cell = self.grouping
        else:
            self.nb, self.bmax = 0, 0
            self.block_of_cell = np.zeros(m, dtype=np.int64)
        # slots: (kind, per-cell index, term or x column)
        # positions within a block, int32 where bm^2 fits (pk * bm is formed before the int64 block offset)
        pos = _index_dtype(self.bmax * self.bmax)
        slots_l = [(k, pos_of[k][1][self.levels[k]].astype(pos)) for k in self.local]
        slots_g = [(("r", k), g_off[k] + self.levels[k], None) for k in self.glob]
        # an X column of ones (the intercept) carries no values: the cross-products are plain counts
        slots_g += [(("x", j), np.full(m, self.gr + j), None if np.all(self.x[:, j] == 1.0) else self.x[:, j])
                    for j in range(self.p)]
        self.slots_l, self.slots_g = slots_l, slots_g
        self.slots_l_of = dict(slots_l)  # a local term's position in its block at each cell
        b, bm, g = self.block_of_cell, self.bmax, self.g
        x_vals = any(xv is not None for _, _, xv in slots_g)  # values other than 1 anywhere?

        def one(v):
            return np.ones(m) if v is None else v

        def small(a, bound):  # indices in the narrowest type: these arrays are most of the fit's memory
            return a.astype(_index_dtype(bound), copy=False)

        def cat(parts, dtype=np.int64):
            return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)

        def nonzero(index, values):
            """A pair of slots' scatter entries (index, cell, value) on the cells where the value is not 0:
            a dummy column of X (a fixed system's indicator) touches its own level's cells only, so with many
            fixed levels most entries of the full pairs would be zeros (p^2 of them per cell)."""
            if values is None:
                return index, cells, None
            keep = np.flatnonzero(values)
            if keep.size == values.size:
                return index, cells, values
            return index[keep], cells[keep], values[keep]

        def scatter(entries, index: bool = True):  # (index, cell, values) of every pair, concatenated
            entries = list(entries)
            vals = cat([np.ones(c.size) if v is None else v for _, c, v in entries], np.float64) if x_vals else None
            return cat([i for i, _, _ in entries]) if index else None, cells_of([c for _, c, _ in entries]), vals

        # On a large problem the scatters are kept as segments (one per slot or pair of slots, each over the
        # cells) and their indices are not kept at all: each segment is made from the slots' per-cell arrays,
        # which are kept anyway, when used. A small one keeps plain arrays: a loop over segments would cost it
        # more than the memory is worth.
        self.segmented = m * (len(slots_l) + len(slots_g)) ** 2 >= _SEGMENTED_ENTRIES

        def cells_of(parts) -> _Cells:
            if self.segmented and all(c is cells for c in parts):
                return _Cells(None, len(parts), m)
            return _Cells(cat(parts, cells.dtype), len(parts), m)

        def lazy(entries, terms, bound: int) -> _Segmented:
            """Each entry list's segment as sum of arrays x strides, on the segment's kept cells (an index
            below ``bound``)."""
            index = _LazyIndex([(parts, None if c is cells else c) for parts, (_, c, _) in zip(terms, entries,
                                                                                                strict=True)], m)
            return index if self.segmented else _Plain(small(index[:], max(bound, 1)))

        n_ll, n_lg = max(self.nb * bm * bm, 1), max(self.nb * bm * g, 1)
        ll = [(None, cells, None) for _ in slots_l for _ in slots_l]
        self.ll_idx = lazy(ll, [((b, bm * bm), (pk, bm), (pl, 1)) for _, pk in slots_l for _, pl in slots_l],
                           n_ll)
        self.ll_cell = cells_of([cells for _ in slots_l for _ in slots_l])
        lg = [nonzero(gi, xv) for _, pk in slots_l for _, gi, xv in slots_g]
        _, self.lg_cell, self.lg_val = scatter(lg, index=False)
        self.lg_idx = lazy(lg, [((b, bm * g), (pk, g), (gi, 1)) for _, pk in slots_l for _, gi, _ in slots_g],
                           n_lg)
        gg = [nonzero(gi, None if xi is None and xj is None else one(xi) * one(xj))
              for _, gi, xi in slots_g for _, gj, xj in slots_g]
        _, self.gg_cell, self.gg_val = scatter(gg, index=False)
        self.gg_idx = lazy(gg, [((gi, g), (gj, 1)) for _, gi, _ in slots_g for _, gj, _ in slots_g], g * g)
        #: the sparse path pays off when blocks are scalars and the dense coupling would be large
        self.sparse_ok = bm == 1 and self.nb * g > 200_000 and self.diag is None
        self.lg_row = self.lg_col = None  # A_LG's rows and columns: the sparse path's (_sparse_pattern)
        self.nz_row = None  # the sparse path's pattern, made on its first use (_sparse_pattern)
        self.n0 = 0
        self.rl_idx = cat([small(b * bm + pk, max(self.nb * bm, 1)) for _, pk in slots_l])
        if self.diag is not None:
            self._diagonal_pattern()
        self.rl_cell = cells_of([cells for _ in slots_l])
        self.rg_idx, self.rg_cell, self.rg_val = scatter(nonzero(small(gi, max(g, 1)), xv) for _, gi, xv in slots_g)
        # which term owns each effect position (for theta scaling and per-term sums)
        self.owner_l = np.full(self.nb * bm, -1, dtype=np.int64)
        for k, pk in slots_l:
            self.owner_l[b * bm + pk] = k
        self.owner_g = np.full(g, -1, dtype=np.int64)
        for k in self.glob:
            self.owner_g[g_off[k]:g_off[k] + self.sizes[k]] = k
        self.g_off = g_off

    def _diagonal_pattern(self) -> None:
        """The eliminated term's coupling B to the rest (the blocks' local effects, then the global effects
        and X: columns 0..nb*bmax-1 and nb*bmax..nb*bmax+g-1), as a fixed CSR pattern: for every cell and
        every other slot of it, the entry (the cell's level of the term, the slot's column) and its value."""
        m, bm, g = self.m, self.bmax, self.g
        width_l = self.nb * bm
        width = width_l + g
        self.n0 = self.sizes[self.diag]
        self.lev0 = self.levels[self.diag]
        self.blk0 = np.zeros(self.n0, dtype=np.int64)
        self.blk0[self.lev0] = self.block_of_cell
        # a column per slot and cell: the local slots' columns are rl_idx's segments, the global ones the
        # slots' own positions shifted past the local columns (kept anyway: no copy of either is made)
        n_l = len(self.slots_l)
        cols = [self.rl_idx[k * m:(k + 1) * m] for k in range(n_l)] + [gi for _, gi, _ in self.slots_g]
        shifts = [0] * n_l + [width_l] * len(self.slots_g)
        if self.segmented:
            self.t0_cell = _Cells(None, len(cols), m)
            self.t0_col = _Segments(cols, shifts)
        else:
            self.t0_cell = _Cells(np.tile(np.arange(m, dtype=_index_dtype(m)), len(cols)), len(cols), m)
            self.t0_col = _Plain(np.concatenate([(c + shift).astype(_index_dtype(width))
                                                 for c, shift in zip(cols, shifts, strict=True)]))
        self.t0_val = None  # all ones unless X has a column other than the intercept
        if any(xv is not None for _, _, xv in self.slots_g):
            self.t0_val = np.concatenate([np.ones(m) for _ in self.slots_l]
                                         + [np.ones(m) if xv is None else xv for _, _, xv in self.slots_g])
        place, row, col = _row_pattern(self.lev0, self.n0, cols, shifts, width)
        # the pattern's entries laid out local ones first, then global ones (each part in CSR order): F0's
        # values are then its two matrices' own, and no map between the two layouts is kept
        is_l = col < width_l
        local, glob = np.flatnonzero(is_l), np.flatnonzero(~is_l)
        layout = np.empty(is_l.size, dtype=place.dtype)
        layout[local] = np.arange(local.size)
        layout[glob] = local.size + np.arange(glob.size)
        self.t0_nz = layout[place]
        del place, layout
        self.t0_lrow, self.t0_lcol = row[local], col[local]
        self.t0_grow, self.t0_gcol = row[glob], col[glob] - width_l
        del row, col, local, glob
        self.t0_lptr = _row_pointers(self.t0_lrow, self.n0)
        self.t0_gptr = _row_pointers(self.t0_grow, self.n0)
        self.t0_pairs = None  # pairs of global entries within a row, made on first use (_RowPairs)

    def _sparse_pattern(self) -> None:
        """The fixed non-zero pattern of the scalar blocks' coupling A_LG (CSR, rows sorted) and each
        cross-product entry's place in it: each evaluation fills the values without re-sorting."""
        bm, g = self.bmax, self.g
        lg_idx = self.lg_idx[:]
        self.lg_row = lg_idx // (bm * g) if bm else lg_idx
        self.lg_col = lg_idx % g if g else lg_idx
        self.lg_nz, self.nz_row, self.nz_col = _pattern(self.lg_row, self.lg_col, self.g)
        self.nz_indptr = _row_pointers(self.nz_row, self.nb)

    def size(self) -> ModelSize:
        """How big one evaluation is: effects, the dense part, the batched blocks, and their memory."""
        g, nb, bm = self.g, self.nb, self.bmax
        sparse = nb and bm == 1 and self.sparse_ok
        dense_lg = 0 if sparse else nb * bm * g  # A_LG, L^-1 A_LG, A_LL^-1 A_LG and its product with S^-1
        # the scatter arrays kept for every evaluation (4-byte where they fit, none for indices made a
        # segment at a time or for values all 1), and while one is in use three 8-byte temporaries of a
        # segment (of every entry where its cells are a subset)
        kept = [getattr(self, name, None) for name in _SCATTER_ARRAYS]
        scatter = sum(a.nbytes for a in kept if a is not None)
        if self.sparse_ok and self.lg_row is None:  # A_LG's rows and columns, made on the sparse path's first use
            scatter += 8 * self.lg_idx.size
        cells = (self.ll_cell, self.lg_cell, self.gg_cell, self.rl_cell, self.rg_cell)
        scatter += 24 * max([self.m, self.rg_idx.size, self.rl_idx.size]
                            + [c.size for c in cells if c.index is not None])
        memory = 8 * (3 * dense_lg + 4 * nb * bm * bm + 4 * g * g) + scatter + 64 * self.m
        flops = self._cost(set(self.local), self.grouping, self.diag) if self.local else g**3 / 3
        if self.n0:  # the term eliminated first: its pattern, the pairs of its global entries, F0'F0
            counts = np.diff(self.t0_gptr).astype(np.int64)
            pairs = int(np.sum(counts**2))
            kept_pairs = int(np.sum(counts[counts > _RowPairs.SHORT] ** 2))  # short rows keep no pairs
            memory += (8 * kept_pairs + 8 * self.t0_grow.size + 16 * nb * bm * g + 8 * 3 * min(pairs, 1 << 20)
                       + 8 * 6 * self.t0_grow.size + 24 * (self.t0_lrow.size + self.t0_grow.size))
            flops += 40 * pairs + 2 * self.n0 * bm * bm * 4 + 20 * (self.t0_lrow.size + self.t0_grow.size) * bm
        return ModelSize(self.n_obs, self.m, int(sum(self.sizes)), g, nb, bm, float(flops), int(memory),
                         self.n_terms)

    def with_data(self, mean: np.ndarray, ss_within: float) -> RemlProblem:
        """The same design with other cell means and within-cell sum of squares (for resampling)."""
        clone = copy.copy(self)
        clone.mean = mean
        clone.ss_within = ss_within
        return clone

    # -- one evaluation ---------------------------------------------------------
    def _rhs(self, wv: np.ndarray, s_l: np.ndarray, s_g: np.ndarray,
             s0: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """M' (w * v) for a cell vector: the right-hand side of a solve, split eliminated term (scaled by
        ``s0``, its theta; empty without one)/local/global."""
        r_0 = s0 * _bincount(self.lev0, weights=wv, minlength=self.n0) if self.n0 else np.zeros(0)
        r_g = s_g * self.rg_cell.scatter(self.rg_idx, wv, self.rg_val, self.g)
        if not self.nb:
            return r_0, np.zeros((0, 0)), r_g
        r_l = s_l * self.rl_cell.scatter(self.rl_idx, wv, None, self.nb * self.bmax)
        return r_0, r_l.reshape(self.nb, self.bmax), r_g

    def with_weights(self, weights: np.ndarray, response: np.ndarray) -> RemlProblem:
        """The same design as a weighted penalized least-squares problem (one PIRLS step of a GLMM)."""
        clone = copy.copy(self)
        clone._pinned = None  # a factorisation depends on the weights
        clone.count = weights
        clone.mean = response
        clone.ss_within = 0.0
        return clone

    def evaluate(self, theta: np.ndarray, gradient: bool = False, hessian: bool = False,
                 pls: bool = False, keep: bool = False) -> Evaluation:
        """Profiled REML deviance at theta (Bates et al. 2015, eq. 41); with ``gradient`` its exact gradient,
        with ``hessian`` also the average-information approximation of its Hessian; with ``pls`` the
        penalised least-squares solution (fitted values, |u|^2, log|L|^2) a GLMM's PIRLS step needs.
        With ``keep`` the factorisation and solution stay with the result, so :meth:`derive` can add the
        derivatives later (a line search needs them only at the point it accepts)."""
        theta = np.asarray(theta, dtype=np.float64)
        fac = self._factor_at(theta)
        f_0, f_l, f_g = fac.forward3(*self._rhs(fac.w * self.mean, fac.s_l, fac.s_g, self._s0(theta)))
        diag_s = np.log(np.diagonal(fac.chol_s))
        logdet = fac.logdet + 2.0 * float(np.sum(diag_s[:self.gr]))
        logdet_rx = 2.0 * float(np.sum(diag_s[self.gr:]))
        r2 = (self.ss_within + float(fac.w @ self.mean**2) - float(np.sum(f_l**2)) - float(f_g @ f_g)
              - float(f_0 @ f_0))
        r2 = max(r2, 1e-300)
        dfree = self.n_obs - self.p
        dev = logdet + logdet_rx + dfree * (1.0 + LOG_2PI + math.log(r2 / dfree))
        x_0, x_l, x_g = fac.backward3(f_0, f_l, f_g)
        out = Evaluation(dev, None, r2 / dfree, x_g[self.gr:], r2)
        lx_inv = solve_triangular(fac.chol_s[self.gr:, self.gr:], np.eye(self.p), lower=True)
        out.extra = {"beta_cov": (r2 / dfree) * (lx_inv.T @ lx_inv)}
        if pls:
            out.extra.update(self._pls(theta, fac, x_l, x_g, logdet, x_0))
            out.extra.update(x_l=x_l, x_g=x_g, factor=fac)
        state = (theta, fac, x_0, x_l, x_g, r2)
        if gradient:
            self._derivatives(out, state, hessian)
        elif keep:
            out.extra["_state"] = state
        return out

    def derive(self, out: Evaluation, hessian: bool = False) -> Evaluation:
        """Add the gradient (and the AI Hessian) to an evaluation made with ``keep=True``."""
        self._derivatives(out, out.extra.pop("_state"), hessian)
        return out

    def _derivatives(self, out: Evaluation, state: tuple, hessian: bool) -> None:
        theta, fac, x_0, x_l, x_g, r2 = state
        fit = self._fitted(fac, x_l, x_g, x_0)
        out.gradient, u_sq = self._gradient(theta, fac, x_l, x_g, fit, r2, x_0)
        out.extra["u_sq"] = u_sq
        if hessian:
            out.extra.update(self._average_information(theta, fac, x_l, x_g, fit, u_sq, r2, x_0))

    def _s0(self, theta: np.ndarray) -> float:
        """theta of the term eliminated before the blocks (0 without one)."""
        return float(theta[self.diag]) if self.diag is not None else 0.0

    def pin(self, theta: np.ndarray) -> None:
        """Keep the factorisation at ``theta`` and the traces of its inverse: every bootstrap refit starts
        there, and both depend on theta and the cell counts only, not on the resampled means."""
        theta = np.asarray(theta, dtype=np.float64).copy()
        fac = self._factorise(theta)
        fac.inverse_parts = self._inverse_parts(fac, leverages=self.cell_term is not None)
        self._pinned = (theta, fac)

    def _factor_at(self, theta: np.ndarray) -> _Factor:
        pinned = getattr(self, "_pinned", None)
        if pinned is not None and np.array_equal(pinned[0], theta):
            return pinned[1]
        return self._factorise(theta)

    def _inverse_parts_of(self, fac: _Factor) -> tuple[np.ndarray, np.ndarray | None]:
        """The gradient's inverse parts, computed once per factorisation; the cell leverages only when
        there is a cell term (the only part of the gradient that reads them)."""
        if fac.inverse_parts is None:
            fac.inverse_parts = self._inverse_parts(fac, leverages=self.cell_term is not None)
        return fac.inverse_parts

    def _factorise(self, theta: np.ndarray) -> _Factor:
        """The Cholesky factor of A = Lambda' M' W M Lambda + I, block-arrow: batched blocks of the local
        effects and the dense Schur complement S of the global effects and X (or a sparse coupling when
        every block is a scalar)."""
        nb, bm, g, gr = self.nb, self.bmax, self.g, self.gr
        tc2 = theta[self.cell_term] ** 2 if self.cell_term is not None else 0.0
        dc = 1.0 + tc2 * self.count
        w = self.count / dc
        th_ext = np.append(theta, 1.0)  # index -1 -> 1 (X columns, padding)
        s_l = th_ext[self.owner_l] if nb else np.zeros(0)
        s_g = np.where(self.owner_g >= 0, th_ext[self.owner_g], 1.0)
        a_gg = self.gg_idx.add(lambda part: _times(self.gg_cell.take_part(w, part), _part(self.gg_val, part)),
                               g * g).reshape(g, g)
        a_gg *= np.outer(s_g, s_g)
        a_gg[np.arange(gr), np.arange(gr)] += 1.0
        fac = _Factor(dc=dc, w=w, s_l=s_l, s_g=s_g, logdet=float(np.sum(np.log(dc))), nb=nb)
        if nb and bm == 1 and self.sparse_ok:
            # One effect per block (e.g. students crossed with instructors): the blocks are scalars and
            # the coupling A_LG is sparse, so F'F costs the square of the non-zeros per row, not g^2.
            from scipy import sparse as sp

            fac.sparse = True
            fac.s_lb = s_l.reshape(nb, 1)
            fac.a_ll = s_l**2 * self.ll_idx.add(lambda part: self.ll_cell.take_part(w, part), nb) + 1.0
            fac.linv_vec = 1.0 / np.sqrt(fac.a_ll)
            if self.nz_row is None:
                self._sparse_pattern()
            data = _times(self.lg_cell.take(w), self.lg_val) * s_l[self.lg_row] * s_g[self.lg_col]
            nz = _bincount(self.lg_nz, weights=data, minlength=self.nz_row.size)  # in the fixed CSR pattern
            fac.a_lg_sp = sp.csr_matrix((nz, self.nz_col, self.nz_indptr), shape=(nb, g))
            fac.f_sp = sp.diags(fac.linv_vec) @ fac.a_lg_sp
            s_mat = a_gg - (fac.f_sp.T @ fac.f_sp).toarray()
            fac.logdet += float(np.sum(np.log(fac.a_ll)))
        elif nb:
            fac.s_lb = s_l.reshape(nb, bm)
            a_ll = self.ll_idx.add(lambda part: self.ll_cell.take_part(w, part), nb * bm * bm).reshape(nb, bm, bm)
            a_ll *= fac.s_lb[:, :, None] * fac.s_lb[:, None, :]
            a_ll[:, np.arange(bm), np.arange(bm)] += 1.0
            a_lg = self.lg_idx.add(lambda part: _times(self.lg_cell.take_part(w, part), _part(self.lg_val, part)),
                                   nb * bm * g).reshape(nb, bm, g)
            a_lg *= fac.s_lb[:, :, None] * s_g[None, None, :]
            if self.diag is not None:
                fac.t0 = self._eliminate_diagonal(theta, w, s_l, s_g, a_ll, a_lg, a_gg)
                fac.logdet += float(np.sum(np.log(fac.t0.d)))
            chol_l = np.linalg.cholesky(a_ll)
            fac.linv = np.linalg.inv(chol_l)  # lower triangular
            fac.linv_t = np.swapaxes(fac.linv, 1, 2)
            # L^-1 A_LG, (nb, bm, g), written over A_LG a chunk of blocks at a time (A_LG is not needed after):
            # the two side by side were the peak of a large fit
            step = max(1, _ENTRY_CHUNK // max(bm * g, 1))
            for a in range(0, nb, step):
                a_lg[a:a + step] = fac.linv[a:a + step] @ a_lg[a:a + step]
            fac.f_blocks = a_lg
            fac.f_flat = fac.f_blocks.reshape(nb * bm, g)
            s_mat = a_gg - fac.f_flat.T @ fac.f_flat
            fac.logdet += 2.0 * float(np.sum(np.log(np.diagonal(chol_l, axis1=1, axis2=2))))
        else:
            s_mat = a_gg
        try:
            fac.chol_s = _cholesky(s_mat)
        except np.linalg.LinAlgError:
            raise DesignError("the fixed effects are not estimable with these data (X'V^-1 X is singular); "
                              "remove fixed terms whose levels never occur.") from None
        return fac

    def _eliminate_diagonal(self, theta, w, s_l, s_g, a_ll, a_lg, a_gg) -> _Diagonal:
        """D (the eliminated term's diagonal of A) and F0 = D^-1/2 B in its local and global columns; the
        products F0'F0 that its elimination takes from the rest of A (the local-local part within blocks) are
        taken from ``a_ll``, ``a_lg`` and ``a_gg`` in place."""
        from scipy import sparse as sp

        nb, bm, g, n0 = self.nb, self.bmax, self.g, self.n0
        s0 = float(theta[self.diag])
        d = s0**2 * _bincount(self.lev0, weights=w, minlength=n0) + 1.0
        s_rest = np.concatenate([s_l, s_g])
        # B's values summed into the pattern one slot at a time (np.add.at, in entry order: bincount's sums)
        n_l = self.t0_lrow.size
        b = np.zeros(n_l + self.t0_grow.size)
        for part in self.t0_col.parts():
            np.add.at(b, self.t0_nz[part], _times(self.t0_cell.take_part(w, part), _part(self.t0_val, part))
                      * s_rest[self.t0_col[part]])
        b *= s0
        sqrt_d = np.sqrt(d)
        b[:n_l] /= sqrt_d[self.t0_lrow]  # F0's values: its local, then its global entries
        b[n_l:] /= sqrt_d[self.t0_grow]
        f_l = sp.csr_matrix((b[:n_l], self.t0_lcol, self.t0_lptr), shape=(n0, nb * bm))
        f_g = sp.csr_matrix((b[n_l:], self.t0_gcol, self.t0_gptr), shape=(n0, g))
        f_lt = f_l.T.tocsr()
        ll = (f_lt @ f_l).tocoo()  # within blocks only: the term is nested in the grouping
        a_ll -= _bincount((ll.row // bm) * bm * bm + (ll.row % bm) * bm + ll.col % bm, weights=ll.data,
                          minlength=nb * bm * bm).reshape(nb, bm, bm)
        # F0_L'F0_G a chunk of local rows at a time, each row's sums as in the whole product: the whole of it,
        # sparse and then dense, was the peak of a large fit
        flat = a_lg.reshape(nb * bm, g)
        step = max(1, _ENTRY_CHUNK // 2 // max(g, 1))
        for a in range(0, nb * bm, step):
            flat[a:a + step] -= (f_lt[a:a + step] @ f_g).toarray()
        a_gg -= (f_g.T @ f_g).toarray()
        return _Diagonal(s0=s0, d=d, sqrt_d=sqrt_d, f_l=f_l, f_g=f_g)

    def _fitted(self, fac: _Factor, x_l: np.ndarray, x_g: np.ndarray, x_0: np.ndarray | None = None) -> np.ndarray:
        """M Lambda u + X beta at each cell (the cell term left out)."""
        fit = self.rg_cell.sum(_times((fac.s_g * x_g)[self.rg_idx], self.rg_val))
        if self.nb:
            fit += self.rl_cell.sum((fac.s_l * x_l.ravel())[self.rl_idx])
        if self.n0:
            fit += fac.t0.s0 * x_0[self.lev0]
        return fit

    def _pls(self, theta, fac: _Factor, x_l, x_g, logdet: float, x_0=None) -> dict:
        """The penalised least-squares solution: fitted values (cell term included), |u|^2, log|L|^2."""
        fit = self._fitted(fac, x_l, x_g, x_0)
        penalty = float(x_g[:self.gr] @ x_g[:self.gr]) + (float(np.sum(x_l**2)) if self.nb else 0.0)
        penalty += float(x_0 @ x_0) if self.n0 else 0.0
        if self.cell_term is not None:
            v = theta[self.cell_term] * self.count * (self.mean - fit) / fac.dc
            fit = fit + theta[self.cell_term] * v
            penalty += float(v @ v)
            return {"fitted": fit, "penalty": penalty, "logdet": logdet, "u_cell": v}
        return {"fitted": fit, "penalty": penalty, "logdet": logdet}

    def _gradient(self, theta, fac: _Factor, x_l, x_g, fit, r2: float, x_0=None) -> tuple[np.ndarray, np.ndarray]:
        """The exact gradient of the profiled deviance in theta, and |u_k|^2 per term."""
        dfree = self.n_obs - self.p
        u_sq = self._u_squared(x_l, x_g, x_0)
        tr_inv, lev = self._inverse_parts_of(fac)
        grad = np.zeros(self.n_terms)
        for k in self.others:
            if theta[k] > 0:
                grad[k] = (2.0 / theta[k]) * (self.sizes[k] - tr_inv[k] - dfree * u_sq[k] / r2)
        if self.cell_term is not None:
            k, dc = self.cell_term, fac.dc
            resid = self.mean - fit
            term1 = np.sum((self.count / dc) * (1.0 - self.count * lev / dc))
            term2 = np.sum(self.count**2 * resid**2 / dc**2)
            grad[k] = 2.0 * theta[k] * (term1 - dfree * term2 / r2)
            u_sq[k] = theta[k] ** 2 * term2
        return grad, u_sq

    def _u_squared(self, x_l, x_g, x_0=None) -> np.ndarray:
        """|u_k|^2 of each term but the cell term (spherical random effects of the solution)."""
        u_sq = np.zeros(self.n_terms)
        if self.n0:
            u_sq[self.diag] = float(x_0 @ x_0)
        np.add.at(u_sq, self.owner_g[:self.gr], x_g[:self.gr] ** 2)
        if self.nb:
            valid = self.owner_l >= 0
            np.add.at(u_sq, self.owner_l[valid], x_l.ravel()[valid] ** 2)
        return u_sq

    def _inverse_parts(self, fac: _Factor, leverages: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
        """Per term, the trace of its diagonal block of A^-1; per cell, the leverage m_c' A^-1 m_c (m_c the
        cell's row of [Z Lambda, X], the cell term left out), or None without ``leverages``."""
        nb, g, gr = self.nb, self.g, self.gr
        if nb and fac.sparse and not leverages:
            return self._sparse_traces(fac), None
        sigma_inv = _inverse_from_cholesky(fac.chol_s)
        tr_inv = np.zeros(self.n_terms)
        np.add.at(tr_inv, self.owner_g[:gr], np.diagonal(sigma_inv)[:gr])
        s_g = fac.s_g
        lev = None
        if leverages:
            scaled = (np.outer(s_g, s_g) * sigma_inv).ravel()
            lev = self.gg_cell.sum_of(lambda part: _times(scaled[self.gg_idx[part]], _part(self.gg_val, part)))
        if nb:
            if fac.sparse:
                from scipy import sparse as sp

                h_nz = fac.a_lg_sp.data / fac.a_ll[self.nz_row]  # A_LL^-1 A_LG at its non-zeros
                h_sp = sp.csr_matrix((h_nz, self.nz_col, self.nz_indptr), shape=(nb, g))
                # A_LL^-1 A_LG S^-1 is needed only at A_LG's own non-zeros (traces and leverages)
                hs_nz = np.asarray(h_sp @ sigma_inv)[self.nz_row, self.nz_col]
                inv_diag = 1.0 / fac.a_ll + _bincount(self.nz_row, weights=h_nz * hs_nz, minlength=nb)
                inv_ll = inv_diag.reshape(nb, 1, 1)
            else:
                # H = A_LL^-1 A_LG, HS = H S^-1 and (A^-1)_LL = A_LL^-1 + HS H', a chunk of blocks at a
                # time: H is not needed after, so only a chunk of it is ever held beside HS
                bm = self.bmax
                hs = np.empty((nb, bm, g))
                inv_ll = np.empty((nb, bm, bm))
                step = max(1, _ENTRY_CHUNK // 4 // max(bm * g, 1))
                for a in range(0, nb, step):
                    c = slice(a, min(a + step, nb))
                    h = fac.linv_t[c] @ fac.f_blocks[c]
                    hs[c] = (h.reshape(h.shape[0] * bm, g) @ sigma_inv).reshape(h.shape)
                    inv_ll[c] = fac.linv_t[c] @ fac.linv[c] + hs[c] @ np.swapaxes(h, 1, 2)
            valid = self.owner_l >= 0
            diag_ll = np.diagonal(inv_ll, axis1=1, axis2=2).ravel()
            np.add.at(tr_inv, self.owner_l[valid], diag_ll[valid])
            if self.n0:  # the term eliminated first: (A^-1)_ee = (1 + f_e' S^-1 f_e) / D_e
                z0, q0 = self._diagonal_inverse(fac, inv_ll, hs, sigma_inv)
                tr_inv[self.diag] = float(np.sum((1.0 + q0) / fac.t0.d))
            if lev is None:
                return tr_inv, lev
            s_lb = fac.s_lb
            inv_ll = (inv_ll * (s_lb[:, :, None] * s_lb[:, None, :])).ravel()
            lev += self.ll_cell.sum_of(lambda part: inv_ll[self.ll_idx[part]])
            if fac.sparse:
                def hs_lg(part):
                    return hs_nz[self.lg_nz[part]] * s_lb[self.lg_row[part], 0] * s_g[self.lg_col[part]]
            else:
                step = max(1, _ENTRY_CHUNK // 4 // max(self.bmax * g, 1))
                for a in range(0, nb, step):  # in place, a chunk at a time: hs is not read again
                    hs[a:a + step] *= s_lb[a:a + step, :, None] * s_g[None, None, :]
                flat = hs.ravel()

                def hs_lg(part):
                    return flat[self.lg_idx[part]]
            lev -= 2.0 * self.lg_cell.sum_of(lambda part: _times(hs_lg(part), _part(self.lg_val, part)))
            if self.n0:
                lev += self._diagonal_leverage(fac, z0, q0)
        return tr_inv, lev

    def _sparse_traces(self, fac: _Factor) -> np.ndarray:
        """The traces alone on the sparse path (scalar blocks, no cell term). With H = A_LL^-1 A_LG,
        (A^-1)_LL = A_LL^-1 + H S^-1 H', so a local term's trace is sum 1/a_ll + tr(S^-1 H_k'H_k): a sparse
        g x g product read at its non-zeros against the lower triangle of S^-1, not the nb x g dense product
        H S^-1 that the leverages need."""
        from scipy import sparse as sp

        nb, g, gr = self.nb, self.g, self.gr
        low = _lower_inverse_from_cholesky(fac.chol_s)
        tr_inv = np.zeros(self.n_terms)
        np.add.at(tr_inv, self.owner_g[:gr], np.diagonal(low)[:gr])
        valid = self.owner_l >= 0
        np.add.at(tr_inv, self.owner_l[valid], (1.0 / fac.a_ll)[valid])
        h_nz = fac.a_lg_sp.data / fac.a_ll[self.nz_row]
        for k in np.unique(self.owner_l[valid]):
            rows = (self.owner_l == k)[self.nz_row]
            h_k = sp.csr_matrix((np.where(rows, h_nz, 0.0), self.nz_col, self.nz_indptr), shape=(nb, g))
            gram = (h_k.T @ h_k).tocoo()
            hi, lo = np.maximum(gram.row, gram.col), np.minimum(gram.row, gram.col)
            tr_inv[k] += float(np.sum(gram.data * low[hi, lo]))
        return tr_inv

    def _diagonal_inverse(self, fac: _Factor, inv_ll, hs, sigma_inv) -> tuple[np.ndarray, np.ndarray]:
        """For the term eliminated first: z = S^-1 f_e at each entry of its pattern (S the rest of A after
        the elimination, f_e the row of F0), and q_e = f_e' S^-1 f_e. S^-1 is known in the blocks' terms:
        inv_ll within a block, -hs between a block and the global effects, sigma_inv among the globals, and
        f_e lies within one block and the global effects (the term is nested in the grouping)."""
        bm, n0 = self.bmax, self.n0
        f_l, gf = fac.t0.f_l.data, fac.t0.f_g.data  # f at the local and at the global entries
        blk = self.blk0
        fl = np.zeros((n0, bm))
        lpos = self.t0_lcol % max(bm, 1)
        fl[self.t0_lrow, lpos] = f_l
        ge, gc = self.t0_grow, self.t0_gcol
        if n0 * bm * bm <= 4_000_000:
            z_l = np.einsum("epq,eq->ep", inv_ll[blk], fl)
        else:  # large blocks: one product per block, not a copy of its inverse for every level
            z_l = np.empty_like(fl)
            order = np.argsort(blk, kind="stable")
            bounds = np.searchsorted(blk[order], np.arange(self.nb + 1))
            for b in range(self.nb):
                rows = order[bounds[b]:bounds[b + 1]]
                if rows.size:
                    z_l[rows] = fl[rows] @ inv_ll[b].T
        if self.t0_pairs is None:
            self.t0_pairs = _RowPairs(self.t0_gptr, gc, self.g)
        z = np.empty(f_l.size + gf.size)  # in the pattern's layout: local entries, then global ones
        z_g = self.t0_pairs.product(gc, gf, sigma_inv, out=z[f_l.size:])
        # the block-global coupling -hs at each global entry of f (a row of bm values), in chunks of
        # entries: all at once, two (entries x bm) arrays were most of a many-term fit's memory (SummEval's
        # 31 terms: 537,584 entries x 628 = 2.7 GB each)
        step = max(1, _ENTRY_CHUNK // max(bm, 1))
        for a in range(0, ge.size, step):
            e = ge[a:a + step]  # sorted (CSR rows): each level's entries are contiguous
            starts = np.flatnonzero(np.r_[True, e[1:] != e[:-1]])
            # worked in pieces of whole levels, a quarter of the chunk each: a level's sum is the same, and
            # the (entries x bm) temporaries a quarter of the size
            cuts = np.unique(starts[np.minimum(np.searchsorted(starts, np.arange(0, e.size, max(1, step // 4))),
                                               starts.size - 1)])
            for lo, hi in zip(cuts, np.r_[cuts[1:], e.size], strict=True):
                ep, sl = e[lo:hi], slice(a + lo, a + hi)
                hs_e = hs[blk[ep], :, gc[sl]]
                z_g[sl] -= np.einsum("np,np->n", hs_e, fl[ep])
                first = np.flatnonzero(np.r_[True, ep[1:] != ep[:-1]])
                z_l[ep[first]] -= np.add.reduceat(gf[sl, None] * hs_e, first, axis=0)
        z_at_l = z[:f_l.size]
        z_at_l[:] = z_l[self.t0_lrow, lpos]
        del z_l, fl, lpos
        # q = sum of f * z over each level's entries, local ones first
        q = np.zeros(n0)
        np.add.at(q, self.t0_lrow, f_l * z_at_l)
        np.add.at(q, self.t0_grow, gf * z_g)
        return z, q

    def _diagonal_leverage(self, fac: _Factor, z: np.ndarray, q: np.ndarray) -> np.ndarray:
        """The eliminated term's share of each cell's leverage: s0^2 (A^-1)_ee + 2 s0 (A^-1)_e,rest m_c,
        with (A^-1)_e,rest = -D_e^-1/2 f_e' S^-1 (the rest's share, m_c' S^-1 m_c, the blocks give)."""
        t = fac.t0
        s_rest = np.concatenate([fac.s_l, fac.s_g])
        cross = self.t0_cell.sum_of(lambda part: _times(s_rest[self.t0_col[part]] * z[self.t0_nz[part]],
                                                        _part(self.t0_val, part)))
        e = self.lev0
        return t.s0**2 * (1.0 + q[e]) / t.d[e] - 2.0 * t.s0 * cross / t.sqrt_d[e]

    def logdet_derivatives(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For a problem without fixed effects (p = 0) and weights W (``count``): the derivatives of
        log|A|, A = Lambda' Z' W Z Lambda + I, in theta at fixed W, and in each cell's W_c at fixed theta.

        d/dtheta_k = (2 / theta_k)(q_k - tr_k(A^-1)); d/dW_c = g_c' A^-1 g_c (g_c the cell's row of Z Lambda),
        both with the cell term in closed form. These are the pieces of the Laplace deviance's gradient.
        """
        theta = np.asarray(theta, dtype=np.float64)
        fac = self._factorise(theta)
        tr_inv, lev = self._inverse_parts(fac)
        d_theta = np.zeros(self.n_terms)
        for k in self.others:
            if theta[k] > 0:
                d_theta[k] = (2.0 / theta[k]) * (self.sizes[k] - tr_inv[k])
        d_w = lev.copy()
        if self.cell_term is not None:
            k, dc, w_c = self.cell_term, fac.dc, self.count
            d_theta[k] = 2.0 * theta[k] * np.sum((w_c / dc) * (1.0 - w_c * lev / dc))
            d_w = theta[k] ** 2 / dc + lev / dc**2
        return d_theta, d_w

    def solve(self, fac: _Factor, r_l: np.ndarray, r_g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A^-1 r for a right-hand side in the (local, global) layout."""
        return fac.backward(*fac.forward(r_l, r_g))

    def _average_information(self, theta, fac: _Factor, x_l, x_g, fit, u_sq, r2: float, x_0=None) -> dict:
        """The average-information Hessian in theta and the information matrix of the variances."""
        # v_k: the cell-level vector Z_k u_k; Q_kl = v_k' P v_l = v_k'W v_l - (M'W v_k)' A^-1 (M'W v_l).
        # The vectors are made when used, a term's over all cells for its half solve and all of them over a
        # chunk of cells for v'W v: kept together with their weighted copy they were the peak of a large fit.
        m, dfree = self.m, self.n_obs - self.p
        resid = self.mean - fit
        xl_flat = x_l.ravel() if self.nb else np.zeros(0)
        terms = self.n_terms + 1  # the terms', then the residual's (cell means of the conditional residuals)

        def vector(k: int, cells: slice) -> np.ndarray:
            if k == self.n_terms:
                return resid[cells] / fac.dc[cells]
            if k == self.cell_term:
                return theta[k] * self.count[cells] * resid[cells] / fac.dc[cells]
            if k == self.diag:
                return x_0[self.lev0[cells]]
            if k in self.g_off:
                return x_g[self.g_off[k] + self.levels[k][cells]]
            return xl_flat[self.block_of_cell[cells] * self.bmax + self.slots_l_of[k][cells]]

        halves = None
        s0 = self._s0(theta)
        everything = slice(None)
        for k in range(terms):
            f0, fl, fg = fac.forward3(*self._rhs(fac.w * vector(k, everything), fac.s_l, fac.s_g, s0))
            if halves is None:
                halves = np.empty((terms, f0.size + fl.size + fg.size))
            halves[k] = np.concatenate([f0, fl.ravel(), fg])
        quad_all = None
        for a in range(0, m, _CELL_CHUNK):
            cells = slice(a, min(a + _CELL_CHUNK, m))
            vecs = np.stack([vector(k, cells) for k in range(terms)])
            part = (vecs * fac.w[cells]) @ vecs.T
            quad_all = part if quad_all is None else quad_all + part
        quad_all = quad_all - halves @ halves.T
        quad_all[-1, -1] += self.ss_within
        quad = quad_all[:-1, :-1]
        # Average information for phi = (sigma2_1..sigma2_K, sigma2): I_kl = y'P V_k P V_l P y / 2
        # with t_k = V_k P y = Z_k u_k / theta_k (sigma units: P = P0 / sigma2), t_e = P y.
        sig2 = r2 / dfree
        inv_th = np.append(np.divide(1.0, theta, out=np.full_like(theta, np.nan), where=theta > 0), 1.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            information = quad_all * np.outer(inv_th, inv_th) / (2.0 * sig2**3)
        # d2/dtheta_k dtheta_l = 4 theta_k theta_l d2/dgamma_k dgamma_l at a stationary point, where
        # theta_k a_k = |u_k|^2 / theta_k (a_k = y'P Z_k Z_k' P y): finite as theta_k -> 0.
        u_bar = np.divide(u_sq, theta, out=np.zeros_like(u_sq), where=theta > 0)
        ai = 4.0 * dfree * (quad / r2 - np.outer(u_bar, u_bar) / r2**2)
        return {"information": information, "hessian": 0.5 * (ai + ai.T)}


@dataclass
class _Factor:
    """One factorisation of A at theta, and the two triangular half-solves with it."""

    dc: np.ndarray
    w: np.ndarray
    s_l: np.ndarray
    s_g: np.ndarray
    logdet: float  # log|L|^2 of the cell term and the local blocks (the Schur part is added by the caller)
    nb: int
    sparse: bool = False
    s_lb: np.ndarray | None = None
    a_ll: np.ndarray | None = None
    a_lg_sp: object = None
    f_sp: object = None
    linv_vec: np.ndarray | None = None
    linv: np.ndarray | None = None
    linv_t: np.ndarray | None = None
    f_blocks: np.ndarray | None = None
    f_flat: np.ndarray | None = None
    chol_s: np.ndarray | None = None
    inverse_parts: tuple[np.ndarray, np.ndarray] | None = None  # (traces, leverages), once computed
    t0: _Diagonal | None = None  # the term eliminated before the blocks, if any

    def forward3(self, r0, rl, rg):
        """Half solve with the eliminated term first: (f0, fl, fg)."""
        if self.t0 is None:
            return np.zeros(0), *self.forward(rl, rg)
        f0 = r0 / self.t0.sqrt_d
        rl = rl - (self.t0.f_l.T @ f0).reshape(rl.shape)
        return f0, *self.forward(rl, rg - self.t0.f_g.T @ f0)

    def backward3(self, f0, fl, fg):
        """The other half solve: (x0, xl, xg) = A^-1 rhs."""
        xl, xg = self.backward(fl, fg)
        if self.t0 is None:
            return np.zeros(0), xl, xg
        return (f0 - self.t0.f_l @ xl.ravel() - self.t0.f_g @ xg) / self.t0.sqrt_d, xl, xg

    def forward(self, rl, rg):
        """Half solve: L^-1 rhs, for quadratic forms rhs' A^-1 rhs."""
        if self.sparse:
            fl = self.linv_vec[:, None] * rl
            return fl, solve_triangular(self.chol_s, rg - self.f_sp.T @ fl[:, 0], lower=True, check_finite=False)
        if self.nb:
            fl = (self.linv @ rl[:, :, None])[:, :, 0]
            return fl, solve_triangular(self.chol_s, rg - self.f_flat.T @ fl.ravel(), lower=True, check_finite=False)
        return np.zeros((0, 0)), solve_triangular(self.chol_s, rg, lower=True, check_finite=False)

    def backward(self, fl, fg):
        """Half solve: L'^-1, completing A^-1 rhs."""
        xg = solve_triangular(self.chol_s, fg, lower=True, trans="T", check_finite=False)
        if self.sparse:
            return self.linv_vec[:, None] * (fl - (self.f_sp @ xg)[:, None]), xg
        xl = (self.linv_t @ (fl - self.f_blocks @ xg)[:, :, None])[:, :, 0] if self.nb else np.zeros((0, 0))
        return xl, xg


@dataclass
class _Diagonal:
    """The term eliminated before the blocks at one theta: A's diagonal for it (d), F0 = D^-1/2 B (its
    values as local and global matrices); F0'F0 is taken from the rest of A when it is made."""

    s0: float
    d: np.ndarray
    sqrt_d: np.ndarray
    f_l: object
    f_g: object


class _Cells:
    """The cell of every entry of a scatter (its entries are segments, one per pair of slots, each over the
    cells): an index array, or, when every segment runs over all m cells in order, nothing but their count
    (``reps``): then gathering a cell vector is a tile and summing per cell adds the segments, with no index
    kept (an index of every entry was a quarter of a large fit's memory)."""

    __slots__ = ("index", "m", "reps")

    def __init__(self, index: np.ndarray | None, reps: int, m: int):
        self.index, self.reps, self.m = index, reps, m

    @property
    def size(self) -> int:
        return self.reps * self.m if self.index is None else int(self.index.size)

    @property
    def nbytes(self) -> int:
        return 0 if self.index is None else int(self.index.nbytes)

    def take(self, v: np.ndarray) -> np.ndarray:
        """v at every entry's cell."""
        return np.tile(v, self.reps) if self.index is None else v[self.index]

    def take_part(self, v: np.ndarray, part: slice) -> np.ndarray:
        """v at the cells of a slice of the entries (a whole segment, or all of them)."""
        if self.index is None:
            whole = part.start is None and part.stop is None
            return np.tile(v, self.reps) if whole else v if part.stop - part.start == self.m else \
                np.tile(v, self.reps)[part]
        return v[self.index[part]]

    def scatter(self, index: np.ndarray, v: np.ndarray, values: np.ndarray | None, n: int) -> np.ndarray:
        """The sums into ``n`` places (``index``, each entry's) of v at the entries' cells times their values
        (None: 1), added in entry order as ``np.bincount`` adds them; without an index a segment at a time,
        so no copy of v for every entry is made."""
        if self.index is not None:
            return _bincount(index, weights=_times(v[self.index], values), minlength=n)
        out = np.zeros(n)
        for k in range(self.reps):
            part = slice(k * self.m, (k + 1) * self.m)
            np.add.at(out, index[part], _times(v, _part(values, part)))
        return out

    def sum(self, values: np.ndarray) -> np.ndarray:
        """The entries' values summed per cell (in entry order, as ``np.bincount`` adds them)."""
        return self.sum_of(lambda part: values[part])

    def sum_of(self, values_at) -> np.ndarray:
        """:meth:`sum` of the values ``values_at(part)`` gives for a slice of the entries: one segment at a
        time when there is no index, so no temporary of every entry is made."""
        if self.index is not None:
            return _bincount(self.index, weights=values_at(slice(None)), minlength=self.m)
        out = np.zeros(self.m)
        for k in range(self.reps):
            out += values_at(slice(k * self.m, (k + 1) * self.m))
        return out


class _Segmented:
    """An entry array as segments, one per slot (or pair of slots), each over the cells: ``[part]`` for a
    segment's slice gives that segment, ``[:]`` all of them concatenated (made when asked, not kept)."""

    def __init__(self, sizes: list[int]):
        self.bounds = np.r_[0, np.cumsum(sizes)].astype(np.int64)

    @property
    def size(self) -> int:
        return int(self.bounds[-1])

    def parts(self) -> list[slice]:
        return [slice(int(a), int(b)) for a, b in zip(self.bounds[:-1], self.bounds[1:], strict=True)]

    def segment(self, k: int) -> np.ndarray:
        raise NotImplementedError

    def __getitem__(self, part: slice) -> np.ndarray:
        if part.start is None and part.stop is None:
            count = self.bounds.size - 1
            return np.concatenate([self.segment(k) for k in range(count)]) if count else np.zeros(0, np.int64)
        return self.segment(int(np.searchsorted(self.bounds, part.start)))


class _Segments(_Segmented):
    """Segments kept as the arrays they are (arrays the problem keeps for other uses, not a concatenated
    copy), each plus its shift when used (int64: the shifted values may pass the array's type)."""

    def __init__(self, segments: list[np.ndarray], shifts: list[int]):
        super().__init__([a.size for a in segments])
        self.segments, self.shifts = segments, shifts

    @property
    def nbytes(self) -> int:
        return 0  # views of arrays counted where they are kept

    def segment(self, k: int) -> np.ndarray:
        shift = self.shifts[k]
        return self.segments[k] + np.int64(shift) if shift else self.segments[k]


class _Plain(_Segmented):
    """One array as a single segment (a small problem's scatter, kept as it is)."""

    def __init__(self, array: np.ndarray):
        super().__init__([array.size])
        self.array = array

    @property
    def nbytes(self) -> int:
        return int(self.array.nbytes)

    def segment(self, k: int) -> np.ndarray:
        return self.array

    def __getitem__(self, part: slice) -> np.ndarray:
        return self.array[part]

    def add(self, values_at, minlength: int) -> np.ndarray:
        return _bincount(self.array, weights=values_at(slice(None)), minlength=minlength)


class _LazyIndex(_Segmented):
    """A scatter's index (where in A each entry adds), kept as how to make it rather than made: each segment
    the sum of per-cell arrays (kept anyway) times their strides, on the segment's cells (None: all m). An
    index of every entry was most of a large fit's memory (16 entries a cell with four global slots).
    :meth:`add` sums values into it as ``np.bincount`` would (``np.add.at`` adds in entry order)."""

    def __init__(self, segments: list[tuple[tuple[tuple[np.ndarray, int], ...], np.ndarray | None]], m: int):
        super().__init__([m if keep is None else keep.size for _, keep in segments])
        self.segments = segments

    @property
    def nbytes(self) -> int:
        return 0

    def segment(self, k: int) -> np.ndarray:
        terms, keep = self.segments[k]
        out = None
        for array, stride in terms:  # int64: the strides may pass int32's range
            term = (array if keep is None else array[keep]).astype(np.int64) * stride
            out = term if out is None else out + term
        return out

    def add(self, values_at, minlength: int) -> np.ndarray:
        out = np.zeros(minlength)
        for k, part in enumerate(self.parts()):
            np.add.at(out, self.segment(k), values_at(part))
        return out


def _pattern(rows: np.ndarray, cols: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct (row, col) entries of a sparse matrix in row-major order, and each input entry's place
    among them: (place, row, col). Made once per problem; each evaluation sums its values into it."""
    distinct, place = np.unique(rows.astype(np.int64) * width + cols, return_inverse=True)
    small = _index_dtype(max(int(distinct.size), width, int(rows.max(initial=0)) + 1))
    return place.astype(small), (distinct // width).astype(small), (distinct % width).astype(small)


def _row_pattern(rows: np.ndarray, n_rows: int, cols: list[np.ndarray], shifts: list[int], width: int,
                 chunk: int = 1 << 20) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_pattern` of the entries (rows[c], cols[s][c] + shifts[s]) for every slot s and cell c, in
    slot-major order, as ``_pattern(np.tile(rows, slots), np.concatenate(shifted cols), width)`` gives it,
    made a range of rows at a time: the rows of distinct ranges are distinct, so the ranges' patterns laid
    end to end are the whole one, and no 64-bit key, sort or inverse of every entry is made (they were the
    peak of a large fit)."""
    m, slots = rows.size, len(cols)
    total = m * slots
    small = _index_dtype(max(total, width, n_rows))
    order = np.argsort(rows, kind="stable")  # the cells by row
    sorted_rows = rows[order]
    place = np.empty(total, dtype=small)
    row_parts, col_parts = [], []
    per_range = max(1, chunk // max(slots, 1))
    lo, found = 0, 0
    while lo < m:
        hi = min(lo + per_range, m)
        if hi < m:  # end at the start of a row, taking at least one whole row
            hi = int(np.searchsorted(sorted_rows, sorted_rows[hi], side="left"))
            if hi == lo:
                hi = int(np.searchsorted(sorted_rows, sorted_rows[lo], side="right"))
        cells = order[lo:hi]
        key_rows = rows[cells].astype(np.int64) * width
        keys = np.concatenate([key_rows + c[cells] + shift for c, shift in zip(cols, shifts, strict=True)])
        distinct, inverse = np.unique(keys, return_inverse=True)
        for k in range(slots):
            place[k * m + cells] = found + inverse[k * cells.size:(k + 1) * cells.size]
        row_parts.append((distinct // width).astype(small))
        col_parts.append((distinct % width).astype(small))
        found += distinct.size
        lo = hi
    return place, np.concatenate(row_parts), np.concatenate(col_parts)


def _row_pointers(sorted_rows: np.ndarray, n_rows: int) -> np.ndarray:
    """CSR row pointers of entries sorted by row."""
    return np.searchsorted(sorted_rows, np.arange(n_rows + 1))


#: the index and value arrays a problem keeps for every evaluation (the size estimate counts them)
_SCATTER_ARRAYS = ("ll_idx", "ll_cell", "lg_idx", "lg_cell", "lg_val", "lg_row", "lg_col", "gg_idx", "gg_cell",
                   "gg_val", "rl_idx", "rl_cell", "rg_idx", "rg_cell", "rg_val", "t0_cell", "t0_col", "t0_val",
                   "t0_nz", "t0_lrow", "t0_lcol", "t0_grow", "t0_gcol")


def _bincount(idx: np.ndarray, weights: np.ndarray, minlength: int = 0) -> np.ndarray:
    """``np.bincount`` of weights, always float: with no index at all (a model whose only random term leaves no
    cell touching a global effect, e.g. one grouping factor and fixed effects) NumPy returns int64 zeros,
    which the in-place scalings of the factorisation cannot write floats into."""
    if minlength and idx.dtype != np.intp and idx.size:
        # a narrow index (int32) would be widened to a copy by bincount; np.add.at adds the weights in
        # the same order into the same zeros, so the sums are identical, without the copy
        out = np.zeros(minlength)
        try:
            np.add.at(out, idx, weights)
            return out
        except IndexError:  # an index beyond minlength: bincount's longer result
            pass
    return np.bincount(idx, weights=weights, minlength=minlength).astype(np.float64, copy=False)


def _times(a: np.ndarray, values: np.ndarray | None) -> np.ndarray:
    """a * values, where None stands for values that are all 1 (random effects' indicators and the
    intercept: no value array is kept for them)."""
    return a if values is None else a * values


def _part(values: np.ndarray | None, part: slice) -> np.ndarray | None:
    """A slice of an entry-value array, where None (all values 1) stays None."""
    return None if values is None else values[part]


def _index_dtype(n: int):
    """The smallest integer type indexing n things: int32 below 2^31 (halves the scatter-index memory)."""
    return np.int32 if n < 2**31 else np.int64


def _row_pairs(ptr: np.ndarray, cols: np.ndarray, n: int,
               chunk: int = 1 << 20) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For a CSR pattern (ptr, cols) of a matrix with n columns: every pair (a, b) of entries in one row,
    grouped by a (entry a's pairs are its row's entries in order), as (start of each entry's pairs, b,
    cols[a] * n + cols[b]); int32 where they fit. a itself is not kept: it is the group. Made once per
    problem, in chunks of rows so that the 64-bit temporaries stay small."""
    counts = np.diff(ptr).astype(np.int64)
    pairs = counts**2
    total = int(pairs.sum())
    small = np.int32 if max(int(cols.size), n * n) < 2**31 else np.int64
    b_out, flat_out = (np.empty(total, dtype=small) for _ in range(2))
    starts = np.zeros(int(cols.size) + 1, dtype=np.int64)
    np.cumsum(np.repeat(counts, counts), out=starts[1:])  # entry a has as many pairs as its row has entries
    cum = np.cumsum(pairs)
    start, at = 0, 0
    while start < counts.size:
        done = int(cum[start - 1]) if start else 0
        stop = max(int(np.searchsorted(cum, done + chunk, side="right")), start + 1)
        p = pairs[start:stop]
        first = np.repeat(ptr[start:stop].astype(np.int64), p)
        width = np.maximum(np.repeat(counts[start:stop], p), 1)
        k = np.arange(int(p.sum()), dtype=np.int64) - np.repeat(np.cumsum(p) - p, p)
        a, b = first + k // width, first + k % width
        end = at + a.size
        b_out[at:end] = b
        flat_out[at:end] = cols[a].astype(np.int64) * n + cols[b]
        start, at = stop, end
    return starts, b_out, flat_out


class _RowPairs:
    """Sums over the pairs of entries within each row of a CSR pattern (ptr, cols) of a matrix with n columns:
    :meth:`product` gives, at each entry (r, a), sum over the entries (r, b) of its row of mat[a, b] vals_b.

    Rows with up to :attr:`SHORT` entries are grouped by their length c and kept as (rows x c) entry
    indices: a product gathers c x c values a row, chunk by chunk, with nothing per pair kept (a fit with
    100,000 levels of 12 entries each kept 14.4M pairs, 110 MiB). Longer rows keep their pairs
    (:func:`_row_pairs`). Each entry's sum is formed as ``np.add.reduceat`` forms it over the kept pairs."""

    SHORT = 64

    def __init__(self, ptr: np.ndarray, cols: np.ndarray, n: int):
        counts = np.diff(ptr).astype(np.int64)
        idx = _index_dtype(int(cols.size))
        self.groups = [(ptr[rows][:, None] + np.arange(c)).astype(idx)
                       for c in np.unique(counts[(counts > 0) & (counts <= self.SHORT)])
                       for rows in [np.flatnonzero(counts == c)]]
        long_rows = np.flatnonzero(counts > self.SHORT)
        self.long = None
        if long_rows.size:
            lengths = counts[long_rows]
            entries = np.repeat(ptr[long_rows] - np.r_[0, np.cumsum(lengths)[:-1]], lengths) + np.arange(
                int(lengths.sum()))
            sub_ptr = np.r_[0, np.cumsum(lengths)]
            self.long = (entries, _row_pairs(sub_ptr, cols[entries], n))

    @property
    def nbytes(self) -> int:
        kept = sum(int(e.nbytes) for e in self.groups)
        if self.long is not None:
            kept += int(self.long[0].nbytes) + sum(int(a.nbytes) for a in self.long[1])
        return kept

    def product(self, cols: np.ndarray, vals: np.ndarray, mat: np.ndarray, chunk: int = 1 << 18,
                out: np.ndarray | None = None) -> np.ndarray:
        """The sums at every entry, written into ``out`` when given."""
        if out is None:
            out = np.zeros(cols.size)
        else:
            out[:] = 0.0
        for entries in self.groups:
            c = entries.shape[1]
            step = max(1, chunk // (c * c))
            for lo in range(0, entries.shape[0], step):
                e = entries[lo:lo + step]
                ce = cols[e]
                prod = mat[ce[:, :, None], ce[:, None, :]] * vals[e][:, None, :]  # (rows, a, b)
                # the first term plus the others' sum: how np.add.reduceat sums a segment, so the result is
                # the kept pairs' to the last bit
                out[e] = prod[:, :, 0] + np.add.reduce(prod[:, :, 1:], axis=-1) if c > 1 else prod[:, :, 0]
        if self.long is not None:
            entries, pairs = self.long
            out[entries] = _pairs_product(pairs, vals[entries], mat)
        return out


#: scatter entries (cells x slots^2) from which a problem keeps its scatters as segments (_Segmented)
_SEGMENTED_ENTRIES = 1 << 22

#: cells whose terms' vectors the average information forms at once (terms x cells values)
_CELL_CHUNK = 1 << 16

#: entries of the eliminated term's global pattern handled at once in its diagonal inverse (x bm values)
_ENTRY_CHUNK = 1 << 21


def _pairs_product(pairs: tuple[np.ndarray, np.ndarray, np.ndarray], vals: np.ndarray, mat: np.ndarray,
                   chunk: int = 1 << 21) -> np.ndarray:
    """At each entry (r, a) of a sparse matrix, the sum over the entries (r, b) of its row of
    mat[a, b] * vals_b (``pairs`` from :func:`_row_pairs`)."""
    starts, b, flat = pairs
    n = starts.size - 1
    out = np.zeros(n)
    values = mat.ravel()
    lo = 0
    while lo < n:  # chunks of whole entries: the gathered temporaries stay small
        hi = max(int(np.searchsorted(starts, starts[lo] + chunk, side="right")) - 1, lo + 1)
        hi = min(hi, n)
        p0, p1 = int(starts[lo]), int(starts[hi])
        if p1 > p0:
            prod = np.take(values, flat[p0:p1]) * vals[b[p0:p1]]
            out[lo:hi] = np.add.reduceat(prod, starts[lo:hi] - p0)
        lo = hi
    return out


def _cholesky(s: np.ndarray) -> np.ndarray:
    """The lower Cholesky factor (LAPACK potrf on a copy, upper triangle zeroed); LinAlgError when S is not
    positive definite. potrf directly: numpy's cholesky costs a third more at g ~ 1,000."""
    from scipy.linalg.lapack import dpotrf

    chol, info = dpotrf(s, lower=1, clean=1)
    if info != 0:
        raise np.linalg.LinAlgError("not positive definite")
    return chol


def _inverse_from_cholesky(chol: np.ndarray) -> np.ndarray:
    """S^-1 from its lower Cholesky factor, both triangles."""
    low = _lower_inverse_from_cholesky(chol)
    return np.tril(low) + np.tril(low, -1).T


def _lower_inverse_from_cholesky(chol: np.ndarray) -> np.ndarray:
    """The lower triangle of S^-1 (the upper one undefined) from its lower Cholesky factor: LAPACK potri,
    a third of a solve against I, without the symmetrising copy."""
    from scipy.linalg.lapack import dpotri

    if chol.shape[0] == 0:  # no global effect at all: LAPACK refuses a 0 x 0 matrix (and prints to stderr)
        return chol.copy()
    inv, info = dpotri(chol, lower=1)
    if info != 0:  # pragma: no cover - chol came from a successful factorisation
        return cho_solve((chol, True), np.eye(chol.shape[0]))
    return inv


def _functional(levels: np.ndarray, grouping: np.ndarray, size: int) -> bool:
    """Whether each level of a term falls within a single level of the grouping."""
    owner = np.full(size, -1, dtype=np.int64)
    owner[levels] = grouping
    return bool(np.all(owner[levels] == grouping))
