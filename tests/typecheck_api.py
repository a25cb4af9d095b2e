"""Never run: mypy --strict checks that every public call shape types as users expect.

pytest does not collect this file (its name does not start with ``test_``); the
Makefile's mypy run covers it with the rest of tests/.
"""

from __future__ import annotations

from datetime import timedelta

from ratelimit import (
    Acquirer,
    AcquireTimeout,
    Composite,
    LeakyBucket,
    ManualClock,
    MemoryBackend,
    RateLimitInfo,
    RedisBackend,
    SlidingWindow,
    TokenBucket,
    parse_rate_limit_headers,
)


def shapes() -> None:
    clock = ManualClock()
    bucket = TokenBucket(capacity=20, refill_per_sec=1000 / 60, clock=clock)
    leaky = LeakyBucket(10, 2.5, backend=MemoryBackend(), name="smooth")
    window = SlidingWindow(100, timedelta(minutes=1), approximate=True)
    shared = TokenBucket(5, 1, backend=RedisBackend.from_url("redis://127.0.0.1:6379/0"), name="geocode")
    llm = Composite([TokenBucket(50, 50 / 60), TokenBucket(40_000, 40_000 / 60)], name="llm")

    waited: float = bucket.acquire()
    waited = bucket.acquire(2, timeout=1.5)
    waited = leaky.acquire(timeout=timedelta(seconds=3))
    granted: bool = window.try_acquire()
    waited = llm.acquire([1, 1_200])
    waited = llm.acquire(1)
    bucket.refund(1)
    info: RateLimitInfo = shared.feedback({"Retry-After": "2"}, status=429)
    info = parse_rate_limit_headers([("X-RateLimit-Remaining", "3")])
    remaining: float | None = info.remaining
    sleeps: list[float] = clock.sleeps

    interface: Acquirer = bucket
    interface = llm

    try:
        bucket.acquire(timeout=0)
    except AcquireTimeout as exc:
        retry_after: float = exc.retry_after

    @bucket
    def fetch(url: str, retries: int = 3) -> bytes:
        return url.encode()

    @leaky.decorate(tokens=2)
    async def embed(batch: list[str]) -> list[float]:
        return [float(len(text)) for text in batch]

    body: bytes = fetch("https://example.invalid", retries=1)
    _ = (waited, granted, remaining, sleeps, interface, retry_after, body, embed)


async def async_shapes(bucket: TokenBucket) -> None:
    waited: float = await bucket.acquire_async(timeout=1)
    granted: bool = await bucket.try_acquire_async()
    info: RateLimitInfo = await bucket.feedback_async({})
    await bucket.refund_async()
    async with bucket:
        pass
    with bucket:
        pass
    _ = (waited, granted, info)
