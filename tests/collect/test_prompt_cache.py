"""Prompt caching and prices that match the bill: cached and cache-written input tokens read from each provider's
usage, stored per call, charged at their own prices, and the run's cost equal to the simulated provider's own
account (its ledger) for OpenAI's automatic cache and Anthropic's cache_control."""

import json

import pytest

from evalgauge.collect.config import Judge, load_config
from evalgauge.collect.providers import Completion
from evalgauge.collect.reply import vet
from evalgauge.collect.runner import run, worst_case_cost
from evalgauge.collect.tasks import count_tasks
from evalgauge.store import RunStore
from serve_sim import KEY, Server, free_port, write_config

RUBRIC = "You grade answers to exam questions against this rubric. " + " ".join(
    f"Criterion {k}: the answer states the fact asked for, in its own words, without hedging or padding."
    for k in range(60))  # about 6,000 bytes: over the caches' 1,024 tokens at up to 4 bytes a token


def test_prices_of_cached_and_written_input():
    plain = Judge("j", "m", price_input_per_mtok=2.0, price_output_per_mtok=8.0)
    assert plain.price(1000, 100) == pytest.approx((1000 * 2 + 100 * 8) / 1e6)
    assert plain.price(1000, 100, cached=600) == plain.price(1000, 100)  # no cached price: never under the bill
    cheap = Judge("j", "m", price_input_per_mtok=2.0, price_output_per_mtok=8.0, price_cached_input_per_mtok=0.5)
    assert cheap.price(1000, 100, cached=600) == pytest.approx((400 * 2 + 600 * 0.5 + 100 * 8) / 1e6)
    claude = Judge("c", "m", provider="anthropic", price_input_per_mtok=3.0, price_output_per_mtok=15.0,
                   price_cached_input_per_mtok=0.3)
    assert claude.write_price == pytest.approx(3.75)  # Anthropic's 5-minute cache writes: 1.25 x the input price
    assert claude.price(2000, 10, cached=0, written=1500) == pytest.approx((500 * 3 + 1500 * 3.75 + 10 * 15) / 1e6)
    mine = Judge("c", "m", provider="anthropic", price_input_per_mtok=3.0, price_cache_write_per_mtok=6.0)
    assert mine.write_price == 6.0  # the user's value wins
    for judge in (plain, cheap, claude, mine):  # the reservation covers any split of the input
        worst = judge.worst_price(2000, 10)
        assert all(judge.price(2000, 10, cached=c, written=w) <= worst + 1e-15
                   for c in (0, 1000, 2000) for w in (0, 1000) if c + w <= 2000)
    assert worst_case_cost(claude, "x" * 300, RUBRIC) > worst_case_cost(
        Judge("c", "m", price_input_per_mtok=3.0, price_output_per_mtok=15.0), "x" * 300, RUBRIC)


def test_an_implausible_cache_count_is_charged_at_the_worst_case():
    judge = Judge("j", "m", price_input_per_mtok=2.0, price_output_per_mtok=8.0, price_cached_input_per_mtok=0.5,
                  max_tokens=16)
    said = Completion("Score: 3", "m", "r1", 1400, 3, "stop", cached_tokens=5000)  # more cached than sent
    vetted = vet(said, judge, "prompt " * 20, RUBRIC, secrets=[])
    assert vetted.worst_case and vetted.cached_tokens == 0 and "implausible usage" in "; ".join(vetted.flags)
    assert vetted.cost(judge) == judge.worst_price(vetted.input_tokens, judge.max_tokens)
    fine = vet(Completion("Score: 3", "m", "r2", 1400, 3, "stop", cached_tokens=1280), judge, "prompt " * 20,
               RUBRIC, secrets=[])
    assert not fine.worst_case and fine.cost(judge) == judge.price(1400, 3, cached=1280)


def _cached_config(tmp_path, port, provider, prompt=RUBRIC):
    config = write_config(tmp_path, port, items=4, systems=2, reps=2, judges=1, provider=provider, in_flight=1)
    text = config.read_text().replace("price_input_per_mtok = 1.0", "price_input_per_mtok = 2.0\n"
                                      "price_cached_input_per_mtok = 0.5")
    config.write_text(f"system_prompt = {json.dumps(prompt)}\n" + text)
    return config


