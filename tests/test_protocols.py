"""Verdict protocols (evalgauge.parse): each preset's rule, strictness, and the verdicts the source tools
recorded on real judge text (FastChat MT-bench single and pair judgments, arena-hard games, Inspect's
model-graded explanations; bundled in tests/fixtures/verdicts)."""

import json
from pathlib import Path

import pytest

import evalgauge as eg

VERDICTS = Path(__file__).resolve().parent / "fixtures" / "verdicts" / "judge_verdicts.jsonl"


@pytest.mark.parametrize("protocol,text,value,rule", [
    ("mt-bench-single", "Detailed ... Rating: [[7]]", 7.0, "[[N]]"),
    ("mt-bench-single", "Rating: [8.5] and later [[3]]", 3.0, "[[N]]"),  # [[N]] first, as FastChat
    ("mt-bench-single", "I'd say [6].", 6.0, "[N]"),
    ("mt-bench-pair", "Final Verdict: [[B]]", 0.0, "[[B]]"),
    ("mt-bench-pair", "[[C]]", 0.5, "[[C]]"),
    ("arena-hard", "My final verdict is: [[A>>B]]", 1.0, "[[A>>B]]"),
    ("arena-hard", "[[B>A]] ... again [[B>A]]", 0.25, "[[B>A]]"),
    ("inspect-grade", "The answer matches.\nGRADE: C", 1.0, "GRADE: X"),
    ("inspect-grade", "grade: p", 0.5, "GRADE: X"),
    ("prometheus", "Feedback: good. [RESULT] 4", 4.0, "[RESULT] N"),
    ("score-line", "Reasoning.\nScore: 4", 4.0, "Score: N"),
    ("json", '```json\n{"score": 3, "why": "ok"}\n```', 3.0, '{"score": N}'),
])
def test_each_preset_reads_its_tools_verdict(protocol, text, value, rule):
    v = eg.parse(text, protocol=protocol, scale_min=1, scale_max=10)
    assert v.value == value and v.rule == rule, v


@pytest.mark.parametrize("text", [
    "A 1-5 scale is correct. The answer to", "A: 1. Meryl Streep\n2", "3/5 of the points", "Rated 4 of 5",
    "Score: 4 out of 5 maybe 3",
])
def test_no_lone_number_is_a_score(text):
    assert eg.parse(text, protocol="score-line", scale_min=1, scale_max=5).value is None
    assert eg.parse(text, protocol="mt-bench-single", scale_min=1, scale_max=10).value is None


def test_ambiguity_range_and_user_patterns():
    assert eg.parse("[[A>B]] then [[B>A]]", protocol="arena-hard").value is None
    assert eg.parse("[[A]]", protocol="mt-bench-pair", scale_min=1, scale_max=5).value == 1.0  # no scale
    assert "outside" in eg.parse("Score: 9", protocol="score-line", scale_min=1, scale_max=5).reason
    assert eg.parse("verdict=7/10", protocol="pattern", pattern=r"verdict=(\d+)/10").value == 7.0
    with pytest.raises(ValueError, match="exactly one group"):
        eg.parse("x", protocol="pattern", pattern=r"(a)(b)")
    assert eg.parse(None, protocol="json").reason == "empty completion"


def _verdicts(protocol: str) -> list[dict]:
    """The judges' texts and what the source tool recorded from each (tests/fixtures/verdicts, bundled)."""
    rows = [json.loads(line) for line in VERDICTS.read_text().splitlines() if line.strip()]
    return [r for r in rows if r["protocol"] == protocol]


def test_mt_bench_single_reads_what_fastchat_recorded():
    rows = _verdicts("mt-bench-single")
    for r in rows:
        v = eg.parse(r["text"], protocol="mt-bench-single", scale_min=1, scale_max=10)
        assert (v.value if v.value is not None else -1.0) == float(r["recorded"]), (r["id"], v)
    assert len(rows) == 160


def test_mt_bench_pair_reads_what_fastchat_recorded():
    rows = _verdicts("mt-bench-pair")
    winner = {1.0: "model_1", 0.0: "model_2", 0.5: "tie", None: "error"}
    swapped = {1.0: "model_2", 0.0: "model_1", 0.5: "tie", None: "error"}  # game 2 shows the answers swapped
    for r in rows:
        read = eg.parse(r["text"], protocol="mt-bench-pair").value
        assert (winner if r["game"] == "g1" else swapped)[read] == r["recorded"], r["id"]
    assert len(rows) == 150 and sum(r["recorded"] == "error" for r in rows) == 3


