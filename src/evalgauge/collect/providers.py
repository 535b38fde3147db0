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


@dataclass(frozen=True)
class Completion:
    text: str | None
    model: str | None
    response_id: str | None
    input_tokens: int
    output_tokens: int


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
    more than the rest of the collector together (issue 16). The answer is untrusted: a missing or
    malformed field is an empty completion (recorded and flagged), never an exception.
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

        from .reply import body_limit

        session = self._session or self._open()
        limit = body_limit(self.judge.max_tokens)
        status = None
        try:
            async with session.post(self.url, data=json.dumps(body), headers=self._headers,
                                    proxy=self._proxy) as resp:
                status = resp.status
                raw = await _read_bounded(resp, limit, self.judge)
                if resp.status >= 400:
                    raise status_error(self.judge, resp.status, _json_or_text(raw), resp.headers)
        except (TimeoutError, aiohttp.ClientConnectionError) as exc:
            raise connection_error(self.judge, exc) from None
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

    async def complete(self, prompt: str, system_prompt: str | None, temperature: float) -> Completion:
        messages = ([{"role": "system", "content": system_prompt}] if system_prompt else []) + \
            [{"role": "user", "content": prompt}]
        body = await self._post({"model": self.judge.model, "messages": messages, "temperature": temperature,
                                 "max_tokens": self.judge.max_tokens})
        choices = body.get("choices") if isinstance(body, dict) else None
        choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
        message = choice.get("message")
        if not isinstance(message, dict) or not isinstance(message.get("content"), str | None):
            raise malformed(self.judge, "no choices[0].message.content")
        text = message.get("content")
        usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
        return Completion(text if isinstance(text, str) else None, _str_or_none(body.get("model")),
                          _str_or_none(body.get("id")), _count(usage.get("prompt_tokens")),
                          _count(usage.get("completion_tokens")))


class AnthropicProvider(_HTTPProvider):
    """Anthropic's Messages API (``POST /v1/messages``)."""

    DEFAULT_BASE_URL = "https://api.anthropic.com"
    API_VERSION = "2023-06-01"

    def __init__(self, judge: Judge, timeout: float):
        base = judge.base_url or os.environ.get("ANTHROPIC_BASE_URL") or self.DEFAULT_BASE_URL
        super().__init__(judge, timeout, base.rstrip("/") + "/v1/messages",
                         {"x-api-key": api_key(judge), "anthropic-version": self.API_VERSION})

    async def complete(self, prompt: str, system_prompt: str | None, temperature: float) -> Completion:
        request = {"model": self.judge.model, "max_tokens": self.judge.max_tokens, "temperature": temperature,
                   "messages": [{"role": "user", "content": prompt}]}
        if system_prompt:
            request["system"] = system_prompt
        body = await self._post(request)
        content = body.get("content") if isinstance(body, dict) else None
        if not isinstance(content, list):
            raise malformed(self.judge, "no content list")
        # the text blocks, in order (a thinking block has no "text"); no text block at all is an empty completion
        texts = [b["text"] for b in content if isinstance(b, dict) and isinstance(b.get("text"), str)] \
            if isinstance(content, list) else []
        usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
        return Completion("".join(texts) if texts else None, _str_or_none(body.get("model")),
                          _str_or_none(body.get("id")), _count(usage.get("input_tokens")),
                          _count(usage.get("output_tokens")))


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
