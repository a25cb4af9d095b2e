"""The httpx transports and the requests adapter, against a real (fake) provider on loopback."""

from __future__ import annotations

import asyncio
import io
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import httpx
import pytest
import requests
import urllib3

from ratelimit import (
    AcquireTimeout,
    Backoff,
    CircuitBreaker,
    CircuitOpen,
    ConcurrencyLimit,
    Retry,
    RetryError,
    TokenBucket,
)
from ratelimit.httpx import AsyncRateLimitTransport, RateLimitTransport
from ratelimit.requests import RateLimitAdapter, session
from ratelimit.testing import FakeProvider

T = TypeVar("T")

# Quick retries: the retry-path tests are about counts, not about waiting.
QUICK = Backoff(base=0.01, max_delay=0.05)


def quick(max_attempts: int = 5, *, limiter: TokenBucket | None = None, breaker: CircuitBreaker | None = None) -> Retry:
    return Retry(max_attempts=max_attempts, backoff=QUICK, limiter=limiter, breaker=breaker)


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    # A token bucket refilled at 1000/s is full again a millisecond after a request, so
    # its headers say "reset in 0 s" and a forced 503 carries no reason to pause the
    # limiter: a 503 test waits only for its backoff, a 429 test for its Retry-After.
    with FakeProvider(1000, 1.0, mode="token_bucket", headers="ietf") as fake:
        yield fake


def limiter() -> TokenBucket:
    return TokenBucket(capacity=50, refill_per_sec=1000)


def _burst(count: int, threads: int, send: Callable[[], T]) -> list[T]:
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(lambda _: send(), range(count)))


# -- httpx, sync ------------------------------------------------------------------------


@pytest.mark.slow
def test_a_burst_of_500_through_an_httpx_client_at_95_percent_of_the_limit_sees_no_429() -> None:
    # 400 per 2 s fixed window, GitHub's headers. A bucket of 4 refilled at 95 % of
    # 200/s grants at most 4 + 380 in any 2 s; what arrives in a window was granted in
    # it or was in flight when it began (16 threads at most): 400, never more, however
    # late the threads send. (The provider's whole-second resets, fed back, only slow
    # it further.)
    with FakeProvider(400, 2.0) as fake:
        transport = RateLimitTransport(TokenBucket(capacity=4, refill_per_sec=200 * 0.95))
        with httpx.Client(transport=transport, base_url=fake.url) as client:
            started = time.monotonic()
            statuses = _burst(500, 16, lambda: client.get("/burst").status_code)
            elapsed = time.monotonic() - started
        stats = fake.stats()

    assert statuses == [200] * 500
    assert stats.refused == 0
    assert stats.served == 500
    assert stats.max_in_window <= 400
    assert transport.retry.stats().attempts == 500  # no retry was needed, none was made
    # The limiter paced it: 496 grants after the burst of 4, at 190/s at most.
    assert elapsed >= 496 / 190 * 0.95


def test_httpx_recovers_from_injected_503s(provider: FakeProvider) -> None:
    retry = quick(limiter=limiter())
    provider.force_status(503, count=3)
    with httpx.Client(transport=RateLimitTransport(retry=retry)) as client:
        response = client.get(provider.url)

    assert response.status_code == 200
    assert response.json() == {"ok": True}
    stats = retry.stats()
    assert (stats.calls, stats.succeeded, stats.attempts) == (1, 1, 4)
    assert provider.stats().served == 1


def test_httpx_waits_out_a_forced_429_with_retry_after(provider: FakeProvider) -> None:
    # The runner's own delay is capped at 0.05 s, but the 429 fed back to the limiter
    # pauses it for the whole Retry-After: the second attempt waits for the limiter.
    retry = quick(limiter=limiter())
    provider.force_status(429, retry_after=1)
    with httpx.Client(transport=RateLimitTransport(retry=retry)) as client:
        started = time.monotonic()
        response = client.get(provider.url)
        elapsed = time.monotonic() - started

    assert response.status_code == 200
    stats = retry.stats()
    assert stats.attempts == 2
    assert stats.waited >= 0.9
    assert elapsed >= 0.9
    assert provider.stats().refused == 1


