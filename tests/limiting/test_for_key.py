"""``limiter.for_key(key)``: one limiter, a budget per key, on every store."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import threading
from collections.abc import Callable
from typing import Any

import pytest
import redis
import redis.cluster
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.crc import key_slot

from ratelimit import (
    AcquireTimeout,
    Adaptive,
    Composite,
    ConcurrencyLimit,
    LeakyBucket,
    ManualClock,
    MemoryBackend,
    RedisBackend,
    SlidingWindow,
    TokenBucket,
)
from ratelimit import cli as ratelimit_cli
from ratelimit._stores.keys import Keyed, key_for, parts_of
from ratelimit.events import Event, Granted

from conftest import command_calls, private_server, unique_name

Make = Callable[..., Any]


def drain(limiter: Any, most: int = 50) -> int:
    """How many single tokens ``limiter`` grants at once now."""
    granted = 0
    while granted < most and limiter.try_acquire():
        granted += 1
    return granted


# -- each key its own budget, on every store ---------------------------------------


def test_each_key_has_a_budget_of_its_own(make: Make) -> None:
    """Two keys and the limiter itself never share tokens; a view says the limiter's name and its key."""
    limiter = make(TokenBucket, 2, 1)
    a, b = limiter.for_key("a"), limiter.for_key("b")
    assert (a.name, a.key, b.key, limiter.key) == (limiter.name, "a", "b", None)
    assert drain(a) == 2
    assert drain(b) == 2
    assert drain(limiter) == 2
    assert a.backend is limiter.backend
    assert a.clock is limiter.clock
    assert repr(a).endswith(".for_key('a')")


def test_a_view_refills_on_the_limiters_clock(make: Make, clock: ManualClock) -> None:
    """A view keeps time as the limiter does: its tokens come back as the clock moves."""
    view = make(TokenBucket, 2, 1).for_key("tenant")
    assert drain(view) == 2
    clock.advance(1.0)
    assert drain(view) == 1


@pytest.mark.parametrize(
    ("build", "grants"),
    [
        (lambda make: make(TokenBucket, 3, 1), 3),
        (lambda make: make(LeakyBucket, 3, 1), 1),
        (lambda make: make(SlidingWindow, 3, 10), 3),
        (lambda make: make(SlidingWindow, 3, 10, approximate=True), 3),
        (lambda make: make(TokenBucket, 3, 1, adaptive=Adaptive()), 3),
        (lambda make: make(TokenBucket, 3, 1, shadow=True), 50),
        (lambda make: make(Composite, [TokenBucket(3, 1), SlidingWindow(2, 10)]), 2),
    ],
    ids=["token", "leaky", "window", "approximate", "adaptive", "shadow", "composite"],
)
def test_every_kind_keeps_a_budget_per_key(make: Make, build: Callable[[Make], Any], grants: int) -> None:
    """Every limiter kind hands out views of its own kind whose budgets are apart."""
    limiter = build(make)
    first, second = limiter.for_key("first"), limiter.for_key("second")
    assert type(first) is type(limiter)
    assert drain(first) == grants
    assert drain(second) == grants
    assert drain(limiter) == grants


def test_a_keyed_budget_with_priorities_has_both_lanes(make: Make) -> None:
    """A view of a budget with priorities has its own low lane; the limiter's ``low`` has no keys."""
    limiter = make(TokenBucket, 4, 1, low_share=0.5)
    view = limiter.for_key("k")
    assert drain(view.low) >= 1
    assert drain(limiter.low) >= 1
    with pytest.raises(TypeError, match=r"for_key\(key\).low"):
        limiter.low.for_key("k")


def test_a_keyed_concurrency_limit_holds_per_key(make: Make) -> None:
    """Per-key concurrency: each key's slots are its own."""
    limit = make(ConcurrencyLimit, 1)
    a, b = limit.for_key("a"), limit.for_key("b")
    assert a.name == limit.name
    assert a.key == "a"
    with a.hold(timeout=0), b.hold(timeout=0):
        with pytest.raises(AcquireTimeout), limit.for_key("a").hold(timeout=0):
            pass
        with limit.hold(timeout=0):
            pass


