"""What a decision found beside a limiter's state, remembered by the function library
for a tenth of a second (``lua/_cache.lua``) so that the next decisions need not look.

A decision asks after the keys beside its state (a change, holes, the slack record, a
window log's caps) and reads the slack record; the library remembers what it found
for 0.1 s (``TRUSTED``) of the calls' clock, and the calls that may write there forget
it. These tests hold both halves: whatever is written through the library is followed
at once, and whatever is written beside it (redis-cli, scripts standing for another
release or a client refused FCALL) within 0.1 s; where nothing is remembered (another
database, scripts, a clock behind) it is followed at once. A fleet deciding through
the library decides as one deciding through scripts, with one name in two databases,
more names than are remembered, and a function flush mid-run. Whether the decisions
match the in-process ones is the conformance suite's.
"""

from __future__ import annotations

import math
import urllib.parse
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from ratelimit import AcquireTimeout, LeakyBucket, ManualClock, RedisBackend, SlidingWindow, TokenBucket
from ratelimit._stores.keys import config_key, key_for
from ratelimit._stores.records import Override
from ratelimit._stores.redis.config import write_override
from ratelimit._stores.redis.scripts import call_by_script

from conftest import REDIS_URL, command_calls, private_server, unique_name
from marks import clean
from servers import RedisServer

#: How long the library trusts what it found (TRUSTED in lua/_cache.lua).
TRUSTED = 0.1
KINDS = ["exact", "approximate"]


def _window(kind: str, backend: RedisBackend, clock: ManualClock, name: str) -> SlidingWindow:
    # Four a second, with the default guard (a slack of 0.05 s): a window's every
    # decision reads the slack record, which is what the library caches.
    return SlidingWindow(4, 1, approximate=kind == "approximate", backend=backend, name=name, clock=clock)


def _two_granted(client: Any, kind: str) -> tuple[SlidingWindow, ManualClock, str]:
    """A window of a new name that has granted two: its first decision asked what is
    beside its state (it writes what the code says), and the library caches that."""
    name = unique_name("beside")
    clock = ManualClock(1_000.0)
    window = _window(kind, RedisBackend(client, coalesce=False), clock, name)
    assert window.try_acquire()
    assert window.try_acquire()
    return window, clock, name


def _change_by_hand(client: Any, name: str) -> None:
    # As redis-cli would: one a second (a window's limit is then the rate times its
    # length), no state moved and nothing forgotten in the library.
    client.hset(config_key(name), mapping={"rate": "1", "burst": ""})


@pytest.mark.parametrize("kind", KINDS)
def test_a_change_written_beside_the_library_is_followed_within_a_tenth_of_a_second(client: Any, kind: str) -> None:
    window, clock, name = _two_granted(client, kind)
    _change_by_hand(client, name)
    clock.advance(TRUSTED / 2)
    assert window.try_acquire()  # what was found is trusted: the code's limit of 4
    clock.advance(TRUSTED)
    assert not window.try_acquire()  # asked again: 3 counted against a limit of 1


@pytest.mark.parametrize("kind", KINDS)
def test_a_change_set_through_the_library_is_followed_at_once(client: Any, kind: str) -> None:
    window, clock, name = _two_granted(client, kind)
    write_override(client, name, Override(rate=1.0, burst=None, ttl=None), now=clock.now())
    assert not window.try_acquire()


