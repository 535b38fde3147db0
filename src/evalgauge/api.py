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

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .components import VarianceComponents
from .data import Judgments
from .design import Design
from .errors import DesignError
from .estimate.spec import ModelSpec
from .io import read_judgments
from .results import Result


def read(data: Any, *, encoding: str | None = None, sep: str | None = None,
         columns: dict[str, str] | None = None) -> Judgments:
    """Judgments from a CSV/TSV/Parquet/JSONL file, a dataset (a folder of parts, a glob, hive partitions), a run
    database or a data frame (pandas, polars, or pyspark, whose rows are collected), read once into memory.

    ``columns`` maps a role to the file's column (``{"system": "exam_model"}``). A log larger than memory is not
    read but fitted where it lives: ``eg.fit(path, engine="duckdb")``.
    """
    from .io.engine import is_spark_frame

    if is_spark_frame(data):
        import warnings

        with warnings.catch_warnings():  # pyspark's notices about pandas versions
            warnings.simplefilter("ignore")
            data = data.toPandas()
    return read_judgments(data, encoding=encoding, sep=sep, columns=columns)


@dataclass(frozen=True)
class Fit(Result):
    """A fitted G-study that remembers itself: the judgments, the model it fitted (``spec``: a design or an
    lme4-style formula), the method asked for, the variance components and how the fit went (``summary``), with
    the verbs. A verb that needs an optimum raises :class:`evalgauge.errors.ConvergenceError` on a fit that did
    not converge; :meth:`refit` and :meth:`update` fit again with the same model and options."""

    judgments: Judgments | None  # None for a fit of cells an engine reduced (``cells``)
    design: Design | None
    components: VarianceComponents
    drop_missing: bool = False
    spec: ModelSpec | None = None
    method: str = "auto"
    battles: Judgments | None = None  # a pairwise log (model_a, model_b, winner) whose win indicators were fitted
    cells: Any = None  # the cell statistics an engine reduced the rows to (n, sum, sum_squares per cell)
    #: the engine that reduced the rows and its scan (name, rows, files, cells, empty_dropped), or None
    engine: dict | None = None
    #: the components' parametric bootstrap: resamples, interval level and seed (:meth:`strata` fits alike)
    n_boot: int = 0
    level: float = 0.95
    seed: int | None = None

    @property
    def formula(self) -> str:
        """The model as lme4 writes it (the formula given, or the one the design implies)."""
        from .estimate.spec import fitted_model

        if self.components.reml is not None:
            return self.components.reml["formula"]
        return fitted_model(self._spec, self.components).formula()

    @property
    def summary(self):
        """How the likelihood fit went (:class:`evalgauge.components.FitSummary`), or None for closed-form ANOVA."""
        return self.components.reml

    @property
    def converged(self) -> bool:
        return self.components.converged

    def refit(self, data: Any) -> Fit:
        """The same model, method and options fitted to other judgments (new data of the same columns)."""
        spec = self._spec
        return fit(data, design=spec.design, formula=spec.formula, method=self.method,
                   drop_missing=self.drop_missing)

    def update(self, *, formula: str | None = None, design: Design | None = None, method: str | None = None) -> Fit:
        """These judgments fitted again with another model (``formula`` or ``design``) or ``method``, as lme4's
        ``update()``; what is not given is kept."""
        if formula is not None and design is not None:
            raise DesignError("update: give a formula or a design, not both.")
        spec = self._spec
        if formula is None and design is None:
            formula, design = spec.formula, spec.design
        return fit(self._rows("update"), design=design, formula=formula, method=method or self.method,
                   drop_missing=self.drop_missing)

    def plan(self, replicates: float | None = None, *, sampling: str | None = None, estimand: str | None = None,
             **counts: float):
        """The D-study at other counts of the facets (TEE eq. 3; sizing eqs. 2-3): a ``Projection`` with
        ``se``, ``var_abs``, ``sigma2_delta``, ``erho2``, ``phi`` and ``mdd95``. ``sampling`` says how a nested
        facet's children are drawn (``pooled``: TEE eq. 3, the default; ``categories``: Brennan's i:c;
        ``strata``), ``estimand`` what the estimate is of (``domain``, or ``finite``: the benchmark's own items,
        TEE C.2)."""
        from . import dstudy

        self.components.require_converged("its projections")
        unknown = set(counts) - set(self.components.levels)
        if unknown:
            raise DesignError(f"plan: unknown facet(s) {', '.join(sorted(unknown))}; the facets are "
                              f"{', '.join(self.components.levels)}.")
        vc = self.components.with_sampling(sampling).with_estimand(estimand)
        return dstudy.project(vc, counts, replicates)

    def ceiling(self, facet: str = "judge"):
        """E rho^2 and the MDD floor with one level of ``facet`` and infinitely many items (sizing eq. 4)."""
        from . import dstudy

        self.components.require_converged("its ceiling")
        return dstudy.ceiling(self.components, facet, 1)

    def interval(self, level: float = 0.95, *, sampling: str | None = None, estimand: str | None = None):
        """theta-hat's full interval (Satterthwaite df) beside the naive item-only one, kept inside the scores'
        range as ``analyze`` keeps it (:func:`evalgauge.inference.bounded_interval`); ``sampling`` and
        ``estimand`` as in :meth:`plan`."""
        from .analysis.gstudy import judgments_bounds
        from .inference import theta_interval

        self.components.require_converged("its interval")
        bounds = judgments_bounds(self.judgments, self._spec.score) if self.judgments is not None else None
        return theta_interval(self.components.with_sampling(sampling).with_estimand(estimand), level=level,
                              bounds=bounds)

    def compare(self, *, level: float = 0.95, n_boot: int = 2000, seed: int | None = 0,
                assume: dict[str, float] | None = None, ddf: str = "satterthwaite", pair_gstudies: str = "adjacent",
                estimand: str | None = None):
        """Which system is better: a :class:`evalgauge.compare.Comparison` (``systems``, ``pairs``); ``ddf`` =
        "satterthwaite" (lmerTest's) or "kenward-roger" (pbkrtest's); ``pair_gstudies`` = "adjacent", "all" or
        "none" (each pair's own G-study of its paired differences); ``estimand`` as in :meth:`plan` (finite:
        the system x item effects are part of each score)."""
        from .compare import compare_fitted, with_assumed

        vc = with_assumed(self.components, assume) if assume else self.components
        vc = vc.with_estimand(estimand)
        with _small_blas():
            return compare_fitted(self._rows("compare"), self._spec, vc, level=level, n_boot=n_boot, seed=seed,
                                  ddf=ddf, pair_gstudies=pair_gstudies)

    def pairwise(self, *, reference: str | None = None, baseline: str | None = None, position: bool = True,
                 n_boot: int = 200, seed: int | None = 0, human: str | None = None):
        """Bradley-Terry strengths, Elo, position bias and both bootstraps of a pairwise log (a fit made from
        model_a / model_b / winner rows): an :class:`evalgauge.analysis.pairwise.PairwiseAnalysis`. A fit of
        scores has no battles: :class:`DesignError`."""
        if self.battles is None:
            raise DesignError("pairwise: this fit is of scores; a fit of a pairwise log (model_a, model_b, winner "
                              "columns) has battles to analyse.")
        from .analysis.pairwise import analyze_pairwise

        return analyze_pairwise(self.battles, reference=reference, baseline=baseline, position=position,
                                n_boot=n_boot, seed=seed, human=human, method=self.method, fitter=fit_components)

    def analysis(self, *, target_erho2: float = 0.8, n_boot_compare: int = 2000, ddf: str = "satterthwaite",
                 assume: dict[str, float] | None = None, sampling: str | None = None, estimand: str | None = None,
                 run=None):
        """Everything the report says, derived from this fit without reading or fitting again: an
        :class:`evalgauge.analysis.Analysis` (theta-hat's intervals, the D-study, the ceiling, which system is
        better, TEE's checklist). ``sampling`` and ``estimand`` as in :meth:`plan`; ``run`` the
        :class:`evalgauge.io.runs.RunRecord` of the run database the judgments came from (its integrity checks and
        design reach the checklist and the report)."""
        from .analysis.gstudy import derive

        diagnostics, run_meta = run.info() if run is not None else (None, None)
        vc = self.components.with_sampling(sampling).with_estimand(estimand)
        with _small_blas():
            analysis = derive(self._rows("analysis"), self._spec, vc, target_erho2=target_erho2,
                              n_boot_compare=n_boot_compare, ddf=ddf, assumed=assume, diagnostics=diagnostics,
                              run_meta=run_meta)
        analysis.fit = self
        return analysis

    def report(self, path: str | Path, *, target_erho2: float = 0.8) -> Path:
        """The self-contained HTML report of :meth:`analysis` (written atomically)."""
        from .report.html import write_report

        return write_report(self.analysis(target_erho2=target_erho2), path)

    def effects(self):
        """The conditional modes of every random effect with their conditional SDs (TEE C.6; lme4's
        ``ranef(fit, condVar = TRUE)``), a tidy frame with columns term, level, mode, sd: which judge is harsh,
        which items are hard or ambiguous, with how sure the data are of each."""
        from .estimate.cells import cells_from_sums
        from .estimate.effects import effects_of
        from .estimate.spec import fitted_model

        self.components.require_converged("its effects")
        if self.judgments is None:
            model = fitted_model(self._spec, self.components)
            return effects_of(cells_from_sums(self.cells, list(model.columns)), model, self.components)
        return effects_of(self.judgments, fitted_model(self._spec, self.components), self.components)

    def lrt(self, drop: str):
        """A likelihood-ratio test of one random term (``drop="item:judge"``): the REML fits with and without it
        (same fixed effects, so their REML criteria compare), the statistic, and its p-value under the boundary's
        50:50 mixture of chi-square(0) and chi-square(1) (Self & Liang 1987; TEE C.6)."""
        from dataclasses import replace as _replace

        from .estimate.model import parse_formula
        from .inference import LikelihoodRatio

        full = self if self.components.reml is not None else self.update(method="reml")
        model = parse_formula(full.formula)
        names = [t.name for t in model.random]
        if drop not in names:
            raise DesignError(f"lrt: '{drop}' is not a random term of the fitted model ({', '.join(names)}).")
        if len(names) < 2:
            raise DesignError(f"lrt: '{drop}' is the model's only random term; there is nothing to compare it with.")
        reduced = full.update(formula=_replace(model, random=tuple(t for t in model.random if t.name != drop))
                              .formula(), method="reml")
        return LikelihoodRatio.of(drop, full.summary.criterion, reduced.summary.criterion, full.formula,
                                  reduced.formula)

    def strata(self, facet: str, *, n_boot: int | None = None, level: float | None = None,
               seed: int | None = None):
        """The model fitted within each level of ``facet`` (TEE C.7: a heteroscedastic model, one set of
        components per stratum) beside this fit as the pooled one: a
        :class:`evalgauge.estimate.strata.StratifiedComponents`. The strata are fitted with this fit's method,
        empty-score handling and bootstrap, or the bootstrap options given (then the pooled fit is made again with
        them)."""
        from .estimate.strata import estimate_by_stratum

        mine = {"n_boot": self.n_boot, "level": self.level, "seed": self.seed}
        asked = {k: mine[k] if v is None else v for k, v in (("n_boot", n_boot), ("level", level), ("seed", seed))}
        spec = self._spec
        return estimate_by_stratum(self._rows("strata"), facet, spec, method=self.method,
                                   drop_missing=self.drop_missing, pooled=self.components if asked == mine else None,
                                   **asked)

    def glmm(self):
        """Binary scores: the logit-link GLMM with this fit's random terms (Laplace, TEE section G) beside this
        fit as the linear probability model, and whether the two rank the components' shares alike: a
        :class:`evalgauge.estimate.glmm.GlmmCheck`."""
        from .estimate.glmm import compare_lpm_glmm, fit_glmm_logit

        rows = self._rows("glmm")
        if self.drop_missing:
            from .data import without_empty

            rows, _ = without_empty(rows, self._spec.score)
        return compare_lpm_glmm(self.components, fit_glmm_logit(rows, self._spec.mixed))

    def _rows(self, verb: str) -> Judgments:
        if self.judgments is None:
            raise DesignError(f"{verb}: this fit is of cell statistics an engine reduced the rows to; {verb} needs "
                              "the judgments: eg.fit(data, engine='pandas') reads them into memory.")
        return self.judgments

    @property
    def _spec(self) -> ModelSpec:
        return self.spec or ModelSpec(design=self.design)

    def to_dict(self) -> dict:
        return self.components.to_dict()

    def to_frame(self):
        return self.components.to_frame()


