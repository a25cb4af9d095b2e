"""``limiter.set_limit`` and ``reset_limit``: one way to change any limit at run time,
from the limiter itself or by name through its backend, on every store.

Built with ``make`` (every store of the backend matrix) on the test's ManualClock, so
"from the next decision on" is checked decision by decision. A change by name reaches
every key of the name (``for_key``); a composite takes one value per member (in
process and on Redis; SQLite refuses it, saying so).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratelimit import (
    AcquireTimeout,
    Composite,
    ConcurrencyLimit,
    LeakyBucket,
    ManualClock,
    MemoryBackend,
    Quota,
    SlidingWindow,
    TokenBucket,
)
from ratelimit._stores.records import Override, UnchangeableLimit

Make = Callable[..., Any]


def grants(limiter: Any, n: int = 1000) -> int:
    """How many unit try_acquires go now, up to ``n``."""
    count = 0
    while count < n and limiter.try_acquire():
        count += 1
    return count


# -- a single limiter, on every store ---------------------------------------------------


def test_a_limiters_change_holds_from_its_next_decision(make: Make, clock: ManualClock) -> None:
    """Lowered, the tokens owed keep their count and the new burst caps what follows;
    reset, the code's limit is back."""
    bucket = make(TokenBucket, 10, 1)
    assert grants(bucket) == 10
    clock.advance(5.0)  # 5 refilled, 5 still owed
    bucket.set_limit(rate=10, burst=3)
    # 5 owed at 10/s are repaid in 0.5 s; then 3 at most, however long it waits.
    assert grants(bucket) == 0
    clock.advance(10.0)
    assert grants(bucket) == 3
    clock.advance(0.1)
    assert grants(bucket) == 1
    assert bucket.reset_limit()
    assert not bucket.reset_limit()
    clock.advance(100.0)
    assert grants(bucket) == 10


@pytest.mark.parametrize("kind", [LeakyBucket, SlidingWindow], ids=["leaky", "window"])
def test_the_other_kinds_change_too(make: Make, clock: ManualClock, kind: Any) -> None:
    limiter = make(kind, 4, 1)
    limiter.set_limit(rate=2)  # a window's limit: rate x its length; a leak of 2/s
    if kind is SlidingWindow:
        assert grants(limiter) == 2
    else:
        clock.advance(10.0)
        assert limiter.try_acquire()
        assert limiter.reserve().wait == pytest.approx(0.5)  # spaced 1/2 s apart


def test_a_change_for_a_while_ends_by_itself(make: Make, clock: ManualClock) -> None:
    bucket = make(TokenBucket, 10, 10)
    bucket.set_limit(burst=2, ttl=timedelta(seconds=5))
    assert grants(bucket) == 2
    clock.advance(4.0)
    assert grants(bucket) == 2
    clock.advance(2.0)  # past its end: the code's burst
    assert grants(bucket) == 10


def test_a_view_changes_its_keys_budget_alone(make: Make) -> None:
    limiter = make(TokenBucket, 10, 1)
    throttled, other = limiter.for_key("throttled"), limiter.for_key("other")
    throttled.set_limit(burst=2)
    assert (grants(throttled), grants(other), grants(limiter)) == (2, 10, 10)
    assert throttled.reset_limit()


def test_a_change_by_name_reaches_every_key_of_it(make: Make, clock: ManualClock, store: str) -> None:
    """Keys in use at the change, and keys first used after it (on Redis, from each
    process's next reading of the name: at once in the process that made it)."""
    limiter = make(TokenBucket, 10, 1)
    used = [limiter.for_key(f"tenant-{i}") for i in range(3)]
    assert [grants(view, 4) for view in used] == [4, 4, 4]
    own = limiter.for_key("own")
    own.set_limit(burst=5)  # a key's own change prevails over its name's
    limiter.set_limit(rate=1, burst=2)
    # 4 owed of 10 keep their count: 2 more than the new burst, repaid at 1/s.
    assert [grants(view) for view in used] == [0, 0, 0]
    clock.advance(4.0)
    assert [grants(view) for view in used] == [2, 2, 2]
    assert grants(own) == 5
    assert grants(limiter) == 2
    assert grants(limiter.for_key("later")) == 2
    limiter.reset_limit()
    clock.advance(100.0)
    assert [grants(view) for view in used] == [10, 10, 10]
    assert grants(limiter.for_key("after-the-reset")) == 10
    assert grants(own) == 5


