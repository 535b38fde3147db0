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

    ``seconds`` assumes about a dozen evaluations (Newton steps with the exact gradient and the
    average-information Hessian converge in 6-15 on the designs of ``bench/``) at a rate measured on
    a 2-core machine; it is an order of magnitude, shown so that a user can stop an unaffordable fit.
    """

    n_obs: int
    cells: int
    effects: int
    dense: int  # random effects (and fixed columns) in the dense Schur part
    blocks: int
    block_size: int
    flops: float  # per evaluation of the criterion with its gradient
    memory: int  # bytes of the dense work arrays of one evaluation

    #: floating-point operations per second of the dense factorisations, and seconds per cell and
    #: evaluation of the scatter-adds (bench/bench_reml.py, 2-core machine)
    RATE = 1.5e10
    PER_CELL = 2e-6
    EVALUATIONS = 12

    @property
    def seconds(self) -> float:
        return self.EVALUATIONS * (self.flops / self.RATE + self.PER_CELL * self.cells)

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


def available_memory() -> int | None:
    """Bytes of memory a new allocation can have now: Linux's MemAvailable (free memory plus the page cache
    it can reclaim; the free pages alone understate it on a machine that has read large files), else the
    free physical pages, or None where the system does not say."""
    import os

    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - platforms without these names
        return None


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
        self.nz_row = None  # the sparse path's pattern, made on its first use (_sparse_pattern)
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

    def _sparse_pattern(self) -> None:
        """The fixed non-zero pattern of the scalar blocks' coupling A_LG (CSR, rows sorted) and each
        cross-product entry's place in it: each evaluation fills the values without re-sorting."""
        g = self.g
        key = self.lg_row.astype(np.int64) * g + self.lg_col
        uniq, self.lg_nz = np.unique(key, return_inverse=True)
        self.nz_row, self.nz_col = uniq // g, uniq % g
        self.nz_indptr = np.searchsorted(self.nz_row, np.arange(self.nb + 1))

    def size(self) -> ModelSize:
        """How big one evaluation is: effects, the dense part, the batched blocks, and their memory."""
        g, nb, bm = self.g, self.nb, self.bmax
        sparse = nb and bm == 1 and self.sparse_ok
        dense_lg = 0 if sparse else nb * bm * g  # A_LG, L^-1 A_LG, A_LL^-1 A_LG and its product with S^-1
        scatter = sum(a.size for a in (self.ll_idx, self.lg_idx, self.gg_idx, self.rl_idx, self.rg_idx))
        memory = 8 * (4 * dense_lg + 4 * nb * bm * bm + 4 * g * g) + 16 * scatter + 64 * self.m
        flops = self._cost(set(self.local), self.grouping) if self.local else g**3 / 3
        return ModelSize(self.n_obs, self.m, int(sum(self.sizes)), g, nb, bm, float(flops), int(memory))

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
        clone._pinned = None  # a factorisation depends on the weights
        clone.count = weights
        clone.mean = response
        clone.ss_within = 0.0
        return clone

    def evaluate(self, theta: np.ndarray, gradient: bool = False, hessian: bool = False,
                 pls: bool = False) -> Evaluation:
        """Profiled REML deviance at theta (Bates et al. 2015, eq. 41); with ``gradient`` its exact gradient,
        with ``hessian`` also the average-information approximation of its Hessian; with ``pls`` the
        penalised least-squares solution (fitted values, |u|^2, log|L|^2) a GLMM's PIRLS step needs."""
        theta = np.asarray(theta, dtype=np.float64)
        fac = self._factor_at(theta)
        f_l, f_g = fac.forward(*self._rhs(fac.w * self.mean, fac.s_l, fac.s_g))
        diag_s = np.log(np.diagonal(fac.chol_s))
        logdet = fac.logdet + 2.0 * float(np.sum(diag_s[:self.gr]))
        logdet_rx = 2.0 * float(np.sum(diag_s[self.gr:]))
        r2 = self.ss_within + float(fac.w @ self.mean**2) - float(np.sum(f_l**2)) - float(f_g @ f_g)
        r2 = max(r2, 1e-300)
        dfree = self.n_obs - self.p
        dev = logdet + logdet_rx + dfree * (1.0 + LOG_2PI + math.log(r2 / dfree))
        x_l, x_g = fac.backward(f_l, f_g)
        out = Evaluation(dev, None, r2 / dfree, x_g[self.gr:], r2)
        lx_inv = solve_triangular(fac.chol_s[self.gr:, self.gr:], np.eye(self.p), lower=True)
        out.extra = {"beta_cov": (r2 / dfree) * (lx_inv.T @ lx_inv)}
        if pls:
            out.extra.update(self._pls(theta, fac, x_l, x_g, logdet))
            out.extra.update(x_l=x_l, x_g=x_g, factor=fac)
        if gradient:
            fit = self._fitted(fac, x_l, x_g)
            out.gradient, u_sq = self._gradient(theta, fac, x_l, x_g, fit, r2)
            out.extra["u_sq"] = u_sq
            if hessian:
                out.extra.update(self._average_information(theta, fac, x_l, x_g, fit, u_sq, r2))
        return out

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
        a_gg = np.bincount(self.gg_idx, weights=w[self.gg_cell] * self.gg_val, minlength=g * g).reshape(g, g)
        a_gg *= np.outer(s_g, s_g)
        a_gg[np.arange(gr), np.arange(gr)] += 1.0
        fac = _Factor(dc=dc, w=w, s_l=s_l, s_g=s_g, logdet=float(np.sum(np.log(dc))), nb=nb)
        if nb and bm == 1 and self.sparse_ok:
            # One effect per block (e.g. students crossed with instructors): the blocks are scalars and
            # the coupling A_LG is sparse, so F'F costs the square of the non-zeros per row, not g^2.
            from scipy import sparse as sp

            fac.sparse = True
            fac.s_lb = s_l.reshape(nb, 1)
            fac.a_ll = s_l**2 * np.bincount(self.ll_idx, weights=w[self.ll_cell], minlength=nb) + 1.0
            fac.linv_vec = 1.0 / np.sqrt(fac.a_ll)
            if self.nz_row is None:
                self._sparse_pattern()
            data = w[self.lg_cell] * self.lg_val * s_l[self.lg_row] * s_g[self.lg_col]
            nz = np.bincount(self.lg_nz, weights=data, minlength=self.nz_row.size)  # in the fixed CSR pattern
            fac.a_lg_sp = sp.csr_matrix((nz, self.nz_col, self.nz_indptr), shape=(nb, g))
            fac.f_sp = sp.diags(fac.linv_vec) @ fac.a_lg_sp
            s_mat = a_gg - (fac.f_sp.T @ fac.f_sp).toarray()
            fac.logdet += float(np.sum(np.log(fac.a_ll)))
        elif nb:
            fac.s_lb = s_l.reshape(nb, bm)
            a_ll = np.bincount(self.ll_idx, weights=w[self.ll_cell], minlength=nb * bm * bm).reshape(nb, bm, bm)
            a_ll *= fac.s_lb[:, :, None] * fac.s_lb[:, None, :]
            a_ll[:, np.arange(bm), np.arange(bm)] += 1.0
            a_lg = np.bincount(self.lg_idx, weights=w[self.lg_cell] * self.lg_val,
                               minlength=nb * bm * g).reshape(nb, bm, g)
            a_lg *= fac.s_lb[:, :, None] * s_g[None, None, :]
            chol_l = np.linalg.cholesky(a_ll)
            fac.linv = np.linalg.inv(chol_l)  # lower triangular
            fac.linv_t = np.swapaxes(fac.linv, 1, 2)
            fac.f_blocks = fac.linv @ a_lg  # L^-1 A_LG, (nb, bm, g)
            fac.f_flat = fac.f_blocks.reshape(nb * bm, g)
            s_mat = a_gg - fac.f_flat.T @ fac.f_flat
            fac.logdet += 2.0 * float(np.sum(np.log(np.diagonal(chol_l, axis1=1, axis2=2))))
        else:
            s_mat = a_gg
        try:
            fac.chol_s = np.linalg.cholesky(s_mat)
        except np.linalg.LinAlgError:
            raise DesignError("the fixed effects are not estimable with these data (X'V^-1 X is singular); "
                              "remove fixed terms whose levels never occur.") from None
        return fac

    def _fitted(self, fac: _Factor, x_l: np.ndarray, x_g: np.ndarray) -> np.ndarray:
        """M Lambda u + X beta at each cell (the cell term left out)."""
        fit = np.bincount(self.rg_cell, weights=(fac.s_g * x_g)[self.rg_idx] * self.rg_val, minlength=self.m)
        if self.nb:
            fit += np.bincount(self.rl_cell, weights=(fac.s_l * x_l.ravel())[self.rl_idx], minlength=self.m)
        return fit

    def _pls(self, theta, fac: _Factor, x_l, x_g, logdet: float) -> dict:
        """The penalised least-squares solution: fitted values (cell term included), |u|^2, log|L|^2."""
        fit = self._fitted(fac, x_l, x_g)
        penalty = float(x_g[:self.gr] @ x_g[:self.gr]) + (float(np.sum(x_l**2)) if self.nb else 0.0)
        if self.cell_term is not None:
            v = theta[self.cell_term] * self.count * (self.mean - fit) / fac.dc
            fit = fit + theta[self.cell_term] * v
            penalty += float(v @ v)
            return {"fitted": fit, "penalty": penalty, "logdet": logdet, "u_cell": v}
        return {"fitted": fit, "penalty": penalty, "logdet": logdet}

    def _gradient(self, theta, fac: _Factor, x_l, x_g, fit, r2: float) -> tuple[np.ndarray, np.ndarray]:
        """The exact gradient of the profiled deviance in theta, and |u_k|^2 per term."""
        dfree = self.n_obs - self.p
        u_sq = self._u_squared(x_l, x_g)
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

    def _u_squared(self, x_l, x_g) -> np.ndarray:
        """|u_k|^2 of each term but the cell term (spherical random effects of the solution)."""
        u_sq = np.zeros(self.n_terms)
        np.add.at(u_sq, self.owner_g[:self.gr], x_g[:self.gr] ** 2)
        if self.nb:
            valid = self.owner_l >= 0
            np.add.at(u_sq, self.owner_l[valid], x_l.ravel()[valid] ** 2)
        return u_sq

    def _inverse_parts(self, fac: _Factor, leverages: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
        """Per term, the trace of its diagonal block of A^-1; per cell, the leverage m_c' A^-1 m_c (m_c the
        cell's row of [Z Lambda, X], the cell term left out), or None without ``leverages``."""
        nb, g, m, gr = self.nb, self.g, self.m, self.gr
        sigma_inv = _inverse_from_cholesky(fac.chol_s)
        tr_inv = np.zeros(self.n_terms)
        np.add.at(tr_inv, self.owner_g[:gr], np.diagonal(sigma_inv)[:gr])
        s_g = fac.s_g
        lev = None
        if leverages:
            lev = np.bincount(self.gg_cell, weights=(np.outer(s_g, s_g) * sigma_inv).ravel()[self.gg_idx]
                              * self.gg_val, minlength=m)
        if nb:
            if fac.sparse:
                from scipy import sparse as sp

                h_nz = fac.a_lg_sp.data / fac.a_ll[self.nz_row]  # A_LL^-1 A_LG at its non-zeros
                h_sp = sp.csr_matrix((h_nz, self.nz_col, self.nz_indptr), shape=(nb, g))
                # A_LL^-1 A_LG S^-1 is needed only at A_LG's own non-zeros (traces and leverages)
                hs_nz = np.asarray(h_sp @ sigma_inv)[self.nz_row, self.nz_col]
                inv_diag = 1.0 / fac.a_ll + np.bincount(self.nz_row, weights=h_nz * hs_nz, minlength=nb)
                inv_ll = inv_diag.reshape(nb, 1, 1)
            else:
                h = fac.linv_t @ fac.f_blocks  # A_LL^-1 A_LG
                hs = (h.reshape(nb * self.bmax, g) @ sigma_inv).reshape(nb, self.bmax, g)
                inv_ll = fac.linv_t @ fac.linv + hs @ np.swapaxes(h, 1, 2)
            valid = self.owner_l >= 0
            diag_ll = np.diagonal(inv_ll, axis1=1, axis2=2).ravel()
            np.add.at(tr_inv, self.owner_l[valid], diag_ll[valid])
            if lev is None:
                return tr_inv, lev
            s_lb = fac.s_lb
            lev += np.bincount(self.ll_cell, weights=(inv_ll * (s_lb[:, :, None] * s_lb[:, None, :])).ravel()
                               [self.ll_idx], minlength=m)
            if fac.sparse:
                hs_lg = hs_nz[self.lg_nz] * s_lb[self.lg_row, 0] * s_g[self.lg_col]
            else:
                hs_lg = (hs * (s_lb[:, :, None] * s_g[None, None, :])).ravel()[self.lg_idx]
            lev -= 2.0 * np.bincount(self.lg_cell, weights=hs_lg * self.lg_val, minlength=m)
        return tr_inv, lev

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

    def _average_information(self, theta, fac: _Factor, x_l, x_g, fit, u_sq, r2: float) -> dict:
        """The average-information Hessian in theta and the information matrix of the variances."""
        # v_k: the cell-level vector Z_k u_k; Q_kl = v_k' P v_l = v_k'W v_l - (M'W v_k)' A^-1 (M'W v_l).
        m, dfree = self.m, self.n_obs - self.p
        resid = self.mean - fit
        vecs = np.zeros((self.n_terms, m))
        xl_flat = x_l.ravel() if self.nb else np.zeros(0)
        for k in self.glob:
            vecs[k] = x_g[self.g_off[k] + self.levels[k]]
        for k, pk in self.slots_l:
            vecs[k] = xl_flat[self.block_of_cell * self.bmax + pk]
        if self.cell_term is not None:
            vecs[self.cell_term] = theta[self.cell_term] * self.count * resid / fac.dc
        # the residual's vector: cell means of the conditional residuals
        vecs = np.vstack([vecs, resid / fac.dc])
        halves = []
        for k in range(self.n_terms + 1):
            fl, fg = fac.forward(*self._rhs(fac.w * vecs[k], fac.s_l, fac.s_g))
            halves.append(np.concatenate([fl.ravel(), fg]))
        halves = np.array(halves)
        quad_all = (vecs * fac.w) @ vecs.T - halves @ halves.T
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

    def forward(self, rl, rg):
        """Half solve: L^-1 rhs, for quadratic forms rhs' A^-1 rhs."""
        if self.sparse:
            fl = self.linv_vec[:, None] * rl
            return fl, solve_triangular(self.chol_s, rg - self.f_sp.T @ fl[:, 0], lower=True)
        if self.nb:
            fl = (self.linv @ rl[:, :, None])[:, :, 0]
            return fl, solve_triangular(self.chol_s, rg - self.f_flat.T @ fl.ravel(), lower=True)
        return np.zeros((0, 0)), solve_triangular(self.chol_s, rg, lower=True)

    def backward(self, fl, fg):
        """Half solve: L'^-1, completing A^-1 rhs."""
        xg = solve_triangular(self.chol_s, fg, lower=True, trans="T")
        if self.sparse:
            return self.linv_vec[:, None] * (fl - (self.f_sp @ xg)[:, None]), xg
        xl = (self.linv_t @ (fl - self.f_blocks @ xg)[:, :, None])[:, :, 0] if self.nb else np.zeros((0, 0))
        return xl, xg


def _inverse_from_cholesky(chol: np.ndarray) -> np.ndarray:
    """S^-1 from its lower Cholesky factor (LAPACK potri: a third of a solve against I)."""
    from scipy.linalg.lapack import dpotri

    inv, info = dpotri(chol, lower=1)
    if info != 0:  # pragma: no cover - chol came from a successful factorisation
        return cho_solve((chol, True), np.eye(chol.shape[0]))
    return np.tril(inv) + np.tril(inv, -1).T


def _functional(levels: np.ndarray, grouping: np.ndarray, size: int) -> bool:
    """Whether each level of a term falls within a single level of the grouping."""
    owner = np.full(size, -1, dtype=np.int64)
    owner[levels] = grouping
    return bool(np.all(owner[levels] == grouping))
