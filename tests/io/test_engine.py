"""`components --engine duckdb`: the rows reduced to cell statistics in DuckDB over the files, only the cells in
Python, and the same components as the rows give."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import evalgauge as eg
from evalgauge.cli import main
from evalgauge.errors import DataError, EvalGaugeError
from evalgauge.estimate import estimate_from_sums
from evalgauge.estimate.model import model_from_design
from evalgauge.estimate.reml import fit_reml
from evalgauge.io.engine import reduce_cells, replicate_span, scan_size
from evalgauge.simulate import simulate, sizing_preset

pytest.importorskip("duckdb")


def _variances(fit) -> dict[str, float]:
    return {c.name: c.variance for c in fit.components.components}


def _variances_of(payload: str) -> dict[str, float]:
    """The components of a command's JSON."""
    return {c["component"]: c["variance"] for c in json.loads(payload)["components"]}


def _refusal(path, engine: str = "duckdb", **kw) -> str:
    """What the door says when it refuses ``path`` (a DataError's or DesignError's text)."""
    with pytest.raises(EvalGaugeError) as said:
        eg.fit(path, engine=engine, **kw)
    return str(said.value)


def _parts(frame: pd.DataFrame, folder, size: int = 100, kind: str = "parquet"):
    folder.mkdir()
    for k, (_, chunk) in enumerate(frame.groupby(np.arange(len(frame)) // size)):
        if kind == "parquet":
            chunk.to_parquet(folder / f"part-{k:03d}.parquet", index=False)
        else:
            chunk.to_csv(folder / f"part-{k:03d}.csv", index=False)
    return folder


def test_a_balanced_block_gets_the_closed_form_from_the_cells(tmp_path):
    frame = simulate(sizing_preset(systems=6, items=40, judges=4, replicates=3), seed=3)
    anova = eg.fit(frame, object="system").components
    assert anova.method == "anova"
    folder = _parts(frame, tmp_path / "bal", 500)
    vc = estimate_from_sums(reduce_cells(folder)[0])
    assert vc.method == "anova"
    for comp in anova.components:
        assert vc.sigma2(comp.name) == pytest.approx(comp.variance, rel=1e-9)
    # cells given in two pieces each (two engines' partial sums, say) are summed first: the same closed form
    cells = reduce_cells(folder)[0]
    halves = pd.concat([cells.assign(n=1, sum=cells["sum"] / 3, sum_squares=cells["sum_squares"] / 3),
                        cells.assign(n=2, sum=2 * cells["sum"] / 3, sum_squares=2 * cells["sum_squares"] / 3)])
    pieces = estimate_from_sums(halves)
    assert pieces.method == "anova"
    for comp in anova.components:
        assert pieces.sigma2(comp.name) == pytest.approx(comp.variance, rel=1e-9)
    # before the scan, the rows it will read, from the Parquet parts' metadata
    assert scan_size(folder)[:2] == (len(frame), 6)
    out = CliRunner().invoke(main, ["components", str(folder), "--engine", "duckdb"])
    assert out.exit_code == 0 and f"engine: scanning {len(frame):,} rows in 6 file(s)" in out.stderr


def test_an_unbalanced_log_gets_the_rows_reml_from_the_cells(tmp_path):
    frame = simulate(sizing_preset(systems=4, items=20, judges=3, replicates=2), seed=7).sample(frac=0.9,
                                                                                               random_state=1)
    folder = _parts(frame, tmp_path / "parts", kind="csv")
    cells, info = reduce_cells(folder)
    assert info == {"rows": len(frame), "files": 5, "empty_dropped": 0, "cells": len(cells)}
    vc = estimate_from_sums(cells)
    design = eg.infer_design(frame)
    rows = fit_reml(frame, model_from_design(design), object_facet=design.object, facet_order=design.names)
    assert vc.method == "reml" and vc.reml.criterion == pytest.approx(rows.reml.criterion, abs=1e-8)
    # DuckDB sums the cells in no fixed order, so the two fits see sums that differ in the last bits and may
    # take different damped steps; both stop where a Newton step would gain less than 1e-12 of the deviance
    # (1e-9 here), which this design's smallest AI curvature (2.4) allows theta to miss by 3e-5: components
    # agree to 1e-5 (measured: 1e-8 at most)
    for comp in rows.components:
        assert vc.sigma2(comp.name) == pytest.approx(comp.variance, rel=1e-5, abs=1e-12)
    scanned = eg.fit(folder, engine="duckdb").engine
    assert scanned["name"] == "duckdb" and scanned["rows"] == len(frame) and scanned["files"] == 5


def bad_logs(tmp_path):
    """Two datasets of 480 judgments for every engine's checks: ``texty`` (b.csv holds the score 'n.a.') and
    ``holes`` (7 empty scores in a.parquet); with the frame and b.csv's rows as text."""
    frame = simulate(sizing_preset(systems=4, items=20, judges=3, replicates=2), seed=7)
    texty = tmp_path / "texty"
    texty.mkdir()
    frame.iloc[:200].to_csv(texty / "a.csv", index=False)
    bad = frame.iloc[200:].astype({"score": str})
    bad.loc[bad.index[5], "score"] = "n.a."
    bad.to_csv(texty / "b.csv", index=False)
    holes = tmp_path / "holes"
    holes.mkdir()
    gappy = frame.copy()
    gappy.loc[gappy.index[:7], "score"] = np.nan
    gappy.to_parquet(holes / "a.parquet", index=False)
    return frame, bad, texty, holes


def unnamed_judges(tmp_path, frame):
    """``frame`` in two parts, three judgments of b.parquet without a judge."""
    folder = tmp_path / "unnamed"
    folder.mkdir()
    frame.iloc[:200].to_parquet(folder / "a.parquet", index=False)
    rest = frame.iloc[200:].copy()
    rest.loc[rest.index[[4, 9, 30]], "judge"] = None
    rest.to_parquet(folder / "b.parquet", index=False)
    return folder


def test_an_empty_facet_label_is_named_by_file_and_column(tmp_path):
    frame, *_ = bad_logs(tmp_path)
    folder = unnamed_judges(tmp_path, frame)
    with pytest.raises(DataError) as said:
        eg.fit(folder, engine="duckdb")
    assert f"{folder / 'b.parquet'}: column 'judge' is empty in 3 of 480 judgment(s)" in str(said.value)
    out = CliRunner().invoke(main, ["balance", str(folder), "--engine", "duckdb"])
    assert out.exit_code == 2 and "column 'judge' is empty" in out.output


def repeated_cells(tmp_path, frame):
    """``frame`` without its replicate column, in two parts: every cell judged twice, nothing numbering them."""
    folder = tmp_path / "repeated"
    folder.mkdir()
    bare = frame.drop(columns="replicate")
    bare.iloc[:200].to_parquet(folder / "a.parquet", index=False)
    bare.iloc[200:].to_parquet(folder / "b.parquet", index=False)
    return folder


def test_a_cell_judged_twice_needs_a_replicate_column_as_on_the_rows(tmp_path):
    frame, *_ = bad_logs(tmp_path)
    folder = repeated_cells(tmp_path, frame)
    for engine in ("duckdb", "pandas"):  # the same refusal, from the cells and from the rows
        said = _refusal(folder, engine)  # the door's words name its parameters, as the rows' check does
        assert "480 rows share their facet levels with another row" in said and "`replicate` COL" in said
        assert "--replicate" not in said and "`facets`" in said
        if engine == "duckdb":
            assert "in " + str(folder) in said
    out = CliRunner().invoke(main, ["components", str(folder), "--engine", "duckdb"])  # the command line's: options
    assert out.exit_code == 2 and "--replicate COL (or --replicate=auto" in out.output and "--facets" in out.output
    out = CliRunner().invoke(main, ["balance", str(folder), "--engine", "duckdb"])
    assert out.exit_code == 2 and "share their facet levels" in out.output
    # replicate="auto" counts them as replicates: the rows' fit
    got = {engine: _variances(eg.fit(folder, engine=engine, replicate="auto")) for engine in ("duckdb", "pandas")}
    assert got["duckdb"] == pytest.approx(got["pandas"], rel=1e-9)
    assert eg.fit(folder, engine="duckdb", replicate="auto").components.n_obs == len(frame)
    # a replicate column of another name is left out of the facets when named
    renamed = tmp_path / "renamed"
    renamed.mkdir()
    frame.rename(columns={"replicate": "call"}).to_parquet(renamed / "a.parquet", index=False)
    assert eg.fit(renamed, engine="duckdb", replicate="call").engine["cells"] == len(frame) // 2
    assert "no column 'run' for the replicate" in _refusal(renamed, replicate="run")


def repeated_replicates(tmp_path, frame):
    """Logs with a replicate column in which something is wrong: ``twice`` repeats a replicate number within
    one cell (in its second part), ``labels`` does the same with text replicates ("call-1"), ``wide`` with
    replicates 40 apart (the Parquet statistics' span gives them bitmaps of their own), ``blank`` leaves one
    replicate empty; ``apart`` numbers a cell's replicates 32 apart (in Parquet, told apart by the span's
    bitmaps; in ``apart.csv``, which has no statistics, they share the scan's slot, and only the exact look tells
    them apart, finding nothing wrong); ``top`` repeats replicate 31, the bitmap's last slot (its sign bit), and
    ``top_ok`` numbers the replicates 30 and 31 without a repeat."""
    logs = {}
    for name in ("twice", "labels", "wide", "blank", "apart", "top", "top_ok"):
        logs[name] = tmp_path / name
        logs[name].mkdir()
    twice = frame.copy()
    twice.loc[twice.index[300], "replicate"] = twice.loc[twice.index[301], "replicate"]  # same cell, next replicate
    labels = twice.assign(replicate="call-" + twice["replicate"].astype(str))
    blank = frame.astype({"replicate": "float64"})
    blank.loc[blank.index[250], "replicate"] = None
    apart = frame.assign(replicate=frame["replicate"] * 32)
    apart.to_csv(tmp_path / "apart.csv", index=False)
    wide = twice.assign(replicate=twice["replicate"] * 40)
    top, top_ok = twice.assign(replicate=twice["replicate"] + 29), frame.assign(replicate=frame["replicate"] + 29)
    assert set(top["replicate"]) == {30, 31}
    for name, log in (("twice", twice), ("labels", labels), ("wide", wide), ("blank", blank), ("apart", apart),
                      ("top", top), ("top_ok", top_ok)):
        log.iloc[:200].to_parquet(logs[name] / "a.parquet", index=False)
        log.iloc[200:].to_parquet(logs[name] / "b.parquet", index=False)
    labels.to_csv(tmp_path / "labels.csv", index=False)
    return logs


def test_a_replicate_repeated_within_a_cell_is_refused_as_on_the_rows(tmp_path):
    frame, *_ = bad_logs(tmp_path)
    logs = repeated_replicates(tmp_path, frame)
    cell = ["system", "item", "judge"]
    assert frame.iloc[300][cell].tolist() == frame.iloc[301][cell].tolist()  # the repeat is within one cell
    for engine in ("duckdb", "pandas"):  # the same refusal, from the cells and from the rows
        for log in (logs["twice"], logs["labels"], logs["wide"], logs["top"], tmp_path / "labels.csv"):
            said = _refusal(log, engine)
            assert "2 rows repeat both the facet levels and the replicate 'replicate' of another row" in said
    row = frame.iloc[301]
    assert (f"the cell system='{row['system']}', item='{row['item']}', judge='{row['judge']}' with "
            f"replicate='{row['replicate']}', in {logs['twice'] / 'b.parquet'}") in _refusal(logs["twice"])
    assert "with replicate='call-" in _refusal(logs["labels"])
    assert f"{logs['blank'] / 'b.parquet'}: column 'replicate' is empty in 1 judgment(s)" in _refusal(logs["blank"])
    # replicates 30 and 31 (the last slot) without a repeat: read in the scan alone, the rows' fit
    assert reduce_cells(logs["top_ok"])[1]["cells"] == len(frame) // 2
    # replicates 32 apart: no repeat, by the span's bitmaps (Parquet) or by the exact look (CSV); the rows' fit
    runs = (("duckdb", logs["apart"]), ("duckdb", tmp_path / "apart.csv"), ("pandas", logs["apart"]))
    got = {(engine, log.suffix): _variances(eg.fit(log, engine=engine)) for engine, log in runs}
    assert got["duckdb", ""] == pytest.approx(got["pandas", ""], rel=1e-9)
    assert got["duckdb", ".csv"] == pytest.approx(got["pandas", ""], rel=1e-9)
    least, greatest = 32 * int(frame["replicate"].min()), 32 * int(frame["replicate"].max())
    assert replicate_span(sorted(logs["apart"].glob("*.parquet")), "replicate") == (least, greatest)
    assert replicate_span(sorted(logs["twice"].glob("*.parquet")), "replicate") is None  # 32 slots cover it


def test_a_facet_with_one_level_as_on_the_rows(tmp_path):
    """Left out of an inferred design with the rows' note; refused, with the rows' words, when named."""
    frame, *_ = bad_logs(tmp_path)
    folder = tmp_path / "one-judge"
    folder.mkdir()
    frame[frame["judge"] == frame["judge"].iloc[0]].to_parquet(folder / "a.parquet", index=False)
    said = {}
    for engine in ("duckdb", "pandas"):
        out = CliRunner().invoke(main, ["components", str(folder), "--engine", engine, "--facets",
                                        "system,item,judge"])
        assert out.exit_code == 2 and "facet 'judge' has one level" in out.output, out.output
        said[engine] = out.output.splitlines()[-1]
        out = CliRunner().invoke(main, ["components", str(folder), "--engine", engine, "--json", "-"])
        assert out.exit_code == 0, out.output
        assert any("facet 'judge' has one level" in note for note in json.loads(out.stdout)["notes"])
    assert said["duckdb"] == said["pandas"]


def hostile_names(tmp_path, frame):
    """``frame`` with a judge column named with a double quote and a dot, and an empty copy of it."""
    folder = tmp_path / "names"
    folder.mkdir()
    frame.rename(columns={"judge": 'the "judge".name'}).to_parquet(folder / "a.parquet", index=False)
    frame.iloc[:0].to_parquet(tmp_path / "empty.parquet", index=False)
    return folder, tmp_path / "empty.parquet"


def test_column_names_are_the_files_text_and_an_empty_log_is_refused(tmp_path):
    """A column name with quotes or a dot is an identifier, never SQL (the same cells as under a plain name); a log
    of no rows is refused with the rows' words."""
    frame, *_ = bad_logs(tmp_path)
    folder, empty = hostile_names(tmp_path, frame)
    facets = [c for c in frame.columns if c not in ("score", "replicate")]
    cells, info = reduce_cells(folder, facets=[c if c != "judge" else 'the "judge".name' for c in facets])
    plain, _ = reduce_cells(_parts(frame, tmp_path / "plain", size=10_000))
    assert info["cells"] == len(plain) and 'the "judge".name' in cells.columns
    for engine in ("duckdb", "pandas"):
        assert "has no data rows" in _refusal(empty, engine)


def test_text_parts_delimiter_and_encoding_on_the_engine(tmp_path):
    """--sep reaches the engine's reader; text that is not UTF-8, or another --encoding, is refused with the way to
    read it (never a traceback)."""
    frame, *_ = bad_logs(tmp_path)
    frame.to_csv(tmp_path / "semi.csv", index=False, sep=";")
    assert "pass `sep` ';'" in _refusal(tmp_path / "semi.csv")  # the door's parameter; the command's option below
    got = {engine: _variances(eg.fit(tmp_path / "semi.csv", engine=engine, sep=";")) for engine in ("duckdb", "pandas")}
    assert got["duckdb"] == pytest.approx(got["pandas"], rel=1e-9)
    frame.assign(item=frame["item"].astype(str) + "\u00e9").to_csv(tmp_path / "latin.csv", index=False,
                                                                    encoding="latin-1")
    assert "latin.csv: not UTF-8 text" in _refusal(tmp_path / "latin.csv")
    assert "`engine` pandas `encoding` latin-1" in _refusal(tmp_path / "latin.csv", encoding="latin-1")
    # the command line passes --sep and --encoding to the engine, and says a refusal without a traceback
    out = CliRunner().invoke(main, ["components", str(tmp_path / "semi.csv"), "--engine", "duckdb", "--sep", ";",
                                    "--json", "-"])
    assert out.exit_code == 0 and _variances_of(out.stdout) == pytest.approx(got["pandas"], rel=1e-9)
    out = CliRunner().invoke(main, ["components", str(tmp_path / "latin.csv"), "--engine", "duckdb", "--encoding",
                                    "latin-1"])
    assert out.exit_code == 2 and "--engine pandas --encoding latin-1" in out.output and "Traceback" not in out.output
    out = CliRunner().invoke(main, ["components", str(tmp_path / "semi.csv"), "--engine", "duckdb"])
    assert out.exit_code == 2 and "pass --sep ';'" in out.output and "`" not in out.output


def test_bad_input_on_the_engine_names_the_file_and_column(tmp_path):
    frame, bad, texty, holes = bad_logs(tmp_path)
    out = CliRunner().invoke(main, ["components", str(texty), "--engine", "duckdb"])
    assert out.exit_code == 2 and "b.csv: column 'score' holds 'n.a.'" in out.output
    assert "(1 such value(s)" in out.output  # counted by the scan itself, per cell
    hostile = tmp_path / "hostile"  # a score cell holding terminal escapes: shown escaped, never printed raw
    hostile.mkdir()
    bad.assign(score=bad["score"].where(bad["score"] != "n.a.", "\x1b[2J9")).to_csv(hostile / "b.csv", index=False)
    with pytest.raises(DataError) as caught:
        reduce_cells(hostile)
    assert "holds '\\x1b[2J9'" in str(caught.value) and "\x1b" not in str(caught.value)
    missing = tmp_path / "missing"
    missing.mkdir()
    frame.iloc[:200].to_parquet(missing / "a.parquet", index=False)
    frame.iloc[200:].drop(columns="judge").to_parquet(missing / "b.parquet", index=False)
    with pytest.raises(DataError, match=r"b\.parquet: has no column 'judge'"):
        reduce_cells(missing)
    typed = tmp_path / "typed"  # a Parquet part whose score column is text: named from the schemas, before the scan
    typed.mkdir()
    frame.iloc[:200].to_parquet(typed / "a.parquet", index=False)
    bad.to_parquet(typed / "b.parquet", index=False)
    with pytest.raises(DataError, match=r"b\.parquet: column 'score' holds text where .*a\.parquet holds numbers"):
        reduce_cells(typed)
    (typed / "b.parquet").write_bytes((typed / "b.parquet").read_bytes()[:300])  # a part cut short
    with pytest.raises(DataError, match=r"b\.parquet: not a readable Parquet file"):
        reduce_cells(typed)
    out = CliRunner().invoke(main, ["components", str(holes), "--engine", "duckdb"])
    assert out.exit_code == 2 and "7 of 480 judgment(s) have an empty 'score'" in out.output
    out = CliRunner().invoke(main, ["components", str(holes), "--engine", "duckdb", "--drop-missing"])
    assert out.exit_code == 0 and "7 empty score(s) dropped" in out.output
    out = CliRunner().invoke(main, ["components", str(holes), "--engine", "duckdb", "--bootstrap", "100"])
    assert out.exit_code == 2 and "--bootstrap need(s) the rows" in out.output


def test_eg_fit_on_the_engine_fits_the_cells(tmp_path):
    frame = simulate(sizing_preset(systems=4, items=20, judges=3, replicates=2), seed=7).sample(frac=0.9,
                                                                                               random_state=1)
    folder = _parts(frame, tmp_path / "log")
    on_rows = eg.fit(frame)
    on_cells = eg.fit(folder, engine="duckdb")
    assert on_cells.judgments is None and len(on_cells.cells) == len(frame.groupby(["system", "item", "judge"]))
    assert on_cells.design.facets == on_rows.design.facets and on_cells.formula == on_rows.formula
    assert on_cells.components.reml.criterion == pytest.approx(on_rows.components.reml.criterion, abs=1e-8)
    assert on_cells.plan(item=200).mdd95 == pytest.approx(on_rows.plan(item=200).mdd95, rel=1e-6)
    assert on_cells.interval().se == pytest.approx(on_rows.interval().se, rel=1e-6)
    # what needs the rows says so, with the way
    with pytest.raises(eg.DesignError, match=r"compare: this fit is of cell statistics.*engine='pandas'"):
        on_cells.compare()
    with pytest.raises(eg.DesignError, match=r"formula need\(s\) the rows"):
        eg.fit(folder, engine="duckdb", formula="score ~ (1|system) + (1|item)")
    # auto keeps a small dataset in memory
    assert eg.fit(folder).judgments is not None


def test_balance_on_the_engine_reports_what_the_rows_report(tmp_path):
    frame = simulate(sizing_preset(systems=4, items=20, judges=3, replicates=2), seed=7)
    gappy = frame.drop(frame.index[(frame["item"] == frame["item"].iloc[0]) & (frame["system"] == "s1")]) \
        if "s1" in set(frame["system"]) else frame.iloc[6:]
    runner = CliRunner()
    for name, data in (("full", frame), ("gappy", gappy)):
        folder = _parts(data, tmp_path / name)
        rows = runner.invoke(main, ["balance", str(folder), "--engine", "pandas"])
        cells = runner.invoke(main, ["balance", str(folder), "--engine", "duckdb"])
        assert rows.exit_code == cells.exit_code == (0 if name == "full" else 3), cells.output
        assert cells.stdout == rows.stdout  # the same counts, the same missing cells, the same words


def test_jsonl_columns_mixing_numbers_and_text_read_as_their_text(tmp_path):
    """DuckDB types a JSONL column that mixes numbers and strings as JSON: its values are read as their text, so
    the label "q2" is q2 and the score "0.5" is 0.5 (the rows' reading), and a bad score is shown as the file's
    text, not as a JSON literal."""
    frame = simulate(sizing_preset(systems=3, items=6, judges=2, replicates=2), seed=2)
    records = frame.astype({"item": str}).to_dict(orient="records")
    for k, rec in enumerate(records):
        number = int(rec["item"][1:])
        rec["item"] = number if number % 2 else rec["item"]  # items 1, 3, 5 as numbers; i2, i4, i6 as text
        if k % 3 == 0:
            rec["score"] = repr(rec["score"])  # the same number, written as a string
    (tmp_path / "log").mkdir()
    path = tmp_path / "log" / "mixed.jsonl"
    path.write_text("".join(json.dumps(rec) + "\n" for rec in records))
    cells, _ = reduce_cells(path)
    assert sorted(cells["item"].astype(str).unique()) == ["1", "3", "5", "i2", "i4", "i6"]
    on_rows = eg.fit(eg.read(path), object="system").components
    on_cells = estimate_from_sums(cells)
    for comp in on_rows.components:
        assert on_cells.sigma2(comp.name) == pytest.approx(comp.variance, rel=1e-9)
    records[4]["score"] = "n/a"
    path.write_text("".join(json.dumps(rec) + "\n" for rec in records))
    with pytest.raises(DataError, match=r"mixed\.jsonl: column 'score' holds 'n/a', which is not a number"):
        reduce_cells(path)


def test_the_csv_empty_values_are_pandas_own():
    """The engines take as empty the fields pandas' CSV reader takes as empty (the rows' reader)."""
    from pandas._libs.parsers import STR_NA_VALUES

    from evalgauge.io.engine import CSV_EMPTY

    assert set(CSV_EMPTY) == set(STR_NA_VALUES)


def odd_fields(tmp_path):
    """Logs whose fields test what a score and a label are, each as the rows' reader takes it: ``spaced.csv``
    (leading spaces in labels, scores and header names; NA, nan and empty fields as empty scores), and Parquet
    scores with a NaN (empty, as pandas counts it), an infinity (not a number) or 1e20 (too large)."""
    frame = simulate(sizing_preset(systems=3, items=8, judges=2, replicates=2), seed=11).astype(
        {"system": str, "item": str, "judge": str})
    text = frame.astype({"score": str})
    text.loc[text.index[::3], "item"] = " " + text.loc[text.index[::3], "item"]
    text.loc[text.index[::4], "score"] = "  " + text.loc[text.index[::4], "score"]
    text.loc[text.index[[2, 5, 7]], "score"] = ["NA", " nan", "<NA>"]
    text.rename(columns={"item": " item", "judge": "judge "}).to_csv(tmp_path / "spaced.csv", index=False)
    for name, value in (("nan", np.nan), ("inf", np.inf), ("huge", 1e20)):
        odd = frame.copy()
        odd.loc[odd.index[[4, 9]], "score"] = value
        odd.to_parquet(tmp_path / f"{name}.parquet", index=False)
    return tmp_path


@pytest.mark.parametrize("engine", ["duckdb", "pandas"])
def test_scores_and_labels_mean_what_they_mean_to_the_rows_reader(tmp_path, engine):
    folder = odd_fields(tmp_path)
    rows = eg.fit(eg.read(folder / "spaced.csv"), object="system", drop_missing=True).components
    assert rows.levels == {"system": 3, "item": 8, "judge": 2} and rows.n_obs == 96 - 3
    fit = eg.fit(folder / "spaced.csv", object="system", drop_missing=True, engine=engine).components
    assert fit.levels == rows.levels and fit.n_obs == rows.n_obs
    for comp in rows.components:
        assert fit.sigma2(comp.name) == pytest.approx(comp.variance, rel=1e-6, abs=1e-9)
    # NaN is an empty score (dropped when asked), an infinity is not a number, 1e20 is too large: never a traceback
    nan = eg.fit(folder / "nan.parquet", object="system", drop_missing=True, engine=engine).components
    assert nan.n_obs == 94
    messages = {"inf": r"inf\.parquet: column 'score' (holds 'inf', which is not a number|must hold a number.*'inf')",
                "huge": r"huge\.parquet: column 'score' has 2 value\(s\) too large to compute with"}
    for name, message in messages.items():
        with pytest.raises(DataError, match=message):
            eg.fit(folder / f"{name}.parquet", object="system", engine=engine)
    out = CliRunner().invoke(main, ["components", str(folder / "nan.parquet"), "--engine", engine])
    assert out.exit_code == 2 and "empty" in out.output and "Traceback" not in out.output


def test_labels_become_categories_across_batches():
    """The engine's labels arrive in batches, each with labels the earlier ones lacked: every cell keeps its own
    label, an empty one is missing, and the work grows with the labels once, not once per batch."""
    import pyarrow as pa

    from evalgauge.io.engine.on_duckdb import _label_codes

    rng = np.random.default_rng(5)
    batches = [np.char.add("item-", rng.integers(0, 5_000 * (k + 1), 3_000).astype(str)) for k in range(12)]
    column = pa.chunked_array([pa.array(b) for b in batches] + [pa.array(["late", None, "item-1"])])
    codes = _label_codes(column)
    want = np.concatenate([*batches, np.array(["late", None, "item-1"], dtype=object)])
    assert len(codes) == len(want) and codes.isna().sum() == 1 and codes.isna()[-2]
    kept = ~codes.isna()
    assert (np.asarray(codes[kept].astype(str)) == want[kept].astype(str)).all()
    assert len(codes.categories) == len(set(want[kept]))
    assert len(_label_codes(pa.chunked_array([], pa.string()))) == 0


def test_each_parquet_footer_is_read_once_per_command(tmp_path, monkeypatch):
    """The progress line, the schema check and the replicate span share one read of each part's footer (a
    dataset of thousands of parts on a network file system pays for it once); the reduction's end lets them go,
    and a part rewritten meanwhile is read afresh."""
    import pyarrow.parquet as pq
    import pyarrow.parquet.core as pq_core

    frame = simulate(sizing_preset(systems=4, items=30, judges=3, replicates=2), seed=5)
    frame["replicate"] *= 50  # 50 and 100: a span past the 32 slots, so the row groups' statistics are read too
    folder = _parts(frame, tmp_path / "log", 120)
    parts = sorted(folder.glob("*.parquet"))
    reads: list[str] = []
    read_metadata = pq.read_metadata

    class Counted(pq_core.ParquetFile):  # a footer opened by its path (read_metadata opens its own file object)
        def __init__(self, source, *args, **kwargs):
            if isinstance(source, str | os.PathLike):
                reads.append(str(source))
            super().__init__(source, *args, **kwargs)

    monkeypatch.setattr(pq_core, "ParquetFile", Counted)
    monkeypatch.setattr(pq, "ParquetFile", Counted)
    monkeypatch.setattr(pq, "read_metadata", lambda path, *a, **k: reads.append(str(path)) or read_metadata(path))
    out = CliRunner().invoke(main, ["components", str(folder), "--engine", "duckdb", "--replicate", "replicate"])
    assert out.exit_code == 0, out.output
    assert sorted(reads) == [str(p) for p in parts]  # once each, and every one
    reads.clear()  # the reduction's end let the footers go: the next look reads the parts as they are then
    assert scan_size(folder)[0] == len(frame) and replicate_span(parts, "replicate") == (50, 100)
    assert sorted(reads) == [str(p) for p in parts]
    reads.clear()
    frame.iloc[:120].assign(score=frame["score"].iloc[:120] + 1).to_parquet(parts[0], index=False)
    assert scan_size(folder)[0] == len(frame)
    assert reads == [str(parts[0])]


def never_searched(*args, **kwargs):
    """Stands in for the query that searches the files for a bad score: a test that the scan named it alone."""
    raise AssertionError("the files were searched again for the bad score")


def test_a_bad_score_is_named_from_the_scan_without_reading_the_files_again(tmp_path, monkeypatch):
    """A score that is no number, in one row group of one part of a text-score log (CSV, a Parquet column of
    text), is named with its file and text from the one scan; an infinity or a huge number in a number column
    needs the exact scan once more, which carries it too. The files are never searched for it afterwards."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import evalgauge.io.engine as engine

    frame = simulate(sizing_preset(systems=3, items=20, judges=2, replicates=2), seed=13)
    text = frame.astype({"score": str})
    csv, typed = tmp_path / "csv", tmp_path / "typed"
    bad = text.copy()
    bad.loc[bad.index[-7], "score"] = "n.a."  # the last part's last row group
    _parts(bad, csv, 60, kind="csv")
    typed.mkdir()
    for k in range(4):
        pq.write_table(pa.Table.from_pandas(bad.iloc[60 * k: 60 * k + 60], preserve_index=False),
                       typed / f"part-{k}.parquet", row_group_size=20)
    numbers = {}
    for name, value in (("inf", np.inf), ("huge", 1e20)):
        odd = frame.copy()
        odd.loc[odd.index[[50, 130]], "score"] = value
        numbers[name] = _parts(odd, tmp_path / name, 60)
    scans: list[bool] = []
    cells_sql = engine.cells_sql
    monkeypatch.setattr(engine.on_duckdb, "cells_sql",
                        lambda *a, **k: scans.append(k.get("exact", False)) or cells_sql(*a, **k))

    monkeypatch.setattr(engine.checks, "first_bad_sql", never_searched)
    last = sorted(csv.glob("*.csv"))[-1]
    for folder, part in ((csv, last), (typed, typed / "part-3.parquet")):
        scans.clear()
        out = CliRunner().invoke(main, ["components", str(folder), "--engine", "duckdb"])
        assert out.exit_code == 2 and f"{part}: column 'score' holds 'n.a.', which is not a number" in out.output
        assert scans == [False]  # one scan
    for name, message in (("inf", "holds 'inf', which is not a number"), ("huge", "has 2 value(s) too large")):
        scans.clear()
        out = CliRunner().invoke(main, ["components", str(numbers[name]), "--engine", "duckdb"])
        assert out.exit_code == 2 and f"{numbers[name] / 'part-000.parquet'}: column 'score' {message}" in out.output
        assert scans == [False, True]  # the fast scan, then the exact one, which named it


def test_auto_chooses_by_what_the_reading_would_take(tmp_path, monkeypatch):
    """engine auto: the cells on DuckDB once reading would take more than ENGINE_ABOVE, unless the command needs
    the rows (--bootstrap); and a file whose reading would not fit in the memory available is refused before it
    is read, naming the file and the way (a 2.07 GB CSV read in memory took 13 GB and 8.6 minutes)."""
    from evalgauge.io import engine as eng

    frame = simulate(sizing_preset(systems=4, items=20, judges=3, replicates=2), seed=7)
    path = tmp_path / "j.csv"
    frame.to_csv(path, index=False)
    size, needed = eng.in_memory_estimate(path)
    assert size == path.stat().st_size and needed == size // eng.TEXT_BYTES_PER_VALUE * eng.BYTES_PER_VALUE
    assert eng.engine_for("auto", path, rows="no") is None  # small: in memory, as before
    monkeypatch.setattr(eng, "ENGINE_ABOVE", needed - 1)
    assert eng.engine_for("auto", path, rows="no") == "duckdb"
    assert eng.engine_for("auto", path, rows="prefer") is None and eng.engine_for("auto", path, rows="need") is None
    runner = CliRunner()
    cells = runner.invoke(main, ["components", str(path)])
    rows = runner.invoke(main, ["components", str(path), "--engine", "pandas"])
    assert cells.exit_code == rows.exit_code == 0 and "engine: duckdb reduced" in cells.output
    boot = runner.invoke(main, ["components", str(path), "--bootstrap", "20", "--seed", "1"])
    assert boot.exit_code == 0 and "engine:" not in boot.output  # the bootstrap needs the rows: in memory
    # a machine with less memory available than the reading would take
    monkeypatch.setattr("evalgauge.machine.available_memory", lambda: needed)
    assert eng.engine_for("auto", path, rows="prefer") == "duckdb"  # eg.fit keeps the cells instead
    assert eg.fit(str(path)).judgments is None
    refused = runner.invoke(main, ["analyze", str(path)])
    assert refused.exit_code == 2 and "Traceback" not in refused.output
    assert str(path) in refused.output and "--engine duckdb" in refused.output and "memory" in refused.output
    assert runner.invoke(main, ["components", str(path)]).exit_code == 0  # the cells alone still fit
