"""Limit the requests coming *into* a Django project, configured from its settings.

Add the middleware near the top of ``MIDDLEWARE`` and say what it limits with::

    MIDDLEWARE = ["ratelimit.django.RateLimitMiddleware", ...]
    RATELIMIT_MIDDLEWARE = {"limiter": LIMITER, "key": client_ip(), "wait": 0.5}

``RATELIMIT_MIDDLEWARE`` takes the arguments of
:class:`ratelimit.asgi.RateLimitMiddleware` (``limiter`` required; ``key``, ``cost``,
``wait``, ``exempt``, ``headers``), as objects or as dotted paths to them
(``"myproject.limits.LIMITER"``). The same decision and the same responses as the ASGI
and WSGI middlewares. The middleware runs on Django's sync path or its async one,
whichever the stack around it uses (under ASGI, the decision is then asyncio's).

Per view, :func:`limit` decorates a view function, sync or async, with the same
decision on the view's own limiter.

Needs the ``django`` extra: ``pip install 'ratelimit-fleet[django]'``.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.utils.module_loading import import_string

from ._integrations.serving import Gate, Headers, Request, Verdict
from .keys import client_ip

__all__ = ["RateLimitMiddleware", "limit"]

#: The default key: the peer's address, no header read.
_PEER = client_ip()

#: The setting the middleware reads.
SETTING = "RATELIMIT_MIDDLEWARE"
_ARGUMENTS = ("limiter", "key", "cost", "wait", "exempt", "headers")


def request_of(request: HttpRequest) -> Request:
    """The framework-free view of a Django request."""
    return Request(
        method=(request.method or "GET").upper(),
        path=request.path,
        headers=Headers(request.headers.items()),
        client=request.META.get("REMOTE_ADDR") or None,
    )


def _configured() -> Gate:
    config = getattr(settings, SETTING, None)
    if not isinstance(config, dict) or "limiter" not in config:
        raise ImproperlyConfigured(f"{SETTING} must be a dict with at least a 'limiter', got {config!r}")
    unknown = sorted(set(config) - set(_ARGUMENTS))
    if unknown:
        raise ImproperlyConfigured(f"{SETTING} takes {', '.join(_ARGUMENTS)}; got unknown {', '.join(unknown)}")
    values = {
        name: import_string(value) if isinstance(value, str) and name in ("limiter", "key", "cost", "exempt") else value
        for name, value in config.items()
    }
    try:
        return Gate(
            f"settings.{SETTING}",
            values["limiter"],
            values.get("key") or _PEER,
            values.get("cost", 1),
            values.get("wait", 0.0),
            values.get("exempt"),
            values.get("headers", True),
        )
    except (TypeError, ValueError) as exc:
        raise ImproperlyConfigured(str(exc)) from exc


def _answer(verdict: Verdict) -> HttpResponse:
    response = HttpResponse(verdict.body, status=verdict.status or 429, content_type="text/plain; charset=utf-8")
    for name, value in verdict.fields():
        response[name] = value
    return response


def _with_fields(response: HttpResponseBase, verdict: Verdict) -> HttpResponseBase:
    for name, value in verdict.headers:
        response[name] = value
    return response


class RateLimitMiddleware:
    """The Django middleware: reads ``settings.RATELIMIT_MIDDLEWARE`` once, at start-up.

    Raises:
        ImproperlyConfigured: the setting is missing, or holds an unknown argument
            or one out of range (named with its value).
    """

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self._gate = _configured()
        self._async = iscoroutinefunction(get_response)
        if self._async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self._async:
            return self._call_async(request)
        verdict = self._gate.decide(request_of(request))
        if not verdict.passes:
            return _answer(verdict)
        response = self.get_response(request)
        return _with_fields(response, verdict) if verdict.headers else response

    async def _call_async(self, request: HttpRequest) -> HttpResponseBase:
        verdict = await self._gate.decide_async(request_of(request))
        if not verdict.passes:
            return _answer(verdict)
        response: HttpResponseBase = await self.get_response(request)
        return _with_fields(response, verdict) if verdict.headers else response


def limit(
    limiter: Any,
    *,
    key: Callable[[Request], str | None] = _PEER,
    cost: float | Callable[[Request], float] = 1,
    wait: float | timedelta = 0.0,
    exempt: Callable[[Request], bool] | None = None,
    headers: bool = True,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A decorator limiting one Django view (a function, sync or async): refused, the
    view is not called and the client gets the 429 (or 503); granted, the view's
    response carries the fields unless ``headers=False``."""
    gate = Gate("limit", limiter, key, cost, wait, exempt, headers)

    def decorate(view: Callable[..., Any]) -> Callable[..., Any]:
        if iscoroutinefunction(view):

            @functools.wraps(view)
            async def limited_async(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
                verdict = await gate.decide_async(request_of(request))
                if not verdict.passes:
                    return _answer(verdict)
                answer: Awaitable[HttpResponseBase] = view(request, *args, **kwargs)
                return _with_fields(await answer, verdict)

            return limited_async

        @functools.wraps(view)
        def limited(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            verdict = gate.decide(request_of(request))
            if not verdict.passes:
                return _answer(verdict)
            return _with_fields(view(request, *args, **kwargs), verdict)

        return limited

    return decorate
