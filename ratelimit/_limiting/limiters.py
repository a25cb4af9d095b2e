"""The three limiters users construct, each an algorithm behind the shared front."""

from __future__ import annotations

import logging
import math
import sys
import weakref
from abc import abstractmethod
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from .. import _validate
from .._algorithms.algorithm import Algorithm
from .._algorithms.lanes import Lanes
from .._algorithms.leaky_bucket import LeakyQueue
from .._algorithms.sliding_window import WindowLog
from .._algorithms.sliding_window_counter import WindowCounter
from .._algorithms.token_bucket import Allowance, Gcra
from .._clock import Clock
from .._headers.parse import RateLimitInfo
from .._stores.records import WINDOWS, Override, UnchangeableLimit
from .._stores.store import Backend
from .adaptive import Adaptive, LastGrant, Paced
from .adaptive import adaptive as learned
from .feedback import restriction
from .front import Limiter, difference
from .guard import DEFAULT_GUARD, guard_seconds
from .priority import LowPriority, priorities
from .run_time import kept_by

logger = logging.getLogger("ratelimit")

__all__ = ["LeakyBucket", "SingleLimiter", "SlidingWindow", "TokenBucket"]

S = TypeVar("S", bound="SingleLimiter")


def _bounded(name: str, value: object, capacity: float, rate: float) -> None:
    # Both the time to fill the bucket and one token's interval: with capacity < 1 the
    # interval is the longer.
    _validate.horizon(name, value, max(capacity, 1.0) / rate, "one token's interval or a full refill take")


def _no_end(name: str, value: object, **why: str) -> None:
    """Refuse ``value`` where it is an end of the scale (``zero``: 0, ``infinite``:
    ``math.inf``) that this limit has no meaning at, saying why and what to use."""
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        return  # the usual checks say what is wrong with it
    end = "zero" if seconds == 0 else "infinite" if seconds == math.inf else None
    if end in why:
        raise ValueError(f"{name} must be > 0 and finite, got {value!r}: {why[end]}")


def _allowance_only(**options: object) -> None:
    """Refuse the options a bucket refilled at no rate has no rate for: ``low_share``,
    ``adaptive``, ``lease``."""
    for option, value in options.items():
        if value is not None:
            raise ValueError(
                f"{option}={value!r} needs a rate to work on, and refill_per_sec=0 (an allowance that "
                f"never refills) has none: leave {option} out, or give a rate > 0"
            )


#: The longest lease: a lease is a few rounds' worth of a busy process's demand, and
#: every second of it is kept back from the budget (see ``algorithm_for``).
MAX_LEASE_SECONDS = 60.0


def _lease_seconds(value: object) -> float | None:
    """``lease`` checked: ``None``, or seconds (or a ``timedelta``) > 0 and at most a minute."""
    if value is None:
        return None
    seconds = _validate.duration("lease", value)
    if seconds > MAX_LEASE_SECONDS:
        raise ValueError(f"lease must be seconds > 0 and at most {MAX_LEASE_SECONDS:g}, got {value!r}")
    return seconds


