"""Every way to call a limiter: as a decorator, as a context manager (``with`` and
``async with``), ``acquire`` and the wait it returns, ``try_acquire_async``, a refund
of a weighted grant or a composite's, and an interrupted wait giving its reservation
back.

Every test runs on every store of the backend matrix (``make``), with time injected
through the ``clock`` fixture: a :class:`ManualClock` at 1000.0 whose ``sleep``
advances it and records the wait in ``clock.sleeps``.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

import pytest

from ratelimit import AcquireTimeout, Composite, LeakyBucket, ManualClock, SlidingWindow, TokenBucket
from ratelimit._limiting.front import Limiter

Make = Callable[..., Any]


# -- @limiter and @limiter.decorate(...) ---------------------------------------------


def test_decorator_takes_one_token_per_call_of_a_plain_function(make: Make, clock: ManualClock) -> None:
    limiter: TokenBucket = make(TokenBucket, 2, 1)
    calls: list[tuple[int, int]] = []

    @limiter
    def add(x: int, y: int = 0) -> int:
        """Add two numbers."""
        calls.append((x, y))
        return x + y

    assert add(1) == 1
    assert add(2, y=3) == 5
    assert clock.sleeps == []  # the burst of two is free
    assert add(4, 5) == 9  # the third call waits for a token
    assert clock.sleeps == [1.0]
    assert calls == [(1, 0), (2, 3), (4, 5)]
    assert not limiter.try_acquire()  # the third token was spent too


def test_decorator_takes_one_token_per_call_of_a_coroutine_function(make: Make, clock: ManualClock) -> None:
    limiter: TokenBucket = make(TokenBucket, 2, 1)

    @limiter
    async def fetch(url: str, *, retries: int = 1) -> str:
        """Fetch a URL."""
        await asyncio.sleep(0)
        return f"{url}#{retries}"

    assert inspect.iscoroutinefunction(fetch)

    async def scenario() -> list[str]:
        return [await fetch("a"), await fetch("b", retries=2), await fetch("c")]

    assert asyncio.run(scenario()) == ["a#1", "b#2", "c#1"]
    assert clock.sleeps == [1.0]


def test_concurrent_calls_of_a_decorated_coroutine_are_spaced(make: Make, clock: ManualClock) -> None:
    limiter: TokenBucket = make(TokenBucket, 2, 1)

    @limiter
    async def echo(i: int) -> int:
        return i

    async def scenario() -> list[int]:
        return list(await asyncio.gather(*(echo(i) for i in range(4))))

    assert asyncio.run(scenario()) == [0, 1, 2, 3]  # return values, each to its caller
    # Two at once (the burst); the other two waited. (How long depends on when each
    # task reserved relative to the others' sleeps: ManualClock moves the one shared
    # clock forward at every sleep, concurrent or not.)
    assert len(clock.sleeps) == 2
    assert all(wait > 0 for wait in clock.sleeps)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_decorate_with_a_weight(make: Make, clock: ManualClock, kind: str) -> None:
    limiter: TokenBucket = make(TokenBucket, 4, 2)
    decorate = limiter.decorate(tokens=2)

    if kind == "sync":

        @decorate
        def embed(batch: list[str]) -> int:
            return len(batch)

        results = [embed(["a"]), embed(["a", "b"]), embed([])]
    else:

        @decorate
        async def embed_async(batch: list[str]) -> int:
            return len(batch)

        async def scenario() -> list[int]:
            return [await embed_async(["a"]), await embed_async(["a", "b"]), await embed_async([])]

        results = asyncio.run(scenario())

    assert results == [1, 2, 0]
    # 4 tokens buy two calls at once; the third needs 2 tokens at 2/s.
    assert clock.sleeps == [1.0]


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_decorate_with_a_timeout_refuses_without_calling(make: Make, clock: ManualClock, kind: str) -> None:
    limiter: TokenBucket = make(TokenBucket, 1, 1)
    calls: list[int] = []

    @limiter.decorate(timeout=0.5)
    def work(i: int) -> int:
        calls.append(i)
        return i

    @limiter.decorate(timeout=0.5)
    async def work_async(i: int) -> int:
        calls.append(i)
        return i

    def call(i: int) -> int:
        return work(i) if kind == "sync" else asyncio.run(work_async(i))

    assert call(1) == 1
    with pytest.raises(AcquireTimeout) as caught:
        call(2)  # would need 1 s, more than 0.5
    assert caught.value.retry_after == pytest.approx(1.0)
    assert calls == [1]
    assert clock.sleeps == []
    clock.advance(1)
    assert call(3) == 3


@pytest.mark.parametrize("how", ["@limiter", "@limiter.decorate()", "@limiter.decorate(tokens=2)"])
def test_decorators_preserve_the_function_identity(make: Make, how: str) -> None:
    limiter: TokenBucket = make(TokenBucket, 2, 1)
    decorators: dict[str, Callable[[Callable[..., Any]], Callable[..., Any]]] = {
        "@limiter": limiter,
        "@limiter.decorate()": limiter.decorate(),
        "@limiter.decorate(tokens=2)": limiter.decorate(tokens=2),
    }
    decorator = decorators[how]

    def geocode(address: str, *, country: str = "NL") -> tuple[str, str]:
        """Look an address up."""
        return address, country

    async def geocode_async(address: str, *, country: str = "NL") -> tuple[str, str]:
        """Look an address up, asynchronously."""
        return address, country

    for original in (geocode, geocode_async):
        wrapped = decorator(original)
        assert wrapped is not original
        assert wrapped.__name__ == original.__name__
        assert wrapped.__qualname__ == original.__qualname__
        assert wrapped.__doc__ == original.__doc__
        assert wrapped.__module__ == original.__module__
        assert wrapped.__wrapped__ is original  # type: ignore[attr-defined]
        assert inspect.signature(wrapped) == inspect.signature(original)
        assert inspect.iscoroutinefunction(wrapped) == inspect.iscoroutinefunction(original)


def test_a_decorated_function_raising_propagates_and_its_token_stays_spent(make: Make, clock: ManualClock) -> None:
    limiter: TokenBucket = make(TokenBucket, 1, 1)

    @limiter
    def fail() -> None:
        raise LookupError("provider said no")

    with pytest.raises(LookupError, match="provider said no"):
        fail()
    # The request may have reached the provider: the token is not given back.
    assert not limiter.try_acquire()
    assert clock.sleeps == []


def test_a_decorated_method_works(make: Make, clock: ManualClock) -> None:
    limiter: TokenBucket = make(TokenBucket, 1, 1)

    class Client:
        def __init__(self) -> None:
            self.sent = 0

        @limiter
        def send(self, n: int) -> int:
            self.sent += n
            return self.sent

    client = Client()
    assert client.send(2) == 2
    assert client.send(3) == 5
    assert clock.sleeps == [1.0]


class WhichSleep(ManualClock):
    """Tells a blocking sleep (``sleep``) from a suspending one (``sleep_async``)."""

    def __init__(self, start: float) -> None:
        super().__init__(start)
        self.blocking: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.blocking.append(seconds)
        super().sleep(seconds)


def test_a_decorated_coroutine_function_never_blocks_the_loop(make: Make) -> None:
    clock = WhichSleep(1_000.0)
    limiter: TokenBucket = make(TokenBucket, 1, 2, clock=clock)

    @limiter
    async def call(x: int) -> int:
        return x

    async def scenario() -> list[int]:
        return [await call(1), await call(2)]

    assert asyncio.run(scenario()) == [1, 2]
    assert clock.sleeps == [0.5]
    assert clock.blocking == []


def test_a_decorated_callable_object_with_an_async_call_never_blocks_the_loop(make: Make) -> None:
    clock = WhichSleep(1_000.0)
    limiter: TokenBucket = make(TokenBucket, 1, 2, clock=clock)

    class Client:
        async def __call__(self, x: int) -> int:
            return x

    call = limiter(Client())

    async def scenario() -> list[int]:
        return [await call(1), await call(2)]

    assert asyncio.run(scenario()) == [1, 2]
    assert clock.sleeps == [0.5]
    assert clock.blocking == []  # fails: [0.5], the wait blocked the event loop's thread


# -- with limiter: / async with limiter: -------------------------------------------------


def test_with_limiter_acquires_one_token(make: Make, clock: ManualClock) -> None:
    limiter: TokenBucket = make(TokenBucket, 2, 1)
    entered = 0
    for _ in range(3):
        with limiter:
            entered += 1
    assert entered == 3
    assert clock.sleeps == [1.0]


def test_async_with_limiter_acquires_one_token(make: Make, clock: ManualClock) -> None:
    limiter: TokenBucket = make(TokenBucket, 2, 1)

    async def scenario() -> int:
        entered = 0
        for _ in range(3):
            async with limiter:
                entered += 1
        return entered

    assert asyncio.run(scenario()) == 3
    assert clock.sleeps == [1.0]


def test_the_context_managers_do_not_swallow_exceptions(make: Make, clock: ManualClock) -> None:
    limiter: TokenBucket = make(TokenBucket, 2, 1)
    with pytest.raises(KeyError), limiter:
        raise KeyError("inside")

    async def scenario() -> None:
        async with limiter:
            raise KeyError("inside async")

    with pytest.raises(KeyError):
        asyncio.run(scenario())
    # Both entries took their token; nothing was given back on the way out.
    assert not limiter.try_acquire()
    assert clock.sleeps == []


def test_sync_and_async_share_one_budget(make: Make, clock: ManualClock) -> None:
    limiter: TokenBucket = make(TokenBucket, 2, 1)
    with limiter:
        pass

    async def scenario() -> None:
        async with limiter:
            pass
        async with limiter:  # the third token of the two: waits
            pass

    asyncio.run(scenario())
    assert clock.sleeps == [1.0]


# -- acquire returns the wait ---------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "args", "waits"),
    [
        (TokenBucket, (2, 1), [0.0, 0.0, 1.0, 1.0]),
        (LeakyBucket, (3, 2), [0.0, 0.5, 0.5, 0.5]),
        (SlidingWindow, (2, 10), [0.0, 0.0, 10.0, 0.0]),
    ],
    ids=["TokenBucket", "LeakyBucket", "SlidingWindow"],
)
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_acquire_returns_the_wait_it_slept(
    make: Make, clock: ManualClock, cls: type[Any], args: tuple[float, float], waits: list[float], kind: str
) -> None:
    limiter = make(cls, *args)
    if kind == "sync":
        got = [limiter.acquire() for _ in waits]
    else:

        async def scenario() -> list[float]:
            return [await limiter.acquire_async() for _ in waits]

        got = asyncio.run(scenario())
    assert got == pytest.approx(waits)
    assert all(isinstance(wait, float) for wait in got)
    # It slept exactly the waits it returned, and only the non-zero ones.
    assert clock.sleeps == pytest.approx([wait for wait in waits if wait > 0])
    assert clock.now() == pytest.approx(1_000.0 + sum(waits))


def test_acquire_returns_the_wait_of_a_weighted_composite(make: Make, clock: ManualClock) -> None:
    limiter: Composite = make(Composite, [TokenBucket(2, 1), SlidingWindow(10, 60)])
    assert limiter.acquire([2, 1]) == 0.0
    assert limiter.acquire([1, 1]) == pytest.approx(1.0)
    assert limiter.acquire(1) == pytest.approx(1.0)
    assert clock.sleeps == pytest.approx([1.0, 1.0])


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_acquire_within_its_timeout_returns_the_wait(make: Make, clock: ManualClock, kind: str) -> None:
    limiter: TokenBucket = make(TokenBucket, 1, 4)
    assert limiter.try_acquire()

    def acquire(timeout: float) -> float:
        if kind == "sync":
            return limiter.acquire(timeout=timeout)
        return asyncio.run(limiter.acquire_async(timeout=timeout))

    with pytest.raises(AcquireTimeout) as caught:
        acquire(0.2)
    assert caught.value.retry_after == pytest.approx(0.25)
    assert clock.sleeps == []  # refused at once, no sleep, nothing reserved
    assert acquire(0.25) == pytest.approx(0.25)
    assert clock.sleeps == pytest.approx([0.25])


# -- try_acquire_async ----------------------------------------------------------------


def test_try_acquire_async_never_waits(make: Make, clock: ManualClock) -> None:
    limiter: TokenBucket = make(TokenBucket, 2, 1)

    async def burst() -> list[bool]:
        return [await limiter.try_acquire_async() for _ in range(3)]

    assert asyncio.run(burst()) == [True, True, False]
    assert clock.sleeps == []
    clock.advance(0.5)
    assert asyncio.run(limiter.try_acquire_async()) is False
    clock.advance(0.5)
    assert asyncio.run(limiter.try_acquire_async()) is True
    assert asyncio.run(limiter.try_acquire_async(tokens=1)) is False
    assert clock.sleeps == []


def test_try_acquire_async_with_a_weight(make: Make, clock: ManualClock) -> None:
    limiter: SlidingWindow = make(SlidingWindow, 5, 10)

    async def scenario() -> list[bool]:
        return [
            await limiter.try_acquire_async(3),
            await limiter.try_acquire_async(3),  # 6 > 5: refused, not partly granted
            await limiter.try_acquire_async(2),
            await limiter.try_acquire_async(1),
        ]

    assert asyncio.run(scenario()) == [True, False, True, False]


# -- refund of a weighted grant, of a composite (every limiter's: test_every_limiter.py) --


def test_a_partial_refund_of_a_weighted_grant(make: Make, clock: ManualClock) -> None:
    # An LLM call reserved 1,000 tokens and used 600.
    limiter: TokenBucket = make(TokenBucket, 1_000, 100)
    assert limiter.acquire(1_000) == 0.0
    limiter.refund(400)
    assert limiter.try_acquire(400)
    assert not limiter.try_acquire(1)


def test_a_composite_refund_gives_back_to_every_member(make: Make, clock: ManualClock) -> None:
    limiter: Composite = make(Composite, [TokenBucket(2, 1), SlidingWindow(5, 60)])
    assert limiter.try_acquire([2, 5])
    assert not limiter.try_acquire(1)
    limiter.refund([1, 1])
    assert limiter.try_acquire([1, 1])
    assert not limiter.try_acquire([1, 1])


# -- an interrupted wait gives its reservation back ------------------------------------


class Interrupted(Exception):
    """What a signal handler might raise in the middle of a wait."""


class InterruptingClock(ManualClock):
    """Ctrl-C (or a signal handler's exception) arrives while the limiter sleeps."""

    def __init__(self, start: float, exc: BaseException) -> None:
        super().__init__(start)
        self.exc = exc

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        raise self.exc

    async def sleep_async(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        await asyncio.sleep(0)
        raise self.exc


# (limiter factory, how to use up what is grantable now); every one then needs a wait.
SCENARIOS: list[tuple[str, Callable[[Make, ManualClock], Limiter[Any]], Callable[[Limiter[Any]], object]]] = [
    ("TokenBucket", lambda make, clock: make(TokenBucket, 2, 1, clock=clock), lambda lim: lim.try_acquire(2)),
    ("LeakyBucket", lambda make, clock: make(LeakyBucket, 3, 2, clock=clock), lambda lim: lim.try_acquire(1)),
    ("SlidingWindow", lambda make, clock: make(SlidingWindow, 2, 4, clock=clock), lambda lim: lim.try_acquire(2)),
    (
        "SlidingWindow(approximate)",
        lambda make, clock: make(SlidingWindow, 2, 4, approximate=True, clock=clock),
        lambda lim: lim.try_acquire(2),
    ),
    (
        "Composite",
        lambda make, clock: make(Composite, [TokenBucket(2, 1), SlidingWindow(3, 4)], clock=clock),
        lambda lim: lim.try_acquire(2),
    ),
]

# When to probe afterwards, as steps from the interruption, and how much to ask for.
PROBES = [(0.0, 1), (0.25, 1), (0.25, 1), (0.5, 1), (0.5, 1), (1.0, 2), (1.0, 1), (3.0, 1), (0.0, 1), (0.0, 1)]


def probe(limiter: Limiter[Any], clock: ManualClock) -> list[bool]:
    results = []
    for step, tokens in PROBES:
        clock.advance(step)
        results.append(limiter.try_acquire(tokens))
    return results


def _probed(interrupted: Limiter[Any], twin: Limiter[Any], clock: ManualClock) -> tuple[list[bool], list[bool]]:
    """What the two limiters answer to the same probes, in step with the clock."""
    got, expected = [], []
    for step, tokens in PROBES:
        clock.advance(step)
        got.append(interrupted.try_acquire(tokens))
        expected.append(twin.try_acquire(tokens))
    return got, expected


@pytest.mark.parametrize(
    "exc", [KeyboardInterrupt(), Interrupted("signal")], ids=["KeyboardInterrupt", "handler-exception"]
)
@pytest.mark.parametrize(("scenario", "build", "use_up"), SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_an_interrupted_acquire_gives_its_reservation_back(
    make: Make,
    scenario: str,
    build: Callable[[Make, ManualClock], Limiter[Any]],
    use_up: Callable[[Limiter[Any]], object],
    exc: BaseException,
) -> None:
    clock = InterruptingClock(1_000.0, exc)
    interrupted, twin = build(make, clock), build(make, clock)
    assert use_up(interrupted)
    assert use_up(twin)

    with pytest.raises(type(exc)) as caught:
        interrupted.acquire()
    assert caught.value is exc  # propagated as raised
    # It did reserve, and started to wait.
    assert len(clock.sleeps) == 1
    assert clock.sleeps[0] > 0

    # From here on the interrupted limiter decides exactly as its twin, which never
    # saw the interrupted acquire.
    got, expected = _probed(interrupted, twin, clock)
    assert got == expected
    # The probes do tell states apart.
    assert True in expected
    assert False in expected


@pytest.mark.parametrize(("scenario", "build", "use_up"), SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_an_interrupted_acquire_async_gives_its_reservation_back(
    make: Make,
    scenario: str,
    build: Callable[[Make, ManualClock], Limiter[Any]],
    use_up: Callable[[Limiter[Any]], object],
) -> None:
    exc = Interrupted("signal")
    clock = InterruptingClock(1_000.0, exc)
    interrupted, twin = build(make, clock), build(make, clock)
    assert use_up(interrupted)
    assert use_up(twin)

    with pytest.raises(Interrupted) as caught:
        asyncio.run(interrupted.acquire_async())
    assert caught.value is exc
    assert len(clock.sleeps) == 1
    assert clock.sleeps[0] > 0

    got, expected = _probed(interrupted, twin, clock)
    assert got == expected


def test_the_next_try_acquire_after_an_interruption_succeeds_on_time(make: Make) -> None:
    # The brief's scenario, spelled out: capacity 1, rate 1.
    clock = InterruptingClock(1_000.0, KeyboardInterrupt())
    limiter: TokenBucket = make(TokenBucket, 1, 1, clock=clock)
    assert limiter.try_acquire()
    with pytest.raises(KeyboardInterrupt):
        limiter.acquire()  # reserved t=1001, then interrupted while waiting for it
    assert not limiter.try_acquire()  # still t=1000: nothing is free yet
    clock.advance(1)
    # Had the reservation been kept, t=1001 would belong to it and this would fail.
    assert limiter.try_acquire()
    assert not limiter.try_acquire()