def test_a_keyed_composite_keeps_each_member_per_key(make: Make) -> None:
    """A composite's view is a composite of keyed members, concurrency slots included."""
    composite = make(Composite, [TokenBucket(5, 1), ConcurrencyLimit(1)])
    a, b = composite.for_key("a"), composite.for_key("b")
    with a.hold(timeout=0), b.hold(timeout=0), pytest.raises(AcquireTimeout), a.hold(timeout=0):
        pass


def test_async_views_keep_budgets_apart(make: Make) -> None:
    """Views decide for asyncio too, and many tasks asking for one key's view get one view."""
    limiter = make(TokenBucket, 5, 1)

    async def main() -> None:
        views = await asyncio.gather(*(asyncio.to_thread(limiter.for_key, "same") for _ in range(20)))
        assert len({id(view) for view in views}) == 1
        granted = await asyncio.gather(*(views[0].try_acquire_async() for _ in range(10)))
        assert sum(granted) == 5
        assert await limiter.for_key("other").try_acquire_async()

    asyncio.run(main())


# -- the cache of views -----------------------------------------------------------


def test_a_view_dropped_from_the_cache_finds_the_same_budget(make: Make) -> None:
    """Eviction drops a view, never its budget: the next view of that key sees what was spent."""
    limiter = make(TokenBucket, 3, 1)
    limiter.key_views = 1
    first = limiter.for_key("a")
    assert drain(first) == 3
    limiter.for_key("b")  # drops a's view
    del first
    gc.collect()
    again = limiter.for_key("a")
    assert drain(again) == 0
    assert limiter.for_key("a") is again


def test_eviction_while_a_view_is_in_use_keeps_its_reservation(make: Make, clock: ManualClock) -> None:
    """A view still held by a caller after eviction shares its budget with the view made after it."""
    limiter = make(TokenBucket, 1, 1)
    limiter.key_views = 0  # every for_key builds a view: each one evicted at once
    held = limiter.for_key("a")
    assert held.acquire() == 0
    fresh = limiter.for_key("a")
    assert fresh is not held
    with pytest.raises(AcquireTimeout) as caught:
        fresh.acquire(timeout=0.5)
    assert caught.value.retry_after == pytest.approx(1.0)
    clock.advance(1.0)
    assert fresh.try_acquire()
    assert not held.try_acquire()


def test_views_dropped_from_the_cache_are_freed(make: Make) -> None:
    """Nothing but the cache holds a view: one dropped from it is collected (no leak per key)."""
    import weakref

    limiter = make(TokenBucket, 1, 1)
    limiter.key_views = 2
    dropped = [weakref.ref(limiter.for_key(f"k{i}")) for i in range(50)]
    for view in dropped[:10]:
        alive = view()
        assert alive is None or alive.try_acquire() in (True, False)
        del alive
    gc.collect()
    assert sum(view() is not None for view in dropped) <= 2


def test_the_cache_is_bounded(make: Make) -> None:
    """At most ``key_views`` views are kept, the most recently used."""
    limiter = make(TokenBucket, 1, 1)
    assert limiter.key_views == 1024
    limiter.key_views = 3
    views = [limiter.for_key(str(i)) for i in range(5)]
    assert limiter.for_key("4") is views[4]
    assert limiter.for_key("0") is not views[0]
    limiter.key_views = 0
    assert limiter.for_key("4") is not views[4]


