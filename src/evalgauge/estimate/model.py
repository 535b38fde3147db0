"""Mixed-model specifications: from a Design, or from an lme4-style formula.

A :class:`MixedModel` names the response, the fixed-effect terms (factors and
their interactions, treatment-coded as R codes them) and the random-intercept
terms (a grouping given by one or more columns). Only variance-component models
are supported: random intercepts, no random slopes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from itertools import combinations, pairwise

from ..design import Design
from ..errors import DesignError


@dataclass(frozen=True)
class Term:
    """A model term: the columns whose level combinations index it, and its name."""

    columns: tuple[str, ...]

    @property
    def name(self) -> str:
        return ":".join(self.columns)


@dataclass(frozen=True)
class MixedModel:
    """response ~ fixed terms + (1 | random terms)."""

    response: str
    fixed: tuple[Term, ...]
    random: tuple[Term, ...]
    intercept: bool = True
    #: child column -> parent column, from the design or from 'a/b' in a formula
    nesting: tuple[tuple[str, str], ...] = ()

    @property
    def columns(self) -> tuple[str, ...]:
        """Every column the model uses besides the response, in first-use order."""
        seen: dict[str, None] = {}
        for term in self.fixed + self.random:
            for c in term.columns:
                seen.setdefault(c, None)
        return tuple(seen)

    def formula(self) -> str:
        parts = [("1" if self.intercept else "0")] + [t.name for t in self.fixed]
        parts += [f"(1 | {t.name})" for t in self.random]
        return f"{self.response} ~ " + " + ".join(parts)

    def fitted(self, terms) -> MixedModel:
        """The model with only the random ``terms`` a fit estimated (a term with one level, one with another's
        levels, or the cell term with one observation per cell is left out of the fit), so that its formula is
        the model that was fitted, and lme4 given it fits the same."""
        kept = {t.name for t in terms}
        return replace(self, random=tuple(t for t in self.random if t.name in kept))


def model_from_design(design: Design) -> MixedModel:
    """The design's model: fixed-only effects as fixed terms, every other effect random.

    The top effect (the cell term) is always included; whether it is separately
    identifiable from the residual is decided on the data (it needs replicates).
    """
    fixed = set(design.fixed)
    fixed_terms, random_terms = [], []
    for effect in design.model_effects():
        term = Term(effect.facets)
        (fixed_terms if set(effect.facets) <= fixed else random_terms).append(term)
    if not random_terms:
        raise DesignError("the model has no random term: every facet is fixed. Make at least one facet random.")
    nesting = tuple((f.name, f.parent) for f in design.facets if f.parent)
    return MixedModel(design.score, tuple(fixed_terms), tuple(random_terms), nesting=nesting)


_RANDOM = re.compile(r"\(\s*([^|()]*?)\s*\|\s*([^()]*?)\s*\)")


def parse_formula(formula: str) -> MixedModel:
    """Parse an lme4-style variance-component formula.

    Supported: ``y ~ a + b + a:b + a*b + (1|g) + (1|g1:g2) + (1|g1/g2)``; ``0 +`` or
    ``- 1`` drops the intercept. ``a/b`` in a random term expands to ``a`` and
    ``a:b`` as in lme4. Every fixed term is treated as a factor. Random slopes
    (``(x|g)``) and ``||`` are not supported and raise a :class:`DesignError`.
    """
    if "~" not in formula:
        raise DesignError(f"formula '{formula}' has no '~'; write it as 'score ~ fixed + (1|group)'.")
    lhs, rhs = (s.strip() for s in formula.split("~", 1))
    if not re.fullmatch(r"[A-Za-z_.][\w.]*", lhs):
        raise DesignError(f"formula response '{lhs}' should be one column name.")
    random_terms: list[Term] = []
    nesting: list[tuple[str, str]] = []
    for expr, group in _RANDOM.findall(rhs):
        if expr.strip() != "1":
            raise DesignError(
                f"random term '({expr} | {group})': only random intercepts '(1 | {group})' are supported "
                "(variance components); random slopes are not."
            )
        if "|" in group:
            raise DesignError(f"'||' in '({expr} || {group})' is not supported; write (1 | {group.strip('| ')}).")
        for term in _expand_random(group):
            if term not in random_terms:
                random_terms.append(term)
        if "/" in group:
            parts = [p.strip() for p in group.split("/")]
            nesting += [(child, parent) for parent, child in pairwise(parts)
                        if (child, parent) not in nesting]
    fixed_part = _RANDOM.sub("", rhs)
    intercept = True
    fixed_terms: list[Term] = []
    tokens = [t.strip() for t in re.split(r"(?<![-])\+", fixed_part.replace("- 1", "+ -1").replace("-1", "+ -1"))]
    for tok in tokens:
        if not tok:
            continue
        if tok in ("0", "-1"):
            intercept = False
            continue
        if tok == "1":
            continue
        tok = re.sub(r"\s*([:*])\s*", r"\1", tok)  # lme4 reads 'a * b' and 'a : b' as 'a*b' and 'a:b'
        if not re.fullmatch(r"[\w.:*]+", tok):
            raise DesignError(f"cannot read the fixed term '{tok}' of '{formula}'.")
        for term in _expand_fixed(tok):
            if term not in fixed_terms:
                fixed_terms.append(term)
    if not random_terms:
        raise DesignError(f"formula '{formula}' has no random term; add at least one '(1 | group)'.")
    return MixedModel(lhs, tuple(fixed_terms), tuple(random_terms), intercept, tuple(nesting))


def _expand_random(group: str) -> list[Term]:
    group = group.strip()
    if "/" in group:
        parts = [p.strip() for p in group.split("/")]
        return [Term(tuple(":".join(parts[: k + 1]).split(":"))) for k in range(len(parts))]
    return [Term(tuple(p.strip() for p in group.split(":")))]


def _expand_fixed(tok: str) -> list[Term]:
    if "*" in tok:
        factors = [f.strip() for f in tok.split("*")]
        return [Term(combo) for size in range(1, len(factors) + 1) for combo in combinations(factors, size)]
    return [Term(tuple(p.strip() for p in tok.split(":")))]
