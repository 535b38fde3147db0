"""Gold labels: what the judges get wrong together, and means corrected by a gold-labelled slice.

A G-study measures how much judges, prompts and replicates disagree; it cannot see an error they share. A slice
of the items scored by experts (the gold labels, chosen at random with known probabilities) can:

* **agreement** of every configuration (each judge, prompt variant, temperature, and the design's aggregate:
  the mean over all of a unit's cells) with the gold: bias (mean difference) with its interval, mean absolute
  error, correlation; accuracy and Cohen's kappa for 0/1 scores; and the components of the error on the gold
  slice (:func:`error_components`): the unit term is the error every judge makes on that unit, what more judges
  cannot fix;
* **corrected means** of the units (items, or a system's responses): prediction-powered inference with power
  tuning (PPI++, Angelopoulos, Duchi and Zrnic 2023, eq. 3 and Example 6.1: ``theta = mean(lam Yhat_unlabelled)
  + mean(Y - lam Yhat_gold)``, ``lam`` estimated to minimise the variance, clipped to [0, 1]), the
  design-based doubly robust pseudo-outcome of DSL (Egami, Hinck, Stewart and Wei 2023, eq. 3:
  ``Ytilde = Yhat + R (Y - Yhat) / pi`` with known sampling probabilities ``pi``, any design of the gold slice,
  stratified included), and the gold-only mean beside them.

The prediction of a unit is the design's aggregate over its judges x variants x replicates: more judges and
variants shrink its variance (the TEE components say by how much), the gold corrects its bias. Pure: arrays and
frames in, results out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .errors import DataError
from .results import Result, json_safe

#: the facets whose levels are compared with the gold one by one (as configurations)
CONFIGURATION_FACETS = ("judge", "variant", "temperature", "prompt", "prompt_variant")
#: the columns of an agreement table, in the order they are shown (those a table has)
AGREEMENT_COLUMNS = ("facet", "level", "units", "bias", "bias_low", "bias_high", "mae", "correlation", "accuracy",
                     "kappa", "alpha")


def _keys_as_text(frame: pd.DataFrame, keys: tuple[str, ...]) -> pd.DataFrame:
    """``frame`` with its unit keys as text: the judgments' and the gold file's item '7' and 7 are one unit."""
    return frame.assign(**{k: frame[k].astype(str) for k in keys})


def _z(level: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(0.5 + level / 2)


@dataclass(frozen=True)
class GoldEstimate(Result):
    """A mean with its interval: ``method`` is ``PPI++``, ``DSL``, ``gold only`` or ``judges only``."""

    method: str
    estimate: float
    se: float
    low: float
    high: float
    level: float
    n_gold: int
    n_units: int
    lam: float | None = None  # PPI++'s power-tuning weight of the predictions (0: gold only, 1: plain PPI)
    group: str | None = None  # the object's level this mean is of (None: all units)

    def to_dict(self) -> dict[str, Any]:
        return json_safe({"group": self.group, "method": self.method, "estimate": self.estimate, "se": self.se,
                          "low": self.low, "high": self.high, "level": self.level, "n_gold": self.n_gold,
                          "n_units": self.n_units, "lam": self.lam})


def _interval(method: str, estimate: float, se: float, level: float, n_gold: int, n_units: int,
              **extra) -> GoldEstimate:
    q = _z(level)
    return GoldEstimate(method, float(estimate), float(se), float(estimate - q * se), float(estimate + q * se),
                        level, n_gold, n_units, **extra)


def ppi_mean(y, yhat, yhat_unlabelled, *, level: float = 0.95, lam: float | None = None) -> GoldEstimate:
    """The PPI++ mean (Angelopoulos, Duchi and Zrnic 2023, "PPI++", eq. 3 with the mean's loss; Example 6.1):
    ``theta = mean(lam yhat_unlabelled) + mean(y - lam yhat)`` over gold units (``y``, ``yhat``) and the units
    without gold (``yhat_unlabelled``), its normal interval from ``var(lam yhat_unlabelled) / N + var(y - lam yhat)
    / n`` (variances with divisor n). ``lam`` None is power-tuned: ``cov(y, yhat) / ((1 + n / N) var(yhat))``
    (covariance with divisor n; the variance over all predictions, divisor n + N - 1), clipped to [0, 1];
    ``lam = 0`` is the gold-only mean, ``lam = 1`` plain PPI. Gold units are a uniform random sample."""
    y, yhat, rest = (np.asarray(v, dtype=float).ravel() for v in (y, yhat, yhat_unlabelled))
    n, big_n = y.size, rest.size
    if n < 2 or big_n < 1:
        raise DataError(f"PPI needs at least two gold units and one without gold (got {n} and {big_n}).")
    if lam is None:
        cov = float(np.mean((y - y.mean()) * (yhat - yhat.mean())))
        var = float(np.var(np.concatenate([yhat, rest]), ddof=1))
        lam = float(np.clip(cov / ((1 + n / big_n) * var), 0.0, 1.0)) if var > 0 else 0.0
    estimate = float(np.mean(lam * rest) + np.mean(y - lam * yhat))
    se = math.sqrt(float(np.var(lam * rest)) / big_n + float(np.var(y - lam * yhat)) / n)
    return _interval("PPI++", estimate, se, level, n, n + big_n, lam=lam)


def dsl_mean(prediction, gold, probability, *, level: float = 0.95) -> GoldEstimate:
    """The design-based doubly robust mean of DSL (Egami, Hinck, Stewart and Wei 2023, eq. 3, the mean as the
    outcome model ``Y ~ 1``): every unit's pseudo-outcome ``Ytilde = prediction + R (gold - prediction) / pi`` (R:
    the unit has a gold label, ``pi`` its known probability of being chosen for gold), their mean, and the
    sandwich standard error ``sqrt(sum (Ytilde - mean)^2) / N``. Unbiased whatever the predictions' error,
    for any gold design whose probabilities are known (uniform, stratified). The prediction is its own outcome
    model here (DSL's ``g`` is the design's aggregate, fixed): the R package ``dsl`` instead learns ``g`` from the
    prediction and other features by cross-fitted random forests, which gives a shorter interval when the
    prediction's error depends on them, and rescales the probabilities to the gold share."""
    prediction, gold, probability = (np.asarray(v, dtype=float).ravel() for v in (prediction, gold, probability))
    labelled = ~np.isnan(gold)
    if labelled.sum() < 2:
        raise DataError("DSL needs at least two gold units.")
    pseudo = prediction.copy()
    pseudo[labelled] += (gold[labelled] - prediction[labelled]) / probability[labelled]
    estimate = float(pseudo.mean())
    se = math.sqrt(float(np.sum((pseudo - estimate) ** 2))) / pseudo.size
    return _interval("DSL", estimate, se, level, int(labelled.sum()), int(pseudo.size))


