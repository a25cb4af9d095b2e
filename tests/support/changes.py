"""Run-time changes among decisions, run through Redis and through a SQLite file alike
(``stores/test_run_time_limits.py``, its SQLite part): the steps, the limiters they
are drawn for, and the runner whose answers the two stores must agree on."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from ratelimit import LeakyBucket, ManualClock, Quota, RedisBackend, SlidingWindow, SQLiteBackend, TokenBucket

from conftest import unique_name

#: ("advance", seconds) | ("reserve", tokens, max_wait) | ("refund", which, named) |
#: ("charge", tokens) | ("set", rate, burst, ttl) | ("reset",) |
#: ("restrict", remaining, seconds) | ("peek", tokens). A peek writes nothing in either
#: store: once a change for a while has ended, both read the state not yet moved back
#: to the code's limit, and leave the move to the next decision.
Step = tuple[Any, ...]

#: The limiters drawn for: a window and a quota have no burst, so their changes set the
#: rate alone (see `for_kind`).
KINDS: dict[str, Callable[[], Any]] = {
    "token": lambda: TokenBucket(8, 2),
    "leaky": lambda: LeakyBucket(8, 2),
    "window": lambda: SlidingWindow(8, 4, guard=0),
    "counter": lambda: SlidingWindow(8, 4, guard=0, approximate=True),
    # (Minutes from Unix time 1000: the steps cross their boundaries.)
    "quota": lambda: Quota(8, "minute"),
}


def for_kind(kind: str, steps: list[Step]) -> list[Step]:
    """``steps`` as a limiter of ``kind`` takes them: a window's and a quota's changes,
    the rate alone."""
    if kind not in ("window", "counter", "quota"):
        return steps
    return [("set", step[1] or 1.0, None, step[3]) if step[0] == "set" else step for step in steps]


def steps(
    rates: Sequence[float | None], bursts: Sequence[float | None], *, refunds: bool = False, most: int = 30
) -> st.SearchStrategy[list[Step]]:
    """Random steps: advances, reserves, peeks, changes (of ``rates`` and ``bursts``,
    for a while or not), resets and restrictions; refunds and charges too with
    ``refunds``."""
    drawn: list[st.SearchStrategy[Step]] = [
        st.tuples(st.just("advance"), st.sampled_from([0.0, 0.01, 0.1, 0.3, 1.0, 2.5])),
        st.tuples(st.just("reserve"), st.sampled_from([1.0, 1.0, 2.0, 5.0]), st.sampled_from([0.0, 1.0, math.inf])),
        st.tuples(
            st.just("set"), st.sampled_from(rates), st.sampled_from(bursts), st.sampled_from([None, None, 0.2, 1.5])
        ).filter(lambda s: s[1] is not None or s[2] is not None),
        st.tuples(st.just("peek"), st.sampled_from([1.0, 5.0])),
        st.tuples(st.just("reset")),
        st.tuples(st.just("restrict"), st.sampled_from([0.0, 1.0, 3.0]), st.sampled_from([0.5, 2.0])),
    ]
    if refunds:
        drawn += [
            st.tuples(st.just("refund"), st.integers(0, 9), st.booleans()),
            st.tuples(st.just("charge"), st.sampled_from([1.0, 3.0])),
        ]
    return st.lists(st.one_of(*drawn), min_size=1, max_size=most)


def decisions(backends: list[Any], alg: Any, steps: list[Step]) -> list[Any]:
    """The steps' answers: changes made through the last of ``backends`` (processes,
    for a file), decisions taking turns among the others (or made by the one). A
    refund gives back one of the grants made so far, named by its time or not."""
    clock = ManualClock(1_000.0)
    name = unique_name("in-a-row")
    handles = [each.bind(name, alg, clock) for each in backends[:-1] or backends]
    backend = backends[-1]
    out: list[Any] = []
    granted: list[tuple[float, float]] = []
    for i, (kind, *args) in enumerate(steps):
        handle = handles[i % len(handles)]
        if kind == "advance":
            clock.advance(args[0])
        elif kind == "reserve":
            wait, at = handle.reserve(args[0], args[1])
            out.append((wait, float(at)))
            if wait >= 0:
                granted.append((float(at), args[0]))
        elif kind == "refund":
            if granted:
                at, tokens = granted.pop(args[0] % len(granted))
                handle.refund(tokens, at if args[1] else None)
        elif kind == "charge":
            charged = handle.charge(args[0])
            out.append(None if charged is None else float(charged))
        elif kind == "set":
            backend.set_limit(name, rate=args[0], burst=args[1], ttl=args[2], clock=clock)
        elif kind == "reset":
            out.append(backend.reset_limit(name, clock=clock))
        elif kind == "restrict":
            handle.restrict(args[0], args[1])
        else:
            out.append(handle.peek(args[0]))
    return out


def through_both(path: Path, redis_client: Any, alg: Any, steps: list[Step]) -> list[Any]:
    """The decisions through Redis, held equal to those through the file: of one
    process, and of two taking turns while a third makes the changes."""
    want = decisions([RedisBackend(redis_client, coalesce=False)], alg, steps)
    assert decisions([SQLiteBackend(path)], alg, steps) == want
    assert decisions([SQLiteBackend(path) for _ in range(3)], alg, steps) == want
    return want
