"""Header parsing against hostile servers: bounded input, linear time, never a raise.

Speed is not measured with a clock here (a shared machine makes any timing flaky).
It is pinned by structure instead: every regular expression, the duration scanner and
``fromisoformat`` are spied on, and no call may see more text than its kind's cap, nor
may one response cause more calls than the caps on headers, repeats and list items
allow. Inside those bounds every step is linear, so a hostile response costs what a
small one does.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratelimit import RateLimitInfo, TokenBucket, parse_rate_limit_headers
from ratelimit._headers import parse as headers_module
from ratelimit._headers import values as values_module
from ratelimit._headers.parse import _MAX_HEADERS, _MAX_REPEATS, _MAX_VALUE
from ratelimit._headers.values import MAX_DURATION, MAX_HTTP_DATE, MAX_ITEMS, MAX_NUMBER, MAX_RFC3339

NOW = 1_700_000_000.0

#: Every header name the parser reads.
NAMES = [
    *(
        f"{prefix}-{field}"
        for prefix in ("x-ratelimit", "x-rate-limit")
        for field in ("limit", "remaining", "used", "reset", "reset-after")
    ),
    "ratelimit",
    "ratelimit-policy",
    "ratelimit-limit",
    "ratelimit-remaining",
    "ratelimit-reset",
    *(f"x-ratelimit-{field}-{kind}" for field in ("limit", "remaining", "reset") for kind in ("requests", "tokens")),
    *(
        f"anthropic-ratelimit-{kind}-{field}"
        for kind in ("requests", "tokens")
        for field in ("limit", "remaining", "reset")
    ),
    "x-shopify-shop-api-call-limit",
    *(
        f"x-hubspot-ratelimit-{field}"
        for field in ("max", "remaining", "interval-milliseconds", "secondly", "secondly-remaining", "daily")
    ),
    "x-hubspot-ratelimit-daily-remaining",
    "sforce-limit-info",
    "x-rate-limit",
    "zendesk-ratelimit-tickets-index",
    "retry-after",
]

#: Values that are garbage however long, built to the length asked for. Each is one
#: that a backtracking parser, or one that reads everything it is sent, chokes on.
GARBAGE: dict[str, Callable[[int], str]] = {
    "digits": lambda n: "9" * n,
    "digits then a unit": lambda n: "9" * (n - 1) + "s",
    "digits then a point": lambda n: "9" * (n - 1) + ".",
    "commas": lambda n: "," * n,
    "semicolons": lambda n: ";" * n,
    "dotted digits": lambda n: ("1." * n)[:n],
    "m": lambda n: "m" * n,
    "s": lambda n: "s" * n,
    "ms": lambda n: ("ms" * n)[:n],
    "a duration without an end": lambda n: ("1h" * n)[: n - 1] + "x",
    "empty parameters": lambda n: ('"a";' + ";=" * n)[:n],
    "a date then digits": lambda n: ("Tue, 14 Nov 2023 22:14:20 GMT" + "9" * n)[:n],
}
#: Just over the longest cap; a short value; 64 KB.
SIZES = [41, 640, 64 * 1024]


def _garbage_cases() -> Iterator[Any]:
    for name in NAMES:
        for kind, make in GARBAGE.items():
            for size in SIZES:
                yield pytest.param(name, make(size), id=f"{name}-{kind}-{size}")


def _says_nothing(parsed: RateLimitInfo) -> None:
    assert parsed == RateLimitInfo(), parsed


# -- spies: what the expensive steps are given ------------------------------------------

#: The longest text any step that could cost more than a glance may be handed.
LONGEST = max(MAX_NUMBER, MAX_DURATION, MAX_HTTP_DATE, MAX_RFC3339)

#: Where the text is among the arguments of each method of a compiled pattern.
_TEXT_ARGUMENT = {"fullmatch": 0, "match": 0, "search": 0, "findall": 0, "finditer": 0, "split": 0, "sub": 1, "subn": 1}


#: The most such steps one parse may take, whatever it is sent: each kept repeat of a
#: header is read a few times (once per dialect that knows its name), each time at most
#: MAX_ITEMS pieces, each parsed a few ways.
MOST_STEPS = 8 * _MAX_REPEATS * MAX_ITEMS


def _check(kind: str, text: str, seen: list[tuple[str, int]]) -> None:
    seen.append((kind, len(text)))
    # Raised before the step runs, so that a parser doing too much fails at once.
    if len(text) > LONGEST:
        raise AssertionError(f"{kind} was handed {len(text)} characters, more than any cap ({LONGEST})")
    if len(seen) > MOST_STEPS:
        raise AssertionError(f"more than {MOST_STEPS} parsing steps for one set of headers")


class _Spy:
    """Stands in for a compiled pattern or the ``re`` module: checks every text matched.

    ``skip`` is 1 for the ``re`` module, whose functions take the pattern first.
    """

    def __init__(self, kind: str, wrapped: Any, seen: list[tuple[str, int]], skip: int = 0) -> None:
        self._kind, self._wrapped, self._seen, self._skip = kind, wrapped, seen, skip

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._wrapped, name)
        if name not in _TEXT_ARGUMENT:
            return attribute

        def spy(*args: Any, **kwargs: Any) -> Any:
            _check(self._kind, args[_TEXT_ARGUMENT[name] + self._skip], self._seen)
            return attribute(*args, **kwargs)

        return spy


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """``(kind, length)`` of every text given to a regular expression, the duration
    scanner or ``fromisoformat``; one longer than every cap fails the test at once."""
    calls: list[tuple[str, int]] = []
    for module in (headers_module, values_module):
        for name, value in list(vars(module).items()):
            if isinstance(value, re.Pattern):
                monkeypatch.setattr(module, name, _Spy(name, value, calls))
        if hasattr(module, "re"):
            monkeypatch.setattr(module, "re", _Spy("re", re, calls, skip=1))
    scan = values_module._scan_duration

    def scan_duration(text: str) -> float | None:
        _check("_scan_duration", text, calls)
        return scan(text)

    monkeypatch.setattr(values_module, "_scan_duration", scan_duration)

    class SpyDatetime(datetime):
        @classmethod
        def fromisoformat(cls, text: str) -> Any:
            _check("fromisoformat", text, calls)
            return datetime.fromisoformat(text)

    monkeypatch.setattr(values_module, "datetime", SpyDatetime)
    return calls


def test_the_spies_see_every_kind_of_parse(seen: list[tuple[str, int]]) -> None:
    # Without this, a renamed pattern would leave the other tests spying on nothing.
    headers = {
        "X-RateLimit-Remaining": "3",
        "x-ratelimit-reset-tokens": "6m0s",
        "Retry-After": "Tuesday, 14-Nov-23 22:14:20 GMT",
        "anthropic-ratelimit-tokens-reset": "2023-11-14T22:14:20Z",
    }
    parsed = parse_rate_limit_headers(headers, now=NOW)
    assert parsed.remaining == 3
    assert parsed.retry_after == 60
    assert parsed.tokens == RateLimitInfo(reset_after=360, gradual=True)
    assert {"_NUMBER", "_IMF_FIXDATE", "_RFC850", "_scan_duration", "fromisoformat"} <= {kind for kind, _ in seen}
    assert all(length <= LONGEST for _, length in seen)


# -- hostile values ---------------------------------------------------------------------


@pytest.mark.usefixtures("seen")
@pytest.mark.parametrize(("name", "value"), list(_garbage_cases()))
def test_garbage_of_any_length_says_nothing_and_no_parser_sees_past_its_cap(name: str, value: str) -> None:
    _says_nothing(parse_rate_limit_headers({name: value}, now=NOW))
    _says_nothing(parse_rate_limit_headers([(name.encode(), value.encode())], now=NOW))


def test_the_reported_header_is_refused_at_once(seen: list[tuple[str, int]]) -> None:
    # Issue 10: 32,000 digits took 12 s of CPU in a backtracking regular expression.
    headers = {"x-ratelimit-reset-tokens": "9" * 32_000}
    _says_nothing(parse_rate_limit_headers(headers, now=NOW))
    assert seen == []  # dropped whole, before anything looked at it
    limiter = TokenBucket(capacity=5, refill_per_sec=1)
    assert limiter.feedback(headers) == RateLimitInfo()
    assert limiter.try_acquire()


@pytest.mark.usefixtures("seen")
@pytest.mark.parametrize("size", [MAX_NUMBER + 1, _MAX_VALUE, _MAX_VALUE + 1, 64 * 1024])
def test_numbers_past_the_cap_are_garbage_never_a_huge_wait(size: int) -> None:
    headers = {"Retry-After": "1" * size, "X-RateLimit-Reset-After": "0" * (size - 1) + "5"}
    _says_nothing(parse_rate_limit_headers(headers, now=NOW))


@pytest.mark.usefixtures("seen")
def test_values_at_the_caps_are_still_read() -> None:
    headers = {
        "X-RateLimit-Remaining": "0" * (MAX_NUMBER - 1) + "7",
        "x-ratelimit-reset-requests": "0" * (MAX_DURATION - 2) + "5s",
        # Leading and trailing blanks are not part of the value.
        "Retry-After": " " * 100 + "9" + " " * 100,
    }
    assert parse_rate_limit_headers(headers, now=NOW) == RateLimitInfo(remaining=7, reset_after=5, retry_after=9)


def test_huge_ints_as_values_are_garbage_not_an_error() -> None:
    # str() of an int past 4,300 digits raises, and takes quadratic time below that.
    headers = {"X-RateLimit-Remaining": 10**5000, "Retry-After": 10**40, "X-RateLimit-Limit": 12}
    assert parse_rate_limit_headers(headers, now=NOW) == RateLimitInfo(limit=12)


# -- hostile counts ---------------------------------------------------------------------


def test_only_so_many_headers_are_looked_at() -> None:
    pulled = 0

    def a_million() -> Iterator[tuple[str, str]]:
        nonlocal pulled
        for _ in range(1_000_000):
            pulled += 1
            yield ("x-ratelimit-remaining", "1")

    assert parse_rate_limit_headers(a_million(), now=NOW) == RateLimitInfo(remaining=1)
    assert pulled <= _MAX_HEADERS + 1


@pytest.mark.parametrize("name", NAMES)
def test_repeats_and_list_items_are_bounded(name: str, seen: list[tuple[str, int]]) -> None:
    # 100,000 repeats of a value holding as many pieces as fit under the value cap, in
    # the IETF drafts' grammar and Salesforce's.
    value = ",".join(["1;r=1;t=1;q=1;w=1", "api-usage=1/2"] * 60)[:_MAX_VALUE]
    parsed = parse_rate_limit_headers([(name, value)] * 100_000, now=NOW)
    for field in (parsed.reset_after, parsed.retry_after):
        assert field is None or 0 <= field <= 3600
    assert 0 < len(seen) <= MOST_STEPS


def test_headers_read_by_prefix_are_bounded_in_all(seen: list[tuple[str, int]]) -> None:
    # Zendesk names each endpoint's header after it: a thousand distinct names are not
    # repeats of one, and must not each get their own 16 values.
    value = ",".join(["total=1; remaining=1; resets=1"] * 40)[:_MAX_VALUE]
    parsed = parse_rate_limit_headers([(f"zendesk-ratelimit-e{i}", value) for i in range(_MAX_HEADERS)], now=NOW)
    assert (parsed.remaining, parsed.reset_after) == (1, 1)
    assert 0 < len(seen) <= MOST_STEPS


def test_long_header_names_are_skipped_before_they_are_lowered() -> None:
    headers = [("X" * 100_000, "5"), ("x-ratelimit-remaining" + " " * 1_000, "5"), ("X-RateLimit-Limit", "10")]
    assert parse_rate_limit_headers(headers, now=NOW) == RateLimitInfo(limit=10)


# -- any text at all --------------------------------------------------------------------

_GRAMMAR = '0123456789.,;=:/ +-"hmsTZGMTNovTue'
values = st.one_of(
    st.text(),
    st.text(alphabet=_GRAMMAR),
    st.binary(),
    st.integers(),
    st.floats(),
    st.sampled_from(
        [
            "6m0s",
            "20ms",
            "1h2m3.5s",
            '"default";r=50;t=30',
            '"a";r=0;t=5, "b";r=9;t=0',
            "10;w=1",
            "32/40",
            "0",
            "api-usage=18/5000; per-app-api-usage=17/250(appName=x)",
            "total=100; remaining=99; resets=41",
            "2024-01-10T12:00Z",
        ]
    ),
)


@settings(max_examples=300, deadline=None)
@given(
    pairs=st.lists(st.tuples(st.sampled_from(NAMES), values), max_size=6),
    now=st.floats(min_value=0, max_value=4e9),
    cap=st.floats(min_value=1e-3, max_value=1e6),
)
def test_any_values_under_any_name_never_raise_and_waits_stay_in_bounds(
    pairs: list[tuple[str, Any]], now: float, cap: float
) -> None:
    parsed = parse_rate_limit_headers(pairs, now=now, cap=cap)
    readings = [parsed] if parsed.tokens is None else [parsed, parsed.tokens]
    for reading in readings:
        for wait in (reading.reset_after, reading.retry_after):
            assert wait is None or 0 <= wait <= cap
        for amount in (reading.limit, reading.remaining, reading.window):
            assert amount is None or (math.isfinite(amount) and amount >= 0)
