"""The safe mode: ``local_share="auto"`` falls back on one over the live processes.

The count is tested with several "processes" beating into one set under ids of their
own, on an injected clock; the fallback, the fork and the cost of the beats on
private servers (from ``servers.py``), so that the shared server's live set is never
touched.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import fakeredis
import pytest
import redis
import redis.asyncio
import redis.cluster

from ratelimit import Composite, ManualClock, RedisBackend, SlidingWindow, TokenBucket
from ratelimit._stores.redis import live as live_module
from ratelimit._stores.redis.live import KEPT_BEATS, LIVE_KEY, UNCOUNTED_SHARE, LiveCount
from ratelimit._stores.redis.scripts import Script, live_script, single_script
from ratelimit._stores.waiting import process_id

from conftest import unique_name
from servers import RedisServer

pytestmark = pytest.mark.redis


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


def wait_for(check: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "not within the deadline"
        time.sleep(0.01)


# -- the count: processes beating into one set on an injected clock -----------------


class Fleet:
    """Processes beating into one private set at the times of a ManualClock."""

    def __init__(self, client: redis.Redis, clock: ManualClock, ttl: float = 15.0) -> None:
        self.client = client
        self.clock = clock
        self.key = f"{LIVE_KEY}:{unique_name()}"
        self.ttl = ttl

    def run(self, args: Sequence[str]) -> Any:
        return live_script()(self.client, (self.key,), args)

    def now(self) -> str:
        return repr(self.clock.now())

    def this_process(self) -> LiveCount:
        return LiveCount(self.run, self.now, ttl=self.ttl, clock=self.clock.now)

    def beat(self, other: str) -> int:
        """Another process's beat, under its own id; the count it sees."""
        return int(self.run(["beat", other, repr(self.ttl), self.now()]))

    def leave(self, other: str) -> int:
        return int(self.run(["leave", other, repr(self.ttl), self.now()]))


def test_the_share_follows_the_processes_as_they_come_and_go(redis_client: redis.Redis) -> None:
    clock = ManualClock(1_000.0)
    fleet = Fleet(redis_client, clock)
    me = fleet.this_process()
    assert me.count is None
    assert me.share() == UNCOUNTED_SHARE  # never counted: not the whole budget
    assert me.beat() == 1
    assert me.share() == 1.0
    fleet.beat("a")
    assert fleet.beat("b") == 3
    assert me.beat() == 3
    assert me.share() == pytest.approx(1 / 3)
    clock.advance(10)
    fleet.beat("a")  # b misses its beats from now on
    assert me.beat() == 3  # b's beat runs until 1015: still counted
    clock.advance(6)  # 1016
    assert me.beat() == 2  # b ran out
    # The count of 3 stands for the kept beats and a ttl more (see KEPT_BEATS): a
    # count that fell may be a set that came back empty.
    assert me.count == 3
    clock.advance(5)
    fleet.beat("a")
    assert me.beat() == 2
    assert me.count == 3
    clock.advance(5)  # 1026: the beat of 1010 is more than a ttl and three beats ago
    fleet.beat("a")
    assert me.beat() == 2
    assert me.share() == 0.5
    assert fleet.leave("a") == 1  # a left on close: gone at once
    assert me.beat() == 1
    for other in "cdef":
        fleet.beat(other)
    assert me.beat() == 5
    assert me.share() == 0.2
    # The set expires once nobody beats: twice the ttl after the last beat.
    assert 0 < redis_client.pttl(fleet.key) <= 30_000


