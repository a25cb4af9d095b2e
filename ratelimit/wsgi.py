"""Limit the requests coming *into* a WSGI app (Flask, any WSGI server).

One line to set up::

    app.wsgi_app = RateLimitMiddleware(app.wsgi_app, limiter=limiter, key=client_ip())

The same decision and the same responses as :class:`ratelimit.asgi.RateLimitMiddleware`
(see there), on the blocking path: a request held for its turn holds its worker thread
for at most ``wait`` seconds. The body is never read; the app's response iterable is
handed to the server as it is, with the fields added to its headers.

Per route, :func:`limit` decorates a Flask view (or any function called inside a Flask
request) with the same decision.

Needs no extra: WSGI is plain Python; :func:`limit` needs Flask.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from ._integrations.serving import Gate, Headers, Request, Verdict, reason
from .keys import client_ip

if TYPE_CHECKING:
    from types import TracebackType

__all__ = ["RateLimitMiddleware", "limit"]

#: The default key: the peer's address, no header read.
_PEER = client_ip()

P = ParamSpec("P")
R = TypeVar("R")

Environ = dict[str, Any]
ExcInfo = tuple[type[BaseException], BaseException, "TracebackType"] | tuple[None, None, None]
StartResponse = Callable[..., Any]
WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]

#: Request headers WSGI keeps without the ``HTTP_`` prefix.
_UNPREFIXED = {"CONTENT_TYPE": "content-type", "CONTENT_LENGTH": "content-length"}


def _headers_of(environ: Environ) -> Iterator[tuple[str, str]]:
    for name, value in environ.items():
        if name.startswith("HTTP_"):
            yield name[5:].replace("_", "-").lower(), str(value)
        elif name in _UNPREFIXED and value:
            yield _UNPREFIXED[name], str(value)


def request_of(environ: Environ) -> Request:
    """The framework-free view of a WSGI ``environ``."""
    return Request(
        method=str(environ.get("REQUEST_METHOD", "GET")).upper(),
        path=str(environ.get("SCRIPT_NAME", "")) + str(environ.get("PATH_INFO", "")) or "/",
        headers=Headers(_headers_of(environ)),
        client=environ.get("REMOTE_ADDR") or None,
    )


def status_line(verdict: Verdict) -> str:
    status = verdict.status or 200
    return f"{status} {reason(status)}"


class RateLimitMiddleware:
    """Limits the requests of a WSGI ``app``; the arguments are those of
    :class:`ratelimit.asgi.RateLimitMiddleware`.

    Raises:
        TypeError, ValueError: an argument out of range, named with its value.
    """

    def __init__(
        self,
        app: WSGIApp,
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

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        verdict = self._gate.decide(request_of(environ))
        if not verdict.passes:
            start_response(status_line(verdict), list(verdict.headers))
            return [verdict.body]
        if not verdict.headers:
            return self.app(environ, start_response)
        added = list(verdict.headers)

        def start_with_fields(status: str, headers: list[tuple[str, str]], exc_info: ExcInfo | None = None) -> Any:
            return start_response(status, [*headers, *added], *(() if exc_info is None else (exc_info,)))

        return self.app(environ, start_with_fields)


def limit(
    limiter: Any,
    *,
    key: Callable[[Request], str | None] = _PEER,
    cost: float | Callable[[Request], float] = 1,
    wait: float | timedelta = 0.0,
    exempt: Callable[[Request], bool] | None = None,
    headers: bool = True,
) -> Callable[[Callable[P, R]], Callable[P, R | Any]]:
    """A decorator limiting one Flask view: ``@limit(limiter, key=...)`` under the route.

    The same decision as :class:`RateLimitMiddleware`, on the view's own limiter:
    refused, the view is not called and the client gets the 429 (or 503); granted,
    the view's response carries the fields unless ``headers=False``. Needs Flask.
    """
    gate = Gate("limit", limiter, key, cost, wait, exempt, headers)

    def decorate(view: Callable[P, R]) -> Callable[P, R | Any]:
        @functools.wraps(view)
        def limited(*args: P.args, **kwargs: P.kwargs) -> R | Any:
            import flask

            verdict = gate.decide(request_of(flask.request.environ))
            if not verdict.passes:
                fields = verdict.fields()
                return flask.Response(verdict.body, status=verdict.status, headers=fields, mimetype="text/plain")
            response = flask.make_response(view(*args, **kwargs))
            for name, value in verdict.headers:
                response.headers[name] = value
            return response

        return limited

    return decorate
