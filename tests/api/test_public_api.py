"""The public surface: what ``import ratelimit`` promises, and nothing else.

The names and signatures in DESIGN.md's contract table are a promise to users; this
file fails the moment one is renamed, dropped, or gains a required argument.
"""

from __future__ import annotations

import importlib
import inspect
import types
from collections.abc import Callable
from typing import Any

import fakeredis
import pytest

import ratelimit
from ratelimit import (
    Acquirer,
    Clock,
    Composite,
    LeakyBucket,
    ManualClock,
    MemoryBackend,
    RedisBackend,
    SlidingWindow,
    SQLiteBackend,
    SystemClock,
    TokenBucket,
    for_limit,
    parse_rate_limit_headers,
)
from ratelimit._stores.store import Backend

from conftest import stable_id

# Everything ratelimit/__init__.py re-exports on purpose.
PUBLIC = {
    # the limiters and the interface they share
    "Acquirer",
    "Adaptive",
    "Composite",
    "LeakyBucket",
    "SlidingWindow",
    "TokenBucket",
    "Quota",
    "Reservation",
    # the limiter for a provider's published limit
    "for_limit",
    # many tenants on one budget
    "FairShare",
    "TenantShare",
    # requests in flight
    "ConcurrencyLimit",
    "Hold",
    "Lease",
    # where their state lives
    "BackendStats",
    "MemoryBackend",
    "RedisBackend",
    "SQLiteBackend",
    # time
    "Clock",
    "ManualClock",
    "SystemClock",
    "LimiterStats",
    # errors
    "AcquireTimeout",
    "BackendUnavailable",
    "CircuitOpen",
    "RateLimitError",
    "RetryError",
    # retries, backoff and the circuit breaker
    "Attempt",
    "Backoff",
    "BreakerStats",
    "CircuitBreaker",
    "Retry",
    "RetryStats",
    "Ticket",
    "classify",
    # events
    "subscribe",
    # provider headers
    "RateLimitInfo",
    "parse_rate_limit_headers",
}


def test_all_is_sorted() -> None:
    assert ratelimit.__all__ == sorted(ratelimit.__all__)
    assert len(set(ratelimit.__all__)) == len(ratelimit.__all__)


def test_all_is_exactly_the_intended_public_names() -> None:
    assert set(ratelimit.__all__) == PUBLIC


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_every_public_name_resolves_to_an_implementation_in_a_private_module(name: str) -> None:
    obj = getattr(ratelimit, name)
    assert obj is not None
    module = obj.__module__
    assert module.startswith("ratelimit._"), f"{name} is defined in {module}, not behind a private module"
    # Re-exported, not copied: the private module's object is the very same.
    assert getattr(importlib.import_module(module), name) is obj


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, Any] = {}
    exec("from ratelimit import *", namespace)
    assert {name for name in namespace if not name.startswith("__")} == PUBLIC


def test_no_other_public_object_leaks_from_the_package() -> None:
    leaked = {
        name
        for name, value in vars(ratelimit).items()
        if not name.startswith("_")
        and name not in PUBLIC
        and not isinstance(value, types.ModuleType)  # submodules (cli, testing) are imported on demand
        and name != "annotations"  # `from __future__ import annotations`
    }
    assert leaked == set()


def test_version_is_a_string() -> None:
    assert isinstance(ratelimit.__version__, str)
    assert ratelimit.__version__.count(".") >= 1


# -- every limiter is an Acquirer ----------------------------------------------------

Factory = Callable[[Backend | None], object]

LIMITERS: list[Factory] = [
    lambda backend: TokenBucket(5, 1, backend=backend, name="api-tb"),
    lambda backend: LeakyBucket(5, 1, backend=backend, name="api-lb"),
    lambda backend: SlidingWindow(5, 1, backend=backend, name="api-sw"),
    lambda backend: SlidingWindow(5, 1, approximate=True, backend=backend, name="api-swc"),
    lambda backend: Composite([TokenBucket(5, 1), SlidingWindow(50, 60)], backend=backend, name="api-c"),
]
LIMITER_IDS = ["TokenBucket", "LeakyBucket", "SlidingWindow", "SlidingWindow(approximate)", "Composite"]


