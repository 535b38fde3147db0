"""`evalgauge simulate`: data from both papers' designs, coverage and bias studies, the scoring-method simulation."""

from __future__ import annotations

import math
from pathlib import Path

import click
from rich.table import Table

from .. import vocabulary
from ..report.terminal import number, print_coverage
from .base import (
    _console,
    _emit,
    _float_list,
    _int_list,
    _write_frame,
    json_option,
    main,
    simulate,
    user_errors,
    writes,
)


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
            from ..simulate import PRESETS

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


@simulate_group.command(name="coverage")
@click.option("--preset", type=click.Choice(["tee-table8"]), default="tee-table8", show_default=True)
@click.option("--scenarios", default="A,B,C,D,E", show_default=True, help="TEE Table 9 scenarios.")
@click.option("--n", "n_items", default="20,200,2000", show_default=True, help="Item counts N.")
@click.option("--reps", type=click.IntRange(min=1), default=200, show_default=True, help="Replicates per N.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--scheduler", metavar="ADDRESS", help="Dask distributed scheduler to run the replicates on.")
@click.option("--fixed-levels", is_flag=True, help="Temperature and judge at Table 8's fixed levels {-0.15, 0, "
              "0.15} (the paper's DGP) instead of drawn afresh in each study.")
@json_option("the results")
@user_errors
@writes(json_out="--json")
def coverage_cmd(preset, scenarios, n_items, reps, seed, scheduler, fixed_levels, json_out) -> None:
    """CI coverage of the naive and fuller models across N (TEE E.4, Fig. 1).

    \b
    Example:
      evalgauge simulate coverage --n 20,200,2000 --reps 300 --seed 11
    """
    from ..simulate.montecarlo import coverage_study

    result = coverage_study(_int_list(n_items, "--n"), scenarios.split(","), reps, seed, scheduler=scheduler,
                            fixed_levels=fixed_levels)
    _emit(result.to_dict(), json_out, lambda c: print_coverage(result, c))


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
@json_option("the results")
@user_errors
@writes(json_out="--json")
def scoring_cmd(kappa, anchor, slope, gamma, points, prevalence, items, judges, calls_per_item, reps, seed,
                json_out) -> None:
    """Likert vs binary vs pairwise: ranking recovery (Kendall tau) under judge pathologies (TEE E.3).

    \b
    Example:
      evalgauge simulate scoring --reps 50 --json -
    """
    from ..scoring import scoring_study

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
            t.add_row(*[number(r[k], ".3g") for k in cols])
        c.print(t)
        c.print("Pairwise shares the call's context: anchoring cancels and slopes keep the sign (TEE E.3).")

    _emit(payload, json_out, show)


@simulate_group.command(name="bias")
@click.option("--scenario", type=click.Choice(["baseline", "correlated", "non-exchangeable", "heavy-tails",
                                               "heterogeneous"]), default="baseline", show_default=True)
@click.option("--reps", type=click.IntRange(min=2), default=200, show_default=True)
@click.option("--items", type=click.IntRange(min=5), default=30, show_default=True, help="Pilot items.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--scheduler", metavar="ADDRESS", help="Dask distributed scheduler to run the replicates on.")
@json_option("the result")
@user_errors
@writes(json_out="--json")
def bias_cmd(scenario, reps, items, seed, scheduler, json_out) -> None:
    """D-study projection bias from pilots to a larger design (TEE E.2, Table 7).

    \b
    Example:
      evalgauge simulate bias --scenario heavy-tails --reps 400
    """
    from ..simulate.montecarlo import projection_bias

    out = projection_bias(reps, seed, scenario, items, scheduler=scheduler)
    _emit(out, json_out, lambda c: c.print(
        f"{scenario}: projected Var(theta-hat) at {out['target']} is {out['mean_projected']:.5g} on average "
        f"against the true {out['true_var_abs']:.5g}: relative bias {100 * out['relative_bias']:+.1f}% "
        f"(Monte Carlo s.e. {100 * out['mc_se']:.1f}%, {reps} pilots). The pilot design and the scenarios' "
        "parameters are this tool's reading of TEE E.2, which does not state them in full, so the figures of its "
        "Table 7 are not computed this way and are not printed beside this one (docs/papers.md has both)."))