def gold_only_mean(y, *, level: float = 0.95, n_units: int | None = None) -> GoldEstimate:
    """The classical mean of the gold labels alone, normal interval with the divisor-n SD (as PPI's baseline)."""
    y = np.asarray(y, dtype=float).ravel()
    return _interval("gold only", float(y.mean()), float(np.std(y)) / math.sqrt(y.size), level, y.size,
                     n_units or y.size)


def judges_only_mean(prediction, *, level: float = 0.95, n_gold: int = 0) -> GoldEstimate:
    """The units' mean of the design's aggregate with its item-sampling interval: what the judges alone say,
    however biased they are together."""
    p = np.asarray(prediction, dtype=float).ravel()
    return _interval("judges only", float(p.mean()), float(np.std(p, ddof=1)) / math.sqrt(p.size), level, n_gold,
                     p.size)


@dataclass(frozen=True)
class GoldSlice:
    """Gold labels joined to the judgments' units: ``units`` has one row per unit (the ``keys``: the object and
    the item, or the item), its ``prediction`` (the design's aggregate), ``gold`` (NaN without one) and
    ``probability`` (of being chosen for gold; NaN without gold)."""

    units: pd.DataFrame
    keys: tuple[str, ...]
    group: str | None  # the object facet (one estimate per level), or None
    notes: tuple[str, ...] = ()


def join_gold(frame: pd.DataFrame, gold: pd.DataFrame, *, score: str = "score", object_facet: str | None = None,
              gold_column: str = "gold", probability_column: str = "probability", source: str = "the gold file",
              probability: float | None = None) -> GoldSlice:
    """The units of ``frame`` (judgments: item, the object's column when it has several levels, the scores) with
    the design's aggregate as their prediction, joined to ``gold`` (rows of the same key columns, a ``gold``
    score, optionally a ``probability`` of having been chosen). Without probabilities the gold units are a uniform
    sample: ``probability`` if given, else the gold share of the units. Refuses, naming the rows: a gold score that
    is not a number, a gold row whose unit is not in the judgments, a probability outside (0, 1], a missing key
    column."""
    group = (object_facet if object_facet and object_facet != "item" and object_facet in frame
             and frame[object_facet].nunique() > 1 else None)  # items measured themselves: one group
    keys = tuple(k for k in (group, "item") if k)
    missing = [k for k in (*keys, gold_column) if k not in gold]
    if missing:
        raise DataError(f"{source}: no column {', '.join(repr(m) for m in missing)}; a gold file has the units' "
                        f"key columns ({', '.join(keys)}) and a '{gold_column}' column (name another with "
                        "--gold-column).")
    rows = gold.reset_index(drop=True)
    values = pd.to_numeric(rows[gold_column], errors="coerce")
    bad = np.flatnonzero(values.isna() & rows[gold_column].notna())
    if bad.size:
        raise DataError(f"{source}: column '{gold_column}' is not a number on row(s) "
                        f"{', '.join(str(r + 1) for r in bad[:5])} ({rows[gold_column].iloc[bad[0]]!r}); gold scores "
                        "are on the judgments' scale (0/1 for a binary verdict).")
    scored = frame.dropna(subset=[score])
    units = (_keys_as_text(scored, keys)
             .groupby(list(keys), observed=True, sort=True)[score].mean().rename("prediction").reset_index())
    labelled = _keys_as_text(rows, keys).assign(gold=values)
    labelled = labelled[labelled["gold"].notna()]
    repeated = labelled.duplicated(list(keys), keep=False)
    if repeated.any():
        where = labelled.index[np.flatnonzero(repeated.to_numpy())]
        raise DataError(f"{source}: row(s) {', '.join(str(r + 1) for r in where[:5])} give the "
                        "same unit more than one gold score; keep one (or their mean) per unit.")
    known = labelled.merge(units[list(keys)], on=list(keys), how="left", indicator=True)["_merge"] == "both"
    if not known.all():
        where = np.flatnonzero(~known.to_numpy())
        first = labelled.iloc[where[0]]
        raise DataError(f"{source}: row(s) {', '.join(str(labelled.index[r] + 1) for r in where[:5])} are units the "
                        f"judgments do not have (e.g. {', '.join(f'{k}={first[k]}' for k in keys)}); every gold unit "
                        "must have been judged.")
    columns = [*keys, "gold"]
    if probability_column in labelled:
        p = pd.to_numeric(labelled[probability_column], errors="coerce")
        wrong = np.flatnonzero(~((p > 0) & (p <= 1)).to_numpy())
        if wrong.size:
            raise DataError(f"{source}: column '{probability_column}' must be a probability in (0, 1] on every gold "
                            f"row; row(s) {', '.join(str(labelled.index[r] + 1) for r in wrong[:5])} are not "
                            "(a unit chosen with probability 0 could not have been chosen).")
        labelled = labelled.assign(probability=p.to_numpy())
        columns.append("probability")
    units = units.merge(labelled[columns], on=list(keys), how="left")
    notes = []
    if "probability" not in units:
        share = units["gold"].notna().mean()
        if probability is not None and not 0 < probability <= 1:
            raise DataError(f"the gold sampling probability must be in (0, 1]; got {probability}.")
        units["probability"] = np.where(units["gold"].notna(), probability or share, np.nan)
        notes.append(f"the gold units are taken as a uniform random sample of the units (probability "
                     f"{probability or share:.4g}); give a '{probability_column}' column for another design.")
    return GoldSlice(units, keys, group, tuple(notes))


