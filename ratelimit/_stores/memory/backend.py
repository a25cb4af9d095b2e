"""In-process state: the embedded default, thread-safe and asyncio-safe.

A lock guards each limiter's state for the few microseconds a decision takes; waiting
happens in the caller, after the lock is released, so one sleeping acquire never
blocks another thread's decision. Nothing here awaits, so the same lock serves
asyncio tasks too (it is never held across an ``await``).

Named state is kept as a Redis key is: while it matters. Once no limiter object uses a
name and its state would decide as a new one would (``Algorithm.idle_until``), it is
dropped, so per-tenant names in a long-running service cost memory only while active.
A limiter's cache of views of its keys (``for_key``) is asked first to let go of the
views whose keys are idle, which would otherwise keep their state in use.
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from types import TracebackType
from typing import Any, Protocol, cast

from ... import _validate
from ..._algorithms import holes as _holes
from ..._algorithms import lanes as _lanes
from ..._algorithms.adaptive import Cubic
from ..._algorithms.algorithm import EPSILON, Algorithm, charge, charge_all, decide, peek_all
from ..._algorithms.breaker import Policy
from ..._algorithms.fair import Fair
from ..._clock import Clock, SystemClock
from ..keys import Keyed
from ..records import FAIR_KEPT, PARAMETERS, QUOTA_BURST, WINDOWS, Override, UnchangeableLimit, checked_override
from ..stats import Stats, weight
from ..store import Level, Views
from .breaker import MemoryStore
from .changes import Capped, Change, Recorded, in_force, rescaled
from .fair import MemoryFairHandle
from .slots import MemorySlots, memory_slots

__all__ = [
    "SWEEP_SECONDS",
    "Kept",
    "Lock",
    "MemoryBackend",
    "MemoryGroupHandle",
    "MemoryHandle",
    "MemoryLaneHandle",
    "Slot",
    "Timed",
]

#: Idle named state is looked for at most this often (wall-clock seconds), and
#: whenever the number of names has doubled since the last look.
SWEEP_SECONDS = 10.0
_SWEEP_SIZE = 1024

#: A slot's key: the limiter's name (or its name and one of its keys, ``for_key``),
#: its place in a composite (``None`` for a limiter of its own), and its algorithm.
_Key = tuple["str | Keyed", "int | None", str]


class Kept(Protocol):
    """What a slot keeps the state of: an algorithm, or both lanes of one (``Lanes``)."""

    @property
    def kind(self) -> str: ...

    def new_state(self) -> Any: ...

    def idle_until(self, state: Any) -> float: ...


def _domain(clock: Clock | None) -> Clock | None:
    """What a slot's times are measured on: real time (``None``), or a test clock."""
    return None if clock is None or isinstance(clock, SystemClock) else clock


def _changed(name: object, key: object) -> str | Keyed:
    """The name, or the name and key, that a change is made to, checked."""
    checked = _validate.name(name, None, shared=True)
    assert checked is not None
    return checked if key is None else Keyed(checked, _validate.key(key))


def _member(member: object) -> int | None:
    if member is None:
        return None
    if not isinstance(member, int) or isinstance(member, bool) or member < 0:
        raise ValueError(f"member must be a composite member's index (an int >= 0), got {member!r}")
    return member


def _reaches(name: str | Keyed | None, place: str | Keyed | None) -> bool:
    """Whether a change to ``name`` reaches the slot of ``place``: its own, and a
    name's (``None``: an unnamed limiter's) every key of it."""
    if isinstance(name, Keyed):
        return place == name
    return place == name or (isinstance(place, Keyed) and place.name == name)


def _ttl(change: Override | None) -> float | None:
    return None if change is None else change.ttl


#: What each state that keeps the code's values is, for the refusal (as the shared stores say).
_UNCHANGEABLE = {
    "adaptive": "an adaptive limiter (its rate is learned from the provider's answers)",
    "lanes": "a budget with priorities (low_share: two lanes)",
}


def _refuse(name: str, slots: Sequence[Slot], change: Override | None) -> None:
    """Raise if a change to ``slots`` could not be followed (nothing is changed then)."""
    for slot in slots:
        kind = slot.alg.kind
        if kind not in PARAMETERS:
            what = FAIR_KEPT if kind.endswith(":fair") else _UNCHANGEABLE["adaptive" if kind == "adaptive" else "lanes"]
            raise UnchangeableLimit(
                f"limiter {name} is {what}, which keeps the code's values: a TokenBucket, LeakyBucket or "
                f"SlidingWindow (alone, a key's, or a composite's member) reads a change at run time; "
                f"nothing was changed"
            )
        if change is not None and change.burst is not None and kind == "quota":
            raise ValueError(QUOTA_BURST.format(burst=change.burst, name=name))
        if change is not None and change.burst is not None and kind in WINDOWS:
            raise ValueError(
                f"burst={change.burst!r}: limiter {name} is a {kind}, which has no burst apart from its limit "
                f"(set its rate: the limit becomes rate x window)"
            )


def _refuse_forms(name: str | Keyed | None, member: int | None, slots: Mapping[_Key, Slot]) -> None:
    """Raise if ``name`` is a composite's members and no ``member`` is given, or an
    adaptive limiter's (its pace is member 1)."""
    for (place, index, kind), _ in slots.items():
        if not _reaches(name, place):
            continue
        if kind == "adaptive":
            raise UnchangeableLimit(
                f"limiter {name!r} is {_UNCHANGEABLE['adaptive']}, which keeps the code's values; nothing was changed"
            )
        if member is None and index is not None:
            raise UnchangeableLimit(
                f"limiter {name!r} is a composite's members, each changed on its own: give member= (or call "
                f"the composite's set_limit with one value per member); nothing was changed"
            )


