"""An aiohttp client middleware that rate-limits, retries and breaks the circuit on every request.

One line to set up::

    http = aiohttp.ClientSession(middlewares=(RateLimitMiddleware(TokenBucket(capacity=20, refill_per_sec=1000 / 60)),))

or ``session(limiter)``, which makes that session. Every request the session sends
(each redirect too) goes through one :class:`~ratelimit.Retry`: acquire from the
limiter, send, feed the response's status and headers back to the limiter, classify
it, back off and try again if it failed transiently (honouring ``Retry-After``), with
the circuit breaker asked before and told after every attempt. When the retries run
out the middleware raises :class:`~ratelimit.RetryError`, whose ``result`` is the last
response; a permanent failure (a 404, say) is returned as it is, after one attempt.

A response that did not pass the classifier (it will be retried, or it is the failure
handed back) has its body read and its connection released inside the middleware;
``read()``, ``text()`` and ``json()`` still answer from memory.

A request whose body is a stream (an async iterator, a file that cannot seek) cannot
be sent twice: it gets exactly one attempt, still through the limiter, the feedback
and the breaker. If that attempt fails transiently the middleware raises
:class:`~ratelimit.RetryError` (reason ``"attempts"``). Bytes, ``data=``, ``json=``,
seekable files and multipart bodies made of those are retried.

The session's ``timeout`` covers the whole request, waits for the limiter and
backoff included: give it room for them.

Needs the ``aiohttp`` extra: ``pip install 'ratelimit-fleet[aiohttp]'``.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

try:
    import aiohttp
    from aiohttp.payload import BytesPayload, IOBasePayload, Payload
except ImportError as exc:  # pragma: no cover - depends on what is installed
    raise ImportError("ratelimit.aiohttp needs aiohttp 3.12 or later: pip install 'ratelimit-fleet[aiohttp]'") from exc

from ._integrations.http import Policy
from ._limiting.concurrency import ConcurrencyLimit, Lease

if TYPE_CHECKING:
    from ._limiting.front import Acquirer
    from ._resilience.breaker import CircuitBreaker
    from ._resilience.retry import Retry

__all__ = ["RateLimitMiddleware", "session"]


class RateLimitMiddleware:
    """An ``aiohttp.ClientSession`` middleware: limiter, retries and circuit breaker on every request.

    Args:
        limiter: acquired from before every attempt, first or retry, and fed every
            response's headers (``None``: no limiter).
        retry: the retry policy, a :class:`~ratelimit.Retry` carrying its own limiter
            and breaker; default ``Retry(limiter=limiter, breaker=breaker)``.
        breaker: a :class:`~ratelimit.CircuitBreaker` every attempt passes through;
            an open circuit raises :class:`~ratelimit.CircuitOpen` without sending.
        concurrency: a :class:`~ratelimit.ConcurrencyLimit` each attempt holds a
            slot of, from just before it is sent (after the limiter's grant) until
            its response is released: read in full, or released or closed by you
            (leaving ``async with session.get(...)`` does it).

    Raises:
        TypeError: an argument of the wrong type.
        ValueError: ``retry`` given together with ``limiter`` or ``breaker``.
    """

    def __init__(
        self,
        limiter: Acquirer | None = None,
        *,
        retry: Retry | None = None,
        breaker: CircuitBreaker | None = None,
        concurrency: ConcurrencyLimit | None = None,
    ) -> None:
        self._policy = Policy(type(self).__name__, limiter, retry, breaker, concurrency)
        # A response's connection tells of its release in a plain callback; freeing
        # the slot is a store call (Redis, maybe), so it runs as a task, kept here
        # until done so that it is not collected half-way.
        self._freeing: set[asyncio.Task[None]] = set()

    @property
    def retry(self) -> Retry:
        """The retry runner every request goes through (for ``stats()`` and ``subscribe()``)."""
        return self._policy.retry

    @property
    def concurrency(self) -> ConcurrencyLimit | None:
        return self._policy.concurrency

    def __repr__(self) -> str:
        return f"{type(self).__name__}(retry={self.retry!r})"

    async def __call__(
        self, request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
    ) -> aiohttp.ClientResponse:
        """Send ``request`` under the policy; raises :class:`~ratelimit.RetryError` on giving up."""
        runner = self._policy.runner(_replayable(request.body))
        return await runner.call_async(self._attempt, request, handler)

    async def _attempt(
        self, request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
    ) -> aiohttp.ClientResponse:
        concurrency = self._policy.concurrency
        if concurrency is None:
            return await self._send(request, handler)
        lease = await concurrency.take_async()
        try:
            response = await self._send(request, handler)
        except BaseException:
            await lease.release_async()
            raise
        connection = response.connection
        if connection is None:
            # Read already (a failure, or a body that came whole): nothing holds the slot.
            await lease.release_async()
        else:
            connection.add_callback(lambda: self._free(lease))
        return response

    async def _send(self, request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType) -> aiohttp.ClientResponse:
        response = await handler(request)
        if self._policy.passes(response):
            return response
        try:
            await response.read()
        finally:
            response.release()
        return response

    def _free(self, lease: Lease) -> None:
        if lease.released:
            return
        task = asyncio.get_running_loop().create_task(lease.release_async())
        self._freeing.add(task)
        task.add_done_callback(self._freeing.discard)


def session(
    limiter: Acquirer | None = None,
    *,
    retry: Retry | None = None,
    breaker: CircuitBreaker | None = None,
    concurrency: ConcurrencyLimit | None = None,
    **session_kwargs: Any,
) -> aiohttp.ClientSession:
    """An ``aiohttp.ClientSession`` whose first middleware is a :class:`RateLimitMiddleware`
    of the given arguments; ``session_kwargs`` go to the session (``base_url``,
    ``timeout``, ``connector``, ...), and ``middlewares=`` of your own run inside it,
    once per attempt. Make it inside a coroutine, and close it when done (or use it in
    an ``async with`` block)."""
    middleware = RateLimitMiddleware(limiter, retry=retry, breaker=breaker, concurrency=concurrency)
    inner = tuple(session_kwargs.pop("middlewares", ()))
    return aiohttp.ClientSession(middlewares=(middleware, *inner), **session_kwargs)


def _replayable(body: Payload | bytes) -> bool:
    """Whether ``body`` can be sent again, as aiohttp itself would for a redirect."""
    if isinstance(body, bytes):
        return True  # no body at all
    if isinstance(body, aiohttp.MultipartWriter):
        return all(_replayable(part) for part, _, _ in body)
    if isinstance(body, BytesPayload):
        return True
    if isinstance(body, IOBasePayload):
        # aiohttp rewinds a file to where it started before each send, which only
        # works on a file that really seeks (not a pipe or a socket). The payload keeps
        # its file private; without it (another aiohttp) the body is sent once.
        seekable = getattr(getattr(body, "_value", None), "seekable", None)
        return not body.consumed and callable(seekable) and bool(seekable())
    # An async iterator, a stream reader, or a payload of someone's own: once.
    return False
