"""Categorical labels (issue 39.2): each class's share with its TEE interval inside 0-1, Krippendorff's alpha
for nominal data equal to the `krippendorff` package's, the confusion between judges, and the coverage of the
shares' intervals measured by simulation."""

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from evalgauge.cli import main
from evalgauge.design import infer_design
from evalgauge.estimate import estimate_components
from evalgauge.labels import analyze_labels, krippendorff_nominal

CLASSES = ["favor", "against", "neutral"]


@settings(max_examples=150, deadline=None)
@given(st.integers(2, 5), st.integers(2, 25), st.integers(2, 4), st.floats(0.0, 0.5), st.integers(0, 10**6))
def test_alpha_equals_the_krippendorff_package(coders, units, classes, missing, seed):
    krippendorff = pytest.importorskip("krippendorff")
    rng = np.random.default_rng(seed)
    data = rng.integers(0, classes, (coders, units)).astype(float)
    data[rng.random(data.shape) < missing] = np.nan
    u, c = np.nonzero(~np.isnan(data.T))  # (unit, coder) of each value
    values = data.T[u, c]
    ours = krippendorff_nominal(u, values)
    pairable = (np.sum(~np.isnan(data), axis=0) >= 2).sum()
    distinct = np.unique(data[:, np.sum(~np.isnan(data), axis=0) >= 2][~np.isnan(data[:, np.sum(~np.isnan(data),
                                                                                             axis=0) >= 2])])
    if pairable == 0 or distinct.size < 2:
        assert np.isnan(ours)
        return
    theirs = krippendorff.alpha(reliability_data=data, level_of_measurement="nominal")
    assert ours == pytest.approx(theirs, rel=1e-9, abs=1e-12)


def _panel(rng, items=50, judges=4, variants=2, reps=2, judge_sd=0.5, base=(0.6, 0.0, -0.8)):
    """Labels from a multinomial model: each item's class logits (random), each judge's bias towards a class
    (random), Gumbel noise on every call."""
    item_logit = rng.normal(0, 1.0, (items, 3)) + np.array(base)
    judge_bias = rng.normal(0, judge_sd, (judges, 3))
    rows = []
    for i in range(items):
        for j in range(judges):
            for v in range(variants):
                for r in range(1, reps + 1):
                    u = item_logit[i] + judge_bias[j] + rng.gumbel(size=3)
                    rows.append({"item": f"t{i}", "judge": f"j{j}", "variant": f"v{v}", "replicate": r,
                                 "label": CLASSES[int(np.argmax(u))]})
    return pd.DataFrame(rows)


def _fit(indicator, score):
    return estimate_components(indicator, infer_design(indicator, score=score, facets=["item", "judge", "variant"],
                                                       replicate="replicate", object="item"))


def test_shares_add_to_one_and_stay_inside_the_scale():
    rng = np.random.default_rng(2)
    frame = _panel(rng, base=(2.5, 0.0, -3.0))  # neutral is rare: its normal interval would cross 0
    result = analyze_labels(frame, _fit, facets=["item", "judge", "variant"], replicate="replicate",
                            classes=CLASSES)
    shares = result.shares.set_index("class")
    assert shares["share"].sum() == pytest.approx(1.0)
    assert ((shares["low"] >= 0) & (shares["high"] <= 1) & (shares["naive_low"] >= 0)).all()
    observed = frame["label"].value_counts(normalize=True)
    for k in CLASSES:  # a balanced design: the share is the share of the judgments
        assert shares.loc[k, "share"] == pytest.approx(observed.get(k, 0.0))
    assert shares.loc["neutral", "method"].startswith("logit")
    assert set(result.agreement["facet"]) == {"judge", "variant", "replicate"}


def test_the_labels_command_on_a_file(tmp_path):
    frame = _panel(np.random.default_rng(4))
    frame.to_csv(tmp_path / "stance.csv", index=False)
    out = CliRunner().invoke(main, ["labels", str(tmp_path / "stance.csv"), "--classes", ",".join(CLASSES),
                                    "--json", str(tmp_path / "l.json")])
    assert out.exit_code == 0, out.output
    payload = json.loads((tmp_path / "l.json").read_text())
    assert [r["class"] for r in payload["shares"]] == CLASSES
    assert "Krippendorff's alpha (nominal) across judges" in out.output and "Confusion across judges" in out.output
    judges = pd.DataFrame(payload["confusion"]["judge"])
    assert judges["count"].sum() == 6 * 50 * 2 * 2  # 6 pairs of judges x 200 units
    bad = CliRunner().invoke(main, ["labels", str(tmp_path / "stance.csv"), "--classes", "favor,against"])
    assert bad.exit_code == 2 and "'neutral'" in bad.output and "Traceback" not in bad.output


def _truth(base, judge_sd, draws=2_000_000, seed=99):
    """The population share of each class: items and judges drawn afresh, by Monte Carlo (SE < 4e-4)."""
    rng = np.random.default_rng(seed)
    u = rng.normal(0, 1.0, (draws, 3)) + np.array(base) + rng.normal(0, judge_sd, (draws, 3)) \
        + rng.gumbel(size=(draws, 3))
    return np.bincount(np.argmax(u, axis=1), minlength=3) / draws


