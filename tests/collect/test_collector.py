"""The collector against a real HTTP server on loopback (serve-sim, started as its own process)."""

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from conftest import ROOT
from evalgauge.analysis.diagnostics import diagnose
from evalgauge.cli import main
from evalgauge.collect.config import load_config
from evalgauge.collect.parsers import parse_score
from evalgauge.collect.runner import run
from evalgauge.collect.tasks import count_tasks
from evalgauge.errors import DataError
from evalgauge.estimate import estimate_components
from evalgauge.io import read_judgments
from evalgauge.store import RunStore
from serve_sim import KEY, TRUTH, Server, collect, free_port, write_config


@pytest.fixture
def env_key(monkeypatch):
    monkeypatch.setenv("SIM_KEY", KEY)


@pytest.mark.subprocess
def test_components_recovered_from_collected_data(tmp_path, env_key):
    port = free_port()
    config = write_config(tmp_path, port, items=16, systems=5, reps=2)
    cfg, summary = collect(config, port)
    assert summary.completed == count_tasks(cfg) == 16 * 5 * 2 * 3 * 2 and summary.failed == 0
    frame = pd.read_sql_query("SELECT * FROM calls", sqlite3.connect(cfg.database))
    assert frame["score"].notna().all()
    result = estimate_components(read_judgments(cfg.database),
                                 terms="system,item,judge,variant,item:system,item:judge,system:judge")
    # each estimate within 4.5 of its standard errors of the server's true component
    for name, truth in TRUTH.items():
        ours = next(c for c in result.components if set(c.name.split(":")) == set(name.split(":")))
        assert abs(ours.variance - truth) < 4.5 * ours.se + 1e-9, (name, ours.variance, ours.se, truth)


@pytest.mark.subprocess
def test_faults_are_survived_and_diagnosed(tmp_path, env_key):
    port = free_port()
    config = write_config(tmp_path, port, items=6, systems=3, reps=3, timeout=0.5)
    cfg, summary = collect(config, port, "rate_limit=0.1", "server_error=0.05", "timeout=0.02", "timeout_s=2",
                                   "empty=0.05", "garbage=0.05", "drift_after=150")
    assert summary.failed == 0 and summary.retries > 0
    store = RunStore(cfg.database)
    calls = store.calls()
    store.close()
    assert len(calls) == count_tasks(cfg)
    diag = diagnose(calls)
    per = diag.per_judge.set_index("judge")
    assert per["empty"].sum() > 0 and per["parse_failures"].sum() > per["empty"].sum()
    assert diag.model_changes and any("snapshots" in w for w in diag.warnings)
    assert set(calls.loc[calls["completion"] == "", "parse_error"]) == {"empty completion"}


@pytest.mark.subprocess
def test_cached_replicates_are_flagged(tmp_path, env_key):
    port = free_port()
    config = write_config(tmp_path, port, items=4, systems=2, reps=3, judges=2)
    cfg, _ = collect(config, port, "cache=1")
    store = RunStore(cfg.database)
    diag = diagnose(store.calls())
    store.close()
    assert diag.cached_fraction == 1.0 and diag.repeated_response_ids > 0
    assert any("replicate caching" in w for w in diag.warnings)


@pytest.mark.subprocess
def test_kill_9_then_resume_records_every_cell_once(tmp_path, env_key):
    port = free_port()
    config = write_config(tmp_path, port, items=10, systems=4, reps=3, in_flight=8)
    server = Server(config, port, "latency_ms=8")
    try:
        cmd = [sys.executable, "-m", "evalgauge.cli", "run", str(config), "--no-progress"]
        runner = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ.copy())
        db = config.parent / "t.sqlite"
        deadline = time.time() + 30
        while time.time() < deadline:  # let it get part of the way
            time.sleep(0.2)
            try:
                if db.exists() and RunStore(db).count() > 100:
                    break
            except DataError:  # the run has created the file but not yet its tables: look again
                continue
        runner.send_signal(signal.SIGKILL)
        runner.wait()
        partial = RunStore(db).count()
        cfg = load_config(config)
        assert 0 < partial < count_tasks(cfg)
        summary = run(cfg)
    finally:
        server.stop()
    assert summary.already_done == partial
    con = sqlite3.connect(db)
    n, distinct = con.execute("SELECT COUNT(*), COUNT(DISTINCT key) FROM calls").fetchone()
    assert n == distinct == count_tasks(cfg)


