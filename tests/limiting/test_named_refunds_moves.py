"""Give-backs larger requests can use: the queue behind a named give-back moves up.

A named give-back with reservations queued behind it leaves a hole, which requests
that fit in it take at once. A request larger than the holes queued behind the whole
line before, as if nothing came back: ``TokenBucket(10, 1)`` emptied by A's estimate,
B's request reserved behind it, A's ``settle(10, 1)``, and a request of 10 waited 11 s.
Now the queue behind the holes moves up into them (every grant still in its time and
its time + tolerance), and the request goes at the line's end: about 2 s, the 9 that
came back and what refills. Names given before a move are read where the move left
their slots (``holes._move_up``).
"""

from __future__ import annotations

import contextvars
import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from naming import Now, assert_bound, decide_alike, naming, pair, queue_behind, run_in

from ratelimit import Composite, ManualClock, TokenBucket
from ratelimit._algorithms.algorithm import EPSILON, Algorithm
from ratelimit._algorithms.holes import MOVE, GrantTime, Holes, give_back, plan, settle
from ratelimit._algorithms.token_bucket import Gcra

# -- through the stores ---------------------------------------------------------------


def test_a_request_larger_than_what_came_back_waits_for_it_and_what_refills(
    make: Callable[..., Any], clock: ManualClock
) -> None:
    """Issue 35: A takes the whole bucket at once, B is reserved behind it (1 s), A's
    call used 1 of its 10. A request of 10 waited 11 s (behind B, as if the 9 never came
    back); it waits 2 s: the 9, and 1 more refilled."""
    bucket = naming(make(TokenBucket, 10, 1))
    a = contextvars.copy_context()
    assert run_in(a, bucket.acquire, 10) == 0.0
    assert queue_behind(bucket, 1) == 1.0  # B
    run_in(a, bucket.settle, 10, 1)
    assert bucket.acquire(10) == pytest.approx(2.0)  # (the clock sleeps it: now 1002)
    # Nothing more: A's 1, B's 1 and these 10 are all the bucket allows until 1003.
    assert queue_behind(bucket, 1) == pytest.approx(1.0)


def test_a_grant_the_queue_moved_gives_back_where_it_now_sits(make: Callable[..., Any], clock: ManualClock) -> None:
    """B's place moved up into A's hole (from 11 to 2 on the line); B's settle names
    where its slot was when it was granted, which is read where the move left it: its
    token comes back, taken at once by the next request of 1 and by nothing more."""
    bucket = naming(make(TokenBucket, 10, 1))
    a, b = contextvars.copy_context(), contextvars.copy_context()
    run_in(a, bucket.acquire, 10)
    assert run_in(b, bucket.reserve, 1).wait == 1.0
    run_in(a, bucket.settle, 10, 1)
    assert queue_behind(bucket, 10) == pytest.approx(2.0)  # the queue moved up: B's slot too
    clock.advance(1.0)  # B's turn
    run_in(b, bucket.settle, 1, 0)  # B sent nothing
    assert bucket.try_acquire(1)  # B's token, at once
    assert not bucket.try_acquire(1)


def test_a_composite_moves_the_queue_of_its_tokens_limit(make: Callable[..., Any], clock: ManualClock) -> None:
    """The LLM budget: a call's estimate took the tokens limit at once, another call is
    reserved behind it, and the first used a tenth. A call as large as the first waits
    for what came back and what refills, not for the whole queue."""
    llm = naming(make(Composite, [TokenBucket(60, 1), TokenBucket(100, 10)]), [1, 1])
    a = contextvars.copy_context()
    assert run_in(a, llm.acquire, [1, 100]) == 0.0
    assert queue_behind(llm, [1, 10]) == pytest.approx(1.0)
    run_in(a, llm.settle, [1, 100], [1, 10])
    assert llm.acquire([1, 100]) == pytest.approx(2.0)  # was 11 s


def test_a_request_the_holes_hold_still_takes_them_at_once(make: Callable[..., Any], clock: ManualClock) -> None:
    """Moving the queue is for what does not fit: what fits in the holes goes now."""
    bucket = naming(make(TokenBucket, 10, 1))
    a = contextvars.copy_context()
    run_in(a, bucket.acquire, 10)
    queue_behind(bucket, 1)
    run_in(a, bucket.settle, 10, 1)
    assert bucket.acquire(9) == 0.0
    assert not bucket.try_acquire(1)


