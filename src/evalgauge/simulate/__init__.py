"""Seeded simulators of the papers' data-generating processes.

A :class:`SimulationSpec` is a balanced design (facets, their level counts,
nesting), true variance components keyed by lme4-style effect names, and
replicates per cell. :func:`simulate` draws one long-format judgments table
from the linear random-effects model

    Y = mu + sum over effects b of nu_b + residual,   nu_b ~ N(0, sigma2_b) iid,

which is TEE eq. 1 (with item = category + item-within-category, C.1) and
sizing eq. 1 as special cases. A facet listed in ``fixed`` has deterministic
level effects instead: equally spaced, centred, with population variance
(1/L) sum (tau_l - tau_bar)^2 equal to the given component (TEE C.4; for TEE
Table 8 this gives {-0.15, 0, 0.15} for a variance of 0.015).

Presets: :func:`tee_table8` (TEE E.4, Table 8) and :func:`sizing_preset`
(sizing eq. 1, s x i x j x r).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from ..design import RESIDUAL, Design, Facet
from ..errors import DesignError


@dataclass(frozen=True)
class SimulationSpec:
    """A balanced design with known components, for simulation and planning."""

    counts: dict[str, int]
    components: dict[str, float]
    nest: dict[str, str] = field(default_factory=dict)  # child -> parent
    fixed: tuple[str, ...] = ()
    replicates: int = 1
    mu: float = 0.0
    object: str | None = None
    #: the model's terms (None: every effect); the generating model when it omits effects
    terms: tuple[str, ...] | None = None

    def design(self) -> Design:
        """The :class:`Design` that describes data drawn from this spec."""
        facets = []
        for name in self.counts:
            role = "object" if name == self.object else ("fixed" if name in self.fixed else "random")
            facets.append(Facet(name, role, self.nest.get(name)))
        return Design(tuple(facets), score="score", replicate="replicate" if self.replicates > 1 else None,
                      terms=self.terms)

    def with_counts(self, **counts: int) -> SimulationSpec:
        """A copy with some facet counts (or ``replicates``) changed."""
        reps = counts.pop("replicates", self.replicates)
        unknown = set(counts) - set(self.counts)
        if unknown:
            raise DesignError(f"unknown facet(s) {', '.join(sorted(unknown))}; facets are {', '.join(self.counts)}.")
        return replace(self, counts={**self.counts, **counts}, replicates=reps)

    def true_components(self) -> dict[str, float]:
        """Components keyed by the canonical names the estimators report."""
        design = self.design()
        out = {}
        for name, value in self.components.items():
            out[RESIDUAL if name == RESIDUAL else design.effect_named(name).name] = value
        return out


def fixed_levels(variance: float, n_levels: int) -> np.ndarray:
    """Equally spaced centred level effects with population variance ``variance``."""
    base = np.arange(n_levels) - (n_levels - 1) / 2.0
    scale = np.sqrt(variance / np.mean(base**2)) if variance > 0 else 0.0
    return base * scale


def simulate_array(spec: SimulationSpec, rng: np.random.Generator) -> np.ndarray:
    """The scores as a dense array, one axis per facet (nested facets within parent) plus replicates."""
    design = spec.design()
    names = design.names
    shape = tuple(spec.counts[n] for n in names)
    y = np.full((*shape, spec.replicates), float(spec.mu))
    for name, sigma2 in spec.components.items():
        if name == RESIDUAL:
            continue
        if sigma2 < 0:
            raise DesignError(f"component {name}: a variance cannot be negative ({sigma2}).")
        effect = design.effect_named(name)
        dims = [spec.counts[n] if n in effect.facets else 1 for n in names] + [1]
        if set(effect.facets) <= set(spec.fixed):
            if len(effect.facets) != 1:
                raise DesignError(f"component {name}: give fixed-by-fixed interactions as explicit levels.")
            y += fixed_levels(sigma2, spec.counts[effect.facets[0]]).reshape(dims)
        else:
            y += rng.normal(0.0, np.sqrt(sigma2), size=dims)
    residual = spec.components.get(RESIDUAL, 0.0)
    if residual > 0:
        y += rng.normal(0.0, np.sqrt(residual), size=y.shape)
    return y


def simulate(spec: SimulationSpec, seed: int | np.random.Generator | None = None) -> pd.DataFrame:
    """Draw one long-format judgments table: a column per facet, ``replicate`` and ``score``.

    Level labels are strings; a nested facet's labels are unique across parents
    (``item`` 'c02-i05'), so the table reads like real data.
    """
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    y = simulate_array(spec, rng)
    design = spec.design()
    names = design.names
    grids = np.indices(y.shape).reshape(y.ndim, -1)
    columns: dict[str, object] = {}
    for _k, name in enumerate(names):
        columns[name] = _labels(spec, design, name, grids, names)
    if spec.replicates > 1:
        columns["replicate"] = grids[-1] + 1
    columns["score"] = y.ravel()
    return pd.DataFrame(columns)


def _labels(spec: SimulationSpec, design: Design, name: str, grids: np.ndarray, names) -> pd.Categorical:
    k = names.index(name)
    prefix = _prefix(name)
    width = len(str(spec.counts[name]))
    own = np.array([f"{prefix}{j + 1:0{width}d}" for j in range(spec.counts[name])])
    chain = design.ancestors(name)[::-1]
    if not chain:
        return pd.Categorical.from_codes(grids[k], own)
    # unique labels across parents: prefix with the ancestors' labels
    dims = [spec.counts[a] for a in chain] + [spec.counts[name]]
    idx = [grids[names.index(a)] for a in chain] + [grids[k]]
    flat = np.ravel_multi_index(tuple(idx), tuple(dims))
    parts = np.meshgrid(*[np.array([f"{_prefix(a)}{j + 1:0{len(str(spec.counts[a]))}d}"
                                    for j in range(spec.counts[a])]) for a in (*chain, name)],
                        indexing="ij")
    cats = np.array(["-".join(p) for p in zip(*[q.ravel() for q in parts], strict=True)])
    return pd.Categorical.from_codes(flat, cats)


def _prefix(name: str) -> str:
    return {"system": "s", "item": "i", "judge": "j", "variant": "v", "temperature": "t",
            "category": "c", "position": "p"}.get(name, name[:3])


# ---------------------------------------------------------------------------
# Presets
# ---------------------------------------------------------------------------

def tee_table8(categories: int = 5, items_per_category: int = 10, variants: int = 3,
               temperatures: int = 3, judges: int = 3, replicates: int = 5) -> SimulationSpec:
    """TEE eq. 1 with the Table 8 parameters (TEE sec. E.4).

    Table 8 lists sigma2_alpha (item) = 0.04 and sigma2_kappa (category) = 0.015;
    since alpha_i = kappa_c + delta_i|c (C.1), we read 0.04 as the total item
    variance and set sigma2_delta = 0.025. Temperature and judge are fixed with
    levels {-0.15, 0, 0.15} (population variance 0.015). Table 8's residual 0.03
    is the replicate noise rho (E.4 fits no separate cell term); the cell term
    epsilon is 0. Item interactions are drawn at the item level, which is the
    category:item term of the nested design. The spec's model is TEE's: the
    terms of eq. 1 plus the cell term, the other effects pooled into it.
    """
    components = {
        "category": 0.015, "category:item": 0.025, "variant": 0.015,
        "temperature": 0.015, "judge": 0.015,
        "category:item:variant": 0.008, "category:item:temperature": 0.008,
        "category:item:judge": 0.02,
        "variant:temperature": 0.003, "variant:judge": 0.003,
        RESIDUAL: 0.03,
    }
    return SimulationSpec(
        counts={"category": categories, "item": items_per_category, "variant": variants,
                "temperature": temperatures, "judge": judges},
        components=components,
        nest={"item": "category"},
        fixed=("temperature", "judge"),
        replicates=replicates,
        mu=0.5,
        object="item",
        # TEE's model: main effects, the two-way interactions of eq. 1 and the cell term
        terms=tuple(k for k in components if k != RESIDUAL),
    )


def sizing_preset(systems: int = 42, items: int = 30, judges: int = 9, replicates: int = 3) -> SimulationSpec:
    """Sizing eq. 1: s x i x j x r(sij), system as the object of measurement.

    The paper does not print its component estimates, so these values are
    illustrative, chosen to reproduce the shape it reports for MT-Bench under
    its generic rubric (Table 1, sec. 5.2): sigma2_s is 4.5 % of the total and
    the single-judge ceiling sigma2_s / (sigma2_s + sigma2_sj) is 0.600.
    """
    return SimulationSpec(
        counts={"system": systems, "item": items, "judge": judges},
        components={
            "system": 0.08, "item": 0.45, "judge": 0.10,
            "system:item": 0.35, "system:judge": 0.08 * (1 / 0.6 - 1), "item:judge": 0.15,
            "system:item:judge": 0.40, RESIDUAL: 0.20,
        },
        replicates=replicates,
        mu=3.0,
        object="system",
    )


PRESETS = {"tee": tee_table8, "sizing": sizing_preset}
