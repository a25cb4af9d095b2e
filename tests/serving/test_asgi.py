"""``ratelimit.asgi``: the middleware and the route dependency, called in process."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from ratelimit import ManualClock, TokenBucket, parse_rate_limit_headers
from ratelimit.asgi import RateLimitMiddleware, limit
from ratelimit.keys import header

Message = dict[str, Any]


async def hello(scope: Any, receive: Any, send: Any) -> None:
    """A bare ASGI app: a streamed response in two pieces."""
    assert scope["type"] == "http"
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"hello ", "more_body": True})
    await send({"type": "http.response.body", "body": b"world"})


def scope(kind: str = "http", client: str = "10.0.0.1", headers: list[tuple[bytes, bytes]] | None = None) -> Any:
    found: dict[str, Any] = {"type": kind, "path": "/", "headers": headers or [], "client": (client, 5000)}
    if kind == "http":
        found["method"] = "GET"
    return found


def call(app: Any, the_scope: Any, incoming: list[Message] | None = None) -> list[Message]:
    """Run one ASGI call; what the app sent."""
    sent: list[Message] = []
    queue = list(incoming or [{"type": "http.request", "body": b"", "more_body": False}])

    async def receive() -> Message:
        return queue.pop(0) if queue else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    asyncio.run(app(the_scope, receive, send))
    return sent


def headers_of(message: Message) -> dict[str, str]:
    return {name.decode(): value.decode() for name, value in message["headers"]}


def test_granted_responses_pass_streamed_with_the_fields_added() -> None:
    """The app's messages pass as sent; only the first gains ``RateLimit``."""
    app = RateLimitMiddleware(hello, limiter=TokenBucket(capacity=1, refill_per_sec=1, clock=ManualClock()))
    start, first, second = call(app, scope())
    assert start["status"] == 200
    assert headers_of(start)["content-type"] == "text/plain"
    assert headers_of(start)["ratelimit"] == '"default";r=0;t=1'
    assert (first["body"], first["more_body"], second["body"]) == (b"hello ", True, b"world")


def test_a_refused_request_gets_a_429_the_parser_reads_and_the_app_is_not_called() -> None:
    """429, ``Retry-After`` and the fields; the app never sees the request."""
    calls = []

    async def app(the_scope: Any, receive: Any, send: Any) -> None:
        calls.append(the_scope)
        await hello(the_scope, receive, send)

    limited = RateLimitMiddleware(app, limiter=TokenBucket(capacity=1, refill_per_sec=0.5, clock=ManualClock()))
    call(limited, scope())
    start, body = call(limited, scope())
    assert len(calls) == 1
    assert start["status"] == 429
    got = headers_of(start)
    assert got["retry-after"] == "2"
    info = parse_rate_limit_headers(start["headers"], now=0.0)
    assert (info.retry_after, info.limit, info.window, info.remaining) == (2.0, 1.0, 2.0, 0.0)
    assert body["body"] == b"Too Many Requests\n"
    assert got["content-length"] == str(len(body["body"]))


def test_lifespan_passes_untouched() -> None:
    """Anything but http and websocket goes straight to the app."""
    seen = []

    async def app(the_scope: Any, receive: Any, send: Any) -> None:
        seen.append(the_scope["type"])

    limiter = TokenBucket(capacity=1, refill_per_sec=1e-9, clock=ManualClock())
    call(RateLimitMiddleware(app, limiter=limiter), {"type": "lifespan"})
    call(RateLimitMiddleware(app, limiter=limiter), {"type": "lifespan"})
    assert seen == ["lifespan", "lifespan"]