def _bill(ledger, judge: Judge) -> tuple[float, int, int]:
    """The provider's own account: every answered request's usage at the judge's prices."""
    total, cached, written = 0.0, 0, 0
    for line in ledger.read_text().splitlines():
        u = json.loads(line)
        total += judge.price(u["input"], u["output"], u["cached"], u["written"])
        cached, written = cached + u["cached"], written + u["written"]
    return total, cached, written


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_the_runs_cost_is_the_providers_bill(tmp_path, monkeypatch, provider):
    monkeypatch.setenv("SIM_KEY", KEY)
    port = free_port()
    config = _cached_config(tmp_path, port, provider)
    ledger = tmp_path / "ledger.jsonl"
    server = Server(config, port, extra=("--ledger", str(ledger)))
    try:
        cfg = load_config(config)
        summary = run(cfg)
    finally:
        server.stop()
    assert summary.completed == count_tasks(cfg) and summary.failed == 0
    judge = cfg.judges[0]
    bill, cached, written = _bill(ledger, judge)
    store = RunStore(cfg.database)
    calls = store.calls()
    assert store.cost() == pytest.approx(bill, rel=1e-12) and round(store.cost(), 2) == round(bill, 2)
    assert int(calls["cached_tokens"].sum()) == cached and int(calls["cache_write_tokens"].sum()) == written
    # one call at a time: every call after the first reads the rubric from the cache
    assert (calls["cached_tokens"] > 0).sum() == len(calls) - 1
    if provider == "anthropic":
        assert written > 0 and int((calls["cache_write_tokens"] > 0).sum()) == 1
    else:
        assert written == 0
    uncached = sum(judge.price(int(r.input_tokens), int(r.output_tokens)) for r in calls.itertuples())
    assert store.cost() < uncached  # the cache paid


def test_a_short_system_prompt_is_not_marked_for_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SIM_KEY", KEY)
    port = free_port()
    config = _cached_config(tmp_path, port, "anthropic", prompt="Grade the answer.")
    ledger = tmp_path / "ledger.jsonl"
    server = Server(config, port, extra=("--ledger", str(ledger)))
    try:
        cfg = load_config(config)
        run(cfg)
    finally:
        server.stop()
    usage = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert usage and all(u["cached"] == 0 and u["written"] == 0 for u in usage)


def _priced_config(tmp_path, judges: str):
    config = write_config(tmp_path, 8765, items=2, systems=1, reps=1, judges=1)
    text = config.read_text()
    text = text.replace("max_retries = 8", "max_retries = 8\nprices = \"genai-prices\"")
    config.write_text(text[:text.index("[[judges]]")] + judges)
    return config


def test_prices_from_the_genai_prices_table_the_users_values_win(tmp_path):
    pytest.importorskip("genai_prices")
    from evalgauge.errors import DataError

    config = _priced_config(tmp_path, """
[[judges]]
name = "mini"
model = "gpt-4o-mini"

[[judges]]
name = "haiku"
model = "claude-3-5-haiku-20241022"
provider = "anthropic"
price_output_per_mtok = 3.0

[[judges]]
name = "local"
model = "smollm2"
base_url = "http://127.0.0.1:8765/v1"
price_input_per_mtok = 0
price_output_per_mtok = 0
""")
    judges = {j.name: j for j in load_config(config).judges}
    mini, haiku, local = judges["mini"], judges["haiku"], judges["local"]
    # the table's prices for OpenAI's gpt-4o-mini (per million tokens)
    assert (mini.price_input_per_mtok, mini.price_output_per_mtok) == pytest.approx((0.15, 0.6))
    assert mini.cached_price == pytest.approx(0.075) and mini.write_price == pytest.approx(0.15)
    assert haiku.price_input_per_mtok == pytest.approx(0.8) and haiku.price_output_per_mtok == 3.0  # the user's
    assert haiku.cached_price == pytest.approx(0.08) and haiku.write_price == pytest.approx(1.0)
    assert local.price_input_per_mtok == local.price_output_per_mtok == 0.0 and local.cached_price == 0.0
    unknown = _priced_config(tmp_path, '[[judges]]\nname = "x"\nmodel = "no-such-model-2099"\n')
    with pytest.raises(DataError, match=r"run.toml: \[\[judges\]\] #1 \('x', model 'no-such-model-2099'\): "
                                        r"genai-prices has no price for it"):
        load_config(unknown)
    unpriced = _priced_config(tmp_path, '[[judges]]\nname = "l"\nmodel = "m"\nbase_url = "http://127.0.0.1:1/v1"\n')
    with pytest.raises(DataError, match="set price_input_per_mtok and price_output_per_mtok in its table"):
        load_config(unpriced)
