"""A run database on the engine path and in pieces: `export` streams the calls (Parquet with the table's types,
CSV), and `components RUN --engine duckdb` reduces its judgments to cells through a temporary Parquet file,
giving the components the in-memory reading gives."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import evalgauge as eg
from evalgauge.cli import main
from evalgauge.errors import DataError
from evalgauge.io.engine import reduce_cells
from evalgauge.io.runs import write_calls_parquet
from evalgauge.store import RunStore
from records import stored_record

pytest.importorskip("duckdb")


def run_database(path, *, systems=3, items=30, judges=3, reps=2, failed=(), seed=0):
    """A pairwise-free run of known structure: system + item + judge effects and noise; ``failed`` calls (their
    indices) were not parsed (no score)."""
    rng = np.random.default_rng(seed)
    s_eff, i_eff, j_eff = rng.normal(0, 1, systems), rng.normal(0, 1, items), rng.normal(0, 0.5, judges)
    store = RunStore(path, writer=True)
    k = 0
    try:
        for s in range(systems):
            for i in range(items):
                for j in range(judges):
                    for r in range(1, reps + 1):
                        score = None if k in failed else float(s_eff[s] + i_eff[i] + j_eff[j] + rng.normal())
                        store.record(stored_record(k, key=f"{s}|{i}|{j}|{r}", item=f"q{i}", system=f"sys{s}",
                                                   judge=f"judge{j}", replicate=r, score=score,
                                                   parse_error="no score" if score is None else None,
                                                   completion=f"completion {k} " + "x" * 50))
                        k += 1
    finally:
        store.close()
    return path


def test_a_run_database_on_the_engine_gives_the_in_memory_components(tmp_path):
    db = run_database(tmp_path / "run.sqlite")
    on_rows = eg.fit(db)
    on_cells = eg.fit(db, engine="duckdb")
    assert on_cells.components.method == on_rows.components.method == "anova"
    for comp in on_rows.components.components:
        assert on_cells.components.sigma2(comp.name) == pytest.approx(comp.variance, rel=1e-9, abs=1e-12)
    out = CliRunner().invoke(main, ["components", str(db), "--engine", "duckdb"])
    assert out.exit_code == 0, out.output
    assert "engine: scanning 540 rows in 1 file(s)" in out.stderr
    assert "reduced 540 judgments in 1 file(s) to 270 cells" in out.stdout


def test_failed_parses_are_empty_scores_named_with_the_run(tmp_path):
    db = run_database(tmp_path / "run.sqlite", failed=(5, 17, 200))
    with pytest.raises(DataError, match=r"run\.sqlite: 3 of 540 judgment\(s\) have an empty 'score' \(the first in "
                                        r".*run\.sqlite \(calls\)\)"):
        reduce_cells(db)
    cells, info = reduce_cells(db, drop_missing=True)
    assert info["empty_dropped"] == 3 and int(cells["n"].sum()) == 537
    on_rows = eg.fit(db, drop_missing=True)
    on_cells = eg.fit(db, engine="duckdb", drop_missing=True)
    assert on_cells.components.method == "reml"
    assert on_cells.components.reml.criterion == pytest.approx(on_rows.components.reml.criterion, abs=1e-8)
    with pytest.raises(DataError, match="reduce it with `engine` duckdb"):
        reduce_cells(db, engine="spark")


def test_export_streams_the_calls_in_pieces_with_the_tables_types(tmp_path):
    db = run_database(tmp_path / "run.sqlite", failed=(3,))
    written = write_calls_parquet(db, str(tmp_path / "calls.parquet"), size=7)  # 540 calls in 78 pieces
    back = pd.read_parquet(tmp_path / "calls.parquet")
    store = RunStore(db)
    try:
        whole = store.calls()
    finally:
        store.close()
    assert written == len(back) == len(whole) == 540
    assert str(back["replicate"].dtype) == "int64" and str(back["score"].dtype) == "float64"
    pd.testing.assert_frame_equal(back[["key", "item", "judge", "completion"]], whole[["key", "item", "judge",
                                                                                      "completion"]])
    assert np.isnan(back["score"].iloc[3]) and back["parse_error"].iloc[3] == "no score"
    out = CliRunner().invoke(main, ["export", str(db), "--format", "csv", "-o", str(tmp_path / "calls.csv")])
    assert out.exit_code == 0 and "540 rows written" in out.output
    csv = pd.read_csv(tmp_path / "calls.csv")
    assert list(csv.columns) == list(whole.columns) and len(csv) == 540
    assert csv["score"].isna().sum() == 1 and csv["replicate"].dtype == np.int64
    # the format from --parquet or from --out's suffix; two that disagree are refused before anything is written
    runner = CliRunner()
    for args, name in ((["--parquet"], "a.parquet"), ([], "b.parquet"), (["--judgments"], "c.parquet")):
        out = runner.invoke(main, ["export", str(db), *args, "-o", str(tmp_path / name)])
        assert out.exit_code == 0, out.output
        back = pd.read_parquet(tmp_path / name)
        assert len(back) == 540 and ("completion" in back) != ("--judgments" in args)
    for args in (["--format", "csv", "--parquet"], ["--format", "csv", "-o", str(tmp_path / "d.parquet")],
                 ["--parquet", "-o", str(tmp_path / "d.csv")]):
        out = runner.invoke(main, ["export", str(db), *args])
        assert out.exit_code == 2 and "the output format is unclear" in out.output
    assert not (tmp_path / "d.parquet").exists() and not (tmp_path / "d.csv").exists()
    out = runner.invoke(main, ["export", str(db), "--parquet"])
    assert out.exit_code == 0 and len(pd.read_parquet(db.with_suffix(".parquet"))) == 540


def _edit(db, sql: str) -> None:
    """A hand edit of the run database, as a user might make one."""
    import sqlite3

    con = sqlite3.connect(db)
    con.execute(sql)
    con.commit()
    con.close()


def test_a_value_of_the_wrong_type_is_named_with_its_row_and_column(tmp_path):
    db = run_database(tmp_path / "run.sqlite", systems=1, items=4, judges=1, reps=1)
    _edit(db, "UPDATE calls SET score = 'three' WHERE key = '0|2|0|1'")
    with pytest.raises(DataError, match=r"run\.sqlite: calls row 3, column 'score' holds 'three', not double"):
        write_calls_parquet(db, str(tmp_path / "x.parquet"))
    out = CliRunner().invoke(main, ["export", str(db), "--format", "parquet", "-o", str(tmp_path / "y.parquet")])
    assert out.exit_code == 2 and "calls row 3" in out.output and not (tmp_path / "y.parquet").exists()
    _edit(db, "UPDATE calls SET score = 3.0, input_tokens = 99999999999999999999 WHERE key = '0|2|0|1'")
    # SQLite keeps an integer beyond 64 bits as a real: named as a value of the wrong kind
    with pytest.raises(DataError, match=r"calls row 3, column 'input_tokens' holds '1e\+20', not int64"):
        write_calls_parquet(db, str(tmp_path / "z.parquet"))
