"""How the Lua writes numbers out (``fmt`` in ``lua/_prelude.lua``): every double as
``%.17g`` would, so that the client and the Python twins read back the same double;
whole numbers below 1e14 by ``tostring``, which is cheaper and gives the same digits."""

from __future__ import annotations

import math
from typing import Any

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from ratelimit._stores.redis.scripts import lua_source

pytestmark = pytest.mark.redis

WRITE = (
    lua_source("_prelude") + "\nlocal out = {}\nfor i, x in ipairs(ARGV) do out[i] = fmt(tonumber(x)) end\nreturn out"
)


def written(client: redis.Redis, xs: list[float]) -> list[str]:
    got: Any = client.eval(WRITE, 0, *[repr(x) for x in xs])
    return [text.decode() for text in got]


def as_17g(x: float) -> str:
    return f"{x:.17g}"


EDGES = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    7.0,
    1e13,
    99_999_999_999_999.0,
    1e14,
    -1e14,
    1e14 + 2,
    2.0**53,
    0.5,
    1e-9,
    1.7e9 + 0.25,
    1e300,
    -1e-300,
    5e-324,
]


def test_the_edges_are_written_as_17g(redis_client: redis.Redis) -> None:
    assert written(redis_client, EDGES) == [as_17g(x) for x in EDGES]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(st.integers(-(10**15), 10**15).map(float), st.floats(allow_nan=False, allow_infinity=False)),
        min_size=1,
        max_size=40,
    )
)
def test_any_double_is_written_as_17g_and_reads_back_the_same(redis_client: redis.Redis, xs: list[float]) -> None:
    texts = written(redis_client, xs)
    assert texts == [as_17g(x) for x in xs]
    assert all(
        float(text) == x and math.copysign(1, float(text)) == math.copysign(1, x)
        for text, x in zip(texts, xs, strict=True)
    )
