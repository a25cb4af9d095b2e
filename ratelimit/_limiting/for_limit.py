"""``ratelimit.for_limit``: the limiter for a provider's limit, from the provider's words.

A provider writes its limit as a rate ("5/s", "1000/min", "10000/day") and maybe a
burst. ``for_limit`` reads it (``ratelimit._validate.parse_rate``) and builds the token bucket that
``ratelimit size`` recommends for it (``ratelimit._limiting.sizing``, the one set of
rules both use): a provider enforcing exactly that limit, per window or as a bucket,
never refuses what it grants, and it grants all but the headroom of the rate.
"""

from __future__ import annotations

from datetime import timedelta

from .. import _validate
from .._clock import Clock
from .._stores.store import Backend
from .._validate import parse_rate
from .limiters import TokenBucket
from .sizing import DEFAULT_HEADROOM, settings, token_bucket_size

__all__ = ["for_limit"]

#: The longest rate text read: "1,000,000/10 minutes" is 20 characters.
_LONGEST = 100


def for_limit(
    limit: str,
    *,
    burst: float | None = None,
    backend: Backend | None = None,
    name: str | None = None,
    clock: Clock | None = None,
    headroom: float = DEFAULT_HEADROOM,
    guard: float | timedelta | None = None,
) -> TokenBucket:
    """The limiter for a provider's published limit, written as the provider writes it.

    ``for_limit("1000/min", burst=20)`` is the ``TokenBucket`` that ``ratelimit size
    --limit 1000/min --burst 20`` recommends. A provider counting ``limit`` in any
    window of its period (or, with a burst, a bucket of ``burst`` refilled at its
    rate) sees no more than that from it, requests sent up to ``guard`` late
    included, and gets ``1 - headroom`` of its rate when callers keep it busy::

        >>> import ratelimit
        >>> ratelimit.for_limit("5/s")
        TokenBucket(capacity=1, refill_per_sec=4.75)
        >>> ratelimit.for_limit("1000/min", burst=20)
        TokenBucket(capacity=19, refill_per_sec=15.8333)

    Without a burst the capacity is what the window leaves after the rate (a burst
    at once, then a window's worth at the rate, stays within the limit); a burst no
    larger than the limit is kept as both readings of the provider's words allow.
    The derivations are in ``ratelimit size``'s documentation (docs/sizing.md).

    Args:
        limit: the provider's limit: a count, a slash and a period, ``"5/s"``,
            ``"1000/min"``, ``"5000/hour"``, ``"10000/day"``, ``"100/10s"`` (units
            s, sec, second, min, minute, h, hour, d, day, and their plurals).
        burst: the provider's published burst, if it publishes one (> 0).
        backend, name, clock: as for :class:`TokenBucket`; a shared backend needs
            a ``name``, which every worker on the budget passes.
        headroom: the fraction of the rate left unused (0 to below 1, default
            0.05), the margin for retries and clock steps.
        guard: seconds a request may leave after its grant with the provider's
            limit still kept (default 0.05 s, on any clock: the sizes are the same
            in tests as in production), folded into the capacity and refill.

    Raises:
        TypeError: ``limit`` is not a str (or another argument of the wrong type).
        ValueError: ``limit`` is not a rate, or an argument is out of range; the
            message names it and repeats the value.
    """
    if not isinstance(limit, str):
        raise TypeError(
            f"limit must be the provider's rate as text, e.g. '5/s' or '1000/min', got "
            f"{type(limit).__name__} {_validate.shown(limit)}"
        )
    if len(limit) > _LONGEST:
        raise ValueError(f"limit must be a rate like '1000/min', got {_validate.shown(limit)}")
    rate = parse_rate(limit, "limit")
    checked, share, seconds = settings(burst, headroom, guard)
    size = token_bucket_size(rate, checked, share, seconds)
    try:
        return TokenBucket(size.capacity, size.refill_per_sec, backend=backend, name=name, clock=clock)
    except ValueError as error:
        if "refill_per_sec" not in str(error):  # backend, name or clock: named as given
            raise
        # The sizes come from `limit` and `burst`: name those, not numbers the caller never wrote.
        given = f"limit={limit!r}" + ("" if burst is None else f", burst={burst!r}")
        raise ValueError(
            f"{given} calls for TokenBucket(capacity={size.capacity:g}, refill_per_sec={size.refill_per_sec:g}), "
            f"which no limiter keeps: {error}"
        ) from None
