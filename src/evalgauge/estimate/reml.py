"""REML estimation of variance components for crossed and nested random intercepts.

The model (TEE sec. 3.3 and C.6, fitted there with lme4::lmer) is

    y = X beta + sum_k Z_k b_k + e,   b_k ~ N(0, sigma2_k I),  e ~ N(0, sigma2 I),

with X treatment-coded fixed effects (temperature, a judge panel, position) and
one random-intercept term per random effect of the design. The criterion is
lme4's profiled REML deviance (Bates et al. 2015, eq. 41):

    d(theta) = log|L_theta|^2 + log|R_X|^2 + (n - p) [1 + log(2 pi r^2(theta) / (n - p))],

theta_k = sigma_k / sigma, minimised over theta >= 0 with its exact gradient.

Three reductions make it fast without changing the criterion:

1. Observations enter only through cell sufficient statistics (count, mean,
   within-cell sum of squares), since every term is constant within a cell.
2. The cell term (the effect of all facets together, when the model has it) has
   one level per cell, so it is eliminated in closed form: the remaining
   problem sees cell means with weights n_c / (1 + theta_c^2 n_c).
3. The rest is block-arrow shaped: choosing a grouping column g, every term
   whose levels each fall within one level of g is *local* to that level's
   block, the others are *global*. Blocks are factorised in one batched call and
   only a Schur complement of the global effects (and X) is dense.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
from scipy.linalg import cho_solve, solve_triangular
from scipy.optimize import minimize
from threadpoolctl import threadpool_limits

from ..data import Judgments, as_judgments, format_rows, numeric_scores, require_columns
from ..errors import DesignError
from .model import MixedModel, Term

LOG_2PI = math.log(2 * math.pi)


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
                f"{judgments.source}: column '{col}' is empty on {rows.size} row(s): {format_rows(rows)}. "
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
    cell_codes = {col: codes[k][first] for k, col in enumerate(columns)}
    return CellData(int(y.size), count, mean, float(dev @ dev), cell_codes, labels)


def term_levels(cells: CellData, term: Term) -> tuple[np.ndarray, int]:
    """Level index (0..q-1) of a term at each cell: observed combinations only, as lme4."""
    if len(term.columns) == 1:
        c, u = pd.factorize(cells.codes[term.columns[0]], sort=True)
    else:
        dims = tuple(len(cells.labels[col]) for col in term.columns)
        key = np.ravel_multi_index(tuple(cells.codes[col] for col in term.columns), dims)
        c, u = pd.factorize(key, sort=True)
    return np.asarray(c, dtype=np.int64), len(u)


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


# ---------------------------------------------------------------------------
# The REML problem: structure fixed at set-up, numbers at each evaluation
# ---------------------------------------------------------------------------

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
    """

    def __init__(self, n_obs: int, count: np.ndarray, mean: np.ndarray, ss_within: float,
                 x: np.ndarray, levels: list[np.ndarray], sizes: list[int], cell_term: int | None,
                 group_of: list[np.ndarray | None] | None = None):
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

    def _cost(self, local: set[int], grouping: np.ndarray | None) -> float:
        g_size = sum(self.sizes[k] for k in self.others if k not in local) + self.p
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

    def _index(self) -> None:
        """Positions of every effect and the scatter indices of all cross-products."""
        m = self.m
        cells = np.arange(m)
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
        slots_l = [(k, pos_of[k][1][self.levels[k]]) for k in self.local]
        slots_g = [(("r", k), g_off[k] + self.levels[k], None) for k in self.glob]
        slots_g += [(("x", j), np.full(m, self.gr + j), self.x[:, j]) for j in range(self.p)]
        self.slots_l, self.slots_g = slots_l, slots_g
        b, bm, g = self.block_of_cell, self.bmax, self.g
        ll_idx, ll_cell = [], []
        for _, pk in slots_l:
            for _, pl in slots_l:
                ll_idx.append(b * bm * bm + pk * bm + pl)
                ll_cell.append(cells)
        lg_idx, lg_cell, lg_val = [], [], []
        for _, pk in slots_l:
            for _, gi, xv in slots_g:
                lg_idx.append(b * bm * g + pk * g + gi)
                lg_cell.append(cells)
                lg_val.append(np.ones(m) if xv is None else xv)
        gg_idx, gg_cell, gg_val = [], [], []
        for _, gi, xi in slots_g:
            for _, gj, xj in slots_g:
                gg_idx.append(gi * g + gj)
                gg_cell.append(cells)
                gg_val.append((np.ones(m) if xi is None else xi) * (np.ones(m) if xj is None else xj))
        def cat(parts):
            return (np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64))
        self.ll_idx, self.ll_cell = cat(ll_idx), cat(ll_cell)
        self.lg_idx, self.lg_cell = cat(lg_idx), cat(lg_cell)
        self.lg_val = cat(lg_val) if lg_val else np.zeros(0)
        self.gg_idx, self.gg_cell = cat(gg_idx), cat(gg_cell)
        self.gg_val = cat(gg_val) if gg_val else np.zeros(0)
        self.lg_row = self.lg_idx // (bm * g) if bm else self.lg_idx
        self.lg_col = self.lg_idx % g if g else self.lg_idx
        #: the sparse path pays off when blocks are scalars and the dense coupling would be large
        self.sparse_ok = bm == 1 and self.nb * g > 200_000
        self.rl_idx = cat([b * bm + pk for _, pk in slots_l])
        self.rl_cell = cat([cells for _ in slots_l])
        self.rg_idx = cat([gi for _, gi, _ in slots_g])
        self.rg_cell = cat([cells for _ in slots_g])
        self.rg_val = cat([np.ones(m) if xv is None else xv for _, _, xv in slots_g]) if slots_g else np.zeros(0)
        # which term owns each effect position (for theta scaling and per-term sums)
        self.owner_l = np.full(self.nb * bm, -1, dtype=np.int64)
        for k, pk in slots_l:
            self.owner_l[b * bm + pk] = k
        self.owner_g = np.full(g, -1, dtype=np.int64)
        for k in self.glob:
            self.owner_g[g_off[k]:g_off[k] + self.sizes[k]] = k
        self.g_off = g_off

    def with_data(self, mean: np.ndarray, ss_within: float) -> RemlProblem:
        """The same design with other cell means and within-cell sum of squares (for resampling)."""
        clone = copy.copy(self)
        clone.mean = mean
        clone.ss_within = ss_within
        return clone

    # -- one evaluation ---------------------------------------------------------
    def _rhs(self, wv: np.ndarray, s_l: np.ndarray, s_g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """M' (w * v) for a cell vector: the right-hand side of a solve, split local/global."""
        r_g = s_g * np.bincount(self.rg_idx, weights=wv[self.rg_cell] * self.rg_val, minlength=self.g)
        if not self.nb:
            return np.zeros((0, 0)), r_g
        r_l = s_l * np.bincount(self.rl_idx, weights=wv[self.rl_cell], minlength=self.nb * self.bmax)
        return r_l.reshape(self.nb, self.bmax), r_g

    def with_weights(self, weights: np.ndarray, response: np.ndarray) -> RemlProblem:
        """The same design as a weighted penalized least-squares problem (one PIRLS step of a GLMM)."""
        clone = copy.copy(self)
        clone.count = weights
        clone.mean = response
        clone.ss_within = 0.0
        return clone

    def evaluate(self, theta: np.ndarray, gradient: bool = False, hessian: bool = False,
                 pls: bool = False) -> Evaluation:
        """Profiled REML deviance at theta; with ``gradient`` its exact gradient, with
        ``hessian`` also the average-information approximation of its Hessian."""
        theta = np.asarray(theta, dtype=np.float64)
        n, m, p = self.n_obs, self.m, self.p
        nb, bm, g, gr = self.nb, self.bmax, self.g, self.gr
        tc2 = theta[self.cell_term] ** 2 if self.cell_term is not None else 0.0
        dc = 1.0 + tc2 * self.count
        w = self.count / dc
        th_ext = np.append(theta, 1.0)  # index -1 -> 1 (X columns, padding)
        s_l = th_ext[self.owner_l] if nb else np.zeros(0)
        s_g = np.where(self.owner_g >= 0, th_ext[self.owner_g], 1.0)
        ybar = self.mean
        a_gg = np.bincount(self.gg_idx, weights=w[self.gg_cell] * self.gg_val, minlength=g * g).reshape(g, g)
        a_gg *= np.outer(s_g, s_g)
        a_gg[np.arange(gr), np.arange(gr)] += 1.0
        r_l, r_g = self._rhs(w * ybar, s_l, s_g)
        logdet = float(np.sum(np.log(dc)))
        sparse = nb and bm == 1 and self.sparse_ok
        if sparse:
            # One effect per block (e.g. students crossed with instructors): the blocks are scalars and
            # the coupling A_LG is sparse, so F'F costs the square of the non-zeros per row, not g^2.
            from scipy import sparse as sp

            s_lb = s_l.reshape(nb, 1)
            a_ll = s_l**2 * np.bincount(self.ll_idx, weights=w[self.ll_cell], minlength=nb) + 1.0
            linv_vec = 1.0 / np.sqrt(a_ll)
            data = w[self.lg_cell] * self.lg_val * s_l[self.lg_row] * s_g[self.lg_col]
            a_lg_sp = sp.csr_matrix((data, (self.lg_row, self.lg_col)), shape=(nb, g))
            f_sp = sp.diags(linv_vec) @ a_lg_sp
            s_mat = a_gg - (f_sp.T @ f_sp).toarray()
            logdet += float(np.sum(np.log(a_ll)))
        elif nb:
            s_lb = s_l.reshape(nb, bm)
            a_ll = np.bincount(self.ll_idx, weights=w[self.ll_cell], minlength=nb * bm * bm).reshape(nb, bm, bm)
            a_ll *= s_lb[:, :, None] * s_lb[:, None, :]
            a_ll[:, np.arange(bm), np.arange(bm)] += 1.0
            a_lg = np.bincount(self.lg_idx, weights=w[self.lg_cell] * self.lg_val,
                               minlength=nb * bm * g).reshape(nb, bm, g)
            a_lg *= s_lb[:, :, None] * s_g[None, None, :]
            chol_l = np.linalg.cholesky(a_ll)
            linv = np.linalg.inv(chol_l)  # lower triangular
            linv_t = np.swapaxes(linv, 1, 2)
            f_blocks = linv @ a_lg  # L^-1 A_LG, (nb, bm, g)
            f_flat = f_blocks.reshape(nb * bm, g)
            s_mat = a_gg - f_flat.T @ f_flat
            logdet += 2.0 * float(np.sum(np.log(np.diagonal(chol_l, axis1=1, axis2=2))))
        else:
            s_mat = a_gg
        try:
            chol_s = np.linalg.cholesky(s_mat)
        except np.linalg.LinAlgError:
            raise DesignError("the fixed effects are not estimable with these data (X'V^-1 X is singular); "
                              "remove fixed terms whose levels never occur.") from None

        def forward(rl, rg):
            """Half solve: L^-1 rhs, for quadratic forms rhs' A^-1 rhs."""
            if sparse:
                fl = linv_vec[:, None] * rl
                return fl, solve_triangular(chol_s, rg - f_sp.T @ fl[:, 0], lower=True)
            if nb:
                fl = (linv @ rl[:, :, None])[:, :, 0]
                return fl, solve_triangular(chol_s, rg - f_flat.T @ fl.ravel(), lower=True)
            return np.zeros((0, 0)), solve_triangular(chol_s, rg, lower=True)

        def backward(fl, fg):
            xg = solve_triangular(chol_s, fg, lower=True, trans="T")
            if sparse:
                return linv_vec[:, None] * (fl - (f_sp @ xg)[:, None]), xg
            xl = (linv_t @ (fl - f_blocks @ xg)[:, :, None])[:, :, 0] if nb else np.zeros((0, 0))
            return xl, xg

        f_l, f_g = forward(r_l, r_g)
        diag_s = np.log(np.diagonal(chol_s))
        logdet += 2.0 * float(np.sum(diag_s[:gr]))
        logdet_rx = 2.0 * float(np.sum(diag_s[gr:]))
        r2 = self.ss_within + float(w @ ybar**2) - float(np.sum(f_l**2)) - float(f_g @ f_g)
        r2 = max(r2, 1e-300)
        dfree = n - p
        dev = logdet + logdet_rx + dfree * (1.0 + LOG_2PI + math.log(r2 / dfree))
        x_l, x_g = backward(f_l, f_g)
        out = Evaluation(dev, None, r2 / dfree, x_g[gr:], r2)
        lx_inv = solve_triangular(chol_s[gr:, gr:], np.eye(p), lower=True)
        out.extra = {"beta_cov": (r2 / dfree) * (lx_inv.T @ lx_inv)}
        if pls:
            # the penalised least-squares solution: fitted values (cell term included), |u|^2, log|L|^2
            fit = np.bincount(self.rg_cell, weights=(s_g * x_g)[self.rg_idx] * self.rg_val, minlength=m)
            penalty = float(x_g[:gr] @ x_g[:gr])
            if nb:
                fit += np.bincount(self.rl_cell, weights=(s_l * x_l.ravel())[self.rl_idx], minlength=m)
                penalty += float(np.sum(x_l**2))
            if self.cell_term is not None:
                v = theta[self.cell_term] * self.count * (ybar - fit) / dc
                fit = fit + theta[self.cell_term] * v
                penalty += float(v @ v)
            out.extra.update({"fitted": fit, "penalty": penalty, "logdet": logdet})
        if not gradient:
            return out
        # -- exact gradient in theta ----------------------------------------------
        sigma_inv = _inverse_from_cholesky(chol_s)
        u_sq = np.zeros(self.n_terms)
        tr_inv = np.zeros(self.n_terms)
        np.add.at(u_sq, self.owner_g[:gr], x_g[:gr] ** 2)
        np.add.at(tr_inv, self.owner_g[:gr], np.diagonal(sigma_inv)[:gr])
        fit = np.bincount(self.rg_cell, weights=(s_g * x_g)[self.rg_idx] * self.rg_val, minlength=m)
        lev = np.bincount(self.gg_cell, weights=(np.outer(s_g, s_g) * sigma_inv).ravel()[self.gg_idx]
                          * self.gg_val, minlength=m)
        if nb:
            if sparse:
                h_sp = sp.diags(1.0 / a_ll) @ a_lg_sp  # A_LL^-1 A_LG
                hs = np.asarray(h_sp @ sigma_inv).reshape(nb, 1, g)
                inv_diag = 1.0 / a_ll + np.asarray(h_sp.multiply(hs[:, 0, :]).sum(axis=1)).ravel()
                inv_ll = inv_diag.reshape(nb, 1, 1)
            else:
                h = linv_t @ f_blocks  # A_LL^-1 A_LG
                hs = (h.reshape(nb * bm, g) @ sigma_inv).reshape(nb, bm, g)
                inv_ll = linv_t @ linv + hs @ np.swapaxes(h, 1, 2)
            valid = self.owner_l >= 0
            np.add.at(u_sq, self.owner_l[valid], x_l.ravel()[valid] ** 2)
            diag_ll = np.diagonal(inv_ll, axis1=1, axis2=2).ravel()
            np.add.at(tr_inv, self.owner_l[valid], diag_ll[valid])
            fit += np.bincount(self.rl_cell, weights=(s_l * x_l.ravel())[self.rl_idx], minlength=m)
            lev += np.bincount(self.ll_cell, weights=(inv_ll * (s_lb[:, :, None] * s_lb[:, None, :])).ravel()
                               [self.ll_idx], minlength=m)
            lev -= 2.0 * np.bincount(self.lg_cell, weights=(hs * (s_lb[:, :, None] * s_g[None, None, :]))
                                     .ravel()[self.lg_idx] * self.lg_val, minlength=m)
        grad = np.zeros(self.n_terms)
        for k in self.others:
            if theta[k] > 0:
                grad[k] = (2.0 / theta[k]) * (self.sizes[k] - tr_inv[k] - dfree * u_sq[k] / r2)
        resid = ybar - fit
        if self.cell_term is not None:
            k = self.cell_term
            term1 = np.sum((self.count / dc) * (1.0 - self.count * lev / dc))
            term2 = np.sum(self.count**2 * resid**2 / dc**2)
            grad[k] = 2.0 * theta[k] * (term1 - dfree * term2 / r2)
            u_sq[k] = tc2 * term2
        out.gradient = grad
        out.extra["u_sq"] = u_sq
        if not hessian:
            return out
        # -- average information (AI) Hessian in theta ------------------------------
        # v_k: the cell-level vector Z_k u_k; Q_kl = v_k' P v_l = v_k'W v_l - (M'W v_k)' A^-1 (M'W v_l).
        vecs = np.zeros((self.n_terms, m))
        xl_flat = x_l.ravel() if nb else np.zeros(0)
        for k in self.glob:
            vecs[k] = x_g[self.g_off[k] + self.levels[k]]
        for k, pk in self.slots_l:
            vecs[k] = xl_flat[self.block_of_cell * bm + pk]
        if self.cell_term is not None:
            vecs[self.cell_term] = theta[self.cell_term] * self.count * resid / dc
        # the residual's vector: cell means of the conditional residuals
        e_bar = resid / dc
        vecs = np.vstack([vecs, e_bar])
        halves = []
        for k in range(self.n_terms + 1):
            fl, fg = forward(*self._rhs(w * vecs[k], s_l, s_g))
            halves.append(np.concatenate([fl.ravel(), fg]))
        halves = np.array(halves)
        quad_all = (vecs * w) @ vecs.T - halves @ halves.T
        quad_all[-1, -1] += self.ss_within
        quad = quad_all[:-1, :-1]
        # Average information for phi = (sigma2_1..sigma2_K, sigma2): I_kl = y'P V_k P V_l P y / 2
        # with t_k = V_k P y = Z_k u_k / theta_k (sigma units: P = P0 / sigma2), t_e = P y.
        sig2 = r2 / dfree
        inv_th = np.append(np.divide(1.0, theta, out=np.full_like(theta, np.nan), where=theta > 0), 1.0)
        out.extra["information"] = quad_all * np.outer(inv_th, inv_th) / (2.0 * sig2**3)
        # d2/dtheta_k dtheta_l = 4 theta_k theta_l d2/dgamma_k dgamma_l at a stationary point, where
        # theta_k a_k = |u_k|^2 / theta_k (a_k = y'P Z_k Z_k' P y): finite as theta_k -> 0.
        u_bar = np.divide(u_sq, theta, out=np.zeros_like(u_sq), where=theta > 0)
        ai = 4.0 * dfree * (quad / r2 - np.outer(u_bar, u_bar) / r2**2)
        out.extra["hessian"] = 0.5 * (ai + ai.T)
        return out


def _inverse_from_cholesky(chol: np.ndarray) -> np.ndarray:
    """S^-1 from its lower Cholesky factor (LAPACK potri: a third of a solve against I)."""
    from scipy.linalg.lapack import dpotri

    inv, info = dpotri(chol, lower=1)
    if info != 0:  # pragma: no cover - chol came from a successful factorisation
        return cho_solve((chol, True), np.eye(chol.shape[0]))
    return np.tril(inv) + np.tril(inv, -1).T


def _same_partition(a: np.ndarray, b: np.ndarray, q: int) -> bool:
    """Whether two level codings split the cells identically."""
    owner = np.full(q, -1, dtype=np.int64)
    owner[a] = b
    return bool(np.all(owner[a] == b)) and np.unique(owner).size == q


def _functional(levels: np.ndarray, grouping: np.ndarray, size: int) -> bool:
    """Whether each level of a term falls within a single level of the grouping."""
    owner = np.full(size, -1, dtype=np.int64)
    owner[levels] = grouping
    return bool(np.all(owner[levels] == grouping))


# ---------------------------------------------------------------------------
# Optimisation
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class RemlFit:
    theta: np.ndarray
    sigma2: float
    deviance: float
    beta: np.ndarray
    iterations: int
    evaluations: int
    converged: bool
    message: str
    seconds: float


def optimise(problem: RemlProblem, theta0: np.ndarray | None = None, progress=None) -> RemlFit:
    """Minimise the profiled REML deviance over theta >= 0.

    Newton steps with the average-information Hessian and the exact gradient do
    the work, with step halving so the deviance never rises and no parameter
    shrinking by more than a factor of ten per step (so a component heading for
    zero gets there through L-BFGS-B rather than being clipped). L-BFGS-B with the
    exact gradient and bounds theta >= 0 then finishes. At theta_k = 0 the
    gradient in theta vanishes by symmetry, so every boundary estimate is
    checked with the one-sided derivative in theta_k^2 and released when the
    deviance falls away from zero.
    """
    # Small dense parts run faster on one BLAS thread: idle worker threads spinning
    # after each small GEMM slow the scatter-adds in between.
    with threadpool_limits(limits=1 if problem.g < SINGLE_THREAD_BELOW else None, user_api="blas"):
        return _optimise(problem, theta0, progress)


#: global dense size under which REML runs BLAS on one thread (measured on 2 cores)
SINGLE_THREAD_BELOW = 700


def _optimise(problem: RemlProblem, theta0: np.ndarray | None, progress=None) -> RemlFit:
    start = time.perf_counter()
    k = problem.n_terms
    theta = np.ones(k) if theta0 is None else np.asarray(theta0, dtype=float).copy()
    count = {"n": 0}

    def ev(t, hessian=False):
        count["n"] += 1
        if progress is not None:  # the caller decides whether (and how often) to show it
            progress(count["n"], time.perf_counter() - start)
        return problem.evaluate(t, gradient=True, hessian=hessian)

    theta, cur, info = _ai_newton(theta, ev)
    nit = info["n"]
    message = "average-information Newton converged" if info["converged"] else "AI Newton stopped early"
    keep_free: set[int] = set()
    for _ in range(k + 1):
        # components shrinking geometrically towards zero go to the boundary...
        small = [j for j in np.flatnonzero(theta < 1e-4 * max(float(theta.max()), 1e-12)) if j not in keep_free]
        changed = False
        if small and any(theta[j] > 0 for j in small):
            theta = theta.copy()
            theta[small] = 0.0
            changed = True
        # ...unless the deviance falls away from zero there
        released = _release_boundary(theta, problem)
        if released is not None:
            keep_free |= set(np.flatnonzero((released > 0) & (theta == 0)).tolist())
            theta = released
            changed = True
        if not changed:
            break
        theta, cur, info = _ai_newton(theta, ev)
        nit += info["n"]
    if not info["converged"]:
        theta, cur, res = _lbfgsb(theta, cur, ev)
        nit += int(res.nit)
        message = f"L-BFGS-B: {res.message}"
        info["converged"] = bool(res.success)
    final = problem.evaluate(theta)
    return RemlFit(theta, final.sigma2, final.deviance, final.beta, nit, count["n"], bool(info["converged"]),
                   message, time.perf_counter() - start)


def _lbfgsb(theta, cur, ev):
    def fun(t):
        e = ev(np.maximum(t, 0.0))
        return e.deviance, e.gradient

    res = minimize(fun, theta, jac=True, method="L-BFGS-B", bounds=[(0.0, None)] * theta.size,
                   options={"maxiter": 1000, "ftol": 1e-13, "gtol": 1e-9, "maxcor": 20})
    if res.fun <= cur.deviance:
        theta = np.maximum(res.x, 0.0)
        cur = ev(theta)
    return theta, cur, res


def _release_boundary(theta: np.ndarray, problem: RemlProblem) -> np.ndarray | None:
    """Move off zero any component whose one-sided derivative says the deviance falls there."""
    scale = max(float(theta.max()), 1e-3)
    out = None
    for k in np.flatnonzero(theta <= 1e-8 * scale):
        eps = 1e-4 * scale
        probe = theta.copy()
        probe[k] = eps
        slope = problem.evaluate(probe, gradient=True).gradient[k] / (2 * eps)  # d deviance / d theta_k^2
        if slope < 0:
            out = theta.copy() if out is None else out
            out[k] = 0.1 * scale
    return out


def _ai_newton(theta: np.ndarray, ev, max_iter: int = 50) -> tuple[np.ndarray, Evaluation, dict]:
    cur = ev(theta, hessian=True)
    info = {"n": 0, "converged": False}
    for it in range(max_iter):
        info["n"] = it + 1
        g = cur.gradient
        free = theta > 0
        if not free.any():
            break
        hess = cur.extra["hessian"][np.ix_(free, free)]
        try:
            step = -np.linalg.solve(hess + 1e-10 * np.trace(hess) * np.eye(int(free.sum())), g[free])
        except np.linalg.LinAlgError:
            break
        if not np.all(np.isfinite(step)) or g[free] @ step >= 0:
            break  # the AI matrix is not positive definite here: leave it to L-BFGS-B
        alpha, accepted = 1.0, False
        while alpha > 1e-3:
            cand = theta.copy()
            cand[free] = np.maximum(theta[free] + alpha * step, 0.1 * theta[free])
            trial = ev(cand, hessian=True)
            if trial.deviance <= cur.deviance:
                accepted = True
                break
            alpha *= 0.5
        if not accepted:
            break
        change = cur.deviance - trial.deviance
        theta, cur = cand, trial
        if change < 1e-12 * max(1.0, abs(cur.deviance)):
            info["converged"] = True
            break
    return theta, cur, info


# ---------------------------------------------------------------------------
# From data to VarianceComponents
# ---------------------------------------------------------------------------

def fit_reml(data, model: MixedModel, *, object_facet: str | None = None,
             fixed_facets: tuple[str, ...] = (), method_reason: str = "REML (requested)",
             facet_order: tuple[str, ...] | None = None, n_boot: int = 0, level: float = 0.95,
             seed: int | None = None, progress=None):
    """REML variance components of ``model`` on ``data`` (a judgments table or data frame).

    ``progress(size, evaluations, seconds)``, when given, is called at every evaluation of the criterion
    with a one-line description of the model's size (judgments, cells, random effects, the dense part).
    """
    from ..components import Component, FitSummary, VarianceComponents

    judgments = as_judgments(data)
    cells = cell_data(judgments, model)
    notes = list(cells.notes)
    terms, levels, sizes, cell_term, confounded = random_structure(cells, model, notes)
    x, x_names, dropped = fixed_matrix(cells, model)
    if dropped:
        notes.append(f"fixed-effect columns not estimable from these data were dropped: {', '.join(dropped)}.")
    if cells.n_obs - x.shape[1] <= 0:
        raise DesignError("more fixed-effect columns than observations.")
    group_of = []
    for col in dict.fromkeys(c for t in terms for c in t.columns):
        code, _ = pd.factorize(cells.codes[col])
        group_of.append(np.asarray(code, dtype=np.int64))
    problem = RemlProblem(cells.n_obs, cells.count, cells.mean, cells.ss_within, x, levels, sizes, cell_term,
                          group_of)
    size = (f"REML: {cells.n_obs:,} judgments in {problem.m:,} cells; {len(terms)} random term(s) with "
            f"{int(sum(sizes)):,} effects ({problem.g:,} in the dense part)")
    report = None if progress is None else (lambda n, sec: progress(size, n, sec))
    try:
        with np.errstate(invalid="ignore", divide="ignore"):
            fit = optimise(problem, progress=report)
    except (np.linalg.LinAlgError, ValueError):
        # lme4 stops here too ("Downdated VtV is not positive definite"): the data leave the model degenerate
        raise DesignError("the REML fit broke down numerically (a matrix that should be positive definite was "
                          "not). This happens when the scores are explained exactly by the facets (no variation "
                          "left within cells) or a level has a single judgment; check the scores, drop terms "
                          "(`terms`, `max_order`=2) or the sparse levels.") from None
    if not fit.converged:
        notes.append(f"the optimiser stopped before converging ({fit.message}); check the estimates, try a "
                     "simpler model (fewer terms), or rescale the scores.")
    components = []
    for term, th in zip(terms, fit.theta, strict=True):
        value = float(th**2 * fit.sigma2)
        components.append(Component(term.name, term.columns, value, math.nan, math.nan, "random"))
        if th == 0.0:
            notes.append(f"{term.name}: boundary estimate (exactly 0, a singular fit); the data are consistent "
                         "with no variance from this term.")
    cov_random = _covariance(problem, fit)
    se = np.sqrt(np.clip(np.diag(cov_random), 0.0, None))
    components = [replace(c, se=float(v)) for c, v in zip(components, se[:-1], strict=True)]
    fixed_components, marginal = _fixed_sensitivity(cells, model, x, x_names, fit.beta, fixed_facets)
    components += fixed_components
    components.append(Component("residual", tuple(dict.fromkeys(c for t in model.random for c in t.columns)),
                                float(fit.sigma2), float(cells.n_obs - x.shape[1]), math.nan, "residual",
                                confounded, se=float(se[-1])))
    # the covariance in components order: random terms, fixed sensitivities (unknown), residual
    k = len(terms)
    n_fixed = len(fixed_components)
    order = list(range(k)) + [None] * n_fixed + [k]
    cov = np.full((len(order), len(order)), math.nan)
    for i, a in enumerate(order):
        for j, b in enumerate(order):
            if a is not None and b is not None:
                cov[i, j] = cov_random[a, b]
    final = problem.evaluate(fit.theta)
    weights = marginal["weights"]
    mean_se = float(math.sqrt(max(weights @ final.extra["beta_cov"] @ weights, 0.0))) if weights.size else math.nan
    order = [c for c in (facet_order or ()) if c in cells.labels] + [c for c in model.columns
                                                                      if c not in (facet_order or ())]
    level_counts = {col: _total_levels(cells, col, dict(model.nesting)) for col in order}
    result = VarianceComponents(
        method="reml",
        n_obs=cells.n_obs,
        grand_mean=float(np.sum(cells.count * cells.mean) / cells.n_obs),
        components=tuple(components),
        levels=level_counts,
        replicates=round(cells.n_obs / cells.n_cells),
        object=object_facet,
        fixed=tuple(fixed_facets),
        nesting=dict(model.nesting),
        notes=tuple(notes),
        method_reason=method_reason,
        reml=FitSummary("reml", fit.deviance, tuple(fit.theta.tolist()), dict(zip(x_names, fit.beta.tolist(),
                                                                               strict=True)),
                        fit.iterations, fit.evaluations, fit.converged, model.formula(), message=fit.message,
                        seconds=fit.seconds, cells=cells.n_cells,
                        boundary=tuple(t.name for t, th in zip(terms, fit.theta, strict=True) if th == 0.0),
                        marginal_mean=float(weights @ fit.beta) if weights.size else math.nan,
                        marginal_mean_se=mean_se, beta_cov=final.extra["beta_cov"]),
        covariance=cov,
    )
    if n_boot:
        result = _reml_bootstrap(result, problem, fit, x, n_boot, level, seed)
    return result


def _total_levels(cells: CellData, column: str, nesting: dict[str, str]) -> int:
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


def _covariance(problem: RemlProblem, fit: RemlFit) -> np.ndarray:
    """Covariance of (sigma2_1..sigma2_K, sigma2) from the inverse average information.

    The average-information matrix (Gilmour, Thompson & Cullis 1995) is the
    REML information used by ASReml and WOMBAT; on balanced data it reproduces
    the exact normal-theory variance of the ANOVA estimator (tested). Boundary
    components (exactly 0) get no SE and are left out of the inversion.
    """
    info = problem.evaluate(fit.theta, gradient=True, hessian=True).extra["information"]
    k = problem.n_terms
    free = np.append(fit.theta > 0, True)
    out = np.full((k + 1, k + 1), math.nan)
    try:
        cov = np.linalg.inv(info[np.ix_(free, free)])
    except np.linalg.LinAlgError:
        return out
    out[np.ix_(free, free)] = cov
    return out


#: the REML problem and the start of the refits, per bootstrap worker process
_REFIT: dict = {}


def bootstrap_workers(n_boot: int) -> int:
    """Processes for a REML bootstrap: one per core (EVALGAUGE_WORKERS overrides), one for short runs."""
    import os

    env = os.environ.get("EVALGAUGE_WORKERS")
    if env and env.isdigit():
        return max(1, int(env))
    return min(os.cpu_count() or 1, 8) if n_boot >= 40 else 1


def _init_refits(problem: RemlProblem, start: np.ndarray) -> None:
    _REFIT["problem"], _REFIT["start"] = problem, start


def _refit_one(data: tuple[np.ndarray, float]) -> tuple[np.ndarray, float] | None:
    """Refit one resample, warm-started at the estimates: (theta, sigma2), or None if the fit failed."""
    mean, ss_w = data
    boot = _REFIT["problem"].with_data(mean, ss_w)
    try:
        with np.errstate(invalid="ignore", divide="ignore"):
            refit = optimise(boot, _REFIT["start"])
    except (DesignError, np.linalg.LinAlgError, ValueError):
        return None
    return refit.theta, float(refit.sigma2)


def _reml_bootstrap(result, problem: RemlProblem, fit: RemlFit, x: np.ndarray, n_boot: int, level: float,
                    seed: int | None):
    """Parametric bootstrap: simulate cell statistics from the fit and refit, n_boot times.

    For normal data the cell means and the within-cell sum of squares are
    sufficient and independent, so each resample draws the random effects,
    the cell means' errors N(0, sigma2 / n_c) and SS_within ~ sigma2 chi^2(n - m)
    and refits the same problem structure, starting from the estimates.
    """
    from .anova import _with_percentiles

    rng = np.random.default_rng(seed)
    sigma2 = fit.sigma2
    var = fit.theta**2 * sigma2
    eta = x @ fit.beta
    m = problem.m
    random_names = [c.name for c in result.components if c.kind == "random"]
    # every resample's data drawn here, in order: the draws are the same whatever the number of workers
    datasets = []
    for _ in range(n_boot):
        mean = eta.copy()
        for k in range(problem.n_terms):
            if var[k] > 0:
                mean += rng.normal(0.0, math.sqrt(var[k]), problem.sizes[k])[problem.levels[k]]
        mean += rng.normal(0.0, 1.0, m) * np.sqrt(sigma2 / problem.count)
        ss_w = sigma2 * rng.chisquare(problem.n_obs - m) if problem.n_obs > m else 0.0
        datasets.append((mean, ss_w))
    start = np.maximum(fit.theta, 1e-3)
    workers = bootstrap_workers(n_boot)
    if workers > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        ctx = multiprocessing.get_context("fork") if "fork" in multiprocessing.get_all_start_methods() else None
        with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_refits, initargs=(problem, start)) as ex:
            refits = list(ex.map(_refit_one, datasets, chunksize=max(1, n_boot // (8 * workers))))
    else:
        _init_refits(problem, start)
        refits = [_refit_one(d) for d in datasets]
    draws = np.full((n_boot, len(result.components)), math.nan)
    failed = 0
    for b, refit in enumerate(refits):
        if refit is None:
            failed += 1
            continue
        theta_b, sigma2_b = refit
        row = dict(zip(random_names, list(theta_b**2 * sigma2_b), strict=True))
        row["residual"] = sigma2_b
        draws[b] = [row.get(c.name, math.nan) for c in result.components]
    info = {"method": "parametric bootstrap (simulate cell statistics from the REML fit, refit)",
            "level": level, "resamples": n_boot, "seed": seed, "failed": failed, "workers": workers,
            "note": "fixed-effect sensitivity indices are not resampled"}
    return _with_percentiles(result, draws, level, info)


def _fixed_sensitivity(cells: CellData, model: MixedModel, x: np.ndarray, x_names: list[str], beta: np.ndarray,
                       fixed_facets: tuple[str, ...]):
    """TEE eq. C.4 sensitivity indices of the fixed terms, from the estimated fixed effects.

    The fitted fixed part is evaluated on the full grid of the fixed columns'
    levels and decomposed into main effects and interactions by centring
    (each level weighted equally); a term's index is the mean square of its
    effects, (1/L) sum (tau_l - tau_bar)^2 for a main effect.
    """
    from ..components import Component

    if not model.fixed:
        weights = np.zeros(len(x_names))
        if "(Intercept)" in x_names:
            weights[x_names.index("(Intercept)")] = 1.0
        return [], {"weights": weights}
    cols = list(dict.fromkeys(c for t in model.fixed for c in t.columns))
    dims = [len(cells.labels[c]) for c in cols]
    grid = np.indices(dims).reshape(len(cols), -1)
    eta = np.zeros(grid.shape[1])
    weights = np.zeros(len(x_names))  # the equally weighted mean over the grid of fixed levels, as x' beta
    for j, name in enumerate(x_names):
        if name == "(Intercept)":
            weights[j] = 1.0
            continue
        mask = np.ones(grid.shape[1], dtype=bool)
        for part in name.split(":"):
            col = next(c for c in cols if part.startswith(c) and
                       any(part == f"{c}{lab}" for lab in cells.labels[c]))
            lab_idx = [f"{col}{lab}" for lab in cells.labels[col]].index(part)
            mask &= grid[cols.index(col)] == lab_idx
        eta += beta[j] * mask
        weights[j] = mask.mean()
    table = eta.reshape(dims)
    out = []
    for term in model.fixed:
        axes = [cols.index(c) for c in term.columns]
        effect = _centred_effect(table, axes)
        out.append(Component(term.name, term.columns, float(np.mean(effect**2)), float(np.prod(
            [d - 1 for d in (dims[a] for a in axes)])), math.nan, "fixed"))
    return out, {"weights": weights}


def _centred_effect(table: np.ndarray, axes: list[int]) -> np.ndarray:
    """The interaction (or main) effect of ``axes`` in an equally weighted table (Moebius inversion)."""
    from itertools import combinations

    def marginal(keep):
        drop = tuple(a for a in range(table.ndim) if a not in keep)
        return table.mean(axis=drop, keepdims=True) if drop else table

    out = np.zeros([1] * table.ndim)
    for r in range(len(axes) + 1):
        for sub in combinations(axes, r):
            out = out + (-1) ** (len(axes) - r) * marginal(set(sub))
    return out
