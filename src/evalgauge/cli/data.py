"""Commands about other data: import from other tools, item screening, pairwise judgments."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table
from rich.text import Text

from ..errors import EvalGaugeError
from ..outputs import atomic_write_text
from ..report.terminal import print_gold, print_pairwise, print_screening
from .base import (
    _console,
    _drop_empty,
    _emit,
    _engine_for,
    _fit_progress,
    _scan_line,
    _write_frame,
    engine_options,
    fit,
    json_option,
    main,
    pd,
    raw_csv_option,
    read_judgments,
    text_options,
    user_errors,
    writes,
)


@main.command()
@click.argument("data", type=click.Path(path_type=str))
@click.option("--system", default="system", show_default=True)
@click.option("--item", default="item", show_default=True)
@click.option("--score", default="score", show_default=True)
@click.option("--threshold", type=float, help="Keep items whose between-system variance is at least this.")
@click.option("--keep", type=click.FloatRange(0, 1, min_open=True), help="Or keep this top fraction of items.")
@click.option("--splits", type=click.IntRange(min=10), default=200, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@json_option("the result")
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
    from ..data import numeric_scores
    from ..scoring import screen_items

    judgments = read_judgments(data, encoding=encoding, sep=sep)
    if drop_missing:
        judgments = _drop_empty(judgments, score)
    frame = judgments.frame.assign(**{score: numeric_scores(judgments, score)})
    result = screen_items(frame, system=system, item=item, score=score, threshold=threshold, keep=keep,
                          splits=splits, seed=seed)
    fitted = []
    selected_rows = frame[frame[item].astype(str).isin(result.selected)]
    for rows in (frame, selected_rows):  # two row sets: two fits
        try:
            fitted.append(fit(rows, drop_missing=True).components)
        except EvalGaugeError as exc:
            fitted.append(str(exc))
    result = result.with_components(*fitted)
    _emit(result.to_dict(), json_out, lambda c: print_screening(result, c))


@main.command()
@click.argument("data", type=click.Path(path_type=str))
@click.option("--reference", help="The system at log strength 0 (default: the first in sorted order).")
@click.option("--baseline", help="A fixed baseline every system is compared against (left out of the components).")
@click.option("--position/--no-position", default=True, show_default=True,
              help="Fit a first-slot (position) advantage in Bradley-Terry when both slots occur.")
@click.option("--bootstrap", "n_boot", type=click.IntRange(min=0), default=200, show_default=True,
              help="Resamples for the naive and the TEE-aware bootstrap intervals (0: none).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--human", metavar="COLUMN", help="A column with the human vote (model_a, model_b or tie): report "
              "per-judgment agreement, overall and decisive-only (TEE Table 17).")
@click.option("--best-of", type=click.IntRange(min=1), help="The gaming surface over K configurations (judge x "
              "variant x order cells) drawn from the observed ones (default: as many as were observed).")
@click.option("--components/--no-components", default=None,
              help="Estimate the win indicators' variance components (a REML fit over system x item x judge x "
              "variant x slot cells: minutes on a log with hundreds of thousands of them). Default: fitted when "
              "expected to take at most 20 s, else left out with a note saying so before any work.")
@click.option("--components-json", type=click.Path(dir_okay=False, path_type=str),
              help="Write the win-indicator components here, for `evalgauge plan` (MDD at any items and judges).")
@json_option("everything")
@click.option("--model-a", "col_a", metavar="COL", help="The column holding the first-shown system (default model_a).")
@click.option("--model-b", "col_b", metavar="COL", help="The column holding the second-shown system (default model_b).")
@click.option("--winner", "col_winner", metavar="COL", help="The column holding the verdict (default winner).")
@click.option("--item", "col_item", metavar="COL", help="The column holding the item (default item).")
@click.option("--judge", "col_judge", metavar="COL", help="The column holding the judge (default judge).")
@engine_options
@text_options
@user_errors
@writes(("data",), components_json="--components-json", json_out="--json")
def pairwise(data, reference, baseline, position, n_boot, seed, human, best_of, components, components_json, json_out,
             col_a, col_b, col_winner, col_item, col_judge, engine, spark_master, encoding, sep) -> None:
    """Pairwise judgments (model_a, model_b, winner; optional item, judge, variant, order): Bradley-Terry,
    Elo, position bias, and the variance components of the win indicators.

    \b
    Examples:
      evalgauge pairwise arena.csv --reference gpt-4-0314 --bootstrap 1000
      evalgauge pairwise battles.csv --model-a left --model-b right --winner verdict --json -
      evalgauge pairwise arena_parquet/ --engine duckdb     # counted over the files
      evalgauge pairwise arena_parquet/ --no-components     # ratings and intervals only
    """
    if components_json and components is False:
        raise click.UsageError("--components-json writes the components that --no-components leaves out: drop one.")
    roles = {"model_a": col_a, "model_b": col_b, "winner": col_winner, "item": col_item, "judge": col_judge}
    columns = {k: v for k, v in roles.items() if v}
    chosen = _engine_for(engine, data)
    if chosen:
        result = _pairwise_on_engine(data, {**columns, **({"human": human} if human else {})}, engine=chosen,
                                     master=spark_master, text={"sep": sep, "encoding": encoding},
                                     reference=reference, baseline=baseline, position=position, n_boot=n_boot,
                                     seed=seed, components=components, progress=_win_progress())
    else:
        judgments = read_judgments(data, encoding=encoding, sep=sep, columns=columns or None)
        from ..analysis.pairwise import analyze_pairwise  # after the read: a bad file is refused before the fit

        result = analyze_pairwise(judgments, reference=reference, baseline=baseline, position=position,
                                  n_boot=n_boot, seed=seed, human=human, components=components,
                                  progress=_win_progress(), best_of=best_of, fitter=_fit_components)
    if components_json and result.components is not None:
        atomic_write_text(components_json, result.components.to_json() + "\n")

    def show(c):
        from ..analysis.gstudy import summarize_components

        print_pairwise(result, summarize_components(result.components) if result.components is not None else None,
                       c)

    _emit(result.to_dict(), json_out, show)


def _fit_components(rows, design, **options):
    """The win indicators fitted through the one door (:func:`evalgauge.api.fit_components`), loaded when a log
    with items needs it."""
    from ..api import fit_components

    return fit_components(rows, design, **options)


def _win_progress():
    return _fit_progress(what="the win indicators' components (--no-components leaves them out): ")


def _fit_cell_components(cells, design, progress=None):
    """The win indicators' cell statistics (an engine's counts) fitted through the one door
    (:func:`evalgauge.api.fit` with ``sums=True``)."""
    return fit(cells, design=design, sums=True, progress=progress).components


def _pairwise_on_engine(data: str, columns: dict[str, str], *, engine: str, master: str, text: dict, **options):
    """`pairwise --engine duckdb|spark`: the log counted over the files, the analysis on the counts (the
    agreement with a human vote column from its distinct votes' counts)."""
    from ..io.engine import reduce_battles

    _scan_line(data)
    counts, info = reduce_battles(data, engine=engine, master=master, columns=columns,
                                  preload=("pandas", "evalgauge.analysis.pairwise"), **text)
    from ..analysis.pairwise import analyze_battle_counts

    result = analyze_battle_counts(counts, source=data, fitter=_fit_cell_components, **options)
    if "human_agreement" in info:
        result.human = result.payload["human_agreement"] = info.pop("human_agreement")
    if info.get("item_column") not in (None, "item"):
        result.notes.append(f"items: the column '{info['item_column']}' (each battle is a pair of systems on one "
                            "of its items; the intervals resample them). Name another with --item.")
    info.pop("item_column", None)
    result.notes.append(f"engine: {engine} reduced {info['rows']:,} judgments in {info['files']} file(s) to "
                        f"{info['entries']:,} distinct battles x verdicts.")
    result.payload["engine"] = {"name": engine, **info}
    return result


@main.command(name="import")
@click.argument("fmt", metavar="FORMAT", type=click.Choice(["inspect", "lm-eval", "arena-hard", "alpaca-eval",
                                                            "mt-bench", "wide", "helm", "eee"]))
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=str))
@click.option("--out", "-o", required=True, type=click.Path(dir_okay=False, path_type=str),
              help="The judgments table to write (.csv, .parquet or .jsonl).")
