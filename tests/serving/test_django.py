"""``ratelimit.django``: the middleware configured from settings, sync and async, and the
per-view decorator."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ratelimit import ManualClock, TokenBucket, parse_rate_limit_headers

django = pytest.importorskip("django")

from django.conf import settings  # noqa: E402

if not settings.configured:
    settings.configure(DEBUG=False, ALLOWED_HOSTS=["*"], USE_TZ=True, ROOT_URLCONF=__name__, MIDDLEWARE=[])
    django.setup()

from django.core.exceptions import ImproperlyConfigured  # noqa: E402
from django.http import HttpRequest, HttpResponse  # noqa: E402
from django.test import RequestFactory, override_settings  # noqa: E402

from ratelimit.django import RateLimitMiddleware, limit  # noqa: E402

urlpatterns: list[Any] = []
LIMITER = TokenBucket(capacity=1, refill_per_sec=1e-6)


def view(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


async def async_view(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


def get(client: str = "10.0.0.1") -> HttpRequest:
    request: HttpRequest = RequestFactory().get("/", REMOTE_ADDR=client)
    return request


def test_the_middleware_reads_its_settings_and_answers_429s() -> None:
    """``RATELIMIT_MIDDLEWARE``: the limiter and the rest; 429s our parser reads."""
    limiter = TokenBucket(capacity=1, refill_per_sec=0.5, clock=ManualClock())
    with override_settings(RATELIMIT_MIDDLEWARE={"limiter": limiter, "wait": 0}):
        middleware = RateLimitMiddleware(view)
    granted = middleware(get())
    assert granted.status_code == 200
    assert granted["RateLimit"] == '"default";r=0;t=2'
    refused = middleware(get())
    assert refused.status_code == 429
    assert refused["Retry-After"] == "2"
    assert parse_rate_limit_headers(refused.items(), now=0.0).limit == 1.0
    assert refused.content == b"Too Many Requests\n"
    assert middleware(get("10.0.0.2")).status_code == 200


def test_the_limiter_may_be_named_by_its_dotted_path() -> None:
    with override_settings(RATELIMIT_MIDDLEWARE={"limiter": f"{__name__}.LIMITER", "headers": False}):
        middleware = RateLimitMiddleware(view)
    first = middleware(get("10.9.9.9"))
    assert first.status_code == 200
    assert "RateLimit" not in first
    assert middleware(get("10.9.9.9")).status_code == 429


def test_on_the_async_path_the_decision_is_asyncio() -> None:
    """Under an async stack the middleware is a coroutine function itself."""
    limiter = TokenBucket(capacity=1, refill_per_sec=1e-6, clock=ManualClock())
    with override_settings(RATELIMIT_MIDDLEWARE={"limiter": limiter}):
        middleware = RateLimitMiddleware(async_view)

    async def run() -> list[int]:
        return [(await middleware(get())).status_code for _ in range(2)]

    assert asyncio.run(run()) == [200, 429]


@pytest.mark.parametrize(
    "config",
    [None, {"key": None}, {"limiter": LIMITER, "burst": 3}, {"limiter": LIMITER, "wait": -1}],
    ids=["missing", "no-limiter", "unknown", "out-of-range"],
)
def test_a_bad_setting_is_improperly_configured(config: Any) -> None:
    with override_settings(RATELIMIT_MIDDLEWARE=config), pytest.raises(ImproperlyConfigured, match="RATELIMIT"):
        RateLimitMiddleware(view)


def test_a_view_of_its_own_sync_or_async() -> None:
    """``@limit(...)`` on a view, either kind."""
    limited = limit(TokenBucket(capacity=1, refill_per_sec=0.25, clock=ManualClock()))(view)
    assert limited(get()).status_code == 200
    refused = limited(get())
    assert refused.status_code == 429
    assert refused["Retry-After"] == "4"
    limited_async = limit(TokenBucket(capacity=1, refill_per_sec=0.25, clock=ManualClock()))(async_view)

    async def run() -> list[int]:
        return [(await limited_async(get())).status_code for _ in range(2)]

    assert asyncio.run(run()) == [200, 429]
