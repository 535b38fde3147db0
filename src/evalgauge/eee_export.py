"""evalgauge's interval written back into an Every Eval Ever aggregate file (``export --format eee``).

For each evaluation result of the aggregate, the instance-level records of that result are read as judgments
(:func:`evalgauge.io.eee.import_eee`), and the interval of their mean is the one ``analyze`` gives: TEE eq. 3 at
the observed design when judges, epochs or prompt variants vary (:meth:`evalgauge.api.Fit.interval`), or, for
one run with one score per sample, the item-sampling interval (:func:`evalgauge.inference.single_run_interval`),
whose method says what one judge and one run cannot measure. A result whose samples' mean is not its reported
score (another metric) is left as it was, with a note.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from .errors import DataError, DesignError
from .io.eee import TEE_METHOD, instance_rows, judge_of, read_aggregate, records_of, with_uncertainty

SINGLE_RUN_METHOD = ("evalgauge single run (item sampling only: one judge and one run cannot show their "
                     "variance)")


def samples_of(aggregate_path: Path, aggregate: dict) -> list[Path]:
    """The instance-level file(s) of an aggregate: ``detailed_evaluation_results.file_path`` (relative to the
    datastore, so looked up by name beside the aggregate), else ``<stem>_samples.jsonl`` beside it."""
    named = (aggregate.get("detailed_evaluation_results") or {}).get("file_path")
    candidates = [aggregate_path.parent / Path(named).name] if isinstance(named, str) and named else []
    candidates.append(aggregate_path.with_name(f"{aggregate_path.stem}_samples.jsonl"))
    for c in candidates:
        if c.is_file():
            return [c]
    raise DataError(f"{aggregate_path}: its instance-level file ({candidates[0].name}) is not beside it; give it "
                    "with --samples.")


def interval_of(frame: pd.DataFrame, level: float) -> dict:
    """The interval of the mean of ``frame``'s scores as ``analyze`` gives it (:func:`evalgauge.api.mean_interval`),
    with how it was computed in EEE's words."""
    from .api import mean_interval

    out = mean_interval(frame, level)
    if out["single_run"]:
        return {**out, "level": level, "method": SINGLE_RUN_METHOD, "ci_method": SINGLE_RUN_METHOD}
    return {**out, "level": level, "method": TEE_METHOD,
            "ci_method": f"{TEE_METHOD}; Satterthwaite df {out['df']:.3g}; {out['method']}"}


def aggregate_with_intervals(aggregate_path: str | Path, samples: list[str | Path] | None = None,
                             level: float = 0.95) -> tuple[dict, list[str]]:
    """The aggregate with evalgauge's interval in every evaluation result its samples cover, and notes."""
    path = Path(aggregate_path)
    aggregate = read_aggregate(path)
    files = [Path(s) for s in samples] if samples else samples_of(path, aggregate)
    records = [(f, r) for f in files for r in records_of(f)]
    intervals, notes = {}, []
    for result in aggregate["evaluation_results"]:
        key = result.get("evaluation_result_id") or result.get("evaluation_name")
        own = [(f, r) for f, r in records
               if (r.get("evaluation_result_id") or r.get("evaluation_name")) == key]
        if not own:
            notes.append(f"{key}: no instance-level records; left as it was.")
            continue
        judge = judge_of(result)
        frame = instance_rows([(own[0][0], [r for _, r in own])],
                               {(aggregate.get("evaluation_id"), key): judge} if judge else {}, [])
        try:
            interval = interval_of(frame, level)
        except (DesignError, DataError) as exc:
            notes.append(f"{key}: no interval ({str(exc).rstrip('.')}); left as it was.")
            continue
        reported = (result.get("score_details") or {}).get("score")
        if isinstance(reported, int | float) and not math.isclose(interval["estimate"], reported, rel_tol=1e-6,
                                                                   abs_tol=1e-9):
            notes.append(f"{key}: the samples' mean {interval['estimate']:.6g} is not the reported score "
                         f"{reported:.6g} (another metric or scale?); left as it was.")
            continue
        intervals[key] = interval
        notes.append(f"{key}: score {interval['estimate']:.6g}, SE {interval['se']:.4g}, {level:.0%} interval "
                     f"[{interval['low']:.6g}, {interval['high']:.6g}] over {interval['n']} samples "
                     f"({'TEE' if interval['method'] == TEE_METHOD else 'item sampling only: one judge, one run'}).")
    return with_uncertainty(aggregate, intervals), notes
