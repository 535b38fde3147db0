"""Batch collection: the missing calls of a run through the providers' batch APIs, at their batch price.

``[run] batch = true`` (or ``evalgauge run CONFIG --batch``) sends each judge's missing cells as batches:
OpenAI's Batch API (a JSONL file uploaded to ``/files``, then ``/batches``; also offered by OpenAI-compatible
gateways such as the LiteLLM proxy) or Anthropic's Message Batches (``/v1/messages/batches``). Each request's
``custom_id`` is a hash of its cell key, stored with the key.

Crash safety, in the run database (:mod:`evalgauge.store`): a batch and the worst case of every line (at the
batch price) are committed before it is submitted; its provider id is committed the moment the provider answers;
a batch whose submission was not confirmed is looked up at the provider before anything is sent again (OpenAI:
by the ``metadata`` it was created with; Anthropic: the unclaimed batch of its size created since), so a batch
is never submitted twice; each result line is recorded with its reservation released in one transaction, so a
kill -9 at any point loses nothing and a resumed run reads only the lines not yet recorded. Results pass the same
reply gate as synchronous calls (:func:`evalgauge.collect.reply.vet`: redaction, bounds, plausible usage) and the
same verdict reading. Lines that failed or expired are sent again in a later batch (``batch_failed =
"rebatch"``, up to ``max_retries`` rounds) or as synchronous calls (``"sync"``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from ..errors import DataError
from ..store import RunStore
from .calls import call_record, count_flags, output_spec, verdict_of, worst_case_cost
from .config import Judge, RunConfig, check_batch_files
from .providers import AnthropicProvider, OpenAIProvider, ProviderError, make_provider, status_error
from .reply import redact, vet
from .tasks import Task, build_tasks

#: requests in one batch at most (OpenAI: 50,000 a file; Anthropic: 100,000 a batch)
MAX_REQUESTS = {"openai": 50_000, "anthropic": 100_000}
#: bytes of one batch's requests at most (OpenAI: a 200 MB file; Anthropic: 256 MB), with room
MAX_BYTES = 180 * 2**20
#: bytes of a batch endpoint's JSON answer at most (a batch's state, a page of the list of batches)
ANSWER_BYTES = 16 * 2**20
#: a batch's states at the provider that mean it has ended (its results can be read)
_ENDED = {"openai": {"completed", "failed", "expired", "cancelled"}, "anthropic": {"ended"}}


def custom_id(key: str) -> str:
    """A request's id in a batch: a stable hash of its cell key (``^[a-zA-Z0-9_-]{1,64}$``, as both APIs ask)."""
    return "eg-" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:40]


@dataclass
class Line:
    """One result line: its custom id, and the answer's body or why there is none."""

    custom_id: str
    body: dict | None
    error: str | None = None


@dataclass
class State:
    """A batch at the provider: its status, whether it has ended, its request counts and where its results are."""

    status: str
    ended: bool
    counts: dict
    results: tuple[str, ...] = ()
    #: why the provider refused the whole batch (OpenAI's "failed": the file did not validate)
    refused: str | None = None


