"""The ``evalgauge`` command: argument parsing, output and exit codes only.

One module per group of commands (``fit``: components, balance, analyze, compare, plan, audit; ``data``: import,
screen, pairwise; ``collect``: run, rescore, export, serve-sim; ``simulate``), the shared option decorators and
input/output rules in ``base``, the renderers in :mod:`evalgauge.report.terminal`. Each command loads the numeric
stack it needs when it runs, after reading its data.

Exit codes: 0 success, 2 a problem with the user's input (the message says what and what to do), 1 a bug in
evalgauge (with a traceback to report).
"""

from . import collect, data, fit, simulate  # noqa: F401 - each registers its commands on the group
from .base import _fit_progress, as_options, main

__all__ = ["_fit_progress", "as_options", "main"]
