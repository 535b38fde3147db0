"""Commands that fit and answer: components, balance, analyze, compare, plan, audit."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.text import Text

from .. import vocabulary
from ..errors import EvalGaugeError
from ..report.terminal import (
    print_analysis,
    print_audit,
    print_comparison,
    print_components,
    print_glmm,
    print_gold,
    print_missing_answers,
    print_plan,
    print_preset,
    print_single_run,
    print_strata,
)
from ..vocabulary import DDF_METHODS, METHODS
from .base import (
    _check_supported,
    _console,
    _design,
    _drop_empty,
    _emit,
    _engine_for,
    _fit_progress,
    _int_list,
    _load,
    _model,
    _name_values,
    _refuse_unusable,
    _scan_line,
    code_data,
    design_options,
    engine_options,
    fit,
    json_option,
    main,
    np,
    projection_options,
    read_options,
    user_errors,
    writes,
)


@main.command()
@click.argument("data", type=click.Path(path_type=str))
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
@engine_options
@json_option("the result")
@read_options
@user_errors
@writes(("data",), json_out="--json")
def components(data, score, facets, nest, replicate, fixed, object_, terms, max_order, method, formula,
               drop_missing, n_boot, level, seed, by, glmm, keep, engine, spark_master, json_out, **read) -> None:
    """Estimate the variance components of DATA (CSV, TSV, Parquet, JSONL or a run database).

    \b
    Examples:
      evalgauge components judgments.csv --terms system,item,judge,system:item
      evalgauge components triviaqa.csv --system exam_model --item question_id --judge judge_model
    """
    boot = {"n_boot": n_boot, "level": level, "seed": seed}
    needs_rows = formula or n_boot or by or glmm or keep or method == "anova" or any(
        v for k, v in read.items() if k.startswith("col_"))
    chosen = _engine_for(engine, data, "need" if needs_rows else "no")
    if chosen:
        _components_on_engine(data, score, facets, nest, fixed, object_, terms, max_order, method, formula,
                              drop_missing, n_boot, by, glmm, keep, json_out, read, engine=chosen,
                              master=spark_master, replicate=replicate)
        return
    data, _ = _load(data, keep=keep, **read)
    model = _model(data, formula, score, facets, nest, replicate, fixed, object_, terms, max_order)
    # the GLMM check compares the linear model's components with the logit GLMM's: no bootstrap of either
    fitted = fit(data, design=model, method=method, drop_missing=drop_missing, progress=_fit_progress(),
                 **({} if glmm else boot))
    if glmm:
        from ..analysis.gstudy import summarize_components

        check = fitted.glmm()
        _emit(check.to_dict(), json_out, lambda c: print_glmm(check, summarize_components(check.lpm), c))
        return
    if by:
        strata = fitted.strata(by)
        _emit(strata.to_dict(), json_out, lambda c: print_strata(strata, c))
        return
    result = fitted.components
    from ..analysis.gstudy import judgments_bounds, summarize_components

    bounds = judgments_bounds(data, model.score, None) if hasattr(data, "frame") else None
    summary = summarize_components(result, bounds)
    _emit(summary.to_dict(), json_out, lambda c: print_components(summary, c))


def _analyze_labels(data, record, facets, nest, replicate, fixed, level, json_out, gold=None,
                    gold_plan: dict | None = None) -> None:
    """`analyze` of judgments whose verdicts are classes (a label run, or a file with a label column and no
    score): the label analysis, after the run's missing-answer finding when there is one; ``gold`` (path, column,
    probability) adds the gold labels' analysis."""
    from .data import label_report

    first = None
    if record is not None:
        from ..analysis.diagnostics import missing_answers

        missing = missing_answers(record.calls)

        def first(c):
            if missing.headline:
                c.print(Text("caution: ", style="bold red") + Text(missing.headline))
            print_missing_answers(missing, c)
    classes = record.meta.get("labels") if record is not None else None  # a run's own label set, in order
    checked = None
    if gold is not None:
        from ..gold import gold_label_analysis

        path, column, probability = gold

        def checked(known):
            return gold_label_analysis(data.frame, _read_small_table(Path(path)), classes=known, level=level,
                                       source=path, probability=probability, gold_column=column)
    label_report(data, classes=json.loads(classes) if classes else None, facets=facets, nest=nest,
                 replicate=replicate, fixed=fixed, level=level, json_out=json_out, first=first, gold=checked,
                 gold_plan=gold_plan)


