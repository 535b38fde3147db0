"""TEE's three-tier reporting checklist (Table 15), each item met or missing from the data and run record."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..components import VarianceComponents

if TYPE_CHECKING:
    from .diagnostics import RunDiagnostics


def checklist(vc: VarianceComponents, meta: dict, diagnostics: RunDiagnostics | None) -> list[dict]:
    """TEE Table 15's three tiers, each item met or missing from what the data and run record show."""
    levels = vc.levels
    variants, judge = vc.role("variant"), vc.role("judge")
    n_var = levels.get(variants, 1) if variants else 1
    items = []

    def add(tier, name, met, evidence, todo, status=None):
        """``met``: True, False, or None for what this design does not measure (not a failure)."""
        state = status or ("met" if met else "missing")
        items.append({"tier": tier, "item": name, "met": None if state == "not measured" else bool(met),
                      "status": state, "evidence": evidence if met else todo})

    add("Minimum", "Prompt text", "variants" in meta,
        f"{len(meta.get('variants', []))} template(s) recorded in the run configuration",
        "attach the exact text of every prompt variant and the system prompt")
    add("Minimum", "Model identity", bool(meta.get("models")),
        f"models echoed by the provider: {', '.join(meta.get('models', []))}",
        "report each judge's model name, version (dated snapshot), API provider and date" +
        (f"; the data name judges ({levels.get(judge)}) but not their versions" if judge else ""))
    add("Minimum", "Temperature", bool(meta.get("temperatures")) or "temperature" in levels,
        f"temperatures {meta.get('temperatures') or levels.get('temperature')}",
        "report the temperature (and top-p/top-k) of every call")
    add("Minimum", "Replications", vc.replicates >= 1 and ("replicates" in meta or vc.replicates > 1),
        f"{vc.replicates} replicate(s) per cell; scoring {meta.get('mode') or 'as recorded'}",
        "report the number of calls per cell (R) and the scoring/extraction logic")
    add("Standard", "Prompt variants", n_var >= 2, f"{n_var} prompt variants in the design",
        "use at least 2 prompt variants (3+ to estimate prompt sensitivity well) and say how they were made")
    sens = variants is not None and variants in {f for c in vc.components for f in c.facets}
    add("Standard", "Sensitivity flag", sens, "prompt sensitivity estimated as a variance component",
        "assess prompt sensitivity: cross prompt variants with the items")
    crossed = sum(1 for f in levels if levels[f] >= 2) >= 3 and vc.replicates >= 2
    add("Comprehensive", "Factorial pilot", crossed,
        f"{' x '.join(f'{n} {f}' for f, n in levels.items())} x {vc.replicates} replicates",
        "run a factorial pilot crossing items, prompts, judges (and temperatures) with replicates")
    add("Comprehensive", "D-study projection", True, "projections and interventions in this report", "")
    if diagnostics is not None:
        warned = diagnostics.warnings
        add("Minimum", "Integrity (no caching, empty completions, snapshot drift)", not warned,
            "no replicate caching, empty completions, parse failures or snapshot drift found", "; ".join(warned))
    if judge is None or levels.get(judge, 1) < 2:
        add("Standard", "Judge sensitivity", False, "",
            "one judge: judge variance and its interactions are not measured by this design; add a second judge "
            "to measure them", status="not measured")
    if diagnostics is not None:
        missing = diagnostics.missing
        add("Minimum", "Missing answers", missing.unscored == 0, f"all {missing.calls} stored calls scored",
            missing_sentence(missing.to_dict()))
    return items


def missing_sentence(missing: dict) -> str:
    """The calls without a score in one sentence: how many, how many cut at max_tokens, and the test by system."""
    text = (f"{missing['unscored']} of {missing['calls']} stored calls have no score "
            f"({missing['truncated']} cut at max_tokens); report the failure rates by judge, variant and system")
    test = missing.get("test")
    if test:
        text += (f"; their rate {'depends' if test['p'] < 0.05 else 'shows no dependence'} on the system "
                 f"({test['method']}, df {test['df']}, p = {test['p']:.2g})")
    return text