class SingleLimiter(Limiter[float]):
    """A limiter with one algorithm; ``tokens`` is one number."""

    __slots__ = (
        "_adaptive",
        "_alg",
        "_changeable",
        "_configured",
        "_given_guard",
        "_guard",
        "_lease",
        "_leased",
        "_low",
        "_most",
        "_most_name",
        "_priorities",
    )

    #: Seconds: the guard on real time when none is given (see ``ratelimit._limiting.guard``).
    default_guard = 0.0
    #: The constructor's leading parameters, numbers all (see ``__new__``).
    numbers: tuple[str, ...] = ()

    def __new__(cls: type[S], *args: object, **kwargs: object) -> S:
        # A provider's rate written where the first number goes (``TokenBucket("10/minute")``)
        # leaves the second argument missing, which Python reports before ``__init__``
        # checks anything: the text's own check comes first, and says how to write it.
        given = {**dict(zip(cls.numbers, args, strict=False)), **kwargs}
        for parameter in cls.numbers:
            if isinstance(given.get(parameter), str):
                _validate.real(parameter, given[parameter])
        return super().__new__(cls)

    def __init__(
        self,
        alg: Algorithm[Any],
        *,
        guard: object,
        backend: Backend | None,
        name: object,
        clock: Clock | None,
        low_share: object = None,
        borrow: object = None,
        high_reserve: object = None,
        adaptive: object = None,
        lease: object = None,
        shadow: object = False,
    ) -> None:
        if not isinstance(shadow, bool):
            raise TypeError(f"shadow must be a bool, got {type(shadow).__name__} {shadow!r}")
        self._configured = alg
        self._given_guard = guard
        self._lease = _lease_seconds(lease)
        # In force only on a budget shared beyond this process: in process, every
        # decision is local already and there is nothing to lease.
        self._leased = self._lease if getattr(backend, "shared", False) is True else None
        # What the stores decide by: the configured limit with each grant widened by
        # the guard (see guard.py). The properties report what the user configured.
        self._alg = self.algorithm_for(clock)
        self._guard = self.guard_for(clock)
        self._priorities = priorities(low_share, borrow, high_reserve)
        # What decides for this budget instead of the limiter, reading no change (a FairShare).
        self._adaptive = learned(adaptive)
        if self._adaptive is not None and self._priorities is not None:
            raise ValueError(
                f"adaptive={self._adaptive!r} with low_share={low_share!r}: a learned rate and two priorities "
                f"do not combine yet; drop one"
            )
        if self._lease is not None and (self._adaptive is not None or self._priorities is not None):
            what = f"adaptive={self._adaptive!r}" if self._adaptive is not None else f"low_share={low_share!r}"
            raise ValueError(
                f"lease={lease!r} with {what}: a lease and {what.split('=')[0]} do not combine yet; drop one"
            )
        super().__init__(backend=backend, name=name, clock=clock)
        self._most_name = self.most_name_for(clock)
        # On a shared store whose limits change at run time (set_limit) only the store
        # knows the limit in force: a request larger than the code's goes to it (see
        # _never). In process the handle tells it (see _tokens).
        self._changeable = (
            self._adaptive is None
            and self._priorities is None
            and getattr(self._backend, "shared", False) is True
            and callable(getattr(self._backend, "set_limit", None))
        )
        self._low: LowPriority | None = None
        if self._adaptive is not None:
            # A group of two: this limit (the ceiling) and the learned pace.
            pace = self._adaptive.pace(self._alg)
            paced = Paced(self._backend.bind_group(self._place, [self._alg, pace], clock))
            # No fast path (_fast_most stays 0): every grant is remembered for feedback.
            self._most = self._alg.most
            self._handle = paced
            self._pacing = paced.pacing
            self._last_grant = LastGrant()
        elif self._priorities is None:
            self._most = self._alg.most
            # Finite: an infinite request (refused as such) never takes the fast path.
            self._fast_most = self._most if self._most < math.inf else sys.float_info.max
            # Only what is set goes to bind: a store of another make need not know it.
            extras: dict[str, Any] = {}
            if self._leased is not None:
                extras["lease"] = self._leased
            if shadow:
                extras["shadow"] = True
            self._handle = self._backend.bind(self._place, self._alg, clock, **extras)
        else:
            # Two lanes: this limiter acquires at high priority, its `low` view at low.
            share, keep = self._priorities
            lanes = Lanes.of(self._alg, share)
            high, low = self._backend.bind_lanes(self._place, lanes, clock, keep)
            self._most = lanes.high.most
            self._fast_most = self._most if self._most < math.inf else sys.float_info.max
            self._most_name = f"the high-priority share of {self._most_name}"
            self._handle = high
            restrict, describe = _weakly(self)
            self._low = LowPriority(
                handle=low,
                most=lanes.low.most,
                most_name=f"the low-priority share of {self.most_name_for(clock)}",
                restriction=restrict,
                describe=describe,
                backend=self._backend,
                name=self._name,
                clock=self._clock,
                shadow=shadow,
            )
        self._handle.stats = self._stats
        if shadow:
            # Every request takes the checked path, where a shadow's decision is counted.
            self._shadow = True
            self._fast_most = 0

    @property
    def low(self) -> LowPriority:
        """This budget acquired at low priority (a limiter built with ``low_share``); the
        limiter itself acquires at high priority, never behind queued low requests.
        See docs/fleets.md, "Priorities"."""
        if self._low is None:
            raise AttributeError(
                f"{self!r} has no low priority: build it with low_share=... (a TokenBucket or SlidingWindow) "
                f"to acquire at two priorities"
            )
        return self._low

    @property
    def adaptive(self) -> Adaptive | None:
        """How this limiter learns its rate (``None``: it keeps the configured one)."""
        return self._adaptive

    def adaptive_rate(self) -> float | None:
        """The rate learned so far, shared by every worker on this budget, in tokens per
        second (``None`` without ``adaptive=``). One call to the store."""
        return None if self._pacing is None else self._pacing.rate()

    @property
    def lease(self) -> float | None:
        """Seconds of the leases this limiter spends locally (``None``: it asks the store
        for every grant). See docs/fleets.md, "Hot limiters"."""
        return self._lease

    @property
    def low_share(self) -> float | None:
        """The low priority's share of the budget (``None``: no priorities)."""
        return None if self._priorities is None else self._priorities[0]

    def guard_for(self, clock: Clock | None) -> float:
        """The guard in force when decisions keep time on ``clock``."""
        return guard_seconds(self._given_guard, clock, self.default_guard)

    def most_name_for(self, clock: Clock | None) -> str:
        """What the largest request on ``clock`` is called in an error: the argument
        that sets it, and the guard when that keeps part of it back."""
        alg = self.algorithm_for(clock)
        if alg.most < self._configured.most:
            return f"{alg.most_name} less what guard={self.guard_for(clock):g} keeps back"
        return alg.most_name

    def algorithm_for(self, clock: Clock | None) -> Algorithm[Any]:
        """What decides for this limit on ``clock``: the configured algorithm widened by
        the guard and a lease's seconds (a leased token may be sent that late)."""
        guard = self.guard_for(clock)
        if self._leased is None:
            return self._configured.guarded(guard) if guard > 0 else self._configured
        try:
            return self._configured.guarded(guard + self._leased)
        except ValueError as exc:
            raise ValueError(
                f"lease={self._leased:g} (a leased token may go that long after its grant, on top of "
                f"guard={guard:g}): {exc}"
            ) from None

    def _tokens(self, tokens: object, name: str = "tokens", *, zero: bool = False, cost: bool = False) -> float:
        # An in-process handle knows the limit in force, which a change may have raised.
        raised = getattr(self._handle, "most", 0.0) > self._most
        most = math.inf if cost or self._changeable or raised else self._most
        n = _validate.tokens(tokens, most, self._most_name, name, zero=zero)
        if raised and not cost and n > self._handle.most:  # type: ignore[attr-defined]
            self._never(n)
        return n

    def _limit_changes(self, rate: object, burst: object, ttl: object) -> list[tuple[int | None, Override]]:
        kept = kept_by(self)
        if kept is not None:
            raise UnchangeableLimit(f"{self!r} is {kept}, which keeps the code's values; nothing was changed")
        if self._adaptive is not None or self._priorities is not None:
            what = "adaptive=" if self._adaptive is not None else "low_share="
            raise UnchangeableLimit(
                f"{self!r} keeps the code's values ({what}): only a TokenBucket, LeakyBucket or SlidingWindow "
                f"without adaptive= or low_share= (alone, a key's or a composite's member) changes at run time; "
                f"nothing was changed"
            )
        changes = super()._limit_changes(rate, burst, ttl)
        burst_given = changes[0][1].burst
        if burst_given is not None and (self._alg.kind in WINDOWS or self._alg.kind == "quota"):
            what, becomes = ("a quota", "period") if self._alg.kind == "quota" else ("a window", "window")
            raise ValueError(
                f"burst={burst_given!r}: {self!r} is {what}, which has no burst apart from its limit "
                f"(set its rate: the limit becomes rate x {becomes})"
            )
        return changes

    def _never(self, tokens: float) -> None:
        if tokens > self._most:
            # Larger than the code's limit and than the one in force: no limit can grant it.
            raise ValueError(
                f"tokens must be <= {self._most_name} ({self._most:g}), or the limit a change at run time "
                f"(set_limit) puts in force, got {tokens!r}: such a request could never be granted"
            )

    def _difference(self, estimate: float, actual: float) -> tuple[float | None, float | None]:
        return difference(estimate, actual)

    def _restriction(self, info: RateLimitInfo, status: int | None) -> tuple[float, float] | None:
        self._check_policy(info)
        return restriction(info, status)

    def _check_policy(self, info: RateLimitInfo) -> None:
        # Warn, never reconfigure: headers can be wrong or spoofed.
        if info.limit is None or not info.window:
            return
        theirs = info.limit / info.window
        ours = self.sustained_rate
        if ours > theirs * 1.001:
            logger.warning(
                "%r is configured for %.6g/s but the provider announces %g per %g s (%.6g/s)",
                self,
                ours,
                info.limit,
                info.window,
                theirs,
            )

    @property
    def guard(self) -> float:
        """Seconds a request may leave after its grant with the limit still kept."""
        return self._guard

    @property
    def sustained_rate(self) -> float:
        """Tokens per second this limiter grants in the long run (its guard included)."""
        return self._alg.sustained_rate

    @abstractmethod
    def _describe(self) -> str:
        """The constructor's arguments, as the repr shows them."""

    def __repr__(self) -> str:
        where = "" if self._name is None else f", name={self._name!r}, backend={self._backend!r}"
        # A guard in force, or a zero one where the default is not: the repr rebuilds it.
        usual = guard_seconds(None, self._clock, self.default_guard)
        guard = f", guard={self._guard:g}" if self._guard or usual else ""
        lanes = ""
        if self._priorities is not None:
            share, keep = self._priorities
            lanes = f", low_share={share:g}" + (", borrow=False" if keep is None else f", high_reserve={keep:g}")
        learn = "" if self._adaptive is None else f", adaptive={self._adaptive!r}"
        leased = "" if self._lease is None else f", lease={self._lease:g}"
        shadow = ", shadow=True" if self._shadow else ""
        made = f"{type(self).__name__}({self._describe()}{guard}{lanes}{learn}{leased}{shadow}{where})"
        return made + self._key_suffix()


