"""One text per result: the sentences the terminal and the HTML report both say, written once.

Each function takes a result's JSON form (its ``to_dict()``, which both renderers have) and returns plain text;
the terminal prints it, the report escapes it. The wording is the same wherever a number is reported.
"""

from __future__ import annotations

import math


def _df(value) -> str:
    return "inf" if value is None else f"{value:.1f}"


def theta_sentence(theta: dict) -> str:
    """theta-hat with its full interval beside the naive one (TEE eq. 3 against item sampling alone)."""
    pct = f"{100 * theta['level']:g}%"
    method = theta.get("method") or "normal"
    how = "" if method == "normal" else f", {method}"
    return (f"theta-hat = {theta['estimate']:.5g}: full {pct} CI [{theta['low']:.5g}, {theta['high']:.5g}] "
            f"(SE {theta['se']:.4g}, Satterthwaite df {_df(theta['df'])}{how}); naive {pct} CI counting only "
            f"{theta['naive_counts']} sampling [{theta['naive_low']:.5g}, {theta['naive_high']:.5g}] "
            f"(SE {theta['naive_se']:.4g}); the full SE is {theta['se_ratio']:.2f}x the naive.")


def theta_of_objects_sentence(obj: str) -> str:
    """Why theta-hat's interval is not one system's when systems are the object of measurement."""
    return (f"theta-hat is the mean over {obj}s drawn at random, so the spread between {obj}s counts as its error; "
            f"one {obj}'s score and its interval are given separately.")


def object_score_sentence(o: dict, min_df: float) -> str:
    """One object's score: its full interval beside the item-only one (``ObjectInterval.to_dict``), or why it
    has none (fewer than ``min_df`` Satterthwaite df): the headline a reader of one system's number needs."""
    df = "inf" if o["df"] is None else f"{o['df']:.1f}"
    if o["df"] is not None and o["df"] < min_df:  # as compare says of a system's mean: no interval below 1 df
        return (f"One {o['object']}'s score: not estimable at this design (Satterthwaite df {df}, below "
                f"{min_df:g}): its error rests on components too few levels estimate; see the leaderboard for what "
                "would make it estimable.")
    return (f"One {o['object']}'s score: {100 * o['level']:g}% CI +-{o['half_width']:.4g} counting every source of "
            f"error (SE {o['se']:.4g}, Satterthwaite df {df}), against +-{o['naive_half_width']:.4g} counting only "
            f"{o['naive_counts']} sampling (SE {o['naive_se']:.4g}); the full SE is {o['se_ratio']:.2f}x the naive.")


def ceiling_sentence(obj: str, erho2: float, mdd95: float, ceiling: dict, requirement: str, target: float) -> str:
    """E rho^2 and the MDD at this design, the single-facet ceiling and its MDD floor (sizing eqs. 3-4), and
    what a target E rho^2 needs."""
    facet = ceiling["facet"]
    if math.isnan(erho2) or mdd95 < 1e-12:  # 0 / 0 or rounding: the objects do not differ, nor their errors
        return (f"Comparing {obj}s: their scores do not differ in these data (no variance between {obj}s and none in "
                f"their relative error), so E rho^2 is undefined and the MDD 0: there is nothing to separate.")
    return (f"Comparing {obj}s: E rho^2 {erho2:.3f} and MDD95 {mdd95:.4g} at this design; with one {facet} no "
            f"item count gets past E rho^2 {ceiling['erho2']:.3f} (the single-{facet} ceiling; MDD floor "
            f"{ceiling['mdd95']:.4g}); for E rho^2 {target:g}: {requirement}.")


def tier_sentence(components: dict) -> str:
    """Which facets are TEE's Tier 1 and which Tier 2 (Table 2), with each Tier 2 term's sensitivity index
    (C.4) and its square root on the score's scale; ``components`` is a components result's JSON form."""
    fixed = components["fixed"]
    random_facets = [f for f in components["levels"] if f not in fixed and f != components.get("object")]
    indices = "; ".join(
        f"{c['component']} {max(c['variance'], 0.0):.4g} (spread {max(c['variance'], 0.0) ** 0.5:.4g} on the "
        "score's scale)" for c in components["components"] if c.get("kind") == "fixed")
    return (f"Tier 1 (random facets, their error shrinks as more levels are averaged): "
            f"{', '.join(random_facets) or '(none)'}. Tier 2 (fixed facets, the study's chosen conditions, TEE "
            f"Table 2): {', '.join(fixed)}; the estimate is the mean over their chosen levels, so their spread is "
            f"not error: sensitivity indices (TEE C.4, the spread over the chosen levels): {indices or 'none fitted'}. "
            "They are in no share of Var(theta-hat), and no intervention changes their levels.")


#: how each sampling of a nested facet projects, in words (VarianceComponents.sampling)
SAMPLING_WORDS = {
    "pooled": "items drawn from the whole pool, every item-level term over N' items (TEE eq. 3; "
              "--sampling categories for Brennan's i:c, strata to keep every {parent} as a stratum)",
    "categories": "{parent} drawn, N'/C' items each: a {parent}'s effect over C' {parent} levels (Brennan's i:c; "
                  "--sampling pooled is TEE eq. 3)",
    "strata": "every {parent} kept as a fixed stratum: its effect is no error, a sensitivity index "
              "(--sampling pooled is TEE eq. 3)",
}


def convention_sentence(conventions: dict) -> str:
    """The projection conventions in force (nested sampling, estimand), or "" for the default without nesting;
    ``conventions`` is :func:`evalgauge.dstudy.conventions` or a components result's JSON form."""
    parts = []
    nesting = conventions.get("nesting") or {}
    if nesting:
        parents = ", ".join(sorted(set(nesting.values())))
        nested = ", ".join(f"{p}/{c}" for c, p in nesting.items())
        parts.append(f"nested {nested}: {SAMPLING_WORDS[conventions.get('sampling', 'pooled')].format(parent=parents)}")
    if conventions.get("estimand") == "finite":
        parts.append("estimand: the benchmark's own items (TEE C.2), so the items' own effects are no error "
                     "(--estimand domain: the population they were drawn from)")
    elif nesting:
        parts.append("estimand: the domain the items were drawn from (TEE eq. 3; --estimand finite for the "
                     "benchmark's own items, TEE C.2)")
    return ("Conventions: " + "; ".join(parts) + ".") if parts else ""


def effects_rows(effects: dict, exclude: str | None = None) -> list[list[str]]:
    """The facets' levels with their conditional modes and 95% intervals (TEE C.6), as table rows: term, level,
    mode, interval; ``exclude`` leaves out a term shown elsewhere (the systems, on the leaderboard)."""
    return [[r["term"], str(r["level"]), f"{r['mode']:+.4g}", f"[{r['low']:+.4g}, {r['high']:+.4g}]"]
            for r in effects["levels"] if r["term"] != exclude]


def disagreed_sentence(effects: dict) -> str:
    """The items judged most apart (the spread of their item x judge modes), or "" when there are none."""
    items = effects.get("disagreed_items") or []
    if not items:
        return ""
    across = items[0]["across"]
    return (f"Items the {across}s disagree on most (SD of their item x {across} modes): "
            + ", ".join(f"{r['item']} {r['spread']:.3g}" for r in items) + ".")
