"""Facets, their roles, nesting, the model's effects, and the balance report.

Vocabulary (Brennan 2001; TEE section 3 and Table 2; sizing paper section 3):

* a *facet* is a column whose levels index the observation (system, item,
  prompt variant, temperature, judge, position...);
* the *object of measurement* is the facet whose universe score is wanted: the
  system in the sizing paper, the item in TEE;
* a *random* facet's levels are exchangeable draws (item, variant, judge in the
  sizing paper); a *fixed* facet's levels were chosen (temperature, a judge
  panel in TEE, presentation position);
* a facet may be *nested* in another (item within category): its levels are
  distinct within each level of its parent;
* replicates are repeated calls with identical inputs, nested in the cell.

An *effect* is a set of facets closed under nesting (an effect that contains
``item`` contains ``category``). Its *primary* facets are those not serving as
a parent to another facet in the set; its *order* is the number of primary
facets (``category:item`` is a main effect, order 1).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from . import vocabulary
from .data import Judgments, as_judgments, numeric_scores, require_columns
from .errors import DesignError

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

    def with_roles(self, **roles: str) -> Design:
        """A copy with some facets' roles changed, e.g. ``with_roles(judge="fixed")``."""
        facets = tuple(Facet(f.name, roles.get(f.name, f.role), f.parent) for f in self.facets)
        return Design(facets, self.score, self.replicate, self.terms, self.max_order)


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

@dataclass(frozen=True)
class CodedData:
    """Judgments coded to integer levels, one axis per facet.

    ``codes[k]`` is the level of facet k within its parent (0..n_k-1), so the
    cells form a dense grid of shape ``shape`` when the design is balanced.
    """

    design: Design
    source: str
    y: np.ndarray
    codes: tuple[np.ndarray, ...]
    shape: tuple[int, ...]
    labels: tuple[tuple[str, ...], ...]  # level labels per facet (global, not within parent)
    cell: np.ndarray  # flat cell index per row
    cell_count: np.ndarray  # observations per cell, length prod(shape)
    #: per nested facet: (parent combination x within-parent level) -> global level, -1 if absent
    nested_levels: tuple[np.ndarray | None, ...]

    @property
    def n_obs(self) -> int:
        return int(self.y.size)

    def is_complete_block(self) -> bool:
        """Every cell has the same number (at least one) of observations: cheap, no report."""
        count = self.cell_count
        nested_full = all(g is None or bool((g >= 0).all()) for g in self.nested_levels)
        return nested_full and count.size > 0 and count.min() > 0 and count.min() == count.max()

    def balance(self) -> BalanceReport:
        return balance_report(self)


def code_data(data, design: Design) -> CodedData:
    """Code every facet column to integers and validate what coding can see.

    Raises :class:`DataError`/:class:`DesignError` for non-numeric or missing
    scores, empty facet labels, a facet with one level, broken nesting (a child
    level under two parents), and duplicate observations without a replicate.
    """
    judgments = as_judgments(data)
    require_columns(judgments, list(design.names), what="facet column")
    y = numeric_scores(judgments, design.score)

    codes: list[np.ndarray] = []
    shape: list[int] = []
    labels: list[tuple[str, ...]] = []
    nested: list[np.ndarray | None] = []
    index_of = {name: k for k, name in enumerate(design.names)}
    global_codes: dict[str, np.ndarray] = {}
    for f in design.facets:
        g, uniques = _factorize(judgments, f.name)
        global_codes[f.name] = g
        labels.append(tuple(str(u) for u in uniques))
        if f.parent is None:
            codes.append(g)
            shape.append(len(uniques))
            nested.append(None)
            if len(uniques) < 2:
                _one_level(judgments, f.name, uniques)
            continue
        parent_key, n_parent = _ancestor_key(design, f.name, codes, shape, index_of)
        within, grid, relabel = _nest_within(judgments, design, f.name, g, len(uniques), parent_key, n_parent)
        if relabel is not None:
            labels[-1] = relabel
        codes.append(within)
        shape.append(grid.shape[1])
        nested.append(grid)
        if grid.shape[1] < 2:
            raise DesignError(
                f"{judgments.source}: facet '{f.name}' has one level within each level of '{f.parent}', "
                f"so it is the same facet as '{f.parent}'. Drop it from `facets` or drop the nesting."
            )
    _check_grid(judgments, design, shape, len(y))
    cell = np.ravel_multi_index(tuple(codes), tuple(shape)) if codes else np.zeros(len(y), np.int64)
    n_cells = int(np.prod(shape))
    count = np.bincount(cell, minlength=n_cells)
    _check_replicates(judgments, design, cell, count, n_cells)
    return CodedData(design, judgments.source, y, tuple(codes), tuple(shape), tuple(labels),
                     cell, count, tuple(nested))


