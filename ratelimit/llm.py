"""httpx transports that hold every LLM call to a budget of requests and tokens.

Most callers start with :func:`ratelimit.openai.client` or
:func:`ratelimit.anthropic.client`, which build the SDK's client over these::

    llm = Composite([TokenBucket(500, 500 / 60), TokenBucket(200_000, 200_000 / 60)], backend=..., name="openai")
    client = openai.OpenAI(http_client=httpx.Client(transport=LLMTransport(llm)))

Each request goes: estimate → acquire → send → feedback → settle.

- The estimate is read from the request's JSON body: the prompt's characters / 4
  (or ``tokenizer(text)``) plus the answer's cap (``max_tokens``,
  ``max_completion_tokens`` or ``max_output_tokens``, else ``default_max_tokens``),
  times ``n``; ``estimate(body)`` replaces it all.
- The limiter is one limiter of tokens, or a :class:`~ratelimit.Composite` whose
  first limit counts requests and every other one tokens: it is asked for
  ``[1, estimate, ...]``.
- The response's headers are fed back (OpenAI's ``x-ratelimit-*-tokens``,
  Anthropic's ``anthropic-ratelimit-tokens-*``, ``Retry-After``): a 429 pauses every
  worker sharing the budget; a limiter of tokens alone is fed the token budget's
  part of them.
- The call is settled with the ``usage`` of its answer, read as the body passes to
  the client (a JSON body, or an event stream's events: OpenAI's last chunk with
  ``stream_options={"include_usage": True}``, Anthropic's ``message_start`` and
  ``message_delta``): what the estimate held beyond it is given back, what it used
  beyond the estimate is charged. A refusal (4xx, 5xx) and a request that never
  connected give the tokens back; a read timeout, a body without usage, a stream
  closed before its end keep the estimate.

The transports ask for uncompressed answers (``Accept-Encoding: identity``), so that
the usage can be read as the bytes go by. They do not retry: the SDKs do, and their
retries go through the limiter again (a 429's pause included).

Needs the ``httpx`` extra; the SDKs' own extras are ``openai`` and ``anthropic``.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import httpx

from ._integrations.llm import Budget, Passage
from ._integrations.llm_costs import Estimate, Estimator, Tokenizer

if TYPE_CHECKING:
    from ._limiting.front import Acquirer

__all__ = ["AsyncLLMTransport", "LLMTransport"]

#: The exceptions (httpx's and httpx2's names) of a request that never reached the
#: provider, so used no tokens.
NOT_SENT = frozenset({"ConnectError", "ConnectTimeout"})


def _content(request: httpx.Request) -> bytes:
    try:
        return request.content
    except Exception:  # a streamed body (httpx.RequestNotRead): the default estimate
        return b""


def _stream_base(response: httpx.Response, name: str) -> type:
    # The response may be httpx's or httpx2's (Anthropic's SDK takes only the latter):
    # the body handed back must be a byte stream of the same module.
    module = sys.modules.get(type(response).__module__.partition(".")[0])
    base = getattr(module, name, None)
    return base if isinstance(base, type) else object


class _Watching:
    """A response body that shows its chunks to the passage and settles on close."""

    def __init__(self, stream: Any, passage: Passage, limiter: Any) -> None:
        self._stream = stream
        self._passage = passage
        self._limiter = limiter


class _Watch(_Watching):
    """The body of a sync response."""

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._stream:
            self._passage.feed(chunk)
            yield chunk
        self._passage.ended()

    def close(self) -> None:
        try:
            self._stream.close()
        finally:
            _settle(self._limiter, self._passage.closed())


class _AsyncWatch(_Watching):
    """The body of an async response."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            self._passage.feed(chunk)
            yield chunk
        self._passage.ended()

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            await _settle_async(self._limiter, self._passage.closed())


@functools.cache
def _watching(watch: type, base: type) -> type:
    return type(f"Watched{base.__name__}", (watch, base) if base is not object else (watch,), {})


def _settle(limiter: Any, settlement: tuple[Any, Any] | None) -> None:
    if settlement is not None:
        limiter.settle(*settlement)


async def _settle_async(limiter: Any, settlement: tuple[Any, Any] | None) -> None:
    if settlement is not None:
        await limiter.settle_async(*settlement)


def _arrived(response: httpx.Response, passage: Passage) -> tuple[Any, tuple[Any, Any] | None]:
    """What a response asks of the limiter: the headers to feed back, and a settlement
    now (a refusal, an answer already read) or ``None`` (the body is watched as it
    passes and settles when closed)."""
    feeds = passage.budget.feeds(response.headers, response.status_code)
    if response.status_code >= 300:
        return feeds, passage.refused()
    passage.watch(response.headers)
    try:
        content = response.content  # read already (a transport that buffers, a mock)
    except Exception:  # httpx's (or httpx2's) ResponseNotRead: it streams
        return feeds, None
    passage.feed(content)
    passage.ended()
    return feeds, passage.closed()


