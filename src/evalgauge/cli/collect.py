"""Collecting judgments: run (to a target precision too), rescore, export, serve-sim."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.text import Text

from ..errors import EvalGaugeError
from ..outputs import atomic_write_text, atomic_write_with, check_new, check_outputs, csv_safe_frame
from ..protocols import PROTOCOLS as PROTOCOL_NAMES
from ..protocols import TRUNCATED
from ..report.terminal import print_adaptive, print_adaptive_plan, print_run, print_run_plan
from .base import _console, _emit, _need_collector, json_option, main, raw_csv_option, user_errors, writes


def _adaptive(cfg, target, pilot_items, max_stages, yes, dry_run, progress, json_out) -> None:
    """`run --target-...`: the adaptive loop, with the plan printed before anything beyond the pilot is spent."""
    from ..collect.adaptive import AdaptivePlan, adaptive_run, pilot_design, pilot_df, stage_config
    from ..collect.runner import dry_run as plan_run
    from ..collect.runner import run
    from ..planning import Target

    goal = Target(*target)
    pilot = pilot_design(cfg, pilot_items)
    if dry_run:
        plan = AdaptivePlan(goal, pilot, len(cfg.items), pilot_df(cfg, pilot), plan_run(stage_config(cfg, pilot)))
        _emit(plan.to_dict(), json_out, lambda c: print_adaptive_plan(plan, c))
        return
    console = _console(stderr=True)
    from ..api import fit_run

    result = adaptive_run(cfg, goal, fit_run=fit_run, pilot_items=pilot_items, max_stages=max_stages, proceed=yes,
                          run_stage=lambda stage: run(stage),
                          say=lambda text: console.print(Text(text, style="dim")) if progress else None)
    payload = {"database": str(cfg.database), **result.to_dict()}

    _emit(payload, json_out, lambda c: print_adaptive(result, c))
    if result.outcome not in ("met", "awaiting --yes"):
        sys.exit(3)


@main.command(name="run")
@click.argument("config", type=click.Path(dir_okay=False, path_type=str))
@click.option("--base-url", help="Send every judge's calls to this OpenAI-compatible endpoint (e.g. serve-sim).")
@click.option("--database", type=click.Path(dir_okay=False, path_type=str), help="Run database (default: config's).")
@click.option("--limit", type=click.IntRange(min=1), help="Stop after this many calls (a pilot of the pilot).")
@click.option("--progress/--no-progress", default=True, show_default=True)
@json_option(help_text="Also write the summary and diagnostics as JSON.")
@click.option("--dry-run", is_flag=True, help="Check the configuration and print the calls and their worst-case "
              "cost against the budget; send nothing.")
@click.option("--target-mdd", type=click.FloatRange(0, min_open=True),
              help="Adaptive: pilot, plan and collect only what a minimum detectable difference this small needs.")
@click.option("--target-erho2", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              help="Adaptive: collect to this E rho^2 (between 0 and 1).")
@click.option("--target-se", type=click.FloatRange(0, min_open=True), help="Adaptive: collect to this SE.")
@click.option("--budget-usd", type=click.FloatRange(0, min_open=True), help="Spending cap (overrides budget_usd).")
@click.option("--batch", is_flag=True, help="Send the missing calls through the providers' batch APIs (OpenAI's "
              "Batch API, Anthropic's Message Batches) at their batch price ([run] batch = true).")
@click.option("--batch-dir", type=click.Path(file_okay=False, path_type=str),
              help="Exchange the batches as files in this directory, for an offline runner such as `vllm run-batch` "
                   "(implies --batch; [run] batch_dir).")
@click.option("--pilot-items", type=click.IntRange(min=2),
              help="Adaptive: items in the pilot (default: system x item gets 50 df, at least 10).")
@click.option("--max-stages", type=click.IntRange(min=1), default=3, show_default=True,
              help="Adaptive: stages after the pilot at most.")
@click.option("--yes", is_flag=True, help="Adaptive: go on and collect the planned design (without it the run "
              "stops after the pilot and shows the plan and its cost).")
@user_errors
@writes(("config", "database"), json_out="--json")
def run_cmd(config, base_url, database, limit, progress, json_out, dry_run, target_mdd, target_erho2, target_se,
            budget_usd, batch, batch_dir, pilot_items, max_stages, yes) -> None:
    """Run (or resume) the factorial of judge calls a CONFIG.toml describes, into a SQLite run database.

    With a target (--target-mdd, --target-erho2 or --target-se) the run is adaptive: a pilot on a random
    subset of the item pool, a fit, the cheapest design that reaches the target (or why none can, before
    spending more), then only the missing calls, refitting until the target is met.

    \b
    Examples:
      evalgauge run examples/sim/run.toml --base-url http://127.0.0.1:8765/v1 --dry-run
      evalgauge run examples/sim/run.toml --target-mdd 0.3 --budget-usd 2 --yes
      evalgauge run examples/sim/run.toml --base-url http://127.0.0.1:8765/v1 --batch --dry-run
    """
    _need_collector()
    from dataclasses import replace

    from ..analysis.diagnostics import diagnose
    from ..collect.config import load_config
    from ..collect.runner import run
    from ..collect.tasks import count_tasks
    from ..store import RunStore

    cfg = load_config(config, base_url=base_url, database=database)
    check_outputs([config, cfg.database, *cfg.sources], {"--json": json_out})
    if budget_usd is not None:
        cfg = replace(cfg, budget_usd=budget_usd)
    if batch or batch_dir:
        if batch_dir:  # a configuration's own batch_dir was checked when it was read
            from ..collect.config import check_batch_files

            check_batch_files(cfg.judges, "--batch-dir")
        cfg = replace(cfg, batch=True, batch_dir=Path(batch_dir) if batch_dir else cfg.batch_dir)
    targets = [(q, v) for q, v in (("mdd95", target_mdd), ("erho2", target_erho2), ("se", target_se)) if v]
    if len(targets) > 1:
        raise click.UsageError("give one target: --target-mdd, --target-erho2 or --target-se.")
    if targets:
        _adaptive(cfg, targets[0], pilot_items, max_stages, yes, dry_run, progress, json_out)
        return
    if dry_run:
        from ..collect.runner import dry_run as plan_run

        plan = plan_run(cfg)
        _emit(plan.to_dict(), json_out, lambda c: print_run_plan(plan, cfg.notes, c))
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

    _emit(payload, json_out, lambda c: print_run(summary, diag, cfg.database, cfg.notes, c))
    if summary.interrupted:  # what was stored is kept; the note above says how to resume
        sys.exit(130 if summary.interrupted == "SIGINT" else 143)
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
    from ..inputs import check_input_file
    from ..protocols import parse
    from ..store import RunStore

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

        def read(text, position, cut):
            try:
                v = parse(text, protocol, scale_min=scale_min, scale_max=scale_max, pattern=pattern, cut=cut)
            except ValueError as exc:
                raise EvalGaugeError(f"--pattern: {exc}") from None
            value = v.value
            if value is not None and pairwise and position == "BA":
                value = 1.0 - value  # the system was shown second
            reason = f"{TRUNCATED} before a verdict: {v.reason}" if cut else v.reason
            return value, None if value is not None else reason, f"{protocol}: {v.rule}" if v.rule else None

        changed, total = store.rescore(read, protocol)
        calls = store.calls()
    finally:
        store.close()
    read_ok = int(calls["score"].notna().sum())
    _console().print(f"{path}: {total} stored completions read with {protocol}: {read_ok} verdicts, "
                     f"{total - read_ok} without one; {changed} changed (the earlier parse kept in rescores).")


@main.command(name="export")
@click.argument("database", type=click.Path(dir_okay=False, path_type=str))
@click.option("--format", "fmt", type=click.Choice(["csv", "parquet", "eee"]),
              help="csv or parquet (default: from --out's suffix, else csv); eee: DATABASE is an Every Eval Ever "
              "aggregate file, written again with evalgauge's interval in each result's score_details.uncertainty.")
@click.option("--samples", multiple=True, type=click.Path(dir_okay=False, path_type=str),
              help="eee: the aggregate's instance-level file(s) (default: the one it names, beside it).")
@click.option("--level", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.95,
              show_default=True, help="eee: the interval's confidence level.")
@click.option("--parquet", is_flag=True, help="The same as --format parquet.")
@click.option("--out", "-o", type=click.Path(dir_okay=False, path_type=str), help="Output file (default: beside).")
@click.option("--judgments", is_flag=True, help="Only the judgments table (facets and score), as components reads.")
@click.option("--force", is_flag=True, help="Replace an existing file at the default output path.")
@raw_csv_option
@user_errors
def export_cmd(database, fmt, samples, level, parquet, out, judgments, force, raw_csv) -> None:
    """Export a run database: every call with its completion, parse, model, tokens and cost; or (--format eee)
    an Every Eval Ever aggregate file with evalgauge's interval.

    \b
    Examples:
      evalgauge export demo-output/sim.sqlite --parquet
      evalgauge export demo-output/sim.sqlite --judgments -o demo-output/judgments.csv
      evalgauge export 9598a50e.json --format eee -o 9598a50e.evalgauge.json
    """
    from ..io.runs import read_run, write_calls_csv, write_calls_parquet

    if fmt == "eee":
        _export_eee(Path(database), samples, level, out, force)
        return
    fmt = _export_format(fmt, parquet, out)
    path = Path(database)
    if not path.exists():
        raise EvalGaugeError(f"{path}: no such run database.")
    target = Path(out) if out else path.with_suffix(f".{fmt}")
    check_outputs([path], {"--out": target})
    if not out:
        check_new("--out", target, force)
    if judgments:
        frame = read_run(Path(path))
        table = frame if raw_csv or fmt == "parquet" else csv_safe_frame(frame)
        write = (lambda dest: frame.to_parquet(dest, index=False)) if fmt == "parquet" else \
            (lambda dest: table.to_csv(dest, index=False))
        rows = len(frame)
    else:  # every call, streamed: a run of millions of calls is written in pieces
        write = (lambda dest: write_calls_parquet(path, dest)) if fmt == "parquet" else \
            (lambda dest: _csv_to(dest, lambda stream: write_calls_csv(path, stream, raw=raw_csv)))
        rows = None
    if str(target) == "-":
        if fmt == "parquet":
            import pyarrow as pa

            sink = pa.BufferOutputStream()  # Parquet's footer comes last: built whole, then written
            n = write(sink)
            sys.stdout.buffer.write(sink.getvalue().to_pybytes())
        else:
            n = write(sys.stdout)
        sys.stdout.flush()
        _console(stderr=True).print(f"{rows if rows is not None else n} rows written to stdout")
        return
    counted = {}
    atomic_write_with(target, lambda tmp: counted.setdefault("n", write(tmp)))
    _console().print(f"{rows if rows is not None else counted['n']} rows written to {target}")


def _export_eee(aggregate: Path, samples: tuple[str, ...], level: float, out: str | None, force: bool) -> None:
    """The aggregate with evalgauge's intervals, written atomically (never over the aggregate or its samples)."""
    from ..eee_export import aggregate_with_intervals

    if not aggregate.is_file():
        raise EvalGaugeError(f"{aggregate}: no such Every Eval Ever aggregate file.")
    target = Path(out) if out else aggregate.with_name(f"{aggregate.stem}.evalgauge.json")
    check_outputs([aggregate, *samples], {"--out": target})
    if not out:
        check_new("--out", target, force)
    updated, notes = aggregate_with_intervals(aggregate, list(samples) or None, level)
    text = json.dumps(updated, indent=2, ensure_ascii=False) + "\n"
    if str(target) == "-":
        sys.stdout.write(text)
    else:
        atomic_write_text(target, text)
    c = _console(stderr=str(target) == "-")
    for note in notes:
        c.print(Text("note: ", style="yellow") + Text(note))
    if str(target) != "-":
        c.print(f"written to {target}")


