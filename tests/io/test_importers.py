"""Importers, on small files written here in each tool's documented format.

The files are constructed, not copied: real third-party logs reach this project only through
the steering repository's shared/data (see the notes of issue 6).
"""

import json
import zipfile
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from conftest import FIXTURES
from evalgauge.cli import main
from evalgauge.errors import DataError
from evalgauge.io.importers import (
    import_alpaca_eval,
    import_arena_hard,
    import_inspect,
    import_lm_eval,
    import_mt_bench,
)


def _inspect_log(model, values):
    return {"version": 2, "status": "success", "eval": {"task": "t", "model": model},
            "samples": [{"id": i + 1, "epoch": e + 1, "scores": {"model_graded_fact": {"value": v, "answer": "x"}}}
                        for i, per in enumerate(values) for e, v in enumerate(per)]}


def test_inspect_json_and_eval_archives(tmp_path):
    a = tmp_path / "a.json"
    a.write_text(json.dumps(_inspect_log("openai/gpt-4o-mini", [["C", "I"], ["C", "C"]])))
    b = tmp_path / "b.eval"
    log = _inspect_log("anthropic/claude", [["I", "P"], ["C", "I"]])
    with zipfile.ZipFile(b, "w") as z:
        z.writestr("header.json", json.dumps({k: v for k, v in log.items() if k != "samples"}))
        for s in log["samples"]:
            z.writestr(f"samples/{s['id']}_epoch_{s['epoch']}.json", json.dumps(s))
    frame = import_inspect([a, b])
    assert len(frame) == 8 and set(frame["system"]) == {"openai/gpt-4o-mini", "anthropic/claude"}
    assert frame.groupby("system")["score"].mean().to_dict() == {"anthropic/claude": 0.375, "openai/gpt-4o-mini": 0.75}
    assert set(frame["replicate"]) == {1, 2}


def test_lm_eval_samples(tmp_path):
    folder = tmp_path / "pythia-160m"
    folder.mkdir()
    path = folder / "samples_arc_easy.jsonl"
    path.write_text("\n".join(json.dumps({"doc_id": i, "filter": "none", "acc": float(i % 2), "acc_norm": 1.0})
                              for i in range(6)))
    frame = import_lm_eval([path])
    assert frame["system"].unique().tolist() == ["pythia-160m"] and frame["score"].sum() == 3
    with pytest.raises(DataError, match="no metric 'exact_match'"):
        import_lm_eval([path], metric="exact_match")


def test_arena_hard_both_games(tmp_path):
    path = tmp_path / "claude.jsonl"
    path.write_text("\n".join(json.dumps({"question_id": f"q{i}", "model": "claude", "judge": "gpt-4-1106",
                                          "games": [{"score": "B>A"}, {"score": "A>>B" if i else None}]})
                              for i in range(3)))
    frame = import_arena_hard([path], baseline="gpt-4-0314")
    assert len(frame) == 5  # one game unparsed
    first = frame[frame["order"] == "AB"]
    assert (first["model_a"] == "gpt-4-0314").all() and (first["winner"] == "model_b").all()
    assert frame.loc[frame["order"] == "BA", "strong"].all()


def test_alpaca_eval_annotations(tmp_path):
    path = tmp_path / "annotations.json"
    records = [{"instruction": f"Write {i}", "generator_1": "gpt4_1106_preview", "generator_2": "my-model",
                "annotator": "weighted_alpaca_eval_gpt4_turbo", "preference": 1.0 + (i % 3) / 2} for i in range(6)]
    path.write_text(json.dumps(records))
    frame = import_alpaca_eval([path])
    assert frame["score"].tolist() == [0.0, 0.5, 1.0, 0.0, 0.5, 1.0] and frame["item"].nunique() == 6


