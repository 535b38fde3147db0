"""Roles are read from names once (evalgauge.vocabulary.ROLE_NAMES): the design, the components, the analysis
and the D-study agree on which facet is the judge, the item and the prompt variant, whatever the columns are
called."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import evalgauge as eg
from evalgauge import vocabulary


def test_role_of_reads_every_name_in_the_vocabulary_whatever_its_case():
    for role, names in vocabulary.ROLE_NAMES.items():
        for name in names:
            assert vocabulary.role_of(name) == role
            assert vocabulary.role_of(name.upper()) == role
    assert vocabulary.role_of("temperature") is None and vocabulary.role_of(vocabulary.RESIDUAL) is None
    # the first in the caller's order, never the excluded one
    assert vocabulary.facet_with_role("item", ["doc_id", "item"]) == "doc_id"
    assert vocabulary.facet_with_role("object", ["model", "system"], exclude=("model",)) == "system"


def _frame() -> pd.DataFrame:
    rng = np.random.default_rng(4)
    rows = [(s, d, a, p, r) for s in "abcd" for d in range(12) for a in ("x", "y") for p in ("p1", "p2")
            for r in (1, 2)]
    frame = pd.DataFrame(rows, columns=["system", "doc_id", "annotator", "prompt_type", "replicate"])
    effect = {"a": 0.0, "b": 0.3, "c": 0.6, "d": 0.9}
    frame["score"] = frame["system"].map(effect) + rng.normal(0, 1, len(frame)) + \
        frame["annotator"].map({"x": 0.0, "y": 0.4})
    return frame


def test_the_design_and_the_components_name_the_same_facets():
    fit = eg.fit(_frame(), object="system")
    assert fit.design.roles == {"object": "system", "item": "doc_id", "judge": "annotator",
                                "variant": "prompt_type", "replicate": "replicate"}
    for role in ("object", "item", "judge", "variant"):
        assert fit.components.role(role) == fit.design.role(role)


@pytest.mark.slow
def test_the_plan_and_the_analysis_find_judges_and_items_by_their_roles():
    fit = eg.fit(_frame(), object="system")
    plan = eg.plan(fit.components, target_erho2=0.8)
    assert plan.exchange is not None  # judges for items, on columns named annotator and doc_id
    from evalgauge.api import analyze

    result = analyze(_frame())
    assert result.judge_facet == "annotator" and result.item_facet == "doc_id"
    assert result.ceiling is not None and result.ceiling.facet == "annotator"
    names = [r["intervention"] for r in plan.to_dict()["interventions"]]
    assert "+1 annotator" in names and "+2 prompt_types" in names and "doc_id x2" in names