def fit(judgments: Any, *, object: str | None = None,  # noqa: A002 - the G-theory word
        facets: str | list[str] | None = None, design: Design | ModelSpec | None = None, formula: str | None = None,
        method: str = "auto", drop_missing: bool = False, n_boot: int = 0, level: float = 0.95,
        seed: int | None = None, progress=None, engine: str = "auto", spark_master: str = "local[*]",
        rows: str | None = None, encoding: str | None = None, sep: str | None = None, sums: bool = False,
        **design_options) -> Fit:
    """Fit the variance components of ``judgments`` (anything :func:`read` accepts, or its result).

    The design comes from ``design`` (a :class:`~evalgauge.design.Design`, or a resolved
    :class:`~evalgauge.estimate.spec.ModelSpec`), or from the columns with ``object``, ``facets`` and the other
    :func:`evalgauge.design.infer_design` options; or the model from an lme4-style ``formula`` (REML).
    ``n_boot`` parametric-bootstrap resamples give every component a percentile interval at ``level``;
    ``progress(size, evaluations, seconds)`` hears a REML fit's size and expected cost before it starts and each
    evaluation after (:func:`evalgauge.estimate.reml.fit_reml`). ``encoding`` and ``sep`` read a text file.

    ``engine`` says where the rows are reduced: ``pandas`` reads them into memory; ``duckdb`` (a file or dataset)
    and ``spark`` (at ``spark_master``; any pyspark DataFrame) reduce them to cell statistics where they live and
    fit those (:func:`evalgauge.estimate.estimate_from_sums`: the closed form for a complete balanced block, REML
    otherwise); ``auto`` reads the rows into memory unless that would take more than half the memory available
    (then duckdb, when nothing asked for needs the rows). ``rows`` says what the caller does with the rows when the
    engine is ``auto``: ``"prefer"`` (the default: keep them for the verbs) reads them unless they would not fit in
    memory, ``"no"`` (only the components are wanted) also reduces a file on DuckDB when reading it would take
    long, ``"need"`` always reads them. A fit of cells has the components and what derives from them (``plan``,
    ``ceiling``, ``interval``; ``Fit.engine`` says what the engine did); ``compare`` and ``report`` need the rows.

    With ``sums``, ``judgments`` are cell statistics already reduced elsewhere (a frame of the facets' columns
    with each cell's ``n``, ``sum`` and ``sum_squares`` of the score, as an engine writes them): they are fitted
    as they are, under ``design`` or the design their columns imply
    (:func:`evalgauge.estimate.estimate_from_sums`).
    """
    from .estimate import estimate_components, resolve_model
    from .io.engine import engine_for

    if sums:
        needs_rows = [name for name, value in (("formula", formula), ("n_boot", n_boot), ("method", method != "auto"),
                                               ("drop_missing", drop_missing)) if value]
        if needs_rows:
            raise DesignError(f"fit(sums=True) fits the cells' statistics as they are; {', '.join(needs_rows)} "
                              "need(s) the rows.")
        return _fit_sums(judgments, design, progress=progress, **design_options)

    needs_rows = design is not None or formula or n_boot or method != "auto"
    chosen = engine_for(engine, judgments, rows="need" if needs_rows else (rows or "prefer"))
    if chosen:
        return _fit_on_engine(judgments, chosen, spark_master, drop_missing, object=object, facets=facets,
                              refused={"design": design, "formula": formula, "n_boot": n_boot,
                                       "method": method != "auto"}, progress=progress,
                              text={"encoding": encoding, "sep": sep}, **design_options)
    judgments = read(judgments, encoding=encoding, sep=sep)
    if design is None and formula is None and _is_battle_log(judgments):
        given = [name for name, value in (("object", object), ("facets", facets), *design_options.items()) if value]
        if given:
            raise DesignError(f"fit: {', '.join(given)} do(es) not apply to a pairwise log, whose design is its win "
                              "indicators' (system the object, the slot fixed, item, judge and variant random); "
                              "leave them out, or pass design= or formula= for another model.")
        return _fit_battles(judgments, method=method, n_boot=n_boot, seed=seed)
    spec = resolve_model(judgments, design, formula, object=object, facets=facets, **design_options)
    vc = estimate_components(judgments, spec, method=method, drop_missing=drop_missing, n_boot=n_boot, level=level,
                             seed=seed, progress=progress)
    return Fit(judgments, spec.design, vc, drop_missing, spec, method, n_boot=n_boot, level=level, seed=seed)


