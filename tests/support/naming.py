"""What the tests of named give-backs share: callers in contexts of their own, a limiter
that names its grants, a reservation queued behind by another worker, the memory
store beside the script at one time, and the bound no interval may exceed."""

from __future__ import annotations

import contextvars
import math
from collections.abc import Callable
from typing import Any

import fakeredis

from ratelimit import ManualClock, MemoryBackend, RedisBackend
from ratelimit._algorithms.algorithm import EPSILON, Algorithm
from ratelimit._stores.keys import key_for
from ratelimit._stores.redis.handles import RedisGroupHandle, RedisHandle

from conftest import unique_name


def run_in(context: contextvars.Context, call: Callable[..., Any], *args: Any) -> Any:
    """``call`` made by the caller whose context is ``context``."""
    return context.run(call, *args)


def naming(limiter: Any, tokens: Any = 1) -> Any:
    """A limiter remembers grants from its first give-back on (so that one that never
    gives back pays nothing for it): one that squares nothing starts it."""
    limiter.settle(tokens, tokens)
    return limiter


def queue_behind(limiter: Any, tokens: Any) -> float:
    """Another worker's reservation, queued behind (the store's call, no sleep)."""
    wait, _ = limiter._handle.reserve(tokens, math.inf)
    return float(wait)


class Now:
    """The time both stores decide at: the memory store's clock, the script's ``now``."""

    def __init__(self, value: float) -> None:
        self.clock = ManualClock(value)

    @property
    def value(self) -> float:
        return self.clock.now()

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def __call__(self) -> str:
        return repr(self.clock.now())


def pair(algs: list[Algorithm[Any]], now: Now, client: Any) -> tuple[Any, Any]:
    """The same limits on the memory store and on the script, at the same times."""
    clock = now.clock
    name = unique_name()
    if len(algs) == 1:
        memory: Any = MemoryBackend().bind(name, algs[0], clock)
        script: Any = RedisHandle(RedisBackend(client), algs[0], key_for(name, algs[0].kind), now, None)
    else:
        memory = MemoryBackend().bind_group(name, algs, clock)
        keys = [key_for(name, alg.kind, i) for i, alg in enumerate(algs)]
        script = RedisGroupHandle(RedisBackend(client), algs, keys, now, None)
    return memory, script


def assert_bound(sent: list[tuple[float, float]], capacity: float, rate: float) -> None:
    """No interval between two sends holds more than ``capacity + rate * its length``."""
    times = sorted({at for at, used in sent if used > EPSILON})
    for a in times:
        for b in times:
            if b >= a:
                inside = sum(used for at, used in sent if a - 1e-9 <= at <= b + 1e-9)
                assert inside <= capacity + rate * (b - a) + 1e-6, (a, b, inside, sorted(sent))


def decide_alike(buckets: list[Algorithm[Any]], members: int, scenario: list[Any]) -> None:
    """Grants, settles of a grant due (a share of it, the latest or the earliest) and
    withdrawals of one ahead, on the memory store and the script side by side: each
    decision the same, and each name, step by step."""
    algs = buckets[:members]
    now = Now(1_000.0)
    memory, script = pair(algs, now, fakeredis.FakeRedis())
    memory.name_grants()
    script.name_grants()
    grants: list[dict[str, Any]] = []
    for dt, tokens, then, fraction in scenario:
        now.advance(dt)
        want: Any = list(tokens[:members]) if any(tokens[:members]) else [1.0] * members
        if members == 1:
            want = want[0]
        decided = memory.reserve(want, math.inf)
        assert repr(script.reserve(want, math.inf)) == repr(decided)
        grants.append({"at": decided[1], "tokens": want, "done": False})
        due = [g for g in grants if g["at"] <= now.value and not g["done"]]
        ahead = [g for g in grants if g["at"] > now.value + EPSILON and not g["done"]]
        if then in ("latest", "earliest") and due:
            g = due[-1] if then == "latest" else due[0]
            back = g["tokens"] * fraction if members == 1 else [n * fraction for n in g["tokens"]]
            memory.refund(back, g["at"])
            script.refund(back, g["at"])
            g["done"] = True
        elif then == "withdraw" and ahead:
            g = ahead[0]
            memory.refund(g["tokens"], g["at"])
            script.refund(g["tokens"], g["at"])
            g["done"] = True
