"""Fair shares (``_algorithms/fair.py``): the split by weight, work conservation, the
newcomer, the budget's own bound, bounded memory; and ``lua/_fair.lua`` deciding as the
pure transition does, decision by decision."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Any

import fakeredis
import fakeredis._socket._base as fakeredis_base
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratelimit import RedisBackend
from ratelimit._algorithms.fair import OVERFLOW, Fair, peek, reserve
from ratelimit._algorithms.leaky_bucket import LeakyQueue
from ratelimit._algorithms.sliding_window import WindowLog
from ratelimit._algorithms.sliding_window_counter import WindowCounter
from ratelimit._algorithms.token_bucket import Allowance, Gcra
from ratelimit._stores.keys import key_for
from ratelimit._stores.redis.fair import RedisFairHandle

from conftest import unique_name
from fair_sim import simulate

RATE = 100.0


def fair_of(capacity: float = 1.0, rate: float = RATE, lead_intervals: float = 4.0) -> Fair:
    return Fair(Gcra(capacity, rate), lead_intervals / rate)


# -- the split, by simulation -----------------------------------------------------------


def test_three_tenants_weighted_3_1_1_split_60_20_20() -> None:
    """Every tenant always waiting: the grants split by weight, the whole rate used,
    one store call per grant."""
    run = simulate(fair_of(), {"a": (3, 4, 0.0, 30.0), "b": (1, 4, 0.0, 30.0), "c": (1, 4, 0.0, 30.0)}, 30.0)
    assert run.share("a") == pytest.approx(0.6, abs=0.01)
    assert run.share("b") == pytest.approx(0.2, abs=0.01)
    assert run.share("c") == pytest.approx(0.2, abs=0.01)
    total = sum(len(g) for g in run.grants.values())
    assert total >= 0.99 * RATE * 30
    assert run.calls == total


def test_a_lone_busy_tenant_gets_the_whole_rate() -> None:
    run = simulate(fair_of(), {"a": (1, 8, 0.0, 10.0)}, 10.0)
    assert run.count("a") >= 0.99 * RATE * 10


def test_an_idle_tenants_share_goes_to_the_others_at_once() -> None:
    """b stops at 5 s: from a few intervals later, a and c split the rate 3:1."""
    run = simulate(fair_of(), {"a": (3, 4, 0.0, 10.0), "b": (1, 4, 0.0, 5.0), "c": (1, 4, 0.0, 10.0)}, 10.0)
    assert run.share("b", 1.0, 5.0) == pytest.approx(0.2, abs=0.02)
    after = 5.0 + 20 / RATE  # its last pace (5 intervals) and wait in the line
    assert run.count("b", after) == 0
    assert run.share("a", after, 10.0) == pytest.approx(0.75, abs=0.02)
    assert run.count("a", after, 10.0) + run.count("c", after, 10.0) >= 0.99 * RATE * (10.0 - after)


def test_a_newcomer_is_not_queued_behind_a_flood() -> None:
    """a floods with 1,000 callers; b's first requests, at 2 s, go within a few
    intervals."""
    run = simulate(fair_of(), {"a": (1, 1000, 0.0, 10.0), "b": (1, 4, 2.0, 10.0)}, 4.0)
    assert run.grants["b"][0] - 2.0 <= 6 / RATE
    # And from then on the two split the rate evenly.
    assert run.share("b", 2.5, 4.0) == pytest.approx(0.5, abs=0.02)


def test_a_tenant_asking_from_many_processes_takes_turns() -> None:
    """Each tenant's callers in three processes of their own: after a first deferral
    each, the processes take turns on the slots their grants booked, one store call a
    grant, and the split holds."""
    tenants = {"a": (3, 2, 0.0, 20.0, 3), "b": (1, 2, 0.0, 20.0, 3), "c": (1, 2, 0.0, 20.0, 3)}
    run = simulate(fair_of(), tenants, 20.0)
    assert run.share("a") == pytest.approx(0.6, abs=0.01)
    assert run.share("b") == pytest.approx(0.2, abs=0.01)
    total = sum(len(g) for g in run.grants.values())
    assert total >= 0.99 * RATE * 20
    assert run.calls <= total + 9  # a deferral at most for each process's first request


def test_deferred_requests_keep_their_tenants_arrival_order() -> None:
    """Callers of one tenant asking at once from processes of their own: admitted
    while the tenant's pace is within the lead, then deferred with tickets in arrival
    order, one slot each, each admitted when it presents its ticket."""
    fair = fair_of()
    state = fair.new_state()
    answers = [reserve(fair, state, 0.0, "a", 1.0, 1.0, math.inf) for _ in range(8)]
    deferred = [a for a in answers if a.deferred]
    assert not answers[0].deferred
    assert len(deferred) >= 4
    tickets = [a.ticket for a in deferred]
    assert tickets == sorted(tickets)
    assert len(set(tickets)) == len(tickets)
    for answer in deferred:
        again = reserve(fair, state, answer.wait, "a", 1.0, 1.0, math.inf, answer.ticket)
        assert not again.deferred
        assert again.wait >= 0


def test_set_weight_takes_effect() -> None:
    """b's weight goes from 1 to 3 at 5 s: the split follows."""

    def weight_of(tenant: str, now: float) -> float:
        return 3.0 if tenant == "b" and now >= 5.0 else 1.0

    run = simulate(fair_of(), {"a": (1, 4, 0.0, 10.0), "b": (1, 4, 0.0, 10.0)}, 10.0, weight_of=weight_of)
    assert run.share("b", 0.0, 5.0) == pytest.approx(0.5, abs=0.02)
    assert run.share("b", 5.5, 10.0) == pytest.approx(0.75, abs=0.02)