@click.option("--metric", help="lm-eval: the per-sample metric to use as the score (default acc); helm: the "
              "per-instance metric when the run has no LLM jury (default exact_match, else quasi_exact_match, ...).")
@click.option("--system", help="lm-eval: the evaluated model's name (default: from the results json or folder).")
@click.option("--baseline", help="arena-hard: the baseline model, when the records do not name it (v0.1: "
              "gpt-4-0314).")
@click.option("--unweighted", is_flag=True, help="arena-hard: count a >> verdict once (default: 3 battles, as "
              "arena-hard's own score).")
@click.option("--id", "ids", multiple=True, metavar="FACET=COLUMN",
              help="wide: a facet and the column holding it, e.g. --id system=exam_model --id item=question_id.")
@click.option("--columns", metavar="FACET=COL1,COL2|GLOB",
              help="wide: the score columns, each a level of FACET, e.g. --columns judge=gpt4,llama3 or judge='j_*'.")
@raw_csv_option
@user_errors
@writes(("files",), out="--out")
def import_cmd(fmt, files, out, metric, system, baseline, unweighted, ids, columns, raw_csv) -> None:
    """Convert judgment files of other tools (Inspect, lm-eval, arena-hard, AlpacaEval, MT-bench, HELM, Every
    Eval Ever, wide tables).

    \b
    A folder stands for the files in it: an Inspect eval set's log directory, a HELM suite of run directories,
    a folder of Every Eval Ever files (*_samples.jsonl and aggregate *.json).

    \b
    Examples:
      evalgauge import inspect logs/ -o judgments.csv
      evalgauge import helm benchmark_output/runs/my-suite -o helm.csv
      evalgauge import alpaca-eval results/*/alpaca_eval_gpt4/annotations.json -o ae.csv
      evalgauge import arena-hard model_judgment/gpt-4-1106-preview/*.jsonl --baseline gpt-4-0314 -o arena.csv
      evalgauge import wide triviaqa.csv --id system=exam_model --id item=question_id --columns 'judge=*_judge' -o t.csv
    """
    from ..io import import_files

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
    _write_frame(frame, Path(out), raw_csv=raw_csv)
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
    facets = [c for c in ("system", "task", "item", "judge", "variant", "temperature") if c in frame]
    varying = [c for c in facets if frame[c].nunique() > 1]
    reps = "replicate" in frame and frame["replicate"].nunique() > 1
    blank = int(frame["score"].isna().sum()) if "score" in frame else 0
    if len(varying) >= 2 or (varying and reps):
        one = [c for c in facets if c not in varying]
        why = [f"one level of {', '.join(one)}: left out, with a note"] if one else []
        if blank:
            why.append(f"{blank} rows have no score: --drop-missing leaves them out and says which")
        return f"evalgauge analyze {out}" + (" --drop-missing" if blank else "") + (
            f"  ({'; '.join(why)})" if why else "")
    if not varying:
        return (f"evalgauge analyze {out}  (nothing varies: {len(frame)} judgment(s) of one item, judge and run; an "
                "interval needs two items or more)")
    return (f"evalgauge analyze {out}  (one run: only {', '.join(varying)} varies, so it gives the "
            "item-sampling interval and names what one system, judge and run cannot measure; add --assume "
            "TERM=VARIANCE for components you know, or import more judges or runs to measure them)")



