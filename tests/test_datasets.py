"""Datasets, not only files: a Parquet folder, a glob, hive-partitioned paths, read as one table by every
reading command and eg.read, with bad parts named by file and column and nothing written inside the folder."""

from __future__ import annotations

import pandas as pd
import pytest
from click.testing import CliRunner

import evalgauge as eg
from evalgauge.cli import main
from evalgauge.errors import DataError, DesignError
from evalgauge.simulate import simulate, sizing_preset


def _frame() -> pd.DataFrame:
    return simulate(sizing_preset(systems=4, items=20, judges=3, replicates=2), seed=7)


def test_a_parquet_folder_a_glob_and_hive_partitions_give_the_file_s_components(tmp_path):
    frame = _frame()
    whole = tmp_path / "whole.parquet"
    frame.to_parquet(whole, index=False)
    reference = eg.fit(eg.read(whole), object="system").components
    parts = tmp_path / "parts"
    parts.mkdir()
    for k, (_, chunk) in enumerate(frame.groupby(frame.index // 137)):
        chunk.to_parquet(parts / f"part-{k:03d}.parquet", index=False)
    (parts / "_SUCCESS").write_text("")  # what Spark leaves beside its parts: not a part
    hive = tmp_path / "hive"
    for system, chunk in frame.groupby("system"):
        (hive / f"system={system}").mkdir(parents=True)
        chunk.drop(columns="system").to_parquet(hive / f"system={system}" / "part-0.parquet", index=False)
    for source in (parts, str(parts / "part-*.parquet"), hive):
        judgments = eg.read(source)
        assert len(judgments.frame) == len(frame)
        vc = eg.fit(judgments, object="system").components
        # the partition key is a column after the others, so a term may be named in another order
        by_facets = {frozenset(c.name.split(":")): c.variance for c in vc.components}
        for comp in reference.components:
            assert by_facets[frozenset(comp.name.split(":"))] == pytest.approx(comp.variance, rel=1e-9, abs=1e-12), \
                (source, comp.name)
    out = CliRunner().invoke(main, ["components", str(hive)])
    assert out.exit_code == 0, out.output


def test_bad_parts_are_named_with_file_and_column(tmp_path):
    frame = _frame()
    folder = tmp_path / "mixed"
    folder.mkdir()
    frame.iloc[:100].to_parquet(folder / "a.parquet", index=False)
    frame.iloc[100:200].drop(columns="judge").to_parquet(folder / "b.parquet", index=False)
    with pytest.raises(DataError, match=r"b\.parquet: has no column 'judge'"):
        eg.read(folder)
    texty = tmp_path / "texty"
    texty.mkdir()
    frame.iloc[:100].to_parquet(texty / "a.parquet", index=False)
    bad = frame.iloc[100:200].astype({"score": str})
    bad.loc[bad.index[3], "score"] = "n/a"
    bad.to_parquet(texty / "b.parquet", index=False)
    out = CliRunner().invoke(main, ["components", str(texty)])
    assert out.exit_code == 2 and "b.parquet: column 'score' holds text" in out.output
    kinds = tmp_path / "kinds"
    kinds.mkdir()
    frame.iloc[:50].to_parquet(kinds / "a.parquet", index=False)
    frame.iloc[50:].to_csv(kinds / "b.csv", index=False)
    with pytest.raises(DataError, match="mix kinds"):
        eg.read(kinds)
    empty = tmp_path / "empty"
    empty.mkdir()
    out = CliRunner().invoke(main, ["analyze", str(empty)])
    assert out.exit_code == 2 and "no Parquet, CSV, TSV or JSONL parts" in out.output
    out = CliRunner().invoke(main, ["components", str(tmp_path / "nothing-*.parquet")])
    assert out.exit_code == 2 and "no file matches" in out.output


def test_no_output_is_written_inside_an_input_dataset(tmp_path):
    folder = tmp_path / "parts"
    folder.mkdir()
    _frame().to_csv(folder / "part-0.csv", index=False)
    before = sorted(p.name for p in folder.iterdir())
    out = CliRunner().invoke(main, ["analyze", str(folder), "--json", str(folder / "analysis.csv")])
    assert out.exit_code == 2 and "inside the input dataset" in out.output
    assert sorted(p.name for p in folder.iterdir()) == before


def test_a_bad_row_of_a_dataset_is_named_by_its_part_and_its_row_there(tmp_path):
    """A row of a dataset is named where the user finds it: its part and its row in that part, also after rows
    with an empty score were left out (the positions are the rows' as read, not the shortened table's)."""
    frame = simulate(sizing_preset(systems=3, items=10, judges=2, replicates=2), seed=4).astype({"score": str})
    (tmp_path / "log" / "judge=j1").mkdir(parents=True)
    (tmp_path / "log" / "judge=j2").mkdir(parents=True)
    j1, j2 = (frame[frame["judge"] == j].drop(columns="judge").reset_index(drop=True) for j in ("j1", "j2"))
    j1.to_csv(tmp_path / "log" / "judge=j1" / "a.csv", index=False)
    bad = j2.copy()
    bad.loc[7, "score"] = "seven"
    bad.to_csv(tmp_path / "log" / "judge=j2" / "a.csv", index=False)
    with pytest.raises(DataError, match=r"'score' .* row 8 of judge=j2/a\.csv \('seven'\)"):
        eg.fit(eg.read(tmp_path / "log"), object="system")
    # empty scores dropped, then a repeated cell: its rows are named as read
    gaps = j2.copy()
    gaps.loc[[0, 1, 2], "score"] = None
    gaps.loc[9, "replicate"] = gaps.loc[8, "replicate"]  # rows 9 and 10 of the part: one cell, one replicate
    gaps.to_csv(tmp_path / "log" / "judge=j2" / "a.csv", index=False)
    with pytest.raises(DesignError, match=r"row 9 of judge=j2/a\.csv, row 10 of judge=j2/a\.csv"):
        eg.fit(eg.read(tmp_path / "log"), object="system", drop_missing=True)
    out = CliRunner().invoke(main, ["components", str(tmp_path / "log"), "--drop-missing", "--engine", "pandas"])
    assert out.exit_code == 2 and "row 9 of judge=j2/a.csv" in out.output