def test_mt_bench_single_and_pairwise(tmp_path):
    single = tmp_path / "gpt-4_single.jsonl"
    single.write_text("\n".join(json.dumps({"question_id": 81 + i, "model": m, "judge": ["gpt-4", "single-v1"],
                                            "score": s, "turn": 1})
                                for i, (m, s) in enumerate([("vicuna", 7), ("llama", -1), ("vicuna", 9)])))
    frame = import_mt_bench([single])
    assert frame["score"].isna().sum() == 1 and frame["template"].unique().tolist() == ["single-v1"]
    pair = tmp_path / "gpt-4_pair.jsonl"
    pair.write_text(json.dumps({"question_id": 81, "model_1": "vicuna", "model_2": "llama",
                                "g1_winner": "model_1", "g2_winner": "model_1", "judge": ["gpt-4", "pair-v2"],
                                "turn": 1}))
    rows = import_mt_bench([pair])
    assert rows["winner"].tolist() == ["model_a", "model_b"]  # vicuna won in both orders
    assert rows["model_a"].tolist() == ["vicuna", "llama"]


def test_import_cli_then_analyze(tmp_path):
    path = tmp_path / "annotations.json"
    records = [{"instruction": f"Task {i}", "generator_1": "base", "generator_2": m, "annotator": j,
                "preference": 1.0 + ((i + len(m) + len(j)) % 2)} for i in range(20) for m in ("m1", "m22", "m333")
               for j in ("judge-a", "judge-bb")]
    path.write_text(json.dumps(records))
    out = CliRunner().invoke(main, ["import", "alpaca-eval", str(path), "-o", str(tmp_path / "j.csv")])
    assert out.exit_code == 0 and "next: evalgauge analyze" in out.output
    assert len(pd.read_csv(tmp_path / "j.csv")) == 120
    bad = CliRunner().invoke(main, ["import", "lm-eval", str(tmp_path / "nope.jsonl"), "-o", "x.csv"])
    assert bad.exit_code == 2 and "no such file" in bad.output


# -- Inspect logs as inspect-ai writes them today, and archives built to break a reader ----------------------

CURRENT_EVAL = FIXTURES / "importers" / "inspect" / "arithmetic_mockllm_inspect-0.3.285.eval"


def test_a_log_written_by_a_current_inspect_with_zstd_members_imports_as_inspect_reads_it():
    with zipfile.ZipFile(CURRENT_EVAL) as z:
        assert {i.compress_type for i in z.infolist()} == {93}  # zstd, which Python's zipfile cannot read
    frame = import_inspect([CURRENT_EVAL])
    assert len(frame) == 20 and frame["score"].mean() == pytest.approx(0.8)
    assert sorted(frame["judge"].unique()) == ["includes", "match"] and sorted(frame["replicate"].unique()) == [1, 2]
    wrong = frame[frame["score"] == 0.0]
    assert sorted(zip(wrong["item"], wrong["replicate"], strict=True)) == [("q22", 2)] * 2 + [("q55", 1)] * 2


def _zstd_archive(path: Path, members: dict[str, bytes], declared: dict[str, int] | None = None) -> Path:
    """A zip whose members are zstd frames (method 93), written by hand: each is stored, then its method and
    (optionally) its declared size patched in the local and central headers."""
    import zstandard

    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for name, data in members.items():
            z.writestr(name, zstandard.ZstdCompressor().compress(data))
    blob = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        infos = z.infolist()
        central = blob.find(b"PK\x01\x02")
    for info in infos:
        size = (declared or {}).get(info.filename, len(members[info.filename]))
        blob[info.header_offset + 8:info.header_offset + 10] = (93).to_bytes(2, "little")
        blob[info.header_offset + 22:info.header_offset + 26] = size.to_bytes(4, "little")
        at = blob.find(b"PK\x01\x02" + bytes(0), central)
        while blob[at + 46:at + 46 + len(info.filename)] != info.filename.encode():
            at = blob.find(b"PK\x01\x02", at + 4)
        blob[at + 10:at + 12] = (93).to_bytes(2, "little")
        blob[at + 24:at + 28] = size.to_bytes(4, "little")
    path.write_bytes(bytes(blob))
    return path


def _header() -> bytes:
    return json.dumps({"eval": {"model": "m", "task": "t"}, "status": "success"}).encode()


def _sample(k: int, epoch=1) -> bytes:
    return json.dumps({"id": k, "epoch": epoch, "scores": {"s": {"value": "C"}}}).encode()


