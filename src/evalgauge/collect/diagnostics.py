"""Integrity diagnostics of a run: the failures that silently corrupt measurement (sizing sec. 4).

* replicate caching: what a cache repeats across the replicates of a cell (a caching
  gateway makes residual variance read zero): the response id; the same long completion where the
  server gives no ids; the same completion returned at a fraction of the cell's first call's latency.
  Equal short verdicts ("Score: 4" on a 5-point scale) are what an honest judge often gives, and
  never count alone;
* empty completions and parse failures per judge (a reasoning judge whose
  token budget was sized for a score returns nothing);
* model identifiers that changed during the run (aliases resolving to other
  snapshots);
* designs that cannot identify a component (one replicate, one judge, a judge
  with no usable score).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

CELL = ["item", "system", "variant", "temperature", "judge", "position"]


@dataclass(frozen=True)
class Diagnostics:
    calls: int
    cells: int
    cached_cells: int
    cached_fraction: float
    repeated_response_ids: int
    per_judge: pd.DataFrame  # judge, calls, empty, parse_failures, usable, models
    model_changes: dict[str, list[str]]
    warnings: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict:
        return {"calls": self.calls, "cells": self.cells, "cached_cells": self.cached_cells,
                "cached_fraction": self.cached_fraction, "repeated_response_ids": self.repeated_response_ids,
                "per_judge": self.per_judge.to_dict(orient="records"), "model_changes": self.model_changes,
                "warnings": list(self.warnings)}


def diagnose(calls: pd.DataFrame, replicates_planned: int | None = None) -> Diagnostics:
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
                        "from a cache (the same response id, or the same completion without ids or at a fraction "
                        "of the first call's latency); a caching gateway makes residual variance read as zero. Disable "
                        "response caching, or vary the request (e.g. a per-call nonce), and rerun.")
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
    reps = frame["replicate"].nunique()
    if reps < 2:
        warnings.append("one replicate per cell: the cell term and the residual are confounded (sizing sec. 3); "
                        "run at least 2 replicates to see run-to-run noise.")
    if frame["judge"].nunique() < 2:
        warnings.append("one judge: judge variance and the item x judge interaction are not identifiable.")
    return Diagnostics(len(frame), int(sizes.size), cached, fraction, rid_rep, pd.DataFrame(per), models,
                       tuple(warnings))


#: a completion at least this long, repeated byte for byte with no response ids, is a cache's, not chance
LONG_COMPLETION = 64
#: a repeat answered this much faster than the cell's first call came from a cache
FAST_FRACTION = 0.1


def _cached_cells(frame: pd.DataFrame, cell_cols: list[str]) -> pd.Series:
    """Per cell with several replicates: True when what a cache repeats is repeated (see the module)."""
    order = frame.sort_values("finished_at", kind="stable") if "finished_at" in frame else frame
    work = pd.DataFrame({"cell": order.groupby(cell_cols, sort=False, dropna=False).ngroup(),
                         "text": order["completion"].fillna(""), "rid": order["response_id"],
                         "latency": pd.to_numeric(order["latency_s"], errors="coerce") if "latency_s" in order
                         else float("nan")})
    g = work.groupby("cell", sort=False)
    size = g.size()
    ids = g["rid"].agg(lambda r: r.notna().all())
    repeated_id = g["rid"].agg(lambda r: r.dropna().duplicated().any())
    same_text = g["text"].nunique() == 1
    long_text = g["text"].agg(lambda t: t.str.len().min() >= LONG_COMPLETION)
    # every replicate after the cell's first answered in a fraction of the first one's time
    fast_repeats = g["latency"].agg(lambda x: len(x) > 1 and bool((x.iloc[1:] < FAST_FRACTION * x.iloc[0]).all()))
    cached = repeated_id | (same_text & ~ids & long_text) | (same_text & fast_repeats)
    return cached & (size > 1)
