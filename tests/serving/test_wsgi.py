"""``ratelimit.wsgi``: the middleware around any WSGI app, and Flask's per-view decorator."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ratelimit import ManualClock, TokenBucket, parse_rate_limit_headers
from ratelimit.keys import header
from ratelimit.wsgi import RateLimitMiddleware, limit


def hello(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return iter([b"hello ", b"world"])


def call(app: Any, client: str = "10.0.0.1", **headers: str) -> tuple[str, dict[str, str], bytes]:
    environ: dict[str, Any] = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "REMOTE_ADDR": client}
    environ.update({"HTTP_" + name.upper(): value for name, value in headers.items()})
    started: list[Any] = []

    def start_response(status: str, response_headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        started.extend([status, dict(response_headers)])

    body = b"".join(app(environ, start_response))
    return started[0], started[1], body


def test_granted_then_refused_with_the_fields_our_parser_reads() -> None:
    """The same responses as the ASGI middleware, through WSGI."""
    app = RateLimitMiddleware(hello, limiter=TokenBucket(capacity=1, refill_per_sec=0.5, clock=ManualClock()))
    status, headers, body = call(app)
    assert (status, body) == ("200 OK", b"hello world")
    assert headers["RateLimit"] == '"default";r=0;t=2'
    assert headers["Content-Type"] == "text/plain"
    status, headers, body = call(app)
    assert status == "429 Too Many Requests"
    assert body == b"Too Many Requests\n"
    info = parse_rate_limit_headers(headers, now=0.0)
    assert (info.retry_after, info.limit, info.window) == (2.0, 1.0, 2.0)
    assert call(app, client="10.0.0.2")[0] == "200 OK"


def test_a_header_key_through_the_environ() -> None:
    """``HTTP_X_API_KEY`` is the view's ``x-api-key``; without it, not limited."""
    app = RateLimitMiddleware(
        hello, limiter=TokenBucket(capacity=1, refill_per_sec=1, clock=ManualClock()), key=header("X-Api-Key")
    )
    assert call(app, x_api_key="a")[0] == "200 OK"
    assert call(app, x_api_key="a")[0].startswith("429")
    assert call(app)[0] == "200 OK"
    assert call(app)[0] == "200 OK"


def test_flask_app_and_view_decorator() -> None:
    """``app.wsgi_app = RateLimitMiddleware(...)`` and ``@limit(...)`` on one view."""
    import flask

    app = flask.Flask("limited")
    search_limit = TokenBucket(capacity=1, refill_per_sec=0.25, clock=ManualClock())

    @app.get("/search")
    @limit(search_limit)
    def search() -> str:
        return "found"

    @app.get("/")
    def root() -> str:
        return "root"

    client = app.test_client()
    granted = client.get("/search", environ_base={"REMOTE_ADDR": "10.0.0.1"})
    refused = client.get("/search", environ_base={"REMOTE_ADDR": "10.0.0.1"})
    assert granted.status_code == 200
    assert granted.headers["RateLimit"] == '"default";r=0;t=4'
    assert refused.status_code == 429
    assert refused.headers["Retry-After"] == "4"
    assert refused.get_data() == b"Too Many Requests\n"
    assert client.get("/").status_code == 200

    app.wsgi_app = RateLimitMiddleware(  # type: ignore[method-assign]
        app.wsgi_app, limiter=TokenBucket(capacity=1, refill_per_sec=1e-6, clock=ManualClock())
    )
    assert client.get("/").status_code == 200
    assert client.get("/").status_code == 429
