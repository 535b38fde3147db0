"""Terminal renderers of the Monte Carlo studies (`evalgauge simulate ...`): each takes the study's typed result
(:mod:`evalgauge.simulate.montecarlo`, :mod:`evalgauge.robustness`, :mod:`evalgauge.scoring`) and a console."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console

from .terminal import as_text, new_table, number

if TYPE_CHECKING:
    from ..robustness import RobustnessStudy
    from ..scoring import ScoringStudy
    from ..simulate.montecarlo import AmbiguityStudy, CoverageResult, InterventionAccuracy, ProjectionBias


def print_coverage(result: CoverageResult, console: Console) -> None:
    """TEE E.4's coverage table by scenario and N."""
    console = as_text(console)
    table = new_table(title="95% CI coverage by scenario and N (TEE E.4; truth: the population grand mean)")
    for col in ("scenario", "N", "coverage", "MC s.e.", "Wald (z) coverage", "mean SE", "replicates"):
        table.add_column(col, justify="right")
    for r in result.results.itertuples():
        table.add_row(r.scenario, str(r.n), f"{100 * r.coverage:.1f}%", f"{100 * r.mc_se:.1f}",
                      f"{100 * r.coverage_wald:.1f}%", f"{r.mean_se:.4g}", str(r.reps))
    console.print(table)
    console.print("A: one configuration, s/sqrt(N); B: + variants; C: + judges; D: + temperatures; "
                  "E: + variant x judge and variant x temperature. Coverage: the fitted models' intervals with "
                  "Satterthwaite's t; Wald: the same SE with the normal quantile (as an lme4 fit, which gives no df).")


def print_scoring_study(result: ScoringStudy, c: Console) -> None:
    """TEE E.3: each arm's ranking recovery (Kendall tau) per condition."""
    c = as_text(c)
    t = new_table(title=f"Ranking recovery, Kendall tau ({result.items} items, {result.calls_per_item} calls per item "
                        "in each arm)")
    cols = [*(result.conditions or ("kappa",)), "tau_likert", "tau_binary", "tau_pairwise"]
    for col in cols:
        t.add_column(col, justify="right")
    for r in result.results.to_dict(orient="records"):
        t.add_row(*[number(r[k], ".3g") for k in cols])
    c.print(t)
    c.print("Pairwise shares the call's context: anchoring cancels and slopes keep the sign (TEE E.3).")


def print_projection_bias(result: ProjectionBias, c: Console) -> None:
    """TEE E.2 (Table 7): the projection's relative bias, in one sentence."""
    c = as_text(c)
    c.print(
        f"{result.scenario}: projected Var(theta-hat) at {result.target} is {result.mean_projected:.5g} on average "
        f"against the true {result.true_var_abs:.5g}: relative bias {100 * result.relative_bias:+.1f}% "
        f"(Monte Carlo s.e. {100 * result.mc_se:.1f}%, {result.reps} pilots). The pilot design and the scenarios' "
        "parameters are this tool's reading of TEE E.2, which does not state them in full, so the figures of its "
        "Table 7 are not computed this way and are not printed beside this one (docs/papers.md has both).")


def print_intervention_accuracy(result: InterventionAccuracy, c: Console) -> None:
    """TEE sec. 3.3 / E.2 Fig. 9a: the interventions' true and mean projected effects, and the top-1 share."""
    c = as_text(c)
    t = new_table(title=f"Single-factor interventions: % change of Var(theta-hat) ({result.reps} pilots of "
                        f"{result.pilot_items} items)")
    for col in ("intervention", "true", "mean projected"):
        t.add_column(col, justify="left" if col == "intervention" else "right")
    for r in result.interventions.to_dict(orient="records"):
        t.add_row(r["intervention"], f"{r['true_pct']:+.1f}", number(r["mean_projected_pct"], "+.1f"))
    c.print(t)
    c.print(f"The pilot's first intervention is the truth's ({result.true_top}) in "
            f"{100 * result.top1_accuracy:.1f}% of {result.reps} pilots.")