def test_hundreds_of_threads_get_one_view_and_one_budget() -> None:
    """300 threads asking for one key's view at once all get the same view, and share its budget."""
    limiter = TokenBucket(100, 1e-3, backend=MemoryBackend(), name=unique_name(), clock=ManualClock(start=5.0))
    barrier = threading.Barrier(300)
    seen: list[Any] = []
    granted: list[bool] = []

    def work() -> None:
        barrier.wait()
        view = limiter.for_key("hot")
        seen.append(view)
        granted.append(view.try_acquire())

    threads = [threading.Thread(target=work) for _ in range(300)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len({id(view) for view in seen}) == 1
    assert sum(granted) == 100


# -- no collisions ------------------------------------------------------------------

keys_text = st.text(min_size=1, max_size=30)
tricky = st.text(alphabet="ab{}%/*?[]:\\ \x00\x1b", min_size=1, max_size=12)


@given(name=st.one_of(keys_text, tricky), key=st.one_of(keys_text, tricky))
def test_a_keyed_tag_reads_back_as_its_name_and_key(name: str, key: str) -> None:
    """Every Redis key of a keyed budget names its limiter and key back, and a plain
    name's never names a key: so no two pairs, nor a pair and a name, share a tag."""
    for kind in ("token_bucket", "config", "code"):
        assert parts_of(key_for(Keyed(name, key), kind)) == (name, key)
        assert parts_of(key_for(name, kind)) == (name, None)
    assert key_for(Keyed(name, key), "x") != key_for(name + key, "x")


@settings(max_examples=60, deadline=None)
@given(pairs=st.lists(st.tuples(tricky, tricky), min_size=2, max_size=6, unique=True))
def test_distinct_pairs_never_share_a_budget(pairs: list[tuple[str, str]]) -> None:
    """Limiters named with separators, braces and globs, keyed likewise: each pair's budget is its own."""
    backend = MemoryBackend()
    clock = ManualClock(start=1.0)
    limiters = {name: TokenBucket(1, 1e-3, backend=backend, name=name, clock=clock) for name, _ in pairs}
    for name, key in pairs:
        assert limiters[name].for_key(key).try_acquire(), (name, key)
    for name in limiters:
        assert limiters[name].try_acquire()  # plain names: untouched by any key


def test_distinct_pairs_never_share_a_budget_in_redis(redis_client: redis.Redis) -> None:
    """The same on a real server, with names and keys that would collide if joined naively."""
    backend = RedisBackend(redis_client)
    base = unique_name()
    pairs = [(base, "a%/b"), (base + "%/a", "b"), (base + "%", "/a%/b"), (base, "{x}"), (base, "*"), (base, "?")]
    clock = ManualClock(start=1.0)
    limiters = {name: TokenBucket(1, 1e-3, backend=backend, name=name, clock=clock) for name, _ in pairs}
    for name, key in pairs:
        assert limiters[name].for_key(key).try_acquire(), (name, key)
    for limiter in limiters.values():
        assert limiter.try_acquire()


def test_unnamed_limiters_keep_their_keys_apart() -> None:
    """Two unnamed limiters on one in-process store keep their keys themselves."""
    shared = MemoryBackend()
    first, second = TokenBucket(1, 1e-3, backend=shared), TokenBucket(1, 1e-3, backend=shared)
    assert first.for_key("k").try_acquire()
    assert second.for_key("k").try_acquire()
    assert not first.for_key("k").try_acquire()


# -- what a view shares with its limiter ---------------------------------------------


def test_events_are_labelled_by_name_and_reach_the_limiters_subscribers(make: Make) -> None:
    """A view's events carry the limiter's name (no series per key) and reach its subscribers."""
    limiter = make(TokenBucket, 1, 1)
    events: list[Event] = []
    limiter.subscribe(events.append)
    limiter.for_key("acme").try_acquire()
    assert [(type(e), e.name) for e in events] == [(Granted, limiter.name)]


def test_metrics_have_one_series_per_limiter_not_per_key() -> None:
    """Prometheus counts every key's grants under the limiter's name alone."""
    from prometheus_client import CollectorRegistry

    from ratelimit.prometheus import PrometheusMetrics

    registry = CollectorRegistry()
    limiter = TokenBucket(1, 1, name="shops", clock=ManualClock(start=1.0))
    limiter.subscribe(PrometheusMetrics(registry))
    for shop in ("a", "b", "c"):
        assert limiter.for_key(shop).try_acquire()
    samples = [
        sample
        for metric in registry.collect()
        if metric.name == "ratelimit_grants"
        for sample in metric.samples
        if sample.name == "ratelimit_grants_total"
    ]
    assert [(sample.labels, sample.value) for sample in samples] == [({"name": "shops"}, 3.0)]


def test_a_view_of_a_view_is_refused(make: Make) -> None:
    """Keys do not nest: ``for_key`` belongs to the limiter."""
    view = make(TokenBucket, 1, 1).for_key("a")
    with pytest.raises(TypeError, match="for_key on the limiter it came from"):
        view.for_key("b")


# -- bad input -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "error", "said"),
    [
        ("", ValueError, "1 to 200"),
        ("x" * 201, ValueError, "1 to 200"),
        (7, TypeError, "must be a str, got int 7"),
        (b"acme", TypeError, "must be a str, got bytes"),
        (None, TypeError, "got NoneType"),
        ("\ud800", ValueError, "UTF-8"),
    ],
    ids=["empty", "201", "int", "bytes", "none", "surrogate"],
)
def test_a_bad_key_is_refused_by_name(key: Any, error: type[Exception], said: str) -> None:
    """Bad keys raise TypeError/ValueError naming the argument ``key``."""
    with pytest.raises(error, match=r"^key must") as caught:
        TokenBucket(1, 1).for_key(key)
    assert said in str(caught.value)


