"""The collector at a user's mistakes: wrong keys, dead endpoints, strict configs, a budget that always holds.

The servers are serve-sim started as their own process (with a required key, unknown models answered
404, injected 400/403), or a port where nothing listens.
"""

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tomli_w
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT
from evalgauge.cli import main
from evalgauge.collect.config import load_config
from evalgauge.collect.limits import worst_case_input_tokens
from evalgauge.collect.providers import Completion
from evalgauge.collect.runner import run, run_async
from evalgauge.collect.tasks import count_tasks
from evalgauge.errors import DataError
from evalgauge.store import RunStore
from serve_sim import KEY, Server, free_port, write_config


def cli_run(config: Path, *args: str, env_key: str | None = KEY, timeout: float = 120):
    env = {k: v for k, v in os.environ.items() if k != "SIM_KEY"}
    if env_key is not None:
        env["SIM_KEY"] = env_key
    return subprocess.run([sys.executable, "-m", "evalgauge.cli", "run", str(config), "--no-progress", *args],
                          capture_output=True, text=True, env=env, timeout=timeout)


def failures(db: Path) -> list[str]:
    con = sqlite3.connect(db)
    try:
        return [e for (e,) in con.execute("SELECT error FROM failures")]
    finally:
        con.close()


def stored(db: Path) -> int:
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
    except sqlite3.OperationalError:  # the run is still creating its tables
        return 0
    finally:
        con.close()


# -- 1. wrong key, unknown model, malformed request, dead endpoint -------------------------------------------

@pytest.mark.subprocess
def test_wrong_key_stops_each_judge_at_its_first_call_and_keeps_what_was_stored(tmp_path):
    port = free_port()
    config = write_config(tmp_path, port, items=6, systems=2, reps=1, judges=2)
    db = tmp_path / "t.sqlite"
    server = Server(config, port, extra=("--require-key-env", "SERVER_KEY"), env={**os.environ, "SERVER_KEY": KEY})
    try:
        good = cli_run(config, "--limit", "10")
        assert good.returncode == 0, good.stderr
        assert stored(db) == 10
        for attempt in range(2):  # and again on resume: still one call per judge
            bad = cli_run(config, env_key="sk-wrong-0000000000000000000000")
            assert bad.returncode == 2, bad.stdout + bad.stderr
            text = bad.stdout + bad.stderr
            assert "HTTP 401" in text and "SIM_KEY" in text and "'j0'" in text and "'j1'" in text
            assert "sk-wrong" not in text and "Traceback" not in text
            assert len(failures(db)) == 2 * (attempt + 1)  # one call per judge, no retries of a 401
            assert stored(db) == 10  # nothing stored is lost
    finally:
        server.stop()


@pytest.mark.subprocess
def test_unknown_model_and_bad_request_stop_only_that_judge(tmp_path):
    port = free_port()
    config = write_config(tmp_path, port, items=4, systems=2, reps=1, judges=3)
    client = tmp_path / "client.toml"  # the server knows the real models; the client asks for another
    client.write_text(config.read_text().replace('model = "sim-2"', 'model = "no-such-model"'))
    server = Server(config, port)
    try:
        out = cli_run(client)
    finally:
        server.stop()
    assert out.returncode == 2
    assert "HTTP 404" in out.stderr and "no-such-model" in out.stderr and "'j2'" in out.stderr
    cfg = load_config(client)
    assert stored(cfg.database) == count_tasks(cfg) * 2 // 3  # the two good judges finished
    assert len(failures(cfg.database)) == 1

    for fault, status in (("bad_request=1", 400), ("forbidden=1", 403)):
        port = free_port()
        sub = tmp_path / fault.split("=")[0]
        sub.mkdir()
        config = write_config(sub, port, items=4, systems=2, reps=1, judges=2)
        server = Server(config, port, fault)
        try:
            out = cli_run(config)
        finally:
            server.stop()
        assert out.returncode == 2 and f"HTTP {status}" in out.stderr, out.stderr
        assert len(failures(sub / "t.sqlite")) == 2  # one per judge, then stopped


