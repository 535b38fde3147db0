"""The result of a G-study: estimated variance components.

One :class:`Component` per model term, named lme4-style by its facets joined
with ``:`` (``system``, ``system:item``, ``category:item``) and ``residual`` for
the within-cell term. Raw estimates keep their sign (a negative ANOVA estimate
is information, sizing paper App. D); shares use the value truncated at zero.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from . import vocabulary
from .errors import ConvergenceError, DesignError
from .results import Result, json_safe
from .vocabulary import RESIDUAL

COLUMNS = ("component", "variance", "variance_truncated", "df", "mean_square", "share")
#: how a projected design samples a nested facet's children, and what a projection's error is about
SAMPLINGS, ESTIMANDS = vocabulary.SAMPLINGS, vocabulary.ESTIMANDS


@dataclass(frozen=True)
class Component:
    """One variance component.

    ``kind`` is ``random``; ``fixed`` for a term made only of fixed facets, whose
    ``variance`` is the sensitivity index (1/L) sum (tau_l - tau_bar)^2 of TEE
    eq. C.4 (population variance over the L chosen levels); or ``residual``.
    ``confounded_with`` names a term the design cannot separate from this one
    (one observation per cell: the top interaction and the residual).
    ``pooled`` lists omitted terms whose sums of squares were pooled into this one.
    ``se`` is the standard error (ANOVA: normal-theory chi-square laws of the mean
    squares; REML: inverse average information), NaN where undefined (a boundary
    estimate); ``ci_low``/``ci_high`` a parametric-bootstrap percentile interval
    when one was requested.
    """

    name: str
    facets: tuple[str, ...]
    variance: float
    df: float
    mean_square: float
    kind: str = "random"
    confounded_with: str | None = None
    pooled: tuple[str, ...] = ()
    se: float = math.nan
    ci_low: float = math.nan
    ci_high: float = math.nan

    @property
    def variance_truncated(self) -> float:
        return max(self.variance, 0.0)


@dataclass(frozen=True)
class FitSummary(Result, Mapping):
    """How a likelihood fit went, in the manner of MixedModels.jl's ``OptSummary``: the criterion at the
    optimum, the optimiser's work (iterations, evaluations, seconds), whether it converged and why it
    stopped, the components that ended on the boundary (zero), and the fixed effects.

    ``criterion`` is lme4's REML criterion (-2 log restricted likelihood) for ``kind="reml"`` and the
    Laplace deviance for ``kind="glmm-laplace"``. It also reads as a mapping with the keys of its JSON
    (``fit.reml["deviance"]``), which is what :meth:`to_dict` writes.
    """

    kind: str
    criterion: float
    theta: tuple[float, ...]
    beta: dict[str, float]
    iterations: int
    evaluations: int
    converged: bool
    formula: str
    message: str = ""
    seconds: float = math.nan
    cells: int | None = None
    boundary: tuple[str, ...] = ()
    marginal_mean: float = math.nan
    marginal_mean_se: float = math.nan
    #: (X'V^-1 X)^-1 at the fit, for contrasts of the fixed effects (kept out of the JSON)
    beta_cov: np.ndarray | None = field(default=None, repr=False, compare=False)
    #: with ``derivatives``: the covariance of (theta_1..theta_K, sigma2) and the Jacobian of ``beta_cov`` in them
    #: (:func:`evalgauge.estimate.reml.fixed_effect_derivatives`), for Satterthwaite df of fixed-effect contrasts
    varpar_cov: np.ndarray | None = field(default=None, repr=False, compare=False)
    beta_cov_jacobian: np.ndarray | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        name = "deviance" if self.kind == "reml" else "laplace_deviance"
        out = {name: self.criterion, "theta": list(self.theta), "beta": dict(self.beta),
               "iterations": self.iterations, "evaluations": self.evaluations, "converged": self.converged,
               "message": self.message, "seconds": self.seconds, "formula": self.formula,
               "boundary": list(self.boundary)}
        if self.cells is not None:
            out["cells"] = self.cells
        if self.kind == "reml":
            out.update(marginal_mean=self.marginal_mean, marginal_mean_se=self.marginal_mean_se)
        return json_safe(out)

    def _view(self) -> dict[str, Any]:
        view = self.to_dict()
        if self.kind == "reml":  # exact values (to_dict maps NaN to None)
            view.update(deviance=self.criterion, marginal_mean=self.marginal_mean,
                        marginal_mean_se=self.marginal_mean_se)
        if self.beta_cov is not None:
            view["beta_cov"] = self.beta_cov
        return view

    def __getitem__(self, key: str) -> Any:
        return self._view()[key]

    def __iter__(self):
        return iter(self._view())

    def __len__(self) -> int:
        return len(self._view())


@dataclass(frozen=True)
class VarianceComponents(Result):
    """Estimated variance components of a design, with what produced them.

    ``ems`` (expected-mean-square coefficients, one row per component, columns in
    the same order) and the components' ``df``/``mean_square`` are kept so that
    sampling distributions can be derived without the data (sizing paper App. D).
    """

    method: str
    n_obs: int
    grand_mean: float
    components: tuple[Component, ...]
    levels: dict[str, int]
    replicates: int
    object: str | None = None
    fixed: tuple[str, ...] = ()
    #: child facet -> parent facet (item -> category), for D-study divisors
    nesting: dict[str, str] = field(default_factory=dict)
    ems: np.ndarray | None = field(default=None, repr=False, compare=False)
    notes: tuple[str, ...] = ()
    method_reason: str = ""
    #: how the likelihood fit went (REML or the GLMM's Laplace fit): criterion, theta, fixed effects, work
    reml: FitSummary | dict[str, Any] | None = field(default=None, compare=False)
    #: how ci_low/ci_high were made: method, level, resamples, seed, failed refits
    intervals: dict[str, Any] | None = field(default=None, compare=False)
    #: sampling covariance of the estimates, components order (NaN where undefined)
    covariance: np.ndarray | None = field(default=None, repr=False, compare=False)
    #: parametric-bootstrap draws of the components (resamples x components), when requested
    draws: np.ndarray | None = field(default=None, repr=False, compare=False)
    #: how a projected design draws the items of a nested facet (:data:`SAMPLINGS`): ``pooled`` from the whole
    #: pool (TEE eq. 3), ``categories`` C' parents drawn, N'/C' children each (Brennan's i:c), ``strata`` every
    #: parent kept as a fixed stratum
    sampling: str = "pooled"
    #: what the estimate is of (:data:`ESTIMANDS`): ``domain``, the population the items were drawn from (TEE
    #: eq. 3), or ``finite``, the benchmark's own items (TEE C.2: the item terms are no error)
    estimand: str = "domain"

    def with_sampling(self, sampling: str | None) -> VarianceComponents:
        """A copy that projects nested facets under ``sampling`` (None keeps the present one)."""
        from dataclasses import replace

        if sampling is None or sampling == self.sampling:
            return self
        if sampling not in SAMPLINGS:
            raise DesignError(f"sampling '{sampling}': choose one of {', '.join(SAMPLINGS)}.")
        return replace(self, sampling=sampling)

    def with_estimand(self, estimand: str | None) -> VarianceComponents:
        """A copy whose projections are of ``estimand`` (None keeps the present one)."""
        from dataclasses import replace

        if estimand is None or estimand == self.estimand:
            return self
        if estimand not in ESTIMANDS:
            raise DesignError(f"estimand '{estimand}': choose one of {', '.join(ESTIMANDS)}.")
        if estimand == "finite" and self.item_facet is None:
            raise DesignError("the finite estimand is the benchmark's own items, and these components have no item "
                              f"facet ({', '.join(self.levels)}).")
        return replace(self, estimand=estimand)

    @property
    def values(self) -> np.ndarray:
        """The raw estimates as a vector, components order."""
        return np.array([c.variance for c in self.components])

    @property
    def converged(self) -> bool:
        """Whether the fit reached its optimum (closed-form ANOVA always does; a likelihood fit says so in
        ``reml.converged``)."""
        summary = self.reml
        if summary is None:
            return True
        return bool(summary["converged"] if isinstance(summary, dict) else summary.converged)

    def require_converged(self, what: str = "this") -> None:
        """Raise :class:`ConvergenceError` when the fit did not converge: ``what`` would not mean anything."""
        if self.converged:
            return
        summary = self.reml
        message = (summary.get("message", "") if isinstance(summary, dict) else summary.message) or "no optimum"
        raise ConvergenceError(f"the fit did not converge ({message}), so {what} would not mean anything. Fit a "
                               "smaller model (max_order=2, or terms naming the terms you need), or check the scores "
                               "for a few extreme values.")

    @property
    def item_facet(self) -> str | None:
        """The facet of the items (an object of measurement too, as in TEE's item-as-object design)."""
        return vocabulary.facet_with_role("item", self.levels)

    def role(self, role: str) -> str | None:
        """The facet that plays ``role``: the object as fitted, the item, judge and variant by their names
        (:func:`evalgauge.vocabulary.facet_with_role`; the replicate is not a facet of the components)."""
        if role == "object":
            return self.object
        return vocabulary.facet_with_role(role, self.levels, exclude=(self.object,))

    # -- access ----------------------------------------------------------------
    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.components)

    def __getitem__(self, name: str) -> Component:
        for c in self.components:
            if c.name == name:
                return c
        raise DesignError(f"no component '{name}'; the components are {', '.join(self.names)}.")

    def __contains__(self, name: object) -> bool:
        return any(c.name == name for c in self.components)

    def sigma2(self, name: str, truncated: bool = False) -> float:
        """The estimate of sigma^2 for a component, raw or truncated at zero."""
        c = self[name]
        return c.variance_truncated if truncated else c.variance

    @property
    def total_variance(self) -> float:
        """sigma^2_total: the sum of truncated components, Var(Y | h, m) at the chosen levels of the fixed
        facets (TEE C.4-C.5): a fixed term's sensitivity index is not part of it."""
        return float(sum(c.variance_truncated for c in self.components if c.kind != "fixed"))

    def share(self, name: str) -> float:
        """Per-observation share sigma^2_k / sigma^2_total (TEE C.5), truncated at zero; NaN for a fixed
        term (TEE Table 2's Tier 2: a sensitivity index, reported beside the variance, not as a share)."""
        total = self.total_variance
        comp = self[name]
        return comp.variance_truncated / total if total > 0 and comp.kind != "fixed" else math.nan

    # -- tidy forms --------------------------------------------------------------
    def to_frame(self) -> pd.DataFrame:
        """One row per component: the JSON fields plus kind, confounding and pooling."""
        rows = []
        for c in self.components:
            rows.append({
                "component": c.name,
                "facets": ":".join(c.facets),
                "variance": c.variance,
                "variance_truncated": c.variance_truncated,
                "df": c.df,
                "mean_square": c.mean_square,
                "share": self.share(c.name),
                "se": c.se,
                "ci_low": c.ci_low,
                "ci_high": c.ci_high,
                "kind": c.kind,
                "confounded_with": c.confounded_with,
                "pooled": ",".join(c.pooled),
            })
        return pd.DataFrame(rows)

    def to_dict(self) -> dict[str, Any]:
        comps = []
        for row in self.to_frame().to_dict(orient="records"):
            row["pooled"] = [p for p in row["pooled"].split(",") if p]
            row["facets"] = [f for f in row["facets"].split(":") if f]
            comps.append(dict(row))
        return json_safe({
            "method": self.method,
            "method_reason": self.method_reason,
            "n_obs": self.n_obs,
            "grand_mean": self.grand_mean,
            "object": self.object,
            "levels": dict(self.levels),
            "replicates": self.replicates,
            "fixed": list(self.fixed),
            "nesting": dict(self.nesting),
            **({"sampling": self.sampling} if self.nesting else {}),
            "estimand": self.estimand,
            "components": comps,
            "notes": list(self.notes),
            **({"reml": {k: v for k, v in self.reml.items() if k != "beta_cov"}} if self.reml is not None else {}),
            **({"intervals": self.intervals} if self.intervals is not None else {}),
        })

    @classmethod
    def from_dict(cls, payload: dict[str, Any], source: str = "the components") -> VarianceComponents:
        """Read back what :meth:`to_dict` wrote (``evalgauge components --json``), the ``components`` part of
        ``evalgauge analyze --json``, or a minimal hand-written form for planning from published values::

            {"object": "system", "components": {"system": 0.0801, "system:judge": 0.0011, "residual": 0.2},
             "levels": {"system": 42, "item": 30, "judge": 9}}

        where ``levels`` may be left out (the counts then come from the plan's ``--n``).
        """
        if not isinstance(payload, dict):
            raise DesignError(f"{source}: not a components result (a JSON object is needed); write one with "
                              "`evalgauge components DATA --json PATH`.")
        if isinstance(payload.get("components"), dict) and "components" in payload["components"]:
            payload = payload["components"]  # an `analyze --json` result
        if isinstance(payload.get("components"), dict):  # the minimal form: {name: variance}
            return cls._from_minimal(payload, source)
        if "levels" not in payload and isinstance(payload.get("components"), list):
            payload = {**payload, "levels": {f: 0 for c in payload["components"] if isinstance(c, dict)
                                             for f in str(c.get("component", "")).split(":")
                                             if f and f != RESIDUAL}}
        try:
            comps = tuple(
                Component(
                    name=c["component"],
                    facets=tuple(c["facets"] if isinstance(c.get("facets"), list) and c["facets"]
                                 else _facets_of(c["component"], payload)),
                    variance=float(c["variance"]),
                    df=_num(c.get("df")),
                    mean_square=_num(c.get("mean_square")),
                    kind=c.get("kind", RESIDUAL if c["component"] == RESIDUAL else "random"),
                    confounded_with=c.get("confounded_with"),
                    pooled=tuple(c.get("pooled") or ()),
                    se=_num(c.get("se")),
                    ci_low=_num(c.get("ci_low")),
                    ci_high=_num(c.get("ci_high")),
                )
                for c in payload["components"]
            )
            return cls(
                method=payload.get("method", "given"),
                n_obs=int(payload.get("n_obs", 0)),
                grand_mean=float(payload.get("grand_mean") or math.nan),
                components=comps,
                levels={k: int(v) for k, v in payload["levels"].items()},
                replicates=int(payload.get("replicates", 1)),
                object=payload.get("object"),
                fixed=tuple(payload.get("fixed", ())),
                nesting=dict(payload.get("nesting", {})),
                notes=tuple(payload.get("notes", ())),
                method_reason=payload.get("method_reason", ""),
            ).with_sampling(payload.get("sampling")).with_estimand(payload.get("estimand"))
        except KeyError as exc:
            raise DesignError(f"{source}: not a components result (no '{exc.args[0]}' field); write one with "
                              "`evalgauge components DATA --json PATH`, or give {\"object\": ..., \"components\": "
                              "{name: variance}}.") from None
        except (TypeError, ValueError) as exc:
            raise DesignError(f"{source}: not a components result (a value has the wrong type: {exc}); write one "
                              "with `evalgauge components DATA --json PATH`.") from None

    @classmethod
    def _from_minimal(cls, payload: dict[str, Any], source: str) -> VarianceComponents:
        values = payload["components"]
        bad = [k for k, v in values.items() if isinstance(v, bool) or not isinstance(v, int | float)
               or not math.isfinite(v)]
        if bad:
            raise DesignError(f"{source}: component '{bad[0]}' must be a number (its variance).")
        if RESIDUAL not in values:
            raise DesignError(f"{source}: the components need a 'residual' (the error variance of one judgment).")
        facets = list(dict.fromkeys(f for k in values if k != RESIDUAL for f in k.split(":")))
        levels = payload.get("levels") or dict.fromkeys(facets, 0)
        if not isinstance(levels, dict) or any(not isinstance(v, int) or isinstance(v, bool) for v in levels.values()):
            raise DesignError(f"{source}: 'levels' must map each facet to its count, e.g. {{\"item\": 500}}.")
        missing = [f for f in facets if f not in levels]
        if missing:
            raise DesignError(f"{source}: 'levels' has no count for {', '.join(missing)}.")
        obj = payload.get("object")
        if obj is not None and obj not in levels:
            raise DesignError(f"{source}: the object of measurement '{obj}' is not a facet of the components "
                              f"({', '.join(levels)}).")
        fixed = payload.get("fixed", ())
        return cls.from_values({k: float(v) for k, v in values.items()}, {k: int(v) for k, v in levels.items()},
                               int(payload.get("replicates", 1)), object=obj, fixed=tuple(fixed),
                               nesting=dict(payload.get("nesting", {}))).with_sampling(
            payload.get("sampling")).with_estimand(payload.get("estimand"))

    @classmethod
    def from_values(cls, values: dict[str, float], levels: dict[str, int], replicates: int = 1, *,
                    object: str | None = None, fixed: tuple[str, ...] = (),  # noqa: A002 - G-theory word
                    nesting: dict[str, str] | None = None) -> VarianceComponents:
        """Components given as numbers (for planning from published estimates): name -> sigma2."""
        comps = []
        for name, value in values.items():
            facets = tuple(levels) if name == RESIDUAL else tuple(name.split(":"))
            kind = RESIDUAL if name == RESIDUAL else ("fixed" if set(facets) <= set(fixed) else "random")
            comps.append(Component(name, facets, float(value), math.nan, math.nan, kind))
        return cls("given", 0, math.nan, tuple(comps), dict(levels), replicates, object, tuple(fixed),
                   dict(nesting or {}), method_reason="given as numbers")


def _num(value: Any) -> float:
    return math.nan if value is None else float(value)


def _facets_of(name: str, payload: dict[str, Any]) -> list[str]:
    return list(payload["levels"]) if name == RESIDUAL else name.split(":")