def analyze(data: Any, design: Design | ModelSpec | None = None, *, run=None, method: str = "auto",
            formula: str | None = None, drop_missing: bool | None = None, target_erho2: float = 0.8, n_boot: int = 0,
            level: float = 0.95, seed: int | None = None, n_boot_compare: int = 2000, progress=None,
            assumed: dict | None = None, ddf: str = "satterthwaite", sampling: str | None = None,
            estimand: str | None = None, **design_options):
    """Read, fit and derive everything the analysis reports: :func:`fit` then :meth:`Fit.analysis`.

    ``data`` is a path (a run database brings its record: the collector's diagnostics and the run's design), a
    judgments table or a frame; ``run`` is the :class:`evalgauge.io.runs.RunRecord` of a run database already
    read. Pairwise rows (model_a, model_b, winner) without a ``formula`` get the pairwise analysis. A run's
    empty scores are dropped by default (its diagnostics count them). ``sampling`` and ``estimand`` are the
    projections' conventions (:meth:`VarianceComponents.with_sampling`, ``with_estimand``).
    """
    from .analysis.gstudy import derive_pairwise
    from .io import read_input

    judgments, record = read_input(data)
    record = run if run is not None else record
    if {"model_a", "model_b", "winner"} <= set(judgments.frame.columns) and formula is None:
        return derive_pairwise(judgments, method=method, target_erho2=target_erho2, fitter=fit_components)
    if record is not None:
        drop_missing = True if drop_missing is None else drop_missing  # failed parses are in the diagnostics
        _refuse_unscored(judgments.source, record)
    fitted = fit(judgments, design=design, formula=formula, method=method, drop_missing=bool(drop_missing),
                 n_boot=n_boot, level=level, seed=seed, progress=progress, **design_options)
    return fitted.analysis(target_erho2=target_erho2, n_boot_compare=n_boot_compare, ddf=ddf, assume=assumed,
                           sampling=sampling, estimand=estimand, run=record)


