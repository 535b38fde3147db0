"""The collector against a hostile OpenAI-compatible server (tests/hostile.py): every reply class.

Each test runs a real factorial through the runner and checks the boundary's invariants: no
exception, the key in no byte of the run database, money never beyond the cap (by the server's own
books), a malformed reply never stored as an answer, nothing unbounded stored, a long Retry-After
never parking the run.
"""

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalgauge.cli import main
from evalgauge.collect.config import load_config
from evalgauge.collect.runner import run
from evalgauge.collect.tasks import count_tasks
from hostile import MODES, HostileServer, boundary_violations, collect_against, hostile_config
from serve_sim import KEY


@pytest.fixture
def env_key(monkeypatch):
    monkeypatch.setenv("SIM_KEY", KEY)


def _collect(tmp_path, mode, **kw):
    cfg, summary, calls, failures, cost, server, _ = collect_against(tmp_path, mode, KEY, **kw)
    return cfg, summary, calls, failures, cost, server


def _database_bytes(cfg) -> bytes:
    return b"".join(p.read_bytes() for p in cfg.database.parent.glob(cfg.database.name + "*"))


@pytest.mark.parametrize("mode", ["echo", "control"])
def test_an_echoed_key_and_control_characters_are_stored_nowhere(tmp_path, env_key, mode):
    cfg, summary, calls, _, _, _ = _collect(tmp_path, mode)
    assert len(calls) == count_tasks(cfg) and summary.failed == 0
    assert KEY.encode() not in _database_bytes(cfg)
    assert KEY not in json.dumps(summary.to_dict())
    for col in ("completion", "model", "response_id"):
        assert not calls[col].astype(str).str.contains("\x1b|\x07|\u202e", regex=True).any()
    if mode == "echo":
        assert (calls["score"] == 3).all() and calls["flags"].str.contains("redacted").all()
        assert any("redacted" in n for n in summary.notes)
    # and nothing downstream shows it: analyze, export
    out = CliRunner().invoke(main, ["analyze", str(cfg.database), "--json", "-"])
    assert KEY not in out.output and "\x1b" not in out.output


@pytest.mark.parametrize("mode", ["no_usage", "inflated"])
def test_the_cap_holds_on_what_the_collector_can_bound_not_on_the_servers_usage(tmp_path, env_key, mode):
    budget = 0.002
    cfg, summary, calls, _, cost, server = _collect(tmp_path, mode, budget=budget)
    assert summary.stopped_by_budget and 0 < len(calls) < count_tasks(cfg)
    assert cost <= budget and server.billed_usd <= budget  # the server's own books
    assert (calls["cost_usd"] > 0).all() and calls["cost_usd"].max() < 1e-3  # worst case, not 10^9 tokens
    assert calls["flags"].str.contains("implausible usage").all()
    assert any("implausible" in n for n in summary.notes)


def test_a_lone_surrogate_is_stored_with_a_replacement_and_the_run_finishes(tmp_path, env_key):
    cfg, summary, calls, _, _, _ = _collect(tmp_path, "surrogate")
    assert len(calls) == count_tasks(cfg) and summary.failed == 0
    assert calls["completion"].str.endswith("\ufffd").all() and (calls["score"] == 3).all()


def test_a_day_long_retry_after_pauses_the_run_resumably(tmp_path, env_key):
    t0 = time.monotonic()
    _cfg, summary, calls, failures, _, _ = _collect(tmp_path, "retry_after")
    assert time.monotonic() - t0 < 30
    assert not summary.ok and "j0" in summary.paused and "86,400 s" in summary.paused["j0"]
    assert calls.empty and len(failures) == 1  # one call asked, then the judge paused
    server = HostileServer("retry_after", KEY)
    try:
        (tmp_path / "cli").mkdir()
        config = hostile_config(tmp_path / "cli", server)
        out = CliRunner().invoke(main, ["run", str(config), "--no-progress"])
    finally:
        server.stop()
    assert out.exit_code == 3 and "paused" in out.output and "Traceback" not in out.output


@pytest.mark.parametrize("mode", ["truncated", "bad_utf8", "short", "not_object"])
@pytest.mark.subprocess
def test_a_broken_reply_is_retried_and_never_stored_as_an_answer(tmp_path, env_key, mode):
    # broken on the first try of each prompt: the retry succeeds and every cell holds a real answer
    cfg, summary, calls, _, _, _ = _collect(tmp_path, mode, first_only=True)
    assert len(calls) == count_tasks(cfg) and summary.retries > 0 and summary.failed == 0
    assert (calls["completion"] == "Score: 3").all()
    # broken every time: failures (asked again on resume), no answers, the billed replies charged
    (tmp_path / "always").mkdir()
    cfg, summary, calls, failures, cost, server = _collect(tmp_path / "always", mode)
    assert calls.empty and len(failures) > 0 and summary.failed > 0
    assert failures["error"].str.contains("malformed|cut short", regex=True).all()
    assert cost >= server.billed_usd > 0


