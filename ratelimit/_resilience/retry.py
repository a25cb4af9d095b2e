"""The retry runner: attempts, backoff, deadline, limiter and breaker, in one place.

The whole policy is one generator, :meth:`Retry._steps`, that never does I/O itself:
it yields what it needs done (ask the breaker, acquire from the limiter, make the
call, give feedback, sleep) and is sent back the answer, or has the exception thrown
into it. :meth:`Retry.call` and :meth:`Retry.call_async` are the two drivers that do
those things, blocking or awaiting, so the synchronous and asyncio paths cannot drift
apart.
"""

from __future__ import annotations

import logging
import math
import random
import threading
from collections.abc import Awaitable, Callable, Coroutine, Generator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal, ParamSpec, TypeVar, overload

from .. import _validate
from .._clock import Clock, SystemClock
from .._errors import AcquireTimeout, CircuitOpen, RetryError
from .._events import Attempt, AttemptFinished, CallFinished, Emitter, Event, GaveUp, RetryScheduled
from .._headers.parse import parse_rate_limit_headers
from .._limiting.front import Acquirer
from .._wrap import wrap
from .backoff import Backoff
from .breaker import CircuitBreaker, Ticket
from .outcome import Classifier, classify, headers_of, response_of, status_of

logger = logging.getLogger("ratelimit")

__all__ = ["Retry", "RetryStats"]

P = ParamSpec("P")
R = TypeVar("R")

#: Retry-After is honoured with a little upward jitter (up to this fraction of it), so
#: the workers the provider pushed back together do not return in the same instant.
RETRY_AFTER_JITTER = 0.1


@dataclass(frozen=True)
class RetryStats:
    """Counters of a :class:`Retry` since it was made."""

    #: Calls run through it, however they ended.
    calls: int
    #: ... that ended with a result the classifier accepted.
    succeeded: int
    #: ... that ended with a permanent failure (passed to the caller at once).
    permanent: int
    #: ... that it gave up on.
    gave_up: int
    #: ... refused by an open circuit.
    rejected: int
    #: Attempts made (first tries and retries).
    attempts: int
    #: Seconds spent waiting for the limiter, asleep in backoff, and inside calls.
    waited: float
    backoff: float
    in_calls: float


Outcome = Literal["ok", "permanent", "gave_up", "rejected"]
#: Where each way a call can end is counted in Retry._counts.
OUTCOMES: dict[Outcome, int] = {"ok": 1, "permanent": 2, "gave_up": 3, "rejected": 4}

# What the policy asks its driver to do, and what it is sent back:
#   ("allow",)                   -> a breaker ticket          (may raise CircuitOpen)
#   ("acquire", timeout)         -> the seconds waited        (may raise AcquireTimeout)
#   ("call",)                    -> the call's return value   (or its exception, thrown in)
#   ("feedback", headers, status)-> None
#   ("record", ticket, ok)       -> None    (ok: True success, False failure, None neither)
#   ("sleep", seconds)           -> None
Op = tuple[Any, ...]