def _slots_of(handle: object) -> tuple[Slot, ...]:
    if isinstance(handle, MemoryGroupHandle):
        return handle._slots
    if isinstance(handle, MemoryHandle):
        return (handle._slot,)
    raise UnchangeableLimit(f"{handle!r} keeps the code's values (a budget with priorities): nothing was changed")


class Lock(Protocol):
    """What serialises the decisions on a slot: a ``threading.Lock`` here. The SQLite
    store's is a transaction that loads the slot from its row and writes it back
    (``sqlite/backend.py``): the handles below are its decisions too."""

    def acquire(self, blocking: bool = ...) -> object: ...

    def release(self) -> None: ...

    def __enter__(self) -> object: ...

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> object: ...


class Timed(Protocol):
    """Where a handle reads the time of each decision, inside its slot's lock."""

    def now(self) -> float: ...


class Slot:
    """One limiter's state, the lock that serialises decisions on it, and its holes
    (for a composite's first limit: the composite's, one set per list of algorithms)."""

    __slots__ = (
        "alg",
        "change",
        "domain",
        "group_holes",
        "handles",
        "holes",
        "key",
        "lock",
        "now",
        "own",
        "state",
        "until",
        "users",
    )

    def __init__(self, alg: Kept, clock: Clock | None) -> None:
        self.lock: Lock = threading.Lock()
        self.alg = alg
        self.state = alg.new_state()
        self.holes = _holes.Holes()
        self.group_holes: dict[tuple[str, ...], _holes.Holes] = {}
        self.domain = _domain(clock)
        self.now: Callable[[], float] = (clock or SystemClock()).now
        self.users = 0
        #: A change at run time in force here (``memory/changes.py``), and when it ends.
        self.change: Change | None = None
        self.until = math.inf
        #: The handles bound to this slot that a change reaches (held weakly: a slot
        #: outlives its limiters; most have one), and the slot's key in its backend
        #: (``None``: a private slot, or a slot of another store).
        self.handles: tuple[weakref.ref[Any], ...] = ()
        self.key: _Key | None = None
        #: A private slot's change (a named slot's is kept by its backend, by name).
        self.own: Recorded | None = None

    def idle(self) -> bool:
        """Whether the state would decide as a new one would (``False`` while a
        decision holds the lock: it is looked at next time)."""
        if not self.lock.acquire(blocking=False):
            return False
        try:
            return self.alg.idle_until(self.state) <= self.now()
        finally:
            self.lock.release()