def test_eight_processes_after_a_restart_never_share_more_than_the_budget(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Eight processes beat, a fifth of a period apart, into one set; Redis restarts
    # empty (as a deleted or evicted key leaves it) and fails again within a period.
    clock = ManualClock(1_000.0)
    fleet = Fleet(redis_client, clock)
    names = [f"p{i}" for i in range(8)]
    counts: dict[str, LiveCount] = {name: fleet.this_process() for name in names}
    acting = [names[0]]
    monkeypatch.setattr(live_module, "process_id", lambda: acting[0])

    def beat(name: str) -> int:
        acting[0] = name
        return counts[name].beat()

    def shares() -> list[float]:
        got = []
        for name in names:
            acting[0] = name
            got.append(counts[name].share())
        return got

    step = 5.0 / 8  # the beats of a period (ttl / 3), spread over it
    for _ in range(4):
        for name in names:
            beat(name)
            clock.advance(step)
    assert shares() == [1 / 8] * 8
    redis_client.delete(fleet.key)  # the restart
    seen = [beat(name) for name in names[:3]]
    assert seen == [1, 2, 3]  # what each of the first three found in the set
    # The second outage, now: each falls back on the share it kept. Together they
    # must not take more than the budget (it was 1 + 1/2 + 1/3 + 5/8: 2.46 times).
    assert sum(shares()) <= 1 + 1e-9
    for _ in range(KEPT_BEATS + 1):  # Redis stays: every process is counted again
        for name in names:
            beat(name)
            clock.advance(step)
    assert shares() == [1 / 8] * 8
    # A process that left is dropped from the others' counts a few beats later.
    acting[0] = names[7]
    counts[names[7]].stop()
    fleet.leave(names[7])
    for _ in range(KEPT_BEATS + 1):
        for name in names[:7]:
            beat(name)
            clock.advance(step)
    assert shares()[:7] == [1 / 7] * 7


def test_the_count_is_kept_while_the_store_fails() -> None:
    answers: list[Any] = [4]

    def run(args: Sequence[str]) -> Any:
        answer = answers.pop(0) if answers else None
        if answer is None:
            raise redis.exceptions.ConnectionError("down")
        return answer

    me = LiveCount(run, lambda: "")
    me.beat()
    with pytest.raises(redis.exceptions.ConnectionError):
        me.beat()
    assert me.count == 4
    assert me.share() == 0.25


def test_a_beat_is_one_script_on_one_key_for_a_cluster() -> None:
    # One key: a Cluster routes the beat to one slot, with no hash tag needed.
    assert LIVE_KEY == "ratelimit:live"
    assert not LIVE_KEY.startswith("ratelimit:{")  # never a limiter's key
    assert "ZREMRANGEBYSCORE" in live_script().source


@pytest.mark.cluster
def test_the_beat_runs_on_a_cluster(cluster_client: redis.cluster.RedisCluster) -> None:
    key = f"{LIVE_KEY}:{unique_name()}"

    def run(args: Sequence[str]) -> Any:
        return live_script()(cluster_client, (key,), args)

    me = LiveCount(run, lambda: "")
    assert me.beat() == 1
    run(["beat", "other", "15.0", ""])
    assert me.beat() == 2


# -- the fallback at 1/N ---------------------------------------------------------------


def others_alive(url: str, *others: str, seconds: float = 100.0) -> None:
    """Count ``others`` as live processes on the server at ``url`` for ``seconds``."""
    client = redis.Redis.from_url(url)
    try:
        now = client.time()[0]
        client.zadd(LIVE_KEY, {other: now + seconds for other in others})
    finally:
        client.close()


def counted(backend: RedisBackend, n: int) -> None:
    """Wait until ``backend`` has counted ``n`` live processes (one beat made now)."""
    live = backend._live
    assert live is not None
    live.beat()
    assert backend.live_processes == n


@pytest.mark.servers
def test_the_fallback_takes_one_over_the_live_processes(server: RedisServer) -> None:
    clock = ManualClock(1_000.0)
    backend = RedisBackend.from_url(server.url, on_unavailable="local", local_share="auto")
    assert backend.fallback_share() == UNCOUNTED_SHARE
    limiter = TokenBucket(20, 200, backend=backend, name="auto", clock=clock)
    wait_for(lambda: backend.live_processes == 1)  # the first beat, made at once
    others_alive(server.url, "b", "c", "d")
    counted(backend, 4)
    assert backend.fallback_share() == 0.25
    server.stop()
    # A quarter of the burst and of the rate: 5 at once, then one every 20 ms.
    assert sum(limiter.try_acquire() for _ in range(20)) == 5
    assert limiter.acquire() == pytest.approx(0.02)
    clock.advance(1)
    # A request heavier than the share (5 of 20) counts as the whole share.
    assert limiter.try_acquire(20)
    assert not limiter.try_acquire()
    assert backend.stats().fell_back == 23
    backend.close()


@pytest.mark.servers
def test_four_processes_falling_back_together_keep_the_shared_burst(server: RedisServer) -> None:
    # The four are four backends of this process, each told it is one of four.
    clock = ManualClock(1_000.0)
    others_alive(server.url, "b", "c", "d")
    backends = [RedisBackend.from_url(server.url, on_unavailable="local", local_share="auto") for _ in range(4)]
    limiters = [TokenBucket(20, 200, backend=backend, name="shared", clock=clock) for backend in backends]
    for backend in backends:
        counted(backend, 4)
    server.stop()
    assert sum(limiter.try_acquire() for limiter in limiters for _ in range(20)) == 20
    for backend in backends:
        backend.close()


@pytest.mark.servers
def test_the_share_changes_with_the_count_between_outages(server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live_module, "LIVE_TTL", 0.3)  # a beat every 0.1 s
    clock = ManualClock(1_000.0)
    backend = RedisBackend.from_url(server.url, on_unavailable="local", local_share="auto")
    limiter = TokenBucket(20, 200, backend=backend, name="changes", clock=clock)
    others_alive(server.url, "b", "c", "d")
    counted(backend, 4)
    server.stop()
    assert sum(limiter.try_acquire() for _ in range(20)) == 5
    # The count is kept while Redis is down, so the fallback keeps its state.
    time.sleep(0.1)
    assert backend.fallback_share() == 0.25
    assert not limiter.try_acquire()
    server.start()  # an empty server: the others are gone, this process alone beats
    # The count of 4 stands for three beats and a ttl (see KEPT_BEATS), then falls.
    wait_for(lambda: backend.live_processes == 1)
    server.stop()
    assert sum(limiter.try_acquire() for _ in range(20)) == 20  # the whole budget
    backend.close()


@pytest.mark.servers
def test_a_restart_does_not_make_the_count_fall_within_its_period(server: RedisServer) -> None:
    # After a restart the set holds only the processes that beat since: a second
    # outage within that period must not find this process counting only itself.
    clock = ManualClock(1_000.0)
    backend = RedisBackend.from_url(server.url, on_unavailable="local", local_share="auto")
    limiter = TokenBucket(20, 200, backend=backend, name="restart", clock=clock)
    others_alive(server.url, "b", "c", "d")
    counted(backend, 4)
    server.stop()
    server.start()  # empty: only this process has beaten since
    counted(backend, 4)
    server.stop()
    assert backend.fallback_share() == 0.25
    assert sum(limiter.try_acquire() for _ in range(20)) == 5
    backend.close()


@pytest.mark.servers
def test_a_composite_and_a_budget_with_priorities_fall_back_at_the_share(server: RedisServer) -> None:
    clock = ManualClock(1_000.0)
    backend = RedisBackend.from_url(server.url, on_unavailable="local", local_share="auto")
    composite = Composite([TokenBucket(8, 100), SlidingWindow(40, 10)], backend=backend, name="both", clock=clock)
    # Lanes of TokenBucket(20, 10) at low_share=0.8: high 4, low 16; half of each here.
    lanes = TokenBucket(20, 10, low_share=0.8, backend=backend, name="lanes", clock=clock)
    others_alive(server.url, "b")
    counted(backend, 2)
    server.stop()
    assert sum(composite.try_acquire() for _ in range(10)) == 4
    assert [lanes.low.try_acquire() for _ in range(10)] == [True] * 9 + [False]
    assert [lanes.try_acquire() for _ in range(2)] == [True, False]
    backend.close()


@pytest.mark.servers
def test_the_async_path_falls_back_at_the_share(server: RedisServer) -> None:
    clock = ManualClock(1_000.0)
    backend = RedisBackend.from_url(server.url, on_unavailable="local", local_share="auto")
    limiter = TokenBucket(8, 100, backend=backend, name="async", clock=clock)
    others_alive(server.url, "b", "c", "d")
    counted(backend, 4)
    server.stop()

    async def scenario() -> int:
        granted = sum([await limiter.try_acquire_async() for _ in range(8)])
        await backend.aclose()
        return granted

    assert asyncio.run(scenario()) == 2


@pytest.mark.servers
def test_a_process_that_never_counted_falls_back_at_the_uncounted_share() -> None:
    # Redis down from the start: no count, a tenth of the budget (not all of it).
    with RedisServer() as server:
        url = server.url
    clock = ManualClock(1_000.0)
    backend = RedisBackend.from_url(url, on_unavailable="local", local_share="auto")
    limiter = TokenBucket(20, 200, backend=backend, name="never", clock=clock)
    assert sum(limiter.try_acquire() for _ in range(20)) == 2
    assert backend.live_processes is None
    backend.close()


@pytest.mark.servers
def test_close_stops_beating_and_leaves_the_set(server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live_module, "LIVE_TTL", 0.3)
    client = redis.Redis.from_url(server.url)
    backend = RedisBackend.from_url(server.url, on_unavailable="local", local_share="auto")
    TokenBucket(5, 1, backend=backend, name="closing")
    wait_for(lambda: client.zscore(LIVE_KEY, process_id()) is not None)
    beating = [t for t in threading.enumerate() if t.name == "ratelimit-live"]
    assert beating
    backend.close()
    assert client.zscore(LIVE_KEY, process_id()) is None
    wait_for(lambda: not any(t.is_alive() for t in beating))
    client.close()


@pytest.mark.servers
def test_a_float_share_keeps_its_meaning_and_never_beats(server: RedisServer) -> None:
    client = redis.Redis.from_url(server.url)
    backend = RedisBackend.from_url(server.url, on_unavailable="local", local_share=0.5)
    limiter = TokenBucket(4, 10, backend=backend, name="fixed", clock=ManualClock(1_000.0))
    assert limiter.try_acquire()
    assert backend.local_share == 0.5
    assert backend.fallback_share() == 0.5
    assert backend.live_processes is None
    assert client.exists(LIVE_KEY) == 0
    client.close()
    backend.close()


# -- fork safety ---------------------------------------------------------------------


@pytest.mark.servers
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork() with threads running, on purpose
def test_a_forked_child_beats_under_its_own_id(server: RedisServer) -> None:
    backend = RedisBackend.from_url(server.url, on_unavailable="local", local_share="auto")
    limiter = TokenBucket(100, 100, backend=backend, name="fork")
    wait_for(lambda: backend.live_processes == 1)  # the parent's thread runs at the fork
    parent = process_id()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.close(read)
            before = backend.live_processes
            limiter.try_acquire()  # the child's first script call starts its beat
            wait_for(lambda: backend.live_processes is not None)
            said = {"id": process_id(), "before": before, "count": backend.live_processes}
            os.write(write, json.dumps(said).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    try:
        with os.fdopen(read) as pipe:
            said = json.loads(pipe.read())
    finally:
        _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert said["id"] != parent
    assert said["before"] is None  # the parent's count is not the child's
    assert said["count"] == 2  # the parent and the child
    client = redis.Redis.from_url(server.url)
    assert client.zscore(LIVE_KEY, parent) is not None
    assert client.zscore(LIVE_KEY, said["id"]) is not None
    client.close()
    counted(backend, 2)
    backend.close()


# -- bad values ----------------------------------------------------------------------


@pytest.mark.parametrize("value", ["sometimes", "AUTO", "", "0.5"])
def test_a_share_that_is_neither_a_number_nor_auto_is_refused(value: str) -> None:
    with pytest.raises(TypeError, match="local_share") as caught:
        RedisBackend(fakeredis.FakeRedis(), on_unavailable="local", local_share=value)  # type: ignore[arg-type]
    assert repr(value) in str(caught.value)
    assert "'auto'" in str(caught.value)
    with pytest.raises(TypeError, match="local_share"):
        RedisBackend.from_url("redis://127.0.0.1:1/0", local_share=value)  # type: ignore[arg-type]


def test_auto_needs_a_synchronous_client() -> None:
    with pytest.raises(TypeError, match="local_share='auto' needs a synchronous client"):
        RedisBackend(redis.asyncio.Redis(), on_unavailable="local", local_share="auto")


# -- the cost: no round trip per acquire, one call per beat --------------------------


class CountingRedis(redis.Redis):
    """A client that counts its script calls by SHA, and its function calls by name."""

    def __init__(self, port: int) -> None:
        super().__init__(host="127.0.0.1", port=port, socket_timeout=1)
        self.calls: dict[str, int] = {}

    def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> Any:
        self.calls[sha] = self.calls.get(sha, 0) + 1
        return super().evalsha(sha, numkeys, *keys_and_args)

    def fcall(self, function: str, numkeys: int, *keys_and_args: Any) -> Any:
        # Counted once answered: the first call to a server without the library is
        # answered "Function not found", loads it and is sent again.
        reply = super().fcall(function, numkeys, *keys_and_args)
        self.calls[function] = self.calls.get(function, 0) + 1
        return reply

    def count(self, script: Script) -> int:
        return self.calls.get(script.sha, 0) + self.calls.get(str(script.function), 0)


@pytest.mark.servers
def test_the_beat_costs_no_round_trip_per_acquire(server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live_module, "LIVE_TTL", 0.3)  # a beat every 0.1 s
    client = CountingRedis(server.port)
    backend = RedisBackend(client, on_unavailable="local", local_share="auto")
    limiter = TokenBucket(1_000_000, 1_000_000, backend=backend, name="cost")
    started = time.monotonic()
    acquires = 0
    while time.monotonic() - started < 1.0:
        limiter.acquire()
        acquires += 1
    elapsed = time.monotonic() - started
    backend.close()
    assert client.count(single_script("token_bucket")) == acquires
    beats = client.count(live_script())
    # One beat at the start, one per interval, and the leave on close.
    assert 2 <= beats <= elapsed / 0.1 + 3
