"""What ``ratelimit.llm``'s transport adds to a request, on the client, as a multiple
of the same request through a bare transport.

Each candidate posts a Chat Completions body through an ``httpx.Client`` over an
``httpx.MockTransport`` that answers a JSON body with ``usage``, streamed in two
chunks as off the network, with OpenAI's rate-limit headers: the floor is that
client on the bare mock transport; against it ``LLMTransport`` (read the estimate
from the body, acquire ``[1, estimate]`` on an in-process composite of requests and
tokens too large ever to make a request wait, read the headers and feed them back,
read the usage as the body passes, settle). Candidates take turns,
round after round; each ratio is the median of the rounds' cost over their floor::

    python benchmarks/llm_transport.py [--calls 2000] [--rounds 9]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Iterator

import httpx

from ratelimit import Composite, TokenBucket
from ratelimit.llm import LLMTransport

HUGE = 1e15
BODY = {"model": "m", "messages": [{"role": "user", "content": "a" * 400}], "max_tokens": 400}
ANSWER = json.dumps({"choices": [{"message": {"content": "ok"}}], "usage": {"total_tokens": 121}}).encode()
HEADERS = {
    "content-type": "application/json",
    "x-ratelimit-limit-requests": "1000000000000",
    "x-ratelimit-remaining-requests": "999999999999",
    "x-ratelimit-reset-requests": "120ms",
    "x-ratelimit-limit-tokens": "1000000000000",
    "x-ratelimit-remaining-tokens": "999999999999",
    "x-ratelimit-reset-tokens": "300ms",
}


class _Chunks(httpx.SyncByteStream):
    def __iter__(self) -> Iterator[bytes]:
        yield ANSWER[:40]
        yield ANSWER[40:]


def _answer(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, headers=HEADERS, stream=_Chunks())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    clients = {
        "bare": httpx.Client(transport=httpx.MockTransport(_answer)),
        "LLMTransport": httpx.Client(
            transport=LLMTransport(
                Composite([TokenBucket(HUGE, HUGE), TokenBucket(HUGE, HUGE)]), transport=httpx.MockTransport(_answer)
            )
        ),
    }
    costs: dict[str, list[float]] = {name: [] for name in clients}
    for _ in range(args.rounds):
        for name, client in clients.items():
            started = time.perf_counter()
            for _ in range(args.calls):
                client.post("http://llm.test/v1/chat/completions", json=BODY).json()
            costs[name].append((time.perf_counter() - started) / args.calls)
    for name in clients:
        ratios = [cost / floor for cost, floor in zip(costs[name], costs["bare"], strict=True)]
        print(
            f"{name:>20}: {statistics.median(costs[name]) * 1e6:7.1f} µs/request, "
            f"{statistics.median(ratios):.2f}x the bare transport"
        )


if __name__ == "__main__":
    main()