@simulate_group.command(name="interventions")
@click.option("--reps", type=click.IntRange(min=2), default=200, show_default=True)
@click.option("--items", type=click.IntRange(min=5), default=30, show_default=True, help="Pilot items.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--fixed-levels", is_flag=True, help="Temperature and judge at Table 8's fixed levels and declared "
              "fixed (Tier 2), as the paper classifies them.")
@click.option("--scheduler", metavar="ADDRESS", help="Dask distributed scheduler to run the replicates on.")
@json_option("the result")
@user_errors
@writes(json_out="--json")
def interventions_cmd(reps, items, seed, fixed_levels, scheduler, json_out) -> None:
    """How often a pilot's D-study names the right first intervention (TEE sec. 3.3, E.2 Fig. 9a).

    \b
    Example:
      evalgauge simulate interventions --reps 1000 --fixed-levels
    """
    from ..simulate.montecarlo import intervention_accuracy

    out = intervention_accuracy(reps, seed, items, fixed_levels, scheduler=scheduler)

    def show(c):
        t = Table(title=f"Single-factor interventions: % change of Var(theta-hat) ({reps} pilots of {items} items)")
        for col in ("intervention", "true", "mean projected"):
            t.add_column(col, justify="left" if col == "intervention" else "right")
        for r in out["interventions"]:
            t.add_row(r["intervention"], f"{r['true_pct']:+.1f}", number(r["mean_projected_pct"], "+.1f"))
        c.print(t)
        c.print(f"The pilot's first intervention is the truth's ({out['true_top']}) in "
                f"{100 * out['top1_accuracy']:.1f}% of {reps} pilots.")

    _emit(out, json_out, show)


@simulate_group.command(name="ambiguity")
@click.option("--gamma", "gammas", default="0,0.5,1,2", show_default=True,
              help="Strengths of the ambiguity-driven dependence, comma-separated.")
@click.option("--reps", type=click.IntRange(min=2), default=200, show_default=True, help="Studies per gamma.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--scheduler", metavar="ADDRESS", help="Dask distributed scheduler to run the replicates on.")
@json_option("the result")
@user_errors
@writes(json_out="--json")
def ambiguity_cmd(gammas, reps, seed, scheduler, json_out) -> None:
    """Latent item ambiguity (TEE E.5, Table 10): coverage, component bias and the D-study ranking when each
    item's interaction variances grow with a latent ambiguity score and the most ambiguous items carry a 3-way.

    \b
    Example:
      evalgauge simulate ambiguity --reps 1000
    """
    from ..simulate.montecarlo import ambiguity_study

    try:
        values = [float(g) for g in gammas.split(",") if g.strip()]
    except ValueError:
        raise click.BadParameter(f"'{gammas}' should be numbers separated by commas", param_hint="--gamma") from None
    if not values or any(not math.isfinite(g) or g < 0 for g in values):
        raise click.BadParameter("each gamma must be a number from 0", param_hint="--gamma")
    table = ambiguity_study(values, reps, seed, scheduler=scheduler)
    out = {"reps": reps, "rows": table.to_dict(orient="records")}

    def show(c):
        t = Table(title=f"Latent item ambiguity (TEE E.5): {reps} studies per gamma of 30 items x 3 prompts x 2 "
                        "temperatures x 3 judges x 3 calls; paper's Table 10 in brackets")
        for col in ("gamma", "coverage (t)", "coverage (Wald)", "max |rel. bias|", "worst component",
                    "D-study rho"):
            t.add_column(col, justify="left" if col == "worst component" else "right")
        for r in out["rows"]:
            paper = (f" [{r['paper_coverage']:.1f}]", f" [{r['paper_max_abs_rel_bias']:.1f}]",
                     f" [{r['paper_rho']:.2f}]") if r["paper_coverage"] is not None else ("", "", "")
            t.add_row(f"{r['gamma']:g}", f"{100 * r['coverage']:.1f}%", f"{100 * r['coverage_wald']:.1f}%{paper[0]}",
                      f"{100 * r['max_abs_rel_bias']:.1f}%{paper[1]}", r["worst_component"],
                      f"{r['spearman_rho']:.2f}{paper[2]}")
        c.print(t)
        worst_z = max(r["max_bias_mc_se"] for r in out["rows"])
        c.print("The paper's coverage (bracketed) is printed beside the Wald (normal) interval's, lme4's default and "
                "the reading closest to it; Satterthwaite's t interval, evalgauge's, covers more at so few levels. "
                "The components' bias is against the marginal truth (E[1 + gamma z^2] = 1 + gamma times the "
                f"interaction variances); the largest is {worst_z:.1f} Monte Carlo standard errors from zero (with "
                "2-3 levels of a facet one standard error is several percent). The 3-way of the ambiguous items "
                "pools into the model's cell term, so the residual stays unbiased.")

    _emit(out, json_out, show)


