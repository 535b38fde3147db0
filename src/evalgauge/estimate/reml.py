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

import functools
import math
from dataclasses import replace

import numpy as np
from threadpoolctl import threadpool_limits

from .. import machine
from ..data import as_judgments
from ..errors import DesignError
from ..vocabulary import RESIDUAL
from .cells import CellData, cell_data, fixed_matrix, grouping_candidates, random_structure, term_levels, total_levels
from .criterion import Evaluation, ModelSize, ModelTooLarge, RemlProblem
from .model import MixedModel
from .optimise import RemlFit, blas_threads, optimise

__all__ = ["CellData", "Evaluation", "ModelSize", "ModelTooLarge", "RemlFit", "RemlProblem", "bootstrap_workers",
           "cell_data", "fit_reml", "fixed_matrix", "optimise", "random_structure", "term_levels"]


# ---------------------------------------------------------------------------
# From data to VarianceComponents
# ---------------------------------------------------------------------------

def _restoring_blas(func):
    """``func`` with the caller's BLAS threads restored when it returns, whatever it set in between."""

    @functools.wraps(func)
    def restoring(*args, **kwargs):
        with threadpool_limits(limits=None, user_api="blas"):
            return func(*args, **kwargs)

    return restoring


@_restoring_blas
def fit_reml(data, model: MixedModel, *, object_facet: str | None = None,
             fixed_facets: tuple[str, ...] = (), method_reason: str = "REML (requested)",
             facet_order: tuple[str, ...] | None = None, n_boot: int = 0, level: float = 0.95,
             seed: int | None = None, progress=None, max_memory: int | None = None,
             max_seconds: float | None = None, start: dict[frozenset, float] | None = None,
             derivatives: bool = False):
    """REML variance components of ``model`` on ``data`` (a judgments table, a data frame, or the cells'
    statistics as :class:`CellData`).

    ``progress(size, evaluations, seconds)``, when given, is called once before fitting (evaluations 0)
    and at every evaluation of the criterion; ``size`` is the :class:`ModelSize` (judgments, cells, random
    effects, the dense part, expected time and memory; ``str(size)`` is a one-line description). A model
    whose work arrays would need more than 70% of ``max_memory`` bytes (default: the memory available
    now) raises :class:`ModelTooLarge` before any work, as does one expected to take over ``max_seconds``.
    ``start`` (a term's facets -> its variance over the residual's) starts the optimiser there instead of at
    theta = 1: the optimum is the same, the evaluations fewer when the start is close. ``derivatives`` adds
    what Satterthwaite's df of fixed-effect contrasts need to the fit summary (:func:`fixed_effect_derivatives`,
    2 evaluations per free term).
    """
    from ..components import Component, FitSummary, VarianceComponents

    # cell statistics reduced elsewhere (an engine over files: evalgauge.io.engine) are the fit's input as they are
    cells = data if isinstance(data, CellData) else cell_data(as_judgments(data), model)
    notes = list(cells.notes)
    terms, levels, sizes, cell_term, confounded = random_structure(cells, model, notes)
    x, x_names, dropped = fixed_matrix(cells, model)
    if dropped:
        notes.append(f"fixed-effect columns not estimable from these data were dropped: {', '.join(dropped)}.")
    if cells.n_obs - x.shape[1] <= 0:
        raise DesignError("more fixed-effect columns than observations.")
    problem = RemlProblem(cells.n_obs, cells.count, cells.mean, cells.ss_within, x, levels, sizes, cell_term,
                          grouping_candidates(cells, terms))
    size = problem.size()
    # every evaluation of the problem (the optimiser's, the covariance's, the derivatives') on the BLAS threads it
    # runs fastest on: one for a small dense part; the caller's are restored on return (_restoring_blas)
    blas_threads(problem.g)
    limit = machine.available_memory() if max_memory is None else max_memory
    if limit and size.memory > 0.7 * limit:
        raise ModelTooLarge(size, limit)
    if max_seconds is not None and size.seconds > max_seconds:
        raise ModelTooLarge(size, limit, f"expected to take more than {max_seconds:.0f} s")
    if progress is not None:
        progress(size, 0, 0.0)  # the size and the expected cost, before any work
    report = None if progress is None else (lambda n, sec: progress(size, n, sec))
    try:
        with np.errstate(invalid="ignore", divide="ignore"):
            fit = optimise(problem, _theta_start(terms, start), progress=report)
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
    components.append(Component(RESIDUAL, tuple(dict.fromkeys(c for t in model.random for c in t.columns)),
                                float(fit.sigma2), float(cells.n_obs - x.shape[1]), math.nan, RESIDUAL,
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
    final = _at_estimate(problem, fit)
    varpar_cov, jacobian = fixed_effect_derivatives(problem, fit.theta) if derivatives else (None, None)
    weights = marginal["weights"]
    mean_se = float(math.sqrt(max(weights @ final.extra["beta_cov"] @ weights, 0.0))) if weights.size else math.nan
    order = [c for c in (facet_order or ()) if c in cells.labels] + [c for c in model.columns
                                                                      if c not in (facet_order or ())]
    level_counts = {col: total_levels(cells, col, dict(model.nesting)) for col in order}
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
                        fit.iterations, fit.evaluations, fit.converged, model.fitted(terms).formula(),
                        message=fit.message,
                        seconds=fit.seconds, cells=cells.n_cells,
                        boundary=tuple(t.name for t, th in zip(terms, fit.theta, strict=True) if th == 0.0),
                        marginal_mean=float(weights @ fit.beta) if weights.size else math.nan,
                        marginal_mean_se=mean_se, beta_cov=final.extra["beta_cov"], varpar_cov=varpar_cov,
                        beta_cov_jacobian=jacobian),
        covariance=cov,
    )
    if n_boot:
        result = _reml_bootstrap(result, problem, fit, x, n_boot, level, seed)
    return result


