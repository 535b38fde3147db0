"""One judge call's record (collect/calls.py) and the collector's byte counts (collect/limits.py): what is
stored for a call, computed once per judge where it can be, and the same as when computed per call."""

import json
from dataclasses import replace

import pytest

from evalgauge.collect.calls import call_record, read_verdict, verdict_of
from evalgauge.collect.config import Item, load_config
from evalgauge.collect.limits import utf8_bytes, worst_case_input_tokens
from evalgauge.collect.providers import Completion
from evalgauge.collect.tasks import build_tasks
from evalgauge.protocols import Verdict
from serve_sim import write_config


@pytest.fixture()
def cfg(tmp_path):
    return load_config(write_config(tmp_path, 1, items=3, systems=2, reps=1, judges=2))


def _record(cfg, task, verdict, **kw):
    judge = next(j for j in cfg.judges if j.name == task.judge)
    completion = Completion("Score: 4", judge.model, "chatcmpl-1", 30, 3, "stop")
    return call_record(cfg, judge, task, completion, verdict, None, started=1.0, latency=0.5, tokens=(30, 3, 0, 0),
                       cost=0.001, flags="", **kw)


def test_the_stored_request_is_the_judges_settings_and_equal_for_every_call(cfg):
    tasks = list(build_tasks(cfg))
    records = [_record(cfg, t, Verdict(4.0, "")) for t in tasks]
    for t, r in zip(tasks, records, strict=True):
        judge = next(j for j in cfg.judges if j.name == t.judge)
        assert json.loads(r.request) == {"model": judge.model, "temperature": t.temperature,
                                         "max_tokens": judge.max_tokens, "provider": judge.provider,
                                         "base_url": judge.base_url, "system_prompt": bool(cfg.system_prompt),
                                         "output": cfg.output}
        assert r.key == t.key and r.score == 4.0 and r.finish_reason == "stop"
    batch = _record(cfg, tasks[0], Verdict(4.0, ""), batch=True)
    assert json.loads(batch.request)["batch"] is True and "batch" not in json.loads(records[0].request)
    assert all("SIM_KEY" not in r.request and "Question" not in r.request for r in records)


def test_a_second_slot_win_is_flipped_and_a_keyed_choice_scored_against_its_key(cfg):
    task = next(iter(build_tasks(cfg)))
    pairwise = replace(cfg, mode="pairwise")
    assert _record(pairwise, replace(task, position="BA"), Verdict(1.0, "")).score == 0.0
    assert _record(pairwise, replace(task, position="AB"), Verdict(1.0, "")).score == 1.0
    keyed = replace(cfg, mode="choice", choices="ABCD",
                    items=tuple(Item(i.id, i.text, reference="C") for i in cfg.items))
    assert keyed.choice_keyed and not replace(keyed, items=(Item("q", "t", reference="E"),)).choice_keyed
    assert _record(keyed, replace(task, item=Item(task.item.id, task.item.text, reference="C")),
                   Verdict(2.0, "")).score == 1.0  # choice 2 is "C": correct
    assert _record(keyed, replace(task, item=Item(task.item.id, task.item.text, reference="C")),
                   Verdict(0.0, "")).score == 0.0


def test_a_verdict_read_from_the_text_and_a_cut_reply_said(cfg):
    assert read_verdict(cfg, cfg.variants[0].id, "Score: 3").value == 3.0
    task = next(iter(build_tasks(cfg)))
    judge = cfg.judges[0]
    verdict, error = verdict_of(cfg, judge, task, Completion("I think the answer", "m", "r", 10, 16, "length"))
    assert verdict.value is None and error.startswith("cut at max_tokens (16 tokens) before a verdict")


@pytest.mark.parametrize("text", ["plain ascii", "", "naïve café", "中文字符", "emoji 🎉", "lone \ud800 surrogate"])
def test_utf8_bytes_is_the_encoded_length(text):
    assert utf8_bytes(text) == len(text.encode("utf-8", "surrogatepass"))


def test_the_worst_case_input_counts_every_byte_of_every_message():
    base = worst_case_input_tokens("Rate it.")
    assert worst_case_input_tokens("Rate it. 中文") == base + len(" 中文".encode())
    assert worst_case_input_tokens("Rate it.", "Be fair.") == base + len(b"Be fair.") + 32
    assert worst_case_input_tokens("Rate it.", history=(("x", "again"),)) == base + 6 + 2 * 32


# -- the collector's per-call costs: what they leave as it was ---------------------------------------------------


def test_the_cycle_collector_runs_less_often_during_a_run_and_as_before_after(monkeypatch):
    import gc

    from evalgauge.collect.runner import YOUNG_COLLECTION_EVERY, _fewer_collections

    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        with _fewer_collections():
            assert gc.get_threshold() == (YOUNG_COLLECTION_EVERY, 10, 10)
        assert gc.get_threshold() == (700, 10, 10)
        gc.set_threshold(50_000, 5, 5)  # a caller's own larger setting is kept
        with _fewer_collections():
            assert gc.get_threshold() == (50_000, 5, 5)
        gc.set_threshold(0)  # switched off stays off
        with _fewer_collections():
            assert gc.get_threshold()[0] == 0
        gc.set_threshold(700, 10, 10)
        with pytest.raises(RuntimeError), _fewer_collections():
            raise RuntimeError
        assert gc.get_threshold() == (700, 10, 10)
    finally:
        gc.set_threshold(*before)


