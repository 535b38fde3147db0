"""Providers: any OpenAI-compatible endpoint (chat completions) and Anthropic (Messages API), each
as plain HTTP over aiohttp. Keys come only from the environment variable a judge names, and go only
into the request's header.

Nothing here retries: the runner does, so it can honour Retry-After, count attempts and keep the
key out of every message.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from ..errors import DataError
from .config import Judge
from .limits import body_limit

#: the fewest tokens a prompt prefix must have for the providers' prompt caches (OpenAI's and Anthropic's)
CACHE_MIN_TOKENS = 1024


# one per call, made once and read (the reply gate makes a changed copy): not frozen (see collect.tasks.Task)
@dataclass(slots=True)
class Completion:
    text: str | None
    model: str | None
    response_id: str | None
    input_tokens: int
    output_tokens: int
    #: why generation stopped, in OpenAI's words: "stop", "length" (cut at max_tokens), "tool_calls", ...
    finish_reason: str | None = None
    #: with log-probabilities: each generated token as (text, ((alternative, logprob), ...))
    tokens: tuple | None = None
    #: of ``input_tokens``, those read from the provider's prompt cache and those written to it
    cached_tokens: int = 0
    cache_write_tokens: int = 0


@dataclass(frozen=True)
class Output:
    """What the judge is asked to return beyond free text: ``kind`` "json" (an object following ``schema``)
    or "logprobs" (the same object, with the top log-probabilities of every generated token)."""

    kind: str
    schema: dict
    top_logprobs: int = 20


#: Anthropic's stop reasons in OpenAI's words (a verdict cut at max_tokens reads "length" from both)
_STOP_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls"}


#: HTTP statuses that no retry can fix: a malformed request, a refused key, no access, no such model.
FATAL_STATUSES = (400, 401, 403, 404, 405, 413, 422)


class ProviderError(Exception):
    """A failed call: ``retryable`` for 429, 5xx, timeouts and connection errors; ``fatal`` for an error
    that every call to this judge would meet (wrong key, no access, unknown model, malformed request)."""

    def __init__(self, message: str, *, retryable: bool, retry_after: float | None = None,
                 status: int | None = None, fatal: bool = False, connection: bool = False, billed: bool = False):
        super().__init__(message)
        #: the server answered 2xx (or began to): the provider may have billed the call
        self.billed = billed
        self.retryable = retryable
        self.retry_after = retry_after
        self.status = status
        self.fatal = fatal
        self.connection = connection


def _clean(text: object, limit: int = 200) -> str:
    """Server text is untrusted: printable characters only, bounded, and never a key-shaped token."""
    from .schema import looks_like_key

    out = "".join(c if c.isprintable() else " " for c in str(text))[:limit]
    return " ".join("***" if looks_like_key(word) else word for word in out.split())


def _detail(body: object) -> str:
    """The server's own error message from an error body ({"error": {"message": ...}} or {"message": ...})."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        body = inner.get("message", inner.get("type", "")) if isinstance(inner, dict) else inner
    return _clean(body) if body else ""


def status_error(judge: Judge, status: int, body: object, headers) -> ProviderError:
    """A ProviderError for an HTTP error status, saying what it means for this judge and what to do."""
    where = judge.base_url or "the provider's default endpoint"
    detail = _detail(body)
    said = f" The server said: {detail}" if detail else ""
    if status in (401, 403):
        key = (f"the key in the environment variable {judge.api_key_env}" if judge.api_key_env
               else "no key (the judge names no api_key_env)")
        what = "refused the key" if status == 401 else "refused access (no permission for this model or endpoint)"
        msg = (f"judge '{judge.name}': HTTP {status}: {where} {what}; it was sent {key}. Check the key and the "
               f"account's access, then run again (completed calls are kept).{said}")
    elif status == 404:
        msg = (f"judge '{judge.name}': HTTP 404: model '{judge.model}' or the path was not found at {where}. Check "
               f"the model name and base_url (an OpenAI-compatible base_url usually ends in /v1).{said}")
    elif status in FATAL_STATUSES:
        msg = (f"judge '{judge.name}': HTTP {status}: {where} rejected the request as invalid; every call to "
               f"this judge would be. Check the model, max_tokens and the template's length.{said}")
    else:
        msg = f"HTTP {status} from {judge.name}"
    return ProviderError(msg, retryable=status in (408, 409, 429, 529) or status >= 500,
                         retry_after=_retry_after(headers), status=status, fatal=status in FATAL_STATUSES)


