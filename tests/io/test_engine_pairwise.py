"""`pairwise --engine duckdb`: a pairwise log counted over its files (distinct slot-A system, slot-B system, verdict,
item and weight with their judgments), and the Bradley-Terry fit and both bootstraps on those counts, equal to the
analysis of the rows."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from battles import battle_log, hive_folder
from evalgauge.analysis.pairwise import analyze_battle_counts, analyze_pairwise
from evalgauge.cli import main
from evalgauge.errors import DataError
from evalgauge.io import read_judgments
from evalgauge.io.engine import reduce_battles
from evalgauge.pairwise import count_battles
from evalgauge.pairwise.bootstrap import _WithinBattles

pytest.importorskip("duckdb")


def _same_analysis(on_counts, on_rows) -> None:
    a = on_counts.table.set_index("system")
    b = on_rows.table.set_index("system").loc[a.index, a.columns]
    pd.testing.assert_frame_equal(a, b, rtol=1e-12, atol=1e-12)
    for key in ("judgments", "nu", "position_advantage_log_odds"):
        assert on_counts.payload.get(key) == pytest.approx(on_rows.payload.get(key), rel=1e-12)
    bias, want = on_counts.payload.get("position_bias"), on_rows.payload.get("position_bias")
    assert (bias is None) == (want is None)
    if bias is not None:
        assert bias["per_system"] == pytest.approx(want["per_system"], rel=1e-12)


def test_the_counts_give_the_rows_fit_and_bootstraps(tmp_path):
    frame = battle_log()
    folder = hive_folder(frame, tmp_path / "log")
    counts, info = reduce_battles(folder)
    assert info == {"rows": len(frame), "files": 4, "entries": len(counts.rows),
                    "battles": frame.assign(lo=frame[["model_a", "model_b"]].min(axis=1),
                                            hi=frame[["model_a", "model_b"]].max(axis=1))
                    .groupby(["lo", "hi", "item"]).ngroups}
    assert counts.presentation_order and not counts.battles_are_rows and len(counts.rows) < len(frame)
    on_counts = analyze_battle_counts(counts, n_boot=120, seed=5)
    on_rows = analyze_pairwise(read_judgments(folder), n_boot=120, seed=5)
    # the same entries in the same order: the fit, both Elo scales and both seeded bootstraps agree exactly
    _same_analysis(on_counts, on_rows)
    assert on_counts.comparison is not None
    pd.testing.assert_frame_equal(on_counts.comparison.pairs, on_rows.comparison.pairs)
    # the strengths are recovered: the last system is the strongest
    assert on_counts.table["system"].iloc[0] == "sys-5"
    # the win indicators' G-study from the engine's cells (system x item x judge x slot) is the rows' REML
    assert on_counts.components.method == on_rows.components.method == "reml"
    assert on_counts.components.reml.criterion == pytest.approx(on_rows.components.reml.criterion, abs=1e-6)
    for comp in on_rows.components.components:
        assert on_counts.components.sigma2(comp.name) == pytest.approx(comp.variance, rel=1e-6, abs=1e-9)
    assert on_counts.payload["mdd95_win_rate_points"] == pytest.approx(on_rows.payload["mdd95_win_rate_points"],
                                                                        rel=1e-6)
    # without the G-study when asked, on either path, and the rest unchanged
    lean_rows = analyze_pairwise(read_judgments(folder), n_boot=120, seed=5, components=False)
    lean_counts = analyze_battle_counts(counts, n_boot=120, seed=5, components=False)
    assert lean_rows.components is lean_counts.components is None
    assert "components" not in lean_counts.payload and "mdd95_win_rate_points" not in lean_counts.payload
    _same_analysis(lean_counts, on_rows)


def test_a_log_without_items_is_one_battle_per_judgment_with_weights(tmp_path):
    frame = battle_log(seed=2).drop(columns=["item", "order"])
    frame["weight"] = np.where(np.random.default_rng(3).random(len(frame)) < 0.3, 3.0, 1.0)
    (tmp_path / "w").mkdir()
    frame.iloc[:1500].to_csv(tmp_path / "w" / "a.csv", index=False)
    frame.iloc[1500:].to_csv(tmp_path / "w" / "b.csv", index=False)
    counts, info = reduce_battles(tmp_path / "w")
    assert counts.battles_are_rows and counts.weighted and info["battles"] == len(frame)
    on_counts = analyze_battle_counts(counts, n_boot=60, seed=1)
    on_rows = analyze_pairwise(read_judgments(tmp_path / "w"), n_boot=60, seed=1)
    _same_analysis(on_counts, on_rows)
    share = {r["system"]: r["win_share"] for r in on_counts.payload["weighted_win_share"]}
    assert share == pytest.approx({r["system"]: r["win_share"] for r in on_rows.payload["weighted_win_share"]})


def test_the_within_battle_draw_keeps_each_battles_picks_and_their_expected_split():
    # battle 0: entries of 2 and 1 judgments; battle 1: one entry of 4; battle 2: entries of 1, 1, 2
    battle = np.array([0, 0, 1, 2, 2, 2])
    rows = np.array([2, 1, 4, 1, 1, 2])
    within = _WithinBattles(battle, rows, 3)
    drawn = np.array([2, 1, 3])  # battle 0 drawn twice, 1 once, 2 three times
    rng = np.random.default_rng(0)
    reps = 20000
    draws = np.array([within.draw(rng, drawn) for _ in range(reps)])
    # every draw picks (times drawn) x (judgments) from each battle, never outside it
    assert np.all(np.bincount(battle, weights=d, minlength=3) == drawn * np.array([3, 4, 4]) for d in draws)
    assert np.all(draws[:, 2] == 4)
    # multinomial: mean picks x share, sd sqrt(picks share (1 - share)); the mean of 20,000 within 5 SE
    picks = (drawn * np.array([3, 4, 4]))[battle]
    share = rows / np.array([3, 4, 4])[battle]
    sd = np.sqrt(picks * share * (1 - share))
    assert np.all(np.abs(draws.mean(axis=0) - picks * share) <= 5 * sd / np.sqrt(reps) + 1e-12)
    assert draws.std(axis=0) == pytest.approx(sd, rel=0.03, abs=1e-12)


def test_counting_rows_or_files_gives_the_same_entries(tmp_path):
    frame = battle_log(n=800, seed=4)
    frame.to_parquet(tmp_path / "one.parquet", index=False)
    from_engine, _ = reduce_battles(tmp_path / "one.parquet")
    from evalgauge.pairwise import code_battles

    from_rows = count_battles(code_battles(read_judgments(tmp_path / "one.parquet")))
    np.testing.assert_array_equal(from_engine.rows, from_rows.rows)
    np.testing.assert_array_equal(from_engine.entries.a, from_rows.entries.a)
    np.testing.assert_array_equal(from_engine.entries.outcome, from_rows.entries.outcome)
    np.testing.assert_array_equal(from_engine.entries.frame["battle"], from_rows.entries.frame["battle"])


def test_pairwise_cli_on_the_engine(tmp_path):
    frame = battle_log(n=1200, seed=6)
    folder = hive_folder(frame, tmp_path / "log")
    runner = CliRunner()
    out = runner.invoke(main, ["pairwise", str(folder), "--engine", "duckdb", "--bootstrap", "40", "--json",
                               str(tmp_path / "e.json")])
    assert out.exit_code == 0, out.output
    assert f"engine: scanning {len(frame):,} rows in 4 file(s)" in out.stderr
    on_engine = json.loads((tmp_path / "e.json").read_text())
    assert on_engine["engine"]["name"] == "duckdb" and on_engine["engine"]["rows"] == len(frame)
    out = runner.invoke(main, ["pairwise", str(folder), "--engine", "pandas", "--bootstrap", "40", "--json",
                               str(tmp_path / "p.json")])
    assert out.exit_code == 0, out.output
    on_rows = json.loads((tmp_path / "p.json").read_text())
    assert on_engine["bradley_terry"] == on_rows["bradley_terry"]
    # the win-indicator components for `plan`, with a baseline left out, as from the rows
    for engine in ("duckdb", "pandas"):
        out = runner.invoke(main, ["pairwise", str(folder), "--engine", engine, "--bootstrap", "0", "--baseline",
                                   "sys-0", "--components-json", str(tmp_path / f"c-{engine}.json")])
        assert out.exit_code == 0, out.output
    cells_fit = json.loads((tmp_path / "c-duckdb.json").read_text())
    rows_fit = json.loads((tmp_path / "c-pandas.json").read_text())
    assert cells_fit["levels"]["system"] == rows_fit["levels"]["system"] == 5
    got = {c["component"]: c["variance"] for c in cells_fit["components"]}
    for comp in rows_fit["components"]:
        assert got[comp["component"]] == pytest.approx(comp["variance"], rel=1e-6, abs=1e-9)
    # --no-components: the same ratings without the G-study; asking for its file as well is a usage error
    for engine in ("duckdb", "pandas"):
        out = runner.invoke(main, ["pairwise", str(folder), "--engine", engine, "--bootstrap", "40",
                                   "--no-components", "--json", "-"])
        assert out.exit_code == 0, out.output
        lean = json.loads(out.stdout)
        assert "components" not in lean and lean["bradley_terry"] == on_rows["bradley_terry"]
        out = runner.invoke(main, ["pairwise", str(folder), "--engine", engine, "--bootstrap", "0", "--no-components"])
        assert out.exit_code == 0 and "Bradley-Terry" in out.output and "MDD95" not in out.output
    out = runner.invoke(main, ["pairwise", str(folder), "--no-components", "--components-json",
                               str(tmp_path / "none.json")])
    assert out.exit_code == 2 and "--no-components" in out.output and not (tmp_path / "none.json").exists()
    # the agreement with human votes from the distinct votes' counts: what the rows give
    voted = frame.assign(vote=np.random.default_rng(3).choice(["model_a", "model_b", "tie"], len(frame)))
    hive_folder(voted, tmp_path / "voted")
    agreement = {}
    for engine in ("duckdb", "pandas"):
        out = runner.invoke(main, ["pairwise", str(tmp_path / "voted"), "--engine", engine, "--bootstrap", "0",
                                   "--human", "vote", "--json", "-"])
        assert out.exit_code == 0, out.output
        agreement[engine] = json.loads(out.stdout)["human_agreement"]
    assert agreement["duckdb"] == agreement["pandas"] and agreement["duckdb"]["n"] == len(frame)
    out = runner.invoke(main, ["pairwise", str(folder), "--engine", "duckdb", "--human", "vote"])
    assert out.exit_code == 2 and "no column 'vote'" in out.output
    # columns named otherwise (a name with a quote or a dot is the file's text, not SQL), and a log of no rows
    renamed = frame.rename(columns={"model_a": 'le"ft', "model_b": "right.side"})
    renamed.to_parquet(tmp_path / "odd.parquet", index=False)
    out = runner.invoke(main, ["pairwise", str(tmp_path / "odd.parquet"), "--engine", "duckdb", "--model-a",
                               'le"ft', "--model-b", "right.side", "--bootstrap", "0"])
    assert out.exit_code == 0, out.output
    frame.iloc[:0].to_parquet(tmp_path / "none.parquet", index=False)
    out = runner.invoke(main, ["pairwise", str(tmp_path / "none.parquet"), "--engine", "duckdb"])
    assert out.exit_code == 2 and "has no data rows" in out.output
    renamed = frame.rename(columns={"model_a": "left", "model_b": "right", "winner": "verdict"})
    renamed.to_parquet(tmp_path / "renamed.parquet", index=False)
    out = runner.invoke(main, ["pairwise", str(tmp_path / "renamed.parquet"), "--engine", "duckdb", "--model-a",
                               "left", "--model-b", "right", "--winner", "verdict", "--bootstrap", "0"])
    assert out.exit_code == 0, out.output


@pytest.mark.parametrize(("column", "value", "message"), [
    ("winner", None, r"b\.parquet: column 'winner' is empty on 1 row\(s\)"),
    ("winner", "\x1b[31mA>>B", r"b\.parquet: column 'winner' must be model_a, model_b or tie .*'\\x1b\[31mA>>B'"),
    ("model_b", "sys-0", r"b\.parquet: a row compares 'sys-0' with itself"),
])
def test_bad_battles_are_named_with_their_file(tmp_path, column, value, message):
    frame = battle_log(n=400, seed=8)
    frame.loc[frame["model_a"] == "sys-0", "model_b"] = "sys-1"
    (tmp_path / "d").mkdir()
    frame.iloc[:200].to_parquet(tmp_path / "d" / "a.parquet", index=False)
    bad = frame.iloc[200:].copy()
    row = bad.index[bad["model_a"] == "sys-0"][0]
    bad[column] = bad[column].astype(object)
    bad.loc[row, column] = value
    bad.to_parquet(tmp_path / "d" / "b.parquet", index=False)
    with pytest.raises(DataError, match=message):
        reduce_battles(tmp_path / "d")
    out = CliRunner().invoke(main, ["pairwise", str(tmp_path / "d"), "--engine", "duckdb"])
    assert out.exit_code == 2 and "Traceback" not in out.output


def test_a_log_without_a_verdict_column_or_with_a_bad_weight(tmp_path):
    frame = battle_log(n=200, seed=9)
    frame.drop(columns="winner").to_parquet(tmp_path / "nowinner.parquet", index=False)
    with pytest.raises(DataError, match=r"nowinner\.parquet: no column 'winner' .*--winner"):
        reduce_battles(tmp_path / "nowinner.parquet")
    frame.assign(weight=["3"] * 199 + ["-1"]).to_csv(tmp_path / "w.csv", index=False)
    with pytest.raises(DataError, match=r"w\.csv: column 'weight' holds '-1'"):
        reduce_battles(tmp_path / "w.csv")
    frame.assign(weight=["3"] * 199 + [""]).to_csv(tmp_path / "w2.csv", index=False)
    with pytest.raises(DataError, match=r"w2\.csv: column 'weight' is empty on a row"):
        reduce_battles(tmp_path / "w2.csv")


def test_jsonl_systems_named_by_numbers_and_text_are_the_rows_systems(tmp_path):
    """A JSONL column mixing numbers and strings (DuckDB's JSON type) is read as its values' text: system 3 and
    system "sys-2" are 3 and sys-2, as on the rows, not JSON literals."""
    frame = battle_log(n=600, seed=8)
    named = {f"sys-{k}": (k if k % 2 else f"sys-{k}") for k in range(6)}
    records = [{**rec, "model_a": named[rec["model_a"]], "model_b": named[rec["model_b"]]}
               for rec in frame.to_dict(orient="records")]
    path = tmp_path / "battles.jsonl"
    path.write_text("".join(json.dumps(rec) + "\n" for rec in records))
    counts, _ = reduce_battles(path)
    assert sorted(counts.systems) == sorted(str(v) for v in named.values())
    _same_analysis(analyze_battle_counts(counts, n_boot=20, seed=1, components=False),
                   analyze_pairwise(read_judgments(path), n_boot=20, seed=1, components=False))
