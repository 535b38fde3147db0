"""Batch collection through serve-sim's fake batch endpoints (OpenAI's files + batches, Anthropic's Message
Batches): every cell once, failed and expired lines sent again, the recorded cost equal to the server's own bill
at the batch price, the budget held at the batch's worst case, and a run killed with SIGKILL between submission
and completion and during ingestion resumed without a batch submitted twice."""

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace

import pytest
from test_prompt_cache import RUBRIC

from evalgauge.collect.batch import custom_id, plan_batches
from evalgauge.collect.config import Judge, load_config
from evalgauge.collect.runner import dry_run, run
from evalgauge.collect.tasks import build_tasks, count_tasks
from evalgauge.store import RunStore
from serve_sim import KEY, Server, free_port, write_config


def _batch_config(tmp_path, port, provider, *, items=6, systems=2, judges=2, extra="", rubric=False):
    config = write_config(tmp_path, port, items=items, systems=systems, reps=2, judges=judges, provider=provider,
                          extra_run=f"batch = true\nbatch_poll_s = 0.05\n{extra}")
    if rubric:  # a system prompt over the caches' 1,024 tokens, read from the cache at its own price
        text = config.read_text().replace("price_input_per_mtok = 1.0", "price_input_per_mtok = 2.0\n"
                                          "price_cached_input_per_mtok = 0.5")
        config.write_text(f"system_prompt = {json.dumps(RUBRIC)}\n" + text)
    return config


def _ledger(path) -> tuple[list[dict], list[dict]]:
    """The server's own record: the usage of every answered request, and every batch it was asked to run."""
    usage, batches = [], []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        (batches if "batch" in row and "custom_ids" in row else usage).append(row)
    return usage, batches


def _bill(usage: list[dict], judges: dict[str, Judge]) -> float:
    """The provider's account: each answered request at its judge's price, a batch line at the batch price."""
    by_model = {j.model: j for j in judges.values()}
    total = 0.0
    for u in usage:
        judge = by_model[u["model"]]
        judge = judge.at_batch_price() if u.get("batch") else judge
        total += judge.price(u["input"], u["output"], u["cached"], u["written"])
    return total


def _collect(config, port, *faults):
    """The configuration run against a fresh serve-sim keeping its ledger: (config, summary, ledger path)."""
    ledger = config.parent / "ledger.jsonl"
    server = Server(config, port, *faults, extra=("--ledger", str(ledger)))
    try:
        cfg = load_config(config)
        return cfg, run(cfg), ledger
    finally:
        server.stop()


