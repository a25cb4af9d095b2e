"""An ASGI and a WSGI app behind the rate-limiting middleware, for real uvicorn and
gunicorn processes (tests/serving/test_servers.py, benchmarks/serving.py).

Configured by the environment, read when a worker imports this module:
``SERVING_REDIS_URL``, ``SERVING_NAME`` (the budget's name), ``SERVING_RATE`` and
``SERVING_BURST`` (a token bucket's refill per second and capacity), ``SERVING_KEY``
(``client`` for the peer's address, else a header's name) and ``SERVING_LIMITED``
(``0``: the bare app, for the benchmark's baseline).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

from ratelimit import RedisBackend, TokenBucket
from ratelimit.asgi import RateLimitMiddleware as AsgiMiddleware
from ratelimit.keys import Request, client_ip, header
from ratelimit.wsgi import RateLimitMiddleware as WsgiMiddleware

LIMITED = os.environ.get("SERVING_LIMITED", "1") != "0"
KEY = os.environ.get("SERVING_KEY", "client")


def limiter() -> TokenBucket:
    backend = RedisBackend.from_url(os.environ.get("SERVING_REDIS_URL", "redis://127.0.0.1:6379/0"))
    return TokenBucket(
        capacity=float(os.environ.get("SERVING_BURST", "10")),
        refill_per_sec=float(os.environ.get("SERVING_RATE", "20")),
        backend=backend,
        name=os.environ.get("SERVING_NAME", "serving-test"),
    )


def key() -> Callable[[Request], str | None]:
    return client_ip() if KEY == "client" else header(KEY)


BODY = b"hello\n"


async def bare_asgi(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(BODY)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": BODY})


def bare_wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(BODY)))])
    return [BODY]


asgi_app: Any = AsgiMiddleware(bare_asgi, limiter=limiter(), key=key()) if LIMITED else bare_asgi
wsgi_app: Any = WsgiMiddleware(bare_wsgi, limiter=limiter(), key=key()) if LIMITED else bare_wsgi
