"""The counters of ``ratelimit top`` held in Lua by the function library ("Counting in
memory" in ``lua/_top.lua``): a base's first count of a second is written at once,
the rest of that second are held and written when its next second comes, or when
``top`` flushes them (``lua/top_flush.lua``, ``flush_counts``). Scripts hold nothing.

Exactness is checked against the same calls through scripts, which write every count
at once, on a name of their own: the two must leave the same hashes, second by second.
Time is the scripts' ``now`` argument (a ``ManualClock``, or given by hand), never a
sleep. The buffer's cap, a FUNCTION FLUSH and two libraries side by side run on
private servers.
"""

from __future__ import annotations

import math
import time
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
import redis

from ratelimit import Composite, ManualClock, RedisBackend, SlidingWindow, TokenBucket
from ratelimit._stores.keys import key_for
from ratelimit._stores.redis.fleet import base_of, fleet, flush_counts
from ratelimit._stores.redis.scripts import by_function, call_by_script, library, library_text, single_script

from conftest import REDIS_URL, private_server, unique_name
from servers import RedisServer

pytestmark = pytest.mark.redis

PARAMS = ["5", "0.5", "0", "0"]  # a token bucket of 5, a token every 2 s; no slack, enforced


def raw(client: redis.Redis, key: str) -> dict[str, float]:
    """A counters hash as it stands, nothing flushed."""
    got = cast("dict[bytes, bytes]", client.hgetall(key))
    return {k.decode(): float(v) for k, v in got.items()}


def flushed(client: redis.Redis, key: str) -> dict[str, float]:
    flush_counts(client, [base_of(key)])
    return raw(client, key)


def counters_of(client: redis.Redis, name: str) -> dict[str, dict[str, float]]:
    """Every counters hash of ``name``, flushed, by its key less the name."""
    keys = [k.decode() for k in client.scan_iter(match=f"ratelimit:{{{name}}}:*:top:*", count=1000)]
    flush_counts(client, {base_of(key) for key in keys})
    return {key.replace(name, "<name>"): raw(client, key) for key in keys}


@pytest.fixture
def script_client() -> Iterator[redis.Redis]:
    """A client of the shared server that calls scripts (as on a server without Functions)."""
    client = redis.Redis.from_url(REDIS_URL)
    call_by_script(client)
    yield client
    client.close()


@pytest.fixture
def function_client(redis_client: redis.Redis) -> redis.Redis:
    if not by_function(redis_client):
        pytest.skip("the shared server has no Functions")
    return redis_client


def reserve(now: float, max_wait: str = "") -> list[str]:
    return ["reserve", repr(now), "1", max_wait, *PARAMS]


def grant_time(reply: Any) -> str:
    """The grant time of a reserve's reply (a grant at once may be replied as the time alone)."""
    if isinstance(reply, bytes):
        seconds, _, micros = reply.decode().partition(" ")
        return repr(float(seconds) + float(micros) / 1e6) if micros else seconds
    return cast("bytes", reply[1]).decode()


def single_run(client: redis.Redis, base: str, first: int) -> None:
    """Three busy seconds of one limiter: grants at once and after waits, refusals, a
    reservation withdrawn, a batch with a lease, a pause; then a quiet second."""
    script = single_script("token_bucket")
    for second in range(first, first + 3):
        # (A lease fits in the first second only, the bucket full.)
        script(client, [base], ["batch", repr(float(second)), "", "", *PARAMS, "2", "1", "1", "0", "1", ""])
        for i in range(1, 8):
            script(client, [base], reserve(second + i * 0.05, max_wait="0.6"))
        reply = script(client, [base], reserve(second + 0.5))  # a wait: due later
        script(client, [base], ["refund", repr(second + 0.55), "1", grant_time(reply), *PARAMS])
        script(client, [base], ["restrict", repr(second + 0.7), "0", "0.1", *PARAMS])
        script(client, [base], reserve(second + 0.75))
    script(client, [base], reserve(first + 3.5))


