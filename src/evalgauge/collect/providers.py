"""Providers: any OpenAI-compatible endpoint (official ``openai`` async client) and Anthropic
(official ``anthropic`` client). Keys come only from the environment variable a judge names.

The clients' own retries are off: the runner retries, so it can honour
Retry-After, count attempts and keep the key out of every message.
"""

from __future__ import annotations

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
                 status: int | None = None, fatal: bool = False, connection: bool = False):
        super().__init__(message)
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
    cause = exc.__cause__ or exc.__context__
    reason = _clean(cause) if cause and str(cause) else type(exc).__name__
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
            return float(value) / 1000.0
        except ValueError:
            pass
    value = headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


class OpenAIProvider:
    def __init__(self, judge: Judge, timeout: float):
        import openai

        self._openai = openai
        self.judge = judge
        self.client = openai.AsyncOpenAI(api_key=api_key(judge), base_url=judge.base_url, max_retries=0,
                                         timeout=timeout)

    async def complete(self, prompt: str, system_prompt: str | None, temperature: float) -> Completion:
        messages = ([{"role": "system", "content": system_prompt}] if system_prompt else []) + \
            [{"role": "user", "content": prompt}]
        oa = self._openai
        try:
            resp = await self.client.chat.completions.create(
                model=self.judge.model, messages=messages, temperature=temperature,
                max_tokens=self.judge.max_tokens)
        except oa.APIStatusError as exc:
            raise status_error(self.judge, exc.status_code, exc.body, exc.response.headers) from None
        except (oa.APITimeoutError, oa.APIConnectionError) as exc:
            raise connection_error(self.judge, exc) from None
        choice = resp.choices[0] if resp.choices else None
        text = choice.message.content if choice and choice.message else None
        usage = resp.usage
        return Completion(text, resp.model, resp.id, usage.prompt_tokens if usage else 0,
                          usage.completion_tokens if usage else 0)

    async def close(self) -> None:
        await self.client.close()


class AnthropicProvider:
    def __init__(self, judge: Judge, timeout: float):
        import anthropic

        self._anthropic = anthropic
        self.judge = judge
        kwargs = {"api_key": api_key(judge), "max_retries": 0, "timeout": timeout}
        if judge.base_url:
            kwargs["base_url"] = judge.base_url
        self.client = anthropic.AsyncAnthropic(**kwargs)
        import inspect

        self._takes_temperature = "temperature" in inspect.signature(self.client.messages.create).parameters

    async def complete(self, prompt: str, system_prompt: str | None, temperature: float) -> Completion:
        an = self._anthropic
        kwargs = {"model": self.judge.model, "max_tokens": self.judge.max_tokens,
                  "messages": [{"role": "user", "content": prompt}]}
        if self._takes_temperature:
            kwargs["temperature"] = temperature
        else:  # newer SDKs dropped the keyword; the field still goes in the request body
            kwargs["extra_body"] = {"temperature": temperature}
        if system_prompt:
            kwargs["system"] = system_prompt
        try:
            resp = await self.client.messages.create(**kwargs)
        except an.APIStatusError as exc:  # 529: Anthropic is overloaded (retryable, as 5xx)
            raise status_error(self.judge, exc.status_code, exc.body, exc.response.headers) from None
        except (an.APITimeoutError, an.APIConnectionError) as exc:
            raise connection_error(self.judge, exc) from None
        text = "".join(getattr(block, "text", "") for block in resp.content) if resp.content else None
        return Completion(text, resp.model, resp.id, resp.usage.input_tokens, resp.usage.output_tokens)

    async def close(self) -> None:
        await self.client.close()


def make_provider(judge: Judge, timeout: float):
    return AnthropicProvider(judge, timeout) if judge.provider == "anthropic" else OpenAIProvider(judge, timeout)