def _weakly(
    limiter: SingleLimiter,
) -> tuple[Callable[[RateLimitInfo, int | None], tuple[float, float] | None], Callable[[], str]]:
    """What ``limiter.low`` asks of its limiter (a restriction, a repr), holding it
    weakly so a key's view goes when its cache lets go of it (no cycle)."""
    alive = weakref.ref(limiter)
    kind = type(limiter).__name__

    def restrict(info: RateLimitInfo, status: int | None) -> tuple[float, float] | None:
        found = alive()
        return restriction(info, status) if found is None else found._restriction(info, status)

    def describe() -> str:
        found = alive()
        return f"<{kind}, no longer referenced>" if found is None else repr(found)

    return restrict, describe


class TokenBucket(SingleLimiter):
    """Bursts up to ``capacity``, sustained ``refill_per_sec``.

    The bucket holds up to ``capacity`` tokens and gains ``refill_per_sec`` a second;
    a request takes its ``tokens`` out. ``capacity=3, refill_per_sec=1``, five
    requests at t=0::

        t=0  wait 0, wait 0, wait 0     (the burst)
        t=0  wait 1, wait 2             (reserved: they go at t=1 and t=2)

    Args:
        capacity: the largest burst, in tokens (> 0).
        refill_per_sec: tokens added per second (> 0): the sustained rate.
            ``math.inf`` never limits (every request goes at once; a provider's
            pause still holds). ``0`` is an allowance of ``capacity`` tokens that
            never refills: a request goes at once while it fits, and never once it
            does not (``acquire`` raises ``AcquireTimeout`` at once, ``retry_after``
            infinite); ``refund`` gives tokens back. It takes no ``low_share``,
            ``adaptive`` nor ``lease``.
        backend: where the state lives; ``None`` for private in-process state.
        name: the shared budget's name; required with a shared backend.
        clock: time source and sleeper; tests pass a :class:`ManualClock`.
        guard: seconds a request may leave after its grant with the limit still
            kept as the provider sees it; here ``guard * refill_per_sec`` tokens of
            the capacity are kept back. Default 0 (see ``ratelimit size``).
        low_share: two priorities (0 < share < 1): the limiter acquires at high
            priority, ``limiter.low`` at low priority with this share of the rate and
            capacity (rounded down to whole tokens; the high priority keeps the rest,
            at least one each). A high request never waits behind queued low ones.
            ``None`` (default): one priority.
        borrow: whether low requests may use high-priority capacity that is idle
            (default ``True``); ``False`` caps them at ``low_share``.
        high_reserve: the tokens of high-priority capacity a borrowing low request
            must leave ready for a high one (default 1).
        adaptive: learn the rate from the provider's refusals (an :class:`Adaptive`):
            ``refill_per_sec`` is then the ceiling, and every worker sharing the
            budget learns one rate below it. ``None`` (default): the configured rate.
        lease: on a shared backend, seconds (<= 60) of a *lease*: each process takes
            a batch of the budget sized to its demand in one store call and grants
            from it locally for that long (docs/fleets.md, "Hot limiters"). The fleet
            never exceeds the limit: ``lease * refill_per_sec`` tokens of the capacity
            are kept back. ``None`` (default): every grant asks the store. In process
            it changes nothing.
        shadow: decide and record every request as usual, but never make a caller
            wait nor refuse one: ``acquire`` returns 0 at once and ``try_acquire``
            ``True``. ``stats()``, the ``Granted``/``Denied`` events (``shadow=True``)
            and the Prometheus ``shadow_*`` metrics count what the limit would have
            done, to roll a new limit out safely. Default ``False``.
    """

    __slots__ = ()
    numbers = ("capacity", "refill_per_sec")

    def __init__(
        self,
        capacity: float,
        refill_per_sec: float,
        *,
        backend: Backend | None = None,
        name: str | None = None,
        clock: Clock | None = None,
        guard: float | timedelta | None = None,
        low_share: float | None = None,
        borrow: bool | None = None,
        high_reserve: float | None = None,
        adaptive: Adaptive | None = None,
        lease: float | timedelta | None = None,
        shadow: bool = False,
    ) -> None:
        refill = _validate.rate("refill_per_sec", refill_per_sec, unlimited=True, none=True)
        alg: Gcra | Allowance
        if refill == 0.0:
            alg = Allowance(_validate.positive("capacity", capacity))
            _allowance_only(low_share=low_share, adaptive=adaptive, lease=lease)
        else:
            alg = Gcra(_validate.positive("capacity", capacity), refill)
            _bounded("refill_per_sec", refill_per_sec, alg.capacity, alg.rate)
        super().__init__(
            alg,
            guard=guard,
            backend=backend,
            name=name,
            clock=clock,
            low_share=low_share,
            borrow=borrow,
            high_reserve=high_reserve,
            adaptive=adaptive,
            lease=lease,
            shadow=shadow,
        )

    @property
    def capacity(self) -> float:
        return self._configured.params()[0]

    @property
    def refill_per_sec(self) -> float:
        return self._configured.params()[1]

    def _describe(self) -> str:
        return f"capacity={self.capacity:g}, refill_per_sec={self.refill_per_sec:g}"