def redirect_error(judge: Judge, url: str, status: int, location: str | None) -> ProviderError:
    """A redirect, refused: the request carries the key, and a redirect may point anywhere."""
    from urllib.parse import urljoin, urlsplit

    target = urlsplit(urljoin(url, location or ""))
    where = f"{target.scheme}://{target.hostname}" + (f":{target.port}" if target.port else "") \
        if target.hostname else "nowhere (no Location)"
    return ProviderError(
        f"judge '{judge.name}': HTTP {status}: {url} redirects to {_clean(where, 120)}; redirects are not "
        "followed (the request carries the key). Set base_url to the address that answers, if you trust it.",
        retryable=False, status=status, fatal=True)


def connection_error(judge: Judge, exc: Exception) -> ProviderError:
    """A timeout or a refused connection, with the cause (e.g. 'Connection refused') and the endpoint."""
    cause = exc.__cause__ or exc.__context__ or getattr(exc, "os_error", None)
    reason = _clean(getattr(cause, "strerror", None) or cause) if cause and str(cause) else (
        _clean(exc) if str(exc) else type(exc).__name__)
    timeout = "Timeout" in type(exc).__name__
    where = judge.base_url or "the provider's default endpoint"
    msg = (f"judge '{judge.name}': no answer from {where} within the timeout" if timeout
           else f"judge '{judge.name}': cannot connect to {where} ({reason})")
    return ProviderError(msg, retryable=True, connection=not timeout)


def api_key(judge: Judge) -> str:
    """The judge's key from its environment variable; local servers may need none."""
    if not judge.api_key_env:
        return "not-needed"
    value = os.environ.get(judge.api_key_env)
    if not value:
        raise DataError(f"judge '{judge.name}': the environment variable {_env_name(judge)} is not set. Export "
                        "the key there (it is never read from the config or written anywhere).")
    return value


def _env_name(judge: Judge) -> str:
    """The variable's name for a message; never a value that looks like a key pasted in its place."""
    from .schema import looks_like_key

    name = judge.api_key_env or ""
    return "named by api_key_env (its value looks like a key, so it is not shown)" if looks_like_key(name) else name


