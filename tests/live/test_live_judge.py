"""The collector against a real model server (llama.cpp serving SmolLM2-135M-Instruct), on real AlpacaEval
instructions and answers (examples/live): structured output, log-probabilities, truncation, re-asks,
kill -9 and resume, and the analysis of what came back. Run by `make test-live` (and by CI after
`make test`); see conftest.py for how the server is started."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from evalgauge.collect.config import Judge, load_config
from evalgauge.collect.providers import OpenAIProvider, Output
from evalgauge.collect.tasks import count_tasks
from evalgauge.protocols import verdict_schema

from .conftest import ROOT, evalgauge

EXAMPLE = ROOT / "examples" / "live"


def _config(tmp: Path, llama, name: str = "run.toml", edit=None) -> Path:
    for f in ("items.csv", "responses.csv"):
        (tmp / f).write_text((EXAMPLE / f).read_text())
    text = (EXAMPLE / name).read_text().replace("http://127.0.0.1:8931/v1", llama.base_url)
    path = tmp / name
    path.write_text(edit(text) if edit else text)
    return path


def _calls(db: Path) -> pd.DataFrame:
    with sqlite3.connect(db) as con:
        return pd.read_sql_query("SELECT * FROM calls", con)


def _stored(db: Path) -> int:
    try:
        with sqlite3.connect(db, timeout=1) as con:
            return con.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
    except sqlite3.Error:
        return 0


def test_the_endpoints_json_dialect_is_found_at_the_first_call(llama):
    """llama-cpp-python's server takes a schema as json_object + schema; OpenAI's json_schema type is refused
    there (a 400) or accepted elsewhere: either way the verdict comes back as the schema says."""
    judge = Judge(name="smollm2", model="smollm2", base_url=llama.base_url, max_tokens=24)

    async def go():
        provider = OpenAIProvider(judge, timeout=120)
        try:
            out = await provider.complete("Rate the answer '4' to 'What is 2+2?' from 1 to 5 as JSON {\"score\": N}.",
                                          None, 0.0, output=Output("json", verdict_schema("likert", 1, 5)))
        finally:
            await provider.close()
        return provider.dialect, out

    dialect, out = asyncio.run(go())
    assert dialect in ("json_schema", "json_object")
    assert json.loads(out.text)["score"] in range(1, 6) and out.finish_reason == "stop"


def test_a_json_factorial_killed_mid_run_resumes_to_every_cell_once(llama, tmp_path):
    config = _config(tmp_path, llama)
    cfg = load_config(config)
    planned = count_tasks(cfg)
    assert planned == 12 * 2 * 2 * 2 * 2  # items x systems x variants x temperatures x replicates
    proc = subprocess.Popen([sys.executable, "-m", "evalgauge.cli", "run", str(config), "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 600
    while _stored(cfg.database) < planned // 4 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert proc.poll() is None, proc.stdout.read().decode()
    os.killpg(proc.pid, signal.SIGKILL)  # kill -9, mid-run
    proc.wait()
    before = _stored(cfg.database)
    assert 0 < before < planned
    t0 = time.time()
    done = evalgauge("run", str(config), "--no-progress", "--json", "-")
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads(done.stdout)["summary"]
    assert summary["already_done"] == before and summary["completed"] == planned - before
    calls = _calls(cfg.database)
    cells = ["item", "system", "variant", "temperature", "judge", "replicate"]
    assert len(calls) == planned and not calls.duplicated(cells).any()  # every cell exactly once
    assert calls["score"].notna().mean() >= 0.95
    assert set(calls["score"].dropna()) <= {1.0, 2.0, 3.0, 4.0, 5.0}
    assert calls["finish_reason"].notna().all()
    print(f"resumed {planned - before} calls in {time.time() - t0:.1f} s; "
          f"{calls['score'].notna().sum()} of {planned} scored")
    analysis = evalgauge("analyze", str(cfg.database), "--json", str(tmp_path / "a.json"))
    assert analysis.returncode == 0, analysis.stdout + analysis.stderr
    assert "Calls without a score" in analysis.stdout
    payload = json.loads((tmp_path / "a.json").read_text())
    assert payload["diagnostics"]["missing_answers"]["calls"] == planned
    # llama.cpp's prompt cache answers repeated prompts faster, with a fresh reply and id: no caching alarm
    assert calls["response_id"].notna().all() and calls["response_id"].is_unique
    diagnostics = payload["diagnostics"]
    assert diagnostics["cached_cells"] == 0 and not any("caching" in w for w in diagnostics["warnings"])


def test_a_logprobs_factorial_scores_every_call_with_the_judges_distribution(llama, tmp_path):
    config = _config(tmp_path, llama, "run-logprobs.toml", lambda t: t.replace("replicates = 2", "replicates = 1"))
    cfg = load_config(config)
    done = evalgauge("run", str(config), "--no-progress", "--json", "-")
    assert done.returncode == 0, done.stdout + done.stderr
    calls = _calls(cfg.database)
    assert len(calls) == count_tasks(cfg) and calls["score"].notna().all()  # every call scored
    for _, row in calls.iterrows():
        dist = {float(k): p for k, p in json.loads(row["distribution"]).items()}
        assert abs(sum(dist.values()) - 1) < 1e-9 and set(dist) <= {1.0, 2.0, 3.0, 4.0, 5.0}
        assert row["score"] == pytest.approx(sum(v * p for v, p in dist.items()), abs=1e-9)
    assert (calls["spread"] > 0).mean() > 0.5  # a small judge is rarely certain
    analysis = evalgauge("analyze", str(cfg.database))
    assert analysis.returncode == 0, analysis.stdout + analysis.stderr
    assert "within-call spread" in analysis.stdout


def test_free_text_verdicts_cut_at_max_tokens_are_named_and_reasked(llama, tmp_path):
    def free_text(text: str) -> str:
        text = text.replace('output = "json"', 'protocol = "score-line"\nreask = 1')
        text = text.replace('Reply with JSON: {{"score": N}}.', "Explain your reasoning, then end with a line "
                            "'Score: N'.")
        text = text.replace('Give your rating as JSON {{"score": N}} with N from 1 to 5.',
                            "Think step by step, then write 'Score: N' on the last line.")
        return text.replace("replicates = 2", "replicates = 1").replace("temperatures = [0.0, 0.7]",
                                                                          "temperatures = [0.0]")

    config = _config(tmp_path, llama, edit=free_text)
    cfg = load_config(config)
    done = evalgauge("run", str(config), "--no-progress", "--json", "-")
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads(done.stdout)["summary"]
    calls = _calls(cfg.database)
    cut = calls["finish_reason"] == "length"
    assert cut.any() and summary["reasks"] == calls["reasks"].sum() > 0
    unscored_cut = calls["score"].isna() & cut
    assert summary["truncated"] == unscored_cut.sum()
    assert calls.loc[unscored_cut, "parse_error"].str.startswith("cut at max_tokens (24 tokens)").all()
    # a verdict is read only from a 'Score: N' line: never from the instruction's numbers or the scale
    read = calls[calls["score"].notna()]
    assert read["completion"].str.contains(r"(?im)^\W*score\W*:\W*\d").all()
    analysis = evalgauge("analyze", str(cfg.database), "--json", str(tmp_path / "a.json"))
    if calls["score"].notna().any():
        assert analysis.returncode == 0, analysis.stdout + analysis.stderr
        assert "Calls without a score" in analysis.stdout and "cut at max_tokens" in analysis.stdout
    else:  # a 135M model rarely writes the line asked for: nothing to fit, and the message says why
        assert analysis.returncode == 2 and "Traceback" not in analysis.stderr
        assert "no call has a readable verdict" in analysis.stderr and "cut at max_tokens" in analysis.stderr