def test_a_hot_limiter_holds_its_counts_and_they_add_up_exactly(
    function_client: redis.Redis, script_client: redis.Redis
) -> None:
    held, written = unique_name("held"), unique_name("written")
    held_base, written_base = key_for(held, "token_bucket"), key_for(written, "token_bucket")
    single_run(function_client, held_base, 8000)
    single_run(script_client, written_base, 8000)
    for second in range(8000, 8004):
        expected = raw(script_client, f"{written_base}:top:{second}")
        assert expected  # every second counted something
        as_it_stands = raw(function_client, f"{held_base}:top:{second}")
        if second < 8003:
            # Written when the limiter's next second came, before any flush.
            assert as_it_stands == expected
        assert flushed(function_client, f"{held_base}:top:{second}") == expected
    seen = {field for second in range(8000, 8003) for field in raw(script_client, f"{written_base}:top:{second}")}
    assert {"r", "c", "l", "p", "w1"} <= seen
    # Held, not written: the last busy second's decisions (the quiet second's one is
    # its first, written at once).
    again = unique_name("again")
    base = key_for(again, "token_bucket")
    script = single_script("token_bucket")
    for i in range(5):
        script(function_client, [base], reserve(8100 + i * 0.1))
    assert raw(function_client, f"{base}:top:8100") == {"w1": 1.0}
    assert flushed(function_client, f"{base}:top:8100") == {"w1": 5.0}
    # Counts after a flush are held again, and written by the next.
    script(function_client, [base], reserve(8100.9, max_wait="0"))
    assert raw(function_client, f"{base}:top:8100") == {"w1": 5.0}
    assert flushed(function_client, f"{base}:top:8100") == {"w1": 5.0, "r": 1.0}
    ttl = function_client.pttl(f"{base}:top:8100")
    assert 60_000 < ttl <= 70_000


def test_scripts_write_every_count_at_once(script_client: redis.Redis) -> None:
    base = key_for(unique_name("scripted"), "token_bucket")
    for i in range(7):
        single_script("token_bucket")(script_client, [base], reserve(8200 + i * 0.1, max_wait="0"))
    assert raw(script_client, f"{base}:top:8200") == {"w1": 5.0, "r": 2.0}


def composite_and_priorities(backend: RedisBackend, name: str) -> None:
    clock = ManualClock(8300.25)
    composite = Composite([TokenBucket(3, 2), SlidingWindow(10, 60)], backend=backend, name=name + "-c", clock=clock)
    lanes = TokenBucket(4, 2, backend=backend, name=name + "-p", low_share=0.5, borrow=False, clock=clock)
    for _ in range(3):
        for _ in range(4):
            composite.try_acquire()
            lanes.low.try_acquire()
            lanes.try_acquire()
        lanes.feedback({"Retry-After": "0.2"}, 429)
        composite.feedback({"Retry-After": "0.2"}, 429)
        clock.advance(0.5)
        composite.try_acquire()
        lanes.try_acquire()
        clock.advance(0.5)


def test_composites_and_priorities_add_up_exactly(function_client: redis.Redis, script_client: redis.Redis) -> None:
    held, written = unique_name("kinds-held"), unique_name("kinds-written")
    backends = [RedisBackend(function_client, coalesce=False), RedisBackend(script_client, coalesce=False)]
    composite_and_priorities(backends[0], held)
    composite_and_priorities(backends[1], written)
    for suffix in ("-c", "-p"):
        expected = counters_of(script_client, written + suffix)
        assert len(expected) == 3
        assert counters_of(function_client, held + suffix) == {k: v for k, v in expected.items()}
    for backend in backends:
        backend.close()


def server_now(client: redis.Redis) -> float:
    seconds, micros = client.time()
    return float(seconds) + micros / 1e6


def test_a_limiter_gone_idle_mid_second_shows_every_count_in_top(function_client: redis.Redis) -> None:
    name = unique_name("idle")
    backend = RedisBackend(function_client, coalesce=False)
    limiter = TokenBucket(100, 0.001, backend=backend, name=name)
    # The window is placed by the server's clock before the grants, not after: a read
    # after a slow SCAN of a full keyspace once fell two seconds later, past them.
    before = server_now(function_client)
    assert all(limiter.try_acquire() for _ in range(40))
    base = key_for(name, "token_bucket")
    seconds = (math.floor(before), math.floor(before) + 1)
    assert sum(raw(function_client, f"{base}:top:{s}").get("w1", 0.0) for s in seconds) < 40  # held, most
    rows = [row for row in fleet(function_client, window=2, now=before + 2.0) if row.name == name]
    assert rows[0].grants_per_sec == pytest.approx(40 / 2)
    backend.close()


