"""`evalgauge analyze` from a path: read (a run database brings its collector's diagnostics), fit, derive.

The reading and the run record's diagnostics live here, at the edge; the fit is
:func:`evalgauge.estimate.estimate_components` and everything reported is derived from it by
:func:`evalgauge.analysis.derive`, the same function :meth:`evalgauge.api.Fit.analysis` calls.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ..analysis.checklist import missing_sentence
from ..analysis.gstudy import Analysis, derive, derive_pairwise
from ..design import Design
from ..errors import DesignError
from ..estimate import estimate_components, resolve_model
from ..io import read_input

__all__ = ["Analysis", "analyze", "single_run"]


def analyze(data, design: Design | None = None, *, run=None, method: str = "auto", formula: str | None = None,
            drop_missing: bool | None = None, target_erho2: float = 0.8, n_boot: int = 0, level: float = 0.95,
            seed: int | None = None, n_boot_compare: int = 2000, progress=None, assumed: dict | None = None,
            ddf: str = "satterthwaite", sampling: str | None = None, estimand: str | None = None,
            **design_options) -> Analysis:
    """Read, fit and derive everything the analysis reports (:func:`evalgauge.analysis.derive`).

    ``data`` is a path (a run database brings the collector's diagnostics with it), a judgments table or a
    frame; ``run`` is the :class:`evalgauge.io.runs.RunRecord` of a run database already read. Pairwise rows
    (model_a, model_b, winner) without a ``formula`` get the pairwise analysis. ``sampling`` and ``estimand``
    are the projections' conventions (:meth:`VarianceComponents.with_sampling`, ``with_estimand``).
    """
    judgments, record = read_input(data)
    record = run if run is not None else record
    if {"model_a", "model_b", "winner"} <= set(judgments.frame.columns) and formula is None:
        return derive_pairwise(judgments, method=method, target_erho2=target_erho2)
    diagnostics, run_meta = None, {}
    if record is not None:
        diagnostics, run_meta = _run_info(record)
        drop_missing = True if drop_missing is None else drop_missing  # failed parses are in the diagnostics
        _refuse_unscored(judgments.source, record.calls, diagnostics["missing_answers"])
    spec = resolve_model(judgments, design, formula, **design_options)
    vc = estimate_components(judgments, spec, method=method, drop_missing=bool(drop_missing), n_boot=n_boot,
                             level=level, seed=seed, progress=progress)
    vc = vc.with_sampling(sampling).with_estimand(estimand)
    return derive(judgments, spec, vc, target_erho2=target_erho2, n_boot_compare=n_boot_compare, ddf=ddf,
                  assumed=assumed, diagnostics=diagnostics, run_meta=run_meta)


def single_run(data, design: Design | None = None, *, level: float = 0.95, assumed: dict | None = None,
               formula: str | None = None, **design_options):
    """One model's run read from ``data`` (:func:`evalgauge.analysis.single_run`), or None when the data hold
    more than items scored once each."""
    from ..analysis.gstudy import single_run as derive_single_run

    judgments, _ = read_input(data)
    if formula is not None:
        return None
    spec = resolve_model(judgments, design, None, **design_options)
    return derive_single_run(judgments, spec, level=level, assumed=assumed)


def _refuse_unscored(source: str, calls: pd.DataFrame, missing: dict) -> None:
    """A run whose every stored call lacks a score: say why (the commonest parse errors), not what a fit of
    nothing would say about its facets."""
    if missing["calls"] == 0 or missing["unscored"] < missing["calls"]:
        return
    reasons = calls["parse_error"].dropna().astype(str).str.replace(r"^cut at max_tokens \(\d+ tokens\) before a "
                                                                    r"verdict: ", "", regex=True)
    common = "; ".join(f"'{r}' ({n})" for r, n in reasons.value_counts().head(3).items())
    raise DesignError(f"{source}: {missing_sentence(missing)}: no call has a readable verdict, so there is nothing "
                      f"to analyse. The commonest reasons: {common}. Read the completions (`evalgauge export`), "
                      "then set a protocol that matches how the judge writes its verdict, output = \"json\", "
                      "reask = N or a larger max_tokens, and `evalgauge rescore` or run again.")


def _run_info(record) -> tuple[dict, dict]:
    from ..collect.diagnostics import diagnose, missing_answers

    calls, meta = record.calls, dict(record.meta)
    diag = diagnose(calls).to_dict()
    diag["missing_answers"] = missing_answers(calls).to_dict()
    if "spread" in calls and calls["spread"].notna().any():  # output = "logprobs": each call's own uncertainty
        spread = calls.groupby(calls["judge"].astype(str))["spread"].agg(["mean", "count"]).reset_index()
        diag["within_call_spread"] = [{"judge": r["judge"], "mean_spread": float(r["mean"]), "calls": int(r["count"])}
                                      for _, r in spread.iterrows()]
    meta["models"] = sorted(calls["model"].dropna().astype(str).unique())
    meta["first_call"] = float(calls["started_at"].min()) if len(calls) else None
    meta["temperatures"] = sorted(calls["temperature"].dropna().unique().tolist(), key=str)
    reps = pd.to_numeric(calls["replicate"], errors="coerce")
    meta["replicates"] = int(reps.max()) if reps.notna().any() else 0
    design = meta.pop("design", None)
    if design:  # the run recorded its variants, system prompt and judges with its calls
        meta.update(json.loads(design))
        return diag, meta
    config = meta.get("config")
    if config and Path(config).exists():  # a run database written before runs recorded them: its configuration
        from ..errors import EvalGaugeError

        try:
            from ..collect.config import load_config
            from ..collect.runner import run_design, run_scale

            cfg = load_config(config)
        except ImportError:
            diag.setdefault("design_notes", []).append(
                f"the run's configuration ({config}) needs the collector to be read (pip install "
                "'evalgauge[collect]'); the report leaves out its variants' templates and judges.")
            return diag, meta
        except (OSError, EvalGaugeError) as exc:
            diag.setdefault("design_notes", []).append(
                f"the run's configuration ({config}) could not be read ({exc}); the report leaves out its variants' "
                "templates and judges.")
            return diag, meta
        meta.update(run_design(cfg))
        if "scale" not in meta or meta["scale"] is None:  # written before the run recorded its scale
            scale = run_scale(cfg)
            if scale is not None:
                meta["scale"] = f"{scale[0]:g},{scale[1]:g}"
    return diag, meta


