"""Every bad input gets a message that names the file, row, column or facet and says what to do."""

import numpy as np
import pandas as pd
import pytest

import evalgauge as eg
from evalgauge.errors import DataError, DesignError
from evalgauge.simulate import simulate, sizing_preset


@pytest.fixture
def crossed(tmp_path):
    df = simulate(sizing_preset(systems=3, items=4, judges=2, replicates=2), seed=1)
    return df


def _write(tmp_path, df, name="scores.csv"):
    path = tmp_path / name
    df.to_csv(path, index=False)
    return str(path)


def test_non_numeric_scores_list_the_rows(tmp_path, crossed):
    df = crossed.astype({"score": object})
    df.loc[[3, 7], "score"] = ["seven", "n/a?"]
    path = _write(tmp_path, df)
    with pytest.raises(DataError) as err:
        eg.estimate_anova(eg.read(path))
    msg = str(err.value)
    assert path in msg and "'score'" in msg
    assert "row 4 ('seven')" in msg and "row 8 ('n/a?')" in msg
    assert "not numbers" in msg and "does not drop rows silently" in msg


def test_empty_scores_list_the_rows(tmp_path, crossed):
    df = crossed.copy()
    df.loc[[0, 5, 6, 7, 8, 9, 10], "score"] = np.nan
    with pytest.raises(DataError) as err:
        eg.estimate_anova(eg.read(_write(tmp_path, df)))
    msg = str(err.value)
    assert "7 empty score(s): row 1, row 6, row 7, row 8, row 9 and 2 more" in msg
    assert "empty completion" in msg


def test_unknown_facet_column(crossed):
    with pytest.raises(DataError) as err:
        eg.estimate_anova(crossed, facets="system,item,judges")
    msg = str(err.value)
    assert "'judges'" in msg and "The columns are: system, item, judge, replicate, score" in msg


def test_unknown_score_column(crossed):
    with pytest.raises(DataError) as err:
        eg.estimate_anova(crossed, score="rating")
    assert "'rating'" in str(err.value) and "`score`" in str(err.value)  # the Python parameter


def test_facet_with_one_level(crossed):
    df = crossed[crossed["judge"] == "j1"]
    # an inferred design leaves the one-level facet out and says so
    result = eg.estimate_components(df)
    assert "judge" not in result.levels
    assert any("facet 'judge' has one level ('j1') and was left out" in n for n in result.notes)
    # a facet the user names is kept, and refused
    with pytest.raises(DesignError) as err:
        eg.estimate_anova(df, facets="system,item,judge")
    msg = str(err.value)
    assert "facet 'judge' has one level ('j1')" in msg and "Drop it from `facets`" in msg


def test_broken_nesting_names_item_categories_and_rows():
    df = pd.DataFrame({
        "category": ["a"] * 4 + ["b"] * 4 + ["c"] * 4,
        "item": ["q1", "q1", "q2", "q2", "q3", "q3", "q4", "q1", "q5", "q5", "q6", "q6"],
        "judge": ["j1", "j2"] * 6,
        "score": np.arange(12.0),
    })
    with pytest.raises(DesignError) as err:
        eg.estimate_anova(df)
    msg = str(err.value)
    assert "item 'q1' appears under category 'a' (row 1) and 'b' (row 8)" in msg
    assert "`nest`=none" in msg


def test_labels_restarting_within_parent_are_not_broken_nesting():
    # lme4's Pastes: casks a, b, c within every batch.
    df = pd.DataFrame({"batch": np.repeat(["A", "B", "C"], 4), "cask": np.tile(["a", "a", "b", "b"], 3),
                       "rep": np.tile([1, 2], 6), "y": np.arange(12.0) ** 1.5})
    result = eg.estimate_anova(df, score="y", facets="batch,cask", nest="batch/cask", replicate="rep")
    assert result.names == ("batch", "batch:cask", "residual")
    assert result.levels == {"batch": 3, "cask": 6}  # total distinct casks


def test_duplicates_without_replicate_column(crossed):
    df = crossed.drop(columns="replicate")
    with pytest.raises(DesignError) as err:
        eg.estimate_anova(df)
    msg = str(err.value)
    assert "no replicate column" in msg and "row 1, row 2 are the same cell" in msg
    assert "`replicate` COL" in msg and "`replicate`=auto" in msg
    # the suggested fix works
    assert eg.estimate_anova(df, replicate="auto").replicates == 2


def test_duplicate_replicate_labels(crossed):
    df = crossed.copy()
    df.loc[1, "replicate"] = 1
    with pytest.raises(DesignError) as err:
        eg.estimate_anova(df)
    assert "repeat both the facet levels and the replicate 'replicate'" in str(err.value)
    assert "row 1, row 2" in str(err.value)