def test_a_name_in_two_databases_keeps_its_counts_apart(function_client: redis.Redis) -> None:
    # One library serves every database of a server and cannot tell them apart: a
    # client of database 1 has its counts written at once, so they never pool with
    # database 0's held under the same name, nor are written into the other's hash.
    url = urllib.parse.urlsplit(REDIS_URL)
    other = redis.Redis.from_url(urllib.parse.urlunsplit(url._replace(path="/1")))
    assert other.connection_pool.connection_kwargs["db"] == 1
    name = unique_name("two-dbs")
    clock = ManualClock(5_000.0)
    zero = TokenBucket(1_000, 1, backend=RedisBackend(function_client, coalesce=False), name=name, clock=clock)
    one = TokenBucket(1_000, 1, backend=RedisBackend(other, coalesce=False), name=name, clock=clock)
    for _ in range(30):
        assert zero.try_acquire()
    for _ in range(7):
        assert one.try_acquire()
    key = key_for(name, "token_bucket", injected=True) + ":top:5000"
    assert raw(function_client, key) == {"w1": 1.0}  # the rest held
    assert raw(other, key) == {"w1": 7.0}  # every count written at once
    flush_counts(other, [base_of(key)])  # database 1: nothing held for it, nothing written
    assert raw(function_client, key) == {"w1": 1.0}
    assert flushed(function_client, key) == {"w1": 30.0}
    assert raw(other, key) == {"w1": 7.0}
    other.delete(key, key_for(name, "token_bucket", injected=True))
    other.close()


# -- private servers: the cap, a flush of the library, two libraries -----------------------


@pytest.fixture
def server() -> Iterator[RedisServer]:
    made = private_server()
    yield made
    made.cleanup()


def fcall_many(client: redis.Redis, calls: list[tuple[str, float]], max_wait: str = "") -> None:
    function = library().function("token_bucket")
    pipe = client.pipeline(transaction=False)
    for base, now in calls:
        pipe.fcall(function, 1, base, *reserve(now, max_wait))
    pipe.execute()


def held_bases(client: redis.Redis) -> int:
    reply = cast("list[int]", client.fcall(library().function("top_flush"), 0))
    return reply[1]


@pytest.mark.servers
def test_the_counts_held_never_pass_the_cap_and_stay_exact(server: RedisServer) -> None:
    client = redis.Redis.from_url(server.url)
    most = 10_000  # TOP_HELD_MOST in lua/_top.lua
    bases = [key_for(f"cap-{i}", "token_bucket") for i in range(most + 50)]
    single_script("token_bucket")(client, [bases[0]], reserve(9000.0))  # loads the library
    fcall_many(client, [(base, 9000.1 + k * 0.1) for base in bases for k in range(2)])
    assert held_bases(client) == most
    # Past the cap a new base writes each count at once: exact before any flush.
    pipe = client.pipeline(transaction=False)
    for base in bases[-50:]:
        pipe.hgetall(f"{base}:top:9000")
    assert all(reply == {b"w1": b"2"} for reply in pipe.execute())
    # Full of counts held from a recent second: a new base's sweep forgets none of
    # them, and the new base writes at once.
    late = key_for("cap-late", "token_bucket")
    fcall_many(client, [(late, 9001.1 + k * 0.1) for k in range(3)])
    assert raw(client, f"{late}:top:9001") == {"w1": 3.0}
    assert held_bases(client) == most
    # Every count there, once flushed.
    flush_counts(client, bases)
    pipe = client.pipeline(transaction=False)
    for base in bases:
        pipe.hgetall(f"{base}:top:9000")
    expected = {b"w1": b"3"}
    replies = pipe.execute()
    assert replies[0] == expected
    assert all(reply == {b"w1": b"2"} for reply in replies[1:])
    # Nothing left held from an earlier second: a sweep (one a second, while full)
    # forgets those it looks at (SWEEP_MOST, 500), and a new base takes the room made.
    sweep = 500
    for second in range(9002, 9005):
        fresh = key_for(f"cap-fresh-{second}", "token_bucket")
        fcall_many(client, [(fresh, second + 0.1 + k * 0.1) for k in range(3)])
        assert raw(client, f"{fresh}:top:{second}") == {"w1": 1.0}  # held: there was room
        assert flushed(client, f"{fresh}:top:{second}") == {"w1": 3.0}
    assert held_bases(client) == most - sweep + 3
    client.close()