def _components_on_engine(data, score, facets, nest, fixed, object_, terms, max_order, method, formula,
                          drop_missing, n_boot, by, glmm, keep, json_out, read, *, engine: str,
                          master: str, replicate: str | None = None) -> None:
    """`components --engine duckdb|spark`: the rows reduced to cells over the files, REML on the cells."""
    unsupported = [name for name, value in (("--formula", formula), ("--bootstrap", n_boot), ("--by", by),
                                            ("--glmm", glmm), ("--keep", keep), ("--method anova", method == "anova"))
                   if value]
    unsupported += [f"--{k.removeprefix('col_')}" for k, v in read.items() if v and k.startswith("col_")]
    if unsupported:
        raise EvalGaugeError(f"--engine {engine} fits REML on the cells alone; {', '.join(unsupported)} need(s) the "
                             "rows: use --engine pandas.")
    _scan_line(data)
    fitted = fit(data, engine=engine, spark_master=master, drop_missing=drop_missing, score=score, facets=facets,
                 nest=nest, fixed=fixed, object=object_, terms=terms, max_order=max_order, replicate=replicate,
                 sep=read.get("sep"), encoding=read.get("encoding"), progress=_fit_progress())
    from ..analysis.gstudy import summarize_components
    from ..inference import cells_bounds

    info = fitted.engine
    summary = summarize_components(fitted.components, cells_bounds(fitted.cells))
    payload = summary.to_dict()
    payload["engine"] = info
    _emit(payload, json_out, lambda c: (print_components(summary, c), c.print(
        f"engine: {engine} reduced {info['rows']:,} judgments in {info['files']} file(s) to {info['cells']:,} cells"
        + (f"; {info['empty_dropped']} empty score(s) dropped" if info["empty_dropped"] else "") + ".")))


@main.command()
@click.argument("data", type=click.Path(path_type=str))
@design_options
@click.option("--drop-missing", is_flag=True, help="Drop rows whose score is empty first (and say how many).")
@engine_options
@read_options
@user_errors
def balance(data, score, facets, nest, replicate, fixed, object_, terms, max_order, drop_missing, engine,
            spark_master, **read) -> None:
    """Report whether DATA is a complete balanced block, and which cells are missing.

    \b
    Example:
      evalgauge balance judgments.csv --drop-missing     # exit 0: balanced; 3: not
      evalgauge balance judgments/ --engine duckdb       # from the cells DuckDB counts over the files
    """
    source = data
    chosen = _engine_for(engine, data, "need" if any(v for k, v in read.items() if k.startswith("col_")) else "no")
    if chosen:
        report, design = _balance_on_engine(data, score, facets, nest, replicate, fixed, object_, terms, max_order,
                                            drop_missing, chosen, spark_master, read)
    else:
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


def _balance_on_engine(data, score, facets, nest, replicate, fixed, object_, terms, max_order, drop_missing, engine,
                       master, read):
    """`balance --engine duckdb|spark`: the report from the cells' counts, the rows never in Python."""
    from ..design import balance_of_cells
    from ..estimate import cells_design
    from ..io.engine import reduce_cells

    renamed = [f"--{k.removeprefix('col_')}" for k, v in read.items() if v and k.startswith("col_")]
    if renamed:
        raise EvalGaugeError(f"--engine {engine} reads the columns by their names; {', '.join(renamed)} need(s) the "
                             "rows: use --engine pandas.")
    _scan_line(data)
    name = score or "score"
    cells, _ = reduce_cells(data, score=name, drop_missing=drop_missing, engine=engine, master=master,
                            replicate=replicate, sep=read.get("sep"), encoding=read.get("encoding"),
                            facets=[f.strip() for f in facets.split(",") if f.strip()] if facets else None)
    design = cells_design(cells, score=name, facets=facets, nest=nest, fixed=fixed, object=object_, terms=terms,
                          max_order=max_order)
    return balance_of_cells(cells, design), design


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
@click.option("--replicate-price", "replicate_prices", multiple=True, metavar="JUDGE=USD",
              help="Price of each replicate after a cell's first call, when the provider's prompt cache makes it "
                   "cheaper (as --price: per judge, or one USD for every judge).")