@pytest.mark.subprocess
def test_refused_connection_is_named_and_bounded(tmp_path):
    port = free_port()  # nothing listens here
    config = write_config(tmp_path, port, items=4, systems=2, reps=2, judges=3)
    config.write_text(config.read_text().replace("max_retries = 8", "max_retries = 2"))
    out = cli_run(config, "--limit", "10")
    assert out.returncode == 2
    assert "cannot connect" in out.stderr and "onnect" in out.stderr and f"127.0.0.1:{port}" in out.stderr
    errors = failures(tmp_path / "t.sqlite")
    assert len(errors) == 3  # one call per judge (3 attempts each), not --limit calls nor in_flight


@pytest.mark.subprocess
def test_no_completed_call_exits_non_zero(tmp_path):
    port = free_port()
    config = write_config(tmp_path, port, items=2, systems=2, reps=1, judges=1)
    config.write_text(config.read_text().replace("max_retries = 8", "max_retries = 1"))
    server = Server(config, port, "server_error=1")
    try:
        limited = cli_run(config, "--limit", "2")
        out = cli_run(config)
    finally:
        server.stop()
    assert limited.returncode == 2 and "no call completed" in limited.stderr
    # a judge whose calls keep failing after every retry is stopped after 3 in a row, not hammered
    assert out.returncode == 2 and "3 calls in a row failed" in out.stderr
    assert len(failures(tmp_path / "t.sqlite")) == 2 + 3


# -- 2. the budget -------------------------------------------------------------------------------------------

@pytest.mark.subprocess
def test_budget_holds_with_a_long_system_prompt_in_any_script(tmp_path):
    port = free_port()
    config = write_config(tmp_path, port, items=8, systems=3, reps=2, judges=2, extra_run="budget_usd = 0.02")
    system = ("Grade with care. " * 250) + ("評価してください。" * 200) + ("🙂" * 300)
    text = config.read_text()
    text = f"system_prompt = {tomli_w.dumps({'x': system})[4:].strip()}\n" + text
    config.write_text(text)
    server = Server(config, port)
    try:
        out = cli_run(config)
    finally:
        server.stop()
    assert out.returncode == 0, out.stderr
    spent = RunStore(tmp_path / "t.sqlite").cost()
    assert 0 < spent <= 0.02, spent
    assert "budget cap" in out.stdout


