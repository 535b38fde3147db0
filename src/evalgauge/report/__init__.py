"""Reports: what an analysis says, for the terminal (``terminal``, ``text``) and as a self-contained HTML file
(``html`` with its ``figures``). The analysis itself is :meth:`evalgauge.api.Fit.analysis`; these modules only
render it, and load on first use (the HTML report brings matplotlib)."""
