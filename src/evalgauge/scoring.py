"""Planning the scoring method before paying for it: Likert, binary and pairwise under judge pathologies
(TEE E.3 and H), and item discrimination screening (sizing sec. 4 and App. F).

Scoring simulation. Items have latent quality q ~ N(0, 1). Every call sees q plus the same
per-observation noise e ~ N(0, sigma_noise^2) in every arm, so differences between arms come
from the structure of the comparison, not from noise (Peysakhovich et al. 2015). The Likert
arm then applies the five pathologies of E.3: central-tendency compression kappa (the rating
is pulled towards the midpoint), per-call anchoring noise sigma_anchor, scale-use
heterogeneity (each judge multiplies by exp(N(0, sigma_slope^2))), a nonlinear distortion
sign(x)|x|^gamma, and discretisation to k points. The binary arm labels an item positive when
q + e exceeds the quantile that gives the prevalence. The pairwise arm compares two items in
one call: anchoring is shared and cancels, the judge's slope multiplies both and keeps the
sign, and Bradley-Terry recovers the ranking. Each arm makes the same number of calls; the
outcome is Kendall's tau between the recovered and the true ranking.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from scipy import stats

from .errors import DesignError
from .results import Result, json_safe

if TYPE_CHECKING:
    from .components import VarianceComponents


@dataclass(frozen=True)
class ScoringCondition:
    kappa: float = 1.0
    sigma_anchor: float = 0.0
    sigma_slope: float = 0.0
    gamma: float = 1.0
    points: int = 7
    prevalence: float = 0.5


def _tau(estimate: np.ndarray, truth: np.ndarray) -> float:
    return float(stats.kendalltau(estimate, truth).statistic)


def simulate_scoring(condition: ScoringCondition, *, items: int = 50, judges: int = 3, calls_per_item: int = 6,
                     sigma_noise: float = 1.0, rng: np.random.Generator) -> dict[str, float]:
    """One replicate: Kendall tau of ranking recovery for the Likert, binary and pairwise arms."""
    from .pairwise import Battles, fit_bt

    q = rng.standard_normal(items)
    slope = np.exp(rng.normal(0.0, condition.sigma_slope, judges))
    per_judge = max(1, calls_per_item // judges)
    # Likert: every item rated per_judge times by each judge
    idx = np.repeat(np.arange(items), judges * per_judge)
    judge = np.tile(np.repeat(np.arange(judges), per_judge), items)
    x = q[idx] + rng.normal(0.0, sigma_noise, idx.size)
    x = np.sign(x) * np.abs(x) ** condition.gamma
    z = condition.kappa * slope[judge] * x + rng.normal(0.0, condition.sigma_anchor, idx.size)
    spread = math.sqrt(1 + sigma_noise**2)
    k = condition.points
    rating = np.clip(np.floor(stats.norm.cdf(z / spread) * k), 0, k - 1) + 1
    likert = np.bincount(idx, weights=rating, minlength=items) / np.bincount(idx, minlength=items)
    # binary at the given prevalence
    threshold = stats.norm.ppf(1 - condition.prevalence) * spread
    label = (q[idx] + rng.normal(0.0, sigma_noise, idx.size) > threshold).astype(float)
    binary = np.bincount(idx, weights=label, minlength=items) / np.bincount(idx, minlength=items)
    # pairwise, the same number of calls: each call compares two random items
    n_calls = idx.size
    a = rng.integers(0, items, n_calls)
    b = (a + rng.integers(1, items, n_calls)) % items
    pj = rng.integers(0, judges, n_calls)
    diff = (q[a] + rng.normal(0.0, sigma_noise, n_calls)) - (q[b] + rng.normal(0.0, sigma_noise, n_calls))
    win = (slope[pj] * diff > 0).astype(float)
    battles = Battles(tuple(str(i) for i in range(items)), a, b, win,
                      pd.DataFrame({"battle": np.arange(n_calls)}))
    theta = fit_bt(battles, reference="0", ties=False, se=False).theta
    return {"tau_likert": _tau(likert, q), "tau_binary": _tau(binary, q), "tau_pairwise": _tau(theta, q)}


@dataclass(frozen=True)
class ScoringStudy(Result):
    """TEE E.3's arms compared: ``results`` has one row per condition (its values, then each arm's mean Kendall
    tau ``tau_likert``/``tau_binary``/``tau_pairwise`` and Monte Carlo s.e. ``mc_se_*``); ``conditions`` names
    the condition columns swept; ``items``, ``judges``, ``calls_per_item`` and ``reps`` the design."""

    results: pd.DataFrame
    conditions: tuple[str, ...]
    items: int
    judges: int
    calls_per_item: int
    reps: int

    def to_dict(self) -> dict:
        return {"results": self.results.to_dict(orient="records"), "items": self.items, "judges": self.judges,
                "calls_per_item": self.calls_per_item, "reps": self.reps}

    def to_frame(self) -> pd.DataFrame:
        return self.results.copy()


def scoring_study(grid: dict[str, list], *, reps: int = 50, seed: int = 0, items: int = 50, judges: int = 3,
                  calls_per_item: int = 6, **kw) -> ScoringStudy:
    """Mean Kendall tau (and its Monte Carlo s.e.) per arm over every condition of ``grid`` (TEE E.3), each
    replicate :func:`simulate_scoring` with ``items``, ``judges``, ``calls_per_item`` and ``kw``."""
    names = list(grid)
    unknown = set(names) - set(ScoringCondition.__dataclass_fields__)
    if unknown:
        raise DesignError(f"unknown condition(s) {', '.join(sorted(unknown))}; use kappa, sigma_anchor, "
                          "sigma_slope, gamma, points, prevalence.")
    rng = np.random.default_rng(seed)
    rows = []
    for values in itertools.product(*(grid[n] for n in names)):
        cond = ScoringCondition(**dict(zip(names, values, strict=True)))
        taus = pd.DataFrame([simulate_scoring(cond, rng=rng, items=items, judges=judges,
                                              calls_per_item=calls_per_item, **kw) for _ in range(reps)])
        row = {**cond.__dict__}
        for arm in ("likert", "binary", "pairwise"):
            col = taus[f"tau_{arm}"]
            row[f"tau_{arm}"] = float(col.mean())
            row[f"mc_se_{arm}"] = float(col.std(ddof=1) / math.sqrt(reps))
        rows.append(row)
    return ScoringStudy(pd.DataFrame(rows), tuple(names), items, judges, calls_per_item, reps)


# ---------------------------------------------------------------------------
# Item discrimination screening
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Screening(Result):
    """Items screened for discrimination (:func:`screen_items`); with :meth:`with_components`, the variance
    components of all items and of the kept ones (each a fit, or why it could not be made)."""

    per_item: pd.DataFrame  # item, discrimination (between-system variance), selected
    split_half_rho: float
    split_half_range: tuple[float, float]
    threshold: float
    #: the number of random splits of the systems behind the stability figures
    splits: int = 0
    system: str = "system"
    item: str = "item"
    components_all: VarianceComponents | str | None = None
    components_selected: VarianceComponents | str | None = None

    @property
    def selected(self) -> list[str]:
        return self.per_item.loc[self.per_item["selected"], "item"].tolist()

    def with_components(self, all_items: VarianceComponents | str, selected: VarianceComponents | str
                        ) -> Screening:
        """The screening with the components fitted on all items and on the kept ones (a message where a fit
        failed)."""
        return replace(self, components_all=all_items, components_selected=selected)

    def shares(self, which: str) -> dict[str, float] | None:
        """Each component's share of the variance on ``which`` ("all" or "selected") items; None without a fit."""
        vc = self.components_all if which == "all" else self.components_selected
        return None if vc is None or isinstance(vc, str) else {c.name: vc.share(c.name) for c in vc.components}

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"threshold": self.threshold, "selected": self.selected,
                               "split_half_rho": self.split_half_rho,
                               "split_half_range": list(self.split_half_range),
                               "per_item": self.per_item.to_dict(orient="records")}
        for label, vc in (("all", self.components_all), ("selected", self.components_selected)):
            if isinstance(vc, str):
                out[f"components_{label}"] = {"unavailable": vc}
            elif vc is not None:
                out[f"components_{label}"] = {c.name: c.variance for c in vc.components}
                out[f"share_{label}"] = self.shares(label)
        return json_safe(out)

    def to_frame(self) -> pd.DataFrame:
        return self.per_item.copy()


