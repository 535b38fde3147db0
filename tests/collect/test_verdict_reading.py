"""Reading verdicts without adding error: reasoning blocks skipped, structured answers validated, the
judge's distribution over the scale read at the answer token, and no stray number read as a score.

The property tests generate judge replies from templates full of the numbers a verdict is not (list
numbering, the prompt's own scale, ranges, denominators, years) and check that the default likert reader
and every protocol find no verdict in them, and exactly the verdict when one is written their way.
"""

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import FIXTURES
from evalgauge.collect.parsers import parse_score
from evalgauge.protocols import (
    parse,
    read_structured,
    scale_distribution,
    strip_reasoning,
    verdict_form,
    verdict_schema,
)


@pytest.mark.parametrize("text,expected", [
    ("<think>Maybe [[2]]</think>Rating: [[4]]", "Rating: [[4]]"),
    ("<thinking>\n[[1]]\n</thinking>\n[[5]]", "\n[[5]]"),
    ("<think>still thinking [[3]] and cut", ""),
    ("server dropped the opening tag [[2]]</think> [[4]]", " [[4]]"),
    ("no block [[4]]", "no block [[4]]"),
])
def test_strip_reasoning(text, expected):
    assert strip_reasoning(text) == expected


def test_a_verdict_inside_a_reasoning_block_is_never_read():
    assert parse("<think>I'd say [[2]]</think>Rating: [[4]]", "mt-bench-single", scale_min=1, scale_max=10).value == 4
    only = parse("<think>I'd say [[2]]", "mt-bench-single", scale_min=1, scale_max=10)
    assert only.value is None and "reasoning" in only.reason


def test_the_schema_lists_the_scales_values_rather_than_bounding_them():
    schema = verdict_schema("likert", 1, 5)
    assert schema["properties"]["score"] == {"type": "integer", "enum": [1, 2, 3, 4, 5]}
    assert schema["required"] == ["score"] and schema["additionalProperties"] is False
    assert verdict_schema("pairwise")["properties"]["score"]["enum"] == ["A", "B", "tie"]


@pytest.mark.parametrize("text,mode,value,reason", [
    ('{"score": 4}', "likert", 4.0, None),
    ('{"score" : 45 }', "likert", None, "outside 1..5"),  # what a grammar with minimum/maximum let through
    ('{"score": 3.5}', "likert", None, "not a whole number"),
    ('{"score": "4"}', "likert", None, "not a number"),
    ('{"score": true}', "likert", None, "not a number"),
    ('{"verdict": 4}', "likert", None, "no 'score' field"),
    ('{"score": 4', "likert", None, "not a JSON object"),
    ('```json\n{"score": 2}\n```', "likert", 2.0, None),
    ('{"score": "B"}', "pairwise", 0.0, None),
    ('{"score": "tie"}', "pairwise", 0.5, None),
    ('{"score": "C"}', "pairwise", None, "not one of A, B, tie"),
    ('{"score": "yes"}', "binary", 1.0, None),
    ('{"score": "C"}', "choice", 2.0, None),
])
def test_structured_answers_are_validated(text, mode, value, reason):
    v = read_structured(text, mode, scale_min=1, scale_max=5)
    assert v.value == value
    if reason:
        assert reason in v.reason


def _tokens(verdict: str, alternatives: dict[str, float]) -> list:
    return [('{"', [('{"', 0.0)]), ("score", [("score", 0.0)]), ('":', [('":', 0.0)]), (" ", [(" ", 0.0)]),
            (verdict, [(k, math.log(p)) for k, p in alternatives.items()]), ("}", [("}", 0.0)])]


def test_the_distribution_at_the_answer_token_gives_the_probability_weighted_score():
    alts = {"4": 0.5, "3": 0.2, " 5": 0.1, "5": 0.1, "four": 0.05, "45": 0.05}
    v = read_structured('{"score": 4}', "likert", scale_min=1, scale_max=5, tokens=_tokens("4", alts))
    # renormalised over the scale's values (" 5" and "5" are one value; "four" and "45" are not on it)
    p = {3.0: 0.2 / 0.9, 4.0: 0.5 / 0.9, 5.0: 0.2 / 0.9}
    assert dict(v.distribution) == pytest.approx(p)
    mean = sum(k * q for k, q in p.items())
    assert v.value == pytest.approx(mean) and v.rule == "logprobs"
    assert v.spread == pytest.approx(math.sqrt(sum(q * (k - mean) ** 2 for k, q in p.items())))


def test_the_answer_token_is_the_one_at_the_score_not_an_earlier_digit():
    tokens = [("1", [("1", 0.0)]), (". ", [(". ", 0.0)]), *_tokens("2", {"2": 0.7, "3": 0.3})]
    text = "1. " + '{"score": 2}'
    assert dict(scale_distribution(tokens, text.index("2}"), range(1, 6))) == pytest.approx({2.0: 0.7, 3.0: 0.3})


