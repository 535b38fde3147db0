"""One set of schema rules on every engine (issue 40.9): the same file through the in-memory reader and
through DuckDB gives the same outcome: the same components, or a refusal on both (exit 2, no traceback)."""

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from evalgauge.cli import main
from evalgauge.simulate import simulate, sizing_preset


def _base() -> pd.DataFrame:
    return simulate(sizing_preset(systems=4, items=15, judges=3, replicates=2), seed=11)


def _cases(tmp_path):
    rng = np.random.default_rng(0)
    f = _base()
    comment = pd.Series([None] * len(f), dtype=object)
    comment.iloc[rng.choice(len(f), 5, replace=False)] = "checked by hand"
    cases = {
        "plain": f,
        "a mostly empty text column": f.assign(comment=comment),
        "an extra number column": f.assign(latency_ms=rng.integers(100, 900, len(f))),
        "a timestamp column": f.assign(created=pd.Timestamp("2026-01-01") + pd.to_timedelta(np.arange(len(f)), "s")),
        "an item id that is a number": f.assign(item=f["item"].str.extract(r"(\d+)")[0].astype(int)),
        "a single-level facet": f.assign(variant="v1"),
        "column names with spaces": f.rename(columns={"score": "score"}).assign(**{"notes here": "x"}),
        "an empty score": f.assign(score=f["score"].where(np.arange(len(f)) != 7)),
        "a text score": f.assign(score=f["score"].astype(object).where(np.arange(len(f)) != 3, "n/a")),
        "a repeated row": pd.concat([f, f.iloc[[5]]], ignore_index=True),
        "no facet recognised": f.rename(columns={"system": "sys", "item": "q", "judge": "rater"}),
    }
    paths = {}
    for k, (name, frame) in enumerate(cases.items()):
        path = tmp_path / f"case{k}.csv"
        frame.to_csv(path, index=False)
        paths[name] = path
    return paths


def _run(path, engine, tmp_path):
    out_json = tmp_path / f"{path.stem}-{engine}.json"
    out = CliRunner().invoke(main, ["components", str(path), "--engine", engine, "--json", str(out_json)])
    assert "Traceback" not in out.output, out.output
    if out.exit_code != 0:
        return out.exit_code, None
    payload = json.loads(out_json.read_text())
    return 0, {frozenset(c["component"].split(":")): c["variance"] for c in payload["components"]}


def test_every_file_has_the_same_outcome_on_both_engines(tmp_path):
    outcomes = {}
    for name, path in _cases(tmp_path).items():
        pandas_code, pandas_fit = _run(path, "pandas", tmp_path)
        duck_code, duck_fit = _run(path, "duckdb", tmp_path)
        outcomes[name] = (pandas_code, duck_code)
        assert pandas_code == duck_code, (name, pandas_code, duck_code)
        if pandas_fit is not None:
            assert set(pandas_fit) == set(duck_fit), name
            for key, value in pandas_fit.items():
                assert duck_fit[key] == pytest.approx(value, rel=1e-6, abs=1e-9), (name, key)
    assert outcomes["plain"] == (0, 0) and outcomes["a mostly empty text column"] == (0, 0)
    assert outcomes["no facet recognised"] == (2, 2) and outcomes["a text score"] == (2, 2)


def test_duckdb_running_out_of_memory_is_a_message_not_a_traceback(tmp_path, monkeypatch):
    """A log whose exact replicate check outgrew DuckDB's memory once ended in an OutOfMemoryException
    traceback: any step of the reduction that DuckDB cannot finish in its memory is named with what to do."""
    import duckdb

    import evalgauge.io.engine.on_duckdb as engine

    path = tmp_path / "j.csv"
    _base().to_csv(path, index=False)
    real = engine._arrow

    def starved(con, sql):
        raise duckdb.OutOfMemoryException("Out of Memory Error: could not allocate block of size 256.0 KiB")

    monkeypatch.setattr(engine, "_arrow", starved)
    out = CliRunner().invoke(main, ["components", str(path), "--engine", "duckdb"])
    assert out.exit_code == 2 and "ran out of the 1GB it may use" in out.output and "Traceback" not in out.output
    monkeypatch.setattr(engine, "_arrow", real)
