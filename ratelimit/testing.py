"""A local fake API provider that enforces a rate limit the way real ones do.

For testing pipelines (ours and yours) without a real provider: an HTTP server on
loopback that answers every request with rate-limit headers, refuses with 429 and
``Retry-After`` when its limit is exceeded, and counts what it served and refused::

    with FakeProvider(limit=100, window=60) as provider:
        run_my_pipeline(base_url=provider.url)
        assert provider.stats().refused == 0

Three ways of limiting: ``"fixed_window"`` (at most ``limit`` per window, windows
aligned to the provider's start), ``"sliding_log"`` (at most ``limit`` in ANY interval
of ``window``: the strictest reading of "N per window", under which a request that
leaves a few milliseconds after its grant can already be one too many) and
``"token_bucket"`` (``burst`` at once, refilled at ``limit / window`` per second).
Two dialects of headers: ``"x-ratelimit"`` (``X-RateLimit-Limit/Remaining/Reset``,
Reset as epoch seconds rounded up, as GitHub sends it) and ``"ietf"``
(``RateLimit-Limit/Remaining/Reset`` as delay seconds and ``RateLimit-Policy``); or
``"none"``: a hidden limit, as providers that publish nothing enforce it, with no
rate-limit header on any answer and no ``Retry-After`` on its 429s (a bare 429 is
all a client learns).
Faults on demand: :meth:`FakeProvider.force_status` and :meth:`FakeProvider.pause`;
a limit that changes during a run: :meth:`FakeProvider.set_limit`; requests in
flight: ``latency``.
"""

from __future__ import annotations

import bisect
import json
import math
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Literal

__all__ = ["FakeProvider", "ProviderStats"]

# A test that moves its clock by 0.1 ten times lands on 0.9999999999999999 of a
# second; without this slack the token due at 1.0 s (or the next window) would be
# refused, and the test would depend on float rounding.
_SLACK = 1e-9


@dataclass(frozen=True)
class ProviderStats:
    """What a :class:`FakeProvider` has seen since it started (or was reset)."""

    served: int
    refused: int
    #: The most requests served in any interval of the provider's ``window``.
    max_in_window: int
    #: Monotonic times (the provider's clock) of every served request.
    served_at: tuple[float, ...]
    #: Monotonic times of every 429 the limit itself caused (not those of a pause or
    #: :meth:`FakeProvider.force_status`, which ``refused`` counts as well).
    refused_at: tuple[float, ...] = ()


def _whole(name: str, value: object, *, least: int, most: int | None = None, meaning: str) -> int:
    # bool is an int, but `limit=True` is always a mistake.
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < least or (most is not None and value > most):
        raise ValueError(f"{name} must be {meaning}, got {value!r}")
    return value


def _seconds(name: str, value: object, *, zero_ok: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__} {value!r}")
    try:
        result = float(value)
    except OverflowError:
        result = math.inf
    if not ((result >= 0 if zero_ok else result > 0) and result < math.inf):
        raise ValueError(f"{name} must be a number of seconds {'>=' if zero_ok else '>'} 0, got {value!r}")
    return result


def _limits(limit: object, window: object, burst: object) -> tuple[int, float, int | None]:
    """The constructor's and :meth:`FakeProvider.set_limit`'s checks, in one place."""
    checked = None if burst is None else _whole("burst", burst, least=1, meaning="a whole number > 0")
    return (
        _whole("limit", limit, least=1, meaning="a whole number > 0"),
        _seconds("window", window, zero_ok=False),
        checked,
    )


def _plain(seconds: float) -> str:
    # `f"{w:g}"` would send 2592000 (30 days) as "2.592e+06", which no header parser
    # reads as a number of seconds.
    return str(int(seconds)) if seconds.is_integer() else format(Decimal(repr(seconds)), "f")


