"""The collector's byte and token limits: how long a completion of ``max_tokens`` tokens can be, how many bytes of a
reply are read, and an input-token count no tokenizer exceeds. A leaf: the providers, the reply gate and the runner
all read it, and it imports none of them."""

from __future__ import annotations

#: UTF-8 bytes one generated token decodes to, on average over a completion, at most. Real tokenizers
#: average 3-5 bytes a token on text; only runs of whitespace or repeated symbols reach tens of bytes.
#: A completion longer than ``max_tokens`` times this is not a completion of ``max_tokens`` tokens.
MAX_BYTES_PER_TOKEN = 32
#: Room for a short answer with a tiny ``max_tokens`` (a closing quote, a stop sequence).
TEXT_SLACK_BYTES = 256

#: Chat templates add a few tokens per message (OpenAI: 3-4; Llama 3: 5); this bounds them with room to spare.
MESSAGE_OVERHEAD_TOKENS = 32


def text_limit(max_tokens: int) -> int:
    """The most UTF-8 bytes a completion of ``max_tokens`` tokens is accepted with."""
    return max_tokens * MAX_BYTES_PER_TOKEN + TEXT_SLACK_BYTES


def body_limit(max_tokens: int) -> int:
    """The most bytes read of a reply: the text at its limit, JSON-escaped (6 bytes a character), and room."""
    return 6 * text_limit(max_tokens) + 64 * 1024


def worst_case_input_tokens(prompt: str, system_prompt: str | None = None, history: tuple = ()) -> int:
    """An input-token count no tokenizer the providers use can exceed, without a tokenizer.

    Byte-level BPE (OpenAI, Anthropic, Llama 3, Qwen) and SentencePiece with byte fallback emit at
    most one token per UTF-8 byte of text, so the UTF-8 length of every message (the system prompt
    included) plus each message's template tokens is an upper bound for any script: Latin text takes
    about 4 bytes a token, CJK 1.5-3, emoji 1-4, so this never undercounts and overcounts by at most
    about 4x.
    """
    n = utf8_bytes(prompt) + 2 * MESSAGE_OVERHEAD_TOKENS
    for answer, follow_up in history:  # a re-ask's earlier turns: two more messages each
        n += utf8_bytes(answer) + utf8_bytes(follow_up) + 2 * MESSAGE_OVERHEAD_TOKENS
    if system_prompt:
        n += utf8_bytes(system_prompt) + MESSAGE_OVERHEAD_TOKENS
    return n


def utf8_bytes(text: str) -> int:
    """The UTF-8 length of ``text`` (a lone surrogate counted as its 3 bytes), without encoding ASCII text,
    whose length it is (``isascii`` is one flag of the string, not a scan)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