def test_no_scale_value_at_the_answer_token_is_no_verdict():
    v = read_structured('{"score": 4}', "likert", scale_min=1, scale_max=5,
                        tokens=[("{", []), ("x", [("x", 0.0)])])
    assert v.value is None and "log-probabilities" in v.reason


def test_the_form_a_reask_asks_for():
    assert verdict_form("mt-bench-single", "likert", 1, 10) == "'Rating: [[N]]', N from 1 to 10"
    assert verdict_form(None, "likert", 1, 5) == "'Score: N', N from 1 to 5"
    assert verdict_form("mt-bench-pair", "pairwise", 1, 5).startswith("'[[A]]'")
    assert "JSON" in verdict_form(None, "likert", 1, 5, "json")


# -- property tests: no number that is not a verdict is ever read as one --------------------------------------

_WORDS = st.sampled_from(["The", "answer", "is", "mostly", "correct", "but", "misses", "a", "detail", "and",
                          "cites", "sources", "well", "overall", "quality", "response", "helpful", "clear"])
_DISTRACTORS = st.one_of(
    st.builds(lambda a, b: f"on a {a}-{b} scale", st.integers(0, 5), st.integers(5, 10)),
    st.builds(lambda a, b: f"a scale of {a} to {b}", st.integers(0, 5), st.integers(5, 10)),
    st.builds(lambda n, w: f"\n{n}. {w}", st.integers(1, 9), _WORDS),
    st.builds(lambda n: f"out of {n}", st.integers(3, 10)),
    st.builds(lambda y: f"in {y}", st.integers(1900, 2030)),
    st.builds(lambda a, b: f"{a}-{b} points", st.integers(1, 4), st.integers(5, 9)),
    st.builds(lambda n: f"step {n}", st.integers(1, 9)),
    st.builds(lambda n: f"({n})", st.integers(1, 9)),
)
# a reply is prose: at least one word beside its numbers (a reply that is only "4" is a verdict)
_REPLY = st.tuples(_WORDS, st.lists(st.one_of(_WORDS, _DISTRACTORS), min_size=1, max_size=25)).map(
    lambda t: " ".join([t[0], *t[1]]))


@settings(max_examples=300, deadline=None)
@given(_REPLY)
def test_the_default_reader_never_reads_a_distractor_as_a_score(text):
    score, error = parse_score(text, "likert", scale_min=1, scale_max=5)
    assert score is None and error


@settings(max_examples=300, deadline=None)
@given(_REPLY, st.sampled_from(["mt-bench-single", "prometheus", "score-line", "json"]))
def test_no_protocol_reads_a_distractor_as_a_verdict(text, protocol):
    assert parse(text, protocol, scale_min=1, scale_max=10).value is None


_WRITTEN = {"mt-bench-single": "Rating: [[{k}]]", "prometheus": "[RESULT] {k}", "score-line": "\nScore: {k}",
            "json": None}


@settings(max_examples=300, deadline=None)
@given(_REPLY, _REPLY, st.integers(1, 5), st.sampled_from(["mt-bench-single", "prometheus", "score-line"]))
def test_a_verdict_written_the_protocols_way_is_read_exactly_among_distractors(before, after, k, protocol):
    text = f"{before} {_WRITTEN[protocol].format(k=k)}" + ("" if protocol == "score-line" else f" {after}")
    assert parse(text, protocol, scale_min=1, scale_max=10).value == k
    assert parse_score(f"{before}\nScore: {k}", "likert", scale_min=1, scale_max=5)[0] == k


@settings(max_examples=200, deadline=None)
@given(_REPLY, st.integers(1, 5))
def test_a_reasoning_block_never_decides_the_verdict(thought, k):
    text = f"<think>{thought} Rating: [[{6 - k}]]</think>Rating: [[{k}]]"
    assert parse(text, "mt-bench-single", scale_min=1, scale_max=10).value == k
    assert json.loads(json.dumps({"t": text}))  # the reply round-trips as stored


def test_the_default_reader_agrees_with_fastchat_on_every_mt_bench_judgment():
    """Without a protocol, likert on a 1-10 scale reads FastChat's 'Rating: [[N]]' as FastChat does: every one
    of the 160 real GPT-4 judgments (tests/fixtures/verdicts), and no number where FastChat found none."""

    path = FIXTURES / "verdicts" / "judge_verdicts.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r["protocol"] == "mt-bench-single"]
    read = [parse_score(r["text"], "likert", scale_min=1, scale_max=10)[0] for r in rows]
    assert len(rows) == 160
    assert all((v if v is not None else -1.0) == float(r["recorded"]) for v, r in zip(read, rows, strict=True))
