"""CSV cells a spreadsheet would run (issue 40.10, OWASP's CSV injection): every CSV evalgauge writes (export,
export --judgments, import -o, and the same on stdout) writes a text cell starting with =, +, -, @, a tab or
a carriage return with a leading ', leaves numbers as they are, and writes them raw with --raw-csv."""

import csv
import io
import sqlite3

import pandas as pd
import pytest
from click.testing import CliRunner

from evalgauge.cli import main
from evalgauge.outputs import csv_safe

FORMULAS = ['=HYPERLINK("http://evil.example","x")', "+cmd|' /C calc'!A0", "-2+3+cmd|' /C calc'!A0", "@SUM(1+1)",
            "\t=1+1", "\r=1+1"]


@pytest.mark.parametrize("value", FORMULAS)
def test_a_formula_is_written_as_text(value):
    assert csv_safe(value) == "'" + value


@pytest.mark.parametrize("value", ["-0.5", "+3", "-1e-3", "plain", "", "a=b", 3.0, -2, None])
def test_numbers_and_other_cells_are_left_as_they_are(value):
    assert csv_safe(value) == value


def _cells(text: str) -> list[str]:
    return [c for row in csv.reader(io.StringIO(text)) for c in row]


def test_import_and_its_stdout_write_formulas_as_text(tmp_path):
    wide = pd.DataFrame({"model": FORMULAS[:4], "question": ["q1", "q2", "@q3", "-4"],
                         "judge_a": [1.0, -2.0, 3.0, 4.0], "judge_b": [2.0, 3.0, -4.5, 5.0]})
    wide.to_csv(tmp_path / "wide.csv", index=False)
    runner = CliRunner()
    args = ["import", "wide", str(tmp_path / "wide.csv"), "--id", "system=model", "--id", "item=question",
            "--columns", "judge=judge_a,judge_b"]
    for out, raw in ((tmp_path / "safe.csv", False), (tmp_path / "raw.csv", True)):
        res = runner.invoke(main, [*args, "-o", str(out), *(["--raw-csv"] if raw else [])])
        assert res.exit_code == 0, res.output
        cells = _cells(out.read_text())
        if raw:
            assert set(FORMULAS[:4]) <= set(cells) and "@q3" in cells
        else:
            assert not any(c.startswith(("=", "+", "@", "\t", "\r")) for c in cells)
            assert {"'" + f for f in FORMULAS[:4]} <= set(cells) and "'@q3" in cells
            assert {"-4", "-2.0", "-4.5"} <= set(cells)  # numbers stay numbers
    res = runner.invoke(main, [*args, "-o", "-"])
    assert res.exit_code == 0 and "'=HYPERLINK" in res.output and "\n=HYPERLINK" not in res.output


def test_export_writes_a_completion_that_is_a_formula_as_text(tmp_path, monkeypatch):
    from evalgauge.collect.runner import run
    from hostile import HostileServer, awkward_levels_config  # a run against the loopback server
    from serve_sim import KEY

    monkeypatch.setenv("SIM_KEY", KEY)
    server = HostileServer("good", KEY)
    try:
        cfg = awkward_levels_config(tmp_path, server)
        run(cfg)
    finally:
        server.stop()
    con = sqlite3.connect(cfg.database)
    con.execute("UPDATE calls SET completion = ?, model = ? WHERE rowid % 2 = 0", (FORMULAS[0], FORMULAS[3]))
    con.commit()
    con.close()
    runner = CliRunner()
    for extra in ([], ["--judgments"]):
        for raw in (False, True):
            out = tmp_path / f"export{len(extra)}{int(raw)}.csv"
            res = runner.invoke(main, ["export", str(cfg.database), "-o", str(out), *extra,
                                       *(["--raw-csv"] if raw else [])])
            assert res.exit_code == 0, res.output
            cells = _cells(out.read_text())
            risky = [c for c in cells if c.startswith(("=", "+", "@", "\t", "\r"))
                     or (c.startswith("-") and not _number(c))]
            if raw:  # the calls' completions and models hold the formulas; the judgments table does not
                assert bool(risky) == (not extra)
            else:
                assert risky == [], risky[:3]
            if not extra and not raw:
                assert "'" + FORMULAS[0] in cells and "'" + FORMULAS[3] in cells
    # the levels holding "|" and "\" of the run come out whole (and "|y" is no formula)
    assert "|y" in _cells((tmp_path / "export00.csv").read_text())


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