# -- the pure core: the bound, whatever is given back in whatever order ----------------

# (time step, tokens per limit, then: keep, settle the latest or the earliest grant due
# (named, giving back a fraction), an unnamed refund of the latest grant due, withdraw
# the earliest or the latest reservation ahead)
Step = tuple[float, tuple[float, float], str, float]
steps = st.lists(
    st.tuples(
        st.sampled_from([0.0, 0.0, 0.1, 0.5, 1.0, 3.0]),
        st.tuples(st.sampled_from([0.5, 1.0, 4.0, 6.0]), st.sampled_from([0.0, 1.0, 5.0, 8.0])),
        st.sampled_from(["keep", "latest", "earliest", "latest", "unnamed", "withdraw", "withdraw_last"]),
        st.sampled_from([0.25, 0.5, 0.9, 1.0]),
    ),
    min_size=1,
    max_size=50,
)


# Found by a longer run of the property below. A grant taken from a withdrawn
# reservation's hole, withdrawn in turn once the line behind it was rolled back, was
# taken for the line's last (its time was after the latest) and rolled back another
# grant's slot; a move then took that slot as free.
TAKER_WITHDRAWN: list[Step] = [
    (3.0, (2.0, 8.0), "earliest", 0.5),
    (0.0, (2.0, 0.0), "unnamed", 0.9),
    (0.0, (1.0, 8.0), "keep", 1.0),
    (0.0, (4.0, 3.0), "unnamed", 0.5),
    (0.0, (4.0, 3.0), "unnamed", 0.9),
    (1.0, (2.0, 8.0), "withdraw", 0.25),
    (1.0, (0.5, 8.0), "withdraw", 0.9),
    (0.0, (1.0, 5.0), "withdraw", 0.25),
    (3.0, (0.5, 3.0), "latest", 0.25),
    (0.5, (6.0, 3.0), "latest", 0.9),
    (0.0, (1.0, 8.0), "keep", 1.0),
    (3.0, (4.0, 1.0), "withdraw", 0.9),
]

# Rolling back a hole grants were taken from leaves them due after the states' latest:
# a move bounded by the latest alone put their slots before their time.
TAKERS_DUE_LATER: list[Step] = [
    (0.0, (1.0, 3.0), "keep", 1.0),
    (0.0, (6.0, 1.0), "latest", 0.9),
    (0.0, (6.0, 5.0), "earliest", 0.9),
    (1.0, (2.0, 8.0), "withdraw", 0.25),
    (0.0, (0.5, 3.0), "unnamed", 1.0),
    (0.0, (0.5, 0.0), "withdraw_last", 1.0),
    (0.0, (4.0, 3.0), "withdraw", 0.9),
    (0.5, (0.5, 3.0), "earliest", 1.0),
    (0.5, (2.0, 8.0), "latest", 0.25),
    (3.0, (4.0, 8.0), "unnamed", 0.5),
    (0.0, (6.0, 8.0), "latest", 1.0),
    (3.0, (6.0, 8.0), "withdraw", 0.5),
    (0.5, (4.0, 5.0), "unnamed", 0.25),
    (0.5, (2.0, 3.0), "withdraw", 1.0),
    (0.5, (2.0, 8.0), "latest", 1.0),
    (0.5, (0.5, 0.0), "earliest", 0.9),
    (0.0, (1.0, 3.0), "latest", 0.25),
    (1.0, (1.0, 1.0), "latest", 0.5),
    (0.02, (6.0, 3.0), "latest", 0.25),
    (3.0, (6.0, 3.0), "earliest", 0.5),
    (0.02, (6.0, 5.0), "latest", 1.0),
    (0.0, (6.0, 3.0), "withdraw", 0.9),
    (0.02, (1.0, 3.0), "withdraw_last", 0.25),
    (3.0, (2.0, 1.0), "unnamed", 1.0),
]