@click.option("--best-of", type=click.IntRange(min=1), help="Best-of-K gaming surface at the observed design.")
@click.option("--base-rate", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              help="Win rate for the gaming surface in Elo points (between 0 and 1).")
@click.option("--ceiling-facet", default="judge", show_default=True, help="The facet held at one for the ceiling.")
@click.option("--separation", type=click.FloatRange(0, min_open=True),
              help="True difference between two objects: P(rank inversion) per design.")
@click.option("--vary", help="With --budget: the facets the optimiser varies besides items and replicates, "
                             "comma-separated (default: every random facet but the items and the systems; '' for "
                             "none).")
@click.option("--max", "limits", multiple=True, metavar="FACET=N",
              help="With --budget: the most levels of a facet there are, e.g. --max item=200 (a pool; repeatable; "
                   "replicates=N caps the replicates).")
@click.option("--nest", help="With --component: nesting as parent/child, comma-separated (e.g. category/item).")
@click.option("--fixed", help="With --component: fixed facets, comma-separated (their terms are Tier 2 sensitivity "
                               "indices, TEE Table 2).")
@click.option("--gold", "gold_json", type=click.Path(dir_okay=False, path_type=str), metavar="ANALYSIS.json",
              help="Price gold labels against judge calls instead: from the gold slice in `evalgauge analyze DATA "
                   "--gold GOLD.csv --json ANALYSIS.json`, the best mix of gold labels, judges, prompt variants, "
                   "replicates and units at --budget, or the cheapest for --target-se (needs --gold-cost and "
                   "--call-cost; --n judge=/variant=/rep= set the panels tried, --max item=N the units there are).")
@click.option("--gold-cost", type=click.FloatRange(0, min_open=True), metavar="USD",
              help="With --gold: the price of one gold label.")
@click.option("--call-cost", type=click.FloatRange(0, min_open=True), metavar="USD",
              help="With --gold: the price of one judge call.")
