"""A facet whose levels are different measures (issue 25.6): SummEval's aspect (coherence, consistency,
fluency, relevance) is not a sample of interchangeable conditions. It is fixed by default, with a note; no
intervention adds its levels; and `analyze` reports each level (--by) by default."""

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from evalgauge.cli import main
from evalgauge.design import infer_design
from evalgauge.dstudy import interventions
from evalgauge.estimate import estimate_components


def _summeval_like(seed=0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    aspects = ["coherence", "consistency", "fluency", "relevance"]
    rows = []
    shift = dict(zip(aspects, (0.0, 1.0, 0.5, -0.3), strict=True))
    for s in range(5):
        for d in range(20):
            for j in range(3):
                for a in aspects:
                    rows.append({"system": f"M{s}", "doc_id": f"d{d}", "judge": f"j{j}", "aspect": a,
                                 "score": 3 + shift[a] + 0.3 * s + rng.normal(0, 0.7)})
    return pd.DataFrame(rows)


def test_an_aspect_facet_is_fixed_by_default_and_says_why():
    design = infer_design(_summeval_like())
    assert design.fixed == ("aspect",) or "aspect" in design.fixed
    assert any("names different measures (coherence, consistency, fluency, relevance)" in n for n in design.notes)
    vc = estimate_components(_summeval_like(), design)
    labels = set(interventions(vc)["intervention"])
    assert not any(label.startswith("aspect") for label in labels) and "+1 judge" in labels


@pytest.mark.slow
def test_analyze_reports_each_aspect_by_default(tmp_path):
    path = tmp_path / "s.csv"
    _summeval_like().to_csv(path, index=False)
    res = CliRunner().invoke(main, ["analyze", str(path), "--json", str(tmp_path / "a.json")])
    assert res.exit_code == 0, res.output
    assert "Variance components by aspect" in res.output and "aspect x2" not in res.output
    payload = json.loads((tmp_path / "a.json").read_text())
    assert "by_stratum" in payload
    # a facet the user names as random stays random: the default is a default
    res = CliRunner().invoke(main, ["analyze", str(path), "--fixed", "", "--json", "-"])
    assert res.exit_code == 0, res.output
    assert any(r["intervention"] == "aspect x2" for r in json.loads(res.output)["interventions"])
