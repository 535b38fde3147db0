"""The analysis of pairwise judgments, shared by `evalgauge pairwise`, `evalgauge analyze` and the report.

Bradley-Terry(-Davidson) on pair counts with an optional first-slot term, the Chatbot Arena Elo beside
the model's own, the naive and the TEE-aware bootstraps, which system is better, position bias, and the
variance components of the win indicators (sizing sec. 5.4) with their MDD and single-judge ceiling.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pandas as pd

from ..components import VarianceComponents
from ..data import Judgments
from ..design import Design, Facet
from ..errors import DataError, DesignError, EvalGaugeError
from ..pairwise import (
    BattleCounts,
    Battles,
    BTFit,
    aggregate,
    arena_elo,
    bootstrap_bt,
    code_battles,
    compare_bt,
    comparison_groups,
    count_battles,
    fit_bt,
    human_agreement,
    item_column,
    position_bias,
    separated_systems,
    slot_is_presentation_order,
    system_win_rows,
)
from ..results import Result, json_safe

if TYPE_CHECKING:  # the studies and the D-study are loaded only when needed
    from ..dstudy import Projection
    from ..pairwise import PositionBias
    from .arena import ArenaStudies

ELO_NOTE = ("elo: the model's own scale (Davidson ties, first-slot term); elo_arena: Chatbot Arena's (ties as half "
            "wins, no position term, 1000 at the mean or mixtral-8x7b-instruct-v0.1 at 1114), for comparison "
            "with published Arena ratings.")


@dataclass
class PairwiseAnalysis(Result):
    """Everything `evalgauge pairwise` prints: ``table`` (one row per system), ``payload`` (the JSON).
    ``battles`` are the coded rows (None when an engine reduced the file to ``counts``)."""

    battles: Battles | None
    counts: BattleCounts
    fit: BTFit
    table: pd.DataFrame
    notes: list[str]
    payload: dict[str, Any] = field(default_factory=dict)
    components: VarianceComponents | None = None
    comparison: Any = None  # evalgauge.compare.Comparison of the Bradley-Terry strengths
    #: TEE's arena studies when the log has several configurations (and the bootstrap ran)
    studies: ArenaStudies | None = None
    #: arena-hard's weighted win share per system (system, win_share, battles) when the rows carry weights
    win_shares: pd.DataFrame | None = None
    #: how much more often a system wins presented first (when every system was in both slots)
    position: PositionBias | None = None
    #: the judge's agreement with a column of human votes (overall, n, ab_only, n_ab)
    human: dict[str, float] | None = None
    #: the win indicators' D-study at the observed design, and at one judge with unlimited items
    projection: Projection | None = None
    ceiling: Projection | None = None

    def to_dict(self) -> dict[str, Any]:
        return json_safe(self.payload)

    def _keep_win(self, fitted: WinComponents | None) -> None:
        """Keep the win indicators' G-study (None: left out or failed, as the notes say)."""
        if fitted is not None:
            self.components, self.projection, self.ceiling = fitted

    def to_frame(self) -> pd.DataFrame:
        return self.table.copy()