@pytest.mark.parametrize("members", [1, 2])
@settings(max_examples=400, deadline=None)
@given(scenario=steps)
@example(scenario=TAKER_WITHDRAWN)
@example(scenario=TAKERS_DUE_LATER)
def test_no_give_back_and_no_move_lets_an_interval_exceed_capacity_plus_rate(
    members: int, scenario: list[Step]
) -> None:
    """Requests of any size, some larger than the holes (the queue moves up for them),
    named settles of any grant due, unnamed refunds and withdrawals of reservations,
    every grant named as a limiter that gives back has it: the tokens really used
    never exceed ``capacity + rate·t`` in any interval, per limit."""
    buckets = [Gcra(6.0, 1.0), Gcra(8.0, 2.0)][:members]
    algs: list[Algorithm[Any]] = list(buckets)
    states: list[Any] = [alg.new_state() for alg in algs]
    holes = Holes()
    now = 1_000.0
    grants: list[dict[str, Any]] = []
    for dt, tokens, then, fraction in scenario:
        now += dt
        want = list(tokens[:members]) if any(tokens[:members]) else [1.0] * members
        planned = plan(algs, states, holes, now, want)
        states, wait, name = settle(algs, states, holes, now, want, planned, math.inf, True)
        assert wait >= 0
        grants.append({"at": now + wait, "name": name, "used": list(want), "done": False})
        due = [g for g in grants if g["at"] <= now + EPSILON and not g["done"] and any(g["used"])]
        ahead = [g for g in grants if g["at"] > now + EPSILON and not g["done"] and any(g["used"])]
        if then in ("latest", "earliest") and due and isinstance(due[-1]["name"], GrantTime):
            g = due[-1] if then == "latest" else due[0]
            name = g["name"]
            if not isinstance(name, GrantTime):
                continue
            # Only from the limits the name locates the grant in (an unnamed refund of
            # the others is the case below).
            located = [i < len(name.exact) and name.exact[i] for i in range(members)]
            for j, _, _ in name.pieces:
                located[j] = True
            back = [u * fraction if located[i] else 0.0 for i, u in enumerate(g["used"])]
            states = give_back(algs, states, holes, now, back, name)
            g["used"] = [u - b for u, b in zip(g["used"], back, strict=True)]
            g["done"] = True  # the front names a grant once
        elif then == "unnamed" and due:
            # An unnamed refund gives back only where nothing is reserved after it: of
            # the latest grant, and only if nothing is ahead (docs/costs.md).
            g = due[-1]
            if not ahead and g is grants[-1]:
                back = [u * fraction for u in g["used"]]
                states = give_back(algs, states, holes, now, back, None)
                g["used"] = [u - b for u, b in zip(g["used"], back, strict=True)]
                g["done"] = True
        elif then in ("withdraw", "withdraw_last") and ahead:
            g = ahead[0] if then == "withdraw" else ahead[-1]
            states = give_back(algs, states, holes, now, g["used"], g["name"])
            g["used"] = [0.0] * members
            g["done"] = True
    for i, alg in enumerate(buckets):
        assert_bound([(g["at"], g["used"][i]) for g in grants], alg.capacity, alg.rate)


def test_a_move_keeps_every_grant_within_its_time_and_its_time_plus_tolerance() -> None:
    """The queue moves up by no more than every grant queued allows: B and C are
    reserved at 1001 and 1002, and their slots begin at 1010 and after, so each may
    begin 1010 - 1002 = 8 s sooner and still not before its grant. The line moves up 8
    of the 9 given back, and 1 is left a hole."""
    alg = Gcra(10.0, 1.0)
    holes = Holes()
    states: list[Any] = [alg.new_state()]
    states, _, a = settle([alg], states, holes, 1_000.0, [10.0], plan([alg], states, holes, 1_000.0, [10.0]), 0, True)
    for _ in range(2):  # B at 1001, C at 1002
        states, _, _ = settle([alg], states, holes, 1_000.0, [1.0], plan([alg], states, holes, 1_000.0, [1.0]), 9, True)
    states = give_back([alg], states, holes, 1_000.0, [9.0], a)
    planned = plan([alg], states, holes, 1_000.0, [10.0])
    assert planned[2] == MOVE
    assert planned[1] == pytest.approx(1_004.0)  # the line ends at 1012 - 8: 1004 + tolerance
    states, wait, _ = settle([alg], states, holes, 1_000.0, [10.0], planned, math.inf, True)
    assert wait == pytest.approx(4.0)
    assert holes.items == [[pytest.approx(992.0), (pytest.approx(1.0),), True]]  # 1 of the 9 left


# -- the memory store and the script decide alike -----------------------------------