@pytest.mark.parametrize(
    "backend",
    [lambda: None, MemoryBackend, lambda: RedisBackend(fakeredis.FakeRedis())],
    ids=["default", "memory", "fakeredis"],
)
@pytest.mark.parametrize("factory", LIMITERS, ids=LIMITER_IDS)
def test_every_limiter_is_an_acquirer(factory: Factory, backend: Callable[[], Backend | None]) -> None:
    limiter = factory(backend())
    assert isinstance(limiter, Acquirer)


@pytest.mark.parametrize("thing", [object(), ManualClock(), MemoryBackend(), "acquire"], ids=stable_id)
def test_other_objects_are_not_acquirers(thing: object) -> None:
    assert not isinstance(thing, Acquirer)


def test_the_clocks_are_clocks() -> None:
    assert isinstance(SystemClock(), Clock)
    assert isinstance(ManualClock(), Clock)
    assert not isinstance(object(), Clock)


ACQUIRER_METHODS = [
    name for name, member in vars(Acquirer).items() if not name.startswith("_") and inspect.isfunction(member)
]


def test_the_acquirer_protocol_has_the_contract_methods() -> None:
    assert set(ACQUIRER_METHODS) >= {
        "acquire",
        "try_acquire",
        "acquire_async",
        "try_acquire_async",
        "feedback",
        "charge",
        "charge_async",
        "settle",
        "settle_async",
    }


def _compatible(promised: inspect.Signature, actual: inspect.Signature) -> list[str]:
    """What stops ``actual`` from standing in for ``promised`` (empty: nothing)."""
    problems = []
    given = dict(actual.parameters)
    for name, param in promised.parameters.items():
        mine = given.pop(name, None)
        if mine is None:
            problems.append(f"missing parameter {name}")
            continue
        if mine.kind != param.kind:
            problems.append(f"{name} is {mine.kind.description}, promised {param.kind.description}")
        if mine.default != param.default:
            problems.append(f"{name} defaults to {mine.default!r}, promised {param.default!r}")
    for name, extra in given.items():
        # Extra options are fine as long as callers that follow the promise never need them.
        if extra.default is inspect.Parameter.empty and extra.kind not in (
            inspect.Parameter.VAR_POSITIONAL,
            inspect.Parameter.VAR_KEYWORD,
        ):
            problems.append(f"extra required parameter {name}")
    return problems


@pytest.mark.parametrize("method", ACQUIRER_METHODS)
@pytest.mark.parametrize("cls", [TokenBucket, LeakyBucket, SlidingWindow, Composite], ids=lambda cls: cls.__name__)
def test_limiter_methods_match_the_protocol(cls: type[Any], method: str) -> None:
    promised = getattr(Acquirer, method)
    actual = getattr(cls, method)
    assert _compatible(inspect.signature(promised), inspect.signature(actual)) == []
    assert inspect.iscoroutinefunction(actual) == inspect.iscoroutinefunction(promised)
    assert inspect.iscoroutinefunction(actual) == method.endswith("_async")


# -- the contract table's signatures ----------------------------------------------------

P = inspect.Parameter
REQUIRED = P.empty


LIMITER_KEYWORDS = [("backend", P.KEYWORD_ONLY, None), ("name", P.KEYWORD_ONLY, None), ("clock", P.KEYWORD_ONLY, None)]

