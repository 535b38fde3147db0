"""evalgauge: measure, then shrink, the hidden measurement error in LLM evaluation pipelines.

The names below load on first use, so `evalgauge --version` and `--help` start without numpy, pandas
or scipy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .version import __version__

# (``compare`` is a verb of a fit, ``eg.fit(...).compare()``: a top-level function would be shadowed by the
# submodule of the same name.)

#: public name -> the module that defines it
_PUBLIC = {
    "read": "api", "fit": "api", "Fit": "api",
    "Component": "components", "VarianceComponents": "components",
    "Judgments": "data", "read_judgments": "io", "import_files": "io",
    "BalanceReport": "design", "Design": "design", "Facet": "design", "code_data": "design",
    "infer_design": "design",
    "DataError": "errors", "DesignError": "errors", "EvalGaugeError": "errors",
    "estimate_anova": "estimate", "estimate_components": "estimate",
    "FitSummary": "components",
    "Plan": "dstudy", "Projection": "dstudy", "Ceiling": "dstudy", "plan": "dstudy", "project": "dstudy",
    "ceiling": "dstudy",
    "ThetaInterval": "inference", "theta_interval": "inference",
    "Comparison": "compare",
    "Analysis": "analysis", "analyze": "api",
    "parse": "protocols", "Verdict": "protocols",
}

__all__ = [  # the public API (kept equal to _PUBLIC by a test)
    "Analysis", "BalanceReport", "Ceiling", "Comparison", "Component", "DataError", "Design", "DesignError",
    "EvalGaugeError", "Facet", "Fit", "FitSummary", "Judgments", "Plan", "Projection", "ThetaInterval",
    "VarianceComponents", "Verdict", "__version__", "analyze", "ceiling", "code_data", "estimate_anova",
    "estimate_components", "fit", "import_files", "infer_design", "parse", "plan", "project", "read",
    "read_judgments", "theta_interval",
]


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        value = getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'evalgauge' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # for type checkers and IDEs
    from .analysis import Analysis
    from .api import Fit, analyze, fit, read
    from .compare import Comparison
    from .components import Component, FitSummary, VarianceComponents
    from .data import Judgments
    from .design import BalanceReport, Design, Facet, code_data, infer_design
    from .dstudy import Ceiling, Plan, Projection, ceiling, plan, project
    from .errors import DataError, DesignError, EvalGaugeError
    from .estimate import estimate_anova, estimate_components
    from .inference import ThetaInterval, theta_interval
    from .io import import_files, read_judgments
    from .protocols import Verdict, parse
