"""Terminal renderers: every result as rich tables and sentences (the command line only parses and calls these)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..results import json_safe
from ..vocabulary import MIN_DF
from .text import (
    ceiling_sentence,
    convention_sentence,
    disagreed_sentence,
    effects_rows,
    object_score_sentence,
    theta_of_objects_sentence,
    theta_sentence,
    tier_sentence,
)

if TYPE_CHECKING:
    from ..analysis.diagnostics import MissingAnswers
    from ..analysis.gstudy import Analysis, ComponentsSummary, EffectsSummary
    from ..analysis.pairwise import PairwiseAnalysis
    from ..audit import Audit
    from ..audit.published import Preset
    from ..collect.adaptive import AdaptivePlan
    from ..collect.runner import RunPlan
    from ..dstudy import Plan


class _TextConsole:
    """The caller's console, printing everything as text: a system, judge, claim or facet named like
    "model [beta]" is data, never rich markup. The command line's console has markup off; a Python caller's
    own console may have it on, and a table's cells and title would lose what looks like a style tag."""

    __slots__ = ("console",)

    def __init__(self, console: Console) -> None:
        self.console = console

    def print(self, *objects, **kw) -> None:
        kw.setdefault("markup", False)
        self.console.print(*objects, **kw)

    def __getattr__(self, name: str):
        return getattr(self.console, name)


def as_text(console: Console) -> Console:
    """``console`` printing text as text (see :class:`_TextConsole`); every renderer starts with it."""
    return console if isinstance(console, _TextConsole) else _TextConsole(console)  # type: ignore[return-value]


def new_table(title: str | None = None, **kw) -> Table:
    """A rich table whose title is text, not markup (a title naming a facet or a system keeps its brackets)."""
    return Table(title=None if title is None else Text(title, style="table.title"), **kw)


def print_plan(plan: Plan, console: Console) -> None:
    """The D-study: one row per design, the conventions, ceiling, requirements, exchange, interventions, the
    budget's design and the gaming surface (what :class:`evalgauge.dstudy.Plan` holds)."""
    console = as_text(console)
    rows = plan.designs.to_dict(orient="records")
    table = new_table(title=f"D-study (object of measurement: {plan.object or 'none'})")
    keys = [k for k in rows[0] if k.startswith("n_")] + ["replicates"]
    metrics = ["se", "var_abs", "sigma2_delta", "erho2", "phi", "mdd95"]
    metrics += [k for k in ("p_inversion", "cost", "pareto") if k in rows[0]]
    for k in keys + metrics:
        table.add_column(k, justify="right")
    for r in rows:
        table.add_row(*[f"{r[k]:g}" for k in keys],
                      *[str(r[k]) if isinstance(r.get(k), bool) else number(r.get(k), ".4g") for k in metrics])
    console.print(table)
    convention = convention_sentence(plan.conventions)
    if convention:
        console.print(convention)
    if plan.conventions.get("sensitivity"):
        console.print("Tier 2 sensitivity indices (TEE C.4; beside the error, in none of it): " + "; ".join(
            f"{name} {max(value, 0.0):.4g}" for name, value in plan.conventions["sensitivity"].items()) + ".")
    if plan.ceiling is not None:
        console.print(f"Single-{plan.ceiling.facet} ceiling (items -> infinity): E rho^2 = {plan.ceiling.erho2:.4g}; "
                      f"MDD floor = {plan.ceiling.mdd95:.4g} (sizing eq. 4).")
    for req in plan.requirements:
        console.print(f"{req.quantity} target {req.target:g}: {req}.")
    if plan.exchange is not None:
        e = plan.exchange
        items = e["items_at_one_judge"] if e["reachable_at_one_judge"] else "no item count"
        console.print(f"Exchange at E rho^2 = {e['target']:g}: {e['judges_at_observed_items']} judge(s) at the "
                      f"observed items, or {items} at one judge.")
    inter = new_table(title="Single-factor interventions (% change)")
    for col in ("intervention", "Var(theta-hat)", "sigma2_delta"):
        inter.add_column(col, justify="left" if col == "intervention" else "right")
    for r in plan.interventions.to_dict(orient="records"):
        inter.add_row(r["intervention"], number(r["pct_change_var_abs"], "+.1f"), number(r["pct_change_sigma2_delta"],
                                                                                   "+.1f"))
    console.print(inter)
    if plan.budget is not None:
        b = plan.budget
        console.print(f"Best design within {b.budget:g}: {b.counts} x {b.replicates:g} replicate(s), "
                      f"cost {b.cost:.4g}, objective {b.objective:.4g}.")
        if b.priced:
            console.print(f"  {b.priced}.")
    if plan.gaming is not None:
        g = plan.gaming
        elo = f" = {g['inflation_elo']:.1f} Elo" if "inflation_elo" in g else ""
        console.print(f"Best-of-{g['k']} gaming surface: {g['inflation']:.4g}{elo} "
                      f"(E[max of {g['k']} normals] x sigma_pipeline {g['sigma_pipeline']:.4g}; TEE 4.4).")