@dataclass(frozen=True)
class GoldAnalysis(Result):
    """Agreement of every configuration with the gold, the error's components on the gold slice, and each
    group's corrected means (:func:`gold_analysis`)."""

    estimates: list[GoldEstimate]
    agreement: pd.DataFrame
    error_components: Any  # VarianceComponents of (score - gold) on the gold units, or None
    gold_variance: float
    notes: list[str] = field(default_factory=list)
    #: what :func:`panel_plan` needs from the gold slice (covariance, variances, error terms, observed counts)
    panel: dict | None = None

    #: one row per unit: its keys, the design's aggregate, the gold score (NaN without one), its probability
    units: pd.DataFrame | None = None

    def export(self) -> pd.DataFrame:
        """One row per unit in the layout DSL's R package (``dsl(predicted_var = "gold", prediction =
        "prediction", sample_prob = "sample_prob", data = ...)``) and ``ppi_py`` (``Y`` = gold where ``labeled``,
        ``Yhat`` = prediction) take: the keys, ``prediction``, ``gold`` (empty without one), ``labeled`` (0/1) and
        ``sample_prob`` (each unit's chance of a gold label; empty for a unit without gold when the gold design was
        not uniform, which DSL then needs from its design)."""
        if self.units is None:
            raise DataError("this gold analysis kept no units to export.")
        out = self.units.copy()
        out["labeled"] = out["gold"].notna().astype(int)
        probability = out["probability"]
        if probability.dropna().nunique() <= 1 and probability.notna().any():  # uniform: every unit's chance
            probability = probability.fillna(float(probability.dropna().iloc[0]))
        out["sample_prob"] = probability
        return out.drop(columns="probability")

    def plan(self, *, cost_gold: float, cost_call: float, budget: float | None = None,
             target_se: float | None = None, **options) -> pd.DataFrame:
        """Gold labels priced against judge calls at ``budget``, or for the mean's SE ``target_se``
        (:func:`panel_plan` on this gold slice; at most the units there are, unless ``n_max`` says otherwise)."""
        if self.panel is None:
            raise DataError("the gold slice is too small to plan from (fewer than three gold units, or no error "
                            "components).")
        return plan_from(self.panel, cost_gold=cost_gold, cost_call=cost_call, budget=budget, target_se=target_se,
                         **options)

    def to_dict(self) -> dict[str, Any]:
        comps = self.error_components
        return json_safe({
            "estimates": [e.to_dict() for e in self.estimates],
            "agreement": self.agreement.to_dict(orient="records"),
            "error_components": None if comps is None else [
                {"component": c.name, "variance": c.variance} for c in comps.components],
            "gold_variance": self.gold_variance, "notes": list(self.notes),
            # what `evalgauge plan --gold` plans from (covariance, variances, error terms, observed counts)
            "panel": self.panel})

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame([e.to_dict() for e in self.estimates])


def agreement(frame: pd.DataFrame, units: pd.DataFrame, keys: tuple[str, ...], *, score: str = "score",
              level: float = 0.95) -> pd.DataFrame:
    """One row per configuration (each level of each configuration facet that varies, and the aggregate over all
    of a unit's cells) against the gold units: units compared, bias (mean of prediction - gold) with its t interval
    over units, mean absolute error, correlation; for 0/1 gold, accuracy, Cohen's kappa and Krippendorff's alpha
    of the prediction rounded at 0.5."""
    from scipy import stats

    gold = units.dropna(subset=["gold"])[[*keys, "gold"]]
    scored = _keys_as_text(frame.dropna(subset=[score]), keys)
    configs = [("aggregate", "all cells", scored)]
    for facet in CONFIGURATION_FACETS:
        if facet in scored and scored[facet].nunique() > 1:
            configs += [(facet, str(level_), part) for level_, part in scored.groupby(facet, observed=True)]
    binary = bool(gold["gold"].isin([0.0, 1.0]).all())
    rows = []
    for facet, name, part in configs:
        pred = part.groupby(list(keys), observed=True)[score].mean().rename("prediction").reset_index()
        both = gold.merge(pred, on=list(keys))
        diff = both["prediction"] - both["gold"]
        n = len(both)
        row = {"facet": facet, "level": name, "units": n, "bias": float(diff.mean()) if n else math.nan}
        if n >= 2:
            half = stats.t.ppf(0.5 + level / 2, n - 1) * float(diff.std(ddof=1)) / math.sqrt(n)
            row.update(bias_low=row["bias"] - half, bias_high=row["bias"] + half)
            row["correlation"] = (float(np.corrcoef(both["prediction"], both["gold"])[0, 1])
                                  if both["prediction"].std() > 0 and both["gold"].std() > 0 else math.nan)
        row["mae"] = float(diff.abs().mean()) if n else math.nan
        if binary and n:
            said = (both["prediction"] >= 0.5).astype(float)
            row["accuracy"] = float((said == both["gold"]).mean())
            row["kappa"] = cohen_kappa(said.to_numpy(), both["gold"].to_numpy())
            row["alpha"] = alpha_with_gold(said.to_numpy(), both["gold"].to_numpy())
        rows.append(row)
    return pd.DataFrame(rows)


