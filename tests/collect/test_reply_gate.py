"""The reply gate (collect/reply.py): what it takes out of a reply's identifiers and what it keeps."""

import pandas as pd

from evalgauge.analysis.diagnostics import diagnose
from evalgauge.collect.config import Judge
from evalgauge.collect.providers import Completion
from evalgauge.collect.reply import vet

JUDGE = Judge(name="j", model="gpt-4o-mini", max_tokens=16)
KEY = "sk-proj-Zk3mQ9vT2xLp8RwY4nB7cD1eF6gH0jK5"
#: response ids as OpenAI, OpenRouter, Anthropic (request id) and a local server write them
REAL_IDS = ["chatcmpl-B9MBs8CjcvOU2jLn4n570S5ZBFtAa", "gen-1733000000-AbCdEfGh12345678",
            "req_011CPWvLQ8PsbPtK6RdnUQ8W", "msg_01XFDUDYJgAACzvnptvVoYEL", "chatcmpl-000000000123"]


def _vet(response_id, text="Score: 7", model="gpt-4o-mini-2024-07-18", secrets=()):
    return vet(Completion(text, model, response_id, 30, 3, "stop"), JUDGE, "Rate it. Score: N", None, list(secrets))


def test_a_providers_response_ids_are_kept_and_not_flagged():
    for rid in REAL_IDS:
        vetted = _vet(rid, secrets=[KEY])
        assert vetted.completion.response_id == rid and vetted.flags == ()


def test_the_runs_key_or_a_known_key_shape_inside_an_identifier_is_taken_out_and_said():
    for rid in (f"chatcmpl-{KEY}", f"Bearer {KEY}"):
        vetted = _vet(rid, secrets=[KEY])
        assert KEY not in vetted.completion.response_id and "***" in vetted.completion.response_id
        assert vetted.flags == ("key-shaped text redacted",)
    other = "AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUv"  # a Google key the run did not send
    assert other not in _vet(other, secrets=[KEY]).completion.response_id
    assert KEY not in _vet("x", model=f"m {KEY}", secrets=[KEY]).completion.model


def test_a_key_shaped_token_in_the_completion_is_still_taken_out():
    token = "Zk3mQ9vT2xLp8RwY4nB7cD1eF6gH0jK5"  # no known prefix: the long-random-token rule
    vetted = _vet("chatcmpl-1", text=f"Score: 7 {token}")
    assert token not in vetted.completion.text and vetted.flags == ("key-shaped text redacted",)


def test_real_ids_do_not_read_as_a_cache_in_the_diagnostics():
    rows = []
    for rep, rid in enumerate(REAL_IDS[:4]):
        c = _vet(rid).completion
        rows.append({"item": "q1", "system": "s", "variant": "v", "temperature": 0.0, "judge": "j", "replicate": rep,
                     "position": "", "completion": c.text, "score": 7.0, "parse_error": None, "model": c.model,
                     "response_id": c.response_id, "finished_at": float(rep)})
    diag = diagnose(pd.DataFrame(rows))
    assert diag.repeated_response_ids == 0 and diag.cached_fraction == 0.0
    assert not any("cache" in w for w in diag.warnings)