_T = TypeVar("_T")


def _inner(transport: _T | None, method: str, what: str, default: Callable[[], _T]) -> _T:
    """The transport that does the sending: ``transport``, checked by the method it
    must have (the SDKs pass either httpx's or httpx2's), or a new ``default()``."""
    if transport is None:
        return default()
    if not callable(getattr(transport, method, None)):
        raise TypeError(f"transport must be {what} or None, got {transport!r}")
    return transport


class LLMTransport(httpx.BaseTransport):
    """An ``httpx.Client`` transport that holds every request to a budget of requests
    and tokens, estimated from the request and settled from the answer's ``usage``.

    Args:
        limiter: a limiter of tokens, or a :class:`~ratelimit.Composite` whose first
            limit counts requests and every other one tokens.
        tokenizer: counts a prompt's tokens from its text (``lambda text:
            len(encoding.encode(text))``); default: characters / 4.
        estimate: replaces the whole estimate: the request's JSON body in, tokens out.
        default_max_tokens: the answer's allowance when a request caps none.
        transport: the transport that does the sending (default
            ``httpx.HTTPTransport()``; an ``httpx2.HTTPTransport()`` under an
            ``httpx2.Client``). Closing this transport closes it.

    Raises:
        TypeError: an argument of the wrong type.
        ValueError: ``default_max_tokens`` not > 0, a Composite of one limit; and, per
            request, an estimate the limiter can never grant, or a ``tokenizer`` or
            ``estimate`` answering anything but a number >= 0.
    """

    def __init__(
        self,
        limiter: Acquirer,
        *,
        tokenizer: Tokenizer | None = None,
        estimate: Estimate | None = None,
        default_max_tokens: int = 4096,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.budget = Budget(limiter, Estimator(tokenizer, estimate, default_max_tokens))
        self.transport = _inner(transport, "handle_request", "an httpx transport", httpx.HTTPTransport)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` within the budget."""
        passage = self.budget.passage(_content(request))
        limiter: Any = self.budget.limiter
        limiter.acquire(passage.asked)
        request.headers["accept-encoding"] = "identity"
        try:
            response = self.transport.handle_request(request)
        except BaseException as exc:
            _settle(limiter, passage.failed(sent=type(exc).__name__ not in NOT_SENT))
            raise
        try:
            feeds, settlement = _arrived(response, passage)
            _settle(limiter, settlement)
            limiter.feedback(feeds, response.status_code)
        except BaseException:
            response.close()
            _settle(limiter, passage.failed(sent=True))
            raise
        if not passage.settled:
            response.stream = _watching(_Watch, _stream_base(response, "SyncByteStream"))(
                response.stream, passage, limiter
            )
        return response

    def close(self) -> None:
        """Close the wrapped transport."""
        self.transport.close()

    def __repr__(self) -> str:
        return f"LLMTransport(budget={self.budget!r}, transport={self.transport!r})"


class AsyncLLMTransport(httpx.AsyncBaseTransport):
    """:class:`LLMTransport` for ``httpx.AsyncClient``; ``transport`` defaults to
    ``httpx.AsyncHTTPTransport()``."""

    def __init__(
        self,
        limiter: Acquirer,
        *,
        tokenizer: Tokenizer | None = None,
        estimate: Estimate | None = None,
        default_max_tokens: int = 4096,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.budget = Budget(limiter, Estimator(tokenizer, estimate, default_max_tokens))
        self.transport = _inner(transport, "handle_async_request", "an async httpx transport", httpx.AsyncHTTPTransport)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` within the budget."""
        passage = self.budget.passage(_content(request))
        limiter: Any = self.budget.limiter
        await limiter.acquire_async(passage.asked)
        request.headers["accept-encoding"] = "identity"
        try:
            response = await self.transport.handle_async_request(request)
        except BaseException as exc:
            await _settle_async(limiter, passage.failed(sent=type(exc).__name__ not in NOT_SENT))
            raise
        try:
            feeds, settlement = _arrived(response, passage)
            await _settle_async(limiter, settlement)
            await limiter.feedback_async(feeds, response.status_code)
        except BaseException:
            await response.aclose()
            await _settle_async(limiter, passage.failed(sent=True))
            raise
        if not passage.settled:
            response.stream = _watching(_AsyncWatch, _stream_base(response, "AsyncByteStream"))(
                response.stream, passage, limiter
            )
        return response

    async def aclose(self) -> None:
        """Close the wrapped transport."""
        await self.transport.aclose()

    def __repr__(self) -> str:
        return f"AsyncLLMTransport(budget={self.budget!r}, transport={self.transport!r})"