def test_a_hand_built_zstd_archive_reads_like_inspects(tmp_path):
    path = _zstd_archive(tmp_path / "ok.eval", {"header.json": _header(), "samples/1_epoch_1.json": _sample(1)})
    assert import_inspect([path])["score"].tolist() == [1.0]


@pytest.mark.parametrize("kind", ["zstd", "deflate"])
def test_a_member_that_decompresses_past_its_bound_is_refused_not_read_whole(tmp_path, monkeypatch, kind):
    """A zip bomb: a few KB that decompress to megabytes, whatever size the header declares."""
    import evalgauge.io.inspect_logs as inspect_logs

    monkeypatch.setattr(inspect_logs, "EVAL_MEMBER_LIMIT", 1024 * 1024)
    bomb = _sample(1)[:-1] + b', "pad": "' + b" " * (3 * 1024 * 1024) + b'"}'
    path = tmp_path / "bomb.eval"
    if kind == "zstd":  # the header lies: it says 100 bytes
        _zstd_archive(path, {"header.json": _header(), "samples/1_epoch_1.json": bomb},
                      declared={"samples/1_epoch_1.json": 100})
    else:
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("header.json", _header())
            z.writestr("samples/1_epoch_1.json", bomb)
    assert path.stat().st_size < 64 * 1024
    with pytest.raises(DataError, match=r"more than (the )?1,048,576"):
        import_inspect([path])
    out = CliRunner().invoke(main, ["import", "inspect", str(path), "-o", str(tmp_path / "o.csv")])
    assert out.exit_code == 2 and "Traceback" not in out.output and not (tmp_path / "o.csv").exists()


def test_an_encrypted_member_is_named_not_a_traceback(tmp_path):
    path = tmp_path / "enc.eval"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("header.json", _header())
        z.writestr("samples/1_epoch_1.json", _sample(1))
    blob = bytearray(path.read_bytes())
    for sig, flag_at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):  # set the "encrypted" bit everywhere
        at = blob.find(sig)
        while at >= 0:
            blob[at + flag_at] |= 1
            at = blob.find(sig, at + 4)
    path.write_bytes(bytes(blob))
    with pytest.raises(DataError, match="is encrypted"):
        import_inspect([path])


@pytest.mark.parametrize("epoch", ["1e400", "1.5", "0", "-2", '"two"', "true"])
def test_an_epoch_that_is_not_a_whole_number_from_1_is_named(tmp_path, epoch):
    path = tmp_path / "log.json"
    path.write_text('{"eval": {"model": "m", "task": "t"}, "status": "success", "samples": '
                    '[{"id": 1, "epoch": ' + epoch + ', "scores": {"s": {"value": "C"}}}]}')
    with pytest.raises(DataError, match="sample 1 has epoch"):
        import_inspect([path])


def test_a_collected_panel_without_graders_recorded_is_left_out_with_why_not_imported_as_empty_rows(tmp_path):
    """multi_scorer([...], reducer="collect") stores each sample's votes as a list; Inspect drops graders that
    returned nothing first, so a position is no judge. With neither the panel's members in the header nor the
    graders' calls in the events, nothing says who voted: the panel is left out with a note (it once imported
    as rows with no score and one judge named after the panel)."""
    samples = [{"id": k, "epoch": 1, "scores": {"panel": {"value": ["C", "I", "C"][: 3 - (k == 2)]},
                                                  "match": {"value": "C" if k % 2 else "I"}}} for k in range(1, 5)]
    path = tmp_path / "panel.json"
    path.write_text(json.dumps({"eval": {"model": "m", "task": "t"}, "status": "success", "samples": samples}))
    frame = import_inspect([path])
    assert set(frame["judge"]) == {"match"} and frame["score"].notna().all()
    assert any("'panel' is a judge panel" in n and "4 samples left out" in n for n in frame.attrs["notes"])
    only = tmp_path / "only.json"
    only.write_text(json.dumps({"eval": {"model": "m", "task": "t"}, "status": "success",
                                "samples": [{"id": 1, "scores": {"panel": {"value": ["C", "I"]}}}]}))
    with pytest.raises(DataError, match="no vote says which grader gave it"):
        import_inspect([only])