def _retry_after(headers) -> float | None:
    if not headers:
        return None
    value = headers.get("retry-after-ms")
    if value:
        try:
            ms = float(value)
            if ms == ms:
                return max(0.0, ms / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    # NaN says nothing; a negative wait is none; inf stays: the runner caps every wait and says so
    return None if seconds is None or seconds != seconds else max(0.0, seconds)


class _HTTPProvider:
    """One judge's endpoint as plain HTTP on one aiohttp session (kept alive across calls).

    Each protocol is a few fixed JSON fields, so requests and answers are built and read directly:
    the official SDKs' request transformation and response models cost about 2 ms of CPU a call,
    more than the rest of the collector together. The answer is untrusted: a null content is an empty
    completion; a body that is not the protocol's answer is a retryable, billed ProviderError
    (:func:`malformed`), never an exception of another kind and never a stored answer.
    """

    def __init__(self, judge: Judge, timeout: float, url: str, headers: dict[str, str]):
        self.judge = judge
        self.url = url
        self._headers = {**headers, "Content-Type": "application/json", "Accept": "application/json"}
        self._timeout = timeout
        self._proxy = _proxy_for(url)
        self._session = None  # made on the first call, inside the running event loop

    def _open(self):
        import ssl

        import aiohttp
        import certifi

        # The runner bounds the calls in flight, so the pool does not (aiohttp's default is 100). Certificates
        # from certifi, as the vendor SDKs verify them (python.org builds on macOS have no system store).
        tls = ssl.create_default_context(cafile=certifi.where())
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, ssl=tls),
                                              timeout=aiohttp.ClientTimeout(total=self._timeout))
        return self._session

    async def _post(self, body: dict) -> object:
        """The parsed answer to one request (JSON, or its text when it is not JSON); ProviderError on failure."""
        import aiohttp

        session = self._session or self._open()
        limit = body_limit(self.judge.max_tokens)
        status = None
        try:
            # redirects are not followed: the key header would go with the request to wherever it points
            async with session.post(self.url, data=json.dumps(body), headers=self._headers,
                                    proxy=self._proxy, allow_redirects=False) as resp:
                status = resp.status
                if 300 <= resp.status < 400:
                    raise redirect_error(self.judge, self.url, resp.status, resp.headers.get("Location"))
                raw = await _read_bounded(resp, limit, self.judge)
                if resp.status >= 400:
                    raise status_error(self.judge, resp.status, _json_or_text(raw), resp.headers)
        except (TimeoutError, aiohttp.ClientConnectionError) as exc:
            error = connection_error(self.judge, exc)
            # once the request was sent the provider may bill it, answered or not: charged at its worst case
            error.billed = not isinstance(exc, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError)
            raise error from None
        except aiohttp.ClientPayloadError as exc:  # a body cut short or a broken encoding: a transport fault
            raise ProviderError(f"judge '{self.judge.name}': the reply was cut short or garbled in transfer "
                                f"({_clean(exc, 120)})", retryable=True, billed=status is not None and status < 400
                                ) from None
        try:
            return json.loads(raw)
        except ValueError:  # not JSON, or not UTF-8: broken in transfer or by the server, asked again
            head = _clean(raw[:80].decode("utf-8", "replace"), 80)
            raise malformed(self.judge, f"not JSON ({len(raw):,} bytes: {head!r})") from None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class OpenAIProvider(_HTTPProvider):
    """Chat completions on any OpenAI-compatible endpoint (OpenAI, OpenRouter, vLLM, llama.cpp, Ollama)."""

    DEFAULT_BASE_URL = "https://api.openai.com/v1"

    def __init__(self, judge: Judge, timeout: float):
        base = judge.base_url or os.environ.get("OPENAI_BASE_URL") or self.DEFAULT_BASE_URL
        super().__init__(judge, timeout, base.rstrip("/") + "/chat/completions",
                         {"Authorization": f"Bearer {api_key(judge)}"})

    #: how this endpoint takes a JSON schema, found at the judge's first structured call: "json_schema"
    #: (OpenAI, vLLM) or "json_object" with the schema beside it (llama-cpp-python's server)
    dialect: str | None = None

    def request(self, prompt: str, system_prompt: str | None, temperature: float, *,
                history: tuple[tuple[str, str], ...] = (), output: Output | None = None,
                dialect: str | None = None) -> dict:
        """One chat completion's request body; ``history``: earlier (answer, follow-up) turns of the same call (a
        re-ask). With ``output`` and a ``dialect`` the schema is in it (a batch line); without a dialect the
        structured fields are added by :meth:`complete`, which finds the endpoint's dialect."""
        messages = ([{"role": "system", "content": system_prompt}] if system_prompt else []) + \
            [{"role": "user", "content": prompt}]
        for answer, follow_up in history:
            messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": follow_up}]
        request = {"model": self.judge.model, "messages": messages, "temperature": temperature,
                   "max_tokens": self.judge.max_tokens}
        if output is not None and dialect is not None:
            request = {**_logprobs_fields(request, output), "response_format": _response_format(dialect, output.schema)}
        return request

    async def complete(self, prompt: str, system_prompt: str | None, temperature: float, *,
                       history: tuple[tuple[str, str], ...] = (), output: Output | None = None) -> Completion:
        """One chat completion; ``history``: earlier (answer, follow-up) turns of the same call (a re-ask)."""
        request = self.request(prompt, system_prompt, temperature, history=history)
        if output is not None:
            body = await self._structured(request, output)
        else:
            body = await self._post(request)
        return self.read(body, output)

    def read(self, body: object, output: Output | None = None) -> Completion:
        """The completion in a chat completion's answer (a synchronous reply or a batch line's body);
        ProviderError when it is not one."""
        choices = body.get("choices") if isinstance(body, dict) else None
        choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
        message = choice.get("message")
        if not isinstance(message, dict) or not isinstance(message.get("content"), str | None):
            raise malformed(self.judge, "no choices[0].message.content")
        text = message.get("content")
        usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
        tokens = _openai_tokens(choice.get("logprobs")) if output is not None and output.kind == "logprobs" else None
        if output is not None and output.kind == "logprobs" and text and not tokens:
            raise ProviderError(
                f"judge '{self.judge.name}': the endpoint at {self.url} answered without log-probabilities although "
                "they were asked for (logprobs: true, top_logprobs); it does not offer them. Set [scoring] output "
                "= \"json\" (or leave output unset) for this judge's endpoint.", retryable=False, fatal=True,
                billed=True)
        details = usage.get("prompt_tokens_details")
        cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else 0  # within prompt_tokens
        return Completion(text if isinstance(text, str) else None, _str_or_none(body.get("model")),
                          _str_or_none(body.get("id")), _count(usage.get("prompt_tokens")),
                          _count(usage.get("completion_tokens")), _str_or_none(choice.get("finish_reason")), tokens,
                          cached_tokens=cached)

    async def _structured(self, request: dict, output: Output) -> object:
        """The request with a JSON schema in this endpoint's dialect, found at the first call: OpenAI's
        ``json_schema``, else llama-cpp-python's ``json_object`` with a ``schema`` beside it.

        An endpoint that does not know ``json_schema`` answers with an HTTP error (llama-cpp-python's server:
        a 500 whose message is a validation error on ``response_format.type``), so any HTTP error to the
        first dialect is followed by one try of the second; a refusal of both is fatal and names the feature,
        while a server error to both stays retryable (the endpoint may be down, not unable)."""
        request = _logprobs_fields(request, output)
        if self.dialect:
            return await self._post({**request, "response_format": _response_format(self.dialect, output.schema)})
        errors: list[ProviderError] = []
        for dialect in ("json_schema", "json_object"):
            try:
                body = await self._post({**request, "response_format": _response_format(dialect, output.schema)})
            except ProviderError as exc:
                if exc.status is None or exc.status in (401, 403, 404):  # no answer, or not about the schema
                    raise
                errors.append(exc)
                continue
            self.dialect = dialect
            return body
        if not any(e.status in (400, 422) for e in errors):
            raise errors[-1]
        what = "log-probabilities with a JSON schema" if output.kind == "logprobs" else "a JSON schema"
        raise ProviderError(
            f"judge '{self.judge.name}': the endpoint refused {what} (response_format json_schema, and json_object "
            f"with a schema): it does not offer structured output. Set [scoring] output = \"text\" with a protocol "
            f"for this judge.{_said(errors[-1])}", retryable=False, fatal=True, status=errors[-1].status)


