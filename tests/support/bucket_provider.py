"""A provider for end-to-end feedback tests: a token bucket that says where it stands.

It serves a request when its bucket (``capacity`` at most, refilled at ``rate`` a
second, full at the start) holds one, and refuses it with a 429 otherwise. Every answer
carries the bucket's level in one of two dialects:

- ``"openai"``: ``x-ratelimit-limit-requests`` (the capacity),
  ``x-ratelimit-remaining-requests`` (the whole tokens held) and
  ``x-ratelimit-reset-requests`` (a duration until the bucket is full again, to the
  millisecond), as OpenAI documents its buckets;
- ``"ietf"``: the structured fields ``RateLimit: "default";r=<whole tokens>;t=<seconds
  until one more, rounded up>`` and ``RateLimit-Policy: "default";q=<quota>;w=<window>``,
  the window a whole number of seconds and the quota what the rate refills in it; a full
  bucket says ``t=0``.

A 429 carries ``Retry-After`` in whole seconds, rounded up, in both. Arrivals are
stamped when a request's first bytes can be read, in a spawned process, so that the
test's threads never delay them (as ``strict_provider.py``, whose notes apply). Written
apart from the package on purpose: it judges it.
"""

from __future__ import annotations

import io
import math
import multiprocessing
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

__all__ = ["BucketProvider", "BucketStats"]


@dataclass(frozen=True)
class BucketStats:
    #: Monotonic arrival time of each request served, and of each refused.
    served: tuple[float, ...]
    refused: tuple[float, ...]
    #: The provider's clock when it started (the bucket full).
    start: float


class _Server(ThreadingHTTPServer):
    request_queue_size = 1024
    daemon_threads = True


def _headers(dialect: str, capacity: float, rate: float, level: float) -> dict[str, str]:
    whole = math.floor(level + 1e-9)
    if dialect == "openai":
        full = (capacity - level) / rate
        return {
            "x-ratelimit-limit-requests": f"{capacity:g}",
            "x-ratelimit-remaining-requests": str(whole),
            "x-ratelimit-reset-requests": f"{full * 1000:.0f}ms",
        }
    window = max(1, round(capacity / rate))
    more = 0 if level >= capacity - 1e-9 else math.ceil((whole + 1 - level) / rate)
    return {
        "RateLimit": f'"default";r={whole};t={more}',
        "RateLimit-Policy": f'"default";q={rate * window:g};w={window}',
    }


def _serve(dialect: str, capacity: float, rate: float, ready: Any, stop: Any, results: Any) -> None:
    lock = threading.Lock()
    served: list[float] = []
    refused: list[float] = []
    start = time.monotonic()
    bucket = [capacity, start]  # level, when

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def handle_one_request(self) -> None:
            assert isinstance(self.rfile, io.BufferedReader)
            self.arrived = time.monotonic() if self.rfile.peek(1) else 0.0
            super().handle_one_request()

        def do_GET(self) -> None:
            arrived = self.arrived
            with lock:
                level = min(capacity, bucket[0] + (arrived - bucket[1]) * rate)
                ok = level >= 1.0 - 1e-9
                if ok:
                    level -= 1.0
                    served.append(arrived)
                else:
                    refused.append(arrived)
                bucket[0], bucket[1] = level, arrived
                headers = _headers(dialect, capacity, rate, level)
            body = b"{}"
            self.send_response(200 if ok else 429)
            for name, value in headers.items():
                self.send_header(name, value)
            if not ok:
                self.send_header("Retry-After", str(max(1, math.ceil((1.0 - level) / rate))))
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = _Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    ready.put(server.server_address[1])
    stop.wait()
    server.shutdown()
    with lock:
        results.put(BucketStats(tuple(served), tuple(refused), start))


class BucketProvider:
    """``with BucketProvider("openai", 20, 10) as provider:`` ... ``provider.url``, then
    ``provider.stats``."""

    def __init__(self, dialect: str, capacity: float, rate: float) -> None:
        context = multiprocessing.get_context("spawn")
        self._ready: Any = context.Queue()
        self._results: Any = context.Queue()
        self._stop = context.Event()
        self._process = context.Process(
            target=_serve, args=(dialect, capacity, rate, self._ready, self._stop, self._results), daemon=True
        )
        self.url = ""
        self.stats: BucketStats | None = None

    def __enter__(self) -> BucketProvider:
        self._process.start()
        self.url = f"http://127.0.0.1:{self._ready.get(timeout=60)}/"
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