def test_a_change_by_name_through_the_backend_is_the_same(make: Make, clock: ManualClock) -> None:
    limiter = make(TokenBucket, 10, 1)
    view = limiter.for_key("k")
    assert grants(view, 1) == 1
    reached = limiter.backend.set_limit(limiter.name, burst=3, clock=clock)
    assert reached == 1  # the one key in use
    assert limiter.backend.limit_override(limiter.name, clock=clock).burst == 3
    assert (grants(limiter), grants(view)) == (3, 2)


def test_bad_values_name_the_argument_and_change_nothing(make: Make, clock: ManualClock) -> None:
    bucket = make(TokenBucket, 5, 1)
    for kwargs, message in (
        ({"rate": -1}, "rate must be"),
        ({"burst": math.nan}, "burst must be"),
        ({"rate": 1, "ttl": 0}, "ttl must be > 0"),
        ({}, "give rate, burst or both"),
        ({"rate": "fast"}, "rate"),
    ):
        with pytest.raises((ValueError, TypeError), match=message):
            bucket.set_limit(**kwargs)
    window = make(SlidingWindow, 5, 1)
    with pytest.raises(ValueError, match=r"burst=2.*no burst"):
        window.set_limit(burst=2)
    quota = make(Quota, 5, "day")
    with pytest.raises(ValueError, match=r"burst=2.*is a quota, which has no burst"):
        quota.set_limit(burst=2)
    assert quota.try_acquire()
    if quota.name is not None:  # by name too, once the store knows the name's kind
        with pytest.raises(ValueError, match=r"burst=2.*quota, which has no burst"):
            quota.backend.set_limit(quota.name, burst=2, clock=clock)
    assert grants(bucket) == 5
    assert grants(window) == 5
    assert grants(quota) == 4


def test_a_window_limit_at_a_new_rate_never_passes_it(make: Make, clock: ManualClock) -> None:
    window = make(SlidingWindow, 10, 10)
    assert grants(window, 6) == 6
    window.set_limit(rate=0.5)  # 5 in any 10 s: the 6 in the window are over it already
    assert grants(window) == 0
    clock.advance(10.0)
    assert grants(window) == 5


# -- what keeps the code's values -------------------------------------------------------


def test_what_keeps_the_codes_values_is_refused_in_one_line(make: Make) -> None:
    prioritised = make(TokenBucket, 10, 1, low_share=0.3)
    with pytest.raises(UnchangeableLimit, match="low_share"):
        prioritised.set_limit(rate=1)
    with pytest.raises(UnchangeableLimit, match="low priority"):
        prioritised.low.set_limit(rate=1)
    with pytest.raises(UnchangeableLimit, match="ConcurrencyLimit"):
        make(ConcurrencyLimit, 3).set_limit(rate=1)


def test_a_composites_member_changes_on_every_store_but_sqlite(make: Make, store: str) -> None:
    composite = make(Composite, [TokenBucket(10, 10), TokenBucket(100, 1)])
    if store == "sqlite":
        with pytest.raises(UnchangeableLimit, match="composite's members"):
            composite.set_limit(burst=[None, 5])
        assert grants(composite) == 10
        return
    composite.set_limit(burst=[None, 5])
    assert grants(composite) == 5


def test_a_burst_for_a_window_or_quota_member_is_refused_on_every_store(make: Make) -> None:
    """A store would have nothing to do with it: refused by the composite, naming it."""
    composite = make(Composite, [TokenBucket(10, 10), SlidingWindow(100, 60), Quota(1000, "day")])
    for burst, what in (([None, 5, None], "limit 1: a window"), ([None, None, 5], "limit 2: a quota")):
        with pytest.raises(ValueError, match=rf"burst=5.* for {what} has no burst"):
            composite.set_limit(burst=burst)
    assert grants(composite) == 10