# -- Inspect judge panels, prompt variants and temperatures, written by inspect-ai 0.3.285 with mockllm ---------

INSPECT_DIR = CURRENT_EVAL.parent
PANEL_LOGS = sorted((INSPECT_DIR / "panel-0.3.285").glob("panel_*.eval"))
SILENT_LOG = INSPECT_DIR / "silent-grader-0.3.285" / "silent-grader_sys-a.eval"
GRADERS = ["mockllm/grader-a", "mockllm/grader-b", "mockllm/grader-c"]


def _truth(log: Path) -> dict[tuple[str, int], bool]:
    """Whether each sample x epoch's answer was right, from the system's own answer and the target."""
    from evalgauge.io.importers import _plain
    from evalgauge.io.inspect_logs import read_log

    _, samples = read_log(log, _plain)
    return {(s["id"], s["epoch"]): s["output"]["completion"].strip() == s["target"] for s in samples}


def test_a_collect_panel_imports_one_row_per_grader_each_vote_given_to_its_own_grader():
    """2 systems x 20 samples x 3 epochs x a 3-grader panel = 360 rows. The graders flip the right grade 5%,
    15% and 30% of the time: if votes were given to the wrong graders, their agreement with the truth would
    mix; read from each grader's own reply, grader-a agrees most and grader-c least."""
    frame = import_inspect(PANEL_LOGS)
    assert len(frame) == 360 and frame["score"].notna().all()
    assert sorted(frame["judge"].unique()) == GRADERS
    assert frame.groupby(["system", "item", "replicate"]).size().eq(3).all()
    assert sorted(frame["system"].unique()) == ["mockllm/sys-a", "mockllm/sys-b"]
    truth = {}
    for log in PANEL_LOGS:
        system = "mockllm/sys-" + log.stem[-1]
        truth |= {(system, item, epoch): right for (item, epoch), right in _truth(log).items()}
    agrees = frame.apply(lambda r: (r["score"] == 1.0) == truth[(r["system"], r["item"], r["replicate"])], axis=1)
    rate = agrees.groupby(frame["judge"]).mean()
    assert rate["mockllm/grader-a"] > rate["mockllm/grader-b"] > rate["mockllm/grader-c"]
    assert rate["mockllm/grader-a"] >= 0.9 and rate["mockllm/grader-c"] <= 0.8
    assert any("60 samples by the grade in each grader's own reply" in n for n in frame.attrs["notes"])


def test_a_grader_that_returned_nothing_is_a_row_with_no_score_not_a_shifted_vote():
    """grader-c replied without a grade 18 times: Inspect's collected list then holds two votes; the row of the
    grader that said nothing has no score, the other two keep theirs (and the log's status 'error', raised by
    Inspect's epoch reducer on lists of different lengths, is explained)."""
    frame = import_inspect([SILENT_LOG])
    assert len(frame) == 180
    blank = frame[frame["score"].isna()]
    assert len(blank) == 18 and set(blank["judge"]) == {"mockllm/grader-c"}
    notes = " ".join(frame.attrs["notes"])
    assert "18 graders' replies carried no grade" in notes and "the error came after scoring" in notes


def _as_json_log(log: Path, out: Path, keep_events: bool, members: bool = True) -> Path:
    from evalgauge.io.importers import _plain
    from evalgauge.io.inspect_logs import read_log

    header, samples = read_log(log, _plain)
    if not members:
        header["eval"]["scorers"] = []
    for s in samples:
        if not keep_events:
            s["events"] = []
    out.write_text(json.dumps({**header, "samples": samples}))
    return out