@main.command()
@click.argument("data", type=click.Path(path_type=str))
@click.option("--label", "label", default="label", show_default=True, metavar="COL",
              help="The column holding each judgment's class (text).")
@click.option("--classes", help="The label set in order, comma-separated (default: the labels found).")
@click.option("--facets", help="Facet columns, comma-separated (default: recognised names).")
@click.option("--nest", help="Nesting as parent/child, comma-separated (e.g. category/item); 'none': none.")
@click.option("--replicate", help="Column numbering repeated calls of a cell ('auto': number in file order).")
@click.option("--fixed", help="Fixed facets, comma-separated (default: temperature, position, order, perturbation).")
@click.option("--level", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.95, show_default=True)
@json_option("the shares, agreement and confusion")
@text_options
@user_errors
@writes(("data",), json_out="--json")
def labels(data, label, classes, facets, nest, replicate, fixed, level, json_out, encoding, sep) -> None:
    """Categorical labels (favor / against / neutral): each class's share with its honest interval inside 0-1,
    Krippendorff's alpha across judges, variants, temperatures and replicates, and the confusion between them.

    \b
    Examples:
      evalgauge labels stance.csv --classes favor,against,neutral
      evalgauge labels run.sqlite --json labels.json
    """
    from ..io import read_input

    judgments, _ = read_input(data, encoding=encoding, sep=sep)
    label_report(judgments, label=label, classes=classes, facets=facets, nest=nest, replicate=replicate, fixed=fixed,
                 level=level, json_out=json_out)