@pytest.mark.slow
def test_the_shares_intervals_cover_the_population_share():
    """400 simulated panels (50 items x 4 judges x 2 variants x 2 replicates; items and judges drawn from their
    populations): each class's full 95% interval covers its population share in about 95% of them. Binomial(400,
    0.95): sd 1.1 points, so 91.5-98.5% is 3 sd; the naive (item-only) interval under-covers."""
    base, judge_sd = (0.6, 0.0, -0.8), 0.5
    truth = _truth(base, judge_sd)
    rng = np.random.default_rng(7)
    hits, naive_hits, n = np.zeros(3), np.zeros(3), 400
    for _ in range(n):
        result = analyze_labels(_panel(rng, base=base, judge_sd=judge_sd), _fit,
                                facets=["item", "judge", "variant"], replicate="replicate", classes=CLASSES)
        s = result.shares
        hits += ((s["low"] <= truth) & (truth <= s["high"])).to_numpy()
        naive_hits += ((s["naive_low"] <= truth) & (truth <= s["naive_high"])).to_numpy()
    coverage = hits / n
    assert ((coverage >= 0.915) & (coverage <= 0.985)).all(), coverage
    assert (naive_hits / n < 0.9).all(), naive_hits / n


def test_a_label_factorial_against_serve_sim_is_read_as_classes(tmp_path, monkeypatch):
    """mode = "label": serve-sim answers with the class names; the run stores each verdict as its class (its
    index, with the names in the run's record), and `analyze` and `labels` give shares inside 0-1 and alpha,
    never a mean of indices. A choice run's letters are classes too."""
    import sqlite3

    from serve_sim import KEY, collect, free_port, write_config

    monkeypatch.setenv("SIM_KEY", KEY)
    port = free_port()
    config = write_config(tmp_path, port, mode="label", items=12, systems=2, reps=2, judges=3)
    config.write_text(config.read_text().replace('mode = "label"',
                                                 'mode = "label"\nlabels = ["favor", "against", "neutral"]'))
    cfg, summary = collect(config, port)
    assert summary.failed == 0 and summary.completed > 0
    con = sqlite3.connect(cfg.database)
    stored = con.execute("SELECT DISTINCT score FROM calls").fetchall()
    meta = dict(con.execute("SELECT key, value FROM run").fetchall())
    con.close()
    assert {s for (s,) in stored} <= {0.0, 1.0, 2.0} and json.loads(meta["labels"]) == CLASSES
    out = CliRunner().invoke(main, ["analyze", str(cfg.database), "--json", str(tmp_path / "a.json")])
    assert out.exit_code == 0, out.output
    assert "Share of each class" in out.output and "theta-hat" not in out.output  # no mean of indices
    payload = json.loads((tmp_path / "a.json").read_text())
    shares = pd.DataFrame(payload["shares"])
    assert set(shares["class"]) == set(CLASSES) and shares["share"].sum() == pytest.approx(1.0)
    assert ((shares["low"] >= 0) & (shares["high"] <= 1)).all()
    assert "judge" in {r["facet"] for r in payload["agreement"]}


def test_a_label_reply_is_read_by_its_class_never_by_a_word_inside_another(tmp_path):
    from evalgauge.collect.parsers import parse_score

    labels = ("favor", "against", "neutral")
    assert parse_score("Neutral", "label", labels=labels) == (2.0, None)
    assert parse_score("After weighing it: **Stance: against**", "label", labels=labels) == (1.0, None)
    assert parse_score("Some favor it, some are against it.", "label", labels=labels)[0] is None
    assert parse_score("It argues in favor.", "label", labels=labels) == (0.0, None)
    assert parse_score("Label: neutral", "label", labels=labels, cut=True)[0] is None  # cut right after it
    pair = ("hateful", "not hateful")
    assert parse_score("This post is not hateful.", "label", labels=pair) == (1.0, None)
    assert parse_score("This post is hateful.", "label", labels=pair) == (0.0, None)


@pytest.mark.parametrize("keyed", [True, False])
def test_a_choice_run_is_scored_against_its_key_or_read_as_classes(tmp_path, monkeypatch, keyed):
    """choice mode: with every item's answer key (a reference letter) each verdict is correct (1) or not (0); without
    one the letters are classes for the label analysis, never a mean of letter indices."""
    import sqlite3

    from serve_sim import KEY, collect, free_port, write_config

    monkeypatch.setenv("SIM_KEY", KEY)
    port = free_port()
    config = write_config(tmp_path, port, mode="choice", items=8, systems=2, reps=2, judges=2)
    items = pd.read_csv(tmp_path / "items.csv")
    if keyed:
        items.assign(reference=["A", "B", "C", "D"] * 2).to_csv(tmp_path / "items.csv", index=False)
    cfg, summary = collect(config, port)
    assert summary.failed == 0 and cfg.choice_keyed == keyed
    con = sqlite3.connect(cfg.database)
    scores = {s for (s,) in con.execute("SELECT DISTINCT score FROM calls")}
    meta = dict(con.execute("SELECT key, value FROM run").fetchall())
    con.close()
    if keyed:
        assert scores <= {0.0, 1.0} and "labels" not in meta and meta["scale"] == "0,1"
    else:
        assert json.loads(meta["labels"]) == ["A", "B", "C", "D"]
        out = CliRunner().invoke(main, ["analyze", str(cfg.database)])
        assert out.exit_code == 0 and "Share of each class" in out.output, out.output
