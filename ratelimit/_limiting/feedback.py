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
    """``remaining`` until ``reset`` as the stores keep it, spread evenly over the time
    to the reset (``holes.pace``), with what the provider says of its refill; ``None``
    where less than one may go before the reset (a pause).

    - A bucket that refills evenly (``info.gradual``: OpenAI's, Anthropic's) is full at
      the reset: ``limit`` over the reset, which never asks for a token before it is
      back (the k-th is due when the bucket has gained at least k less what it held).
    - A budget that ``refills`` at a policy's ``limit`` per ``window`` (the IETF
      fields' ``q`` and ``w``) comes back at that pace, ``t`` being when more comes:
      the policy's pace over ``t`` is allowed where less remains now. With none left,
      a reset over a second is waited out; one of a second or less may be a fraction
      rounded up (whole seconds), so the policy's pace decides.
    - Otherwise (a window whole again at its reset: GitHub's, GitLab's),
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
    """Seconds until the budget holds one more than ``remaining``: ``reset``, unless it
    refills evenly (``gradual``) or at a policy's pace with a reset of a second or less.

    An even bucket gains ``limit - remaining`` over ``reset``, one every
    ``reset / (limit - remaining)`` seconds; with less than one to come back, or
    figures that do not fit that reading, the whole reset. Neither allows more than
    the provider's own figures. A reset of one whole second or less (the IETF ``t``)
    means more comes within it: a policy of ``limit`` per ``window`` has one back in
    ``window / limit``.
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
    - ``remaining`` with a reset bounds every grant until the reset, paced evenly
      (``_paced``); a 429 pauses whatever it claims remains. Less than one remaining
      pauses until one more is back (``_until_more``).
    - A 503 without ``Retry-After`` is an outage, not a refusal: its reset pauses
      nobody; its ``remaining`` counts as any response's.
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
    learned rate (``adaptive=``): any 429, and a 503 with ``Retry-After``. Feed back
    other throttles (gRPC ``RESOURCE_EXHAUSTED``, "SlowDown") as ``status=429``."""
    return status == 429 or (status == 503 and info.retry_after is not None)
