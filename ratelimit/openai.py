"""OpenAI's SDK with every call held to a budget of requests and tokens.

One line::

    client = ratelimit.openai.client(llm)   # an openai.OpenAI; async_client for AsyncOpenAI

``llm`` is a limiter of tokens, or a :class:`~ratelimit.Composite` whose first limit
counts requests and every other one tokens. Each call acquires its estimate, feeds
the response's ``x-ratelimit-*`` headers back and is settled from its ``usage`` (see
:mod:`ratelimit.llm`). Streams are settled when they end: ask for their usage with
``stream_options={"include_usage": True}`` (Chat Completions; the Responses API
always reports it), or each keeps its estimate.

Needs the ``openai`` extra: ``pip install 'ratelimit-fleet[openai]'``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx
import openai

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
    transport: httpx.BaseTransport | None = None,
    **options: Any,
) -> openai.OpenAI:
    """An ``openai.OpenAI`` whose every call goes through :class:`~ratelimit.llm.LLMTransport`.

    Args:
        limiter, tokenizer, estimate, default_max_tokens, transport: as
            :class:`~ratelimit.llm.LLMTransport` takes them.
        options: passed to ``openai.OpenAI`` (``api_key``, ``base_url``,
            ``max_retries``...), all but ``http_client``.
    """
    if "http_client" in options:
        raise TypeError("http_client is made here from transport=; pass the transport instead")
    sender = LLMTransport(
        limiter, tokenizer=tokenizer, estimate=estimate, default_max_tokens=default_max_tokens, transport=transport
    )
    # The SDK types its client as httpx2's but takes httpx's too (older SDKs only that).
    return openai.OpenAI(http_client=httpx.Client(transport=sender), **options)  # type: ignore[arg-type,unused-ignore]


def async_client(
    limiter: Acquirer,
    *,
    tokenizer: Tokenizer | None = None,
    estimate: Estimate | None = None,
    default_max_tokens: int = 4096,
    transport: httpx.AsyncBaseTransport | None = None,
    **options: Any,
) -> openai.AsyncOpenAI:
    """:func:`client` for ``openai.AsyncOpenAI`` (through :class:`~ratelimit.llm.AsyncLLMTransport`)."""
    if "http_client" in options:
        raise TypeError("http_client is made here from transport=; pass the transport instead")
    sender = AsyncLLMTransport(
        limiter, tokenizer=tokenizer, estimate=estimate, default_max_tokens=default_max_tokens, transport=transport
    )
    http = httpx.AsyncClient(transport=sender)
    return openai.AsyncOpenAI(http_client=http, **options)  # type: ignore[arg-type,unused-ignore]