class _Server(ThreadingHTTPServer):
    # The default backlog of 5 drops connections under a burst of concurrent
    # clients, and each dropped SYN costs its client a one-second retransmit: a
    # benchmark would measure the kernel, not the limiter.
    request_queue_size = 1024

    def handle_error(self, request: socket.socket | tuple[bytes, socket.socket], client_address: object) -> None:
        # A client that timed out and hung up is its own test's business; its
        # traceback on stderr would only bury the real failure.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class FakeProvider:
    """An HTTP server on 127.0.0.1 that rate-limits like a real API.

    Every answer to any path, ``GET`` or ``POST``, carries the rate-limit headers of
    the chosen dialect and a small JSON body (``{"ok": true}`` or
    ``{"error": "rate limited"}``). A refusal is a 429 with ``Retry-After`` (whole
    seconds, rounded up, at least 1), except with ``headers="none"``.

    Args:
        limit: requests allowed per ``window``.
        window: the window, in seconds.
        mode: ``"fixed_window"`` (windows aligned to when the provider was created or
            last :meth:`reset`), ``"sliding_log"`` (a request is refused when
            ``limit`` were served in the ``window`` seconds before it, both ends
            included; its "reset" is when the oldest of them ages out) or
            ``"token_bucket"`` (refilled at ``limit / window`` per second; its
            "reset" is the time until the bucket is full again).
        burst: the bucket's capacity in ``"token_bucket"`` mode (default ``limit``).
        headers: ``"x-ratelimit"`` (Reset as epoch seconds), ``"ietf"`` (Reset as
            delay seconds, plus ``RateLimit-Policy``) or ``"none"`` (a hidden limit:
            no rate-limit header at all, and no ``Retry-After`` on a 429 of the
            limit or of a :meth:`pause`; only :meth:`force_status` with an explicit
            ``retry_after`` still sends one).
        port: the port to listen on (0: any free one).
        latency: seconds each answer is held back after the decision, to model
            requests in flight (the decision's time is the one enforced and
            recorded); slept for real, whatever ``clock`` is.
        clock: monotonic seconds, which the limit is enforced in.
        wall_clock: epoch seconds, for ``X-RateLimit-Reset``.

    Raises:
        TypeError: an argument of the wrong type.
        ValueError: an argument out of range.
    """

    def __init__(
        self,
        limit: int,
        window: float,
        *,
        mode: Literal["fixed_window", "sliding_log", "token_bucket"] = "fixed_window",
        burst: int | None = None,
        headers: Literal["x-ratelimit", "ietf", "none"] = "x-ratelimit",
        port: int = 0,
        latency: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.limit, self.window, burst = _limits(limit, window, burst)
        if mode not in ("fixed_window", "sliding_log", "token_bucket"):
            raise ValueError(f"mode must be 'fixed_window', 'sliding_log' or 'token_bucket', got {mode!r}")
        if headers not in ("x-ratelimit", "ietf", "none"):
            raise ValueError(f"headers must be 'x-ratelimit', 'ietf' or 'none', got {headers!r}")
        _whole("port", port, least=0, most=65535, meaning="from 0 to 65535")
        self.latency = _seconds("latency", latency, zero_ok=True)
        for name, function in (("clock", clock), ("wall_clock", wall_clock)):
            if not callable(function):
                raise TypeError(f"{name} must be a function returning seconds, got {function!r}")
        self.mode = mode
        # A burst given stays when set_limit() changes the limit; one left out follows it.
        self._burst_given = burst
        self.burst = limit if burst is None else burst
        self.headers = headers
        self._clock = clock
        self._wall = wall_clock
        self._lock = threading.Lock()
        # Apart from _lock, so that a slow shutdown never holds up request handling.
        self._lifecycle = threading.Lock()
        self._requested_port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.reset()

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> FakeProvider:
        """Start serving, in a daemon thread; does nothing if already serving.

        Returns:
            The provider itself, so that ``provider = FakeProvider(...).start()`` works.

        Raises:
            OSError: the port could not be bound.
        """
        with self._lifecycle:
            if self._server is not None:
                return self
            provider = self

            class Handler(BaseHTTPRequestHandler):
                def _answer(self) -> None:
                    self._drain()
                    status, headers, body = provider._decide()
                    if provider.latency > 0:
                        time.sleep(provider.latency)
                    payload = json.dumps(body).encode()
                    self.send_response(status)
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)

                def _drain(self) -> None:
                    # Closing a socket with an unread body makes the kernel reset the
                    # connection, and the client loses the answer it was about to read.
                    try:
                        left = int(self.headers.get("Content-Length") or 0)
                    except ValueError:
                        left = 0
                    while left > 0:
                        chunk = self.rfile.read(min(left, 1 << 16))
                        if not chunk:
                            break
                        left -= len(chunk)

                do_GET = do_POST = _answer

                def log_message(self, format: str, *args: object) -> None:
                    pass  # a test run is no place for an access log

            self._server = _Server(("127.0.0.1", self._requested_port), Handler)
            # shutdown() waits for the loop to look at its flag, once per poll: the
            # default half second would make every stop() in a test suite that slow.
            self._thread = threading.Thread(
                target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-provider", daemon=True
            )
            self._thread.start()
            return self

    def stop(self) -> None:
        """Stop serving and free the port; does nothing if not serving."""
        with self._lifecycle:
            server, self._server = self._server, None
            thread, self._thread = self._thread, None
            if server is None:
                return
            server.shutdown()
            server.server_close()
            if thread is not None:
                thread.join(timeout=5)

    def __enter__(self) -> FakeProvider:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The port served on.

        Raises:
            RuntimeError: the provider is not running.
        """
        server = self._server
        if server is None:
            raise RuntimeError("the provider is not running: call start() first")
        return int(server.server_address[1])

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT/``; any path below it is answered the same way."""
        return f"http://127.0.0.1:{self.port}/"

    # -- state ------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget everything served, refused, forced and paused, and start the limit afresh.

        The limit itself stays as constructed or last :meth:`set_limit`.
        """
        with self._lock:
            self._start = self._clock()
            self._window_index = 0
            self._window_count = 0
            self._tokens = float(self.burst)
            self._refilled_at = self._start
            self._served_at: list[float] = []
            self._refused_at: list[float] = []
            self._refused = 0
            self._forced: deque[tuple[int, float | None]] = deque()
            self._paused_until = -math.inf

    def set_limit(self, limit: int, window: float | None = None, *, burst: int | None = None) -> None:
        """Enforce a new limit from the next request on, as a provider may during a run.

        Nothing served so far is forgotten: a fixed window keeps its count (and its
        start; with a new ``window`` it ends that long after its start), a sliding
        log its log, and a token bucket its tokens, refilled at the old rate up to
        now and then clamped to the new ``burst``, so that the change is smooth.
        Safe to call from any thread while serving.

        Args:
            limit: requests allowed per ``window`` from now on.
            window: the new window, in seconds; ``None``: unchanged.
            burst: the bucket's new capacity in ``"token_bucket"`` mode; ``None``:
                the burst given to the constructor (or the last call) if any,
                otherwise the new ``limit``, as the constructor's default.

        Raises:
            TypeError: an argument of the wrong type.
            ValueError: an argument out of range.
        """
        limit, new_window, burst = _limits(limit, self.window if window is None else window, burst)
        with self._lock:
            now = self._clock()
            if self.mode == "token_bucket":
                self._refill(now)
            elif self.mode == "fixed_window" and new_window != self.window:
                # The running window keeps its start and count; windows after it
                # follow the new length.
                index = self._index(now)
                if index != self._window_index:
                    self._window_index, self._window_count = index, 0
                self._start += index * self.window
                self._window_index = 0
            if burst is not None:
                self._burst_given = burst
            self.limit, self.window = limit, new_window
            self.burst = limit if self._burst_given is None else self._burst_given
            self._tokens = min(self._tokens, float(self.burst))

    def force_status(self, status: int, count: int = 1, retry_after: float | None = None) -> None:
        """Answer the next ``count`` requests with ``status``, before any other rule.

        Forced answers do not consume the budget; a forced 429 counts as refused,
        other forced statuses count as neither served nor refused.

        Args:
            status: the HTTP status, from 200 to 599 (e.g. 503 or 429).
            count: how many of the next requests get it.
            retry_after: seconds for a ``Retry-After`` header (rounded up, at least 1);
                ``None``: no such header.

        Raises:
            TypeError: an argument of the wrong type.
            ValueError: an argument out of range.
        """
        _whole("status", status, least=200, most=599, meaning="an HTTP status from 200 to 599")
        _whole("count", count, least=1, meaning="a whole number > 0")
        if retry_after is not None:
            _seconds("retry_after", retry_after, zero_ok=True)
        with self._lock:
            self._forced.extend([(status, retry_after)] * count)

    def pause(self, seconds: float) -> None:
        """Refuse everything with 429 and ``Retry-After`` for ``seconds`` from now.

        With ``headers="none"`` the 429s carry no ``Retry-After``: the limit is hidden.

        The rate-limit headers go on telling the budget as it stands, so a paused
        answer may say ``Remaining: 5``: real providers do that too (GitHub's
        secondary limits), and a client must obey ``Retry-After`` regardless.

        Args:
            seconds: how long, on the provider's clock; a pause never shortens an
                earlier, longer one.

        Raises:
            TypeError: ``seconds`` is not a number.
            ValueError: ``seconds`` is negative or not finite.
        """
        seconds = _seconds("seconds", seconds, zero_ok=True)
        with self._lock:
            self._paused_until = max(self._paused_until, self._clock() + seconds)

    @property
    def served(self) -> int:
        """Requests answered 200 so far."""
        with self._lock:
            return len(self._served_at)

    @property
    def refused(self) -> int:
        """Requests answered 429 so far (over the limit, paused or forced)."""
        with self._lock:
            return self._refused

    def stats(self) -> ProviderStats:
        """A consistent snapshot of the counters."""
        with self._lock:
            times = list(self._served_at)
            refused_at = tuple(self._refused_at)
            refused = self._refused
            window = self.window
        most = max((bisect.bisect_left(times, t + window) - i for i, t in enumerate(times)), default=0)
        return ProviderStats(len(times), refused, most, tuple(times), refused_at)

    # -- the limit ------------------------------------------------------------------

    def _decide(self) -> tuple[int, dict[str, str], dict[str, object]]:
        with self._lock:
            now = self._clock()
            if self._forced:
                status, retry_after = self._forced.popleft()
                headers = self._headers(now)
                if retry_after is not None:
                    headers["Retry-After"] = str(max(1, math.ceil(retry_after)))
                if status == 429:
                    self._refused += 1
                return status, headers, {"ok": True} if status < 400 else {"error": f"forced {status}"}
            if now < self._paused_until:
                self._refused += 1
                return 429, self._refusal(now, self._paused_until - now), {"error": "rate limited"}
            if self._take(now):
                self._served_at.append(now)
                return 200, self._headers(now), {"ok": True}
            self._refused += 1
            self._refused_at.append(now)
            return 429, self._refusal(now, self._retry_after(now)), {"error": "rate limited"}

    def _refusal(self, now: float, retry_after: float) -> dict[str, str]:
        headers = self._headers(now)
        if self.headers != "none":
            headers["Retry-After"] = str(max(1, math.ceil(retry_after)))
        return headers

    def _index(self, now: float) -> int:
        return math.floor((now - self._start) / self.window + _SLACK)

    def _in_log(self, now: float) -> int:
        """Requests served in ``[now - window, now]``: the sliding log's count."""
        return len(self._served_at) - bisect.bisect_left(self._served_at, now - self.window - _SLACK)

    def _take(self, now: float) -> bool:
        if self.mode == "sliding_log":
            return self._in_log(now) < self.limit
        if self.mode == "fixed_window":
            index = self._index(now)
            if index != self._window_index:
                self._window_index, self._window_count = index, 0
            if self._window_count >= self.limit:
                return False
            self._window_count += 1
            return True
        self._refill(now)
        if self._tokens < 1 - _SLACK:
            return False
        self._tokens = max(0.0, self._tokens - 1)
        return True

    def _refill(self, now: float) -> None:
        rate = self.limit / self.window
        self._tokens = min(float(self.burst), self._tokens + (now - self._refilled_at) * rate)
        self._refilled_at = now

    def _remaining_and_reset(self, now: float) -> tuple[int, float]:
        if self.mode == "sliding_log":
            used = self._in_log(now)
            if used == 0:
                return self.limit, 0.0
            # Room again once the oldest request that fills the log ages out.
            oldest = self._served_at[len(self._served_at) - min(used, self.limit)]
            return max(0, self.limit - used), max(0.0, oldest + self.window - now)
        if self.mode == "fixed_window":
            index = self._index(now)
            used = self._window_count if index == self._window_index else 0
            window_end = self._start + (index + 1) * self.window
            return self.limit - used, max(0.0, window_end - now)
        rate = self.limit / self.window
        tokens = min(float(self.burst), self._tokens + (now - self._refilled_at) * rate)
        return math.floor(tokens + _SLACK), max(0.0, (self.burst - tokens) / rate - _SLACK)

    def _retry_after(self, now: float) -> float:
        if self.mode in ("fixed_window", "sliding_log"):
            return self._remaining_and_reset(now)[1]
        rate = self.limit / self.window
        return (1 - self._tokens) / rate

    def _headers(self, now: float) -> dict[str, str]:
        if self.headers == "none":
            return {}
        remaining, reset = self._remaining_and_reset(now)
        if self.headers == "ietf":
            return {
                "RateLimit-Limit": str(self.limit),
                "RateLimit-Remaining": str(remaining),
                "RateLimit-Reset": str(math.ceil(reset)),
                "RateLimit-Policy": f"{self.limit};w={_plain(self.window)}",
            }
        return {
            "X-RateLimit-Limit": str(self.limit),
            "X-RateLimit-Remaining": str(remaining),
            "X-RateLimit-Reset": str(math.ceil(self._wall() + reset)),
        }
