"""Per-minute limits (issue 40.6): never more than ``rpm`` requests or ``tpm`` tokens in any 60-second
window, from the first minute on (a bucket that starts full sends two minutes' worth in the first), and
absurd limits refused when the configuration is loaded."""

import asyncio

import numpy as np
import pytest
from click.testing import CliRunner

from evalgauge.cli import main
from evalgauge.collect.runner import LIMIT_WINDOW_S, RateLimiter
from hostile import collect_against
from serve_sim import KEY, write_config


class VirtualTime:
    """A clock that moves only when the limiter sleeps: minutes of pacing checked in milliseconds."""

    def __init__(self):
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)


def _most_in_a_window(times: np.ndarray, window: float, weights: np.ndarray | None = None) -> float:
    """The most requests (or tokens, with ``weights``) sent in any half-open window of ``window`` seconds."""
    times = np.sort(times) if weights is None else times
    w = np.ones(len(times)) if weights is None else weights
    cum = np.concatenate([[0.0], np.cumsum(w)])
    ends = np.searchsorted(times, times + window, side="left")
    return float((cum[ends] - cum[np.arange(len(times))]).max())


def _run(limiter: RateLimiter, vt: VirtualTime, requests: int, tokens, concurrency: int = 256) -> np.ndarray:
    sent = []
    todo = iter(range(requests))

    async def worker():
        for k in todo:
            await limiter.acquire(tokens(k))
            sent.append((vt.now, tokens(k)))

    async def main_():
        await asyncio.gather(*(worker() for _ in range(concurrency)))

    asyncio.run(main_())
    return np.array(sent)


@pytest.mark.parametrize("rpm", [1200, 60, 7.5, 1])
def test_no_60_second_window_holds_more_than_rpm_requests(rpm):
    vt = VirtualTime()
    limiter = RateLimiter(rpm, None, clock=vt.clock, sleep=vt.sleep)
    n = int(2 * rpm) + 3
    sent = _run(limiter, vt, n, lambda k: 100)
    assert _most_in_a_window(sent[:, 0], 60.0) <= rpm
    assert _most_in_a_window(sent[:, 0], 1.0) <= max(1, np.ceil(rpm / 60))  # paced, not in bursts
    # and the limit is used: the n requests take the time the pacing needs, no more (a fractional limit
    # allows its whole part in a window, so its pace is the window's: 7 requests per 61 s at rpm = 7.5)
    pace = LIMIT_WINDOW_S / rpm if rpm == int(rpm) else None
    if pace is not None:
        assert sent[-1, 0] == pytest.approx((n - 1) * pace, rel=1e-9)
    else:
        assert _most_in_a_window(sent[:, 0], LIMIT_WINDOW_S) == int(rpm)


def test_no_60_second_window_holds_more_than_tpm_tokens():
    vt = VirtualTime()
    rng = np.random.default_rng(0)
    sizes = rng.integers(100, 5000, 400)
    limiter = RateLimiter(None, 50_000, clock=vt.clock, sleep=vt.sleep)
    sent = _run(limiter, vt, len(sizes), lambda k: int(sizes[k]))
    assert _most_in_a_window(sent[:, 0], 60.0, sent[:, 1]) <= 50_000
    assert sent[:, 1].sum() == sizes.sum()  # every request went
    # a request larger than the limit goes alone in its window rather than never
    vt2 = VirtualTime()
    alone = _run(RateLimiter(None, 1000, clock=vt2.clock, sleep=vt2.sleep), vt2, 3, lambda k: 5000)
    assert np.diff(alone[:, 0]).min() >= LIMIT_WINDOW_S


def test_requests_reach_a_real_server_paced(tmp_path, monkeypatch):
    """32 calls at rpm = 600 against the loopback server: its own clock sees no second with more than 11
    requests (a full bucket sent them all in the first instant)."""
    monkeypatch.setenv("SIM_KEY", KEY)
    import hostile

    real = hostile.hostile_config

    def paced(tmp, server, **kw):
        path = real(tmp, server, **kw)
        path.write_text(path.read_text().replace("max_tokens = 16", "max_tokens = 16\nrpm = 600"))
        return path

    monkeypatch.setattr(hostile, "hostile_config", paced)
    _, _, calls, *_, server, _ = collect_against(tmp_path, "good", KEY)
    assert len(calls) == 32 and server.requests == 32
    arrivals = np.array(server.arrivals)
    assert _most_in_a_window(arrivals, 1.0) <= 11
    assert arrivals.max() - arrivals.min() >= 31 * LIMIT_WINDOW_S / 600 - 0.05


@pytest.mark.parametrize("value,said", [("1e-300", "greater than or equal to 1"), ("0", "greater than or equal"),
                                        ("inf", "finite"), ("nan", "finite"), ("1e12", "less than or equal")])
def test_an_absurd_limit_is_refused_when_the_configuration_is_loaded(tmp_path, value, said):
    config = write_config(tmp_path, 1)
    config.write_text(config.read_text().replace("max_tokens = 16", f"max_tokens = 16\nrpm = {value}", 1))
    out = CliRunner().invoke(main, ["run", str(config), "--dry-run"])
    assert out.exit_code == 2 and "rpm" in out.output and said in out.output, out.output
