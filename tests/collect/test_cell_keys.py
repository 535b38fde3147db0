"""Cell keys (issue 40.5): levels holding ``|`` or ``\\`` never make two cells share a key, and run databases
written with plain joined keys are migrated when a run opens them."""

import sqlite3

import pandas as pd
import pytest

from evalgauge.collect.runner import run
from evalgauge.collect.tasks import build_tasks, count_tasks
from evalgauge.store import KEYS_ESCAPED, RunStore, call_key, cell_key
from hostile import AWKWARD_RESPONSES, HostileServer, awkward_levels_config
from serve_sim import KEY


@pytest.fixture
def env_key(monkeypatch):
    monkeypatch.setenv("SIM_KEY", KEY)


def test_cell_keys_are_one_to_one_on_the_levels():
    levels = ["a", "b", "a|b", "b|", "|a", "\\", "a\\", "\\|", "|", "", "a\\|b", "a|\\b"]
    keys = {}
    for x in levels:
        for y in levels:
            k = cell_key(x, y)
            assert keys.setdefault(k, (x, y)) == (x, y), (k, keys[k], (x, y))
    assert cell_key("q01", "gpt-4", "v1") == "q01|gpt-4|v1"  # plain levels keep their earlier key


def _stored(db) -> pd.DataFrame:
    con = sqlite3.connect(db)
    try:
        return pd.read_sql_query("SELECT key, item, system, variant, judge, replicate FROM calls", con)
    finally:
        con.close()


def test_every_cell_is_stored_exactly_once_whatever_its_levels_hold(tmp_path, env_key):
    server = HostileServer("good", KEY)
    try:
        cfg = awkward_levels_config(tmp_path, server)
        first = run(cfg)
        again = run(cfg)  # a resume has nothing left to do
    finally:
        server.stop()
    n = count_tasks(cfg)
    assert n == len(AWKWARD_RESPONSES) * 2 * 2 and first.completed == n and first.failed == 0
    assert again.completed == 0 and again.ok
    calls = _stored(cfg.database)
    assert len(calls) == n and calls["key"].is_unique
    assert calls.groupby(["item", "system"]).size().to_dict() == dict.fromkeys(AWKWARD_RESPONSES, 4)
    assert server.requests == n  # each cell paid once


def test_a_database_with_joined_keys_is_migrated_and_the_lost_cell_filled(tmp_path, env_key):
    """An earlier run stored item "a" x system "b|c" under the key "a|b|c|..."; the answer for item "a|b" x
    system "c" shared that key and was dropped. Opened by a run, the keys are rebuilt from the stored levels
    and the missing cell is asked for; every other stored call is kept as it was."""
    server = HostileServer("good", KEY)
    try:
        cfg = awkward_levels_config(tmp_path, server)
        run(cfg)
        con = sqlite3.connect(cfg.database)
        con.execute("DELETE FROM calls WHERE item = 'a|b'")  # the dropped answers
        rows = con.execute("SELECT rowid, item, system, variant, temperature, judge, replicate, position "
                           "FROM calls").fetchall()
        for rowid, i, s, v, t, j, r, p in rows:  # the keys as plain "|".join wrote them
            con.execute("UPDATE calls SET key = ? WHERE rowid = ?",
                        ("|".join([i, s or "", v, f"{t:g}", j, str(r), p or ""]), rowid))
        con.execute("DELETE FROM run WHERE key = ?", (KEYS_ESCAPED,))
        con.commit()
        con.close()
        kept = _stored(cfg.database).drop(columns="key")
        before = server.requests
        resumed = run(cfg)
    finally:
        server.stop()
    assert resumed.completed == 4 and server.requests - before == 4  # only the dropped cell's 4 calls
    calls = _stored(cfg.database)
    assert len(calls) == count_tasks(cfg) and calls["key"].is_unique
    expected = {t.key for t in build_tasks(cfg)}
    assert set(calls["key"]) == expected
    merged = calls.drop(columns="key").merge(kept, how="inner")
    assert len(merged) == len(kept)  # nothing stored earlier was lost or changed


def test_the_migration_runs_once_and_a_reader_never_writes(tmp_path):
    db = tmp_path / "r.sqlite"
    store = RunStore(db, writer=True)
    store.close()
    con = sqlite3.connect(db)
    assert con.execute("SELECT value FROM run WHERE key = ?", (KEYS_ESCAPED,)).fetchone() == ("1",)
    con.execute("DELETE FROM run WHERE key = ?", (KEYS_ESCAPED,))
    con.commit()
    con.close()
    before = db.read_bytes()
    RunStore(db).close()  # a reader
    assert db.read_bytes() == before
    assert call_key("a", None, "v", 0.0, "j", 1, None) == "a||v|0|j|1|"
