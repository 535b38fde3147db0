"""`evalgauge simulate`: data from both papers' designs, coverage and bias studies, the scoring-method simulation."""

from __future__ import annotations

import math
from pathlib import Path

import click

from .. import vocabulary
from ..report.studies import (
    print_ambiguity,
    print_coverage,
    print_intervention_accuracy,
    print_projection_bias,
    print_robustness,
    print_scoring_study,
)
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
    result = scoring_study(grid or {"kappa": [1.0]}, reps=reps, seed=seed, items=items, judges=judges,
                           calls_per_item=calls_per_item)
    _emit(result.to_dict(), json_out, lambda c: print_scoring_study(result, c))


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

    result = projection_bias(reps, seed, scenario, items, scheduler=scheduler)
    _emit(result.to_dict(), json_out, lambda c: print_projection_bias(result, c))



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

    result = intervention_accuracy(reps, seed, items, fixed_levels, scheduler=scheduler)
    _emit(result.to_dict(), json_out, lambda c: print_intervention_accuracy(result, c))


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
    result = ambiguity_study(values, reps, seed, scheduler=scheduler)
    _emit(result.to_dict(), json_out, lambda c: print_ambiguity(result, c))


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

    result = robustness_study(studies or STUDIES, reps, seed, scheduler=scheduler)
    _emit(result.to_dict(), json_out, lambda c: print_robustness(result, c))