@pytest.mark.subprocess
def test_api_key_never_leaks(tmp_path, env_key):
    port = free_port()
    config = write_config(tmp_path, port, items=4, systems=2, reps=2, judges=2)
    server = Server(config, port, "server_error=0.3", "garbage=0.2")
    try:
        out = subprocess.run([sys.executable, "-m", "evalgauge.cli", "run", str(config), "--json", "-"],
                             capture_output=True, text=True, env=os.environ.copy(), timeout=60)
        # a non-retryable error path: a judge pointed at a path the server does not serve
        bad = config.read_text().replace(f"127.0.0.1:{port}/v1", f"127.0.0.1:{port}/nope", 1)
        (tmp_path / "bad.toml").write_text(bad.replace('name = "t"', 'name = "bad"'))
        out_bad = subprocess.run([sys.executable, "-m", "evalgauge.cli", "run", str(tmp_path / "bad.toml")],
                                 capture_output=True, text=True, env=os.environ.copy(), timeout=60)
    finally:
        server_log = server.stop()
    assert out.returncode == 0, out.stderr
    texts = [out.stdout, out.stderr, out_bad.stdout, out_bad.stderr, server_log]
    for path in tmp_path.iterdir():
        if path.suffix in (".sqlite", ".sqlite-wal", ".sqlite-shm") or path.name.endswith(("-wal", "-shm")):
            texts.append(path.read_bytes().decode("latin-1"))
    bad_store = RunStore(tmp_path / "bad.sqlite")
    failures = bad_store.failures()
    bad_store.close()
    assert len(failures) > 0  # the failures were recorded, with their messages
    texts += list(failures["error"])
    assert not any(KEY in t for t in texts)


def test_anthropic_protocol(tmp_path, env_key):
    port = free_port()
    config = write_config(tmp_path, port, items=3, systems=2, reps=1, judges=1, provider="anthropic")
    cfg, summary = collect(config, port)
    assert summary.completed == count_tasks(cfg) and summary.failed == 0


def test_budget_cap_stops_and_resume_finishes(tmp_path, env_key):
    port = free_port()
    config = write_config(tmp_path, port, items=6, systems=3, reps=2, extra_run="budget_usd = 0.0005")
    server = Server(config, port)
    try:
        cfg = load_config(config)
        first = run(cfg)
        assert first.stopped_by_budget and first.completed < count_tasks(cfg)
        assert first.cost_usd <= 0.0005 + 1e-9
        rich_cfg = load_config(config)
        object.__setattr__(rich_cfg, "budget_usd", 1.0)
        second = run(rich_cfg)
    finally:
        server.stop()
    assert second.already_done == first.completed
    assert RunStore(cfg.database).count() == count_tasks(cfg)


def test_config_errors(tmp_path, monkeypatch):
    config = write_config(tmp_path, 1)
    text = config.read_text()
    (tmp_path / "k.toml").write_text(text.replace('api_key_env = "SIM_KEY"', 'api_key = "sk-x"', 1))
    with pytest.raises(DataError, match="keys never go in the config"):
        load_config(tmp_path / "k.toml")
    (tmp_path / "m.toml").write_text(text.replace('mode = "numeric"', 'mode = "stars"'))
    with pytest.raises(DataError, match="mode must be one of"):
        load_config(tmp_path / "m.toml")
    (tmp_path / "p.toml").write_text(text.replace("{{response}}", "{{answer}}").replace("{response}", "{answer}"))
    monkeypatch.delenv("SIM_KEY", raising=False)
    with pytest.raises(DataError, match="unknown placeholder"):
        load_config(tmp_path / "p.toml")
    cfg = load_config(config)
    with pytest.raises(DataError, match="SIM_KEY is not set"):
        run(cfg)
    out = CliRunner().invoke(main, ["run", str(tmp_path / "nope.toml")])
    assert out.exit_code == 2 and "no such run configuration" in out.output


@pytest.mark.parametrize("text,mode,expected", [
    ("Score: 4", "likert", 4.0), ("I'd say 3/5 overall", "likert", 3.0), ("Rating = 7", "likert", None),
    ("", "likert", None), ("Yes, it is unsafe.", "binary", 1.0), ("no", "binary", 0.0),
    ("[[B]]", "pairwise", 0.0), ("Output (a) is better", "pairwise", 1.0), ("tie", "pairwise", 0.5),
    ("The answer is C.", "choice", 2.0), ("value 0.25 then 0.5", "numeric", 0.5), ("n/a", "numeric", None),
])
def test_parsers(text, mode, expected):
    score, error = parse_score(text, mode)
    assert score == expected and (error is None) == (expected is not None)


@pytest.mark.parametrize("mode", ["likert", "binary", "pairwise", "choice"])
def test_scoring_modes_end_to_end(tmp_path, env_key, mode):
    port = free_port()
    config = write_config(tmp_path, port, mode=mode, items=4, systems=3, reps=1, judges=2)
    if mode == "pairwise":
        text = config.read_text().replace('mode = "pairwise"', 'mode = "pairwise"\nbaseline = "s0"')
        text = text.replace("{item} / {response}", "{item} / A: {response_a} B: {response_b}")
        text = text.replace("Q: {item} A: {response}", "Q: {item} A: {response_a} B: {response_b}")
        config.write_text(text)
    cfg, summary = collect(config, port)
    assert summary.failed == 0 and summary.completed == count_tasks(cfg)
    frame = pd.read_sql_query("SELECT * FROM calls", sqlite3.connect(cfg.database))
    assert frame["score"].notna().all()
    if mode == "pairwise":
        assert set(frame["position"]) == {"AB", "BA"} and set(frame["system"]) == {"s1", "s2"}
        assert set(frame["score"]) <= {0.0, 1.0}
    if mode == "likert":
        assert frame["score"].between(1, 5).all()