def alpha_with_gold(said: np.ndarray, gold: np.ndarray) -> float:
    """Krippendorff's alpha (nominal) of a configuration's labels and the gold ones, two coders per unit
    (:func:`evalgauge.labels.krippendorff_nominal`)."""
    from .labels import krippendorff_nominal

    n = len(said)
    if n == 0:
        return math.nan
    units = np.concatenate([np.arange(n), np.arange(n)])
    return krippendorff_nominal(units, np.concatenate([np.asarray(said, dtype=object), np.asarray(gold, dtype=object)]))


def cohen_kappa(a: np.ndarray, b: np.ndarray) -> float:
    """Cohen's kappa of two raters' labels: (observed agreement - chance agreement) / (1 - chance agreement)."""
    a, b = np.asarray(a), np.asarray(b)
    labels = np.union1d(a, b)
    observed = float(np.mean(a == b))
    chance = float(sum(np.mean(a == k) * np.mean(b == k) for k in labels))
    return (observed - chance) / (1 - chance) if chance < 1 else math.nan


def error_components(frame: pd.DataFrame, units: pd.DataFrame, keys: tuple[str, ...], *, score: str = "score"):
    """The variance components of the judges' error (score - gold) on the gold units: the unit term is the error
    all of a unit's judges, variants and replicates share (what more of them cannot fix), the judge and variant
    terms their biases, the interactions and residual what averaging removes. None when the gold slice is too
    small to fit."""
    from .errors import EvalGaugeError
    from .estimate import estimate_components

    gold = units.dropna(subset=["gold"])[[*keys, "gold"]]
    rows = _keys_as_text(frame.dropna(subset=[score]), keys)
    rows = rows.merge(gold, on=list(keys))
    if rows.empty:
        return None
    rows[score] = rows[score].astype(float) - rows["gold"]
    rows = rows.drop(columns="gold")
    try:
        return estimate_components(rows, score=score, object=None)
    except EvalGaugeError:
        return None


def corrected_means(sliced: GoldSlice, *, level: float = 0.95) -> tuple[list[GoldEstimate], list[str]]:
    """Per group (each level of the object, or all units): the judges-only mean, PPI++ (when the gold units are a
    uniform sample), DSL and the gold-only mean; and the notes on what was left out and why."""
    units, notes = sliced.units, list(sliced.notes)
    uniform = units["probability"].dropna().nunique() <= 1
    if not uniform:
        notes.append("the gold units were chosen with unequal probabilities: PPI++ (which takes them as a uniform "
                     "sample) is left out; DSL weights each by its probability.")
    estimates = []
    groups = units.groupby(sliced.group, observed=True, sort=True) if sliced.group else [(None, units)]
    for name, part in groups:
        labelled = part["gold"].notna().to_numpy()
        label = None if name is None else str(name)
        estimates.append(replace_group(judges_only_mean(part["prediction"], level=level,
                                                        n_gold=int(labelled.sum())), label))
        if labelled.all():
            notes.append(f"{'every unit' if label is None else f'every unit of {label}'} has a gold score: the gold "
                         "mean is the estimate, the judges add nothing to it.")
            estimates.append(replace_group(gold_only_mean(part["gold"], level=level), label))
            continue
        if labelled.sum() < 2:
            notes.append(f"{label or 'the units'}: fewer than two gold units, no corrected mean.")
            continue
        if uniform:
            estimates.append(replace_group(ppi_mean(part.loc[labelled, "gold"], part.loc[labelled, "prediction"],
                                                    part.loc[~labelled, "prediction"], level=level), label))
        estimates.append(replace_group(dsl_mean(part["prediction"], part["gold"], part["probability"], level=level),
                                       label))
        estimates.append(replace_group(gold_only_mean(part.loc[labelled, "gold"], level=level,
                                                      n_units=len(part)), label))
    return estimates, notes


def gold_analysis(frame: pd.DataFrame, gold: pd.DataFrame, *, score: str = "score", object_facet: str | None = None,
                  level: float = 0.95, source: str = "the gold file", probability: float | None = None,
                  gold_column: str = "gold", probability_column: str = "probability") -> GoldAnalysis:
    """Everything the gold slice says (module docstring): per group (each level of the object, or all units), the
    judges-only mean, PPI++ (when the gold units are a uniform sample), DSL and the gold-only mean; the agreement
    of every configuration; the error's components on the gold slice."""
    frame = frame.assign(**{score: pd.to_numeric(frame[score], errors="coerce")})  # text scores from a CSV
    sliced = join_gold(frame, gold, score=score, object_facet=object_facet, gold_column=gold_column,
                       probability_column=probability_column, source=source, probability=probability)
    estimates, notes = corrected_means(sliced, level=level)
    units = sliced.units
    table = agreement(frame, units, sliced.keys, score=score, level=level)
    comps = error_components(frame, units, sliced.keys, score=score)
    gold_var = float(units["gold"].dropna().var(ddof=1)) if units["gold"].notna().sum() > 1 else math.nan
    return GoldAnalysis(estimates, table, comps, gold_var, notes, panel_inputs(frame, units, sliced.keys, comps,
                                                                            score=score), units)


