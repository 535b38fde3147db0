"""The async runner: a bounded number of calls in flight, per-judge rate limits, retries with
exponential backoff and jitter (honouring Retry-After), a hard budget cap, and a progress bar.
"""

from __future__ import annotations

import asyncio
import gc
import json
import math
import random
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from ..errors import DataError
from ..protocols import TRUNCATED
from ..results import Result
from ..store import RunStore, cell_key

# a call's cost, output, verdict and row, shared with the batch collector
from .calls import call_record, count_flags, output_spec, verdict_of, worst_case_cost
from .config import Judge, RunConfig
from .limits import text_limit
from .providers import Output, ProviderError, make_provider
from .reply import Vetted, redact, vet
from .tasks import Task, build_tasks, check_templates, count_tasks, generation_prompt, prompt_hash

#: allocations between the cycle collector's young collections while calls are in flight (Python's default: 700)
YOUNG_COLLECTION_EVERY = 10_000
#: a passed check that the run database is intact stands for this many seconds: the calls that start within a
#: millisecond (replies arrive together) share one stat and header read (20,000 calls against serve-sim: about
#: 5,700 checks), and a deleted, replaced or damaged file is still seen within a millisecond
INTACT_FOR_S = 0.001


@contextmanager
def _fewer_collections(every: int = YOUNG_COLLECTION_EVERY):
    """The cycle collector's youngest generation collected every ``every`` allocations for the block, then as
    before. Hundreds of calls in flight keep thousands of young objects alive (connections, buffers, tasks),
    and each young collection walks them all: at the default 700 that is about a tenth of the collector's CPU a
    call; objects freed by reference counting (nearly all of a call's) are unaffected. A collector switched off
    (threshold 0) stays off."""
    before = gc.get_threshold()
    if before[0]:
        gc.set_threshold(max(before[0], every), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


#: the window a per-minute limit is kept over, with a second's margin: the requests reach the server a little
#: unevenly, so a limit kept over 61 s at the client holds over any 60 s at the server
LIMIT_WINDOW_S = 61.0


class RateLimiter:
    """Requests and tokens per minute (None: unlimited), never more in any window of ``LIMIT_WINDOW_S``.

    A token bucket that starts full sends a whole minute's requests at once and another minute's as it
    refills (twice the limit in the first minute). Here requests are paced ``LIMIT_WINDOW_S / rpm`` apart
    and a log of the window's requests (and their tokens) is checked before each one, so no window holds
    more than ``rpm`` requests or ``tpm`` tokens (a request larger than ``tpm`` goes alone in its window).
    ``clock`` and ``sleep`` are injectable for tests on virtual time."""

    def __init__(self, rpm: float | None, tpm: float | None, *, clock=time.monotonic, sleep=None):
        from collections import deque

        self.rpm, self.tpm = rpm, tpm
        self._log: deque[tuple[float, int]] = deque()  # (sent at, tokens) of the window's requests
        self._tokens = 0
        self._next = -math.inf
        self._clock, self._sleep = clock, sleep or asyncio.sleep
        self.lock = asyncio.Lock()

    def _wait(self, now: float, tokens: int) -> float:
        """Seconds until a request of ``tokens`` may go (0: now)."""
        log, window = self._log, LIMIT_WINDOW_S
        while log and log[0][0] <= now - window:
            self._tokens -= log.popleft()[1]
        wait = 0.0
        if self.rpm:
            wait = self._next - now
            over = len(log) - int(self.rpm) + 1  # requests that must leave the window first
            if over > 0:
                wait = max(wait, log[over - 1][0] + window - now)
        if self.tpm and log:
            excess = self._tokens + min(tokens, self.tpm) - self.tpm
            for sent, held in log:
                if excess <= 0:
                    break
                excess -= held
                wait = max(wait, sent + window - now)
        return wait

    async def acquire(self, tokens: int) -> None:
        if not self.rpm and not self.tpm:
            return
        async with self.lock:
            while (wait := self._wait(self._clock(), tokens)) > 0:
                await self._sleep(wait)
            now = self._clock()
            self._log.append((now, tokens))
            self._tokens += tokens
            if self.rpm:
                self._next = now + LIMIT_WINDOW_S / self.rpm


@dataclass
class RunSummary(Result):
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
    #: judges (or generating systems) stopped by an error no retry can fix, with the reason
    fatal: dict[str, str] = field(default_factory=dict)
    #: calls left for a stopped judge: not sent, tried again on resume
    skipped: int = 0
    #: judges paused because the server asked to wait longer than MAX_RETRY_WAIT_S (resume later)
    paused: dict[str, str] = field(default_factory=dict)
    #: replies the provider may have billed that gave no usable completion (charged at their worst case)
    billed_failures: int = 0
    #: completions stored with a flag (implausible usage, redacted text, replaced surrogates), by kind
    flagged: dict[str, int] = field(default_factory=dict)
    #: stored calls whose reply was cut at max_tokens before a verdict could be read
    truncated: int = 0
    #: stored calls whose reply was cut at max_tokens after a complete verdict, which was read
    truncated_scored: int = 0
    #: follow-up turns sent after unreadable verdicts ([scoring] reask)
    reasks: int = 0
    #: the run database was deleted, replaced, truncated or overwritten during the run (the run stopped)
    database_error: str | None = None
    #: the signal that stopped the run (SIGTERM, SIGINT): the calls in flight were cancelled, the stored kept
    interrupted: str | None = None
    #: batch collection: batches submitted by this run, and lines that came back failed or expired
    batches: int = 0
    batch_line_failures: int = 0

    @property
    def ok(self) -> bool:
        """False when a judge was stopped or paused, or calls were due and none completed."""
        due = self.planned - self.already_done
        nothing_done = due > 0 and self.completed == 0 and not self.stopped_by_budget
        return not self.fatal and not self.paused and not nothing_done and not self.interrupted

    def to_dict(self) -> dict:
        return {**self.__dict__, "ok": self.ok}




class JudgeGate:
    """Per judge: until it has answered once, one call at a time goes to it, so a wrong key or a dead
    endpoint costs one call (and its retries), not ``in_flight`` of them; an error no retry can fix
    stops the judge (``dead`` holds the reason)."""

    #: calls in a row that failed after every retry before the judge is stopped: before its first answer,
    #: and once it has answered (an endpoint gone down mid-run; resume later)
    LIMIT_BEFORE_ANSWER = 3
    LIMIT_AFTER_ANSWER = 10

    def __init__(self) -> None:
        self.ok = False
        self.dead: str | None = None
        self.lock = asyncio.Lock()
        self.failures_in_a_row = 0
        self.paused = False

    def settle(self, at: Attempt) -> None:
        if at.fatal or at.pause:
            self.dead = self.dead or at.error
            self.paused = self.paused or at.pause
        elif at.error is None:
            self.ok, self.failures_in_a_row = True, 0
        else:
            self.failures_in_a_row += 1
            limit = self.LIMIT_AFTER_ANSWER if self.ok else self.LIMIT_BEFORE_ANSWER
            if self.failures_in_a_row >= limit and not self.dead:
                self.dead = (f"{self.failures_in_a_row} calls in a row failed after every retry (last: {at.error}); "
                             "stopped so as not to hammer a failing endpoint. Run again later to resume.")


async def _gated(gate: JudgeGate, call):
    """Run ``call()`` (returning (result, Attempt)) through the judge's gate; None if the judge was stopped."""
    if gate.dead:
        return None
    if gate.ok:
        result = await call()
    else:
        async with gate.lock:
            if gate.dead:
                return None
            result = await call()
    gate.settle(result[1])
    return result


async def run_async(cfg: RunConfig, *, progress=None, providers=None, limit: int | None = None) -> RunSummary:
    """Run (or resume) the factorial into ``cfg.database``. ``limit`` stops after sending that many calls.

    ``progress(summary)`` is called once before the first call (with the stored count) and after each call.
    """
    check_templates(cfg)
    store = RunStore(cfg.database, writer=True)
    try:
        fingerprint = store.get_meta("fingerprint")
        if fingerprint and fingerprint != cfg.fingerprint():
            raise DataError(f"{cfg.database}: this run database was made by a different configuration (items, "
                            "variants, judges, temperatures or scoring changed). Use a new database path "
                            "(--database) to run the new configuration.")
        # keys are checked (and providers made) before anything is written or shown
        providers = providers or {j.name: make_provider(j, cfg.timeout_s) for j in cfg.judges}
        if cfg.batch:
            from .batch import batch_client

            batch_clients = {j.name: batch_client(j, cfg.timeout_s, cfg.batch_dir, cfg.max_retries)
                             for j in cfg.judges}
        gen_providers = {g.name: make_provider(g, cfg.timeout_s) for g in cfg.generators} if cfg.generators else {}
    except BaseException:
        store.close()
        raise
    store.set_meta("fingerprint", cfg.fingerprint())
    store.set_meta("config", str(cfg.path))
    store.set_meta("mode", cfg.mode)
    scale = run_scale(cfg)
    if scale is not None:  # the range a mean of the verdicts cannot leave, for the analysis' intervals
        store.set_meta("scale", f"{scale[0]:g},{scale[1]:g}")
    classes = run_classes(cfg)
    if classes:  # the verdicts are classes: stored as indices, read back as these names, never averaged
        store.set_meta("labels", json.dumps(list(classes)))
    # what the report says about the run, kept with its calls: the configuration file may move or change
    store.set_meta("design", json.dumps(run_design(cfg)))
    lost, lost_usd = store.reclaim_inflight()
    done = store.done_keys()
    summary = RunSummary(planned=count_tasks(cfg), already_done=len(done), cost_usd=store.cost())
    if lost:
        summary.notes.append(f"{lost} call(s) were in flight when an earlier run stopped; their worst-case cost "
                             f"(${lost_usd:.4f}) counts as spent, and they are sent again.")
    if progress is not None:
        progress(summary)
    secrets = _secrets(cfg)
    handlers = _stop_on_signals(summary)
    try:
        with _fewer_collections():  # hundreds of calls in flight: see the function
            if cfg.generators:
                await _generate(cfg, store, summary, secrets, gen_providers)
                cfg = replace(cfg, responses=store.responses())
                if summary.stopped_by_budget or summary.fatal or summary.paused:
                    if summary.stopped_by_budget:
                        summary.notes.append(f"stopped at the budget cap of ${cfg.budget_usd:g} while generating "
                                             "responses.")
                    for p in providers.values():
                        await p.close()
                    return summary
            if cfg.batch:
                await _batch_all(cfg, store, summary, secrets, providers, batch_clients, limit, progress)
            else:
                await _judge_all(cfg, store, summary, secrets, providers, done, limit, progress)
    except asyncio.CancelledError:
        if summary.interrupted is None:
            raise
        for p in (*providers.values(), *gen_providers.values()):
            await p.close()
        if cfg.batch:
            for c in batch_clients.values():
                await c.close()
    finally:
        _restore_signals(handlers)
        store.close()
    if summary.interrupted:
        summary.notes.append(f"stopped by {summary.interrupted}: the calls in flight were cancelled (their worst "
                             "case counts as spent until a resume sends them again); every stored call is kept. "
                             "Run the same command again to resume.")
    if summary.database_error:
        raise DataError(f"{summary.database_error}; the run stopped at once. This run paid for "
                        f"{summary.completed + summary.generated + summary.failed} call(s) (${summary.cost_usd:.4f} "
                        "counted in all, earlier runs included); the answers that came back after that could not "
                        "be kept. Restore the database (or keep the other run's) and run again to resume from "
                        "what it holds.")
    if summary.stopped_by_budget:
        summary.notes.append(f"stopped at the budget cap of ${cfg.budget_usd:g}; run again with a larger "
                             "budget_usd to finish (completed calls are kept).")
    _flag_notes(summary)
    return summary


async def _batch_all(cfg: RunConfig, store: RunStore, summary: RunSummary, secrets: list[str], providers: dict,
                     clients: dict, limit: int | None, progress) -> None:
    """Phase two through the batch APIs (:mod:`.batch`); with ``batch_failed = "sync"`` the lines that failed
    in their batch are then sent as synchronous calls."""
    from .batch import collect_batches

    start = time.monotonic()
    try:
        left = await collect_batches(cfg, store, summary, secrets, clients, limit, progress)
    finally:
        for c in clients.values():
            await c.close()
        summary.seconds = time.monotonic() - start
    summary.cost_usd = store.cost()
    if summary.batch_line_failures:
        summary.notes.append(f"{summary.batch_line_failures} batch line(s) came back failed or expired"
                             + (" and were sent again." if cfg.batch_failed == "rebatch" else "."))
    if cfg.reask:
        summary.notes.append("batch lines are not re-asked: an unreadable verdict is stored unscored (run without "
                             "--batch to re-ask, or `evalgauge rescore`).")
    if left and cfg.batch_failed == "sync" and not (summary.database_error or summary.interrupted
                                                    or summary.stopped_by_budget):
        summary.notes.append(f"{len(left)} call(s) whose batch line failed were sent synchronously "
                             "([run] batch_failed = \"sync\").")
        await _judge_all(cfg, store, summary, secrets, providers, store.done_keys(), None, progress)
        summary.seconds = time.monotonic() - start
    else:
        for p in providers.values():
            await p.close()
        if left and not (summary.stopped_by_budget or summary.paused or summary.interrupted):
            summary.notes.append(f"{len(left)} call(s) are still missing after their batch lines failed "
                                 f"{cfg.max_retries + 1} time(s); run again to send them (see the failures table).")


def _flag_notes(summary: RunSummary) -> None:
    """Say what the replies did that the run had to correct for."""
    for kind, n in sorted(summary.flagged.items()):
        what = {"implausible usage": "reported implausible token usage (none, or more than the request "
                                     "allows); charged at its worst case, not at the server's count",
                "key-shaped text redacted": "echoed a key or key-shaped text; redacted before it was stored",
                "lone surrogates replaced": "held lone UTF-16 surrogates; stored with U+FFFD in their place"}
        summary.notes.append(f"{n} repl{'y' if n == 1 else 'ies'} {what.get(kind, kind)}.")
    cut = summary.truncated + summary.truncated_scored
    if cut:
        read = (f"; {summary.truncated_scored} of them had a complete verdict before the cut, which was read"
                if summary.truncated_scored else "")
        summary.notes.append(f"{cut} repl{'y was' if cut == 1 else 'ies were'} cut at max_tokens (finish_reason "
                             f"'length'){read}; {summary.truncated} without a complete verdict stored unscored. "
                             "Raise the judge's max_tokens, or ask for a shorter answer (output = \"json\").")
    if summary.billed_failures:
        summary.notes.append(f"{summary.billed_failures} repl{'y' if summary.billed_failures == 1 else 'ies'} "
                             "the provider may have billed gave no usable completion (malformed, cut short or too "
                             "long); each counts its worst-case cost as spent.")


def run_design(cfg) -> dict:
    """The run's prompt variants (their templates), system prompt and judges (name, model, provider; never a key
    or an endpoint), as the report shows them."""
    return {"variants": [{"id": v.id, "template": v.template} for v in cfg.variants],
            "system_prompt": cfg.system_prompt,
            "judges": [{"name": j.name, "model": j.model, "provider": j.provider} for j in cfg.judges]}


def run_scale(cfg: RunConfig) -> tuple[float, float] | None:
    """The scale of a run's verdicts: a likert run's scale_min..scale_max, 0..1 for binary and pairwise verdicts
    (and the preference and grade protocols), None for numeric scores and choice letters."""
    from ..protocols import UNSCALED

    protocols = {cfg.protocol, *(p for _, p, _ in cfg.variant_protocols)} - {None}
    if cfg.mode in ("binary", "pairwise") or cfg.choice_keyed or (protocols and protocols <= set(UNSCALED)):
        return (0.0, 1.0)
    if cfg.mode == "likert" and not protocols & set(UNSCALED):
        return (float(cfg.scale_min), float(cfg.scale_max))
    return None


def run_classes(cfg: RunConfig) -> tuple[str, ...]:
    """The classes a run's verdicts are (their stored indices' names): mode = "label"'s labels, and the letters of
    a choice run (a letter chosen is a class, not a number)."""
    if cfg.mode == "label":
        return cfg.labels
    if cfg.mode == "choice" and not cfg.choice_keyed:
        return tuple(cfg.choices)
    return ()


def _stop_on_signals(summary: RunSummary) -> list:
    """SIGTERM and SIGINT cancel the run's task inside the event loop, so that every call in flight is
    cancelled where it waits and the sessions close (a handler raising SystemExit wherever the loop happened
    to be left aiohttp's tracebacks on the terminal). The signals handled, to restore afterwards."""
    import signal

    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    handled = []

    def stop(name: str) -> None:
        if summary.interrupted is None:
            summary.interrupted = name
            task.cancel()

    for sig in (signal.SIGTERM, signal.SIGINT):
        before = signal.getsignal(sig)
        try:
            loop.add_signal_handler(sig, stop, sig.name)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or no such support
            continue
        handled.append((sig, before))
    return handled


def _restore_signals(handled: list) -> None:
    """The handlers the command had before the run (the loop's removal would leave the defaults)."""
    import signal

    loop = asyncio.get_running_loop()
    for sig, before in handled:
        loop.remove_signal_handler(sig)
        if before is not None:
            signal.signal(sig, before)


def _database_intact(store: RunStore, summary: RunSummary, stop: asyncio.Event | None) -> bool:
    """Whether the run database is still the file the run opened (:meth:`RunStore.check_intact`, at most
    INTACT_FOR_S old); if not, the run stops sending (``stop``) and the summary keeps why."""
    if summary.database_error:
        return False
    try:
        store.check_intact(INTACT_FOR_S)
    except DataError as exc:
        summary.database_error = str(exc)
        if stop is not None:
            stop.set()
        return False
    return True


async def _judge_all(cfg: RunConfig, store: RunStore, summary: RunSummary, secrets: list[str], providers: dict,
                     done: set[str], limit: int | None, progress) -> None:
    """Phase two: every judge call of the factorial not yet stored, within the budget and the limit."""
    judges = {j.name: j for j in cfg.judges}
    gates = {j.name: JudgeGate() for j in cfg.judges}
    limiters = _limiters(cfg.judges)
    tasks = build_tasks(cfg, skip=done)
    start = time.monotonic()
    stop = asyncio.Event()
    sent = [0]
    reserved = [0.0]  # worst-case cost of the calls in flight, held against the budget

    def next_task() -> Task | None:
        # no await inside: the workers share one event loop, so taking a task needs no lock
        while not stop.is_set() and (limit is None or sent[0] < limit):
            task = next(tasks, None)
            if task is None:
                return None
            if gates[task.judge].dead:
                summary.skipped += 1
                continue
            sent[0] += 1
            return task
        return None

    async def worker() -> None:
        while (task := next_task()) is not None:
            if not _database_intact(store, summary, stop):
                return
            judge = judges[task.judge]
            # The hard cap: a call starts only if what is spent, what the calls in flight could still cost
            # and this call's worst case fit in the budget.
            worst = worst_case_cost(judge, task.prompt, cfg.system_prompt)
            if summary.cost_usd + reserved[0] + worst > cfg.budget_usd:
                summary.stopped_by_budget = True
                stop.set()
                return
            reserved[0] += worst
            reservation = store.reserve(task.key, worst) if worst > 0 else None
            on_billed = _charger(store, summary, task.key, worst, lambda: reserved[0], cfg.budget_usd)
            held = [reservation]
            extra = [0.0]

            def more(cost: float, key: str = task.key, held: list = held, extra: list = extra) -> bool:
                """A follow-up turn's worst case, held against the budget like the call's own."""
                if summary.cost_usd + reserved[0] + cost > cfg.budget_usd:
                    return False
                reserved[0] += cost
                extra[0] += cost
                if cost > 0:
                    held.append(store.reserve(key, cost))
                return True

            try:
                result = await _gated(gates[task.judge], lambda task=task, judge=judge, on_billed=on_billed,
                                      more=more: _call(cfg, judge, providers[task.judge], limiters[task.judge], task,
                                                       secrets, on_billed, more))
            finally:
                reserved[0] -= worst + extra[0]
            if result is None:  # the judge was stopped while this call waited
                summary.skipped += 1
                _release(store, held)
                continue
            record, at = result
            summary.retries += at.attempts - 1
            if record is not None:
                store.record(record, held)
                summary.completed += 1
                summary.cost_usd += record.cost_usd
                summary.reasks += record.reasks
                if record.parse_error and record.parse_error.startswith(TRUNCATED):
                    summary.truncated += 1
                elif record.finish_reason == "length":
                    summary.truncated_scored += 1
                count_flags(summary, record.flags)
            else:
                _release(store, held)
                _failed(store, summary, gates[task.judge], task.judge, task.key, at)
            if progress is not None:
                progress(summary)

    try:
        await asyncio.gather(*(worker() for _ in range(max(1, cfg.in_flight))))
    finally:
        for p in providers.values():
            await p.close()
        summary.seconds = time.monotonic() - start
    if limit is not None and sent[0] >= limit:
        summary.notes.append(f"stopped after {limit} call(s) (--limit); run again to go on.")


def _release(store: RunStore, held: list) -> None:
    for reservation in held:
        if reservation is not None:
            store.release(reservation)


def _charger(store: RunStore, summary: RunSummary, key: str, worst: float, reserved, budget: float):
    """``on_billed`` for one call: a reply the provider may have billed but that gave no usable completion
    counts its worst case as spent (held across crashes); another try only if the budget still fits it."""
    def on_billed() -> bool:
        if worst > 0:
            store.charge(key, worst)
            summary.cost_usd += worst
        summary.billed_failures += 1
        return summary.cost_usd + reserved() <= budget
    return on_billed


def _failed(store: RunStore, summary: RunSummary, gate: JudgeGate, name: str, key: str, at: Attempt) -> None:
    """A call that ended without a completion: recorded (asked again on resume), and a stopped judge said."""
    store.record_failure(key, at.attempts, at.error or "failed")
    summary.failed += 1
    if gate.paused:
        summary.paused.setdefault(name, gate.dead or at.error or "")
    elif at.fatal or gate.dead:
        summary.fatal.setdefault(name, gate.dead or at.error or "")


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


#: The longest wait a server's Retry-After is honoured for; asked for more, the judge is paused and the run
#: ends resumably (a worker parked for a day holds its cell and its budget reservation all that time).
MAX_RETRY_WAIT_S = 120.0


@dataclass
class Attempt:
    """How one call ended after its retries: a vetted completion, or the (redacted) error."""

    vetted: Vetted | None
    started: float = 0.0
    latency: float = 0.0
    attempts: int = 0
    error: str | None = None
    #: an error every call to this judge would meet (HTTP 400/401/403/404, or no connection at all)
    fatal: bool = False
    #: the server asked to wait longer than MAX_RETRY_WAIT_S: stop this judge for now, resume later
    pause: bool = False


async def _attempt(cfg: RunConfig, judge: Judge, provider, limiter: RateLimiter, prompt: str, system_prompt,
                   temperature: float, secrets: list[str], on_billed=None, *, history: tuple = (),
                   output: Output | None = None) -> Attempt:
    """One request with retries: exponential backoff with full jitter, at least the server's Retry-After
    (up to MAX_RETRY_WAIT_S).

    ``on_billed()`` is called for an attempt the provider may have billed without a usable completion (a
    2xx reply that was malformed, cut short or too long): it charges the call's worst case and returns
    whether the budget allows one more try."""
    attempts = 0
    last_error = ""
    connection_only = True
    while attempts <= cfg.max_retries:
        attempts += 1
        if limiter.rpm or limiter.tpm:  # a judge without limits does not wait (nor make a coroutine to say so)
            await limiter.acquire(len(prompt) // 4 + judge.max_tokens)
        started = time.time()
        t0 = time.monotonic()
        try:
            completion = await (provider.complete(prompt, system_prompt, temperature, history=history, output=output)
                                if history or output else provider.complete(prompt, system_prompt, temperature))
            vetted = vet(completion, judge, prompt, system_prompt, secrets, history)
        except ProviderError as exc:
            last_error = redact(str(exc), secrets)
            connection_only = connection_only and exc.connection
            if exc.fatal:
                return Attempt(None, attempts=attempts, error=last_error, fatal=True)
            if exc.billed and on_billed is not None and not on_billed():
                last_error += "; the budget leaves no room to ask again"
                break
            if not exc.retryable:
                break
            if exc.retry_after is not None and exc.retry_after > MAX_RETRY_WAIT_S:
                wait = "forever" if exc.retry_after == float("inf") else f"{exc.retry_after:,.0f} s"
                return Attempt(None, attempts=attempts, pause=True, error=(
                    f"{last_error}: the server asked to wait {wait} (Retry-After), more than the "
                    f"{MAX_RETRY_WAIT_S:g} s a run waits; paused, run again later to resume"))
            backoff = random.uniform(0, min(30.0, 0.25 * 2 ** (attempts - 1)))
            await asyncio.sleep(max(backoff, exc.retry_after or 0.0))
            continue
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # an unexpected client error: record it, keep the run going
            last_error = redact(f"{type(exc).__name__}: {exc}", secrets)
            connection_only = False
            break
        return Attempt(vetted, started, time.monotonic() - t0, attempts)
    if connection_only and last_error:
        last_error += f" after {attempts} attempt(s); is the server running and the base_url right?"
    return Attempt(None, attempts=attempts, error=last_error or "failed", fatal=connection_only and bool(last_error))


def reask_text(cfg: RunConfig, variant: str, reason: str) -> str:
    """The follow-up turn after an unreadable verdict: what went wrong and the form the verdict must take."""
    from ..protocols import verdict_form

    protocol, _ = cfg.protocol_for(variant)
    form = verdict_form(protocol, cfg.mode, cfg.scale_min, cfg.scale_max, cfg.output)
    return f"Your verdict could not be read ({reason}). Reply with the verdict only, written as {form}."




async def _call(cfg: RunConfig, judge: Judge, provider, limiter: RateLimiter, task: Task, secrets: list[str],
                on_billed=None, more=None):
    """One judge call, parsed and priced, with up to ``cfg.reask`` follow-up turns while its verdict cannot be
    read: (record or None, attempt). ``more(worst)`` holds a follow-up's worst case against the budget and says
    whether it fits; the follow-ups' costs and earlier answers are part of the call's record."""
    output = output_spec(cfg)
    at = await _attempt(cfg, judge, provider, limiter, task.prompt, cfg.system_prompt, task.temperature, secrets,
                        on_billed, output=output)
    if at.vetted is None:
        return None, at
    history: tuple = ()
    turns: list[dict] = []
    cost = at.vetted.cost(judge)
    tokens_in, tokens_out = at.vetted.completion.input_tokens, at.vetted.completion.output_tokens
    cached, written = at.vetted.cached_tokens, at.vetted.cache_write_tokens
    first, latency = at, at.latency
    while True:
        completion = at.vetted.completion
        verdict, error = verdict_of(cfg, judge, task, completion)
        if error is None or len(turns) >= cfg.reask:
            break
        follow_up = reask_text(cfg, task.variant.id, verdict.reason or "no verdict")
        next_history = (*history, (completion.text or "", follow_up))
        worst = worst_case_cost(judge, task.prompt, cfg.system_prompt, next_history)
        if more is None or not more(worst):
            error += "; no re-ask: the budget leaves no room"
            break
        again = await _attempt(cfg, judge, provider, limiter, task.prompt, cfg.system_prompt, task.temperature,
                               secrets, on_billed, history=next_history, output=output)
        if again.vetted is None:
            error += f"; the re-ask failed ({again.error})"
            break
        turns.append({"completion": completion.text, "finish_reason": completion.finish_reason, "error": error})
        history, at = next_history, again
        cost += at.vetted.cost(judge)
        latency += at.latency
        tokens_in += at.vetted.completion.input_tokens
        tokens_out += at.vetted.completion.output_tokens
        cached += at.vetted.cached_tokens
        written += at.vetted.cache_write_tokens
    flags = "; ".join(dict.fromkeys(f for a in (first, at) for f in a.vetted.flags))
    record = call_record(cfg, judge, task, completion, verdict, error, started=first.started, latency=latency,
                         tokens=(tokens_in, tokens_out, cached, written), cost=cost, flags=flags, turns=turns)
    return record, at


async def _generate(cfg: RunConfig, store: RunStore, summary: RunSummary, secrets: list[str],
                    providers: dict) -> None:
    """Phase one with [[systems]]: each system answers each item once (resumable, within the budget)."""
    done = store.done_generations()
    todo = [(item, g) for item in cfg.items for g in cfg.generators if cell_key(item.id, g.name) not in done]
    limiters = _limiters(cfg.generators)
    gates = {g.name: JudgeGate() for g in cfg.generators}
    it = iter(todo)
    reserved = [0.0]

    async def one(item, gen):
        if summary.database_error or not _database_intact(store, summary, None):
            return False
        prompt = generation_prompt(cfg, item)
        worst = worst_case_cost(gen, prompt)
        if summary.cost_usd + reserved[0] + worst > cfg.budget_usd:
            summary.stopped_by_budget = True
            return False
        key = cell_key(item.id, gen.name)
        reserved[0] += worst
        reservation = store.reserve(f"generate|{key}", worst) if worst > 0 else None

        on_billed = _charger(store, summary, f"generate|{key}", worst, lambda: reserved[0], cfg.budget_usd)

        async def call():
            return None, await _attempt(cfg, gen, providers[gen.name], limiters[gen.name], prompt, None,
                                        cfg.generation_temperature, secrets, on_billed)

        try:
            result = await _gated(gates[gen.name], call)
        finally:
            reserved[0] -= worst
        if result is None or result[1].vetted is None:
            if reservation is not None:
                store.release(reservation)
            if result is None:
                summary.skipped += 1
                return True
            at = result[1]
            summary.retries += at.attempts - 1
            _failed(store, summary, gates[gen.name], gen.name, f"generate|{key}", at)
            return True
        at = result[1]
        completion = at.vetted.completion
        summary.retries += at.attempts - 1
        cost = at.vetted.cost(gen)
        store.record_response((key, item.id, gen.name, prompt_hash(prompt), completion.text, completion.model,
                               completion.response_id, at.started, time.time(), at.latency, completion.input_tokens,
                               completion.output_tokens, cost), reservation)
        count_flags(summary, "; ".join(at.vetted.flags))
        summary.cost_usd += cost
        summary.generated += 1
        return True

    async def worker():
        for item, gen in it:
            if not await one(item, gen):
                return

    try:
        await asyncio.gather(*(worker() for _ in range(max(1, cfg.in_flight))))
    finally:
        for p in providers.values():
            await p.close()


@dataclass
class RunPlan(Result):
    """What ``run --dry-run`` says: the judge calls planned, stored and to send (and the generations to send),
    their worst-case cost beside what is spent and the budget (``budget_usd`` None: no cap), whether it fits,
    the notes on how it was priced, and with ``--batch`` each judge's batch (``batches``)."""

    config: str
    database: str
    planned: int
    already_done: int
    to_send: int
    generations_to_send: int
    spent_usd: float
    worst_case_usd: float
    budget_usd: float | None
    fits_budget: bool
    notes: list[str]
    batches: list[dict] | None = None

    def to_dict(self) -> dict:
        out = {"config": self.config, "database": self.database, "planned": self.planned,
               "already_done": self.already_done, "to_send": self.to_send,
               "generations_to_send": self.generations_to_send, "spent_usd": self.spent_usd,
               "worst_case_usd": self.worst_case_usd, "budget_usd": self.budget_usd, "fits_budget": self.fits_budget,
               "notes": list(self.notes)}
        if self.batches is not None:
            out["batches"] = self.batches
        return out


def dry_run(cfg: RunConfig) -> RunPlan:
    """What ``run`` would do now, without a call: calls planned, stored, to send, and their worst-case cost.

    The database is read if it exists and never created. With [[systems]] the responses are not known
    yet, so the judge calls are priced on the prompts without them (the note says so).
    """
    done: set[str] = set()
    spent = 0.0
    generations: set[str] = set()
    if cfg.database.exists():
        store = RunStore(cfg.database)
        try:
            done, spent, generations = store.done_keys(), store.cost(), store.done_generations()
        finally:
            store.close()
    judges = {j.name: j.at_batch_price() if cfg.batch else j for j in cfg.judges}
    to_send, worst = 0, 0.0
    if cfg.generators:  # responses not generated yet are priced at the longest a generator's reply is accepted
        known = _stored_responses(cfg)
        filler = {(i.id, g.name): known.get((i.id, g.name), "x" * text_limit(g.max_tokens))
                  for i in cfg.items for g in cfg.generators}
        cfg = replace(cfg, responses=filler)
    pending: set[str] = set()
    if cfg.batch and cfg.database.exists():  # lines of batches still open are neither stored nor to send
        store = RunStore(cfg.database)
        try:
            pending = store.pending_batch_keys() if store.has_table("batch_requests") else set()
        finally:
            store.close()
    todo = []
    for task in build_tasks(cfg, skip=done | pending):
        to_send += 1
        worst += worst_case_cost(judges[task.judge], task.prompt, cfg.system_prompt)
        if cfg.batch:
            todo.append(task)
    gen_todo = [(i, g) for i in cfg.items for g in cfg.generators if cell_key(i.id, g.name) not in generations]
    gen_worst = sum(worst_case_cost(g, generation_prompt(cfg, i)) for i, g in gen_todo)
    notes = []
    if gen_todo:
        notes.append("judge calls on responses not generated yet are priced as if each were as long as a reply "
                     "of the generator's max_tokens is accepted (the run refuses longer ones).")
    budget = None if cfg.budget_usd == float("inf") else cfg.budget_usd
    fits = budget is None or spent + worst + gen_worst <= budget
    batches = None
    if cfg.batch:
        from .batch import batch_plan

        batches = batch_plan(cfg, todo)
        if pending:
            notes.append(f"{len(pending)} call(s) wait in batches submitted earlier: their results are read first.")
        notes.append("priced at the batch price (price_batch_factor of each judge's prices).")
    return RunPlan(str(cfg.path), str(cfg.database), count_tasks(cfg), len(done), to_send, len(gen_todo), spent,
                   worst + gen_worst, budget, fits, notes, batches)


def _stored_responses(cfg: RunConfig) -> dict[tuple[str, str], str]:
    if not cfg.database.exists():
        return {}
    store = RunStore(cfg.database)
    try:
        return store.responses()
    finally:
        store.close()


def run(cfg: RunConfig, **kw) -> RunSummary:
    """Run (or resume) the factorial: synchronous calls, or the batch APIs with ``cfg.batch``."""
    return asyncio.run(run_async(cfg, **kw))
