"""A strict provider for end-to-end tests: a sliding log, in a process of its own.

It refuses (429) any request that would make more than ``limit`` served in ANY
interval of ``window`` seconds, both ends included, counting arrivals at the server
(the moment its handler starts on the request, before anything else is read). It
is written apart from ``ratelimit.testing.FakeProvider`` on purpose: the tests that
use it check the package's limiters and sizing, so the judge must not share their
code. It runs in a spawned process so that the test process's threads (and the GIL
they hold) never delay an arrival's timestamp: what it sees is what a provider on
another machine would, less the network.

HTTP/1.1 with kept-alive connections, as a real API and its clients have it.
"""

from __future__ import annotations

import bisect
import io
import multiprocessing
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

__all__ = ["StrictProvider", "StrictStats"]


@dataclass(frozen=True)
class StrictStats:
    served: int
    refused: int
    #: The most requests served in any closed interval of the window.
    most_in_window: int


class _Server(ThreadingHTTPServer):
    # A burst of connections must not overflow the backlog: a dropped SYN costs its
    # client a one-second retransmit, which would be the kernel's jitter, not ours.
    request_queue_size = 1024
    daemon_threads = True


def _most_in_window(times: list[float], window: float) -> int:
    return max((bisect.bisect_right(times, t + window) - i for i, t in enumerate(times)), default=0)


def _serve(limit: int, window: float, ready: Any, stop: Any, results: Any) -> None:
    lock = threading.Lock()
    served: list[float] = []
    refused = [0]

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def handle_one_request(self) -> None:
            # The arrival is when the request's first bytes can be read, before the
            # request line and headers are parsed.
            assert isinstance(self.rfile, io.BufferedReader)
            self.arrived = time.monotonic() if self.rfile.peek(1) else 0.0
            super().handle_one_request()

        def do_GET(self) -> None:
            arrived = self.arrived
            with lock:
                # Served in [arrived - window, arrived]: one more would be limit + 1.
                recent = len(served) - bisect.bisect_left(served, arrived - window)
                ok = recent < limit
                if ok:
                    bisect.insort(served, arrived)
                else:
                    refused[0] += 1
            body = b"{}"
            self.send_response(200 if ok else 429)
            if not ok:
                self.send_header("Retry-After", "1")
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
        results.put(StrictStats(len(served), refused[0], _most_in_window(served, window)))


class StrictProvider:
    """``with StrictProvider(200, 1.0) as provider:`` ... ``provider.url``, then ``.stats``."""

    def __init__(self, limit: int, window: float) -> None:
        self.limit = limit
        self.window = window
        context = multiprocessing.get_context("spawn")
        self._ready: Any = context.Queue()
        self._results: Any = context.Queue()
        self._stop = context.Event()
        self._process = context.Process(
            target=_serve, args=(limit, window, self._ready, self._stop, self._results), daemon=True
        )
        self.url = ""
        self.stats: StrictStats | None = None

    def __enter__(self) -> StrictProvider:
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