def _theta_start(terms, start: dict[frozenset, float] | None) -> np.ndarray | None:
    """theta0 = sqrt(sigma2_k / sigma2) from ``start``; a term missing there starts at 1 (the default
    start), one at or below zero there at sqrt(START_FLOOR) (at exactly 0 the gradient in theta vanishes:
    the boundary check would have to release it)."""
    if not start:
        return None
    return np.array([math.sqrt(max(start.get(frozenset(t.columns), 1.0), START_FLOOR)) for t in terms])


#: the smallest variance ratio a term is started at (theta0 = 0.1)
START_FLOOR = 0.01


def _at_estimate(problem: RemlProblem, fit: RemlFit, information: bool = False):
    """The evaluation at the estimates: the optimiser's last one when it is there (an AI-Newton fit ends
    with the information matrix at hand), else a fresh one."""
    last = fit.last
    if last is not None and np.array_equal(last.extra.get("theta", ()), fit.theta) and (
            not information or "information" in last.extra):
        return last
    return problem.evaluate(fit.theta, gradient=information, hessian=information)


def _covariance(problem: RemlProblem, fit: RemlFit) -> np.ndarray:
    """Covariance of (sigma2_1..sigma2_K, sigma2) from the inverse average information.

    The average-information matrix (Gilmour, Thompson & Cullis 1995) is the
    REML information used by ASReml and WOMBAT; on balanced data it reproduces
    the exact normal-theory variance of the ANOVA estimator (tested). Boundary
    components (exactly 0) get no SE and are left out of the inversion.
    """
    info = _at_estimate(problem, fit, information=True).extra["information"]
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


#: Relative deviance tolerance of a bootstrap refit. A fall of delta in the deviance near the optimum
#: moves an estimate by about SE * sqrt(delta) (the deviance is -2 log-likelihood, locally quadratic
#: with curvature 2 / SE^2): at 1e-9 of a deviance of 1e5 that is 0.01 SE, a tenth of the Monte Carlo
#: error of an 800-draw 2.5% quantile (about 0.1 SE), so the percentile intervals are unchanged.
REFIT_TOL = 1e-9


def _init_refits(problem: RemlProblem, start: np.ndarray, parent: int | None = None) -> None:
    if parent is not None:
        _die_with(parent)
    problem.pin(start)  # every refit starts here: factorise once per process
    _REFIT["problem"], _REFIT["start"] = problem, start


def _die_with(parent: int) -> None:
    """A bootstrap worker's ties to the command that started it: killed when it dies, even by kill -9
    (Linux's PR_SET_PDEATHSIG; elsewhere the pool's own shutdown), and deaf to Ctrl-C, which the command
    handles by stopping the pool."""
    import contextlib
    import ctypes
    import os
    import signal
    import sys

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG = 1
    if os.getppid() != parent:  # the parent died before the line above took effect
        os._exit(1)