class MemoryBackend:
    """State held in this process.

    Limiters created without ``backend=`` each get private state of their own. Pass
    one ``MemoryBackend`` to several limiters with the same ``name`` to make them
    share one budget inside a process (the in-process twin of a Redis key). A name's
    state lives while a limiter uses it or its budget is not yet whole again; idle
    names are dropped (see :meth:`sweep`).

    Limiters sharing a name must keep time on the same clock: real time, or one and
    the same test clock. Mixing them is refused with ``ValueError``.
    """

    shared = False
    #: A composite's member's change (``set_limit(..., member=i)``) is kept too.
    changes_members = True
    #: A key's decision reads its name's change when it has none of its own.
    later_keys_follow = True
    later_keys_after = 0.0

    def __init__(self) -> None:
        self._slots: dict[_Key, Slot] = {}
        # Re-entrant: a limiter collected by the garbage collector in the middle of a
        # bind releases its names from inside the lock.
        self._lock = threading.RLock()
        # Set while a bind or a sweep works on the names: a sweep started then (by a
        # limiter collected meanwhile) would change them under its feet.
        self._busy = False
        self._sweep_size = _SWEEP_SIZE
        self._sweep_time = time.monotonic() + SWEEP_SECONDS
        # The caches of views decided here (for_key), while their limiters live, and
        # how many views were made for them since the last sweep.
        self._views: weakref.WeakSet[Views] = weakref.WeakSet()
        self._views_made = 0
        # The changes at run time in force, by name or key, and member (memory/changes.py).
        self._changes: dict[tuple[str | Keyed | None, int | None], Recorded] = {}

    def _slot(self, name: str | Keyed | None, member: int | None, alg: Kept, clock: Clock | None) -> Slot:
        if name is None:
            return Slot(alg, clock)
        with self._lock:
            self._busy = True
            try:
                key = (name, member, alg.kind)
                slot = self._slots.get(key)
                if slot is None:
                    slot = self._slots[key] = Slot(alg, clock)
                    slot.key = key
                    # A new slot starts at the limit in force for its name (its state is new).
                    record = self._record_for(slot, slot.now())
                    if record is not None:
                        slot.change, slot.until = record.change, record.until
                elif slot.domain is not _domain(clock):
                    raise ValueError(
                        f"clock {clock!r} cannot share the budget named {name!r}, which keeps time on "
                        f"{slot.domain or 'real time'!r}: one budget needs one clock"
                    )
                slot.users += 1
            finally:
                self._busy = False
            self._sweep_if_due()
            return slot

    def _release(self, slots: Sequence[Slot]) -> None:
        with self._lock:
            for slot in slots:
                slot.users -= 1
            self._sweep_if_due()

    def _watch(self, handle: object, name: str | Keyed | None, slots: Sequence[Slot]) -> None:
        if name is not None:
            weakref.finalize(handle, self._release, slots)

    def bind(
        self,
        name: str | Keyed | None,
        alg: Algorithm[Any],
        clock: Clock | None,
        *,
        lease: float | None = None,
        shadow: bool = False,
    ) -> MemoryHandle:
        # Every decision here is already made in this process: there is nothing to lease.
        slot = self._slot(name, None, alg, clock)
        handle = MemoryHandle(alg, slot, clock or SystemClock())
        self._follow(handle, [slot])
        self._watch(handle, name, [slot])
        return handle

    def bind_group(
        self, name: str | Keyed | None, algs: Sequence[Algorithm[Any]], clock: Clock | None
    ) -> MemoryGroupHandle:
        slots = [self._slot(name, i, alg, clock) for i, alg in enumerate(algs)]
        if name is None:
            # Private slots, which no other handle sees: one lock serves them all, and a
            # decision takes one lock rather than one per limit.
            for slot in slots[1:]:
                slot.lock = slots[0].lock
        handle = MemoryGroupHandle(algs, slots, clock or SystemClock())
        self._follow(handle, slots)
        self._watch(handle, name, slots)
        return handle

    def bind_lanes(
        self, name: str | Keyed | None, lanes: _lanes.Lanes, clock: Clock | None, keep: float | None
    ) -> tuple[MemoryLaneHandle, MemoryLaneHandle]:
        """Both lanes of a budget with priorities, in one slot under one lock: the
        handle that acquires at high priority, and the one at low."""
        slot = self._slot(name, None, lanes, clock)
        if name is not None:
            with self._lock:
                slot.users += 1  # one use for each handle: each releases its own
        handles = (
            MemoryLaneHandle(lanes, slot, clock or SystemClock(), _lanes.HIGH, keep),
            MemoryLaneHandle(lanes, slot, clock or SystemClock(), _lanes.LOW, keep),
        )
        for handle in handles:
            self._watch(handle, name, [slot])
        return handles

    def bind_fair(self, name: str | Keyed | None, fair: Fair, clock: Clock | None) -> MemoryFairHandle:
        """A budget shared fairly among tenants (``memory/fair.py``), in one slot."""
        slot = self._slot(name, None, fair, clock)
        handle = MemoryFairHandle(fair, slot, clock or SystemClock())
        self._watch(handle, name, [slot])
        return handle

    def bind_breaker(self, name: str | None, policy: Policy, clock: Clock | None) -> MemoryStore:
        """A circuit breaker's state, its own (``name`` shares nothing here)."""
        return MemoryStore(policy, clock or SystemClock())

    def bind_slots(
        self, name: str | Keyed | None, most: int, lease: float, clock: Clock | None, *, member: int | None = None
    ) -> MemorySlots:
        """A ConcurrencyLimit's slots in this process (``memory/slots.py``), private
        for no name. A holder cannot die without its process: ``lease`` is not needed."""
        return memory_slots(self, name, most, clock or SystemClock(), member)

    # -- limits changed at run time (memory/changes.py) --------------------------------

    def set_limit(
        self,
        name: str | Keyed,
        *,
        rate: float | None = None,
        burst: float | None = None,
        ttl: float | timedelta | None = None,
        clock: Clock | None = None,
        key: str | None = None,
        member: int | None = None,
    ) -> int:
        """Change limiter ``name``'s limit at run time, from its next decision on.

        As :meth:`RedisBackend.set_limit`: ``rate`` in tokens per second (a window's
        limit becomes ``rate`` times its length), ``burst`` a bucket's capacity,
        ``None`` keeping what the code says; ``ttl`` (seconds or a ``timedelta``)
        ends the change by itself; a new change replaces the last one whole. It
        reaches every limiter of this backend named ``name`` and every view of its
        keys (``for_key``), those made later too; ``key``: that key's budget alone,
        ahead of its name's change. ``member``: the index of a
        ``Composite``'s limit (``limiter.set_limit`` of a composite passes it).
        ``clock``: the limiters' test clock, if they keep time on one. A budget
        with priorities (``low_share``) or an ``adaptive=`` limiter raises
        ``UnchangeableLimit``; bad values raise ``ValueError``; either changes nothing.
        Returns how many keys of the name are in use here.
        """
        change = checked_override(rate, burst, ttl)
        return self._change(_changed(name, key), member, (change.rate, change.burst), change.ttl, clock)

    def reset_limit(
        self, name: str, *, clock: Clock | None = None, key: str | None = None, member: int | None = None
    ) -> bool:
        """Return limiter ``name`` (``key``: that key's budget) to what its code says,
        from its next decision; ``True`` if a change was in force."""
        was = self.limit_override(name, clock=clock, key=key, member=member) is not None
        self._change(_changed(name, key), member, None, None, clock)
        return was

    def limit_override(
        self, name: str, *, clock: Clock | None = None, key: str | None = None, member: int | None = None
    ) -> Override | None:
        """The change in force for ``name`` (``key``: its own change for that key's
        budget), or ``None``; its ``ttl`` is what is left of it."""
        record = self._changes.get((_changed(name, key), _member(member)))
        if record is None or record.domain is not _domain(clock):
            return None
        left = record.until - (clock or SystemClock()).now()
        if left <= 0:
            return None
        return Override(*record.change, None if record.until == math.inf else left)

    def set_private_limit(
        self, handle: object, change: Override | None, clock: Clock | None, member: int | None = None
    ) -> bool:
        """A change (``None``: a reset) to the state of ``handle``, an unnamed
        limiter's, which nothing else shares; whether a change was in force."""
        slots = _slots_of(handle)
        index = 0 if member is None else member
        if not 0 <= index < len(slots):
            raise ValueError(f"member must be 0 to {len(slots) - 1}, got {member!r}")
        slot = slots[index]
        _refuse(repr(handle), [slot], change)
        now = (clock or SystemClock()).now()
        was = slot.own is not None and slot.own.until > now
        slot.own = None
        if change is not None:
            until = math.inf if change.ttl is None else now + change.ttl
            slot.own = Recorded((change.rate, change.burst), until, slot.domain)
        with slot.lock:
            self._move(slot, slot.now())
        return was

    def set_unnamed_limit(
        self, key: str | None, change: Override | None, clock: Clock | None, member: int | None = None
    ) -> bool:
        """A change (``None``: a reset) to the keys of the unnamed limiter whose views
        this backend keeps (only that limiter's views are kept here without a name):
        every key's (``key=None``, those made later too), or that key's alone;
        whether a change was in force."""
        place = Keyed(None, _validate.key(key)) if key is not None else None
        record = self._changes.get((place, _member(member)))
        was = record is not None and record.until > (clock or SystemClock()).now()
        self._change(place, member, None if change is None else (change.rate, change.burst), _ttl(change), clock)
        return was

    def _change(
        self,
        name: str | Keyed | None,
        member: int | None,
        change: Change | None,
        ttl: float | None,
        clock: Clock | None,
    ) -> int:
        member = _member(member)
        domain = _domain(clock)
        until = math.inf if ttl is None else (clock or SystemClock()).now() + ttl
        with self._lock:
            targets = [
                slot
                for (each, index, _), slot in self._slots.items()
                if index == member and slot.domain is domain and _reaches(name, each)
            ]
            if change is not None:
                _refuse(repr(name) if isinstance(name, str) else str(name), targets, Override(*change))
                # The name's other slots: a composite's members, lanes, a learned pace.
                _refuse_forms(name, member, self._slots)
                self._changes[(name, member)] = Recorded(change, until, domain)
            else:
                self._changes.pop((name, member), None)
        # Each slot moved under its own lock alone (a decision never waits on the
        # backend's); a slot bound meanwhile starts at the record, and each move reads
        # the records as they are then, so that changes made at once end alike.
        for slot in targets:
            with slot.lock:
                self._move(slot, slot.now())
        return sum(
            1 for slot in targets if slot.key is not None and isinstance(slot.key[0], Keyed) and slot.key[0] != name
        )

    def _record_for(self, slot: Slot, now: float) -> Recorded | None:
        """The change in force for ``slot`` at ``now``: its own (a private slot's), its
        key's, else its name's; ``None``: the code's limit."""
        if slot.key is None:
            record = slot.own
        else:
            place, member, _ = slot.key
            record = self._changes.get((place, member))
            if record is None and isinstance(place, Keyed):
                record = self._changes.get((place.name, member))
        if record is None or record.domain is not slot.domain or record.until <= now:
            return None
        return record

    def _move(self, slot: Slot, now: float) -> None:
        """Move ``slot`` (its lock held) to the change in force and point its handles at it."""
        record = self._record_for(slot, now)
        change, until = (None, math.inf) if record is None else (record.change, record.until)
        if slot.alg.kind in PARAMETERS:
            slot.state = rescaled(cast(Algorithm[Any], slot.alg), slot.state, slot.change, change, now)
        slot.change, slot.until = change, until
        live = [handle for handle in (ref() for ref in slot.handles) if handle is not None]
        if len(live) < len(slot.handles):
            slot.handles = tuple(weakref.ref(handle) for handle in live)
        for handle in live:
            handle.follow(slot, self._end)

    def _end(self, slot: Slot, now: float) -> None:
        """``slot``'s change has ended (its lock held): forget the ended records and move it."""
        if slot.key is None:
            if slot.own is not None and slot.own.until <= now:
                slot.own = None
        else:
            place, member, _ = slot.key
            for each in (place, place.name) if isinstance(place, Keyed) else (place,):
                record = self._changes.get((each, member))
                if record is not None and record.domain is slot.domain and record.until <= now:
                    self._changes.pop((each, member), None)
        self._move(slot, now)

    def _follow(self, handle: MemoryHandle | MemoryGroupHandle, slots: Sequence[Slot]) -> None:
        """Have changes reach ``handle``, bound to ``slots``: from now on, and the one in force."""
        for slot in slots:
            with slot.lock:
                slot.handles = (*(ref for ref in slot.handles if ref() is not None), weakref.ref(handle))
                if slot.change is not None:
                    handle.follow(slot, self._end)

    # -- dropping idle state ----------------------------------------------------------

    def calls_from_threads(self) -> bool:
        return True

    def keep_views(self, views: Views) -> None:
        """Have each sweep ask ``views`` (a limiter's cache of views of its keys, whose
        views decide here) to let go of idle keys' views first; held weakly. Called
        for each view made: the views made count towards the next sweep."""
        # A count for a heuristic: an increment lost to a race costs nothing.
        self._views_made += 1
        if views not in self._views:
            with self._lock:
                self._views.add(views)

    def idle(self, handle: object) -> bool:
        """Whether the state that ``handle`` (one this backend bound) decides on would
        decide as a new one would."""
        if isinstance(handle, MemoryGroupHandle):
            return all(slot.idle() for slot in handle._slots)
        if isinstance(handle, (MemoryHandle, MemoryLaneHandle, MemoryFairHandle)):
            return handle._slot.idle()
        return False

    def sweep_if_due(self) -> None:
        """Sweep if it is time (see :meth:`sweep`): what binds and releases call."""
        with self._lock:
            self._sweep_if_due()

    def _sweep_if_due(self) -> None:
        if self._busy:
            return
        if len(self._slots) + self._views_made >= self._sweep_size or time.monotonic() >= self._sweep_time:
            self.sweep()

    def sweep(self) -> int:
        """Drop every name no limiter uses whose state is as good as new; return how many.

        The views of keys (``for_key``) whose budget is as good as new are dropped
        from their limiter's cache first, and their state with them (a view in use
        elsewhere keeps its state). Runs by itself when a limiter is made or dropped,
        at most every ``SWEEP_SECONDS`` and whenever the number of names and cached
        views has doubled; call it to free memory at a moment of your choosing.
        """
        dropped = 0
        with self._lock:
            if self._busy:
                return 0
            self._busy = True
            try:
                for views in list(self._views):
                    views.forget_idle()
                dropped = self._drop_idle()
            finally:
                self._busy = False
            kept = len(self._slots) + sum(len(views) for views in self._views)
            self._sweep_size = max(_SWEEP_SIZE, 2 * kept)
            self._views_made = 0
            self._sweep_time = time.monotonic() + SWEEP_SECONDS
        return dropped

    def _drop_idle(self) -> int:
        dropped = 0
        for key, slot in list(self._slots.items()):
            # A slot busy deciding is in use: it is looked at next time.
            if slot.users > 0:
                continue
            if slot.idle() and self._slots.pop(key, None) is not None:
                dropped += 1
        if dropped > len(self._slots):
            # A dict keeps its table at its largest size: copy it to let that go.
            self._slots = dict(self._slots)
        return dropped

    def __len__(self) -> int:
        """How many named states are kept."""
        return len(self._slots)

    def __repr__(self) -> str:
        return f"MemoryBackend(<{len(self._slots)} named limiters>)"