def test_a_ten_megabyte_completion_is_not_read_whole_or_stored(tmp_path, env_key):
    cfg, _summary, calls, failures, cost, server = _collect(tmp_path, "huge")
    assert calls.empty and len(failures) > 0
    assert failures["error"].str.contains("more than").all()
    assert len(_database_bytes(cfg)) < 1_000_000
    assert cost >= server.billed_usd


def test_the_dry_runs_worst_case_counts_the_generations(tmp_path, env_key):
    server = HostileServer("long", KEY)
    try:
        config = hostile_config(tmp_path, server)
        text = config.read_text().replace('responses = "responses.csv"\n', "")
        text += "".join(f"""
[[systems]]
name = "sut{k}"
model = "gen-{k}"
base_url = "{server.base_url}"
api_key_env = "SIM_KEY"
price_input_per_mtok = 1.0
price_output_per_mtok = 2.0
max_tokens = 256
""" for k in range(2))
        config.write_text(text + '\n[generation]\ntemplate = "Answer: {item}"\n')
        plan = CliRunner().invoke(main, ["run", str(config), "--dry-run", "--json", "-"])
        assert plan.exit_code == 0, plan.output
        worst = json.loads(plan.output)["worst_case_usd"]
        cfg = load_config(config)
        summary = run(cfg)
    finally:
        server.stop()
    assert summary.generated == 8 and summary.completed == count_tasks(cfg)
    assert server.billed_usd <= summary.cost_usd <= worst


@pytest.mark.parametrize("mode", [m for m in MODES if m not in ("retry_after", "redirect", "stall")])
def test_every_reply_class_on_half_the_calls_keeps_the_boundary(tmp_path, env_key, mode):
    """No leak, no overrun (by either side's books), no broken reply stored as an answer: every class."""
    budget = 0.003
    cfg, summary, calls, _, cost, server = _collect(tmp_path, mode, share=0.5, budget=budget)
    assert boundary_violations(mode, KEY, summary, calls, cost, budget, server, _database_bytes(cfg)) == []


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_key_echoed_into_every_field_is_in_no_stored_exported_or_printed_byte(tmp_path, env_key, provider):
    """The server echoes the key header into the completion, the model, the response id and the finish
    (stop) reason; none of it is stored, exported to CSV or Parquet, or printed."""
    cfg, summary, calls, _, _, server = _collect(tmp_path, "echo", provider=provider)
    assert KEY in str(server.headers[0])  # the key was sent, so the echo held it
    assert len(calls) == count_tasks(cfg) and summary.failed == 0
    assert KEY.encode() not in _database_bytes(cfg) and KEY not in json.dumps(summary.to_dict())
    assert calls["finish_reason"].str.contains("***", regex=False).all()
    assert calls["flags"].str.contains("redacted").all()
    runner = CliRunner()
    for args in (["-o", str(tmp_path / "calls.csv")], ["-o", str(tmp_path / "calls.parquet")],
                 ["--judgments", "-o", str(tmp_path / "judgments.csv")]):
        out = runner.invoke(main, ["export", str(cfg.database), *args])
        assert out.exit_code == 0, out.output
        assert KEY not in out.output and KEY.encode() not in Path(args[-1]).read_bytes()
    for cmd in (["analyze", str(cfg.database), "--json", "-"], ["analyze", str(cfg.database)]):
        out = runner.invoke(main, cmd)
        assert KEY not in out.output


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_no_key_header_follows_a_redirect_to_another_origin(tmp_path, env_key, provider):
    other = HostileServer("good", KEY)
    try:
        _, summary, calls, _, cost, server = _collect(
            tmp_path, "redirect", provider=provider, redirect_to=f"http://localhost:{other.port}")
    finally:
        other.stop()
    assert other.requests == 0 and not other.headers  # nothing reached the other origin
    assert len(calls) == 0 and cost == 0.0
    assert server.requests == 1  # the judge was stopped at its first call: every call would be redirected
    stopped = " ".join(summary.fatal.values())
    assert "redirects to http://localhost:" in stopped and "not followed" in stopped and KEY not in stopped


def test_a_body_that_stalls_past_the_timeout_is_charged_at_its_worst_case(tmp_path, env_key):
    """The server answers 200, bills the call, then stalls the body past timeout_s: the collector charges
    each such call at its worst case, so the server's books never pass the cap."""
    from hostile import STALL_S

    budget = 0.0005
    t0 = time.monotonic()
    _, summary, _, _, cost, server = _collect(tmp_path, "stall", budget=budget, timeout=0.5, retries=3, share=0.5)
    assert time.monotonic() - t0 < 20 * STALL_S
    assert server.billed_usd > 0 and server.billed_usd <= budget + 1e-12
    assert cost >= server.billed_usd - 1e-12  # what the collector counts covers what the server billed
    assert summary.stopped_by_budget
