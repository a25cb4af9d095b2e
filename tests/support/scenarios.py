"""Scenarios shared by the suites that hold a store to the pure algorithms' decisions
(the Lua scripts in ``algorithms/test_conformance.py``, the SQLite file in
``stores/test_sqlite_store.py``): the algorithms, random requests, and how a step's
answer is compared and given back."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import strategies as st

from ratelimit._algorithms.algorithm import Algorithm
from ratelimit._algorithms.leaky_bucket import LeakyQueue
from ratelimit._algorithms.quota import Calendar, CalendarQuota
from ratelimit._algorithms.sliding_window import WindowLog
from ratelimit._algorithms.sliding_window_counter import WindowCounter
from ratelimit._algorithms.token_bucket import Allowance, Gcra

ALGORITHMS: dict[str, Any] = {
    # (Refilled at no rate, a token bucket is an allowance.)
    "token_bucket": lambda a, b: Gcra(a, b) if b else Allowance(a),
    "leaky_bucket": lambda a, b: LeakyQueue(a, b),
    "sliding_window": lambda a, b: WindowLog(a, b),
    "sliding_window_counter": lambda a, b: WindowCounter(a, b),
    # Minutes (the scenarios' steps cross their boundaries); the second number unused.
    "quota": lambda a, b: CalendarQuota(a, Calendar("minute", "UTC")),
}

# (time step, tokens, max_wait, what to give back, restriction (remaining, seconds) or
# None, tokens charged after the request (0: none), which members of a composite are
# given 0 (a bit mask; ignored when it would zero them all, and by a single limiter))
# What to give back: nothing; this grant (a refund, or withdrawing it while it is the
# last one queued); the earliest reservation still ahead (a hole mid-queue); or half
# of the latest grant already due, named (a settle whose call used less, with grants
# queued behind it: a token bucket's hole past its time).
Request = tuple[float, float, float, str, "tuple[float, float] | None", float, int]
requests = st.lists(
    st.tuples(
        st.sampled_from([0.0, 0.0, 0.001, 0.1, 0.25, 0.5, 1.0, 3.0]),
        st.sampled_from([1.0, 1.0, 1.0, 2.0, 3.0]),
        st.sampled_from([0.0, 0.5, 2.0, math.inf]),
        st.sampled_from(["keep", "keep", "this", "earliest", "due"]),
        st.one_of(
            st.none(),
            st.none(),
            st.none(),
            st.tuples(st.sampled_from([0.0, 1.0, 2.0, 50.0]), st.sampled_from([0.5, 2.0, 30.0])),
        ),
        st.sampled_from([0.0, 0.0, 0.0, 0.0, 0.5, 1.0, 2.0, 5.0]),
        st.sampled_from([0, 0, 0, 0, 1, 2, 4, 8, 5, 10, 3, 12, 7]),
    ),
    min_size=1,
    max_size=40,
)


def same(got: tuple[float, float], want: tuple[float, float]) -> None:
    """Equal decisions, and the grant named alike (``GrantTime``)."""
    assert got == want
    assert repr(got[1]) == repr(want[1]), (got[1], want[1])


def take_back(back: str, pending: list[tuple[float, float]], now: float) -> tuple[float, Any] | None:
    """The grant a scenario step gives back, taken off ``pending``."""
    ahead = [i for i, (at, _) in enumerate(pending) if at > now]
    if back == "this" and pending:
        return pending.pop()
    if back == "earliest" and ahead:
        return pending.pop(ahead[0])
    due = [i for i, (at, _) in enumerate(pending) if at <= now]
    if back == "due" and due:
        at, n = pending.pop(due[-1])
        return at, [w / 2 for w in n] if isinstance(n, list) else n / 2
    return None


def member_weights(algs: list[Algorithm[Any]], tokens: float, zeros: int) -> list[float]:
    """``tokens`` for every member (at most its largest request), 0 for those whose
    bit is set in ``zeros`` unless that is all of them."""
    weights = [0.0 if zeros >> i & 1 else min(tokens, alg.most) for i, alg in enumerate(algs)]
    return weights if any(weights) else [min(tokens, alg.most) for alg in algs]
