"""A local fake API provider that enforces a rate limit the way real ones do.

For testing pipelines (ours and yours) without a real provider: an HTTP server on
loopback that answers every request with rate-limit headers, refuses with 429 and
``Retry-After`` when its limit is exceeded, and counts what it served and refused::

    with FakeProvider(limit=100, window=60) as provider:
        run_my_pipeline(base_url=provider.url)
        assert provider.stats().refused == 0

Two ways of limiting: ``"fixed_window"`` (at most ``limit`` per window, windows
aligned to the provider's start) and ``"token_bucket"`` (``burst`` at once, refilled at
``limit / window`` per second). Two dialects of headers: ``"x-ratelimit"``
(``X-RateLimit-Limit/Remaining/Reset``, Reset as epoch seconds rounded up, as GitHub
sends it) and ``"ietf"`` (``RateLimit-Limit/Remaining/Reset`` as delay seconds and
``RateLimit-Policy``). Faults on demand: :meth:`FakeProvider.force_status` and
:meth:`FakeProvider.pause`.
"""

from __future__ import annotations

import bisect
import json
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Literal

__all__ = ["FakeProvider", "ProviderStats"]


@dataclass(frozen=True)
class ProviderStats:
    """What a :class:`FakeProvider` has seen since it started (or was reset)."""

    served: int
    refused: int
    #: The most requests served in any interval of the provider's ``window``.
    max_in_window: int
    #: Monotonic times (the provider's clock) of every served request.
    served_at: tuple[float, ...]


