"""Reports: the analysis behind `evalgauge analyze`, its figures, and the self-contained HTML file."""

from .analysis import Analysis, analyze

__all__ = ["Analysis", "analyze"]