#: rows of the missing-answers table shown in the terminal (all of them are in --json and the report)
MISSING_ROWS = 30


def print_missing_answers(missing: MissingAnswers, c: Console) -> None:
    """The calls without a score by judge x variant x system, the worst first, and the test by system."""
    c = as_text(c)
    from ..analysis.checklist import missing_sentence

    if not missing.unscored:
        c.print(f"Calls without a score: none of the {missing.calls} stored calls (0 unread, 0 cut at max_tokens).")
        return
    table_rows = missing.table.to_dict(orient="records")
    rows = sorted((r for r in table_rows if r["calls"] > r["scored"]), key=lambda r: -r["rate"])
    keys = [k for k in ("judge", "variant", "system") if rows and k in rows[0]]
    shown = rows[:MISSING_ROWS]
    more = f"; the first {len(shown)} of {len(rows)}, all in --json and the report" if len(rows) > len(shown) else ""
    table = new_table(title=f"Calls without a score, by {' x '.join(keys)} (worst first{more})")
    for col in (*keys, "calls", "scored", "unread", "cut at max_tokens", "unscored"):
        table.add_column(col, justify="left" if col in keys else "right")
    for r in shown:
        table.add_row(*(str(r[k]) for k in keys), str(r["calls"]), str(r["scored"]), str(r["unread"]),
                      str(r["truncated"]), f"{100 * r['rate']:.1f}%")
    c.print(table)
    c.print(missing_sentence(missing.to_dict()) + ".")


#: boards larger than this show their adjacent pairs in the terminal (every pair is in --json and the report)
ADJACENT_ONLY_ABOVE = 10


def letter_column(groups: list[str]) -> tuple[list[str], str | None]:
    """The group letters, or blanks and the reason when some system carries more letters than a reader can use."""
    from ..display import letters_note

    why = letters_note(groups)
    return (groups, None) if why is None else (["" for _ in groups], why)


