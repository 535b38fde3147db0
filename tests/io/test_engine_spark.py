"""`components --engine spark`: the same SQL text as DuckDB's (evalgauge.io.engine.cells_sql) run by Spark in
local mode, giving the same cells, the same components and the same messages. It starts a JVM: the subprocess
tier (CI installs Java and pyspark and requires them there: EVALGAUGE_SPARK_REQUIRED=1)."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from test_engine import (
    bad_logs,
    hostile_names,
    never_searched,
    odd_fields,
    repeated_cells,
    repeated_replicates,
    unnamed_judges,
)

import evalgauge as eg
from evalgauge import vocabulary
from evalgauge.cli import main
from evalgauge.errors import DataError
from evalgauge.estimate import estimate_from_sums
from evalgauge.estimate.model import model_from_design
from evalgauge.estimate.reml import fit_reml
from evalgauge.io.engine import reduce_cells, spark_session
from evalgauge.simulate import simulate, sizing_preset

pytestmark = pytest.mark.subprocess


@pytest.fixture(scope="module")
def spark():
    missing = []
    try:
        import pyspark  # noqa: F401
    except ImportError:
        missing.append("pyspark (pip install 'evalgauge[spark]')")
    if shutil.which("java") is None:
        missing.append("Java (apt install default-jre-headless)")
    if missing:
        if os.environ.get("EVALGAUGE_SPARK_REQUIRED"):
            pytest.fail("the Spark tier needs " + " and ".join(missing))
        pytest.skip("Spark in local mode needs " + " and ".join(missing))
    return spark_session("local[2]")


def _hive(frame: pd.DataFrame, folder):
    """The judgments partitioned by system (system=s1/part-0.parquet, ...)."""
    for system, chunk in frame.groupby("system"):
        (folder / f"system={system}").mkdir(parents=True)
        chunk.drop(columns="system").to_parquet(folder / f"system={system}" / "part-0.parquet", index=False)
    return folder


def _sorted(cells: pd.DataFrame) -> pd.DataFrame:
    """The cells in one order with the facets as text (DuckDB's labels arrive dictionary-encoded)."""
    keys = [c for c in cells.columns if c not in ("n", "sum", "sum_squares")]
    cells = cells.astype(dict.fromkeys(keys, str))
    return cells.sort_values(sorted(keys)).reset_index(drop=True)[[*sorted(keys), "n", "sum", "sum_squares"]]


def test_spark_reduces_to_duckdbs_cells_and_the_rows_components(spark, tmp_path):
    frame = simulate(sizing_preset(systems=4, items=20, judges=3, replicates=2), seed=7).sample(frac=0.9,
                                                                                               random_state=1)
    folder = _hive(frame, tmp_path / "log")
    on_duck, duck_info = reduce_cells(folder)
    on_spark, spark_info = reduce_cells(folder, engine="spark", master="local[2]")
    assert spark_info == duck_info == {"rows": len(frame), "files": 4, "empty_dropped": 0, "cells": len(on_duck)}
    a, b = _sorted(on_duck), _sorted(on_spark)
    pd.testing.assert_frame_equal(a.drop(columns=["sum", "sum_squares"]), b.drop(columns=["sum", "sum_squares"]))
    np.testing.assert_allclose(b[["sum", "sum_squares"]], a[["sum", "sum_squares"]], rtol=1e-12)
    # the cells' REML equals the rows' (1% of cells missing here too: REML, not the closed form)
    vc = estimate_from_sums(on_spark)
    design = eg.infer_design(frame)
    rows = fit_reml(frame, model_from_design(design), object_facet=design.object, facet_order=design.names)
    assert vc.method == "reml" and vc.reml.criterion == pytest.approx(rows.reml.criterion, abs=1e-8)
    # the partition key is the last column of a hive-partitioned dataset: the same terms, named in that order
    def key(c):
        return c.name == vocabulary.RESIDUAL, frozenset(c.facets)

    by_facets = {key(c): c.variance for c in vc.components}
    for comp in rows.components:
        assert by_facets[key(comp)] == pytest.approx(comp.variance, rel=1e-9, abs=1e-12)
    # a pyspark DataFrame is reduced on its own session: only the cells travel
    direct, info = reduce_cells(spark.createDataFrame(frame))
    assert info["rows"] == len(frame)
    np.testing.assert_allclose(_sorted(direct)[["sum", "sum_squares"]], a[["sum", "sum_squares"]], rtol=1e-12)
    # and so in eg.fit (the cells' fit), while eg.read collects the rows
    fitted = eg.fit(spark.createDataFrame(frame))
    assert fitted.judgments is None and fitted.components.reml.criterion == pytest.approx(rows.reml.criterion,
                                                                                          abs=1e-8)
    assert len(eg.read(spark.createDataFrame(frame)).frame) == len(frame)
    out = CliRunner().invoke(main, ["components", str(folder), "--engine", "spark", "--spark-master", "local[2]",
                                    "--json", "-"])
    assert out.exit_code == 0, out.output
    payload = json.loads(out.stdout)
    assert payload["engine"]["name"] == "spark" and payload["engine"]["rows"] == len(frame)


def test_bad_input_on_spark_names_the_file_and_column(spark, tmp_path, monkeypatch):
    frame, _, texty, holes = bad_logs(tmp_path)  # the same datasets as DuckDB's checks
    with monkeypatch.context() as patched, pytest.raises(
            DataError, match=rf"^{texty / 'b.csv'}: column 'score' holds 'n\.a\.'"):
        patched.setattr("evalgauge.io.engine.checks.first_bad_sql", never_searched)  # named from the scan itself
        reduce_cells(texty, engine="spark", master="local[2]")
    with pytest.raises(DataError, match=r"7 of 480 judgment\(s\) have an empty 'score' \(the first in .*a\.parquet\)"):
        reduce_cells(holes, engine="spark", master="local[2]")
    assert reduce_cells(holes, engine="spark", master="local[2]", drop_missing=True)[1]["empty_dropped"] == 7
    with pytest.raises(DataError, match=r"480 rows share their facet levels with another row"):
        reduce_cells(repeated_cells(tmp_path, frame), engine="spark", master="local[2]")
    logs = repeated_replicates(tmp_path, frame)  # a replicate repeated in a cell, as text, empty; 0 and 32
    for log in (logs["twice"], logs["labels"], logs["top"]):
        with pytest.raises(DataError, match=r"2 rows repeat both the facet levels and the replicate 'replicate'"):
            reduce_cells(log, engine="spark", master="local[2]")
    assert reduce_cells(logs["top_ok"], engine="spark", master="local[2]")[1]["cells"] == len(frame) // 2
    with pytest.raises(DataError, match=r"b\.parquet: column 'replicate' is empty in 1 judgment\(s\)"):
        reduce_cells(logs["blank"], engine="spark", master="local[2]")
    assert reduce_cells(logs["apart"], engine="spark", master="local[2]")[1]["cells"] == len(frame) // 2
    frame.to_csv(tmp_path / "semi.csv", index=False, sep=";")  # --sep reaches Spark's reader too
    assert reduce_cells(tmp_path / "semi.csv", engine="spark", master="local[2]", sep=";")[1]["rows"] == len(frame)
    folder, empty = hostile_names(tmp_path, frame)
    named = [c if c != "judge" else 'the "judge".name' for c in frame.columns if c not in ("score", "replicate")]
    assert reduce_cells(folder, engine="spark", master="local[2]", facets=named)[1]["cells"] == len(frame) // 2
    with pytest.raises(DataError, match="has no data rows"):
        reduce_cells(empty, engine="spark", master="local[2]")
    unnamed = unnamed_judges(tmp_path, frame)
    with pytest.raises(DataError, match=r"b\.parquet: column 'judge' is empty in 3 of 480 judgment\(s\)"):
        reduce_cells(unnamed, engine="spark", master="local[2]")
    out = CliRunner().invoke(main, ["components", str(holes), "--engine", "spark", "--spark-master", "local[2]",
                                    "--bootstrap", "100"])
    assert out.exit_code == 2 and "--engine spark fits REML on the cells alone" in out.output


def test_spark_counts_battles_as_duckdb_does(spark, tmp_path):
    from test_engine_pairwise import _same_analysis

    from battles import battle_log
    from battles import hive_folder as battle_folder
    from evalgauge.analysis.pairwise import analyze_battle_counts, analyze_pairwise
    from evalgauge.io import read_judgments
    from evalgauge.io.engine import reduce_battles, reduce_spark_pairs

    frame = battle_log(n=2000, seed=11)
    folder = battle_folder(frame, tmp_path / "battles")
    on_spark, spark_info = reduce_battles(folder, engine="spark", master="local[2]")
    on_duck, duck_info = reduce_battles(folder)
    assert spark_info == duck_info
    np.testing.assert_array_equal(on_spark.rows, on_duck.rows)
    np.testing.assert_array_equal(on_spark.entries.frame["battle"], on_duck.entries.frame["battle"])
    # the analysis on Spark's counts is the rows' analysis (entries in the same order: exactly)
    _same_analysis(analyze_battle_counts(on_spark, n_boot=50, seed=2),
                   analyze_pairwise(read_judgments(folder), n_boot=50, seed=2))
    # a pyspark DataFrame is counted on its own session; a human vote column's agreement as DuckDB counts it
    voted = frame.assign(vote=np.where(frame.index % 3 == 0, "tie", frame["winner"]))
    counts, spark_votes = reduce_spark_pairs(spark.createDataFrame(voted), rename={"human": "vote"})
    np.testing.assert_array_equal(counts.rows, on_duck.rows)
    voted.to_parquet(tmp_path / "voted.parquet", index=False)
    duck_votes = reduce_battles(tmp_path / "voted.parquet", columns={"human": "vote"})[1]
    assert spark_votes["human_agreement"] == duck_votes["human_agreement"]
    assert 0 < duck_votes["human_agreement"]["overall"] < 1
    # a bad verdict is named with its file, as a path
    bad = frame.assign(winner=frame["winner"].where(frame.index != 1500, "A>>B"))
    (tmp_path / "bad").mkdir()
    bad.iloc[:1000].to_parquet(tmp_path / "bad" / "a.parquet", index=False)
    bad.iloc[1000:].to_parquet(tmp_path / "bad" / "b.parquet", index=False)
    with pytest.raises(DataError, match=r"^/.*bad/b\.parquet: column 'winner' must be .*'A>>B'"):
        reduce_battles(tmp_path / "bad", engine="spark", master="local[2]")
    out = CliRunner().invoke(main, ["pairwise", str(folder), "--engine", "spark", "--spark-master", "local[2]",
                                    "--bootstrap", "0", "--json", "-"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["engine"]["name"] == "spark"


def test_scores_and_labels_on_spark_mean_what_they_mean_to_the_rows_reader(spark, tmp_path, monkeypatch):
    """The same fields as on DuckDB (tests/io/test_engine.py::odd_fields): spaces, pandas' empty values, NaN,
    infinity and a score too large, each as the rows' reader takes it."""
    folder = odd_fields(tmp_path)
    rows = eg.fit(eg.read(folder / "spaced.csv"), object="system", drop_missing=True).components
    fit = eg.fit(folder / "spaced.csv", object="system", drop_missing=True, engine="spark").components
    assert fit.levels == rows.levels == {"system": 3, "item": 8, "judge": 2} and fit.n_obs == rows.n_obs == 93
    for comp in rows.components:
        assert fit.sigma2(comp.name) == pytest.approx(comp.variance, rel=1e-6, abs=1e-9)
    assert eg.fit(folder / "nan.parquet", object="system", drop_missing=True, engine="spark").components.n_obs == 94
    monkeypatch.setattr("evalgauge.io.engine.checks.first_bad_sql", never_searched)  # the exact scan carries them
    with pytest.raises(DataError, match=r"inf\.parquet: column 'score' holds 'Infinity', which is not a number"):
        eg.fit(folder / "inf.parquet", object="system", engine="spark")
    with pytest.raises(DataError, match=r"huge\.parquet: column 'score' has 2 value\(s\) too large"):
        eg.fit(folder / "huge.parquet", object="system", engine="spark")


def test_spark_reads_a_file_name_with_glob_characters_literally(spark, tmp_path):
    frame = simulate(sizing_preset(systems=4, items=20, judges=3, replicates=2), seed=7)
    frame.to_csv(tmp_path / "x[1]{a,b}.csv", index=False)
    frame.head(40).to_csv(tmp_path / "x1a.csv", index=False)  # what the name matches as a pattern
    on_duck, duck_info = reduce_cells(tmp_path / "x[1]{a,b}.csv")
    on_spark, spark_info = reduce_cells(tmp_path / "x[1]{a,b}.csv", engine="spark", master="local[2]")
    assert spark_info == duck_info and spark_info["rows"] == len(frame)
    np.testing.assert_allclose(_sorted(on_spark)[["sum", "sum_squares"]], _sorted(on_duck)[["sum", "sum_squares"]],
                               rtol=1e-12)