def panel_inputs(frame: pd.DataFrame, units: pd.DataFrame, keys: tuple[str, ...], comps, *,
                 score: str = "score") -> dict | None:
    """From the gold slice: the prediction's covariance with the gold, both variances (divisor n - 1), the error's
    components by name, and the observed counts of the facets a unit's prediction averages over (judges,
    variants, temperatures; replicates per cell) for :func:`panel_plan`."""
    labelled = units.dropna(subset=["gold"])
    if comps is None or len(labelled) < 3:
        return None
    facets = [f for f in CONFIGURATION_FACETS if f in frame and frame[f].nunique() > 1]
    observed = {f: int(frame[f].nunique()) for f in facets}
    per_cell = frame.dropna(subset=[score]).groupby([*keys, *facets], observed=True).size()
    observed["replicate"] = max(round(float(per_cell.mean())), 1)
    return {"covariance": float(np.cov(labelled["gold"], labelled["prediction"])[0, 1]),
            "gold_variance": float(labelled["gold"].var(ddof=1)),
            "prediction_variance": float(labelled["prediction"].var(ddof=1)),
            "error_terms": {c.name: float(c.variance) for c in comps.components}, "observed": observed,
            "n_max": len(units)}  # the units there are: a plan predicts at most all of them


def replace_group(estimate: GoldEstimate, group: str | None) -> GoldEstimate:
    from dataclasses import replace

    return replace(estimate, group=group)


def gold_study(reps: int = 400, seed: int = 0, *, units: int = 1000, judges: int = 3, gold: int = 100,
               shared_bias: float = 0.3, judge_sd: float = 0.2, unit_error_sd: float = 0.5, noise_sd: float = 0.7,
               design: str = "uniform", level: float = 0.95) -> pd.DataFrame:
    """The Monte Carlo study of the corrected means: per replication ``units`` true scores (the harder half ~ N(2.5,
    0.75), the easier ~ N(3.5, 0.75): variance 1 about the estimand, the population mean 3), ``judges`` judges
    scoring each with a bias every judge shares (``shared_bias``), a bias of their own (SD ``judge_sd``), an error
    per unit that every judge makes (SD ``unit_error_sd``; twice as large on the harder half) and call noise
    (``noise_sd``); the prediction is the judges' mean. Gold scores (the truth) on ``gold`` units drawn at random
    (``design="uniform"``) or ``"stratified"`` (the harder half at four times the easier half's rate, the same
    expected count; the gold-only mean, unweighted, then leans to the harder half). One row per method: coverage of
    3, mean half-width, and the half-width relative to the gold-only interval's."""
    rng = np.random.default_rng(seed)
    hard = np.arange(units) < units // 2
    rows = []
    for _ in range(reps):
        truth = rng.normal(np.where(hard, 2.5, 3.5), math.sqrt(0.75))  # the harder half scores lower
        unit_error = rng.normal(0.0, unit_error_sd, units) * np.where(hard, 2.0, 1.0)
        scores = (truth[:, None] + shared_bias + rng.normal(0.0, judge_sd, judges)[None, :] + unit_error[:, None]
                  + rng.normal(0.0, noise_sd, (units, judges)))
        prediction = scores.mean(axis=1)
        if design == "uniform":
            probability = np.full(units, gold / units)
        else:  # the harder half at four times the easier half's rate, `gold` units expected in all
            rate = gold / (units / 2 * (4 + 1))
            probability = np.where(hard, 4 * rate, rate)
        chosen = rng.random(units) < probability
        y = np.where(chosen, truth, np.nan)
        estimates = [judges_only_mean(prediction, level=level), dsl_mean(prediction, y, probability, level=level),
                     gold_only_mean(truth[chosen], level=level, n_units=units)]
        if design == "uniform":
            estimates.append(ppi_mean(truth[chosen], prediction[chosen], prediction[~chosen], level=level))
        for e in estimates:
            rows.append({"method": e.method, "covered": e.low <= 3.0 <= e.high, "half_width": (e.high - e.low) / 2})
    table = pd.DataFrame(rows).groupby("method", sort=False).agg(coverage=("covered", "mean"),
                                                                 half_width=("half_width", "mean")).reset_index()
    base = table.loc[table["method"] == "gold only", "half_width"].iloc[0]
    table["width_vs_gold_only"] = table["half_width"] / base
    table["reps"] = reps
    return table


@dataclass(frozen=True)
class GoldPlan(Result):
    """How many gold labels (``n``) and units with predictions only (``N``) to buy: PPI's variance at ``n`` gold
    and ``n + N`` predicted units is that of ``effective_n`` gold labels alone (``correlation``: the prediction's
    with the gold). ``judges`` and ``replicates`` the panel that makes each unit's prediction (None: one fixed
    prediction)."""

    n: int
    N: int  # ppi_py's name: units with a prediction and no gold
    cost: float
    effective_n: int
    correlation: float
    judges: int | None = None
    replicates: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return json_safe({"gold": self.n, "predicted_only": self.N, "cost": self.cost,
                          "effective_n": self.effective_n, "correlation": self.correlation, "judges": self.judges,
                          "replicates": self.replicates})


def prediction_correlation(y, yhat) -> float:
    """The correlation of the predictions with the gold scores (divisor n), capped at 1 - 1/n: what PPI's power
    rests on (as ``ppi_py``'s power analysis measures it)."""
    y, yhat = np.asarray(y, dtype=float).ravel(), np.asarray(yhat, dtype=float).ravel()
    dy, dp = y - y.mean(), yhat - yhat.mean()
    rho = float(np.mean(dy * dp) / math.sqrt(np.mean(dy * dy) * np.mean(dp * dp)))
    return min(rho, 1 - 1 / y.size)