def test_httpx_returns_a_permanent_failure_after_one_attempt(provider: FakeProvider) -> None:
    retry = quick(limiter=limiter())
    provider.force_status(404)
    with httpx.Client(transport=RateLimitTransport(retry=retry)) as client:
        response = client.get(provider.url)

    assert response.status_code == 404
    assert response.json() == {"error": "forced 404"}
    assert response.elapsed.total_seconds() >= 0  # timed by the client, as usual
    assert (retry.stats().attempts, retry.stats().permanent) == (1, 1)


def test_httpx_gives_up_with_the_last_response(provider: FakeProvider) -> None:
    retry = quick(max_attempts=3, limiter=limiter())
    provider.force_status(503, count=3)
    with httpx.Client(transport=RateLimitTransport(retry=retry)) as client, pytest.raises(RetryError) as caught:
        client.get(provider.url)

    error = caught.value
    assert error.reason == "attempts"
    assert [attempt.status for attempt in error.attempts] == [503, 503, 503]
    last = error.result
    assert isinstance(last, httpx.Response)
    assert last.status_code == 503
    assert last.read() == b'{"error": "forced 503"}'  # in memory, no connection needed


class Recording(httpx.HTTPTransport):
    """The real transport, keeping every response it hands out."""

    def __init__(self) -> None:
        super().__init__()
        self.responses: list[httpx.Response] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        self.responses.append(response)
        return response


def test_httpx_closes_every_failed_response_before_retrying(provider: FakeProvider) -> None:
    inner = Recording()
    provider.force_status(503, count=2)
    with (
        httpx.Client(transport=RateLimitTransport(retry=quick(), transport=inner)) as client,
        client.stream("GET", provider.url) as response,
    ):
        # The good one streams through untouched.
        assert not response.is_stream_consumed
        assert response.read() == b'{"ok": true}'

    assert [r.status_code for r in inner.responses] == [503, 503, 200]
    assert all(r.is_closed for r in inner.responses[:2])


def test_httpx_sends_a_streamed_body_once_and_retries_a_replayable_one(provider: FakeProvider) -> None:
    retry = quick(limiter=limiter())

    def chunks() -> Iterator[bytes]:
        yield b"a stream "
        yield b"sent once"

    with httpx.Client(transport=RateLimitTransport(retry=retry)) as client:
        assert client.post(provider.url, content=chunks()).status_code == 200

        provider.force_status(503)
        with pytest.raises(RetryError) as caught:
            client.post(provider.url, content=chunks())
        assert len(caught.value.attempts) == 1
        assert caught.value.reason == "attempts"

        provider.force_status(503)
        assert client.post(provider.url, content=b"bytes are resent").status_code == 200

        provider.force_status(503)
        upload = {"file": ("data.bin", io.BytesIO(b"a seekable file is resent"))}
        assert client.post(provider.url, files=upload).status_code == 200

    # The streamed call counts among the runner's own: one runner, one set of numbers.
    stats = retry.stats()
    assert (stats.calls, stats.succeeded, stats.gave_up, stats.attempts) == (4, 3, 1, 6)


def test_httpx_breaker_opens_and_fails_fast_without_sending(provider: FakeProvider) -> None:
    breaker = CircuitBreaker(min_calls=2, failure_threshold=0.5, cooldown=60)
    retry = quick(max_attempts=2, breaker=breaker)
    provider.force_status(503, count=2)
    with httpx.Client(transport=RateLimitTransport(retry=retry)) as client:
        with pytest.raises(RetryError):
            client.get(provider.url)
        assert breaker.state == "open"
        with pytest.raises(CircuitOpen):
            client.get(provider.url)

    assert provider.stats().served == 0
    assert (retry.stats().attempts, retry.stats().rejected) == (2, 1)


def test_httpx_transport_builds_its_retry_from_limiter_and_breaker(provider: FakeProvider) -> None:
    bucket, breaker = limiter(), CircuitBreaker()
    transport = RateLimitTransport(bucket, breaker=breaker)
    with httpx.Client(transport=transport) as client:
        assert client.get(provider.url).status_code == 200

    assert transport.retry.limiter is bucket
    assert transport.retry.breaker is breaker
    assert bucket.stats().granted == 1
    assert breaker.stats().successes == 1


