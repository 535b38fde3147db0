"""The ``evalgauge`` command: argument parsing, output and exit codes only.

Exit codes: 0 success, 2 a problem with the user's input (the message says
what and what to do), 1 a bug in evalgauge (with a traceback to report).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from . import vocabulary
from .errors import EvalGaugeError
from .outputs import atomic_write_text, atomic_write_with, check_new, check_outputs, dumps
from .protocols import PROTOCOLS as PROTOCOL_NAMES
from .version import __version__
from .vocabulary import DDF_METHODS, METHODS

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from .components import VarianceComponents


class _LazyModule:
    """A module imported on first attribute access: `--help` and `--version` never load the numeric stack."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self._name), attr)


def _lazy(module: str, name: str) -> Callable:
    """A function or class of an evalgauge module, imported when first called."""

    def call(*args, **kwargs):
        return getattr(importlib.import_module(module, __package__), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    return call


if not TYPE_CHECKING:
    np = _LazyModule("numpy")
    pd = _LazyModule("pandas")
keep_levels = _lazy(".data", "keep_levels")
read_judgments = _lazy(".io", "read_judgments")
code_data = _lazy(".design", "code_data")
infer_design = _lazy(".design", "infer_design")
estimate_components = _lazy(".estimate", "estimate_components")
glmm_check = _lazy(".estimate.glmm", "glmm_check")
estimate_by_stratum = _lazy(".estimate.strata", "estimate_by_stratum")
simulate = _lazy(".simulate", "simulate")


class _OptionsConsole(Console):
    """A console that shows the core's `parameter` names as the command's options (see :func:`as_options`),
    and every string it renders (table cells included) through :func:`evalgauge.display.shown`, so a label or
    a model id from the data never reaches the terminal as an escape sequence or a bidi override."""

    def print(self, *objects, **kwargs) -> None:
        from .display import shown

        out = []
        for obj in objects:
            if isinstance(obj, str):
                obj = as_options(obj)
            elif isinstance(obj, Text):
                plain = shown(obj.plain)
                if "`" in plain:
                    obj = Text(as_options(plain), style=obj.style)
                elif plain != obj.plain:
                    obj = Text(plain, style=obj.style)
            out.append(obj)
        super().print(*out, **kwargs)

    def render_str(self, text: str, **kwargs) -> Text:
        from .display import shown

        return super().render_str(shown(text), **kwargs)

    def _render_buffer(self, buffer) -> str:
        # the last step before the terminal: text a renderable built itself (a Text cell) is shown here too;
        # rich's own styles and control codes travel apart from the text and are kept
        from rich.segment import Segment

        from .display import shown

        return super()._render_buffer(seg if seg.control else Segment(shown(seg.text), seg.style, seg.control)
                                      for seg in buffer)


def _console(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    # Piped output (logs, CI, `| less`) gets a wide table instead of rich's 80 columns.
    width = None if stream.isatty() else 160
    # markup off: labels, notes and intervals such as "[0.1, 0.2]" are data, not rich markup
    return _OptionsConsole(stderr=stderr, highlight=False, soft_wrap=True, width=width, markup=False)


def _with_options(value: Any) -> Any:
    """Every string of a JSON payload with the core's `parameter` names shown as options."""
    if isinstance(value, str):
        return as_options(value) if "`" in value else value
    if isinstance(value, dict):
        return {k: _with_options(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_with_options(v) for v in value]
    return value


def as_options(message: str) -> str:
    """A core message names Python parameters in backticks (`facets`, `replicate`=auto); on the command line
    they are options (--facets, --replicate=auto). Other backticked text (commands) is left alone."""
    import re

    def option(match: re.Match) -> str:
        return vocabulary.PARAMETER_OPTIONS.get(match.group(1), match.group(0))

    return re.sub(r"`(\w+)`", option, message)


def user_errors(func: Callable) -> Callable:
    """Turn an :class:`EvalGaugeError` into its message and exit code 2."""

    @wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except EvalGaugeError as exc:
            _console(stderr=True).print(Text("error: ", style="bold red") + Text(as_options(str(exc))))
            sys.exit(2)
        except OSError as exc:  # a file the user named cannot be read or written (permissions, disk full)
            if exc.filename is None:
                raise
            _console(stderr=True).print(Text("error: ", style="bold red") + Text(
                f"{exc.filename}: {exc.strerror or exc}; check the path and its permissions."))
            sys.exit(2)

    return wrapper


def _fit_progress(after: float = 3.0, every: float = 10.0) -> Callable:
    """A REML fit expected (or found) to take more than a few seconds says how big the model is, what it
    is expected to cost, and that it is working."""
    state: dict = {"last": None, "said": False}

    def show(size, evaluations: int, seconds: float) -> None:
        err = _console(stderr=True)
        expected = getattr(size, "seconds", 0.0)
        if not state["said"] and (seconds >= after or (evaluations == 0 and expected >= after)):
            err.print(Text(f"{size}; fitting ...", style="dim"))
            state["said"] = True
        if seconds >= after and (state["last"] is None or seconds - state["last"] >= every):
            err.print(Text(f"  {evaluations} evaluations of the REML criterion, {seconds:.0f} s", style="dim"))
            state["last"] = seconds

    return show


def _need_collector() -> None:
    """The collector's dependencies are an extra: say how to get them instead of an ImportError."""
    missing = [m for m in ("pydantic", "aiohttp", "certifi") if importlib.util.find_spec(m) is None]
    if missing:
        raise EvalGaugeError(f"the collector needs {', '.join(missing)}: install it with "
                             "pip install 'evalgauge[collect]' (analysis alone does not).")


def writes(inputs: tuple[str, ...] = (), **outputs: str) -> Callable:
    """Before the command runs: no output (keyword: its option name) may be an input, and its folder
    must exist (see :func:`evalgauge.outputs.check_outputs`)."""

    def deco(func: Callable) -> Callable:
        @wraps(func)
        def wrapper(*args, **kwargs):
            ins: list = []
            for name in inputs:
                value = kwargs.get(name)
                ins.extend(value if isinstance(value, tuple | list) else [value])
            check_outputs(ins, {option: kwargs.get(name) for name, option in outputs.items()})
            return func(*args, **kwargs)

        return wrapper

    return deco


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="evalgauge")
def main() -> None:
    """evalgauge: the hidden measurement error in LLM evaluation pipelines.

    Estimate the variance components of a judged evaluation (which judge, which
    prompt wording, which temperature, which items, repeated calls) so that
    intervals count every source of error, not only item sampling.
    """
    from .outputs import exit_on_terminate

    exit_on_terminate()


def design_options(func: Callable) -> Callable:
    """The options that say what the columns mean, shared by the data commands."""
    options = [
        click.option("--score", help="Score column (default: score, parsed_score, y, value or rating)."),
        click.option("--facets", help="Facet columns, comma-separated (default: recognised names)."),
        click.option("--nest", help="Nesting as parent/child, comma-separated (e.g. category/item); 'none': none."),
        click.option("--replicate", help="Column numbering repeated calls of a cell ('auto': number in file order)."),
        click.option("--fixed", help="Fixed facets, comma-separated (default: temperature, position, order)."),
        click.option("--object", "object_", help="Object of measurement (default: system, else item)."),
        click.option("--terms", help="Model terms to keep, comma-separated lme4-style names; the rest are pooled."),
        click.option("--max-order", type=int, help="Keep effects of at most this order (plus the cell term)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


ROLE_OPTIONS = ("system", "item", "judge", "variant")


def text_options(func: Callable) -> Callable:
    """How to read a text file: its encoding and its delimiter."""
    func = click.option("--sep", help="Delimiter of a CSV/TSV file (default: sniffed from the header).")(func)
    return click.option("--encoding", help="Text encoding of CSV/TSV/JSONL (default utf-8; e.g. latin-1).")(func)


def _drop_empty(judgments, score: str):
    """--drop-missing for the commands that do not fit: the rows with a score, and a note on the rest."""
    from .data import without_empty

    kept, rows = without_empty(read_judgments(judgments), score)
    if rows.size:
        _console().print(f"note: {rows.size} row(s) with an empty score dropped (--drop-missing).")
    return kept


def _name_values(items, option: str, what: str = "VALUE") -> dict[str, float]:
    """NAME=NUMBER options (--component, --assume) as a dict, or a usage error naming the option."""
    values = {}
    for item in items:
        name, _, value = item.partition("=")
        try:
            values[name.strip()] = float(value)
        except ValueError:
            raise click.BadParameter(f"'{item}' should read NAME={what}", param_hint=option) from None
    return values


def read_options(func: Callable) -> Callable:
    """How to read the file (encoding, delimiter) and which columns play which role."""
    options = [
        text_options,
        click.option("--system", "col_system", metavar="COL", help="The column holding the system (e.g. exam_model)."),
        click.option("--item", "col_item", metavar="COL", help="The column holding the item (e.g. question_id)."),
        click.option("--judge", "col_judge", metavar="COL", help="The column holding the judge (e.g. annotator)."),
        click.option("--variant", "col_variant", metavar="COL", help="The column holding the prompt variant "
                     "(e.g. prompt_type)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _load(data: str, encoding=None, sep=None, col_system=None, col_item=None, col_judge=None, col_variant=None,
          keep: tuple[str, ...] = ()):
    """Read DATA once, at the edge: (a Judgments table, the RunRecord of a run database or None); the role
    options rename columns, --keep selects levels."""
    from .io import read_input

    roles = {r: c for r, c in zip(ROLE_OPTIONS, (col_system, col_item, col_judge, col_variant), strict=True) if c}
    judgments, record = read_input(data, encoding=encoding, sep=sep, columns=roles or None)
    for item in keep:
        column, _, levels = item.partition("=")
        if not levels:
            raise click.BadParameter(f"'{item}' should read FACET=level1,level2", param_hint="--keep")
        judgments = keep_levels(judgments, column.strip(), [lv.strip() for lv in levels.split(",") if lv.strip()])
    return judgments, record


def _design(data, score, facets, nest, replicate, fixed, object_, terms, max_order):
    return infer_design(data, score=score, facets=facets, nest=nest, replicate=replicate, fixed=fixed,
                        object=object_, terms=terms, max_order=max_order)


def _model(data, formula, score, facets, nest, replicate, fixed, object_, terms, max_order):
    """The model of the design options or of --formula, resolved once for every fit of the command."""
    from .estimate.spec import ModelSpec

    if formula:
        return ModelSpec(formula=formula)
    return ModelSpec(design=_design(data, score, facets, nest, replicate, fixed, object_, terms, max_order))


@main.command()
@click.argument("data", type=click.Path(dir_okay=False, path_type=str))
@design_options
@click.option("--method", type=click.Choice(METHODS), default="auto", show_default=True,
              help="anova: closed form, complete balanced blocks only; reml: any design; "
                   "auto: ANOVA when the data form a complete balanced block, REML otherwise.")
@click.option("--formula", help="An lme4-style model, e.g. 'score ~ judge + (1|item) + (1|item:judge)' (REML).")
@click.option("--drop-missing", is_flag=True, help="Drop rows whose score is empty (and say how many).")
@click.option("--bootstrap", "n_boot", type=click.IntRange(min=0), default=0, show_default=True,
              help="Parametric-bootstrap resamples for percentile intervals of every component (0: none).")
@click.option("--level", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.95,
              show_default=True, help="Interval level.")
@click.option("--seed", type=int, default=None, help="Seed for the bootstrap.")
@click.option("--by", "by", metavar="FACET", help="Also fit within each level of FACET (TEE C.7 heteroscedastic "
              "extension: residual and cell variance per stratum of a fixed facet).")
@click.option("--glmm", is_flag=True, help="Binary scores: also fit a logit-link GLMM and compare the component "
              "ranking with the linear-probability fit (TEE section G).")
@click.option("--keep", "keep", multiple=True, metavar="FACET=L1,L2",
              help="Fit only these levels of a facet, e.g. a judge universe --keep judge=gpt,claude (repeatable).")
@click.option("--json", "json_out", metavar="PATH|-", help="Also write the result as JSON ('-' for stdout only).")
@read_options
@user_errors
@writes(("data",), json_out="--json")
def components(data, score, facets, nest, replicate, fixed, object_, terms, max_order, method, formula,
               drop_missing, n_boot, level, seed, by, glmm, keep, json_out, **read) -> None:
    """Estimate the variance components of DATA (CSV, TSV, Parquet, JSONL or a run database).

    \b
    Examples:
      evalgauge components judgments.csv --terms system,item,judge,system:item
      evalgauge components triviaqa.csv --system exam_model --item question_id --judge judge_model
    """
    boot = {"n_boot": n_boot, "level": level, "seed": seed}
    data, _ = _load(data, keep=keep, **read)
    model = _model(data, formula, score, facets, nest, replicate, fixed, object_, terms, max_order)
    if glmm:
        check = glmm_check(data, model, method=method)
        _emit(check.to_dict(), json_out, lambda c: print_glmm(check, c))
        return
    if by:
        strata = estimate_by_stratum(data, by, model, method=method, drop_missing=drop_missing, **boot)
        _emit(strata.to_dict(), json_out, lambda c: print_strata(strata, c))
        return
    result = estimate_components(data, model, method=method, drop_missing=drop_missing, progress=_fit_progress(),
                                 **boot)
    from .report.analysis import components_summary

    payload = components_summary(result)
    _emit(payload, json_out, lambda c: print_components(result, c))


@main.command()
@click.argument("data", type=click.Path(dir_okay=False, path_type=str))
@design_options
@click.option("--drop-missing", is_flag=True, help="Drop rows whose score is empty first (and say how many).")
@read_options
@user_errors
def balance(data, score, facets, nest, replicate, fixed, object_, terms, max_order, drop_missing, **read) -> None:
    """Report whether DATA is a complete balanced block, and which cells are missing.

    \b
    Example:
      evalgauge balance judgments.csv --drop-missing     # exit 0: balanced; 3: not
    """
    source = data
    data, _ = _load(data, **read)
    design = _design(data, score, facets, nest, replicate, fixed, object_, terms, max_order)
    if drop_missing:
        data = _drop_empty(data, design.score)
    report = code_data(data, design).balance()
    console = _console()
    console.print(f"{source}: {report.n_obs} observations; facets "
                  + ", ".join(f"{f.name} ({f.role}{', in ' + f.parent if f.parent else ''})" for f in design.facets))
    console.print(report.summary())
    sys.exit(0 if report.balanced else 3)


@main.group(name="simulate")
def simulate_group() -> None:
    """Simulate judgments from a paper's model, or run a Monte Carlo study over the simulator."""


def _preset_command(name: str):
    @simulate_group.command(name=name, help=f"Simulate judgments from the '{name}' preset "
                            f"({'TEE eq. 1 with Table 8' if name == 'tee' else 'sizing eq. 1, s x i x j x r'}).\n\n"
                            f"\b\nExample:\n  evalgauge simulate {name} --out demo-output/{name}.csv --seed 1"
                            + (" --set items=100" if name == "sizing" else " --set items_per_category=12"))
    @click.option("--out", "-o", required=True, type=click.Path(dir_okay=False, path_type=str),
                  help="Where to write the judgments (.csv, .parquet or .jsonl).")
    @click.option("--seed", type=int, default=0, show_default=True)
    @click.option("--set", "sets", multiple=True, metavar="NAME=N",
                  help="Change a count, e.g. --set items=100 (repeatable).")
    @user_errors
    @writes(out="--out")
    def command(out, seed, sets) -> None:
        kwargs = {}
        for s in sets:
            key, _, value = s.partition("=")
            if not value.isdigit():
                raise click.BadParameter(f"'{s}' should read NAME=COUNT", param_hint="--set")
            kwargs[key.strip()] = int(value)
        try:
            from .simulate import PRESETS

            spec = PRESETS[name](**kwargs)
        except TypeError:
            import inspect

            names = ", ".join(inspect.signature(PRESETS[name]).parameters)
            raise click.BadParameter(f"preset '{name}' takes {names}", param_hint="--set") from None
        frame = simulate(spec, seed=seed)
        _write_frame(frame, Path(out))
        truth = ", ".join(f"{k}={v:g}" for k, v in spec.true_components().items())
        _console(stderr=out == "-").print(f"{len(frame)} judgments written to {out} (seed {seed}). True "
                                          f"components: {truth}")

    return command


for _name in vocabulary.PRESET_NAMES:
    _preset_command(_name)


def _int_list(text: str, what: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"'{text}' should be comma-separated whole numbers", param_hint=what) from None


@simulate_group.command(name="coverage")
@click.option("--preset", type=click.Choice(["tee-table8"]), default="tee-table8", show_default=True)
@click.option("--scenarios", default="A,B,C,D,E", show_default=True, help="TEE Table 9 scenarios.")
@click.option("--n", "n_items", default="20,200,2000", show_default=True, help="Item counts N.")
@click.option("--reps", type=click.IntRange(min=1), default=200, show_default=True, help="Replicates per N.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--scheduler", metavar="ADDRESS", help="Dask distributed scheduler to run the replicates on.")
@click.option("--json", "json_out", metavar="PATH|-", help="Also write the results as JSON ('-' for stdout only).")
@user_errors
@writes(json_out="--json")
def coverage_cmd(preset, scenarios, n_items, reps, seed, scheduler, json_out) -> None:
    """CI coverage of the naive and fuller models across N (TEE E.4, Fig. 1).

    \b
    Example:
      evalgauge simulate coverage --n 20,200,2000 --reps 300 --seed 11
    """
    from .montecarlo import coverage_study

    result = coverage_study(_int_list(n_items, "--n"), scenarios.split(","), reps, seed, scheduler=scheduler)
    _emit(result.to_dict(), json_out, lambda c: _print_coverage(result, c))


def _print_coverage(result, console: Console) -> None:
    table = Table(title="95% CI coverage by scenario and N (TEE E.4; truth: the population grand mean)")
    for col in ("scenario", "N", "coverage", "MC s.e.", "mean SE", "replicates"):
        table.add_column(col, justify="right")
    for r in result.results.itertuples():
        table.add_row(r.scenario, str(r.n), f"{100 * r.coverage:.1f}%", f"{100 * r.mc_se:.1f}",
                      f"{r.mean_se:.4g}", str(r.reps))
    console.print(table)
    console.print("A: one configuration, s/sqrt(N); B: + variants; C: + judges; D: + temperatures; "
                  "E: + variant x judge and variant x temperature.")


def _float_list(text: str | None, what: str) -> list[float] | None:
    if text is None:
        return None
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"'{text}' should be comma-separated numbers", param_hint=what) from None


@simulate_group.command(name="scoring")
@click.option("--kappa", help="Central-tendency compression (1: none), comma-separated values to sweep.")
@click.option("--anchor", help="Per-call anchoring noise SD.")
@click.option("--slope", help="Scale-use heterogeneity: SD of the judges' log slopes.")
@click.option("--gamma", help="Nonlinear distortion exponent (1: none).")
@click.option("--points", help="Likert scale points.")
@click.option("--prevalence", help="Binary arm: share of positive items.")
@click.option("--items", type=click.IntRange(min=5), default=50, show_default=True)
@click.option("--judges", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--calls-per-item", type=click.IntRange(min=1), default=6, show_default=True)
@click.option("--reps", type=click.IntRange(min=2), default=50, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "json_out", metavar="PATH|-", help="Also write the results as JSON ('-' for stdout only).")
@user_errors
@writes(json_out="--json")
def scoring_cmd(kappa, anchor, slope, gamma, points, prevalence, items, judges, calls_per_item, reps, seed,
                json_out) -> None:
    """Likert vs binary vs pairwise: ranking recovery (Kendall tau) under judge pathologies (TEE E.3).

    \b
    Example:
      evalgauge simulate scoring --reps 50 --json -
    """
    from .scoring import scoring_study

    grid = {k: v for k, v in {"kappa": _float_list(kappa, "--kappa"), "sigma_anchor": _float_list(anchor, "--anchor"),
                              "sigma_slope": _float_list(slope, "--slope"), "gamma": _float_list(gamma, "--gamma"),
                              "points": _float_list(points, "--points"),
                              "prevalence": _float_list(prevalence, "--prevalence")}.items() if v}
    if "points" in grid:
        grid["points"] = [int(p) for p in grid["points"]]
    frame = scoring_study(grid or {"kappa": [1.0]}, reps=reps, seed=seed, items=items, judges=judges,
                          calls_per_item=calls_per_item)
    payload = {"results": frame.to_dict(orient="records"), "items": items, "judges": judges,
               "calls_per_item": calls_per_item, "reps": reps}

    def show(c):
        t = Table(title=f"Ranking recovery, Kendall tau ({items} items, {calls_per_item} calls per item in each arm)")
        cols = [*list(grid or {"kappa": 0}), "tau_likert", "tau_binary", "tau_pairwise"]
        for col in cols:
            t.add_column(col, justify="right")
        for r in payload["results"]:
            t.add_row(*[_num(r[k], ".3g") for k in cols])
        c.print(t)
        c.print("Pairwise shares the call's context: anchoring cancels and slopes keep the sign (TEE E.3).")

    _emit(payload, json_out, show)


@main.command()
@click.argument("data", type=click.Path(dir_okay=False, path_type=str))
@click.option("--system", default="system", show_default=True)
@click.option("--item", default="item", show_default=True)
@click.option("--score", default="score", show_default=True)
@click.option("--threshold", type=float, help="Keep items whose between-system variance is at least this.")
@click.option("--keep", type=click.FloatRange(0, 1, min_open=True), help="Or keep this top fraction of items.")
@click.option("--splits", type=click.IntRange(min=10), default=200, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "json_out", metavar="PATH|-", help="Also write the result as JSON ('-' for stdout only).")
@click.option("--drop-missing", is_flag=True, help="Drop rows whose score is empty first (and say how many).")
@text_options
@user_errors
@writes(("data",), json_out="--json")
def screen(data, system, item, score, threshold, keep, splits, seed, json_out, drop_missing, encoding, sep) -> None:
    """Item discrimination screening from a pilot (sizing sec. 4, App. F): which items separate systems.

    \b
    Example:
      evalgauge screen pilot.csv --keep 0.5 --json screen.json
    """
    from .data import numeric_scores
    from .scoring import screen_items

    judgments = read_judgments(data, encoding=encoding, sep=sep)
    if drop_missing:
        judgments = _drop_empty(judgments, score)
    frame = judgments.frame.assign(**{score: numeric_scores(judgments, score)})
    result = screen_items(frame, system=system, item=item, score=score, threshold=threshold, keep=keep,
                          splits=splits, seed=seed)
    payload = {"threshold": result.threshold, "selected": result.selected,
               "split_half_rho": result.split_half_rho, "split_half_range": list(result.split_half_range),
               "per_item": result.per_item.to_dict(orient="records")}
    selected_rows = frame[frame[item].astype(str).isin(result.selected)]
    for label, rows in (("all", frame), ("selected", selected_rows)):
        try:
            vc = estimate_components(rows, drop_missing=True)
            payload[f"components_{label}"] = {c.name: c.variance for c in vc.components}
            payload[f"share_{label}"] = {c.name: vc.share(c.name) for c in vc.components}
        except EvalGaugeError as exc:
            payload[f"components_{label}"] = {"unavailable": str(exc)}

    def show(c):
        c.print(f"{len(result.selected)} of {len(result.per_item)} items kept (between-system variance >= "
                f"{result.threshold:.4g}); split-half stability of the item ranking: Spearman rho "
                f"{result.split_half_rho:.3f} (95% range from {result.split_half_range[0]:.3f} to "
                f"{result.split_half_range[1]:.3f}, {splits} splits).")
        if "share_all" in payload and "share_selected" in payload:
            for comp in (system, f"{system}:{item}", f"{item}:{system}"):
                if comp in payload["share_all"]:
                    c.print(f"{comp}: {100 * payload['share_all'][comp]:.1f}% of the variance on all items, "
                            f"{100 * payload['share_selected'].get(comp, float('nan')):.1f}% on the kept ones.")

    _emit(payload, json_out, show)


@simulate_group.command(name="bias")
@click.option("--scenario", type=click.Choice(["baseline", "correlated", "non-exchangeable", "heavy-tails",
                                               "heterogeneous"]), default="baseline", show_default=True)
@click.option("--reps", type=click.IntRange(min=2), default=200, show_default=True)
@click.option("--items", type=click.IntRange(min=5), default=30, show_default=True, help="Pilot items.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--scheduler", metavar="ADDRESS", help="Dask distributed scheduler to run the replicates on.")
@click.option("--json", "json_out", metavar="PATH|-", help="Also write the result as JSON ('-' for stdout only).")
@user_errors
@writes(json_out="--json")
def bias_cmd(scenario, reps, items, seed, scheduler, json_out) -> None:
    """D-study projection bias from pilots to a larger design (TEE E.2, Table 7).

    \b
    Example:
      evalgauge simulate bias --scenario heavy-tails --reps 400
    """
    from .montecarlo import projection_bias

    out = projection_bias(reps, seed, scenario, items, scheduler=scheduler)
    _emit(out, json_out, lambda c: c.print(
        f"{scenario}: projected Var(theta-hat) at {out['target']} is {out['mean_projected']:.5g} on average "
        f"against the true {out['true_var_abs']:.5g}: relative bias {100 * out['relative_bias']:+.1f}% "
        f"(Monte Carlo s.e. {100 * out['mc_se']:.1f}%, {reps} pilots; TEE Table 7: -0.9% baseline, -2.0% "
        "correlated, -1.6% non-exchangeable, -7.2% heavy tails, -2.3% heterogeneous)."))


def _write_frame(frame: pd.DataFrame, path: Path) -> None:
    """A judgments table in the format its suffix names (CSV by default); ``-`` is CSV on stdout."""
    if str(path) == "-":
        click.echo(frame.to_csv(index=False), nl=False)
    elif path.suffix == ".parquet":
        atomic_write_with(path, lambda tmp: frame.to_parquet(tmp, index=False))
    elif path.suffix == ".jsonl":
        atomic_write_with(path, lambda tmp: frame.to_json(tmp, orient="records", lines=True))
    else:
        atomic_write_with(path, lambda tmp: frame.to_csv(tmp, index=False))


def _emit(payload: dict, json_out: str | None, printer) -> None:
    text = dumps(_with_options(payload))  # the one sanitiser: no NaN reaches any JSON
    if json_out == "-":
        click.echo(text)
        return
    printer(_console())
    if json_out:
        atomic_write_text(json_out, text + "\n")
        _console().print(f"JSON written to {json_out}")


@main.command()
@click.argument("components_json", metavar="[COMPONENTS.json]", required=False,
                type=click.Path(dir_okay=False, path_type=str))
@click.option("--component", "given", multiple=True, metavar="NAME=VARIANCE",
              help="Plan from published values instead of a file, e.g. --component system:item=0.3 "
                   "--component residual=0.2 (repeatable; with --object and --n for every facet).")
@click.option("--object", "object_", help="Object of measurement (default: the one in the file).")
@click.option("--n", "grid", multiple=True, metavar="FACET=LIST",
              help="Counts to try, e.g. --n item=30,500 --n judge=1,2 --n rep=1 (repeatable). A facet of the "
                   "design always means that facet; rep/replicates means the replicates.")
@click.option("--target-erho2", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              help="Target E rho^2 (between 0 and 1): facets needed, the item/judge exchange.")
@click.option("--target-mdd", type=click.FloatRange(0, min_open=True), help="Target minimum detectable difference.")
@click.option("--target-se", type=click.FloatRange(0, min_open=True), help="Target SE of theta-hat.")
@click.option("--budget", type=click.FloatRange(0, min_open=True), help="Budget (USD) for the integer design "
              "optimiser (needs --price).")
@click.option("--price", "prices", multiple=True, metavar="JUDGE=USD",
              help="Price per call of each judge (in panel order), or one USD for every judge.")
@click.option("--best-of", type=click.IntRange(min=1), help="Best-of-K gaming surface at the observed design.")
@click.option("--base-rate", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              help="Win rate for the gaming surface in Elo points (between 0 and 1).")
@click.option("--ceiling-facet", default="judge", show_default=True, help="The facet held at one for the ceiling.")
@click.option("--separation", type=click.FloatRange(0, min_open=True),
              help="True difference between two objects: P(rank inversion) per design.")
@click.option("--json", "json_out", metavar="PATH|-", help="Also write the plan as JSON ('-' for stdout only).")
@user_errors
@writes(("components_json",), json_out="--json")
def plan(components_json, given, object_, grid, target_erho2, target_mdd, target_se, budget, prices, best_of,
         base_rate, ceiling_facet, separation, json_out) -> None:
    """The D-study calculator: SE, E rho^2, Phi, MDD, ceiling, requirements and budget for proposed designs.

    COMPONENTS.json is the output of `evalgauge components --json` or `evalgauge analyze --json`, or a minimal
    {"object": "system", "components": {"system": 0.08, "residual": 0.2, ...}, "levels": {...}}.

    \b
    Examples:
      evalgauge plan components.json --n item=30,500 --n judge=1,2,4 --target-erho2 0.8
      evalgauge plan --component system=0.0801 --component system:judge=0.0011 --component system:item=0.3 \\
          --component residual=0.2 --object system --n item=500 --n judge=1,3 --n system=2
    """
    from .dstudy import plan as make_plan

    vc = _plan_components(components_json, given, object_)
    counts = {}
    for item in grid:
        key, _, values = item.partition("=")
        if not values:
            raise click.BadParameter(f"'{item}' should read FACET=n1,n2,...", param_hint="--n")
        counts[key.strip()] = _int_list(values, "--n")
    vc = _fill_levels(vc, counts)
    obj = object_ or vc.object
    if ceiling_facet not in vc.levels or ceiling_facet == obj:
        choices = ", ".join(f for f in vc.levels if f != obj)
        if ceiling_facet != "judge" or "judge" in vc.levels:
            raise click.BadParameter(f"'{ceiling_facet}' is not a facet of these components other than the object "
                                     f"(facets: {choices}).", param_hint="--ceiling-facet")
    price_map = {}
    for item in prices:
        key, sep, value = item.partition("=")
        try:
            price = float(value if sep else key)
        except ValueError:
            raise click.BadParameter(f"'{item}' should read JUDGE=USD or USD", param_hint="--price") from None
        if not np.isfinite(price) or price < 0:
            raise click.BadParameter(f"'{item}': a price is a non-negative number of USD per call.",
                                     param_hint="--price")
        price_map[key.strip() if sep else "*"] = price
    if budget is not None and not price_map:
        raise click.BadParameter("a budget needs prices: add --price USD (per call) or --price JUDGE=USD.",
                                 param_hint="--budget")
    out = make_plan(vc, counts, object=object_, target_erho2=target_erho2, target_mdd=target_mdd,
                    target_se=target_se, budget=budget, prices=price_map or None, best_of=best_of,
                    base_rate=base_rate, ceiling_facet=ceiling_facet, separation=separation)
    payload = out.to_dict()
    _emit(payload, json_out, lambda c: _print_plan(payload, c))


def _plan_components(components_json, given, object_):
    """The components to plan from: a JSON file, or values on the command line (--component)."""
    from .components import VarianceComponents

    if components_json and given:
        raise click.UsageError("give COMPONENTS.json or --component values, not both.")
    if given:
        values = _name_values(given, "--component", "VARIANCE")
        return VarianceComponents.from_dict({"object": object_, "components": values}, "--component")
    if not components_json:
        raise click.UsageError("give COMPONENTS.json (from `evalgauge components --json`) or --component values.")
    path = Path(components_json)
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise EvalGaugeError(f"{path}: no such file; write one with `evalgauge components DATA --json {path}`.") \
            from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise EvalGaugeError(f"{path}: not JSON ({exc}).") from None
    return VarianceComponents.from_dict(payload, str(path))


def _fill_levels(vc, counts: dict):
    """Components given without their design's counts take them from --n (the first value of each)."""
    from dataclasses import replace

    unknown = [f for f, n in vc.levels.items() if n == 0]
    if not unknown:
        return vc
    levels = dict(vc.levels)
    for f in unknown:
        if f in counts:
            levels[f] = int(counts[f][0])
        elif f == vc.object:
            levels[f] = 2  # two objects: what a pairwise comparison needs; only Var(theta-hat) depends on it
        else:
            raise click.BadParameter(f"the components give no count for '{f}': add --n {f}=N.", param_hint="--n")
    return replace(vc, levels=levels)


def _print_plan(out: dict, console: Console) -> None:
    rows = out["designs"]
    table = Table(title=f"D-study (object of measurement: {out['object'] or 'none'})")
    keys = [k for k in rows[0] if k.startswith("n_")] + ["replicates"]
    metrics = ["se", "var_abs", "sigma2_delta", "erho2", "phi", "mdd95"]
    metrics += [k for k in ("p_inversion", "cost", "pareto") if k in rows[0]]
    for k in keys + metrics:
        table.add_column(k, justify="right")
    for r in rows:
        table.add_row(*[f"{r[k]:g}" for k in keys],
                      *[str(r[k]) if isinstance(r.get(k), bool) else _num(r.get(k), ".4g") for k in metrics])
    console.print(table)
    if "ceiling" in out:
        console.print(f"Single-{out['ceiling_facet']} ceiling (items -> infinity): E rho^2 = {out['ceiling']:.4g}; "
                      f"MDD floor = {out['mdd_floor']:.4g} (sizing eq. 4).")
    for req in out.get("requirements", []):
        console.print(f"{req['quantity']} target {req['target']:g}: {req['text']}.")
    if "exchange" in out:
        e = out["exchange"]
        items = e["items_at_one_judge"] if e["reachable_at_one_judge"] else "no item count"
        console.print(f"Exchange at E rho^2 = {e['target']:g}: {e['judges_at_observed_items']} judge(s) at the "
                      f"observed items, or {items} at one judge.")
    inter = Table(title="Single-factor interventions (% change)")
    for col in ("intervention", "Var(theta-hat)", "sigma2_delta"):
        inter.add_column(col, justify="left" if col == "intervention" else "right")
    for r in out["interventions"]:
        inter.add_row(r["intervention"], _num(r["pct_change_var_abs"], "+.1f"), _num(r["pct_change_sigma2_delta"],
                                                                                   "+.1f"))
    console.print(inter)
    if "budget" in out:
        b = out["budget"]
        console.print(f"Best design within {b['budget']:g}: {b['counts']} x {b['replicates']:g} replicate(s), "
                      f"cost {b['cost']:.4g}, objective {b['objective']:.4g}.")
    if "gaming" in out:
        g = out["gaming"]
        elo = f" = {g['inflation_elo']:.1f} Elo" if "inflation_elo" in g else ""
        console.print(f"Best-of-{g['k']} gaming surface: {g['inflation']:.4g}{elo} "
                      f"(E[max of {g['k']} normals] x sigma_pipeline {g['sigma_pipeline']:.4g}; TEE 4.4).")


@main.command()
@click.argument("data", type=click.Path(dir_okay=False, path_type=str))
@design_options
@click.option("--method", type=click.Choice(METHODS), default="auto", show_default=True)
@click.option("--formula", help="An lme4-style model (REML).")
@click.option("--drop-missing", is_flag=True, help="Drop rows whose score is empty (run databases: always).")
@click.option("--target-erho2", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.8,
              show_default=True, help="Target E rho^2 for the judges-needed line (between 0 and 1).")
@click.option("--bootstrap", "n_boot", type=click.IntRange(min=0), default=0, show_default=True,
              help="Parametric-bootstrap resamples for intervals of every component (0: none).")
@click.option("--level", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.95,
              show_default=True, help="Interval level of the bootstrap.")
@click.option("--seed", type=int, default=None, help="Seed for the bootstrap.")
@click.option("--keep", "keep", multiple=True, metavar="FACET=L1,L2",
              help="Analyse only these levels of a facet, e.g. --keep judge=gpt,claude (repeatable).")
@click.option("--by", "by", metavar="FACET", help="Also fit within each level of FACET (TEE C.7).")
@click.option("--glmm", is_flag=True, help="Binary scores: also fit the logit GLMM and compare (TEE section G).")
@click.option("--assume", "assumed", multiple=True, metavar="TERM=VARIANCE",
              help="A stated value for a component the data cannot measure, e.g. --assume item:judge=0.01 for one "
                   "judge's run, or --assume system:judge=0.01 (every interval then counts it).")
@click.option("--df", "ddf", type=click.Choice(DDF_METHODS), default="satterthwaite", show_default=True,
              help="Degrees of freedom of the comparisons: Satterthwaite's (as lmerTest) or Kenward-Roger's (as "
                   "pbkrtest; its adjusted covariance too; up to 4,000 judgments).")
@click.option("--report", "report_path", type=click.Path(dir_okay=False, path_type=str),
              help="Write one self-contained HTML report here.")
@click.option("--json", "json_out", metavar="PATH|-", help="Also write everything as JSON ('-' for stdout only).")
@read_options
@user_errors
@writes(("data",), report_path="--report", json_out="--json")
def analyze(data, score, facets, nest, replicate, fixed, object_, terms, max_order, method, formula, drop_missing,
            target_erho2, n_boot, level, seed, keep, by, glmm, assumed, ddf, report_path, json_out, **read) -> None:
    """Analyse DATA (CSV, TSV, Parquet, JSONL or a run database): components, honest CI, what to change.

    \b
    Examples:
      evalgauge analyze judgments.csv --report report.html
      evalgauge analyze run.sqlite --json analysis.json
      evalgauge analyze wide_made_long.csv --system exam_model --item question_id --drop-missing
    """
    from .report import analyze as run_analysis
    from .report.html import write_report

    _check_supported(data)
    data, record = _load(data, keep=keep, **read)
    pairwise_rows = {"model_a", "model_b", "winner"} <= set(data.frame.columns)
    model = None if pairwise_rows else _model(data, formula, score, facets, nest, replicate, fixed, object_, terms,
                                              max_order)
    stated = _name_values(assumed, "--assume", "VARIANCE") if assumed else None
    if not pairwise_rows and _show_single_run(data, model, formula, level, stated, json_out):
        return
    result = run_analysis(data, model, run=record, method=method, drop_missing=drop_missing or None,
                          target_erho2=target_erho2, n_boot=n_boot, level=level, seed=seed, progress=_fit_progress(),
                          assumed=stated, ddf=ddf)
    payload = result.to_dict()
    extra = []
    if by is None and model is not None and model.design is not None:  # different measures: each on its own too
        by = next((f.name for f in model.design.facets
                   if f.role == "fixed" and f.name.lower() in vocabulary.CONSTRUCT_NAMES), None)
    if by and not pairwise_rows:
        strata = estimate_by_stratum(data, by, model, method=method, drop_missing=drop_missing)
        payload["by_stratum"] = strata.to_dict()
        extra.append(lambda c: print_strata(strata, c))
    if glmm and not pairwise_rows:
        check = glmm_check(data, model, method=method)
        payload["glmm"] = check.to_dict()
        extra.append(lambda c: print_glmm(check, c))

    def show(c):
        missing = (result.diagnostics or {}).get("missing_answers")
        if missing and missing.get("headline"):  # before any mean: the means rest on different subsets
            c.print(Text("caution: ", style="bold red") + Text(missing["headline"]))
        if result.comparison is not None:  # the question systems are compared for comes first
            print_comparison(result.comparison, c)
        if missing:
            print_missing_answers(missing, c)
        spread = (result.diagnostics or {}).get("within_call_spread")
        if spread:
            c.print("Judges' within-call spread (the SD of each call's distribution over the scale, output = "
                    "\"logprobs\"; the judge's own uncertainty, not counted in the components): " + ", ".join(
                        f"{r['judge']} {r['mean_spread']:.3g} (mean of {r['calls']} calls)" for r in spread) + ".")
        print_components(result.components, c)
        if result.ceiling:
            req = result.judges_needed
            c.print(f"Comparing {result.components.object}s: E rho^2 {result.projection.erho2:.3f}, MDD95 "
                    f"{result.projection.mdd95:.4g} at this design; single-{result.ceiling.facet} ceiling "
                    f"{result.ceiling.erho2:.3f} (MDD floor {result.ceiling.mdd95:.4g}); for E rho^2 "
                    f"{req.target:g}: {req}.")
        # with a comparison, the leaderboard above already gives each system its own interval
        if result.object_interval is not None and result.comparison is None:
            print_object_scores(result.object_interval, result.object_scores, c)
        inter = Table(title="Single-factor interventions (% change)")
        for col in ("intervention", "Var(theta-hat)", "sigma2_delta"):
            inter.add_column(col, justify="left" if col == "intervention" else "right")
        for r in result.interventions.to_dict(orient="records"):
            inter.add_row(r["intervention"], _num(r["pct_change_var_abs"], "+.1f"),
                          _num(r["pct_change_sigma2_delta"], "+.1f"))
        c.print(inter)
        for w in (result.diagnostics or {}).get("warnings", []):
            c.print(Text("warning: ", style="bold yellow") + Text(w))
        missing = [i for i in result.checklist if not i["met"]]
        c.print(f"Reporting checklist (TEE Table 15): {len(result.checklist) - len(missing)} of "
                f"{len(result.checklist)} met" + (f"; missing: {', '.join(i['item'] for i in missing)}."
                                                   if missing else "."))
        for section in extra:
            section(c)
        if report_path:
            c.print(f"Report written to {Path(report_path).resolve()}")

    if report_path:
        write_report(result, report_path)
    _emit(payload, json_out, show)


#: rows of the missing-answers table shown in the terminal (all of them are in --json and the report)
MISSING_ROWS = 30


def print_missing_answers(missing: dict, c) -> None:
    """The calls without a score by judge x variant x system, the worst first, and the test by system."""
    from .report.analysis import missing_sentence

    if not missing["unscored"]:
        c.print(f"Calls without a score: none of the {missing['calls']} stored calls (0 unread, 0 cut at max_tokens).")
        return
    rows = sorted((r for r in missing["table"] if r["calls"] > r["scored"]), key=lambda r: -r["rate"])
    keys = [k for k in ("judge", "variant", "system") if rows and k in rows[0]]
    shown = rows[:MISSING_ROWS]
    more = f"; the first {len(shown)} of {len(rows)}, all in --json and the report" if len(rows) > len(shown) else ""
    table = Table(title=f"Calls without a score, by {' x '.join(keys)} (worst first{more})")
    for col in (*keys, "calls", "scored", "unread", "cut at max_tokens", "unscored"):
        table.add_column(col, justify="left" if col in keys else "right")
    for r in shown:
        table.add_row(*(str(r[k]) for k in keys), str(r["calls"]), str(r["scored"]), str(r["unread"]),
                      str(r["truncated"]), f"{100 * r['rate']:.1f}%")
    c.print(table)
    c.print(missing_sentence(missing) + ".")


@main.command()
@click.argument("data", type=click.Path(dir_okay=False, path_type=str))
@design_options
@click.option("--method", type=click.Choice(METHODS), default="auto", show_default=True)
@click.option("--drop-missing", is_flag=True, help="Drop rows whose score is empty first (and say how many).")
@click.option("--level", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.95,
              show_default=True, help="Confidence level of every interval and rank set.")
@click.option("--bootstrap", "n_boot", type=click.IntRange(min=100), default=2000, show_default=True,
              help="Draws for the simultaneous critical value, the rank sets and the naive item bootstrap.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--pair-gstudies", type=click.Choice(["adjacent", "all", "none"]), default="adjacent",
              show_default=True, help="Fit each pair's own G-study of its paired differences.")
@click.option("--assume", "assumed", multiple=True, metavar="TERM=VARIANCE",
              help="A stated value for a component the data cannot measure, e.g. --assume system:judge=0.01 "
                   "with one judge (from a pilot or the papers).")
@click.option("--keep", "keep", multiple=True, metavar="FACET=L1,L2", help="Compare only these levels.")
@click.option("--df", "ddf", type=click.Choice(DDF_METHODS), default="satterthwaite", show_default=True,
              help="Degrees of freedom of the comparisons: Satterthwaite's (as lmerTest) or Kenward-Roger's (as "
                   "pbkrtest; its adjusted covariance too; up to 4,000 judgments).")
@click.option("--json", "json_out", metavar="PATH|-", help="Also write the comparison as JSON ('-' for stdout only).")
@read_options
@user_errors
@writes(("data",), json_out="--json")
def compare(data, score, facets, nest, replicate, fixed, object_, terms, max_order, method, drop_missing, level,
            n_boot, seed, pair_gstudies, assumed, keep, ddf, json_out, **read) -> None:
    """Which system is better: a leaderboard with rank sets, every pair's difference with marginal and
    simultaneous intervals, Holm p-values, separable groups, and what would separate neighbours.

    \b
    Examples:
      evalgauge compare judgments.csv
      evalgauge compare examples/alpacaeval/alpacaeval_5x805x2.csv --drop-missing --json -
      evalgauge compare one_judge.csv --assume system:judge=0.01
    """
    judgments, _ = _load(data, keep=keep, **read)
    from .compare import compare as run_compare  # after the read: a bad file is refused before the fit loads
    from .compare import with_assumed
    design = _design(judgments, score, facets, nest, replicate, fixed, object_, terms, max_order)
    stated = _name_values(assumed, "--assume", "VARIANCE") if assumed else None
    if _show_single_run(judgments, design, None, level, stated, json_out):
        return
    if not design.object:
        raise EvalGaugeError(f"{data}: no object of measurement to compare; name it with --object (e.g. system).")
    vc = estimate_components(judgments, design, method=method, drop_missing=drop_missing, progress=_fit_progress())
    _refuse_unusable(vc)
    if stated:
        vc = with_assumed(vc, stated)
    result = run_compare(judgments.frame, vc, score=design.score, level=level, n_boot=n_boot, seed=seed,
                         pair_gstudies=pair_gstudies, facets=list(design.names), design=design, ddf=ddf)
    payload = result.to_dict()

    def show(c):
        print_comparison(result, c)

    _emit(payload, json_out, show)


def _show_single_run(data, design, formula, level: float, assumed: dict | None, json_out) -> bool:
    """One model's run (only the items vary, one call each): its honest interval and what it cannot measure;
    False when the data hold more than one run."""
    from .report.analysis import single_run

    result = single_run(data, design, level=level, assumed=assumed, formula=formula)
    if result is None:
        return False

    def show(c):
        pct = f"{100 * result.level:g}%"
        what = "item sampling and the stated components" if result.assumed else "item sampling only"
        c.print(f"One run: mean {result.mean:.4g} over {result.n} {result.item}s, one call each; {pct} interval "
                f"[{result.low:.4g}, {result.high:.4g}] (SE {result.se:.4g}: {what}; df {result.df:.1f}).")
        for text in result.unmeasured:
            c.print(Text("not measured: ", style="bold yellow") + Text(text))
        c.print("With one model there is nothing to compare it with: `evalgauge compare` needs two or more systems "
                "scored on the same items.")
        for note in result.notes:
            c.print(Text("note: ", style="yellow") + Text(note))

    _emit(result.to_dict(), json_out, show)
    return True


def _refuse_unusable(vc) -> None:
    """A fit that did not converge is never shown as a result (ConvergenceError, exit 2)."""
    vc.require_converged("its intervals")


#: boards larger than this show their adjacent pairs in the terminal (every pair is in --json and the report)
ADJACENT_ONLY_ABOVE = 10


def _letter_column(groups: list[str]) -> tuple[list[str], str | None]:
    """The group letters, or blanks and the reason when some system carries more letters than a reader can use."""
    from .display import letters_note

    why = letters_note(groups)
    return (groups, None) if why is None else (["" for _ in groups], why)


def print_comparison(result, console: Console, limit: int = 40) -> None:
    """The leaderboard with rank sets, the pair table, and one sentence per adjacent pair."""
    obj, pct = result.object, f"{100 * result.level:g}%"
    for text in result.extra.get("confounded", []):  # first: pairs the data cannot compare at all
        console.print(Text("not comparable: ", style="bold red") + Text(text))
    for text in result.extra.get("unmeasured", []):  # then what the intervals leave out
        console.print(Text("note: ", style="bold yellow") + Text(text))
    t = Table(title=f"{obj} leaderboard ({pct}; rank sets: marginal, simultaneous; groups share a letter when "
                    "the design cannot tell them apart)")
    for col in ("rank", obj, "mean", "SE", "interval", "naive", "rank set", "simultaneous", "group"):
        t.add_column(col, justify="left" if col in (obj, "group") else "right")
    shown = result.systems.head(limit).to_dict(orient="records")
    letters, why = _letter_column([r["group"] for r in result.systems.to_dict(orient="records")])
    for r, group in zip(shown, letters, strict=False):
        naive = f"[{_num(r['naive_low'], '.4g')}, {_num(r['naive_high'], '.4g')}]"
        t.add_row(str(r["rank"]), Text(str(r["object"])), f"{r['mean']:.4g}", f"{r['se']:.3g}",
                  _interval(r["low"], r["high"], ".4g"), naive, f"{r['rank_low']}-{r['rank_high']}",
                  f"{r['rank_low_simultaneous']}-{r['rank_high_simultaneous']}", group)
    captions = [why] if why else []
    if len(result.systems) > limit:
        captions.append(f"the first {limit} of {len(result.systems)} by rank; all of them in --json and the report")
    if captions:
        t.caption = "; ".join(captions)
    console.print(t)
    p = Table(title=f"Pairs (difference a - b; simultaneous intervals hold for all {len(result.pairs)} pairs at "
                    f"once, critical value {result.critical_simultaneous:.4g}{_critical_error(result)})")
    for col in ("a", "b", "diff", "SE", "df", "interval", "simultaneous", "p (Holm)", "naive", "separable"):
        p.add_column(col, justify="left" if col in ("a", "b") else "right")
    shown = result.pairs
    if len(result.systems) > ADJACENT_ONLY_ABOVE and "adjacent" in shown:  # a large board: neighbours first
        shown = shown[shown["adjacent"].fillna(False).astype(bool)]
        p.title = (f"Adjacent pairs (neighbours in the ranking; difference a - b; simultaneous intervals hold for all "
                   f"{len(result.pairs):,} pairs at once, critical value {result.critical_simultaneous:.4g}"
                   f"{_critical_error(result)})")
    for r in shown.head(limit).to_dict(orient="records"):
        p.add_row(Text(str(r["a"])), Text(str(r["b"])), f"{r['diff']:.4g}", f"{r['se']:.3g}", _num(r["df"], ".1f"),
                  _interval(r["low"], r["high"], ".3g", r.get("comparable", True)),
                  _interval(r["low_simultaneous"], r["high_simultaneous"], ".3g", r.get("comparable", True)),
                  _num(r["p_holm"], ".3g"), f"[{_num(r['naive_low'], '.3g')}, {_num(r['naive_high'], '.3g')}]",
                  "yes" if r["separable"] else "no")
    console.print(p)
    if len(shown) < len(result.pairs):
        console.print(f"({min(limit, len(shown))} of {len(result.pairs):,} pairs shown; all of them in --json and the "
                      "report)")
    for text in result.sentences:
        console.print(Text(text))
    for note in result.notes:
        console.print(Text("note: ", style="yellow") + Text(note))


def print_object_scores(interval, scores, console, limit: int = 20) -> None:
    """The leaderboard: each object's mean with the full and the naive interval."""
    obj, pct = interval.object, f"{100 * interval.level:g}%"
    table = Table(title=f"{obj} scores ({pct} intervals at the observed design)")
    for col in (obj, "mean", "n", "full CI", f"naive CI ({interval.sampling_facet} only)"):
        table.add_column(col, justify="left" if col == obj else "right")
    for r in scores.head(limit).to_dict(orient="records"):
        table.add_row(Text(str(r[obj])), f"{r['mean']:.4g}", str(r["n"]), f"[{r['low']:.4g}, {r['high']:.4g}]",
                      f"[{r['naive_low']:.4g}, {r['naive_high']:.4g}]")
    console.print(table)
    if len(scores) > limit:
        console.print(f"({len(scores) - limit} more in --json and the report)")


def _check_supported(data: str) -> None:
    from .io import READERS

    suffix = Path(data).suffix.lower()
    if suffix not in READERS:
        raise EvalGaugeError(
            f"{data}: analyze reads CSV, TSV, Parquet, JSONL and run databases (.sqlite); '{suffix or 'no suffix'}' "
            "is none of these. Export your judgments to one of them (one row per judgment, a column per facet "
            "and a score column).")


@main.command()
@click.argument("data", type=click.Path(dir_okay=False, path_type=str))
@click.option("--reference", help="The system at log strength 0 (default: the first in sorted order).")
@click.option("--baseline", help="A fixed baseline every system is compared against (left out of the components).")
@click.option("--position/--no-position", default=True, show_default=True,
              help="Fit a first-slot (position) advantage in Bradley-Terry when both slots occur.")
@click.option("--bootstrap", "n_boot", type=click.IntRange(min=0), default=200, show_default=True,
              help="Resamples for the naive and the TEE-aware bootstrap intervals (0: none).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--human", metavar="COLUMN", help="A column with the human vote (model_a, model_b or tie): report "
              "per-judgment agreement, overall and decisive-only (TEE Table 17).")
@click.option("--components-json", type=click.Path(dir_okay=False, path_type=str),
              help="Write the win-indicator components here, for `evalgauge plan` (MDD at any items and judges).")
@click.option("--json", "json_out", metavar="PATH|-", help="Also write everything as JSON ('-' for stdout only).")
@click.option("--model-a", "col_a", metavar="COL", help="The column holding the first-shown system (default model_a).")
@click.option("--model-b", "col_b", metavar="COL", help="The column holding the second-shown system (default model_b).")
@click.option("--winner", "col_winner", metavar="COL", help="The column holding the verdict (default winner).")
@click.option("--item", "col_item", metavar="COL", help="The column holding the item (default item).")
@click.option("--judge", "col_judge", metavar="COL", help="The column holding the judge (default judge).")
@text_options
@user_errors
@writes(("data",), components_json="--components-json", json_out="--json")
def pairwise(data, reference, baseline, position, n_boot, seed, human, components_json, json_out, col_a, col_b,
             col_winner, col_item, col_judge, encoding, sep) -> None:
    """Pairwise judgments (model_a, model_b, winner; optional item, judge, variant, order): Bradley-Terry,
    Elo, position bias, and the variance components of the win indicators.

    \b
    Examples:
      evalgauge pairwise arena.csv --reference gpt-4-0314 --bootstrap 1000
      evalgauge pairwise battles.csv --model-a left --model-b right --winner verdict --json -
    """
    roles = {"model_a": col_a, "model_b": col_b, "winner": col_winner, "item": col_item, "judge": col_judge}
    judgments = read_judgments(data, encoding=encoding, sep=sep, columns={k: v for k, v in roles.items() if v} or None)
    from .report.pairwise import analyze_pairwise  # after the read: a bad file is refused before the fit loads
    result = analyze_pairwise(judgments, reference=reference, baseline=baseline, position=position, n_boot=n_boot,
                              seed=seed, human=human)
    if components_json and result.components is not None:
        atomic_write_text(components_json, result.components.to_json() + "\n")
    battles, fit, table, notes, payload = result.battles, result.fit, result.table, result.notes, result.payload
    comparison, comps = result.comparison, result.components

    def show(c):
        t = Table(title=f"Bradley-Terry ({battles.n} judgments, {len(battles.systems)} systems; reference "
                        f"{fit.reference} at 0)")
        cols = ["system", "log_strength", "se", "elo", "elo_arena", "win_rate_vs_reference"] + \
            [k for k in ("naive_low", "naive_high", "tee_low", "tee_high") if k in table]
        for col in cols:
            t.add_column(col, justify="left" if col == "system" else "right")
        for r in table.to_dict(orient="records"):
            t.add_row(*[str(r[k]) if k == "system" else _num(r[k], ".4g") for k in cols])
        c.print(t)
        for note in notes:
            c.print(Text("note: ", style="yellow") + Text(note))
        if "weighted_win_share" in payload:
            shares = ", ".join(f"{r['system']} {100 * r['win_share']:.2f}% ({r['battles']:g} battles)"
                               for r in payload["weighted_win_share"])
            c.print(f"Weighted win share against the opponents (ties half; arena-hard's own score): {shares}.")
        if fit.log_h is not None:
            c.print(f"First-slot advantage (position term): log odds {fit.log_h:+.3f}.")
        if comparison is not None:
            print_comparison(comparison, c)
        if "position_bias" in payload:
            pb = payload["position_bias"]
            c.print(f"Slot-A advantage in win rate: {100 * pb['slot_a_advantage']:+.1f} points on average, sd "
                    f"{100 * pb['spread_sd']:.1f} across systems, max {100 * pb['max']:+.1f} (sizing sec. 5.4).")
        if comps is not None:
            print_components(comps, c)
            if "human_agreement" in payload:
                h = payload["human_agreement"]
                c.print(f"Agreement with the human votes: {100 * h['overall']:.1f}% of {h['n']} judgments; "
                        f"{100 * h['ab_only']:.1f}% of the {h['n_ab']} where both were decisive.")
            c.print(f"MDD95 {payload['mdd95_win_rate_points']:.1f} win-rate points at this design"
                    + (f"; single-judge ceiling {payload['ceiling']:.3f}, MDD floor "
                       f"{payload['mdd_floor_win_rate_points']:.1f} points" if "ceiling" in payload else "") + ".")

    _emit(payload, json_out, show)


@main.command(name="import")
@click.argument("fmt", metavar="FORMAT", type=click.Choice(["inspect", "lm-eval", "arena-hard", "alpaca-eval",
                                                            "mt-bench", "wide"]))
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=str))
@click.option("--out", "-o", required=True, type=click.Path(dir_okay=False, path_type=str),
              help="The judgments table to write (.csv, .parquet or .jsonl).")
@click.option("--metric", help="lm-eval: the per-sample metric to use as the score (default acc).")
@click.option("--system", help="lm-eval: the evaluated model's name (default: from the results json or folder).")
@click.option("--baseline", help="arena-hard: the baseline model, when the records do not name it (v0.1: "
              "gpt-4-0314).")
@click.option("--unweighted", is_flag=True, help="arena-hard: count a >> verdict once (default: 3 battles, as "
              "arena-hard's own score).")
@click.option("--id", "ids", multiple=True, metavar="FACET=COLUMN",
              help="wide: a facet and the column holding it, e.g. --id system=exam_model --id item=question_id.")
@click.option("--columns", metavar="FACET=COL1,COL2|GLOB",
              help="wide: the score columns, each a level of FACET, e.g. --columns judge=gpt4,llama3 or judge='j_*'.")
@user_errors
@writes(("files",), out="--out")
def import_cmd(fmt, files, out, metric, system, baseline, unweighted, ids, columns) -> None:
    """Convert judgment files of other tools (Inspect, lm-eval, arena-hard, AlpacaEval, MT-bench, wide tables).

    \b
    Examples:
      evalgauge import alpaca-eval results/*/alpaca_eval_gpt4/annotations.json -o ae.csv
      evalgauge import arena-hard model_judgment/gpt-4-1106-preview/*.jsonl --baseline gpt-4-0314 -o arena.csv
      evalgauge import wide triviaqa.csv --id system=exam_model --id item=question_id --columns 'judge=*_judge' -o t.csv
    """
    from .io import import_files

    id_map = {}
    for item in ids:
        name, _, col = item.partition("=")
        if not col:
            raise click.BadParameter(f"'{item}' should read FACET=COLUMN", param_hint="--id")
        id_map[name.strip()] = col.strip()
    cols = None
    if columns:
        name, _, spec = columns.partition("=")
        if not spec:
            raise click.BadParameter(f"'{columns}' should read FACET=COL1,COL2", param_hint="--columns")
        cols = (name.strip(), [c.strip() for c in spec.split(",") if c.strip()])
    frame = import_files(fmt, list(files), metric=metric, system=system, baseline=baseline, unweighted=unweighted,
                         ids=id_map, columns=cols)
    notes = frame.attrs.get("notes", [])
    _write_frame(frame, Path(out))
    c = _console(stderr=out == "-")  # the table itself may be on stdout
    kind = "pairwise rows" if "winner" in frame else "judgments"
    c.print(f"{len(frame)} {kind} written to {'stdout' if out == '-' else out}.")
    for note in notes:
        c.print(Text("note: ", style="yellow") + Text(note))
    c.print(f"next: {_next_command(frame, 'FILE' if out == '-' else out)}")


def _next_command(frame: pd.DataFrame, out: str) -> str:
    """A command that works on what was imported, or what the file can and cannot tell."""
    if "winner" in frame:
        return f"evalgauge pairwise {out}"
    facets = [c for c in ("system", "task", "item", "judge", "variant") if c in frame]
    varying = [c for c in facets if frame[c].nunique() > 1]
    reps = "replicate" in frame and frame["replicate"].nunique() > 1
    if len(varying) >= 2 or (varying and reps):
        one = [c for c in facets if c not in varying]
        return f"evalgauge analyze {out}" + (f"  (one level of {', '.join(one)}: left out, with a note)"
                                              if one else "")
    return (f"evalgauge analyze {out}  (one run: only {', '.join(varying) or 'nothing'} varies, so it gives the "
            "item-sampling interval and names what one system, judge and run cannot measure; add --assume "
            "TERM=VARIANCE for components you know, or import more judges or runs to measure them)")


def _adaptive(cfg, target, pilot_items, max_stages, yes, dry_run, progress, json_out) -> None:
    """`run --target-...`: the adaptive loop, with the plan printed before anything beyond the pilot is spent."""
    from .collect.adaptive import adaptive_run, pilot_design, pilot_df, stage_config
    from .collect.runner import dry_run as plan_run
    from .collect.runner import run
    from .planning import Target

    goal = Target(*target)
    pilot = pilot_design(cfg, pilot_items)
    if dry_run:
        plan = plan_run(stage_config(cfg, pilot))
        payload = {"target": str(goal), "pilot": {"items": len(pilot.items), "judges": list(pilot.judges),
                                                  "variants": list(pilot.variants), "replicates": pilot.replicates,
                                                  "df": pilot_df(cfg, pilot)},
                   **plan}

        def show(c):
            c.print(f"{cfg.path}: adaptive run to {goal}. Pilot: {len(pilot.items)} of {len(cfg.items)} items x "
                    f"{len(pilot.judges)} judge(s) x {len(pilot.variants)} variant(s) x {pilot.replicates} "
                    f"replicate(s) = {plan['planned']} calls ({plan['already_done']} stored), worst-case "
                    f"${plan['worst_case_usd']:.4f}; {pilot_df(cfg, pilot)}. Then a fit, and the plan with its "
                    "cost before more is spent.")
        _emit(payload, json_out, show)
        return
    console = _console(stderr=True)
    result = adaptive_run(cfg, goal, pilot_items=pilot_items, max_stages=max_stages, proceed=yes,
                          run_stage=lambda stage: run(stage),
                          say=lambda text: console.print(Text(text, style="dim")) if progress else None)
    payload = {"database": str(cfg.database), **result.to_dict()}

    def show_result(c):
        for st in result.stages:
            got = "" if st.achieved is None else f"; {st.achieved:.4g} after it"
            c.print(f"{st.name}: {len(st.design.items)} items x {len(st.design.judges)} judge(s) x "
                    f"{len(st.design.variants)} variant(s) x {st.design.replicates} replicate(s); {st.calls_sent} "
                    f"calls sent; ${st.spent_usd:.4f} spent in all{got}")
        c.print(f"{result.outcome}: {result.message}")
    _emit(payload, json_out, show_result)
    if result.outcome not in ("met", "awaiting --yes"):
        sys.exit(3)


@main.command(name="run")
@click.argument("config", type=click.Path(dir_okay=False, path_type=str))
@click.option("--base-url", help="Send every judge's calls to this OpenAI-compatible endpoint (e.g. serve-sim).")
@click.option("--database", type=click.Path(dir_okay=False, path_type=str), help="Run database (default: config's).")
@click.option("--limit", type=click.IntRange(min=1), help="Stop after this many calls (a pilot of the pilot).")
@click.option("--progress/--no-progress", default=True, show_default=True)
@click.option("--json", "json_out", metavar="PATH|-", help="Also write the summary and diagnostics as JSON.")
@click.option("--dry-run", is_flag=True, help="Check the configuration and print the calls and their worst-case "
              "cost against the budget; send nothing.")
@click.option("--target-mdd", type=click.FloatRange(0, min_open=True),
              help="Adaptive: pilot, plan and collect only what a minimum detectable difference this small needs.")
@click.option("--target-erho2", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              help="Adaptive: collect to this E rho^2 (between 0 and 1).")
@click.option("--target-se", type=click.FloatRange(0, min_open=True), help="Adaptive: collect to this SE.")
@click.option("--budget-usd", type=click.FloatRange(0, min_open=True), help="Spending cap (overrides budget_usd).")
@click.option("--pilot-items", type=click.IntRange(min=2),
              help="Adaptive: items in the pilot (default: system x item gets 50 df, at least 10).")
@click.option("--max-stages", type=click.IntRange(min=1), default=3, show_default=True,
              help="Adaptive: stages after the pilot at most.")
@click.option("--yes", is_flag=True, help="Adaptive: go on and collect the planned design (without it the run "
              "stops after the pilot and shows the plan and its cost).")
@user_errors
@writes(("config", "database"), json_out="--json")
def run_cmd(config, base_url, database, limit, progress, json_out, dry_run, target_mdd, target_erho2, target_se,
            budget_usd, pilot_items, max_stages, yes) -> None:
    """Run (or resume) the factorial of judge calls a CONFIG.toml describes, into a SQLite run database.

    With a target (--target-mdd, --target-erho2 or --target-se) the run is adaptive: a pilot on a random
    subset of the item pool, a fit, the cheapest design that reaches the target (or why none can, before
    spending more), then only the missing calls, refitting until the target is met.

    \b
    Examples:
      evalgauge run examples/sim/run.toml --base-url http://127.0.0.1:8765/v1 --dry-run
      evalgauge run examples/sim/run.toml --target-mdd 0.3 --budget-usd 2 --yes
    """
    _need_collector()
    from dataclasses import replace

    from .collect.config import load_config
    from .collect.diagnostics import diagnose
    from .collect.runner import run
    from .collect.tasks import count_tasks
    from .store import RunStore

    cfg = load_config(config, base_url=base_url, database=database)
    check_outputs([config, cfg.database, *cfg.sources], {"--json": json_out})
    if budget_usd is not None:
        cfg = replace(cfg, budget_usd=budget_usd)
    targets = [(q, v) for q, v in (("mdd95", target_mdd), ("erho2", target_erho2), ("se", target_se)) if v]
    if len(targets) > 1:
        raise click.UsageError("give one target: --target-mdd, --target-erho2 or --target-se.")
    if targets:
        _adaptive(cfg, targets[0], pilot_items, max_stages, yes, dry_run, progress, json_out)
        return
    if dry_run:
        from .collect.runner import dry_run as plan_run

        plan = plan_run(cfg)

        def show_plan(c):
            budget = "no budget_usd cap" if plan["budget_usd"] is None else f"budget ${plan['budget_usd']:g}"
            c.print(f"{cfg.path}: {plan['planned']} judge calls planned, {plan['already_done']} stored, "
                    f"{plan['to_send']} to send (+{plan['generations_to_send']} generations); worst-case cost "
                    f"${plan['worst_case_usd']:.4f} on top of ${plan['spent_usd']:.4f} spent; {budget}"
                    + ("" if plan["fits_budget"] else ": the run will stop at the cap before finishing") + ".")
            for note in plan["notes"] + list(cfg.notes):
                c.print(Text("note: ", style="yellow") + Text(note))
        _emit(plan, json_out, show_plan)
        return
    total = count_tasks(cfg)
    state: dict = {}

    def update(summary):
        # the bar starts at the first report, after the keys are checked, at the stored count
        if "bar" not in state:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                           TimeRemainingColumn(), TextColumn("{task.fields[status]}"), console=Console(stderr=True),
                           transient=False)
            bar.start()
            state["bar"], state["tid"] = bar, bar.add_task("calls", total=total, status="")
        state["bar"].update(state["tid"], completed=summary.already_done + summary.completed + summary.failed,
                            status=f"errors {summary.failed}, retries {summary.retries}, ${summary.cost_usd:.4f}")

    try:
        summary = run(cfg, progress=update if progress else None, limit=limit)
    finally:
        if "bar" in state:
            state["bar"].stop()
    store = RunStore(cfg.database)
    try:
        diag = diagnose(store.calls())
    finally:
        store.close()
    payload = {"summary": summary.to_dict(), "database": str(cfg.database), "diagnostics": diag.to_dict()}

    def show(c):
        c.print(f"{cfg.database}: {summary.completed} calls made now, {summary.already_done} already there, "
                f"{summary.failed} failed after retries ({summary.retries} retries), of {summary.planned} planned; "
                f"cost ${summary.cost_usd:.4f}; {summary.seconds:.1f} s.")
        for note in summary.notes + list(cfg.notes):
            c.print(Text("note: ", style="yellow") + Text(note))
        if not diag.per_judge.empty:
            table = Table(title="Integrity by judge")
            for col in diag.per_judge.columns:
                table.add_column(col)
            for row in diag.per_judge.itertuples(index=False):
                table.add_row(*[str(v) for v in row])
            c.print(table)
        for warning in diag.warnings:
            c.print(Text("warning: ", style="bold yellow") + Text(warning))
    _emit(payload, json_out, show)
    if summary.paused and not summary.fatal:
        err = _console(stderr=True)
        for name, reason in summary.paused.items():
            err.print(Text("paused: ", style="bold yellow") + Text(f"'{name}': {reason}"))
        err.print("The run stopped resumably: run the same command again later (completed calls are kept).")
        sys.exit(3)
    if not summary.ok:
        err = _console(stderr=True)
        for name, reason in summary.fatal.items():
            err.print(Text("error: ", style="bold red") + Text(f"stopped '{name}': {reason}"))
        if summary.skipped:
            err.print(f"{summary.skipped} call(s) of the stopped judge(s) were not sent; fix the cause and run "
                      "again: the completed calls are kept and not repeated.")
        if not summary.fatal:
            err.print(Text("error: ", style="bold red") + Text(
                "no call completed; see the failures above (the first error is kept in the run database's "
                "failures table)."))
        sys.exit(2)


@main.command(name="rescore")
@click.argument("database", type=click.Path(dir_okay=False, path_type=str))
@click.option("--protocol", required=True, type=click.Choice(PROTOCOL_NAMES),
              help="The verdict protocol to read every stored completion with (see `evalgauge.parse`).")
@click.option("--pattern", help="With --protocol pattern: a regular expression with one group (the number).")
@click.option("--scale-min", type=float, help="Numeric verdicts below this are no verdict.")
@click.option("--scale-max", type=float, help="Numeric verdicts above this are no verdict.")
@user_errors
def rescore_cmd(database, protocol, pattern, scale_min, scale_max) -> None:
    """Read a run database's stored completions again with a verdict protocol, sending no call.

    The scores, parse errors and matched rules are replaced in the same database; each changed call's
    earlier parse is kept in its `rescores` table.

    \b
    Example:
      evalgauge rescore demo-output/sim.sqlite --protocol score-line --scale-min 1 --scale-max 5
    """
    from .inputs import check_input_file
    from .protocols import parse
    from .store import RunStore

    path = check_input_file(database, what="run database")
    if protocol == "pattern" and not pattern:
        raise EvalGaugeError("--protocol pattern needs --pattern, a regular expression with one group.")
    store = RunStore(path, writer=True)
    try:
        pairwise = store.get_meta("mode") == "pairwise"
        weighted = store.calls()
        if "distribution" in weighted and weighted["distribution"].notna().any():
            raise EvalGaugeError(f"{path}: this run's scores are probability-weighted means of the judges' "
                                 "distributions over the scale (output = \"logprobs\"); a protocol reads a verdict "
                                 "from text and would replace them with the sampled verdicts. Nothing was changed.")

        def read(text, position):
            try:
                v = parse(text, protocol, scale_min=scale_min, scale_max=scale_max, pattern=pattern)
            except ValueError as exc:
                raise EvalGaugeError(f"--pattern: {exc}") from None
            value = v.value
            if value is not None and pairwise and position == "BA":
                value = 1.0 - value  # the system was shown second
            return value, None if value is not None else v.reason, f"{protocol}: {v.rule}" if v.rule else None

        changed, total = store.rescore(read, protocol)
        calls = store.calls()
    finally:
        store.close()
    read_ok = int(calls["score"].notna().sum())
    _console().print(f"{path}: {total} stored completions read with {protocol}: {read_ok} verdicts, "
                     f"{total - read_ok} without one; {changed} changed (the earlier parse kept in rescores).")


@main.command(name="export")
@click.argument("database", type=click.Path(dir_okay=False, path_type=str))
@click.option("--format", "fmt", type=click.Choice(["csv", "parquet"]), default="csv", show_default=True)
@click.option("--out", "-o", type=click.Path(dir_okay=False, path_type=str), help="Output file (default: beside).")
@click.option("--judgments", is_flag=True, help="Only the judgments table (facets and score), as components reads.")
@click.option("--force", is_flag=True, help="Replace an existing file at the default output path.")
@user_errors
def export_cmd(database, fmt, out, judgments, force) -> None:
    """Export a run database: every call with its completion, parse, model, tokens and cost.

    \b
    Examples:
      evalgauge export demo-output/sim.sqlite --format parquet
      evalgauge export demo-output/sim.sqlite --judgments -o demo-output/judgments.csv
    """
    from .io.runs import read_run
    from .store import RunStore

    path = Path(database)
    if not path.exists():
        raise EvalGaugeError(f"{path}: no such run database.")
    target = Path(out) if out else path.with_suffix(f".{fmt}")
    check_outputs([path], {"--out": target})
    if not out:
        check_new("--out", target, force)
    if judgments:
        frame = read_run(Path(path))
    else:
        store = RunStore(path)
        try:
            frame = store.calls()
        finally:
            store.close()
    if str(target) == "-":
        if fmt == "parquet":
            sys.stdout.buffer.write(frame.to_parquet(index=False))
        else:
            click.echo(frame.to_csv(index=False), nl=False)
        _console(stderr=True).print(f"{len(frame)} rows written to stdout")
        return
    atomic_write_with(target, lambda tmp: frame.to_parquet(tmp, index=False) if fmt == "parquet"
                      else frame.to_csv(tmp, index=False))
    _console().print(f"{len(frame)} rows written to {target}")


def _sim_components(path: Path) -> dict[str, float]:
    """``{term: variance}`` from a JSON file of that shape or an `evalgauge components --json` result."""
    import math

    from .inputs import check_input_file

    check_input_file(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise EvalGaugeError(f"{path}: cannot read components JSON ({str(exc)[:120]}).") from None
    shape = ("; give {\"term\": variance, ...} or the output of `evalgauge components --json`, e.g. "
             "{\"item\": 0.4, \"judge\": 0.1, \"residual\": 0.2}.")
    if isinstance(raw, dict) and isinstance(raw.get("components"), list):
        pairs = [(c.get("component"), c.get("variance")) if isinstance(c, dict) else (None, None)
                 for c in raw["components"]]
    elif isinstance(raw, dict):
        pairs = list(raw.items())
    else:
        raise EvalGaugeError(f"{path}: a JSON {type(raw).__name__}, not an object" + shape)
    comps = {}
    for term, value in pairs:
        if not isinstance(term, str) or isinstance(value, bool) or not isinstance(value, int | float) \
                or not math.isfinite(value):
            raise EvalGaugeError(f"{path}: component {term!r} has variance {value!r}, not a finite number" + shape)
        comps[term] = max(float(value), 0.0)
    if not comps:
        raise EvalGaugeError(f"{path}: no components" + shape)
    return comps


@main.command(name="serve-sim")
@click.argument("config", type=click.Path(dir_okay=False, path_type=str))
@click.option("--components", "components_path", type=click.Path(dir_okay=False, path_type=str),
              help="JSON: {term: variance} or an `evalgauge components --json` result (default: a demo panel).")
@click.option("--mu", type=float, default=3.0, show_default=True, help="The grand mean on the score scale.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8765, show_default=True)
@click.option("--fault", "faults", multiple=True, metavar="NAME=VALUE",
              help="Inject faults: rate_limit, server_error, timeout, empty, garbage (rates), cache=1, "
                   "drift_after=N, latency_ms, timeout_s, retry_after, bad_request, forbidden (repeatable).")
@click.option("--require-key-env", metavar="NAME",
              help="Answer 401 unless a request carries the key held in this environment variable.")
@user_errors
def serve_sim_cmd(config, components_path, mu, seed, host, port, faults, require_key_env) -> None:
    """Serve an OpenAI-compatible judge panel simulated from variance components (for dry runs and tests).

    \b
    Example:
      evalgauge serve-sim examples/sim/run.toml --port 8765 --fault rate_limit=0.05 &
      evalgauge run examples/sim/run.toml --base-url http://127.0.0.1:8765/v1
    """
    _need_collector()
    from .collect.config import load_config
    from .collect.simserver import FAULTS, SimPanel, serve

    cfg = load_config(config)
    comps = DEFAULT_SIM_COMPONENTS
    if components_path:
        comps = _sim_components(Path(components_path))
    fault_map = {}
    for item in faults:
        key, _, value = item.partition("=")
        if key not in FAULTS:
            raise click.BadParameter(f"unknown fault '{key}'; known: {', '.join(FAULTS)}", param_hint="--fault")
        try:
            fault_map[key] = float(value)
        except ValueError:
            raise click.BadParameter(f"'{item}' should read NAME=NUMBER", param_hint="--fault") from None
    api_key = None
    if require_key_env:
        api_key = os.environ.get(require_key_env)
        if not api_key:
            raise EvalGaugeError(f"--require-key-env: the environment variable {require_key_env} is not set.")
    _check_port_free(host, port)
    panel = SimPanel(cfg, comps, mu=mu, seed=seed, faults=fault_map, api_key=api_key)
    serve(panel, host, port, ready=lambda msg: click.echo(f"serve-sim listening on http://{host}:{port}/v1 "
                                                           f"({len(cfg.judges)} judges); {msg}", err=True))


def _check_port_free(host: str, port: int) -> None:
    """A clear message, not a traceback, when the port is taken or not ours to bind."""
    import socket

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise EvalGaugeError(f"serve-sim cannot listen on {host}:{port} ({exc.strerror or exc}); another "
                                 "server may be using the port: pick another with --port.") from None


#: a judge panel shaped like the sizing paper's (system share small, sizable system x judge)
DEFAULT_SIM_COMPONENTS = {"item": 0.45, "judge": 0.10, "variant": 0.02, "system": 0.08, "system:item": 0.35,
                          "system:judge": 0.05, "item:judge": 0.15, "item:variant": 0.03, "residual": 0.2}


def print_components(result: VarianceComponents, console: Console) -> None:
    """The components table, then the design line and any notes."""
    table = Table(title=f"Variance components ({result.method}, {result.n_obs} observations)")
    ci = result.intervals is not None
    columns = [("component", "left"), ("kind", "left"), ("variance", "right"), ("SE", "right")]
    if ci:
        columns.append((f"{100 * result.intervals['level']:g}% interval", "right"))
    columns += [("share (per obs.)", "right"), ("share of Var(theta-hat)", "right"), ("df", "right"),
                ("mean square", "right")]
    for col, justify in columns:
        table.add_column(col, justify=justify)
    from .report.analysis import components_summary

    payload = components_summary(result)
    for c, comp in zip(result.components, payload["components"], strict=True):
        name = c.name + (f" (= {c.confounded_with} + e)" if c.confounded_with else "")
        row = [name, c.kind, f"{c.variance:.6g}", _num(c.se, ".3g")]
        if ci:
            row.append("—" if c.ci_low != c.ci_low else f"[{c.ci_low:.4g}, {c.ci_high:.4g}]")
        share_theta = comp.get("share_var_theta")
        row += [f"{100 * result.share(c.name):.1f}%", "—" if share_theta is None else f"{100 * share_theta:.1f}%",
                _num(c.df, "g"), _num(c.mean_square, ".6g")]
        table.add_row(*row)
    console.print(table)
    theta = payload["theta"]
    if "unavailable" in theta and "degree(s) of freedom" in theta["unavailable"]:
        console.print(Text("theta-hat: no interval: ", style="bold yellow") + Text(theta["unavailable"]))
    if "estimate" in theta:
        pct = f"{100 * theta['level']:g}%"
        df = "inf" if theta["df"] is None else f"{theta['df']:.1f}"
        console.print(f"theta-hat = {theta['estimate']:.5g}: full {pct} CI [{theta['low']:.5g}, {theta['high']:.5g}] "
                      f"(SE {theta['se']:.4g}, Satterthwaite df {df}); naive {pct} CI counting only "
                      f"{theta['naive_counts']} sampling [{theta['naive_low']:.5g}, {theta['naive_high']:.5g}] "
                      f"(SE {theta['naive_se']:.4g}); the full SE is {theta['se_ratio']:.2f}x the naive.")
    if "object_score" in payload:
        o = payload["object_score"]
        if "estimate" in theta:
            console.print(f"(theta-hat is the mean over {o['object']}s drawn at random, so the spread between "
                          f"{o['object']}s counts as its error; one {o['object']}'s score is below.)")
        df = "inf" if o["df"] is None else f"{o['df']:.1f}"
        console.print(f"One {o['object']}'s score: {100 * o['level']:g}% CI +-{o['half_width']:.4g} counting every "
                      f"source of error (SE {o['se']:.4g}, Satterthwaite df {df}), against +-"
                      f"{o['naive_half_width']:.4g} counting only {o['naive_counts']} sampling (SE "
                      f"{o['naive_se']:.4g}); the full SE is {o['se_ratio']:.2f}x the naive.")
    if "derived" in payload:
        derived = Table(title="Derived numbers with parametric-bootstrap intervals")
        for col in ("quantity", "estimate", "low", "high"):
            derived.add_column(col, justify="left" if col == "quantity" else "right")
        for r in payload["derived"]:
            # an infinite requirement (JSON null) means the target is out of reach in that draw
            missing = "never" if r["quantity"].endswith("_needed") else "—"
            cells = [missing if r[k] is None else _num(r[k], ".4g") for k in ("estimate", "low", "high")]
            derived.add_row(r["quantity"], *cells)
        console.print(derived)
    if ci:
        info = result.intervals
        console.print(f"Intervals: {info['method']}, {info['resamples']} resamples"
                      + (f" ({info['failed']} refits failed)" if info.get("failed") else "") + ".")
    levels = " x ".join(f"{n} {k}" for k, n in result.levels.items())
    reps = f"{result.replicates} replicate(s)" if result.method == "anova" else f"~{result.replicates} obs per cell"
    console.print(f"Design: {levels} x {reps}; grand mean {result.grand_mean:.6g}; "
                  f"object of measurement: {result.object or '(none)'}; fixed: {', '.join(result.fixed) or '(none)'}.")
    console.print(f"Method: {result.method_reason.rstrip('.')}.")
    if result.reml:
        r = result.reml
        console.print(f"REML criterion {r['deviance']:.6f} ({r['evaluations']} evaluations, {r['seconds']:.2f} s); "
                      f"model: {r['formula']}")
    for note in result.notes:
        console.print(Text("note: ", style="yellow") + Text(note))


def print_glmm(check, console: Console) -> None:
    """LPM and logit-GLMM components side by side with their ranks (TEE section G, Table 11)."""
    print_components(check.lpm, console)
    table = Table(title="Robustness check for binary scores: linear probability model vs logit GLMM")
    for col in ("component", "LPM variance", "LPM share", "LPM rank", "GLMM variance (logit)", "GLMM share",
                "GLMM rank"):
        table.add_column(col, justify="left" if col == "component" else "right")
    for row in check.table.itertuples():
        table.add_row(row.component, f"{row.lpm_variance:.5g}", f"{100 * row.lpm_share:.1f}%", str(row.lpm_rank),
                      f"{row.glmm_variance:.5g}", f"{100 * row.glmm_share:.1f}%", str(row.glmm_rank))
    console.print(table)
    rho = (f"Spearman rank correlation of the shares: {check.spearman:.3f} (TEE Table 11 reports 0.91-0.99 on its "
           "binary benchmarks)" if check.spearman == check.spearman else
           f"No rank correlation of the shares with {len(check.table)} random term(s) (it needs at least 3)")
    console.print(f"{rho}. GLMM: {check.glmm.method_reason}; residual fixed at pi^2/3.")
    for note in check.glmm.notes:
        console.print(Text("note: ", style="yellow") + Text(note))


def print_strata(strata, console: Console) -> None:
    """Components per stratum beside the pooled fit (TEE C.7)."""
    frame = strata.to_frame()
    levels = ["(pooled)", *strata.fits]
    table = Table(title=f"Variance components by {strata.stratum} (per-stratum fits, TEE C.7)")
    table.add_column("component")
    for level in levels:
        table.add_column(level if level == "(pooled)" else f"{strata.stratum} = {level}", justify="right")
    for name in dict.fromkeys(frame["component"]):
        row = [name]
        for level in levels:
            hit = frame[(frame[strata.stratum] == level) & (frame["component"] == name)]
            row.append("" if hit.empty else f"{hit['variance'].iloc[0]:.5g}")
        table.add_row(*row)
    console.print(table)
    methods = ", ".join(f"{lvl}: {fit.method}" for lvl, fit in strata.fits.items())
    console.print(f"Methods: pooled {strata.pooled.method}; {methods}. Residual spread across strata "
                  f"(max/min): {strata.spread():.3g}.")
    for note in strata.notes:
        console.print(Text("note: ", style="yellow") + Text(note))


def _num(value: float | None, fmt: str) -> str:
    return "—" if value is None or value != value else format(value, fmt)


def _critical_error(result) -> str:
    """' +- error (method, points)' of a computed critical value; nothing for a bootstrap quantile."""
    c = result.extra.get("critical")
    if not c:
        return ""
    return f" +- {c['error']:.2g}, {c['method']}, {c['points']:,} points"


def _interval(low: float | None, high: float | None, fmt: str, comparable: bool = True) -> str:
    """[low, high], or what a missing bound means in a comparison: confounded, or no interval at this design."""
    if not comparable:
        return "not comparable"
    if low is None or high is None or low != low or high != high:
        return "not estimable"
    return f"[{format(low, fmt)}, {format(high, fmt)}]"


@main.command(name="audit")
@click.argument("table", metavar="[TABLE]", required=False, type=click.Path(dir_okay=False, path_type=str))
@click.option("--preset", type=click.Choice(vocabulary.AUDIT_PRESETS),
              help="The sizing paper's published components of an item set (0-5 scale).")
@click.option("--components", "components_json", type=click.Path(dir_okay=False, path_type=str),
              help="Components JSON (from `evalgauge components --json` or `analyze --json`).")
@click.option("--component", "given", multiple=True, metavar="NAME=VARIANCE",
              help="Components given as values, e.g. --component system=0.04 --component system:judge=0.03 "
                   "(repeatable; with --object, --items and --judges).")
@click.option("--object", "object_", default="system", show_default=True,
              help="Object of measurement of --component values.")
@click.option("--items", type=click.IntRange(min=1), help="Items behind rows that do not say (default: the "
              "components' own, a preset's native count).")
@click.option("--judges", type=click.IntRange(min=1), help="Judges behind rows that do not say (default: 1 for a "
              "preset, the components' own otherwise).")
@click.option("--replicates", type=click.IntRange(min=1), help="Runs behind rows that do not say (default 1).")
@click.option("--scale", metavar="LO-HI", help="The table's score scale, e.g. 1-10 (MT-Bench), converted to the "
              "components' by the ranges (or columns scale_min, scale_max per row).")
@click.option("--components-scale", metavar="LO-HI", help="The components' score scale (a preset's: 0-5).")
@click.option("--level", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.95,
              show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "json_out", metavar="PATH|-", help="Also write the audit as JSON ('-' for stdout only).")
@user_errors
@writes(("table", "components_json"), json_out="--json")
def audit_cmd(table, preset, components_json, given, object_, items, judges, replicates, scale, components_scale,
              level, seed, json_out) -> None:
    """Audit a published leaderboard or reported improvements against the noise at their design.

    TABLE is a CSV: a leaderboard (columns system, score) or claims (columns claim, delta); optional columns
    items, judges, replicates, scale_min, scale_max per row. For each claim and each adjacent pair: the minimum
    detectable difference (MDD) at that design, whether the difference exceeds it, and P(order inverted); for a
    board, its separable groups and rank sets. Without TABLE, --preset prints the preset, where its numbers come
    from and the published figures it reproduces.

    \b
    Examples:
      evalgauge audit --preset mt-bench
      evalgauge audit claims.csv --preset mt-bench --scale 1-10
      evalgauge audit leaderboard.csv --components components.json
    """
    from .audit import audit
    from .published import preset as get_preset

    sources = sum(bool(x) for x in (preset, components_json, given))
    if sources != 1:
        raise click.UsageError("give exactly one source of components: --preset, --components or --component.")
    chosen = get_preset(preset) if preset else None
    if table is None:
        if chosen is None:
            raise click.UsageError("give a TABLE to audit (or --preset NAME alone to see a preset).")
        payload = _preset_payload(chosen)
        _emit(payload, json_out, lambda c: _print_preset(payload, c))
        return
    if chosen is not None:
        vc = chosen.components(items=items, judges=judges or 1, replicates=replicates or 1)
        components_scale = components_scale or "{:g}-{:g}".format(*chosen.scale)
        label = f"preset {chosen.name} ({chosen.title}; {chosen.source})"
    else:
        vc = _plan_components(components_json, given, object_)
        vc = _fill_levels(vc, {k: [v] for k, v in (("item", items), ("judge", judges)) if v})
        label = components_json or "--component values"
    frame = _read_small_table(Path(table))
    result = audit(vc, frame, items=items, judges=judges, replicates=replicates,
                   scale=_scale_range(scale, "--scale"), components_scale=_scale_range(components_scale,
                                                                                        "--components-scale"),
                   level=level, seed=seed, source=table, components=label)
    payload = result.to_dict()
    _emit(payload, json_out, lambda c: _print_audit(payload, c))


def _scale_range(text: str | None, option: str) -> tuple[float, float] | None:
    if not text:
        return None
    lo, sep, hi = text.strip().rpartition("-") if text.count("-") > 1 else text.partition("-")
    try:
        out = (float(lo), float(hi))
    except ValueError:
        out = None
    if not sep or out is None or not out[1] > out[0]:
        raise click.BadParameter(f"'{text}' should read LO-HI with LO < HI, e.g. 1-10.", param_hint=option)
    return out


def _read_small_table(path: Path):
    """A leaderboard or list of claims: CSV, TSV or JSONL (read as text; numbers are checked by the audit)."""
    from .io.files import read_table

    if not path.exists():
        raise EvalGaugeError(f"{path}: no such file.")
    suffix = path.suffix.lower().lstrip(".")
    kind = {"tsv": "tsv", "jsonl": "jsonl", "parquet": "parquet"}.get(suffix, "csv")
    return read_table(path, kind)


def _preset_payload(chosen) -> dict:
    from .published import mdd95

    payload = chosen.to_dict()
    payload["floors"] = {"mdd_30_items": mdd95(chosen.values, 30),
                         "mdd_native_items": mdd95(chosen.values, chosen.native_items),
                         "ceiling": chosen.values["system"] / (chosen.values["system"] + chosen.values["system:judge"])}
    for check, row in zip(chosen.checks, payload["checks"], strict=True):
        row["range_from_rounding"] = list(chosen.check_range(check))
    return payload


def _print_preset(payload: dict, console: Console) -> None:
    console.print(f"{payload['title']}: components on a {payload['scale'][0]:g}-{payload['scale'][1]:g} scale, "
                  f"from {payload['source']}")
    table = Table(title="Relative-error components (sizing eq. 2)")
    table.add_column("component")
    table.add_column("sigma2", justify="right")
    for name, value in payload["components"].items():
        table.add_row(name, f"{value:.4g}")
    console.print(table)
    console.print("Derived from: " + "; ".join(f"{v['value']:g} ({v['where']})" for v in payload["inputs"].values()))
    if payload["assumption"]:
        console.print(f"Assumed: {payload['assumption']}")
    for c in payload["checks"]:
        lo, hi = c["range_from_rounding"]
        console.print(f"Reproduces {c['what']}: {c['reproduced']:.4g} (printed {c['printed']:g}, {c['where']}; "
                      f"{lo:.4g}-{hi:.4g} over the rounding of the inputs).")
    f = payload["floors"]
    console.print(f"MDD (95%, one judge, one run): {f['mdd_30_items']:.3g} at 30 items, {f['mdd_native_items']:.3g} "
                  f"at the native {payload['native_items']:,}; single-judge ceiling E rho^2 {f['ceiling']:.3g}.")


def _print_audit(payload: dict, console: Console) -> None:
    console.print(f"Audit against {payload['components']} ({100 * payload['level']:g}%)")
    for sentence in payload["sentences"]:
        console.print(sentence)
    if "claims" in payload:
        table = Table()
        for col in ("claim", "delta", "MDD", "exceeds", "P(inverted)", "design"):
            table.add_column(col, justify="left" if col in ("claim", "design") else "right")
        for r in payload["claims"]:
            table.add_row(escape(str(r["claim"])), f"{r['delta']:.3g}", f"{r['mdd']:.3g}",
                          "yes" if r["exceeds_mdd"] else "no", f"{100 * r['p_inverted']:.0f}%", r["design"])
        console.print(table)
        return
    board = Table(title="Board (rank sets: simultaneous; groups share a letter when the design cannot tell them "
                        "apart)")
    for col in ("rank", "system", "score", "rank set", "group"):
        board.add_column(col, justify="left" if col == "system" else "right")
    letters, why = _letter_column([r["group"] for r in payload["board"]])
    for r, group in zip(payload["board"], letters, strict=True):
        board.add_row(str(r["rank"]), escape(str(r["system"])), f"{r['published']:.4g}",
                      f"{r['rank_low']}-{r['rank_high']}", group)
    board.caption = why
    console.print(board)
    pairs = Table(title="Adjacent pairs")
    for col in ("a", "b", "delta", "MDD", "exceeds", "P(inverted)", "separable"):
        pairs.add_column(col, justify="left" if col in ("a", "b") else "right")
    for r in payload["pairs"]:
        pairs.add_row(escape(str(r["a"])), escape(str(r["b"])), f"{r['delta']:.3g}", f"{r['mdd']:.3g}",
                      "yes" if r["exceeds_mdd"] else "no", f"{100 * r['p_inverted']:.0f}%",
                      "yes" if r["separable"] else "no")
    console.print(pairs)


if __name__ == "__main__":  # pragma: no cover
    main()
