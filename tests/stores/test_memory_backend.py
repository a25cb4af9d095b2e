"""The in-process store keeps a name's state while it matters, and only then.

Before: 100,000 per-tenant names kept 156 MB (RSS) after everything was idle, and a
composite named ``"x"`` shared state with a ``TokenBucket`` named ``"x:0"``.
"""

from __future__ import annotations

import gc
import time
import tracemalloc

import pytest

from ratelimit import Composite, LeakyBucket, ManualClock, MemoryBackend, SlidingWindow, TokenBucket
from ratelimit._stores.memory.backend import SWEEP_SECONDS


def _use_and_drop(backend: MemoryBackend, clock: ManualClock, name: str) -> None:
    TokenBucket(5, 1, backend=backend, name=name, clock=clock).try_acquire()


@pytest.mark.stress
def test_thousands_of_idle_names_are_dropped() -> None:
    backend = MemoryBackend()
    clock = ManualClock()
    tracemalloc.start()
    try:
        for i in range(5_000):
            _use_and_drop(backend, clock, f"tenant-{i}")
        gc.collect()
        busy, _ = tracemalloc.get_traced_memory()
        clock.advance(10)  # every bucket is full again
        backend.sweep()
        gc.collect()
        idle, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(backend) == 0
    # Before, all of it stayed (32 MB for 100,000 names).
    assert idle < busy / 20


def test_state_that_still_matters_outlives_its_limiter() -> None:
    backend = MemoryBackend()
    clock = ManualClock()
    limiter = TokenBucket(2, 1, backend=backend, name="tenant", clock=clock)
    assert limiter.try_acquire()
    assert limiter.try_acquire()
    del limiter
    gc.collect()
    assert backend.sweep() == 0  # the bucket is not full again yet
    again = TokenBucket(2, 1, backend=backend, name="tenant", clock=clock)
    assert not again.try_acquire()  # not a second burst
    clock.advance(2)
    assert again.try_acquire()


def test_a_name_in_use_is_kept_and_shared() -> None:
    backend = MemoryBackend()
    clock = ManualClock()
    first = SlidingWindow(1, 10, backend=backend, name="busy", clock=clock)
    clock.advance(100)
    assert backend.sweep() == 0  # idle, but a limiter holds it
    assert first.try_acquire()
    second = SlidingWindow(1, 10, backend=backend, name="busy", clock=clock)
    assert not second.try_acquire()


@pytest.mark.stress
def test_idle_names_are_dropped_without_being_asked() -> None:
    # Every limiter made or dropped looks, once the number of names has doubled.
    backend = MemoryBackend()
    clock = ManualClock()
    most = 0
    for i in range(10_000):
        _use_and_drop(backend, clock, f"tenant-{i}")
        clock.advance(0.01)  # each bucket is whole again 0.2 s after its use
        most = max(most, len(backend))
    assert most <= 2_048


def test_idle_names_are_looked_for_every_few_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = MemoryBackend()
    clock = ManualClock()
    for i in range(100):
        _use_and_drop(backend, clock, f"tenant-{i}")
    clock.advance(10)
    assert len(backend) == 100
    wall = time.monotonic() + SWEEP_SECONDS + 1
    monkeypatch.setattr("ratelimit._stores.memory.backend.time.monotonic", lambda: wall)
    _use_and_drop(backend, clock, "one-more")
    assert len(backend) == 1  # only the one just used


def test_a_composite_s_members_never_collide_with_another_limiter_s_name() -> None:
    backend = MemoryBackend()
    clock = ManualClock()
    composite = Composite([TokenBucket(1, 1), LeakyBucket(1, 1)], backend=backend, name="x", clock=clock)
    bucket = TokenBucket(1, 1, backend=backend, name="x:0", clock=clock)
    queue = LeakyBucket(1, 1, backend=backend, name="x:1", clock=clock)
    assert composite.try_acquire()
    assert bucket.try_acquire()  # it shared the composite's state before
    assert queue.try_acquire()
    # Two composites of one name do share, as two limiters of one name do.
    twin = Composite([TokenBucket(1, 1), LeakyBucket(1, 1)], backend=backend, name="x", clock=clock)
    assert not twin.try_acquire()


def test_a_limiter_collected_during_a_sweep_does_not_break_it() -> None:
    # Found by trying: a limiter's finaliser, run by the garbage collector in the
    # middle of a sweep, started a second sweep that deleted entries from under the
    # first (KeyError). A clock that collects garbage when read makes it happen here.
    class CollectingClock(ManualClock):
        armed = False

        def now(self) -> float:
            if self.armed:
                self.armed = False
                gc.collect()
            return super().now()

    clock = CollectingClock(100.0)
    backend = MemoryBackend()
    gc.disable()
    try:
        for i in range(5):
            TokenBucket(5, 5, backend=backend, name=f"idle-{i}", clock=clock)
        for i in range(5):
            limiter = TokenBucket(5, 5, backend=backend, name=f"cycle-{i}", clock=clock)
            cycle: list[object] = [limiter]
            cycle.append(cycle)  # garbage only the collector frees
        del limiter, cycle
        backend._sweep_size = 0  # the finaliser's own sweep is due, as after the names doubled
        clock.armed = True
        dropped = backend.sweep()  # raised KeyError
    finally:
        gc.enable()
    assert dropped + backend.sweep() == 10
    assert len(backend) == 0


def test_a_budget_with_priorities_is_kept_while_either_limiter_uses_it() -> None:
    # Each limiter binds two handles (one per priority) to one slot: dropping one
    # limiter once let the slot go while another still used it, and the next limiter
    # of that name got a budget of its own.
    backend = MemoryBackend()
    clock = ManualClock()
    first = TokenBucket(10, 10, low_share=0.5, backend=backend, name="tenant", clock=clock)
    second = TokenBucket(10, 10, low_share=0.5, backend=backend, name="tenant", clock=clock)
    del first
    gc.collect()
    clock.advance(100)
    assert backend.sweep() == 0
    third = TokenBucket(10, 10, low_share=0.5, backend=backend, name="tenant", clock=clock)
    assert second.try_acquire(5)
    assert third.low.try_acquire(5)
    assert not third.try_acquire()
    assert not second.low.try_acquire()
    del second, third
    gc.collect()
    clock.advance(100)
    assert backend.sweep() == 1