CONTRACT: list[tuple[str, Callable[..., Any], list[tuple[str, Any, Any]]]] = [
    (
        "TokenBucket",
        TokenBucket,
        [
            ("capacity", P.POSITIONAL_OR_KEYWORD, REQUIRED),
            ("refill_per_sec", P.POSITIONAL_OR_KEYWORD, REQUIRED),
            *LIMITER_KEYWORDS,
        ],
    ),
    (
        "LeakyBucket",
        LeakyBucket,
        [
            ("capacity", P.POSITIONAL_OR_KEYWORD, REQUIRED),
            ("leak_per_sec", P.POSITIONAL_OR_KEYWORD, REQUIRED),
            *LIMITER_KEYWORDS,
        ],
    ),
    (
        "SlidingWindow",
        SlidingWindow,
        [
            ("limit", P.POSITIONAL_OR_KEYWORD, REQUIRED),
            ("window_seconds", P.POSITIONAL_OR_KEYWORD, REQUIRED),
            *LIMITER_KEYWORDS,
        ],
    ),
    (
        "acquire",
        TokenBucket.acquire,
        [("tokens", P.POSITIONAL_OR_KEYWORD, 1), ("timeout", P.POSITIONAL_OR_KEYWORD, None)],
    ),
    ("try_acquire", TokenBucket.try_acquire, [("tokens", P.POSITIONAL_OR_KEYWORD, 1)]),
    (
        "acquire_async",
        TokenBucket.acquire_async,
        [("tokens", P.POSITIONAL_OR_KEYWORD, 1), ("timeout", P.POSITIONAL_OR_KEYWORD, None)],
    ),
    ("try_acquire_async", TokenBucket.try_acquire_async, [("tokens", P.POSITIONAL_OR_KEYWORD, 1)]),
    (
        "reserve",
        TokenBucket.reserve,
        [("tokens", P.POSITIONAL_OR_KEYWORD, 1), ("timeout", P.POSITIONAL_OR_KEYWORD, None)],
    ),
    (
        "reserve_async",
        TokenBucket.reserve_async,
        [("tokens", P.POSITIONAL_OR_KEYWORD, 1), ("timeout", P.POSITIONAL_OR_KEYWORD, None)],
    ),
    (
        "Composite.reserve",
        Composite.reserve,
        [("tokens", P.POSITIONAL_OR_KEYWORD, 1), ("timeout", P.POSITIONAL_OR_KEYWORD, None)],
    ),
    ("peek", TokenBucket.peek, [("tokens", P.POSITIONAL_OR_KEYWORD, 1)]),
    ("peek_async", TokenBucket.peek_async, [("tokens", P.POSITIONAL_OR_KEYWORD, 1)]),
    ("reset", TokenBucket.reset, []),
    ("reset_async", TokenBucket.reset_async, []),
    ("charge", TokenBucket.charge, [("tokens", P.POSITIONAL_OR_KEYWORD, REQUIRED)]),
    ("charge_async", TokenBucket.charge_async, [("tokens", P.POSITIONAL_OR_KEYWORD, REQUIRED)]),
    (
        "feedback",
        TokenBucket.feedback,
        [("headers", P.POSITIONAL_OR_KEYWORD, REQUIRED), ("status", P.POSITIONAL_OR_KEYWORD, None)],
    ),
    (
        "RedisBackend.from_url",
        RedisBackend.from_url,
        [("url", P.POSITIONAL_OR_KEYWORD, REQUIRED), ("options", P.VAR_KEYWORD, REQUIRED)],
    ),
    ("RedisBackend", RedisBackend, [("client", P.POSITIONAL_OR_KEYWORD, REQUIRED)]),
    ("SQLiteBackend", SQLiteBackend, [("path", P.POSITIONAL_OR_KEYWORD, REQUIRED)]),
    (
        "for_limit",
        for_limit,
        [("limit", P.POSITIONAL_OR_KEYWORD, REQUIRED), ("burst", P.KEYWORD_ONLY, None), *LIMITER_KEYWORDS],
    ),
    (
        "parse_rate_limit_headers",
        parse_rate_limit_headers,
        [("headers", P.POSITIONAL_OR_KEYWORD, REQUIRED), ("now", P.POSITIONAL_OR_KEYWORD, None)],
    ),
]


@pytest.mark.parametrize(("what", "func", "promised"), CONTRACT, ids=[c[0] for c in CONTRACT])
def test_contract_signatures(what: str, func: Callable[..., Any], promised: list[tuple[str, Any, Any]]) -> None:
    params = {name: p for name, p in inspect.signature(func).parameters.items() if name != "self"}
    for name, kind, default in promised:
        assert name in params, f"{what} lost its {name} parameter"
        assert params[name].kind == kind, f"{what}({name}) is {params[name].kind.description}"
        assert params[name].default == default, f"{what}({name}) defaults to {params[name].default!r}"
    # Anything beyond the promise is optional and keyword-only, so positional calls keep meaning the same.
    promised_names = {name for name, _, _ in promised}
    for name, param in params.items():
        if name not in promised_names and param.kind is not P.VAR_KEYWORD:
            assert param.kind is P.KEYWORD_ONLY, f"{what}({name}) must be keyword-only"
            assert param.default is not P.empty, f"{what}({name}) must be optional"
