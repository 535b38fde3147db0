"""Variance-component estimators. ANOVA (expected mean squares) for balanced data."""

from .anova import estimate_anova

__all__ = ["estimate_anova"]
