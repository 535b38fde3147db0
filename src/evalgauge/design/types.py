"""The design's value types: facets with their roles and nesting, effects, the design itself (its effects and
terms), and the design inferred from a table's columns (the vocabulary is in :mod:`evalgauge.design`)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .. import vocabulary
from ..data import Judgments, as_judgments, require_columns
from ..errors import DesignError

ROLES = ("object", "random", "fixed")


#: Column names recognised when the design is not given explicitly.
SCORE_NAMES = vocabulary.SCORE_NAMES
FACET_NAMES = vocabulary.FACET_NAMES
OBJECT_NAMES = vocabulary.OBJECT_NAMES
FIXED_NAMES = vocabulary.FIXED_NAMES
DEFAULT_NESTS = vocabulary.DEFAULT_NESTS


RESIDUAL = vocabulary.RESIDUAL


@dataclass(frozen=True)
class Facet:
    """One facet of the design: its column, role and (optional) parent facet."""

    name: str
    role: str = "random"
    parent: str | None = None

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise DesignError(f"facet '{self.name}': role must be one of {', '.join(ROLES)}, not '{self.role}'.")

    @property
    def is_fixed(self) -> bool:
        return self.role == "fixed"


@dataclass(frozen=True)
class Effect:
    """A model term: a nesting-closed set of facets, named lme4-style."""

    facets: tuple[str, ...]
    primary: tuple[str, ...]
    nesting: tuple[str, ...]

    @property
    def name(self) -> str:
        return ":".join(self.facets)

    @property
    def order(self) -> int:
        return len(self.primary)


@dataclass(frozen=True)
class Design:
    """What each facet is, which column holds the score and the replicate index.

    ``terms`` restricts the model to the named effects (lme4-style names); the
    omitted effects are pooled into the smallest included effect containing them
    (their variance is assumed zero, as when TEE omits three-way interactions).
    ``max_order`` keeps every effect of at most that order. The effect of all
    facets together (the cell term) is always kept.
    """

    facets: tuple[Facet, ...]
    score: str = "score"
    replicate: str | None = None
    terms: tuple[str, ...] | None = None
    max_order: int | None = None
    #: what inference decided for the user (a one-level facet left out), shown with the results
    notes: tuple[str, ...] = field(default=(), compare=False)
    _by_name: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_name: dict[str, Facet] = {}
        for f in self.facets:
            if f.name in by_name:
                raise DesignError(f"facet '{f.name}' is listed twice.")
            by_name[f.name] = f
        for f in self.facets:
            if f.parent is not None and f.parent not in by_name:
                raise DesignError(f"facet '{f.name}' is nested in '{f.parent}', which is not a facet of the design.")
        object.__setattr__(self, "_by_name", by_name)
        object.__setattr__(self, "facets", _topological(self.facets, by_name))
        if len([f for f in self.facets if f.role == "object"]) > 1:
            raise DesignError("only one facet can be the object of measurement.")
        if self.replicate is not None and self.replicate in by_name:
            raise DesignError(f"'{self.replicate}' is both a facet and the replicate column; it can be only one.")
        if self.max_order is not None and self.max_order < 1:
            raise DesignError("max_order must be at least 1.")

    # -- facts about facets -------------------------------------------------
    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.facets)

    @property
    def object(self) -> str | None:
        return next((f.name for f in self.facets if f.role == "object"), None)

    @property
    def fixed(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.facets if f.is_fixed)

    def role(self, role: str) -> str | None:
        """The facet that plays ``role``: the object and the replicate column as the design says, the item,
        judge and variant by their names (:func:`evalgauge.vocabulary.facet_with_role`)."""
        if role == "object":
            return self.object
        if role == "replicate":
            return self.replicate
        return vocabulary.facet_with_role(role, self.names, exclude=(self.object,))

    @property
    def roles(self) -> dict[str, str]:
        """Role -> facet for every role the design has (object, item, judge, variant, replicate)."""
        return {r: f for r in vocabulary.ROLE_NAMES if (f := self.role(r)) is not None}

    def facet(self, name: str) -> Facet:
        try:
            return self._by_name[name]
        except KeyError:
            raise DesignError(f"'{name}' is not a facet of the design ({', '.join(self.names)}).") from None

    def ancestors(self, name: str) -> tuple[str, ...]:
        out: list[str] = []
        parent = self.facet(name).parent
        while parent is not None:
            out.append(parent)
            parent = self.facet(parent).parent
        return tuple(out)

    # -- effects --------------------------------------------------------------
    def all_effects(self) -> list[Effect]:
        """Every nesting-closed, non-empty set of facets, in a canonical order."""
        names = self.names
        effects = []
        for size in range(1, len(names) + 1):
            for combo in itertools.combinations(names, size):
                chosen = set(combo)
                if all(set(self.ancestors(n)) <= chosen for n in combo):
                    effects.append(self._effect(combo))
        return effects

    def _effect(self, facets: Iterable[str]) -> Effect:
        chosen = set(facets)
        ordered = tuple(n for n in self.names if n in chosen)
        parents = {self.facet(n).parent for n in ordered} - {None}
        primary = tuple(n for n in ordered if n not in parents)
        nesting = tuple(n for n in ordered if n in parents)
        return Effect(ordered, primary, nesting)

    def effect_named(self, name: str) -> Effect:
        """Look up an effect by an lme4-style name, in any facet order."""
        parts = [p.strip() for p in name.split(":") if p.strip()]
        unknown = [p for p in parts if p not in self._by_name]
        if unknown or not parts:
            valid = ", ".join(e.name for e in self.all_effects())
            raise DesignError(f"'{name}' is not a term of this design. Terms are: {valid}.")
        closed = set(parts)
        for p in parts:
            closed |= set(self.ancestors(p))
        return self._effect(closed)

    def model_effects(self, every: list[Effect] | None = None) -> list[Effect]:
        """The effects the model estimates (see ``terms`` and ``max_order``)."""
        every = self.all_effects() if every is None else every
        top = every[-1]
        if self.terms is not None:
            keep = {self.effect_named(t).facets for t in self.terms} | {top.facets}
            return [e for e in every if e.facets in keep]
        if self.max_order is not None:
            return [e for e in every if e.order <= self.max_order or e.facets == top.facets]
        return every


def _topological(facets: Sequence[Facet], by_name: dict[str, Facet]) -> tuple[Facet, ...]:
    """Order facets so that every parent precedes its children (stable otherwise)."""
    out: list[Facet] = []
    placed: set[str] = set()
    visiting: set[str] = set()

    def place(f: Facet) -> None:
        if f.name in placed:
            return
        if f.name in visiting:
            raise DesignError(f"nesting of '{f.name}' is circular.")
        visiting.add(f.name)
        if f.parent is not None:
            place(by_name[f.parent])
        out.append(f)
        placed.add(f.name)

    for f in facets:
        place(f)
    return tuple(out)


# ---------------------------------------------------------------------------
# Building a design from column names and options
# ---------------------------------------------------------------------------


def parse_nest(spec: str | Sequence[str] | None) -> list[tuple[str, str]] | None:
    """'category/item,item/turn' -> [('category','item'), ('item','turn')]; 'none' -> []."""
    if spec is None:
        return None
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    pairs = []
    for raw in items:
        raw = raw.strip()
        if not raw or raw.lower() == "none":
            continue
        parts = [p.strip() for p in raw.split("/")]
        if len(parts) < 2 or not all(parts):
            raise DesignError(f"nesting '{raw}' should read parent/child, e.g. category/item.")
        pairs.extend(itertools.pairwise(parts))
    return pairs


def _split(spec: str | Sequence[str] | None) -> list[str] | None:
    if spec is None:
        return None
    if isinstance(spec, str):
        return [s.strip() for s in spec.split(",") if s.strip()]
    return list(spec)


def infer_design(
    data,
    *,
    score: str | None = None,
    facets: str | Sequence[str] | None = None,
    nest: str | Sequence[str] | None = None,
    replicate: str | None = None,
    fixed: str | Sequence[str] | None = None,
    object: str | None = None,  # noqa: A002 - the G-theory word
    terms: str | Sequence[str] | None = None,
    max_order: int | None = None,
) -> Design:
    """A :class:`Design` from explicit options, defaulting from column names.

    Defaults: the score is the first of ``score, parsed_score, y, value, rating``;
    the replicate column the first of ``replicate, rep, replication, run``;
    facets every column with a recognised facet name; ``item`` nests in
    ``category`` when both are facets; ``temperature``, ``position`` and
    ``order`` are fixed, and so are ``aspect``, ``dimension`` and ``criterion``
    (their levels are different measures, with a note); the object of measurement is ``system`` (or ``model``,
    ``sut``) when present, otherwise ``item``. ``replicate="auto"`` numbers
    repeated rows of a cell in file order (for data such as lme4's Pastes that
    carry no replicate column). Every default can be overridden.
    """
    judgments = as_judgments(data)
    columns = list(judgments.frame.columns)

    score = score or next((c for c in SCORE_NAMES if c in columns), None)
    if score is None:
        raise DesignError(
            f"{judgments.source}: no score column found (looked for {', '.join(SCORE_NAMES)}). "
            f"The columns are: {', '.join(columns)}. Name it with `score`."
        )
    if replicate is None:
        replicate = next((c for c in vocabulary.REPLICATE_COLUMNS if c in columns), None)

    facet_names = _split(facets)
    if facet_names is None:
        facet_names = [c for c in columns if c.lower() in FACET_NAMES and c not in (score, replicate)]
        if not facet_names:
            raise DesignError(
                f"{judgments.source}: no facet columns recognised (known names: {', '.join(FACET_NAMES)}). "
                f"The columns are: {', '.join(columns)}. Name the facets with `facets` (a,b,c)."
            )
        facet_names, notes = _drop_single_level(judgments, facet_names)
    else:
        notes = []
    require_columns(judgments, facet_names + [score] + ([replicate] if replicate not in (None, "auto") else []))
    if score in facet_names:
        raise DesignError(f"'{score}' is the score column; it cannot also be a facet.")

    pairs = parse_nest(nest)
    if pairs is None:
        pairs = [p for p in DEFAULT_NESTS if p[0] in facet_names and p[1] in facet_names]
    parent_of: dict[str, str] = {}
    for parent, child in pairs:
        for name in (parent, child):
            if name not in facet_names:
                raise DesignError(
                    f"nesting {parent}/{child}: '{name}' is not among the facets ({', '.join(facet_names)})."
                )
        if child in parent_of and parent_of[child] != parent:
            raise DesignError(
                f"facet '{child}' is nested in both '{parent_of[child]}' and '{parent}'; give one parent."
            )
        parent_of[child] = parent

    fixed_names = _split(fixed)
    if fixed_names is None:
        fixed_names = [c for c in facet_names if c.lower() in FIXED_NAMES]
        for c in facet_names:
            if c.lower() in vocabulary.CONSTRUCT_NAMES:  # different measures, not a sample of conditions
                fixed_names.append(c)
                notes.append(f"facet '{c}' names different measures ({_levels(judgments.frame[c])}): it is held "
                             "fixed, so the results are about these measures together and no intervention adds "
                             f"'{c}' levels; `analyze` also reports each one (--by {c}). Name --fixed to choose "
                             "otherwise.")
    for name in fixed_names:
        if name not in facet_names:
            raise DesignError(f"`fixed` '{name}' is not among the facets ({', '.join(facet_names)}).")

    target = object
    if target is None:
        target = next((c for c in facet_names if c.lower() in OBJECT_NAMES), None)
        if target is None and "item" in facet_names:
            target = "item"
    elif target not in facet_names:
        raise DesignError(f"object of measurement '{target}' is not among the facets ({', '.join(facet_names)}).")

    built = []
    for name in facet_names:
        role = "object" if name == target else ("fixed" if name in fixed_names else "random")
        built.append(Facet(name, role, parent_of.get(name)))
    return Design(tuple(built), score=score, replicate=replicate,
                  terms=tuple(_split(terms)) if terms is not None else None, max_order=max_order,
                  notes=tuple(notes))


def _levels(values, shown: int = 4) -> str:
    levels = [str(v) for v in values.dropna().unique()]  # in order of appearance
    return ", ".join(levels[:shown]) + (f" and {len(levels) - shown} more" if len(levels) > shown else "")


def _drop_single_level(judgments: Judgments, names: list[str]) -> tuple[list[str], list[str]]:
    """Recognised facet columns with one level say nothing about variance (one model, one scorer):
    an inferred design leaves them out and says so; a facet the user names is kept (and refused)."""
    frame = judgments.frame
    single = [c for c in names if frame[c].nunique(dropna=True) == 1]
    if not single or len(single) == len(names):
        return names, []
    notes = [f"facet '{c}' has one level ('{frame[c].dropna().iloc[0]}') and was left out of the design: that "
             "level is a fixed condition of the study, and its variance cannot be estimated from these data."
             for c in single]
    return [c for c in names if c not in single], notes


# ---------------------------------------------------------------------------
# Coding the data against the design
# ---------------------------------------------------------------------------
