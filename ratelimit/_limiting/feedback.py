"""What a response asks of the limiter: the decision behind ``feedback()``, no I/O."""

from __future__ import annotations

from .._headers.parse import RateLimitInfo

__all__ = ["restriction", "throttled"]

#: Statuses that mean "you went too fast" (503 often carries Retry-After too).
PUSHBACK = frozenset({429, 503})


def _policy(info: RateLimitInfo) -> float | None:
    """The pace of the policy a response names (``limit`` per ``window``: the IETF
    fields' ``q`` and ``w``), per second; ``None`` where it names none."""
    limit, window = info.limit, info.window
    if limit is None or not window or not limit > 0:
        return None
    return limit / window


def _paced(info: RateLimitInfo, remaining: float, reset: float) -> tuple[float, float] | None:
    """``remaining`` until ``reset`` as the stores keep it, spread evenly over the time to
    the reset (see ``holes.pace``), with what the provider says of its refill; ``None``
    where less than one may go before the reset (a pause).

    - A bucket that refills evenly (``info.gradual``: OpenAI's, Anthropic's) holds
      ``remaining`` now and ``limit`` at the reset, when it is full: spread evenly,
      ``limit`` over the reset, which leaves it empty just when it would have been
      full, and never asks for a token before it is back (the k-th is due at k times
      the interval, when the bucket has gained at least k less what it held).
    - A budget that ``refills`` at a policy's ``limit`` per ``window`` (the IETF
      structured fields: ``RateLimit-Policy``'s ``q`` and ``w``) comes back at that
      pace: ``t`` is when more comes, not all of it, so the policy's pace over it is
      allowed where less remains now.
      With none left, a reset of more than a second is waited out; one of a second
      or less may be a fraction of a second rounded up (the fields count whole
      seconds), so it is the policy's pace that decides.
    - Otherwise (a window whose reset is when it is whole again: GitHub's, GitLab's),
      ``remaining`` over the reset.
    """
    limit = info.limit
    if info.gradual and limit is not None and limit > remaining and limit >= 1.0:
        return limit, reset
    pace = _policy(info) if info.refills else None
    if pace is not None and (remaining >= 1.0 or reset <= 1.0):
        refill = pace * reset
        return (refill, reset) if refill > remaining and refill >= 1.0 else _whole(remaining, reset)
    return _whole(remaining, reset)


def _whole(remaining: float, reset: float) -> tuple[float, float] | None:
    return (remaining, reset) if remaining >= 1.0 else None


def _until_more(info: RateLimitInfo, reset: float) -> float:
    """Seconds until the budget holds one more than ``remaining``: ``reset``, unless
    it refills evenly (``gradual``: OpenAI's and Anthropic's buckets, whose reset is
    when they are full again), or at a policy's pace with a reset of a second or less.

    Such a bucket gains ``limit - remaining`` over ``reset``, so one comes back every
    ``reset / (limit - remaining)`` seconds (``reset / limit`` from empty). With less
    than one to come back (fractions), not one more fits before it is full: the whole
    reset. A figure that does not fit that reading (no limit, no remaining, a limit
    not above the remaining) leaves the whole reset too, which never allows more than
    the provider's own figures; nor does the shorter time, since up to it no more than
    ``remaining`` can be back.

    A reset in whole seconds (the IETF fields' ``t``) of one second or less says more
    comes within the second, not at its end: a budget that ``refills`` at ``limit``
    per ``window`` has one back in ``window / limit``.
    """
    limit, remaining = info.limit, info.remaining
    if info.gradual and limit is not None and remaining is not None and limit > remaining:
        return reset / max(1.0, limit - remaining)
    pace = _policy(info) if info.refills else None
    if reset <= 1.0 and pace is not None and 1.0 / pace < reset:
        return 1.0 / pace
    return reset


def restriction(info: RateLimitInfo, status: int | None) -> tuple[float, float] | None:
    """``(remaining, seconds)``: at most ``remaining`` more before ``seconds`` from now,
    spread evenly over them (a pause when ``remaining`` is below one).

    - ``Retry-After`` on a refusal (or with no status given) pauses: ``(0, retry_after)``.
    - ``remaining`` with a reset bounds every grant until the reset, paced evenly (see
      ``_paced``); on a 429 the provider has refused us, whatever it claims remains,
      so that pauses too. Less than one remaining pauses until one more is back (see
      ``_until_more``): for a bucket that refills as it goes (``info.gradual``), not
      until it is full.
    - A 503 without ``Retry-After`` is an outage rather than a refusal: its reset
      header (often a whole hour's window) does not pause anyone; its ``remaining``
      counts like any other response's. Retrying it is the retry runner's business.
    - Anything else (no reset, a reset already past, a success with only a
      ``Retry-After``) asks nothing.
    """
    refused = status in PUSHBACK
    if info.retry_after is not None and info.retry_after > 0 and (refused or status is None):
        return 0.0, info.retry_after
    reset = info.reset_after
    if reset is not None and reset > 0:
        if status == 429:
            return 0.0, _until_more(info, reset)
        remaining = info.remaining
        if remaining is not None:
            change = _paced(info, remaining, reset)
            return change if change is not None else (0.0, _until_more(info, reset))
    return None


def throttled(info: RateLimitInfo, status: int | None) -> bool:
    """Whether a response is the provider refusing us for going too fast, which cuts a
    learned rate (``adaptive=``): any 429, and a 503 that says when to come back (a
    503 without ``Retry-After`` is an outage, not a throttle). For a throttle that
    comes in another form (a gRPC ``RESOURCE_EXHAUSTED``, an SDK's "SlowDown"), feed
    back ``status=429``."""
    return status == 429 or (status == 503 and info.retry_after is not None)