@pytest.mark.subprocess
def test_calls_in_flight_at_a_crash_count_against_the_budget(tmp_path, monkeypatch):
    monkeypatch.setenv("SIM_KEY", KEY)
    port = free_port()
    config = write_config(tmp_path, port, items=10, systems=3, reps=2, judges=2, in_flight=8,
                          extra_run="budget_usd = 0.05")
    db = tmp_path / "t.sqlite"
    server = Server(config, port, "latency_ms=400")
    try:
        env = {**os.environ, "SIM_KEY": KEY}
        proc = subprocess.Popen([sys.executable, "-m", "evalgauge.cli", "run", str(config), "--no-progress"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        deadline = time.time() + 90  # a loaded CI machine starts the run slowly
        while time.time() < deadline:
            time.sleep(0.1)
            if db.exists() and stored(db) >= 8:
                break
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        con = sqlite3.connect(db)
        (n_inflight,) = con.execute("SELECT COUNT(*) FROM inflight").fetchone()
        con.close()
        assert n_inflight > 0  # the killed run had calls out
        server.stop()
        server = Server(config, port)  # the same panel, without the delay
        cfg = load_config(config)
        summary = run(cfg)
    finally:
        server.stop()
    assert any("in flight when an earlier run stopped" in n for n in summary.notes)
    store = RunStore(db)
    assert store.cost() <= 0.05 + 1e-12
    con = sqlite3.connect(db)
    assert con.execute("SELECT COUNT(*) FROM unaccounted").fetchone()[0] == n_inflight
    assert con.execute("SELECT COUNT(*), COUNT(DISTINCT key) FROM calls").fetchone()[0] == stored(db)
    con.close()
    store.close()


class WorstCaseProvider:
    """Reports the most tokens a byte-level tokenizer can produce, and every max_tokens out."""

    def __init__(self, judge, system_prompt):
        self.judge, self.system_prompt = judge, system_prompt

    async def complete(self, prompt, system_prompt, temperature):
        await asyncio.sleep(0)
        tokens = len(prompt.encode()) + 4 + 3
        if system_prompt:
            tokens += len(system_prompt.encode()) + 4
        return Completion("Score: 3", self.judge.model, "id", tokens, self.judge.max_tokens)

    async def close(self):
        pass


TEXT = st.lists(st.sampled_from([*"abc xyz.", *"漢字評価", "🙂", "👩‍💻", "é"]), min_size=1, max_size=400).map("".join)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=st.lists(TEXT, min_size=1, max_size=6), system_prompt=st.one_of(st.none(), TEXT),
       max_tokens=st.lists(st.integers(1, 4000), min_size=1, max_size=3),
       prices=st.lists(st.tuples(st.floats(0, 200), st.floats(0, 600)), min_size=3, max_size=3),
       budget=st.floats(1e-4, 0.05), in_flight=st.integers(1, 16))
def test_spend_never_exceeds_the_cap(tmp_path_factory, items, system_prompt, max_tokens, prices, budget, in_flight):
    tmp = tmp_path_factory.mktemp("cap")
    (tmp / "items.jsonl").write_text("".join(json.dumps({"id": f"q{k}", "text": f"Q{t}"}) + "\n"
                                             for k, t in enumerate(items)))
    doc = {"run": {"replicates": 2, "budget_usd": budget, "in_flight": in_flight},
           "data": {"items": "items.jsonl"}, "scoring": {"mode": "likert"},
           "variants": [{"id": "v", "template": "Rate {item}."}],
           "judges": [{"name": f"j{k}", "model": f"m{k}", "max_tokens": max_tokens[k % len(max_tokens)],
                       "price_input_per_mtok": prices[k][0], "price_output_per_mtok": prices[k][1]}
                      for k in range(3)]}
    if system_prompt is not None:
        doc["system_prompt"] = system_prompt
    (tmp / "run.toml").write_text(tomli_w.dumps(doc))
    cfg = load_config(tmp / "run.toml")
    providers = {j.name: WorstCaseProvider(j, system_prompt) for j in cfg.judges}
    summary = asyncio.run(run_async(cfg, providers=providers))
    store = RunStore(cfg.database)
    try:
        assert store.count() == summary.completed and store.cost() <= budget * (1 + 1e-12)
        SPEND_RUNS.append(summary.stopped_by_budget)
    finally:
        store.close()


SPEND_RUNS: list[bool] = []


def test_the_cap_was_reached_in_some_runs():
    # the property test above is only meaningful if the cap bound some of its runs
    if SPEND_RUNS:
        assert any(SPEND_RUNS) and len(SPEND_RUNS) >= 20


def test_token_bound_never_undercounts_utf8():
    for text in ("abc", "漢字", "🙂👩‍💻", "é" * 10):
        assert worst_case_input_tokens(text) >= len(text.encode())


# -- 3-7. the configuration -----------------------------------------------------------------------------------

def _variant(tmp_path, old, new, name):
    config = write_config(tmp_path, 1)
    path = tmp_path / f"{name}.toml"
    text = config.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize("old,new,expected", [
    ("replicates = 2", "budget = 0.02\nreplicates = 2", "unknown key 'budget' in [run]; did you mean 'budget_usd'?"),
    ("replicates = 2", "replicats = 2", "did you mean 'replicates'?"),
    ('name = "j0"', 'name = "j0"\nmax_token = 5', "in [[judges]] #1; did you mean 'max_tokens'"),
    ("replicates = 2", 'replicates = "two"', "[run] replicates: input should be a valid integer (got 'two')"),
    ("temperatures = [0.0]", "temperatures = 0.7", "[run] temperatures: input should be a valid list (got 0.7)"),
    ("replicates = 2", "replicates = 0", "[run] replicates: input should be greater than or equal to 1"),
    ("max_tokens = 16", "max_tokens = -3", "[[judges]] #1 max_tokens"),
    ("{{response}}. Reply", "{{response}} }}. Reply", "variant 'v1': the template is not valid"),
    ("{{response}}. Reply", ". Reply", "variant 'v1' does not show the response ({response})"),
    ("Rate: {{item}} /", "Rate: {{item:>99999999999}} /", "placeholder {item...} has a format spec"),
    ("Rate: {{item}} /", "Rate: {{item:{{item}}}} /", "placeholder {item...} has a format spec"),
    ("Rate: {{item}} /", "Rate: {{item!r}} /", "placeholder {item...} has a format spec"),
    ("Rate: {{item}} /", "Rate: {{item.upper}} /", "an attribute or an index"),
    ("Rate: {{item}} /", "Rate: /", "variant 'v1' does not show the item ({item})"),
    ('mode = "numeric"', 'mode = "numeric"\nscale_min = 5\nscale_max = 1', "scale_min (5) must be below"),
    ('mode = "numeric"', 'mode = "likert"\nscale_max = 100000000', "more than 1000 points; use mode = \"numeric\""),
    ('mode = "numeric"', 'mode = "label"', "needs labels = [...] with at least two distinct"),
    ('mode = "numeric"', 'mode = "label"\nlabels = ["Yes", "yes"]', "needs labels = [...] with at least two"),
    ('mode = "numeric"', 'mode = "numeric"\nlabels = ["a", "b"]', "labels are the classes of mode = \"label\""),
    ("temperatures = [0.0]", "temperatures = [nan]", "[run] temperatures #1: input should be a finite number"),
    ("temperatures = [0.0]", "temperatures = [inf, -1.0]", "[run] temperatures #1: input should be a finite"),
    ("temperatures = [0.0]", "temperatures = [0.0, -1.0]", "temperatures #2: input should be greater than"),
    ("timeout_s = 10.0", "timeout_s = inf", "[run] timeout_s: input should be a finite number"),
    ('mode = "numeric"', 'mode = "numeric"\nchoices = "AA"', "choices must be distinct letters"),
    ("price_input_per_mtok = 1.0", "price_input_per_mtok = nan", "price_input_per_mtok: input should be a finite"),
])
def test_config_mistakes_are_named(tmp_path, old, new, expected):
    path = _variant(tmp_path, old.replace("{{", "{").replace("}}", "}"), new.replace("{{", "{").replace("}}", "}"),
                    "bad")
    with pytest.raises(DataError) as err:
        load_config(path)
    assert str(path) in str(err.value) and expected in str(err.value), str(err.value)
    out = CliRunner().invoke(main, ["run", str(path), "--dry-run"])
    assert out.exit_code == 2 and "error:" in out.output and isinstance(out.exception, SystemExit)


@pytest.mark.parametrize("where,line", [
    ("top", 'api_key = "sk-proj-abcdef0123456789ABCDEF"'),
    ("run", 'api_key = "sk-proj-abcdef0123456789ABCDEF"'),
    ("judge", 'api_key_env = "sk-proj-abcdef0123456789ABCDEF"'),
    ("judge", 'base_url2 = "sk-ant-api03-abcdefghijklmnop0123"'),
])
def test_a_literal_key_is_refused_and_never_echoed(tmp_path, where, line):
    config = write_config(tmp_path, 1)
    text = config.read_text()
    if where == "top":
        text = line + "\n" + text
    elif where == "run":
        text = text.replace("[run]\n", f"[run]\n{line}\n", 1)
    elif line.startswith("api_key_env"):
        text = text.replace('api_key_env = "SIM_KEY"', line, 1)
    else:
        text = text.replace('name = "j0"', f'name = "j0"\n{line}', 1)
    config.write_text(text)
    with pytest.raises(DataError, match="keys never go in the config") as err:
        load_config(config)
    secret = line.split('"')[1]
    assert secret not in str(err.value)


def test_api_key_env_must_be_a_variable_name(tmp_path):
    path = _variant(tmp_path, 'api_key_env = "SIM_KEY"', 'api_key_env = "my key"', "env")
    with pytest.raises(DataError, match="api_key_env must be the \\*name\\* of an environment variable"):
        load_config(path)


def test_pairwise_template_and_examples_still_load(tmp_path):
    for path in sorted((ROOT / "examples").glob("*/run.toml")):
        assert count_tasks(load_config(path)) > 0


# -- 8. progress ----------------------------------------------------------------------------------------------

def test_progress_starts_at_the_stored_count_and_not_before_the_key_check(tmp_path, monkeypatch):
    port = free_port()
    config = write_config(tmp_path, port, items=3, systems=2, reps=1, judges=2)
    monkeypatch.delenv("SIM_KEY", raising=False)
    seen = []
    with pytest.raises(DataError, match="SIM_KEY is not set"):
        run(load_config(config), progress=lambda s: seen.append(s.already_done + s.completed))
    assert seen == []  # no bar before the error
    monkeypatch.setenv("SIM_KEY", KEY)
    server = Server(config, port)
    try:
        run(load_config(config), limit=5)
        seen.clear()
        run(load_config(config), progress=lambda s: seen.append(s.already_done + s.completed))
    finally:
        server.stop()
    assert seen[0] == 5 and seen[-1] == count_tasks(load_config(config))


def test_cli_bar_on_resume_and_missing_env(tmp_path):
    config = write_config(tmp_path, 1)
    out = subprocess.run([sys.executable, "-m", "evalgauge.cli", "run", str(config)], capture_output=True, text=True,
                         env={k: v for k, v in os.environ.items() if k != "SIM_KEY"}, timeout=60)
    assert out.returncode == 2 and "SIM_KEY is not set" in out.stderr and "0/" not in out.stderr


# -- fuzz: a mutated configuration never gives a traceback ------------------------------------------------------

def _load_example() -> dict:
    import tomllib

    return tomllib.loads((ROOT / "examples" / "sim" / "run.toml").read_text())


VALUES = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=True, allow_infinity=True),
                   st.text(alphabet="{}abc_ item", max_size=12), st.lists(st.integers(-2, 2), max_size=3),
                   st.dictionaries(st.sampled_from(["x", "template", "model"]), st.integers(0, 2), max_size=2))