@projection_options
@json_option("the plan")
@user_errors
@writes(("components_json", "gold_json"), json_out="--json")
def plan(components_json, given, object_, grid, target_erho2, target_mdd, target_se, budget, prices,
         replicate_prices, best_of,
         base_rate, ceiling_facet, separation, vary, limits, nest, fixed, gold_json, gold_cost, call_cost, sampling,
         estimand, json_out) -> None:
    """The D-study calculator: SE, E rho^2, Phi, MDD, ceiling, requirements and budget for proposed designs.

    COMPONENTS.json is the output of `evalgauge components --json` or `evalgauge analyze --json`, or a minimal
    {"object": "system", "components": {"system": 0.08, "residual": 0.2, ...}, "levels": {...}}.

    \b
    Examples:
      evalgauge plan components.json --n item=30,500 --n judge=1,2,4 --target-erho2 0.8
      evalgauge plan --component system=0.0801 --component system:judge=0.0011 --component system:item=0.3 \\
          --component residual=0.2 --object system --n item=500 --n judge=1,3 --n system=2
      evalgauge plan --gold analysis.json --budget 100 --gold-cost 1 --call-cost 0.002
    """
    from ..dstudy import plan as make_plan

    if gold_json is not None or gold_cost is not None or call_cost is not None:
        others = [name for name, value in (("COMPONENTS.json", components_json), ("--component", given),
                                           ("--target-erho2", target_erho2), ("--target-mdd", target_mdd),
                                           ("--price", prices), ("--replicate-price", replicate_prices),
                                           ("--vary", vary)) if value]
        if gold_json is None or others:
            raise click.UsageError("--gold plans gold labels against judge calls from an analysis with a gold slice; "
                                   + ("give --gold ANALYSIS.json." if gold_json is None else
                                      f"{', '.join(others)} belong(s) to the D-study, not to it."))
        _gold_plan(gold_json, grid, limits, budget, target_se, gold_cost, call_cost, json_out)
        return

    vc = _plan_components(components_json, given, object_, nest, fixed,
                          {g.partition("=")[0].strip() for g in grid})
    counts = {}
    for item in grid:
        key, _, values = item.partition("=")
        if not values:
            raise click.BadParameter(f"'{item}' should read FACET=n1,n2,...", param_hint="--n")
        counts[key.strip()] = _int_list(values, "--n")
    vc = _fill_levels(vc, counts).with_sampling(sampling).with_estimand(estimand)
    obj = object_ or vc.object
    if ceiling_facet not in vc.levels or ceiling_facet == obj:
        choices = ", ".join(f for f in vc.levels if f != obj)
        if ceiling_facet != "judge" or "judge" in vc.levels:
            raise click.BadParameter(f"'{ceiling_facet}' is not a facet of these components other than the object "
                                     f"(facets: {choices}).", param_hint="--ceiling-facet")
    price_map, repeat_map = _prices(prices, "--price"), _prices(replicate_prices, "--replicate-price")
    if repeat_map and set(repeat_map) != set(price_map):
        raise click.BadParameter("give a later replicate's price for each judge --price names (or one USD for "
                                 "every judge with both).", param_hint="--replicate-price")
    if budget is not None and not price_map:
        raise click.BadParameter("a budget needs prices: add --price USD (per call) or --price JUDGE=USD.",
                                 param_hint="--budget")
    if (vary is not None or limits) and budget is None:
        raise click.BadParameter("--vary and --max shape the budget optimiser: add --budget (and --price).",
                                 param_hint="--vary/--max")
    caps = {}
    for item in limits:
        key, _, value = item.partition("=")
        try:
            caps[key.strip()] = int(value)
        except ValueError:
            caps[key.strip()] = 0
        if caps[key.strip()] < 1 or not key.strip():
            raise click.BadParameter(f"'{item}' should read FACET=N with N a whole number of at least 1.",
                                     param_hint="--max")
    out = make_plan(vc, counts, object=object_, target_erho2=target_erho2, target_mdd=target_mdd,
                    target_se=target_se, budget=budget, prices=price_map or None, best_of=best_of,
                    base_rate=base_rate, ceiling_facet=ceiling_facet, separation=separation,
                    vary=[f.strip() for f in vary.split(",") if f.strip()] if vary is not None else None,
                    limits=caps or None, replicate_prices=repeat_map or None)
    _emit(out.to_dict(), json_out, lambda c: print_plan(out, c))


def _gold_plan(path, grid, limits, budget, target_se, gold_cost, call_cost, json_out) -> None:
    """`plan --gold`: gold labels priced against judge calls from an analysis's gold slice."""
    from ..gold import plan_from
    from ..report.terminal import print_gold_plan

    if (budget is None) == (target_se is None) or gold_cost is None or call_cost is None:
        raise click.UsageError("--gold plans for a budget or for an SE: give --budget USD or --target-se SE, with "
                               "--gold-cost USD (one gold label) and --call-cost USD (one judge call).")
    try:
        loaded = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EvalGaugeError(f"{path}: not a JSON file ({exc}).") from None
    panel = loaded.get("gold", {}).get("panel") if isinstance(loaded.get("gold"), dict) else loaded.get("panel")
    if not isinstance(panel, dict):
        has_gold = isinstance(loaded, dict) and "gold" in loaded
        raise EvalGaugeError(f"{path}: " + ("its gold slice is too small to plan from (fewer than three gold units, "
                                            "or no error components)." if has_gold else
                                            "no gold slice to plan from; write one with `evalgauge analyze DATA "
                                            f"--gold GOLD.csv --json {path}`."))
    grids = {}
    names = {"judge": "judges", "variant": "variants", "rep": "replicates", "replicate": "replicates",
             "replicates": "replicates"}
    for item in grid:
        key, _, values = item.partition("=")
        if key.strip() not in names or not values:
            raise click.BadParameter(f"'{item}': with --gold, --n sets the panels tried (judge=, variant=, rep=).",
                                     param_hint="--n")
        counts = _int_list(values, "--n")
        if not counts or min(counts) < 1:
            raise click.BadParameter(f"'{item}': counts are whole numbers of at least 1.", param_hint="--n")
        grids[names[key.strip()]] = tuple(counts)
    caps = {}
    for item in limits:
        key, _, value = item.partition("=")
        if key.strip() != "item" or not value.strip().isdigit() or int(value) < 1:
            raise click.BadParameter(f"'{item}': with --gold, --max item=N caps the units (gold and predicted).",
                                     param_hint="--max")
        caps["n_max"] = int(value)
    inputs = {**panel, **caps}
    plans = plan_from(panel, cost_gold=gold_cost, cost_call=call_cost, budget=budget, target_se=target_se,
                      **caps, **grids)
    payload = {"gold_plan": {"source": path, "budget": budget, "target_se": target_se, "gold_cost": gold_cost,
                             "call_cost": call_cost, "units": inputs.get("n_max"),
                             "plans": plans.to_dict(orient="records")}}
    _emit(payload, json_out, lambda c: print_gold_plan(plans, c, budget, target_se))