def analyze_pairwise(judgments: Judgments, *, reference: str | None = None, baseline: str | None = None,
                     position: bool = True, n_boot: int = 200, seed: int | None = 0, human: str | None = None,
                     method: str = "auto", components: bool | None = None, progress=None,
                     best_of: int | None = None, fitter=None) -> PairwiseAnalysis:
    """Analyse model_a / model_b / winner rows (a judgments table); see the module docstring.

    ``reference`` is the system at log strength 0; ``baseline`` a fixed opponent left out of the
    components; ``human`` a column with human votes (TEE Table 17's agreement); ``components=False`` leaves
    out the win indicators' G-study (a REML fit over every judgment twice, the costly part on a large log),
    ``True`` fits it whatever it costs, and ``None`` (the default) fits it when its expected cost is at most
    :data:`COMPONENTS_AUTO_SECONDS` and otherwise says, before any work, what was left out and how to fit it;
    whose size, expected cost and evaluations ``progress`` hears as :func:`evalgauge.estimate.reml.fit_reml`
    says them. A log judged under several configurations (judge, variant, order columns) with items also gets
    TEE's arena studies (:func:`evalgauge.analysis.arena.arena_studies`: naive, single-cell and TEE-pipeline
    SEs, each pipeline's human agreement, the gaming surface over ``best_of`` configurations). ``fitter(rows,
    design, method=, progress=)`` fits the win indicators' components (the API's door,
    :func:`evalgauge.api.fit_components`; :func:`evalgauge.estimate.estimate_components` when None).
    """
    battles = code_battles(judgments)
    notes: list[str] = []
    named = item_column(judgments.frame.columns)
    if named not in (None, "item"):
        notes.append(f"items: the column '{named}' (each battle is a pair of systems on one of its items; the "
                     "intervals resample them). Name another with --item.")
    for name, param in ((baseline, "baseline"), (reference, "reference")):
        if name is not None and name not in battles.systems:
            raise DataError(f"`{param}` '{name}' is not among the systems ({', '.join(battles.systems)}).")
    if human and human not in battles.frame:
        raise DataError(f"{judgments.source}: no column '{human}' for the human votes (`human`).")
    counts = count_battles(battles, _weights(battles, judgments.source, notes))
    result = _analyze(counts, battles, judgments.source, notes, reference=reference, baseline=baseline,
                      position=position, n_boot=n_boot, seed=seed, human=human, method=method,
                      components=components, progress=progress, fitter=fitter)
    if n_boot >= 2:
        from .arena import arena_studies

        studies = arena_studies(battles, result.fit, n_boot=n_boot, seed=seed, human=human, best_of=best_of,
                                ridge=_ridge(counts.entries, counts.weights, []))
        if studies is not None:
            result.studies = studies
            result.payload["arena_studies"] = studies.to_dict()
    return result


def analyze_battle_counts(counts: BattleCounts, *, source: str = "the counts", reference: str | None = None,
                          baseline: str | None = None, position: bool = True, n_boot: int = 200,
                          seed: int | None = 0, components: bool | None = None,
                          progress=None, fitter=None) -> PairwiseAnalysis:
    """The same analysis from judgments reduced to counts (an engine over the files, :mod:`evalgauge.io.engine`):
    Bradley-Terry, both Elo scales, both bootstraps and position bias, equal to :func:`analyze_pairwise` on the
    rows; from an engine's distinct judgments (``counts.judgments_counted``, item, judge and variant kept) also
    the win indicators' components, from their cell statistics (``components`` and ``progress`` as there;
    ``fitter(cells, design, progress=...)`` fits them: the command line's fits through
    :func:`evalgauge.api.fit` with ``sums=True``, :func:`evalgauge.estimate.estimate_from_sums` when None).
    Human agreement needs the rows."""
    for name, param in ((baseline, "baseline"), (reference, "reference")):
        if name is not None and name not in counts.systems:
            raise DataError(f"`{param}` '{name}' is not among the systems ({', '.join(counts.systems)}).")
    notes = ["each row counts 'weight' times (arena-hard: a >> verdict is 3 battles)."] if counts.weighted else []
    result = _analyze(counts, None, source, notes, reference=reference, baseline=baseline, position=position,
                      n_boot=n_boot, seed=seed, human=None, method="auto", components=False, progress=None)
    if components is not False and counts.judgments_counted is not None:
        if baseline is None and len(counts.systems) == 2:
            baseline = result.fit.reference  # two systems: one's win indicator mirrors the other's
        result._keep_win(_win_components_from_cells(counts.judgments_counted, baseline, result.notes, result.payload,
                                              progress, budget=None if components else COMPONENTS_AUTO_SECONDS,
                                              fitter=fitter))
    return result