#: the design's grid of cells (every combination of levels) is counted densely; past this many cells
#: and this many times the rows, it is refused before anything that size is allocated
MAX_GRID_CELLS = 2 * 10**8
MAX_GRID_PER_ROW = 100


def _check_grid(judgments: Judgments, design: Design, shape: list[int], n_rows: int) -> None:
    """Refuse, with the sizes and what to do, a grid of cells too large to count (before allocating it)."""
    import math

    n_cells = math.prod(shape)  # a Python int: no overflow however many levels
    if n_cells <= MAX_GRID_CELLS or n_cells <= MAX_GRID_PER_ROW * n_rows:
        return
    sizes = " x ".join(f"{f.name} {k:,}" for f, k in zip(design.facets, shape, strict=True))
    raise DesignError(
        f"{judgments.source}: the design's grid ({sizes}) has {n_cells:.3g} cells for {n_rows:,} rows, "
        f"{100 * n_rows / n_cells:.2g}% of them filled; counting it would take {8 * n_cells / 2**30:,.0f} GiB, "
        "and so sparse a design cannot estimate the interactions of these facets. Nest a facet in another "
        "(`nest`, e.g. item/judge when each item has its own judges), drop a facet (`facets`), or keep "
        "fewer levels of a facet.")


def _factorize(judgments: Judgments, column: str) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes for a column, levels in sorted order (hash first, then sort the few uniques)."""
    codes, uniques = pd.factorize(judgments.frame[column])
    codes = np.asarray(codes, dtype=np.int64)
    uniques = np.asarray(uniques)
    try:
        order = np.argsort(uniques, kind="stable")
    except TypeError:  # mixed types: keep first-seen order
        order = np.arange(len(uniques))
    if not np.array_equal(order, np.arange(len(uniques))):
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order))
        codes = np.where(codes >= 0, rank[codes], codes)
        uniques = uniques[order]
    if (codes < 0).any():
        rows = np.flatnonzero(codes < 0)
        raise DesignError(
            f"{judgments.source}: facet column '{column}' is empty on {rows.size} row(s): {judgments.rows(rows)}. "
            "Every judgment needs a level of every facet; fill these in or remove the rows."
        )
    return codes, uniques


def _one_level(judgments: Judgments, name: str, uniques) -> None:
    raise one_level_error(judgments.source, name, uniques[0] if len(uniques) else "(none)")


def one_level_error(source: str, name: str, level) -> DesignError:
    """A facet of the design with one level: its variance cannot be estimated (the rows' and the cells' refusal)."""
    return DesignError(
        f"{source}: facet '{name}' has one level ('{level}'), so its variance cannot be estimated. "
        f"Drop it from `facets` (its level is then part of the fixed conditions of the study)."
    )


def _ancestor_key(design: Design, name: str, codes, shape, index_of) -> tuple[np.ndarray, int]:
    """A flat code for the combination of a facet's ancestors' levels."""
    ancestors = design.ancestors(name)[::-1]  # outermost first
    idx = [index_of[a] for a in ancestors]
    dims = tuple(shape[i] for i in idx)
    key = np.ravel_multi_index(tuple(codes[i] for i in idx), dims)
    return key, int(np.prod(dims))


def _nest_within(judgments: Judgments, design: Design, name: str, g: np.ndarray, n_levels: int,
                 parent_key: np.ndarray, n_parent: int) -> tuple[np.ndarray, np.ndarray, tuple | None]:
    """Recode a nested facet's levels to levels within its parent.

    Returns the within-parent codes, the (parent x within) -> level grid, and
    new level labels 'parent/child' when labels restart within each parent.
    A child level seen under two parent levels otherwise breaks nesting and is
    reported with the rows that show it.
    """
    relabel = None
    owner = np.full(n_levels, -1, dtype=np.int64)
    first_rows = np.flatnonzero(~pd.Series(g).duplicated().to_numpy())
    owner[g[first_rows]] = parent_key[first_rows]  # the first parent seen wins; the rest are checked
    broken = owner[g] != parent_key
    if broken.any() and _labels_restart(g, parent_key, n_levels, n_parent):
        # Labels restart within each parent (item 1, 2, ... under every
        # category), as lme4 reads category/item: the child is the pair.
        pair, _ = pd.factorize(parent_key * n_levels + g, sort=True)
        pair = np.asarray(pair, dtype=np.int64)
        n_pairs = int(pair.max()) + 1
        owner = np.full(n_pairs, -1, dtype=np.int64)
        owner[pair] = parent_key
        g, n_levels, broken = pair, n_pairs, np.zeros(len(g), dtype=bool)
        first = np.empty(n_pairs, dtype=np.int64)
        first[pair[::-1]] = np.arange(len(pair))[::-1]
        parent = design.facet(name).parent
        at = judgments.frame.iloc[first]
        relabel = tuple(f"{a}/{b}" for a, b in zip(at[parent].astype(str), at[name].astype(str), strict=True))
    if broken.any():
        rows = np.flatnonzero(broken)
        r0 = rows[0]
        parent = design.facet(name).parent
        frame = judgments.frame
        level = frame[name].iloc[r0]
        first = np.flatnonzero((g == g[r0]) & ~broken)[0]
        raise DesignError(
            f"{judgments.source}: '{name}' is nested in '{parent}', but {name} '{level}' appears under "
            f"{parent} '{frame[parent].iloc[first]}' (row {first + 1}) and '{frame[parent].iloc[r0]}' "
            f"(row {r0 + 1}); {rows.size} row(s) disagree with the first parent seen. Give each {name} one "
            f"{parent} (if {name} labels restart within each {parent}, make them unique, e.g. "
            f"'{parent}1-{name}3'), or drop the nesting (`nest`=none)."
        )
    # Rank each child among the children of its parent, in label order.
    order = np.lexsort((np.arange(n_levels), owner))
    owner_sorted = owner[order]
    starts = np.r_[0, np.flatnonzero(np.diff(owner_sorted)) + 1]
    run_start = np.repeat(starts, np.diff(np.r_[starts, owner_sorted.size]))
    rank = np.empty(n_levels, dtype=np.int64)
    rank[order] = np.arange(n_levels) - run_start
    seen = owner >= 0
    grid = np.full((n_parent, int(rank[seen].max()) + 1), -1, dtype=np.int64)
    grid[owner[seen], rank[seen]] = np.flatnonzero(seen)
    return rank[g], grid, relabel


def _labels_restart(g: np.ndarray, parent_key: np.ndarray, n_levels: int, n_parent: int) -> bool:
    """Whether child labels are relative to their parent rather than one stray duplicate.

    Relative labelling (Brennan's i:p data, lme4's category/item) reuses labels
    under every parent: each parent shares a label with another parent and at
    least half of the labels occur under several parents. A unique-id column
    with an item filed under two categories does neither.
    """
    pairs = pd.unique(parent_key * n_levels + g)
    child, parent = pairs % n_levels, pairs // n_levels
    parents_per_label = np.bincount(child, minlength=n_levels)
    shared_label = parents_per_label[child] > 1
    parents_sharing = np.unique(parent[shared_label])
    used = parents_per_label > 0
    return (parents_sharing.size == np.unique(parent).size
            and (parents_per_label[used] > 1).mean() >= 0.5)


def _columns_differing(judgments: Judgments, design: Design, rows: np.ndarray) -> list[str]:
    """Columns outside the design whose values differ between rows of one cell (a left-out facet)."""
    frame = judgments.frame
    skip = {*design.names, design.score, design.replicate}
    out = []
    for col in frame.columns:
        if col in skip:
            continue
        if frame[col].iloc[rows].nunique(dropna=False) > 1:
            out.append(str(col))
    return out[:3]


def _check_replicates(judgments: Judgments, design: Design, cell: np.ndarray, count: np.ndarray,
                      n_cells: int) -> None:
    if design.replicate is None:
        dup = count[cell] > 1
        if dup.any():
            rows = np.flatnonzero(dup)
            first = rows[cell[rows] == cell[rows[0]]]
            differs = _columns_differing(judgments, design, first)
            hint = (f" They differ in {', '.join(repr(c) for c in differs)}: a facet the design left out? Add it "
                    "to `facets`." if differs else "")
            raise DesignError(
                f"{judgments.source}: {rows.size} rows share their facet levels with another row (for example "
                f"{judgments.rows(first)} are the same cell of {', '.join(design.names)}), and there is no "
                f"replicate column.{hint} If these are repeated calls, name the column that numbers them with "
                "`replicate` COL (or `replicate`=auto to number them in file order); if a facet is missing, "
                "add it to `facets`; if they are accidental duplicates, remove them."
            )
        return
    if design.replicate == "auto":
        return
    rep = _replicate_codes(judgments, design.replicate)
    n_rep = int(rep.max()) + 1
    if n_cells * n_rep <= 50_000_000:
        key = cell * n_rep + rep
        seen = np.bincount(key, minlength=n_cells * n_rep)
        if seen.max() <= 1:  # the common case: no per-row work
            return
        dup = seen[key] > 1
    else:  # pragma: no cover - huge grids: hash instead of a dense table
        dup = pd.Series(cell * n_rep + rep).duplicated(keep=False).to_numpy()
    if dup.any():
        rows = np.flatnonzero(dup)
        raise DesignError(
            f"{judgments.source}: {rows.size} rows repeat both the facet levels and the replicate "
            f"'{design.replicate}' of another row ({judgments.rows(rows)}). Each replicate of a cell must be "
            "one row: remove the duplicates, or check that no facet column is missing from `facets`."
        )


def _replicate_codes(judgments: Judgments, column: str) -> np.ndarray:
    """Codes of the replicate column; small non-negative integers are used as they are."""
    values = judgments.frame[column]
    if pd.api.types.is_integer_dtype(values.dtype) and not values.isna().any():
        v = values.to_numpy(dtype=np.int64)
        low = int(v.min())
        if int(v.max()) - low < 1_000_000:
            return v - low
    return _factorize(judgments, column)[0]


# ---------------------------------------------------------------------------
# Balance
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class BalanceReport:
    """Whether the data form a complete balanced block, and where they do not.

    ``missing_by_facet`` maps each facet to ``{level: missing cells}`` for the
    levels with missing cells (worst first); ``replicates`` maps a replicate
    count to how many cells have it.
    """

    balanced: bool
    n_obs: int
    n_cells: int
    n_cells_observed: int
    replicates: dict[int, int]
    levels: dict[str, int]
    missing_by_facet: dict[str, dict[str, int]]
    unequal_nesting: dict[str, dict[int, int]]
    example_missing: tuple[dict[str, str], ...]

    @property
    def n_cells_missing(self) -> int:
        return self.n_cells - self.n_cells_observed

    def summary(self) -> str:
        """A plain-text paragraph for messages and the CLI."""
        if self.balanced:
            reps = next(iter(self.replicates))
            return (f"complete balanced block: {self.n_cells} cells "
                    f"({' x '.join(f'{n} {k}' for k, n in self.levels.items())}) x {reps} replicate(s).")
        lines = [f"not a complete balanced block: {self.n_cells_missing} of {self.n_cells} cells have no "
                 f"observation."]
        if len(self.replicates) > 1:
            dist = ", ".join(f"{n} cell(s) with {r}" for r, n in sorted(self.replicates.items()))
            lines.append(f"Observations per observed cell differ: {dist}.")
        for facet, per in self.unequal_nesting.items():
            dist = ", ".join(f"{n} parent level(s) with {k}" for k, n in sorted(per.items()))
            lines.append(f"'{facet}' has unequal numbers of levels per parent: {dist}.")
        for facet, per in self.missing_by_facet.items():
            worst = list(per.items())[:5]
            more = f" and {len(per) - 5} more" if len(per) > 5 else ""
            lines.append(f"Missing cells by {facet}: " + ", ".join(f"'{k}' {v}" for k, v in worst) + more + ".")
        if self.example_missing:
            ex = "; ".join(", ".join(f"{k}={v}" for k, v in cell.items()) for cell in self.example_missing)
            lines.append(f"For example: {ex}.")
        return " ".join(lines)


def balance_report(coded: CodedData) -> BalanceReport:
    """Describe how far the coded data are from a complete crossed block."""
    design = coded.design
    count = coded.cell_count
    grid = count.reshape(coded.shape)
    valid = _valid_cells(coded)
    observed = count[valid.ravel()] > 0
    per_cell = np.bincount(count[valid.ravel()][observed])
    reps = {int(k): int(v) for k, v in enumerate(per_cell) if v > 0}
    unequal = {}
    for f, grid_k in zip(design.facets, coded.nested_levels, strict=True):
        if grid_k is not None:
            per = (grid_k >= 0).sum(axis=1)
            vals = per[per > 0]
            if vals.size and vals.min() != vals.max():
                unequal[f.name] = {int(k): int(v) for k, v in pd.Series(vals).value_counts().items()}
    missing = (grid == 0) & valid
    by_facet: dict[str, dict[str, int]] = {}
    examples: list[dict[str, str]] = []
    if missing.any():
        cells = np.argwhere(missing)
        level_idx = [_level_index(coded, k, cells) for k in range(len(design.facets))]
        for k, f in enumerate(design.facets):
            tally = np.bincount(level_idx[k], minlength=len(coded.labels[k]))
            worst = np.lexsort((np.arange(tally.size), -tally))
            by_facet[f.name] = {coded.labels[k][i]: int(tally[i]) for i in worst if tally[i] > 0}
        for j in range(min(3, len(cells))):
            examples.append({f.name: coded.labels[k][level_idx[k][j]] for k, f in enumerate(design.facets)})
    n_cells = int(valid.sum())
    n_obs_cells = int(observed.sum())
    balanced = (n_obs_cells == n_cells and len(reps) == 1 and not unequal
                and bool(valid.all()))
    return BalanceReport(
        balanced=balanced,
        n_obs=coded.n_obs,
        n_cells=n_cells,
        n_cells_observed=n_obs_cells,
        replicates=reps,
        levels={f.name: len(lab) for f, lab in zip(design.facets, coded.labels, strict=True)},
        missing_by_facet=by_facet,
        unequal_nesting=unequal,
        example_missing=tuple(examples),
    )


def balance_of_cells(cells: pd.DataFrame, design: Design, n: str = "n") -> BalanceReport:
    """The balance report of per-cell counts (one row per observed combination of the facets with its number of
    judgments ``n``, as an engine reduces them): the same report as the rows' (:func:`balance_report`)."""
    coded = code_data(cells.assign(**{design.score: 0.0}), replace(design, replicate=None))
    count = np.bincount(coded.cell, weights=cells[n].to_numpy(dtype=float), minlength=coded.cell_count.size)
    report = balance_report(replace(coded, cell_count=count.astype(np.int64)))
    return replace(report, n_obs=int(cells[n].sum()))