def test_a_members_change_holds_in_another_handle_and_reset_takes_it_back(
    make: Make, store: str, clock: ManualClock
) -> None:
    if store == "sqlite":
        pytest.skip("SQLite keeps a composite's members at the code's values")
    name = f"members-{store}-{id(clock)}"
    one = make(Composite, [TokenBucket(10, 10), TokenBucket(100, 1)], name=name)
    other = make(Composite, [TokenBucket(10, 10), TokenBucket(100, 1)], name=name)
    assert grants(one, 4) == 4  # 4 owed to each member, before the change
    other.set_limit(burst=[None, 6])
    # The tokens owed keep their count: 6 - 4 left, in either handle.
    assert grants(one) == 2
    assert grants(other) == 0
    clock.advance(100.0)
    assert grants(other) == 6  # bounds hold after lowering: never past the new burst
    assert other.reset_limit()
    assert not one.reset_limit()
    clock.advance(100.0)
    assert grants(one) == 10


def test_a_members_change_for_a_while_ends(make: Make, store: str, clock: ManualClock) -> None:
    if store == "sqlite":
        pytest.skip("SQLite keeps a composite's members at the code's values")
    composite = make(Composite, [TokenBucket(10, 10), SlidingWindow(100, 60)])
    composite.set_limit(rate=[None, 0.5], ttl=[None, 30])  # the window: 30 in 60 s
    assert grants(composite) == 10
    clock.advance(1.0)
    assert grants(composite) == 10
    clock.advance(1.0)
    assert grants(composite) == 10
    clock.advance(1.0)
    assert grants(composite) == 0  # 30 in the window, its changed limit
    clock.advance(30.0)
    assert grants(composite) == 10  # the change ended: the code's 100
    assert composite.reset_limit() is False


def test_a_request_a_lowered_member_could_never_hold_is_refused_for_ever(make: Make, store: str) -> None:
    if store == "sqlite":
        pytest.skip("SQLite keeps a composite's members at the code's values")
    composite = make(Composite, [TokenBucket(10, 10), TokenBucket(100, 1)])
    composite.set_limit(burst=[None, 2])
    assert composite.peek(3) == math.inf
    with pytest.raises(AcquireTimeout) as caught:
        composite.acquire(3)
    assert caught.value.retry_after == math.inf
    assert composite.try_acquire(2)
    composite.refund(2)  # given back to the changed member too
    assert composite.try_acquire(2)


def test_a_members_change_by_name_from_outside(make: Make, store: str, clock: ManualClock) -> None:
    if store == "sqlite":
        pytest.skip("SQLite keeps a composite's members at the code's values")
    composite = make(Composite, [TokenBucket(10, 10), TokenBucket(100, 1)])
    backend, name = composite.backend, composite.name
    backend.set_limit(name, burst=3, ttl=20, member=1, clock=clock)
    clock.advance(5.0)
    assert backend.limit_override(name, member=1, clock=clock) == Override(None, 3.0, 15.0)
    assert backend.limit_override(name, member=0, clock=clock) is None
    assert backend.limit_override(name, clock=clock) is None  # the name's own, not its members'
    assert grants(composite) == 3
    with pytest.raises(ValueError, match="member must be"):
        backend.set_limit(name, burst=3, member=-1, clock=clock)
    assert backend.reset_limit(name, member=1, clock=clock)
    assert backend.limit_override(name, member=1, clock=clock) is None
    clock.advance(100.0)
    assert grants(composite) == 10


# -- in process -------------------------------------------------------------------------