class _BatchClient:
    """One judge's batch endpoints, over the same session, key header and bounds as its synchronous calls."""

    protocol = "openai"

    def __init__(self, judge: Judge, timeout: float, retries: int = 6):
        self.judge = judge
        self.retries = retries
        self.provider = make_provider(judge, timeout)
        self.base = self.provider.url.rsplit("/", 2)[0] if judge.provider == "openai" else \
            self.provider.url.removesuffix("/v1/messages")

    async def _get(self, url: str, stream: bool = False):
        """A GET (idempotent): a 429, a 5xx or a dropped connection is asked again with backoff, at least the
        server's Retry-After, up to ``retries`` times."""
        import random

        for attempt in range(self.retries + 1):
            try:
                return await self._request("GET", url, stream=stream)
            except ProviderError as exc:
                if not exc.retryable or attempt == self.retries:
                    raise
                wait = random.uniform(0, min(30.0, 0.25 * 2**attempt))
                await asyncio.sleep(max(wait, min(exc.retry_after or 0.0, 120.0)))
        raise AssertionError("unreachable")

    async def _request(self, method: str, url: str, *, body: object = None, form=None, stream: bool = False):
        """One request to the batch endpoints; a POST is never repeated here (a batch created twice costs twice):
        a batch whose creation was not confirmed is looked for before it is sent again."""
        import aiohttp

        from .providers import _json_or_text, connection_error, redirect_error

        session = self.provider._session or self.provider._open()
        headers = {k: v for k, v in self.provider._headers.items() if k != "Content-Type" or body is not None}
        # a file up or down (up to 256 MB) may take longer than one call: the timeout is on each read instead
        long = stream or form is not None
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.provider._timeout,
                                        sock_read=self.provider._timeout) if long else None
        try:
            resp = await session.request(method, url, data=form if form is not None else (
                json.dumps(body) if body is not None else None), headers=headers, proxy=self.provider._proxy,
                allow_redirects=False, **({"timeout": timeout} if timeout else {}))
        except (TimeoutError, aiohttp.ClientConnectionError) as exc:
            raise connection_error(self.judge, exc) from None
        try:
            if 300 <= resp.status < 400:  # not followed: the key header would go wherever it points
                raise redirect_error(self.judge, url, resp.status, resp.headers.get("Location"))
            if stream and resp.status < 300:
                return resp
            raw = await self._bounded(resp, url)
        except (TimeoutError, aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
            resp.release()
            raise connection_error(self.judge, exc) from None
        except BaseException:
            resp.release()
            raise
        resp.release()
        if resp.status >= 400:
            raise status_error(self.judge, resp.status, _json_or_text(raw), resp.headers)
        try:
            return json.loads(raw)
        except ValueError:
            raise ProviderError(f"judge '{self.judge.name}': the batch endpoint {url} answered with no JSON",
                                retryable=True) from None

    async def _bounded(self, resp, url: str) -> bytes:
        """A JSON answer's body, refused past :data:`ANSWER_BYTES` without reading the rest."""
        chunks, size = [], 0
        while chunk := await resp.content.read(1 << 16):
            size += len(chunk)
            if size > ANSWER_BYTES:
                raise ProviderError(f"judge '{self.judge.name}': the batch endpoint {url[:120]} answered with more "
                                    f"than {ANSWER_BYTES:,} bytes; not read further", retryable=False)
            chunks.append(chunk)
        return b"".join(chunks)

    async def lines(self, url: str):
        """The JSON lines of a results file, read as they arrive (a line at most the bounded reply's size)."""
        import aiohttp

        from .limits import body_limit
        from .providers import connection_error

        resp = await self._get(url, stream=True)
        limit = body_limit(self.judge.max_tokens) + 4096
        buffer = b""
        try:
            async for chunk in resp.content.iter_chunked(1 << 16):
                buffer += chunk
                *whole, buffer = buffer.split(b"\n")
                if len(buffer) > limit:
                    raise ProviderError(f"judge '{self.judge.name}': a batch result line of more than {limit:,} "
                                        "bytes; not read further", retryable=False)
                for raw in whole:
                    if raw.strip():
                        yield raw
            if buffer.strip():
                yield buffer
        except (TimeoutError, aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
            # cut off while reading: the lines recorded stay recorded, the rest are read on the next pass
            raise connection_error(self.judge, exc) from None
        finally:
            resp.release()

    def same_origin(self, url: str) -> bool:
        """Whether ``url`` is on the judge's own endpoint: the key header goes nowhere else."""
        from urllib.parse import urlsplit

        a, b = urlsplit(url), urlsplit(self.base)
        return (a.scheme, a.netloc) == (b.scheme, b.netloc)

    async def close(self) -> None:
        await self.provider.close()


class OpenAIBatches(_BatchClient):
    """OpenAI's Batch API: ``POST /files`` (purpose "batch"), ``POST /batches``, ``GET /batches/{id}``, the
    output and error files' content."""

    protocol = "openai"

    async def submit(self, local_id: str, lines: list[tuple[str, dict]]) -> tuple[str, str]:
        import aiohttp

        payload = "".join(json.dumps({"custom_id": c, "method": "POST", "url": "/v1/chat/completions", "body": b})
                          + "\n" for c, b in lines).encode("utf-8")
        form = aiohttp.FormData()
        form.add_field("purpose", "batch")
        form.add_field("file", payload, filename=f"{local_id}.jsonl", content_type="application/jsonl")
        uploaded = await self._request("POST", f"{self.base}/files", form=form)
        file_id = uploaded.get("id") if isinstance(uploaded, dict) else None
        if not isinstance(file_id, str):
            raise ProviderError(f"judge '{self.judge.name}': the file upload answered without an id", retryable=True)
        made = await self._request("POST", f"{self.base}/batches", body={
            "input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h",
            "metadata": {"evalgauge_batch": local_id}})
        return _id_of(self.judge, made), file_id

    async def find(self, local_id: str, requests: int, since: float, claimed: set[str]) -> str | None:
        """The batch created with this local id in its metadata, if the provider has one."""
        url, pages = f"{self.base}/batches?limit=100", 0
        while url and pages < 20:
            page = await self._get(url)
            data = page.get("data") if isinstance(page, dict) else None
            for b in data if isinstance(data, list) else []:
                meta = b.get("metadata") if isinstance(b, dict) else None
                if isinstance(meta, dict) and meta.get("evalgauge_batch") == local_id:
                    return _id_of(self.judge, b)
            last = data[-1].get("id") if isinstance(data, list) and data and isinstance(data[-1], dict) else None
            more = isinstance(page, dict) and page.get("has_more") is True
            url = f"{self.base}/batches?limit=100&after={last}" if more and last else None
            pages += 1
        return None

    async def state(self, batch_id: str) -> State:
        b = await self._get(f"{self.base}/batches/{batch_id}")
        status = str(b.get("status")) if isinstance(b, dict) else "unknown"
        counts = b.get("request_counts") if isinstance(b, dict) and isinstance(b.get("request_counts"), dict) else {}
        files = tuple(f"{self.base}/files/{b[k]}/content" for k in ("output_file_id", "error_file_id")
                      if isinstance(b, dict) and isinstance(b.get(k), str))
        refused = None
        if status == "failed":  # the input did not validate: no line ran, and sending it again fails the same way
            errors = b.get("errors") if isinstance(b, dict) and isinstance(b.get("errors"), dict) else {}
            data = errors.get("data") if isinstance(errors.get("data"), list) else []
            said = [str(e.get("message") or e.get("code")) for e in data if isinstance(e, dict)][:3]
            refused = "; ".join(said) or "no reason given"
        return State(status, status in _ENDED["openai"], counts, files, refused)

    def line(self, raw: dict) -> Line:
        cid = raw.get("custom_id")
        response = raw.get("response") if isinstance(raw.get("response"), dict) else None
        error = raw.get("error")
        if response is not None and response.get("status_code") == 200 and isinstance(response.get("body"), dict):
            return Line(str(cid), response["body"])
        why = error.get("message") or error.get("code") if isinstance(error, dict) else None
        if why is None and response is not None:
            body = response.get("body")
            detail = body.get("error") if isinstance(body, dict) else None
            why = (detail.get("message") if isinstance(detail, dict) else None) or f"HTTP {response.get('status_code')}"
        return Line(str(cid), None, str(why or "no response"))


class AnthropicBatches(_BatchClient):
    """Anthropic's Message Batches: ``POST /v1/messages/batches``, ``GET /v1/messages/batches/{id}``, its
    ``results_url``."""

    protocol = "anthropic"

    async def submit(self, local_id: str, lines: list[tuple[str, dict]]) -> tuple[str, str | None]:
        made = await self._request("POST", f"{self.base}/v1/messages/batches",
                                   body={"requests": [{"custom_id": c, "params": b} for c, b in lines]})
        return _id_of(self.judge, made), None

    async def find(self, local_id: str, requests: int, since: float, claimed: set[str]) -> str | None:
        """The oldest batch of this many requests created since the submission began that no other batch of
        the run claims (Message Batches keep no metadata)."""
        page = await self._get(f"{self.base}/v1/messages/batches?limit=100")
        data = page.get("data") if isinstance(page, dict) else None
        found = []
        for b in data if isinstance(data, list) else []:
            if not isinstance(b, dict) or b.get("id") in claimed:
                continue
            counts = b.get("request_counts") if isinstance(b.get("request_counts"), dict) else {}
            total = sum(v for v in counts.values() if isinstance(v, int))
            when = _timestamp(b.get("created_at"))
            if total == requests and when is not None and when >= since - 60:
                found.append((when, b["id"]))
        return min(found)[1] if found else None

    async def state(self, batch_id: str) -> State:
        b = await self._get(f"{self.base}/v1/messages/batches/{batch_id}")
        status = str(b.get("processing_status")) if isinstance(b, dict) else "unknown"
        counts = b.get("request_counts") if isinstance(b, dict) and isinstance(b.get("request_counts"), dict) else {}
        url = b.get("results_url") if isinstance(b, dict) else None
        if isinstance(url, str) and not self.same_origin(url):
            raise ProviderError(f"judge '{self.judge.name}': batch {batch_id}'s results_url is on another host "
                                f"({url[:80]}); the key is sent to the judge's endpoint only", retryable=False,
                                fatal=True)
        results = (url,) if isinstance(url, str) else (f"{self.base}/v1/messages/batches/{batch_id}/results",)
        return State(status, status in _ENDED["anthropic"], counts, results if status == "ended" else ())

    def line(self, raw: dict) -> Line:
        cid = raw.get("custom_id")
        result = raw.get("result") if isinstance(raw.get("result"), dict) else {}
        kind = result.get("type")
        if kind == "succeeded" and isinstance(result.get("message"), dict):
            return Line(str(cid), result["message"])
        error = result.get("error")
        detail = error.get("error") if isinstance(error, dict) and isinstance(error.get("error"), dict) else error
        why = detail.get("message") if isinstance(detail, dict) else None
        return Line(str(cid), None, f"{kind or 'no result'}" + (f": {why}" if why else ""))


class FileBatches(OpenAIBatches):
    """Batches exchanged as files in a directory, for an offline runner such as ``vllm run-batch``: a batch is
    written as ``DIR/<id>.jsonl`` in OpenAI's batch format, and has ended when ``DIR/<id>.out.jsonl`` holds a
    result line (OpenAI's output format, which ``vllm run-batch`` writes) for each of its requests."""

    protocol = "file"

    def __init__(self, judge: Judge, timeout: float, directory: Path):
        super().__init__(judge, timeout, 0)
        self.directory = directory

    def _paths(self, batch_id: str) -> tuple[Path, Path]:
        stem = batch_id.removesuffix(".jsonl")
        return self.directory / f"{stem}.jsonl", self.directory / f"{stem}.out.jsonl"

    async def submit(self, local_id: str, lines: list[tuple[str, dict]]) -> tuple[str, str | None]:
        from ..outputs import atomic_write_text

        self.directory.mkdir(parents=True, exist_ok=True)
        path, _ = self._paths(local_id)
        atomic_write_text(path, "".join(json.dumps({"custom_id": c, "method": "POST", "url": "/v1/chat/completions",
                                                    "body": b}) + "\n" for c, b in lines))
        return path.name, None

    async def find(self, local_id: str, requests: int, since: float, claimed: set[str]) -> str | None:
        path, _ = self._paths(local_id)
        return path.name if path.is_file() and _count_lines(path) == requests else None

    async def state(self, batch_id: str) -> State:
        given, results = self._paths(batch_id)
        done = _count_lines(results) if results.is_file() else 0
        wanted = _count_lines(given)
        ended = done >= wanted
        return State("completed" if ended else "waiting", ended, {"total": wanted, "completed": done},
                     (str(results),) if ended else ())

    async def lines(self, url: str):
        with open(url, "rb") as handle:
            for raw in handle:
                if raw.strip():
                    yield raw

    def line(self, raw: dict) -> Line:
        response = raw.get("response")
        if isinstance(response, dict) and "body" not in response and "choices" in response:
            raw = {**raw, "response": {"status_code": 200, "body": response}}  # a bare completion as the response
        return super().line(raw)

    def where(self, batch_id: str) -> str:
        given, results = self._paths(batch_id)
        return f"{given} -> {results}"


def _count_lines(path: Path) -> int:
    with open(path, "rb") as handle:
        return sum(1 for raw in handle if raw.strip())


def _id_of(judge: Judge, made: object) -> str:
    batch_id = made.get("id") if isinstance(made, dict) else None
    if not isinstance(batch_id, str) or not batch_id:
        raise ProviderError(f"judge '{judge.name}': the batch endpoint answered without a batch id", retryable=True)
    return batch_id


def _timestamp(value: object) -> float | None:
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def batch_client(judge: Judge, timeout: float, directory: Path | None = None, retries: int = 6) -> _BatchClient:
    """The judge's batch endpoints, or with ``directory`` the batch files exchanged there (:class:`FileBatches`,
    OpenAI's format: for OpenAI-compatible judges)."""
    if directory is not None:
        check_batch_files((judge,), "--batch-dir")
        return FileBatches(judge, timeout, directory)
    kind = AnthropicBatches if judge.provider == "anthropic" else OpenAIBatches
    return kind(judge, timeout, retries)


def request_body(client: _BatchClient, cfg: RunConfig, task: Task) -> dict:
    """A batch line's request: the synchronous call's body (a structured output in OpenAI's json_schema)."""
    output = output_spec(cfg)
    provider = client.provider
    if isinstance(provider, OpenAIProvider):
        return provider.request(task.prompt, cfg.system_prompt, task.temperature, output=output,
                                dialect="json_schema" if output is not None else None)
    assert isinstance(provider, AnthropicProvider)
    return provider.request(task.prompt, cfg.system_prompt, task.temperature, output=output)


def plan_batches(cfg: RunConfig, tasks: list[Task]) -> list[tuple[str, list[Task]]]:
    """The batches the tasks go in: each judge's in order, at most the provider's (or ``batch_size``) requests
    and about 180 MB a batch."""
    by_judge: dict[str, list[Task]] = {}
    for task in tasks:
        by_judge.setdefault(task.judge, []).append(task)
    judges = {j.name: j for j in cfg.judges}
    out = []
    for name, mine in by_judge.items():
        size = min(cfg.batch_size or MAX_REQUESTS[judges[name].provider], MAX_REQUESTS[judges[name].provider])
        chunk: list[Task] = []
        nbytes = 0
        for task in mine:
            weight = len(task.prompt.encode("utf-8")) + len((cfg.system_prompt or "").encode("utf-8")) + 512
            if chunk and (len(chunk) >= size or nbytes + weight > MAX_BYTES):
                out.append((name, chunk))
                chunk, nbytes = [], 0
            chunk.append(task)
            nbytes += weight
        if chunk:
            out.append((name, chunk))
    return out


async def collect_batches(cfg: RunConfig, store: RunStore, summary, secrets: list[str], clients: dict,
                          limit: int | None, progress) -> list[str]:
    """Every missing call of the factorial through the batch APIs, resuming the batches an earlier run left open;
    the keys still missing when the rounds are over (failed lines when ``batch_failed = "sync"``)."""
    tries: dict[str, int] = {}
    try:
        return await _rounds(cfg, store, summary, secrets, clients, limit, progress, tries)
    except ProviderError as exc:  # an endpoint that refused or stayed down: what was sent and recorded is kept
        said = redact(str(exc), secrets)
        if exc.fatal:
            summary.fatal["batch API"] = said
        else:
            summary.paused["batch API"] = (f"{said}; the batches already submitted are kept by id: run again "
                                           "later to resume")
        return []


async def _rounds(cfg: RunConfig, store: RunStore, summary, secrets: list[str], clients: dict, limit: int | None,
                  progress, tries: dict[str, int]) -> list[str]:
    """Rounds of (read every open batch, submit what is missing and fits the budget) until nothing is left to
    send; the keys still missing."""
    judges = {j.name: j for j in cfg.judges}
    priced = {name: j.at_batch_price() for name, j in judges.items()}
    tasks = {t.key: t for t in build_tasks(cfg)}
    sent = 0
    poll = _Poll(cfg.batch_poll_s)
    while True:
        await _resume(cfg, store, summary, secrets, clients, tasks, priced, progress, poll)
        if summary.database_error or summary.interrupted or summary.paused:
            return []
        skip = store.done_keys() | store.pending_batch_keys()
        missing = [t for k, t in tasks.items() if k not in skip]
        if cfg.batch_failed == "sync":
            missing = [t for t in missing if tries.get(t.key, 0) == 0]
        else:
            missing = [t for t in missing if tries.get(t.key, 0) <= cfg.max_retries]
        if limit is not None:
            missing = missing[:max(0, limit - sent)]
        if not missing:
            summary.stopped_by_budget = False
            break
        try:  # the run database is still the file the run opened (RunStore.check_intact)
            store.check_intact()
        except DataError as exc:
            summary.database_error = str(exc)
            return []
        submitted = 0
        summary.stopped_by_budget = False
        spent = store.cost()  # what is recorded, lost in flight, and held by the batches still open
        for name, chunk in plan_batches(cfg, missing):
            worst = [worst_case_cost(priced[name], t.prompt, cfg.system_prompt) for t in chunk]
            fit, total = 0, 0.0
            for w in worst:  # the batch's lines that fit the budget with everything already held
                if spent + total + w > cfg.budget_usd:
                    break
                fit, total = fit + 1, total + w
            if fit < len(chunk):
                summary.stopped_by_budget = True
            if not fit:
                continue
            chunk = chunk[:fit]
            for t in chunk:
                tries[t.key] = tries.get(t.key, 0) + 1
            await _submit(store, clients[name], name, chunk, worst[:fit], cfg)
            summary.batches += 1
            spent += total
            submitted += len(chunk)
        sent += submitted
        if not submitted:
            break
    done = store.done_keys()
    left = [k for k in tasks if k not in done]
    summary.failed = sum(1 for k in left if tries.get(k, 0) > 0)  # failed in every batch they were sent in
    return left


async def _submit(store: RunStore, client: _BatchClient, judge: str, chunk: list[Task], worst: list[float],
                  cfg: RunConfig) -> None:
    """Commit the batch and its lines' worst cases, then send it and commit its provider id."""
    local_id = f"b{int(time.time() * 1000):x}{os.urandom(3).hex()}"
    lines = [(custom_id(t.key), t.key, w) for t, w in zip(chunk, worst, strict=True)]
    store.open_batch(local_id, judge, client.protocol, lines)
    body = [(c, request_body(client, cfg, t)) for (c, _, _), t in zip(lines, chunk, strict=True)]
    batch_id, file_id = await client.submit(local_id, body)
    store.batch_submitted(local_id, batch_id, file_id)


class _Poll:
    """Waits between polls: ``first`` seconds, doubling to 8 times that while nothing ends."""

    def __init__(self, first: float):
        self.first, self.wait = first, first

    async def sleep(self) -> None:
        await asyncio.sleep(self.wait)
        self.wait = min(2 * self.wait, 8 * self.first)

    def reset(self) -> None:
        self.wait = self.first


async def _resume(cfg, store: RunStore, summary, secrets, clients, tasks, priced, progress, poll: _Poll) -> None:
    """Wait for every open batch of the run to end and read its lines (a batch never confirmed as submitted is
    found at the provider, or submitted now). A batch holding cells this configuration does not have (another
    stage's design of an adaptive run) is left for the run that has them: its lines stay reserved."""
    deferred: set[str] = set()
    while True:
        open_ = [b for b in store.batches() if b["state"] != "ingested" and b["judge"] in clients
                 and b["local_id"] not in deferred]
        if not open_:
            return
        ended = False
        claimed = {b["batch_id"] for b in store.batches() if b["batch_id"]}
        for b in open_:
            client = clients[b["judge"]]
            if b["state"] == "new":
                if not await _confirm(store, client, b, claimed, cfg, tasks):
                    deferred.add(b["local_id"])
                continue
            state = await client.state(b["batch_id"])
            if not state.ended:
                continue
            store.batch_state(b["local_id"], "ended", json.dumps(state.counts))
            whole = await _ingest(cfg, store, summary, secrets, client, b, state, tasks, priced[b["judge"]],
                                  progress)
            if summary.database_error or summary.interrupted:
                return
            if whole:
                store.batch_state(b["local_id"], "ingested")
            else:
                deferred.add(b["local_id"])
            if state.refused is not None:
                raise ProviderError(f"judge '{b['judge']}': the provider refused batch {b['batch_id']} "
                                    f"({state.refused}); its lines were not run or billed. Fix the cause (see "
                                    "`evalgauge run --dry-run`) and run again.", retryable=False, fatal=True)
            ended = True
        if ended:
            poll.reset()
            continue
        waiting = [b for b in open_ if b["protocol"] == "file" and b["state"] == "submitted"]
        if waiting:  # an offline runner's results are not polled for: the run ends, and is run again later
            files = "; ".join(clients[b["judge"]].where(b["batch_id"]) for b in waiting)
            summary.paused["batch files"] = (f"{len(waiting)} batch file(s) wait for their results ({files}); run "
                                             "them (e.g. `vllm run-batch -i IN -o OUT --model MODEL`), then run "
                                             "this command again to read them")
            return
        await poll.sleep()


async def _confirm(store: RunStore, client: _BatchClient, b: dict, claimed: set[str], cfg, tasks) -> bool:
    """A batch committed but never confirmed: the provider's, if it took it; else submitted now (False: it holds
    cells this configuration cannot render, so it waits for the run that can)."""
    found = await client.find(b["local_id"], b["requests"], b["created_at"], claimed)
    if found is not None:
        store.batch_submitted(b["local_id"], found, None)
        claimed.add(found)
        return True
    lines = store.batch_lines(b["local_id"])
    if any(key not in tasks for key, _ in lines.values()):
        return False
    body = [(c, request_body(client, cfg, tasks[key])) for c, (key, _) in lines.items()]
    batch_id, file_id = await client.submit(b["local_id"], body)
    store.batch_submitted(b["local_id"], batch_id, file_id)
    claimed.add(batch_id)
    return True


async def _ingest(cfg, store: RunStore, summary, secrets, client: _BatchClient, b: dict, state: State, tasks,
                  judge: Judge, progress) -> bool:
    """Record every line of an ended batch not yet recorded, each in its own transaction; a line of the batch
    the results do not hold (a batch that failed or was cancelled) fails with the batch's status. A results file
    cut off while read is read again (its recorded lines skipped), with backoff, up to the client's retries. False
    when lines of cells this configuration does not have are left pending (for the run that has them)."""
    waiting = store.batch_lines(b["local_id"])
    for url in state.results:
        for attempt in range(client.retries + 1):
            try:
                async for raw in client.lines(url):
                    if not _take(cfg, store, summary, secrets, client, b, raw, waiting, tasks, judge):
                        return False
                    if progress is not None:
                        progress(summary)
                break
            except ProviderError as exc:
                if not exc.retryable or attempt == client.retries:
                    raise
                await asyncio.sleep(min(30.0, 0.25 * 2**attempt))
    why = f"batch {b['batch_id']} ended '{state.status}' without this line's result"
    for cid, (key, reservation) in waiting.items():
        if key in tasks:
            store.fail_batch_line(cid, key, reservation, why)
            summary.batch_line_failures += 1
    return not any(key not in tasks for key, _ in waiting.values())


def _take(cfg, store: RunStore, summary, secrets, client: _BatchClient, b: dict, raw: bytes, waiting: dict, tasks,
          judge: Judge) -> bool:
    """One result line: recorded through the reply gate, or failed (its cell asked again); False when the run
    database can no longer be written."""
    try:
        parsed = json.loads(raw)
    except ValueError:
        return True  # a line that is not JSON cannot be matched to its request: its cell is asked again
    line = client.line(parsed) if isinstance(parsed, dict) else Line("", None, "not an object")
    if line.custom_id not in waiting:
        return True  # recorded before a crash or an earlier read, or not this run's
    key, reservation = waiting[line.custom_id]
    task = tasks.get(key)
    if task is None:
        return True  # another stage's cell: left pending
    del waiting[line.custom_id]
    if line.body is None:
        store.fail_batch_line(line.custom_id, key, reservation, redact(f"batch line: {line.error}", secrets))
        summary.batch_line_failures += 1
        return True
    try:
        vetted = vet(client.provider.read(line.body, output_spec(cfg)), judge, task.prompt, cfg.system_prompt,
                     secrets)
    except ProviderError as exc:  # billed, but not a usable completion: its worst case is spent
        worst = worst_case_cost(judge, task.prompt, cfg.system_prompt)
        store.fail_batch_line(line.custom_id, key, reservation, redact(str(exc), secrets), charged=worst)
        summary.batch_line_failures += 1
        summary.cost_usd += worst
        return True
    completion = vetted.completion
    verdict, error = verdict_of(cfg, judge, task, completion)
    record = call_record(cfg, judge, task, completion, verdict, error, started=b["created_at"],
                         latency=time.time() - b["created_at"], cost=vetted.cost(judge),
                         tokens=(completion.input_tokens, completion.output_tokens, vetted.cached_tokens,
                                 vetted.cache_write_tokens), flags="; ".join(vetted.flags), batch=True)
    try:
        store.record_batch_line(line.custom_id, record, reservation)
    except DataError as exc:
        summary.database_error = str(exc)
        return False
    summary.completed += 1
    summary.cost_usd += record.cost_usd
    count_flags(summary, record.flags)
    return True


def batch_plan(cfg: RunConfig, tasks: list[Task]) -> list[dict]:
    """What ``--batch --dry-run`` shows: each batch's judge, requests and worst case at the batch price."""
    priced = {j.name: j.at_batch_price() for j in cfg.judges}
    return [{"judge": name, "requests": len(chunk),
             "worst_case_usd": sum(worst_case_cost(priced[name], t.prompt, cfg.system_prompt) for t in chunk)}
            for name, chunk in plan_batches(cfg, tasks)]