class MemoryHandle:
    """One limiter bound to its in-process state."""

    suspends = False

    __slots__ = (
        "__weakref__",
        "_alg",
        "_algs",
        "_code",
        "_end",
        "_holes",
        "_lock",
        "_now",
        "_slot",
        "_step",
        "level_in_decision",
        "names",
        "stats",
    )

    def __init__(self, alg: Algorithm[Any], slot: Slot, clock: Timed) -> None:
        self.stats: Stats | None = None
        #: Whether ``reserve_level`` reads the level in the decision's own lock (a SQLite
        #: transaction: each taking of the lock is one) rather than taking the lock again
        #: after the quickest decision (a thread lock).
        self.level_in_decision = False
        #: Whether a grant at once is named too (see ``Handle.names``).
        self.names = False
        #: The code's algorithm; ``_alg`` is the one in force (see :meth:`follow`).
        self._code = alg
        self._end: Callable[[Slot, float], None] | None = None
        self._alg: Algorithm[Any] = alg
        self._algs: tuple[Algorithm[Any], ...] = (alg,)
        self._slot = slot
        # The slot's for its whole life: held here, one attribute load nearer.
        self._lock = slot.lock
        self._holes = slot.holes
        self._now = clock.now
        self._step = alg.step

    def reserve(self, tokens: float, max_wait: float) -> tuple[float, float]:
        slot = self._slot
        lock = self._lock
        # Loaded before they are called: a callable held in a slot is loaded the quick
        # way as an attribute, not as a method.
        clock, step = self._now, self._step
        # acquire()/release() rather than `with`: measurably cheaper on this hot path,
        # and nothing between them can raise except a bug in the algorithm.
        lock.acquire()
        try:
            # Read inside the lock, so that decisions see time in the order they run.
            now = clock()
            holes = self._holes
            if holes.items or holes.paced is not None:
                return self._decided(now, tokens, max_wait)
            slot.state, wait = step(slot.state, now, tokens, max_wait)
            stats = self.stats
            if wait == 0.0:
                # The usual decision, a grant at once: Stats.record's count of one,
                # inlined (a call costs more than the two additions).
                if stats is not None:
                    stats.granted += 1
                    stats.tokens += tokens
                if self.names and self._alg.slotted:
                    # holes.at_once for one limit, built directly (every grant of a
                    # limiter that gives back).
                    return wait, _holes.GrantTime(
                        now, (), ((0, self._alg.latest(slot.state), float(tokens)),), holes.gen
                    )
                return wait, now  # now + 0.0, without the addition
            if stats is not None:
                stats.record(tokens, wait)
            # Without names, only a grant that waited is named (holes.exact): one that
            # went at once may sit anywhere in the slots still free.
            if wait > EPSILON and self._alg.slotted:
                return wait, _holes.exact(self._algs, (slot.state,), now + wait, holes.gen)
        finally:
            lock.release()
        return wait, now + wait

    def _decided(self, now: float, tokens: float, max_wait: float) -> tuple[float, float]:
        """A decision through the holes (``holes.reserve``), in the slot's lock."""
        self._ended(now)
        slot = self._slot
        states, wait, name = _holes.reserve(
            self._algs, (slot.state,), self._holes, now, (tokens,), max_wait, self.names
        )
        slot.state = states[0]
        if self.stats is not None:
            self.stats.record(tokens, wait)
        return wait, name

    def reserve_level(self, tokens: float, max_wait: float) -> tuple[float, float, Level | None]:
        if self.level_in_decision:
            with self._lock:
                now = self._now()
                wait, at = self._decided(now, tokens, max_wait)
                return wait, at, _holes.level(self._algs, (self._slot.state,), self._holes, now)
        # The decision as every reserve makes it, then the level read in the lock again:
        # what the decision left, or less where another has taken some since.
        wait, at = self.reserve(tokens, max_wait)
        with self._lock:
            return wait, at, _holes.level(self._algs, (self._slot.state,), self._holes, self._now())

    async def reserve_level_async(self, tokens: float, max_wait: float) -> tuple[float, float, Level | None]:
        return self.reserve_level(tokens, max_wait)

    def follow(self, slot: Slot, end: Callable[[Slot, float], None]) -> None:
        """Decide with the limit in force on ``slot`` (its lock held): the code's
        algorithm itself when no change is, else it as changed (``Capped``), whose
        first step past the change's end calls ``end`` to move the slot back."""
        self._end = end
        if slot.change is None:
            self._alg, self._algs, self._step = self._code, (self._code,), self._code.step
            return
        me = weakref.ref(self)

        def ended(state: Any, now: float, tokens: float, max_wait: float) -> tuple[Any, float]:
            handle = me()
            assert handle is not None  # (it is deciding)
            end(slot, now)
            if tokens > handle._alg.most + EPSILON and handle._alg.most < math.inf:
                return slot.state, -math.inf  # only the change held it: refused for ever now
            return handle._step(slot.state, now, tokens, max_wait)

        capped = Capped(in_force(self._code, slot.change), slot.until, ended)
        self._alg, self._algs, self._step = cast(Algorithm[Any], capped), (cast(Algorithm[Any], capped),), capped.step

    def _ended(self, now: float) -> None:
        """Move the slot back if its change has ended (its lock held): the calls other
        than a plain reserve's step, which ``Capped.step`` watches."""
        slot = self._slot
        if now >= slot.until and self._end is not None:
            self._end(slot, now)

    @property
    def most(self) -> float:
        """The largest request the limit in force grants."""
        return self._alg.most

    def reserve_here(self, tokens: float, max_wait: float) -> None:
        return None  # never asked: nothing here suspends

    def name_grants(self) -> None:
        self.names = True

    async def reserve_async(self, tokens: float, max_wait: float) -> tuple[float, float]:
        return self.reserve(tokens, max_wait)

    def refund(self, tokens: float, at: float | None) -> None:
        slot = self._slot
        with slot.lock:
            now = self._now()
            self._ended(now)
            slot.state = _holes.give_back(self._algs, (slot.state,), slot.holes, now, (tokens,), at)[0]

    async def refund_async(self, tokens: float, at: float | None) -> None:
        self.refund(tokens, at)

    def charge(self, tokens: float) -> float | None:
        slot = self._slot
        with slot.lock:
            now = self._now()
            self._ended(now)
            slot.state = charge(self._alg, slot.state, now, tokens)
            _holes.void(slot.holes)
            _holes.pace_charge(slot.holes, now, tokens)
            # A charge ends the slot line: a refund names it by that end, less the
            # tolerance, as it would a grant that waited (see charge_members in Lua).
            if not self._alg.slotted:
                return None
            return _holes.GrantTime(self._alg.latest(slot.state), (True,), (), slot.holes.gen)

    async def charge_async(self, tokens: float) -> float | None:
        return self.charge(tokens)

    def restrict(self, remaining: float, seconds: float) -> None:
        slot = self._slot
        with slot.lock:
            now = self._now()
            self._ended(now)
            slot.state = _holes.restrict(self._algs, (slot.state,), slot.holes, now, (remaining,), now + seconds)[0]

    async def restrict_async(self, remaining: float, seconds: float) -> None:
        self.restrict(remaining, seconds)

    def _reading(self) -> Any:
        """The slot's lock for a call that only reads (a store's may then write nothing)."""
        return self._slot.lock

    def peek(self, tokens: float) -> float:
        slot = self._slot
        with self._reading():
            now = self._now()
            self._ended(now)
            wait = peek_all(self._algs, (slot.state,), now, (tokens,))
            paced = _holes.pace_wait(slot.holes, now)
            return paced if paced > wait else wait

    async def peek_async(self, tokens: float) -> float:
        return self.peek(tokens)

    def reset(self) -> None:
        slot = self._slot
        with slot.lock:
            self._ended(self._now())
            slot.state = self._alg.new_state()
            _holes.forget(slot.holes)

    async def reset_async(self) -> None:
        self.reset()


