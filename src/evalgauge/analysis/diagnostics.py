"""Integrity diagnostics of a run: the failures that silently corrupt measurement (sizing sec. 4).

* replicate caching: what a response cache repeats across the replicates of a cell (a caching
  gateway makes residual variance read zero): the response id; the same long completion where the
  server gives no ids. Speed is no evidence (llama.cpp's and the providers' prompt caches answer a
  repeated prompt 5-19x faster with a new reply and a new id), and equal short verdicts ("Score: 4"
  on a 5-point scale) are what an honest judge often gives, so neither counts;
* empty completions and parse failures per judge (a reasoning judge whose
  token budget was sized for a score returns nothing);
* model identifiers that changed during the run (aliases resolving to other
  snapshots);
* designs that cannot identify a component (one replicate, one judge): not integrity failures but
  what the design does not measure, kept apart in ``design_notes``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from ..results import Result

CELL = ["item", "system", "variant", "temperature", "judge", "position"]


@dataclass(frozen=True)
class Diagnostics(Result):
    calls: int
    cells: int
    cached_cells: int
    cached_fraction: float
    repeated_response_ids: int
    per_judge: pd.DataFrame  # judge, calls, empty, parse_failures, usable, models
    model_changes: dict[str, list[str]]
    #: integrity failures (caching, empty completions, parse failures, snapshot drift)
    warnings: tuple[str, ...] = field(default=())
    #: what the design cannot measure (one replicate, one judge): no failure, said apart
    design_notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict:
        return {"calls": self.calls, "cells": self.cells, "cached_cells": self.cached_cells,
                "cached_fraction": self.cached_fraction, "repeated_response_ids": self.repeated_response_ids,
                "per_judge": self.per_judge.to_dict(orient="records"), "model_changes": self.model_changes,
                "warnings": list(self.warnings), "design_notes": list(self.design_notes)}


def diagnose(calls: pd.DataFrame) -> Diagnostics:
    """Diagnostics of the calls table of a run database."""
    warnings: list[str] = []
    if calls.empty:
        return Diagnostics(0, 0, 0, 0.0, 0, pd.DataFrame(), {}, ("no completed calls",))
    frame = calls.copy()
    cell_cols = [c for c in CELL if c in frame]
    frame[cell_cols] = frame[cell_cols].astype(object).fillna("")
    sizes = frame.groupby(cell_cols, sort=False, dropna=False).size()
    cached_cells = _cached_cells(frame, cell_cols)
    cached = int(cached_cells.sum())
    n_multi = int((sizes > 1).sum())
    rid_rep = int(frame["response_id"].dropna().duplicated().sum())
    fraction = cached / n_multi if n_multi else 0.0
    if n_multi and fraction > 0.5:
        warnings.append(f"replicate caching: {100 * fraction:.1f}% of cells with several replicates were answered "
                        "from a cache (the same response id, or the same long completion without ids); a caching "
                        "gateway makes residual variance read as zero. Disable response caching, or vary the "
                        "request (e.g. a per-call nonce), and rerun.")
    if rid_rep:
        warnings.append(f"{rid_rep} response id(s) repeat across calls: replies are being served from a cache.")
    per = []
    models: dict[str, list[str]] = {}
    for judge, g in frame.groupby("judge", sort=True):
        empty = int((g["completion"].fillna("").str.strip() == "").sum())
        failures = int(g["parse_error"].notna().sum())
        usable = int(g["score"].notna().sum())
        echoed = list(dict.fromkeys(g.sort_values("finished_at")["model"].dropna().astype(str)))
        per.append({"judge": judge, "calls": len(g), "empty": empty, "parse_failures": failures,
                    "usable": usable, "models": ", ".join(echoed)})
        if len(echoed) > 1:
            models[str(judge)] = echoed
            warnings.append(f"judge '{judge}': the provider echoed {len(echoed)} model identifiers during the run "
                            f"({', '.join(echoed)}); the alias resolved to different snapshots.")
        if empty / len(g) > 0.05:
            warnings.append(f"judge '{judge}': {empty} of {len(g)} completions are empty; a reasoning model may "
                            "spend its whole token budget thinking. Raise max_tokens.")
        if failures - empty > 0.05 * len(g):
            warnings.append(f"judge '{judge}': {failures - empty} completions could not be parsed; check the "
                            "template's answer format and the scoring mode.")
        if usable == 0:
            warnings.append(f"judge '{judge}' has no usable score: it drops out of the design.")
    design: list[str] = []
    reps = frame["replicate"].nunique()
    if reps < 2:
        design.append("one replicate per cell: the cell term and the residual are confounded (sizing sec. 3); "
                      "run at least 2 replicates to see run-to-run noise.")
    if frame["judge"].nunique() < 2:
        design.append("one judge: judge variance and the item x judge interaction are not identifiable.")
    return Diagnostics(len(frame), int(sizes.size), cached, fraction, rid_rep, pd.DataFrame(per), models,
                       tuple(warnings), tuple(design))


#: a completion at least this long, repeated byte for byte with no response ids, is a cache's, not chance
LONG_COMPLETION = 64


def _cached_cells(frame: pd.DataFrame, cell_cols: list[str]) -> pd.Series:
    """Per cell with several replicates: True when what a cache repeats is repeated (see the module)."""
    order = frame.sort_values("finished_at", kind="stable") if "finished_at" in frame else frame
    work = pd.DataFrame({"cell": order.groupby(cell_cols, sort=False, dropna=False).ngroup(),
                         "text": order["completion"].fillna(""), "rid": order["response_id"]})
    g = work.groupby("cell", sort=False)
    size = g.size()
    ids = g["rid"].agg(lambda r: r.notna().all())
    repeated_id = g["rid"].agg(lambda r: r.dropna().duplicated().any())
    same_text = g["text"].nunique() == 1
    long_text = g["text"].agg(lambda t: t.str.len().min() >= LONG_COMPLETION)
    cached = repeated_id | (same_text & ~ids & long_text)
    return cached & (size > 1)


#: the level at which the system x outcome test says the failures depend on the system
MISSING_TEST_LEVEL = 0.05
#: the fewest expected count in every cell for the chi-square approximation; below it, a permutation test
CHI2_MIN_EXPECTED = 5.0
#: permutations of the outcomes among the calls when the chi-square approximation does not hold
PERMUTATIONS = 4000


#: the facets whose levels the missing answers are tested against (each with more than one level)
MISSING_FACETS = ("system", "variant", "judge", "temperature", "position")


@dataclass(frozen=True)
class MissingAnswers(Result):
    """Calls stored without a score (parse failures and truncations), where they fall and whether their rate
    depends on any facet.

    ``table``: judge x variant x system rows with calls, scored, unread (a verdict not found or invalid),
    truncated (cut at max_tokens) and the unscored rate. ``by_facet``: the same by each facet of
    :data:`MISSING_FACETS` that has several levels (``by_system`` is the system's). ``tests``: for each such
    facet, Pearson's chi-square test of independence on the facet x (scored, unscored) table, or its
    permutation version when an expected count is below 5 (statistic, df, p, method), with Holm's adjusted p
    over the facets tested (``test`` is the system's). ``headline``: what a reader must know before any mean,
    when a facet's adjusted p is below 5%: the rates by its levels, and how the scored calls the estimate
    averages then lean (one variant's calls making most of a mean whose design weighs the variants equally).
    """

    calls: int
    unscored: int
    truncated: int
    table: pd.DataFrame
    by_system: pd.DataFrame
    test: dict | None
    headline: str | None
    by_facet: dict = field(default_factory=dict)
    tests: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"calls": self.calls, "unscored": self.unscored, "truncated": self.truncated,
                "table": self.table.to_dict(orient="records"), "by_system": self.by_system.to_dict(orient="records"),
                "test": self.test, "headline": self.headline,
                "by_facet": {f: t.to_dict(orient="records") for f, t in self.by_facet.items()}, "tests": self.tests}


@dataclass(frozen=True)
class RunDiagnostics(Result):
    """A run database's account of itself, before any fit: the integrity checks (:func:`diagnose`), the calls
    without a score (:func:`missing_answers`), each judge's within-call spread (``output = "logprobs"``: judge,
    mean_spread, calls) and what its record says the report leaves out (``notes``, after the design's own)."""

    integrity: Diagnostics
    missing: MissingAnswers
    within_call_spread: tuple[dict, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def warnings(self) -> tuple[str, ...]:
        return self.integrity.warnings

    @property
    def design_notes(self) -> tuple[str, ...]:
        return (*self.integrity.design_notes, *self.notes)

    def to_dict(self) -> dict:
        out = self.integrity.to_dict()
        out["design_notes"] = list(self.design_notes)
        out["missing_answers"] = self.missing.to_dict()
        if self.within_call_spread:
            out["within_call_spread"] = list(self.within_call_spread)
        return out


def missing_answers(calls: pd.DataFrame, seed: int = 0) -> MissingAnswers:
    """Where the calls without a score are, and a test of whether the failure rate depends on each facet."""
    frame = calls.copy()
    unscored = frame["score"].isna()
    finish = frame["finish_reason"] if "finish_reason" in frame else pd.Series(None, index=frame.index)
    truncated = unscored & (finish == "length")
    frame["scored"] = (~unscored).astype(int)
    frame["truncated"] = truncated.astype(int)
    frame["unread"] = (unscored & ~truncated).astype(int)
    facets = [c for c in MISSING_FACETS if c in frame and frame[c].notna().any()]
    for c in facets:
        frame[c] = frame[c].astype(str)
    keys = [c for c in ("judge", "variant", "system") if c in facets]
    table = _rates(frame, keys)
    varying = [f for f in facets if frame[f].nunique() > 1]
    by_facet = {f: _rates(frame, [f]) for f in varying}
    tests: dict[str, dict] = {}
    if unscored.any() and not unscored.all():  # with none (or all) scored there is no rate to compare
        tests = {f: _independence(frame[f].to_numpy(), unscored.to_numpy(), seed) for f in varying}
        _holm(tests)
    flagged = [f for f in varying if f in tests and tests[f]["p_holm"] < MISSING_TEST_LEVEL]
    headline = _missing_headline(flagged, by_facet, tests, frame) if flagged else None
    by_system = by_facet.get("system", pd.DataFrame())
    return MissingAnswers(len(frame), int(unscored.sum()), int(truncated.sum()), table, by_system,
                          tests.get("system"), headline, by_facet, tests)


def _holm(tests: dict[str, dict]) -> None:
    """Holm's step-down adjustment of the facets' p-values (``p_holm``): the chance that any facet is flagged
    when the rate depends on none stays at 5% however many facets are tested."""
    order = sorted(tests, key=lambda f: tests[f]["p"])
    running = 0.0
    for k, f in enumerate(order):
        running = max(running, min(1.0, (len(order) - k) * tests[f]["p"]))
        tests[f]["p_holm"] = running


def _missing_headline(flagged: list[str], by_facet: dict, tests: dict, frame: pd.DataFrame) -> str:
    """The rates by each flagged facet's levels and what the estimate then averages over, in words."""
    parts = []
    for f in flagged:
        rows = by_facet[f].to_dict(orient="records")
        rates = ", ".join(f"{r[f]} {100 * r['rate']:.0f}%" for r in rows)
        scored = sum(r["scored"] for r in rows)
        calls = sum(r["calls"] for r in rows)
        lean = max(rows, key=lambda r: r["scored"] / scored - r["calls"] / calls if scored else 0.0)
        share = lean["scored"] / scored if scored else 0.0
        parts.append(f"by {f} ({rates}; {tests[f]['method']} p = {tests[f]['p']:.2g}, Holm {tests[f]['p_holm']:.2g}): "
                     f"{100 * share:.0f}% of the scored calls are {f} {lean[f]}, which the design gives "
                     f"{100 * lean['calls'] / calls:.0f}%")
    what = "each system's mean comes from a different subset of its cells, so the comparison may be biased" \
        if "system" in flagged else "the estimate averages mostly over the levels that answered"
    return (f"The judges failed to give a readable verdict at rates that differ {'; and '.join(parts)}: {what}. "
            "Re-ask (reask = N), use structured output, raise max_tokens, or compare only cells every level has.")


def _rates(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    if not keys:
        return pd.DataFrame()
    g = frame.groupby(keys, sort=True)
    out = g.agg(calls=("scored", "size"), scored=("scored", "sum"), unread=("unread", "sum"),
                truncated=("truncated", "sum")).reset_index()
    out["rate"] = 1.0 - out["scored"] / out["calls"]
    return out


def _independence(groups, failed, seed: int) -> dict:
    """Pearson's chi-square test of a groups x (scored, failed) table; a permutation p-value (the same statistic,
    outcomes shuffled among the calls) when an expected count is below 5, where the chi-square law is poor."""
    import numpy as np

    codes, _ = pd.factorize(pd.Series(groups))
    failed = np.asarray(failed, dtype=bool)
    k = codes.max() + 1
    n_g = np.bincount(codes, minlength=k).astype(float)
    rate = failed.mean()

    def statistic(f) -> float:
        obs = np.bincount(codes, weights=f, minlength=k)
        exp_f, exp_s = n_g * rate, n_g * (1 - rate)
        return float(((obs - exp_f) ** 2 / exp_f).sum() + (((n_g - obs) - exp_s) ** 2 / exp_s).sum())

    stat = statistic(failed.astype(float))
    df = int(k - 1)
    if min((n_g * rate).min(), (n_g * (1 - rate)).min()) >= CHI2_MIN_EXPECTED:
        from scipy.stats import chi2

        return {"statistic": stat, "df": df, "p": float(chi2.sf(stat, df)), "method": "chi-square"}
    rng = np.random.default_rng(seed)
    f = failed.astype(float)
    hits = sum(statistic(rng.permutation(f)) >= stat - 1e-12 for _ in range(PERMUTATIONS))
    return {"statistic": stat, "df": df, "p": (hits + 1) / (PERMUTATIONS + 1), "method": "permutation chi-square"}