def test_httpx_transport_refuses_a_retry_beside_a_limiter_or_breaker() -> None:
    with pytest.raises(ValueError, match=r"limiter=TokenBucket\(.*would be ignored"):
        RateLimitTransport(limiter(), retry=quick())
    with pytest.raises(ValueError, match=r"breaker=CircuitBreaker\("):
        AsyncRateLimitTransport(retry=quick(), breaker=CircuitBreaker())
    with pytest.raises(TypeError, match=r"retry must be a ratelimit.Retry or None, got 3"):
        RateLimitTransport(retry=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"transport must be an httpx.BaseTransport or None, got 'http'"):
        RateLimitTransport(transport="http")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"transport must be an httpx.AsyncBaseTransport"):
        AsyncRateLimitTransport(transport=httpx.HTTPTransport())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"limiter must be a limiter"):
        RateLimitTransport(limiter=42)  # type: ignore[arg-type]


def test_closing_the_transport_closes_the_wrapped_one() -> None:
    closed: list[str] = []

    class Inner(httpx.HTTPTransport):
        def close(self) -> None:
            closed.append("sync")
            super().close()

    class AsyncInner(httpx.AsyncHTTPTransport):
        async def aclose(self) -> None:
            closed.append("async")
            await super().aclose()

    with httpx.Client(transport=RateLimitTransport(transport=Inner())):
        pass

    async def scenario() -> None:
        async with httpx.AsyncClient(transport=AsyncRateLimitTransport(transport=AsyncInner())):
            pass

    asyncio.run(scenario())
    assert closed == ["sync", "async"]


# -- httpx, async -----------------------------------------------------------------------


@pytest.mark.slow
def test_a_burst_through_an_async_client_at_95_percent_of_the_limit_sees_no_429() -> None:
    async def scenario(url: str) -> list[int]:
        transport = AsyncRateLimitTransport(TokenBucket(capacity=2, refill_per_sec=100 * 0.95))
        async with httpx.AsyncClient(transport=transport, base_url=url) as client:
            gate = asyncio.Semaphore(8)

            async def one() -> int:
                async with gate:
                    return (await client.get("/burst")).status_code

            statuses = await asyncio.gather(*(one() for _ in range(150)))
        assert transport.retry.stats().attempts == 150
        return list(statuses)

    # 2 + 190 granted in any 2 s, plus 8 requests in flight: the provider's 200.
    with FakeProvider(200, 2.0) as fake:
        statuses = asyncio.run(scenario(fake.url))
        stats = fake.stats()

    assert statuses == [200] * 150
    assert (stats.served, stats.refused) == (150, 0)
    assert stats.max_in_window <= 200


def test_async_transport_recovers_from_503s_and_a_429_and_passes_404s_on(provider: FakeProvider) -> None:
    retry = quick(max_attempts=3, limiter=limiter())

    async def scenario() -> None:
        async with httpx.AsyncClient(transport=AsyncRateLimitTransport(retry=retry)) as client:
            provider.force_status(503, count=2)
            assert (await client.get(provider.url)).status_code == 200
            assert retry.stats().attempts == 3

            provider.force_status(429, retry_after=1)
            started = time.monotonic()
            assert (await client.get(provider.url)).status_code == 200
            assert time.monotonic() - started >= 0.9
            assert retry.stats().attempts == 5

            provider.force_status(404)
            response = await client.get(provider.url)
            assert response.status_code == 404
            assert response.json() == {"error": "forced 404"}
            assert retry.stats().attempts == 6

            provider.force_status(503, count=3)
            with pytest.raises(RetryError) as caught:
                await client.get(provider.url)
            assert isinstance(caught.value.result, httpx.Response)
            assert caught.value.result.status_code == 503
            assert len(caught.value.attempts) == 3

            async def chunks() -> AsyncIterator[bytes]:
                yield b"sent once"

            provider.force_status(503)
            with pytest.raises(RetryError) as once:
                await client.post(provider.url, content=chunks())
            assert len(once.value.attempts) == 1

    asyncio.run(scenario())
    assert provider.stats().refused == 1


# -- requests ---------------------------------------------------------------------------


@pytest.mark.slow
def test_a_burst_through_a_requests_session_at_95_percent_of_the_limit_sees_no_429() -> None:
    # 2 + 190 granted in any 2 s, plus 8 threads in flight: the provider's 200.
    with FakeProvider(200, 2.0) as fake, session(TokenBucket(capacity=2, refill_per_sec=100 * 0.95)) as http:
        statuses = _burst(150, 8, lambda: http.get(fake.url).status_code)
        stats = fake.stats()

    assert statuses == [200] * 150
    assert (stats.served, stats.refused) == (150, 0)
    assert stats.max_in_window <= 200


