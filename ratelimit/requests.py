"""A requests adapter that rate-limits, retries and breaks the circuit on every request.

One line to set up::

    http = session(TokenBucket(capacity=20, refill_per_sec=1000 / 60))

or mount :class:`RateLimitAdapter` on a session of your own. Every request sent through
it goes through one :class:`~ratelimit.Retry`: acquire from the limiter, send, feed
the response's headers back to the limiter, classify it, back off and try again if it
failed transiently (honouring ``Retry-After``), with the circuit breaker asked before
and told after every attempt. When the retries run out the adapter raises
:class:`~ratelimit.RetryError`, whose ``result`` is the last response; a permanent
failure (a 404, say) is returned as it is, after one attempt.

A response that did not pass the classifier (it will be retried, or it is the failure
handed back) has its body read and its connection released inside the adapter; its
``content`` stays available, with ``stream=True`` too.

A request whose body is a stream (a generator or iterator, or a file whose position
cannot be told) cannot be sent twice: it gets exactly one attempt, still through the
limiter, the feedback and the breaker. If that attempt fails transiently the adapter
raises :class:`~ratelimit.RetryError` (reason ``"attempts"``). Bytes, ``data=``,
``json=`` and seekable files (rewound before each attempt) are retried.

Needs the ``requests`` extra: ``pip install 'ratelimit-fleet[requests]'``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import requests
from requests.adapters import HTTPAdapter
from requests.utils import rewind_body

from ._integrations.http import Policy
from ._limiting.concurrency import ConcurrencyLimit
from ._resilience.retry import Retry

if TYPE_CHECKING:
    from ._limiting.front import Acquirer
    from ._resilience.breaker import CircuitBreaker

__all__ = ["RateLimitAdapter", "session"]


class RateLimitAdapter(HTTPAdapter):
    """A requests transport adapter: limiter, retries and circuit breaker on every request.

    Args:
        limiter: acquired from before every attempt, first or retry, and fed every
            response's headers (``None``: no limiter).
        retry: the retry policy, a :class:`~ratelimit.Retry` carrying its own limiter
            and breaker; default ``Retry(limiter=limiter, breaker=breaker)``.
        breaker: a :class:`~ratelimit.CircuitBreaker` every attempt passes through;
            an open circuit raises :class:`~ratelimit.CircuitOpen` without sending.
        concurrency: a :class:`~ratelimit.ConcurrencyLimit` each attempt holds a
            slot of, from just before it is sent (after the limiter's grant) until
            its body is read: at once unless ``stream=True``, and then until you
            close the response (or it is garbage-collected).
        adapter_kwargs: passed to ``HTTPAdapter`` (``pool_connections``,
            ``pool_maxsize``, ``pool_block``). ``max_retries`` may only be 0: urllib3's
            own retries would go around the limiter.

    Raises:
        TypeError: an argument of the wrong type.
        ValueError: ``retry`` given together with ``limiter`` or ``breaker``, or a
            ``max_retries`` other than 0.
    """

    def __init__(
        self,
        limiter: Acquirer | None = None,
        *,
        retry: Retry | None = None,
        breaker: CircuitBreaker | None = None,
        concurrency: ConcurrencyLimit | None = None,
        **adapter_kwargs: Any,
    ) -> None:
        policy = Policy(type(self).__name__, limiter, retry, breaker, concurrency)
        retries = adapter_kwargs.get("max_retries", 0)
        # None is not "none" to requests: it means urllib3's default of three retries.
        if isinstance(retries, bool) or retries != 0:
            raise ValueError(
                f"max_retries must be 0: retries belong to the Retry, which acquires from the limiter "
                f"before each one, and urllib3's would not; got max_retries={retries!r}"
            )
        self._policy = policy
        self.retry = policy.retry
        self.concurrency = concurrency
        super().__init__(**adapter_kwargs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(retry={self.retry!r})"

    def send(
        self,
        request: requests.PreparedRequest,
        stream: bool = False,
        timeout: float | tuple[float, float] | tuple[float, None] | None = None,
        verify: bool | str = True,
        cert: bytes | str | tuple[bytes | str, bytes | str] | None = None,
        proxies: Mapping[str, str] | None = None,
    ) -> requests.Response:
        """Send ``request`` under the policy; raises :class:`~ratelimit.RetryError` on giving up."""
        rewind = _rewinder(request)
        return self._policy.runner(rewind is not None).call(
            self._attempt, request, rewind, stream, timeout, verify, cert, proxies
        )

    def _attempt(
        self,
        request: requests.PreparedRequest,
        rewind: Callable[[], None] | None,
        stream: bool,
        timeout: float | tuple[float, float] | tuple[float, None] | None,
        verify: bool | str,
        cert: bytes | str | tuple[bytes | str, bytes | str] | None,
        proxies: Mapping[str, str] | None,
    ) -> requests.Response:
        if rewind is not None:
            rewind()
        if self.concurrency is None:
            return self._send(request, stream, timeout, verify, cert, proxies)[0]
        lease = self.concurrency.take()
        try:
            response, read = self._send(request, stream, timeout, verify, cert, proxies)
            if not read and not stream:
                # requests reads the body after the adapter returns: read it inside the slot.
                response.content  # noqa: B018 - reading is the point
                read = True
        except BaseException:
            lease.release()
            raise
        if read:
            lease.release()
            return response
        close = response.close

        def close_and_free() -> None:
            try:
                close()
            finally:
                lease.release()

        response.close = close_and_free  # type: ignore[method-assign]
        return response

    def _send(
        self,
        request: requests.PreparedRequest,
        stream: bool,
        timeout: float | tuple[float, float] | tuple[float, None] | None,
        verify: bool | str,
        cert: bytes | str | tuple[bytes | str, bytes | str] | None,
        proxies: Mapping[str, str] | None,
    ) -> tuple[requests.Response, bool]:
        """Send once; also says whether the body has been read (and the connection freed)."""
        response = super().send(request, stream, timeout, verify, cert, proxies)
        if not self._policy.passes(response):
            # Read, so the body survives for whoever gets this response; closed, so
            # the connection goes back to the pool before the next attempt needs one.
            try:
                response.content  # noqa: B018 - reading is the point
            finally:
                response.close()
            return response, True
        return response, False


def session(
    limiter: Acquirer | None = None,
    *,
    retry: Retry | None = None,
    breaker: CircuitBreaker | None = None,
    concurrency: ConcurrencyLimit | None = None,
) -> requests.Session:
    """A ``requests.Session`` with a :class:`RateLimitAdapter` mounted for ``http://``
    and ``https://``; the arguments are the adapter's. Close it when done (or use it
    in a ``with`` block)."""
    adapter = RateLimitAdapter(limiter, retry=retry, breaker=breaker, concurrency=concurrency)
    http = requests.Session()
    http.mount("http://", adapter)
    http.mount("https://", adapter)
    return http


def _rewinder(request: requests.PreparedRequest) -> Callable[[], None] | None:
    """What to do before each attempt to resend the body, or ``None`` if it cannot be."""
    body: object = request.body
    if body is None or isinstance(body, (bytes, str)):
        return _nothing
    # requests records a file body's starting position when it prepares the request
    # (an int; a sentinel object when tell() failed) and rewinds to it on redirects.
    if callable(getattr(body, "seek", None)) and isinstance(getattr(request, "_body_position", None), int):
        return lambda: rewind_body(request)
    return None


def _nothing() -> None:
    pass