def test_unbalanced_design_gets_the_balance_report(crossed):
    df = crossed[~((crossed["judge"] == "j2") & crossed["item"].isin(["i1", "i3"]))]
    with pytest.raises(DesignError) as err:
        eg.estimate_anova(df)
    msg = str(err.value)
    assert "complete balanced block" in msg and "6 of 24 cells have no observation" in msg
    assert "Missing cells by judge: 'j2' 6" in msg and "Missing cells by item: 'i1' 3, 'i3' 3" in msg
    assert "REML" in msg


def test_unequal_replicates_reported(crossed):
    df = crossed.drop(index=[0])
    report = eg.code_data(df, eg.infer_design(df)).balance()
    assert not report.balanced
    assert "1 cell(s) with 1, 23 cell(s) with 2" in report.summary()


def test_unequal_nesting_reported():
    df = pd.DataFrame({"category": ["a"] * 6 + ["b"] * 4, "item": list("xxyyzz") + list("uuvv"),
                       "judge": ["j1", "j2"] * 5, "score": np.arange(10.0)})
    report = eg.code_data(df, eg.infer_design(df)).balance()
    assert not report.balanced
    assert "'item' has unequal numbers of levels per parent" in report.summary()


def test_nothing_to_estimate():
    df = pd.DataFrame({"judge": ["a", "b", "c"], "score": [1.0, 2.0, 3.0]})
    with pytest.raises(DesignError) as err:
        eg.estimate_anova(df)
    assert "nothing to estimate" in str(err.value)


def test_empty_facet_label(crossed):
    df = crossed.astype({"judge": object})
    df.loc[4, "judge"] = None
    with pytest.raises(DesignError) as err:
        eg.estimate_anova(df)
    assert "facet column 'judge' is empty on 1 row(s): row 5" in str(err.value)


def test_unknown_term(crossed):
    with pytest.raises(DesignError) as err:
        eg.estimate_anova(crossed, terms="system,item:jduge")
    assert "'item:jduge' is not a term" in str(err.value) and "system:item:judge" in str(err.value)


@pytest.mark.parametrize("name,content,expect", [
    ("scores.xlsx", "x", "unsupported file type '.xlsx'"),
    ("missing.csv", None, "no such file"),
    ("empty.csv", "system,item,judge,score\n", "has no data rows"),
    ("broken.jsonl", '{"a": 1}\n{"a": \n', "line 2, character 8 is not valid JSON"),
])
def test_unreadable_files(tmp_path, name, content, expect):
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    with pytest.raises(DataError) as err:
        eg.read(str(path))
    assert expect in str(err.value) and str(path) in str(err.value)


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".parquet", ".jsonl"])
def test_all_formats_give_the_same_answer(tmp_path, crossed, suffix):
    path = tmp_path / f"scores{suffix}"
    if suffix == ".parquet":
        crossed.to_parquet(path)
    elif suffix == ".jsonl":
        crossed.to_json(path, orient="records", lines=True)
    else:
        crossed.to_csv(path, sep="\t" if suffix == ".tsv" else ",", index=False)
    base = eg.estimate_anova(crossed)
    again = eg.estimate_anova(eg.read(str(path)))
    assert np.allclose([c.variance for c in again.components], [c.variance for c in base.components])


def test_polars_frame(crossed):
    pl = pytest.importorskip("polars")
    base = eg.estimate_anova(crossed)
    again = eg.estimate_anova(pl.from_pandas(crossed.astype({"system": str, "item": str, "judge": str})))
    assert np.allclose([c.variance for c in again.components], [c.variance for c in base.components])


def test_messages_name_python_parameters_and_the_cli_shows_options(tmp_path, crossed):
    """The core names its parameters (`facets`); the command line shows the same message with its options."""
    from click.testing import CliRunner

    from evalgauge.cli import as_options, main

    df = crossed.drop(columns="replicate")
    with pytest.raises(DesignError) as err:
        eg.estimate_anova(df)
    assert "`replicate` COL" in str(err.value) and "--" not in str(err.value)
    path = tmp_path / "dup.csv"
    df.to_csv(path, index=False)
    out = CliRunner().invoke(main, ["components", str(path)])
    assert out.exit_code == 2
    assert "--replicate COL" in out.output and "--replicate=auto" in out.output and "`" not in out.output
    # a command in backticks is not an option
    assert as_options("run `evalgauge run CONFIG` with `n_boot` 0") == "run `evalgauge run CONFIG` with --bootstrap 0"
