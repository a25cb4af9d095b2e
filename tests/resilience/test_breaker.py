"""The circuit breaker's state machine on every store, with a manual clock; shared
state across processes; and the in-process and Lua machines agreeing step for step."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import fakeredis
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratelimit import BackendUnavailable, CircuitBreaker, CircuitOpen, ManualClock, RedisBackend, Ticket
from ratelimit._resilience.breaker_state import MemoryStore, Policy, RedisStore
from ratelimit._stores.redis.backend import key_for
from ratelimit.events import Event, Rejected, StateChanged

from conftest import REDIS_URL, SUPPORT, unique_name

Make = Callable[..., Any]
WORKER = SUPPORT / "breaker_worker.py"


def fail(breaker: CircuitBreaker, times: int = 1) -> None:
    for _ in range(times):
        breaker.record(breaker.allow(), False)


def succeed(breaker: CircuitBreaker, times: int = 1) -> None:
    for _ in range(times):
        breaker.record(breaker.allow(), True)


def test_it_opens_only_with_enough_calls(make: Make) -> None:
    breaker = make(CircuitBreaker, min_calls=4, failure_threshold=0.5)
    fail(breaker, 3)
    assert breaker.state == "closed"
    fail(breaker)
    assert breaker.state == "open"


def test_the_failure_share_must_reach_the_threshold(make: Make) -> None:
    breaker = make(CircuitBreaker, min_calls=10, failure_threshold=0.5)
    succeed(breaker, 6)
    fail(breaker, 4)
    assert breaker.state == "closed"  # 4 of 10
    fail(breaker)
    assert breaker.state == "closed"  # 5 of 11
    fail(breaker)
    assert breaker.state == "open"  # 6 of 12: the share reached


def test_an_open_circuit_fails_fast_until_the_cooldown(make: Make, clock: ManualClock) -> None:
    breaker = make(CircuitBreaker, min_calls=2, cooldown=30)
    fail(breaker, 2)
    clock.advance(10)
    with pytest.raises(CircuitOpen) as caught:
        breaker.allow()
    assert caught.value.retry_after == pytest.approx(20)
    assert caught.value.name == breaker.name
    assert "is open" in str(caught.value)


def test_old_failures_age_out_of_the_window(make: Make, clock: ManualClock) -> None:
    breaker = make(CircuitBreaker, min_calls=3, window=10, buckets=10)
    fail(breaker, 2)
    clock.advance(11)
    fail(breaker)
    assert breaker.state == "closed"
    assert breaker.stats().window_calls == 1
    fail(breaker, 2)
    assert breaker.state == "open"


def test_a_successful_probe_closes_it(make: Make, clock: ManualClock) -> None:
    breaker = make(CircuitBreaker, min_calls=2, cooldown=5)
    fail(breaker, 2)
    clock.advance(5)
    assert breaker.state == "half_open"
    probe = breaker.allow()
    assert probe.probe
    # One probe at a time by default: the next caller is refused meanwhile.
    with pytest.raises(CircuitOpen):
        breaker.allow()
    breaker.record(probe, True)
    assert breaker.state == "closed"
    # A fresh start: the failures that opened it are forgotten.
    fail(breaker)
    assert breaker.state == "closed"


def test_a_failed_probe_opens_it_again_for_a_full_cooldown(make: Make, clock: ManualClock) -> None:
    breaker = make(CircuitBreaker, min_calls=2, cooldown=5)
    fail(breaker, 2)
    clock.advance(5)
    breaker.record(breaker.allow(), False)
    assert breaker.state == "open"
    clock.advance(4.9)
    with pytest.raises(CircuitOpen) as caught:
        breaker.allow()
    assert caught.value.retry_after == pytest.approx(0.1)


def test_exactly_the_allowed_number_of_probes(make: Make, clock: ManualClock) -> None:
    breaker = make(CircuitBreaker, min_calls=1, cooldown=5, half_open_probes=3)
    fail(breaker)
    clock.advance(5)
    admitted = []
    for _ in range(10):
        with contextlib.suppress(CircuitOpen):
            admitted.append(breaker.allow())
    assert len(admitted) == 3
    assert all(ticket.probe for ticket in admitted)


def test_a_probe_that_never_reports_frees_its_slot_after_probe_timeout(make: Make, clock: ManualClock) -> None:
    breaker = make(CircuitBreaker, min_calls=1, cooldown=5, probe_timeout=20)
    fail(breaker)
    clock.advance(5)
    breaker.allow()  # a worker takes the probe and dies
    clock.advance(19)
    with pytest.raises(CircuitOpen) as caught:
        breaker.allow()
    assert caught.value.retry_after == pytest.approx(1)
    clock.advance(1)
    assert breaker.allow().probe


def test_an_outcome_of_neither_frees_the_probe_slot(make: Make, clock: ManualClock) -> None:
    breaker = make(CircuitBreaker, min_calls=1, cooldown=5)
    fail(breaker)
    clock.advance(5)
    breaker.record(breaker.allow(), None)
    assert breaker.state == "half_open"
    breaker.record(breaker.allow(), True)
    assert breaker.state == "closed"


def test_calls_from_before_an_opening_cannot_move_it(make: Make, clock: ManualClock) -> None:
    breaker = make(CircuitBreaker, min_calls=2, cooldown=5)
    slow = breaker.allow()  # admitted while closed, takes a long time
    fail(breaker, 2)
    assert breaker.state == "open"
    breaker.record(slow, True)  # its success says nothing about now
    assert breaker.state == "open"
    clock.advance(5)
    probe = breaker.allow()
    breaker.record(slow, False)  # nor does its failure, during the half-open probe
    assert breaker.state == "half_open"
    breaker.record(probe, True)
    assert breaker.state == "closed"


def test_state_changes_and_rejections_are_events(make: Make, clock: ManualClock) -> None:
    breaker = make(CircuitBreaker, min_calls=1, cooldown=5)
    seen: list[Event] = []
    breaker.subscribe(seen.append)
    fail(breaker)
    with pytest.raises(CircuitOpen):
        breaker.allow()
    clock.advance(5)
    succeed(breaker)
    changes = [(e.previous, e.state) for e in seen if isinstance(e, StateChanged)]
    assert changes == [("closed", "open"), ("open", "half_open"), ("half_open", "closed")]
    [rejected] = [e for e in seen if isinstance(e, Rejected)]
    assert rejected.retry_after == pytest.approx(5)
    stats = breaker.stats()
    assert (stats.allowed, stats.probes, stats.rejected, stats.successes, stats.failures, stats.opened) == (
        2,
        1,
        1,
        1,
        1,
        1,
    )


def test_call_counts_exceptions_and_transient_statuses_as_failures(make: Make) -> None:
    breaker = make(CircuitBreaker, min_calls=3)

    class Response:
        def __init__(self, status_code: int) -> None:
            self.status_code = status_code

    def boom() -> None:
        raise ConnectionError("down")

    with pytest.raises(ConnectionError):
        breaker.call(boom)
    breaker.call(lambda: Response(503))
    breaker.call(lambda: Response(429))  # busy, not down: neither
    breaker.call(lambda: Response(404))  # it answered: up
    stats = breaker.stats()
    # 2 of 3 failed, and the third brought the window to min_calls: open, and the
    # window starts afresh.
    assert (stats.state, stats.failures, stats.successes, stats.window_calls) == ("open", 2, 1, 0)


def test_as_a_decorator_and_with_asyncio(make: Make) -> None:
    breaker: CircuitBreaker = make(CircuitBreaker, min_calls=3)

    @breaker
    async def flaky() -> str:
        raise TimeoutError("slow")

    @breaker
    def fine() -> str:
        return "ok"

    assert fine() == "ok"
    for _ in range(2):
        with pytest.raises(TimeoutError):
            asyncio.run(flaky())
    assert breaker.state == "open"
    with pytest.raises(CircuitOpen):
        asyncio.run(flaky())
    assert asyncio.run(breaker.stats_async()).state == "open"


def test_no_lock_is_held_while_calls_run(make: Make) -> None:
    breaker = make(CircuitBreaker)
    # Both calls must be inside at the same time for the barrier to open.
    inside = threading.Barrier(2, timeout=10)
    errors: list[BaseException] = []

    def call() -> None:
        try:
            breaker.call(inside.wait)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_record_wants_the_ticket_allow_gave() -> None:
    breaker = CircuitBreaker()
    with pytest.raises(TypeError, match="ticket must be the Ticket that allow"):
        breaker.record(True, True)  # type: ignore[arg-type]
    breaker.record(Ticket(generation=0, probe=False), True)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"failure_threshold": 0}, ValueError, "failure_threshold must be > 0"),
        ({"failure_threshold": 1.5}, ValueError, r"failure_threshold must be a share in \(0, 1\], got 1.5"),
        ({"min_calls": 0}, ValueError, "min_calls must be >= 1, got 0"),
        ({"min_calls": 2.0}, TypeError, "min_calls must be an int, got float 2.0"),
        ({"window": -1}, ValueError, "window must be > 0"),
        ({"cooldown": 0}, ValueError, "cooldown must be > 0"),
        ({"half_open_probes": 0}, ValueError, "half_open_probes must be >= 1"),
        ({"buckets": 5000}, ValueError, "buckets must be 1 to 1000, got 5000"),
        ({"probe_timeout": "1"}, TypeError, "probe_timeout must be a number"),
        ({"backend": object()}, TypeError, "backend must be a MemoryBackend, RedisBackend or SQLiteBackend"),
        ({"clock": ManualClock}, TypeError, "clock must be a clock instance"),
    ],
)
def test_bad_arguments_are_refused_naming_them(kwargs: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        CircuitBreaker(**kwargs)


def test_a_shared_breaker_needs_a_name() -> None:
    with pytest.raises(ValueError, match="name is required with a shared backend"):
        CircuitBreaker(backend=RedisBackend(fakeredis.FakeRedis()))


def test_the_shared_state_is_one_readable_key_that_expires() -> None:
    client = fakeredis.FakeRedis()
    name = unique_name("breaker")
    breaker = CircuitBreaker(min_calls=1, window=10, cooldown=5, backend=RedisBackend(client), name=name)
    fail(breaker)
    key = key_for(name, "breaker")
    assert key == f"ratelimit:{{{name}}}:breaker"
    assert client.hget(key, "mode") == b"1"
    # Idle state lives for window + cooldown + probe timeout, plus a margin.
    assert 20_000 < client.pttl(key) <= 21_000


# -- Redis unreachable -----------------------------------------------------------------------


def dead_backend(on_unavailable: Any) -> RedisBackend:
    from servers import free_port

    return RedisBackend.from_url(f"redis://127.0.0.1:{free_port()}/0", on_unavailable=on_unavailable)


def test_an_unreachable_store_raises_by_default() -> None:
    breaker = CircuitBreaker(backend=dead_backend("raise"), name=unique_name())
    with pytest.raises(BackendUnavailable):
        breaker.allow()


@pytest.mark.parametrize("policy", ["allow", "local"])
def test_an_unreachable_store_can_fall_back_to_local_state(policy: str, caplog: pytest.LogCaptureFixture) -> None:
    breaker = CircuitBreaker(min_calls=2, backend=dead_backend(policy), name=unique_name())
    fail(breaker, 2)
    with pytest.raises(CircuitOpen):
        breaker.allow()
    assert breaker.state == "open"
    assert "goes on locally" in caplog.text


# -- across processes --------------------------------------------------------------------------


def run_workers(name: str, now: float, processes: int, threads: int, tries: int, outcome: str = "") -> list[Any]:
    argv = [sys.executable, str(WORKER), REDIS_URL, name, repr(now), str(threads), str(tries)]
    if outcome:
        argv.append(outcome)
    running = [subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) for _ in range(processes)]
    results = []
    for proc in running:
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0
        results.append(json.loads(out))
    return results


@pytest.mark.slow
@pytest.mark.redis
def test_one_box_finding_an_outage_protects_every_box(redis_client: Any) -> None:
    name = unique_name("shared-breaker")
    # Box A: 4 calls fail (min_calls 4, threshold 0.5): the shared circuit opens.
    [a] = run_workers(name, 1_000.0, processes=1, threads=1, tries=4, outcome="fail")
    assert a == {"admitted": 4, "probes": 0, "refused": 0}
    # Box B, ten seconds later, never saw a failure, and still fails fast.
    [b] = run_workers(name, 1_010.0, processes=1, threads=2, tries=5)
    assert b == {"admitted": 0, "probes": 0, "refused": 10}


@pytest.mark.slow
@pytest.mark.redis
def test_exactly_the_allowed_probes_run_across_processes(redis_client: Any) -> None:
    name = unique_name("shared-probes")
    run_workers(name, 1_000.0, processes=1, threads=1, tries=4, outcome="fail")
    # After the cooldown, 4 processes x 4 threads race for the 2 probe slots.
    results = run_workers(name, 1_031.0, processes=4, threads=4, tries=5)
    assert sum(r["admitted"] for r in results) == 2
    assert sum(r["probes"] for r in results) == 2
    assert sum(r["refused"] for r in results) == 4 * 4 * 5 - 2


# -- the two machines agree ------------------------------------------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("allow"), st.floats(0, 8)),
        st.tuples(st.just("record"), st.integers(0, 30), st.sampled_from([True, False, None])),
    ),
    max_size=60,
)


@pytest.fixture(params=["fakeredis", "redis", "cluster"])
def machine_client(request: pytest.FixtureRequest) -> Any:
    if request.param == "fakeredis":
        return fakeredis.FakeRedis()
    return request.getfixturevalue("redis_client" if request.param == "redis" else "cluster_client")


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ops=OPS,
    min_calls=st.integers(1, 5),
    probes=st.integers(1, 3),
    threshold=st.sampled_from([0.25, 0.5, 1.0]),
    shape=st.sampled_from([(10.0, 5, 6.0, 9.0), (1.0, 1, 0.5, 2.0), (60.0, 12, 30.0, 5.0), (3.0, 7, 2.5, 0.75)]),
)
def test_the_lua_machine_makes_the_same_decisions(
    machine_client: Any,
    ops: list[tuple[Any, ...]],
    min_calls: int,
    probes: int,
    threshold: float,
    shape: tuple[float, int, float, float],
) -> None:
    # On fakeredis, a real server and a real Cluster, with windows, bucket counts,
    # cooldowns and probe timeouts of several shapes.
    window, buckets, cooldown, probe_timeout = shape
    policy = Policy.checked(threshold, min_calls, window, buckets, cooldown, probes, probe_timeout)
    clock = ManualClock(1_000.0)
    memory = MemoryStore(policy, clock)
    backend = RedisBackend(machine_client)
    shared = RedisStore(backend, key_for(unique_name(), "breaker"), policy, clock, MemoryStore(policy, clock))
    tickets: list[tuple[int, bool]] = []
    for op in ops:
        if op[0] == "allow":
            clock.advance(op[1])
            here, there = memory.allow(), shared.allow()
            assert here == there
            if here.admitted:
                tickets.append((here.generation, here.probe))
        elif tickets:
            generation, probe = tickets.pop(op[1] % len(tickets))
            assert memory.record(generation, probe, op[2]) == shared.record(generation, probe, op[2])
        assert memory.peek() == shared.peek()
