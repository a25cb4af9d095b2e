"""ratelimit.aiohttp's middleware, against a real aiohttp server on loopback in the test's loop."""

from __future__ import annotations

import asyncio
import importlib
import io
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import aiohttp
import pytest
from aiohttp import web
from strict_provider import StrictProvider

from ratelimit import (
    AcquireTimeout,
    Backoff,
    CircuitBreaker,
    CircuitOpen,
    ConcurrencyLimit,
    ManualClock,
    Retry,
    RetryError,
    TokenBucket,
)
from ratelimit.aiohttp import RateLimitMiddleware, session

# Quick retries: the retry-path tests are about counts, not about waiting.
QUICK = Backoff(base=0.001, max_delay=0.005)


def quick(max_attempts: int = 5, *, limiter: TokenBucket | None = None, breaker: CircuitBreaker | None = None) -> Retry:
    return Retry(max_attempts=max_attempts, backoff=QUICK, limiter=limiter, breaker=breaker)


class Provider:
    """What the loopback server was sent, and the answers it is told to force."""

    def __init__(self) -> None:
        self.url = ""
        self.bodies: list[bytes] = []
        self.forced: list[tuple[int, dict[str, str]]] = []
        self.arrived = asyncio.Event()
        self.hang = asyncio.Event()

    def force(self, status: int, count: int = 1, headers: dict[str, str] | None = None) -> None:
        self.forced += [(status, headers or {})] * count

    async def answer(self, request: web.Request) -> web.StreamResponse:
        self.bodies.append(await request.read())
        self.arrived.set()
        if request.path == "/hang":
            await self.hang.wait()
        if self.forced:
            status, headers = self.forced.pop(0)
            return web.json_response({"error": f"forced {status}"}, status=status, headers=headers)
        if request.path == "/stream":
            response = web.StreamResponse()
            await response.prepare(request)
            for _ in range(4):
                await response.write(b"x" * 50_000)
            return response
        return web.json_response({"ok": True})


@asynccontextmanager
async def provider() -> AsyncIterator[Provider]:
    fake = Provider()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", fake.answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)  # the kernel picks a free port
    await site.start()
    port = runner.addresses[0][1]
    fake.url = f"http://127.0.0.1:{port}"
    try:
        yield fake
    finally:
        fake.hang.set()
        await runner.cleanup()


def run(scenario: Callable[[Provider], Awaitable[None]]) -> None:
    async def main() -> None:
        async with provider() as fake:
            await scenario(fake)

    asyncio.run(main())


async def settle() -> None:
    """Let the task that frees a released response's slot run (no time passes)."""
    for _ in range(3):
        await asyncio.sleep(0)


def test_each_request_acquires_once_and_a_good_response_streams_untouched() -> None:
    bucket = TokenBucket(capacity=50, refill_per_sec=1000)

    async def scenario(fake: Provider) -> None:
        middleware = RateLimitMiddleware(bucket)
        async with aiohttp.ClientSession(fake.url, middlewares=(middleware,)) as http:
            for _ in range(5):
                async with http.get("/") as response:
                    assert await response.json() == {"ok": True}
            async with http.get("/stream") as response:
                assert not response.content.at_eof()  # handed on unread
                assert len(await response.read()) == 200_000
        assert middleware.retry.limiter is bucket
        assert middleware.retry.stats().attempts == 6

    run(scenario)
    assert bucket.stats().granted == 6


def test_a_429_with_retry_after_pauses_the_limiter_before_the_retry() -> None:
    # The runner's own delay is capped at 5 ms; the 429 fed back pauses the limiter for
    # its whole Retry-After, so the second attempt's acquire waits out the rest.
    clock = ManualClock(1_000.0)
    bucket = TokenBucket(capacity=10, refill_per_sec=10, clock=clock)
    retry = quick(limiter=bucket)

    async def scenario(fake: Provider) -> None:
        fake.force(429, headers={"Retry-After": "5"})
        async with session(retry=retry, base_url=fake.url) as http, http.get("/") as response:
            assert response.status == 200

    run(scenario)
    stats = retry.stats()
    assert stats.attempts == 2
    assert stats.backoff == pytest.approx(0.005)
    assert stats.waited == pytest.approx(5 - 0.005, abs=1e-6)
    assert bucket.stats().restricted == 1
    assert clock.now() == pytest.approx(1_005.0)