def gold_power(correlation: float, cost_gold: float, cost_prediction: float, *, budget: float | None = None,
               effective_n: float | None = None, n_max: int | None = None) -> GoldPlan:
    """The cheapest (``effective_n``) or most precise (``budget``) mix of gold labels and predicted units for a mean
    by PPI with power tuning (Angelopoulos, Duchi and Zrnic 2023; the mixed-subjects design of Broska, Howes and
    van Loon 2024): with correlation rho between prediction and gold, n gold labels among n + N predicted units
    are worth ``n (n + N) / (n + (1 - rho^2) N)`` gold labels alone. At the optimum one effective label costs
    ``c_gold (1 - rho^2 + g rho^2 + 2 sqrt(g rho^2 (1 - rho^2)))`` (``g = c_prediction / c_gold``), with ``n = n0
    (1 - rho^2 + sqrt(g rho^2 (1 - rho^2)))`` and ``N = n (n0 - n) / (n - (1 - rho^2) n0)`` for ``n0`` effective
    labels; gold alone when that is cheaper. ``n_max`` caps the units (n + N). Equal to ``ppi_py``'s
    ``ppi_mean_power`` given the same correlation."""
    if budget is None and effective_n is None:
        raise DataError("gold planning needs a budget or an effective number of gold labels.")
    if not -1 < correlation < 1:
        raise DataError(f"the prediction's correlation with the gold must be between -1 and 1 (got {correlation}).")
    r2 = correlation**2
    g = cost_prediction / cost_gold
    per_effective = cost_gold * (1 - r2 + g * r2 + 2 * math.sqrt(g * r2 * (1 - r2)))

    def plan(n: float, big_n: float) -> GoldPlan:
        n, big_n = round(n), round(big_n)
        eff = round(n * (n + big_n) / (n + (1 - r2) * big_n)) if n + big_n else 0
        return GoldPlan(n, big_n, n * cost_gold + (n + big_n) * cost_prediction, eff, correlation)

    def gold_alone(n: float) -> GoldPlan:
        n = round(n)
        return GoldPlan(n, 0, n * cost_gold, n, correlation)

    n0 = budget / per_effective if budget is not None else effective_n
    n = n0 * (1 - r2 + math.sqrt(g * r2 * (1 - r2)))
    big_n = n * (n0 - n) / (n - (1 - r2) * n0) if correlation != 0 else 0.0
    best = plan(n, big_n)
    if cost_gold < per_effective or best.N < 0:
        best = gold_alone(budget / cost_gold if budget is not None else n0)
    if n_max is None or best.n + best.N <= n_max:
        return best
    if budget is not None:
        if n_max * cost_gold <= budget:
            return gold_alone(n_max)
        n = round(budget / cost_gold - n_max * g)
        return plan(n, n_max - n)
    if effective_n > n_max:
        return gold_alone(n_max)
    n = round(n0 * n_max * (1 - r2) / (n_max - r2 * n0))
    return plan(n, n_max - n)


def panel_correlation(covariance: float, gold_variance: float, prediction_variance: float,
                      error_terms: dict[str, float], observed: dict[str, int], planned: dict[str, int]) -> float:
    """The correlation with the gold of a unit's prediction averaged over another panel: the error terms of the
    gold slice (:func:`error_components`: ``item`` shared by every cell of a unit, ``item:judge``, ``item:variant``
    and ``residual`` averaged over the judges, variants and replicates that hold them) rescaled from the
    ``observed`` counts (judge, variant, replicate, ...) to the ``planned`` ones; the covariance with the gold is
    the observed one (averaging removes noise, not signal). Terms without the unit are constant across units and
    leave the correlation alone."""

    def averaged(counts: dict[str, int]) -> float:
        total = 0.0
        for name, variance in error_terms.items():
            facets = [f for f in name.split(":") if f != "item"]
            if name != "residual" and "item" not in name.split(":"):
                continue
            if name == "residual":
                facets = list(counts)
            total += max(variance, 0.0) / math.prod(counts.get(f, 1) for f in facets)
        return total

    variance = prediction_variance - averaged(observed) + averaged(planned)
    rho = covariance / math.sqrt(gold_variance * max(variance, 1e-300))
    return float(np.clip(rho, -0.999999, 0.999999))


def panel_plan(covariance: float, gold_variance: float, prediction_variance: float, error_terms: dict[str, float],
               observed: dict[str, int], *, cost_gold: float, cost_call: float, budget: float | None = None,
               target_se: float | None = None, judges: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 8),
               replicates: tuple[int, ...] = (1, 2, 3), variants: tuple[int, ...] | None = None,
               n_max: int | None = None) -> pd.DataFrame:
    """Gold labels priced against judge calls: for every panel (``judges`` x ``variants`` x ``replicates``, the
    other facets at their observed counts) the prediction's correlation with the gold (:func:`panel_correlation`),
    its cost per unit (calls x ``cost_call``) and the mix of gold labels and predicted units (:func:`gold_power`)
    that is best at ``budget``, or cheapest for the mean's SE ``target_se`` (worth ``gold_variance / target_se^2``
    gold labels alone); with the effective number of gold labels the mix is worth and the SE it gives. Prompt
    variants are varied (default 1, 2, 3, 5) when the gold slice was judged under several, else kept at one. At a
    budget the best first; for a target the plans that reach it first, cheapest first."""
    _check_goal(budget, target_se, cost_gold, cost_call)
    needed = None if target_se is None else gold_variance / target_se**2
    rows = []
    for m, v, r, planned, per_unit in _panels(observed, judges, variants, replicates, cost_call):
        rho = panel_correlation(covariance, gold_variance, prediction_variance, error_terms, observed, planned)
        best = gold_power(rho, cost_gold, per_unit, budget=budget, effective_n=needed, n_max=n_max)
        rows.append({"judges": m, "variants": v, "replicates": r, "correlation": rho, "cost_per_unit": per_unit,
                     "gold": best.n, "predicted_only": best.N, "cost": best.cost, "effective_n": best.effective_n,
                     "se": math.sqrt(gold_variance / best.effective_n) if best.effective_n else math.inf})
    plans = pd.DataFrame(rows)
    if needed is None:
        return plans.sort_values("effective_n", ascending=False, kind="stable").reset_index(drop=True)
    # a plan's effective n is rounded: within half a label of the need reaches it
    plans["reaches"] = plans["effective_n"] >= math.floor(needed)
    return plans.sort_values(["reaches", "cost"], ascending=[False, True], kind="stable").reset_index(drop=True)