def test_without_the_graders_calls_a_full_panel_is_read_by_position_and_a_short_one_left_out(tmp_path):
    full = import_inspect([_as_json_log(PANEL_LOGS[0], tmp_path / "full.json", keep_events=False)])
    assert len(full) == 180 and sorted(full["judge"].unique()) == GRADERS
    keys = ["item", "replicate", "judge"]
    by_reply = import_inspect([PANEL_LOGS[0]]).sort_values(keys).reset_index(drop=True)
    assert full.sort_values(keys).reset_index(drop=True).equals(by_reply)  # every grader voted: the same votes
    assert any("60 by position" in n for n in full.attrs["notes"])
    short = import_inspect([_as_json_log(SILENT_LOG, tmp_path / "short.json", keep_events=False)])
    assert len(short) == 3 * (60 - 18) and short["score"].notna().all()
    assert any("18 samples left out" in n for n in short.attrs["notes"])


def test_prompt_variants_and_temperatures_in_json_logs_become_facets_and_a_folder_reads_all_its_logs(tmp_path):
    folder = INSPECT_DIR / "variants-0.3.285"
    frame = import_inspect([folder])
    assert len(frame) == 48 and list(frame.columns[:4]) == ["system", "task", "variant", "temperature"]
    assert sorted(frame["variant"].unique()) == ["plain", "terse"]
    assert sorted(frame["temperature"].unique()) == [0.0, 0.7]
    assert frame.groupby(["variant", "temperature"]).size().eq(12).all()
    out = CliRunner().invoke(main, ["import", "inspect", str(folder), "-o", str(tmp_path / "v.csv")])
    assert out.exit_code == 0, out.output
    assert len(pd.read_csv(tmp_path / "v.csv")) == 48


def test_a_log_whose_run_was_stopped_reads_from_its_journal(tmp_path):
    """A killed eval leaves no header.json; the journal's start.json names the eval."""
    start = json.dumps({"version": 2, "eval": {"model": "m", "task": "t"}, "plan": {}}).encode()
    path = _zstd_archive(tmp_path / "stopped.eval", {"_journal/start.json": start,
                                                     "samples/1_epoch_1.json": _sample(1)})
    frame = import_inspect([path])
    assert frame["score"].tolist() == [1.0]
    assert any("log status 'started'" in n for n in frame.attrs["notes"])


OLD_PANEL_LOGS = sorted((INSPECT_DIR / "panel-0.3.133").glob("*.eval"))


def test_a_panel_written_by_inspect_0_3_133_reduced_by_mode_imports_each_graders_own_vote():
    """inspect-ai 0.3.133 has no "collect" reducer: its panel records one mode per sample. Each grader's reply
    is in the scorer's span, and the mode of the three grades is the recorded value, so the votes are read."""
    with zipfile.ZipFile(OLD_PANEL_LOGS[0]) as z:
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_DEFLATED}
    frame = import_inspect(OLD_PANEL_LOGS)
    assert len(frame) == 360 and sorted(frame["judge"].unique()) == GRADERS and frame["score"].notna().all()
    truth = {}
    for log in OLD_PANEL_LOGS:
        system = "mockllm/sys-" + log.stem[-1]
        truth |= {(system, item, epoch): right for (item, epoch), right in _truth(log).items()}
    agrees = frame.apply(lambda r: (r["score"] == 1.0) == truth[(r["system"], r["item"], r["replicate"])], axis=1)
    rate = agrees.groupby(frame["judge"]).mean()
    assert rate["mockllm/grader-a"] > rate["mockllm/grader-b"] > rate["mockllm/grader-c"]
    assert any("60 samples whose one recorded value reduces the graders' votes" in n for n in frame.attrs["notes"])


def test_a_reduced_value_the_replies_do_not_give_is_kept_as_the_panels_verdict(tmp_path):
    from evalgauge.io.inspect_logs import grader_calls, read_log

    header, samples = read_log(OLD_PANEL_LOGS[0], str)
    grades = [g for _, g in grader_calls(samples[0], "grader_panel")]
    samples[0]["scores"]["grader_panel"]["value"] = "P"  # no reduction of C/I grades gives partial credit
    assert "P" not in grades
    path = tmp_path / "doctored.json"
    path.write_text(json.dumps({**header, "samples": samples}))
    frame = import_inspect([path])
    assert len(frame) == 180 - 3 + 1 and (frame["judge"] == "grader_panel").sum() == 1
    assert any("1 samples' reduced panel value imported as one judge 'grader_panel'" in n
               for n in frame.attrs["notes"])
