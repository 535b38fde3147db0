"""One text per result: the sentences the terminal and the HTML report both say, written once.

Each function takes a result's JSON form (its ``to_dict()``, which both renderers have) and returns plain text;
the terminal prints it, the report escapes it. The wording is the same wherever a number is reported.
"""

from __future__ import annotations


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


def ceiling_sentence(obj: str, erho2: float, mdd95: float, ceiling: dict, requirement: str, target: float) -> str:
    """E rho^2 and the MDD at this design, the single-facet ceiling and its MDD floor (sizing eqs. 3-4), and
    what a target E rho^2 needs."""
    facet = ceiling["facet"]
    return (f"Comparing {obj}s: E rho^2 {erho2:.3f} and MDD95 {mdd95:.4g} at this design; with one {facet} no "
            f"item count gets past E rho^2 {ceiling['erho2']:.3f} (the single-{facet} ceiling; MDD floor "
            f"{ceiling['mdd95']:.4g}); for E rho^2 {target:g}: {requirement}.")