def test_503s_are_retried_permanent_failures_returned_and_the_last_failure_kept() -> None:
    retry = quick(max_attempts=3, limiter=TokenBucket(capacity=50, refill_per_sec=1000))

    async def scenario(fake: Provider) -> None:
        async with session(retry=retry, base_url=fake.url) as http:
            fake.force(503, count=2)
            async with http.get("/") as response:
                assert await response.json() == {"ok": True}
            assert retry.stats().attempts == 3

            fake.force(404)
            async with http.get("/") as response:
                assert response.status == 404
                assert await response.json() == {"error": "forced 404"}  # read inside, kept
            assert retry.stats().attempts == 4

            fake.force(503, count=3)
            with pytest.raises(RetryError) as caught:
                await http.get("/")
            error = caught.value
            assert error.reason == "attempts"
            assert [attempt.status for attempt in error.attempts] == [503, 503, 503]
            assert isinstance(error.result, aiohttp.ClientResponse)
            assert error.result.connection is None  # given back to the pool
            assert await error.result.text() == '{"error": "forced 503"}'

    run(scenario)
    assert (retry.stats().calls, retry.stats().succeeded, retry.stats().permanent) == (3, 1, 1)


def test_a_streamed_body_is_sent_once_and_replayable_ones_are_resent_whole() -> None:
    retry = quick()

    async def chunks() -> AsyncIterator[bytes]:
        yield b"a stream "
        yield b"sent once"

    async def scenario(fake: Provider) -> None:
        async with session(retry=retry, base_url=fake.url) as http:
            fake.force(503)
            with pytest.raises(RetryError) as caught:
                await http.post("/", data=chunks())
            assert len(caught.value.attempts) == 1

            fake.force(503)
            async with http.post("/", data=io.BytesIO(b"a seekable file is resent")) as response:
                assert response.status == 200

            fake.force(503)
            form = aiohttp.FormData()
            form.add_field("file", io.BytesIO(b"an upload"), filename="data.bin")
            async with http.post("/", data=form) as response:
                assert response.status == 200

            fake.force(503)
            async with http.post("/", json={"a": 1}) as response:
                assert response.status == 200

        assert fake.bodies[:3] == [b"a stream sent once", b"a seekable file is resent", b"a seekable file is resent"]
        assert fake.bodies[3] == fake.bodies[4]  # the multipart upload, resent whole
        assert fake.bodies[5:] == [b'{"a": 1}'] * 2

    run(scenario)
    stats = retry.stats()
    assert (stats.calls, stats.succeeded, stats.gave_up, stats.attempts) == (4, 3, 1, 7)


def test_the_breaker_opens_and_then_fails_fast_without_sending() -> None:
    breaker = CircuitBreaker(min_calls=2, failure_threshold=0.5, cooldown=60)
    retry = quick(max_attempts=2, breaker=breaker)

    async def scenario(fake: Provider) -> None:
        fake.force(503, count=2)
        async with session(retry=retry, base_url=fake.url) as http:
            with pytest.raises(RetryError):
                await http.get("/")
            assert breaker.state == "open"
            with pytest.raises(CircuitOpen):
                await http.get("/")
        assert len(fake.bodies) == 2

    run(scenario)
    assert (retry.stats().attempts, retry.stats().rejected) == (2, 1)


