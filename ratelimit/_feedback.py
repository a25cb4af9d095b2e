"""What a response asks of the limiter: the decision behind ``feedback()``, no I/O."""

from __future__ import annotations

from ._headers import RateLimitInfo

__all__ = ["restriction"]

#: Statuses that mean "you went too fast" (503 often carries Retry-After too).
PUSHBACK = frozenset({429, 503})


def restriction(info: RateLimitInfo, status: int | None) -> tuple[float, float] | None:
    """``(remaining, seconds)``: at most ``remaining`` more before ``seconds`` from now.

    - ``Retry-After`` on a refusal (or with no status given) pauses: ``(0, retry_after)``.
    - ``remaining`` with a reset lowers the budget to it until the reset; on a 429 the
      provider has refused us, whatever it claims remains, so that pauses too.
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
        if status == 429:
            return 0.0, info.reset_after
        if info.remaining is not None:
            return info.remaining, info.reset_after
    return None
