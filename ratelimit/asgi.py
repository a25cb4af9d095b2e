"""Limit the requests coming *into* an ASGI app (Starlette, FastAPI, any ASGI server).

One line to set up::

    app.add_middleware(RateLimitMiddleware, limiter=limiter, key=client_ip())

Each request takes ``cost`` tokens from ``limiter.for_key(key(request))``: one call to
the limiter's store, on the asyncio path, whatever holds the budget (the process, a
SQLite file, a Redis that every worker of every box shares). A request may be held up
to ``wait`` seconds for its turn, in arrival order; past that it is answered ``429``
with ``Retry-After`` and the IETF ``RateLimit-Policy`` / ``RateLimit`` fields, which
:func:`~ratelimit.parse_rate_limit_headers` reads back. Granted responses carry the
fields too (``headers=False`` leaves them alone). A store that cannot decide follows its
backend's ``on_unavailable``: ``"raise"`` answers ``503`` with ``Retry-After``;
``"allow"`` and ``"local"`` decide as they always do.

The middleware never reads a request's body, and a response passes as the app sends
it, streamed or not: only its first message gains the fields. A websocket handshake is
limited like a request (refused with a 429 where the server can send one, else closed
before it is accepted); lifespan events pass untouched.

Per route, :func:`limit` is a FastAPI dependency on the same decision.

Needs no extra: the ASGI interface is plain Python; FastAPI's dependency needs FastAPI.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from datetime import timedelta
from typing import Any

from ._integrations.serving import Gate, Headers, Request, Verdict, header_pairs
from .keys import client_ip

__all__ = ["RateLimitMiddleware", "limit"]

#: The default key: the peer's address, no header read.
_PEER = client_ip()

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def request_of(scope: Scope) -> Request:
    """The framework-free view of an ASGI ``http`` or ``websocket`` scope."""
    raw = scope.get("headers", ())
    pairs = ((name.decode("latin-1"), value.decode("latin-1")) for name, value in raw)
    client = scope.get("client")
    return Request(
        method=str(scope.get("method", "GET")).upper(),
        path=str(scope.get("path", "/")),
        headers=Headers(pairs),
        client=str(client[0]) if client else None,
    )


class RateLimitMiddleware:
    """Limits the requests of an ASGI ``app``: each takes ``cost`` tokens from
    ``limiter.for_key(key(request))``.

    Args:
        app: the ASGI application.
        limiter: the limiter (any kind, any store); each key gets its own budget.
        key: ``request -> str | None`` over the :class:`ratelimit.keys.Request` view;
            ``None`` leaves the request unlimited. Default: the peer's address
            (:func:`ratelimit.keys.client_ip`).
        cost: the tokens a request takes: a number, or ``request -> number``.
        wait: the most seconds (or a ``timedelta``) a request may be held for its
            turn, in arrival order, before it is refused; 0 refuses at once.
        exempt: ``request -> bool``; an exempt request is not limited.
        headers: whether granted responses carry ``RateLimit-Policy`` and ``RateLimit``.

    Raises:
        TypeError, ValueError: an argument out of range, named with its value.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        limiter: Any,
        key: Callable[[Request], str | None] = _PEER,
        cost: float | Callable[[Request], float] = 1,
        wait: float | timedelta = 0.0,
        exempt: Callable[[Request], bool] | None = None,
        headers: bool = True,
    ) -> None:
        self.app = app
        self._gate = Gate("RateLimitMiddleware", limiter, key, cost, wait, exempt, headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope.get("type")
        if kind != "http" and kind != "websocket":
            await self.app(scope, receive, send)
            return
        verdict = await self._gate.decide_async(request_of(scope))
        if not verdict.passes:
            if kind == "http":
                await _answer(send, verdict)
            else:
                await _refuse_handshake(scope, receive, send, verdict)
            return
        if not verdict.headers or kind != "http":
            await self.app(scope, receive, send)
            return
        added = header_pairs(verdict)

        async def send_with_fields(message: Message) -> None:
            if message.get("type") == "http.response.start":
                message = dict(message)
                message["headers"] = [*message.get("headers", ()), *added]
            await send(message)

        await self.app(scope, receive, send_with_fields)


async def _answer(send: Send, verdict: Verdict) -> None:
    await send({"type": "http.response.start", "status": verdict.status, "headers": header_pairs(verdict)})
    await send({"type": "http.response.body", "body": verdict.body})


async def _refuse_handshake(scope: Scope, receive: Receive, send: Send, verdict: Verdict) -> None:
    """Refuse a websocket before it is accepted: a 429 where the server takes an HTTP
    response for a handshake, else a close (the server answers it with a 403)."""
    message = await receive()
    if message.get("type") != "websocket.connect":
        return
    if "websocket.http.response" in scope.get("extensions", {}):
        await send(
            {"type": "websocket.http.response.start", "status": verdict.status, "headers": header_pairs(verdict)}
        )
        await send({"type": "websocket.http.response.body", "body": verdict.body})
    else:
        await send({"type": "websocket.close", "code": 1008})


def limit(
    limiter: Any,
    *,
    key: Callable[[Request], str | None] = _PEER,
    cost: float | Callable[[Request], float] = 1,
    wait: float | timedelta = 0.0,
    exempt: Callable[[Request], bool] | None = None,
    headers: bool = True,
) -> Callable[..., Awaitable[None]]:
    """A FastAPI dependency limiting one route: ``Depends(limit(limiter, key=...))``.

    The same decision as :class:`RateLimitMiddleware`, on the route's own limiter:
    refused, the route raises FastAPI's ``HTTPException(429)`` with the same
    ``Retry-After`` and ``RateLimit`` fields (``503`` when the store cannot decide and
    its backend says ``on_unavailable="raise"``); granted, the route's response carries
    the fields unless ``headers=False``. Needs FastAPI.
    """
    from fastapi import HTTPException
    from fastapi import Request as FastAPIRequest
    from fastapi import Response as FastAPIResponse

    gate = Gate("limit", limiter, key, cost, wait, exempt, headers)

    async def rate_limited(request: FastAPIRequest, response: FastAPIResponse) -> None:
        verdict = await gate.decide_async(request_of(request.scope))
        if not verdict.passes:
            detail = verdict.body.decode().strip()
            raise HTTPException(status_code=verdict.status or 429, detail=detail, headers=dict(verdict.fields()))
        for name, value in verdict.headers:
            response.headers[name] = value

    # FastAPI reads the parameters' types to inject them: the classes themselves, as
    # this module's annotations are text naming names imported here only.
    rate_limited.__annotations__ = {"request": FastAPIRequest, "response": FastAPIResponse, "return": None}
    return rate_limited