def test_example_configs_load():
    root = ROOT / "examples"
    for path in sorted(root.glob("*/run.toml")):
        cfg = load_config(path)
        assert cfg.judges and cfg.variants and cfg.items, path
        assert count_tasks(cfg) > 0


def test_export_and_shared_limiter(tmp_path, env_key):
    port = free_port()
    config = write_config(tmp_path, port, items=3, systems=2, reps=1, judges=2)
    cfg, _ = collect(config, port)
    out = CliRunner().invoke(main, ["export", str(cfg.database), "--format", "parquet"])
    assert out.exit_code == 0
    exported = pd.read_parquet(cfg.database.with_suffix(".parquet"))
    assert len(exported) == count_tasks(cfg) and "completion" in exported
    judg = CliRunner().invoke(main, ["export", str(cfg.database), "--judgments", "-o", str(tmp_path / "j.csv")])
    assert judg.exit_code == 0 and set(pd.read_csv(tmp_path / "j.csv").columns) >= {"item", "judge", "score"}
    from evalgauge.collect.runner import _limiters
    limiters = _limiters(cfg.judges)
    assert limiters["j0"] is limiters["j1"]  # same endpoint and key: one account's limits


def test_systems_generate_then_judges_score(tmp_path, env_key):
    port = free_port()
    config = write_config(tmp_path, port, items=4, systems=2, reps=1, judges=2)
    text = config.read_text().replace('responses = "responses.csv"\n', "")
    text += "".join(textwrap.dedent(f"""
        [[systems]]
        name = "sut{k}"
        model = "gen-{k}"
        base_url = "http://127.0.0.1:{port}/v1"
        api_key_env = "SIM_KEY"
        price_output_per_mtok = 1.0
        max_tokens = 64
        """) for k in range(3))
    text += '\n[generation]\ntemplate = "Answer briefly: {item}"\n'
    config.write_text(text)
    server = Server(config, port)
    try:
        cfg = load_config(config)
        assert cfg.systems == ("sut0", "sut1", "sut2") and count_tasks(cfg) == 4 * 3 * 2 * 2
        first = run(cfg)
        again = run(load_config(config))
    finally:
        server.stop()
    assert first.generated == 12 and first.completed == count_tasks(cfg) and first.failed == 0
    assert again.generated == 0 and again.completed == 0 and again.already_done == count_tasks(cfg)
    store = RunStore(cfg.database)
    responses = store.responses()
    calls = store.calls()
    store.close()
    assert len(responses) == 12 and responses[("q00", "sut1")] == "Simulated answer of sut1 to item q00."
    assert calls["score"].notna().all() and set(calls["system"]) == {"sut0", "sut1", "sut2"}


def test_equal_short_verdicts_with_fresh_ids_are_not_caching():
    """A Likert judge often gives a cell's replicates the same score; distinct ids say the replies were
    generated, so no caching alarm, however fast the repeats came back (llama.cpp's prompt cache answers a
    repeated prompt 5-19x faster with a fresh reply). Repeated ids, or a long completion repeated without
    ids, are a cache's."""
    rng = np.random.default_rng(1)
    rows = []
    for i in range(40):
        for rep in (1, 2, 3):
            rows.append({"item": f"q{i}", "system": "s", "variant": "v", "temperature": 0.7, "judge": "j",
                         "position": None, "replicate": rep, "completion": f"Score: {3 + (rep == 3 and i % 4 == 0)}",
                         "response_id": f"r{i}-{rep}", "latency_s": float(rng.uniform(0.5, 1.5)),
                         "parse_error": None, "score": 3.0, "model": "m", "finished_at": float(i * 3 + rep)})
    calls = pd.DataFrame(rows)
    honest = diagnose(calls)
    assert honest.cached_fraction == 0 and not any("caching" in w for w in honest.warnings)
    by_id = diagnose(calls.assign(response_id=calls["item"]))
    assert by_id.cached_fraction == 1.0 and any("replicate caching" in w for w in by_id.warnings)
    long = "The answer is thorough and correct; it cites the source. Score: 4 " * 2
    no_ids = diagnose(calls.assign(response_id=None, completion=long))
    assert no_ids.cached_fraction == 1.0
    fast = calls.assign(completion="Score: 3", latency_s=np.where(calls["replicate"] == 1, 1.0, 0.01))
    assert diagnose(fast).cached_fraction == 0.0  # a prompt cache's speed, fresh ids: generated replies
    single = diagnose(calls)
    assert not single.warnings and any("one judge" in n for n in single.design_notes)