def _plan_components(components_json, given, object_, nest=None, fixed=None, counted=frozenset()):
    """The components to plan from: a JSON file, or values on the command line (--component, with --nest and
    --fixed saying how its facets relate)."""
    from ..components import VarianceComponents

    if components_json and given:
        raise click.UsageError("give COMPONENTS.json or --component values, not both.")
    if (nest or fixed) and not given:
        raise click.UsageError("--nest and --fixed describe --component values; a components file carries its own "
                               "nesting and fixed facets.")
    if given:
        values = _name_values(given, "--component", "VARIANCE")
        named = list(dict.fromkeys(f for name in values if name != "residual" for f in name.split(":")))
        # a facet counted with --n but in no component (a temperature whose terms are zero) still divides the
        # residual: it is a facet of the design
        facets = named + sorted(f for f in set(counted) - set(named) if f not in vocabulary.REPLICATE_ALIASES)
        nesting = {}
        for pair in (nest or "").split(","):
            if not pair.strip():
                continue
            parent, sep, child = (p.strip() for p in pair.partition("/"))
            if not sep or not parent or not child:
                raise click.BadParameter(f"'{pair}' should read parent/child, e.g. category/item.", param_hint="--nest")
            strangers = sorted({parent, child} - set(facets))
            if strangers:
                raise click.BadParameter(f"'{pair}': {', '.join(strangers)} is not a facet of the components "
                                         f"({', '.join(facets)}).", param_hint="--nest")
            nesting[child] = parent
        fixed_facets = [f.strip() for f in (fixed or "").split(",") if f.strip()]
        unknown = [f for f in fixed_facets if f not in facets]
        if unknown:
            raise click.BadParameter(f"{', '.join(unknown)} is not a facet of the components "
                                     f"({', '.join(facets)}).", param_hint="--fixed")
        return VarianceComponents.from_dict({"object": object_, "components": _nested_names(values, nesting),
                                             "levels": dict.fromkeys(facets, 0), "nesting": nesting,
                                             "fixed": fixed_facets}, "--component")
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


def _nested_names(values: dict, nesting: dict) -> dict:
    """Component names as the fits write them when facets are nested: a term holding a child holds its parent
    too (item nested in category: ``item:judge`` is ``category:item:judge``), in the order of the parent first."""
    out = {}
    for name, value in values.items():
        if name == "residual":
            out[name] = value
            continue
        facets = name.split(":")
        for child in list(facets):
            parent = nesting.get(child)
            while parent and parent not in facets:
                facets.insert(facets.index(child), parent)
                child, parent = parent, nesting.get(parent)
        out[":".join(facets)] = out.get(":".join(facets), 0.0) + value
    return out


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


@main.command()
@click.argument("data", type=click.Path(path_type=str))
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
@click.option("--gold", "gold_path", type=click.Path(dir_okay=False, path_type=str),
              help="Gold scores of a slice of the units: a CSV, TSV, JSONL or Parquet file with the units' key "
                   "columns (item, and the system when there are several) and a 'gold' column, optionally "
                   "'probability' (each unit's chance of having been chosen). Adds every configuration's agreement "
                   "with the gold, the error the judges share, and the means corrected by the gold (PPI++, DSL) "
                   "beside the judges-only and gold-only ones.")
