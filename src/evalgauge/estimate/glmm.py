"""TEE section G robustness check for binary scores: a logit-link GLMM beside the LPM.

For binary scores the linear model is a linear probability model (LPM),
adequate for moderate base rates (TEE C.3). The check refits the same random
effects with a logit link, by the Laplace approximation with the fixed effects
estimated inside penalised iteratively reweighted least squares (PIRLS; lme4's
``glmer(..., nAGQ = 0)``), and compares the components' ranking: logit-scale
components against LPM components, with the level-1 (residual) variance fixed
at pi^2/3 (Nakagawa & Schielzeth 2010; TEE Table 11), each as its share of
Var(theta-hat) at the observed design, as Table 11 compares them. TEE reports
Spearman correlations of 0.91-0.99 between the two rankings of those shares on its
binary benchmarks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import minimize
from scipy.special import expit, xlogy
from scipy.stats import spearmanr

from ..components import Component, FitSummary, VarianceComponents
from ..data import as_judgments, numeric_scores
from ..errors import DesignError
from ..results import Result, json_safe
from ..vocabulary import RESIDUAL
from .cells import cell_data, fixed_matrix, grouping_candidates, random_structure
from .criterion import RemlProblem
from .model import MixedModel
from .optimise import blas_threads

LEVEL1 = math.pi**2 / 3


@dataclass(frozen=True)
class GlmmCheck(Result):
    """The LPM fit, the logit GLMM fit, and how their component rankings agree."""

    lpm: VarianceComponents
    glmm: VarianceComponents
    table: pd.DataFrame
    spearman: float

    def to_dict(self) -> dict[str, Any]:
        rows = self.table.to_dict(orient="records")
        return json_safe({"spearman": self.spearman, "components": rows, "lpm": self.lpm.to_dict(),
                          "glmm": self.glmm.to_dict()})

    def to_frame(self) -> pd.DataFrame:
        return self.table


def compare_lpm_glmm(lpm: VarianceComponents, glmm: VarianceComponents) -> GlmmCheck:
    """Each random component's share of Var(theta-hat) at the observed design under both links (TEE Table 11:
    the D-study decomposition of each fit, sigma2_k / d_k over their sum), their ranks, Spearman rho.

    The residual is in each Var(theta-hat) (on the logit scale fixed at pi^2/3, divided by its count) but left
    out of the ranking: on the logit scale it is a convention, not an estimate.
    """
    from ..dstudy import project

    names = [c.name for c in glmm.components if c.kind == "random"]
    lpm_shares, glmm_shares = project(lpm, object="").shares(), project(glmm, object="").shares()
    lpm_share = np.array([lpm_shares.get(n, 0.0) for n in names])
    glmm_share = np.array([glmm_shares.get(n, 0.0) for n in names])
    table = pd.DataFrame({
        "component": names,
        "lpm_variance": [lpm[n].variance for n in names],
        "glmm_variance": [glmm[n].variance for n in names],
        "lpm_share": lpm_share,
        "glmm_share": glmm_share,
        "lpm_rank": pd.Series(-lpm_share).rank(method="min").astype(int).to_numpy(),
        "glmm_rank": pd.Series(-glmm_share).rank(method="min").astype(int).to_numpy(),
    })
    rho = float(spearmanr(lpm_share, glmm_share).statistic) if len(names) > 2 else math.nan
    return GlmmCheck(lpm, glmm, table, rho)


def fit_glmm_logit(data, model: MixedModel) -> VarianceComponents:
    """Laplace-approximation logit GLMM with the model's random intercepts (nAGQ = 0 style).

    Components are on the logit scale; the residual row is the fixed level-1
    variance pi^2/3. Scores must be 0/1.
    """
    judgments = as_judgments(data)
    y = numeric_scores(judgments, model.response)
    if not np.isin(y, (0.0, 1.0)).all():
        bad = np.flatnonzero(~np.isin(y, (0.0, 1.0)))
        raise DesignError(f"{judgments.source}: the GLMM check needs binary scores (0/1), but '{model.response}' "
                          f"has other values, e.g. {y[bad[0]]:g} on row {bad[0] + 1}.")
    cells = cell_data(judgments, model)
    notes: list[str] = []
    terms, levels, sizes, cell_term, _ = random_structure(cells, model, notes)
    x, x_names, dropped = fixed_matrix(cells, model)
    if dropped:
        notes.append(f"fixed-effect columns not estimable were dropped: {', '.join(dropped)}.")
    # block-arrow, as the REML path, without eliminating a term first (the Laplace gradient reads the blocks)
    problem = RemlProblem(cells.n_obs, cells.count, cells.mean, 0.0, x, levels, sizes, cell_term,
                          grouping_candidates(cells, terms), diagonal=False)
    problem_u = RemlProblem(cells.n_obs, cells.count, cells.mean, 0.0, np.zeros((cells.n_cells, 0)), levels, sizes,
                            cell_term, grouping_candidates(cells, terms), diagonal=False)
    laplace = _Laplace(problem, cells.count, cells.mean, problem_u)
    theta = np.full(problem.n_terms, 0.5)
    # BLAS threads only where the dense part is large enough to use them (idle threads spinning between
    # small products cost more than they give; measured in bench/bench_glmm.py)
    with blas_threads(problem.g):
        res = _minimise_off_the_boundary(laplace, theta)
    theta = np.maximum(res.x, 0.0)
    if not res.success:
        notes.append(f"the GLMM optimiser stopped early ({res.message}); read the logit-scale ranking with care.")
    components = [Component(t.name, t.columns, float(th**2), math.nan, math.nan, "random")
                  for t, th in zip(terms, theta, strict=True)]
    notes += [f"{t.name}: boundary estimate (exactly 0, a singular fit, as glmer reports it); the data are "
              "consistent with no variance from this term on the logit scale." for t, th in zip(terms, theta,
                                                                                            strict=True) if th == 0.0]
    components.append(Component(RESIDUAL, (), LEVEL1, math.nan, math.nan, RESIDUAL))
    notes.append("logit scale: the residual is the logistic level-1 variance pi^2/3, fixed, not estimated.")
    return VarianceComponents(
        method="glmm-logit",
        n_obs=cells.n_obs,
        grand_mean=float(np.sum(cells.count * cells.mean) / cells.n_obs),
        components=tuple(components),
        levels={c: len(cells.labels[c]) for c in model.columns},
        replicates=round(cells.n_obs / cells.n_cells),
        notes=tuple(notes),
        method_reason="logit-link GLMM, Laplace approximation, fixed effects in PIRLS (lme4 nAGQ = 0)",
        reml=FitSummary("glmm-laplace", float(res.fun), tuple(theta.tolist()),
                        dict(zip(x_names, laplace.beta.tolist(), strict=True)), int(res.nit), laplace.calls,
                        bool(res.success), model.fitted(terms).formula(), message=str(res.message),
                        cells=cells.n_cells,
                        boundary=tuple(t.name for t, th in zip(terms, theta, strict=True) if th == 0.0)),
    )


#: where a component at zero is probed: the deviance is even in each theta_k, so its gradient there is 0 and a
#: gradient method that steps onto the boundary stops at a saddle (lme4's derivative-free bobyqa does not)
BOUNDARY_PROBES = (0.05, 0.2, 0.6, 1.5)


def _minimise_off_the_boundary(laplace, theta: np.ndarray, rounds: int = 5):
    """L-BFGS-B on the Laplace deviance, then each component at zero probed at a few values of theta_k: if the
    deviance falls there the optimiser starts again from the best probe (a zero gradient at theta_k = 0 is no
    proof of a minimum). The result whose deviance is least."""
    options = {"maxiter": 500, "ftol": 1e-12, "gtol": 1e-7}
    bounds = [(0.0, None)] * theta.size
    res = minimize(laplace.value_and_gradient, theta, method="L-BFGS-B", jac=True, bounds=bounds, options=options)
    for _ in range(rounds):
        at = np.maximum(res.x, 0.0)
        best, start = res.fun, None
        for k in np.flatnonzero(at == 0.0):
            for value in BOUNDARY_PROBES:
                probe = at.copy()
                probe[k] = value
                dev = laplace.value_and_gradient(probe)[0]
                if dev < best - 1e-9 * max(1.0, abs(best)):
                    best, start = dev, probe
        if start is None:
            break
        again = minimize(laplace.value_and_gradient, start, method="L-BFGS-B", jac=True, bounds=bounds,
                         options=options)
        if again.fun >= res.fun:
            break
        res = again
    return res


class _Laplace:
    """The Laplace deviance of a binomial-logit GLMM at theta (lme4's nAGQ = 0 criterion), by PIRLS with
    warm starts, and its exact gradient.

    With spherical effects u (eta = X beta + Z Lambda_theta u) and (u~, beta~) the PIRLS optimum,

        L(theta) = D(y, mu~) + |u~|^2 + log|A|,   A = Lambda' Z' W Z Lambda + I,  W = n mu (1 - mu),

    and dL/dtheta_k = -2 |u_k|^2 / theta_k (the envelope theorem: PIRLS is stationary in u and beta, and
    Z_k' n (y - mu) = u_k / theta_k there) + d log|A| / dtheta_k at fixed W + sum_c (d log|A| / dW_c)
    W'_c d eta~_c / dtheta_k, where W'_c = n_c mu_c (1 - mu_c)(1 - 2 mu_c) and d eta~ / dtheta_k follows
    from the implicit function theorem on the PIRLS equations: H db = [u_k / theta_k; 0] - M' W t_k with
    t_k = Z_k u_k, M = [Z Lambda, X], H = M' W M + diag(I, 0), and d eta~ = t_k + M db.
    """

    def __init__(self, problem: RemlProblem, trials: np.ndarray, proportion: np.ndarray,
                 problem_u: RemlProblem | None = None):
        if any(getattr(q, "diag", None) is not None for q in (problem, problem_u)):
            raise ValueError("the Laplace gradient reads the blocks directly: build its problems with diagonal=False")
        self.problem = problem
        self.problem_u = problem_u  # the same random terms without fixed effects: log|A| and its derivatives
        self.n = trials
        self.y = proportion
        p = np.clip((proportion * trials + 0.5) / (trials + 1.0), 1e-6, 1 - 1e-6)
        self.eta = np.log(p / (1 - p))
        self.beta = np.zeros(problem.p)
        self.calls = 0
        self._last = None  # (theta, evaluation of the final PIRLS step, its weights)

    def _binomial_deviance(self, eta: np.ndarray) -> float:
        mu = expit(eta)
        y, n = self.y, self.n
        return float(2.0 * np.sum(n * (xlogy(y, y) - xlogy(y, mu) + xlogy(1 - y, 1 - y) - xlogy(1 - y, 1 - mu))))

    def deviance(self, theta: np.ndarray) -> float:
        self.calls += 1
        theta = np.maximum(np.asarray(theta, dtype=float), 0.0)
        eta = self.eta.copy()
        pdev_old, pdev, logdet, last = math.inf, math.inf, 0.0, None
        for _ in range(100):
            mu = np.clip(expit(eta), 1e-12, 1 - 1e-12)
            var = mu * (1 - mu)
            z = eta + (self.y - mu) / var
            weights = self.n * var
            ev = self.problem.with_weights(weights, z).evaluate(theta, pls=True)
            new_eta = ev.extra["fitted"]
            pdev = self._binomial_deviance(new_eta) + ev.extra["penalty"]
            if pdev > pdev_old + 1e-9 * abs(pdev_old):
                eta = 0.5 * (eta + new_eta)  # damped step; re-solve at the damped point
                continue
            done = abs(pdev_old - pdev) < 1e-11 * (1.0 + abs(pdev))
            eta, pdev_old, logdet, self.beta, last = new_eta, pdev, ev.extra["logdet"], ev.beta, (ev, weights, z)
            if done:
                break
        self.eta = eta
        self._last = (theta.copy(), *last) if last is not None else None
        return pdev_old + logdet

    def value_and_gradient(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        """The Laplace deviance and its exact gradient (see the class docstring)."""
        theta = np.maximum(np.asarray(theta, dtype=float), 0.0)
        value = self.deviance(theta)
        return value, self._gradient(theta)

    def _gradient(self, theta: np.ndarray) -> np.ndarray:
        _, ev, weights, z = self._last
        prob = self.problem.with_weights(weights, z)
        fac, x_l, x_g = ev.extra["factor"], ev.extra["x_l"], ev.extra["x_g"]
        mu = np.clip(expit(self.eta), 1e-12, 1 - 1e-12)
        w_prime = self.n * mu * (1 - mu) * (1 - 2 * mu)
        d_theta, d_w = self.problem_u.with_weights(weights, z).logdet_derivatives(theta)
        u_sq = prob._u_squared(x_l, x_g)
        ct = prob.cell_term
        if ct is not None:
            u_sq[ct] = float(ev.extra["u_cell"] @ ev.extra["u_cell"])
        grad = np.zeros(prob.n_terms)
        for k in range(prob.n_terms):
            if theta[k] <= 0:
                continue  # the deviance is even in theta_k: zero slope at the boundary
            d_eta = self._eta_derivative(prob, fac, k, theta, weights, x_l, x_g, ev)
            grad[k] = -2.0 * u_sq[k] / theta[k] + d_theta[k] + float(d_w @ (w_prime * d_eta))
        return grad

    @staticmethod
    def _eta_derivative(prob: RemlProblem, fac, k: int, theta, weights, x_l, x_g, ev) -> np.ndarray:
        """d eta~ / d theta_k at the PIRLS optimum, with the cell term eliminated in closed form."""
        ct = prob.cell_term
        th_c = theta[ct] if ct is not None else 0.0
        dc = fac.dc
        if k == ct:
            t_k = ev.extra["u_cell"]
        elif k in prob.glob:
            t_k = x_g[prob.g_off[k] + prob.levels[k]]
        else:
            pk = next(p for kk, p in prob.slots_l if kk == k)
            t_k = x_l.ravel()[prob.block_of_cell * prob.bmax + pk]
        # the right-hand side [u_k / theta_k; 0] - M' W t_k, split into the cell term and the rest
        rhs_c = -th_c * weights * t_k
        if k == ct:
            rhs_c = rhs_c + t_k / theta[k]
        _, r_l, r_g = prob._rhs(weights * t_k + th_c * weights * rhs_c / dc, fac.s_l, fac.s_g)
        r_l, r_g = -r_l, -r_g
        if k != ct:
            own_g = prob.owner_g == k
            r_g[own_g] += x_g[own_g] / theta[k]
            if prob.nb:
                own_l = (prob.owner_l == k).reshape(r_l.shape)
                r_l[own_l] += x_l[own_l] / theta[k]
        b_l, b_g = prob.solve(fac, r_l, r_g)
        m_b = prob._fitted(fac, b_l, b_g)
        d_eta = t_k + m_b
        if ct is not None:
            d_eta = d_eta + th_c * (rhs_c - th_c * weights * m_b) / dc
        return d_eta
