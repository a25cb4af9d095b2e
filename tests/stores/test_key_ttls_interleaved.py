"""A window's key on the server's clock outlives its grants, whoever wrote it last.

On the server's TIME the windows' checked fast paths leave the key's deadline as it stands
while it still covers the state (the approximate window's until its newest
sub-window moves, the exact window's until its newest grant's window passes the next
half second): sound only if every other writer of the state gives the key at least
the idle time's TTL. Here the checked fast path's grants are interleaved with each of those writers
(the full path's refund, charge, cancel, restriction, change and its end, reset; a
process keeping no guard; the scripts a server without Functions runs; the release
before, which wrote the TTL at every grant) and with a key deleted by hand and the
library flushed, and the key's TTL is checked after every step: never gone while a
grant still counts, never short of the newest grant's window by more than half the
second's margin, never without a deadline.

Beside them: the buckets' fast paths keep the text they wrote last and its numbers
between calls of the library; a state written between two fast-path decisions by hand,
by another key or as a number at the edges (-0, huge, tiny) must decide as its text
says, which the pure twins say.
"""

from __future__ import annotations

import contextlib
import math
import random
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratelimit import AcquireTimeout, RedisBackend, SlidingWindow
from ratelimit._algorithms.holes import Holes, reserve
from ratelimit._algorithms.leaky_bucket import LeakyQueue
from ratelimit._algorithms.token_bucket import Gcra
from ratelimit._stores.keys import config_key, key_for
from ratelimit._stores.redis.handles import RedisHandle
from ratelimit._stores.redis.replies import num
from ratelimit._stores.redis.scripts import call_by_script, library, single_script

from conftest import command_calls, private_server, unique_name
from scenarios import same
from servers import RedisServer

pytestmark = pytest.mark.redis

#: The driver's call of a window's checked fast path, and the same call as the release before
#: this one made it: the key's TTL written at every grant, on any clock.
CHECKED_CALL = "ALG.checked_fast(self, now, tokens, max_wait, time ~= nil)"
CHECKED_CALL_BEFORE = "ALG.checked_fast(self, now, tokens, max_wait, false)"
BEFORE = "ratelimit_release_before"


def load_release_before(client: redis.Redis) -> None:
    """This release's library as the release before ran the windows (see CHECKED_CALL)."""
    source = library().source
    assert source.count(CHECKED_CALL) == 1
    client.function_load(
        source.replace(CHECKED_CALL, CHECKED_CALL_BEFORE).replace(library().name, BEFORE), replace=True
    )


def server_now(client: redis.Redis) -> float:
    seconds, micros = client.time()
    return float(seconds) + micros / 1e6


def state_of(client: redis.Redis, key: str, approximate: bool) -> object:
    """The state's content (not its TTL), to tell whether a step wrote it."""
    if approximate:
        return sorted(client.hgetall(key).items())
    return client.zrange(key, 0, -1, withscores=True)


def assert_ttl_covers(
    client: redis.Redis, key: str, approximate: bool, window: float, margin: float, after: str
) -> None:
    """The key lives until its newest grant's window has passed, and `margin` more:
    every writer gives it a second; the exact window's checked fast path may leave one written
    for a grant up to half a second older. And it has a deadline."""
    ttl_ms = int(client.pttl(key))
    if ttl_ms == -2:
        return  # no state: nothing counted, nothing to keep
    assert ttl_ms != -1, f"{key} kept for ever after {after}"
    now = server_now(client)
    if approximate:
        newest = float(cast("bytes", client.hget(key, "last")))
    else:
        newest = cast("list[tuple[bytes, float]]", client.zrange(key, -1, -1, withscores=True))[0][1]
    # (The TTL read before the time: real time between them only lowers what is owed.)
    owed_ms = (newest + window + margin - now) * 1000
    assert ttl_ms >= owed_ms - 2, (after, ttl_ms, owed_ms)


@pytest.fixture
def server() -> Iterator[RedisServer]:
    made = private_server()
    yield made
    made.cleanup()


