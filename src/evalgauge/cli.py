"""The ``evalgauge`` command: argument parsing, output and exit codes only.

Exit codes: 0 success, 2 a problem with the user's input (the message says
what and what to do), 1 a bug in evalgauge (with a traceback to report).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from . import __version__
from .components import VarianceComponents
from .design import code_data, infer_design
from .errors import EvalGaugeError
from .estimate import METHODS, estimate_components
from .estimate.glmm import glmm_check
from .estimate.strata import estimate_by_stratum
from .simulate import PRESETS, simulate


def _console(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    # Piped output (logs, CI, `| less`) gets a wide table instead of rich's 80 columns.
    width = None if stream.isatty() else 160
    return Console(stderr=stderr, highlight=False, soft_wrap=True, width=width)


def user_errors(func: Callable) -> Callable:
    """Turn an :class:`EvalGaugeError` into its message and exit code 2."""

    @wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except EvalGaugeError as exc:
            _console(stderr=True).print(f"[bold red]error:[/] {exc}", markup=True)
            sys.exit(2)

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="evalgauge")
def main() -> None:
    """evalgauge: the hidden measurement error in LLM evaluation pipelines.

    Estimate the variance components of a judged evaluation (which judge, which
    prompt wording, which temperature, which items, repeated calls) so that
    intervals count every source of error, not only item sampling.
    """


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


def _design(data: str, score, facets, nest, replicate, fixed, object_, terms, max_order):
    return infer_design(data, score=score, facets=facets, nest=nest, replicate=replicate, fixed=fixed,
                        object=object_, terms=terms, max_order=max_order)


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
@click.option("--json", "json_out", metavar="PATH|-", help="Also write the result as JSON ('-' for stdout only).")
@user_errors
def components(data, score, facets, nest, replicate, fixed, object_, terms, max_order, method, formula,
               drop_missing, n_boot, level, seed, by, glmm, json_out) -> None:
    """Estimate the variance components of DATA (CSV, TSV, Parquet or JSONL)."""
    boot = {"n_boot": n_boot, "level": level, "seed": seed}
    if glmm:
        design = None if formula else _design(data, score, facets, nest, replicate, fixed, object_, terms, max_order)
        check = glmm_check(data, design, formula=formula, method=method)
        if json_out == "-":
            click.echo(check.to_json())
            return
        print_glmm(check, _console())
        if json_out:
            Path(json_out).write_text(check.to_json() + "\n")
            _console().print(f"JSON written to {json_out}")
        return
    if by:
        design = None if formula else _design(data, score, facets, nest, replicate, fixed, object_, terms, max_order)
        strata = estimate_by_stratum(data, by, design, formula=formula, method=method, drop_missing=drop_missing,
                                     **boot)
        if json_out == "-":
            click.echo(strata.to_json())
            return
        print_strata(strata, _console())
        if json_out:
            Path(json_out).write_text(strata.to_json() + "\n")
            _console().print(f"JSON written to {json_out}")
        return
    if formula:
        result = estimate_components(data, method=method, formula=formula, drop_missing=drop_missing, **boot)
    else:
        design = _design(data, score, facets, nest, replicate, fixed, object_, terms, max_order)
        result = estimate_components(data, design, method=method, drop_missing=drop_missing, **boot)
    if json_out == "-":
        click.echo(result.to_json())
        return
    print_components(result, _console())
    if json_out:
        Path(json_out).write_text(result.to_json() + "\n")
        _console().print(f"JSON written to {json_out}")


@main.command()
@click.argument("data", type=click.Path(dir_okay=False, path_type=str))
@design_options
@user_errors
def balance(data, score, facets, nest, replicate, fixed, object_, terms, max_order) -> None:
    """Report whether DATA is a complete balanced block, and which cells are missing."""
    design = _design(data, score, facets, nest, replicate, fixed, object_, terms, max_order)
    report = code_data(data, design).balance()
    console = _console()
    console.print(f"[bold]{data}[/]: {report.n_obs} observations; facets "
                  + ", ".join(f"{f.name} ({f.role}{', in ' + f.parent if f.parent else ''})" for f in design.facets))
    console.print(report.summary())
    sys.exit(0 if report.balanced else 3)


@main.command(name="simulate")
@click.argument("preset", type=click.Choice(sorted(PRESETS)))
@click.option("--out", "-o", required=True, type=click.Path(dir_okay=False, path_type=str),
              help="Where to write the judgments (.csv, .parquet or .jsonl).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--set", "sets", multiple=True, metavar="FACET=N",
              help="Change a facet count or replicates, e.g. --set items=100 (repeatable).")
@user_errors
def simulate_cmd(preset, out, seed, sets) -> None:
    """Simulate judgments from a paper's data-generating process (tee: TEE Table 8; sizing: s x i x j x r)."""
    kwargs = {}
    for s in sets:
        key, _, value = s.partition("=")
        if not value.isdigit():
            raise click.BadParameter(f"'{s}' should read NAME=COUNT", param_hint="--set")
        kwargs[key.strip()] = int(value)
    try:
        spec = PRESETS[preset](**kwargs)
    except TypeError:
        import inspect

        names = ", ".join(inspect.signature(PRESETS[preset]).parameters)
        raise click.BadParameter(f"preset '{preset}' takes {names}", param_hint="--set") from None
    frame = simulate(spec, seed=seed)
    path = Path(out)
    if path.suffix == ".parquet":
        frame.to_parquet(path, index=False)
    elif path.suffix == ".jsonl":
        frame.to_json(path, orient="records", lines=True)
    else:
        frame.to_csv(path, index=False)
    truth = ", ".join(f"{k}={v:g}" for k, v in spec.true_components().items())
    _console().print(f"{len(frame)} judgments written to {out} (seed {seed}). True components: {truth}")


def print_components(result: VarianceComponents, console: Console) -> None:
    """The components table, then the design line and any notes."""
    table = Table(title=f"Variance components ({result.method}, {result.n_obs} observations)")
    ci = result.intervals is not None
    columns = [("component", "left"), ("kind", "left"), ("variance", "right"), ("SE", "right")]
    if ci:
        columns.append((f"{100 * result.intervals['level']:g}% interval", "right"))
    columns += [("share", "right"), ("df", "right"), ("mean square", "right")]
    for col, justify in columns:
        table.add_column(col, justify=justify)
    for c in result.components:
        name = c.name + (f" (= {c.confounded_with} + e)" if c.confounded_with else "")
        row = [name, c.kind, f"{c.variance:.6g}", _num(c.se, ".3g")]
        if ci:
            row.append("—" if c.ci_low != c.ci_low else f"[{c.ci_low:.4g}, {c.ci_high:.4g}]")
        row += [f"{100 * result.share(c.name):.1f}%", _num(c.df, "g"), _num(c.mean_square, ".6g")]
        table.add_row(*row)
    console.print(table)
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
        console.print(f"[yellow]note:[/] {note}")


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
    console.print(f"Spearman rank correlation of the shares: {check.spearman:.3f} (TEE Table 11 reports "
                  "0.91-0.99 on its binary benchmarks). GLMM: "
                  f"{check.glmm.method_reason}; residual fixed at pi^2/3.")
    for note in check.glmm.notes:
        console.print(f"[yellow]note:[/] {note}")


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
        console.print(f"[yellow]note:[/] {note}")


def _num(value: float, fmt: str) -> str:
    return "—" if value is None or value != value else format(value, fmt)


if __name__ == "__main__":  # pragma: no cover
    main()
