"""TEE section G robustness check for binary scores: a logit-link GLMM beside the LPM.

For binary scores the linear model is a linear probability model (LPM),
adequate for moderate base rates (TEE C.3). The check refits the same random
effects with a logit link, by the Laplace approximation with the fixed effects
estimated inside penalised iteratively reweighted least squares (PIRLS; lme4's
``glmer(..., nAGQ = 0)``), and compares the components' ranking: logit-scale
components against LPM components, with the level-1 (residual) variance fixed
at pi^2/3 (Nakagawa & Schielzeth 2010; TEE Table 11). TEE reports Spearman
correlations of 0.91-0.99 between the two rankings on its binary benchmarks.
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
from .cells import cell_data, fixed_matrix, random_structure
from .criterion import RemlProblem
from .model import MixedModel

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
    """Per-observation shares of each random component under both links, their ranks, Spearman rho.

    The residual is left out of the ranking: on the logit scale it is fixed at
    pi^2/3 by convention, not estimated.
    """
    names = [c.name for c in glmm.components if c.kind == "random"]
    lpm_share = np.array([lpm.share(n) for n in names])
    glmm_share = np.array([glmm.share(n) for n in names])
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
    problem = RemlProblem(cells.n_obs, cells.count, cells.mean, 0.0, x, levels, sizes, cell_term)
    laplace = _Laplace(problem, cells.count, cells.mean)
    theta = np.full(problem.n_terms, 0.5)
    res = minimize(laplace.deviance, theta, method="L-BFGS-B", jac=laplace.gradient,
                   bounds=[(0.0, None)] * problem.n_terms, options={"maxiter": 500, "ftol": 1e-12, "gtol": 1e-7})
    theta = np.maximum(res.x, 0.0)
    if not res.success:
        notes.append(f"the GLMM optimiser stopped early ({res.message}); read the logit-scale ranking with care.")
    components = [Component(t.name, t.columns, float(th**2), math.nan, math.nan, "random")
                  for t, th in zip(terms, theta, strict=True)]
    components.append(Component("residual", (), LEVEL1, math.nan, math.nan, "residual"))
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
                        bool(res.success), model.formula(), message=str(res.message), cells=cells.n_cells,
                        boundary=tuple(t.name for t, th in zip(terms, theta, strict=True) if th == 0.0)),
    )


class _Laplace:
    """The Laplace deviance of a binomial-logit GLMM at theta, by PIRLS with warm starts."""

    def __init__(self, problem: RemlProblem, trials: np.ndarray, proportion: np.ndarray):
        self.problem = problem
        self.n = trials
        self.y = proportion
        p = np.clip((proportion * trials + 0.5) / (trials + 1.0), 1e-6, 1 - 1e-6)
        self.eta = np.log(p / (1 - p))
        self.beta = np.zeros(problem.p)
        self.calls = 0

    def _binomial_deviance(self, eta: np.ndarray) -> float:
        mu = expit(eta)
        y, n = self.y, self.n
        return float(2.0 * np.sum(n * (xlogy(y, y) - xlogy(y, mu) + xlogy(1 - y, 1 - y) - xlogy(1 - y, 1 - mu))))

    def deviance(self, theta: np.ndarray) -> float:
        self.calls += 1
        theta = np.maximum(np.asarray(theta, dtype=float), 0.0)
        eta = self.eta.copy()
        pdev_old, pdev, logdet = math.inf, math.inf, 0.0
        for _ in range(100):
            mu = np.clip(expit(eta), 1e-12, 1 - 1e-12)
            var = mu * (1 - mu)
            z = eta + (self.y - mu) / var
            ev = self.problem.with_weights(self.n * var, z).evaluate(theta, pls=True)
            new_eta = ev.extra["fitted"]
            pdev = self._binomial_deviance(new_eta) + ev.extra["penalty"]
            if pdev > pdev_old + 1e-9 * abs(pdev_old):
                eta = 0.5 * (eta + new_eta)  # damped step; re-solve at the damped point
                continue
            done = abs(pdev_old - pdev) < 1e-11 * (1.0 + abs(pdev))
            eta, pdev_old, logdet, self.beta = new_eta, pdev, ev.extra["logdet"], ev.beta
            if done:
                break
        self.eta = eta
        return pdev_old + logdet

    def gradient(self, theta: np.ndarray) -> np.ndarray:
        """Central differences (one-sided at the boundary) of the Laplace deviance."""
        theta = np.maximum(np.asarray(theta, dtype=float), 0.0)
        saved = self.eta.copy()
        grad = np.zeros_like(theta)
        for k in range(theta.size):
            h = 1e-5 * max(1.0, theta[k])
            up, down = theta.copy(), theta.copy()
            up[k] += h
            down[k] = max(theta[k] - h, 0.0)
            self.eta = saved.copy()
            f_up = self.deviance(up)
            self.eta = saved.copy()
            f_down = self.deviance(down)
            grad[k] = (f_up - f_down) / (up[k] - down[k])
        self.eta = saved
        return grad


def glmm_check(data, design=None, *, formula: str | None = None, method: str = "auto",
               **options) -> GlmmCheck:
    """Fit the LPM (as usual) and the logit GLMM with the same random terms; compare rankings."""
    from ..design import infer_design
    from . import estimate_components
    from .model import model_from_design, parse_formula

    judgments = as_judgments(data)
    if formula is not None:
        lpm = estimate_components(judgments, method=method, formula=formula)
        model = parse_formula(formula)
    else:
        design = design or infer_design(judgments, **options)
        lpm = estimate_components(judgments, design, method=method)
        model = model_from_design(design)
    return compare_lpm_glmm(lpm, fit_glmm_logit(judgments, model))
