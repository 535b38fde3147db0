"""The command line's shared parts: the group, option decorators declared once, how input is read, how
output is written, and how a user's mistake becomes a message and exit code 2 (a bug, exit 1 with a traceback)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.text import Text

from .. import vocabulary
from ..errors import EvalGaugeError
from ..outputs import atomic_write_text, atomic_write_with, check_outputs, dumps
from ..version import __version__

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd



class _LazyModule:
    """A module imported on first attribute access: `--help` and `--version` never load the numeric stack."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self._name), attr)


def _lazy(module: str, name: str) -> Callable:
    """A function or class of an evalgauge module, imported when first called."""

    def call(*args, **kwargs):
        return getattr(importlib.import_module(module, "evalgauge"), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    return call


if not TYPE_CHECKING:
    np = _LazyModule("numpy")
    pd = _LazyModule("pandas")


keep_levels = _lazy(".data", "keep_levels")


read_judgments = _lazy(".io", "read_judgments")


code_data = _lazy(".design", "code_data")


infer_design = _lazy(".design", "infer_design")


#: the one door to a fit (:func:`evalgauge.api.fit`): every command that fits components goes through it
fit = _lazy(".api", "fit")


simulate = _lazy(".simulate", "simulate")


class _OptionsConsole(Console):
    """A console that shows the core's `parameter` names as the command's options (see :func:`as_options`),
    and every string it renders (table cells included) through :func:`evalgauge.display.shown`, so a label or
    a model id from the data never reaches the terminal as an escape sequence or a bidi override."""

    def print(self, *objects, **kwargs) -> None:
        from ..display import shown

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
        from ..display import shown

        return super().render_str(shown(text), **kwargs)

    def _render_buffer(self, buffer) -> str:
        # the last step before the terminal: text a renderable built itself (a Text cell) is shown here too;
        # rich's own styles and control codes travel apart from the text and are kept
        from rich.segment import Segment

        from ..display import shown

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


def _fit_progress(after: float = 3.0, every: float = 10.0, what: str = "") -> Callable:
    """A REML fit expected (or found) to take more than a few seconds says how big the model is, what it
    is expected to cost, and that it is working; ``what`` names the fit when the command does more than it."""
    state: dict = {"last": None, "said": False}

    def show(size, evaluations: int, seconds: float) -> None:
        err = _console(stderr=True)
        expected = getattr(size, "seconds", 0.0)
        if not state["said"] and (seconds >= after or (evaluations == 0 and expected >= after)):
            err.print(Text(f"{what}{size}; fitting ...", style="dim"))
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
    from ..machine import keep_freed_memory
    from ..outputs import exit_on_terminate

    exit_on_terminate()
    keep_freed_memory()  # fits allocate the same large arrays at every evaluation: reuse them, not fresh pages


def json_option(what: str = "the result", help_text: str | None = None) -> Callable:
    """``--json PATH|-``, declared once: also write ``what`` as JSON ('-' for stdout only)."""
    return click.option("--json", "json_out", metavar="PATH|-",
                        help=help_text or f"Also write {what} as JSON ('-' for stdout only).")


def design_options(func: Callable) -> Callable:
    """The options that say what the columns mean, shared by the data commands."""
    options = [
        click.option("--score", help="Score column (default: score, parsed_score, y, value or rating)."),
        click.option("--facets", help="Facet columns, comma-separated (default: recognised names)."),
        click.option("--nest", help="Nesting as parent/child, comma-separated (e.g. category/item); 'none': none."),
        click.option("--replicate", help="Column numbering repeated calls of a cell ('auto': number in file order)."),
        click.option("--fixed", help="Fixed facets, comma-separated (default: temperature, position, order, "
                     "perturbation)."),
        click.option("--object", "object_", help="Object of measurement (default: system, else item)."),
        click.option("--terms", help="Model terms to keep, comma-separated lme4-style names; the rest are pooled."),
        click.option("--max-order", type=int, help="Keep effects of at most this order (plus the cell term)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


ROLE_OPTIONS = ("system", "item", "judge", "variant")


def projection_options(func: Callable) -> Callable:
    """The conventions of a projection: how nested facets are sampled and what the estimate is of."""
    func = click.option("--estimand", type=click.Choice(vocabulary.ESTIMANDS), default=None,
                        help="What the estimate is of: domain (the population the items were drawn from, TEE eq. "
                             "3; the default) or finite (the benchmark's own items, TEE C.2: the items' effects are "
                             "no error).")(func)
    return click.option("--sampling", type=click.Choice(vocabulary.SAMPLINGS), default=None,
                        help="How a projected design draws the children of a nested facet (--nest category/item): "
                             "pooled (items from the whole pool, every item-level term over N', TEE eq. 3; the "
                             "default), categories (C' categories drawn, Brennan's i:c), strata (every category "
                             "kept as a fixed stratum).")(func)


def text_options(func: Callable) -> Callable:
    """How to read a text file: its encoding and its delimiter."""
    func = click.option("--sep", help="Delimiter of a CSV/TSV file (default: sniffed from the header).")(func)
    return click.option("--encoding", help="Text encoding of CSV/TSV/JSONL (default utf-8; e.g. latin-1).")(func)


def engine_options(func: Callable) -> Callable:
    """Where the rows are reduced: --engine and --spark-master."""
    func = click.option("--spark-master", default="local[*]", show_default=True, metavar="URL",
                        help="With --engine spark: the cluster's master URL (spark://host:7077, yarn); local[*] "
                             "runs Spark on this machine's cores.")(func)
    return click.option("--engine", type=click.Choice(vocabulary.ENGINES), default="auto", show_default=True,
                        help="Where the rows are reduced: pandas (in memory), duckdb (over the files: only the "
                             "cells or counts reach Python), spark (the same reduction on a Spark cluster, "
                             "--spark-master), auto (duckdb when the command fits the cells alone and reading "
                             "would take over 512 MiB of memory, about 80 MB of CSV, or when reading would take "
                             "more than half the memory available).")(func)


def _engine_for(engine: str, data: str, rows: str = "prefer") -> str | None:
    """The engine that reduces DATA, or None to read it (:func:`evalgauge.io.engine.engine_for`; ``rows``: whether
    the command needs the rows, ``no``, ``prefer`` or ``need``)."""
    from ..io.engine import engine_for

    return engine_for(engine, data, rows=rows)


def _scan_line(data: str) -> None:
    """The scan's progress line on stderr: rows (from the Parquet metadata), files and bytes, before it starts."""
    from ..io.engine import scan_size

    rows, files, size = scan_size(data)
    _console(stderr=True).print(Text(f"engine: scanning {'' if rows is None else f'{rows:,} rows in '}{files} "
                                     f"file(s), {size / 2**20:,.1f} MiB ...", style="dim"))


def _drop_empty(judgments, score: str):
    """--drop-missing for the commands that do not fit: the rows with a score, and a note on the rest."""
    from ..data import without_empty

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
    from ..io import read_input

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
    from ..estimate.spec import ModelSpec

    if formula:
        return ModelSpec(formula=formula)
    return ModelSpec(design=_design(data, score, facets, nest, replicate, fixed, object_, terms, max_order))


def _int_list(text: str, what: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"'{text}' should be comma-separated whole numbers", param_hint=what) from None


def _float_list(text: str | None, what: str) -> list[float] | None:
    if text is None:
        return None
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"'{text}' should be comma-separated numbers", param_hint=what) from None


def _write_frame(frame: pd.DataFrame, path: Path, raw_csv: bool = False) -> None:
    """A judgments table in the format its suffix names (CSV by default); ``-`` is CSV on stdout. CSV cells a
    spreadsheet would run as formulas are written as text (:func:`csv_safe`) unless ``raw_csv``."""
    from ..outputs import csv_safe_frame

    if path.suffix == ".parquet" and str(path) != "-":
        atomic_write_with(path, lambda tmp: frame.to_parquet(tmp, index=False))
        return
    if path.suffix == ".jsonl" and str(path) != "-":
        atomic_write_with(path, lambda tmp: frame.to_json(tmp, orient="records", lines=True))
        return
    table = frame if raw_csv else csv_safe_frame(frame)
    if str(path) == "-":
        click.echo(table.to_csv(index=False), nl=False)
    else:
        atomic_write_with(path, lambda tmp: table.to_csv(tmp, index=False))


#: the option that writes CSV cells as they are
raw_csv_option = click.option(
    "--raw-csv", is_flag=True,
    help="Write CSV cells as they are. By default a text cell starting with =, +, -, @, a tab or a carriage return "
         "(a formula to a spreadsheet) is written with a leading ' (numbers are left as they are).")


def _emit(payload: dict, json_out: str | None, printer) -> None:
    text = dumps(_with_options(payload))  # the one sanitiser: no NaN reaches any JSON
    if json_out == "-":
        click.echo(text)
        return
    printer(_console())
    if json_out:
        atomic_write_text(json_out, text + "\n")
        _console().print(f"JSON written to {json_out}")


def _refuse_unusable(vc) -> None:
    """A fit that did not converge is never shown as a result (ConvergenceError, exit 2)."""
    vc.require_converged("its intervals")


def _check_supported(data: str) -> None:
    from ..io import READERS
    from ..io.datasets import is_dataset

    if is_dataset(data):  # a folder of parts or a glob: the parts are checked as they are read
        return
    suffix = Path(data).suffix.lower()
    if suffix not in READERS:
        raise EvalGaugeError(
            f"{data}: analyze reads CSV, TSV, Parquet, JSONL and run databases (.sqlite); '{suffix or 'no suffix'}' "
            "is none of these. Export your judgments to one of them (one row per judgment, a column per facet "
            "and a score column).")