def test_requests_session_recovers_from_503s_and_a_429(provider: FakeProvider) -> None:
    retry = quick(limiter=limiter())
    with session(retry=retry) as http:
        provider.force_status(503, count=3)
        response = http.get(provider.url)
        assert response.status_code == 200
        assert response.json() == {"ok": True}
        assert retry.stats().attempts == 4

        provider.force_status(429, retry_after=1)
        started = time.monotonic()
        assert http.get(provider.url).status_code == 200
        assert time.monotonic() - started >= 0.9
        assert retry.stats().attempts == 6

    assert provider.stats().served == 2


def test_requests_returns_a_permanent_failure_after_one_attempt(provider: FakeProvider) -> None:
    retry = quick()
    provider.force_status(404)
    with session(retry=retry) as http, http.get(provider.url, stream=True) as response:
        assert response.status_code == 404
        assert response.json() == {"error": "forced 404"}  # read already, still there
    assert (retry.stats().attempts, retry.stats().permanent) == (1, 1)


def test_requests_gives_up_with_the_last_response(provider: FakeProvider) -> None:
    retry = quick(max_attempts=2)
    provider.force_status(503, count=2)
    with session(retry=retry) as http, pytest.raises(RetryError) as caught:
        http.get(provider.url)
    last = caught.value.result
    assert isinstance(last, requests.Response)
    assert last.status_code == 503
    assert last.content == b'{"error": "forced 503"}'
    assert [attempt.status for attempt in caught.value.attempts] == [503, 503]


class RecordingAdapter(RateLimitAdapter):
    """The real adapter, keeping every response urllib3 gave it."""

    def __init__(self, retry: Retry) -> None:
        super().__init__(retry=retry)
        self.responses: list[requests.Response] = []

    def build_response(self, req: requests.PreparedRequest, resp: urllib3.BaseHTTPResponse) -> requests.Response:
        response = super().build_response(req, resp)
        self.responses.append(response)
        return response


def test_requests_adapter_releases_every_failed_response_before_retrying(provider: FakeProvider) -> None:
    adapter = RecordingAdapter(quick())
    provider.force_status(503, count=2)
    with requests.Session() as http:
        http.mount("http://", adapter)
        assert http.get(provider.url).status_code == 200

    assert [r.status_code for r in adapter.responses] == [503, 503, 200]
    assert all(r.raw.closed for r in adapter.responses[:2])


def test_requests_resends_a_seekable_file_and_sends_a_generator_once(provider: FakeProvider) -> None:
    retry = quick()
    adapter = RateLimitAdapter(retry=retry)
    with requests.Session() as http:
        http.mount("http://", adapter)
        provider.force_status(503)
        # Not rewound, the retry would announce 25 bytes and send none: the timeout
        # turns that hang into a failure.
        body = io.BytesIO(b"a seekable file is resent")
        assert http.post(provider.url, data=body, timeout=5).status_code == 200

        provider.force_status(503)
        with pytest.raises(RetryError) as caught:
            http.post(provider.url, data=(chunk for chunk in [b"sent ", b"once"]), timeout=5)
        assert len(caught.value.attempts) == 1

    stats = retry.stats()
    assert (stats.calls, stats.attempts, stats.gave_up) == (2, 3, 1)


def test_requests_adapter_and_session_refuse_bad_arguments() -> None:
    with pytest.raises(ValueError, match=r"limiter=TokenBucket\(.*would be ignored"):
        RateLimitAdapter(limiter(), retry=quick())
    with pytest.raises(ValueError, match=r"breaker=CircuitBreaker\("):
        session(retry=quick(), breaker=CircuitBreaker())
    with pytest.raises(ValueError, match=r"max_retries must be 0: .* got max_retries=3"):
        RateLimitAdapter(max_retries=3)
    with pytest.raises(ValueError, match=r"got max_retries=None"):
        RateLimitAdapter(max_retries=None)
    with pytest.raises(TypeError, match=r"retry must be a ratelimit.Retry or None, got 'x'"):
        session(retry="x")  # type: ignore[arg-type]
    adapter = RateLimitAdapter(max_retries=0, pool_maxsize=4)
    adapter.close()


def test_session_mounts_one_adapter_for_http_and_https() -> None:
    bucket = limiter()
    with session(bucket) as http:
        adapter = http.get_adapter("http://example.invalid/")
        assert isinstance(adapter, RateLimitAdapter)
        assert http.get_adapter("https://example.invalid/") is adapter
        assert adapter.retry.limiter is bucket