def _said(exc: ProviderError | None) -> str:
    text = str(exc) if exc else ""
    return text[text.index(" The server said:"):] if " The server said:" in text else ""


def _logprobs_fields(request: dict, output: Output) -> dict:
    if output.kind == "logprobs":
        return {**request, "logprobs": True, "top_logprobs": output.top_logprobs}
    return request


def _response_format(dialect: str, schema: dict) -> dict:
    if dialect == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": "verdict", "strict": True, "schema": schema}}
    return {"type": "json_object", "schema": schema}


def _openai_tokens(logprobs: object) -> tuple | None:
    """``choices[0].logprobs.content`` as ((token, ((alternative, logprob), ...)), ...); None when absent."""
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list) or not content:
        return None
    out = []
    for entry in content:
        if not isinstance(entry, dict) or not isinstance(entry.get("token"), str):
            return None
        alts = entry.get("top_logprobs") if isinstance(entry.get("top_logprobs"), list) else []
        pairs = tuple((a["token"], float(a["logprob"])) for a in alts if isinstance(a, dict)
                      and isinstance(a.get("token"), str) and isinstance(a.get("logprob"), int | float)
                      and not isinstance(a.get("logprob"), bool))
        out.append((entry["token"], pairs))
    return tuple(out)


class AnthropicProvider(_HTTPProvider):
    """Anthropic's Messages API (``POST /v1/messages``)."""

    DEFAULT_BASE_URL = "https://api.anthropic.com"
    API_VERSION = "2023-06-01"

    def __init__(self, judge: Judge, timeout: float):
        base = judge.base_url or os.environ.get("ANTHROPIC_BASE_URL") or self.DEFAULT_BASE_URL
        super().__init__(judge, timeout, base.rstrip("/") + "/v1/messages",
                         {"x-api-key": api_key(judge), "anthropic-version": self.API_VERSION})

    def request(self, prompt: str, system_prompt: str | None, temperature: float, *,
                history: tuple[tuple[str, str], ...] = (), output: Output | None = None) -> dict:
        """One Messages request's body (a synchronous call's or a batch line's ``params``)."""
        messages = [{"role": "user", "content": prompt}]
        for answer, follow_up in history:
            messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": follow_up}]
        request = {"model": self.judge.model, "max_tokens": self.judge.max_tokens, "temperature": temperature,
                   "messages": messages}
        if system_prompt:
            # a system prompt long enough to cache (1,024 tokens; at most 4 bytes a token) is marked for the
            # prompt cache: every call after the first reads it at a tenth of the input price
            request["system"] = [{"type": "text", "text": system_prompt, "cache_control": {"type": "ephemeral"}}] \
                if len(system_prompt.encode("utf-8")) >= 4 * CACHE_MIN_TOKENS else system_prompt
        if output is not None:  # a forced tool call whose input is the verdict object
            request["tools"] = [{"name": "record_verdict", "description": "Record the verdict.",
                                 "input_schema": output.schema}]
            request["tool_choice"] = {"type": "tool", "name": "record_verdict"}
        return request

    async def complete(self, prompt: str, system_prompt: str | None, temperature: float, *,
                       history: tuple[tuple[str, str], ...] = (), output: Output | None = None) -> Completion:
        body = await self._post(self.request(prompt, system_prompt, temperature, history=history, output=output))
        return self.read(body, output)

    def read(self, body: object, output: Output | None = None) -> Completion:
        """The completion in a Messages answer (a synchronous reply or a batch result's ``message``)."""
        content = body.get("content") if isinstance(body, dict) else None
        if not isinstance(content, list):
            raise malformed(self.judge, "no content list")
        # the text blocks, in order (a thinking block has no "text"); no text block at all is an empty completion
        texts = [b["text"] for b in content if isinstance(b, dict) and isinstance(b.get("text"), str)]
        if output is not None:  # the forced tool call's input, as the JSON text it stands for
            calls = [b.get("input") for b in content if isinstance(b, dict) and b.get("type") == "tool_use"]
            texts = [json.dumps(calls[0])] if calls and isinstance(calls[0], dict) else []
        usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
        stop = _str_or_none(body.get("stop_reason"))
        # Anthropic counts the cache's reads and writes apart from input_tokens: all three are the input
        read, written = _count(usage.get("cache_read_input_tokens")), _count(usage.get("cache_creation_input_tokens"))
        return Completion("".join(texts) if texts else None, _str_or_none(body.get("model")),
                          _str_or_none(body.get("id")), _count(usage.get("input_tokens")) + read + written,
                          _count(usage.get("output_tokens")), _STOP_REASONS.get(stop or "", stop),
                          cached_tokens=read, cache_write_tokens=written)


