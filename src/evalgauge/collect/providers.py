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


class ProviderError(Exception):
    """A failed call: ``retryable`` for 429, 5xx, timeouts and connection errors."""

    def __init__(self, message: str, *, retryable: bool, retry_after: float | None = None,
                 status: int | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after
        self.status = status


def api_key(judge: Judge) -> str:
    """The judge's key from its environment variable; local servers may need none."""
    if not judge.api_key_env:
        return "not-needed"
    value = os.environ.get(judge.api_key_env)
    if not value:
        raise DataError(f"judge '{judge.name}': the environment variable {judge.api_key_env} is not set. Export "
                        "the key there (it is never read from the config or written anywhere).")
    return value


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
            status = exc.status_code
            raise ProviderError(f"HTTP {status} from {self.judge.name}", retryable=status == 429 or status >= 500,
                                retry_after=_retry_after(exc.response.headers), status=status) from None
        except (oa.APITimeoutError, oa.APIConnectionError) as exc:
            raise ProviderError(f"{type(exc).__name__} from {self.judge.name}", retryable=True) from None
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
        except an.APIStatusError as exc:
            status = exc.status_code
            retryable = status in (429, 529) or status >= 500  # 529: Anthropic is overloaded
            raise ProviderError(f"HTTP {status} from {self.judge.name}", retryable=retryable,
                                retry_after=_retry_after(exc.response.headers), status=status) from None
        except (an.APITimeoutError, an.APIConnectionError) as exc:
            raise ProviderError(f"{type(exc).__name__} from {self.judge.name}", retryable=True) from None
        text = "".join(getattr(block, "text", "") for block in resp.content) if resp.content else None
        return Completion(text, resp.model, resp.id, resp.usage.input_tokens, resp.usage.output_tokens)

    async def close(self) -> None:
        await self.client.close()


def make_provider(judge: Judge, timeout: float):
    return AnthropicProvider(judge, timeout) if judge.provider == "anthropic" else OpenAIProvider(judge, timeout)