def _valid_cells(coded: CodedData) -> np.ndarray:
    """Grid cells that exist: a nested child index beyond its parent's count does not."""
    valid = np.ones(coded.shape, dtype=bool)
    design = coded.design
    ndim = len(coded.shape)
    for k, (f, grid) in enumerate(zip(design.facets, coded.nested_levels, strict=True)):
        if grid is None:
            continue
        # Ancestors precede their children in design order, so outermost-first
        # ancestor axes are ascending and the parent key ravels in that order.
        anc = sorted(design.names.index(a) for a in design.ancestors(f.name))
        exists = (grid >= 0).reshape([coded.shape[i] for i in anc] + [coded.shape[k]])
        shape = [coded.shape[i] if i in anc or i == k else 1 for i in range(ndim)]
        valid &= exists.reshape(shape)
    return valid


def _level_index(coded: CodedData, k: int, cells: np.ndarray) -> np.ndarray:
    """Global level index of facet k at each grid cell (rows of ``cells``)."""
    design = coded.design
    grid = coded.nested_levels[k]
    if grid is None:
        return cells[:, k]
    anc = sorted(design.names.index(a) for a in design.ancestors(design.facets[k].name))
    key = np.ravel_multi_index(tuple(cells[:, i] for i in anc), tuple(coded.shape[i] for i in anc))
    return grid[key, cells[:, k]]
