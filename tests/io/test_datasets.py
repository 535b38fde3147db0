"""Datasets, not only files: a Parquet folder, a glob, hive-partitioned paths, read as one table by every
reading command and eg.read, with bad parts named by file and column and nothing written inside the folder."""

from __future__ import annotations

import json

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


@pytest.mark.parametrize("name", ["x[1].csv", "y*?.csv", "z{a,b}.csv"])
def test_a_file_name_with_glob_characters_is_read_literally_by_every_engine(tmp_path, name):
    """components 'x[1].csv' --engine duckdb once fitted x1.csv: DuckDB reads every path as a glob."""
    frame = _frame()
    frame.to_csv(tmp_path / name, index=False)
    decoy = frame[frame["item"].isin(sorted(frame["item"].unique())[:5])]
    for other in ("x1.csv", "y12.csv", "za.csv", "zb.csv"):  # what the name matches as a pattern
        decoy.to_csv(tmp_path / other, index=False)
    fits = {}
    for engine in ("pandas", "duckdb"):
        out = CliRunner().invoke(main, ["components", str(tmp_path / name), "--engine", engine,
                                        "--json", str(tmp_path / f"{engine}.json")])
        assert out.exit_code == 0, out.output
        fits[engine] = json.loads((tmp_path / f"{engine}.json").read_text())
    assert fits["pandas"]["n_obs"] == fits["duckdb"]["n_obs"] == len(frame)
    assert fits["duckdb"]["engine"]["files"] == 1
    for a, b in zip(fits["pandas"]["components"], fits["duckdb"]["components"], strict=True):
        assert a["variance"] == pytest.approx(b["variance"], rel=1e-9, abs=1e-12)


def test_a_recursive_glob_does_not_follow_a_folder_link_that_loops(tmp_path):
    frame = _frame()
    root = tmp_path / "d"
    (root / "a").mkdir(parents=True)
    frame.to_parquet(root / "a" / "part-0.parquet", index=False)
    (root / "a" / "loop").symlink_to(root, target_is_directory=True)  # d/a/loop -> d
    (root / "elsewhere").symlink_to(tmp_path, target_is_directory=True)
    from evalgauge.io.datasets import glob_files

    assert glob_files(str(root / "**" / "*.parquet")) == [root / "a" / "part-0.parquet"]
    for engine in ("pandas", "duckdb"):
        out = CliRunner().invoke(main, ["components", str(root / "**" / "*.parquet"), "--engine", engine])
        assert out.exit_code == 0, (engine, out.output)


def test_the_glob_matches_as_the_shell_does(tmp_path):
    from evalgauge.io.datasets import glob_files

    for rel in ("p/a.csv", "p/b.csv", "p/.hidden.csv", "p/q/c.csv", "p/q/r/d.csv", "p/e.txt"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x\n")
    names = lambda pattern: [str(p.relative_to(tmp_path)) for p in glob_files(str(tmp_path / pattern))]  # noqa: E731
    assert names("p/*.csv") == ["p/a.csv", "p/b.csv"]
    assert names("p/**/*.csv") == ["p/a.csv", "p/b.csv", "p/q/c.csv", "p/q/r/d.csv"]
    assert names("p/[ab].csv") == ["p/a.csv", "p/b.csv"] and names("p/?.csv") == ["p/a.csv", "p/b.csv"]
    assert names("p/.*.csv") == ["p/.hidden.csv"] and names("p/*/c.csv") == ["p/q/c.csv"]
    assert names("nothing/*.csv") == []
