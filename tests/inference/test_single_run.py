"""One model's run (issue 25.7): an lm-eval or Inspect log, one system, one judge, one call per item, gets its
honest interval from `analyze` and `compare`: item sampling plus what the user states (--assume), with what
one system, judge, prompt and run cannot measure said."""

import json
import math

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from scipy import stats

import evalgauge as eg
from conftest import FIXTURES
from evalgauge.api import single_run
from evalgauge.cli import main
from evalgauge.inference import single_run_interval
from evalgauge.io import import_files

LM_EVAL = FIXTURES / "importers" / "lm-eval" / "meta-llama__Meta-Llama-3-8B-Instruct" / \
    "samples_asdiv_2024-08-21T03-44-09.494230.jsonl"
INSPECT = FIXTURES / "importers" / "inspect" / "popularity_gpt-4o-mini.eval"


def test_an_lm_eval_run_gets_the_item_sampling_interval_lm_eval_publishes(tmp_path):
    frame = import_files("lm-eval", [str(LM_EVAL)])
    run = single_run(frame)
    # lm-eval's own results file: "acc,none": 0.92, "acc_stderr,none": 0.0387561713321444
    assert run.mean == pytest.approx(0.92) and run.se_items == pytest.approx(0.0387561713321444, rel=1e-12)
    assert run.df == pytest.approx(49) and run.n == 50
    assert 0 < run.low < 0.92 < run.high < 1  # the logit interval stays below 1
    assert any("prompt variant" in u for u in run.unmeasured) and any("one run" in u for u in run.unmeasured)
    # the command says it, and writes the same numbers
    path = tmp_path / "lm-eval.csv"
    frame.to_csv(path, index=False)
    res = CliRunner().invoke(main, ["analyze", str(path), "--json", str(tmp_path / "a.json")])
    assert res.exit_code == 0, res.output
    assert "One run: mean 0.92 over 50" in res.output and "not measured" in res.output
    assert json.loads((tmp_path / "a.json").read_text()) == json.loads(single_run(path).to_json())


def test_an_inspect_run_names_its_one_judge_and_compare_answers_too(tmp_path):
    frame = import_files("inspect", [str(INSPECT)])
    run = single_run(frame)
    assert run.mean == pytest.approx(0.63) and run.n == 100
    assert any("one judge (judge = 'match')" in u for u in run.unmeasured)
    path = tmp_path / "inspect.csv"
    frame.to_csv(path, index=False)
    for command in ("analyze", "compare"):
        res = CliRunner().invoke(main, [command, str(path)])
        assert res.exit_code == 0, res.output
        assert "One run: mean 0.63 over 100" in res.output and "one judge (judge = 'match')" in res.output
        assert "--assume judge=VARIANCE --assume item:judge=VARIANCE" in res.output


def test_stated_components_widen_the_interval_as_eq_3_says():
    rng = np.random.default_rng(0)
    y = rng.normal(3.0, 1.0, 80)
    plain = single_run_interval(y, "item", one_level={"judge": "j"})
    stated = single_run_interval(y, "item", assumed={"judge": 0.04, "item:judge": 0.8}, one_level={"judge": "j"})
    s2 = np.var(y, ddof=1)
    var = s2 / 80 + 0.04 + 0.8 / 80  # a term with the item facet is averaged over the items; the judge's is not
    assert stated.se == pytest.approx(math.sqrt(var)) and plain.se == pytest.approx(math.sqrt(s2 / 80))
    assert stated.df == pytest.approx(79 * (var / (s2 / 80)) ** 2)  # the stated values count as known
    q = stats.t.ppf(0.975, stated.df)
    assert stated.low == pytest.approx(y.mean() - q * stated.se)
    assert stated.high == pytest.approx(y.mean() + q * stated.se)
    assert plain.unmeasured and not stated.unmeasured  # what is stated is no longer unmeasured


def test_a_run_with_repeated_calls_is_fitted_not_treated_as_one_run():
    rng = np.random.default_rng(1)
    frame = pd.DataFrame({"item": np.repeat(np.arange(30), 3), "replicate": np.tile([1, 2, 3], 30)})
    frame["score"] = rng.normal(0, 1, 30)[frame["item"]] + rng.normal(0, 0.5, len(frame))
    assert single_run(frame) is None
    names = [c.name for c in eg.analyze(frame).components.components]
    assert "item" in names and "residual" in names


def test_analyze_counts_a_stated_component_in_every_interval():
    rng = np.random.default_rng(2)
    frame = pd.DataFrame([(f"s{s}", f"i{i}", r) for s in range(4) for i in range(30) for r in (1, 2)],
                         columns=["system", "item", "replicate"])
    frame["score"] = (rng.normal(0, 0.3, 4)[frame["system"].str[1:].astype(int)]
                      + rng.normal(0, 0.8, 30)[frame["item"].str[1:].astype(int)] + rng.normal(0, 0.5, len(frame)))
    fitted = eg.fit(frame)
    plain, stated = (fitted.analysis(assume=assume) for assume in (None, {"system:judge": 0.05}))
    widths = [(a.comparison.pairs["high"] - a.comparison.pairs["low"]).mean() for a in (plain, stated)]
    assert widths[1] > widths[0]
    assert any("assumed (not estimated): system:judge = 0.05" in n for n in stated.components.notes)
