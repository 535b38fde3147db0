"""evalgauge inside Inspect AI: the TEE interval as an Inspect metric, and a report when an eval set ends.

Installed with the ``inspect`` extra (``pip install 'evalgauge[inspect]'``), this module is an Inspect
extension (entry point ``inspect_ai``), so Inspect registers both parts by itself:

* :func:`tee_interval`, a metric (``@metric(scores="unreduced")``: one score per sample per epoch) giving the
  TEE interval of the eval's mean over its samples, epochs and, for a judge panel (``multi_scorer([...],
  reducer="collect")``), its graders: the variance components of item, judge, item x judge and the repeated
  calls (TEE eq. 3 with the judges random), as ``evalgauge analyze`` fits them on the same rows. It shows in the
  log and in ``inspect view`` beside ``stderr()`` as ``tee_mean``, ``tee_se``, ``tee_low``, ``tee_high`` and
  ``naive_se`` (item sampling only).
* a hook that, when an eval set ends and ``EVALGAUGE_INSPECT_REPORT=1`` is set, reads every log in its log
  directory (:func:`evalgauge.io.import_files`) and writes ``evalgauge.json`` (the analysis) and
  ``evalgauge.html`` (the report: the models compared with their honest intervals) there.

Inside the metric a panel's graders are known by their position in the collected list, which Inspect keeps
only when every grader voted: a sample whose list is shorter than the panel is left out of the interval, with
a warning in Inspect's log (``evalgauge import inspect`` reads the graders' own replies instead).
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
from pathlib import Path

import pandas as pd
from inspect_ai.hooks import EvalSetEnd, Hooks, hooks
from inspect_ai.scorer import Metric, SampleScore, metric

from .errors import EvalGaugeError
from .io.inspect_logs import inspect_value

log = logging.getLogger(__name__)

#: the environment variable that turns the eval-set report on
REPORT_VARIABLE = "EVALGAUGE_INSPECT_REPORT"
#: the files the eval-set report writes into the log directory
REPORT_JSON, REPORT_HTML = "evalgauge.json", "evalgauge.html"
_KEYS = ("tee_mean", "tee_se", "tee_low", "tee_high", "naive_se")


def score_rows(scores: list[SampleScore]) -> tuple[pd.DataFrame, int]:
    """The judgments behind a metric's scores (item, judge, replicate, score) and how many panel samples were
    left out because a grader's vote was missing (a position is then no judge)."""
    lists = [s.score.value for s in scores if isinstance(s.score.value, list)]
    panel = max((len(v) for v in lists), default=0)
    rows, short, epochs = [], 0, {}
    for s in scores:
        item = str(s.sample_id)
        epochs[item] = epochs.get(item, 0) + 1  # unreduced scores come one per epoch, in epoch order
        value = s.score.value
        if isinstance(value, list):
            if len(value) < panel:
                short += 1
                continue
            rows += [(item, f"grader {k + 1}", epochs[item], inspect_value(v)) for k, v in enumerate(value)]
        else:
            rows.append((item, s.scorer or "scorer", epochs[item], inspect_value(value)))
    return pd.DataFrame(rows, columns=["item", "judge", "replicate", "score"]), short


def interval_of(frame: pd.DataFrame, level: float = 0.95) -> dict[str, float]:
    """The TEE interval of the mean of ``frame``'s scores as ``analyze`` gives it for the same rows
    (:func:`evalgauge.api.mean_interval`: one scorer and one epoch give the item-sampling interval)."""
    from .api import mean_interval

    out = mean_interval(frame, level)
    return {"tee_mean": out["estimate"], "tee_se": out["se"], "tee_low": out["low"], "tee_high": out["high"],
            "naive_se": out["naive_se"]}


@metric(name="tee_interval", scores="unreduced")
def tee_interval(level: float = 0.95) -> Metric:
    """The TEE interval of the eval's mean (module docstring): ``tee_mean``, ``tee_se``, ``tee_low``,
    ``tee_high`` and ``naive_se``; NaN, with a warning, where the scores cannot be fitted."""

    def compute(scores: list[SampleScore]) -> dict[str, float]:
        frame, short = score_rows(scores)
        if short:
            log.warning("evalgauge tee_interval: %d samples' panels lost a grader's vote (Inspect drops a grader "
                        "that returned nothing, so positions no longer name graders); left out of the interval. "
                        "`evalgauge import inspect` reads each grader's own reply instead.", short)
        blank = int(frame["score"].isna().sum())
        if blank:
            log.warning("evalgauge tee_interval: %d scores are not C/I/P/N or numbers; left out.", blank)
        try:
            return interval_of(frame, level)
        except EvalGaugeError as exc:
            log.warning("evalgauge tee_interval: no interval (%s)", exc)
            return dict.fromkeys(_KEYS, math.nan)

    return compute


def write_set_report(log_dir: str | Path) -> tuple[Path, Path]:
    """The comparison of the models of every log in ``log_dir``: ``evalgauge.json`` and ``evalgauge.html``
    written there (atomically)."""
    from .api import fit
    from .io import import_files
    from .outputs import atomic_write_text
    from .report.html import write_report

    folder = Path(log_dir)
    frame = import_files("inspect", [str(folder)])
    analysis = fit(frame, drop_missing=bool(frame["score"].isna().any())).analysis()
    return (atomic_write_text(folder / REPORT_JSON, analysis.to_json()),
            write_report(analysis, folder / REPORT_HTML))


@hooks(name="evalgauge_report", description="evalgauge's comparison of the models (JSON and HTML) in the log "
       f"directory when an eval set ends ({REPORT_VARIABLE}=1)")
class EvalgaugeReport(Hooks):
    def enabled(self) -> bool:
        return os.environ.get(REPORT_VARIABLE, "").strip().lower() not in ("", "0", "false", "no")

    async def on_eval_set_end(self, data: EvalSetEnd) -> None:
        if "://" in data.log_dir and not data.log_dir.startswith("file://"):
            log.warning("evalgauge report: the log directory %s is not local; run `evalgauge import inspect` on a "
                        "copy of it.", data.log_dir)
            return
        folder = data.log_dir.removeprefix("file://")
        try:
            json_path, html_path = await asyncio.to_thread(write_set_report, folder)
        except EvalGaugeError as exc:  # the eval set has finished: say why there is no report, never fail it
            log.warning("evalgauge report: not written (%s)", exc)
            return
        log.info("evalgauge report: %s and %s", json_path, html_path)