@simulate_group.command(name="robustness")
@click.option("--study", "studies", multiple=True,
              type=click.Choice(["three-way", "strata", "prompts", "knife-edge", "transfer", "convergence"]),
              help="Which E.1 study (repeatable; default: all six).")
@click.option("--reps", type=click.IntRange(min=2), default=200, show_default=True,
              help="Studies per condition.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--scheduler", metavar="ADDRESS", help="Dask distributed scheduler to run the replicates on.")
@json_option("the result")
@user_errors
@writes(json_out="--json")
def robustness_cmd(studies, reps, seed, scheduler, json_out) -> None:
    """TEE E.1's robustness studies: a 3-way outside the model, a residual per temperature, sigma2_phi by the
    number of prompt variants, the prompts-or-calls knife-edge, components moved between model profiles, and
    REML's bias and RMSE as the observations grow (Fig. 7).

    \b
    Example:
      evalgauge simulate robustness --study three-way --study strata --reps 100
    """
    from ..robustness import STUDIES, robustness_study

    out = robustness_study(studies or STUDIES, reps, seed, scheduler=scheduler)
    _emit(out, json_out, lambda c: _show_robustness(c, out))


def _show_convergence(c, rows: list[dict], paper: dict, design: str) -> None:
    sizes = sorted({r["observations"] for r in rows})
    t = Table(title=f"REML by the number of observations (Fig. 7): rel. bias (s.e.) / rel. RMSE; {design}")
    t.add_column("component")
    for n in sizes:
        t.add_column(f"{n:,}", justify="right")
    for name in dict.fromkeys(r["component"] for r in rows):
        cells = {r["observations"]: r for r in rows if r["component"] == name}
        t.add_row(name, *(f"{100 * cells[n]['rel_bias']:+.1f}% ({100 * cells[n]['mc_se']:.1f}) / "
                          f"{cells[n]['rel_rmse']:.2f}" for n in sizes))
    c.print(t)
    c.print(f"The paper: every component's bias below {100 * paper['convergence_bias']:.0f}% once the observations "
            f"exceed {paper['convergence_observations']:,}, and the RMSE falling. A component of a facet with 3 "
            "levels (variant, temperature, judge) keeps a relative RMSE near 1 at any number of items: more items "
            "add no levels of it. A zero-truth term held at the boundary pools into the residual, which is why the "
            "residual is biased down at the smallest sizes.")