def _analyze(counts: BattleCounts, battles: Battles | None, source: str, notes: list[str], *, reference, baseline,
             position, n_boot, seed, human, method, components, progress, fitter=None) -> PairwiseAnalysis:
    """Everything from the counts; the win-indicator components and human agreement from the rows when given."""
    entries, weights = counts.entries, counts.weights
    _connected(entries, source)
    both_slots, slot_note = slot_is_presentation_order(counts)
    if slot_note:
        notes.append(slot_note)
    ridge = _ridge(entries, weights, notes)
    # the fit on counts: battles with the same pair, slot and outcome are sufficient statistics
    agg, pair_counts = aggregate(entries, weights)
    fit = fit_bt(agg, reference=reference, position=position and both_slots, weights=pair_counts, ridge=ridge)
    table = fit.table()
    arena = dict(zip(counts.systems, arena_elo(agg, pair_counts), strict=True))
    table["elo_arena"] = table["system"].map(arena)
    notes.append(ELO_NOTE)
    payload: dict[str, Any] = {"systems": len(counts.systems), "judgments": counts.judgments,
                               "reference": fit.reference, "ties": fit.log_nu is not None,
                               "nu": None if fit.log_nu is None else float(np.exp(fit.log_nu)),
                               "position_advantage_log_odds": fit.log_h, "notes": notes}
    shares = weighted_win_share(entries, weights) if counts.weighted else None
    if shares is not None:
        payload["weighted_win_share"] = shares
    comparison = _bootstraps(counts, fit, table, payload, n_boot, seed, ridge)
    payload["bradley_terry"] = table.to_dict(orient="records")
    bias = None
    if both_slots and all((entries.a == k).any() and (entries.b == k).any() for k in range(len(counts.systems))):
        bias = position_bias(entries, counts.rows)
        payload["position_bias"] = {"slot_a_advantage": bias.advantage, "spread_sd": bias.spread,
                                    "max": bias.maximum, "per_system": bias.per_system}
    won = None
    if battles is not None and components is not False:
        if baseline is None and len(counts.systems) == 2:
            baseline = fit.reference  # two systems: one's win indicator mirrors the other's
        won = _win_components(battles, baseline, method, notes, payload, progress, fitter=fitter,
                              budget=None if components else COMPONENTS_AUTO_SECONDS)
    agreement = None
    if human and battles is not None:
        judge_vote = pd.Series(np.where(battles.outcome == 1.0, "a", np.where(battles.outcome == 0.0, "b", "tie")))
        agreement = human_agreement(judge_vote, battles.frame[human].reset_index(drop=True))
        payload["human_agreement"] = agreement
    result = PairwiseAnalysis(battles, counts, fit, table, notes, payload, comparison=comparison,
                              win_shares=None if shares is None else pd.DataFrame(shares), position=bias,
                              human=agreement)
    result._keep_win(won)
    return result


def _connected(battles: Battles, source: str) -> None:
    groups = comparison_groups(battles)
    if len(groups) > 1:
        parts = "; ".join("{" + ", ".join(g[:6]) + (", ..." if len(g) > 6 else "") + "}" for g in groups)
        raise DataError(f"{source}: the systems fall into {len(groups)} groups never compared with each other "
                        f"({parts}): strengths across groups are not comparable. Add comparisons between "
                        "the groups, or analyse each group on its own.")


def _weights(battles: Battles, source: str, notes: list[str]) -> np.ndarray | None:
    """Each row's weight from a ``weight`` column (None without one)."""
    if "weight" not in battles.frame:
        return None
    weights = pd.to_numeric(battles.frame["weight"], errors="coerce").to_numpy(dtype=float)
    if not np.all(np.isfinite(weights) & (weights >= 0)):
        raise DataError(f"{source}: column 'weight' must hold non-negative numbers on every row.")
    notes.append("each row counts 'weight' times (arena-hard: a >> verdict is 3 battles).")
    return weights


def _ridge(battles: Battles, weights: np.ndarray | None, notes: list[str]) -> float:
    separated = separated_systems(battles, weights)
    if not separated:
        return 0.0
    notes.append(f"{', '.join(separated[:6])}{' ...' if len(separated) > 6 else ''} won or lost every game "
                 "against the rest, so their maximum-likelihood strengths are infinite; the estimates are "
                 "penalised (a normal prior on log strengths, ridge 0.1) and bounded, and their intervals are "
                 "wide by design. More games would identify them.")
    return 0.1


def _bootstraps(counts, fit, table, payload, n_boot, seed, ridge):
    """The naive and the TEE-aware bootstrap intervals (columns of ``table``) and, with enough rounds,
    which system is better."""
    if not n_boot:
        return None
    order = [fit.systems.index(s) for s in table["system"]]
    boots = {}
    for method in ("naive", "tee"):
        if method == "tee" and counts.battles_are_rows:
            # one judgment per battle: no cells within a battle to resample, the two bootstraps are one draw
            boots["tee"] = replace(boots["naive"], method="tee")
        else:
            boots[method] = bootstrap_bt(counts, fit, method=method, n_boot=n_boot, seed=seed,
                                         position=fit.log_h is not None, ridge=ridge)
        boot = boots[method]
        table[f"{method}_low"] = boot.low[order]
        table[f"{method}_high"] = boot.high[order]
    if n_boot >= 100 and len(counts.systems) > 2:
        comparison = compare_bt(fit, boots["tee"], boots["naive"])
        payload["comparison"] = comparison.to_dict()
        return comparison
    return None