def _stop_pool(pool) -> None:
    """Stop a process pool now: no queued refit starts, and the running ones are killed (SIGTERM, then
    SIGKILL), instead of the executor's exit waiting for every refit to finish."""
    processes = list(getattr(pool, "_processes", {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in processes:
        proc.terminate()
    for proc in processes:
        proc.join(timeout=2)
        if proc.is_alive():
            proc.kill()


def _refit_one(data: tuple[np.ndarray, float]) -> tuple[np.ndarray, float] | None:
    """Refit one resample, warm-started at the estimates: (theta, sigma2), or None if the fit failed."""
    mean, ss_w = data
    boot = _REFIT["problem"].with_data(mean, ss_w)
    try:
        with np.errstate(invalid="ignore", divide="ignore"):
            refit = optimise(boot, _REFIT["start"], tol=REFIT_TOL, decrement=True)
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
        import os
        from concurrent.futures import ProcessPoolExecutor

        ctx = multiprocessing.get_context("fork") if "fork" in multiprocessing.get_all_start_methods() else None
        ex = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_refits,
                                 initargs=(problem, start, os.getpid()))
        try:
            refits = list(ex.map(_refit_one, datasets, chunksize=max(1, n_boot // (8 * workers))))
        except BaseException:  # Ctrl-C, SIGTERM (exit 143), an error: the workers stop with the command
            _stop_pool(ex)
            raise
        ex.shutdown()
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
        row[RESIDUAL] = sigma2_b
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


#: relative step of the central differences in theta (truncation error ~ step^2, rounding ~ eps / step)
DERIVATIVE_STEP = 1e-4


def fixed_effect_derivatives(problem: RemlProblem, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """What Satterthwaite's df for a contrast of the fixed effects needs, as lmerTest computes it
    (Kuznetsova, Brockhoff & Christensen 2017, eqs. 5-7): the asymptotic covariance ``A`` of the variance
    parameters (theta_1..theta_K, sigma2) at the REML estimate, twice the inverse Hessian of the REML
    deviance, and the Jacobian ``J`` (K + 1 x p x p) of Cov(beta-hat) = sigma2 (R_X'R_X)^-1 in them, so that a
    contrast L gets df = 2 (L C L')^2 / (g'Ag), g_j = L J_j L'.

    The deviance is profiled here (Bates et al. 2015, eq. 41), d_p(theta) = d(theta, sigma2-hat(theta)); the
    Hessian of the full deviance d(theta, sigma2) = D(theta) + r2(theta)/sigma2 + (n - p) log(2 pi sigma2) at the
    optimum follows from d_p's Hessian (central differences of its exact gradient) and r2's gradient:

        d_tt = d_p'' + (n-p) r2' r2'^T / r2^2,   d_ts = -(n-p)^2 r2' / r2^2,   d_ss = (n-p)^3 / r2^2,

    whose Schur complement in sigma2 is d_p'' again. A term at the boundary (theta = 0) is left out: the
    deviance and Cov(beta-hat) are even in its theta, so its row of the Hessian and its column of the
    Jacobian vanish there, as in lmerTest. Returns zero-filled rows and columns for those terms.
    """
    theta = np.asarray(theta, dtype=np.float64)
    dfree = problem.n_obs - problem.p
    free = np.flatnonzero(theta > 0)
    base = problem.evaluate(theta)
    r2, c0 = base.r2, base.extra["beta_cov"] / (base.r2 / dfree)
    k = len(free)
    hess = np.zeros((k, k))
    dr2 = np.zeros(k)
    dc0 = np.zeros((k, problem.p, problem.p))
    for col, j in enumerate(free):
        step = DERIVATIVE_STEP * theta[j]
        ends = []
        for sign in (1.0, -1.0):
            t = theta.copy()
            t[j] += sign * step
            ends.append(problem.evaluate(t, gradient=True))
        up, down = ends
        hess[:, col] = (up.gradient[free] - down.gradient[free]) / (2 * step)
        dr2[col] = (up.r2 - down.r2) / (2 * step)
        dc0[col] = (up.extra["beta_cov"] / (up.r2 / dfree) - down.extra["beta_cov"] / (down.r2 / dfree)) / (2 * step)
    hess = 0.5 * (hess + hess.T)
    full = np.zeros((k + 1, k + 1))
    full[:k, :k] = hess + dfree * np.outer(dr2, dr2) / r2**2
    full[:k, k] = full[k, :k] = -(dfree**2) * dr2 / r2**2
    full[k, k] = dfree**3 / r2**2
    sigma2 = r2 / dfree
    jac_free = np.concatenate([sigma2 * dc0, c0[None]], axis=0)
    cov_free = 2.0 * _positive_inverse(full)
    n = problem.n_terms + 1
    index = np.append(free, problem.n_terms)
    cov = np.zeros((n, n))
    cov[np.ix_(index, index)] = cov_free
    jac = np.zeros((n, problem.p, problem.p))
    jac[index] = jac_free
    return cov, jac


def _positive_inverse(h: np.ndarray) -> np.ndarray:
    """The inverse of a symmetric Hessian on its positive eigenvalues (lmerTest's treatment of a Hessian that is
    not positive definite at a poorly determined optimum): directions of no curvature carry no information."""
    vals, vecs = np.linalg.eigh(h)
    keep = vals > 1e-8 * max(float(vals.max()), 1e-300)
    return (vecs[:, keep] / vals[keep]) @ vecs[:, keep].T
