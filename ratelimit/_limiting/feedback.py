"""What a response asks of the limiter: the decision behind ``feedback()``, no I/O."""

from __future__ import annotations

from .._headers import RateLimitInfo

__all__ = ["restriction", "throttled"]

#: Statuses that mean "you went too fast" (503 often carries Retry-After too).
PUSHBACK = frozenset({429, 503})

#: A reset nearer than this many seconds is kept whole; a farther one is planned a
#: grant at a time (see ``_near``).
HORIZON = 10.0


def _near(remaining: float, seconds: float, lead: float) -> tuple[float, float]:
    """``remaining`` until ``seconds``, as the next grant at the even pace.

    A limiter keeps "at most R more before T" by placing those R grants as late as
    they can go and still fit. Read whole, an hourly window (GitHub: 4,000 of 5,000
    left, reset in 58 minutes) would stall every worker for ten minutes while budget
    remains; and planned over any stretch of several grants, each response fed back
    plans a new stretch from its own moment, so the grants placed at a stretch's end
    keep moving away (fed back after every response, one grant every 9 s where 1.15 a
    second was the pace). So a far reset plans one grant only, due when the time one
    grant takes at the even pace T/R is over: the next response plans the one after,
    and a worker that feeds back every response goes at that pace (less the time each
    response takes to come back). ``lead`` is the time the limiter's own rate puts
    between two grants: "one more before T" lets it go that much before T, so T is
    moved on by as much. A reset within ``HORIZON`` seconds, or fewer than one more
    before it, is kept whole; a remaining of 0 is a pause until the reset.
    """
    if remaining <= 0 or seconds <= HORIZON:
        return remaining, seconds
    due = seconds / remaining + lead
    if due >= seconds:
        return remaining, seconds
    return 1.0, due


def _until_more(info: RateLimitInfo, reset: float) -> float:
    """Seconds until the budget holds one more than ``remaining``: ``reset``, unless
    it refills evenly (``gradual``: OpenAI's and Anthropic's buckets, whose reset is
    when they are full again).

    Such a bucket gains ``limit - remaining`` over ``reset``, so one comes back every
    ``reset / (limit - remaining)`` seconds (``reset / limit`` from empty). With less
    than one to come back (fractions), not one more fits before it is full: the whole
    reset. A figure that does not fit that reading (no limit, no remaining, a limit
    not above the remaining) leaves the whole reset too, which never allows more than
    the provider's own figures; nor does the shorter time, since up to it no more than
    ``remaining`` can be back.
    """
    limit, remaining = info.limit, info.remaining
    if info.gradual and limit is not None and remaining is not None and limit > remaining:
        return reset / max(1.0, limit - remaining)
    return reset


def restriction(info: RateLimitInfo, status: int | None, lead: float = 0.0) -> tuple[float, float] | None:
    """``(remaining, seconds)``: at most ``remaining`` more before ``seconds`` from now.

    - ``Retry-After`` on a refusal (or with no status given) pauses: ``(0, retry_after)``.
    - ``remaining`` with a reset lowers the budget to it until the reset (planned over
      a grant at a time when the reset is far: see ``_near``); on a 429 the
      provider has refused us, whatever it claims remains, so that pauses too. For a
      bucket that refills as it goes (``info.gradual``), "until the reset" is until
      one more is back (see ``_until_more``), not until it is full.
    - A 503 without ``Retry-After`` is an outage rather than a refusal: its reset
      header (often a whole hour's window) does not pause anyone; its ``remaining``
      counts like any other response's. Retrying it is the retry runner's business.
    - Anything else (no reset, a reset already past, a success with only a
      ``Retry-After``) asks nothing.
    """
    refused = status in PUSHBACK
    if info.retry_after is not None and info.retry_after > 0 and (refused or status is None):
        return 0.0, info.retry_after
    if info.reset_after is not None and info.reset_after > 0:
        seconds = _until_more(info, info.reset_after)
        if status == 429:
            return 0.0, seconds
        if info.remaining is not None:
            return _near(info.remaining, seconds, lead)
    return None


def throttled(info: RateLimitInfo, status: int | None) -> bool:
    """Whether a response is the provider refusing us for going too fast, which cuts a
    learned rate (``adaptive=``): any 429, and a 503 that says when to come back (a
    503 without ``Retry-After`` is an outage, not a throttle). For a throttle that
    comes in another form (a gRPC ``RESOURCE_EXHAUSTED``, an SDK's "SlowDown"), feed
    back ``status=429``."""
    return status == 429 or (status == 503 and info.retry_after is not None)