@click.option("--gold-column", default="gold", show_default=True, help="The gold file's column of gold scores.")
@click.option("--gold-probability", type=click.FloatRange(0, 1, min_open=True), default=None,
              help="Each unit's chance of having been chosen for gold (a uniform sample; default: the gold share "
                   "of the units).")
@click.option("--gold-budget", type=click.FloatRange(0, min_open=True), default=None, metavar="USD",
              help="With --gold: price gold labels against judge calls at this budget (the best mix of gold labels, "
                   "judges and replicates per unit, and units; needs --gold-cost and --call-cost).")
@click.option("--gold-target-se", type=click.FloatRange(0, min_open=True), default=None, metavar="SE",
              help="With --gold: the cheapest mix of gold labels, judges and calls per unit, and units that gives the "
                   "mean this SE (needs --gold-cost and --call-cost).")
@click.option("--gold-cost", type=click.FloatRange(0, min_open=True), default=None, metavar="USD",
              help="The price of one gold label (for --gold-budget).")
@click.option("--call-cost", type=click.FloatRange(0, min_open=True), default=None, metavar="USD",
              help="The price of one judge call (for --gold-budget).")
@click.option("--gold-export", type=click.Path(dir_okay=False, path_type=str), default=None, metavar="FILE.csv",
              help="With --gold: write one row per unit (its keys, the design's aggregate 'prediction', 'gold' empty "
                   "where there is none, 'labeled' 0/1 and 'sample_prob'), the layout DSL's R package and ppi_py "
                   "take for a regression on the LLM labels.")
@projection_options
@json_option("everything")
@read_options
@user_errors
@writes(("data", "gold_path"), report_path="--report", json_out="--json", gold_export="--gold-export")
def analyze(data, score, facets, nest, replicate, fixed, object_, terms, max_order, method, formula, drop_missing,
            target_erho2, n_boot, level, seed, keep, by, glmm, assumed, ddf, report_path, gold_path, gold_column,
            gold_probability, gold_budget, gold_target_se, gold_cost, call_cost, gold_export, sampling, estimand,
            json_out, **read) -> None:
    """Analyse DATA (CSV, TSV, Parquet, JSONL or a run database): components, honest CI, what to change.

    \b
    Examples:
      evalgauge analyze judgments.csv --report report.html
      evalgauge analyze run.sqlite --json analysis.json
      evalgauge analyze wide_made_long.csv --system exam_model --item question_id --drop-missing
    """
    from ..api import analyze as run_analysis

    if gold_export and gold_path is None:
        raise click.UsageError("--gold-export writes the gold slice's units: give --gold FILE with it.")
    if gold_budget is not None and gold_target_se is not None:
        raise click.UsageError("--gold-budget or --gold-target-se: a plan is for a budget or for an SE, not both.")
    goal = "--gold-budget" if gold_budget is not None else "--gold-target-se" if gold_target_se is not None else None
    if goal and (gold_path is None or gold_cost is None or call_cost is None):
        raise click.UsageError(f"{goal} plans from a gold slice: give --gold FILE, --gold-cost USD (one gold label) "
                               "and --call-cost USD (one judge call) with it.")
    _check_supported(data)
    data, record = _load(data, keep=keep, **read)
    record = _with_recorded_design(record)
    if "label" in data.frame and (score or "score") not in data.frame:  # classes: shares, never a mean
        if gold_export:
            raise click.UsageError("--gold-export writes scored units; with labels --gold gives each class's "
                                   "corrected share and each configuration's agreement.")
        plan = {"cost_gold": gold_cost, "cost_call": call_cost, "budget": gold_budget,
                "target_se": gold_target_se} if goal else None
        _analyze_labels(data, record, facets, nest, replicate, fixed, level, json_out,
                        (gold_path, gold_column, gold_probability) if gold_path else None, plan)
        return
    pairwise_rows = {"model_a", "model_b", "winner"} <= set(data.frame.columns)
    if gold_path and pairwise_rows:  # said before the analysis, not after it
        raise EvalGaugeError("--gold: a pairwise log's verdicts are preferences between two responses; gold scores "
                             "apply to scored units (item, or system and item).")
    model = None if pairwise_rows else _model(data, formula, score, facets, nest, replicate, fixed, object_, terms,
                                              max_order)
    stated = _name_values(assumed, "--assume", "VARIANCE") if assumed else None
    if not pairwise_rows and _show_single_run(data, model, formula, level, stated, json_out):
        return
    result = run_analysis(data, model, run=record, method=method, drop_missing=drop_missing or None,
                          target_erho2=target_erho2, n_boot=n_boot, level=level, seed=seed, progress=_fit_progress(),
                          assumed=stated, ddf=ddf, sampling=sampling, estimand=estimand)
    payload = result.to_dict()
    extra = []
    if by is None and model is not None and model.design is not None:  # different measures: each on its own too
        by = next((f.name for f in model.design.facets
                   if f.role == "fixed" and f.name.lower() in vocabulary.CONSTRUCT_NAMES), None)
    if by and not pairwise_rows:  # the strata without a bootstrap, beside the analysis's own fit
        strata = result.fit.strata(by, n_boot=0, level=0.95, seed=None)
        payload["by_stratum"] = strata.to_dict()
        extra.append(lambda c: print_strata(strata, c))
    from ..analysis.gstudy import summarize_components

    if glmm and not pairwise_rows:
        check = result.fit.glmm()
        payload["glmm"] = check.to_dict()
        extra.append(lambda c: print_glmm(check, summarize_components(check.lpm), c))
    gold = None
    if gold_path:
        gold = _gold(data, gold_path, score or "score", result.components.object, level=level, column=gold_column,
                     probability=gold_probability)
        payload["gold"] = gold.to_dict()
        plans = None
        if goal:
            plans = gold.plan(cost_gold=gold_cost, cost_call=call_cost, budget=gold_budget, target_se=gold_target_se)
            payload["gold"]["plan"] = {"budget": gold_budget, "target_se": gold_target_se, "gold_cost": gold_cost,
                                       "call_cost": call_cost, "plans": plans.to_dict(orient="records")}
        extra.append(lambda c: print_gold(gold, c, plans, gold_budget, gold_target_se))
        if gold_export:
            from ..outputs import atomic_write_text, csv_safe_frame

            atomic_write_text(gold_export, csv_safe_frame(gold.export()).to_csv(index=False))
            extra.append(lambda c: c.print(f"Gold units written to {Path(gold_export).resolve()} (DSL's and ppi_py's "
                                           "layout)."))

    def show(c):
        print_analysis(result, summarize_components(result.components, result.bounds), c)
        for section in extra:
            section(c)
        if report_path:
            c.print(f"Report written to {Path(report_path).resolve()}")

    if report_path:  # the report's module brings matplotlib: imported only when a report is asked for
        from ..report.html import write_report

        write_report(result, report_path, gold)
    _emit(payload, json_out, show)