class LeakyBucket(SingleLimiter):
    """Smoothing: grants spaced ``1 / leak_per_sec`` apart, no bursts.

    Requests queue and leave one interval apart; the bucket holds at most ``capacity``
    tokens. A request that finds it full overflows: :meth:`acquire` raises
    :class:`AcquireTimeout` at once, whatever its timeout, with ``retry_after`` when
    there will be room. ``capacity=3, leak_per_sec=1``, four requests at t=0::

        wait 0, wait 1, wait 2, overflow (retry_after=1)

    Args:
        capacity: the most tokens queued, in tokens (> 0).
        leak_per_sec: tokens let through per second (> 0).
        backend, name, clock: as for :class:`TokenBucket`.
        guard: seconds a request may leave after its grant with the spacing still
            kept as the provider sees it: each token's interval grows by ``guard``.
            Default 0.
        adaptive: learn the rate from the provider's refusals, as for
            :class:`TokenBucket`; ``leak_per_sec`` is the ceiling.
        shadow: decide and count, but never wait nor refuse, as for :class:`TokenBucket`.

    A leaky bucket takes no ``low_share`` (a ``TypeError``, as for any argument it
    does not have): it promises even spacing, which two lanes deciding apart cannot
    keep. Use a :class:`TokenBucket` for priorities. Nor ``lease``: a lease hands a
    batch out at once, which is no spacing at all.
    """

    __slots__ = ()
    numbers = ("capacity", "leak_per_sec")

    def __init__(
        self,
        capacity: float,
        leak_per_sec: float,
        *,
        backend: Backend | None = None,
        name: str | None = None,
        clock: Clock | None = None,
        guard: float | timedelta | None = None,
        adaptive: Adaptive | None = None,
        shadow: bool = False,
    ) -> None:
        _no_end(
            "leak_per_sec",
            leak_per_sec,
            zero="a queue that never drains grants nothing (an allowance of capacity tokens that never "
            "refills is TokenBucket(capacity, 0))",
            infinite="a queue that drains at once spaces nothing (no limit at all is TokenBucket(capacity, math.inf))",
        )
        alg = LeakyQueue(_validate.positive("capacity", capacity), _validate.rate("leak_per_sec", leak_per_sec))
        _bounded("leak_per_sec", leak_per_sec, alg.capacity, alg.rate)
        _bounded("guard", guard, alg.capacity, alg.guarded(guard_seconds(guard, clock, 0.0)).rate)
        super().__init__(alg, guard=guard, backend=backend, name=name, clock=clock, adaptive=adaptive, shadow=shadow)

    @property
    def capacity(self) -> float:
        return self._configured.params()[0]

    @property
    def leak_per_sec(self) -> float:
        return self._configured.params()[1]

    def _describe(self) -> str:
        return f"capacity={self.capacity:g}, leak_per_sec={self.leak_per_sec:g}"