def print_ambiguity(result: AmbiguityStudy, c: Console) -> None:
    """TEE E.5 (Table 10): coverage, the components' worst bias and the D-study's ranking per gamma."""
    c = as_text(c)
    import pandas as pd  # not at the top: `evalgauge --help` loads this module and no numeric stack

    reps, rows = result.reps, result.rows.to_dict(orient="records")
    t = new_table(title=f"Latent item ambiguity (TEE E.5): {reps} studies per gamma of 30 items x 3 prompts x 2 "
                        "temperatures x 3 judges x 3 calls; paper's Table 10 in brackets")
    for col in ("gamma", "coverage (t)", "coverage (Wald)", "max |rel. bias|", "worst component",
                "D-study rho"):
        t.add_column(col, justify="left" if col == "worst component" else "right")
    for r in rows:
        paper = (f" [{r['paper_coverage']:.1f}]", f" [{r['paper_max_abs_rel_bias']:.1f}]",
                 f" [{r['paper_rho']:.2f}]") if pd.notna(r["paper_coverage"]) else ("", "", "")
        t.add_row(f"{r['gamma']:g}", f"{100 * r['coverage']:.1f}%", f"{100 * r['coverage_wald']:.1f}%{paper[0]}",
                  f"{100 * r['max_abs_rel_bias']:.1f}%{paper[1]}", r["worst_component"],
                  f"{r['spearman_rho']:.2f}{paper[2]}")
    c.print(t)
    worst_z = max(r["max_bias_mc_se"] for r in rows)
    c.print("The paper's coverage (bracketed) is printed beside the Wald (normal) interval's, lme4's default and "
            "the reading closest to it; Satterthwaite's t interval, evalgauge's, covers more at so few levels. "
            "The components' bias is against the marginal truth (E[1 + gamma z^2] = 1 + gamma times the "
            f"interaction variances); the largest is {worst_z:.1f} Monte Carlo standard errors from zero (with "
            "2-3 levels of a facet one standard error is several percent). The 3-way of the ambiguous items "
            "pools into the model's cell term, so the residual stays unbiased.")


def _print_convergence(rows: list[dict], paper: dict, design: str, c: Console) -> None:
    c = as_text(c)
    sizes = sorted({r["observations"] for r in rows})
    t = new_table(title=f"REML by the number of observations (Fig. 7): rel. bias (s.e.) / rel. RMSE; {design}")
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


def print_robustness(result: RobustnessStudy, c: Console) -> None:
    """TEE E.1's studies: a table for each one run, with the paper's figures in brackets."""
    c = as_text(c)
    reps, paper, done = result.reps, result.paper, result.records()
    pct = lambda x: f"{100 * x:+.1f}%"  # noqa: E731
    if set(done) - {"convergence"}:
        c.print(f"TEE E.1 on {result.design}; {reps} studies per condition; the paper's figures in brackets.")
    if "three-way" in done:
        t = new_table(title="A 3-way item x variant x temperature outside the model")
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
        t = new_table(title="A residual variance per temperature, one fit per temperature (TEE C.7)")
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
        t = new_table(title="sigma2_phi by the number of prompt variants V (unbiased ANOVA; truncated at 0 as REML)")
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
        t = new_table(title='"+2 variants" or "+5 replicates": share of pilots right (at a tie: choosing prompts)')
        for col in ("true gain ratio", "D-study (truncated)", "untruncated", "sigma2_rho"):
            t.add_column(col, justify="right")
        for r in done["knife-edge"]:
            t.add_row(f"{r['ratio']:g}", f"{100 * r['accuracy']:.1f}%", f"{100 * r['accuracy_untruncated']:.1f}%",
                      f"{r['sigma2_rho']:.1f}")
        c.print(t)
    if "transfer" in done:
        t = new_table(title="Components of one model profile used for another's D-study")
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
        _print_convergence(done["convergence"], paper, result.convergence_design, c)