class FakeProvider:
    """An HTTP server on 127.0.0.1 that rate-limits like a real API.

    Args:
        limit: requests allowed per ``window``.
        window: the window, in seconds.
        mode: ``"fixed_window"`` or ``"token_bucket"``.
        burst: the bucket's capacity in ``"token_bucket"`` mode (default ``limit``).
        headers: ``"x-ratelimit"`` or ``"ietf"``.
        port: the port to listen on (0: any free one).
        clock: monotonic time for the limit; wall_clock: epoch time for resets.
    """

    def __init__(
        self,
        limit: int,
        window: float,
        *,
        mode: Literal["fixed_window", "token_bucket"] = "fixed_window",
        burst: int | None = None,
        headers: Literal["x-ratelimit", "ietf"] = "x-ratelimit",
        port: int = 0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
            raise ValueError(f"limit must be a whole number > 0, got {limit!r}")
        if isinstance(window, bool) or not isinstance(window, (int, float)) or not 0 < window < math.inf:
            raise ValueError(f"window must be a number of seconds > 0, got {window!r}")
        if mode not in ("fixed_window", "token_bucket"):
            raise ValueError(f"mode must be 'fixed_window' or 'token_bucket', got {mode!r}")
        if headers not in ("x-ratelimit", "ietf"):
            raise ValueError(f"headers must be 'x-ratelimit' or 'ietf', got {headers!r}")
        if burst is not None and (isinstance(burst, bool) or not isinstance(burst, int) or burst <= 0):
            raise ValueError(f"burst must be a whole number > 0, got {burst!r}")
        self.limit = limit
        self.window = float(window)
        self.mode = mode
        self.burst = burst or limit
        self.headers = headers
        self._clock = clock
        self._wall = wall_clock
        self._lock = threading.Lock()
        self._requested_port = port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.reset()

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> FakeProvider:
        if self._server is not None:
            return self
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                status, headers, body = provider._decide()
                payload = json.dumps(body).encode()
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = _answer

            def log_message(self, format: str, *args: object) -> None:
                pass  # a test run is no place for an access log

        self._server = ThreadingHTTPServer(("127.0.0.1", self._requested_port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-provider", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeProvider:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the provider is not running: call start() first")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    # -- state ------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget everything served and refused, and start the limit afresh."""
        with self._lock:
            self._start = self._clock()
            self._window_index = 0
            self._window_count = 0
            self._tokens = float(self.burst)
            self._refilled_at = self._start
            self._served_at: list[float] = []
            self._refused = 0
            self._forced: list[tuple[int, float | None]] = []
            self._paused_until = -math.inf

    def force_status(self, status: int, count: int = 1, retry_after: float | None = None) -> None:
        """Answer the next ``count`` requests with ``status`` (and ``Retry-After``).

        Forced answers do not consume the budget; a forced 429 counts as refused.
        """
        with self._lock:
            self._forced.extend([(status, retry_after)] * count)

    def pause(self, seconds: float) -> None:
        """Refuse everything with 429 and ``Retry-After`` for ``seconds`` from now."""
        with self._lock:
            self._paused_until = max(self._paused_until, self._clock() + seconds)

    @property
    def served(self) -> int:
        with self._lock:
            return len(self._served_at)

    @property
    def refused(self) -> int:
        with self._lock:
            return self._refused

    def stats(self) -> ProviderStats:
        with self._lock:
            times = list(self._served_at)
            refused = self._refused
        most = max((bisect.bisect_left(times, t + self.window) - i for i, t in enumerate(times)), default=0)
        return ProviderStats(len(times), refused, most, tuple(times))

    # -- the limit ------------------------------------------------------------------

    def _decide(self) -> tuple[int, dict[str, str], dict[str, object]]:
        with self._lock:
            now = self._clock()
            if self._forced:
                status, retry_after = self._forced.pop(0)
                headers = self._headers(now)
                if retry_after is not None:
                    headers["Retry-After"] = str(max(1, math.ceil(retry_after)))
                if status == 429:
                    self._refused += 1
                return status, headers, {"error": f"forced {status}"}
            if now < self._paused_until:
                self._refused += 1
                headers = self._headers(now)
                headers["Retry-After"] = str(max(1, math.ceil(self._paused_until - now)))
                return 429, headers, {"error": "rate limited"}
            if self._take(now):
                self._served_at.append(now)
                return 200, self._headers(now), {"ok": True}
            self._refused += 1
            headers = self._headers(now)
            headers["Retry-After"] = str(max(1, math.ceil(self._retry_after(now))))
            return 429, headers, {"error": "rate limited"}

    def _take(self, now: float) -> bool:
        if self.mode == "fixed_window":
            index = math.floor((now - self._start) / self.window)
            if index != self._window_index:
                self._window_index, self._window_count = index, 0
            if self._window_count >= self.limit:
                return False
            self._window_count += 1
            return True
        rate = self.limit / self.window
        self._tokens = min(float(self.burst), self._tokens + (now - self._refilled_at) * rate)
        self._refilled_at = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True

    def _remaining_and_reset(self, now: float) -> tuple[int, float]:
        if self.mode == "fixed_window":
            index = math.floor((now - self._start) / self.window)
            used = self._window_count if index == self._window_index else 0
            window_end = self._start + (index + 1) * self.window
            return self.limit - used, window_end - now
        rate = self.limit / self.window
        tokens = min(float(self.burst), self._tokens + (now - self._refilled_at) * rate)
        return math.floor(tokens), (self.burst - tokens) / rate

    def _retry_after(self, now: float) -> float:
        if self.mode == "fixed_window":
            return self._remaining_and_reset(now)[1]
        rate = self.limit / self.window
        return (1 - self._tokens) / rate

    def _headers(self, now: float) -> dict[str, str]:
        remaining, reset = self._remaining_and_reset(now)
        if self.headers == "ietf":
            return {
                "RateLimit-Limit": str(self.limit),
                "RateLimit-Remaining": str(remaining),
                "RateLimit-Reset": str(math.ceil(reset)),
                "RateLimit-Policy": f"{self.limit};w={self.window:g}",
            }
        return {
            "X-RateLimit-Limit": str(self.limit),
            "X-RateLimit-Remaining": str(remaining),
            "X-RateLimit-Reset": str(math.ceil(self._wall() + reset)),
        }
