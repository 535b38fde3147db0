"""What to fit, resolved once: a G-theory :class:`~evalgauge.design.Design` or an lme4-style formula.

Every entry point (``estimate_components``, the GLMM check, the strata, the report, the CLI) used to
branch on "design, or formula, or options to infer a design" itself; :func:`resolve_model` does it once
and the rest reads a :class:`ModelSpec`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..data import Judgments
from ..design import Design, infer_design
from ..errors import DesignError
from .model import MixedModel, model_from_design, parse_formula


@dataclass(frozen=True)
class ModelSpec:
    """A design (fitted by ANOVA or REML) or a formula (REML), with the mixed model either implies."""

    design: Design | None = None
    formula: str | None = None

    def __post_init__(self) -> None:
        if (self.design is None) == (self.formula is None):
            raise DesignError("give either a design or a formula (`formula`), not both or neither.")

    @property
    def mixed(self) -> MixedModel:
        """The random and fixed terms as lme4 would write them."""
        return parse_formula(self.formula) if self.formula is not None else model_from_design(self.design)

    @property
    def score(self) -> str:
        return self.mixed.response if self.formula is not None else self.design.score

    @property
    def facets(self) -> list[str] | None:
        """The design's facet columns (None for a formula)."""
        return list(self.design.names) if self.design is not None else None


def resolve_model(judgments: Judgments, design: Design | ModelSpec | None = None, formula: str | None = None,
                  **design_options: Any) -> ModelSpec:
    """The model to fit: ``formula`` if given, else ``design``, else a design inferred from the columns
    and ``design_options`` (see :func:`evalgauge.design.infer_design`)."""
    if isinstance(design, ModelSpec):
        return design
    if formula is not None:
        if design is not None:
            raise DesignError("give either a design or a formula (`formula`), not both.")
        parse_formula(formula)  # a malformed formula is named now, before any work
        return ModelSpec(formula=formula)
    return ModelSpec(design=design if design is not None else infer_design(judgments, **design_options))


def fitted_model(spec: ModelSpec, components) -> MixedModel:
    """The model a fit estimated, as lme4 would be given it: the likelihood fit's own formula, or for ANOVA the
    spec's model with the terms it estimated (the cell term is in the residual with one observation per cell)."""
    if components.reml is not None:
        return parse_formula(components.reml["formula"])
    model = spec.mixed
    estimated = {frozenset(c.facets) for c in components.components if c.name != "residual"}
    return model.fitted([t for t in model.random if frozenset(t.columns) in estimated])
