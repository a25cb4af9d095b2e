"""A simulation of tenants' callers on a fair share, on simulated time (the tests'
honest measure of shares: the decisions are the pure transition's, the callers behave
as ``_limiting/fair.py``'s gates make them).

Each tenant has ``callers`` in each of its ``processes``, acquiring back to back; in
each process one at a time asks the store (the tenant's gate there), at the moment the
store said, presenting the gate's ticket. A grant's caller comes back after its wait.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ratelimit._algorithms.fair import Fair, FairState, reserve

#: A tenant: (weight, callers in each process, first arrival, last arrival[, processes]).
Tenant = tuple[float, int, float, float] | tuple[float, int, float, float, int]


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


@dataclass
class _Gate:
    tenant: str
    idle: int = 0  # callers neither asking nor waiting for their grant
    asking: bool = False
    opens: float = -math.inf
    ticket: float | None = None


def simulate(
    fair: Fair,
    tenants: Mapping[str, Tenant],
    until: float,
    *,
    weight_of: Callable[[str, float], float] | None = None,
    state: FairState | None = None,
    tokens: float = 1.0,
) -> Run:
    """``tenants``: tenant -> :data:`Tenant`; ``weight_of(tenant, now)`` overrides the
    weight as time goes (a ``set_weight``)."""
    state = fair.new_state() if state is None else state
    run = Run({t: [] for t in tenants})
    events: list[tuple[float, int, int, str]] = []
    seq = 0
    gates: list[_Gate] = []

    def push(at: float, gate: int, kind: str) -> None:
        nonlocal seq
        heapq.heappush(events, (at, seq, gate, kind))
        seq += 1

    for tenant, spec in tenants.items():
        callers, first = spec[1], spec[2]
        for _ in range(spec[4] if len(spec) == 5 else 1):
            gates.append(_Gate(tenant))
            for _ in range(callers):
                push(first, len(gates) - 1, "arrive")

    def ask_next(index: int, now: float) -> None:
        gate = gates[index]
        if gate.idle and not gate.asking and now < tenants[gate.tenant][3]:
            gate.asking = True
            gate.idle -= 1
            push(max(now, gate.opens), index, "ask")

    while events:
        now, _, index, kind = heapq.heappop(events)
        if now > until:
            break
        gate = gates[index]
        if kind == "arrive":
            gate.idle += 1
            ask_next(index, now)
            continue
        tenant = gate.tenant
        weight = tenants[tenant][0] if weight_of is None else weight_of(tenant, now)
        run.calls += 1
        answer = reserve(fair, state, now, tenant, weight, tokens, math.inf, gate.ticket)
        gate.ticket = answer.ticket
        if answer.deferred:
            gate.opens = now + answer.wait
            push(gate.opens, index, "ask")
            continue
        assert answer.wait >= 0
        run.grants[tenant].append(now + answer.wait)
        gate.opens = now + answer.next_in
        gate.asking = False
        push(now + answer.wait, index, "arrive")  # back for more once granted
        ask_next(index, now)
    return run
