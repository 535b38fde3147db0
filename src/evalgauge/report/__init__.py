"""Reports: the analysis behind `evalgauge analyze`, its figures, and the self-contained HTML file.

The names load on first use, so a command that needs one part (``evalgauge pairwise``: the pairwise analysis)
does not import the others (the G-study analysis and its D-study, scipy.stats).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .analysis import Analysis, analyze

__all__ = ["Analysis", "analyze"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module(".analysis", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