def test_a_websocket_handshake_is_limited_like_a_request() -> None:
    """Granted: the app gets the socket; refused: a 429 where the server takes one,
    else a close before accepting."""
    accepted = []

    async def app(the_scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "websocket.accept"})
        accepted.append(True)

    limiter = TokenBucket(capacity=1, refill_per_sec=1e-6, clock=ManualClock())
    limited = RateLimitMiddleware(app, limiter=limiter)
    connect = [{"type": "websocket.connect"}]
    assert call(limited, scope("websocket"), connect) == [{"type": "websocket.accept"}]
    assert call(limited, scope("websocket"), connect) == [{"type": "websocket.close", "code": 1008}]
    with_responses = {**scope("websocket"), "extensions": {"websocket.http.response": {}}}
    start, body = call(limited, with_responses, connect)
    assert start["type"] == "websocket.http.response.start"
    assert start["status"] == 429
    assert "retry-after" in headers_of(start)
    assert body["type"] == "websocket.http.response.body"
    assert accepted == [True]


def test_the_body_is_never_read_by_the_middleware() -> None:
    """The app reads the request body itself, all of it."""
    chunks = []

    async def app(the_scope: Any, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        await hello(the_scope, receive, send)

    incoming = [
        {"type": "http.request", "body": b"a", "more_body": True},
        {"type": "http.request", "body": b"b", "more_body": False},
    ]
    call(RateLimitMiddleware(app, limiter=TokenBucket(capacity=1, refill_per_sec=1)), scope(), incoming)
    assert chunks == [b"a", b"b"]


def test_starlette_and_fastapi_through_add_middleware() -> None:
    """``app.add_middleware(RateLimitMiddleware, ...)`` on a FastAPI app, over httpx."""
    from fastapi import FastAPI

    api = FastAPI()

    @api.get("/")
    async def root() -> dict[str, str]:
        return {"ok": "yes"}

    limiter = TokenBucket(capacity=2, refill_per_sec=1, clock=ManualClock())
    api.add_middleware(RateLimitMiddleware, limiter=limiter, key=header("x-api-key"))

    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=api)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return [await client.get("/", headers={"x-api-key": "k"}) for _ in range(3)] + [await client.get("/")]

    first, second, third, keyless = asyncio.run(run())
    assert (first.status_code, second.status_code, third.status_code, keyless.status_code) == (200, 200, 429, 200)
    assert "ratelimit" in first.headers
    assert "ratelimit" not in keyless.headers
    assert third.headers["retry-after"] == "1"


def test_a_route_of_its_own_through_the_fastapi_dependency() -> None:
    """``Depends(limit(...))``: one route limited, the others not; the same fields."""
    from fastapi import Depends, FastAPI

    api = FastAPI()
    limiter = TokenBucket(capacity=1, refill_per_sec=0.25, clock=ManualClock())

    @api.get("/search", dependencies=[Depends(limit(limiter))])
    async def search() -> dict[str, str]:
        return {"found": "nothing"}

    @api.get("/")
    async def root() -> dict[str, str]:
        return {"ok": "yes"}

    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=api, client=("10.0.0.1", 5000))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return [await client.get("/search"), await client.get("/search"), await client.get("/")]

    granted, refused, other = asyncio.run(run())
    assert granted.status_code == 200
    assert granted.headers["ratelimit"] == '"default";r=0;t=4'
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "4"
    assert parse_rate_limit_headers(refused.headers, now=0.0).limit == 1.0
    assert other.status_code == 200
    assert "ratelimit" not in other.headers


@pytest.mark.parametrize("option", [{"wait": -1}, {"cost": "one"}])
def test_bad_arguments_fail_when_the_middleware_is_made(option: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(option))):
        RateLimitMiddleware(hello, limiter=TokenBucket(capacity=1, refill_per_sec=1), **option)


def test_a_store_that_cannot_decide_answers_503_without_detail() -> None:
    """``on_unavailable="raise"``: 503 with ``Retry-After``; the body names no address, no error."""
    from ratelimit import RedisBackend

    from servers import free_port

    port = free_port()
    backend = RedisBackend.from_url(f"redis://:hunter2@127.0.0.1:{port}/0")
    try:
        limiter = TokenBucket(capacity=5, refill_per_sec=1, backend=backend, name="asgi-down")
        start, body = call(RateLimitMiddleware(hello, limiter=limiter), scope())
    finally:
        backend.close()
    assert start["status"] == 503
    assert headers_of(start)["retry-after"] == "1"
    assert body["body"] == b"Service Unavailable\n"
    assert str(port).encode() not in body["body"]
