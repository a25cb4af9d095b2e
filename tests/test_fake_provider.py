"""The fake provider limits, answers and counts like a real API (no sleeping: its clock is ours)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from ratelimit import parse_rate_limit_headers
from ratelimit.testing import FakeProvider


class Tick:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def get(url: str) -> tuple[int, dict[str, str], object]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, dict(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), json.loads(error.read())


@pytest.fixture
def tick() -> Tick:
    return Tick()


@pytest.fixture
def fixed(tick: Tick) -> Iterator[FakeProvider]:
    with FakeProvider(3, 10, clock=tick, wall_clock=lambda: 1_700_000_000.0 + tick.now) as provider:
        yield provider


def test_fixed_window_refuses_beyond_the_limit_with_headers(fixed: FakeProvider, tick: Tick) -> None:
    answers = [get(fixed.url) for _ in range(4)]
    assert [status for status, _, _ in answers] == [200, 200, 200, 429]
    assert [h["X-RateLimit-Remaining"] for _, h, _ in answers] == ["2", "1", "0", "0"]
    _, headers, body = answers[3]
    assert headers["Retry-After"] == "10"
    assert body == {"error": "rate limited"}
    info = parse_rate_limit_headers(headers, now=1_700_000_000.0 + tick.now)
    assert info.remaining == 0
    assert info.reset_after == 10
    assert info.retry_after == 10
    tick.now += 10
    assert get(fixed.url)[0] == 200
    stats = fixed.stats()
    assert (stats.served, stats.refused, stats.max_in_window) == (4, 1, 3)


def test_token_bucket_bursts_then_refills(tick: Tick) -> None:
    with FakeProvider(10, 10, mode="token_bucket", burst=2, headers="ietf", clock=tick) as provider:
        assert [get(provider.url)[0] for _ in range(3)] == [200, 200, 429]
        status, headers, _ = get(provider.url)
        assert status == 429
        assert headers["RateLimit-Policy"] == "10;w=10"
        assert headers["Retry-After"] == "1"
        tick.now += 1
        assert get(provider.url)[0] == 200


def test_forced_statuses_and_pauses(fixed: FakeProvider, tick: Tick) -> None:
    fixed.force_status(503, count=2, retry_after=2.5)
    first, second = get(fixed.url), get(fixed.url)
    assert (first[0], first[1]["Retry-After"], second[0]) == (503, "3", 503)
    assert get(fixed.url)[0] == 200  # forced answers used no budget
    fixed.pause(5)
    status, headers, _ = get(fixed.url)
    assert (status, headers["Retry-After"]) == (429, "5")
    tick.now += 5
    assert get(fixed.url)[0] == 200
    assert (fixed.served, fixed.refused) == (2, 1)


def test_stop_frees_the_port() -> None:
    provider = FakeProvider(1, 1).start()
    port = provider.port
    provider.stop()
    provider.stop()
    with FakeProvider(1, 1, port=port) as again:
        assert again.port == port


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"limit": 0, "window": 1}, "limit must be a whole number > 0, got 0"),
        ({"limit": 1, "window": -1}, "window must be a number of seconds > 0, got -1"),
        ({"limit": 1, "window": 1, "mode": "leaky"}, "mode must be 'fixed_window' or 'token_bucket', got 'leaky'"),
        ({"limit": 1, "window": 1, "headers": "x"}, "headers must be 'x-ratelimit' or 'ietf', got 'x'"),
    ],
)
def test_bad_arguments(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        FakeProvider(**kwargs)  # type: ignore[arg-type]
