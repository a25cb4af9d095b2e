"""A local LLM API for end-to-end tests: OpenAI's Chat Completions and Anthropic's
Messages, limited in requests and tokens as the real APIs limit them.

Both budgets are token buckets (the providers document theirs so: full after a
window, refilled evenly), each ``limit`` per ``window`` seconds, starting full. A
request is served when the requests bucket holds one and the tokens bucket holds its
*real* cost, which the server knows before answering: the prompt's characters / 5
plus a quarter of the answer's cap (``max_tokens``), as ``usage`` then reports it.
Otherwise it is refused with a 429 and ``Retry-After``. A request for the model
``"warm-up"`` is answered free and uncounted (an SDK's first call imports and builds
much, which a measurement should not time). Every answer carries the
provider's rate-limit headers (``x-ratelimit-*`` or ``anthropic-ratelimit-*``), JSON
or, with ``"stream": true``, server-sent events.

Written apart from the package on purpose (it judges it), and run in a spawned
process so that the test's threads never delay an arrival's timestamp.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

__all__ = ["LLMProvider", "LLMStats", "real_cost"]


@dataclass(frozen=True)
class LLMStats:
    served: int
    refused: int
    #: The real tokens of the requests served.
    tokens: float
    #: (arrival, tokens) of each request served, the arrival in epoch seconds.
    arrivals: tuple[tuple[float, float], ...]


def _texts(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in _texts(v)]
    return []


def real_cost(body: dict[str, Any]) -> tuple[int, int]:
    """``(input, output)`` tokens the server counts a request as using."""
    prompt = sum(len(t) for key in ("messages", "system") for t in _texts(body.get(key)))
    cap = body.get("max_completion_tokens") or body.get("max_tokens") or 16
    return math.ceil(prompt / 5), max(1, int(cap) // 4)


class _Bucket:
    def __init__(self, limit: float, window: float, now: float) -> None:
        self.limit, self.rate, self.level, self.at = limit, limit / window, limit, now

    def refill(self, now: float) -> None:
        self.level = min(self.limit, self.level + (now - self.at) * self.rate)
        self.at = now

    def needs(self, amount: float) -> float:
        """Seconds until ``amount`` is in the bucket."""
        return max(0.0, (amount - self.level) / self.rate)

    def reset(self) -> float:
        """Seconds until the bucket is full."""
        return (self.limit - self.level) / self.rate


class _Server(ThreadingHTTPServer):
    request_queue_size = 1024
    daemon_threads = True


def _serve(requests: int, tokens: int, window: float, latency: float, ready: Any, stop: Any, results: Any) -> None:
    lock = threading.Lock()
    start = time.monotonic()
    asked = _Bucket(requests, window, start)
    spent = _Bucket(tokens, window, start)
    arrivals: list[tuple[float, float]] = []
    refused = [0]

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            arrived = time.monotonic()
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
            anthropic = self.path.endswith("/messages")
            inputs, outputs = real_cost(body)
            cost = inputs + outputs
            if body.get("model") == "warm-up":  # a client's first call, free and uncounted
                headers = self._limits(anthropic, asked, spent)
                self._send(200, self._answer(anthropic, inputs, outputs), headers)
                return
            with lock:
                asked.refill(arrived)
                spent.refill(arrived)
                ok = asked.level >= 1 and spent.level >= cost
                wait = max(asked.needs(1), spent.needs(cost))
                if ok:
                    asked.level -= 1
                    spent.level -= cost
                    arrivals.append((time.time(), cost))
                else:
                    refused[0] += 1
                headers = self._limits(anthropic, asked, spent)
            if not ok:
                self._send(429, {"error": {"type": "rate_limit_error", "message": "slow down"}}, headers, wait)
                return
            if latency:
                time.sleep(latency)
            if body.get("stream"):
                self._stream(anthropic, body, inputs, outputs, headers)
            else:
                self._send(200, self._answer(anthropic, inputs, outputs), headers)

        def _limits(self, anthropic: bool, asked: _Bucket, spent: _Bucket) -> dict[str, str]:
            if anthropic:
                wall = time.time()

                def moment(seconds: float) -> str:
                    return datetime.fromtimestamp(wall + seconds, timezone.utc).isoformat()

                return {
                    "anthropic-ratelimit-requests-limit": f"{asked.limit:.0f}",
                    "anthropic-ratelimit-requests-remaining": f"{math.floor(asked.level)}",
                    "anthropic-ratelimit-requests-reset": moment(asked.reset()),
                    "anthropic-ratelimit-tokens-limit": f"{spent.limit:.0f}",
                    "anthropic-ratelimit-tokens-remaining": f"{math.floor(spent.level)}",
                    "anthropic-ratelimit-tokens-reset": moment(spent.reset()),
                }
            return {
                "x-ratelimit-limit-requests": f"{asked.limit:.0f}",
                "x-ratelimit-remaining-requests": f"{math.floor(asked.level)}",
                "x-ratelimit-reset-requests": f"{asked.reset():.3f}s",
                "x-ratelimit-limit-tokens": f"{spent.limit:.0f}",
                "x-ratelimit-remaining-tokens": f"{math.floor(spent.level)}",
                "x-ratelimit-reset-tokens": f"{spent.reset():.3f}s",
            }

        @staticmethod
        def _answer(anthropic: bool, inputs: int, outputs: int) -> dict[str, Any]:
            if anthropic:
                return {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-test",
                    "content": [{"type": "text", "text": "ok"}],
                    "stop_reason": "end_turn",
                    "stop_sequence": None,
                    "usage": {"input_tokens": inputs, "output_tokens": outputs},
                }
            return {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 0,
                "model": "gpt-test",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": inputs, "completion_tokens": outputs, "total_tokens": inputs + outputs},
            }

        def _send(self, status: int, payload: object, headers: dict[str, str], wait: float = 0.0) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            if status == 429:
                self.send_header("retry-after", str(max(1, math.ceil(wait))))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, anthropic: bool, body: dict[str, Any], inputs: int, outputs: int, h: dict[str, str]) -> None:
            if anthropic:
                start = {**self._answer(True, inputs, 1), "content": []}
                text = {"type": "text_delta", "text": "ok"}
                end = {"stop_reason": "end_turn", "stop_sequence": None}
                block = {"type": "text", "text": ""}
                events = [
                    ("message_start", {"type": "message_start", "message": start}),
                    ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}),
                    ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": text}),
                    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                    ("message_delta", {"type": "message_delta", "delta": end, "usage": {"output_tokens": outputs}}),
                    ("message_stop", {"type": "message_stop"}),
                ]
                lines = [f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events]
            else:
                chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "gpt-test"}
                say = {"index": 0, "delta": {"role": "assistant", "content": "ok"}, "finish_reason": None}
                stop = {"index": 0, "delta": {}, "finish_reason": "stop"}
                parts = [{**chunk, "choices": [say]}, {**chunk, "choices": [stop]}]
                if (body.get("stream_options") or {}).get("include_usage"):
                    usage = {"prompt_tokens": inputs, "completion_tokens": outputs, "total_tokens": inputs + outputs}
                    parts.append({**chunk, "choices": [], "usage": usage})
                lines = [f"data: {json.dumps(part)}\n\n" for part in parts] + ["data: [DONE]\n\n"]
            data = "".join(lines).encode()
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("content-length", str(len(data)))
            for name, value in h.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = _Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    ready.put(server.server_address[1])
    stop.wait()
    server.shutdown()
    with lock:
        results.put(LLMStats(len(arrivals), refused[0], sum(c for _, c in arrivals), tuple(arrivals)))


class LLMProvider:
    """``with LLMProvider(requests=100, tokens=4_000, window=1.0) as api:`` ... ``api.url``,
    then ``api.stats`` (the ``/v1`` base URL both SDKs take)."""

    def __init__(self, requests: int, tokens: int, window: float, latency: float = 0.0) -> None:
        self.requests, self.tokens, self.window = requests, tokens, window
        context = multiprocessing.get_context("spawn")
        self._ready: Any = context.Queue()
        self._results: Any = context.Queue()
        self._stop = context.Event()
        self._process = context.Process(
            target=_serve,
            args=(requests, tokens, window, latency, self._ready, self._stop, self._results),
            daemon=True,
        )
        self.url = ""
        self.stats: LLMStats | None = None

    def __enter__(self) -> LLMProvider:
        self._process.start()
        self.url = f"http://127.0.0.1:{self._ready.get(timeout=60)}/v1"
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        try:
            self.stats = self._results.get(timeout=30)
        finally:
            self._process.join(10)
            if self._process.is_alive():
                self._process.terminate()
                self._process.join(5)
