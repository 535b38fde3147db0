"""The providers (OpenAI-compatible, Anthropic) against an endpoint that answers badly: untrusted bodies.

A local aiohttp app stands in for the endpoint and answers each request from a script, so every
malformed shape is reached: not JSON, JSON of the wrong shape, fields of the wrong type, an HTML error
page, a 429 with Retry-After, a key echoed back. None may raise anything but a ProviderError, and no
message may carry the key.
"""

import asyncio
import json

import pytest
from aiohttp import web

from evalgauge.collect.config import Judge
from evalgauge.collect.providers import AnthropicProvider, Completion, OpenAIProvider, ProviderError

KEY = "sk-test-provider-0123456789abcdefghij"


async def _serve(replies):
    """An app answering each POST with the next (status, headers, body) and recording the requests."""
    seen = []

    async def handler(request):
        seen.append((request.path, dict(request.headers), await request.json()))
        status, headers, body = replies[min(len(seen), len(replies)) - 1]
        return web.Response(status=status, headers=headers, body=body)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    app.router.add_post("/v1/messages", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return runner, port, seen


def _complete(replies, monkeypatch, *, system_prompt=None, provider=OpenAIProvider):
    """(result or the ProviderError, the requests the server saw) for one call."""
    monkeypatch.setenv("PROV_KEY", KEY)

    async def go():
        runner, port, seen = await _serve(replies)
        base = f"http://127.0.0.1:{port}" + ("/" if provider is AnthropicProvider else "/v1/")
        judge = Judge(name="j", model="m-1", base_url=base, api_key_env="PROV_KEY", max_tokens=7)
        client = provider(judge, timeout=5)
        try:
            try:
                result = await client.complete("Rate this", system_prompt, 0.7)
            except ProviderError as exc:
                result = exc
        finally:
            await client.close()
            await runner.cleanup()
        return result, seen

    return asyncio.run(go())


def ok_body(**fields):
    body = {"id": "r1", "model": "m-1", "choices": [{"message": {"role": "assistant", "content": "Score: 4"}}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 3}}
    body.update(fields)
    return json.dumps(body).encode()


def test_the_request_is_the_chat_completions_call(monkeypatch):
    result, seen = _complete([(200, {}, ok_body())], monkeypatch, system_prompt="Be strict.")
    assert result == Completion("Score: 4", "m-1", "r1", 11, 3)
    path, headers, body = seen[0]
    assert path == "/v1/chat/completions"  # a trailing slash on base_url does not double
    assert headers["Authorization"] == f"Bearer {KEY}"
    assert body == {"model": "m-1", "temperature": 0.7, "max_tokens": 7,
                    "messages": [{"role": "system", "content": "Be strict."}, {"role": "user", "content": "Rate this"}]}


@pytest.mark.parametrize("body", [
    b"<html>not json</html>", b"\xff\xfe\x00garbage", b"[1, 2, 3]", b"null", b'"a string"',
    json.dumps({"choices": []}).encode(), json.dumps({"choices": "x"}).encode(),
    json.dumps({"choices": [None]}).encode(), json.dumps({"choices": [{"message": "hi"}]}).encode(),
    json.dumps({"choices": [{"message": {"content": 42}}]}).encode(),
])
def test_a_malformed_answer_is_a_retryable_billed_error_not_an_answer(monkeypatch, body):
    result, _ = _complete([(200, {}, body)], monkeypatch)
    assert isinstance(result, ProviderError) and result.retryable and result.billed and not result.fatal
    assert "malformed reply" in str(result)


def test_a_null_content_is_an_empty_completion(monkeypatch):
    body = json.dumps({"choices": [{"message": {"content": None}}], "usage": {"prompt_tokens": -5,
                                                                             "completion_tokens": "3"}}).encode()
    result, _ = _complete([(200, {}, body)], monkeypatch)
    assert isinstance(result, Completion)
    assert result.text is None and result.input_tokens == 0 and result.output_tokens == 0


def test_usage_and_ids_of_the_wrong_type_are_dropped(monkeypatch):
    result, _ = _complete([(200, {}, ok_body(id=5, model=["x"], usage={"prompt_tokens": True,
                                                                          "completion_tokens": 2.5}))], monkeypatch)
    assert result == Completion("Score: 4", None, None, 0, 0)


def test_error_statuses_carry_what_to_do_and_never_the_key(monkeypatch):
    echo = json.dumps({"error": {"message": f"Incorrect API key provided: {KEY}"}}).encode()
    result, _ = _complete([(401, {}, echo)], monkeypatch)
    assert isinstance(result, ProviderError) and result.fatal and result.status == 401
    assert "PROV_KEY" in str(result) and KEY not in str(result) and "Incorrect API key" in str(result)

    result, _ = _complete([(502, {"Content-Type": "text/html"}, b"<html>\x1b[31mBad gateway</html>")], monkeypatch)
    assert isinstance(result, ProviderError) and result.retryable and not result.fatal
    assert "\x1b" not in str(result)

    result, _ = _complete([(429, {"retry-after-ms": "1500"}, b"{}")], monkeypatch)
    assert result.retryable and result.retry_after == 1.5
    result, _ = _complete([(429, {"Retry-After": "3"}, b"slow down")], monkeypatch)
    assert result.retryable and result.retry_after == 3.0


def test_a_closed_port_is_a_connection_error_naming_the_endpoint(monkeypatch):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("PROV_KEY", KEY)
    judge = Judge(name="j", model="m", base_url=f"http://127.0.0.1:{port}/v1", api_key_env="PROV_KEY")

    async def go():
        provider = OpenAIProvider(judge, timeout=5)
        try:
            await provider.complete("x", None, 0.0)
        finally:
            await provider.close()

    with pytest.raises(ProviderError) as info:
        asyncio.run(go())
    assert info.value.retryable and info.value.connection
    assert f"127.0.0.1:{port}" in str(info.value) and KEY not in str(info.value)


def test_no_base_url_uses_the_environment_then_openai(monkeypatch):
    monkeypatch.setenv("PROV_KEY", KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    judge = Judge(name="j", model="m", api_key_env="PROV_KEY")
    assert OpenAIProvider(judge, 5).url == "https://api.openai.com/v1/chat/completions"
    monkeypatch.setenv("OPENAI_BASE_URL", "http://gateway.local/v1")
    assert OpenAIProvider(judge, 5).url == "http://gateway.local/v1/chat/completions"


def anthropic_body(**fields):
    body = {"id": "msg_1", "type": "message", "model": "m-1", "content": [{"type": "text", "text": "Score: 4"}],
            "usage": {"input_tokens": 11, "output_tokens": 3}}
    body.update(fields)
    return json.dumps(body).encode()


def test_anthropic_request_and_answer(monkeypatch):
    result, seen = _complete([(200, {}, anthropic_body())], monkeypatch, system_prompt="Be strict.",
                             provider=AnthropicProvider)
    assert result == Completion("Score: 4", "m-1", "msg_1", 11, 3)
    path, headers, body = seen[0]
    assert path == "/v1/messages" and headers["x-api-key"] == KEY and headers["anthropic-version"]
    assert "Authorization" not in headers
    assert body == {"model": "m-1", "max_tokens": 7, "temperature": 0.7, "system": "Be strict.",
                    "messages": [{"role": "user", "content": "Rate this"}]}
    # a thinking block before the text has no "text": only the text blocks are the completion
    thinking = anthropic_body(content=[{"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "4"},
                                       {"type": "text", "text": "."}])
    result, _ = _complete([(200, {}, thinking)], monkeypatch, provider=AnthropicProvider)
    assert result.text == "4."


@pytest.mark.parametrize("body", [
    b"<html>", b"[]", json.dumps({"content": "text"}).encode(),
    json.dumps({"content": [{"type": "thinking"}]}).encode(),
    json.dumps({"content": [{"type": "text", "text": 3}], "usage": {"input_tokens": "9"}}).encode(),
])
def test_anthropic_malformed_answer_is_a_retryable_error_or_an_empty_completion(monkeypatch, body):
    result, _ = _complete([(200, {}, body)], monkeypatch, provider=AnthropicProvider)
    if isinstance(body, bytes) and body.startswith(b'{"content": ['):  # a list with no text block: empty
        assert isinstance(result, Completion) and result.text is None and result.input_tokens == 0
    else:
        assert isinstance(result, ProviderError) and result.retryable and result.billed


def test_anthropic_overloaded_is_retried(monkeypatch):
    result, _ = _complete([(529, {"retry-after": "2"}, json.dumps({"error": {"message": "Overloaded"}}).encode())],
                          monkeypatch, provider=AnthropicProvider)
    assert isinstance(result, ProviderError) and result.retryable and result.retry_after == 2.0
    assert "529" in str(result)


def test_proxies_come_from_the_environment_once(monkeypatch):
    """HTTP(S)_PROXY as the vendor SDKs honour it, NO_PROXY exempting a host; looked up once per judge."""
    monkeypatch.setenv("PROV_KEY", KEY)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy", "ALL_PROXY",
                 "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    remote = Judge(name="j", model="m", base_url="https://api.example.com/v1", api_key_env="PROV_KEY")
    local = Judge(name="k", model="m", base_url="http://127.0.0.1:8080/v1", api_key_env="PROV_KEY")
    assert OpenAIProvider(remote, 5)._proxy is None
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    assert OpenAIProvider(remote, 5)._proxy == "http://proxy.internal:3128"
    assert AnthropicProvider(remote, 5)._proxy == "http://proxy.internal:3128"
    assert OpenAIProvider(local, 5)._proxy is None  # exempted by NO_PROXY (and plain http has no proxy set)