def _show_robustness(c, out: dict) -> None:
    reps, paper, done = out["reps"], out["paper"], out["studies"]
    pct = lambda x: f"{100 * x:+.1f}%"  # noqa: E731
    if set(done) - {"convergence"}:
        c.print(f"TEE E.1 on {out['design']}; {reps} studies per condition; the paper's figures in brackets.")
    if "three-way" in done:
        t = Table(title="A 3-way item x variant x temperature outside the model")
        for col in ("3-way / largest 2-way", "Kendall tau", "change (paired)", "max |rel. bias| (component)",
                    "cell term"):
            t.add_column(col, justify="left" if "component" in col else "right")
        rows = done["three-way"]
        for k, r in enumerate(rows):
            mark = (f" [{paper['tau_no_violation']}]" if k == 0 else
                    f" [{paper['tau_max_violation']}]" if k == len(rows) - 1 else "")
            t.add_row(f"{r['fraction']:g}", f"{r['kendall_tau']:.3f}{mark}",
                      f"{r['tau_change']:+.4f} (s.e. {r['tau_change_mc_se']:.4f})",
                      f"{100 * r['max_abs_rel_bias']:.1f}% ({r['worst_component']})", f"{r['cell_term_mean']:.4f}")
        c.print(t)
        c.print("The 3-way pools into the two-way terms it contains (item x variant most: its expected mean square "
                "holds the 3-way at M R / (H M R) = 1/3 of its variance, less the share the cell term takes), so "
                "those are biased while the ranking barely moves.")
    if "strata" in done:
        s = done["strata"]
        t = Table(title="A residual variance per temperature, one fit per temperature (TEE C.7)")
        for col in ("temperature", "true", "mean estimate", "rel. bias"):
            t.add_column(col, justify="right")
        for r in s["strata"]:
            t.add_row(str(r["temperature"]), f"{r['true']:g}", f"{r['mean']:.5f}",
                      f"{pct(r['rel_bias'])} (s.e. {100 * r['mc_se']:.1f})")
        c.print(t)
        p = s["pooled"]
        c.print(f"One pooled fit: residual {s['pooled_residual']:.5f}, the strata's average "
                f"{s['average_residual']:.5f} "
                f"({pct(s['pooled_rel_to_average'])}); its other components' largest bias "
                f"{100 * p['max_abs_rel_bias']:.1f}% ({p['worst_component']}, {p['max_bias_mc_se']:.1f} Monte Carlo "
                "s.e.).")
    if "prompts" in done:
        t = Table(title="sigma2_phi by the number of prompt variants V (unbiased ANOVA; truncated at 0 as REML)")
        for col in ("V", "sigma2_phi", "rel. bias (s.e.)", "truncated", "estimates <= 0"):
            t.add_column(col, justify="right")
        for r in done["prompts"]:
            if r["sigma2_phi"] > 0:
                bias = f"{pct(r['rel_bias'])} ({100 * r['mc_se']:.1f})"
                trunc = pct(r["rel_bias_truncated"])
            else:
                bias, trunc = f"mean {r['mean']:.5f}", f"mean {r['mean_truncated']:.5f}"
            t.add_row(str(r["variants"]), f"{r['sigma2_phi']:g}", bias, trunc, f"{100 * r['share_at_zero']:.0f}%")
        c.print(t)
        c.print("The paper: +4 to +5% at V = 2, 1-4% at V >= 3; each figure's Monte Carlo s.e. is in brackets.")
    if "knife-edge" in done:
        t = Table(title='"+2 variants" or "+5 replicates": share of pilots right (at a tie: choosing prompts)')
        for col in ("true gain ratio", "D-study (truncated)", "untruncated", "sigma2_rho"):
            t.add_column(col, justify="right")
        for r in done["knife-edge"]:
            t.add_row(f"{r['ratio']:g}", f"{100 * r['accuracy']:.1f}%", f"{100 * r['accuracy_untruncated']:.1f}%",
                      f"{r['sigma2_rho']:.1f}")
        c.print(t)
    if "transfer" in done:
        t = Table(title="Components of one model profile used for another's D-study")
        for col in ("direction", "mean rel. error", "top-1 wrong", "top-1 wrong (own profile)"):
            t.add_column(col, justify="left" if col == "direction" else "right")
        for r in done["transfer"]:
            t.add_row(r["direction"], f"{100 * r['mean_rel_error']:.0f}%", f"{100 * r['top1_wrong']:.1f}%",
                      f"{100 * r['top1_wrong_own_profile']:.1f}%")
        c.print(t)
        ratio = done["transfer"][0]["noise_ratio"]
        c.print(f"The cheaper profile has {ratio:g}x the frontier's noise (item interactions, residual): transferred "
                f"components are off by about 1 - 1/{ratio:g} and {ratio:g} - 1 before estimation noise. The paper's "
                f"{100 * paper['transfer_frontier_to_cheap'][0]:.0f}-{100 * paper['transfer_frontier_to_cheap'][1]:.0f}"
                f"% and {100 * paper['transfer_cheap_to_frontier'][0]:.0f}-"
                f"{100 * paper['transfer_cheap_to_frontier'][1]:.0f}% fit a ratio near 2.3-2.5; it does not state its "
                "profiles.")
    if "convergence" in done:
        _show_convergence(c, done["convergence"], paper, out["convergence_design"])