class _Lock(Protocol):
    def acquire(self) -> object: ...

    def release(self) -> None: ...


class _Locks:
    """Several slots' locks taken as one: in the order given, released in reverse."""

    __slots__ = ("_locks",)

    def __init__(self, locks: Sequence[_Lock]) -> None:
        self._locks = tuple(locks)

    def acquire(self) -> bool:
        for lock in self._locks:
            lock.acquire()
        return True

    def release(self) -> None:
        for lock in reversed(self._locks):
            lock.release()


class MemoryGroupHandle:
    """Several limits decided together, all-or-nothing. The group's holes are kept
    with its first limit's state, apart for each list of algorithms."""

    suspends = False

    __slots__ = (
        "__weakref__",
        "_algs",
        "_code",
        "_end",
        "_holes",
        "_lock",
        "_members",
        "_now",
        "_slots",
        "_until",
        "level_in_decision",
        "names",
        "stats",
    )

    def __init__(self, algs: Sequence[Algorithm[Any]], slots: Sequence[Slot], clock: Timed) -> None:
        self.stats: Stats | None = None
        #: As ``MemoryHandle.level_in_decision``.
        self.level_in_decision = False
        #: Whether a grant at once is named too (see ``Handle.names``).
        self.names = False
        #: The code's algorithms; ``_algs`` are those in force (see :meth:`follow`),
        #: and ``_until`` the first end of a change among them.
        self._code = tuple(algs)
        self._end: Callable[[Slot, float], None] | None = None
        self._until = math.inf
        self._algs: tuple[Algorithm[Any], ...] = tuple(algs)
        self._slots = tuple(slots)
        # (index, plan, commit, slot) of each member, for the fast path of reserve: the
        # methods bound once, not at every decision.
        self._members = tuple(
            (i, alg.plan, alg.commit, slot) for i, (alg, slot) in enumerate(zip(self._algs, self._slots, strict=True))
        )
        self._now = clock.now
        # Composites of one name share their limits' states; a hole, though, is paid
        # for by every limit of the composite that left it, so only one made of the
        # same algorithms may take it.
        self._holes = self._slots[0].group_holes.setdefault(tuple(alg.kind for alg in algs), _holes.Holes())
        # One global order (by identity) so that two composites over shared slots
        # never deadlock; a lock shared by several slots is taken once.
        locks = list({id(slot.lock): slot.lock for slot in sorted(self._slots, key=id)}.values())
        self._lock: _Lock = locks[0] if len(locks) == 1 else _Locks(locks)

    def follow(self, slot: Slot, end: Callable[[Slot, float], None]) -> None:
        """Decide the member whose state ``slot`` holds (its lock held) with the limit
        in force there (see ``MemoryHandle.follow``)."""
        self._end = end
        i = self._slots.index(slot)
        code = self._code[i]
        alg = code if slot.change is None else cast(Algorithm[Any], Capped(in_force(code, slot.change), math.inf))
        self._algs = (*self._algs[:i], alg, *self._algs[i + 1 :])
        self._members = (*self._members[:i], (i, alg.plan, alg.commit, slot), *self._members[i + 1 :])
        self._until = min(each.until for each in self._slots)

    def _ended(self, now: float) -> None:
        """Move back each member whose change has ended (every lock held)."""
        if self._end is not None:
            for slot in self._slots:
                if now >= slot.until:
                    self._end(slot, now)

    def _locked(self, change: Callable[[float, list[Any], _holes.Holes], list[Any]]) -> float:
        """Run ``change(now, states, holes) -> states`` with every member locked."""
        lock = self._lock
        lock.acquire()
        try:
            now = self._now()
            if now >= self._until:
                self._ended(now)
            states = change(now, [slot.state for slot in self._slots], self._holes)
            for slot, state in zip(self._slots, states, strict=True):
                slot.state = state
        finally:
            lock.release()
        return now

    def reserve(self, tokens: Sequence[float], max_wait: float) -> tuple[float, float]:
        # _locked inlined: this is every acquire of a composite or an adaptive limiter.
        lock = self._lock
        lock.acquire()
        try:
            now = self._now()
            if now >= self._until:
                self._ended(now)
            holes = self._holes
            if not holes.items:
                # No holes: step_all, done in place on the slots, with no list of states
                # built and none copied back (the same plan and commits, in the same order).
                members = self._members
                admit_at = at = now
                for i, plan, _, slot in members:
                    admit, grant = plan(slot.state, now, tokens[i])
                    if admit > admit_at:
                        admit_at = admit
                    if grant > at:
                        at = grant
                # decide()'s grant at once, its usual answer here, without the call.
                wait = 0.0 if admit_at - now <= EPSILON and at - now <= EPSILON else decide(admit_at, at, now, max_wait)
                if wait >= 0:
                    for i, _, commit, slot in members:
                        slot.state = commit(slot.state, now, tokens[i], at)
                stats = self.stats
                if stats is not None:
                    if wait == 0.0 and not self.names:
                        # Stats.record's count of a grant at once, and weight() of a
                        # group's tokens, inlined (as MemoryHandle's).
                        stats.granted += 1
                        stats.tokens += float(max(tokens))
                        return wait, now
                    stats.record(weight(tokens), wait)
                if wait > EPSILON:
                    return wait, _holes.exact(self._algs, [slot.state for slot in self._slots], now + wait, holes.gen)
                if wait == 0.0 and self.names:
                    states = [slot.state for slot in self._slots]
                    return wait, _holes.at_once(self._algs, states, tokens, now, holes.gen)
                return wait, now + wait
            return self._decided(now, tokens, max_wait)
        finally:
            lock.release()

    def _decided(self, now: float, tokens: Sequence[float], max_wait: float) -> tuple[float, float]:
        """A decision through the holes (``holes.reserve``), every member locked."""
        holes = self._holes
        states, wait, name = _holes.reserve(
            self._algs, [slot.state for slot in self._slots], holes, now, tokens, max_wait, self.names
        )
        if wait >= 0:
            for slot, state in zip(self._slots, states, strict=True):
                slot.state = state
        if self.stats is not None:
            self.stats.record(weight(tokens), wait)
        if name is not None:
            return wait, name
        if wait > EPSILON:
            return wait, _holes.exact(self._algs, states, now + wait, holes.gen)
        return wait, now + wait

    def reserve_level(self, tokens: Sequence[float], max_wait: float) -> tuple[float, float, Level | None]:
        # As MemoryHandle.reserve_level.
        if not self.level_in_decision:
            wait, at = self.reserve(tokens, max_wait)
        lock = self._lock
        lock.acquire()
        try:
            now = self._now()
            if self.level_in_decision:
                if now >= self._until:
                    self._ended(now)
                wait, at = self._decided(now, tokens, max_wait)
            states = [slot.state for slot in self._slots]
            return wait, at, _holes.level(self._algs, states, self._holes, now)
        finally:
            lock.release()

    async def reserve_level_async(self, tokens: Sequence[float], max_wait: float) -> tuple[float, float, Level | None]:
        return self.reserve_level(tokens, max_wait)

    def reserve_here(self, tokens: Sequence[float], max_wait: float) -> None:
        return None  # never asked: nothing here suspends

    def name_grants(self) -> None:
        self.names = True

    async def reserve_async(self, tokens: Sequence[float], max_wait: float) -> tuple[float, float]:
        return self.reserve(tokens, max_wait)

    def refund(self, tokens: Sequence[float], at: float | None) -> None:
        self._locked(lambda now, states, holes: _holes.give_back(self._algs, states, holes, now, tokens, at))

    async def refund_async(self, tokens: Sequence[float], at: float | None) -> None:
        self.refund(tokens, at)

    def charge(self, tokens: Sequence[float]) -> None:
        def change(now: float, states: list[Any], holes: _holes.Holes) -> list[Any]:
            _holes.void(holes)
            _holes.pace_charge(holes, now, tokens[0])
            return charge_all(self._algs, states, now, tokens)

        self._locked(change)

    async def charge_async(self, tokens: Sequence[float]) -> None:
        self.charge(tokens)

    def throttle(self, decided: float | None, at: float | None) -> None:
        """A refusal of the request decided at ``decided`` to go at ``at`` (see
        ``adaptive.Cubic.throttle``): the learned pace among the members cuts its rate."""

        def change(now: float, states: list[Any], holes: _holes.Holes) -> list[Any]:
            return [
                alg.throttle(state, now, decided, at) if isinstance(alg, Cubic) else state
                for alg, state in zip(self._algs, states, strict=True)
            ]

        self._locked(change)

    async def throttle_async(self, decided: float | None, at: float | None) -> None:
        self.throttle(decided, at)

    def rate(self) -> float:
        """The learned pace's rate now."""
        rate = 0.0

        def change(now: float, states: list[Any], holes: _holes.Holes) -> list[Any]:
            nonlocal rate
            rate = next(alg.rate(s, now) for alg, s in zip(self._algs, states, strict=True) if isinstance(alg, Cubic))
            return states

        self._locked(change)
        return rate

    def restrict(self, remaining: Sequence[float], seconds: float) -> None:
        def change(now: float, states: list[Any], holes: _holes.Holes) -> list[Any]:
            return _holes.restrict(self._algs, states, holes, now, remaining, now + seconds)

        self._locked(change)

    async def restrict_async(self, remaining: Sequence[float], seconds: float) -> None:
        self.restrict(remaining, seconds)

    def peek(self, tokens: Sequence[float]) -> float:
        wait = 0.0

        def read(now: float, states: list[Any], holes: _holes.Holes) -> list[Any]:
            nonlocal wait
            wait = peek_all(self._algs, states, now, tokens)
            paced = _holes.pace_wait(holes, now)
            if paced > wait:
                wait = paced
            return states

        self._locked(read)
        return wait

    async def peek_async(self, tokens: Sequence[float]) -> float:
        return self.peek(tokens)

    def reset(self) -> None:
        def forget(now: float, states: list[Any], holes: _holes.Holes) -> list[Any]:
            _holes.forget(holes)
            return [alg.new_state() for alg in self._algs]

        self._locked(forget)

    async def reset_async(self) -> None:
        self.reset()