def _check_goal(budget: float | None, target_se: float | None, cost_gold: float, cost_call: float) -> None:
    if (budget is None) == (target_se is None):
        raise DataError("gold planning takes a budget or a target SE (one of them).")
    for name, value in (("gold label", cost_gold), ("judge call", cost_call)):
        if not (math.isfinite(value) and value > 0):
            raise DataError(f"the cost of a {name} must be a positive number (got {value}).")


def _panels(observed: dict[str, int], judges, variants, replicates, cost_call: float):
    """Every panel tried: (judges, variants, replicates, the planned counts, the cost per unit), the other facets
    at their observed counts; prompt variants 1, 2, 3, 5 when the slice was judged under several, else as seen."""
    if variants is None:
        variants = (1, 2, 3, 5) if observed.get("variant", 1) > 1 else (observed.get("variant", 1),)
    others = math.prod(v for k, v in observed.items() if k not in ("judge", "replicate", "variant"))
    for m in judges:
        for v in variants:
            for r in replicates:
                planned = {**observed, "judge": m, "variant": v, "replicate": r}
                if "variant" not in observed and v == 1:
                    del planned["variant"]
                yield m, v, r, planned, m * v * r * others * cost_call


def plan_from(panel: dict, *, cost_gold: float, cost_call: float, budget: float | None = None,
              target_se: float | None = None, **options) -> pd.DataFrame:
    """:func:`panel_plan` of a scored gold slice's inputs, or :func:`class_plan` of a labelled one's (``panel`` with
    ``classes``: each class's inputs); ``options`` (judges, variants, replicates, n_max) override the panel's."""
    if "classes" in panel:
        return class_plan(panel["classes"], cost_gold=cost_gold, cost_call=cost_call, budget=budget,
                          target_se=target_se, **{"n_max": panel.get("n_max"), **options})
    return panel_plan(**{**panel, **options}, cost_gold=cost_gold, cost_call=cost_call, budget=budget,
                      target_se=target_se)


def class_plan(panels: dict[str, dict], *, cost_gold: float, cost_call: float, budget: float | None = None,
               target_se: float | None = None, judges: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 8),
               replicates: tuple[int, ...] = (1, 2, 3), variants: tuple[int, ...] | None = None,
               n_max: int | None = None) -> pd.DataFrame:
    """Gold labels priced against judge calls for every class's share at once. The same units carry every class's
    gold label and prediction (its indicator's mean over the panel), so one plan, n gold labels among n + N
    predicted units, serves all classes, each worth ``n (n + N) / (n + (1 - rho_k^2) N)`` gold labels of its own
    (rho_k the class indicator's correlation with the gold, :func:`panel_correlation` on that class's slice). For
    every panel the whole numbers n and N are searched: at ``budget`` the plan whose worst class has the smallest
    SE, for ``target_se`` the cheapest plan giving every class that SE. ``correlation``, ``effective_n`` and ``se``
    are the worst class's (``class``)."""
    _check_goal(budget, target_se, cost_gold, cost_call)
    names = list(panels)
    observed = panels[names[0]]["observed"]
    variances = np.array([panels[k]["gold_variance"] for k in names])
    rows = []
    for m, v, r, planned, per_unit in _panels(observed, judges, variants, replicates, cost_call):
        rho = np.array([panel_correlation(p["covariance"], p["gold_variance"], p["prediction_variance"],
                                          p["error_terms"], observed, planned) for p in (panels[k] for k in names)])
        n, big_n, reaches = _class_mix(rho, variances, cost_gold, per_unit, budget, target_se, n_max)
        eff = n * (n + big_n) / (n + (1 - rho**2) * big_n) if n else np.zeros_like(rho)
        se = np.sqrt(variances / np.maximum(eff, 1e-300))
        worst = int(np.argmax(se))
        row = {"judges": m, "variants": v, "replicates": r, "correlation": float(rho[worst]),
               "cost_per_unit": per_unit, "gold": n, "predicted_only": big_n,
               "cost": n * cost_gold + (n + big_n) * per_unit, "effective_n": int(np.floor(eff[worst])),
               "se": float(se[worst]), "class": names[worst]}
        if target_se is not None:
            row["reaches"] = reaches
        rows.append(row)
    plans = pd.DataFrame(rows)
    if target_se is None:
        return plans.sort_values(["se", "cost"], kind="stable").reset_index(drop=True)
    return plans.sort_values(["reaches", "cost", "se"], ascending=[False, True, True],
                             kind="stable").reset_index(drop=True)