@pytest.mark.servers
@pytest.mark.parametrize("approximate", [False, True], ids=["exact", "approximate"])
def test_a_window_on_the_servers_clock_keeps_its_ttl_whoever_writes_between_its_grants(
    server: RedisServer, approximate: bool
) -> None:
    client = redis.Redis.from_url(server.url)
    scripts = redis.Redis.from_url(server.url)
    call_by_script(scripts)  # a server without Functions: the same Lua as scripts
    load_release_before(client)
    backend = RedisBackend(client, coalesce=False)
    name = unique_name("ttl-mixed")
    kind = "sliding_window_counter" if approximate else "sliding_window"
    # No clock: the server's TIME. The window short enough to pass a few times.
    limiter = SlidingWindow(6, 0.2, approximate=approximate, backend=backend, name=name)
    plain = SlidingWindow(6, 0.2, approximate=approximate, backend=backend, name=name, guard=0)
    by_script = SlidingWindow(6, 0.2, approximate=approximate, backend=RedisBackend(scripts, coalesce=False), name=name)
    window = limiter.window_seconds + limiter.guard
    key = backend.key(name, kind)
    params = [num(p) for p in limiter.algorithm_for(None).params()] + [num(limiter.guard), "0"]
    held: list[Any] = []

    def before() -> None:
        client.fcall(f"{BEFORE}_{kind}", 2, key, config_key(name), "reserve", "", "1.0", "0", *params)

    def reserve_ahead() -> None:
        for _ in range(3):
            with contextlib.suppress(AcquireTimeout):  # (behind a restriction: refused)
                held.append(limiter.reserve(2, timeout=1.0))

    def cancel() -> None:
        while held:
            held.pop().cancel()

    def flush() -> None:
        client.function_flush()
        load_release_before(client)

    def change() -> None:
        backend.set_limit(name, rate=40.0, ttl=0.02)  # ends by itself, at a decision

    # (name, call, whether it writes the state through the full path or the release
    # before: then with its TTL from its own newest grant, the whole second's margin).
    # The process with no guard decides on the full path, under the guard the others
    # record, while that record lasts; once it has lapsed (the window idle) its checked
    # fast path counts its grant for its own window, 0.2 s (see the check below).
    others: list[tuple[str, Callable[[], object], bool]] = [
        ("the release before", before, True),
        ("a process with no guard", lambda: plain.try_acquire(), False),
        ("scripts", lambda: by_script.try_acquire(), False),
        ("a refund", lambda: limiter.refund(1), True),
        ("a charge", lambda: limiter.charge(1), True),
        ("reservations ahead", reserve_ahead, False),
        ("their cancel", cancel, True),
        ("a restriction", lambda: limiter.feedback({"x-ratelimit-remaining": "1", "x-ratelimit-reset": "1"}), True),
        ("a pause", lambda: limiter.feedback({"retry-after": "0.05"}, status=429), True),
        ("a change", change, True),
        ("a reset", limiter.reset, True),
        ("a delete by hand", lambda: client.delete(key), True),
        ("a flush of the library", flush, True),
    ]
    rng = random.Random(7)
    started = time.monotonic()
    for i in range(90):
        if i % 3 == 2:
            what, call, full = others[(i // 3) % len(others)]
        else:
            what, call, full = "a grant", lambda: limiter.try_acquire(), False
        was = state_of(client, key, approximate)
        call()
        wrote = full and state_of(client, key, approximate) != was
        counted = limiter.window_seconds if call is others[1][1] else window
        assert_ttl_covers(client, key, approximate, counted, 1.0 if wrote else 0.5, what)
        if rng.random() < 0.3:
            time.sleep(rng.uniform(0.0, 0.012))
    assert time.monotonic() - started < 5.0
    for c in (client, scripts):
        c.close()


def test_busy_windows_on_the_servers_clock_keep_their_deadlines_ahead_for_longer_than_the_margin(
    quiet_client: redis.Redis,
) -> None:
    # The checked fast paths leave a deadline in place while it covers the state: a busy
    # window's must still move on once its grants have gone past the margin it was
    # written with (half a second's worth here, both windows at once: 0.6 s of grants).
    backend = RedisBackend(quiet_client, coalesce=False)
    windows = [
        (approximate, SlidingWindow(100_000, 0.3, approximate=approximate, backend=backend, name=unique_name("busy")))
        for approximate in (False, True)
    ]
    for _, limiter in windows:
        assert limiter.try_acquire()  # the first writes what the code says: the full path
    started = time.monotonic()
    while time.monotonic() - started < 0.6:
        for approximate, limiter in windows:
            assert limiter.try_acquire()
            key = backend.key(limiter.name or "", "sliding_window_counter" if approximate else "sliding_window")
            assert_ttl_covers(quiet_client, key, approximate, 0.3 + limiter.guard, 0.5, "a grant")
        time.sleep(0.004)


def test_an_exact_windows_lone_entry_rewritten_by_a_lean_grant_keeps_a_deadline(redis_client: redis.Redis) -> None:
    # A grant too small to move the running sum (1 + 1e-300 == 1) is merged into the
    # newest entry: ZREM, then ZADD. The set's only entry removed, the key went and
    # came back without a TTL, although the rounded deadline did not move: it must be
    # written again, or the key is kept for ever.
    backend = RedisBackend(redis_client, coalesce=False)
    name = unique_name("ttl-merge")
    limiter = SlidingWindow(3, 5, backend=backend, name=name)
    key = backend.key(name, "sliding_window")
    assert limiter.try_acquire()  # the first writes what the code says: the full path
    assert limiter.try_acquire(1e-300)  # the checked fast path, on the server's clock
    assert redis_client.zcard(key) == 1
    assert_ttl_covers(redis_client, key, False, 5 + limiter.guard, 0.5, "a merged grant")


def test_an_exact_window_rebased_by_a_lean_grant_keeps_a_deadline(redis_client: redis.Redis) -> None:
    # Running sums past 2^32 whose older grants have aged out are rebased: the set is
    # deleted and written again, without a TTL, whether or not the rounded deadline
    # moved. A grant of 5e9 tokens (A), one of 1 (B), and once A has aged out and B
    # not, a third (C) rebases the set on the checked fast path.
    backend = RedisBackend(redis_client, coalesce=False)
    for _ in range(5):  # (real time: B must still count when C comes)
        name = unique_name("ttl-rebase")
        limiter = SlidingWindow(1e10, 0.1, backend=backend, name=name, guard=0)
        key = backend.key(name, "sliding_window")
        assert limiter.try_acquire(5e9)
        time.sleep(0.06)
        assert limiter.try_acquire(1)
        time.sleep(0.06)
        assert limiter.try_acquire(1)
        sums = [float(member.split(b"|")[0]) for member in cast("list[bytes]", redis_client.zrange(key, 0, -1))]
        if sums == [1.0, 2.0]:  # rebased: B's sum less the base, then C's
            break
    else:
        pytest.skip("B aged out before C came: no rebase to check")
    assert_ttl_covers(redis_client, key, False, 0.1, 0.5, "a rebase")


def test_a_busy_exact_window_counting_billions_writes_its_ttl_a_few_times_a_second(quiet_client: redis.Redis) -> None:
    # Running sums past 2^32 (an LLM budget of tokens: 5e9 here from the first grant)
    # are checked for a rebase at each grant, which rewrites the set only once the
    # grants under its base have aged out: a check that rewrites nothing leaves the
    # deadline as it stands, as below 2^32.
    backend = RedisBackend(quiet_client, coalesce=False)
    name = unique_name("ttl-billions")
    limiter = SlidingWindow(1e12, 60, backend=backend, name=name)
    assert limiter.try_acquire(5e9)  # the first writes what the code says: the full path
    before, started = command_calls(quiet_client, "pexpire"), time.monotonic()
    for _ in range(200):
        assert limiter.try_acquire(1e6)
    elapsed = time.monotonic() - started
    written = command_calls(quiet_client, "pexpire") - before
    # (Beside it, the slack record of the window's guard, written twice a guard.)
    assert written <= (2 + 2 / 0.05) * elapsed + 3, (written, elapsed)
    assert_ttl_covers(quiet_client, backend.key(name, "sliding_window"), False, 60 + limiter.guard, 0.5, "a grant")


@pytest.mark.parametrize("clock", ["given", "server"])
def test_a_request_of_no_tokens_after_an_exact_windows_grants_aged_out_is_granted(
    redis_client: redis.Redis, clock: str
) -> None:
    # The key outlives its newest grant's window by its second's margin: a reserve
    # then prunes the set empty, and one of no tokens adds nothing, so the checked fast path
    # has no newest entry to give the (gone) key a deadline from. Not an error.
    name = unique_name("ttl-zero")
    keys = [key_for(name, "sliding_window"), config_key(name)]
    script = single_script("sliding_window")
    at = ["1000", "1000.2"] if clock == "given" else ["", ""]
    first = script(redis_client, keys, ["reserve", at[0], "1", "", "3", "0.1", "0", "0"])
    assert isinstance(first, bytes)  # granted at once
    if clock == "server":
        time.sleep(0.15)
    assert redis_client.exists(keys[0])  # (the second's margin)
    again = script(redis_client, keys, ["reserve", at[1], "0", "", "3", "0.1", "0", "0"])
    assert isinstance(again, bytes)  # granted at once, as the pure step grants it
    if clock == "given":
        assert again == b"1000.2"
    assert not redis_client.exists(keys[0])


# -- the buckets' fast paths: the text written last, cached between calls --------------

#: Numbers a state's text may hold at the edges: the zeros, the tiniest and huge ones.
EDGES = [-0.0, 0.0, 5e-324, -5e-324, 1e300, -1e300, 1.7976931348623157e308]

#: (what, which key, time step, tokens, max_wait, an edge or an earlier text's place)
BucketAction = tuple[str, int, float, float, float, int]
bucket_actions = st.lists(
    st.tuples(
        st.sampled_from(["decide", "decide", "decide", "copy", "rewind", "edge", "edge2"]),
        st.sampled_from([0, 1]),
        st.sampled_from([0.0, 0.0, 0.001, 0.3, 1.0, 4.0]),
        st.sampled_from([1.0, 1.0, 2.0, 4.0, 5e-324]),
        st.sampled_from([0.0, 0.5, math.inf]),
        st.integers(0, 1000),
    ),
    min_size=1,
    max_size=30,
)


def clean_text(kind: str, state: Any) -> bytes:
    """A bucket's state as the fast path writes it: with the mark (see
    lua/token_bucket.lua and lua/leaky_bucket.lua)."""
    if kind == "token_bucket":
        return f"{state:.17g} ".encode()
    drained, latest = state
    if latest < 0 or (latest == 0 and math.copysign(1.0, latest) < 0):
        return f"{drained:.17g} -0{-latest:.17g}".encode()
    return f"{drained:.17g} 0{latest:.17g}".encode()


def read_text(kind: str, text: bytes) -> Any:
    """The numbers a state's text stands for, as the scripts read them: the largest
    double is a state moved past it, infinite (``unbounded`` in lua/_prelude.lua)."""
    if kind == "token_bucket":
        return _unbounded(float(text))
    drained, latest = text.split()
    return (_unbounded(float(drained)), _unbounded(float(latest)))


def _unbounded(x: float) -> float:
    return math.inf if x == sys.float_info.max else x


@pytest.mark.parametrize("kind", ["token_bucket", "leaky_bucket"])
@pytest.mark.parametrize("max_wait", [math.inf, 0.0])
def test_a_state_at_the_largest_double_refuses_rather_than_grant_at_an_infinite_wait(
    redis_client: redis.Redis, kind: str, max_wait: float
) -> None:
    # One more step past the largest double is infinite: a grant then would never be
    # due. Both twins refuse it, whatever the caller would wait, and keep the state as
    # its text says (the scripts read an infinite text as no state at all: a fresh,
    # full bucket, so writing one back would have granted the next request at once).
    alg: Any = Gcra(4.0, 2.0) if kind == "token_bucket" else LeakyQueue(4.0, 2.0)
    now = 1_700_000_000.0
    name = unique_name("largest-double")
    key = key_for(name, kind)
    handle = RedisHandle(RedisBackend(redis_client), alg, key, lambda: repr(now), None, name)
    state: Any = 1.7976931348623157e308 if kind == "token_bucket" else (1.7976931348623157e308, now - 1.0)
    redis_client.set(key, clean_text(kind, state), px=60_000)
    loaded = read_text(kind, clean_text(kind, state))
    try:
        for tokens in (1.0, 5e-324):
            got = handle.reserve(tokens, max_wait)
            new, wait, named = reserve([alg], [loaded], Holes(), now, [tokens], max_wait)
            same(got, (wait, named))
            assert wait == -math.inf
            assert repr(new[0]) == repr(loaded)
            assert repr(read_text(kind, cast(bytes, redis_client.get(key)))) == repr(loaded)
    finally:
        redis_client.delete(key)


@pytest.mark.parametrize("kind", ["token_bucket", "leaky_bucket"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(actions=bucket_actions)
def test_quick_decisions_read_every_state_as_its_text_says_whoever_wrote_it(
    redis_client: redis.Redis, kind: str, actions: list[BucketAction]
) -> None:
    # Two buckets of one size, decided by the fast path (named, nothing beside) on a
    # time passed in, against their pure twins; between decisions a state is copied
    # from the other key, set back to one of its earlier texts, or written by hand at
    # the edges of what a double holds: the library then meets the text it wrote last
    # on another key, a text it wrote before, or one it never wrote.
    alg: Any = Gcra(4.0, 2.0) if kind == "token_bucket" else LeakyQueue(4.0, 2.0)
    now = [1_700_000_000.0]

    def at() -> str:
        return repr(now[0])

    names = [unique_name("quick-text"), unique_name("quick-text")]
    keys = [key_for(n, kind) for n in names]
    handles = [RedisHandle(RedisBackend(redis_client), alg, k, at, None, n) for k, n in zip(keys, names, strict=True)]
    states: list[Any] = [alg.new_state(), alg.new_state()]
    texts: list[list[bytes]] = [[], []]
    # (A huge state is kept for as long as a TTL goes: gone with the example.)
    try:
        for what, i, dt, tokens, max_wait, pick in actions:
            now[0] += dt
            if what == "decide":
                got = handles[i].reserve(tokens, max_wait)
                new, wait, name = reserve([alg], [states[i]], Holes(), now[0], [tokens], max_wait)
                same(got, (wait, name))
                states[i] = new[0]
                text = cast("bytes | None", redis_client.get(keys[i]))
                if text is not None:
                    assert repr(read_text(kind, text)) == repr(states[i])
                    texts[i].append(text)
                continue
            if what == "copy":
                text = cast("bytes | None", redis_client.get(keys[1 - i]))
                if text is None:
                    continue
            elif what == "rewind":
                if not texts[i]:
                    continue
                text = texts[i][pick % len(texts[i])]
            else:
                edge = EDGES[pick % len(EDGES)]
                if kind == "token_bucket":
                    text = clean_text(kind, edge)
                elif what == "edge":
                    text = clean_text(kind, (edge, now[0] - 1.0))
                else:
                    text = clean_text(kind, (now[0] + 1.0, edge))
            redis_client.set(keys[i], text, px=60_000)
            states[i] = read_text(kind, text)
            # (An edge the scripts read as no state, the text of an infinite number, is
            # not written: the largest double is written, and read as infinite.)
            assert not any(math.isnan(x) for x in (states[i] if isinstance(states[i], tuple) else (states[i],)))
    finally:
        redis_client.delete(*keys)