class MemoryLaneHandle:
    """One priority of a budget with two lanes (see ``lanes.py``); the other priority's
    handle shares the slot, its lock and both lanes' state."""

    suspends = False

    __slots__ = ("__weakref__", "_keep", "_lane", "_lanes", "_last", "_lock", "_low", "_now", "_slot", "stats")

    def __init__(self, lanes: _lanes.Lanes, slot: Slot, clock: Timed, lane: int, keep: float | None) -> None:
        self.stats: Stats | None = None
        self._lanes = lanes
        self._slot = slot
        self._now = clock.now
        self._lane = lane
        self._low = lane == _lanes.LOW
        self._lock = slot.lock
        self._keep = keep
        self._last = _lanes.LastLane(lane)

    def reserve(self, tokens: float, max_wait: float) -> tuple[float, float]:
        slot = self._slot
        lock = self._lock
        lock.acquire()
        try:
            now = self._now()
            wait, lane = _lanes.reserve(self._lanes, slot.state, now, tokens, max_wait, self._low, self._keep)
            stats = self.stats
            if stats is not None:
                if wait == 0.0:
                    # Stats.record's count of a grant at once, inlined (as MemoryHandle's).
                    stats.granted += 1
                    stats.tokens += tokens
                else:
                    stats.record(tokens, wait)
        finally:
            lock.release()
        if wait >= 0:
            self._last.saw(lane)
        return wait, _lanes.LaneTime(now + wait, lane)

    def reserve_here(self, tokens: float, max_wait: float) -> None:
        return None  # never asked: nothing here suspends

    def name_grants(self) -> None:
        pass  # a lane's grants are not named: a refund finds its lane, not its slot

    async def reserve_async(self, tokens: float, max_wait: float) -> tuple[float, float]:
        return self.reserve(tokens, max_wait)

    def refund(self, tokens: float, at: float | None) -> None:
        # A reservation goes back to the lane it was taken from; a plain refund to the
        # lane of this caller's latest grant (see LastLane).
        lane = at.lane if isinstance(at, _lanes.LaneTime) else self._last.lane()
        slot = self._slot
        with slot.lock:
            _lanes.give_back(self._lanes, slot.state, lane, self._now(), tokens, at)

    async def refund_async(self, tokens: float, at: float | None) -> None:
        self.refund(tokens, at)

    def charge(self, tokens: float) -> None:
        slot = self._slot
        with slot.lock:
            _lanes.charge(self._lanes, slot.state, self._now(), tokens)

    async def charge_async(self, tokens: float) -> None:
        self.charge(tokens)

    def restrict(self, remaining: float, seconds: float) -> None:
        slot = self._slot
        with slot.lock:
            now = self._now()
            _lanes.restrict(self._lanes, slot.state, now, remaining, now + seconds)

    async def restrict_async(self, remaining: float, seconds: float) -> None:
        self.restrict(remaining, seconds)

    def peek(self, tokens: float) -> float:
        slot = self._slot
        with slot.lock:
            return _lanes.peek(self._lanes, slot.state, self._now(), tokens, self._low, self._keep)

    async def peek_async(self, tokens: float) -> float:
        return self.peek(tokens)

    def reset(self) -> None:
        # Both lanes: they are one budget, which the other priority's handle shares.
        slot = self._slot
        with slot.lock:
            slot.state = self._lanes.new_state()

    async def reset_async(self) -> None:
        self.reset()
