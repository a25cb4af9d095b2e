"""The fleet's counters (``count_one`` and ``count_decided`` in ``lua/_top.lua``, read
by ``_stores/redis/fleet.py``) and ``ratelimit top``, the live view, driven in a
pseudo-terminal."""

from __future__ import annotations

import json
import math
import os
import pty
import select
import subprocess
import sys
import time
from typing import Any, cast

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st

from ratelimit import CircuitBreaker, ManualClock, RedisBackend, TokenBucket
from ratelimit._stores.keys import key_for
from ratelimit._stores.records import WAIT_BOUNDS, p99_wait
from ratelimit._stores.redis.fleet import base_of, fleet, flush_counts
from ratelimit._stores.redis.scripts import single_script
from ratelimit.cli import main

from conftest import REDIS_URL, SUPPORT, unique_name


def fields(client: redis.Redis, key: str) -> dict[str, float]:
    """A counters key as `top` reads it: the counts held in Lua written first."""
    flush_counts(client, [base_of(key)])
    raw = cast("dict[bytes, bytes]", client.hgetall(key))
    return {k.decode(): float(v) for k, v in raw.items()}


def counters(client: redis.Redis, name: str, second: int, injected: bool = True) -> dict[str, float]:
    return fields(client, key_for(name, "token_bucket", injected=injected) + f":top:{second}")


def test_the_script_counts_grants_refusals_waits_and_pauses(redis_client: redis.Redis) -> None:
    clock = ManualClock(1000.25)
    name = unique_name("tally")
    backend = RedisBackend(redis_client, coalesce=False)
    limiter = TokenBucket(3, 10, backend=backend, name=name, clock=clock)
    assert [limiter.try_acquire() for _ in range(5)] == [True, True, True, False, False]
    limiter.acquire()  # waits 0.1 s: the bucket refills at 10/s
    limiter.feedback({"Retry-After": "5"}, 429)
    seen = counters(redis_client, name, 1000)
    # w1: no wait (<= 0 s); w8: up to 0.1 s.
    assert seen == {"r": 2.0, "w1": 3.0, "w8": 1.0, "p": 1.0}
    clock.advance(1.0)
    assert limiter.try_acquire() is False  # paused
    assert counters(redis_client, name, 1001) == {"r": 1.0}
    ttl = redis_client.pttl(key_for(name, "token_bucket", injected=True) + ":top:1001")
    assert 60_000 < ttl <= 70_000
    backend.close()


def test_a_round_counts_each_request_and_the_lease(redis_client: redis.Redis) -> None:
    name = unique_name("round")
    base = key_for(name, "token_bucket")
    # A batch of three requests on an empty bucket of 2, then a lease that cannot fit.
    args = ["batch", "2000.5", "", "", "2", "1", "0", "0", "4", "1", "1", "0", "1", "0", "1", "0"]
    reply = single_script("token_bucket")(redis_client, [base], args)
    assert [float(x) for x in reply[0::3][:3]] == [0.0, 0.0, -1.0]  # (wait, at, name) each
    seen = fields(redis_client, base + ":top:2000")
    assert seen == {"r": 1.0, "w1": 2.0}
    # With slack, the lease is counted in tokens.
    reply = single_script("token_bucket")(
        redis_client, [base], ["batch", "2010.5", "", "", "100", "1", "0", "0", "8", "1"]
    )
    assert float(reply[-2]) == 8.0
    seen = fields(redis_client, base + ":top:2010")
    assert seen == {"l": 8.0}


@given(st.dictionaries(st.integers(1, len(WAIT_BOUNDS) + 1), st.integers(0, 1000), min_size=1))
def test_p99_is_the_bound_where_99_percent_of_waits_are_reached(buckets: dict[int, int]) -> None:
    counts = {k: float(v) for k, v in buckets.items()}
    got = p99_wait(counts)
    total = sum(counts.values())
    if total == 0:
        assert got is None
        return
    assert got is not None
    index = len(WAIT_BOUNDS) + 1 if math.isinf(got) else WAIT_BOUNDS.index(got) + 1
    below = sum(v for k, v in counts.items() if k < index)
    upto = below + counts.get(index, 0.0)
    assert upto >= 0.99 * total
    assert below < 0.99 * total


def server_now(client: redis.Redis) -> float:
    seconds, micros = client.time()
    return float(seconds) + micros / 1e6


def test_fleet_adds_up_every_process_and_shows_a_breaker(redis_client: redis.Redis) -> None:
    name = unique_name("fleet")
    backends = [RedisBackend(redis.Redis.from_url(REDIS_URL), coalesce=False) for _ in range(2)]
    limiters = [TokenBucket(3, 0.001, backend=b, name=name) for b in backends]
    results = [lim.try_acquire() for lim in limiters for _ in range(4)]
    assert results.count(True) == 3
    breaker = CircuitBreaker(min_calls=1, backend=backends[0], name=name)
    breaker.record(breaker.allow(), False)
    # As seen a second later: the second of these decisions is then a whole one.
    rows = [row for row in fleet(redis_client, window=2, now=server_now(redis_client) + 1.0) if row.name == name]
    assert len(rows) == 1
    row = rows[0]
    assert row.kind == "token_bucket"
    assert row.grants_per_sec == pytest.approx(3 / 2)
    assert row.refusals_per_sec == pytest.approx(5 / 2)
    assert row.p99_wait == 0.0
    assert row.breaker == "open"
    for b in backends:
        b.close()