Alike = tuple[float, tuple[float, float], str, float]
alike = st.lists(
    st.tuples(
        st.sampled_from([0.0, 0.0, 0.25, 1.0, 2.5]),
        st.tuples(st.sampled_from([0.5, 1.0, 3.0, 6.0]), st.sampled_from([0.0, 1.0, 4.0, 8.0])),
        st.sampled_from(["keep", "latest", "earliest", "withdraw"]),
        st.sampled_from([0.5, 0.9, 1.0]),
    ),
    min_size=1,
    max_size=30,
)


@pytest.mark.parametrize("members", [1, 2])
@settings(max_examples=60, deadline=None)
@given(scenario=alike)
def test_moves_decide_alike(members: int, scenario: list[Alike]) -> None:
    """Requests larger than the holes (the queue moves up for them), settles of any
    grant due by names given before and after moves, and withdrawals: the memory store
    and the script give the same decisions and names, step by step."""
    buckets: list[Algorithm[Any]] = [Gcra(6.0, 1.0), Gcra(8.0, 2.0)]
    decide_alike(buckets, members, scenario)


# -- the moves' key evicted while the state and the holes stay -------------------------


@pytest.mark.xfail(
    strict=True,
    reason=(
        "documented (docs/redis.md, Memory: an evicted side key is forgotten): the moves are kept in "
        "<holes>:moved alone; evicted while the state and the holes stay, a name given before the move "
        "is read where its slot was before it, and its give-back is put there: the tokens of "
        "[1011, 1014.5] come to 10 > 6 + 3.5. The store cannot tell a move forgotten from none "
        "(a fix: record the latest move in the state, and refuse a name the moves cannot place)"
    ),
)
def test_a_give_back_after_the_moves_key_is_evicted_keeps_the_bound(client: Any) -> None:
    """Found by a property run with an 'evict' step: A takes the bucket (6 of 6), B and
    C are granted, D is reserved at 1006.5 and named exactly; C gives back half, and E's
    request of 6 moves the queue up into it (D's slot 1.5 s sooner). Then the moves' key
    goes while everything else stays. D's settle must not put its tokens back where its
    slot was before the move."""
    alg = Gcra(6.0, 1.0)
    now = Now(1_000.0)
    _, script = pair([alg], now, client)
    script.name_grants()
    sent: list[list[Any]] = []

    def reserve(tokens: float) -> list[Any]:
        _, at = script.reserve(tokens, math.inf)
        sent.append([float(at), tokens, at])
        return sent[-1]

    reserve(6.0)  # A
    now.advance(2.5)
    reserve(0.5)  # B
    now.advance(2.5)
    c = reserve(3.0)
    d = reserve(3.0)  # at 1006.5
    script.refund(1.5, c[2])  # C used half
    c[1] -= 1.5
    reserve(6.0)  # E: the queue moves up into C's hole
    now.advance(2.5)
    reserve(0.5)
    moved = [key for key in client.keys("*") if key.endswith(b":moved")]
    assert moved
    client.delete(*moved)  # evicted: the state and the holes stay
    reserve(0.5)
    script.refund(1.5, d[2])  # D used half
    d[1] -= 1.5
    reserve(3.0)
    assert_bound([(at, used) for at, used, _ in sent], alg.capacity, alg.rate)


@pytest.mark.parametrize("junk", [b"garbage", b"", b"1 x;1 0 a b c d", b"nan nan", b"3 5;3 0 1 2 x 9e9"])
def test_a_garbled_moves_key_is_read_as_no_moves_never_an_error(client: Any, junk: bytes) -> None:
    """Every decision of a limiter that names grants reads the moves' key: garbled, it
    was a script error at each one until the key expired. It is read as none, as an
    evicted one is."""
    alg = Gcra(10.0, 1.0)
    now = Now(1_000.0)
    _, script = pair([alg], now, client)
    script.name_grants()
    _, a = script.reserve(10.0, math.inf)
    script.reserve(1.0, math.inf)
    script.refund(9.0, a)
    script.reserve(10.0, math.inf)  # the queue moves up
    moved = [key for key in client.keys("*") if key.endswith(b":moved")]
    assert moved
    for key in moved:
        client.set(key, junk, px=100_000)
    wait, at = script.reserve(1.0, math.inf)
    assert wait >= 0
    script.refund(1.0, at)
    assert script.peek(1.0) >= 0