@pytest.mark.servers
def test_a_function_flush_mid_run_loses_at_most_what_was_held(server: RedisServer) -> None:
    client = redis.Redis.from_url(server.url)
    backend = RedisBackend(client, coalesce=False)
    clock = ManualClock(9100.25)
    name = unique_name("flushed")
    limiter = TokenBucket(100, 1, backend=backend, name=name, clock=clock)
    key = key_for(name, "token_bucket", injected=True) + ":top:9100"
    assert all(limiter.try_acquire() for _ in range(5))
    assert flushed(client, key) == {"w1": 5.0}  # the flush functions listed, and kept
    assert all(limiter.try_acquire() for _ in range(5))
    client.function_flush()  # what is held (these 5 counts) goes with the library
    assert all(limiter.try_acquire() for _ in range(5))  # loaded again: the first written at once
    assert flushed(client, key) == {"w1": 10.0}  # and the others held, then flushed
    client.function_flush()
    assert flushed(client, key) == {"w1": 10.0}  # no function left: nothing to flush, no error
    clock.advance(1.0)
    assert limiter.try_acquire()
    assert flushed(client, key_for(name, "token_bucket", injected=True) + ":top:9101") == {"w1": 1.0}
    backend.close()


@pytest.mark.servers
def test_top_flushes_the_counts_held_by_every_release_loaded(server: RedisServer) -> None:
    client = redis.Redis.from_url(server.url)
    other = "ratelimit_0ther0release"
    client.function_load(library_text(other, 1).text)  # another protocol's
    base = key_for(unique_name("rolling"), "token_bucket")
    call: Callable[[str, float], Any] = lambda function, now: client.fcall(function, 1, base, *reserve(now))  # noqa: E731
    single_script("token_bucket")(client, [base], reserve(9200.1))
    for i in range(2):
        call(library().function("token_bucket"), 9200.2 + i * 0.1)
        call(f"{other}_token_bucket", 9200.2 + i * 0.1)
    assert raw(client, f"{base}:top:9200") == {"w1": 2.0}  # the first of each library
    assert flushed(client, f"{base}:top:9200") == {"w1": 5.0}
    client.close()


@pytest.mark.servers
def test_top_on_a_replica_reads_what_it_has(server: RedisServer) -> None:
    """A replica refuses a function that may write (READONLY): `top` there shows what
    was written, the counts held on its master a second late, and does not fail."""
    master = redis.Redis.from_url(server.url)
    with RedisServer(None, "--replicaof", "127.0.0.1", str(server.port)) as replica_server:
        replica = redis.Redis.from_url(replica_server.url)
        name = unique_name("replicated")
        backend = RedisBackend(master, coalesce=False)
        limiter = TokenBucket(100, 0.001, backend=backend, name=name)
        for _ in range(50):
            if replica.info("replication").get("master_link_status") == "up":
                break
            time.sleep(0.1)
        assert all(limiter.try_acquire() for _ in range(5))
        master.wait(1, 2000)
        now = server_now(master) + 1.0
        (row,) = [row for row in fleet(replica, window=2, now=now) if row.name == name]
        assert 0 < (row.grants_per_sec or 0.0) <= 5 / 2  # some counts may still be held on the master
        (row,) = [row for row in fleet(master, window=2, now=now) if row.name == name]
        assert row.grants_per_sec == pytest.approx(5 / 2)
        backend.close()
        replica.close()
    master.close()


@pytest.mark.servers
def test_sweeps_go_round_the_bases_held_while_they_change(server: RedisServer) -> None:
    """Each sweep starts where the last stopped, in a table that grew and shrank since
    (next() must never be given a key gone): keyed traffic, every base counted once a
    second, keeps the library full and sweeping for long enough to go round twice."""
    client = redis.Redis.from_url(server.url)
    most, sweep = 10_000, 500
    single_script("token_bucket")(client, [key_for("round-0", "token_bucket")], reserve(9300.0))
    fcall_many(client, [(key_for(f"round-{i}", "token_bucket"), 9300.5) for i in range(1, most)])
    assert held_bases(client) == most
    for second in range(9301, 9301 + 2 * most // sweep + 2):
        # The first new base of the second sweeps, making room for `sweep` more; the
        # rest write their count at once.
        bases = [key_for(f"round-{second}-{i}", "token_bucket") for i in range(sweep + 20)]
        fcall_many(client, [(base, second + 0.5) for base in bases])
        assert held_bases(client) == most
        pipe = client.pipeline(transaction=False)
        for base in bases:
            pipe.hgetall(f"{base}:top:{second}")
        assert all(reply == {b"w1": b"1"} for reply in pipe.execute())
    client.close()