def _proxy_for(url: str) -> str | None:
    """The proxy HTTP(S)_PROXY names for ``url``, unless NO_PROXY exempts its host (as the vendor SDKs do);
    found once per judge, since aiohttp's own lookup (trust_env) costs 0.4 ms a call."""
    from urllib.parse import urlsplit
    from urllib.request import getproxies, proxy_bypass

    parts = urlsplit(url)
    proxies = getproxies()
    if not proxies or proxy_bypass(parts.hostname or ""):
        return None
    return proxies.get(parts.scheme)


def malformed(judge: Judge, what: str) -> ProviderError:
    """A 2xx reply that is not the protocol's answer: retried, and recorded as a failure if it stays so."""
    return ProviderError(f"judge '{judge.name}': a malformed reply, {what}", retryable=True, billed=True)


async def _read_bounded(resp, limit: int, judge: Judge) -> bytes:
    """The reply's body, refused past ``limit`` bytes (decompressed) without reading the rest."""
    chunks, size = [], 0
    while chunk := await resp.content.read(64 * 1024):
        size += len(chunk)
        if size > limit:
            raise ProviderError(f"judge '{judge.name}': a reply of more than {limit:,} bytes for max_tokens = "
                                f"{judge.max_tokens}; not read further or stored, the cell is asked again on "
                                "resume.", retryable=False, billed=resp.status < 400)
        chunks.append(chunk)
        if resp.content.at_eof():  # the whole body is in: no further read (and no further await) for its end
            break
    return b"".join(chunks)


def _json_or_text(raw: bytes) -> object:
    try:
        return json.loads(raw)
    except ValueError:  # not JSON (or not UTF-8): keep the text for the message
        return raw.decode("utf-8", "replace")


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def make_provider(judge: Judge, timeout: float):
    return AnthropicProvider(judge, timeout) if judge.provider == "anthropic" else OpenAIProvider(judge, timeout)