def test_a_run_collects_cycles_less_often_while_judging_and_restores_the_setting(tmp_path, monkeypatch):
    import asyncio
    import gc

    from evalgauge.collect import runner

    cfg = load_config(write_config(tmp_path, 1, items=2, systems=2, reps=1, judges=1))
    seen = []

    async def judge_all(*args, **kw):
        seen.append(gc.get_threshold()[0])

    monkeypatch.setattr(runner, "_judge_all", judge_all)
    before = gc.get_threshold()
    asyncio.run(runner.run_async(cfg, providers={j.name: object() for j in cfg.judges}))
    assert seen and seen[0] >= runner.YOUNG_COLLECTION_EVERY
    assert gc.get_threshold() == before


def test_a_call_without_a_reservation_is_stored_by_one_statement_and_at_once(tmp_path):
    import sqlite3

    from evalgauge.store import WAL_CHECKPOINT_PAGES, RunStore

    cfg = load_config(write_config(tmp_path, 1, items=2, systems=1, reps=1, judges=1))
    tasks = list(build_tasks(cfg))
    store = RunStore(tmp_path / "run.sqlite", writer=True)
    try:
        assert store.db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == WAL_CHECKPOINT_PAGES
        first = _record(cfg, tasks[0], Verdict(4.0, ""))
        assert store.record(first) is True and not store.db.in_transaction
        # committed: another connection reads it while the writer is open
        other = sqlite3.connect(tmp_path / "run.sqlite")
        assert other.execute("SELECT key, score FROM calls").fetchall() == [(first.key, 4.0)]
        other.close()
        assert store.record(first, [None]) is False  # the same cell again: kept once
        # with reservations, the row and their release in one transaction
        held = [store.reserve(tasks[1].key, 0.01), None, store.reserve(tasks[1].key, 0.02)]
        assert store.record(_record(cfg, tasks[1], Verdict(3.0, "")), held) is True
        assert store.db.execute("SELECT COUNT(*) FROM inflight").fetchone()[0] == 0
        assert store.count() == 2
    finally:
        store.close()


def test_a_text_without_a_tag_is_its_own_verdict_text():
    from evalgauge.protocols import strip_reasoning

    assert strip_reasoning("Score: 7") == "Score: 7"
    assert strip_reasoning("a < b; Score: 7") == "a < b; Score: 7"
    assert strip_reasoning("<think>7</think>Score: 3") == "Score: 3"
    assert strip_reasoning("seven</think>Score: 3") == "Score: 3"


def test_a_passed_intactness_check_stands_for_max_age_and_a_failed_one_never(tmp_path, monkeypatch):
    import os

    from evalgauge.errors import DataError
    from evalgauge.store import RunStore

    clock = [100.0]
    monkeypatch.setattr("evalgauge.store.time.monotonic", lambda: clock[0])
    path = tmp_path / "run.sqlite"
    store = RunStore(path, writer=True)
    try:
        store.check_intact(0.001)  # the first check is made whatever the age
        os.unlink(path)
        clock[0] += 0.0005
        store.check_intact(0.001)  # half a millisecond after a passed check: it stands
        with pytest.raises(DataError, match="was deleted during the run"):
            store.check_intact()  # max_age 0: always looked at
        with pytest.raises(DataError, match="was deleted"):
            store.check_intact(0.001)  # a failed check is not reused
        clock[0] += 0.002
        with pytest.raises(DataError, match="was deleted"):
            store.check_intact(0.001)
    finally:
        store.close()


def test_the_runner_reuses_an_intactness_check_at_most_a_millisecond_old(tmp_path, monkeypatch):
    from evalgauge.collect import runner
    from evalgauge.store import RunStore

    ages = []
    monkeypatch.setattr(RunStore, "check_intact", lambda self, max_age=0.0: ages.append(max_age))
    store = RunStore(tmp_path / "run.sqlite", writer=True)
    try:
        assert runner._database_intact(store, runner.RunSummary(planned=1, already_done=0), None)
    finally:
        store.close()
    assert ages == [runner.INTACT_FOR_S] and 0 < runner.INTACT_FOR_S <= 0.001


def test_each_task_carries_its_prompts_hash(cfg):
    from evalgauge.collect.tasks import prompt_hash

    tasks = list(build_tasks(cfg))
    assert len({t.prompt for t in tasks}) < len(tasks)  # judges and replicates share a prompt
    assert all(t.prompt_hash == prompt_hash(t.prompt) for t in tasks)
    assert _record(cfg, tasks[0], Verdict(4.0, "")).prompt_hash == prompt_hash(tasks[0].prompt)
