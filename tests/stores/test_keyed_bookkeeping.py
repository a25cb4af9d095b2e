"""What a keyed budget (``for_key``) leaves in a store lasts about as long as its state.

An endpoint keyed by client address meets spoofed and random keys: each one's state
expires in seconds, and what is written beside it (what the code says, the counters of
``ratelimit top``, a SQLite file's rows) must go within about a minute of it, never
stay for a day. A limiter name's own record is still kept a day.
"""

from __future__ import annotations

import random
import sqlite3
import time
from collections import Counter
from pathlib import Path

import pytest
import redis

from ratelimit import RedisBackend, SQLiteBackend, TokenBucket

from conftest import unique_name

KEYS = 1000
#: The most a keyed record outlives its state (CODE_PAST_STATE_MS in lua/_single.lua),
#: and the counters' keep (TOP_KEPT_MS in lua/_top.lua), in milliseconds.
CODE_PAST_STATE_MS = 60_000
TOP_KEPT_MS = 70_000
DAY_MS = 86_400_000


def random_keys(count: int, seed: int) -> list[str]:
    """Distinct addresses, as a spoofing client sends them."""
    rng = random.Random(seed)
    keys: set[str] = set()
    while len(keys) < count:
        keys.add(".".join(str(rng.randrange(256)) for _ in range(4)))
    return sorted(keys)


def roots(client: redis.Redis, name: str) -> dict[str, dict[str, int]]:
    """Each key of limiter ``name``'s keyed budgets by what it is (the state, ``code``,
    ``top``): its key's PTTL per Redis key."""
    found: dict[str, dict[str, int]] = {}
    for raw in client.scan_iter(match=f"ratelimit:{{{name}%/*", count=1000):
        key = raw.decode()
        root = key.partition("}:")[2]
        what = "top" if ":top:" in root else root
        found.setdefault(what, {})[key] = int(client.pttl(key))
    return found


@pytest.mark.redis
def test_random_keys_leave_nothing_behind_for_longer_than_a_minute(redis_client: redis.Redis) -> None:
    name = unique_name("spoofed")
    backend = RedisBackend(redis_client)
    limiter = TokenBucket(1, 1000, backend=backend, name=name)  # each state lasts a millisecond
    for key in random_keys(KEYS, seed=38):
        assert limiter.for_key(key).try_acquire()
    found = roots(redis_client, name)
    assert set(found) == {"token_bucket", "code", "top"}
    # Each state lasts its second of margin (see test_key_ttls.py); what outlives them
    # all is one record and at most one second's counters per key, gone within about a
    # minute (Redis expires keys by their TTL: read, rather than slept through).
    states_gone = max(found["token_bucket"].values())
    assert 0 < states_gone <= 1_100
    left = {key: ttl for keys in found.values() for key, ttl in keys.items() if ttl > states_gone}
    assert len(left) <= 2 * KEYS
    assert all(0 < ttl <= TOP_KEPT_MS for ttl in left.values())
    assert len(found["code"]) == KEYS
    assert max(found["code"].values()) <= CODE_PAST_STATE_MS + 1_100
    redis_client.delete(*(key for keys in found.values() for key in keys))


@pytest.mark.redis
def test_a_keyed_record_lasts_as_long_as_its_state_and_a_minute(redis_client: redis.Redis) -> None:
    name = unique_name("slow-key")
    limiter = TokenBucket(10, 0.01, backend=RedisBackend(redis_client), name=name)  # 100 s a token
    view = limiter.for_key("tenant-7")
    assert view.try_acquire(5)
    found = roots(redis_client, name)
    ((state_ttl,),) = (found["token_bucket"].values(),)
    ((code_ttl,),) = (found["code"].values(),)
    assert 499_000 <= state_ttl <= 501_000
    assert abs(code_ttl - (state_ttl + CODE_PAST_STATE_MS)) <= 250  # (two reads, milliseconds apart)
    redis_client.delete(*(key for keys in roots(redis_client, name).values() for key in keys))


@pytest.mark.redis
def test_a_names_own_record_is_kept_a_day(redis_client: redis.Redis) -> None:
    name = unique_name("named")
    backend = RedisBackend(redis_client)
    assert TokenBucket(1, 1000, backend=backend, name=name).try_acquire()
    assert DAY_MS - 5_000 <= int(redis_client.pttl(f"ratelimit:{{{name}}}:code")) <= DAY_MS
    assert backend.inspect(name).known


@pytest.mark.redis
def test_inspect_reads_a_keyed_budget_while_its_state_lives(redis_client: redis.Redis) -> None:
    name = unique_name("inspected")
    backend = RedisBackend(redis_client)
    view = TokenBucket(10, 0.01, backend=backend, name=name).for_key("tenant-7")
    assert view.try_acquire(4)
    seen = backend.inspect(name, key="tenant-7")
    assert seen.known
    assert seen.available == pytest.approx(6, abs=0.01)


@pytest.mark.redis
def test_without_counters_a_key_leaves_only_its_record(redis_client: redis.Redis) -> None:
    name = unique_name("uncounted")
    limiter = TokenBucket(1, 1000, backend=RedisBackend(redis_client, counters=False), name=name)
    for key in random_keys(100, seed=4):
        assert limiter.for_key(key).try_acquire()
    found = roots(redis_client, name)
    assert set(found) == {"token_bucket", "code"}
    assert len(found["code"]) == 100
    assert max(found["code"].values()) <= CODE_PAST_STATE_MS + 1_100
    redis_client.delete(*(key for keys in found.values() for key in keys))


def _counts(path: Path) -> Counter[str]:
    conn = sqlite3.connect(path)
    try:
        return Counter(
            {
                table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                for table in ("ratelimit_state", "ratelimit_code", "ratelimit_top", "ratelimit_config")
            }
        )
    finally:
        conn.close()


def test_random_keys_leave_no_rows_once_swept_in_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "keys.db"
    backend = SQLiteBackend(path)
    limiter = TokenBucket(1, 1000, backend=backend, name="spoofed")
    for key in random_keys(KEYS, seed=38):
        assert limiter.for_key(key).try_acquire()
    backend.write_counts()
    rows = _counts(path)
    assert rows["ratelimit_state"] == rows["ratelimit_code"] == KEYS
    # The counters of `top` are the limiter's, one row a second, whatever its keys.
    assert 1 <= rows["ratelimit_top"] <= 60
    (row,) = backend.top(window=60, now=backend.now() + 1)
    assert row.name == "spoofed"
    assert row.grants_per_sec == pytest.approx(KEYS / 60)
    time.sleep(0.01)  # every state is whole again
    assert backend.sweep() == KEYS
    rows = _counts(path)
    assert rows["ratelimit_state"] == rows["ratelimit_code"] == rows["ratelimit_config"] == 0