def test_threads_share_one_transport_safely(provider: FakeProvider) -> None:
    # The runner keeps no per-request state on the transport: concurrent retries of
    # different requests do not mix up their attempts.
    # Enough attempts for one thread to meet all eight 503s.
    retry = quick(max_attempts=9, limiter=limiter())
    provider.force_status(503, count=8)
    lock = threading.Lock()
    seen: list[int] = []
    with httpx.Client(transport=RateLimitTransport(retry=retry)) as client:

        def send() -> None:
            status = client.get(provider.url).status_code
            with lock:
                seen.append(status)

        _burst(8, 8, send)

    assert seen == [200] * 8
    assert retry.stats().attempts == 16


# -- requests in flight -------------------------------------------------------------------


def _counting_handler() -> tuple[Callable[[httpx.Request], httpx.Response], list[int]]:
    """A handler that reports the most requests it had in hand at once."""
    inside = [0, 0]  # now, most
    lock = threading.Lock()

    def handle(request: httpx.Request) -> httpx.Response:
        with lock:
            inside[0] += 1
            inside[1] = max(inside[1], inside[0])
        time.sleep(0.005)
        with lock:
            inside[0] -= 1
        return httpx.Response(200, content=b"ok")

    return handle, inside


def test_httpx_holds_one_slot_per_request_until_the_response_is_read() -> None:
    handle, inside = _counting_handler()
    slots = ConcurrencyLimit(2)
    transport = RateLimitTransport(concurrency=slots, transport=httpx.MockTransport(handle))
    with httpx.Client(transport=transport) as client:
        statuses = _burst(40, 8, lambda: client.get("http://api.test/").status_code)
    assert statuses == [200] * 40
    assert inside[1] <= 2
    slots.take(timeout=0).release()
    slots.take(timeout=0).release()


def test_httpx_keeps_the_slot_of_a_streamed_body_until_it_is_closed() -> None:
    slots = ConcurrencyLimit(1)
    transport = RateLimitTransport(
        concurrency=slots,
        transport=httpx.MockTransport(lambda r: httpx.Response(200, content=iter([b"x" * 5_000, b"x" * 5_000]))),
    )
    with httpx.Client(transport=transport) as client:
        with client.stream("GET", "http://api.test/") as response:
            assert response.status_code == 200
            with pytest.raises(AcquireTimeout):
                slots.take(timeout=0)  # the body is still open
            assert len(response.read()) == 10_000
        slots.take(timeout=0).release()  # closed: free again
        client.get("http://api.test/")
        slots.take(timeout=0).release()


def test_httpx_async_frees_slots_of_read_and_streamed_responses() -> None:
    slots = ConcurrencyLimit(1)

    async def scenario() -> None:
        async def body() -> AsyncIterator[bytes]:
            yield b"y" * 1000

        inner = httpx.MockTransport(lambda r: httpx.Response(200, content=body()))
        async with httpx.AsyncClient(transport=AsyncRateLimitTransport(concurrency=slots, transport=inner)) as client:
            assert (await client.get("http://api.test/")).status_code == 200
            (await slots.take_async(timeout=0)).release()
            async with client.stream("GET", "http://api.test/") as response:
                with pytest.raises(AcquireTimeout):
                    await slots.take_async(timeout=0)
                await response.aread()
            (await slots.take_async(timeout=0)).release()

    asyncio.run(scenario())


def test_requests_frees_the_slot_once_the_body_is_read_or_the_stream_closed(provider: FakeProvider) -> None:
    slots = ConcurrencyLimit(1)
    with session(concurrency=slots) as http:
        assert http.get(provider.url).status_code == 200
        slots.take(timeout=0).release()
        streamed = http.get(provider.url, stream=True)
        with pytest.raises(AcquireTimeout):
            slots.take(timeout=0)
        streamed.close()
        slots.take(timeout=0).release()


def test_integrations_refuse_a_concurrency_that_is_not_a_concurrency_limit() -> None:
    with pytest.raises(TypeError, match="concurrency"):
        RateLimitTransport(concurrency=TokenBucket(1, 1))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="concurrency"):
        RateLimitAdapter(concurrency=TokenBucket(1, 1))  # type: ignore[arg-type]
