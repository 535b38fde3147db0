"""Structured and probabilistic answers, truncations, reasoning blocks and re-asks, against serve-sim on loopback.

serve-sim answers a JSON schema as an OpenAI endpoint does, or (``json_object_only``) refuses
``json_schema`` with a 400 as llama-cpp-python's server does; its log-probabilities at the answer token are
a discretised normal around the latent score. The live tests (tests/live/) run the same against a real
model server.
"""

import json
import sqlite3

import pandas as pd
import pytest
from click.testing import CliRunner

from evalgauge.cli import main
from evalgauge.collect.config import load_config
from evalgauge.collect.tasks import count_tasks
from evalgauge.errors import DataError
from serve_sim import KEY, collect, free_port, write_config


@pytest.fixture
def env_key(monkeypatch):
    monkeypatch.setenv("SIM_KEY", KEY)


def _config(tmp_path, port, *, mode="likert", scoring="", provider="openai", reps=2, judges=2, items=6):
    path = write_config(tmp_path, port, mode=mode, items=items, systems=3, reps=reps, judges=judges, provider=provider)
    text = path.read_text().replace(f'mode = "{mode}"', f'mode = "{mode}"\n{scoring}')
    if mode == "pairwise":
        text = text.replace(f'mode = "{mode}"', f'mode = "{mode}"\nbaseline = "s0"')
        text = text.replace("{item} / {response}", "{item} / A: {response_a} B: {response_b}")
        text = text.replace("Q: {item} A: {response}", "Q: {item} A: {response_a} B: {response_b}")
    path.write_text(text)
    return path


def _calls(cfg) -> pd.DataFrame:
    with sqlite3.connect(cfg.database) as db:
        return pd.read_sql_query("SELECT * FROM calls", db)


@pytest.mark.parametrize("faults,dialect", [((), "json_schema"), (("json_object_only=1",), "json_object")])
def test_json_output_scores_every_call_in_the_endpoints_dialect(tmp_path, env_key, faults, dialect):
    port = free_port()
    cfg, summary = collect(_config(tmp_path, port, scoring='output = "json"'), port, *faults)
    calls = _calls(cfg)
    assert summary.completed == count_tasks(cfg) and summary.failed == 0 and not summary.fatal
    assert calls["score"].notna().all() and set(calls["score"]) <= {1.0, 2.0, 3.0, 4.0, 5.0}
    assert set(calls["rule"]) == {'json: {"score": N}'} and set(calls["finish_reason"]) == {"stop"}
    assert all(json.loads(r)["output"] == "json" for r in calls["request"])
    # the dialect is found once per judge: a refused json_schema costs each judge one extra request, no failure
    assert summary.retries == 0


def test_json_output_on_anthropic_is_a_forced_tool_call(tmp_path, env_key):
    port = free_port()
    cfg, summary = collect(_config(tmp_path, port, scoring='output = "json"', provider="anthropic"), port)
    calls = _calls(cfg)
    assert summary.completed == count_tasks(cfg) and calls["score"].notna().all()
    assert all(json.loads(c).keys() == {"score"} for c in calls["completion"])


def test_json_output_for_pairwise_reads_the_labels(tmp_path, env_key):
    port = free_port()
    cfg, summary = collect(_config(tmp_path, port, mode="pairwise", scoring='output = "json"', reps=1), port)
    calls = _calls(cfg)
    assert summary.completed == count_tasks(cfg) and set(calls["score"]) <= {0.0, 1.0}
    assert {json.loads(c)["score"] for c in calls["completion"]} <= {"A", "B"}


def test_an_endpoint_without_structured_output_stops_the_judge_at_its_first_call(tmp_path, env_key):
    port = free_port()
    cfg, summary = collect(_config(tmp_path, port, scoring='output = "json"'), port, "no_structured=1")
    assert summary.completed == 0 and set(summary.fatal) == {"j0", "j1"}
    message = summary.fatal["j0"]
    assert "structured output" in message and 'output = "text"' in message and KEY not in message
    assert summary.skipped == count_tasks(cfg) - 2  # one call a judge, then stopped


@pytest.mark.subprocess
def test_logprobs_give_the_probability_weighted_score_of_every_call(tmp_path, env_key):
    port = free_port()
    cfg, summary = collect(_config(tmp_path, port, scoring='output = "logprobs"'), port)
    calls = _calls(cfg)
    assert summary.completed == count_tasks(cfg) and calls["score"].notna().all()
    assert (calls["score"] != calls["score"].round()).mean() > 0.9  # a mean of the distribution, not the verdict
    for _, row in calls.iterrows():
        dist = {float(k): p for k, p in json.loads(row["distribution"]).items()}
        assert abs(sum(dist.values()) - 1) < 1e-9 and set(dist) <= {1.0, 2.0, 3.0, 4.0, 5.0}
        mean = sum(v * p for v, p in dist.items())
        assert row["score"] == pytest.approx(mean, abs=1e-12)
        assert row["spread"] == pytest.approx(sum(p * (v - mean) ** 2 for v, p in dist.items()) ** 0.5, abs=1e-12)
    assert set(calls["rule"]) == {"logprobs: logprobs"}
    out = CliRunner().invoke(main, ["analyze", str(cfg.database), "--json", str(tmp_path / "a.json"), "--report",
                                    str(tmp_path / "r.html")])
    assert out.exit_code == 0, out.output
    spread = json.loads((tmp_path / "a.json").read_text())["diagnostics"]["within_call_spread"]
    assert {r["judge"] for r in spread} == {"j0", "j1"}
    by_judge = calls.groupby("judge")["spread"].mean()
    assert all(r["mean_spread"] == pytest.approx(by_judge[r["judge"]]) for r in spread)
    assert "within-call spread" in out.output and "within-call spread" in (tmp_path / "r.html").read_text()


