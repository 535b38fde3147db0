"""Calls as the run database stores them, and a run database written from them, for tests that need one."""

from pathlib import Path

from evalgauge.store import CallRecord, RunStore


def stored_record(i: int, **kw) -> CallRecord:
    """A scored call of item ``q{i}`` (one system, variant and judge); ``kw`` replaces any field."""
    base = dict(key=f"q{i}|s|v|0|j|1|", item=f"q{i}", category=None, system="s", variant="v", temperature=0.0,
                judge="j", replicate=1, position=None, prompt_hash="h", request="{}", completion="Score: 3",
                score=3.0, parse_error=None, model="m", response_id=f"r{i}", started_at=0.0, finished_at=1.0,
                latency_s=1.0, input_tokens=10, output_tokens=3, cost_usd=1e-5)
    base.update(kw)
    return CallRecord(**base)


def run_database(path: Path, n: int = 40) -> Path:
    """A run database at ``path``: ``n`` items x two judges x two replicates, every call scored 1-5."""
    store = RunStore(path, writer=True)
    try:
        for i in range(n):
            for j in ("j0", "j1"):
                for rep in (1, 2):
                    store.record(stored_record(i, key=f"q{i}|{j}|{rep}", judge=j, replicate=rep,
                                              score=float((i * 7 + rep + len(j)) % 5 + 1)))
    finally:
        store.close()
    return path
