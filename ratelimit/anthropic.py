"""Anthropic's SDK with every call held to a budget of requests and tokens.

One line::

    client = ratelimit.anthropic.client(llm)   # an anthropic.Anthropic; async_client too

``llm`` is a limiter of tokens, or a :class:`~ratelimit.Composite` whose first limit
counts requests and every other one tokens. Each call acquires its estimate (the
prompt and ``max_tokens``), feeds the ``anthropic-ratelimit-*`` headers back and is
settled from its ``usage`` (input, output and cache tokens), streams included (see
:mod:`ratelimit.llm`). The SDK sends through ``httpx2``, so the transport wraps
an ``httpx2`` transport.

Needs the ``anthropic`` extra: ``pip install 'ratelimit-fleet[anthropic]'``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import anthropic
import httpx
import httpx2

from .llm import AsyncLLMTransport, LLMTransport

if TYPE_CHECKING:
    from ._integrations.llm_costs import Estimate, Tokenizer
    from ._limiting.front import Acquirer

__all__ = ["async_client", "client"]


def client(
    limiter: Acquirer,
    *,
    tokenizer: Tokenizer | None = None,
    estimate: Estimate | None = None,
    default_max_tokens: int = 4096,
    transport: httpx2.BaseTransport | None = None,
    **options: Any,
) -> anthropic.Anthropic:
    """An ``anthropic.Anthropic`` whose every call goes through :class:`~ratelimit.llm.LLMTransport`.

    Args:
        limiter, tokenizer, estimate, default_max_tokens: as
            :class:`~ratelimit.llm.LLMTransport` takes them.
        transport: the ``httpx2`` transport that sends (default ``httpx2.HTTPTransport()``).
        options: passed to ``anthropic.Anthropic`` (``api_key``, ``base_url``,
            ``max_retries``...), all but ``http_client``.
    """
    if "http_client" in options:
        raise TypeError("http_client is made here from transport=; pass the transport instead")
    sender = LLMTransport(
        limiter,
        tokenizer=tokenizer,
        estimate=estimate,
        default_max_tokens=default_max_tokens,
        transport=cast("httpx.BaseTransport", transport if transport is not None else httpx2.HTTPTransport()),
    )
    http = httpx2.Client(transport=cast("httpx2.BaseTransport", sender))
    return anthropic.Anthropic(http_client=http, **options)


def async_client(
    limiter: Acquirer,
    *,
    tokenizer: Tokenizer | None = None,
    estimate: Estimate | None = None,
    default_max_tokens: int = 4096,
    transport: httpx2.AsyncBaseTransport | None = None,
    **options: Any,
) -> anthropic.AsyncAnthropic:
    """:func:`client` for ``anthropic.AsyncAnthropic`` (through :class:`~ratelimit.llm.AsyncLLMTransport`)."""
    if "http_client" in options:
        raise TypeError("http_client is made here from transport=; pass the transport instead")
    sender = AsyncLLMTransport(
        limiter,
        tokenizer=tokenizer,
        estimate=estimate,
        default_max_tokens=default_max_tokens,
        transport=cast("httpx.AsyncBaseTransport", transport if transport is not None else httpx2.AsyncHTTPTransport()),
    )
    http = httpx2.AsyncClient(transport=cast("httpx2.AsyncBaseTransport", sender))
    return anthropic.AsyncAnthropic(http_client=http, **options)
