"""Kenward-Roger's small-sample inference for contrasts of the fixed effects of a variance-components model.

Kenward & Roger (1997), "Small sample inference for fixed effects from restricted maximum likelihood",
Biometrics 53, 983-997, as pbkrtest computes it for lme4 (Halekoh & Hojsgaard 2014, JSS 59(9)): with
V = sum_i sigma2_i G_i (G_i = Z_i Z_i' for each random term, the identity for the residual), Phi = (X'V^-1X)^-1,
P_i = X'V^-1 G_i V^-1 X, Q_ij = X'V^-1 G_i V^-1 G_j V^-1 X and W the inverse of the expected REML information
I_ij = tr(P G_i P G_j) / 2 (P = V^-1 - V^-1 X Phi X'V^-1),

    Phi_A = Phi + 2 Phi [sum_ij W_ij (Q_ij - P_i Phi P_j)] Phi          (KR eq. 4, R_ij = 0 for linear V)

is the adjusted covariance of beta-hat, and a single contrast l gets the denominator df of KR sec. 4 with
q = 1: A1 = A2 = a'Wa, a_i = l Phi P_i Phi l' / l Phi l'.

The matrices are dense in the judgments (as in pbkrtest), so the method is offered up to :data:`MAX_ROWS`
judgments; beyond that Satterthwaite's df (which work on the cells) are the method.

This module is pure: arrays in, arrays out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.linalg import cho_factor, cho_solve

from ..errors import DesignError

#: judgments above which the dense n x n computation is refused (five n x n work arrays: 640 MB at 4,000)
MAX_ROWS = 4000


@dataclass(frozen=True)
class KenwardRoger:
    """The adjusted covariance ``phi_adjusted`` of beta-hat and what each contrast's df need."""

    phi: np.ndarray
    phi_adjusted: np.ndarray
    p_mats: np.ndarray  # components x p x p
    w: np.ndarray  # components x components

    def df(self, contrasts: np.ndarray) -> np.ndarray:
        """Kenward-Roger denominator df of each row l of ``contrasts`` (q = 1: KR sec. 4, A1 = A2)."""
        out = []
        for row in np.atleast_2d(contrasts):
            phil = self.phi @ row
            var = float(row @ phil)
            if var <= 0:
                out.append(np.inf)
                continue
            a = np.einsum("p,ipq,q->i", phil, self.p_mats, phil) / var
            a2 = float(a @ self.w @ a)
            out.append(_ddf_one(a2))
        return np.array(out)


def _ddf_one(a2: float) -> float:
    """KR's df for q = 1 from A1 = A2 (g = -1, c1 = -1/7, c2 = 2/7, c3 = 4/7; B = 7 A2 / 2)."""
    if a2 <= 0:
        return np.inf
    b = 3.5 * a2
    e_star = 1.0 / (1.0 - a2)
    v_star = 2.0 * (1.0 - b / 7.0) / ((1.0 - 2.0 * b / 7.0) ** 2 * (1.0 - 4.0 * b / 7.0))
    rho = v_star / (2.0 * e_star**2)
    return float(4.0 + 3.0 / (rho - 1.0)) if rho > 1 else np.inf


def kenward_roger(x: np.ndarray, levels: list[np.ndarray], sigma2: np.ndarray) -> KenwardRoger:
    """Kenward-Roger quantities for y = X beta + sum_t Z_t b_t + e with random intercept terms whose level of each
    judgment is ``levels[t]`` (integer codes) and variances ``sigma2`` (the terms', then the residual's)."""
    n = x.shape[0]
    if n > MAX_ROWS:
        raise DesignError(f"Kenward-Roger's df need dense {n:,} x {n:,} matrices (as pbkrtest's do), more than the "
                          f"{MAX_ROWS:,} judgments offered; use Satterthwaite's df (the default), which work on the "
                          "cells at any size and agree with Kenward-Roger's closely on large designs.")
    # each component's root R_i (G_i = R_i R_i'): the indicator matrix of a term's levels, the identity for the
    # residual
    roots = [_indicator(lev) for lev in levels] + [np.eye(n)]
    v = sum(s2 * (r @ r.T) for r, s2 in zip(roots, sigma2, strict=True))
    vinv = cho_solve(cho_factor(v, lower=True), np.eye(n))
    vinv_x = vinv @ x
    phi = np.linalg.inv(x.T @ vinv_x)
    proj = vinv - vinv_x @ phi @ vinv_x.T
    rvx = [r.T @ vinv_x for r in roots]  # R_i' V^-1 X
    p_mats = np.array([a.T @ a for a in rvx])
    p_roots = [proj @ r for r in roots]
    v_roots = [vinv @ r for r in roots]
    k = len(roots)
    info = np.zeros((k, k))
    lam = np.zeros_like(phi)
    for i in range(k):
        for j in range(k):
            rpr = roots[i].T @ p_roots[j]  # R_i' P R_j: I_ij = tr(P G_i P G_j) / 2 = |R_i' P R_j|^2 / 2
            info[i, j] = 0.5 * float(np.sum(rpr * rpr))
    w = np.linalg.inv(info)
    for i in range(k):
        for j in range(k):
            q_ij = rvx[i].T @ (roots[i].T @ v_roots[j]) @ rvx[j]
            lam += w[i, j] * (q_ij - p_mats[i] @ phi @ p_mats[j])
    adjusted = phi + 2.0 * phi @ lam @ phi
    return KenwardRoger(phi, adjusted, p_mats, w)


def _indicator(levels: np.ndarray) -> np.ndarray:
    z = np.zeros((levels.size, int(levels.max()) + 1))
    z[np.arange(levels.size), levels] = 1.0
    return z