def screen_items(frame: pd.DataFrame, *, system: str = "system", item: str = "item", score: str = "score",
                 threshold: float | None = None, keep: float | None = None, splits: int = 200,
                 seed: int = 0) -> Screening:
    """Per-item between-system variance from a pilot, a selection rule, and split-half stability.

    An item's discrimination is the variance across systems of its system means
    (averaged over judges and replicates): its contribution to sigma2_s (sizing
    sec. 4). Keep items at or above ``threshold`` (App. F used 1.0 on a 0-5 scale)
    or the top ``keep`` fraction. Split-half stability: split the systems at
    random into halves, rank the items by discrimination in each, and take
    Spearman's rho between the two rankings, ``splits`` times (App. A reports
    0.757, 95 % range 0.413-0.893, on the screened set).
    """
    for col in (system, item, score):
        if col not in frame:
            raise DesignError(f"screening needs a '{col}' column; the columns are {', '.join(frame.columns)}.")
    frame = frame.assign(**{score: pd.to_numeric(frame[score], errors="coerce")})
    table = frame.groupby([item, system], observed=True)[score].mean().unstack(system)
    if table.shape[1] < 4:
        raise DesignError("screening needs at least 4 systems (split-half stability splits them in two).")
    disc = table.var(axis=1, ddof=1)
    if threshold is None:
        q = 1 - (keep if keep is not None else 0.5)
        threshold = float(disc.quantile(q))
    per_item = pd.DataFrame({"item": disc.index.astype(str), "discrimination": disc.to_numpy()})
    per_item["selected"] = per_item["discrimination"] >= threshold
    rng = np.random.default_rng(seed)
    rhos = []
    cols = np.arange(table.shape[1])
    for _ in range(splits):
        perm = rng.permutation(cols)
        half = len(cols) // 2
        d1 = table.iloc[:, perm[:half]].var(axis=1, ddof=1)
        d2 = table.iloc[:, perm[half:]].var(axis=1, ddof=1)
        rhos.append(stats.spearmanr(d1, d2).statistic)
    rhos = np.array(rhos)
    return Screening(per_item.sort_values("discrimination", ascending=False).reset_index(drop=True),
                     float(np.nanmean(rhos)), (float(np.nanquantile(rhos, 0.025)), float(np.nanquantile(rhos, 0.975))),
                     threshold, splits, system, item)
