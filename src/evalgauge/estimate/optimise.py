"""Minimising the profiled REML criterion over theta >= 0: average-information Newton steps, L-BFGS-B to
finish, and a one-sided check of every boundary estimate.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import partial

import numpy as np
from threadpoolctl import threadpool_limits

from .. import machine
from .criterion import Evaluation, RemlProblem

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
    last: Evaluation | None = None  # the evaluation at theta (with the AI matrices when Newton ended the fit)


def optimise(problem: RemlProblem, theta0: np.ndarray | None = None, progress=None,
             tol: float = 1e-12, decrement: bool = False) -> RemlFit:
    """Minimise the profiled REML deviance over theta >= 0.

    Newton steps with the average-information Hessian and the exact gradient do
    the work, with step halving so the deviance never rises and no parameter
    shrinking by more than a factor of ten per step (so a component heading for
    zero gets there through L-BFGS-B rather than being clipped) nor growing by
    more than ten. L-BFGS-B with the exact gradient and bounds theta >= 0 then
    finishes, and a fit is called converged only at an optimum (a second pass
    otherwise). At theta_k = 0 the
    gradient in theta vanishes by symmetry, so every boundary estimate is
    checked with the one-sided derivative in theta_k^2 and released when the
    deviance falls away from zero.

    ``tol`` is the relative change of the deviance that ends the Newton steps. A fit confirms it with one
    more evaluation (quadratic convergence then leaves the estimates at machine precision);
    ``decrement=True`` (bootstrap refits) stops as soon as a full step is predicted to gain less.
    """
    with blas_threads(problem.g):
        return _optimise(problem, theta0, progress, tol, decrement)


#: global dense size under which REML runs BLAS on one thread (measured on 2 cores)
SINGLE_THREAD_BELOW = 1500


def blas_threads(dense: int):
    """The BLAS threads for a problem whose dense part is ``dense`` wide, as a threadpoolctl limit (a context,
    or in force from the call when not used as one): one thread below :data:`SINGLE_THREAD_BELOW` (idle worker
    threads spinning after each small GEMM slow the work in between and cost as much CPU again: SummEval's
    analysis took 41 s of CPU on two threads and 27 s on one, faster in wall time too), every core above."""
    return threadpool_limits(limits=1 if dense < SINGLE_THREAD_BELOW else machine.cores(), user_api="blas")


def _optimise(problem: RemlProblem, theta0: np.ndarray | None, progress=None, tol: float = 1e-12,
              decrement: bool = False) -> RemlFit:
    start = time.perf_counter()
    k = problem.n_terms
    theta = np.ones(k) if theta0 is None else np.asarray(theta0, dtype=float).copy()
    count = {"n": 0}

    def ev(t, hessian=False, lazy=False):
        count["n"] += 1
        if progress is not None:  # the caller decides whether (and how often) to show it
            progress(count["n"], time.perf_counter() - start)
        out = problem.evaluate(t, gradient=not lazy, hessian=hessian, keep=lazy)
        out.extra["theta"] = np.array(t, dtype=float)
        if lazy:  # the derivatives, when the point is accepted: derive(out). Not a closure over out: that
            # would be a reference cycle keeping every rejected step's factorisation alive until the
            # cyclic collector ran (24 GB on a 131,000-effect model)
            out.extra["derive"] = partial(problem.derive, hessian=hessian)
        return out

    first = FIRST_SHRINK if theta0 is None else 10.0
    nit = 0
    for attempt in range(PASSES):  # another pass from where the last stopped (or the better point its check
        # found), if that is not an optimum
        theta, cur, info, message, n, boundary_checked = _one_pass(theta, ev, problem, tol, decrement, first)
        nit += n
        if decrement:  # bootstrap refits: warm-started at the estimates, no second look
            break
        gain, better = _remaining_gain(theta, cur, problem, boundary_checked)
        if gain <= STATIONARY_GAIN:
            if not info["converged"]:  # e.g. L-BFGS-B's line search finding nothing lower: at an optimum
                info["converged"] = True
                message = f"{message}; at an optimum (a Newton step would lower the criterion by {gain:.2g})"
            break
        info["converged"] = False
        message = (f"{message}; not at an optimum: a Newton step would still lower the criterion by "
                   f"{gain:.3g}" + (f" (after {attempt + 1} passes)" if attempt else ""))
        first = 10.0
        if better is not None:  # the second pass starts where the boundary probe found the criterion lower
            theta = better
    if not np.array_equal(cur_theta(cur, theta), theta):  # pragma: no cover - every path re-evaluates at theta
        cur = problem.evaluate(theta)
    return RemlFit(theta, cur.sigma2, cur.deviance, cur.beta, nit, count["n"], bool(info["converged"]),
                   message, time.perf_counter() - start, cur)


#: the fit is at an optimum when a Newton step on the free components would lower the REML criterion
#: (-2 log L) by less than this and no component at zero has a falling one-sided derivative: a gain of
#: 1e-4 in -2 log L is far below anything a likelihood-ratio statement can see
STATIONARY_GAIN = 1e-4
#: passes of the optimiser at most: the first, then from where the check found the criterion still falling.
#: L-BFGS-B can stop on a component at zero whose release lowers the criterion (its gradient in theta is 0
#: there); on 3 of 40 unread patterns of a small collected run, two passes left such a fit 0.0008 above lme4's
#: criterion and flagged as not converged; the third pass, from the probe's better point, reaches lme4's
PASSES = 3


def _one_pass(theta, ev, problem, tol, decrement, first_shrink):
    """AI-Newton from theta, the boundary rounds, and L-BFGS-B when Newton does not finish; also whether
    the boundary was checked at the theta returned."""
    k = problem.n_terms
    theta, cur, info = _ai_newton(theta, ev, tol=tol, decrement=decrement, first_shrink=first_shrink)
    nit = info["n"]
    keep_free: set[int] = set()
    checked = False
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
            checked = True  # nothing to release at this theta
            break
        theta, cur, info = _ai_newton(theta, ev, tol=tol, decrement=decrement)
        nit += info["n"]
    # the last Newton run's verdict (after the boundary rounds), unless L-BFGS-B has to finish
    message = "average-information Newton converged" if info["converged"] else "AI Newton stopped early"
    if not info["converged"]:
        theta, cur, res = _lbfgsb(theta, cur, ev)
        nit += int(res.nit)
        message = f"L-BFGS-B: {res.message}"
        info["converged"] = bool(res.success)
        checked = False
    return theta, cur, info, message, nit, checked


def _remaining_gain(theta: np.ndarray, cur: Evaluation, problem: RemlProblem,
                    boundary_checked: bool) -> tuple[float, np.ndarray | None]:
    """What the criterion could still lose: the Newton decrement g'H^-1 g / 2 on the free components (AI
    Hessian), or the fall of the criterion when moving components off zero lowers it by more than
    :data:`STATIONARY_GAIN` (probed unless ``boundary_checked`` at this theta already), with the point that
    lowers it (where a second pass starts). 0 when nothing is free."""
    if not boundary_checked:
        released = _release_boundary(theta, problem)
        if released is not None:
            fall, better = _boundary_gain(theta, released, cur, problem)
            if fall > STATIONARY_GAIN:
                return fall, better
    free = theta > 0
    if not free.any():
        return 0.0, None
    if "hessian" not in cur.extra or not np.array_equal(cur_theta(cur, theta), theta):
        cur = problem.evaluate(theta, gradient=True, hessian=True)
        cur.extra["theta"] = theta.copy()
    g = cur.gradient[free]
    step = _newton_step(cur.extra["hessian"][np.ix_(free, free)], g)
    gain = math.inf if step is None else -0.5 * float(g @ step)
    return (gain if math.isfinite(gain) and gain >= 0 else math.inf), None


#: where a component at zero is tried, as fractions of the largest theta, before the fit is declared not at an
#: optimum: a one-sided derivative that falls at zero can lead to a minimum so close to it that the gain is nil
BOUNDARY_PROBES = (1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3)


def _boundary_gain(theta: np.ndarray, released: np.ndarray, cur: Evaluation,
                   problem: RemlProblem) -> tuple[float, np.ndarray]:
    """How much the criterion falls when the components at zero that :func:`_release_boundary` would free are
    moved off it together, at the best of :data:`BOUNDARY_PROBES` (the gain the boundary still hides), and that
    point."""
    moved = (released > 0) & (theta == 0)
    here = cur.deviance if np.array_equal(cur_theta(cur, theta), theta) else problem.evaluate(theta).deviance
    scale = max(float(theta.max()), 1e-3)
    best, at = here, released
    for fraction in BOUNDARY_PROBES:
        probe = theta.copy()
        probe[moved] = fraction * scale
        deviance = problem.evaluate(probe).deviance
        if deviance < best:
            best, at = deviance, probe
    return float(here - best), at


def _newton_step(hess: np.ndarray, g: np.ndarray) -> np.ndarray | None:
    """-H^-1 g with a ridge of 1e-10 tr(H) (a component near zero leaves H nearly singular); None when H
    cannot be solved."""
    try:
        return -np.linalg.solve(hess + 1e-10 * np.trace(hess) * np.eye(g.size), g)
    except np.linalg.LinAlgError:
        return None


def _lbfgsb(theta, cur, ev):
    from scipy.optimize import minimize  # here: a closed-form fit never pays for importing the optimiser

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
    zero = np.flatnonzero(theta <= 1e-8 * scale)
    if not zero.size:
        return None
    # One probe for all of them: with every boundary term at eps, term k's derivative in theta_k^2 is its
    # one-sided derivative at zero up to O(eps^2) (one evaluation a round, not one per term: the demo's
    # 46-term model has 30 terms at zero)
    eps = 1e-4 * scale
    probe = theta.copy()
    probe[zero] = eps
    slopes = problem.evaluate(probe, gradient=True).gradient[zero] / (2 * eps)  # d deviance / d theta_k^2
    falls = zero[slopes < 0]
    if not falls.size:
        return None
    out = theta.copy()
    out[falls] = 0.1 * scale
    return out


def cur_theta(cur: Evaluation, theta: np.ndarray) -> np.ndarray:
    return cur.extra.get("theta", theta)


def _bounded(theta: np.ndarray, step: np.ndarray, shrink: float = 10.0) -> np.ndarray:
    """theta + step with no parameter shrinking by more than ``shrink`` or growing by more than a factor of
    ten (growth to at least 1, the scale of the residual). The AI matrix says little about a term with few
    levels: on the demo's 46-term model one unbounded step sent theta to 7e4, where the deviance is so flat
    (its gradient ~ 1/theta) that the fit never came back (`tests/estimate/test_reml.py`, against lme4)."""
    return np.clip(theta + step, theta / shrink, np.maximum(10.0 * theta, 1.0))


#: the first step from the default start (theta = 1, nothing known) shrinks a parameter at most this much:
#: the AI matrix is least reliable there, and a term sent to 0.1 climbs back in small steps (measured on
#: the bench designs: 10 -> 8 evaluations on TEE, InstEval and 1% missing at 200k rows)
FIRST_SHRINK = 4.0


#: the steps tried from one point until the deviance falls: (fraction of the step, Levenberg-Marquardt
#: damping lambda of (H + lambda diag(H)) step = -g). Two halvings of the AI step, then damped steps, which
#: turn towards the scaled gradient. Halving alone keeps the AI matrix's direction, and where that matrix is
#: poor (SummEval: 5 judges x 5 prompt types, partly crossed) ten halvings all failed and L-BFGS-B took 100
#: more evaluations (123 in all; 48 so, the same criterion); on the lme4 reference designs and 12 random
#: unbalanced ones the counts and criteria are unchanged.
STEPS = ((1.0, 0.0), (0.5, 0.0), (0.25, 0.0), (1.0, 1.0), (1.0, 100.0), (1.0, 1e4))
#: near the optimum (a full step predicted to gain less than this share of the deviance) only halvings, down
#: to 2^-9: there a damped step would wander along a flat ridge by the deviance's rounding, and two fits of
#: the same data whose sums differ in the last bits (the engine's cells and the rows) would part by 1e-8
HALVINGS = tuple((0.5**k, 0.0) for k in range(10))
NEAR = 1e-8


def _ai_newton(theta: np.ndarray, ev, max_iter: int = 50, tol: float = 1e-12,
               decrement: bool = False, first_shrink: float = 10.0) -> tuple[np.ndarray, Evaluation, dict]:
    """Newton steps with the average-information Hessian. Stops when the deviance falls by less than ``tol``
    (relative), or, with ``decrement``, when the Newton decrement g'H^-1 g / 2 (the fall a full step would
    give) is below it, so the last, confirming evaluation is not spent."""
    cur = ev(theta, hessian=True)
    info = {"n": 0, "converged": False}
    for it in range(max_iter):
        info["n"] = it + 1
        shrink = first_shrink if it == 0 else 10.0
        g = cur.gradient
        free = theta > 0
        if not free.any():
            break
        step = _newton_step(cur.extra["hessian"][np.ix_(free, free)], g[free])
        if step is None:
            break
        if not np.all(np.isfinite(step)) or g[free] @ step >= 0:
            break  # the AI matrix is not positive definite here: leave it to L-BFGS-B
        tiny = -0.5 * float(g[free] @ step) < tol * max(1.0, abs(cur.deviance))
        if tiny and decrement and np.all(theta[free] + step > 0):
            info["converged"] = True  # a full step would change the deviance by less than the tolerance
            break
        if tiny:
            # One confirming full step. At this point the deviance's own rounding (about 1e-11 of it on
            # 10^5-10^6 judgments) exceeds what any step can gain, so step halving would chase noise.
            cand = theta.copy()
            cand[free] = _bounded(theta[free], step, shrink)
            trial = ev(cand, hessian=True)
            if trial.deviance <= cur.deviance:
                theta, cur = cand, trial
            info["converged"] = True
            break
        hess = cur.extra["hessian"][np.ix_(free, free)]
        accepted = False
        newton = step
        near = -0.5 * float(g[free] @ newton) < NEAR * max(1.0, abs(cur.deviance))
        for alpha, damping in HALVINGS if near else STEPS:
            step = newton if not damping else _newton_step(hess + damping * np.diag(np.diag(hess)), g[free])
            if step is None or not np.all(np.isfinite(step)):
                break
            cand = theta.copy()
            cand[free] = _bounded(theta[free], alpha * step, shrink)
            trial = ev(cand, hessian=True, lazy=True)  # a rejected step costs the deviance alone
            if trial.deviance <= cur.deviance:
                trial.extra.pop("derive")(trial)
                accepted = True
                break
        if not accepted:
            break
        change = cur.deviance - trial.deviance
        theta, cur = cand, trial
        if change < tol * max(1.0, abs(cur.deviance)):
            info["converged"] = True
            break
    return theta, cur, info