def fit_components(rows: Any, design: Design | ModelSpec, *, method: str = "auto", progress=None) -> VarianceComponents:
    """The components of ``rows`` under ``design`` fitted through :func:`fit`: the door the pairwise analysis
    fits its win indicators through (:func:`evalgauge.analysis.pairwise.analyze_pairwise`'s ``fitter``)."""
    return fit(rows, design=design, method=method, progress=progress).components


def fit_run(database: str | Path) -> tuple[VarianceComponents, Any]:
    """The components of everything a run database holds so far (empty scores dropped; main effects and two-facet
    interactions: what a pilot can estimate, and a fit that stays quick with many facets; ``evalgauge analyze``
    fits the full model on the final data) and the run's calls: the adaptive loop's refit
    (:func:`evalgauge.collect.adaptive.adaptive_run`)."""
    from .io import read_input

    judgments, record = read_input(str(database))  # the one reader of run databases: judgments and calls at once
    fitted = fit(judgments, object="system" if "system" in judgments.frame else None, drop_missing=True, max_order=2)
    return fitted.components, record.calls


def single_run(data: Any, design: Design | ModelSpec | None = None, *, level: float = 0.95,
               assumed: dict | None = None, formula: str | None = None, **design_options):
    """One model's run read from ``data`` (:func:`evalgauge.analysis.gstudy.single_run`: its item-sampling interval
    and what it cannot measure), or None when the data hold more than items scored once each."""
    from .analysis.gstudy import single_run as derive_single_run
    from .estimate import resolve_model
    from .io import read_input

    judgments, _ = read_input(data)
    if formula is not None:
        return None
    return derive_single_run(judgments, resolve_model(judgments, design, None, **design_options), level=level,
                             assumed=assumed)


