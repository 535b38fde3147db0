"""No output may destroy an input; outputs are checked before the work and written atomically; JSON is valid."""

import json
import math
import sqlite3

import numpy as np
import pytest
from click.testing import CliRunner

from evalgauge.cli import main
from evalgauge.errors import EvalGaugeError
from evalgauge.outputs import atomic_write_text, check_outputs, dumps, json_safe
from evalgauge.simulate import PRESETS, simulate


@pytest.fixture
def judgments(tmp_path):
    path = tmp_path / "same.csv"
    simulate(PRESETS["sizing"](items=8, systems=3, judges=2, replicates=2), seed=1).to_csv(path, index=False)
    return path


@pytest.mark.parametrize("args", [
    ["analyze", "{d}", "--report", "{d}"],
    ["analyze", "{d}", "--json", "{d}"],
    ["components", "{d}", "--json", "{d}"],
    ["import", "alpaca-eval", "{d}", "-o", "{d}"],
    ["screen", "{d}", "--json", "{d}"],
])
def test_an_output_that_is_the_input_is_refused(judgments, args):
    before = judgments.read_bytes()
    out = CliRunner().invoke(main, [a.format(d=judgments) for a in args])
    assert out.exit_code == 2, out.output
    assert "that is the input" in out.output
    assert judgments.read_bytes() == before


def test_export_never_replaces_the_run_database(tmp_path):
    db = tmp_path / "run.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE calls (key TEXT)")
    con.commit()
    con.close()
    before = db.read_bytes()
    for target in (db, tmp_path / "run.sqlite-wal"):
        out = CliRunner().invoke(main, ["export", str(db), "-o", str(target)])
        assert out.exit_code == 2 and "that is the input" in out.output
    assert db.read_bytes() == before


def test_a_missing_output_folder_is_named_before_the_fit(judgments, tmp_path, monkeypatch):
    import evalgauge.api as api

    def boom(*a, **k):  # the fit must not start
        raise AssertionError("fitted before checking the output")

    monkeypatch.setattr(api, "analyze", boom)
    monkeypatch.setattr(api, "fit", boom)
    out = CliRunner().invoke(main, ["analyze", str(judgments), "--report", str(tmp_path / "nope" / "r.html")])
    assert out.exit_code == 2 and "does not exist" in out.output and "mkdir -p" in out.output


def test_symlinked_output_to_the_input_is_refused(judgments, tmp_path):
    link = tmp_path / "link.json"
    link.symlink_to(judgments)
    with pytest.raises(EvalGaugeError, match="that is the input"):
        check_outputs([judgments], {"--json": link})


def test_atomic_write_leaves_no_partial_file(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old")
    atomic_write_text(target, "new")
    assert target.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]  # no temporary left behind


def test_json_sanitiser_turns_nan_into_null():
    payload = {"a": float("nan"), "b": [np.float64("inf"), np.int64(3), np.bool_(True)], "c": np.array([1.5, np.nan])}
    text = dumps(payload)
    assert json.loads(text) == {"a": None, "b": [None, 3, True], "c": [1.5, None]}
    assert json_safe(-math.inf) is None