def label_report(judgments, *, label: str = "label", classes: str | list[str] | None = None, facets=None, nest=None,
                 replicate=None, fixed=None, level: float = 0.95, json_out=None, first=None, gold=None,
                 gold_plan: dict | None = None) -> None:
    """The label analysis of a judgments table (:func:`evalgauge.labels.analyze_labels`), printed and written as
    JSON; ``first(console)`` prints what must come before it (a run's missing-answer finding); ``gold(classes)``
    gives the gold labels' analysis (:func:`evalgauge.gold.gold_label_analysis`), printed after it, with
    ``gold_plan`` (cost_gold, cost_call, budget or target_se) gold labels priced against judge calls for every
    class's share."""
    from ..labels import analyze_labels

    frame = judgments.frame
    if label not in frame:
        raise EvalGaugeError(f"{judgments.source}: no column '{label}' (the columns are "
                             f"{', '.join(map(str, frame.columns))}); name the label column with --label.")
    result = analyze_labels(frame, label=label, facets=facets, nest=nest, replicate=replicate, fixed=fixed,
                            classes=([c.strip() for c in classes.split(",")] if isinstance(classes, str)
                                     else classes) or None, level=level)

    def show(c):
        if first is not None:
            first(c)
        pct = f"{100 * level:g}%"
        t = Table(title=f"Share of each class ({label}; full {pct} interval: every source of error, TEE eq. 3 on "
                        "the class indicator; naive: item sampling only)")
        for col in ("class", "share", f"full {pct}", f"naive {pct}", "method"):
            t.add_column(col, justify="left" if col in ("class", "method") else "right")
        for r in result.shares.to_dict(orient="records"):
            t.add_row(r["class"], f"{100 * r['share']:.1f}%", f"[{100 * r['low']:.1f}%, {100 * r['high']:.1f}%]",
                      f"[{100 * r['naive_low']:.1f}%, {100 * r['naive_high']:.1f}%]", r["method"])
        c.print(t)
        for r in result.agreement.to_dict(orient="records"):
            alpha = "not defined (no variation)" if r["alpha"] != r["alpha"] else f"{r['alpha']:.3f}"
            c.print(f"Krippendorff's alpha (nominal) across {r['facet']}s: {alpha} ({r['units']:,} units, "
                    f"{r['values']:,} labels).")
        for facet, table in result.confusion.items():
            if table.empty:
                continue
            off = table[table["label_a"] != table["label_b"]].nlargest(3, "count")
            common = "; ".join(f"{r['a']}={r['label_a']} vs {r['b']}={r['label_b']} ({r['count']})"
                               for r in off.to_dict(orient="records"))
            disagree = int(table.loc[table["label_a"] != table["label_b"], "count"].sum())
            c.print(f"Confusion across {facet}s: {disagree:,} of {int(table['count'].sum()):,} paired labels "
                    "disagree" + (f"; the commonest: {common}" if common else "") + ".")
        for note in result.notes:
            c.print(Text("note: ", style="yellow") + Text(note))
        if checked is not None:
            goal = gold_plan or {}
            print_gold(checked, c, plans, goal.get("budget"), goal.get("target_se"))

    payload = result.to_dict()
    checked = gold(list(result.classes)) if gold is not None else None
    plans = None
    if checked is not None:
        payload["gold"] = checked.to_dict()
        if gold_plan is not None:
            plans = checked.plan(**gold_plan)
            payload["gold"]["plan"] = {**gold_plan, "plans": plans.to_dict(orient="records")}
    _emit(payload, json_out, show)