_NO_WIN_DESIGN = ("the win indicators need an 'item' column and two or more systems for their components; the "
                  "Bradley-Terry analysis needs neither: `evalgauge pairwise FILE`, or in Python "
                  "evalgauge.analysis.pairwise.analyze_pairwise(eg.read(log)).")


def win_indicator_rows(battles: Battles, baseline: str | None = None) -> tuple[pd.DataFrame, Design]:
    """Each system's win indicator per judgment (ties 0.5; :func:`evalgauge.pairwise.system_win_rows`) and
    their design: the system the object, the slot (position) a fixed facet, item, judge and variant random
    where they vary. A log without items (or with one system) has no G-study: :class:`DesignError`."""
    if "item" not in battles.frame:  # said before building two rows per judgment
        raise DesignError(_NO_WIN_DESIGN)
    rows = system_win_rows(battles, baseline)
    facets = [c for c in ("system", "item", "judge", "variant", "position") if c in rows and rows[c].nunique() > 1]
    if not ("item" in facets and "system" in facets):
        raise DesignError(_NO_WIN_DESIGN)
    rows = rows.assign(replicate=rows.groupby(facets).cumcount() + 1)
    design = Design(tuple(Facet(f, "object" if f == "system" else ("fixed" if f == "position" else "random"))
                          for f in facets), replicate="replicate")
    return rows, design


def win_indicator_cells(judgments: pd.DataFrame, baseline: str | None = None) -> tuple[pd.DataFrame, Design]:
    """The win indicators' cell statistics from distinct judgments counted by an engine (``model_a``, ``model_b``,
    ``outcome``, ``rows`` and the item, judge and variant columns present): per system x item x judge x variant x
    slot, the count, sum and sum of squares of the indicator, and the design :func:`win_indicator_rows` gives the
    rows (the replicates summed within cells). :class:`DesignError` as there."""
    extra = [c for c in ("item", "judge", "variant") if c in judgments]
    n = judgments["rows"].to_numpy(float)
    parts = []
    for slot, column, score in (("A", "model_a", judgments["outcome"].to_numpy(float)),
                                ("B", "model_b", 1.0 - judgments["outcome"].to_numpy(float))):
        part = judgments[extra].copy()
        part.insert(0, "system", judgments[column].to_numpy())
        part["position"] = slot
        part["n"], part["sum"], part["sum_squares"] = n, n * score, n * score * score
        parts.append(part)
    both = pd.concat(parts, ignore_index=True)
    if baseline:
        both = both[both["system"] != baseline]
    facets = [c for c in ("system", *extra, "position") if both[c].nunique() > 1]
    if not ("item" in facets and "system" in facets):
        raise DesignError("the win indicators need an 'item' column and two or more systems for their components.")
    cells = both.groupby(facets, observed=True, sort=True)[["n", "sum", "sum_squares"]].sum().reset_index()
    cells["n"] = cells["n"].astype(np.int64)
    design = Design(tuple(Facet(f, "object" if f == "system" else ("fixed" if f == "position" else "random"))
                          for f in facets))
    return cells, design


#: the expected seconds (:class:`evalgauge.estimate.criterion.ModelSize`) above which the win indicators' G-study
#: is left out unless asked for: on an arena-sized log with most terms at zero it runs several times longer than
#: expected (40,000 battles: expected 46 s, took 252 s)
COMPONENTS_AUTO_SECONDS = 20.0


class _Unaffordable(Exception):
    """Raised from the fit's first progress call when its expected cost is above the budget."""

    def __init__(self, size):
        super().__init__(str(size))
        self.size = size


