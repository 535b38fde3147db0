"""Intervals no wider than the design can support (issue 25.5): below one Satterthwaite degree of freedom an
estimate is "not estimable at this design", with the components that carry its error and the cheapest
change; on a bounded score an interval stays inside the scale (logit for proportions, clipped for ratings)."""

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from evalgauge.cli import main
from evalgauge.compare import compare
from evalgauge.estimate import estimate_components, resolve_model
from evalgauge.inference import bounded_interval, score_bounds


def _frame(seed=0, systems=2, items=12, variants=2, reps=2, sv=1.0, isv=1.0, scale=None, binary=False):
    """systems x items x variants x replicates with system:variant and item:system:variant effects: the
    system:variant estimate is a difference of two mean squares, whose Satterthwaite df can fall below 1."""
    rng = np.random.default_rng(seed)
    s_eff = rng.normal(0, 0.5, systems)
    i_eff = rng.normal(0, 0.7, items)
    sv_eff = rng.normal(0, np.sqrt(sv), (systems, variants))
    isv_eff = rng.normal(0, np.sqrt(isv), (systems, items, variants))
    rows = []
    for s in range(systems):
        for i in range(items):
            for v in range(variants):
                for r in range(reps):
                    y = 3 + s_eff[s] + i_eff[i] + sv_eff[s, v] + isv_eff[s, i, v] + rng.normal(0, 0.5)
                    if scale:
                        y = float(np.clip(np.round(y), *scale))
                    if binary:
                        y = float(rng.random() < 1 / (1 + np.exp(-(y - 3))))
                    rows.append({"system": f"s{s}", "item": f"i{i}", "variant": f"v{v}", "replicate": r + 1,
                                 "score": y})
    return pd.DataFrame(rows)


def _compare(frame):
    spec = resolve_model(frame)
    vc = estimate_components(frame, spec)
    return compare(frame, vc, design=spec.design, facets=spec.facets)


#: a seeded design of 2 systems x 6 items x 2 variants whose system contrast has 0.71 Satterthwaite df
THIN = dict(seed=2, items=6, sv=0.3, isv=1.0)


def test_an_estimate_below_one_degree_of_freedom_is_not_estimable_and_says_why():
    c = _compare(_frame(**THIN))
    pair = c.pairs.iloc[0]
    assert pair["df"] < 1 and not pair["estimable"] and np.isnan(pair["low"]) and np.isnan(pair["high"])
    assert not pair["separable"] and np.isnan(pair["low_simultaneous"])
    why = c.sentences[0]
    assert why.startswith("the difference s") and "not estimable at this design" in why
    assert "system:item:variant" in why and "6 item x 2 variant" in why and "more variant levels than 2" in why


def test_more_levels_of_the_scarce_facet_make_it_estimable():
    c = _compare(_frame(**{**THIN, "variants": 8}))
    assert c.pairs["df"].min() >= 1 and c.pairs["estimable"].all() and c.pairs["low"].notna().all()
    assert not any("not estimable" in t for t in c.sentences)


def test_a_rating_scales_intervals_stay_on_the_scale_and_say_so():
    frame = _frame(sv=2.0, variants=3, scale=(1, 5))
    c = _compare(frame)
    assert (c.systems["low"].dropna() >= 1).all() and (c.systems["high"].dropna() <= 5).all()
    assert (c.pairs[["low", "high"]].abs().stack() <= 4).all()
    unclipped = c.systems["mean"] + 1.96 * c.systems["se"]
    if (unclipped > 5).any() or (c.systems["mean"] - 1.96 * c.systems["se"] < 1).any():
        assert any("clipped" in n for n in c.notes)


def test_a_proportions_interval_is_the_back_transformed_logit_interval():
    low, high, how = bounded_interval(np.array([0.9, 0.5]), np.array([0.1, 0.1]), np.array([2.0, 2.0]),
                                      ("proportion", 0.0, 1.0))
    logit = np.log(0.9 / 0.1)
    s = 0.1 / (0.9 * 0.1)
    assert low[0] == pytest.approx(1 / (1 + np.exp(-(logit - 2 * s))))
    assert high[0] == pytest.approx(1 / (1 + np.exp(-(logit + 2 * s)))) and high[0] < 1
    assert high[0] - 0.9 < 0.9 - low[0]  # asymmetric near the end
    assert low[1] == pytest.approx(1 - high[1])  # symmetric at one half
    assert "logit" in how
    c = _compare(_frame(sv=0.5, variants=4, binary=True))
    assert ((c.systems["low"] > 0) & (c.systems["high"] < 1)).all()
    assert any("logit" in n for n in c.notes)


@pytest.mark.parametrize("values,expected", [
    ([0, 1, 1, 0], ("proportion", 0.0, 1.0)), ([0.2, 0.75], ("proportion", 0.0, 1.0)),
    ([1, 3, 5, 2], ("scale", 1.0, 5.0)), ([1.5, 7.25, -3.0], None), (list(range(40)), None),
])
def test_score_bounds(values, expected):
    assert score_bounds(np.array(values, dtype=float)) == expected


def test_the_command_line_prints_not_estimable_and_the_reason(tmp_path):
    path = tmp_path / "j.csv"
    _frame(**THIN).to_csv(path, index=False)
    out = CliRunner().invoke(main, ["compare", str(path), "--json", str(tmp_path / "c.json")])
    assert out.exit_code == 0, out.output
    assert "not estimable" in out.output and "cheapest change" in out.output
    payload = json.loads((tmp_path / "c.json").read_text())
    assert payload["pairs"][0]["estimable"] is False and payload["pairs"][0]["low"] is None


def test_no_simultaneous_interval_is_narrower_than_its_marginal_one():
    """The family's critical value is taken at the pairs' median df; a pair on fewer df has a wider marginal
    t quantile, and its simultaneous interval must not be the narrower one (issue 25.1)."""
    frame = _frame(seed=5, systems=5, items=8, variants=3, sv=0.3, isv=1.0)
    frame = frame.drop(frame[(frame["system"] == "s4") & (frame["item"].isin(["i0", "i1", "i2", "i3", "i4"]))].index)
    c = _compare(frame)
    ok = c.pairs[c.pairs["estimable"]]
    assert len(ok) >= 3 and ok["df"].nunique() > 1
    sim = ok["high_simultaneous"] - ok["low_simultaneous"]
    assert (sim >= ok["high"] - ok["low"] - 1e-12).all()
    crit = c.extra["critical"]
    assert crit["error"] < 1e-3 * crit["value"] and crit["method"] in ("Genz-Bretz", "Monte Carlo")


def test_one_systems_score_below_one_df_is_not_printed_as_an_interval(monkeypatch):
    # the analysis's "One system's score" line follows compare's rule (MIN_DF): no interval below 1 df
    from dataclasses import replace as _replace

    from rich.console import Console

    import evalgauge as eg
    from evalgauge import inference
    from evalgauge.analysis import gstudy
    from evalgauge.report import terminal
    from evalgauge.simulate import simulate as _simulate
    from evalgauge.simulate import sizing_preset

    vc = eg.fit(_simulate(sizing_preset(systems=4, items=10, judges=2, replicates=1), seed=1),
                object="system").components
    real = inference.object_interval
    monkeypatch.setattr(gstudy, "object_interval", lambda *a, **k: _replace(real(*a, **k), df=0.5))
    console = Console(record=True, width=200)
    terminal.print_components(gstudy.summarize_components(vc), console)
    text = console.export_text()
    assert "One system's score: not estimable at this design (Satterthwaite df 0.5" in text
    assert "One system's score: 95% CI" not in text
