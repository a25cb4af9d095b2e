"""httpx transports that rate-limit, retry and break the circuit on every request.

One line to set up::

    client = httpx.Client(transport=RateLimitTransport(TokenBucket(capacity=20, refill_per_sec=1000 / 60)))

Every request the client sends goes through one :class:`~ratelimit.Retry`: acquire
from the limiter, send through the wrapped transport, feed the response's headers
back to the limiter, classify it, back off and try again if it failed transiently
(honouring ``Retry-After``), with the circuit breaker asked before and told after
every attempt. When the retries run out the transport raises
:class:`~ratelimit.RetryError`, whose ``result`` is the last response; a permanent
failure (a 404, say) is returned as it is, after one attempt.

A response that did not pass the classifier (it will be retried, or it is the failure
handed back) is read into memory inside the transport, so that its connection goes
back to the pool at once; the client then gets an unread copy whose body is already
in memory, and reads it as usual. So the classifier sees every response before its
body is read: it should judge by status and headers, as the default one does.

A request whose body is a stream (an iterator or generator passed as ``content=``, or
a multipart upload of a file that cannot seek) cannot be sent twice: it gets exactly
one attempt, still through the limiter, the feedback and the breaker. If that attempt
fails transiently the transport raises :class:`~ratelimit.RetryError` (reason
``"attempts"``). Bytes, ``data=``, ``json=`` and uploads of seekable files are retried.

Needs the ``httpx`` extra: ``pip install 'ratelimit-fleet[httpx]'``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Generic, TypeVar

import httpx

from ._integrations.http import Policy
from ._limiting.concurrency import ConcurrencyLimit, Lease
from ._resilience.retry import Retry

if TYPE_CHECKING:
    from ._limiting.front import Acquirer
    from ._resilience.breaker import CircuitBreaker

__all__ = ["AsyncRateLimitTransport", "RateLimitTransport"]

Sender = TypeVar("Sender", httpx.BaseTransport, httpx.AsyncBaseTransport)

try:
    # httpx keeps its multipart body private; without it (another httpx version) a
    # multipart upload is simply treated as a stream: one attempt, never a wrong body.
    from httpx._multipart import FileField, MultipartStream
except ImportError:  # pragma: no cover - depends on the installed httpx
    FileField = MultipartStream = None  # type: ignore[assignment,misc]


class _Policy(Policy):
    """The shared policy, knowing httpx's requests and responses."""

    __slots__ = ()

    def for_request(self, request: httpx.Request) -> Retry:
        """The retry runner for ``request``: one attempt only if its body cannot be replayed."""
        return self.runner(_replayable(request.stream))

    def keeps(self, response: httpx.Response) -> bool:
        """Whether ``response`` goes to the client untouched (a response already read
        holds no connection)."""
        return response.is_stream_consumed or self.passes(response)


def _replayable(stream: object) -> bool:
    # content=bytes, data=, json= and a request that has been read are a ByteStream,
    # which yields the same bytes every time it is iterated.
    if isinstance(stream, httpx.ByteStream):
        return True
    if MultipartStream is not None and isinstance(stream, MultipartStream):
        # httpx seeks every file back to 0 before sending it, which only works on a
        # file that really seeks (not a pipe or a socket).
        return all(_rewinds(field.file) for field in stream.fields if isinstance(field, FileField))
    return False


def _rewinds(file: object) -> bool:
    if isinstance(file, (str, bytes)):
        return True
    seekable = getattr(file, "seekable", None)
    return callable(seekable) and bool(seekable())


def _buffered(response: httpx.Response, raw: bytes, request: httpx.Request) -> httpx.Response:
    # A fresh response over the raw (still encoded) bytes: the client decodes it, and
    # times it, exactly as it would a response straight off the network.
    extensions = {key: value for key, value in response.extensions.items() if key != "network_stream"}
    return httpx.Response(
        response.status_code,
        headers=response.headers,
        stream=httpx.ByteStream(raw),
        request=request,
        extensions=extensions,
    )


class _SlotStream(httpx.SyncByteStream):
    """A response body that frees its request's slot when it is closed."""

    def __init__(self, stream: httpx.SyncByteStream, lease: Lease) -> None:
        self._stream = stream
        self._lease = lease

    def __iter__(self) -> Iterator[bytes]:
        yield from self._stream

    def close(self) -> None:
        try:
            self._stream.close()
        finally:
            self._lease.release()


class _AsyncSlotStream(httpx.AsyncByteStream):
    """:class:`_SlotStream` for asyncio."""

    def __init__(self, stream: httpx.AsyncByteStream, lease: Lease) -> None:
        self._stream = stream
        self._lease = lease

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            yield chunk

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            await self._lease.release_async()


