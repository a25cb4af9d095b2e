"""Never run: ``mypy --strict`` checks that every public call shape types as users expect.

pytest does not collect this file (its name does not start with ``test_``), and
nothing imports it. Annotated assignments pin the types the API returns; a line
marked ``# type: ignore[...]`` is a call that must NOT type-check, and since strict
mode warns about unused ignores, mypy fails the day such a call starts to pass.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import datetime, timedelta
from typing import Any

import fakeredis

from ratelimit import (
    Acquirer,
    AcquireTimeout,
    Attempt,
    BackendStats,
    BackendUnavailable,
    Backoff,
    BreakerStats,
    CircuitBreaker,
    CircuitOpen,
    Clock,
    Composite,
    FairShare,
    LeakyBucket,
    ManualClock,
    MemoryBackend,
    RateLimitError,
    RateLimitInfo,
    RedisBackend,
    Reservation,
    Retry,
    RetryError,
    RetryStats,
    SlidingWindow,
    SystemClock,
    TenantShare,
    Ticket,
    TokenBucket,
    for_limit,
    parse_rate_limit_headers,
    subscribe,
)
from ratelimit.celery import HEADER, limited
from ratelimit.events import Event, Granted


def constructors() -> None:
    clock = ManualClock(start=1_000.0)
    system: Clock = SystemClock()
    manual: Clock = clock

    bucket = TokenBucket(capacity=20, refill_per_sec=1000 / 60)
    bucket = TokenBucket(20, 16.5, backend=None, name=None, clock=None)
    bucket = TokenBucket(capacity=20, refill_per_sec=2, clock=clock)
    leaky = LeakyBucket(capacity=10, leak_per_sec=2.5, backend=MemoryBackend(), name="smooth", clock=system)
    window = SlidingWindow(limit=100, window_seconds=60)
    window = SlidingWindow(limit=100, window_seconds=timedelta(minutes=1), approximate=True, clock=manual)
    shared = TokenBucket(
        capacity=20,
        refill_per_sec=1000 / 60,
        backend=RedisBackend.from_url("redis://redis:6379/0", on_unavailable="local", socket_timeout=0.2),
        name="geocode",
    )
    wrapped = RedisBackend(fakeredis.FakeRedis(), on_unavailable="allow", local_share=0.5, time_source="client")
    llm = Composite([TokenBucket(50, 50 / 60), SlidingWindow(40_000, 60)], backend=wrapped, name="llm", clock=clock)
    sized: TokenBucket = for_limit("1000/min", burst=20, backend=wrapped, name="sized", clock=clock)
    sized = for_limit("5/s", headroom=0.1, guard=timedelta(milliseconds=80))
    rate: float = sized.refill_per_sec
    for_limit(5)  # type: ignore[arg-type]
    TokenBucket("10/minute")  # type: ignore[call-arg, arg-type]

    capacity: float = bucket.capacity
    refill: float = bucket.refill_per_sec
    leak: float = leaky.leak_per_sec
    limit: float = window.limit
    seconds: float = window.window_seconds
    approximate: bool = window.approximate
    name: str | None = shared.name
    its_clock: Clock = bucket.clock
    stats: BackendStats = wrapped.stats()
    failures: int = stats.failures

    # One limiter, many keys: a view is of the limiter's own type.
    per_shop: LeakyBucket = leaky.for_key("acme.myshopify.com")
    per_tenant: Composite = llm.for_key("tenant-7")
    its_key: str | None = per_shop.key
    per_shop.try_acquire()
    leaky.key_views = 10_000
    assert its_key == "acme.myshopify.com"
    assert per_tenant.key == "tenant-7"

    # Wrong types are refused by the checker before they reach the run-time checks.
    TokenBucket(capacity="20", refill_per_sec=1)  # type: ignore[arg-type]
    TokenBucket(20, 1, name=7)  # type: ignore[arg-type]
    TokenBucket(20, 1, clock=time_now)  # type: ignore[arg-type]
    TokenBucket(20, 1, "geocode")  # type: ignore[call-arg, arg-type]
    SlidingWindow(100, "1m")  # type: ignore[arg-type]
    SlidingWindow(100, 60, approximate="yes")  # type: ignore[arg-type]
    Composite(TokenBucket(1, 1))  # type: ignore[arg-type]
    Composite([TokenBucket(1, 1), "x"])  # type: ignore[list-item]
    RedisBackend.from_url("redis://redis:6379/0", on_unavailable="ignore")  # type: ignore[arg-type]
    RedisBackend.from_url("redis://redis:6379/0", local_share="sometimes")  # type: ignore[arg-type]

    _ = (capacity, refill, leak, limit, seconds, approximate, name, its_clock, failures, llm, rate)


def backends() -> None:
    with RedisBackend.from_url("redis://redis:6379/0", pool_size=32) as backend:
        in_flight: int = backend.pool_size
        TokenBucket(20, 1000 / 60, backend=backend, name="geocode").acquire()
    safe = RedisBackend.from_url("redis://redis:6379/0", on_unavailable="local", local_share="auto")
    live: int | None = safe.live_processes
    share: float = safe.fallback_share()
    memory = MemoryBackend()
    dropped: int = memory.sweep()
    names: int = len(memory)
    RedisBackend.from_url("redis://redis:6379/0", pool_size="16")  # type: ignore[arg-type]
    _ = (in_flight, dropped, names, live, share)


async def backends_async() -> None:
    async with RedisBackend.from_url("redis://redis:6379/0") as backend:
        await TokenBucket(20, 1000 / 60, backend=backend, name="geocode").acquire_async()
    await backend.aclose()


def time_now() -> float:
    return 0.0


def acquiring(bucket: TokenBucket, leaky: LeakyBucket, window: SlidingWindow) -> None:
    waited: float = bucket.acquire()
    waited = bucket.acquire(2)
    waited = bucket.acquire(tokens=0.5, timeout=1.5)
    waited = leaky.acquire(timeout=timedelta(seconds=3))
    waited = window.acquire(1, None)
    granted: bool = bucket.try_acquire()
    granted = window.try_acquire(tokens=3)
    bucket.refund()
    bucket.refund(0.5)
    bucket.charge(3)
    bucket.settle(5, 7.5)
    bucket.settle(estimate=5, actual=0)
    window.charge(tokens=2)
    charged: float = window.stats().charged
    bucket.charge()  # type: ignore[call-arg]
    bucket.charge([1, 2])  # type: ignore[arg-type]

    bucket.acquire([1, 2])  # type: ignore[arg-type]
    bucket.acquire(timeout="5")  # type: ignore[arg-type]
    wrong: str = bucket.acquire()  # type: ignore[assignment]
    also_wrong: int = bucket.try_acquire(tokens="1")  # type: ignore[arg-type]

    info: RateLimitInfo = bucket.feedback({"Retry-After": "2"}, status=429)
    info = bucket.feedback([("X-RateLimit-Remaining", "0"), ("X-RateLimit-Reset", "30")])
    info = parse_rate_limit_headers({"RateLimit": "limit=100, remaining=0, reset=5"})
    info = parse_rate_limit_headers([("Retry-After", "Wed, 21 Oct 2015 07:28:00 GMT")], now=1_445_412_000.0)
    remaining: float | None = info.remaining
    reset_after: float | None = info.reset_after
    retry_after: float | None = info.retry_after
    limit: float | None = info.limit

    with bucket:
        pass

    _ = (waited, granted, wrong, also_wrong, remaining, reset_after, retry_after, limit, charged)


async def acquiring_async(bucket: TokenBucket, llm: Composite) -> None:
    waited: float = await bucket.acquire_async()
    waited = await bucket.acquire_async(2, timeout=timedelta(milliseconds=500))
    granted: bool = await bucket.try_acquire_async()
    granted = await bucket.try_acquire_async(tokens=2)
    await bucket.refund_async(1)
    await bucket.charge_async(2)
    await bucket.settle_async(2, 1)
    info: RateLimitInfo = await bucket.feedback_async({"Retry-After": "2"}, status=503)

    waited = await llm.acquire_async([1, 1_200], timeout=5)
    granted = await llm.try_acquire_async((1, 800))
    await llm.refund_async([0, 400])
    await llm.charge_async([0, 800])
    await llm.settle_async([1, 1_200], [1, 950])

    async with bucket:
        pass
    async with llm:
        pass

    # The async twins must be awaited: their results are coroutines, not numbers.
    not_awaited: float = bucket.acquire_async()  # type: ignore[assignment]
    _ = (waited, granted, info, not_awaited)


def composite(llm: Composite) -> None:
    # One number for every member, or one per member.
    waited: float = llm.acquire()
    waited = llm.acquire(1)
    waited = llm.acquire([1, 1_200])
    waited = llm.acquire((1, 1_200), timeout=2.0)
    per_member: Sequence[float] = [1.0, 500.0]
    waited = llm.acquire(per_member)
    granted: bool = llm.try_acquire([1, 500])
    llm.refund([0, 400])
    llm.charge([0, 800])
    llm.charge(1)
    llm.settle([1, 1_200], (1, 1_500))
    llm.settle([1, 1_200], 0)

    @llm.decorate(tokens=[1, 500])
    def complete(prompt: str) -> str:
        return prompt

    text: str = complete("hi")
    llm.acquire("1, 1200")  # type: ignore[arg-type]
    _ = (waited, granted, text)


def run_time_changes(bucket: TokenBucket, window: SlidingWindow, llm: Composite) -> None:
    bucket.set_limit(rate=5, burst=10, ttl=timedelta(hours=1))
    bucket.for_key("tenant").set_limit(burst=2)
    window.set_limit(rate=0.5)
    llm.set_limit(rate=[None, 100 / 60], ttl=3600)
    was: bool = bucket.reset_limit()
    assert was or llm.reset_limit()
    bucket.set_limit(rate="5/s")  # type: ignore[arg-type]


def reserving(bucket: TokenBucket, llm: Composite) -> None:
    r: Reservation[float] = bucket.reserve()
    r = bucket.reserve(2, timeout=timedelta(seconds=5))
    wait: float = r.wait
    at: float = r.at
    due: datetime = r.due
    tokens: float = r.tokens
    given_back: bool = r.cancel()
    both: Reservation[Sequence[float]] = llm.reserve([1, 500], timeout=1.0)
    per_limit: Sequence[float] = both.tokens
    bucket.reserve("1")  # type: ignore[arg-type]
    del wait, at, due, tokens, given_back, per_limit


async def reserving_async(bucket: TokenBucket, llm: Composite) -> None:
    r: Reservation[float] = await bucket.reserve_async(1, timeout=0.5)
    given_back: bool = await r.cancel_async()
    both: Reservation[Sequence[float]] = await llm.reserve_async()
    del given_back, both


def celery_tasks(bucket: TokenBucket, llm: Composite, task: Any) -> None:
    # The decorator keeps the function's signature (Celery binds the task first).
    @limited(bucket, tokens=1, max_block=1.0)
    def lookup(self: Any, address: str) -> dict[str, float]:
        return {}

    @limited(llm, tokens=lambda prompt: [1, len(prompt)], max_block=timedelta(seconds=2), lead=0.1, late=0.05)
    def complete(self: Any, prompt: str) -> str:
        return prompt

    found: dict[str, float] = lookup(task, "1 Main St")
    text: str = complete(task, "hello")
    lookup(task, 1)  # type: ignore[arg-type]
    limited(bucket, max_block="1")  # type: ignore[arg-type]
    assert HEADER == "ratelimit_grant"
    del found, text


def decorators(bucket: TokenBucket, leaky: LeakyBucket) -> None:
    @bucket
    def fetch(url: str, retries: int = 3) -> bytes:
        return url.encode()

    @bucket.decorate(tokens=2, timeout=timedelta(seconds=1))
    def double(x: int) -> int:
        return 2 * x

    @leaky
    async def embed(batch: list[str]) -> list[float]:
        return [float(len(text)) for text in batch]

    @leaky.decorate(tokens=5)
    async def embed_many(batch: list[str], *, model: str = "small") -> dict[str, int]:
        return {model: len(batch)}

    # The parameters and the return type survive decoration.
    body: bytes = fetch("https://example.invalid", retries=1)
    body = fetch(url="https://example.invalid")
    x: int = double(1)
    fetch_again: Callable[[str, int], bytes] = fetch
    embed_again: Callable[[list[str]], Coroutine[Any, Any, list[float]]] = embed

    fetch(1)  # type: ignore[arg-type]
    fetch("https://example.invalid", tries=1)  # type: ignore[call-arg]
    y: str = double(1)  # type: ignore[assignment]

    async def use() -> None:
        vectors: list[float] = await embed(["a", "b"])
        counts: dict[str, int] = await embed_many(["a"], model="large")
        await embed([1, 2])  # type: ignore[list-item]
        _ = (vectors, counts)

    asyncio.run(use())
    _ = (body, x, y, fetch_again, embed_again)


def interfaces(bucket: TokenBucket, leaky: LeakyBucket, window: SlidingWindow, llm: Composite) -> None:
    acquirers: list[Acquirer] = [bucket, leaky, window, llm]
    for limiter in acquirers:
        waited: float = limiter.acquire(1, timeout=2)
        granted: bool = limiter.try_acquire()
        limiter.charge(1)
        limiter.settle(1, 2)
        _ = (waited, granted)

    not_an_acquirer: Acquirer = MemoryBackend()  # type: ignore[assignment]
    _ = not_an_acquirer


def priorities() -> None:
    shared = TokenBucket(20, 10, low_share=0.8)
    window = SlidingWindow(100, 60, low_share=0.5, borrow=False)
    batch: Acquirer = shared.low
    waited: float = shared.low.acquire(2, timeout=timedelta(seconds=1))
    share: float | None = window.low_share
    _ = (batch, waited, share, TokenBucket(20, 10, low_share=0.8, high_reserve=2))
    LeakyBucket(5, 1, low_share=0.5)  # type: ignore[call-arg]


def fair_shares() -> None:
    share = FairShare(TokenBucket(20, 10), weights={"acme": 3}, default_weight=1, lead=timedelta(seconds=0.5))
    tenant: TenantShare = share.for_key("acme")
    waited: float = tenant.acquire(2, timeout=1.0)
    granted: bool = tenant.try_acquire()
    wait: float = tenant.peek()
    share.set_weight("acme", 2.5)
    weight: float = share.weight("acme")
    _ = (waited, granted, wait, weight, tenant.key, tenant.weight, share.lead)
    share.set_weight("acme", "2")  # type: ignore[arg-type]
    FairShare(TokenBucket(20, 10), 3)  # type: ignore[call-arg, arg-type]

    async def run() -> None:
        waited: float = await tenant.acquire_async()
        granted: bool = await tenant.try_acquire_async()
        wait: float = await tenant.peek_async()
        _ = (waited, granted, wait)

    _ = run


def clocks() -> None:
    clock = ManualClock()
    clock = ManualClock(1_000.0)
    clock.advance(1.5)
    clock.set(2_000.0)
    now: float = clock.now()
    clock.sleep(0.25)
    sleeps: list[float] = clock.sleeps

    class MyClock:
        def now(self) -> float:
            return 0.0

        def sleep(self, seconds: float) -> None:
            pass

        async def sleep_async(self, seconds: float) -> None:
            pass

    mine: Clock = MyClock()
    TokenBucket(1, 1, clock=MyClock())
    _ = (now, sleeps, mine)


def errors(bucket: TokenBucket) -> None:
    try:
        bucket.acquire(timeout=0)
    except AcquireTimeout as exc:
        retry_after: float = exc.retry_after
        as_timeout: TimeoutError = exc
        as_ours: RateLimitError = exc
        _ = (retry_after, as_timeout, as_ours)
    except BackendUnavailable as exc:
        cause: BaseException | None = exc.__cause__
        as_root: RateLimitError = exc
        _ = (cause, as_root)

    made = AcquireTimeout(2.5)
    made = AcquireTimeout(2.5, "custom message")
    seconds: float = made.retry_after
    _ = seconds


def retries_and_breakers(bucket: TokenBucket) -> None:
    breaker = CircuitBreaker(min_calls=5, cooldown=timedelta(seconds=10))
    retry = Retry(max_attempts=3, deadline=30, backoff=Backoff(jitter="equal"), limiter=bucket, breaker=breaker)

    def fetch(url: str, *, timeout: float = 1.0) -> bytes:
        return b""

    body: bytes = retry.call(fetch, "https://example.invalid", timeout=2.0)
    retry.call(fetch, 42)  # type: ignore[arg-type]

    @retry
    def get(url: str) -> int:
        return 200

    status: int = get("u")

    @retry
    async def aget(url: str) -> int:
        return 200

    pending: Coroutine[Any, Any, int] = aget("u")
    pending.close()

    async def later() -> None:
        got: int = await retry.call_async(aget, "u")
        _ = got

    guarded: int = breaker.call(get, "u")
    ticket: Ticket = breaker.allow()
    breaker.record(ticket, None)
    retry_stats: RetryStats = retry.stats()
    breaker_stats: BreakerStats = breaker.stats()
    state: str = breaker.state
    Backoff(jitter="random")  # type: ignore[arg-type]

    try:
        retry.call(get, "u")
    except RetryError as exc:
        history: tuple[Attempt, ...] = exc.attempts
        reason: str = exc.reason
        last: object = exc.result
        _ = (history, reason, last)
    except CircuitOpen as exc:
        wait: float = exc.retry_after
        _ = wait

    def on_event(event: Event) -> None:
        if isinstance(event, Granted):
            waited: float = event.wait
            _ = waited

    unsubscribe: Callable[[], None] = subscribe(on_event)
    bucket.subscribe(on_event)
    retry.subscribe(on_event)
    breaker.subscribe(on_event)
    _ = (body, status, later, guarded, retry_stats, breaker_stats, state, unsubscribe)


def incoming_requests(bucket: TokenBucket) -> None:
    from ratelimit.asgi import RateLimitMiddleware as AsgiMiddleware
    from ratelimit.asgi import limit as route_limit
    from ratelimit.keys import Headers, Request, client_ip, header
    from ratelimit.wsgi import RateLimitMiddleware as WsgiMiddleware
    from ratelimit.wsgi import limit as view_limit

    async def app(scope: Any, receive: Any, send: Any) -> None: ...

    def wsgi_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        return [b""]

    def heavy(request: Request) -> int:
        return 10 if request.path.startswith("/export") else 1

    peer: Callable[[Request], str | None] = client_ip(trusted_proxies=["10.0.0.0/8"])
    AsgiMiddleware(app, limiter=bucket, key=peer, cost=heavy, wait=timedelta(seconds=1), headers=False)
    WsgiMiddleware(wsgi_app, limiter=bucket, key=header("x-api-key"), exempt=lambda r: r.path == "/health")
    AsgiMiddleware(app, bucket)  # type: ignore[call-arg]
    dependency: Callable[..., Awaitable[None]] = route_limit(bucket, wait=0.5)

    @view_limit(bucket, cost=2)
    def view(name: str) -> str:
        return name

    shown: str = view("x")
    seen = Request("GET", "/", Headers([("Host", "a")]), None)
    value: str | None = seen.headers.get("host")
    _ = (dependency, shown, value)