def test_unpaced_budgets_admit_every_tenant_at_once() -> None:
    """A budget refilled at an infinite rate, or at none, has no rate to share."""
    for alg in (Gcra(3.0, math.inf), Allowance(5.0)):
        fair = Fair(alg, 0.0)
        state = fair.new_state()
        for i in range(5):
            answer = reserve(fair, state, 0.0, "a", 1.0, 1.0, 0.0)
            assert answer == (0.0, False, 0.0, 0.0), (alg, i)
        assert not state.tenants


# -- the budget's bound -------------------------------------------------------------------

# (time step, tenant, weight, tokens, max_wait, present the ticket of a deferral)
FairRequest = tuple[float, str, float, float, float, bool]
fair_requests = st.lists(
    st.tuples(
        st.sampled_from([0.0, 0.0, 0.0, 0.001, 0.01, 0.1, 0.5, 2.0]),
        st.sampled_from(["a", "a", "b", "c", "d", "é{x}"]),
        st.sampled_from([1.0, 1.0, 3.0, 0.5, 1e-3]),
        st.sampled_from([1.0, 1.0, 1.0, 2.0, 3.0]),
        st.sampled_from([0.0, 0.05, 1.0, math.inf, math.inf]),
        st.booleans(),
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(scenario=fair_requests, capacity=st.sampled_from([3.0, 5.0]), most=st.sampled_from([2, 10_000]))
def test_no_sequence_of_calls_exceeds_the_budget(scenario: list[FairRequest], capacity: float, most: int) -> None:
    """Whatever tenants ask, with whatever weights and tickets: in any second, at most
    the budget's rate plus its burst are granted."""
    rate = 10.0
    fair = Fair(Gcra(capacity, rate), 4 / rate, most)
    state = fair.new_state()
    now = 0.0
    grants: list[tuple[float, float]] = []
    tickets: list[tuple[float, str, float, float]] = []  # (ask again at, tenant, ticket, tokens)
    for step, tenant, weight, tokens, max_wait, use_ticket in scenario:
        now += step
        if use_ticket and tickets and tickets[0][0] <= now:
            _, tenant, ticket, tokens = tickets.pop(0)
            answer = reserve(fair, state, now, tenant, weight, tokens, max_wait, ticket)
        else:
            answer = reserve(fair, state, now, tenant, weight, tokens, max_wait)
        if answer.deferred:
            tickets.append((now + answer.wait, tenant, answer.ticket, tokens))
            tickets.sort()
        elif answer.wait >= 0:
            assert answer.wait <= max_wait + 1e-9
            grants.append((now + answer.wait, tokens))
            # The slot it booked for its process's next request.
            tickets.append((now + answer.next_in, tenant, answer.ticket, tokens))
            tickets.sort()
        assert len(state.tenants) <= most + 1  # the tenants past the most share one entry
    grants.sort()
    for i, (start, _) in enumerate(grants):
        within = sum(t for at, t in grants[i:] if at < start + 1.0 - 1e-9)
        assert within <= capacity + rate + 1e-6


def test_hostile_numbers_of_tenants_cost_bounded_memory() -> None:
    """Twenty thousand distinct tenants in a fifth of a second: at most ``most_tenants``
    paced on their own, the rest as one; the heap of finishes stays within a bound of
    them (compacted before a decision, which adds one)."""
    fair = Fair(Gcra(10.0, RATE), 4 / RATE, most_tenants=100)
    state = fair.new_state()
    for i in range(20_000):
        reserve(fair, state, i * 1e-5, f"t{i}", 1.0, 1.0, math.inf)
        assert len(state.tenants) <= 101
        assert len(state.expiry) <= 2 * 101 + 64 + 1
    assert OVERFLOW in state.tenants


# -- the Lua twin ------------------------------------------------------------------------


class FixedTime:
    """The ``now`` sent to the script: whatever the scenario says it is."""

    def __init__(self) -> None:
        self.value = 0.0

    def __call__(self) -> str:
        return repr(self.value)


class _FrozenTime:
    """fakeredis expires keys on real time: stopped here (see test_conformance.py)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    @staticmethod
    def time() -> float:
        return 1_700_000_000.0


@pytest.fixture(scope="module", params=["fakeredis", "redis", "cluster"])
def client(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "fakeredis":
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(fakeredis_base, "time", _FrozenTime())
            yield fakeredis.FakeRedis()
        return
    if request.param == "redis":
        yield request.getfixturevalue("redis_client")
        return
    yield request.getfixturevalue("cluster_client")


LINES: dict[str, Any] = {
    "token_bucket": Gcra(3.0, 2.0),
    "leaky_bucket": LeakyQueue(4.0, 2.0),
    "sliding_window": WindowLog(5.0, 2.0),
    "sliding_window_counter": WindowCounter(4.0, 2.0),
}


@pytest.mark.parametrize("kind", list(LINES))
@pytest.mark.parametrize("most", [2, 10_000])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenario=fair_requests)
def test_fair_script_matches_pure_fair(client: redis.Redis, kind: str, most: int, scenario: list[FairRequest]) -> None:
    alg = LINES[kind]
    fair = Fair(alg, 2 / alg.sustained_rate, most)
    now = FixedTime()
    now.value = 1_700_000_000.0
    line = key_for(unique_name("fair"), kind, lane="fair")
    handle = RedisFairHandle(RedisBackend(client), (line, f"{line}:tenants", f"{line}:weights"), fair, now)
    state = fair.new_state()
    tickets: list[tuple[float, str, float, float]] = []
    for step, tenant, weight, tokens, max_wait, use_ticket in scenario:
        now.value += step
        n = min(tokens, alg.most)
        ticket = None
        if use_ticket and tickets and tickets[0][0] <= now.value:
            _, tenant, ticket, n = tickets.pop(0)
        assert handle.peek(tenant, n, ticket) == peek(fair, state, now.value, tenant, n, ticket)
        expected = reserve(fair, state, now.value, tenant, weight, n, max_wait, ticket)
        assert handle.ask(tenant, weight, n, max_wait, ticket) == expected
        if expected.deferred or expected.wait >= 0:
            at = expected.wait if expected.deferred else expected.next_in
            tickets.append((now.value + at, tenant, expected.ticket, n))
            tickets.sort()
    handle.reset()
    assert handle.peek("a", 1.0, None) == 0.0


def test_many_tenants_ending_at_once_are_forgotten_in_one_call(client: redis.Redis) -> None:
    """Nine thousand tenants whose paces all end by the same moment: one decision
    forgets them all (more than Lua's unpack takes at once)."""
    fair = Fair(Gcra(1e6, 1e6), 0.0, most_tenants=20_000)
    now = FixedTime()
    now.value = 1_700_000_000.0
    line = key_for(unique_name("fair"), "token_bucket", lane="fair")
    handle = RedisFairHandle(RedisBackend(client), (line, f"{line}:tenants", f"{line}:weights"), fair, now)
    state = fair.new_state()
    # The same nine thousand entries in both, written directly: a finish a second
    # ahead and a weight of 1 each.
    tenants = {f"t{i}": [now.value + 1.0, 1.0] for i in range(9_000)}
    state.tenants.update(tenants)
    state.total = float(len(tenants))
    state.expiry = sorted((entry[0], name) for name, entry in tenants.items())
    client.zadd(f"{line}:tenants", {name: entry[0] for name, entry in tenants.items()})
    client.hset(f"{line}:weights", mapping={"=": state.total, **{f"t{name}": 1.0 for name in tenants}})
    now.value += 3600.0
    expected = reserve(fair, state, now.value, "late", 1.0, 1.0, math.inf)
    assert handle.ask("late", 1.0, 1.0, math.inf, None) == expected
    assert set(state.tenants) == {"late"}
    assert client.zcard(f"{line}:tenants") == 1
    assert client.hlen(f"{line}:weights") == 2  # the sum and the one tenant left
