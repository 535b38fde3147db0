"""``evalgauge serve-sim``: an OpenAI-compatible (and Anthropic-compatible) judge panel simulated
from given variance components, with faults injected on demand.

For dry runs of a configuration, load tests, teaching and the tests. The
server knows the run configuration, so it recognises each prompt's item,
system, variant and presentation order; the judge comes from the requested
model and the temperature from the request. A score is

    mu + sum over components of effect(term, its levels) + N(0, sigma2_residual),

each effect drawn once per level combination, N(0, sigma2), from a seeded hash
(so every replicate of a cell shares it), the residual afresh per call. It is
rendered in the configuration's scoring mode ("Score: 3.1416" for numeric).

Faults (rates per call): ``rate_limit`` (429 with Retry-After), ``server_error``
(500), ``timeout`` (no answer within ``timeout_s``), ``empty`` (an empty
completion), ``garbage`` (unparseable text), ``cache`` (1: identical replies and
response ids for identical requests, like a caching gateway), ``drift_after``
(after that many calls the echoed model identifier changes snapshot), ``bad_request``
(400), ``forbidden`` (403), ``truncate`` (a reply cut at max_tokens: ``finish_reason`` "length") and
``think`` (the verdict after a ``<think>`` block holding another one). Asked for a JSON schema
(``response_format``, or a forced tool call on the Anthropic route) it answers ``{"score": ...}``, and
with ``logprobs`` the top log-probabilities at the answer token (a discretised normal around the latent
score, SD 0.6); ``json_object_only`` refuses ``json_schema`` with a 500 as llama-cpp-python's server does,
``no_structured`` refuses any schema and ``no_logprobs`` answers without log-probabilities.
Like a real provider it answers 404 for a model the
configuration does not name, and, given ``api_key`` (``--require-key-env``), 401 to a
request without that key. Usage counts every message, the system prompt included.

Prompt caching as the providers do it: on the OpenAI route a system prompt of at least 1,024 tokens that the
same model has seen before is read from the cache in 128-token steps (``usage.prompt_tokens_details.
cached_tokens``, within ``prompt_tokens``); on the Anthropic route a system block marked ``cache_control`` is
written to the cache the first time (``cache_creation_input_tokens``) and read after
(``cache_read_input_tokens``), both apart from ``input_tokens``. With ``ledger`` (``--ledger``) every answered
request's usage is appended to that file as a JSON line: the provider's own account, to check a run's cost
against.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import random
import time
import zlib
from dataclasses import dataclass, field

import numpy as np

from ..vocabulary import RESIDUAL
from .config import RunConfig
from .providers import CACHE_MIN_TOKENS
from .tasks import render

FAULTS = ("rate_limit", "server_error", "timeout", "empty", "garbage", "cache", "drift_after", "timeout_s",
          "latency_ms", "retry_after", "bad_request", "forbidden", "truncate", "think", "json_object_only",
          "no_structured", "no_logprobs", "batch_delay_s", "batch_error", "batch_expire", "batch_line_ms",
          "batch_invalid", "batch_cut_after")


@dataclass
class SimPanel:
    cfg: RunConfig
    components: dict[str, float]
    mu: float = 3.0
    seed: int = 0
    faults: dict[str, float] = field(default_factory=dict)
    #: the key a request must carry (None: any or none, as a local server)
    api_key: str | None = None
    #: a file the usage of every answered request is appended to (one JSON line each)
    ledger: str | None = None

    def __post_init__(self) -> None:
        self._cached: set[str] = set()  # prompt prefixes in the cache, by model
        self._lookup: dict[str, tuple] = {}
        self._generated: dict[str, str] = {}
        if self.cfg.generators:  # systems that generate: answers are deterministic, so prompts are known
            from dataclasses import replace

            from .tasks import generation_prompt

            answers = {}
            for item in self.cfg.items:
                for g in self.cfg.generators:
                    text = f"Simulated answer of {g.name} to item {item.id}."
                    answers[(item.id, g.name)] = text
                    self._generated[f"{g.model}|{generation_prompt(self.cfg, item)}"] = text
            self.cfg = replace(self.cfg, responses=answers)
        systems = self.cfg.systems or (None,)
        positions = ("AB", "BA") if self.cfg.pairwise else (None,)
        for item in self.cfg.items:
            for system in systems:
                for variant in self.cfg.variants:
                    for position in positions:
                        prompt = render(self.cfg, item, system, variant, position)
                        self._lookup[prompt] = (item, system, variant, position)
        self._judge_of = {j.model: j.name for j in self.cfg.judges}
        self.models = set(self._judge_of) | {g.model for g in self.cfg.generators}
        self._effects: dict[tuple, float] = {}
        self._cache: dict[str, tuple[str, str]] = {}
        self.calls = 0
        self._rng = random.Random(self.seed + 1)  # faults
        self._repeats: dict[str, int] = {}
        self._call_rng = np.random.default_rng(self.seed)

    def _effect(self, term: str, levels: tuple) -> float:
        key = (term, levels)
        if key not in self._effects:
            h = zlib.crc32(repr(key).encode())
            z = np.random.default_rng([self.seed, h]).standard_normal()
            self._effects[key] = float(z * math.sqrt(self.components[term]))
        return self._effects[key]

    def _seed_call(self, prompt: str, model: str, temperature: float) -> None:
        """The k-th call of the same request draws the k-th noise of a seeded stream: a cell's set of noises
        is the same however concurrent calls interleave, so a run's analysis is reproducible."""
        key = f"{model}|{temperature}|{prompt}"
        k = self._repeats.get(key, 0)
        self._repeats[key] = k + 1
        self._call_rng = np.random.default_rng([self.seed, zlib.crc32(key.encode()), k])

    def latent(self, prompt: str, model: str, temperature: float) -> float | None:
        hit = self._lookup.get(prompt)
        if hit is None:
            return None
        item, system, variant, position = hit
        levels = {"item": item.id, "category": item.category, "system": system, "variant": variant.id,
                  "judge": self._judge_of.get(model, model), "temperature": f"{temperature:g}",
                  "position": position}
        value = self.mu
        for term, var in self.components.items():
            if term == RESIDUAL or var <= 0:
                continue
            facets = term.split(":")
            if any(levels.get(f) is None for f in facets):
                continue
            value += self._effect(term, tuple(levels[f] for f in facets))
        value += self._call_rng.normal(0.0, math.sqrt(self.components.get(RESIDUAL, 0.0)))
        return value

    def text(self, latent: float, position: str | None) -> str:
        cfg = self.cfg
        if cfg.mode == "numeric":
            return f"Score: {latent:.6f}"
        if cfg.mode == "likert":
            return f"Score: {min(max(round(latent), cfg.scale_min), cfg.scale_max)}"
        p = min(max(latent, 0.0), 1.0)
        win = self._call_rng.random() < p
        if cfg.mode == "binary":
            return "yes" if win else "no"
        if cfg.mode == "pairwise":
            first = (position == "AB") == win
            return "[[A]]" if first else "[[B]]"
        classes = cfg.labels if cfg.mode == "label" else cfg.choices
        return classes[min(int(p * len(classes)), len(classes) - 1)]

    def structured(self, latent: float, position: str | None, logprobs: bool) -> tuple[str, list | None]:
        """A structured answer {"score": ...} and, with ``logprobs``, its tokens with the top alternatives."""
        cfg = self.cfg
        verdict = self.text(latent, position).removeprefix("Score: ")
        if cfg.mode == "pairwise":
            verdict = '"' + {"[[A]]": "A", "[[B]]": "B"}[verdict] + '"'
        elif cfg.mode in ("binary", "choice", "label"):
            verdict = json.dumps(verdict)
        text = '{"score": ' + verdict + "}"
        if not logprobs:
            return text, None
        scale = range(cfg.scale_min, cfg.scale_max + 1)
        weights = [math.exp(-0.5 * ((v - latent) / 0.6) ** 2) for v in scale]
        total = sum(weights)
        alts = [{"token": str(v), "logprob": math.log(max(w / total, 1e-300))} for v, w in zip(scale, weights,
                                                                                                 strict=True)]
        tokens = [{"token": t, "logprob": 0.0, "top_logprobs": [{"token": t, "logprob": 0.0}]}
                  for t in ('{"', "score", '":', " ")]
        tokens.append({"token": verdict, "logprob": next(a["logprob"] for a in alts if a["token"] == verdict),
                       "top_logprobs": sorted(alts, key=lambda a: -a["logprob"])})
        tokens.append({"token": "}", "logprob": 0.0, "top_logprobs": [{"token": "}", "logprob": 0.0}]})
        return text, tokens

    def cache(self, protocol: str, model: str, body: dict) -> tuple[int, int]:
        """(tokens read from the prompt cache, tokens written to it) for one request (module docstring)."""
        if protocol == "anthropic":  # only a system block marked cache_control is cached
            system = body.get("system")
            blocks = [b for b in system if isinstance(b, dict)] if isinstance(system, list) else []
            text = "".join(_text(b.get("text")) for b in blocks) if any(b.get("cache_control") for b in blocks) \
                else ""
        else:  # OpenAI caches a long enough system message by itself
            first = next((m for m in body.get("messages") or [] if isinstance(m, dict)), None)
            text = _text(first.get("content")) if first is not None and first.get("role") == "system" else ""
        tokens = _sim_tokens(text) if text else 0
        if tokens < CACHE_MIN_TOKENS:
            return 0, 0
        key = f"{protocol}|{model}|{text}"
        seen = key in self._cached
        self._cached.add(key)
        if protocol == "anthropic":
            return (tokens, 0) if seen else (0, tokens)
        return (tokens // 128 * 128 if seen else 0), 0  # OpenAI: read in 128-token steps, no write charge

    def account(self, usage: dict) -> None:
        if self.ledger:
            with open(self.ledger, "a", encoding="utf-8") as out:
                out.write(json.dumps(usage) + "\n")

    def respond(self, prompt: str, model: str, temperature: float, *, structured: bool = False,
                logprobs: bool = False) -> tuple[int, dict, dict]:
        """(HTTP status, headers, body fields: text, model, id, finish_reason, tokens) for one request; faults
        drawn here."""
        self.calls += 1
        f, r = self.faults, self._rng.random
        if model not in self.models:
            return 404, {}, {"error": f"The model '{model[:60]}' does not exist.", "code": "model_not_found"}
        if r() < f.get("bad_request", 0.0):
            return 400, {}, {"error": "Invalid request."}
        if r() < f.get("forbidden", 0.0):
            return 403, {}, {"error": "You do not have access to this model."}
        if r() < f.get("rate_limit", 0.0):
            return 429, {"Retry-After": str(f.get("retry_after", 0.05))}, {"error": "rate limited"}
        if r() < f.get("server_error", 0.0):
            return 500, {}, {"error": "internal error"}
        if r() < f.get("timeout", 0.0):
            return -1, {}, {}
        echoed = model
        if f.get("drift_after") and self.calls > f["drift_after"]:
            echoed = f"{model}-2026-snapshot-b"
        generated = self._generated.get(f"{model}|{prompt}")
        if generated is not None:
            return 200, {}, {"text": generated, "model": echoed, "id": f"sim-gen-{self.calls}"}
        cache_key = hashlib.sha256(f"{model}|{temperature}|{prompt}".encode()).hexdigest()
        if f.get("cache") and cache_key in self._cache:
            text, rid = self._cache[cache_key]
            return 200, {}, {"text": text, "model": echoed, "id": rid}
        rid = f"sim-{self.calls}-{self._rng.getrandbits(32):08x}"
        self._seed_call(prompt, model, temperature)
        tokens, finish = None, "stop"
        if r() < f.get("empty", 0.0):
            text = ""
        elif r() < f.get("garbage", 0.0):
            text = "I am unable to assess this response."
        elif f.get("truncate") and r() < f["truncate"]:  # drawn only when set: other runs keep their stream
            text, finish = "Let me weigh this response against the criteria one by one. First, the", "length"
        else:
            latent = self.latent(prompt, model, temperature)
            if latent is None:
                return 400, {}, {"error": "the simulated panel does not know this prompt (is it the same config?)"}
            hit = self._lookup[prompt]
            if structured:
                text, tokens = self.structured(latent, hit[3], logprobs and not f.get("no_logprobs"))
            else:
                text = self.text(latent, hit[3])
                if f.get("think") and r() < f["think"]:
                    text = f"<think>At first glance {self.text(latent + 2.0, hit[3])}, but no.</think>\n{text}"
        if f.get("cache"):
            self._cache[cache_key] = (text, rid)
        return 200, {}, {"text": text, "model": echoed, "id": rid, "finish_reason": finish, "tokens": tokens}


def _sim_tokens(text: str) -> int:
    """A pessimistic tokenizer: a token per 3 UTF-8 bytes of a message, and 4 tokens of template."""
    return -(-len(text.encode("utf-8")) // 3) + 4


def _text(content) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


def make_app(panel: SimPanel):
    """The aiohttp application: POST /v1/chat/completions (OpenAI) and /v1/messages (Anthropic)."""
    from aiohttp import web

    def refused(request: web.Request) -> web.Response | None:
        if panel.api_key is not None:
            sent = request.headers.get("x-api-key") or request.headers.get("authorization", "").removeprefix("Bearer ")
            if sent != panel.api_key:
                return web.json_response({"error": {"message": "Incorrect API key provided.",
                                                    "type": "invalid_request_error"}}, status=401)
        return None

    async def handle(request: web.Request, protocol: str) -> web.Response:
        try:
            body = await request.json()
        except Exception:
            return web.json_response({"error": {"message": "invalid JSON"}}, status=400)
        if (no := refused(request)) is not None:
            return no
        delay = panel.faults.get("latency_ms", 0.0)
        if delay:
            await asyncio.sleep(delay / 1000.0)
        status, headers, out = answer(panel, protocol, body)
        if status == -1:
            await asyncio.sleep(panel.faults.get("timeout_s", 30.0))
            return web.json_response({"error": {"message": "late"}}, status=504)
        return web.json_response(out, status=status, headers=headers)

    async def openai_route(request):
        return await handle(request, "openai")

    async def anthropic_route(request):
        return await handle(request, "anthropic")

    app = web.Application(client_max_size=256 * 2**20)
    app.router.add_post("/v1/chat/completions", openai_route)
    app.router.add_post("/chat/completions", openai_route)
    app.router.add_post("/v1/messages", anthropic_route)
    from .simbatch import add_batch_routes

    add_batch_routes(app, panel, refused, answer)
    return app


def answer(panel: SimPanel, protocol: str, body: dict, batch: bool = False) -> tuple[int, dict, dict]:
    """(HTTP status, headers, JSON body) of one request on the protocol's route (-1: no answer in time); the
    usage of an answered one goes to the ledger (``batch``: at the batch price)."""
    messages = body.get("messages") or []
    texts = [_text(m.get("content")) for m in messages if isinstance(m, dict)]
    if isinstance(body.get("system"), str | list):  # Anthropic's system prompt is a top-level field
        texts.append(_text(body["system"]))
    # the call's own prompt: the first user turn (a re-ask adds later ones)
    prompt = next((_text(m.get("content")) for m in messages if m.get("role") == "user"), "")
    model = str(body.get("model", ""))
    temperature = float(body.get("temperature", 1.0))
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and panel.faults.get("no_structured"):
        return 400, {}, {"error": {"message": f"response_format type {fmt.get('type')!r} is not supported",
                                   "type": "invalid_request_error"}}
    if isinstance(fmt, dict) and panel.faults.get("json_object_only") and fmt.get("type") == "json_schema":
        # as llama-cpp-python's server answers it: a 500 carrying the validation error
        return 500, {}, {"error": {"message": "1 validation error: ('body', 'response_format', 'type') "
                                   "Input should be 'text' or 'json_object'", "type": "internal_server_error"}}
    structured = isinstance(fmt, dict) or bool(body.get("tools"))
    status, headers, out = panel.respond(prompt, model, temperature, structured=structured,
                                         logprobs=bool(body.get("logprobs")))
    if status == -1:
        return -1, {}, {}
    if status != 200:
        return status, headers, {"error": {"message": out.get("error", ""), "type": "sim"}}
    p_tok = sum(_sim_tokens(t) for t in texts)
    c_tok = max(1, len(out["text"]) // 4) if out["text"] else 0
    finish = out.get("finish_reason", "stop")
    read, written = panel.cache(protocol, model, body)
    usage = {"protocol": protocol, "model": model, "input": p_tok, "cached": read, "written": written,
             "output": c_tok, **({"batch": True} if batch else {})}
    panel.account(usage)
    if protocol == "anthropic":
        content = [{"type": "text", "text": out["text"]}]
        if body.get("tools") and out["text"].startswith("{"):
            content = [{"type": "tool_use", "id": "toolu_sim", "name": body["tools"][0].get("name", "tool"),
                        "input": json.loads(out["text"])}]
        return 200, {}, {
            "id": out["id"], "type": "message", "role": "assistant", "model": out["model"], "content": content,
            "stop_reason": {"stop": "end_turn", "length": "max_tokens"}[finish],
            "stop_sequence": None, "usage": {"input_tokens": p_tok - read - written, "output_tokens": c_tok,
                                             "cache_read_input_tokens": read,
                                             "cache_creation_input_tokens": written}}
    choice = {"index": 0, "message": {"role": "assistant", "content": out["text"]}, "finish_reason": finish}
    if out.get("tokens"):
        choice["logprobs"] = {"content": out["tokens"]}
    return 200, {}, {
        "id": out["id"], "object": "chat.completion", "created": int(time.time()), "model": out["model"],
        "choices": [choice],
        "usage": {"prompt_tokens": p_tok, "completion_tokens": c_tok, "total_tokens": p_tok + c_tok,
                  "prompt_tokens_details": {"cached_tokens": read}}}


def serve(panel: SimPanel, host: str = "127.0.0.1", port: int = 8765, ready=None) -> None:
    """Run the server until interrupted (loopback by default)."""
    from aiohttp import web

    web.run_app(make_app(panel), host=host, port=port, print=ready, access_log=None, handle_signals=True)
