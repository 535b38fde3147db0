"""Neighbours in the ranking: the probability of a rank inversion and the design that would separate them."""

from __future__ import annotations

import itertools

import pandas as pd
from scipy import special  # not scipy.stats: the same functions, without its second of import

from .. import dstudy
from ..components import VarianceComponents

#: power at which an adjacent pair's separating design is sized
POWER = 0.8
#: A separating count more than this many times the present one is no plan ("2,248,702 more items"): the pair
#: is reported as not separable by that facet alone at this panel
PRACTICAL_FACTOR = 100


def adjacent_pairs(vc: VarianceComponents, pairs: pd.DataFrame, ordered: list[str], obj: str,
              level: float) -> tuple[list[str], pd.DataFrame]:
    """For neighbours in the ranking: P(rank inversion), and the items or judges separating them at 80% power."""
    judge, item = vc.role("judge"), vc.role("item")
    z = special.ndtri(0.5 + level / 2) + special.ndtri(POWER)
    rows, sentences = [], []
    key = pairs.set_index(["a", "b"])
    for a, b in itertools.pairwise(ordered):
        r = key.loc[(a, b)]
        diff, se = float(r["diff"]), float(r["se"])
        p_inv = float(special.ndtr(-abs(diff) / se)) if se > 0 else 0.0
        row = {"a": a, "b": b, "adjacent": True, "p_inversion": p_inv, "items_needed": None,
               "judges_needed": None}
        # the relative error that detects this difference at 80% power: 2 sigma2_delta (z_a + z_b)^2 <= diff^2
        target = diff**2 / (2 * z**2) if diff > 0 else 0.0
        what, blocked = [], []
        if target > 0:
            for facet, col in ((item, "items_needed"), (judge, "judges_needed")):
                if facet is None:
                    continue
                req = dstudy.needed(vc, facet, target, quantity="sigma2_delta")
                row[col] = req.count if req.reachable else None
                practical = req.reachable and req.count <= PRACTICAL_FACTOR * vc.levels[facet]
                if practical and req.count > vc.levels[facet]:
                    what.append(f"{req.count - vc.levels[facet]:,} more {facet}s")
                elif not practical:  # unreachable, or millions of items: no number of them, in practice
                    blocked.append(facet)
        if "comparable" in r and not bool(r["comparable"]):
            sentences.append(f"{a} over {b} by {diff:.4g}: not comparable (their difference includes another "
                             "facet's, see above).")
            rows.append(row)
            continue
        sep = bool(r["separable"])
        text = (f"{a} over {b} by {diff:.4g}: " + ("separable at this design (simultaneous interval "
                f"[{r['low_simultaneous']:.3g}, {r['high_simultaneous']:.3g}])" if sep else
                f"not separable at this design (P(order inverted) {p_inv:.0%})"))
        if not sep and what:
            text += "; " + " or ".join(what) + f" would separate them at {POWER:.0%} power"
            if item in blocked and judge is not None:
                n_j = vc.levels[judge]
                text += (f" (no item count would with {n_j} {judge}{'' if n_j == 1 else 's'}: the "
                         f"{'single-' if n_j == 1 else ''}{judge} ceiling)")
        elif not sep and blocked:
            text += (f"; no number of {' or '.join(f + 's' for f in blocked)} alone separates them at {POWER:.0%} "
                     f"power at this panel (within {PRACTICAL_FACTOR} times the present count): it takes both "
                     "(see evalgauge plan)" if len(blocked) > 1 else
                     f"; no number of {blocked[0]}s alone separates them at {POWER:.0%} power at this panel "
                     f"(within {PRACTICAL_FACTOR} times the present count)")
        sentences.append(text + ".")
        rows.append(row)
    return sentences, pd.DataFrame(rows, columns=["a", "b", "adjacent", "p_inversion", "items_needed",
                                                  "judges_needed"])