def _refuse_unscored(source: str, record) -> None:
    """A run whose every stored call lacks a score: say why (the commonest parse errors), not what a fit of
    nothing would say about its facets."""
    from .analysis.checklist import missing_sentence
    from .analysis.diagnostics import missing_answers

    calls = record.calls
    missing = missing_answers(calls).to_dict()
    if missing["calls"] == 0 or missing["unscored"] < missing["calls"]:
        return
    reasons = calls["parse_error"].dropna().astype(str).str.replace(r"^cut at max_tokens \(\d+ tokens\) before a "
                                                                    r"verdict: ", "", regex=True)
    common = "; ".join(f"'{r}' ({n})" for r, n in reasons.value_counts().head(3).items())
    raise DesignError(f"{source}: {missing_sentence(missing)}: no call has a readable verdict, so there is nothing "
                      f"to analyse. The commonest reasons: {common}. Read the completions (`evalgauge export`), "
                      "then set a protocol that matches how the judge writes its verdict, output = \"json\", "
                      "reask = N or a larger max_tokens, and `evalgauge rescore` or run again.")


def mean_interval(scores: Any, level: float = 0.95) -> dict[str, Any]:
    """The interval of the mean of ``scores`` (a frame of item, judge, replicate or variant columns and
    ``score``; empty scores left out) as ``analyze`` gives it: TEE eq. 3 at the observed design
    (:meth:`Fit.interval`) when judges, replicates or variants vary, else one run's item-sampling interval
    (:func:`evalgauge.inference.single_run_interval`, ``single_run`` True: one judge and one call cannot show
    their variance). Keys: estimate, se, low, high, df, naive_se, n (items), single_run, method."""
    from .inference import single_run_interval

    scored = scores[scores["score"].notna()].reset_index(drop=True)
    varying = [c for c in ("judge", "replicate", "variant") if c in scored and scored[c].nunique() > 1]
    if not varying:
        one = single_run_interval(scored["score"].to_numpy(dtype=float), "item", level=level)
        return {"estimate": one.mean, "se": one.se, "low": one.low, "high": one.high, "df": one.df,
                "naive_se": one.se_items, "n": one.n, "single_run": True, "method": "single run"}
    result = fit(scored).interval(level)
    return {"estimate": result.estimate, "se": result.se, "low": result.low, "high": result.high, "df": result.df,
            "naive_se": result.naive_se, "n": int(scored["item"].nunique()), "single_run": False,
            "method": result.method}