def test_a_huge_key_is_shown_shortened() -> None:
    """A 10 MB key is refused with a message of a few hundred characters."""
    with pytest.raises(ValueError, match="10,000,000 characters") as caught:
        TokenBucket(1, 1).for_key("k" * 10_000_000)
    assert len(str(caught.value)) < 300


def test_key_views_takes_a_count() -> None:
    limiter = TokenBucket(1, 1)
    with pytest.raises(TypeError, match="key_views must be an int"):
        limiter.key_views = 1.5  # type: ignore[assignment]
    with pytest.raises(ValueError, match="key_views must be >= 0"):
        limiter.key_views = -1


# -- stores: hash tags, expiry, the sweep, one call per decision ----------------------


def test_keys_spread_over_a_clusters_slots(cluster_client: redis.cluster.RedisCluster) -> None:
    """Each key has its own hash tag: a thousand keys land on many slots and on every master."""
    backend = RedisBackend(cluster_client)
    limiter = TokenBucket(1, 1, backend=backend, name=unique_name())
    slots = {key_slot(backend.key(Keyed(limiter.name, f"c{i}"), "token_bucket").encode()) for i in range(1000)}
    assert len(slots) > 900
    nodes = {cluster_client.nodes_manager.get_node_from_slot(slot).name for slot in slots}
    assert len(nodes) == 3  # the session's cluster has three masters
    for i in range(50):
        assert limiter.for_key(f"c{i}").try_acquire()


def test_a_keys_state_expires_in_redis(redis_client: redis.Redis) -> None:
    """A key's state carries a TTL like any limiter's: idle keys leave Redis by themselves."""
    name = unique_name()
    limiter = TokenBucket(10, 1, backend=RedisBackend(redis_client), name=name)
    limiter.for_key("idle").acquire()
    state = key_for(Keyed(name, "idle"), "token_bucket")
    assert 0 < redis_client.pttl(state) <= 60_000


def test_idle_keys_are_forgotten_in_process() -> None:
    """The in-process store's sweep forgets idle keys once their views are gone."""
    backend = MemoryBackend()
    clock = ManualClock(start=1.0)
    limiter = TokenBucket(2, 1, backend=backend, name="tenants", clock=clock)
    limiter.key_views = 16
    for i in range(5_000):
        limiter.for_key(f"t{i}").try_acquire()
    assert len(backend) >= 16
    clock.advance(10.0)
    gc.collect()
    backend.sweep()
    assert len(backend) <= 16 + 1  # the views still cached (their limiter's own state is idle)


def test_a_named_limiter_without_a_backend_keeps_one_budget_per_key() -> None:
    """``name=`` and no ``backend=``: a view rebuilt after the cache dropped the last
    one finds the key's budget spent, and views made at once share one budget."""
    clock = ManualClock(start=1.0)
    limiter = TokenBucket(5, 1e-3, name=unique_name(), clock=clock)
    limiter.key_views = 1
    assert drain(limiter.for_key("a")) == 5
    limiter.for_key("b")  # drops a's view
    gc.collect()
    assert drain(limiter.for_key("a")) == 0
    limiter.key_views = 0
    assert sum(drain(limiter.for_key("c")) for _ in range(10)) == 5
    assert limiter.for_key("c").backend is limiter.backend


@pytest.mark.parametrize(
    "build",
    [
        lambda clock: LeakyBucket(5, 1e-3, name=unique_name(), clock=clock),
        lambda clock: SlidingWindow(5, 1_000, name=unique_name(), clock=clock),
        lambda clock: TokenBucket(5, 1e-3, name=unique_name(), clock=clock, adaptive=Adaptive(floor=1e-4)),
        lambda clock: TokenBucket(5, 1e-3, name=unique_name(), clock=clock, low_share=0.5),
        lambda clock: Composite([TokenBucket(5, 1e-3), SlidingWindow(9, 1_000)], name=unique_name(), clock=clock),
        lambda clock: TokenBucket(5, 1e-3, clock=clock),
    ],
    ids=["leaky", "window", "adaptive", "priorities", "composite", "unnamed"],
)
def test_every_kind_keeps_one_budget_per_key_without_a_backend(build: Callable[[ManualClock], Any]) -> None:
    """Ten views of one key made and dropped one after another grant what one budget holds."""
    limiter = build(ManualClock(start=1.0))
    limiter.key_views = 0
    once = drain(build(ManualClock(start=1.0)).for_key("k"))
    assert sum(drain(limiter.for_key("k")) for _ in range(10)) == once