def _export_format(fmt: str | None, parquet: bool, out: str | None) -> str:
    """The format asked for (--format, --parquet) or told by --out's suffix; csv when none says. Two that
    disagree (--format csv with --parquet or with -o x.parquet) are a usage error, not a CSV under a Parquet name."""
    said = {f for f in (fmt, "parquet" if parquet else None) if f}
    suffix = Path(out).suffix.lower().lstrip(".") if out and out != "-" else ""
    if suffix in ("csv", "parquet"):
        said.add(suffix)
    if len(said) > 1:
        raise click.UsageError(f"the output format is unclear: {' and '.join(sorted(said))} were both asked for "
                               "(--format, --parquet, --out's suffix); give one.")
    return said.pop() if said else "csv"


def _csv_to(dest, write_rows) -> int:
    """``write_rows(stream)`` onto ``dest``, a path (opened as UTF-8 text) or a text stream."""
    if hasattr(dest, "write"):
        return write_rows(dest)
    with open(dest, "w", encoding="utf-8", newline="") as stream:
        return write_rows(stream)


def _sim_components(path: Path) -> dict[str, float]:
    """``{term: variance}`` from a JSON file of that shape or an `evalgauge components --json` result."""
    import math

    from ..inputs import check_input_file

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
                   "drift_after=N, latency_ms, timeout_s, retry_after, bad_request, forbidden; the batch "
                   "endpoints' batch_delay_s, batch_error, batch_expire (rates per line), batch_line_ms, batch_invalid "
                   "(repeatable).")
@click.option("--require-key-env", metavar="NAME",
              help="Answer 401 unless a request carries the key held in this environment variable.")
@click.option("--ledger", type=click.Path(dir_okay=False, path_type=str),
              help="Append every answered request's usage (input, cached, written, output tokens) to this file as "
                   "a JSON line: the provider's own account, to check a run's cost against.")
@user_errors
@writes(("config", "components_path"), ledger="--ledger")
def serve_sim_cmd(config, components_path, mu, seed, host, port, faults, require_key_env, ledger) -> None:
    """Serve an OpenAI-compatible judge panel simulated from variance components (for dry runs and tests).

    \b
    Example:
      evalgauge serve-sim examples/sim/run.toml --port 8765 --fault rate_limit=0.05 &
      evalgauge run examples/sim/run.toml --base-url http://127.0.0.1:8765/v1
    """
    _need_collector()
    from ..collect.config import load_config
    from ..collect.simserver import FAULTS, SimPanel, serve

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
    panel = SimPanel(cfg, comps, mu=mu, seed=seed, faults=fault_map, api_key=api_key, ledger=ledger)
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