@pytest.mark.parametrize("kind", KINDS)
def test_a_restriction_fed_back_through_the_library_holds_at_once(client: Any, kind: str) -> None:
    window, _, _ = _two_granted(client, kind)
    # The provider says one more may go in the next 30 s: spread over them, it is due at
    # their end, a pace kept beside the state (<holes>:pace) that the next decision
    # reads, whatever was found beside the state a moment ago.
    window.feedback({"X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "30"}, status=200)
    assert [window.try_acquire() for _ in range(3)] == [False, False, False]


@pytest.mark.parametrize("kind", KINDS)
def test_a_reset_through_the_library_is_followed_at_once(client: Any, kind: str) -> None:
    name = unique_name("beside")
    clock = ManualClock(1_000.0)
    window = _window(kind, RedisBackend(client, coalesce=False), clock, name)
    assert sum(window.try_acquire() for _ in range(5)) == 4
    window.reset()
    assert window.try_acquire()


@pytest.mark.parametrize("counted", [True, False])
def test_another_database_keeps_nothing_and_follows_a_change_at_once(counted: bool) -> None:
    url = urllib.parse.urlsplit(REDIS_URL)
    other = redis.Redis.from_url(urllib.parse.urlunsplit(url._replace(path="/1")))
    try:
        name = unique_name("beside")
        clock = ManualClock(1_000.0)
        backend = RedisBackend(other, coalesce=False, counters=counted)
        window = _window("approximate", backend, clock, name)
        assert window.try_acquire()
        assert window.try_acquire()
        _change_by_hand(other, name)
        assert not window.try_acquire()
        # A bucket there takes its fast path, and counts for `top` only if counted.
        bucket = TokenBucket(4, 1, backend=backend, name=f"{name}-bucket", clock=clock)
        assert [bucket.try_acquire() for _ in range(6)] == [True] * 4 + [False] * 2
        assert bool(other.keys(f"ratelimit:{{{name}-bucket}}:*:top:*")) is counted
    finally:
        other.close()


def test_scripts_keep_nothing_and_follow_a_change_at_once() -> None:
    scripts = redis.Redis.from_url(REDIS_URL)
    call_by_script(scripts)  # a server without Functions: the same Lua, as scripts
    try:
        name = unique_name("beside")
        clock = ManualClock(1_000.0)
        window = _window("exact", RedisBackend(scripts, coalesce=False), clock, name)
        assert window.try_acquire()
        assert window.try_acquire()
        _change_by_hand(scripts, name)
        assert not window.try_acquire()
    finally:
        scripts.close()


def test_a_clock_behind_what_was_found_asks_again(client: Any) -> None:
    # Two processes whose clocks differ: what one found is not trusted by a call
    # whose time is earlier than its.
    name = unique_name("beside")
    ahead, behind = ManualClock(1_000.0), ManualClock(999.9)
    window = _window("approximate", RedisBackend(client, coalesce=False), ahead, name)
    late = _window("approximate", RedisBackend(client, coalesce=False), behind, name)
    assert late.try_acquire()  # (each process's first decision asks)
    assert window.try_acquire()
    assert window.try_acquire()
    _change_by_hand(client, name)
    assert not late.try_acquire()


@pytest.mark.servers
@pytest.mark.parametrize("kind", KINDS)
def test_a_busy_window_asks_once_a_tenth_of_a_second(quiet_redis: RedisServer, kind: str) -> None:
    admin = redis.Redis.from_url(quiet_redis.url)
    backend = RedisBackend.from_url(quiet_redis.url, coalesce=False)
    clock = ManualClock(1_000.0)
    window = _window_on(kind, backend, clock)
    assert window.try_acquire()
    admin.config_resetstat()
    for _ in range(10):
        assert window.try_acquire()
        clock.advance(TRUSTED / 20)
    assert command_calls(admin, "fcall") == 10
    assert command_calls(admin, "exists") == 0
    # (The exact window's state is a sorted set: any HMGET would be the slack record's.)
    if kind == "exact":
        assert command_calls(admin, "hmget") == 0
    clock.advance(TRUSTED)
    assert window.try_acquire()
    assert command_calls(admin, "exists") == 1
    backend.close()
    admin.close()


def _window_on(kind: str, backend: RedisBackend, clock: ManualClock) -> SlidingWindow:
    return SlidingWindow(
        1_000, 1, approximate=kind == "approximate", backend=backend, name=unique_name("beside"), clock=clock
    )


def test_a_bucket_without_slack_never_writes_its_state_clean_beside_a_record(client: Any) -> None:
    # A leased process keeps a slack, and so a record; a process of the same name
    # without one must not trust what the leased one found alone (the record is beside
    # its state, which the fast path's mark says is never so).
    name = unique_name("beside")
    clock = ManualClock(1_000.0)
    leased = TokenBucket(100, 10, backend=RedisBackend(client, coalesce=True), name=name, clock=clock, lease=0.5)
    plain = TokenBucket(100, 10, backend=RedisBackend(client, coalesce=False), name=name, clock=clock)
    assert leased.try_acquire()
    assert leased.try_acquire()
    assert plain.try_acquire()
    assert plain.try_acquire()
    state = client.get(key_for(name, "token_bucket", injected=True))
    assert state is not None
    assert not clean(state)


def test_a_bucket_follows_a_change_set_beside_the_library_once_a_tenth_has_passed(redis_client: redis.Redis) -> None:
    # A writer beside the library that rewrites the state, as an older release's `set`
    # does: this release's scripts on another client (they keep nothing). A decision
    # that used what was cached writes the state unmarked, so the fast path does not
    # hide the change for the minute until the code is written again.
    client = redis_client
    beside = redis.Redis.from_url(REDIS_URL)
    call_by_script(beside)
    name = unique_name("beside")
    clock = ManualClock(1_000.0)
    bucket = TokenBucket(4, 1, backend=RedisBackend(client, coalesce=False), name=name, clock=clock)
    assert bucket.try_acquire()  # asks (it writes what the code says), and keeps it
    write_override(beside, name, Override(rate=1.0, burst=1.0, ttl=None), now=clock.now())
    bucket.try_acquire()  # may use what was cached: the code's burst of 4
    clock.advance(2 * TRUSTED)
    assert not bucket.try_acquire()  # the change's burst of 1, two taken
    beside.close()


def test_a_peek_keeps_nothing_so_a_change_set_before_any_decision_is_seen_at_once(client: Any) -> None:
    # No decision yet, so no code written: `set` writes the change itself, beside the
    # library. What the first peek found must not hide it from the next.
    name = unique_name("beside")
    clock = ManualClock(1_000.0)
    bucket = LeakyBucket(4, 1, backend=RedisBackend(client, coalesce=False), name=name, clock=clock)
    assert bucket.peek(1) == 0.0
    write_override(client, name, Override(rate=None, burst=0.3, ttl=None), now=clock.now())
    assert bucket.peek(1) == math.inf  # more than the changed burst could ever hold


# -- a fleet, databases, more names than are kept, writers outside the library, flushes --


def _url(base: str, db: int) -> str:
    parts = urllib.parse.urlsplit(base)
    return urllib.parse.urlunsplit(parts._replace(path=f"/{db}"))


def _client(url: str, *, by_script: bool) -> redis.Redis:
    client = redis.Redis.from_url(url, socket_timeout=5)
    if by_script:
        call_by_script(client)  # a script keeps nothing: every decision asks
    return client


class Skewed:
    """Another machine's clock: ``base`` moved by ``offset`` seconds (its sleeps move ``base``)."""

    def __init__(self, base: ManualClock, offset: float) -> None:
        self.base, self.offset = base, offset

    def now(self) -> float:
        return self.base.now() + self.offset

    def sleep(self, seconds: float) -> None:
        self.base.sleep(seconds)

    async def sleep_async(self, seconds: float) -> None:
        await self.base.sleep_async(seconds)


#: Each kind's processes: variant 0 keeps no slack; 1 and 2 keep one (a lease, a
#: window's guard), so a fleet mixes them on one name.
def _limiter(kind: str, variant: int, backend: RedisBackend, name: str, clock: Any) -> Any:
    made: dict[str, Any] = dict(backend=backend, name=name, clock=clock)
    if kind == "token":
        return TokenBucket(8, 4, lease=[None, 0.3, 0.05][variant], **made)
    if kind == "leaky":
        return LeakyBucket(8, 4, **made)
    guard = [0.0, 0.05, 0.3][variant]
    return SlidingWindow(8, 2, approximate=kind == "counter", guard=guard, **made)


FLEET_KINDS = ["token", "leaky", "window", "counter"]

#: One step of a fleet: ("advance", s) | (op, process, ...) as `Fleet.step` reads them.
STEP = st.one_of(
    st.tuples(st.just("advance"), st.sampled_from([0.0, 0.001, 0.01, 0.05, 0.09, 0.1, 0.11, 0.3, 1.0])),
    st.tuples(st.just("try"), st.integers(0, 2), st.sampled_from([1, 1, 2, 5])),
    st.tuples(st.just("reserve"), st.integers(0, 2), st.sampled_from([1, 2]), st.sampled_from([0.0, 0.5, 3.0])),
    st.tuples(st.just("cancel"), st.integers(0, 9)),
    st.tuples(st.just("refund"), st.integers(0, 2), st.sampled_from([1, 2])),
    st.tuples(st.just("charge"), st.integers(0, 2), st.sampled_from([1, 3])),
    st.tuples(st.just("headers"), st.integers(0, 2), st.sampled_from([0, 1, 3]), st.sampled_from([0.5, 2.0])),
    st.tuples(st.just("429"), st.integers(0, 2), st.sampled_from([1, 2])),
    st.tuples(st.just("set"), st.sampled_from([1.0, 2.0, 10.0]), st.sampled_from([None, 0.2, 1.5])),
    st.tuples(st.just("unset")),
    st.tuples(st.just("reset"), st.integers(0, 2)),
    st.tuples(st.just("peek"), st.integers(0, 2), st.sampled_from([1, 3])),
)


class Fleet:
    """Processes of one name on one database, each with a client of its own, and an
    operator's backend for `ratelimit set` (config.py through the library or a script)."""

    def __init__(
        self, url: str, kind: str, variants: list[int], skews: list[float], clock: ManualClock, name: str, **kw: Any
    ) -> None:
        by_script = kw.pop("by_script", False)
        self.kind, self.name, self.clock = kind, name, clock
        self.backends = [
            RedisBackend(_client(url, by_script=by_script), coalesce=False, **kw) for _ in range(1 + len(variants))
        ]
        self.admin = self.backends[0]
        self.processes = [
            _limiter(kind, v, backend, name, Skewed(clock, skew))
            for v, skew, backend in zip(variants, skews, self.backends[1:], strict=True)
        ]
        self.held: list[Any] = []
        self.out: list[Any] = []

    def step(self, step: tuple[Any, ...]) -> None:
        op, *args = step
        if op == "advance":
            self.clock.advance(args[0])
            return
        if op in ("set", "unset"):
            if op == "unset":
                self.admin.reset_limit(self.name, clock=self.clock)
            elif self.kind in ("window", "counter"):  # a window has no burst of its own
                self.admin.set_limit(self.name, rate=args[0], ttl=args[1], clock=self.clock)
            else:
                self.admin.set_limit(self.name, rate=args[0], burst=2 * args[0], ttl=args[1], clock=self.clock)
            return
        if op == "cancel":
            if self.held:
                self.out.append(("cancel", self.held.pop(args[0] % len(self.held)).cancel()))
            return
        limiter = self.processes[args[0] % len(self.processes)]
        if op == "try":
            self.out.append(("try", limiter.try_acquire(args[1])))
        elif op == "reserve":
            try:
                reservation = limiter.reserve(args[1], timeout=args[2])
            except AcquireTimeout as exc:
                after = exc.retry_after
                self.out.append(("refused", round(after, 9) if after is not None and math.isfinite(after) else after))
            else:
                self.held.append(reservation)
                self.out.append(("reserved", round(reservation.wait, 9)))
        elif op == "refund":
            limiter.refund(args[1])
        elif op == "charge":
            limiter.charge(args[1])
        elif op == "headers":
            limiter.feedback({"x-ratelimit-remaining": str(args[1]), "x-ratelimit-reset-after": str(args[2])}, 200)
        elif op == "429":
            limiter.feedback({"retry-after": str(args[1])}, 429)
        elif op == "reset":
            limiter.reset()
        else:
            self.out.append(("peek", round(limiter.peek(args[1]), 9)))

    def close(self) -> None:
        for each in self.backends:
            each.close()


def _run(url: str, kind: str, variants: list[int], skews: list[float], steps: list[Any], **options: Any) -> list[Any]:
    fleet = Fleet(url, kind, variants, skews, ManualClock(1_000.0), unique_name("beside"), **options)
    try:
        for step in steps:
            fleet.step(step)
        return fleet.out
    finally:
        fleet.close()


# -- the library the only writer: it must see every write at once ------------------------


@settings(max_examples=40, deadline=None)
@given(
    kind=st.sampled_from(FLEET_KINDS),
    fleet=st.lists(st.tuples(st.integers(0, 2), st.sampled_from([0.0, 0.03, -0.03, 0.2, -0.2, 5.0])), min_size=1,
                   max_size=3),
    steps=st.lists(STEP, min_size=1, max_size=50),
)  # fmt: skip
def test_a_fleet_through_the_library_decides_as_through_scripts(
    redis_client: redis.Redis, kind: str, fleet: list[tuple[int, float]], steps: list[Any]
) -> None:
    # Mixed slacks (plain, leased, guarded) on one name, clocks apart by less and more
    # than the trusted span (the first process's is the operator's), every op that
    # writes beside the state: nothing the library writes may be missed for a moment.
    variants = [v if kind in ("token", "window", "counter") else 0 for v, _ in fleet]
    skews = [0.0] + [skew for _, skew in fleet[1:]]
    want = _run(REDIS_URL, kind, variants, skews, steps, by_script=True)
    assert _run(REDIS_URL, kind, variants, skews, steps) == want


@settings(max_examples=25, deadline=None)
@given(
    kind=st.sampled_from(FLEET_KINDS),
    variants=st.lists(st.integers(0, 2), min_size=1, max_size=2),
    counters=st.tuples(st.booleans(), st.booleans()),
    steps=st.lists(st.one_of(st.tuples(st.just("advance"), st.sampled_from([0.0, 0.05, 0.3])),
                             st.tuples(st.integers(0, 1), STEP.filter(lambda s: s[0] != "advance"))),
                   min_size=1, max_size=60),
)  # fmt: skip
def test_one_name_in_two_databases_is_two_budgets_whatever_the_library_keeps(
    redis_client: redis.Redis, kind: str, variants: list[int], counters: tuple[bool, bool], steps: list[Any]
) -> None:
    # The library serves every database and cannot tell them apart: what database 1's
    # calls find (nothing beside, where database 0 has a pause, a change, a record)
    # must never be used for database 0's, nor the other way round; each database
    # decides as if alone, counters on or off (the op's marks '!', '^').
    variants = [v if kind != "leaky" else 0 for v in variants]
    skews = [0.0] * len(variants)
    clock = ManualClock(1_000.0)
    name = unique_name("beside-db")
    both = [Fleet(_url(REDIS_URL, db), kind, variants, skews, clock, name, counters=counters[db]) for db in (0, 1)]
    try:
        for step in steps:
            if step[0] == "advance":
                clock.advance(step[1])
            else:
                both[step[0]].step(step[1])
        for db in (0, 1):
            alone = [s if s[0] == "advance" else s[1] for s in steps if s[0] == "advance" or s[0] == db]
            assert both[db].out == _run(REDIS_URL, kind, variants, skews, alone, by_script=True), f"database {db}"
    finally:
        for fleet in both:
            fleet.close()


def test_more_bases_than_the_library_keeps_forget_nothing_written(redis_client: redis.Redis) -> None:
    # Past CACHED_MOST (4096) bases the library forgets every entry at once: a base whose
    # entry was dropped there, or kept past it, still sees the pause its own process
    # was told of in between.
    # The pause is long: its keys expire on the server's own clock (idle_ms), which runs
    # on through the thousands of calls below while this test's clock stands still. A
    # pause of a few seconds would be gone, and the base free, whenever those calls take
    # longer than that (a loaded machine), whatever the library caches.
    pause = 600
    clock = ManualClock(1_000.0)
    window = SlidingWindow(3, 1, guard=0.05, backend=RedisBackend(redis_client, coalesce=False),
                           name=unique_name("beside-many"), clock=clock)  # fmt: skip
    watched = [window.for_key(f"watched-{i}") for i in range(4)]
    for view in watched:
        assert view.try_acquire()
    for i in range(4_200):
        window.for_key(f"k{i}").try_acquire()
        if i % 1_400 == 700:
            view = watched[i // 1_400]
            view.feedback({"retry-after": str(pause)}, 429)
            assert not view.try_acquire()
    clock.advance(0.05)
    assert [view.try_acquire() for view in watched] == [False, False, False, True]
    for view in watched:
        view.reset()  # (the pause's keys would outlive the test by as much)


# -- writers outside the library: seen once the trusted span has passed --------------------


def _once(limiter: Any, kind: str) -> Any:
    if kind == "token":
        return limiter.try_acquire()
    try:
        return limiter.reserve(1, timeout=10).wait
    except AcquireTimeout:
        return None


def _burst(limiter: Any, kind: str) -> list[Any]:
    # A token bucket's burst shows in grants at once; a leaky bucket's in the queue it takes.
    return [_once(limiter, kind) for _ in range(6)]


@pytest.mark.parametrize("kind", ["token", "leaky"])
def test_a_change_written_outside_the_library_holds_once_the_trusted_span_has_passed(
    redis_client: redis.Redis, kind: str
) -> None:
    # A plain bucket decides on its fast path while its state is "clean", which only a
    # reserve that found nothing beside may write. A reserve trusting what was found a
    # moment ago (nothing) must not write it clean: a change another release's `ratelimit
    # set` (here: this release's scripts) wrote in that moment would go unseen until
    # some process's next decision that writes what the code says, up to a minute.
    def burst_after(by_script: bool) -> list[Any]:
        clock = ManualClock(1_000.0)
        name = unique_name("beside-out")
        cls = TokenBucket if kind == "token" else LeakyBucket
        mine = RedisBackend(_client(REDIS_URL, by_script=False), coalesce=False)
        bucket = cls(4, 1, backend=mine, name=name, clock=clock)
        operator = RedisBackend(_client(REDIS_URL, by_script=by_script), coalesce=False)
        assert _once(bucket, kind) in (True, 0.0)  # asks: found nothing, kept
        operator.set_limit(name, burst=1, clock=clock)
        clock.advance(TRUSTED / 2)
        _once(bucket, kind)  # (within the span: may decide on the code's burst)
        clock.advance(10.0)  # full again under either limit
        got = _burst(bucket, kind)
        for each in (mine, operator):
            each.close()
        return got

    assert burst_after(by_script=True) == burst_after(by_script=False)


@pytest.mark.parametrize("kind", ["token", "leaky"])
def test_a_restriction_written_outside_the_library_holds_once_the_trusted_span_has_passed(
    redis_client: redis.Redis, kind: str
) -> None:
    # The same for a provider's word fed back by a process refused FCALL (its scripts):
    # a bucket left clean on what was cached would skip the restriction's holes.
    def after(by_script: bool) -> list[Any]:
        clock = ManualClock(1_000.0)
        name = unique_name("beside-out")
        cls = TokenBucket if kind == "token" else LeakyBucket
        mine = RedisBackend(_client(REDIS_URL, by_script=False), coalesce=False)
        theirs = RedisBackend(_client(REDIS_URL, by_script=by_script), coalesce=False)
        bucket = cls(4, 1, backend=mine, name=name, clock=clock)
        other = cls(4, 1, backend=theirs, name=name, clock=clock)
        got: list[Any] = [_once(bucket, kind)]
        other.feedback({"x-ratelimit-remaining": "1", "x-ratelimit-reset-after": "30"}, 200)
        clock.advance(TRUSTED / 2)
        _once(bucket, kind)  # (within the span)
        for _ in range(3):
            clock.advance(2.0)
            got.append(_burst(bucket, kind))
        for each in (mine, theirs):
            each.close()
        return got

    assert after(by_script=True) == after(by_script=False)


def test_a_lease_recorded_outside_the_library_is_kept_back_once_the_trusted_span_has_passed(
    redis_client: redis.Redis,
) -> None:
    # A leased process refused FCALL records its slack by script: a plain bucket of the
    # same name must keep that share back for the leased tokens still to go. Left clean
    # on what was cached (no record), it would grant the whole burst on its fast path.
    def grants(by_script: bool) -> list[int]:
        clock = ManualClock(1_000.0)
        name = unique_name("beside-lease")
        mine = RedisBackend(_client(REDIS_URL, by_script=False), coalesce=False)
        theirs = RedisBackend(_client(REDIS_URL, by_script=by_script), coalesce=False)
        plain = TokenBucket(10, 10, backend=mine, name=name, clock=clock)
        leased = TokenBucket(10, 10, lease=0.5, backend=theirs, name=name, clock=clock)
        assert plain.try_acquire()  # asks: found nothing, kept
        assert all(leased.try_acquire() for _ in range(3))  # records a slack of 0.5 s
        clock.advance(TRUSTED / 2)
        plain.try_acquire()  # (within the span: may decide with no slack)
        got = []
        for _ in range(3):
            clock.advance(0.5)
            got.append(sum(plain.try_acquire() for _ in range(12)))
            leased.try_acquire()
        for each in (mine, theirs):
            each.close()
        return got

    want = grants(by_script=False)
    assert all(got <= most for got, most in zip(grants(by_script=True), want, strict=True)), want


# -- server-wide: a flush mid-run, the fast path of another database ----------------------


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    """A private server for this module's server-wide commands (a flush, the command counts)."""
    made = private_server()
    yield made.url
    made.cleanup()


@pytest.mark.servers
@settings(max_examples=10, deadline=None)
@given(kind=st.sampled_from(FLEET_KINDS), steps=st.lists(st.one_of(STEP, st.just(("flush",))), min_size=1, max_size=40))
def test_a_function_flush_mid_run_loses_what_was_cached_and_nothing_else(
    server_url: str, kind: str, steps: list[Any]
) -> None:
    # A flush (or a restart, a failover) takes the library and what it kept: the
    # library loaded again asks at its first decision.
    admin = redis.Redis.from_url(server_url)
    variants, skews = [0, 1 if kind != "leaky" else 0], [0.0, 0.0]
    fleet = Fleet(server_url, kind, variants, skews, ManualClock(1_000.0), unique_name("beside-flush"))
    try:
        for step in steps:
            if step[0] == "flush":
                admin.function_flush()
            else:
                fleet.step(step)
        plain = [s for s in steps if s[0] != "flush"]
        assert fleet.out == _run(server_url, kind, variants, skews, plain, by_script=True)
    finally:
        fleet.close()
        admin.close()


@pytest.mark.servers
def test_a_counters_off_client_of_another_database_takes_the_quick_path(server_url: str) -> None:
    # '^' marks its op (counted not, another database): a clean bucket state is decided
    # without asking, as '~' and '!' are, and nothing is counted for `ratelimit top`.
    client = redis.Redis.from_url(_url(server_url, 1))
    clock = ManualClock(1_000.0)
    name = f"beside-quick-{uuid.uuid4().hex[:8]}"
    bucket = TokenBucket(100, 100, backend=RedisBackend(client, coalesce=False, counters=False), name=name,
                         clock=clock)  # fmt: skip
    assert bucket.try_acquire()
    asked = command_calls(client, "exists")
    for _ in range(20):
        clock.advance(0.5)
        assert bucket.try_acquire()
    assert command_calls(client, "exists") == asked
    assert not [key for key in client.scan_iter(match=f"ratelimit:{{{name}}}:*") if b":top:" in key]
    client.close()
