"""Defaults that cannot invert a verdict (issue 39.1): a pairwise reply is read by its label where the label
says the direction, never by the last letter; a reply cut at max_tokens is read only from a verdict complete
in its final form, and counted as cut either way."""

import asyncio
import json

import pytest
import tomli_w
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import FIXTURES
from evalgauge.collect.config import load_config
from evalgauge.collect.parsers import parse_score
from evalgauge.collect.providers import Completion
from evalgauge.collect.runner import run_async
from evalgauge.protocols import parse
from evalgauge.store import RunStore

VERDICTS = FIXTURES / "verdicts" / "judge_verdicts.jsonl"

# every comparison label, with the preference of A it states (arena-hard's values; their "<" mirror images)
GRADED = {"A>>B": 1.0, "A>B": 0.75, "A=B": 0.5, "B>A": 0.25, "B>>A": 0.0,
          "B<<A": 1.0, "B<A": 0.75, "B=A": 0.5, "A<B": 0.25, "A<<B": 0.0}
PLAIN = {"A": 1.0, "B": 0.0, "C": 0.5, "tie": 0.5, "Tie": 0.5}
_spaced = st.sampled_from(["", " "])
# prose around the label, naming both assistants and holding letters, comparisons in words and code
_PROSE = st.lists(st.sampled_from([
    "Assistant A", "Assistant B", "A", "B", "A's answer", "answer B", "is better", "than", "worse", "Output (b)",
    "the", "code", "x[1]", "a", "b", "tie", "on style", "overall", "because", "\n", "Rating:", "verdict", ".",
    "Response A is", "clearer than B", "Let's compare", "B:", "A:", "my", "final",
]), max_size=30).map(" ".join)


@st.composite
def labelled(draw):
    """(reply, the value its label states, whether the label is in double brackets)"""
    if draw(st.booleans()):
        label = draw(st.sampled_from(sorted(GRADED)))
        a, op, b = label[0], label[1:-1], label[-1]
        inner = f"{a}{draw(_spaced)}{op}{draw(_spaced)}{b}"
        value = GRADED[label]
    else:
        label = draw(st.sampled_from(sorted(PLAIN)))
        inner, value = label, PLAIN[label]
    shape = draw(st.sampled_from(["[[{}]]", "[{}]", "{}", "**[[{}]]**", "**{}**", "`{}`", "[[ {} ]]"]))
    written = shape.format(inner)
    return f"{draw(_PROSE)} {written} {draw(_PROSE)}".strip(), value, written.strip("*`").startswith("[[")


def _direction(value: float) -> int:
    return (value > 0.5) - (value < 0.5)


@settings(max_examples=1500, deadline=None)
@given(labelled(), st.booleans())
def test_no_default_reads_a_label_in_the_wrong_direction(case, cut):
    """Whatever surrounds a label, the default pairwise reader gives its direction or no verdict, and a
    comparison label in double brackets (with no other label) is read exactly."""
    text, value, bracketed = case
    read, reason = parse_score(text, "pairwise", cut=cut)
    if read is not None:
        # a verdict in words elsewhere in the prose may be read only when no comparison label is present
        if value not in (0.0, 1.0, 0.5) or bracketed:
            assert _direction(read) == _direction(value), (text, read, value)
    else:
        assert reason


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(sorted(GRADED)), _PROSE, _PROSE)
def test_an_arena_hard_label_is_read_by_arena_hards_rule_or_refused(label, before, after):
    text = f"{before} My final verdict is: [[{label}]] {after}"
    read, _ = parse_score(text, "pairwise")
    if "[[" in before + after or "A>" in before + after:  # never: the prose holds no bracketed label
        pytest.fail("the prose strategy changed")
    assert read == GRADED[label]
    assert parse(text, "arena-hard").value == read or label not in {"A>>B", "A>B", "A=B", "B>A", "B>>A"}


@pytest.mark.parametrize("text", ["A>B", "I'd say A > B overall", "[B>>A]", "B = A on both counts",
                                  "Assistant A: good\nAssistant B: better\nA<B"])
def test_a_comparison_outside_double_brackets_is_refused(text):
    score, reason = parse_score(text, "pairwise")
    assert score is None and "arena-hard" in reason


@pytest.mark.parametrize("text,value", [
    ("[[B]]", 0.0), ("Output (a) is better", 1.0), ("tie", 0.5), ("Final verdict: B", 0.0), ("**Tie**", 0.5),
    ("Comparing both.\nWinner: Response A", 1.0), ("[[A>B]]", 0.75), ("[[ B >> A ]]", 0.0), ("Output (b)", 0.0),
])
def test_a_verdict_written_out_is_read(text, value):
    assert parse_score(text, "pairwise") == (value, None)


@pytest.mark.parametrize("text", ["A is better than B", "I prefer B to A.", "Assistant B is worse than A",
                                  "[[A]] at first, but on reflection [[B]]", "[[A>A]]"])
def test_a_letter_in_prose_or_labels_that_disagree_are_no_verdict(text):
    assert parse_score(text, "pairwise")[0] is None


