"""The async runner: a bounded number of calls in flight, per-judge rate limits, retries with
exponential backoff and jitter (honouring Retry-After), a hard budget cap, and a progress bar.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, field, replace

from ..errors import DataError
from .config import Judge, RunConfig
from .parsers import parse_score
from .providers import ProviderError, make_provider
from .store import CallRecord, RunStore
from .tasks import Task, build_tasks, check_templates, count_tasks, generation_prompt, prompt_hash


class RateLimiter:
    """Token buckets for requests and tokens per minute (None: unlimited)."""

    def __init__(self, rpm: float | None, tpm: float | None):
        self.rpm, self.tpm = rpm, tpm
        self.req = float(rpm or 0)
        self.tok = float(tpm or 0)
        self.last = time.monotonic()
        self.lock = asyncio.Lock()

    async def acquire(self, tokens: int) -> None:
        if not self.rpm and not self.tpm:
            return
        async with self.lock:
            while True:
                now = time.monotonic()
                dt, self.last = now - self.last, now
                if self.rpm:
                    self.req = min(self.rpm, self.req + dt * self.rpm / 60)
                if self.tpm:
                    self.tok = min(self.tpm, self.tok + dt * self.tpm / 60)
                need_r = 1 if self.rpm and self.req < 1 else 0
                need_t = tokens if self.tpm and self.tok < min(tokens, self.tpm) else 0
                if not need_r and not need_t:
                    if self.rpm:
                        self.req -= 1
                    if self.tpm:
                        self.tok -= tokens
                    return
                wait = max((1 - self.req) * 60 / self.rpm if need_r else 0.0,
                           (min(tokens, self.tpm) - self.tok) * 60 / self.tpm if need_t else 0.0)
                await asyncio.sleep(wait)


@dataclass
class RunSummary:
    planned: int
    already_done: int
    completed: int = 0
    generated: int = 0
    failed: int = 0
    retries: int = 0
    cost_usd: float = 0.0
    stopped_by_budget: bool = False
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _redact(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    return text


async def run_async(cfg: RunConfig, *, progress=None, providers=None, limit: int | None = None) -> RunSummary:
    """Run (or resume) the factorial into ``cfg.database``. ``limit`` stops after that many calls."""
    check_templates(cfg)
    store = RunStore(cfg.database)
    fingerprint = store.get_meta("fingerprint")
    if fingerprint and fingerprint != cfg.fingerprint():
        store.close()
        raise DataError(f"{cfg.database}: this run database was made by a different configuration (items, "
                        "variants, judges, temperatures or scoring changed). Use a new database path "
                        "(--database) to run the new configuration.")
    store.set_meta("fingerprint", cfg.fingerprint())
    store.set_meta("config", str(cfg.path))
    store.set_meta("mode", cfg.mode)
    done = store.done_keys()
    planned = count_tasks(cfg)
    summary = RunSummary(planned=planned, already_done=len(done), cost_usd=store.cost())
    secrets = _secrets(cfg)
    if cfg.generators:
        try:
            await _generate(cfg, store, summary, secrets)
        except BaseException:
            store.close()
            raise
        cfg = replace(cfg, responses=store.responses())
        if summary.stopped_by_budget:
            store.close()
            summary.notes.append(f"stopped at the budget cap of ${cfg.budget_usd:g} while generating responses.")
            return summary
    judges = {j.name: j for j in cfg.judges}
    providers = providers or {j.name: make_provider(j, cfg.timeout_s) for j in cfg.judges}
    limiters = _limiters(cfg.judges)
    tasks = build_tasks(cfg, skip=done)
    queue_lock = asyncio.Lock()
    start = time.monotonic()
    stop = asyncio.Event()
    reserved = {"usd": 0.0}  # worst-case cost of the calls in flight, held against the budget

    async def next_task() -> Task | None:
        async with queue_lock:
            if stop.is_set():
                return None
            if limit is not None and summary.completed + summary.failed >= limit:
                return None
            return next(tasks, None)

    async def worker() -> None:
        while True:
            task = await next_task()
            if task is None:
                return
            judge = judges[task.judge]
            # The hard cap: a call starts only if what is spent, what the calls in flight could still cost
            # and this call's worst case (a token per two characters, max_tokens out) fit in the budget.
            worst = judge.price(len(task.prompt) // 2 + 16, judge.max_tokens)
            if summary.cost_usd + reserved["usd"] + worst > cfg.budget_usd:
                summary.stopped_by_budget = True
                stop.set()
                return
            reserved["usd"] += worst
            try:
                record, error, attempts = await _call(cfg, judge, providers[task.judge], limiters[task.judge],
                                                      task, secrets)
            finally:
                reserved["usd"] -= worst
            summary.retries += attempts - 1
            if record is not None:
                store.record(record)
                summary.completed += 1
                summary.cost_usd += record.cost_usd
            else:
                store.record_failure(task.key, attempts, error)
                summary.failed += 1
            if progress is not None:
                progress(summary)

    try:
        await asyncio.gather(*(worker() for _ in range(max(1, cfg.in_flight))))
    finally:
        for p in providers.values():
            await p.close()
        summary.seconds = time.monotonic() - start
        store.close()
    if summary.stopped_by_budget:
        summary.notes.append(f"stopped at the budget cap of ${cfg.budget_usd:g}; run again with a larger "
                             "budget_usd to finish (completed calls are kept).")
    return summary


def _limiters(judges) -> dict[str, RateLimiter]:
    """One limiter per provider account: judges on the same endpoint and key share its limits (the tightest)."""
    groups: dict[tuple, list[Judge]] = {}
    for j in judges:
        groups.setdefault((j.provider, j.base_url, j.api_key_env), []).append(j)
    out = {}
    for members in groups.values():
        rpm = min((j.rpm for j in members if j.rpm), default=None)
        tpm = min((j.tpm for j in members if j.tpm), default=None)
        shared = RateLimiter(rpm, tpm)
        for j in members:
            out[j.name] = shared
    return out


def _secrets(cfg: RunConfig) -> list[str]:
    import os

    return [os.environ.get(j.api_key_env, "") for j in (*cfg.judges, *cfg.generators) if j.api_key_env]


async def _attempt(cfg: RunConfig, judge: Judge, provider, limiter: RateLimiter, prompt: str, system_prompt,
                   temperature: float, secrets: list[str]):
    """One request with retries: exponential backoff with full jitter, at least the server's Retry-After.

    Returns (completion or None, started, latency, attempts, error)."""
    attempts = 0
    last_error = ""
    while attempts <= cfg.max_retries:
        attempts += 1
        await limiter.acquire(len(prompt) // 4 + judge.max_tokens)
        started = time.time()
        t0 = time.monotonic()
        try:
            completion = await provider.complete(prompt, system_prompt, temperature)
        except ProviderError as exc:
            last_error = _redact(str(exc), secrets)
            if not exc.retryable:
                break
            backoff = random.uniform(0, min(30.0, 0.25 * 2 ** (attempts - 1)))
            await asyncio.sleep(max(backoff, exc.retry_after or 0.0))
            continue
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # an unexpected client error: record it, keep the run going
            last_error = _redact(f"{type(exc).__name__}: {exc}", secrets)
            break
        return completion, started, time.monotonic() - t0, attempts, None
    return None, 0.0, 0.0, attempts, last_error or "failed"


async def _call(cfg: RunConfig, judge: Judge, provider, limiter: RateLimiter, task: Task, secrets: list[str]):
    """One judge call, parsed and priced, as a record for the store (or the error after retries)."""
    completion, started, latency, attempts, error = await _attempt(
        cfg, judge, provider, limiter, task.prompt, cfg.system_prompt, task.temperature, secrets)
    if completion is None:
        return None, error, attempts
    score, parse_error = parse_score(completion.text, cfg.mode, scale_max=cfg.scale_max, scale_min=cfg.scale_min,
                                     choices=cfg.choices)
    if score is not None and cfg.pairwise and task.position == "BA":
        score = 1.0 - score  # the system was presented second: its win is a "B"
    request = json.dumps({"model": judge.model, "temperature": task.temperature, "max_tokens": judge.max_tokens,
                          "provider": judge.provider, "base_url": judge.base_url,
                          "system_prompt": bool(cfg.system_prompt)})
    record = CallRecord(
        key=task.key, item=task.item.id, category=task.item.category, system=task.system,
        variant=task.variant.id, temperature=task.temperature, judge=task.judge, replicate=task.replicate,
        position=task.position, prompt_hash=task.prompt_hash, request=request, completion=completion.text,
        score=score, parse_error=parse_error, model=completion.model, response_id=completion.response_id,
        started_at=started, finished_at=time.time(), latency_s=latency,
        input_tokens=completion.input_tokens, output_tokens=completion.output_tokens,
        cost_usd=judge.price(completion.input_tokens, completion.output_tokens))
    return record, None, attempts


async def _generate(cfg: RunConfig, store: RunStore, summary: RunSummary, secrets: list[str]) -> None:
    """Phase one with [[systems]]: each system answers each item once (resumable, within the budget)."""
    done = store.done_generations()
    todo = [(item, g) for item in cfg.items for g in cfg.generators if f"{item.id}|{g.name}" not in done]
    if not todo:
        return
    providers = {g.name: make_provider(g, cfg.timeout_s) for g in cfg.generators}
    limiters = _limiters(cfg.generators)
    it = iter(todo)
    reserved = {"usd": 0.0}

    async def worker():
        for item, gen in it:
            prompt = generation_prompt(cfg, item)
            worst = gen.price(len(prompt) // 2 + 16, gen.max_tokens)
            if summary.cost_usd + reserved["usd"] + worst > cfg.budget_usd:
                summary.stopped_by_budget = True
                return
            reserved["usd"] += worst
            try:
                completion, started, latency, attempts, error = await _attempt(
                    cfg, gen, providers[gen.name], limiters[gen.name], prompt, None, cfg.generation_temperature,
                    secrets)
            finally:
                reserved["usd"] -= worst
            summary.retries += attempts - 1
            key = f"{item.id}|{gen.name}"
            if completion is None:
                store.record_failure(f"generate|{key}", attempts, error)
                summary.failed += 1
                continue
            cost = gen.price(completion.input_tokens, completion.output_tokens)
            store.record_response((key, item.id, gen.name, prompt_hash(prompt), completion.text, completion.model,
                                   completion.response_id, started, time.time(), latency, completion.input_tokens,
                                   completion.output_tokens, cost))
            summary.cost_usd += cost
            summary.generated += 1

    try:
        await asyncio.gather(*(worker() for _ in range(max(1, cfg.in_flight))))
    finally:
        for p in providers.values():
            await p.close()


def run(cfg: RunConfig, **kw) -> RunSummary:
    return asyncio.run(run_async(cfg, **kw))
