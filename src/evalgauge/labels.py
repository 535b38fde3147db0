"""Categorical labels (a stance: favor / against / neutral): each class's share with its honest interval, and
how judges, prompt variants and replicates agree on the labels.

A label is a class, not a number: averaging letter indices (favor = 0, against = 1, neutral = 2) says nothing.
What a social scientist asks is the share of texts labelled each class, with an interval that counts every
source of error. For class k the indicator 1{label = k} is a score in 0-1: its variance components (TEE eq. 1
on the indicator) give the share's full interval (TEE eq. 3, Satterthwaite df) beside the naive one, kept inside
0-1 (the interval of the logit, back-transformed, where the normal one would leave it;
:func:`evalgauge.inference.bounded_interval`). The shares add to 1 over the classes.

Agreement is Krippendorff's alpha for nominal data (Krippendorff 2004, ch. 11), across the levels of one facet
at a time: for the judges, each unit is one item under one variant, temperature and replicate, and each judge
gives one value in it; for the replicates, each unit is one item x judge x variant cell. The confusion between
two levels of a facet counts, over the units both labelled, each pair of labels they gave.

This module is pure: a frame in, a :class:`LabelAnalysis` out.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .errors import DesignError
from .results import Result, json_safe

#: the facets whose agreement is reported, when the data have several levels of them
AGREEMENT_FACETS = ("judge", "variant", "temperature", "replicate")


@dataclass(frozen=True)
class LabelAnalysis(Result):
    """``shares``: class, share, se, df, low, high, method, naive_low, naive_high (one row a class);
    ``agreement``: facet, alpha, units, values; ``confusion``: for each facet, the long table of label pairs
    (``a``, ``b`` the two levels, ``label_a``, ``label_b``, ``count``)."""

    label: str
    classes: tuple[str, ...]
    shares: pd.DataFrame
    agreement: pd.DataFrame
    confusion: dict[str, pd.DataFrame] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return json_safe({"label": self.label, "classes": list(self.classes),
                          "shares": self.shares.to_dict(orient="records"),
                          "agreement": self.agreement.to_dict(orient="records"),
                          "confusion": {f: t.to_dict(orient="records") for f, t in self.confusion.items()},
                          "notes": list(self.notes)})


def krippendorff_nominal(units: np.ndarray, values: np.ndarray) -> float:
    """Krippendorff's alpha for nominal data from (unit, value) pairs, one pair per coder's value: the
    coincidence matrix o_ck sums, over the units with at least two values, each ordered pair of values of
    different coders weighted 1 / (m_u - 1); alpha = 1 - (n - 1) D_o / D_e with D_o the off-diagonal sum of o
    and D_e = sum over c != k of n_c n_k (Krippendorff 2004, eq. 11.3). NaN when fewer than two values are
    pairable or every pairable value is the same class (no variation to agree on)."""
    unit_codes, _ = pd.factorize(pd.Series(units), sort=False)
    value_codes, classes = pd.factorize(pd.Series(values), sort=True)
    keep = value_codes >= 0
    unit_codes, value_codes = unit_codes[keep], value_codes[keep]
    k = len(classes)
    counts = np.zeros((unit_codes.max() + 1 if unit_codes.size else 0, k))
    np.add.at(counts, (unit_codes, value_codes), 1.0)
    m = counts.sum(axis=1)
    pairable = m >= 2
    counts, m = counts[pairable], m[pairable]
    if counts.size == 0:
        return math.nan
    # o_ck = sum_u n_uc (n_uk - [c = k]) / (m_u - 1)
    weighted = counts / (m - 1)[:, None]
    o = weighted.T @ counts - np.diag(weighted.sum(axis=0))
    n_c = o.sum(axis=1)
    n = n_c.sum()
    expected = n * n - float(n_c @ n_c)  # sum over c != k of n_c n_k
    if n < 2 or expected <= 0:
        return math.nan
    observed = float(o.sum() - np.trace(o))
    return 1.0 - (n - 1) * observed / expected


def confusion(frame: pd.DataFrame, label: str, facet: str, unit: list[str]) -> pd.DataFrame:
    """For each pair of levels (a, b) of ``facet``, how often a unit (the ``unit`` columns' combination) got
    label_a from a and label_b from b: a long table of every pair of labels that occurred."""
    wide = frame.pivot_table(index=unit, columns=facet, values=label, aggfunc="first", observed=True)
    rows = []
    for a, b in itertools.combinations(list(wide.columns), 2):
        both = wide[[a, b]].dropna()
        for (la, lb), n in both.groupby([a, b], observed=True).size().items():
            rows.append({"a": str(a), "b": str(b), "label_a": str(la), "label_b": str(lb), "count": int(n)})
    return pd.DataFrame(rows, columns=["a", "b", "label_a", "label_b", "count"])


def agreement(frame: pd.DataFrame, label: str, facets: list[str], replicate: str | None) -> tuple[pd.DataFrame,
                                                                                                     dict]:
    """Krippendorff's nominal alpha and the confusion across the levels of each facet of
    :data:`AGREEMENT_FACETS` that has several (and of the replicates, when there are)."""
    rows, tables = [], {}
    every = [*facets, *([replicate] if replicate and replicate not in facets else [])]
    compared = [f for f in facets if f in AGREEMENT_FACETS] + ([replicate] if replicate else [])
    for facet in compared:
        if frame[facet].nunique() < 2:
            continue
        unit = [c for c in every if c != facet]
        units = frame[unit].astype(str).agg("\x1f".join, axis=1) if unit else pd.Series("", index=frame.index)
        alpha = krippendorff_nominal(units.to_numpy(), frame[label].to_numpy())
        rows.append({"facet": facet, "alpha": alpha, "units": int(units.nunique()), "values": len(frame)})
        if unit:
            tables[facet] = confusion(frame, label, facet, unit)
    return pd.DataFrame(rows, columns=["facet", "alpha", "units", "values"]), tables


def label_shares(frame: pd.DataFrame, label: str, classes: list[str], fit, level: float = 0.95) -> pd.DataFrame:
    """Each class's share of the judgments with its full interval (TEE eq. 3 on the class indicator) inside 0-1
    and the naive one; ``fit(indicator_frame, score_column)`` returns the indicator's variance components."""
    from .inference import theta_interval

    rows = []
    for k in classes:
        indicator = frame.assign(__share=(frame[label] == k).astype(float))
        if indicator["__share"].nunique() == 1:  # every judgment is (or none is) this class: nothing varies
            share = float(indicator["__share"].iloc[0])
            rows.append({"class": k, "share": share, "se": 0.0, "df": math.nan, "low": share, "high": share,
                         "method": f"none: {'every' if share else 'no'} judgment has this label",
                         "naive_low": share, "naive_high": share})
            continue
        vc = fit(indicator, "__share")
        ci = theta_interval(vc, level=level, bounds=("proportion", 0.0, 1.0))
        rows.append({"class": k, "share": ci.estimate, "se": ci.se, "df": ci.df, "low": ci.low, "high": ci.high,
                     "method": ci.method, "naive_low": ci.naive_low, "naive_high": ci.naive_high})
    return pd.DataFrame(rows)


def label_design(frame: pd.DataFrame, label: str = "label", **design_options):
    """(facets, replicate, fit) of a labels table: the design the class indicators are fitted with (inferred
    from the columns but the label, as :func:`evalgauge.design.infer_design` infers it; ``design_options``:
    facets, nest, replicate, fixed) and the fit :func:`label_shares` takes."""
    from .design import infer_design
    from .estimate import estimate_components

    probe = infer_design(frame.drop(columns=[label]).assign(__share=0.0), score="__share",
                         object="item" if "item" in frame else None, **design_options)
    options = {k: v for k, v in design_options.items() if k != "facets"}

    def fit(indicator: pd.DataFrame, score: str):
        return estimate_components(indicator, infer_design(indicator, score=score, facets=list(probe.names),
                                                           object=probe.object, **options))

    return list(probe.names), probe.replicate, fit


def analyze_labels(frame: pd.DataFrame, fit=None, *, label: str = "label", facets: list[str] | None = None,
                   replicate: str | None = None, classes: list[str] | None = None,
                   level: float = 0.95, **design_options) -> LabelAnalysis:
    """Shares with intervals, agreement and confusion of the labels in ``frame[label]`` (see the module).
    ``facets``: the design's facet columns; ``replicate``: the replicate column, if any; ``classes``: the
    label set in order (default: the labels found, sorted); ``fit`` as :func:`label_shares` takes it. Without
    ``fit`` the design comes from :func:`label_design` (``design_options``: facets given as text, nest, fixed)."""
    if label not in frame:
        raise DesignError(f"no column '{label}' (the columns are {', '.join(map(str, frame.columns))}); name the "
                          "label column.")
    if fit is None:
        facets, replicate, fit = label_design(frame, label, facets=facets, replicate=replicate, **design_options)
    labelled = frame[frame[label].notna() & (frame[label].astype(str).str.strip() != "")]
    notes = []
    if len(labelled) < len(frame):
        notes.append(f"{len(frame) - len(labelled)} judgment(s) without a label are left out of the shares "
                     "(their rate by facet is the missing-answers table's).")
    labelled = labelled.assign(**{label: labelled[label].astype(str).str.strip()})
    found = sorted(labelled[label].unique())
    classes = list(classes) if classes else found
    unknown = [c for c in found if c not in classes]
    if unknown:
        raise DesignError(f"labels {', '.join(map(repr, unknown[:5]))} are not among the classes "
                          f"{', '.join(classes)}.")
    if len(classes) < 2:
        raise DesignError(f"one class ('{classes[0] if classes else ''}'): a share of 100% needs no interval; name "
                          "the label set (--classes) if other classes were possible.")
    shares = label_shares(labelled, label, classes, fit, level)
    agree, tables = agreement(labelled, label, facets, replicate)
    if shares["method"].str.startswith("logit").any():
        notes.append("a share whose normal interval would leave 0-1 has the interval of its logit, "
                     "back-transformed (its method says so).")
    return LabelAnalysis(label, tuple(classes), shares, agree, tables, tuple(notes))
