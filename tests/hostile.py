"""A hostile OpenAI-compatible server on loopback: every reply class a real endpoint can send.

It runs in a thread with its own event loop, answers each chat completion with a good reply or, for a
share of the calls, the fault its ``mode`` names, and keeps the books a provider would: every 200 it
sends is billed at the tokens it really served (4 bytes a token in, the reply's tokens out).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import zlib

from aiohttp import web

MODES = ("good", "echo", "no_usage", "inflated", "surrogate", "retry_after", "truncated", "bad_utf8", "short",
         "huge", "control", "not_object", "long", "redirect", "stall")
#: how long a "stall" reply waits after its first bytes: past any timeout_s the tests set
STALL_S = 4.0


class HostileServer:
    def __init__(self, mode: str, key: str, *, share: float = 1.0, first_only: bool = False,
                 price_in: float = 1.0, price_out: float = 2.0, redirect_to: str | None = None,
                 delay: float = 0.0, on_request=None):
        assert mode in MODES
        self.mode, self.key, self.share, self.first_only = mode, key, share, first_only
        #: "redirect": where the 307 points (another origin); every request's headers are kept in ``headers``
        self.redirect_to = redirect_to
        #: seconds each reply waits; ``on_request(n)`` is called with the request count as each arrives
        self.delay, self.on_request = delay, on_request
        self.headers: list[dict[str, str]] = []
        #: when each request arrived (time.monotonic)
        self.arrivals: list[float] = []
        self.price_in, self.price_out = price_in, price_out
        self.requests = 0
        self.billed_usd = 0.0
        self.seen: dict[str, int] = {}
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the hostile server did not start")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._handle)
        app.router.add_post("/v1/messages", self._handle)  # Anthropic's Messages API
        self._runner = web.AppRunner(app, shutdown_timeout=0.5)  # a stalled reply does not hold up stop()
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    def stop(self) -> None:
        async def down():
            await self._runner.cleanup()
            # a stalled reply's handler may still sleep: cancel it here rather than leave it to the loop's end
            pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        asyncio.run_coroutine_threadsafe(down(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _faulty(self, prompt: str) -> bool:
        n = self.seen.get(prompt, 0)
        self.seen[prompt] = n + 1
        if self.first_only and n > 0:
            return False
        # a deterministic share of the prompts, so runs are reproducible
        return (zlib.crc32(prompt.encode()) % 1000) < self.share * 1000

    def _bill(self, prompt: str, out_tokens: int, in_tokens: int | None = None) -> None:
        tokens_in = len(prompt.encode()) // 4 if in_tokens is None else in_tokens
        self.billed_usd += (tokens_in * self.price_in + out_tokens * self.price_out) / 1e6

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        self.arrivals.append(time.monotonic())
        if self.on_request is not None:
            self.on_request(self.requests)
        if self.delay:
            await asyncio.sleep(self.delay)
        self.headers.append(dict(request.headers))
        anthropic = request.path.endswith("/messages")
        body = await request.json()
        prompt = body["messages"][-1]["content"]
        max_tokens = int(body.get("max_tokens", 16))
        mode = self.mode if self._faulty(prompt) else "good"
        text, model, rid, finish = "Score: 3", "m-1", f"r-{self.requests}", "stop"
        usage = {"prompt_tokens": len(prompt.encode()) // 4, "completion_tokens": 3}
        if mode == "retry_after":
            return web.Response(status=429, headers={"Retry-After": "86400"}, text="slow down")
        if mode == "redirect":
            path = "/v1/messages" if anthropic else "/v1/chat/completions"
            return web.Response(status=307, headers={"Location": f"{self.redirect_to}{path}"})
        if mode == "echo":  # the key header into every text field the reply has
            auth = request.headers.get("x-api-key" if anthropic else "Authorization", "")
            text, model, rid, finish = f"Score: 3 ({auth})", f"m-1 {self.key}", f"r-{self.key}", f"stop {auth}"
        elif mode == "no_usage":
            usage = None
        elif mode == "inflated":
            usage = {"prompt_tokens": 10**9, "completion_tokens": 10**9}
        elif mode == "surrogate":
            text = "Score: 3 \ud83d"
        elif mode == "control":
            model = "m\x1b]0;pwned\x07\x1b[2J\u202e-1"
        elif mode == "long":  # as long as a reply of max_tokens is accepted, and usage at its plausible top
            text = "Score: 3 " + "y" * (max_tokens * 31)
            usage = {"prompt_tokens": len(prompt.encode()) + 64, "completion_tokens": max_tokens}
        elif mode == "huge":
            text = "Score: 3 " + "x" * 10_000_000
            usage["completion_tokens"] = max_tokens
        if anthropic:
            reply = {"id": rid, "model": model, "type": "message", "role": "assistant",
                     "content": [{"type": "text", "text": text}], "stop_reason": finish}
            if usage is not None:
                reply["usage"] = {"input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"]}
        else:
            reply = {"id": rid, "model": model, "object": "chat.completion",
                     "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                  "finish_reason": finish}]}
            if usage is not None:
                reply["usage"] = usage
        raw = json.dumps(reply).encode()
        self._bill(prompt, min(max_tokens, (usage or {}).get("completion_tokens", 3)),
                   usage["prompt_tokens"] if mode == "long" else None)
        if mode == "truncated":
            raw = raw[: len(raw) // 2]
        elif mode == "bad_utf8":
            raw = raw.replace(b"Score: 3", b"Score: \xff\xfe3")
        elif mode == "not_object":
            raw = b"[1, 2, 3]"
        elif mode == "stall":  # 200 and the first bytes, then nothing past the client's timeout
            resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json",
                                                           "Content-Length": str(len(raw))})
            await resp.prepare(request)
            await resp.write(raw[:10])
            await asyncio.sleep(STALL_S)
            return resp
        elif mode == "short":
            resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json",
                                                           "Content-Length": str(len(raw) + 500)})
            await resp.prepare(request)
            await resp.write(raw[: len(raw) // 2])
            request.transport.close()
            return resp
        return web.Response(status=200, body=raw, content_type="application/json")


def boundary_violations(mode: str, key: str, summary, calls, cost: float, budget: float | None, server,
                        database_bytes: bytes) -> list[str]:
    """What a run against the hostile server broke of the boundary's invariants (empty: none).

    A leak is the key in any byte of the run database or the run's summary; an overrun is money beyond
    the cap by the collector's books or the server's; a malformed reply stored as an answer is a stored
    completion that is not the good reply (after the vetting the gate does: surrogates replaced, keys
    redacted, text kept)."""
    import json as _json

    found = []
    if key.encode() in database_bytes or key in _json.dumps(summary.to_dict()):
        found.append("leak")
    if budget is not None and (cost > budget + 1e-12 or server.billed_usd > budget + 1e-12):
        found.append("overrun")
    if cost + 1e-12 < server.billed_usd and mode not in ("inflated",):
        found.append("under-charged")
    if not calls.empty:
        good = calls["completion"].fillna("").str.startswith("Score: 3")
        if not good.all():
            found.append("broken reply stored as an answer")
    return found


def hostile_config(tmp, server: HostileServer, *, retries: int = 1, budget: float | None = None,
                   provider: str = "openai", timeout: float = 10.0):
    """A 32-call factorial (serve_sim.py's config: 4 items x 2 systems x 2 variants x 2 replicates,
    one judge) pointed at ``server``."""
    from serve_sim import write_config

    config = write_config(tmp, server.port, items=4, systems=2, reps=2, judges=1, in_flight=4, provider=provider,
                          timeout=timeout)
    text = config.read_text().replace("max_retries = 8", f"max_retries = {retries}")
    if budget is not None:
        text = text.replace("[data]", f"budget_usd = {budget}\n\n[data]")
    config.write_text(text)
    return config


def collect_against(tmp, mode: str, key: str, *, retries: int = 1, budget: float | None = None,
                    provider: str = "openai", timeout: float = 10.0, **server_kw):
    """A 32-call factorial (serve_sim.py's config) run against a fresh hostile server:
    (config, summary, calls, failures, cost, server, the run database's bytes)."""
    from evalgauge.collect.config import load_config
    from evalgauge.collect.runner import run
    from evalgauge.store import RunStore

    server = HostileServer(mode, key, **server_kw)
    try:
        cfg = load_config(hostile_config(tmp, server, retries=retries, budget=budget, provider=provider,
                                         timeout=timeout))
        summary = run(cfg)
    finally:
        server.stop()
    store = RunStore(cfg.database)
    try:
        calls, cost, failures = store.calls(), store.cost(), store.failures()
    finally:
        store.close()
    blob = b"".join(p.read_bytes() for p in cfg.database.parent.glob(cfg.database.name + "*"))
    return cfg, summary, calls, failures, cost, server, blob


# item "a" answered by system "b|c" and item "a|b" by system "c": joined by "|" both read "a|b|c"
AWKWARD_ITEMS = ["a", "a|b", "x\\", "x"]
AWKWARD_RESPONSES = [("a", "b|c"), ("a|b", "c"), ("x\\", "|y"), ("x", "\\|y")]


def awkward_levels_config(tmp_path, server):
    """The 32-call factorial with items and systems named by ``AWKWARD_ITEMS`` and ``AWKWARD_RESPONSES``,
    loaded."""
    import pandas as pd

    from evalgauge.collect.config import load_config

    config = hostile_config(tmp_path, server)
    pd.DataFrame({"id": AWKWARD_ITEMS, "text": [f"Question {k}" for k in range(len(AWKWARD_ITEMS))]}).to_csv(
        tmp_path / "items.csv", index=False)
    pd.DataFrame([(i, s, f"Answer of {s} to {i}") for i, s in AWKWARD_RESPONSES],
                 columns=["item", "system", "response"]).to_csv(tmp_path / "responses.csv", index=False)
    return load_config(config)