def test_an_unnamed_limiter_and_its_keys_change() -> None:
    clock = ManualClock(1000.0)
    bucket = TokenBucket(10, 1, clock=clock)
    early = bucket.for_key("early")
    bucket.set_limit(burst=2)
    assert (grants(bucket), grants(early), grants(bucket.for_key("later"))) == (2, 2, 2)
    bucket.for_key("one").set_limit(burst=4)  # its own change prevails over the limiter's
    assert grants(bucket.for_key("one")) == 4
    assert bucket.reset_limit()
    clock.advance(100.0)
    assert (grants(bucket), grants(early)) == (10, 10)


def test_a_composites_member_changes_with_one_value_per_member() -> None:
    clock = ManualClock(1000.0)
    per_second, per_minute = TokenBucket(10, 10), SlidingWindow(100, 60)
    composite = Composite([per_second, per_minute], clock=clock)
    composite.set_limit(rate=[None, 3 / 60])  # the window: 3 a minute
    assert grants(composite) == 3
    clock.advance(60.0)
    composite.set_limit(burst=[2, None])  # the bucket's; the window's change stays
    assert grants(composite) == 2
    with pytest.raises(ValueError, match="rate must give one value per limit"):
        composite.set_limit(rate=[1])
    with pytest.raises(ValueError, match="limit 1: rate must be"):
        composite.set_limit(rate=[None, -1])
    with pytest.raises(ValueError, match="give rate, burst or both"):
        composite.set_limit(rate=[None, None])
    assert composite.reset_limit()
    clock.advance(60.0)
    assert grants(composite) == 10


def test_a_composite_member_change_by_name_reaches_its_keys() -> None:
    clock = ManualClock(1000.0)
    backend = MemoryBackend()
    composite = Composite([TokenBucket(10, 10), TokenBucket(100, 1)], backend=backend, name="c", clock=clock)
    view = composite.for_key("k")
    with pytest.raises(UnchangeableLimit, match="give member="):
        backend.set_limit("c", burst=5, clock=clock)
    backend.set_limit("c", burst=4, member=1, clock=clock)
    assert (grants(composite), grants(view)) == (4, 4)


def test_a_raised_limit_ends_and_a_request_only_it_held_is_refused_after() -> None:
    clock = ManualClock(1000.0)
    bucket = TokenBucket(2, 10, clock=clock)
    bucket.set_limit(burst=6, ttl=1)
    assert bucket.try_acquire(6)
    clock.advance(2.0)
    with pytest.raises(ValueError, match=r"tokens must be <= capacity \(2\)"):
        bucket.try_acquire(6)
    bucket.set_limit(burst=1)
    with pytest.raises(AcquireTimeout) as caught:
        bucket.acquire(2)
    assert caught.value.retry_after == math.inf


def test_no_decision_pays_for_changes_it_is_not_under() -> None:
    """The handle of a limiter no change reaches decides with the code's algorithm
    itself: nothing is looked up on its decisions (see memory/changes.py)."""
    backend = MemoryBackend()
    bucket = TokenBucket(10, 1, backend=backend, name="plain")
    other = TokenBucket(10, 1, backend=backend, name="other")
    other.set_limit(burst=2)
    handle: Any = bucket._handle
    assert handle._step == handle._code.step


@settings(max_examples=60, deadline=None)
@given(
    used=st.integers(0, 10),
    idle=st.floats(0, 20),
    rate=st.floats(0.1, 50),
    burst=st.integers(1, 20),
    after=st.lists(st.floats(0, 3), min_size=1, max_size=20),
)
def test_after_lowering_no_burst_passes_the_new_limit(
    used: int, idle: float, rate: float, burst: int, after: list[float]
) -> None:
    """Whatever was used before the change, in any interval after it the grants are at
    most the new burst plus the new rate times its length."""
    clock = ManualClock(1000.0)
    bucket = TokenBucket(10, 1, clock=clock)
    grants(bucket, used)
    clock.advance(idle)
    bucket.set_limit(rate=rate, burst=burst)
    start = clock.now()
    granted = 0
    for step in after:
        clock.advance(step)
        granted += grants(bucket)
        assert granted <= burst + rate * (clock.now() - start) + 1e-6