def test_every_real_arena_hard_game_is_read_right_without_a_protocol():
    """The 192 arena-hard-auto games bundled in tests/fixtures/verdicts (gpt-3.5-turbo judging Athene-V2
    against gpt-4-0314): pairwise mode with no protocol reads the label arena-hard recorded, and nothing
    where it recorded none."""
    labels = {1.0: "A>>B", 0.75: "A>B", 0.5: "A=B", 0.25: "B>A", 0.0: "B>>A", None: None}
    rows = [json.loads(line) for line in VERDICTS.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r["protocol"] == "arena-hard"]
    read = [labels[parse_score(r["text"], "pairwise")[0]] for r in rows]
    assert len(rows) == 192
    assert sum(a == r["recorded"] for a, r in zip(read, rows, strict=True)) == 192


def test_every_real_mt_bench_pair_judgment_is_read_as_fastchat_read_it():
    winner = {1.0: "model_1", 0.0: "model_2", 0.5: "tie", None: "error"}
    swapped = {1.0: "model_2", 0.0: "model_1", 0.5: "tie", None: "error"}
    rows = [json.loads(line) for line in VERDICTS.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r["protocol"] == "mt-bench-pair"]
    for r in rows:
        read = parse_score(r["text"], "pairwise")[0]
        assert (winner if r["game"] == "g1" else swapped)[read] == r["recorded"], r["id"]
    assert len(rows) == 150


# -- replies cut at max_tokens ----------------------------------------------------------------------------------

CUT_IN_CODE = ("The assistant's code moves the snake but never checks the walls:\n```python\n"
               "head = snake_position[1]")
CUT_IN_CODE_2 = "Rating: the loop draws each ball:\n```cpp\nfor (int i = 0; i < 3; i++) {\n  Ball balls[2]"


@pytest.mark.parametrize("text", [CUT_IN_CODE, CUT_IN_CODE_2])
def test_a_cut_reply_never_gives_a_bracketed_index_as_a_rating(text):
    assert parse(text, "mt-bench-single", scale_min=1, scale_max=10).value is not None  # the [N] fallback
    assert parse(text, "mt-bench-single", scale_min=1, scale_max=10, cut=True).value is None


@pytest.mark.parametrize("text,protocol", [
    ("Rating: [[1", None), ("Good answer. Score: 4", None), ("Score: 3", "score-line"),
    ("Feedback ... [RESULT] 4", "prometheus"), ("Final verdict: A", None),
])
def test_a_number_or_letter_at_the_cut_is_not_read(text, protocol):
    if protocol is None:
        mode = "pairwise" if "verdict" in text else "likert"
        assert parse_score(text, mode)[0] is not None
        assert parse_score(text, mode, cut=True)[0] is None
    else:
        assert parse(text, protocol, scale_min=1, scale_max=5).value is not None
        assert parse(text, protocol, scale_min=1, scale_max=5, cut=True).value is None


@pytest.mark.parametrize("text,protocol,value", [
    ("Rating: [[4]] and then more explanation that ran o", "mt-bench-single", 4.0),
    ("Score: 4\nThe rest is an explanation that ran o", "score-line", 4.0),
    ("[RESULT] 4 (the answer is", "prometheus", 4.0),
    ("My final verdict is: [[B>A]]. Also, the", "arena-hard", 0.25),
])
def test_a_complete_verdict_before_the_cut_is_read(text, protocol, value):
    assert parse(text, protocol, scale_min=1, scale_max=10, cut=True).value == value


class CutProvider:
    """Every reply cut at max_tokens: half after a complete verdict, half inside code."""

    def __init__(self, judge):
        self.judge, self.n = judge, 0

    async def complete(self, prompt, system_prompt, temperature, **kw):
        self.n += 1
        text = "Rating: [[4]]. In detail: the" if self.n % 2 else CUT_IN_CODE
        return Completion(text, self.judge.model, f"id-{self.n}", 50, self.judge.max_tokens, "length")

    async def close(self):
        pass


def test_a_cut_reply_is_counted_as_cut_whether_or_not_its_verdict_was_read(tmp_path):
    (tmp_path / "items.jsonl").write_text("".join(json.dumps({"id": f"q{k}", "text": f"Q{k}"}) + "\n"
                                                  for k in range(4)))
    doc = {"run": {"replicates": 2, "budget_usd": 10.0}, "data": {"items": "items.jsonl"},
           "scoring": {"mode": "likert", "protocol": "mt-bench-single", "scale_min": 1, "scale_max": 10},
           "variants": [{"id": "v", "template": "Rate {item}."}],
           "judges": [{"name": "j", "model": "m", "max_tokens": 64}]}
    (tmp_path / "run.toml").write_text(tomli_w.dumps(doc))
    cfg = load_config(tmp_path / "run.toml")
    summary = asyncio.run(run_async(cfg, providers={"j": CutProvider(cfg.judges[0])}))
    assert summary.completed == 8 and summary.truncated == 4 and summary.truncated_scored == 4
    assert any("8 replies were cut at max_tokens" in n and "4 of them had a complete verdict" in n
               for n in summary.notes)
    store = RunStore(cfg.database)
    try:
        calls = store.calls()
    finally:
        store.close()
    assert sorted(calls["score"].dropna().tolist()) == [4.0] * 4  # snake_position[1] is never a rating
    assert calls["parse_error"].dropna().str.startswith("cut at max_tokens").all()


@pytest.mark.parametrize("text,read", [("value 4", None), ("value 4\n", 4.0), ("  value 4", None),
                                       ("value 4 and more", 4.0)])
def test_a_numeric_verdict_at_the_cut_is_not_read(text, read):
    assert parse_score(text, "numeric", cut=True)[0] == read
    assert parse_score(text, "numeric")[0] == 4.0