@pytest.mark.parametrize("named", [True, False], ids=["named", "unnamed"])
def test_a_concurrency_limit_without_a_backend_holds_per_key_across_views(named: bool) -> None:
    """``ConcurrencyLimit(2, name=...)`` and a composite holding slots: views of one
    key made apart share its slots, two holders at most."""
    name = unique_name() if named else None
    for limit in (
        ConcurrencyLimit(2, name=name),
        Composite([TokenBucket(100, 1), ConcurrencyLimit(2)], name=name),
    ):
        limit.key_views = 0
        leases = [limit.for_key("k").hold(timeout=0) for _ in range(2)]
        for lease in leases:
            lease.__enter__()
        with pytest.raises(AcquireTimeout), limit.for_key("k").hold(timeout=0):
            pass
        for lease in leases:
            lease.__exit__(None, None, None)
        with limit.for_key("k").hold(timeout=0):
            pass


def _keyed(kind: str, clock: ManualClock, backend: MemoryBackend | None, name: str | None) -> Any:
    if kind == "token":
        return TokenBucket(2, 1, backend=backend, name=name, clock=clock)
    if kind == "window":
        return SlidingWindow(2, 1, backend=backend, name=name, clock=clock)
    if kind == "priorities":
        return TokenBucket(2, 1, backend=backend, name=name, clock=clock, low_share=0.5)
    if kind == "composite":
        return Composite([TokenBucket(2, 1), ConcurrencyLimit(1)], backend=backend, name=name, clock=clock)
    return ConcurrencyLimit(1, backend=backend, name=name, clock=clock)


def _use(view: Any) -> None:
    if isinstance(view, ConcurrencyLimit) or (isinstance(view, Composite) and view._slots):
        with view.hold(timeout=0):
            pass
    else:
        view.try_acquire()
        if view.low_share is not None:
            view.low.try_acquire()


@pytest.mark.parametrize("kind", ["token", "window", "priorities", "composite", "concurrency"])
@pytest.mark.parametrize(
    "where",
    [
        "named",
        # Tracemalloc slows each case to seconds: the other two places run with the stress tests.
        pytest.param("unnamed", marks=pytest.mark.stress),
        pytest.param("given", marks=pytest.mark.stress),
    ],
)
def test_idle_keys_views_and_state_leave_memory_in_process(kind: str, where: str) -> None:
    """Thousands of keys, every view kept by the cache: once every key is idle, one
    sweep leaves less than a fifth of the memory they took (measured by tracemalloc)."""
    import tracemalloc

    clock = ManualClock(start=1.0)
    backend = MemoryBackend() if where == "given" else None
    limiter = _keyed(kind, clock, backend, None if where == "unnamed" else unique_name())
    limiter.key_views = 100_000
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for i in range(1_000):
            _use(limiter.for_key(f"t{i}"))
        peak = tracemalloc.get_traced_memory()[0] - base
        clock.advance(10.0)
        limiter.backend.sweep()
        left = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert left < 0.2 * peak, (left, peak)
    assert limiter.key_views == 100_000


def test_a_view_used_elsewhere_keeps_its_budget_through_a_sweep() -> None:
    """The sweep drops an idle key's view from the cache, never a budget a view still
    held by a caller decides on: the next view of the key shares it."""
    clock = ManualClock(start=1.0)
    backend = MemoryBackend()
    limiter = TokenBucket(2, 1, backend=backend, name=unique_name(), clock=clock)
    held = limiter.for_key("a")
    backend.sweep()
    again = limiter.for_key("a")
    assert again is not held  # the idle key's view was let go by the cache
    assert drain(again) == 2
    assert drain(held) == 0
    clock.advance(10.0)
    backend.sweep()
    assert drain(held) == 2
    assert drain(limiter.for_key("a")) == 0