@main.command()
@click.argument("data", type=click.Path(path_type=str))
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
@click.option("--estimand", type=click.Choice(vocabulary.ESTIMANDS), default=None,
              help="What each system's score is of: domain (the population the items were drawn from; the default) "
                   "or finite (the benchmark's own items, TEE C.2: the system x item effects are part of each "
                   "score, not error).")
@json_option("the comparison")
@read_options
@user_errors
@writes(("data",), json_out="--json")
def compare(data, score, facets, nest, replicate, fixed, object_, terms, max_order, method, drop_missing, level,
            n_boot, seed, pair_gstudies, assumed, keep, ddf, estimand, json_out, **read) -> None:
    """Which system is better: a leaderboard with rank sets, every pair's difference with marginal and
    simultaneous intervals, Holm p-values, separable groups, and what would separate neighbours.

    \b
    Examples:
      evalgauge compare judgments.csv
      evalgauge compare examples/alpacaeval/alpacaeval_5x805x2.csv --drop-missing --json -
      evalgauge compare one_judge.csv --assume system:judge=0.01
      evalgauge compare judgments.csv --estimand finite     # these items are the benchmark
    """
    judgments, _ = _load(data, keep=keep, **read)
    design = _design(judgments, score, facets, nest, replicate, fixed, object_, terms, max_order)
    stated = _name_values(assumed, "--assume", "VARIANCE") if assumed else None
    if _show_single_run(judgments, design, None, level, stated, json_out):
        return
    if not design.object:
        raise EvalGaugeError(f"{data}: no object of measurement to compare; name it with --object (e.g. system).")
    fitted = fit(judgments, design=design, method=method, drop_missing=drop_missing, progress=_fit_progress())
    _refuse_unusable(fitted.components)
    result = fitted.compare(level=level, n_boot=n_boot, seed=seed, assume=stated, ddf=ddf, pair_gstudies=pair_gstudies,
                            estimand=estimand)
    payload = result.to_dict()

    def show(c):
        print_comparison(result, c)

    _emit(payload, json_out, show)