def test_a_slot_is_held_until_the_response_is_read_released_or_closed() -> None:
    slots = ConcurrencyLimit(1)

    async def free() -> None:
        await settle()
        (await slots.take_async(timeout=0)).release()

    async def scenario(fake: Provider) -> None:
        async with session(concurrency=slots, base_url=fake.url) as http:
            response = await http.get("/stream")
            with pytest.raises(AcquireTimeout):
                await slots.take_async(timeout=0)  # the body is still open
            await response.read()
            await free()

            async with http.get("/stream") as response:
                await response.content.read(10)  # left early
            await free()

            response = await http.get("/stream")
            response.close()
            await free()

            fake.force(503, count=5)  # failures are read inside: no slot held after
            with pytest.raises(RetryError):
                await http.get("/")
            await free()

    run(scenario)


def test_cancelling_a_request_gives_back_its_grant_and_its_slot() -> None:
    bucket = TokenBucket(capacity=1, refill_per_sec=0.01)
    slots = ConcurrencyLimit(1)

    async def scenario(fake: Provider) -> None:
        async with session(bucket, concurrency=slots, base_url=fake.url) as http:
            sending = asyncio.create_task(http.get("/hang"))
            await fake.arrived.wait()
            waiting = asyncio.create_task(http.get("/"))  # the next grant is 100 s away
            for _ in range(100):  # turns of the loop, not time: until it holds its grant
                if bucket.stats().granted == 2:
                    break
                await asyncio.sleep(0)
            assert bucket.stats().granted == 2
            for task in (sending, waiting):
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            await settle()
            (await slots.take_async(timeout=0)).release()
        assert len(fake.bodies) == 1

    run(scenario)
    assert bucket.stats().cancelled == 1


@pytest.mark.slow
def test_many_tasks_through_one_session_draw_no_429_from_a_strict_provider() -> None:
    # 20 per 0.5 s, counted on arrival over any interval. A bucket of 4 refilled at
    # 24/s grants at most 4 + 12 in any 0.5 s: 4 to spare for the loop's jitter.
    bucket = TokenBucket(capacity=4, refill_per_sec=24)
    retry = Retry(limiter=bucket, max_attempts=1)

    async def burst(url: str) -> list[int]:
        async with session(retry=retry) as http:

            async def one() -> int:
                async with http.get(url) as response:
                    return response.status

            return list(await asyncio.gather(*(one() for _ in range(60))))

    with StrictProvider(20, 0.5) as strict:
        statuses = asyncio.run(burst(strict.url))
    assert strict.stats is not None
    assert statuses == [200] * 60
    assert (strict.stats.served, strict.stats.refused) == (60, 0)
    assert strict.stats.most_in_window <= 20
    assert bucket.stats().granted == 60


def test_the_middleware_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match=r"RateLimitMiddleware: .*limiter=TokenBucket\(.*would be ignored"):
        RateLimitMiddleware(TokenBucket(1, 1), retry=quick())
    with pytest.raises(ValueError, match=r"breaker=CircuitBreaker\("):
        session(retry=quick(), breaker=CircuitBreaker())
    with pytest.raises(TypeError, match=r"retry must be a ratelimit.Retry or None, got 3"):
        RateLimitMiddleware(retry=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"concurrency must be a ratelimit\.ConcurrencyLimit"):
        RateLimitMiddleware(concurrency=TokenBucket(1, 1))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"limiter must be a limiter"):
        RateLimitMiddleware(42)  # type: ignore[arg-type]


def test_session_puts_the_limit_outside_middlewares_of_your_own() -> None:
    seen: list[str] = []

    async def own(request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType) -> aiohttp.ClientResponse:
        seen.append(request.method)
        return await handler(request)

    async def scenario(fake: Provider) -> None:
        fake.force(503)
        async with session(retry=quick(), middlewares=[own], base_url=fake.url) as http, http.get("/") as answer:
            assert answer.status == 200

    run(scenario)
    assert seen == ["GET", "GET"]  # once per attempt


def test_without_aiohttp_the_import_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "aiohttp", None)
    monkeypatch.delitem(sys.modules, "ratelimit.aiohttp")
    importlib.import_module("ratelimit")
    with pytest.raises(ImportError, match=r"pip install 'ratelimit-fleet\[aiohttp\]'"):
        importlib.import_module("ratelimit.aiohttp")
