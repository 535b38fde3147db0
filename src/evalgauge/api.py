"""The Python API in the lme4 / scikit-learn idiom: read once, fit once, then ask the fitted object.

    import evalgauge as eg
    judgments = eg.read("judgments.csv")                  # or a pandas/polars frame
    fit = eg.fit(judgments, object="system")              # design from the columns, ANOVA or REML
    fit.components.to_frame()                             # the G-study
    fit.plan(item=500, judge=2)                           # the D-study at another design (a Projection)
    fit.compare().systems                                 # which system is better
    fit.interval()                                        # theta-hat's full CI beside the naive one
    fit.report("report.html")                             # the HTML report

Each verb returns a typed result with ``to_dict`` (JSON-ready) and a tidy frame where one applies.
The numeric work is the same functions the CLI calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .components import VarianceComponents
from .data import Judgments
from .design import Design
from .errors import DesignError
from .io import read_judgments


def read(data: Any, *, encoding: str | None = None, sep: str | None = None,
         columns: dict[str, str] | None = None) -> Judgments:
    """Judgments from a CSV/TSV/Parquet/JSONL file, a run database or a data frame, read once.

    ``columns`` maps a role to the file's column (``{"system": "exam_model"}``).
    """
    return read_judgments(data, encoding=encoding, sep=sep, columns=columns)


@dataclass(frozen=True)
class Fit:
    """A fitted G-study: the judgments, the design and the variance components, with the verbs."""

    judgments: Judgments
    design: Design | None
    components: VarianceComponents
    drop_missing: bool = False

    def plan(self, replicates: float | None = None, **counts: float):
        """The D-study at other counts of the facets (TEE eq. 3; sizing eqs. 2-3): a ``Projection`` with
        ``se``, ``var_abs``, ``sigma2_delta``, ``erho2``, ``phi`` and ``mdd95``."""
        from . import dstudy

        unknown = set(counts) - set(self.components.levels)
        if unknown:
            raise DesignError(f"plan: unknown facet(s) {', '.join(sorted(unknown))}; the facets are "
                              f"{', '.join(self.components.levels)}.")
        return dstudy.project(self.components, counts, replicates)

    def ceiling(self, facet: str = "judge"):
        """E rho^2 and the MDD floor with one level of ``facet`` and infinitely many items (sizing eq. 4)."""
        from . import dstudy

        return dstudy.ceiling(self.components, facet, 1)

    def interval(self, level: float = 0.95):
        """theta-hat's full interval (Satterthwaite df) beside the naive item-only one."""
        from .inference import theta_interval

        return theta_interval(self.components, level=level)

    def compare(self, *, level: float = 0.95, n_boot: int = 2000, seed: int | None = 0,
                assume: dict[str, float] | None = None, ddf: str = "satterthwaite"):
        """Which system is better: a :class:`evalgauge.compare.Comparison` (``systems``, ``pairs``); ``ddf`` =
        "satterthwaite" (lmerTest's) or "kenward-roger" (pbkrtest's)."""
        from .compare import compare, with_assumed

        vc = with_assumed(self.components, assume) if assume else self.components
        score = self.design.score if self.design is not None else "score"
        return compare(self.judgments.frame, vc, score=score, level=level, n_boot=n_boot, seed=seed,
                       facets=list(self.design.names) if self.design else None, design=self.design, ddf=ddf)

    def report(self, path: str | Path, *, target_erho2: float = 0.8) -> Path:
        """The self-contained HTML report (written atomically)."""
        from .report import analyze
        from .report.html import write_report

        analysis = analyze(self.judgments, self.design, target_erho2=target_erho2, drop_missing=self.drop_missing)
        return write_report(analysis, path)

    def to_dict(self) -> dict:
        return self.components.to_dict()

    def to_frame(self):
        return self.components.to_frame()


def fit(judgments: Any, *, object: str | None = None,  # noqa: A002 - the G-theory word
        facets: str | list[str] | None = None, design: Design | None = None, formula: str | None = None,
        method: str = "auto", drop_missing: bool = False, n_boot: int = 0, seed: int | None = None,
        **design_options) -> Fit:
    """Fit the variance components of ``judgments`` (anything :func:`read` accepts, or its result).

    The design comes from ``design``, or from the columns with ``object``, ``facets`` and the other
    :func:`evalgauge.design.infer_design` options; or the model from an lme4-style ``formula`` (REML).
    """
    from .estimate import estimate_components, resolve_model

    judgments = read_judgments(judgments)
    spec = resolve_model(judgments, design, formula, object=object, facets=facets, **design_options)
    vc = estimate_components(judgments, spec, method=method, drop_missing=drop_missing, n_boot=n_boot, seed=seed)
    return Fit(judgments, spec.design, vc, drop_missing)
