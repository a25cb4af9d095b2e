"""The incoming-request modules' public surface: the names and signatures DESIGN.md promises."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import pytest

P = inspect.Parameter
REQUIRED = P.empty

MODULES = {
    "ratelimit.asgi": {"RateLimitMiddleware", "limit"},
    "ratelimit.wsgi": {"RateLimitMiddleware", "limit"},
    "ratelimit.django": {"RateLimitMiddleware", "limit"},
    "ratelimit.keys": {"Headers", "Request", "client_ip", "header"},
}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_each_module_exports_exactly_its_names(module: str) -> None:
    loaded = importlib.import_module(module)
    assert set(loaded.__all__) == MODULES[module]
    for name in loaded.__all__:
        assert getattr(loaded, name).__module__.startswith(("ratelimit._", module)), name


@pytest.mark.parametrize("module", ["ratelimit.asgi", "ratelimit.wsgi"])
def test_the_middlewares_take_the_promised_arguments(module: str) -> None:
    """``(app, *, limiter, key=client_ip(), cost=1, wait=0.0, exempt=None, headers=True)``."""
    middleware = importlib.import_module(module).RateLimitMiddleware
    params = inspect.signature(middleware).parameters
    assert list(params) == ["app", "limiter", "key", "cost", "wait", "exempt", "headers"]
    assert params["app"].kind is P.POSITIONAL_OR_KEYWORD
    assert all(params[name].kind is P.KEYWORD_ONLY for name in list(params)[1:])
    defaults: dict[str, Any] = {name: params[name].default for name in params}
    assert defaults["limiter"] is REQUIRED
    assert defaults["key"].__name__ == "client_ip()"
    assert (defaults["cost"], defaults["wait"], defaults["exempt"], defaults["headers"]) == (1, 0.0, None, True)


def test_the_key_functions_take_the_promised_arguments() -> None:
    from ratelimit.keys import client_ip, header

    params = inspect.signature(client_ip).parameters
    # The contract's one positional argument; beyond it only keyword-only additions
    # with defaults, which no call written to the contract can meet.
    assert list(params) == ["trusted_proxies", "forwarded_header"]
    assert params["trusted_proxies"].default == ()
    assert params["forwarded_header"].kind is inspect.Parameter.KEYWORD_ONLY
    assert params["forwarded_header"].default == "X-Forwarded-For"
    assert list(inspect.signature(header).parameters) == ["name"]


def test_the_request_view_has_the_promised_fields() -> None:
    from ratelimit.keys import Request

    assert [field for field in Request.__dataclass_fields__] == ["method", "path", "headers", "client"]
