"""A simulation of tenants' callers on a fair share, on simulated time (the tests'
honest measure of shares: the decisions are the pure transition's, the callers behave
as ``_limiting/fair.py``'s gates make them).

Each tenant has ``callers`` that acquire back to back; one at a time asks the store
(the tenant's gate in its process), at the moment the store said its next request is
admitted; a deferral is asked again with its ticket. A grant's caller comes back
after its wait (plus ``think`` seconds).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ratelimit._algorithms.fair import Fair, FairState, reserve


@dataclass
class Run:
    """What a simulation saw: each tenant's grant times, and the store calls made."""

    grants: dict[str, list[float]] = field(default_factory=dict)
    calls: int = 0

    def share(self, tenant: str, start: float = -math.inf, end: float = math.inf) -> float:
        counted = {t: sum(1 for g in gs if start <= g < end) for t, gs in self.grants.items()}
        total = sum(counted.values())
        return counted.get(tenant, 0) / total if total else 0.0

    def count(self, tenant: str, start: float = -math.inf, end: float = math.inf) -> int:
        return sum(1 for g in self.grants.get(tenant, ()) if start <= g < end)


def simulate(
    fair: Fair,
    tenants: Mapping[str, tuple[float, int, float, float]],
    until: float,
    *,
    weight_of: Callable[[str, float], float] | None = None,
    state: FairState | None = None,
    tokens: float = 1.0,
    start: float = 0.0,
) -> Run:
    """``tenants``: tenant -> (weight, callers, first arrival, last arrival), times from
    ``start``; ``weight_of(tenant, now)`` overrides the weight as time goes (a
    ``set_weight``)."""
    state = fair.new_state() if state is None else state
    run = Run({t: [] for t in tenants})
    events: list[tuple[float, int, str, str, float | None]] = []
    seq = 0
    idle = {t: 0 for t in tenants}  # callers not asking nor waiting their grant
    asking = dict.fromkeys(tenants, False)
    opens = dict.fromkeys(tenants, -math.inf)

    def push(at: float, tenant: str, kind: str, ticket: float | None = None) -> None:
        nonlocal seq
        heapq.heappush(events, (at, seq, tenant, kind, ticket))
        seq += 1

    for tenant, (_, callers, first, _) in tenants.items():
        for _ in range(callers):
            push(start + first, tenant, "arrive")

    def ask_next(tenant: str, now: float) -> None:
        if idle[tenant] and not asking[tenant] and now < start + tenants[tenant][3]:
            asking[tenant] = True
            idle[tenant] -= 1
            push(max(now, opens[tenant]), tenant, "ask")

    while events:
        now, _, tenant, kind, ticket = heapq.heappop(events)
        if now > start + until:
            break
        if kind == "arrive":
            idle[tenant] += 1
            ask_next(tenant, now)
            continue
        weight = tenants[tenant][0] if weight_of is None else weight_of(tenant, now)
        run.calls += 1
        answer = reserve(fair, state, now, tenant, weight, tokens, math.inf, ticket)
        if answer.deferred:
            opens[tenant] = now + answer.wait
            push(now + answer.wait, tenant, "ask", answer.ticket)
            continue
        assert answer.wait >= 0
        run.grants[tenant].append(now + answer.wait)
        opens[tenant] = now + answer.next_in
        asking[tenant] = False
        push(now + answer.wait, tenant, "arrive")  # back for more once granted
        ask_next(tenant, now)
    return run