def test_top_json_snapshot_labels_a_shadow(redis_client: redis.Redis, capsys: pytest.CaptureFixture[str]) -> None:
    name = unique_name("snap")
    backend = RedisBackend.from_url(REDIS_URL, coalesce=False)
    limiter = TokenBucket(2, 0.001, backend=backend, name=name, shadow=True)
    limiter.try_acquire()
    limiter.feedback({"Retry-After": "30"}, 429)
    assert main(["top", "--redis", REDIS_URL, "--json"]) == 0
    snapshot = json.loads(capsys.readouterr().out)
    (row,) = [r for r in snapshot["limiters"] if r["name"] == name]
    assert row["pauses_last_minute"] == 1
    assert 25 < row["paused_for"] <= 30
    assert row["shadow"] is True
    assert backend.inspect(name).shadow
    # An enforced process of the same name decides next: the label follows it.
    TokenBucket(2, 0.001, backend=backend, name=name).try_acquire()
    assert not backend.inspect(name).shadow
    backend.close()


def read_screen(fd: int, until: float) -> str:
    out = b""
    while time.time() < until:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    return out.decode(errors="replace")


@pytest.mark.slow
def test_top_redraws_a_terminal_with_live_processes(redis_client: redis.Redis) -> None:
    name = unique_name("top")
    # A live worker: 2 threads acquiring a TokenBucket(5, 100) for 6 s.
    worker = subprocess.Popen(
        [sys.executable, str(SUPPORT / "shared_worker.py"), REDIS_URL, name, "5", "100",
         "2", "6"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    time.sleep(3.0)
    master, slave = pty.openpty()
    top = subprocess.Popen(
        [sys.executable, "-m", "ratelimit", "top", "--redis", REDIS_URL, "--interval", "0.5", "--iterations", "3",
         "--window", "2"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        close_fds=True,
    )  # fmt: skip
    os.close(slave)
    screen = read_screen(master, time.time() + 20)
    assert top.wait(timeout=20) == 0
    os.close(master)
    worker.communicate(timeout=30)
    # Redrawn in place, three times: clear and home, like top.
    assert screen.count("\x1b[H\x1b[2J") == 3
    last = screen.rsplit("\x1b[H\x1b[2J", 1)[1]
    assert "GRANTS/S" in last
    (line,) = [ln for ln in last.splitlines() if ln.startswith(name)]
    fields: list[Any] = line.split()
    grants = float(fields[2])
    assert 70 <= grants <= 110, line  # 100/s across the worker's threads


def test_composites_and_priorities_are_counted_as_one_limiter_each(redis_client: redis.Redis) -> None:
    from ratelimit import Composite, SlidingWindow

    name = unique_name("kinds")
    backend = RedisBackend(redis_client, coalesce=False)
    composite = Composite([TokenBucket(2, 0.001), SlidingWindow(10, 60)], backend=backend, name=name + "-c")
    lanes = TokenBucket(4, 0.001, backend=backend, name=name + "-p", low_share=0.5, borrow=False)
    assert [composite.try_acquire() for _ in range(3)] == [True, True, False]
    assert [lanes.low.try_acquire() for _ in range(3)] == [True, True, False]
    lanes.feedback({"Retry-After": "10"}, 429)
    rows = {row.name: row for row in fleet(redis_client, window=2, now=server_now(redis_client) + 1.0)}
    assert rows[name + "-c"].kind == "composite"
    assert rows[name + "-c"].grants_per_sec == pytest.approx(1.0)
    assert rows[name + "-c"].refusals_per_sec == pytest.approx(0.5)
    assert rows[name + "-p"].kind == "priorities"
    assert rows[name + "-p"].grants_per_sec == pytest.approx(1.0)
    assert rows[name + "-p"].pauses == 1
    backend.close()


@pytest.mark.slow
def test_reservations_withdrawn_are_not_counted_as_grants(redis_client: redis.Redis) -> None:
    """``asyncio.wait_for`` timeouts give their reservations back: those requests never
    went, and ``top`` must not show them as grants (it showed 12 times what went)."""
    import asyncio

    name = unique_name("withdrawn")
    backend = RedisBackend(redis.Redis.from_url(REDIS_URL), coalesce=False)
    limiter = TokenBucket(1, 2, backend=backend, name=name)

    async def main() -> int:
        async def one() -> bool:
            try:
                await asyncio.wait_for(limiter.acquire_async(), 0.05)
            except TimeoutError:
                return False
            return True

        went = await asyncio.gather(*(one() for _ in range(40)))
        # The calls they left go on, shielded, and give back what lands: let them end
        # before the loop closes (asyncio.run would cancel them, and what they held would
        # be spent, not given back).
        while True:
            await asyncio.sleep(0)  # a landed grant's give-back starts from a callback
            if not (pending := asyncio.all_tasks() - {asyncio.current_task()}):
                break
            await asyncio.wait(pending)
        return sum(went)

    went = asyncio.run(main())
    base = key_for(name, "token_bucket")
    keys = [key.decode() for key in redis_client.scan_iter(match=f"{base}:top:*", count=1000)]
    granted = sum(v for key in keys for f, v in fields(redis_client, key).items() if f.startswith("w"))
    withdrawn = sum(fields(redis_client, key).get("c", 0.0) for key in keys)
    # Each call that reached the server was promised a time (on a loaded machine a
    # 50 ms timeout can end a call before it is sent: that one promised nothing).
    assert went < granted <= 40
    # All but those that went were given back; but a grant at once whose caller timed
    # out after it landed is due by the time its give-back arrives (a loaded machine),
    # and a due grant is spent, not withdrawn: at most one here (capacity 1).
    assert went <= granted - withdrawn <= went + 1
    rows = [row for row in fleet(redis_client, window=5, now=server_now(redis_client) + 1.0) if row.name == name]
    assert rows[0].grants_per_sec == pytest.approx((granted - withdrawn) / 5)
    assert rows[0].withdrawn_per_sec == pytest.approx(withdrawn / 5)
    backend.close()