def _fit_on_engine(data: Any, engine: str, master: str, drop_missing: bool, *, refused: dict, progress=None,
                   text: dict | None = None, **design_options) -> Fit:
    """The rows reduced to cells by DuckDB or Spark (:func:`evalgauge.io.engine.reduce_cells`), the cells fitted;
    the engine's scan kept on the fit (``Fit.engine``)."""
    from .io.engine import reduce_cells

    unsupported = [name for name, value in refused.items() if value]
    if unsupported:
        raise DesignError(f"fit on an engine fits the design's cells; {', '.join(unsupported)} need(s) the rows: "
                          "engine='pandas'.")
    score = design_options.pop("score", None) or "score"
    chosen = design_options.get("facets")
    if isinstance(chosen, str):
        chosen = [f.strip() for f in chosen.split(",") if f.strip()] or None
    # while the engine scans, the fit's modules load on the other core
    cells, info = reduce_cells(data, score=score, drop_missing=drop_missing, engine=engine, master=master,
                               replicate=design_options.pop("replicate", None), facets=chosen, **(text or {}),
                               preload=("pandas", "evalgauge.estimate", "evalgauge.analysis.gstudy"))
    source = "the Spark frame" if not isinstance(data, (str, Path)) else str(data)
    fitted = _fit_sums(cells, None, score=score, source=source, progress=progress, **design_options)
    return replace(fitted, drop_missing=drop_missing, engine={"name": engine, **info})


def _fit_sums(cells: Any, design: Design | ModelSpec | None, *, score: str = "score", source: str = "the cells",
              progress=None, **design_options) -> Fit:
    """A fit of cell statistics (``n``, ``sum``, ``sum_squares`` per cell) under ``design`` or the one their
    columns imply."""
    from .estimate import cells_design, estimate_from_sums

    if isinstance(design, ModelSpec):
        design = design.design
    if design is None:
        design = cells_design(cells, score=score, **design_options)
    vc = estimate_from_sums(cells, score=score, source=source, design=design, progress=progress)
    return Fit(None, design, vc, False, ModelSpec(design=design), "auto", cells=cells)


def _small_blas():
    """One BLAS thread for the verbs that derive from a fit, whose matrices are small: the REML fit's own policy
    (:func:`evalgauge.estimate.optimise.blas_threads`) for a problem with no dense part; a refit inside sets its
    own threads and restores these."""
    from .estimate.optimise import blas_threads

    return blas_threads(0)


def _is_battle_log(judgments: Judgments) -> bool:
    columns = set(judgments.frame.columns)
    return {"model_a", "model_b", "winner"} <= columns and "score" not in columns


def _fit_battles(battles: Judgments, *, method: str, n_boot: int, seed: int | None) -> Fit:
    """A pairwise log fitted as its win indicators (each system's, per judgment; the slot a fixed facet), with
    the battles kept for :meth:`Fit.pairwise`."""
    from .analysis.pairwise import win_indicator_rows
    from .estimate import estimate_components, resolve_model
    from .pairwise import code_battles

    rows, design = win_indicator_rows(code_battles(battles))
    judgments = Judgments(rows, f"{battles.source} (win indicators)")
    spec = resolve_model(judgments, design, None)
    vc = estimate_components(judgments, spec, method=method, n_boot=n_boot, seed=seed)
    return Fit(judgments, spec.design, vc, False, spec, method, battles)
