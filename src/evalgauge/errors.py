"""The one exception family evalgauge raises for a user's mistake.

The CLI turns any :class:`EvalGaugeError` into its message and exit code 2; a
traceback is reserved for bugs in evalgauge itself.
"""

from __future__ import annotations


class EvalGaugeError(Exception):
    """A problem with the user's input, named precisely enough to fix."""


class DataError(EvalGaugeError):
    """A problem in the judgments table: a file, row, column or value."""


class DesignError(EvalGaugeError):
    """A problem with the design: facets, roles, nesting, balance, identifiability."""


class ConvergenceError(DesignError):
    """A question asked of a fit whose optimiser stopped before an optimum: its estimates, and every interval
    or comparison made from them, would not mean anything."""