def test_arena_hard_reads_what_arena_hard_recorded():
    labels = {1.0: "A>>B", 0.75: "A>B", 0.5: "A=B", 0.25: "B>A", 0.0: "B>>A", None: None}
    rows = _verdicts("arena-hard")
    for r in rows:
        assert labels[eg.parse(r["text"], protocol="arena-hard").value] == r["recorded"], r["id"]
    assert len(rows) == 192 and sum(r["recorded"] is None for r in rows) == 2  # no verdict where it found none


def test_inspect_grade_reads_what_inspect_recorded():
    rows = _verdicts("inspect-grade")
    grade = {1.0: "C", 0.5: "P", 0.0: "I", None: None}
    for r in rows:
        assert grade[eg.parse(r["text"], protocol="inspect-grade").value] == r["recorded"], r["id"]
    assert len(rows) == 3
    # Inspect's pattern reads the grade on the last line only, as Inspect searches it
    assert eg.parse("GRADE: C\nOn reflection the answer is wrong.", protocol="inspect-grade").value is None
    assert eg.parse("GRADE: I first\nthen GRADE: C", protocol="inspect-grade").value == 1.0


def test_the_collector_reads_verdicts_by_the_configured_protocol_and_stores_the_rule(tmp_path, monkeypatch):
    from evalgauge.collect.config import load_config
    from evalgauge.collect.runner import run
    from evalgauge.store import RunStore
    from hostile import HostileServer
    from serve_sim import KEY, write_config

    monkeypatch.setenv("SIM_KEY", KEY)
    server = HostileServer("good", KEY)  # every reply: "Score: 3"
    try:
        config = write_config(tmp_path, server.port, items=3, systems=2, reps=1, judges=1, in_flight=2)
        text = config.read_text().replace('mode = "numeric"', 'mode = "likert"\nprotocol = "score-line"')
        text = text.replace('id = "v2"', 'id = "v2"\nprotocol = "pattern"\npattern = "Score: (\\\\d+)"')
        config.write_text(text)
        cfg = load_config(config)
        assert cfg.protocol_for("v1") == ("score-line", None) and cfg.protocol_for("v2")[0] == "pattern"
        run(cfg)
    finally:
        server.stop()
    store = RunStore(cfg.database)
    calls = store.calls()
    store.close()
    assert (calls["score"] == 3).all()
    assert set(calls["rule"]) == {"score-line: Score: N", "pattern: pattern"}


def test_rescore_reads_stored_completions_again_and_keeps_the_earlier_parse(tmp_path):
    import sqlite3

    from click.testing import CliRunner

    from evalgauge.cli import main
    from evalgauge.store import RunStore
    from records import stored_record

    db = tmp_path / "run.sqlite"
    store = RunStore(db, writer=True)
    texts = ["A 1-5 scale is correct. The answer to", "Reasoning.\nScore: 4", "Rating: [[2]]", None]
    for k, t in enumerate(texts):
        store.record(stored_record(k, completion=t, score=5.0 if k == 0 else None, parse_error=None if k == 0 else "x"))
    store.close()
    out = CliRunner().invoke(main, ["rescore", str(db), "--protocol", "score-line", "--scale-min", "1",
                                    "--scale-max", "5"])
    assert out.exit_code == 0 and "1 verdicts, 3 without one" in out.output, out.output
    con = sqlite3.connect(db)
    scores = dict(con.execute("SELECT item, score FROM calls"))
    kept = dict(con.execute("SELECT key, old_score FROM rescores"))
    con.close()
    assert scores == {"q0": None, "q1": 4.0, "q2": None, "q3": None}
    assert kept["q0|s|v|0|j|1|"] == 5.0  # the lone "5" of "1-5 scale" the old parser took, kept


@pytest.mark.parametrize("line,expected", [('protocol = "guess"', "protocol must be one of"),
                                           ('protocol = "pattern"\npattern = "(a)(b)"', "exactly one group"),
                                           ('pattern = "x(\\\\d)"', "without protocol")])
def test_protocol_mistakes_in_the_config_are_named(tmp_path, line, expected):
    from evalgauge.collect.config import load_config
    from evalgauge.errors import DataError
    from serve_sim import write_config

    config = write_config(tmp_path, 1)
    config.write_text(config.read_text().replace('mode = "numeric"', 'mode = "numeric"\n' + line))
    with pytest.raises(DataError, match=expected):
        load_config(config)
