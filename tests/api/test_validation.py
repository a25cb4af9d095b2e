"""Argument checking: every bad argument is refused at once, by name, with its value.

The contract (DESIGN.md): constructors and methods raise ``ValueError`` for a value
out of range and ``TypeError`` for a value of the wrong type, and the message names
the argument and repeats the value, so that a bad config line is found from the
traceback alone. A refused call consumes nothing.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import fakeredis
import pytest

from ratelimit import (
    AcquireTimeout,
    BackendUnavailable,
    Composite,
    LeakyBucket,
    ManualClock,
    MemoryBackend,
    RateLimitError,
    RedisBackend,
    SlidingWindow,
    SystemClock,
    TokenBucket,
)
from ratelimit._algorithms.algorithm import Algorithm
from ratelimit._limiting.front import Limiter
from ratelimit._stores.memory.backend import MemoryGroupHandle, MemoryHandle
from ratelimit._stores.redis.backend import key_for
from ratelimit._validate import MAX_NAME_LENGTH

from conftest import REDIS_URL, stable_id, unique_name
from held import HeldClock


def bad(value: object) -> Any:
    """``value``, hidden from the type checker: these calls are wrong on purpose."""
    return value


def shown(value: object) -> list[str]:
    """How a message may repeat ``value``: its repr (a duration given as a
    ``timedelta`` is converted first, and may be shown as its seconds)."""
    if isinstance(value, timedelta):
        return [repr(value), repr(value.total_seconds())]
    return [repr(value)]


def assert_names(exc: BaseException, argument: str, value: object) -> None:
    message = str(exc)
    assert argument in message, f"{message!r} does not name {argument!r}"
    assert any(form in message for form in shown(value)), f"{message!r} does not repeat {value!r}"


# -- the numbers every constructor takes ------------------------------------------

OUT_OF_RANGE: list[Any] = [0, 0.0, -1, -0.5, -math.inf, math.nan, math.inf]
WRONG_TYPE: list[Any] = ["1", "", None, True, False, [1], (1,), b"1", {"n": 1}, 1j]
NOT_A_DURATION: list[Any] = [timedelta(seconds=1)]

Build = Callable[[Any], object]

# (argument, constructor with that argument set to the value and the others valid)
NUMBERS: list[tuple[str, Build]] = [
    ("capacity", lambda v: TokenBucket(capacity=v, refill_per_sec=1)),
    ("refill_per_sec", lambda v: TokenBucket(capacity=1, refill_per_sec=v)),
    ("capacity", lambda v: LeakyBucket(capacity=v, leak_per_sec=1)),
    ("leak_per_sec", lambda v: LeakyBucket(capacity=1, leak_per_sec=v)),
    ("limit", lambda v: SlidingWindow(limit=v, window_seconds=1)),
    ("limit", lambda v: SlidingWindow(limit=v, window_seconds=1, approximate=True)),
    ("window_seconds", lambda v: SlidingWindow(limit=1, window_seconds=v)),
    ("window_seconds", lambda v: SlidingWindow(limit=1, window_seconds=v, approximate=True)),
]
NUMBER_IDS = [
    "TokenBucket.capacity",
    "TokenBucket.refill_per_sec",
    "LeakyBucket.capacity",
    "LeakyBucket.leak_per_sec",
    "SlidingWindow.limit",
    "SlidingWindow(approximate).limit",
    "SlidingWindow.window_seconds",
    "SlidingWindow(approximate).window_seconds",
]
DURATIONS = {"window_seconds"}


@pytest.mark.parametrize("value", OUT_OF_RANGE, ids=stable_id)
@pytest.mark.parametrize(("argument", "build"), NUMBERS, ids=NUMBER_IDS)
def test_a_number_out_of_range_is_a_value_error(argument: str, build: Build, value: Any) -> None:
    if argument == "refill_per_sec" and (value == 0 or (isinstance(value, float) and value == math.inf)):
        # A token bucket that never limits, and one that never refills (an allowance):
        # see test_limits_in_force.py.
        build(value)
        return
    with pytest.raises(ValueError, match=argument) as caught:
        build(value)
    assert_names(caught.value, argument, value)


@pytest.mark.parametrize(
    ("build", "argument", "value", "why"),
    [
        (lambda v: LeakyBucket(1, v), "leak_per_sec", 0, "never drains"),
        (lambda v: LeakyBucket(1, v), "leak_per_sec", 0.0, "TokenBucket\\(capacity, 0\\)"),
        (lambda v: LeakyBucket(1, v), "leak_per_sec", math.inf, "TokenBucket\\(capacity, math.inf\\)"),
        (lambda v: SlidingWindow(v, 1), "limit", 0, "grants nothing"),
        (lambda v: SlidingWindow(v, 1, approximate=True), "limit", math.inf, "math.inf"),
        (lambda v: SlidingWindow(1, v), "window_seconds", math.inf, "TokenBucket\\(limit, 0\\)"),
        (lambda v: SlidingWindow(1, v), "window_seconds", timedelta(0), "empty window"),
    ],
    ids=stable_id,
)
def test_an_end_of_the_scale_a_limit_has_no_meaning_at_says_why(
    build: Build, argument: str, value: Any, why: str
) -> None:
    """0 and infinity where they mean nothing (or are another limiter): refused, by
    name and value, with what to use instead."""
    with pytest.raises(ValueError, match=why) as caught:
        build(value)
    assert_names(caught.value, argument, value)


@pytest.mark.parametrize(("option", "value"), [("low_share", 0.5), ("lease", 1.0), ("adaptive", None)], ids=stable_id)
def test_an_allowance_refuses_what_needs_a_rate(option: str, value: Any) -> None:
    from ratelimit import Adaptive

    given: Any = Adaptive() if option == "adaptive" else value
    with pytest.raises(ValueError, match=f"{option}=.*refill_per_sec=0") as caught:
        TokenBucket(5, 0, **{option: bad(given)})
    assert option in str(caught.value)


@pytest.mark.parametrize("zero", [0, 0.0, -0.0], ids=stable_id)
def test_a_refill_of_zero_is_an_allowance_whatever_its_sign(zero: float) -> None:
    bucket = TokenBucket(2, zero)
    assert bucket.refill_per_sec == 0.0
    assert math.copysign(1.0, bucket.refill_per_sec) == 1.0
    assert [bucket.try_acquire() for _ in range(3)] == [True, True, False]


@pytest.mark.parametrize(
    ("argument", "build", "value"),
    [
        pytest.param(argument, build, value, id=f"{name}-{value!r}")
        for (argument, build), name in zip(NUMBERS, NUMBER_IDS, strict=True)
        # A duration may come as a timedelta (tested below); no other number may.
        for value in WRONG_TYPE + ([] if argument in DURATIONS else NOT_A_DURATION)
    ],
)
def test_a_number_of_the_wrong_type_is_a_type_error(argument: str, build: Build, value: Any) -> None:
    with pytest.raises(TypeError, match=argument) as caught:
        build(value)
    assert_names(caught.value, argument, value)


@pytest.mark.parametrize("value", [1, 0.25, 1e-6, 1e9, 7.5], ids=stable_id)
@pytest.mark.parametrize(("argument", "build"), NUMBERS, ids=NUMBER_IDS)
def test_any_finite_positive_number_is_accepted(argument: str, build: Build, value: Any) -> None:
    assert isinstance(build(value), Limiter)


@pytest.mark.parametrize("approximate", [False, True])
@pytest.mark.parametrize(
    ("window", "seconds"),
    [(timedelta(minutes=1), 60.0), (timedelta(milliseconds=250), 0.25), (timedelta(days=1), 86_400.0)],
    ids=["1min", "250ms", "1day"],
)
def test_window_seconds_accepts_a_timedelta(window: timedelta, seconds: float, approximate: bool) -> None:
    limiter = SlidingWindow(limit=10, window_seconds=window, approximate=approximate)
    assert limiter.window_seconds == seconds
    assert limiter.approximate is approximate


@pytest.mark.parametrize(
    "window", [timedelta(0), timedelta(seconds=-1), timedelta(microseconds=-1)], ids=["zero", "-1s", "-1us"]
)
def test_window_seconds_refuses_an_empty_or_negative_timedelta(window: timedelta) -> None:
    with pytest.raises(ValueError, match="window_seconds") as caught:
        SlidingWindow(limit=10, window_seconds=window)
    assert_names(caught.value, "window_seconds", window)


@pytest.mark.parametrize("value", [1, 0, None, "yes", "False", [True]], ids=stable_id)
def test_approximate_must_be_a_bool(value: Any) -> None:
    with pytest.raises(TypeError, match="approximate") as caught:
        SlidingWindow(limit=10, window_seconds=1, approximate=value)
    assert_names(caught.value, "approximate", value)


@pytest.mark.parametrize(
    "call",
    [
        lambda: TokenBucket(capacity=10**400, refill_per_sec=1),
        lambda: SlidingWindow(limit=1, window_seconds=10**400),
        lambda: TokenBucket(10, 1).acquire(tokens=10**400),
    ],
    ids=["capacity", "window_seconds", "tokens"],
)
def test_an_int_too_large_for_a_float_is_a_value_error(call: Callable[[], object]) -> None:
    with pytest.raises(ValueError, match="10000"):
        call()


def test_a_rate_too_small_to_compute_with_is_refused_or_works() -> None:
    clock = ManualClock(1_000.0)
    try:
        limiter = TokenBucket(capacity=10, refill_per_sec=1e-320, clock=clock)
    except ValueError:
        return  # refusing it at construction is a fine answer
    waits = [limiter.acquire() for _ in range(10)]  # the burst: ten grants at once
    assert waits == [0.0] * 10
    assert not limiter.try_acquire()


# -- name, clock, backend: the keyword arguments every limiter takes ----------------

Construct = Callable[..., Limiter[Any]]

LIMITER_CLASSES: list[Construct] = [
    lambda **kw: TokenBucket(10, 1, **kw),
    lambda **kw: LeakyBucket(10, 1, **kw),
    lambda **kw: SlidingWindow(10, 1, **kw),
    lambda **kw: SlidingWindow(10, 1, approximate=True, **kw),
    lambda **kw: Composite([TokenBucket(10, 1), SlidingWindow(20, 1)], **kw),
]
LIMITER_CLASS_IDS = ["TokenBucket", "LeakyBucket", "SlidingWindow", "SlidingWindow(approximate)", "Composite"]


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("", ValueError),
        ("x" * (MAX_NAME_LENGTH + 1), ValueError),
        ("é" * 1_000, ValueError),
        (7, TypeError),
        (b"geocode", TypeError),
        (True, TypeError),
        (["geocode"], TypeError),
        (timedelta(1), TypeError),
    ],
    ids=["empty", "201-chars", "1000-chars", "int", "bytes", "bool", "list", "timedelta"],
)
@pytest.mark.parametrize("construct", LIMITER_CLASSES, ids=LIMITER_CLASS_IDS)
def test_a_bad_name_is_refused(construct: Construct, name: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="name") as caught:
        construct(name=name)
    assert_names(caught.value, "name", name)


@pytest.mark.parametrize("name", ["a", "geocode", "x" * MAX_NAME_LENGTH, "{tag}:with spaces/é"], ids=len)
@pytest.mark.parametrize("construct", LIMITER_CLASSES, ids=LIMITER_CLASS_IDS)
def test_a_good_name_is_kept(construct: Construct, name: str) -> None:
    assert construct(name=name).name == name


class FakeBackend:
    """The least a store must offer: ``shared`` and ``bind``/``bind_group``."""

    def __init__(self, shared: bool) -> None:
        self.shared = shared
        self.bound: list[str | None] = []
        self._memory = MemoryBackend()

    def bind(self, name: str | None, alg: Algorithm[Any], clock: ManualClock | None) -> MemoryHandle:
        self.bound.append(name)
        return self._memory.bind(name, alg, clock)

    def bind_group(
        self, name: str | None, algs: Sequence[Algorithm[Any]], clock: ManualClock | None
    ) -> MemoryGroupHandle:
        self.bound.append(name)
        return self._memory.bind_group(name, algs, clock)


@pytest.mark.parametrize("construct", LIMITER_CLASSES, ids=LIMITER_CLASS_IDS)
def test_a_shared_backend_requires_a_name(construct: Construct) -> None:
    backend = FakeBackend(shared=True)
    with pytest.raises(ValueError, match="name is required") as caught:
        construct(backend=backend)
    assert "shared" in str(caught.value)
    assert backend.bound == []  # refused before binding anything

    limiter = construct(backend=backend, name="geocode")
    assert backend.bound == ["geocode"]
    assert limiter.name == "geocode"
    assert limiter.try_acquire()


@pytest.mark.parametrize("construct", LIMITER_CLASSES, ids=LIMITER_CLASS_IDS)
def test_a_shared_backend_still_refuses_a_bad_name(construct: Construct) -> None:
    with pytest.raises(ValueError, match="name must be 1 to 200 characters"):
        construct(backend=FakeBackend(shared=True), name="")


@pytest.mark.parametrize("construct", LIMITER_CLASSES, ids=LIMITER_CLASS_IDS)
def test_a_private_backend_needs_no_name(construct: Construct) -> None:
    backend = FakeBackend(shared=False)
    limiter = construct(backend=backend)
    assert backend.bound == [None]
    assert limiter.name is None
    assert limiter.try_acquire()


def test_redis_backend_is_shared_and_requires_a_name() -> None:
    with pytest.raises(ValueError, match="name is required with a shared backend"):
        TokenBucket(10, 1, backend=RedisBackend(fakeredis.FakeRedis()))


@pytest.mark.parametrize("clock", ["now", 1_000.0, True, object(), [ManualClock()], SystemClock.now], ids=stable_id)
@pytest.mark.parametrize("construct", LIMITER_CLASSES, ids=LIMITER_CLASS_IDS)
def test_a_clock_of_the_wrong_type_is_a_type_error(construct: Construct, clock: Any) -> None:
    with pytest.raises(TypeError, match="clock") as caught:
        construct(clock=clock)
    assert_names(caught.value, "clock", clock)


class DuckClock:
    """A clock that satisfies the protocol without deriving from anything."""

    def now(self) -> float:
        return 5.0

    def sleep(self, seconds: float) -> None:
        raise AssertionError("not expected to sleep")

    async def sleep_async(self, seconds: float) -> None:
        raise AssertionError("not expected to sleep")


@pytest.mark.parametrize("construct", LIMITER_CLASSES, ids=LIMITER_CLASS_IDS)
def test_any_object_with_the_clock_methods_is_a_clock(construct: Construct) -> None:
    clock = DuckClock()
    limiter = construct(clock=clock)
    assert limiter.clock is clock
    assert limiter.acquire() == 0.0


def test_passing_the_clock_class_instead_of_an_instance_is_refused_at_construction() -> None:
    with pytest.raises(TypeError, match="clock"):
        TokenBucket(10, 1, clock=ManualClock)  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", [object(), REDIS_URL, 6379, True], ids=stable_id)
@pytest.mark.parametrize("construct", LIMITER_CLASSES, ids=LIMITER_CLASS_IDS)
def test_a_backend_of_the_wrong_type_is_a_type_error(construct: Construct, backend: Any) -> None:
    with pytest.raises(TypeError, match="backend") as caught:
        construct(backend=backend)
    assert_names(caught.value, "backend", backend)


def test_a_url_given_as_the_backend_says_how_to_open_it() -> None:
    with pytest.raises(TypeError, match=r"RedisBackend\.from_url\(url\)") as caught:
        TokenBucket(10, 1, backend=REDIS_URL, name="x")  # type: ignore[arg-type]
    assert_names(caught.value, "backend", REDIS_URL)


def test_passing_the_backend_class_instead_of_an_instance_names_the_argument() -> None:
    with pytest.raises(TypeError, match="backend"):
        TokenBucket(10, 1, backend=MemoryBackend)  # type: ignore[arg-type]


# -- Composite --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limits", "error", "message"),
    [
        ([], ValueError, "limits must name at least one limiter"),
        ((), ValueError, "limits must name at least one limiter"),
        (None, TypeError, "limits must be a sequence"),
        (TokenBucket(1, 1), TypeError, "limits must be a sequence"),
        ({TokenBucket(1, 1)}, TypeError, "limits must be a sequence"),
        (iter([TokenBucket(1, 1)]), TypeError, "limits must be a sequence"),
        ("TokenBucket", TypeError, "limits must be a sequence"),
        (b"\x01", TypeError, "limits must be a sequence"),
        (3, TypeError, "limits must be a sequence"),
    ],
    ids=["empty-list", "empty-tuple", "None", "one-limiter", "set", "iterator", "str", "bytes", "int"],
)
def test_composite_limits_must_be_a_non_empty_sequence(limits: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message) as caught:
        Composite(limits)
    if limits:  # an empty sequence is named as such ("got an empty sequence")
        assert_names(caught.value, "limits", limits)


@pytest.mark.parametrize(
    "member",
    [None, "TokenBucket", 1, TokenBucket, Composite([TokenBucket(1, 1)]), MemoryBackend()],
    ids=["None", "str", "int", "the-class", "a-composite", "a-backend"],
)
@pytest.mark.parametrize("index", [0, 1])
def test_composite_members_must_be_limiters(member: Any, index: int) -> None:
    limits: list[Any] = [TokenBucket(1, 1), TokenBucket(2, 2)]
    limits[index] = member
    with pytest.raises(TypeError, match=rf"limits\[{index}\]") as caught:
        Composite(limits)
    assert_names(caught.value, f"limits[{index}]", member)


# -- tokens and timeout: every method that takes them ------------------------------


def make_composite() -> Composite:
    return Composite([TokenBucket(10, 1), SlidingWindow(20, 1)], clock=ManualClock(1_000.0))


# Every limiter here can grant 10 tokens at once, and no more.
LIMITERS: list[Callable[[], Limiter[Any]]] = [
    lambda: TokenBucket(10, 1, clock=ManualClock(1_000.0)),
    lambda: LeakyBucket(10, 1, clock=ManualClock(1_000.0)),
    lambda: SlidingWindow(10, 1, clock=ManualClock(1_000.0)),
    lambda: SlidingWindow(10, 1, approximate=True, clock=ManualClock(1_000.0)),
    make_composite,
]
MOST_NAME = ["capacity", "capacity", "limit", "limit", "capacity"]


def _run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


Call = Callable[[Limiter[Any], Any], object]

TOKEN_CALLS: list[tuple[str, Call]] = [
    ("acquire", lambda lim, n: lim.acquire(n)),
    ("acquire(timeout=0)", lambda lim, n: lim.acquire(n, timeout=0)),
    ("acquire(tokens=)", lambda lim, n: lim.acquire(tokens=n)),
    ("try_acquire", lambda lim, n: lim.try_acquire(n)),
    ("acquire_async", lambda lim, n: _run(lim.acquire_async(n))),
    ("try_acquire_async", lambda lim, n: _run(lim.try_acquire_async(n))),
    ("refund", lambda lim, n: lim.refund(n)),
    ("refund_async", lambda lim, n: _run(lim.refund_async(n))),
    ("charge", lambda lim, n: lim.charge(n)),
    ("charge_async", lambda lim, n: _run(lim.charge_async(n))),
    ("decorate", lambda lim, n: lim.decorate(tokens=n)),
]

BAD_TOKENS: list[tuple[Any, type[Exception], str]] = [
    (0, ValueError, "tokens must be > 0"),
    (0.0, ValueError, "tokens must be > 0"),
    (-1, ValueError, "tokens must be > 0"),
    (-0.001, ValueError, "tokens must be > 0"),
    (-math.inf, ValueError, "tokens must be > 0"),
    (math.nan, ValueError, "tokens must be a number"),
    (11, ValueError, "could never be granted"),
    (10.000001, ValueError, "could never be granted"),
    (10**6, ValueError, "could never be granted"),
    (math.inf, ValueError, "could never be granted"),
    ("1", TypeError, "tokens must be a number"),
    (None, TypeError, "tokens must be a number"),
    (True, TypeError, "tokens must be a number"),
    (False, TypeError, "tokens must be a number"),
    (b"1", TypeError, "tokens must be a number"),
    (1j, TypeError, "tokens must be a number"),
]


def assert_untouched(limiter: Limiter[Any]) -> None:
    """Nothing was taken: the whole budget is still there, and no time passed."""
    assert limiter.try_acquire(10)
    assert not limiter.try_acquire(1)
    clock = limiter.clock
    assert isinstance(clock, ManualClock)
    assert clock.sleeps == []


@pytest.mark.parametrize(("tokens", "error", "message"), BAD_TOKENS, ids=[repr(t[0]) for t in BAD_TOKENS])
@pytest.mark.parametrize(("method", "call"), TOKEN_CALLS, ids=[c[0] for c in TOKEN_CALLS])
@pytest.mark.parametrize(("make", "most_name"), list(zip(LIMITERS, MOST_NAME, strict=True)), ids=LIMITER_CLASS_IDS)
def test_bad_tokens_are_refused_and_consume_nothing(
    make: Callable[[], Limiter[Any]],
    most_name: str,
    method: str,
    call: Call,
    tokens: Any,
    error: type[Exception],
    message: str,
) -> None:
    limiter = make()
    if method.startswith("charge") and "never be granted" in message:
        # A cost already spent is what it is, more than the largest request included;
        # only an infinite one is refused.
        if tokens == math.inf:
            with pytest.raises(ValueError, match="tokens must be finite"):
                call(limiter, tokens)
            assert_untouched(limiter)
        else:
            call(limiter, tokens)
            assert not limiter.try_acquire(1)  # into debt
        return
    with pytest.raises(error, match=message) as caught:
        call(limiter, tokens)
    assert_names(caught.value, "tokens", tokens)
    if "never be granted" in message:
        # Which bound, and how big it is.
        assert f"{most_name} (10)" in str(caught.value)
    assert_untouched(limiter)


@pytest.mark.parametrize("tokens", [[1], (1, 1), [1.0], {1}], ids=stable_id)
@pytest.mark.parametrize("make", LIMITERS[:4], ids=LIMITER_CLASS_IDS[:4])
def test_a_single_limiter_takes_one_number_not_a_sequence(make: Callable[[], Limiter[Any]], tokens: Any) -> None:
    limiter = make()
    with pytest.raises(TypeError, match="tokens") as caught:
        limiter.acquire(tokens)
    assert_names(caught.value, "tokens", tokens)
    assert_untouched(limiter)


@pytest.mark.parametrize("tokens", [10, 10.0, 0.5, 1e-9, 3], ids=stable_id)
@pytest.mark.parametrize("make", LIMITERS, ids=LIMITER_CLASS_IDS)
def test_tokens_up_to_the_largest_grant_are_accepted(make: Callable[[], Limiter[Any]], tokens: float) -> None:
    assert make().try_acquire(tokens)


# A composite over TokenBucket(10, ...) and SlidingWindow(20, ...).
BAD_COMPOSITE_TOKENS: list[tuple[Any, type[Exception], str]] = [
    ([], ValueError, r"tokens must give one number per limit \(2\)"),
    ([1], ValueError, r"tokens must give one number per limit \(2\)"),
    ((1,), ValueError, r"tokens must give one number per limit \(2\)"),
    ([1, 1, 1], ValueError, r"tokens must give one number per limit \(2\)"),
    ([0, 0], ValueError, "tokens must give at least one limit more than 0"),
    ((0.0, 0), ValueError, "tokens must give at least one limit more than 0"),
    ([-1, 1], ValueError, "tokens must be >= 0"),
    ([1, -0.001], ValueError, "tokens must be >= 0"),
    ([1, math.nan], ValueError, "tokens must be a number"),
    ([11, 1], ValueError, r"tokens must be <= capacity \(10\).*could never be granted"),
    ([1, 21], ValueError, r"tokens must be <= limit \(20\).*could never be granted"),
    ([1, "1"], TypeError, "tokens must be a number"),
    ([True, 1], TypeError, "tokens must be a number"),
    ([None, 1], TypeError, "tokens must be a number"),
    ([[1], 1], TypeError, "tokens must be a number"),
]


@pytest.mark.parametrize(
    ("tokens", "error", "message"), BAD_COMPOSITE_TOKENS, ids=[repr(t[0]) for t in BAD_COMPOSITE_TOKENS]
)
@pytest.mark.parametrize(("method", "call"), TOKEN_CALLS, ids=[c[0] for c in TOKEN_CALLS])
def test_composite_tokens_per_member_are_checked(
    method: str, call: Call, tokens: Any, error: type[Exception], message: str
) -> None:
    limiter = make_composite()
    if method.startswith("charge") and "never be granted" in message:
        call(limiter, tokens)  # a cost already spent may exceed the largest request
        assert not limiter.try_acquire([1, 1])
        return
    with pytest.raises(error, match=message) as caught:
        call(limiter, tokens)
    assert "tokens" in str(caught.value)
    if "per limit" in message:
        assert_names(caught.value, "tokens", tokens)
    assert_untouched(limiter)


@pytest.mark.parametrize("tokens", [[10, 20], (1, 1), [0.5, 20.0], [10, 1], [0, 20], (10, 0.0)], ids=stable_id)
def test_composite_accepts_one_number_per_member(tokens: Sequence[float]) -> None:
    # A member may be given 0 (the request does not weigh on it) while another is not.
    assert make_composite().try_acquire(tokens)


SETTLE_CALLS: list[tuple[str, Callable[[Limiter[Any], Any, Any], object]]] = [
    ("settle", lambda lim, estimate, actual: lim.settle(estimate, actual)),
    ("settle_async", lambda lim, estimate, actual: _run(lim.settle_async(estimate, actual))),
]

BAD_ESTIMATES: list[tuple[Any, type[Exception], str]] = [
    (0, ValueError, "estimate must be > 0"),
    (-1, ValueError, "estimate must be > 0"),
    (math.nan, ValueError, "estimate must be a number"),
    (11, ValueError, r"estimate must be <= .* \(10\).*could never be granted"),
    ("1", TypeError, "estimate must be a number"),
    (None, TypeError, "estimate must be a number"),
]
BAD_ACTUALS: list[tuple[Any, type[Exception], str]] = [
    (-1, ValueError, "actual must be >= 0"),
    (-0.001, ValueError, "actual must be >= 0"),
    (math.nan, ValueError, "actual must be a number"),
    (math.inf, ValueError, "actual must be finite"),
    (True, TypeError, "actual must be a number"),
    (None, TypeError, "actual must be a number"),
]


@pytest.mark.parametrize(("value", "error", "message"), BAD_ESTIMATES, ids=[repr(t[0]) for t in BAD_ESTIMATES])
@pytest.mark.parametrize(("method", "call"), SETTLE_CALLS, ids=[c[0] for c in SETTLE_CALLS])
@pytest.mark.parametrize("make", LIMITERS, ids=LIMITER_CLASS_IDS)
def test_settle_refuses_a_bad_estimate_by_name(
    make: Callable[[], Limiter[Any]], method: str, call: Any, value: Any, error: type[Exception], message: str
) -> None:
    limiter = make()
    with pytest.raises(error, match=message) as caught:
        call(limiter, value, 1)
    assert_names(caught.value, "estimate", value)
    assert_untouched(limiter)


@pytest.mark.parametrize(("value", "error", "message"), BAD_ACTUALS, ids=[repr(t[0]) for t in BAD_ACTUALS])
@pytest.mark.parametrize(("method", "call"), SETTLE_CALLS, ids=[c[0] for c in SETTLE_CALLS])
@pytest.mark.parametrize("make", LIMITERS, ids=LIMITER_CLASS_IDS)
def test_settle_refuses_a_bad_actual_by_name(
    make: Callable[[], Limiter[Any]], method: str, call: Any, value: Any, error: type[Exception], message: str
) -> None:
    limiter = make()
    with pytest.raises(error, match=message) as caught:
        call(limiter, 1, value)
    assert_names(caught.value, "actual", value)
    assert_untouched(limiter)


@pytest.mark.parametrize(
    ("estimate", "actual", "message"),
    [
        ([0, 0], [1, 1], "estimate must give at least one limit more than 0"),
        ([1, -1], [1, 1], "estimate must be >= 0"),
        ([1, 1], [1, -1], "actual must be >= 0"),
        ([1, 1], [1], r"actual must give one number per limit \(2\)"),
        ([1], [1, 1], r"estimate must give one number per limit \(2\)"),
        ([1, 1], [1, math.inf], "actual must be finite"),
    ],
    ids=repr,
)
def test_composite_settle_checks_each_member_by_name(estimate: Any, actual: Any, message: str) -> None:
    limiter = make_composite()
    with pytest.raises(ValueError, match=message):
        limiter.settle(estimate, actual)
    assert_untouched(limiter)


def test_composite_settle_takes_zero_members_and_zero_actuals() -> None:
    limiter = make_composite()
    limiter.settle([0, 5], [0, 0])  # nothing used: everything given back
    limiter.settle([1, 0], [0, 0])
    assert_untouched(limiter)


TIMEOUT_CALLS: list[tuple[str, Call]] = [
    ("acquire", lambda lim, t: lim.acquire(timeout=t)),
    ("acquire(1, t)", lambda lim, t: lim.acquire(1, t)),
    ("acquire_async", lambda lim, t: _run(lim.acquire_async(timeout=t))),
    ("decorate", lambda lim, t: lim.decorate(timeout=t)),
]

BAD_TIMEOUTS: list[tuple[Any, type[Exception]]] = [
    (-1, ValueError),
    (-0.001, ValueError),
    (-math.inf, ValueError),
    (math.nan, ValueError),
    (timedelta(seconds=-1), ValueError),
    (timedelta(microseconds=-1), ValueError),
    ("5", TypeError),
    (True, TypeError),
    (False, TypeError),
    ([1], TypeError),
    (b"1", TypeError),
]


@pytest.mark.parametrize(("timeout", "error"), BAD_TIMEOUTS, ids=[repr(t[0]) for t in BAD_TIMEOUTS])
@pytest.mark.parametrize(("method", "call"), TIMEOUT_CALLS, ids=[c[0] for c in TIMEOUT_CALLS])
@pytest.mark.parametrize("make", LIMITERS, ids=LIMITER_CLASS_IDS)
def test_a_bad_timeout_is_refused_and_consumes_nothing(
    make: Callable[[], Limiter[Any]], method: str, call: Call, timeout: Any, error: type[Exception]
) -> None:
    limiter = make()
    with pytest.raises(error, match="timeout") as caught:
        call(limiter, timeout)
    assert_names(caught.value, "timeout", timeout)
    assert_untouched(limiter)


@pytest.mark.parametrize("timeout", [None, 0, 0.0, 1, 2.5, math.inf, timedelta(0), timedelta(seconds=3)], ids=stable_id)
@pytest.mark.parametrize("make", LIMITERS, ids=LIMITER_CLASS_IDS)
def test_a_good_timeout_is_accepted(make: Callable[[], Limiter[Any]], timeout: Any) -> None:
    assert make().acquire(timeout=timeout) == 0.0
    assert asyncio.run(make().acquire_async(timeout=timeout)) == 0.0
    make().decorate(timeout=timeout)


# Limiters that, after `take` tokens, need exactly 1 s before they grant one more.
ONE_SECOND_SHORT: list[tuple[Callable[[], Limiter[Any]], float]] = [
    (LIMITERS[0], 10),  # TokenBucket(10, 1), emptied
    (LIMITERS[1], 1),  # LeakyBucket(10, 1): the next leaves 1 s after this one
    (LIMITERS[2], 10),  # SlidingWindow(10, 1), full
    (LIMITERS[4], 10),  # Composite of the two
]


@pytest.mark.parametrize(
    ("make", "take"), ONE_SECOND_SHORT, ids=["TokenBucket", "LeakyBucket", "SlidingWindow", "Composite"]
)
def test_a_timedelta_timeout_counts_in_seconds(make: Callable[[], Limiter[Any]], take: float) -> None:
    limiter = make()
    assert limiter.try_acquire(take)
    with pytest.raises(AcquireTimeout) as caught:
        limiter.acquire(timeout=timedelta(milliseconds=999))
    assert caught.value.retry_after == pytest.approx(1.0)
    assert limiter.acquire(timeout=timedelta(seconds=1)) == pytest.approx(1.0)


@pytest.mark.parametrize("status", ["429", 429.0, True, [429]], ids=stable_id)
def test_feedback_status_must_be_an_int(status: Any) -> None:
    limiter = TokenBucket(10, 1, clock=ManualClock(1_000.0))
    with pytest.raises(TypeError, match="status") as caught:
        limiter.feedback({"Retry-After": "5"}, status=status)
    assert_names(caught.value, "status", status)
    assert_untouched(limiter)


# -- RedisBackend and ManualClock -----------------------------------------------------


@pytest.mark.parametrize(
    ("build", "error", "argument", "value"),
    [
        (lambda: RedisBackend(object()), TypeError, "client", None),
        (lambda: RedisBackend(None), TypeError, "client", None),
        (
            lambda: RedisBackend(fakeredis.FakeRedis(), on_unavailable=bad("ignore")),
            ValueError,
            "on_unavailable",
            "ignore",
        ),
        (lambda: RedisBackend(fakeredis.FakeRedis(), local_share=0), ValueError, "local_share", 0),
        (lambda: RedisBackend(fakeredis.FakeRedis(), local_share=1.5), ValueError, "local_share", 1.5),
        (lambda: RedisBackend(fakeredis.FakeRedis(), local_share=math.nan), ValueError, "local_share", math.nan),
        (lambda: RedisBackend(fakeredis.FakeRedis(), local_share=bad("1")), TypeError, "local_share", "1"),
        (lambda: RedisBackend(fakeredis.FakeRedis(), time_source=bad("local")), ValueError, "time_source", "local"),
        (lambda: RedisBackend.from_url(""), TypeError, "url", ""),
        (lambda: RedisBackend.from_url(bad(None)), TypeError, "url", None),
    ],
    ids=[
        "client-object",
        "client-None",
        "on_unavailable",
        "local_share-0",
        "local_share-1.5",
        "local_share-nan",
        "local_share-str",
        "time_source",
        "url-empty",
        "url-None",
    ],
)
def test_redis_backend_arguments(
    build: Callable[[], object], error: type[Exception], argument: str, value: object
) -> None:
    with pytest.raises(error, match=argument) as caught:
        build()
    if value is not None:
        assert_names(caught.value, argument, value)


@pytest.mark.parametrize("seconds", [-1, -0.001, math.nan], ids=stable_id)
def test_manual_clock_only_moves_forward(seconds: float) -> None:
    clock = ManualClock(1_000.0)
    with pytest.raises(ValueError, match="seconds") as caught:
        clock.advance(seconds)
    assert_names(caught.value, "seconds", seconds)
    assert clock.now() == 1_000.0


@pytest.mark.parametrize(
    ("start", "error"),
    [
        ("5", TypeError),
        ("soon", TypeError),
        (None, TypeError),
        (True, TypeError),
        ([1.0], TypeError),
        (math.nan, ValueError),
        (math.inf, ValueError),
        (-math.inf, ValueError),
    ],
    ids=lambda value: repr(value) if not isinstance(value, type) else value.__name__,
)
def test_manual_clock_start_is_validated(start: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="start") as caught:
        ManualClock(start)
    assert_names(caught.value, "start", start)


@pytest.mark.parametrize("start", [0, 0.0, -5.0, 1_000, 1.7e9], ids=stable_id)
def test_manual_clock_starts_at_any_finite_time(start: float) -> None:
    assert ManualClock(start).now() == start


# -- the exception tree --------------------------------------------------------------


def test_acquire_timeout_is_a_rate_limit_error_and_a_timeout_error() -> None:
    assert issubclass(AcquireTimeout, RateLimitError)
    assert issubclass(AcquireTimeout, TimeoutError)
    assert issubclass(AcquireTimeout, OSError)  # TimeoutError's own base, so `except OSError` sees it too
    error = AcquireTimeout(2.5)
    assert error.retry_after == 2.5
    assert "2.5" in str(error)
    assert str(AcquireTimeout(1.0, "custom message")) == "custom message"


def test_backend_unavailable_is_a_rate_limit_error() -> None:
    assert issubclass(BackendUnavailable, RateLimitError)
    assert not issubclass(BackendUnavailable, TimeoutError)
    assert issubclass(RateLimitError, Exception)
    # Argument errors are the built-ins, not ours.
    assert not issubclass(RateLimitError, (ValueError, TypeError))


@pytest.mark.parametrize("caught_as", [AcquireTimeout, RateLimitError, TimeoutError])
def test_a_real_timeout_is_caught_by_each_of_its_bases(caught_as: type[Exception]) -> None:
    clock = ManualClock(1_000.0)
    limiter = TokenBucket(2, 4, clock=clock)  # empty: one token needs 0.25 s
    assert limiter.try_acquire(2)
    with pytest.raises(caught_as) as caught:
        limiter.acquire(timeout=0.1)
    assert isinstance(caught.value, AcquireTimeout)
    retry_after: float = caught.value.retry_after
    assert retry_after == pytest.approx(0.25)
    assert clock.sleeps == []  # raised at once, without sleeping


# -- what every store can keep ----------------------------------------------------------
# Before, these validated and then failed: in Redis the key expiry reached 1e14 ms,
# which Lua writes as "1e+17" and PX refuses; in memory time.sleep overflowed.

BEYOND_EVERY_STORE: list[tuple[str, Build]] = [
    ("refill_per_sec", lambda v: TokenBucket(1, v)),
    ("refill_per_sec", lambda v: TokenBucket(2e9 * v, v)),  # 2e9 s to refill
    ("leak_per_sec", lambda v: LeakyBucket(1, v)),
    ("window_seconds", lambda v: SlidingWindow(1, 1 / v)),
    ("window_seconds", lambda v: SlidingWindow(1, timedelta(seconds=min(1 / v, 1e13)))),
]


@pytest.mark.parametrize(("argument", "build"), BEYOND_EVERY_STORE)
@pytest.mark.parametrize("rate", [1e-300, 1e-15, 1e-10, 9.9e-10])
def test_a_state_that_would_matter_for_decades_is_refused(argument: str, build: Build, rate: float) -> None:
    with pytest.raises(ValueError, match=rf"^{argument}=.* the most any store keeps state for is 1e\+09 s"):
        build(rate)


@pytest.mark.parametrize("redis_store", ["fakeredis", "redis"])
def test_the_longest_accepted_limiter_works_in_redis(redis_store: str, request: pytest.FixtureRequest) -> None:
    client = fakeredis.FakeRedis() if redis_store == "fakeredis" else request.getfixturevalue("redis_client")
    clock = HeldClock(ManualClock(1_000.0))  # sleeps do not move time: the queue piles up
    limiter = TokenBucket(1, 1e-9, backend=RedisBackend(client), name=unique_name(), clock=clock)
    waits = [limiter.acquire() for _ in range(30)]  # the last is 29e9 s (900 years) ahead
    assert waits[-1] == pytest.approx(29e9)
    ttl = client.pttl(key_for(limiter.name or "", "token_bucket", injected=True))
    assert 1e12 < ttl <= 1e13  # capped, and written as a whole number Redis accepts


def test_a_system_clock_sleeps_a_long_wait_in_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr("ratelimit._clock.time.sleep", slept.append)
    SystemClock().sleep(2.5e6)
    assert slept == [1e6, 1e6, 5e5]


@pytest.mark.parametrize("name", ["\ud800", "tenant-\udfff", "a\ud83dz"])
@pytest.mark.parametrize("shared", [False, True])
def test_a_name_utf_8_cannot_encode_is_refused_at_construction(name: str, shared: bool) -> None:
    backend = RedisBackend(fakeredis.FakeRedis()) if shared else MemoryBackend()
    with pytest.raises(ValueError, match="name must be text UTF-8 can encode"):
        TokenBucket(1, 1, backend=backend, name=name)