def _gold(data, path: str, score: str, object_facet, *, level: float, column: str, probability):
    """`analyze --gold`: the gold slice read and analysed (:func:`evalgauge.gold.gold_analysis`)."""
    from ..gold import gold_analysis

    return gold_analysis(data.frame, _read_small_table(Path(path)), score=score, object_facet=object_facet,
                         level=level, source=path, probability=probability, gold_column=column)


def _with_recorded_design(record):
    """A run database written before runs recorded their design (variants, system prompt, judges, scale) gets it
    from its configuration file, where that file still is; a note says why when it cannot be read. The command
    line does this, not the reader: reading judgments never opens a TOML file or needs the collector."""
    if record is None or record.meta.get("design") or not record.meta.get("config"):
        return record
    config = record.meta["config"]
    if not Path(config).exists():
        return record
    try:
        from ..collect.config import load_config
        from ..collect.runner import run_design, run_scale

        cfg = load_config(config)
    except ImportError:
        return record.with_design(note=f"the run's configuration ({config}) needs the collector to be read (pip "
                                       "install 'evalgauge[collect]'); the report leaves out its variants' templates "
                                       "and judges.")
    except (OSError, EvalGaugeError) as exc:
        return record.with_design(note=f"the run's configuration ({config}) could not be read ({exc}); the report "
                                       "leaves out its variants' templates and judges.")
    design = run_design(cfg)
    scale = run_scale(cfg) if record.meta.get("scale") is None else None  # written before the run recorded it
    if scale is not None:
        design["scale"] = f"{scale[0]:g},{scale[1]:g}"
    return record.with_design(design)


def _show_single_run(data, design, formula, level: float, assumed: dict | None, json_out) -> bool:
    """One model's run (only the items vary, one call each): its honest interval and what it cannot measure;
    False when the data hold more than one run."""
    from ..api import single_run

    result = single_run(data, design, level=level, assumed=assumed, formula=formula)
    if result is None:
        return False

    _emit(result.to_dict(), json_out, lambda c: print_single_run(result, c))
    return True


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
@json_option("the audit")
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
    from ..audit import audit
    from ..audit.published import preset as get_preset

    sources = sum(bool(x) for x in (preset, components_json, given))
    if sources != 1:
        raise click.UsageError("give exactly one source of components: --preset, --components or --component.")
    chosen = get_preset(preset) if preset else None
    if table is None:
        if chosen is None:
            raise click.UsageError("give a TABLE to audit (or --preset NAME alone to see a preset).")
        _emit(chosen.to_dict(), json_out, lambda c: print_preset(chosen, c))
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
    _emit(result.to_dict(), json_out, lambda c: print_audit(result, c))


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
    from ..io.files import read_table

    if not path.exists():
        raise EvalGaugeError(f"{path}: no such file.")
    suffix = path.suffix.lower().lstrip(".")
    kind = {"tsv": "tsv", "jsonl": "jsonl", "parquet": "parquet"}.get(suffix, "csv")
    return read_table(path, kind)


def _prices(given: tuple[str, ...], option: str) -> dict[str, float]:
    """JUDGE=USD (or one USD for every judge) per call, as --price and --replicate-price take them."""
    out = {}
    for item in given:
        key, sep, value = item.partition("=")
        try:
            price = float(value if sep else key)
        except ValueError:
            raise click.BadParameter(f"'{item}' should read JUDGE=USD or USD", param_hint=option) from None
        if not np.isfinite(price) or price < 0:
            raise click.BadParameter(f"'{item}': a price is a non-negative number of USD per call.",
                                     param_hint=option)
        out[key.strip() if sep else "*"] = price
    return out