class Retry:
    """Run a call until it succeeds, politely: backoff with jitter, a deadline, and
    optionally a limiter and a circuit breaker on every attempt.

    Args:
        max_attempts: how many calls at most, the first included (``None``: no limit,
            then ``deadline`` is required).
        deadline: the most time, in seconds (or a ``timedelta``), from the first attempt
            to the last one's start. Never slept past: a backoff or limiter wait that
            would cross it ends the run at once with :class:`RetryError`.
        backoff: the delay policy (default ``Backoff()``: 0.1 s doubling to 30 s, full
            jitter). A ``Retry-After`` from the provider (seconds or HTTP-date, or a
            429 with ``remaining: 0`` and a reset) is preferred over it, capped by its
            ``max_delay``, plus up to 10 % jitter.
        classify: ``classify(result, error) -> "ok" | "transient" | "permanent"``;
            the default retries 408, 429, 500, 502, 503, 504 and connection and
            timeout errors (see :func:`ratelimit.classify`).
        limiter: every attempt, first or retry, acquires ``tokens`` from it, and every
            response is fed back to it, so retries never push past the limit.
        tokens: the weight of one attempt on ``limiter``.
        breaker: every attempt passes through it; an open circuit raises
            :class:`CircuitOpen` at once.
        name: names this runner in events and logs.
        clock: time and sleep (tests pass a :class:`ManualClock`); default: the
            limiter's clock if there is a limiter, else the system clock.
        rng: the randomness for jitter; pass ``random.Random(seed)`` for repeatable
            delays.

    A call that returns normally and is classified ``"ok"`` (``None`` included) is
    returned. A permanent failure is passed on at once: its exception re-raised, or its
    response returned. A transient one is retried; when the runner gives up it raises
    :class:`RetryError` with every :class:`Attempt`.
    """

    def __init__(
        self,
        *,
        max_attempts: int | None = 5,
        deadline: float | timedelta | None = None,
        backoff: Backoff | None = None,
        classify: Classifier = classify,
        limiter: Acquirer | None = None,
        tokens: float = 1,
        breaker: CircuitBreaker | None = None,
        name: str | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if max_attempts is not None:
            if isinstance(max_attempts, bool) or not isinstance(max_attempts, int):
                raise TypeError(f"max_attempts must be an int or None, got {max_attempts!r}")
            if max_attempts < 1:
                raise ValueError(f"max_attempts must be >= 1, got {max_attempts!r}")
        self.deadline = None if deadline is None else _validate.duration("deadline", deadline)
        if max_attempts is None and self.deadline is None:
            raise ValueError("max_attempts=None needs a deadline: something must end the retries")
        if backoff is not None and not isinstance(backoff, Backoff):
            raise TypeError(f"backoff must be a Backoff, got {backoff!r}")
        if not callable(classify):
            raise TypeError(f"classify must be callable as classify(result, error), got {classify!r}")
        if limiter is not None and not isinstance(limiter, Acquirer):
            raise TypeError(f"limiter must be a limiter (TokenBucket, LeakyBucket, ...), got {limiter!r}")
        if limiter is not None:
            _validate.positive("tokens", tokens)
        if breaker is not None and not isinstance(breaker, CircuitBreaker):
            raise TypeError(f"breaker must be a CircuitBreaker, got {breaker!r}")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a str or None, got {name!r}")
        if rng is not None and not isinstance(rng, random.Random):
            raise TypeError(f"rng must be a random.Random, got {rng!r}")
        self.max_attempts = max_attempts
        self.backoff = backoff or Backoff()
        self.classify = classify
        self.limiter = limiter
        self.tokens = tokens
        self.breaker = breaker
        self.name = name
        self.clock: Clock = clock or getattr(limiter, "clock", None) or SystemClock()
        self._rng = rng or random.Random()
        self._events = Emitter()
        self._lock = threading.Lock()
        self._counts = [0, 0, 0, 0, 0, 0]  # calls, ok, permanent, gave_up, rejected, attempts
        self._seconds = [0.0, 0.0, 0.0]  # waited, backoff, in calls

    def __repr__(self) -> str:
        return (
            f"Retry(max_attempts={self.max_attempts!r}, deadline={self.deadline!r}, backoff={self.backoff!r}, "
            f"limiter={self.limiter!r}, breaker={self.breaker!r}, name={self.name!r})"
        )

    def once(self) -> Retry:
        """This policy cut to a single attempt, for a call that cannot be repeated (a
        request whose body was a stream). It shares this runner's subscribers and
        counters: its calls are this runner's calls in events and in :meth:`stats`."""
        single = Retry(
            max_attempts=1,
            deadline=self.deadline,
            backoff=self.backoff,
            classify=self.classify,
            limiter=self.limiter,
            tokens=self.tokens,
            breaker=self.breaker,
            name=self.name,
            clock=self.clock,
            rng=self._rng,
        )
        single._events, single._lock, single._counts, single._seconds = (
            self._events,
            self._lock,
            self._counts,
            self._seconds,
        )
        return single

    # -- events and counters --------------------------------------------------------

    def subscribe(self, callback: Callable[[Event], object]) -> Callable[[], None]:
        """Call ``callback(event)`` on this runner's events; returns the unsubscriber."""
        return self._events.subscribe(callback)

    def stats(self) -> RetryStats:
        """A snapshot of this runner's counters."""
        with self._lock:
            return RetryStats(*self._counts, *self._seconds)

    def _finished(self, outcome: Outcome, attempts: int, spent: list[float]) -> None:
        index = OUTCOMES[outcome]
        with self._lock:
            counts, seconds = self._counts, self._seconds
            counts[0] += 1
            counts[index] += 1
            counts[5] += attempts
            seconds[0] += spent[0]
            seconds[1] += spent[1]
            seconds[2] += spent[2]
        if self._events.hears(logging.DEBUG):
            self._events.emit(CallFinished(self.name, outcome, attempts, *spent))

    # -- the policy -------------------------------------------------------------------

    def _delay(
        self, retry: int, previous: float | None, response: object, status: int | None
    ) -> tuple[float, Literal["backoff", "retry-after"]]:
        """The wait before retry ``retry``, and whether the provider chose it."""
        headers = headers_of(response)
        ask: float | None = None
        if headers is not None:
            info = parse_rate_limit_headers(headers)
            ask = info.retry_after
            if ask is None and status == 429 and info.remaining == 0:
                ask = info.reset_after
        if ask is not None:
            asked = ask + self._rng.uniform(0.0, RETRY_AFTER_JITTER * ask)
            return min(self.backoff.max_delay, asked), "retry-after"
        return self.backoff.delay(retry, previous, self._rng), "backoff"

    def _steps(self) -> Generator[Op, Any, Any]:
        clock = self.clock
        started = clock.now()
        end = math.inf if self.deadline is None else started + self.deadline
        attempts: list[Attempt] = []
        spent = [0.0, 0.0, 0.0]  # waited, backoff, in calls
        slept = 0.0
        previous: float | None = None

        def finished(outcome: Outcome) -> None:
            self._finished(outcome, len(attempts), spent)

        def give_up(reason: Literal["attempts", "deadline"], result: object = None) -> RetryError:
            elapsed = clock.now() - started
            self._events.emit(GaveUp(self.name, reason, len(attempts), elapsed))
            finished("gave_up")
            return RetryError(reason, attempts, elapsed, result)

        while True:
            ticket: Ticket | None = None
            if self.breaker is not None:
                try:
                    ticket = yield ("allow",)
                except CircuitOpen:
                    finished("rejected")
                    raise
            waited = 0.0
            if self.limiter is not None:
                try:
                    # One deadline for everything: a grant due after it is not waited for.
                    timeout = None if end == math.inf else max(0.0, end - clock.now())
                    waited = yield ("acquire", timeout)
                except AcquireTimeout as exc:
                    if ticket is not None:
                        yield ("record", ticket, None)
                    if end == math.inf:
                        finished("gave_up")
                        raise
                    raise give_up("deadline") from exc
                except BaseException:
                    if ticket is not None:
                        yield ("record", ticket, None)
                    raise
            spent[0] += waited
            began = clock.now()
            result: Any = None
            error: BaseException | None = None
            try:
                result = yield ("call",)
            except Exception as exc:
                error = exc
            except BaseException:
                # Interrupted (Ctrl-C, cancelled): no verdict, but free the probe slot.
                if ticket is not None:
                    yield ("record", ticket, None)
                raise
            duration = clock.now() - began
            spent[2] += duration
            verdict = self.classify(result, error)
            response = response_of(result, error)
            status = status_of(response)
            attempts.append(Attempt(len(attempts) + 1, slept, waited, status, error, duration, verdict))
            if self._events.hears(logging.DEBUG):
                self._events.emit(AttemptFinished(self.name, len(attempts), status, error, duration, verdict))
            headers = headers_of(response)
            if self.limiter is not None and headers is not None:
                yield ("feedback", headers, status)
            if ticket is not None:
                # A 429 is the provider being busy with us, not down: it does not trip
                # the breaker; permanent failures mean it answered, so they count as up.
                yield ("record", ticket, None if status == 429 else verdict != "transient")

            if verdict == "ok":
                finished("ok")
                return result
            if verdict == "permanent":
                finished("permanent")
                if error is not None:
                    raise error
                return result
            if verdict != "transient":
                raise ValueError(f"classify must return 'ok', 'transient' or 'permanent', got {verdict!r}")
            if self.max_attempts is not None and len(attempts) >= self.max_attempts:
                raise give_up("attempts", result) from error
            delay, source = self._delay(len(attempts), previous, response, status)
            if clock.now() + delay > end:
                raise give_up("deadline", result) from error
            attempt = attempts[-1]
            self._events.emit(
                RetryScheduled(
                    self.name,
                    len(attempts),
                    delay,
                    f"{attempt.outcome}; {source}",
                    status,
                    None if error is None else type(error).__name__,
                    source,
                )
            )
            previous = slept = delay
            spent[1] += delay
            yield ("sleep", delay)

    # -- the drivers ------------------------------------------------------------------

    def call(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call ``fn(*args, **kwargs)`` under this policy; return what it returned."""
        steps = self._steps()
        reply: Any = None
        failure: BaseException | None = None
        while True:
            try:
                op = steps.send(reply) if failure is None else steps.throw(failure)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            reply, failure = None, None
            try:
                reply = self._do(op, fn, args, kwargs)
            except BaseException as exc:
                failure = exc

    def _do(self, op: Op, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        kind = op[0]
        if kind == "call":
            return fn(*args, **kwargs)
        if kind == "acquire":
            assert self.limiter is not None
            return self.limiter.acquire(self.tokens, op[1])
        if kind == "sleep":
            return self.clock.sleep(op[1])
        if kind == "feedback":
            assert self.limiter is not None
            return _quietly(self.limiter.feedback, op[1], op[2])
        assert self.breaker is not None
        if kind == "allow":
            return self.breaker.allow()
        return self.breaker.record(op[1], op[2])

    async def call_async(self, fn: Callable[P, Awaitable[R]], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """:meth:`call` for asyncio: ``fn(*args, **kwargs)`` is awaited."""
        steps = self._steps()
        reply: Any = None
        failure: BaseException | None = None
        while True:
            try:
                op = steps.send(reply) if failure is None else steps.throw(failure)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            reply, failure = None, None
            try:
                reply = await self._do_async(op, fn, args, kwargs)
            except BaseException as exc:
                failure = exc

    async def _do_async(self, op: Op, fn: Callable[..., Awaitable[Any]], args: Any, kwargs: Any) -> Any:
        kind = op[0]
        if kind == "call":
            return await fn(*args, **kwargs)
        if kind == "acquire":
            assert self.limiter is not None
            return await self.limiter.acquire_async(self.tokens, op[1])
        if kind == "sleep":
            return await self.clock.sleep_async(op[1])
        if kind == "feedback":
            assert self.limiter is not None
            return await _quietly_async(self.limiter.feedback_async, op[1], op[2])
        assert self.breaker is not None
        if kind == "allow":
            return await self.breaker.allow_async()
        return await self.breaker.record_async(op[1], op[2])

    # -- as a decorator -----------------------------------------------------------------

    @overload
    def __call__(self, fn: Callable[P, Coroutine[Any, Any, R]], /) -> Callable[P, Coroutine[Any, Any, R]]: ...

    @overload
    def __call__(self, fn: Callable[P, R], /) -> Callable[P, R]: ...

    def __call__(self, fn: Callable[..., Any], /) -> Callable[..., Any]:
        """Use the runner as a decorator on a plain or ``async def`` function."""
        return wrap(fn, self.call, self.call_async)


def _quietly(feedback: Callable[..., Any], headers: Any, status: int | None) -> None:
    # Feedback that cannot reach the store must not turn a finished call into a failure.
    try:
        feedback(headers, status)
    except Exception:
        logger.warning("feedback to the limiter failed; the call's outcome stands", exc_info=True)


async def _quietly_async(feedback: Callable[..., Awaitable[Any]], headers: Any, status: int | None) -> None:
    try:
        await feedback(headers, status)
    except Exception:
        logger.warning("feedback to the limiter failed; the call's outcome stands", exc_info=True)
