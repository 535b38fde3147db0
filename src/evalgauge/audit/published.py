"""Published components: the sizing paper's four item sets as presets for planning and auditing.

"Ask Which, Not How Good: Sizing Benchmarks Scored by an LLM" (arXiv 2609.27787) measures MT-Bench, Arena-Hard,
AlpacaEval 2 and a discrimination-screened set under one 0-5 rubric and a nine-judge panel. Its text prints the
figures below, not every component of every item set; each preset derives the relative-error components of
s x i x j x r(sij) (sizing eq. 2) from printed figures by the paper's own equations:

    sigma2_delta = sigma2_si/n_i + sigma2_sj/n_j + sigma2_sij/(n_i n_j) + sigma2_e/(n_i n_j n_r),
    E rho^2 = sigma2_s / (sigma2_s + sigma2_delta),  MDD_95 = 1.96 sqrt(2 sigma2_delta),           (eqs. 2-3)
    ceiling = sigma2_s / (sigma2_s + sigma2_sj),      floor = 1.96 sqrt(2 sigma2_sj)               (eq. 4)

and checks each against printed figures it did not use. The ``pairwise`` preset is the paper's pairwise arm
(Table 3: win indicators against a fixed baseline, both presentation orders), in win-rate units.

``R`` below is sigma2_si + sigma2_sij + sigma2_e, the part of a single judge's single run that averages over
items. Where the text does not separate R's parts the preset splits it as MT-Bench's (sec. 8 prints that item
set's sigma2_si and sigma2_sij), and says so: at one judge and one run, the design of nearly every published
claim, the split changes nothing.

The item and judge main effects (and item x judge) are not among them: they cancel from every comparison of
systems scored on the same items by the same judges, which is what MDD and a pair's difference are about.

This module is pure: numbers in, numbers out.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from ..components import VarianceComponents
from ..errors import DesignError
from ..results import Result
from ..vocabulary import RESIDUAL

Z95 = 1.959963984540054


@dataclass(frozen=True)
class Figure:
    """A number printed in the paper, with where, and the decimals it was printed to."""

    value: float
    where: str
    decimals: int

    @property
    def half_unit(self) -> float:
        return 0.5 * 10.0 ** -self.decimals


@dataclass(frozen=True)
class Check:
    """A printed figure a preset reproduces without having used it; ``compute`` maps components to it."""

    what: str
    figure: Figure
    compute: Callable[[dict[str, float]], float]


@dataclass(frozen=True)
class Preset(Result):
    """One item set's relative-error components (0-5 scale) derived from the paper's printed figures."""

    name: str
    title: str
    native_items: int
    inputs: dict[str, Figure]
    derive: Callable[[dict[str, float]], dict[str, float]]
    checks: tuple[Check, ...] = ()
    assumption: str = ""
    scale: tuple[float, float] = (0.0, 5.0)
    source: str = "Ask Which, Not How Good: Sizing Benchmarks Scored by an LLM (arXiv 2609.27787)"
    judges: int = 9  # the panel the components were measured on
    systems: int = 42
    values: dict[str, float] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", self.derive({k: f.value for k, f in self.inputs.items()}))

    def components(self, items: int | None = None, judges: int = 1, replicates: int = 1,
                   systems: int | None = None) -> VarianceComponents:
        """The preset as components of a design of ``items`` (native by default) x ``judges`` x ``replicates``."""
        levels = {"system": systems or self.systems, "item": items or self.native_items, "judge": judges}
        return VarianceComponents.from_values(self.values, levels, replicates, object="system")

    def check_range(self, check: Check) -> tuple[float, float]:
        """The values ``check`` can take over every rounding of the inputs (each +- half its last printed digit):
        what a reproduction of a printed figure from printed inputs can be held to."""
        names = list(self.inputs)
        out = []
        for signs in itertools.product((-1.0, 1.0), repeat=len(names)):
            shifted = {n: self.inputs[n].value + s * self.inputs[n].half_unit for n, s in zip(names, signs,
                                                                                              strict=True)}
            out.append(check.compute(self.derive(shifted)))
        return min(out), max(out)

    def floors(self) -> dict[str, float]:
        """One judge, one run: the MDD_95 at 30 items and at the native count (sizing eq. 3), and the
        single-judge ceiling E rho^2 = sigma2_s / (sigma2_s + sigma2_sj) (sizing eq. 4)."""
        v = self.values
        return {"mdd_30_items": mdd95(v, 30), "mdd_native_items": mdd95(v, self.native_items),
                "ceiling": v["system"] / (v["system"] + v["system:judge"])}

    def to_dict(self) -> dict:
        return {"name": self.name, "title": self.title, "native_items": self.native_items, "scale": list(self.scale),
                "components": dict(self.values), "source": self.source, "assumption": self.assumption,
                "inputs": {k: {"value": f.value, "where": f.where} for k, f in self.inputs.items()},
                "checks": [{"what": c.what, "printed": c.figure.value, "where": c.figure.where,
                            "reproduced": c.compute(self.values), "range_from_rounding": list(self.check_range(c))}
                           for c in self.checks],
                "floors": self.floors()}


def _delta(v: dict[str, float], items: float, judges: float = 1, reps: float = 1) -> float:
    """sigma2_delta, sizing eq. 2."""
    return (v["system:item"] / items + v["system:judge"] / judges + v["system:item:judge"] / (items * judges)
            + v[RESIDUAL] / (items * judges * reps))


def mdd95(v: dict[str, float], items: float, judges: float = 1, reps: float = 1) -> float:
    """MDD_95 = 1.96 sqrt(2 sigma2_delta), sizing eq. 3."""
    return Z95 * math.sqrt(2.0 * _delta(v, items, judges, reps))


def erho2(v: dict[str, float], items: float, judges: float = 1, reps: float = 1) -> float:
    return v["system"] / (v["system"] + _delta(v, items, judges, reps))


def judges_needed(v: dict[str, float], target: float = 0.8, items: float = 30, reps: float = 3) -> float:
    """The least judge count reaching E rho^2 >= target (Table 1's last column: 30 items, 3 replicates)."""
    for n in range(1, 10_000):
        if erho2(v, items, n, reps) >= target:
            return float(n)
    return math.inf


def _from_mdd(mdd: float) -> float:
    """sigma2_delta from a printed MDD_95 (eq. 3 inverted)."""
    return (mdd / Z95) ** 2 / 2.0


def _split(total: float, si: float) -> tuple[float, float]:
    """sigma2_sij and sigma2_e from their sum, in MT-Bench's proportion."""
    rest = max(total - si, 0.0)
    return rest * _MT_SIJ_SHARE, rest * (1.0 - _MT_SIJ_SHARE)


def _mt_bench(x: dict[str, float]) -> dict[str, float]:
    d30 = _from_mdd(x["mdd30"])
    s = x["erho2_30"] / (1.0 - x["erho2_30"]) * d30
    sj = s * (1.0 / x["ceiling"] - 1.0)
    r = 30.0 * (d30 - sj)
    return {"system": s, "system:item": x["si"], "system:judge": sj, "system:item:judge": x["sij"],
            RESIDUAL: r - x["si"] - x["sij"]}


def _screened(x: dict[str, float]) -> dict[str, float]:
    s = x["s"]
    sj = s * (1.0 / x["ceiling"] - 1.0)
    r = 30.0 * (_from_mdd(x["mdd30"]) - sj)
    return {"system": s, "system:item": x["si"], "system:judge": sj, "system:item:judge": x["sij"],
            RESIDUAL: r - x["si"] - x["sij"]}


def _alpacaeval2(x: dict[str, float]) -> dict[str, float]:
    k = 1.0 / x["ceiling"] - 1.0
    q = 1.0 / x["erho2_153"] - 1.0  # sigma2_delta / sigma2_s at 1 judge and 153 items (= 2 judges at 30)
    r_per_s = 153.0 * (q - k)
    s = _from_mdd(x["mdd805"]) / (k + r_per_s / 805.0)
    sj, r = k * s, r_per_s * s
    # the same E rho^2 at 2 judges and 30 items: q s = si/30 + (sj + (r - si)/30) / 2
    si = 60.0 * (q * s - sj / 2.0) - r
    sij, e = _split(r, si)
    return {"system": s, "system:item": si, "system:judge": sj, "system:item:judge": sij, RESIDUAL: e}


def _arena_hard(x: dict[str, float]) -> dict[str, float]:
    mt = MT_BENCH.values
    r = mt["system:item"] + mt["system:item:judge"] + mt[RESIDUAL]
    sj = _from_mdd(x["mdd500"]) - r / 500.0
    s = sj / (1.0 / x["ceiling"] - 1.0)
    si = mt["system:item"]
    sij, e = _split(r, si)
    return {"system": s, "system:item": si, "system:judge": sj, "system:item:judge": sij, RESIDUAL: e}


MT_BENCH = Preset(
    "mt-bench", "MT-Bench (generic 0-5 rubric, nine judges)", 80,
    {"mdd30": Figure(0.63, "Table 2, generic rubric as collected: MDD at 30 items", 2),
     "erho2_30": Figure(0.463, "Table 2: E rho^2 at 30 items, one judge, one run", 3),
     "ceiling": Figure(0.600, "sec. 5.2 and Table 2: single-judge ceiling", 3),
     "si": Figure(0.286, "sec. 8 (Appendix B): sigma2_si", 3),
     "sij": Figure(0.267, "sec. 8 (Appendix B): sigma2_sij", 3)},
    _mt_bench,
    (Check("sigma2_s", Figure(0.044, "sec. 8 (Appendix B)", 3), lambda v: v["system"]),
     Check("MDD at the native 80 items, one judge", Figure(0.54, "sec. 5.6", 2), lambda v: mdd95(v, 80)),
     Check("judges for E rho^2 = 0.8 at 30 items, 3 replicates", Figure(25, "sec. 5.2 and Table 1", 0),
           judges_needed)),
    systems=42)

#: sigma2_sij / (sigma2_sij + sigma2_e) where the text prints only their sum: MT-Bench's (sec. 8 and Table 2)
_MT_SIJ_SHARE = MT_BENCH.values["system:item:judge"] / (MT_BENCH.values["system:item:judge"]
                                                        + MT_BENCH.values[RESIDUAL])

SCREENED = Preset(
    "screened", "The paper's discrimination-screened item set", 30,
    {"s": Figure(0.456, "sec. 8 (Appendix B): sigma2_s", 3),
     "si": Figure(0.474, "sec. 8 (Appendix B): sigma2_si", 3),
     "sij": Figure(0.683, "sec. 8 (Appendix B): sigma2_sij", 3),
     "ceiling": Figure(0.746, "sec. 5.2: single-judge ceiling", 3),
     "mdd30": Figure(1.24, "sec. 5.6 and sec. 5.1: MDD at 30 items", 2)},
    _screened,
    (Check("MDD floor at infinite items, one judge", Figure(1.09, "sec. 5.2 (the largest floor)", 2),
           lambda v: Z95 * math.sqrt(2 * v["system:judge"])),
     Check("judges for E rho^2 = 0.8 at 30 items, 3 replicates", Figure(2, "sec. 5.2 and Table 1", 0),
           judges_needed)),
    systems=59)

ALPACAEVAL2 = Preset(
    "alpacaeval2", "AlpacaEval 2 (generic 0-5 rubric, nine judges)", 805,
    {"ceiling": Figure(0.706, "sec. 5.2: single-judge ceiling", 3),
     "erho2_153": Figure(0.666, "sec. 5.2: one judge at 153 items matches two judges at 30", 3),
     "mdd805": Figure(0.41, "sec. 5.6: floor at the native 805 items", 2)},
    _alpacaeval2,
    (Check("MDD at 30 items, one judge", Figure(0.58, "sec. 5.1 (the smallest of the four)", 2),
           lambda v: mdd95(v, 30)),
     Check("MDD floor at infinite items, one judge", Figure(0.40, "sec. 5.2 (the smallest floor)", 2),
           lambda v: Z95 * math.sqrt(2 * v["system:judge"])),
     Check("judges for E rho^2 = 0.8 at 30 items, 3 replicates", Figure(7, "sec. 5.2 and Table 1", 0),
           judges_needed)),
    assumption="sigma2_sij and sigma2_e split in MT-Bench's proportion (the text prints their sum only).")

ARENA_HARD = Preset(
    "arena-hard", "Arena-Hard (generic 0-5 rubric, nine judges)", 500,
    {"ceiling": Figure(0.792, "sec. 5.2: single-judge ceiling", 3),
     "mdd500": Figure(0.61, "sec. 5.6: floor at the native 500 items", 2)},
    _arena_hard,
    (Check("judges for E rho^2 = 0.8 at 30 items, 3 replicates", Figure(2, "sec. 5.2 and Table 1", 0),
           judges_needed),),
    assumption=("the text does not print Arena-Hard's item-level terms: R = sigma2_si + sigma2_sij + sigma2_e is "
                "MT-Bench's (0.659, which AlpacaEval 2's printed figures reproduce to three digits under the same "
                "rubric and panel), split as MT-Bench's. At 500 items R/500 is 3% of sigma2_delta, so the native "
                "floor hardly depends on it; the MDD at 30 items does."))



def _pairwise(x: dict[str, float]) -> dict[str, float]:
    # sigma2_delta(n) = sigma2_sj + R / n at one judge, from the floors at 30 and 500 items (win-rate units);
    # at two judges sigma2_si / n + sigma2_sij / (2 n) + sigma2_sj / 2, so the floor at 500 items and two judges
    # splits R = sigma2_si + sigma2_sij
    d30, d500 = _from_mdd(x["mdd30"]), _from_mdd(x["mdd500"])
    r = (d30 - d500) / (1.0 / 30.0 - 1.0 / 500.0)
    sj = d30 - r / 30.0
    si = 2 * 500 * (_from_mdd(x["mdd500_2j"]) - sj / 2) - r
    return {"system": x["s"], "system:item": si, "system:judge": sj, "system:item:judge": r - si, RESIDUAL: 0.0}


PAIRWISE = Preset(
    "pairwise", "Pairwise preference against a fixed baseline, both orders (win-rate units, 0-1)", 805,
    {"s": Figure(0.0801, "Table 3, balanced: sigma2_s", 4),
     "mdd30": Figure(0.191, "Table 3: floor 19.1 points at 30 items, one judge", 3),
     "mdd500": Figure(0.101, "Table 3: floor 10.1 points at 500 items", 3),
     "mdd500_2j": Figure(0.075, "sec. 5.4: 7.5 points at 500 items, two judges", 3)},
    _pairwise,
    (Check("sigma2_sj", Figure(0.00110, "Table 3, balanced", 5), lambda v: v["system:judge"]),
     Check("MDD at 805 items, one judge", Figure(0.098, "Table 3: 9.8 points at 805", 3), lambda v: mdd95(v, 805)),
     Check("E rho^2 at 24 items, one judge", Figure(0.934, "Table 3, balanced", 3), lambda v: erho2(v, 24)),
     Check("single-judge ceiling", Figure(0.986, "Table 3, balanced", 3),
           lambda v: v["system"] / (v["system"] + v["system:judge"])),
     Check("MDD at 805 items, two judges", Figure(0.071, "sec. 5.4: 7.1 points at 805, two judges", 3),
           lambda v: mdd95(v, 805, 2))),
    assumption=("the item-level part R (printed only through the floors) is split between sigma2_si and "
                "sigma2_sij by the two-judge floor at 500 items; replicates are not separated (the residual is in "
                "sigma2_sij), so more runs are not credited."),
    scale=(0.0, 1.0), judges=4, systems=11)

PRESETS: dict[str, Preset] = {p.name: p for p in (MT_BENCH, ARENA_HARD, ALPACAEVAL2, SCREENED, PAIRWISE)}


def preset(name: str) -> Preset:
    """A preset by name (``mt-bench``, ``arena-hard``, ``alpacaeval2``, ``screened``, ``pairwise``)."""
    try:
        return PRESETS[name.lower()]
    except KeyError:
        raise DesignError(f"unknown preset '{name}'; the presets are {', '.join(PRESETS)}.") from None