def print_comparison(result, console: Console, limit: int = 40) -> None:
    """The leaderboard with rank sets, the pair table, and one sentence per adjacent pair."""
    console = as_text(console)
    obj, pct = result.object, f"{100 * result.level:g}%"
    for text in result.extra.get("confounded", []):  # first: pairs the data cannot compare at all
        console.print(Text("not comparable: ", style="bold red") + Text(text))
    for text in result.extra.get("unmeasured", []):  # then what the intervals leave out
        console.print(Text("note: ", style="bold yellow") + Text(text))
    t = new_table(title=f"{obj} leaderboard ({pct}; rank sets: marginal, simultaneous; groups share a letter when "
                        "the design cannot tell them apart)")
    for col in ("rank", obj, "mean", "SE", "interval", "naive", "rank set", "simultaneous", "group"):
        t.add_column(col, justify="left" if col in (obj, "group") else "right")
    shown = result.systems.head(limit).to_dict(orient="records")
    letters, why = letter_column([r["group"] for r in result.systems.to_dict(orient="records")])
    for r, group in zip(shown, letters, strict=False):
        naive = f"[{number(r['naive_low'], '.4g')}, {number(r['naive_high'], '.4g')}]"
        t.add_row(str(r["rank"]), Text(str(r["object"])), f"{r['mean']:.4g}", f"{r['se']:.3g}",
                  interval_text(r["low"], r["high"], ".4g"), naive, f"{r['rank_low']}-{r['rank_high']}",
                  f"{r['rank_low_simultaneous']}-{r['rank_high_simultaneous']}", group)
    captions = [why] if why else []
    if len(result.systems) > limit:
        captions.append(f"the first {limit} of {len(result.systems)} by rank; all of them in --json and the report")
    if captions:
        t.caption = "; ".join(captions)
    console.print(t)
    p = new_table(title=f"Pairs (difference a - b; simultaneous intervals hold for all {len(result.pairs)} pairs at "
                        f"once, critical value {result.critical_simultaneous:.4g}{critical_error_text(result)})")
    for col in ("a", "b", "diff", "SE", "df", "interval", "simultaneous", "p (Holm)", "naive", "separable"):
        p.add_column(col, justify="left" if col in ("a", "b") else "right")
    shown = result.pairs
    if len(result.systems) > ADJACENT_ONLY_ABOVE and "adjacent" in shown:  # a large board: neighbours first
        shown = shown[shown["adjacent"].fillna(False).astype(bool)]
        p.title = (f"Adjacent pairs (neighbours in the ranking; difference a - b; simultaneous intervals hold for all "
                   f"{len(result.pairs):,} pairs at once, critical value {result.critical_simultaneous:.4g}"
                   f"{critical_error_text(result)})")
    for r in shown.head(limit).to_dict(orient="records"):
        p.add_row(Text(str(r["a"])), Text(str(r["b"])), f"{r['diff']:.4g}", f"{r['se']:.3g}", number(r["df"], ".1f"),
                  interval_text(r["low"], r["high"], ".3g", r.get("comparable", True)),
                  interval_text(r["low_simultaneous"], r["high_simultaneous"], ".3g", r.get("comparable", True)),
                  number(r["p_holm"], ".3g"), f"[{number(r['naive_low'], '.3g')}, {number(r['naive_high'], '.3g')}]",
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
    console = as_text(console)
    obj, pct = interval.object, f"{100 * interval.level:g}%"
    table = new_table(title=f"{obj} scores ({pct} intervals at the observed design)")
    for col in (obj, "mean", "n", "full CI", f"naive CI ({interval.sampling_facet} only)"):
        table.add_column(col, justify="left" if col == obj else "right")
    for r in scores.head(limit).to_dict(orient="records"):
        table.add_row(Text(str(r[obj])), f"{r['mean']:.4g}", str(r["n"]), f"[{r['low']:.4g}, {r['high']:.4g}]",
                      f"[{r['naive_low']:.4g}, {r['naive_high']:.4g}]")
    console.print(table)
    if len(scores) > limit:
        console.print(f"({len(scores) - limit} more in --json and the report)")


def print_components(summary: ComponentsSummary, console: Console) -> None:
    """The components table, then theta-hat's interval, the design line and any notes."""
    console = as_text(console)
    result = summary.components
    table = new_table(title=f"Variance components ({result.method}, {result.n_obs} observations)")
    ci = result.intervals is not None
    columns = [("component", "left"), ("kind", "left"), ("variance", "right"), ("SE", "right")]
    if ci:
        columns.append((f"{100 * result.intervals['level']:g}% interval", "right"))
    columns += [("share (per obs.)", "right"), ("share of Var(theta-hat)", "right"), ("df", "right"),
                ("mean square", "right")]
    for col, justify in columns:
        table.add_column(col, justify=justify)
    for c in result.components:
        name = c.name + (f" (= {c.confounded_with} + e)" if c.confounded_with else "")
        row = [name, c.kind, f"{c.variance:.6g}", number(c.se, ".3g")]
        if ci:
            row.append("—" if c.ci_low != c.ci_low else f"[{c.ci_low:.4g}, {c.ci_high:.4g}]")
        share_theta = summary.shares.get(c.name)
        share = result.share(c.name)
        row += ["—" if share != share else f"{100 * share:.1f}%",
                "—" if share_theta is None else f"{100 * share_theta:.1f}%",
                number(c.df, "g"), number(c.mean_square, ".6g")]
        table.add_row(*row)
    console.print(table)
    said = summary.theta_unavailable
    if said and "degree(s) of freedom" in said:
        console.print(Text("theta-hat: no interval: ", style="bold yellow") + Text(said))
    if summary.theta is not None:  # the sentences the HTML report shares take the JSON's fields
        console.print(theta_sentence(summary.theta.to_dict()))
    if summary.object_score is not None:
        if summary.theta is not None:
            console.print(f"({theta_of_objects_sentence(summary.object_score.object)})")
        console.print(object_score_sentence(summary.object_score.to_dict(), MIN_DF))
    if summary.derived is not None:
        derived = new_table(title="Derived numbers with parametric-bootstrap intervals")
        for col in ("quantity", "estimate", "low", "high"):
            derived.add_column(col, justify="left" if col == "quantity" else "right")
        for r in json_safe(summary.derived.to_dict(orient="records")):
            # an infinite requirement (JSON null) means the target is out of reach in that draw
            missing = "never" if r["quantity"].endswith("_needed") else "—"
            cells = [missing if r[k] is None else number(r[k], ".4g") for k in ("estimate", "low", "high")]
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
    if result.fixed:
        console.print(tier_sentence(result.to_dict()))
    convention = convention_sentence(result.to_dict())
    if convention:
        console.print(convention)
    console.print(f"Method: {result.method_reason.rstrip('.')}.")
    if result.reml:
        r = result.reml
        console.print(f"REML criterion {r['deviance']:.6f} ({r['evaluations']} evaluations, {r['seconds']:.2f} s); "
                      f"model: {r['formula']}")
    for note in result.notes:
        console.print(Text("note: ", style="yellow") + Text(note))


def print_analysis(analysis: Analysis, summary: ComponentsSummary, c: Console) -> None:
    """What `analyze` prints: the missing answers' caution first, the leaderboard, the missing answers, the
    components (``summary``, :func:`evalgauge.analysis.gstudy.summarize_components`), the effects, the ceiling,
    the object scores, the interventions, the diagnostics' warnings and the reporting checklist."""
    c = as_text(c)
    diagnostics = analysis.diagnostics
    missing = diagnostics.missing if diagnostics is not None else None
    if missing is not None and missing.headline:  # before any mean: the means rest on different subsets
        c.print(Text("caution: ", style="bold red") + Text(missing.headline))
    if analysis.comparison is not None:  # the question systems are compared for comes first
        print_comparison(analysis.comparison, c)
    if missing is not None:
        print_missing_answers(missing, c)
    spread = diagnostics.within_call_spread if diagnostics is not None else ()
    if spread:
        c.print("Judges' within-call spread (the SD of each call's distribution over the scale, output = "
                "\"logprobs\"; the judge's own uncertainty, not counted in the components): " + ", ".join(
                    f"{r['judge']} {r['mean_spread']:.3g} (mean of {r['calls']} calls)" for r in spread) + ".")
    print_components(summary, c)
    print_effects(analysis.effects, c,
                  exclude=analysis.components.object if analysis.comparison is not None else None)
    if analysis.ceiling:
        print_ceiling(analysis, c)
    # with a comparison, the leaderboard above already gives each system its own interval
    if analysis.object_interval is not None and analysis.comparison is None:
        print_object_scores(analysis.object_interval, analysis.object_scores, c)
    ranked = analysis.interventions.attrs.get("ranked_by", "var_abs")
    inter = new_table(title="Single-factor interventions (% change; ranked by "
                      f"{'sigma2_delta' if ranked == 'sigma2_delta' else 'Var(theta-hat)'}, those moving it "
                      "less than 1% last)")
    for col in ("intervention", "Var(theta-hat)", "sigma2_delta"):
        inter.add_column(col, justify="left" if col == "intervention" else "right")
    for r in analysis.interventions.to_dict(orient="records"):
        inter.add_row(r["intervention"], number(r["pct_change_var_abs"], "+.1f"),
                      number(r["pct_change_sigma2_delta"], "+.1f"))
    c.print(inter)
    for w in diagnostics.warnings if diagnostics is not None else ():
        c.print(Text("warning: ", style="bold yellow") + Text(w))
    for n in diagnostics.design_notes if diagnostics is not None else ():
        c.print(Text("note: ", style="yellow") + Text(n))
    missing = [i for i in analysis.checklist if i["met"] is False]
    unmeasured = [i for i in analysis.checklist if i["met"] is None]
    met = len(analysis.checklist) - len(missing) - len(unmeasured)
    c.print(f"Reporting checklist (TEE Table 15): {met} of {len(analysis.checklist)} met"
            + (f"; missing: {', '.join(i['item'] for i in missing)}" if missing else "")
            + (f"; not measured by this design: {', '.join(i['item'] for i in unmeasured)}" if unmeasured
               else "") + ".")


def print_glmm(check, lpm: ComponentsSummary, console: Console) -> None:
    """LPM and logit-GLMM components side by side with their ranks (TEE section G, Table 11); ``lpm``: the
    linear probability model's components summarised (:func:`~evalgauge.analysis.gstudy.summarize_components`)."""
    console = as_text(console)
    print_components(lpm, console)
    table = new_table(title="Robustness check for binary scores: linear probability model vs logit GLMM")
    for col in ("component", "LPM variance", "LPM share of Var(theta-hat)", "LPM rank", "GLMM variance (logit)",
                "GLMM share", "GLMM rank"):
        table.add_column(col, justify="left" if col == "component" else "right")
    for row in check.table.itertuples():
        table.add_row(row.component, f"{row.lpm_variance:.5g}", f"{100 * row.lpm_share:.1f}%", str(row.lpm_rank),
                      f"{row.glmm_variance:.5g}", f"{100 * row.glmm_share:.1f}%", str(row.glmm_rank))
    console.print(table)
    rho = (f"Spearman rank correlation of the shares of Var(theta-hat) at this design: {check.spearman:.3f} (TEE "
           "Table 11 reports 0.91-0.99 for the same shares on its binary benchmarks)"
           if check.spearman == check.spearman else
           f"No rank correlation of the shares with {len(check.table)} random term(s) (it needs at least 3)")
    console.print(f"{rho}. GLMM: {check.glmm.method_reason}; residual fixed at pi^2/3.")
    for note in check.glmm.notes:
        console.print(Text("note: ", style="yellow") + Text(note))


def print_run(summary, diagnostics, database, config_notes, c: Console) -> None:
    """What `evalgauge run` prints: the run's summary (a collector's ``RunSummary``), the configuration's notes
    and the stored calls' integrity (a :class:`~evalgauge.analysis.diagnostics.Diagnostics`)."""
    c = as_text(c)
    via = f" in {summary.batches} batch(es)" if summary.batches else ""
    c.print(f"{database}: {summary.completed} calls made now{via}, {summary.already_done} already there, "
            f"{summary.failed} failed after retries ({summary.retries} retries), of {summary.planned} planned; "
            f"cost ${summary.cost_usd:.4f}; {summary.seconds:.1f} s.")
    for note in [*summary.notes, *config_notes]:
        c.print(Text("note: ", style="yellow") + Text(note))
    if not diagnostics.per_judge.empty:
        table = new_table(title="Integrity by judge")
        for col in diagnostics.per_judge.columns:
            table.add_column(col)
        for row in diagnostics.per_judge.itertuples(index=False):
            table.add_row(*[str(v) for v in row])
        c.print(table)
    for warning in diagnostics.warnings:
        c.print(Text("warning: ", style="bold yellow") + Text(warning))
    for note in diagnostics.design_notes:
        c.print(Text("note: ", style="yellow") + Text(note))


def print_run_plan(plan: RunPlan, config_notes, c: Console) -> None:
    """What `evalgauge run --dry-run` prints (a collector's ``RunPlan``): the calls, their worst-case cost
    against the budget, each batch with ``--batch``, and the plan's and the configuration's notes."""
    c = as_text(c)
    budget = "no budget_usd cap" if plan.budget_usd is None else f"budget ${plan.budget_usd:g}"
    c.print(f"{plan.config}: {plan.planned} judge calls planned, {plan.already_done} stored, "
            f"{plan.to_send} to send (+{plan.generations_to_send} generations); worst-case cost "
            f"${plan.worst_case_usd:.4f} on top of ${plan.spent_usd:.4f} spent; {budget}"
            + ("" if plan.fits_budget else ": the run will stop at the cap before finishing") + ".")
    for b in plan.batches or []:
        c.print(f"  batch of judge '{b['judge']}': {b['requests']:,} requests, worst case "
                f"${b['worst_case_usd']:.4f} at the batch price")
    for note in [*plan.notes, *config_notes]:
        c.print(Text("note: ", style="yellow") + Text(note))


def print_adaptive_plan(plan: AdaptivePlan, c: Console) -> None:
    """What `evalgauge run --target ... --dry-run` prints: the pilot, its calls and worst case, before any call."""
    c = as_text(c)
    pilot, run = plan.pilot, plan.plan
    c.print(f"{run.config}: adaptive run to {plan.target}. Pilot: {len(pilot.items)} of {plan.pool_items} items x "
            f"{len(pilot.judges)} judge(s) x {len(pilot.variants)} variant(s) x {pilot.replicates} "
            f"replicate(s) = {run.planned} calls ({run.already_done} stored), worst-case "
            f"${run.worst_case_usd:.4f}; {plan.pilot_df}. Then a fit, and the plan with its "
            "cost before more is spent.")


def print_adaptive(result, c: Console) -> None:
    """What `evalgauge run --target` prints after its stages (a collector's ``AdaptiveResult``): each stage's
    design, calls and spending, and how it ended."""
    c = as_text(c)
    for st in result.stages:
        got = "" if st.achieved is None else f"; {st.achieved:.4g} after it"
        c.print(f"{st.name}: {len(st.design.items)} items x {len(st.design.judges)} judge(s) x "
                f"{len(st.design.variants)} variant(s) x {st.design.replicates} replicate(s); {st.calls_sent} "
                f"calls sent; ${st.spent_usd:.4f} spent in all{got}")
    c.print(f"{result.outcome}: {result.message}")


def print_single_run(result, c: Console) -> None:
    """One model's run (an :class:`~evalgauge.inference.SingleRunInterval`): its honest interval and what it
    cannot measure."""
    c = as_text(c)
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


def print_screening(screening, console: Console) -> None:
    """What `screen` prints (a :class:`~evalgauge.scoring.Screening`): the items kept, the stability of their
    ranking, and the share of the system terms on all items and on the kept ones."""
    console = as_text(console)
    low, high = screening.split_half_range
    console.print(f"{len(screening.selected)} of {len(screening.per_item)} items kept (between-system variance >= "
                  f"{screening.threshold:.4g}); split-half stability of the item ranking: Spearman rho "
                  f"{screening.split_half_rho:.3f} (95% range from {low:.3f} to {high:.3f}, {screening.splits} "
                  "splits).")
    on_all, on_kept = screening.shares("all"), screening.shares("selected")
    if on_all is None or on_kept is None:
        return
    system, item = screening.system, screening.item
    for comp in (system, f"{system}:{item}", f"{item}:{system}"):
        if comp in on_all:
            console.print(f"{comp}: {100 * on_all[comp]:.1f}% of the variance on all items, "
                          f"{100 * on_kept.get(comp, float('nan')):.1f}% on the kept ones.")


def print_strata(strata, console: Console) -> None:
    """Components per stratum beside the pooled fit (TEE C.7)."""
    console = as_text(console)
    frame = strata.to_frame()
    levels = ["(pooled)", *strata.fits]
    table = new_table(title=f"Variance components by {strata.stratum} (per-stratum fits, TEE C.7)")
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


def print_gold(gold, console: Console, plans=None, budget: float | None = None, target_se: float | None = None) -> None:
    """The gold slice (:class:`evalgauge.gold.GoldAnalysis`): corrected means beside the judges-only and gold-only
    ones, every configuration's agreement with the gold, the error the judges share, and with ``plans``
    (:func:`evalgauge.gold.panel_plan`) gold labels priced against judge calls."""
    console = as_text(console)
    table = new_table(title="Means corrected by the gold labels")
    for col in ("group", "method", "estimate", "interval", "SE", "gold / units", "lambda"):
        table.add_column(col, justify="left" if col in ("group", "method") else "right")
    for e in gold.estimates:
        table.add_row(e.group or "all units", e.method, f"{e.estimate:.4g}", f"[{e.low:.4g}, {e.high:.4g}]",
                      f"{e.se:.3g}", f"{e.n_gold} / {e.n_units}", "" if e.lam is None else f"{e.lam:.3g}")
    console.print(table)
    frame = gold.agreement
    agree = new_table(title="Agreement with the gold, per configuration"
                          + (" (bias: prediction - gold)" if "bias" in frame else " (its modal label per unit)"))
    from ..gold import AGREEMENT_COLUMNS

    columns = [c for c in AGREEMENT_COLUMNS if c in frame]
    for col in columns:
        agree.add_column(col, justify="left" if col in ("facet", "level") else "right")
    for r in frame.to_dict(orient="records"):
        agree.add_row(*[str(r[c]) if c in ("facet", "level", "units") else number(r.get(c), ".3g") for c in columns])
    console.print(agree)
    if gold.error_components is not None:
        shares = ", ".join(f"{c.name} {c.variance:.3g}" for c in gold.error_components.components)
        console.print(f"The judges' error (score - gold) on the gold units: {shares}; the gold scores' variance "
                      f"{gold.gold_variance:.3g}. What the units' term holds every judge, variant and replicate "
                      "shares: more of them cannot remove it, the gold correction does.")
    for note in gold.notes:
        console.print(Text("note: ", style="yellow") + Text(note))
    if plans is not None:
        print_gold_plan(plans, console, budget, target_se)


def print_gold_plan(plans, console: Console, budget: float | None = None, target_se: float | None = None) -> None:
    """Gold labels priced against judge calls (:func:`evalgauge.gold.panel_plan`): the best plans, and how the
    best panel compares with the best single judge."""
    console = as_text(console)
    goal = f"at ${budget:g}; best first" if budget is not None else f"for an SE of {target_se:g}; cheapest first"
    table = new_table(title=f"Gold labels against judge calls {goal} (PPI with power tuning)")
    variants = "variants" in plans and plans["variants"].nunique() > 1
    classes = "class" in plans  # a plan for every class's share: its worst class's figures
    cols = ["judges", *(["variants"] if variants else []), "replicates", "correlation", "$ per unit", "gold labels",
            "predicted only", "cost", "worth gold labels", "SE", *(["worst class"] if classes else [])]
    for col in cols:
        table.add_column(col, justify="left" if col == "worst class" else "right")
    for r in plans.head(8).to_dict(orient="records"):
        table.add_row(str(r["judges"]), *([str(r["variants"])] if variants else []), str(r["replicates"]),
                      f"{r['correlation']:.3f}", f"{r['cost_per_unit']:.4g}", str(r["gold"]),
                      str(r["predicted_only"]), f"{r['cost']:.2f}", str(r["effective_n"]), f"{r['se']:.3g}",
                      *([str(r["class"])] if classes else []))
    console.print(table)
    if classes:
        console.print("One plan serves every class's share (the same units carry every class's gold label and "
                      "prediction); correlation, worth and SE are its worst class's.")
    single = plans[plans["judges"] == 1]
    if len(single) and plans.iloc[0]["judges"] > 1 and budget is not None:
        best, one = int(plans.iloc[0]["effective_n"]), int(single.iloc[0]["effective_n"])
        console.print(f"The best panel is worth {best} gold labels alone, the best single judge {one}, at the same "
                      "budget (counts rounded, so a cost can pass the budget by a label's price).")
    elif len(single) and plans.iloc[0]["judges"] > 1 and bool(plans.iloc[0].get("reaches", False)):
        console.print(f"The cheapest panel costs {plans.iloc[0]['cost']:.2f}, the cheapest single judge "
                      f"{single.iloc[0]['cost']:.2f}, for the same SE.")
    if "reaches" in plans and not plans["reaches"].any():
        console.print(Text("note: ", style="yellow") + Text(
            f"no plan reaches an SE of {target_se:g} with the units there are; the closest come first."))


def number(value: float | None, fmt: str) -> str:
    return "—" if value is None or value != value else format(value, fmt)


def critical_error_text(result) -> str:
    """' +- error (method, points)' of a computed critical value; nothing for a bootstrap quantile."""
    c = result.extra.get("critical")
    if not c:
        return ""
    if not c["points"]:  # a closed form (one pair; every pair of exchangeable means)
        return f" (exact: {c['method']})"
    return f" +- {c['error']:.2g}, {c['method']}, {c['points']:,} points"


def interval_text(low: float | None, high: float | None, fmt: str, comparable: bool = True) -> str:
    """[low, high], or what a missing bound means in a comparison: confounded, or no interval at this design."""
    if not comparable:
        return "not comparable"
    if low is None or high is None or low != low or high != high:
        return "not estimable"
    return f"[{format(low, fmt)}, {format(high, fmt)}]"


def print_preset(preset: Preset, console: Console) -> None:
    """A published preset: its components, the printed figures they come from, those it reproduces, its floors."""
    console = as_text(console)
    lo_scale, hi_scale = preset.scale
    console.print(f"{preset.title}: components on a {lo_scale:g}-{hi_scale:g} scale, from {preset.source}")
    table = new_table(title="Relative-error components (sizing eq. 2)")
    table.add_column("component")
    table.add_column("sigma2", justify="right")
    for name, value in preset.values.items():
        table.add_row(name, f"{value:.4g}")
    console.print(table)
    console.print("Derived from: " + "; ".join(f"{f.value:g} ({f.where})" for f in preset.inputs.values()))
    if preset.assumption:
        console.print(f"Assumed: {preset.assumption}")
    for check in preset.checks:
        lo, hi = preset.check_range(check)
        console.print(f"Reproduces {check.what}: {check.compute(preset.values):.4g} (printed {check.figure.value:g}, "
                      f"{check.figure.where}; {lo:.4g}-{hi:.4g} over the rounding of the inputs).")
    f = preset.floors()
    console.print(f"MDD (95%, one judge, one run): {f['mdd_30_items']:.3g} at 30 items, {f['mdd_native_items']:.3g} "
                  f"at the native {preset.native_items:,}; single-judge ceiling E rho^2 {f['ceiling']:.3g}.")


def print_audit(audit: Audit, console: Console) -> None:
    """An audit's verdicts: one row per claim, or the board with its rank sets and the adjacent pairs."""
    console = as_text(console)
    console.print(f"Audit against {audit.components} ({100 * audit.level:g}%)")
    for sentence in audit.sentences:
        console.print(sentence)
    if audit.claims is not None:
        table = Table()
        for col in ("claim", "delta", "MDD", "exceeds", "P(inverted)", "design"):
            table.add_column(col, justify="left" if col in ("claim", "design") else "right")
        for r in audit.claims.to_dict(orient="records"):
            table.add_row(Text(str(r["claim"])), f"{r['delta']:.3g}", f"{r['mdd']:.3g}",
                          "yes" if r["exceeds_mdd"] else "no", f"{100 * r['p_inverted']:.0f}%", r["design"])
        console.print(table)
        return
    board = new_table(title="Board (rank sets: simultaneous; groups share a letter when the design cannot tell them "
                            "apart)")
    for col in ("rank", "system", "score", "rank set", "group"):
        board.add_column(col, justify="left" if col == "system" else "right")
    rows = audit.board.to_dict(orient="records")
    letters, why = letter_column([r["group"] for r in rows])
    for r, group in zip(rows, letters, strict=True):
        board.add_row(str(r["rank"]), Text(str(r["system"])), f"{r['published']:.4g}",
                      f"{r['rank_low']}-{r['rank_high']}", group)
    board.caption = why
    console.print(board)
    pairs = new_table(title="Adjacent pairs")
    for col in ("a", "b", "delta", "MDD", "exceeds", "P(inverted)", "separable"):
        pairs.add_column(col, justify="left" if col in ("a", "b") else "right")
    for r in audit.pairs.to_dict(orient="records"):
        pairs.add_row(Text(str(r["a"])), Text(str(r["b"])), f"{r['delta']:.3g}", f"{r['mdd']:.3g}",
                      "yes" if r["exceeds_mdd"] else "no", f"{100 * r['p_inverted']:.0f}%",
                      "yes" if r["separable"] else "no")
    console.print(pairs)


def print_ceiling(analysis, console: Console) -> None:
    """E rho^2, the MDD, the single-facet ceiling and what a target needs (the report says the same)."""
    console = as_text(console)
    from dataclasses import asdict

    req = analysis.judges_needed
    console.print(ceiling_sentence(analysis.components.object, analysis.projection.erho2, analysis.projection.mdd95,
                                   asdict(analysis.ceiling), str(req), req.target))


def print_effects(effects: EffectsSummary | None, console: Console, exclude: str | None = None) -> None:
    """The facets' levels as the fit sees them: conditional modes with 95% intervals (TEE C.6), and the items
    the judges disagree on most."""
    console = as_text(console)
    if effects is None:
        return
    said = effects.to_dict()  # the sentences the HTML report shares take the JSON form
    rows = effects_rows(said, exclude)
    if rows:
        table = new_table(title="Effects: conditional modes (BLUPs) with 95% intervals (TEE C.6; + scores higher)")
        for col in ("term", "level", "mode", "95% interval"):
            table.add_column(col, justify="left" if col in ("term", "level") else "right")
        for row in rows:
            table.add_row(*row)
        console.print(table)
    sentence = disagreed_sentence(said)
    if sentence:
        console.print(sentence)


def print_pairwise(result: PairwiseAnalysis, summary: ComponentsSummary | None, c: Console) -> None:
    """What `pairwise` prints: the Bradley-Terry table and its notes, the weighted win shares, the position
    term, the comparison of the strengths, the position bias, the win indicators' components (``summary``,
    :func:`evalgauge.analysis.gstudy.summarize_components` of ``result.components``) with the MDD and ceiling,
    and TEE's arena studies."""
    c = as_text(c)
    fit, table, notes, counts = result.fit, result.table, result.notes, result.counts
    comparison = result.comparison
    t = new_table(title=f"Bradley-Terry ({counts.judgments} judgments, {len(counts.systems)} systems; reference "
                        f"{fit.reference} at 0)")
    cols = ["system", "log_strength", "se", "elo", "elo_arena", "win_rate_vs_reference"] + \
        [k for k in ("naive_low", "naive_high", "tee_low", "tee_high") if k in table]
    for col in cols:
        t.add_column(col, justify="left" if col == "system" else "right")
    for r in table.to_dict(orient="records"):
        t.add_row(*[str(r[k]) if k == "system" else number(r[k], ".4g") for k in cols])
    c.print(t)
    for note in notes:
        c.print(Text("note: ", style="yellow") + Text(note))
    if result.win_shares is not None:
        shares = ", ".join(f"{r.system} {100 * r.win_share:.2f}% ({r.battles:g} battles)"
                           for r in result.win_shares.itertuples(index=False))
        c.print(f"Weighted win share against the opponents (ties half; arena-hard's own score): {shares}.")
    if fit.log_h is not None:
        c.print(f"First-slot advantage (position term): log odds {fit.log_h:+.3f}.")
    if comparison is not None:
        print_comparison(comparison, c)
    if result.position is not None:
        pb = result.position
        c.print(f"Slot-A advantage in win rate: {100 * pb.advantage:+.1f} points on average, sd "
                f"{100 * pb.spread:.1f} across systems, max {100 * pb.maximum:+.1f} (sizing sec. 5.4).")
    if summary is not None:
        print_components(summary, c)
        if result.human is not None:
            h = result.human
            c.print(f"Agreement with the human votes: {100 * h['overall']:.1f}% of {h['n']} judgments; "
                    f"{100 * h['ab_only']:.1f}% of the {h['n_ab']} where both were decisive.")
        if result.projection is not None:
            ceiling = result.ceiling
            c.print(f"MDD95 {100 * result.projection.mdd95:.1f} win-rate points at this design"
                    + (f"; single-judge ceiling {ceiling.erho2:.3f}, MDD floor {100 * ceiling.mdd95:.1f} points"
                       if ceiling is not None else "") + ".")
    print_arena_studies(result.studies, c)


def print_arena_studies(studies, console: Console) -> None:
    """TEE's arena studies (sec. 4.3-4.4, R.1, Table 17; an :class:`~evalgauge.analysis.arena.ArenaStudies`, or
    None): the three SEs per system with their median ratios, each pipeline's agreement with the human votes, and
    the gaming surface over K configurations."""
    console = as_text(console)
    if studies is None:
        return
    table = new_table(title=f"Standard errors of the log strengths over {studies.n_configurations} configurations "
                            f"({' x '.join(studies.columns)}; {studies.resamples} resamples each)")
    for col in ("system", "naive (battles)", "single cell", "TEE pipeline"):
        table.add_column(col, justify="left" if col == "system" else "right")
    for r in studies.se.itertuples(index=False):
        table.add_row(str(r.system), number(r.naive_se, ".3g"), number(r.single_cell_se, ".3g"),
                      number(r.tee_se, ".3g"))
    console.print(table)
    ratio = studies.ratios
    console.print(f"Median SE ratio to the naive bootstrap: single cell {ratio['single_cell_over_naive']:.2f}x (one "
                  f"configuration scores every battle: what another researcher's choice would have moved), TEE "
                  f"pipeline {ratio['tee_over_naive']:.2f}x (TEE R.1).")
    g = studies.gaming
    console.print(f"Gaming surface, best of K = {g['k']} configurations: +{g['rerun_elo_median']:.1f} Elo by "
                  f"re-running the evaluation under each and keeping the best (median over systems), against "
                  f"+{g['closed_form_elo_median']:.1f} by the closed form E[max of K] x the configurations' SD "
                  "(TEE 4.4).")
    if studies.agreement is not None and len(studies.agreement):
        agree = new_table(title="Agreement with the human votes (TEE Table 17)")
        for col in ("pipeline", "per judgment", "per battle"):
            agree.add_column(col, justify="left" if col == "pipeline" else "right")
        for r in studies.agreement.itertuples(index=False):
            agree.add_row(r.pipeline, f"{100 * r.per_judgment:.1f}%", f"{100 * r.per_battle:.1f}%")
        console.print(agree)
