"""A provider's reply is untrusted: the one place it is made safe to store, show and charge for.

Every completion, judge or generating system, passes through :func:`vet` before it is parsed, priced
or written: the run's secret values and known providers' key shapes are redacted from every text field it carries
(the completion, model id, response id and finish reason: a server may echo the Authorization header into any of
them), and from the completion any long random token that looks like a key (ids are such tokens by design and keep
theirs); lone UTF-16 surrogates (valid JSON, not valid UTF-8) become U+FFFD; identifiers lose control characters
and are bounded; a text longer than ``max_tokens`` tokens can decode to is refused; and the token counts charged
are the server's only when they are plausible for this request, otherwise the worst case the request allows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from functools import cache, lru_cache

from .config import Judge
from .limits import MAX_BYTES_PER_TOKEN, text_limit, utf8_bytes, worst_case_input_tokens
from .providers import Completion, ProviderError
from .schema import _KEY_PATTERN, looks_like_key

#: The fewest UTF-8 bytes a prompt token takes, at most (for the floor of a plausible input count).
PROMPT_BYTES_PER_TOKEN_MAX = 32
#: Identifiers (model, response id) are short; anything longer is cut.
ID_LIMIT = 200

_SURROGATE = re.compile("[\ud800-\udfff]")
_TOKENISH = re.compile(r"[A-Za-z0-9_\-.+/=]{16,}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")


# one per call, made once and read: not frozen (see collect.tasks.Task)
@dataclass(slots=True)
class Vetted:
    """A completion safe to store, and the tokens to charge for it."""

    completion: Completion
    input_tokens: int
    output_tokens: int
    flags: tuple[str, ...]
    #: of the input, the tokens read from the prompt cache and written to it (0 when the usage was implausible)
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    #: the usage could not be believed: charged at the most the bounds allow
    worst_case: bool = False

    def cost(self, judge) -> float:
        """What the call costs at ``judge``'s prices: each input token at its own (fresh, read from the cache,
        written to it), or, with an implausible usage, the most the bounds can cost."""
        if self.worst_case:
            return judge.worst_price(self.input_tokens, self.output_tokens)
        return judge.price(self.input_tokens, self.output_tokens, self.cached_tokens, self.cache_write_tokens)


def redact(text: str, secrets: list[str] | tuple[str, ...], *, shapes: bool = True) -> str:
    """``text`` without the run's secret values or a known provider's key; with ``shapes``, nor any long random
    token that looks like a key."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    text = _KEY_PATTERN.sub("***", text)
    if not shapes:
        return text
    return _TOKENISH.sub(lambda m: "***" if looks_like_key(m.group()) else m.group(), text)


@cache
def _other_fields(kind: type) -> tuple[str, ...]:
    """A completion type's fields other than its text."""
    return tuple(f.name for f in fields(kind) if f.name != "text")


def _utf8_safe(text: str) -> str:
    return _SURROGATE.sub("\ufffd", text)


@lru_cache(maxsize=1024)  # a model name or finish reason repeats on every call of a judge
def _identifier(value: str, secrets: tuple[str, ...]) -> tuple[str | None, bool]:
    """An identifier made safe, and whether anything key-shaped was taken out of it.

    Without the long-random-token rule: a provider's response ids are such tokens by design
    (``chatcmpl-B9MBs8CjcvOU2jLn4n570S5ZBFtAa``, ``gen-…``, ``req_…``), and taken as keys every id of a run would
    read "***", each call would be flagged, and the diagnostics would see one id repeated on every call (a cache).
    The key a server can echo is the one the run sent it, removed exactly, or a known provider's key shape."""
    plain = value.isascii() and value.isprintable()  # no surrogate and no control character to take out
    safe = value if plain else _utf8_safe(value)
    redacted = redact(safe, secrets, shapes=False)
    return (redacted if plain else _CONTROL.sub("", redacted))[:ID_LIMIT] or None, redacted != safe


def vet(completion: Completion, judge: Judge, prompt: str, system_prompt: str | None,
        secrets: list[str], history: tuple = ()) -> Vetted:
    """The completion made safe (see the module's docstring); ProviderError when its text is too long."""
    flags: list[str] = []
    text = completion.text
    size = 0
    if text is not None:
        size = utf8_bytes(text)
        if size > text_limit(judge.max_tokens):
            raise ProviderError(
                f"judge '{judge.name}': a completion of {size:,} bytes, more than max_tokens = {judge.max_tokens} "
                f"tokens can be (at most {text_limit(judge.max_tokens):,}); not stored, the cell is asked again on "
                "resume.", retryable=False, billed=True)
        safe_text = text if text.isascii() else _utf8_safe(text)
        if safe_text != text:
            flags.append("lone surrogates replaced")
        text = redact(safe_text, secrets)
        if text != safe_text:
            flags.append("key-shaped text redacted")
    # every other text field (model, response id, finish reason, and any added later) is an identifier
    held = tuple(secrets)
    identifiers = {}
    taken = False
    for name in _other_fields(type(completion)):
        value = getattr(completion, name)
        if isinstance(value, str):
            safe_value, was_taken = _identifier(value, held)
            taken = taken or was_taken
            if safe_value != value:
                identifiers[name] = safe_value
    if taken and "key-shaped text redacted" not in flags:
        flags.append("key-shaped text redacted")
    in_bound = worst_case_input_tokens(prompt, system_prompt, history)
    sent = utf8_bytes(prompt) + sum(utf8_bytes(a) + utf8_bytes(f) for a, f in history)
    in_floor = (sent + utf8_bytes(system_prompt or "")) // PROMPT_BYTES_PER_TOKEN_MAX
    out_floor = (size if text is completion.text else utf8_bytes(text or "")) // MAX_BYTES_PER_TOKEN
    tokens_in, tokens_out = completion.input_tokens, completion.output_tokens
    cached, written = completion.cached_tokens, completion.cache_write_tokens
    worst = not in_floor <= tokens_in <= in_bound or not out_floor <= tokens_out <= judge.max_tokens \
        or (tokens_in == 0 and tokens_out == 0) or not 0 <= cached + written <= tokens_in
    if worst:
        said = f"{tokens_in} in" + (f" ({cached} cached, {written} written)" if cached or written else "")
        flags.append(f"implausible usage ({said}, {tokens_out} out); charged at the worst case")
        tokens_in, tokens_out, cached, written = in_bound, judge.max_tokens, 0, 0
    safe = replace(completion, text=text, **identifiers) if identifiers or text is not completion.text else completion
    return Vetted(safe, tokens_in, tokens_out, tuple(flags), cached, written, worst)