def _class_mix(rho: np.ndarray, variances: np.ndarray, cost_gold: float, per_unit: float, budget: float | None,
               target_se: float | None, n_max: int | None) -> tuple[int, int, bool]:
    """The whole numbers (n gold labels, N units predicted only) of :func:`class_plan` for one panel, and whether
    the target is reached (True at a budget)."""
    r2 = rho**2
    if budget is not None:
        top = int(budget // (cost_gold + per_unit))  # a gold unit is predicted too
        if n_max is not None:
            top = min(top, n_max)
        if top < 1:
            return 0, 0, True
        n = np.arange(1, top + 1, dtype=float)
        big_n = np.floor((budget - n * cost_gold) / per_unit + 1e-9) - n
        if n_max is not None:
            big_n = np.minimum(big_n, n_max - n)
        big_n = np.maximum(big_n, 0.0)
        eff = n[:, None] * (n + big_n)[:, None] / (n[:, None] + (1 - r2)[None, :] * big_n[:, None])
        worst = np.max(variances[None, :] / eff, axis=1)
        best = int(np.argmin(worst))
        return int(n[best]), int(big_n[best]), True
    need = variances / target_se**2
    top = math.ceil(need.max())
    if n_max is not None:
        top = min(top, n_max)
    n = np.arange(1, max(top, 1) + 1, dtype=float)[:, None]
    short = n < need[None, :]
    room = n - need[None, :] * (1 - r2)[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        each = np.where(short, np.where(room > 0, np.ceil(n * (need[None, :] - n) / room - 1e-9), np.inf), 0.0)
    big_n = each.max(axis=1)
    fits = np.isfinite(big_n) & ((n[:, 0] + big_n <= n_max) if n_max is not None else True)
    if not fits.any():  # the closest: as many gold labels as there are units
        last = float(n[-1, 0])
        return int(last), 0, False
    cost = np.where(fits, n[:, 0] * cost_gold + (n[:, 0] + big_n) * per_unit, np.inf)
    best = int(np.argmin(cost))
    return int(n[best, 0]), int(big_n[best]), True


def gold_label_analysis(frame: pd.DataFrame, gold: pd.DataFrame, *, label: str = "label",
                        classes: list[str] | None = None, object_facet: str | None = None, level: float = 0.95,
                        source: str = "the gold file", probability: float | None = None,
                        gold_column: str = "gold", probability_column: str = "probability") -> GoldAnalysis:
    """The gold slice of verdicts that are classes (a stance: favor / against / neutral): for each class k its
    share, from the indicator 1{label = k} as a score in 0-1 (the judges-only share, PPI++, DSL and the gold-only
    share, each a group of :class:`GoldEstimate`), and every configuration's agreement with the gold labels:
    accuracy, Cohen's kappa and Krippendorff's alpha of its modal label per unit (ties to the first class in
    order). A gold label
    outside the label set is refused, naming its rows."""
    labelled = frame.dropna(subset=[label])
    known = list(classes) if classes else sorted(labelled[label].astype(str).unique())
    rows = gold.reset_index(drop=True)
    if gold_column not in rows:
        raise DataError(f"{source}: no column '{gold_column}'; a gold file of labels has the units' key columns and "
                        f"a '{gold_column}' column of classes (name another with --gold-column).")
    given = rows[gold_column].where(rows[gold_column].isna(), rows[gold_column].astype(str).str.strip())
    outside = np.flatnonzero(given.notna() & ~given.isin(known))
    if outside.size:
        raise DataError(f"{source}: row(s) {', '.join(str(r + 1) for r in outside[:5])} give a gold label outside the "
                        f"label set ({given.iloc[outside[0]]!r}; the classes are {', '.join(known)}); fix the "
                        "label or name the classes the run used.")
    estimates, notes, units, panels = [], [], None, {}
    for k in known:
        scores = labelled.assign(__score=(labelled[label].astype(str) == k).astype(float))
        sliced = join_gold(scores, rows.assign(**{gold_column: (given == k).astype(float).where(given.notna())}),
                           score="__score", object_facet=object_facet, gold_column=gold_column,
                           probability_column=probability_column, source=source, probability=probability)
        means, said = corrected_means(sliced, level=level)
        estimates += [replace_group(e, k if e.group is None else f"{e.group}: {k}") for e in means]
        notes += [n for n in said if n not in notes]
        units = sliced.units if units is None else units
        # each class's indicator on the gold slice: what planning its share needs
        panels[k] = panel_inputs(scores, sliced.units, sliced.keys,
                                 error_components(scores, sliced.units, sliced.keys, score="__score"), score="__score")
    keys = tuple(c for c in units.columns if c not in ("prediction", "gold", "probability"))
    # a class no gold unit has (its indicator constant on the slice) cannot be planned from
    usable = {k: p for k, p in panels.items() if p is not None and p["gold_variance"] > 0}
    panel = {"classes": usable, "n_max": len(units)} if usable else None
    return GoldAnalysis(estimates, label_agreement(labelled, rows.assign(**{gold_column: given}), keys, label=label,
                                                   classes=known, gold_column=gold_column), None, math.nan, notes,
                        panel)


def label_agreement(frame: pd.DataFrame, gold: pd.DataFrame, keys: tuple[str, ...], *, label: str,
                    classes: list[str], gold_column: str = "gold") -> pd.DataFrame:
    """Accuracy and Cohen's kappa against the gold labels of the modal label per unit, for the aggregate over all
    cells and for each level of each configuration facet that varies."""
    order = {k: i for i, k in enumerate(classes)}
    truth = _keys_as_text(gold.dropna(subset=[gold_column]), keys)
    truth = truth[[*keys, gold_column]].rename(columns={gold_column: "__gold"})
    cells = _keys_as_text(frame, keys).assign(__label=frame[label].astype(str),
                         __rank=frame[label].astype(str).map(order))
    configs = [("aggregate", "all cells", cells)]
    for facet in CONFIGURATION_FACETS:
        if facet in cells and cells[facet].nunique() > 1:
            configs += [(facet, str(value), part) for value, part in cells.groupby(facet, observed=True)]
    rows = []
    for facet, name, part in configs:
        counts = part.groupby([*keys, "__rank"], observed=True).size().rename("n").reset_index()
        modal = counts.sort_values([*keys, "n", "__rank"], ascending=[True] * len(keys) + [False, True],
                                   kind="stable").drop_duplicates(list(keys))
        modal = modal.assign(__said=modal["__rank"].map(dict(enumerate(classes))))
        both = truth.merge(modal[[*keys, "__said"]], on=list(keys))
        n = len(both)
        rows.append({"facet": facet, "level": name, "units": n,
                     "accuracy": float((both["__said"] == both["__gold"]).mean()) if n else math.nan,
                     "kappa": cohen_kappa(both["__said"].to_numpy(), both["__gold"].to_numpy()) if n else math.nan,
                     "alpha": alpha_with_gold(both["__said"].to_numpy(), both["__gold"].to_numpy())})
    return pd.DataFrame(rows)