@pytest.mark.stress
@pytest.mark.parametrize("where", ["unnamed", "named", "given"])
def test_hundreds_of_threads_and_a_sweeper_keep_every_keys_bound(where: str) -> None:
    """100 threads on 20 keys through a cache of 2 views, a thread sweeping without
    pause: no key grants more than its budget, nor holds more than its one slot."""
    import collections
    import random

    clock = ManualClock(start=1.0)
    backend = MemoryBackend() if where == "given" else None
    name = None if where == "unnamed" else unique_name()
    bucket = TokenBucket(5, 1e-6, backend=backend, name=name, clock=clock)
    slots = ConcurrencyLimit(1, backend=backend, name=None if name is None else name + "-slots")
    bucket.key_views = slots.key_views = 2
    granted: collections.Counter[str] = collections.Counter()
    inside: collections.Counter[str] = collections.Counter()
    peak: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()
    done = threading.Event()

    stores: list[Any] = [bucket.backend, slots.backend]

    def sweeper() -> None:
        while not done.is_set():
            for store in stores:
                store.sweep()

    def work(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(100):
            key = f"k{rng.randrange(20)}"
            if bucket.for_key(key).try_acquire():
                with lock:
                    granted[key] += 1
            with contextlib.suppress(AcquireTimeout), slots.for_key(key).hold(timeout=0):
                with lock:
                    inside[key] += 1
                    peak[key] = max(peak[key], inside[key])
                with lock:
                    inside[key] -= 1

    sweeping = threading.Thread(target=sweeper)
    sweeping.start()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(100)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    done.set()
    sweeping.join(30)
    assert not any(thread.is_alive() for thread in [*threads, sweeping])
    assert max(granted.values()) == 5
    assert max(peak.values()) == 1


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(["token", "leaky", "window", "approximate", "composite", "adaptive"]),
    steps=st.lists(
        st.tuples(
            st.sampled_from(["try", "reserve", "cancel", "refund", "settle", "advance", "sweep"]),
            st.integers(0, 2),
            st.sampled_from([0.25, 0.5, 1.0, 2.0, 3.0]),
        ),
        max_size=40,
    ),
)
def test_sweeps_never_change_a_decision(kind: str, steps: list[tuple[str, int, float]]) -> None:
    """The same calls on two in-process limiters, one swept after every call: every
    decision is the same (forgetting idle keys and their views never changes one)."""

    def build(clock: ManualClock) -> Any:
        backend = MemoryBackend()
        name = unique_name()
        if kind == "token":
            return TokenBucket(3, 1, backend=backend, name=name, clock=clock)
        if kind == "leaky":
            return LeakyBucket(3, 1, backend=backend, name=name, clock=clock)
        if kind in ("window", "approximate"):
            return SlidingWindow(3, 2, backend=backend, name=name, clock=clock, approximate=kind == "approximate")
        if kind == "adaptive":
            return TokenBucket(3, 1, backend=backend, name=name, clock=clock, adaptive=Adaptive())
        return Composite([TokenBucket(3, 1), SlidingWindow(4, 2)], backend=backend, name=name, clock=clock)

    def run(swept: bool) -> list[Any]:
        clock = ManualClock(start=100.0)
        limiter = build(clock)
        limiter.key_views = 1_000
        reservations: list[Any] = []
        seen: list[Any] = []
        for op, key, amount in steps:
            tokens = min(amount, 3.0)
            view = limiter.for_key(f"k{key}")
            if op == "try":
                seen.append(view.try_acquire(tokens))
            elif op == "reserve":
                try:
                    reservations.append(view.reserve(tokens, timeout=5))
                    seen.append(reservations[-1].wait)
                except AcquireTimeout as refused:
                    seen.append(("refused", refused.retry_after))
            elif op == "cancel":
                seen.append(reservations.pop(0).cancel() if reservations else None)
            elif op == "refund":
                view.refund(tokens)
            elif op == "settle":
                view.settle(tokens, tokens / 2)
            elif op == "advance":
                clock.advance(amount)
            seen.append(round(view.peek(1), 9))
            del view
            if swept:
                limiter.backend.sweep()
        return seen

    assert run(swept=True) == run(swept=False)


#: Keys the Redis test runs through (``benchmarks/keyed_limiters.py`` runs 100,000).
MANY_KEYS = 10_000