def test_custom_ids_are_stable_and_what_both_apis_accept():
    ids = {custom_id(f"q{i}|s|v|0|j|{r}|") for i in range(500) for r in (1, 2)}
    assert len(ids) == 1000 and all(re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", c) for c in ids)
    assert custom_id("a|b") == custom_id("a|b") != custom_id("a|c")


def test_batch_prices_are_the_factor_of_every_price():
    judge = Judge("j", "m", price_input_per_mtok=2.0, price_output_per_mtok=8.0, price_cached_input_per_mtok=0.5)
    half = judge.at_batch_price()
    assert half.price(1000, 100, cached=400) == pytest.approx(judge.price(1000, 100, cached=400) / 2)
    assert half.worst_price(1000, 100) == pytest.approx(judge.worst_price(1000, 100) / 2)
    assert Judge("j", "m", price_input_per_mtok=2.0, price_batch_factor=0.3).at_batch_price().price(1e6, 0) == \
        pytest.approx(0.6)


def test_batches_are_cut_at_the_size_asked_per_judge(tmp_path):
    cfg = load_config(_batch_config(tmp_path, 1, "openai", extra="batch_size = 10"))
    chunks = plan_batches(cfg, list(build_tasks(cfg)))
    assert sum(len(c) for _, c in chunks) == count_tasks(cfg) == 96
    assert all(len(c) <= 10 for _, c in chunks) and {n for n, _ in chunks} == {"j0", "j1"}
    assert all({t.judge for t in c} == {n} for n, c in chunks)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_batch_run_records_every_cell_once_at_the_batch_price(tmp_path, monkeypatch, provider):
    monkeypatch.setenv("SIM_KEY", KEY)
    port = free_port()
    config = _batch_config(tmp_path, port, provider, extra="batch_size = 40", rubric=True)
    ledger = tmp_path / "ledger.jsonl"
    server = Server(config, port, "batch_delay_s=0.2", "batch_error=0.08", "batch_expire=0.05",
                    extra=("--ledger", str(ledger)))
    try:
        cfg = load_config(config)
        summary = run(cfg)
    finally:
        server.stop()
    store = RunStore(cfg.database)
    calls = store.calls()
    assert summary.completed == count_tasks(cfg) == len(calls) == calls["key"].nunique()
    assert calls["score"].notna().all()
    usage, batches = _ledger(ledger)
    assert all(u.get("batch") for u in usage) and len(usage) == len(calls)  # nothing sent synchronously
    # the lines that failed were sent again, in later batches, and only they
    sent = Counter(c for b in batches for c in b["custom_ids"])
    failures = store.failures()
    assert len(failures) > 0 and sum(sent.values()) == len(calls) + len(failures)
    assert summary.batches == len(batches) > 2 and {b["state"] for b in store.batches()} == {"ingested"}
    bill = _bill(usage, {j.name: j for j in cfg.judges})
    assert store.cost() == pytest.approx(bill, rel=1e-12) and round(store.cost(), 2) == round(bill, 2)
    assert all(json.loads(r)["batch"] for r in calls["request"])
    # the rubric was read from the prompt cache, and charged at its cached price (halved)
    assert calls["cached_tokens"].sum() == sum(u["cached"] for u in usage) > 0
    assert int(calls["cache_write_tokens"].sum()) == sum(u["written"] for u in usage)


@pytest.mark.subprocess
def test_failed_lines_go_synchronously_when_the_config_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("SIM_KEY", KEY)
    port = free_port()
    config = _batch_config(tmp_path, port, "openai", extra='batch_failed = "sync"')
    cfg, summary, ledger = _collect(config, port, "batch_delay_s=0.1", "batch_error=0.2")
    calls = RunStore(cfg.database).calls()
    usage, batches = _ledger(ledger)
    synchronous = [u for u in usage if not u.get("batch")]
    assert len(calls) == count_tasks(cfg) and len(batches) == 2  # one batch per judge, never re-batched
    assert 0 < len(synchronous) == len(calls) - sum(1 for u in usage if u.get("batch"))
    assert any("sent synchronously" in n for n in summary.notes)
    assert RunStore(cfg.database).cost() == pytest.approx(_bill(usage, {j.name: j for j in cfg.judges}), rel=1e-12)


@pytest.mark.subprocess
def test_the_budget_holds_each_batch_at_its_worst_case(tmp_path, monkeypatch):
    monkeypatch.setenv("SIM_KEY", KEY)
    port = free_port()
    config = _batch_config(tmp_path, port, "anthropic")
    cfg = load_config(config)
    worst = dry_run(cfg).worst_case_usd
    text = config.read_text().replace("batch = true", f"batch = true\nbudget_usd = {worst / 3:.8f}")
    config.write_text(text)
    cfg, summary, ledger = _collect(config, port, "batch_delay_s=0.05")
    usage, batches = _ledger(ledger)
    bill = _bill(usage, {j.name: j for j in cfg.judges})
    assert bill <= cfg.budget_usd and RunStore(cfg.database).cost() <= cfg.budget_usd
    # the worst case is several times the bill, so the released reservations bought later batches
    assert len(batches) > 2 and summary.completed > len(batches[0]["custom_ids"])


def test_the_dry_run_shows_the_batches_at_the_batch_price(tmp_path):
    config = _batch_config(tmp_path, 1, "openai", extra="batch_size = 30")
    cfg = load_config(config)
    plan = dry_run(cfg)
    assert [b["requests"] for b in plan.batches] == [30, 18, 30, 18]
    assert sum(b["worst_case_usd"] for b in plan.batches) == pytest.approx(plan.worst_case_usd)
    sync = dry_run(replace(cfg, batch=False))
    assert plan.worst_case_usd == pytest.approx(sync.worst_case_usd / 2) and sync.batches is None
    assert "batches" in plan.to_dict() and "batches" not in sync.to_dict()
    assert list(sync.to_dict()) == ["config", "database", "planned", "already_done", "to_send", "generations_to_send",
                                    "spent_usd", "worst_case_usd", "budget_usd", "fits_budget", "notes"]
    assert not cfg.database.exists()


def _stored(db) -> tuple[int, int, int]:
    """(calls stored, batches with a provider id, batches ingested) as another process sees them."""
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as con:
            calls = con.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
            ids, done = con.execute("SELECT COUNT(batch_id), SUM(state = 'ingested') FROM batches").fetchone()
            return calls, ids, done or 0
    except sqlite3.Error:
        return 0, 0, 0


def _run_until(config, db, stop, timeout=60.0):
    """Start `evalgauge run CONFIG` and kill it with SIGKILL once ``stop(stored)`` holds; whether it was killed."""
    proc = subprocess.Popen([sys.executable, "-m", "evalgauge.cli", "run", str(config), "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ})
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if stop(_stored(db)):
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            return True
        time.sleep(0.01)
    _, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    return False


@pytest.mark.subprocess
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_two_thousand_cells_killed_twice_are_collected_once_each(tmp_path, monkeypatch, provider):
    monkeypatch.setenv("SIM_KEY", KEY)
    port = free_port()
    config = _batch_config(tmp_path, port, provider, items=50, systems=5, extra="batch_size = 600")
    cfg = load_config(config)
    assert count_tasks(cfg) == 2000
    budget = 0.6 * dry_run(cfg).worst_case_usd  # binds: the first round cannot hold every line's worst case
    config.write_text(config.read_text().replace("batch = true", f"batch = true\nbudget_usd = {budget:.8f}"))
    ledger = tmp_path / "ledger.jsonl"
    server = Server(config, port, "batch_delay_s=1.0", "batch_error=0.02", "batch_expire=0.01", "batch_line_ms=1",
                    extra=("--ledger", str(ledger)))
    db = cfg.database
    try:
        # 1: killed after its batches were submitted, before any ended
        assert _run_until(config, db, lambda s: s[1] >= 2)
        assert _stored(db)[0] == 0
        # 2: killed while reading results (part of the calls recorded)
        assert _run_until(config, db, lambda s: s[0] >= 100)
        part = _stored(db)[0]
        assert 100 <= part < 2000
        # 3: resumed to the end
        _run_until(config, db, lambda s: False, timeout=120)
    finally:
        server.stop()
    store = RunStore(db)
    calls = store.calls()
    assert len(calls) == 2000 == calls["key"].nunique()
    usage, batches = _ledger(ledger)
    assert len(usage) == 2000 and all(u.get("batch") for u in usage)  # every answered line billed once, recorded
    # no batch submitted twice: every server batch is one of the run's, and no line was asked again unless it failed
    ours = {b["batch_id"] for b in store.batches()}
    assert {b["batch"] for b in batches} == ours and len(batches) == len(store.batches()) > 4  # budget: rounds
    sent = Counter(c for b in batches for c in b["custom_ids"])
    assert sum(sent.values()) == 2000 + len(store.failures())
    bill = _bill(usage, {j.name: j for j in cfg.judges})
    assert store.cost() == pytest.approx(bill, rel=1e-12) and bill <= cfg.budget_usd


@pytest.mark.subprocess
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_batch_submitted_but_not_confirmed_is_found_not_sent_again(tmp_path, monkeypatch, provider):
    """The crash between the provider taking a batch and its id being committed: the resumed run finds it."""
    import asyncio

    from evalgauge.collect.batch import batch_client, request_body

    monkeypatch.setenv("SIM_KEY", KEY)
    port = free_port()
    config = _batch_config(tmp_path, port, provider, judges=1)
    ledger = tmp_path / "ledger.jsonl"
    server = Server(config, port, "batch_delay_s=0.1", extra=("--ledger", str(ledger)))
    try:
        cfg = load_config(config)
        tasks = list(build_tasks(cfg))[:20]
        store = RunStore(cfg.database, writer=True)
        store.open_batch("blost", "j0", provider, [(custom_id(t.key), t.key, 0.001) for t in tasks])
        store.close()

        async def submit():
            client = batch_client(cfg.judges[0], 10.0)
            try:
                return await client.submit("blost", [(custom_id(t.key), request_body(client, cfg, t)) for t in tasks])
            finally:
                await client.close()
        batch_id, _ = asyncio.run(submit())
        summary = run(cfg)
    finally:
        server.stop()
    store = RunStore(cfg.database)
    assert len(store.calls()) == count_tasks(cfg) == summary.completed
    _, batches = _ledger(ledger)
    assert [b["batch"] for b in batches].count(batch_id) == 1
    assert Counter(c for b in batches for c in b["custom_ids"]).most_common(1)[0][1] == 1  # no line sent twice
    assert {b["local_id"]: b["batch_id"] for b in store.batches()}["blost"] == batch_id


def _offline_runner(directory, port) -> int:
    """What `vllm run-batch -i IN -o OUT` does, against serve-sim: each line's body answered, written in OpenAI's
    output format, one line per request."""
    import urllib.request

    ran = 0
    for given in sorted(directory.glob("*.jsonl")):
        if given.name.endswith(".out.jsonl"):
            continue
        out = []
        for k, text in enumerate(given.read_text().splitlines()):
            line = json.loads(text)
            request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions",
                                             data=json.dumps(line["body"]).encode(), method="POST",
                                             headers={"Content-Type": "application/json",
                                                      "Authorization": f"Bearer {KEY}"})
            with urllib.request.urlopen(request) as resp:
                body = json.loads(resp.read())
            out.append({"id": f"vllm-{k}", "custom_id": line["custom_id"],
                        "response": {"status_code": 200, "request_id": f"r{k}", "body": body}, "error": None})
        given.with_name(given.name.removesuffix(".jsonl") + ".out.jsonl").write_text(
            "".join(json.dumps(o) + "\n" for o in out))
        ran += 1
    return ran


def test_batch_files_for_an_offline_runner_are_written_then_read(tmp_path, monkeypatch):
    monkeypatch.setenv("SIM_KEY", KEY)
    port = free_port()
    config = _batch_config(tmp_path, port, "openai", extra='batch_dir = "batches"')
    server = Server(config, port)
    try:
        cfg = load_config(config)
        assert cfg.batch and cfg.batch_dir == tmp_path / "batches"
        first = run(cfg)
        assert first.completed == 0 and first.batches == 2 and "batch files" in first.paused
        assert "vllm run-batch" in first.paused["batch files"]
        again = run(cfg)  # nothing to read yet: the same batches wait, none is written twice
        assert again.batches == 0 and "batch files" in again.paused
        assert len(list((tmp_path / "batches").glob("*.jsonl"))) == 2
        assert _offline_runner(tmp_path / "batches", port) == 2
        done = run(cfg)
    finally:
        server.stop()
    store = RunStore(cfg.database)
    assert done.completed == count_tasks(cfg) == len(store.calls()) and not done.paused
    assert {b["state"] for b in store.batches()} == {"ingested"} and store.calls()["score"].notna().all()


@pytest.mark.subprocess
def test_an_endpoint_down_at_submission_pauses_and_the_batch_is_sent_on_resume(tmp_path, monkeypatch):
    monkeypatch.setenv("SIM_KEY", KEY)
    port = free_port()
    config = _batch_config(tmp_path, port, "openai", judges=1)
    config.write_text(config.read_text().replace("max_retries = 8", "max_retries = 1"))
    cfg = load_config(config)
    down = run(cfg)  # no server: the upload fails; the batch stays committed, its lines reserved
    assert down.completed == 0 and "batch API" in down.paused and "run again" in down.paused["batch API"]
    assert KEY not in json.dumps(down.to_dict())
    store = RunStore(cfg.database)
    assert [b["state"] for b in store.batches()] == ["new"] and store.cost() > 0
    store.close()
    ledger = tmp_path / "ledger.jsonl"
    server = Server(config, port, "batch_delay_s=0.05", extra=("--ledger", str(ledger)))
    try:
        up = run(cfg)
    finally:
        server.stop()
    usage, batches = _ledger(ledger)
    assert up.completed == count_tasks(cfg) and len(batches) == 1 and not up.paused
    store = RunStore(cfg.database)
    assert store.cost() == pytest.approx(_bill(usage, {j.name: j for j in cfg.judges}), rel=1e-12)


@pytest.mark.subprocess
def test_a_refused_key_stops_the_batch_run_without_showing_it(tmp_path, monkeypatch):
    monkeypatch.setenv("SIM_KEY", "sk-wrong-0123456789abcdefXYZ")
    monkeypatch.setenv("RIGHT_KEY", KEY)
    port = free_port()
    config = _batch_config(tmp_path, port, "anthropic", judges=1)
    server = Server(config, port, extra=("--require-key-env", "RIGHT_KEY"))
    try:
        summary = run(load_config(config))
    finally:
        server.stop()
    assert "batch API" in summary.fatal and "401" in summary.fatal["batch API"]
    assert "sk-wrong" not in json.dumps(summary.to_dict()) and summary.completed == 0


def test_batch_files_are_for_openai_compatible_judges(tmp_path):
    from evalgauge.errors import DataError

    config = _batch_config(tmp_path, 1, "anthropic", extra='batch_dir = "batches"')
    with pytest.raises(DataError, match=r"judge 'j0'.*Message Batches API"):
        load_config(config)
    from click.testing import CliRunner

    from evalgauge.cli import main

    config.write_text(config.read_text().replace('batch_dir = "batches"', ""))
    out = CliRunner().invoke(main, ["run", str(config), "--batch-dir", str(tmp_path / "b"), "--no-progress"])
    assert out.exit_code == 2 and "--batch-dir: judge 'j0'" in out.output and "Message Batches API" in out.output
    assert not (tmp_path / "b").exists()


@pytest.mark.subprocess
def test_an_adaptive_run_sends_each_stage_as_its_batches(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from evalgauge.cli import main

    monkeypatch.setenv("SIM_KEY", KEY)
    port = free_port()
    config = write_config(tmp_path, port, items=60, systems=6, reps=3, judges=3,
                          extra_run="batch_poll_s = 0.05")
    ledger = tmp_path / "ledger.jsonl"
    server = Server(config, port, "batch_delay_s=0.05", extra=("--ledger", str(ledger)))
    try:
        out = CliRunner().invoke(main, ["run", str(config), "--batch", "--target-mdd", "0.58", "--pilot-items", "12",
                                        "--yes", "--no-progress", "--json", "-"])
    finally:
        server.stop()
    assert out.exit_code == 0, out.output
    res = json.loads(out.stdout)
    assert res["outcome"] == "met" and len(res["stages"]) >= 2
    usage, batches = _ledger(ledger)
    assert usage and all(u.get("batch") for u in usage)  # nothing sent synchronously
    calls = RunStore(load_config(config).database).calls()
    assert len(calls) == calls["key"].nunique() == len(usage)
    # each stage went as one batch per judge it used
    judges_per_stage = [len(s["design"]["judges"]) for s in res["stages"] if s["calls_sent"]]
    assert len(batches) == sum(judges_per_stage)


@pytest.mark.subprocess
def test_a_batch_with_cells_of_another_stage_waits_for_the_run_that_has_them(tmp_path, monkeypatch):
    """An adaptive run's stage sees only its design: a batch an earlier stage left open keeps the lines of cells
    outside it reserved and pending, read later by the run whose design holds them, never sent again."""
    import asyncio

    from evalgauge.collect.batch import batch_client, request_body

    monkeypatch.setenv("SIM_KEY", KEY)
    port = free_port()
    config = _batch_config(tmp_path, port, "openai", judges=1)
    ledger = tmp_path / "ledger.jsonl"
    server = Server(config, port, "batch_delay_s=0.05", extra=("--ledger", str(ledger)))
    try:
        cfg = load_config(config)
        tasks = list(build_tasks(cfg))
        store = RunStore(cfg.database, writer=True)
        store.open_batch("bpool", "j0", "openai", [(custom_id(t.key), t.key, 0.001) for t in tasks])

        async def submit():
            client = batch_client(cfg.judges[0], 10.0)
            try:
                return await client.submit("bpool", [(custom_id(t.key), request_body(client, cfg, t)) for t in tasks])
            finally:
                await client.close()
        store.batch_submitted("bpool", asyncio.run(submit())[0])
        store.close()
        stage = replace(cfg, items=cfg.items[:2], fingerprint_override=cfg.fingerprint())
        first = run(stage)
        assert first.completed == count_tasks(stage) < len(tasks) and first.batches == 0
        store = RunStore(cfg.database)
        assert {b["state"] for b in store.batches()} == {"ended"} and len(store.pending_batch_keys()) == \
            len(tasks) - count_tasks(stage)
        store.close()
        rest = run(cfg)
    finally:
        server.stop()
    store = RunStore(cfg.database)
    assert rest.completed == len(tasks) - count_tasks(stage) and rest.batches == 0
    assert len(store.calls()) == len(tasks) and {b["state"] for b in store.batches()} == {"ingested"}
    usage, batches = _ledger(ledger)
    assert len(batches) == 1 and store.cost() == pytest.approx(_bill(usage, {j.name: j for j in cfg.judges}))


@pytest.mark.subprocess
def test_a_batch_the_provider_refuses_whole_stops_the_run_with_its_reason(tmp_path, monkeypatch):
    """OpenAI's "failed": the file did not validate. Sending it again fails the same way, so the run stops, says
    why, and holds nothing: the lines were not run or billed."""
    monkeypatch.setenv("SIM_KEY", KEY)
    port = free_port()
    config = _batch_config(tmp_path, port, "openai", judges=1)
    cfg, summary, ledger = _collect(config, port, "batch_delay_s=0.05", "batch_invalid=1")
    assert "does not support the batch API" in summary.fatal["batch API"] and summary.completed == 0
    usage, batches = _ledger(ledger)
    assert len(batches) == 1 and not usage
    store = RunStore(cfg.database)
    assert store.cost() == 0 and not store.pending_batch_keys()


@pytest.mark.subprocess
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_results_file_cut_off_while_read_is_read_again_without_a_line_twice(tmp_path, monkeypatch, provider):
    monkeypatch.setenv("SIM_KEY", KEY)
    port = free_port()
    config = _batch_config(tmp_path, port, provider, judges=1)
    cfg, summary, ledger = _collect(config, port, "batch_delay_s=0.05", "batch_cut_after=10")
    store = RunStore(cfg.database)
    calls = store.calls()
    assert summary.completed == count_tasks(cfg) == len(calls) == calls["key"].nunique() and not summary.paused
    usage, batches = _ledger(ledger)
    assert len(batches) == 1 and store.cost() == pytest.approx(_bill(usage, {j.name: j for j in cfg.judges}))
    store.close()
    # without retries the cut pauses the run, resumably: the ten lines read before it are kept
    other = tmp_path / "no-retries"
    other.mkdir()
    config = _batch_config(other, port, provider, judges=1)
    config.write_text(config.read_text().replace("max_retries = 8", "max_retries = 0"))
    server = Server(config, port, "batch_delay_s=0.05", "batch_cut_after=10")
    try:
        cut = run(load_config(config))
        rest = run(load_config(config))
    finally:
        server.stop()
    assert "batch API" in cut.paused and cut.completed == 10 and rest.completed == count_tasks(cfg) - 10