def _paths(node, prefix=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield (*prefix, k)
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for k, v in enumerate(node):
            yield (*prefix, k)
            yield from _paths(v, (*prefix, k))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_configs_never_traceback(tmp_path_factory, data):
    tmp = tmp_path_factory.mktemp("fuzz")
    for name in ("items.csv", "responses.csv"):
        (tmp / name).write_text((ROOT / "examples" / "sim" / name).read_text())
    doc = _load_example()
    for _ in range(data.draw(st.integers(1, 3))):
        paths = list(_paths(doc))
        path = data.draw(st.sampled_from(paths))
        parent = doc
        for part in path[:-1]:
            parent = parent[part]
        action = data.draw(st.sampled_from(["set", "delete", "add", "template"]))
        key = path[-1]
        if action == "delete":
            del parent[key]
        elif action == "add" and isinstance(parent, dict):
            parent[data.draw(st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12))] = \
                data.draw(VALUES)
        elif action == "template" and isinstance(parent[key], str):
            s = parent[key]
            at = data.draw(st.integers(0, len(s)))
            parent[key] = s[:at] + data.draw(st.sampled_from(["{", "}", "{x}", "{item", "{0}", "{item.x}",
                                                              "{response:d}", "{}"])) + s[at:]
        else:
            parent[key] = data.draw(VALUES)
    try:
        text = tomli_w.dumps(doc)
    except (TypeError, ValueError):  # not representable in TOML (None, NaN keys): nothing a user can write
        return
    (tmp / "run.toml").write_text(text)
    out = CliRunner().invoke(main, ["run", str(tmp / "run.toml"), "--dry-run"])
    assert out.exit_code in (0, 2), (text, out.output, out.exception)
    if out.exit_code == 2:
        assert "error:" in out.output