def _win_components(battles, baseline, method, notes, payload, progress=None, *, fitter=None,
                    budget: float | None = None) -> WinComponents | None:
    """The variance components of the win indicators (position a fixed facet), their MDD and ceiling; with a
    ``budget`` (seconds), left out with a note when the fit is expected to cost more, before it starts."""
    try:
        rows, design = win_indicator_rows(battles, baseline)
    except DesignError:
        return None
    if fitter is None:
        from ..estimate import estimate_components as fitter  # only a log with items loads the fit

    return _within_budget(lambda sized: fitter(rows, design, method=method, progress=sized), design,
                          notes, payload, progress, budget)


def _within_budget(fit, design, notes, payload, progress, budget: float | None) -> WinComponents | None:
    """``fit(progress)`` run with a progress hook that stops it before any work when its expected cost is above
    ``budget`` seconds (None: no limit), saying so in ``notes``."""

    def sized(size, evaluations, seconds):
        if budget is not None and evaluations == 0 and getattr(size, "seconds", 0.0) > budget:
            raise _Unaffordable(size)
        if progress is not None:
            progress(size, evaluations, seconds)

    try:
        return _components_payload(lambda: fit(sized), design, notes, payload)
    except _Unaffordable as skip:
        notes.append(f"the win indicators' G-study was left out: {skip.size} (with most terms at zero such fits "
                     "take several times longer than expected). Add --components to fit it anyway "
                     "(components=True in Python); the ratings and both bootstraps above do not need it.")
        return None


def _win_components_from_cells(judgments, baseline, notes, payload, progress=None,
                               budget: float | None = None, fitter=None) -> WinComponents | None:
    """The same components from an engine's distinct judgments (:func:`win_indicator_cells`)."""
    if fitter is None:
        from ..estimate import estimate_from_sums

        def fitter(cells, design, progress=None):
            return estimate_from_sums(cells, design=design, progress=progress)

    empty = [c for c in ("item", "judge", "variant") if c in judgments and judgments[c].isna().any()]
    if empty:
        notes.append(f"the win-indicator components could not be estimated: column '{empty[0]}' is empty on some "
                     "rows; fill it in for the G-study.")
        return None
    try:
        cells, design = win_indicator_cells(judgments, baseline)
    except DesignError:
        return None
    return _within_budget(lambda sized: fitter(cells, design, progress=sized), design, notes, payload, progress,
                          budget)


class WinComponents(NamedTuple):
    """The win indicators' components with their D-study at the observed design and, with judges, the ceiling."""

    components: VarianceComponents
    projection: Projection
    ceiling: Projection | None


def _components_payload(fit, design, notes, payload) -> WinComponents | None:
    from .. import dstudy  # only for logs with items: an arena's battles without them never load the G-study

    try:
        comps = fit()
    except EvalGaugeError as exc:
        notes.append(f"the win-indicator components could not be estimated: {exc}")
        return None
    if not comps.converged:  # a fit short of its optimum has no components to report, as elsewhere
        summary = comps.reml
        message = summary.get("message") if isinstance(summary, dict) else getattr(summary, "message", "")
        notes.append(f"the win indicators' G-study did not converge ({message or 'no optimum reached'}); its "
                     "components, MDD and ceiling are not reported. The ratings and both bootstraps above do not "
                     "need it; fewer terms (--terms) or more battles per cell would help it.")
        return None
    payload["components"] = comps.to_dict()
    proj = dstudy.project(comps)
    payload["mdd95_win_rate_points"] = 100 * proj.mdd95
    payload["erho2"] = proj.erho2
    ceil = None
    if "judge" in design.names:
        ceil = dstudy.ceiling(comps, "judge", 1)
        payload["ceiling"] = ceil.erho2
        payload["mdd_floor_win_rate_points"] = 100 * ceil.mdd95
    return WinComponents(comps, proj, ceil)


def weighted_win_share(battles: Battles, weights: np.ndarray) -> list[dict]:
    """Each system's share of weighted battles won (ties half): arena-hard's own score against its baseline."""
    rows = []
    y = battles.outcome
    for k, name in enumerate(battles.systems):
        in_a, in_b = battles.a == k, battles.b == k
        won = float(weights[in_a] @ y[in_a] + weights[in_b] @ (1.0 - y[in_b]))
        total = float(weights[in_a].sum() + weights[in_b].sum())
        rows.append({"system": name, "win_share": won / total if total else None, "battles": total})
    return rows
