"""Each registered dialect: its docstring's documentation link and sample, as one table.

Adding a provider: its function and entry in ``DIALECTS``, and a row here. Each row's
headers are the sample in the dialect's docstring, so the sample is what is tested.
"""

from __future__ import annotations

import inspect

import pytest

from ratelimit import RateLimitInfo, parse_rate_limit_headers
from ratelimit._headers.dialects import DIALECTS, Dialect
from ratelimit._headers.fields import Fields

NOW = 1_700_000_000.0  # 2023-11-14T22:13:20Z

#: What each dialect's sample means, alone and as the whole parse.
EXPECTED: dict[str, RateLimitInfo] = {
    "x_ratelimit": RateLimitInfo(limit=5000, remaining=4999, reset_after=600),
    "ietf": RateLimitInfo(limit=100, remaining=50, reset_after=30, window=60, refills=True),
    "openai": RateLimitInfo(
        limit=60,
        remaining=59,
        reset_after=1,
        gradual=True,
        tokens=RateLimitInfo(limit=150000, remaining=149984, reset_after=360, gradual=True),
    ),
    "anthropic": RateLimitInfo(
        limit=50,
        remaining=49,
        reset_after=30,
        gradual=True,
        tokens=RateLimitInfo(limit=40000, remaining=39000, reset_after=60, gradual=True),
    ),
    "shopify": RateLimitInfo(limit=40, remaining=8),
    "hubspot": RateLimitInfo(limit=100, remaining=97, window=10),
    "salesforce": RateLimitInfo(limit=250, remaining=233, window=86400),
    "zendesk": RateLimitInfo(limit=10, remaining=1, reset_after=41),
    "retry_after": RateLimitInfo(retry_after=60),
}

BY_NAME = {dialect.__name__: dialect for dialect in DIALECTS}


def sample(dialect: Dialect) -> list[tuple[str, str]]:
    """The ``Name: value`` lines of the block after ``Sample::`` in the docstring."""
    doc = inspect.getdoc(dialect) or ""
    _, marker, rest = doc.partition("Sample::\n")
    assert marker, f"{dialect.__name__} has no Sample:: block"
    lines = []
    for line in rest.strip("\n").splitlines():
        if not line.startswith("    "):
            break
        name, _, value = line.strip().partition(": ")
        lines.append((name, value))
    return lines


def test_every_registered_dialect_has_a_row_and_every_row_a_dialect() -> None:
    assert sorted(BY_NAME) == sorted(EXPECTED)
    assert len(BY_NAME) == len(DIALECTS)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_the_docstring_names_the_providers_documentation(name: str) -> None:
    doc = inspect.getdoc(BY_NAME[name]) or ""
    _, marker, links = doc.partition("Documentation:\n")
    assert marker
    assert links.split("\n")[0].strip().startswith("https://")


@pytest.mark.parametrize(("name", "expected"), list(EXPECTED.items()))
def test_the_docstrings_sample_reads_as_expected(name: str, expected: RateLimitInfo) -> None:
    headers = sample(BY_NAME[name])
    assert headers
    # By the dialect alone, as the registry's walk sees it...
    by_name: dict[str, list[str]] = {}
    for header, value in headers:
        by_name.setdefault(header.lower(), []).append(value)
    assert BY_NAME[name](Fields(by_name, NOW, 3600.0)) == expected
    # ... and as the whole parse: no other dialect reads a word of it.
    assert parse_rate_limit_headers(headers, now=NOW) == expected


@pytest.mark.parametrize("name", list(EXPECTED))
def test_a_dialect_says_nothing_of_headers_it_does_not_read(name: str) -> None:
    assert BY_NAME[name](Fields({"content-type": ["text/plain"]}, NOW, 3600.0)) in (
        RateLimitInfo(),
        RateLimitInfo(tokens=RateLimitInfo()),
    )