@pytest.mark.stress
def test_many_keys_one_script_call_per_decision() -> None:
    """Ten thousand keys through Redis (asyncio, a few hundred at once), each
    decision one script call, and each key its own budget."""
    server = private_server()
    try:
        backend = RedisBackend.from_url(server.url, pool_size=64)
        client = redis.Redis.from_url(server.url, socket_timeout=5)
        limiter = TokenBucket(1, 1e-3, backend=backend, name="customers")
        assert limiter.for_key("warm-up").try_acquire()  # loads the function library

        def calls() -> int:
            return sum(command_calls(client, command) for command in ("fcall", "evalsha", "eval"))

        before = calls()

        async def main() -> int:
            granted = 0
            for start in range(0, MANY_KEYS, 500):
                views = [limiter.for_key(f"customer-{i}") for i in range(start, start + 500)]
                granted += sum(await asyncio.gather(*(view.try_acquire_async() for view in views)))
            return granted

        assert asyncio.run(main()) == MANY_KEYS
        assert calls() - before == MANY_KEYS
        assert not limiter.for_key("customer-7").try_acquire()
        assert calls() - before == MANY_KEYS + 1
        backend.close()
        client.close()
    finally:
        server.cleanup()


# -- operators -------------------------------------------------------------------------


def test_inspect_shows_one_key_escaped(redis_client: redis.Redis, capsys: pytest.CaptureFixture[str]) -> None:
    """``ratelimit inspect NAME --key K`` shows that key's budget; control characters are escaped."""
    name, key = unique_name(), "shop{1}*\x1b[31m"
    limiter = TokenBucket(3, 1e-3, backend=RedisBackend(redis_client), name=name)
    limiter.for_key(key).acquire(2)
    url = redis_client.connection_pool.connection_kwargs
    where = f"redis://{url['host']}:{url['port']}/{url.get('db', 0)}"
    assert ratelimit_cli.main(["inspect", "--redis", where, name, "--key", key, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["limiters"][0]
    assert (shown["name"], shown["key"], shown["kind"]) == (name, key, "token_bucket")
    assert shown["available"] == pytest.approx(1.0, abs=0.01)
    assert ratelimit_cli.main(["inspect", "--redis", where, name, "--key", key]) == 0
    text = capsys.readouterr().out
    assert "\x1b" not in text
    assert "\\x1b[31m" in text
    assert ratelimit_cli.main(["inspect", "--redis", where, name, "--key", "nobody"]) == 1
    assert ratelimit_cli.main(["inspect", "--redis", where, "--key", key]) == 2


def test_a_survey_of_names_lists_no_keys(redis_client: redis.Redis) -> None:
    """``inspect`` of every name does not list a limiter's keys as names of their own."""
    from ratelimit._stores.redis.key_survey import survey

    name = unique_name()
    TokenBucket(3, 1, backend=RedisBackend(redis_client), name=name).for_key("k").acquire()
    assert not any(found.startswith(name) for found in survey(redis_client))


def test_top_adds_a_limiters_keys_up_in_its_row(redis_client: redis.Redis) -> None:
    """``ratelimit top`` shows one row per limiter, its keys' decisions added up: no row per customer."""
    from ratelimit._stores.redis.fleet import fleet

    name = unique_name()
    limiter = TokenBucket(100, 1e-3, backend=RedisBackend(redis_client), name=name)
    for i in range(10):
        assert limiter.for_key(f"c{i}").try_acquire()
    seconds, micros = redis_client.time()
    rows = [row for row in fleet(redis_client, window=5, now=seconds + micros / 1e6 + 1.0) if name in row.name]
    assert [row.name for row in rows] == [name]
    assert rows[0].grants_per_sec == pytest.approx(10 / 5)


def test_an_operators_set_of_the_name_reaches_a_key_used_after_it(redis_client: redis.Redis) -> None:
    """Each key decides in its own slot, which the name's change is not in: its
    decisions carry the change (redis/name_changes.py), and the key takes it."""
    name = unique_name()
    backend = RedisBackend(redis_client)
    limiter = TokenBucket(1, 1e-3, backend=backend, name=name)
    backend.set_limit(name, burst=5)
    try:
        assert drain(limiter) == 5
        assert drain(limiter.for_key("k")) == 5
    finally:
        backend.reset_limit(name)
