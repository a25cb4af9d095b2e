"""``ratelimit.testing.FakeProvider`` over real HTTP, on a clock the tests move (no sleeping)."""

from __future__ import annotations

import dataclasses
import json
import math
import threading
import time
import urllib.error
import urllib.request
from typing import Literal

import pytest

from ratelimit import parse_rate_limit_headers
from ratelimit.testing import FakeProvider, ProviderStats

# A fractional epoch, so that "rounded up" is visible in X-RateLimit-Reset.
EPOCH = 1_700_000_000.5


class FakeTime:
    """One moment seen through both of the provider's clocks."""

    def __init__(self, start: float = 100.0) -> None:
        self.now = start

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return EPOCH + self.now


@dataclasses.dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: object


def call(url: str, *, data: bytes | None = None) -> Answer:
    request = urllib.request.Request(url, data=data, method="GET" if data is None else "POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return Answer(response.status, dict(response.headers), json.loads(response.read()))
    except urllib.error.HTTPError as error:
        with error:
            return Answer(error.code, dict(error.headers), json.loads(error.read()))


def serve(
    t: FakeTime,
    limit: int,
    window: float,
    *,
    mode: Literal["fixed_window", "sliding_log", "token_bucket"] = "fixed_window",
    burst: int | None = None,
    headers: Literal["x-ratelimit", "ietf", "none"] = "x-ratelimit",
    latency: float = 0.0,
) -> FakeProvider:
    return FakeProvider(
        limit, window, mode=mode, burst=burst, headers=headers, latency=latency, clock=t.monotonic, wall_clock=t.wall
    ).start()


@pytest.fixture
def t() -> FakeTime:
    return FakeTime()


# -- fixed window --------------------------------------------------------------------


def test_fixed_window_refuses_the_request_after_the_limit(t: FakeTime) -> None:
    with serve(t, 3, 10) as provider:
        answers = [call(provider.url) for _ in range(4)]
        assert [a.status for a in answers] == [200, 200, 200, 429]
        assert [a.body for a in answers] == [{"ok": True}] * 3 + [{"error": "rate limited"}]
        assert [a.headers["X-RateLimit-Limit"] for a in answers] == ["3"] * 4
        assert [a.headers["X-RateLimit-Remaining"] for a in answers] == ["2", "1", "0", "0"]
        # The window started at 100 and ends at 110: EPOCH + 110 = ...110.5, rounded up.
        assert {a.headers["X-RateLimit-Reset"] for a in answers} == {"1700000111"}
        assert [("Retry-After" in a.headers) for a in answers] == [False, False, False, True]
        assert answers[3].headers["Retry-After"] == "10"

        t.now = 104.5
        refused = call(provider.url)
        assert (refused.status, refused.headers["Retry-After"]) == (429, "6")  # 5.5 s, rounded up
        assert refused.headers["X-RateLimit-Reset"] == "1700000111"

        t.now = 110.0
        fresh = call(provider.url)
        assert (fresh.status, fresh.headers["X-RateLimit-Remaining"]) == (200, "2")
        assert fresh.headers["X-RateLimit-Reset"] == "1700000121"


def test_fixed_windows_are_aligned_to_the_providers_start() -> None:
    t = FakeTime(start=100.25)
    with serve(t, 1, 10) as provider:
        assert call(provider.url).status == 200
        t.now = 110.2
        assert call(provider.url).status == 429
        t.now = 110.25
        assert call(provider.url).status == 200


def test_a_clock_moved_in_float_steps_still_reaches_the_next_window(t: FakeTime) -> None:
    with serve(t, 1, 1) as provider:
        assert call(provider.url).status == 200
        for _ in range(10):
            t.now += 0.1  # 100 + ten times 0.1 is a hair below 101
        assert call(provider.url).status == 200


# -- token bucket --------------------------------------------------------------------


def test_token_bucket_bursts_then_refuses_then_refills(t: FakeTime) -> None:
    # 1 token per second, up to 3 at once.
    with serve(t, 10, 10, mode="token_bucket", burst=3, headers="ietf") as provider:
        answers = [call(provider.url) for _ in range(4)]
        assert [a.status for a in answers] == [200, 200, 200, 429]
        assert [a.headers["RateLimit-Remaining"] for a in answers] == ["2", "1", "0", "0"]
        # "Reset" is the time until the bucket is full again.
        assert [a.headers["RateLimit-Reset"] for a in answers] == ["1", "2", "3", "3"]
        assert answers[3].headers["Retry-After"] == "1"

        t.now += 0.5
        half = call(provider.url)
        assert (half.status, half.headers["Retry-After"], half.headers["RateLimit-Reset"]) == (429, "1", "3")

        t.now += 0.5
        assert call(provider.url).status == 200

        t.now += 2.5  # 2.5 tokens: remaining is the whole part
        full = call(provider.url)
        assert (full.status, full.headers["RateLimit-Remaining"]) == (200, "1")


def test_token_bucket_burst_defaults_to_the_limit(t: FakeTime) -> None:
    with serve(t, 5, 60, mode="token_bucket") as provider:
        assert provider.burst == 5
        assert [call(provider.url).status for _ in range(6)] == [200] * 5 + [429]
        # A token comes back every 12 s.
        assert call(provider.url).headers["Retry-After"] == "12"


# -- headers -------------------------------------------------------------------------


def test_ietf_headers(t: FakeTime) -> None:
    with serve(t, 5, 60, headers="ietf") as provider:
        answer = call(provider.url)
        assert {name: value for name, value in answer.headers.items() if name.startswith("RateLimit")} == {
            "RateLimit-Limit": "5",
            "RateLimit-Remaining": "4",
            "RateLimit-Reset": "60",
            "RateLimit-Policy": "5;w=60",
        }
        assert not any(name.startswith("X-RateLimit") for name in answer.headers)


@pytest.mark.parametrize(("window", "written"), [(0.5, "0.5"), (1e-7, "0.0000001"), (2_592_000, "2592000")])
def test_the_policy_window_is_a_plain_number(t: FakeTime, window: float, written: str) -> None:
    with serve(t, 5, window, headers="ietf") as provider:
        assert call(provider.url).headers["RateLimit-Policy"] == f"5;w={written}"


@pytest.mark.parametrize("style", ["x-ratelimit", "ietf"])
@pytest.mark.parametrize("mode", ["fixed_window", "token_bucket"])
def test_both_header_styles_parse_as_the_documented_numbers(
    t: FakeTime, style: Literal["x-ratelimit", "ietf"], mode: Literal["fixed_window", "token_bucket"]
) -> None:
    with serve(t, 4, 8, mode=mode, headers=style) as provider:
        for _ in range(4):
            call(provider.url)
        t.now += 1.5
        refused = call(provider.url)
    assert refused.status == 429
    info = parse_rate_limit_headers(refused.headers, now=t.wall())
    assert (info.limit, info.remaining) == (4, 0)
    # Fixed: the window ends at 108. Bucket: 1.5 s refilled 0.75 token of 4, so it is
    # full in 6.5 s and has its next token in 0.5 s. Both styles round up to a whole
    # second, the epoch style from EPOCH's half second.
    expected_reset = 7.0 if style == "ietf" else math.ceil(t.wall() + 6.5) - t.wall()
    assert info.retry_after == (7 if mode == "fixed_window" else 1)
    assert info.reset_after == pytest.approx(expected_reset)


# The headers any HTTP/1.0 answer of the standard library's server carries.
PLAIN = {"Server", "Date", "Content-Type", "Content-Length"}


@pytest.mark.parametrize("mode", ["fixed_window", "sliding_log", "token_bucket"])
def test_a_hidden_limit_sends_no_rate_limit_header_and_no_retry_after(
    t: FakeTime, mode: Literal["fixed_window", "sliding_log", "token_bucket"]
) -> None:
    with serve(t, 2, 10, mode=mode, headers="none") as provider:
        answers = [call(provider.url) for _ in range(3)]
    assert [a.status for a in answers] == [200, 200, 429]
    assert [a.body for a in answers] == [{"ok": True}] * 2 + [{"error": "rate limited"}]
    for answer in answers:
        assert set(answer.headers) == PLAIN, answer.headers
        info = parse_rate_limit_headers(answer.headers, now=t.wall())
        assert (info.limit, info.remaining, info.reset_after, info.retry_after) == (None, None, None, None)


def test_a_hidden_limit_hides_a_pause_too_but_not_an_explicit_forced_retry_after(t: FakeTime) -> None:
    with serve(t, 5, 10, headers="none") as provider:
        provider.pause(3)
        paused = call(provider.url)
        t.now += 3
        provider.force_status(429, retry_after=2)
        forced = call(provider.url)
    assert (paused.status, set(paused.headers)) == (429, PLAIN)
    # Asked for in so many words: a test of a client's Retry-After handling still gets it.
    assert (forced.status, forced.headers["Retry-After"]) == (429, "2")
    assert set(forced.headers) == PLAIN | {"Retry-After"}


def test_the_none_dialect_is_described_like_the_others() -> None:
    provider = FakeProvider(5, 1, headers="none")
    assert provider.headers == "none"


# -- a limit that changes ------------------------------------------------------------


def test_a_limit_lowered_mid_run_refuses_at_the_new_rate(t: FakeTime) -> None:
    # 10 a second with no burst to speak of; a client sending every 100 ms fits.
    with serve(t, 10, 1, mode="token_bucket", burst=1, headers="none") as provider:
        statuses = []
        for i in range(40):
            t.now = 100 + i / 10  # from a whole number each time: no drift
            if i == 20:
                provider.set_limit(5)
                assert (provider.limit, provider.window, provider.burst) == (5, 1.0, 1)
            statuses.append(call(provider.url).status)
        stats = provider.stats()
    assert statuses[:20] == [200] * 20
    # Half of them from then on: one token every 200 ms.
    assert statuses[20:] == [200, 429] * 10
    assert stats.refused_at == pytest.approx([100 + i / 10 for i in range(21, 40, 2)])
    assert (stats.served, stats.refused) == (30, 10)


def test_a_token_bucket_keeps_its_tokens_across_a_change(t: FakeTime) -> None:
    with serve(t, 10, 1, mode="token_bucket", burst=4) as provider:
        assert [call(provider.url).status for _ in range(4)] == [200] * 4
        t.now += 0.2  # two tokens back at the old rate
        provider.set_limit(5)
        assert provider.burst == 4  # a burst given stays
        assert [call(provider.url).status for _ in range(3)] == [200, 200, 429]
        t.now += 0.2  # one token at the new rate
        assert [call(provider.url).status for _ in range(2)] == [200, 429]


def test_a_token_bucket_is_clamped_to_a_smaller_burst(t: FakeTime) -> None:
    with serve(t, 10, 1, mode="token_bucket") as provider:
        provider.set_limit(3)  # the burst was the limit and follows it
        assert provider.burst == 3
        assert [call(provider.url).status for _ in range(4)] == [200] * 3 + [429]
        provider.set_limit(3, burst=1)
        t.now += 10  # full again: one token
        assert [call(provider.url).status for _ in range(2)] == [200, 429]
        provider.set_limit(20)  # the burst given last time stays
        assert provider.burst == 1


def test_a_fixed_window_keeps_its_count_under_a_new_limit(t: FakeTime) -> None:
    with serve(t, 5, 10) as provider:
        assert [call(provider.url).status for _ in range(3)] == [200] * 3
        provider.set_limit(3)
        refused = call(provider.url)
        assert (refused.status, refused.headers["X-RateLimit-Limit"]) == (429, "3")
        assert refused.headers["Retry-After"] == "10"
        provider.set_limit(4)
        assert [call(provider.url).status for _ in range(2)] == [200, 429]


def test_a_fixed_window_of_a_new_length_keeps_its_start(t: FakeTime) -> None:
    with serve(t, 3, 10) as provider:
        assert [call(provider.url).status for _ in range(2)] == [200] * 2
        t.now = 101.0
        provider.set_limit(3, 2)  # the running window [100, 102) keeps its two
        answer = call(provider.url)
        assert (answer.status, answer.headers["X-RateLimit-Reset"]) == (200, "1700000103")  # EPOCH + 102, up
        t.now = 101.9
        assert call(provider.url).status == 429
        t.now = 102.0
        assert call(provider.url).status == 200


def test_a_fixed_window_already_over_at_its_new_length_starts_afresh(t: FakeTime) -> None:
    with serve(t, 2, 10) as provider:
        assert [call(provider.url).status for _ in range(3)] == [200, 200, 429]
        t.now = 105.0
        provider.set_limit(2, 2)  # [100, 102) is over: 105 is in [104, 106)
        assert [call(provider.url).status for _ in range(3)] == [200, 200, 429]
        t.now = 106.0
        assert call(provider.url).status == 200


def test_a_sliding_log_counts_its_log_against_the_new_limit(t: FakeTime) -> None:
    with serve(t, 3, 1, mode="sliding_log") as provider:
        for now in (100.0, 100.1, 100.2):
            t.now = now
            assert call(provider.url).status == 200
        t.now = 100.5
        provider.set_limit(2)
        assert call(provider.url).status == 429  # three in the last second
        t.now = 101.15  # [100.15, 101.15] holds 100.2 alone
        assert [call(provider.url).status for _ in range(2)] == [200, 429]


def test_reset_keeps_the_limit_last_set(t: FakeTime) -> None:
    with serve(t, 5, 10) as provider:
        provider.set_limit(1)
        provider.reset()
        assert [call(provider.url).status for _ in range(2)] == [200, 429]


def test_set_limit_is_thread_safe(t: FakeTime) -> None:
    with serve(t, 1000, 1, mode="token_bucket", burst=50) as provider:

        def changer() -> None:
            for limit in range(1, 200):
                provider.set_limit(limit, burst=limit % 7 + 1)

        def client() -> None:
            for _ in range(20):
                assert call(provider.url).status in (200, 429)

        threads = [threading.Thread(target=changer)] + [threading.Thread(target=client) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        stats = provider.stats()
    assert (provider.limit, provider.burst) == (199, 199 % 7 + 1)
    assert stats.served + stats.refused == 80
    assert len(stats.refused_at) == stats.refused


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"),
    [
        ((0,), {}, ValueError, "limit must be a whole number > 0, got 0"),
        (("3",), {}, TypeError, "limit must be an int, got str '3'"),
        ((3, 0), {}, ValueError, "window must be a number of seconds > 0, got 0"),
        ((3, math.inf), {}, ValueError, "window must be a number of seconds > 0, got inf"),
        ((3, "1"), {}, TypeError, "window must be a number of seconds, got str '1'"),
        ((3,), {"burst": 0}, ValueError, "burst must be a whole number > 0, got 0"),
        ((3,), {"burst": 2.5}, TypeError, "burst must be an int, got float 2.5"),
    ],
)
def test_bad_set_limit_arguments_change_nothing(
    args: tuple[object, ...], kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    provider = FakeProvider(5, 2, mode="token_bucket", burst=3)
    with pytest.raises(error, match="^" + message):
        provider.set_limit(*args, **kwargs)  # type: ignore[arg-type]
    assert (provider.limit, provider.window, provider.burst) == (5, 2.0, 3)


# -- latency -------------------------------------------------------------------------


def test_latency_holds_the_answer_back_after_the_decision(t: FakeTime) -> None:
    with serve(t, 1, 10, latency=0.2) as provider:
        assert provider.latency == 0.2
        began = time.monotonic()
        answers = [call(provider.url) for _ in range(2)]
        took = time.monotonic() - began
        stats = provider.stats()
    assert [a.status for a in answers] == [200, 429]
    assert took >= 0.4  # both answers held, the refusal too
    # What is enforced and recorded is the decision's time, on the provider's clock.
    assert (stats.served_at, stats.refused_at) == ((100.0,), (100.0,))


# -- any path, any body --------------------------------------------------------------


def test_any_path_get_or_post(t: FakeTime) -> None:
    with serve(t, 10, 1) as provider:
        assert call(provider.url + "v1/geocode?q=Paris").body == {"ok": True}
        posted = call(provider.url + "v1/chat/completions", data=json.dumps({"prompt": "x" * 10_000}).encode())
        assert (posted.status, posted.body) == (200, {"ok": True})
        assert posted.headers["Content-Type"] == "application/json"
        assert provider.served == 2


def test_a_large_post_body_is_read_before_the_answer(t: FakeTime) -> None:
    # Unread, a megabyte would make the server's close reset the connection.
    with serve(t, 100, 1) as provider:
        assert [call(provider.url, data=b"x" * 1_000_000).status for _ in range(5)] == [200] * 5


# -- counters ------------------------------------------------------------------------


def test_counters_and_the_busiest_window(t: FakeTime) -> None:
    with serve(t, 3, 10) as provider:
        assert provider.stats() == ProviderStats(served=0, refused=0, max_in_window=0, served_at=(), refused_at=())
        # Three at the end of one window and three at the start of the next: six
        # within two seconds, which is what a fixed window allows and a sliding one would not.
        for now in (108.0, 108.5, 109.0, 109.5, 110.0, 110.5, 111.0, 111.5):
            t.now = now
            call(provider.url)
        stats = provider.stats()
    assert (provider.served, provider.refused) == (6, 2)
    assert stats == ProviderStats(
        served=6,
        refused=2,
        max_in_window=6,
        served_at=(108.0, 108.5, 109.0, 110.0, 110.5, 111.0),
        refused_at=(109.5, 111.5),
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        stats.served = 0  # type: ignore[misc]


def test_max_in_window_counts_an_interval_of_window_seconds(t: FakeTime) -> None:
    with serve(t, 10, 1) as provider:
        for now in (100.0, 100.4, 100.9, 101.0, 101.3, 102.5):
            t.now = now
            call(provider.url)
        # [100.4, 101.4) holds 100.4, 100.9, 101.0 and 101.3; 101.0 is already outside [100.0, 101.0).
        assert provider.stats().max_in_window == 4


def test_counters_are_thread_safe(t: FakeTime) -> None:
    statuses: list[int] = []
    lock = threading.Lock()
    with serve(t, 50, 60) as provider:

        def client() -> None:
            for _ in range(5):
                status = call(provider.url).status
                with lock:
                    statuses.append(status)

        threads = [threading.Thread(target=client) for _ in range(20)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        stats = provider.stats()
    assert (statuses.count(200), statuses.count(429)) == (50, 50)
    assert (stats.served, stats.refused, stats.max_in_window) == (50, 50, 50)


def test_reset_zeroes_counters_and_state(t: FakeTime) -> None:
    with serve(t, 2, 10) as provider:
        for _ in range(3):
            call(provider.url)
        provider.force_status(503)
        provider.pause(30)
        t.now += 3
        provider.reset()
        assert provider.stats() == ProviderStats(served=0, refused=0, max_in_window=0, served_at=())
        answers = [call(provider.url) for _ in range(3)]
        assert [a.status for a in answers] == [200, 200, 429]
        # The new window runs from the reset (103) to 113.
        assert answers[2].headers["Retry-After"] == "10"


# -- faults --------------------------------------------------------------------------


def test_forced_503_with_retry_after_uses_no_budget(t: FakeTime) -> None:
    with serve(t, 2, 10) as provider:
        provider.force_status(503, count=2, retry_after=2.5)
        first, second = call(provider.url), call(provider.url)
        for answer in (first, second):
            assert (answer.status, answer.headers["Retry-After"]) == (503, "3")
            assert answer.body == {"error": "forced 503"}
            assert answer.headers["X-RateLimit-Remaining"] == "2"
        assert [call(provider.url).status for _ in range(3)] == [200, 200, 429]
        # A 503 is neither served nor refused.
        assert (provider.served, provider.refused) == (2, 1)


def test_forced_429_counts_as_refused_and_retry_after_is_optional(t: FakeTime) -> None:
    with serve(t, 5, 10) as provider:
        provider.force_status(429)
        provider.force_status(500, retry_after=0)
        refused, failed = call(provider.url), call(provider.url)
        assert refused.status == 429
        assert "Retry-After" not in refused.headers
        assert (failed.status, failed.headers["Retry-After"]) == (500, "1")  # at least 1
        assert (provider.served, provider.refused) == (0, 1)
        assert call(provider.url).headers["X-RateLimit-Remaining"] == "4"
        assert provider.stats().refused_at == ()  # a forced 429 is not the limit's


def test_pause_refuses_everything_until_it_ends(t: FakeTime) -> None:
    with serve(t, 100, 10) as provider:
        provider.pause(5)
        first = call(provider.url)
        assert (first.status, first.headers["Retry-After"], first.body) == (429, "5", {"error": "rate limited"})
        assert first.headers["X-RateLimit-Remaining"] == "100"  # the budget itself is untouched
        t.now += 2.2
        assert call(provider.url).headers["Retry-After"] == "3"
        provider.pause(1)  # a shorter pause does not cut the running one short
        t.now += 2.7
        assert call(provider.url).status == 429
        t.now += 0.1
        assert call(provider.url).status == 200
        assert (provider.served, provider.refused) == (1, 3)
        assert provider.stats().refused_at == ()  # nor is a pause's


# -- lifecycle -----------------------------------------------------------------------


def test_start_and_stop_are_idempotent_and_stop_frees_the_port() -> None:
    provider = FakeProvider(1, 1)
    with pytest.raises(RuntimeError, match="not running"):
        _ = provider.url
    provider.start()
    port = provider.port
    assert provider.start().port == port
    assert provider.url == f"http://127.0.0.1:{port}/"
    assert call(provider.url).status == 200
    provider.stop()
    provider.stop()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5)
    with FakeProvider(1, 1, port=port) as again:
        assert again.port == port
        assert call(again.url).status == 200
    # The same provider serves again after a stop, keeping its counts.
    with provider:
        assert call(provider.url).status == 429
        assert (provider.served, provider.refused) == (1, 1)


def test_the_server_thread_is_a_daemon() -> None:
    with FakeProvider(1, 1):
        threads = [thread for thread in threading.enumerate() if thread.name == "fake-provider"]
        assert threads
        assert all(thread.daemon for thread in threads)


# -- arguments -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"limit": 0, "window": 1}, ValueError, "limit must be a whole number > 0, got 0"),
        ({"limit": "3", "window": 1}, TypeError, "limit must be an int, got str '3'"),
        ({"limit": True, "window": 1}, TypeError, "limit must be an int, got bool True"),
        ({"limit": 1, "window": -1}, ValueError, "window must be a number of seconds > 0, got -1"),
        ({"limit": 1, "window": 0}, ValueError, "window must be a number of seconds > 0, got 0"),
        ({"limit": 1, "window": math.nan}, ValueError, "window must be a number of seconds > 0, got nan"),
        ({"limit": 1, "window": math.inf}, ValueError, "window must be a number of seconds > 0, got inf"),
        ({"limit": 1, "window": "1"}, TypeError, "window must be a number of seconds, got str '1'"),
        ({"limit": 1, "window": 1, "mode": "leaky"}, ValueError, "mode must be 'fixed_window', 'sliding_log' or"),
        ({"limit": 1, "window": 1, "headers": "x"}, ValueError, "headers must be 'x-ratelimit', 'ietf' or 'none', got"),
        ({"limit": 1, "window": 1, "burst": 0}, ValueError, "burst must be a whole number > 0, got 0"),
        ({"limit": 1, "window": 1, "burst": 2.5}, TypeError, "burst must be an int, got float 2.5"),
        ({"limit": 1, "window": 1, "port": 70_000}, ValueError, "port must be from 0 to 65535, got 70000"),
        ({"limit": 1, "window": 1, "port": "80"}, TypeError, "port must be an int, got str '80'"),
        ({"limit": 1, "window": 1, "clock": 5.0}, TypeError, "clock must be a function returning seconds, got 5.0"),
        ({"limit": 1, "window": 1, "wall_clock": None}, TypeError, "wall_clock must be a function"),
        ({"limit": 1, "window": 1, "latency": -0.5}, ValueError, "latency must be a number of seconds >= 0, got -0.5"),
        ({"limit": 1, "window": 1, "latency": "1"}, TypeError, "latency must be a number of seconds, got str '1'"),
    ],
)
def test_bad_constructor_arguments(kwargs: dict[str, object], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match="^" + message.replace("(", r"\(")):
        FakeProvider(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"status": 99}, ValueError, "status must be an HTTP status from 200 to 599, got 99"),
        ({"status": "503"}, TypeError, "status must be an int, got str '503'"),
        ({"status": 503, "count": 0}, ValueError, "count must be a whole number > 0, got 0"),
        ({"status": 503, "retry_after": -1}, ValueError, "retry_after must be a number of seconds >= 0, got -1"),
        ({"status": 503, "retry_after": "1"}, TypeError, "retry_after must be a number of seconds, got str '1'"),
    ],
)
def test_bad_force_status_arguments(kwargs: dict[str, object], error: type[Exception], message: str) -> None:
    provider = FakeProvider(1, 1)
    with pytest.raises(error, match="^" + message):
        provider.force_status(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("seconds", "error", "message"),
    [
        (-1, ValueError, "seconds must be a number of seconds >= 0, got -1"),
        (math.inf, ValueError, "seconds must be a number of seconds >= 0, got inf"),
        (None, TypeError, "seconds must be a number of seconds, got NoneType None"),
    ],
)
def test_bad_pause_arguments(seconds: object, error: type[Exception], message: str) -> None:
    provider = FakeProvider(1, 1)
    with pytest.raises(error, match="^" + message):
        provider.pause(seconds)  # type: ignore[arg-type]
