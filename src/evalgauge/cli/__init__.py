"""The ``evalgauge`` command: argument parsing, output and exit codes only.

One module per group of commands (``fit``: components, balance, analyze, compare, plan, audit; ``data``: import,
screen, pairwise; ``collect``: run, rescore, export, serve-sim; ``simulate``), the shared option decorators and
input/output rules in ``base``, the renderers in :mod:`evalgauge.report.terminal`. Each command loads the numeric
stack it needs when it runs, after reading its data.

Exit codes: 0 success, 2 a problem with the user's input (the message says what and what to do), 1 a bug in
evalgauge (with a traceback to report).
"""

import os

# The command's own process: NumPy's arrays in ordinary pages, not transparent huge pages. With the kernel's
# usual setting (huge pages on request, compacted on the first touch) the first gigabyte of new arrays took
# about 1 s of page faults more (`components` of 100M rows: 7.7 s against 6.9 s, REML fits unchanged,
# bench/bench_engine.py). Set before NumPy loads, and never over the user's own NUMPY_MADVISE_HUGEPAGE.
os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")

from . import collect, data, fit, simulate  # noqa: F401 - each registers its commands on the group
from .base import _fit_progress, as_options, main

__all__ = ["_fit_progress", "as_options", "main"]
