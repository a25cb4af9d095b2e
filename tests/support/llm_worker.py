"""One process of the LLM clients' end-to-end test: threads calling the local LLM API
through the real SDK over ``ratelimit.openai`` or ``ratelimit.anthropic``, sharing a
Redis budget of requests and tokens with the other processes.

``run`` is called in the test's process and, spawned, in a second one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import ratelimit.anthropic
import ratelimit.openai
from ratelimit import Composite, RedisBackend, TokenBucket

__all__ = ["PROMPT", "budget", "run", "spawned"]

#: ~21 tokens of prompt as the server counts them, 26 as estimated, with
#: ``max_tokens=400`` of which the server answers 100: estimates 3.5 times the use.
PROMPT = "a" * 100
MAX_TOKENS = 400


def budget(redis_url: str, name: str, requests: int, tokens: int, window: float) -> Composite:
    """The provider's two buckets, shared through Redis."""
    return Composite(
        [TokenBucket(requests, requests / window), TokenBucket(tokens, tokens / window)],
        backend=RedisBackend.from_url(redis_url),
        name=name,
    )


def _call(sdk: str, client: Any, stream: bool, model: str = "test") -> None:
    messages = [{"role": "user", "content": PROMPT}]
    if sdk == "openai":
        if stream:
            chunks = client.chat.completions.create(
                model=model,
                messages=messages,
                max_tokens=MAX_TOKENS,
                stream=True,
                stream_options={"include_usage": True},
            )
            with chunks:
                for _ in chunks:
                    pass
        else:
            client.chat.completions.create(model=model, messages=messages, max_tokens=MAX_TOKENS)
    elif stream:
        with client.messages.stream(model=model, max_tokens=MAX_TOKENS, messages=messages) as events:
            for _ in events:
                pass
    else:
        client.messages.create(model=model, max_tokens=MAX_TOKENS, messages=messages)


def run(
    sdk: str,
    url: str,
    redis_url: str,
    name: str,
    limits: tuple[int, int, float],
    threads: int,
    seconds: float,
    start: Callable[[], object] | None = None,
) -> int:
    """Call for ``seconds`` from ``threads`` threads (every other call streamed),
    after two warm-up calls and then ``start()``; return the calls made."""
    if sdk == "openai":
        client: Any = ratelimit.openai.client(budget(redis_url, name, *limits), base_url=url, api_key="test")
    else:
        client = ratelimit.anthropic.client(
            budget(redis_url, name, *limits), base_url=url.removesuffix("/v1"), api_key="test"
        )
    for stream in (False, True):  # the SDK's first calls, before the clock starts
        _call(sdk, client, stream, "warm-up")
    if start is not None:
        start()
    until = time.monotonic() + seconds
    calls = [0] * threads

    def work(i: int) -> None:
        while time.monotonic() < until:
            _call(sdk, client, stream=calls[i] % 2 == 1)
            calls[i] += 1

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    client.close()
    return sum(calls)


def spawned(go: Any, ready: Any, done: Any, args: tuple[Any, ...]) -> None:
    """``run`` in a spawned process, warmed up, then says it is ``ready`` and waits
    for ``go``; puts its calls in ``done``."""

    def start() -> None:
        ready.put(True)
        go.wait(60)

    runner: Any = run  # args are run's, all but start
    done.put(runner(*args, start=start))
