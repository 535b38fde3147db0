"""The file readers' fast paths give what the plain readings give: a delimited file read once with pandas'
inference and its non-text columns again equals one reading with ``dtype=str``; the byte check of a text column
never lets a control character through."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import FIXTURES, ROOT
from evalgauge.io import files

EXAMPLES = ROOT / "examples"

#: cells pandas' inference reads as something other than the text written
TRICKY = ["01", "1", "1.50", "-0", "1e5", "inf", "True", "false", "NA", "NaN", "null", "", " x", "x ", "a,b",
          'say "hi"', "line\nbreak", "é", "0x1f", "2024-01-02"]


def plain(path: Path, sep: str = ",") -> pd.DataFrame:
    return pd.read_csv(path, sep=sep, dtype=str, keep_default_na=True, skipinitialspace=True, encoding="utf-8")


def write(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    return path


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), columns=st.integers(1, 5), n=st.integers(1, 25))
def test_delimited_reading_equals_reading_every_column_as_text(tmp_path, data, columns, n):
    header = [f"c{k}" for k in range(columns - 1)] + ["c0"]  # a repeated header too
    pools = [data.draw(st.lists(st.sampled_from([*TRICKY, "a", "b", "sys-1"]), min_size=1, max_size=4))
             for _ in range(columns)]
    rows = [[data.draw(st.sampled_from(pool)) for pool in pools] for _ in range(n)]
    path = write(tmp_path / "t.csv", header, rows)
    pd.testing.assert_frame_equal(files._read_delimited(path, ",", "utf-8"), plain(path))


def test_a_column_that_turns_to_text_late_and_longer_rows(tmp_path):
    """A column numeric in the first 1,000 rows and text later, an empty column, a boolean column; and a file
    whose rows have one field more than its header (pandas' implicit index): the same frame either way."""
    n = 3000
    rows = [[f"s{k % 7}", f"i{k}", str(k) if k < 2500 else f"x{k}", "", "True" if k % 2 else "False",
             f"j{k % 3}"] for k in range(n)]
    path = write(tmp_path / "late.csv", ["system", "item", "late", "empty", "flag", "judge"], rows)
    got = files._read_delimited(path, ",", "utf-8")
    pd.testing.assert_frame_equal(got, plain(path))
    assert got["late"].iloc[0] == "0" and got["empty"].isna().all() and got["flag"].iloc[1] == "True"
    longer = tmp_path / "longer.csv"
    longer.write_text("a,b\n" + "".join(f"k{k},x{k},{k}\n" for k in range(20)))
    pd.testing.assert_frame_equal(files._read_delimited(longer, ",", "utf-8"), plain(longer))
    semi = tmp_path / "semi.csv"
    semi.write_text("system;item;score\n" + "".join(f"s{k % 3};0{k};{k / 2}\n" for k in range(50)))
    pd.testing.assert_frame_equal(files._read_delimited(semi, ";", "utf-8"), plain(semi, ";"))


def test_bundled_files_read_the_same():
    paths = sorted(FIXTURES.rglob("*.csv")) + sorted(EXAMPLES.rglob("*.csv"))
    assert len(paths) > 10
    for path in paths:
        try:
            want = plain(path)
        except (pd.errors.ParserError, ValueError, UnicodeDecodeError):
            continue  # a damaged file kept to be refused: the reader's messages are tested elsewhere
        pd.testing.assert_frame_equal(files._read_delimited(path, ",", "utf-8"), want, obj=str(path))


def arrow_text(values: list[str | None]) -> pd.Series:
    return pd.Series(pd.arrays.ArrowStringArray(pa.chunked_array([pa.array(values, type=pa.large_string())])))


@pytest.mark.parametrize("control", ["\x00", "\x07", "\x0b", "\r", "\x1b", "\x1f", "\x7f", "\x80", "\x85", "\x9f"])
def test_a_control_character_is_always_seen(control):
    values = ["model-a", None, f"x{control}y", "model-b"]
    assert files._may_hold_controls(arrow_text(values))
    escaped = files.escape_controls(pd.DataFrame({"label": arrow_text(values)}))["label"]
    assert f"\\x{ord(control):02x}" in escaped.iloc[2] and escaped.iloc[0] == "model-a"


def test_clean_text_skips_the_expression_and_a_slice_counts_only_its_own_bytes():
    assert not files._may_hold_controls(arrow_text(["model-a", "tab\there", "new\nline", "café", None]))
    table = pa.table({"x": pa.array(["a", "b\x1b", "c", "d"], type=pa.string())})
    assert not files._may_hold_controls(table.slice(2, 2).to_pandas()["x"])
    assert files._may_hold_controls(table.slice(0, 2).to_pandas()["x"])
    assert files._may_hold_controls(pd.Series(["a", "b"], dtype=object))  # not Arrow: the expression decides


def test_reading_a_text_file_keeps_labels_and_refuses_what_it_did(tmp_path):
    path = tmp_path / "j.csv"
    path.write_text("system,item,judge,score\nA,01,j1,3\nA,1,j1,4\nB,01,j1,2\nB,1,j1,5\n")
    frame = files.read_table(path, "csv")
    assert list(frame["item"]) == ["01", "1", "01", "1"] and list(frame["score"]) == ["3", "4", "2", "5"]
    broken = tmp_path / "broken.csv"
    broken.write_text("a,b\n" + "x,y\n" * 1500 + "x,y,z,w\n")
    with pytest.raises(files.DataError, match="could not be read as CSV"):
        files.read_table(broken, "csv")


def test_counts_from_codes_equal_counts_from_labels(monkeypatch):
    """count_battles (integer codes, one composite key) gives the entries battle_counts gives from the labels,
    on the bincount path (no items), the sort path (items) and the column-sort path past the key's range."""
    from evalgauge.pairwise import battle_counts, code_battles, count_battles

    rng = np.random.default_rng(3)
    n = 4000
    names = np.array([f"m{k}" for k in range(9)])
    a = rng.integers(0, 9, n)
    b = (a + rng.integers(1, 9, n)) % 9
    winner = rng.choice(["model_a", "model_b", "tie"], n)
    frame = pd.DataFrame({"model_a": names[a], "model_b": names[b], "winner": winner,
                          "item": rng.choice([f"q{k}" for k in range(60)] + [None], n)})
    weights = rng.choice([1.0, 3.0], n)

    def labels_route(data, w):
        battles = code_battles(data)
        table = pd.DataFrame({"model_a": np.asarray(battles.systems)[battles.a],
                              "model_b": np.asarray(battles.systems)[battles.b], "outcome": battles.outcome,
                              "rows": np.ones(battles.n, dtype=np.int64)})
        if "item" in battles.frame:
            table["item"] = battles.frame["item"].to_numpy()
        if w is not None:
            table["weight"] = w
        return battle_counts(table)

    def same(x, y):
        assert x.systems == y.systems and x.battles_are_rows == y.battles_are_rows
        for name in ("a", "b", "outcome"):
            np.testing.assert_array_equal(getattr(x.entries, name), getattr(y.entries, name))
        np.testing.assert_array_equal(x.rows, y.rows)
        np.testing.assert_array_equal(x.weight, y.weight)
        pd.testing.assert_frame_equal(x.entries.frame, y.entries.frame)

    cases = [(frame.drop(columns="item"), None), (frame.drop(columns="item"), weights), (frame, None),
             (frame, weights)]
    for data, w in cases:
        want = labels_route(data, w)
        same(count_battles(code_battles(data), w), want)
        with monkeypatch.context() as m:
            m.setattr("evalgauge.pairwise.data._KEY_LIMIT", 2)
            same(count_battles(code_battles(data), w), want)
    assert len(labels_route(frame, None).rows) < n  # judgments were merged into entries

