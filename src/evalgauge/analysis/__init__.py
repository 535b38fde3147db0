"""The analysis: everything a report says, derived from judgments, their model and the fitted components.

``gstudy`` (:func:`derive`: intervals, D-study, which system is better, the reporting checklist), ``pairwise``
(:func:`analyze_pairwise`: Bradley-Terry with both bootstraps, position bias, the win indicators' components) and
``checklist`` (TEE Table 15). Pure: no reading, no writing, no printing. The names load on first use, so
``evalgauge pairwise`` does not import the G-study analysis and its D-study.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .checklist import checklist, missing_sentence
    from .gstudy import Analysis, components_summary, derive, derive_pairwise, object_scores, single_run
    from .pairwise import PairwiseAnalysis, analyze_pairwise

__all__ = ["Analysis", "PairwiseAnalysis", "analyze_pairwise", "checklist", "components_summary", "derive",
           "derive_pairwise", "missing_sentence", "object_scores", "single_run"]
_HOMES = {
    "Analysis": "gstudy", "derive": "gstudy", "derive_pairwise": "gstudy", "components_summary": "gstudy",
    "object_scores": "gstudy", "single_run": "gstudy", "PairwiseAnalysis": "pairwise",
    "analyze_pairwise": "pairwise", "checklist": "checklist", "missing_sentence": "checklist",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
