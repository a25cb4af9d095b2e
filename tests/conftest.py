"""Fixtures shared by the whole suite.

Behaviour tests take ``make`` and build their limiter through it: the limiter then
runs on every store of the backend matrix (``store`` is parametrised) with one
injected :class:`ManualClock`, so the same scenario must give the same decisions
everywhere.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

from ratelimit import ManualClock, MemoryBackend
from ratelimit._backend import Backend

L = TypeVar("L")

_names = itertools.count()

STORES = ["memory"]


@pytest.fixture(params=STORES)
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """Every store a limiter can keep its state in."""
    if request.param == "memory":
        yield MemoryBackend()
    else:  # pragma: no cover - filled in as stores are added
        raise AssertionError(request.param)


@pytest.fixture
def clock() -> ManualClock:
    # Not zero: scripts and algorithms must not rely on time starting at 0.
    return ManualClock(start=1_000.0)


@pytest.fixture
def make(backend: Backend, clock: ManualClock) -> Callable[..., Any]:
    """``make(TokenBucket, 3, 1)``: a limiter on the current store, with ``clock``."""

    def build(cls: Callable[..., L], *args: Any, **kwargs: Any) -> L:
        kwargs.setdefault("name", f"test-{next(_names)}")
        return cls(*args, backend=backend, clock=clock, **kwargs)

    return build
