"""evalgauge: measure, then shrink, the hidden measurement error in LLM evaluation pipelines."""

from .api import Fit, fit, read
from .components import Component, VarianceComponents
from .data import Judgments, read_judgments
from .design import BalanceReport, Design, Facet, code_data, infer_design
from .errors import DataError, DesignError, EvalGaugeError
from .estimate import estimate_anova, estimate_components

__version__ = "0.1.0"

__all__ = [
    "BalanceReport", "Component", "DataError", "Design", "DesignError", "EvalGaugeError", "Facet", "Fit",
    "Judgments", "VarianceComponents", "__version__", "code_data", "estimate_anova", "estimate_components",
    "fit", "infer_design", "read", "read_judgments",
]