class _Limited(Generic[Sender]):
    """What both transports show of themselves."""

    _policy: _Policy
    transport: Sender

    @property
    def retry(self) -> Retry:
        """The retry runner every request goes through (for ``stats()`` and ``subscribe()``)."""
        return self._policy.retry

    def __repr__(self) -> str:
        return f"{type(self).__name__}(retry={self.retry!r}, transport={self.transport!r})"


class RateLimitTransport(_Limited[httpx.BaseTransport], httpx.BaseTransport):
    """An ``httpx.Client`` transport: limiter, retries and circuit breaker on every request.

    Args:
        limiter: acquired from before every attempt, first or retry, and fed every
            response's headers (``None``: no limiter).
        retry: the retry policy, a :class:`~ratelimit.Retry` carrying its own limiter
            and breaker; default ``Retry(limiter=limiter, breaker=breaker)``.
        breaker: a :class:`~ratelimit.CircuitBreaker` every attempt passes through;
            an open circuit raises :class:`~ratelimit.CircuitOpen` without sending.
        concurrency: a :class:`~ratelimit.ConcurrencyLimit` each attempt holds a
            slot of, from just before it is sent (after the limiter's grant) until
            its response is closed: read in full, or, streamed, closed by you.
        transport: the transport that does the sending (default
            ``httpx.HTTPTransport()``; pass your own for ``verify``, ``http2``, proxies
            or connection limits). Closing this transport closes it.

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
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if transport is not None and not isinstance(transport, httpx.BaseTransport):
            raise TypeError(f"transport must be an httpx.BaseTransport or None, got {transport!r}")
        self._policy = _Policy(type(self).__name__, limiter, retry, breaker, concurrency)
        # Made last: an HTTPTransport builds an SSL context, wasted if an argument is bad.
        self.transport = transport if transport is not None else httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` under the policy; raises :class:`~ratelimit.RetryError` on giving up."""
        return self._policy.for_request(request).call(self._attempt, request)

    def _attempt(self, request: httpx.Request) -> httpx.Response:
        concurrency = self._policy.concurrency
        if concurrency is None:
            return self._send(request)
        lease = concurrency.take()
        try:
            response = self._send(request)
        except BaseException:
            lease.release()
            raise
        if response.is_stream_consumed:
            lease.release()
        else:
            response.stream = _SlotStream(response.stream, lease)  # type: ignore[arg-type]
        return response

    def _send(self, request: httpx.Request) -> httpx.Response:
        response = self.transport.handle_request(request)
        if self._policy.keeps(response):
            return response
        try:
            raw = b"".join(response.iter_raw())
        finally:
            response.close()
        return _buffered(response, raw, request)

    def close(self) -> None:
        """Close the wrapped transport."""
        self.transport.close()


class AsyncRateLimitTransport(_Limited[httpx.AsyncBaseTransport], httpx.AsyncBaseTransport):
    """:class:`RateLimitTransport` for ``httpx.AsyncClient``; ``transport`` defaults to
    ``httpx.AsyncHTTPTransport()``::

        client = httpx.AsyncClient(transport=AsyncRateLimitTransport(limiter))
    """

    def __init__(
        self,
        limiter: Acquirer | None = None,
        *,
        retry: Retry | None = None,
        breaker: CircuitBreaker | None = None,
        concurrency: ConcurrencyLimit | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if transport is not None and not isinstance(transport, httpx.AsyncBaseTransport):
            raise TypeError(f"transport must be an httpx.AsyncBaseTransport or None, got {transport!r}")
        self._policy = _Policy(type(self).__name__, limiter, retry, breaker, concurrency)
        self.transport = transport if transport is not None else httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` under the policy; raises :class:`~ratelimit.RetryError` on giving up."""
        return await self._policy.for_request(request).call_async(self._attempt, request)

    async def _attempt(self, request: httpx.Request) -> httpx.Response:
        concurrency = self._policy.concurrency
        if concurrency is None:
            return await self._send(request)
        lease = await concurrency.take_async()
        try:
            response = await self._send(request)
        except BaseException:
            await lease.release_async()
            raise
        if response.is_stream_consumed:
            await lease.release_async()
        else:
            response.stream = _AsyncSlotStream(response.stream, lease)  # type: ignore[arg-type]
        return response

    async def _send(self, request: httpx.Request) -> httpx.Response:
        response = await self.transport.handle_async_request(request)
        if self._policy.keeps(response):
            return response
        try:
            raw = b"".join([chunk async for chunk in response.aiter_raw()])
        finally:
            await response.aclose()
        return _buffered(response, raw, request)

    async def aclose(self) -> None:
        """Close the wrapped transport."""
        await self.transport.aclose()