def test_an_endpoint_without_logprobs_stops_the_judge(tmp_path, env_key):
    port = free_port()
    _, summary = collect(_config(tmp_path, port, scoring='output = "logprobs"'), port, "no_logprobs=1")
    assert summary.completed == 0 and "without log-probabilities" in summary.fatal["j0"]


def test_truncated_replies_are_stored_counted_and_named(tmp_path, env_key):
    port = free_port()
    cfg, summary = collect(_config(tmp_path, port, scoring='protocol = "score-line"'), port, "truncate=0.3")
    calls = _calls(cfg)
    cut = calls["finish_reason"] == "length"
    assert 0 < cut.sum() == summary.truncated and calls.loc[cut, "score"].isna().all()
    assert calls.loc[cut, "parse_error"].str.startswith("cut at max_tokens (16 tokens) before a verdict").all()
    assert any("cut at max_tokens" in n for n in summary.notes)
    assert calls.loc[~cut, "score"].notna().all()


@pytest.mark.subprocess
def test_a_reasoning_block_is_never_read_for_the_verdict(tmp_path, env_key):
    scores = []
    for k, faults in enumerate(((), ("think=1",))):
        for j, protocol in enumerate(("", 'protocol = "score-line"')):
            folder = tmp_path / f"{k}{j}"
            folder.mkdir()
            port = free_port()
            cfg, _ = collect(_config(folder, port, scoring=protocol, reps=1), port, *faults)
            calls = _calls(cfg).sort_values("key")
            scores.append(calls["score"].to_numpy())
            if faults:
                assert calls["completion"].str.startswith("<think>").all()
    # the same seeds: the verdict after the block, not the one inside it (latent + 2, another number)
    assert (scores[0] == scores[2]).all() and (scores[1] == scores[3]).all()


def test_reask_turns_an_unreadable_verdict_into_a_scored_call_inside_the_budget(tmp_path, env_key):
    port = free_port()
    cfg, summary = collect(_config(tmp_path, port, scoring='protocol = "score-line"\nreask = 2'), port,
                            "garbage=0.3")
    calls = _calls(cfg)
    asked = calls["reasks"] > 0
    assert calls["reasks"].sum() == summary.reasks and asked.sum() > 0
    assert calls["score"].notna().mean() > 0.95  # 0.3^3 of the cells stay unread
    for _, row in calls[asked].iterrows():
        turns = json.loads(row["turns"])
        assert len(turns) == row["reasks"] and turns[0]["completion"] == "I am unable to assess this response."
    # a re-asked call pays for every turn: more tokens than a call answered at once
    assert calls.loc[asked, "input_tokens"].min() > calls.loc[~asked, "input_tokens"].max()


def test_reask_stops_at_the_budget(tmp_path, env_key):
    port = free_port()
    path = _config(tmp_path, port, scoring='protocol = "score-line"\nreask = 3', reps=1, judges=1, items=2)
    path.write_text(path.read_text().replace("max_retries = 8", "max_retries = 8\nbudget_usd = 0.0006"))
    cfg, summary = collect(path, port, "garbage=1")
    calls = _calls(cfg)
    assert summary.cost_usd <= cfg.budget_usd
    assert calls["parse_error"].str.contains("no re-ask: the budget leaves no room").any()


@pytest.mark.parametrize("scoring,expected", [
    ('output = "logprobs"\nscale_max = 10', "single digits"),
    ('output = "logprobs"\nmode = "binary"', 'needs mode = "likert"'),
    ('output = "json"\nprotocol = "score-line"', "remove protocol"),
    ('output = "yaml"', "output"),
    ("reask = 9", "reask"),
    ('protocol = "pattern"\npattern = "Score: \\\\d"', "exactly one group"),
    ('protocol = "pattern"\npattern = "Score: (\\\\d"', "not a valid regular expression"),
    ('protocol = "fastchat"', "protocol must be one of"),
])
def test_a_scoring_the_judges_cannot_give_is_refused_before_any_call(tmp_path, env_key, scoring, expected):
    path = _config(tmp_path, 9, scoring=scoring)
    text = path.read_text()
    if 'mode = "binary"' in scoring:
        text = text.replace('mode = "likert"\n', "", 1)
    path.write_text(text)
    with pytest.raises(DataError) as err:
        load_config(path)
    assert expected in str(err.value)
    out = CliRunner().invoke(main, ["run", str(path)])
    assert out.exit_code == 2 and expected in out.output and "Traceback" not in out.output


def test_logprobs_on_anthropic_are_refused_before_any_call(tmp_path, env_key):
    path = _config(tmp_path, 9, scoring='output = "logprobs"', provider="anthropic")
    with pytest.raises(DataError, match="returns no log-probabilities"):
        load_config(path)


def test_a_reasks_worst_case_counts_every_earlier_message():
    from evalgauge.collect.limits import MESSAGE_OVERHEAD_TOKENS, worst_case_input_tokens

    base = worst_case_input_tokens("Rate: q / a", "Be strict.")
    turn = ("I am unable to assess this.", "Your verdict could not be read.")
    with_turn = worst_case_input_tokens("Rate: q / a", "Be strict.", (turn,))
    assert with_turn == base + len(turn[0]) + len(turn[1]) + 2 * MESSAGE_OVERHEAD_TOKENS