class SlidingWindow(SingleLimiter):
    """At most ``limit`` tokens in ANY interval of ``window_seconds``.

    The exact variant (default) logs each grant of the last window: memory grows with
    ``limit``. ``approximate=True`` counts 21 aligned sub-windows of
    ``window_seconds / 20`` instead (O(1) memory) with the same promise (the proof is
    in ``ratelimit._algorithms.sliding_window_counter``); under saturation it grants at
    least 20/21 of what the exact log does. ``limit=2, window_seconds=10``::

        t=0 wait 0, t=4 wait 0, t=5 wait 5 (goes at t=10, when the t=0 grant ages out)

    Args:
        limit: the most tokens per window (> 0).
        window_seconds: the window's length, seconds or ``timedelta`` (> 0).
        approximate: use the O(1) sub-window counter instead of the exact log.
        backend, name, clock: as for :class:`TokenBucket`.
        guard: seconds a request may leave after its grant with the limit still
            kept as the provider sees it: a grant counts for ``window_seconds +
            guard``. Default :attr:`default_guard` on real time, 0 on an
            injected clock.
        low_share, borrow, high_reserve: two priorities, as for
            :class:`TokenBucket`; the low priority holds ``low_share`` of the limit,
            rounded down to whole tokens, in the same window.
        adaptive: learn the rate from the provider's refusals, as for
            :class:`TokenBucket`; ``limit / window_seconds`` is the ceiling.
        lease: spend the shared budget locally in leases of that many seconds, as
            for :class:`TokenBucket`; each grant then counts for ``window_seconds +
            guard + lease``.
        shadow: decide and count, but never wait nor refuse, as for :class:`TokenBucket`.
    """

    __slots__ = ()
    numbers = ("limit", "window_seconds")
    default_guard = DEFAULT_GUARD

    def __init__(
        self,
        limit: float,
        window_seconds: float | timedelta,
        *,
        approximate: bool = False,
        backend: Backend | None = None,
        name: str | None = None,
        clock: Clock | None = None,
        guard: float | timedelta | None = None,
        low_share: float | None = None,
        borrow: bool | None = None,
        high_reserve: float | None = None,
        adaptive: Adaptive | None = None,
        lease: float | timedelta | None = None,
        shadow: bool = False,
    ) -> None:
        if not isinstance(approximate, bool):
            raise TypeError(f"approximate must be a bool, got {approximate!r}")
        _no_end(
            "limit",
            limit,
            zero="a window that grants nothing",
            infinite="no limit at all is TokenBucket(capacity, math.inf)",
        )
        _no_end(
            "window_seconds",
            window_seconds,
            zero="an empty window counts nothing",
            infinite="at most limit in all time is an allowance that never refills, TokenBucket(limit, 0)",
        )
        checked = (_validate.positive("limit", limit), _validate.duration("window_seconds", window_seconds))
        _validate.horizon("window_seconds", window_seconds, checked[1], "the window")
        if guard is not None:
            seconds = guard_seconds(guard, clock, DEFAULT_GUARD)
            _validate.horizon("guard", guard, checked[1] + seconds, "the window with its guard")
        alg: Algorithm[Any] = WindowCounter(*checked) if approximate else WindowLog(*checked)
        super().__init__(
            alg,
            guard=guard,
            backend=backend,
            name=name,
            clock=clock,
            low_share=low_share,
            borrow=borrow,
            high_reserve=high_reserve,
            adaptive=adaptive,
            lease=lease,
            shadow=shadow,
        )

    @property
    def limit(self) -> float:
        return self._configured.most

    @property
    def window_seconds(self) -> float:
        return self._configured.params()[1]

    @property
    def approximate(self) -> bool:
        return isinstance(self._configured, WindowCounter)

    def _describe(self) -> str:
        extra = ", approximate=True" if self.approximate else ""
        return f"limit={self.limit:g}, window_seconds={self.window_seconds:g}{extra}"
