"""Limiting incoming requests: the decision and the response every server-side glue shares.

``ratelimit.asgi``, ``ratelimit.wsgi`` and ``ratelimit.django`` each turn their request
into a :class:`Request`, ask one :class:`Gate` for a :class:`Verdict`, and write the
verdict in their own terms; nothing here knows a framework.

A decision is one call to the limiter of the request's key
(``limiter.for_key(key).acquire(cost, timeout=wait)``): one store call, which reserves
the request's turn in arrival order or says how long it would have needed. What the
responses say follows the IETF httpapi draft's structured fields::

    RateLimit-Policy: "default";q=100;w=60
    RateLimit: "default";r=0;t=2

``parse_rate_limit_headers`` reads them back: the policy's quota ``q`` per window ``w``
seconds, ``r`` what remains and ``t`` the whole seconds until more of it comes back.
The store tells the level its decision left in the same call (``store.Level``):

- ``r``: the whole tokens that could go at once as the request goes, one after another
  (the tightest limit's, for a composite; one at most for a leaky bucket's queue);
  none after a request that had to wait its turn, and none on a refusal.
- ``t``: the seconds, rounded up, from the response until one more than ``r`` could go:
  the next token back, not the whole budget, so that ``r`` before ``t`` is all that
  may go and a client that pauses on ``r=0`` waits for the next token only. A budget
  that is full (nothing more to come) says ``t=0``. On a refusal, the request's own
  wait (``Retry-After``).

Where the store cannot tell the level (a budget with priorities, a decision on the local
fallback or without the store) ``r`` is 0 and ``t`` one step of the policy: a lower
bound, never more than there is. A decision that asks for the level is one store call
of its own, never coalesced into another's round. A client that reads the policy
(``ratelimit.httpx`` does) paces itself at ``q`` per ``w`` from it.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from .._errors import AcquireTimeout, BackendUnavailable
from .._limiting.front import acquire_level, acquire_level_async
from .._stores.store import Level
from .._validate import shown

__all__ = ["Gate", "Headers", "Request", "Verdict", "bounded_key", "header_pairs"]

#: The policy's name in the fields: one limit per middleware.
POLICY = "default"
#: The longest key given to ``for_key`` as it is; a longer one (or one with characters
#: a log line or a store name should not hold) is replaced by a digest of itself.
MAX_KEY = 100
#: Header pairs a request view keeps: servers bound a request's header block already
#: (h11 at 16 KiB, gunicorn at 100 fields), so more than this is not a real request.
MAX_HEADERS = 256
#: What a 503 asks the client to wait when the store could not decide, in seconds.
UNAVAILABLE_RETRY = 1
#: Granted verdicts kept by their ``(r, t)``: past this many, all are made again.
_VERDICTS_KEPT = 1024


class Headers(Mapping[str, str]):
    """A request's headers by case-insensitive name; a repeated header's values joined
    with ``", "`` (as HTTP allows for list-valued fields such as ``X-Forwarded-For``).

    The pairs are read when a name is first looked up, not before: a key that never
    reads a header (the peer's address) costs the request nothing here.
    """

    __slots__ = ("_by_name", "_pairs")

    def __init__(self, pairs: Iterable[tuple[str, str]] = ()) -> None:
        self._pairs: Iterable[tuple[str, str]] | None = pairs
        self._by_name: dict[str, str] = {}

    @property
    def _names(self) -> dict[str, str]:
        pairs = self._pairs
        if pairs is not None:
            self._pairs = None
            by_name = self._by_name
            for count, (name, value) in enumerate(pairs):
                if count >= MAX_HEADERS:
                    break
                lowered = name.lower()
                earlier = by_name.get(lowered)
                by_name[lowered] = value if earlier is None else f"{earlier}, {value}"
        return self._by_name

    def __getitem__(self, name: str) -> str:
        return self._names[name.lower()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._names

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        return f"Headers({self._names!r})"


@dataclass(frozen=True, slots=True)
class Request:
    """An incoming request as the key, cost and exempt functions see it, whatever the
    framework.

    Attributes:
        method: the HTTP method, upper case (``"GET"`` for a websocket handshake).
        path: the path, without the query string.
        headers: the headers, by case-insensitive name (:class:`Headers`).
        client: the peer's address as the server saw it, or ``None`` (a Unix socket).
    """

    method: str
    path: str
    headers: Mapping[str, str]
    client: str | None


@dataclass(frozen=True, slots=True)
class Verdict:
    """What to do with a request: pass it on (``status`` is ``None``) with ``headers``
    added to its response, or answer ``status`` with ``headers`` and ``body`` at once."""

    status: int | None
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    #: ``headers`` as ASGI sends them (lower-cased bytes), made once with the verdict.
    raw: tuple[tuple[bytes, bytes], ...] = field(default=(), compare=False, repr=False)

    @classmethod
    def of(cls, status: int | None, headers: Iterable[tuple[str, str]], body: bytes = b"") -> Verdict:
        fields = tuple(headers)
        raw = tuple((name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in fields)
        return cls(status, fields, body, raw)

    @property
    def passes(self) -> bool:
        return self.status is None

    def fields(self) -> list[tuple[str, str]]:
        """The headers but those of the body, for a framework's own response object,
        which frames its body itself."""
        return [(name, value) for name, value in self.headers if name.lower() not in _BODY_FIELDS]


_PASS = Verdict(None)
_BODY_FIELDS = frozenset({"content-type", "content-length"})
_REASONS = {429: "Too Many Requests", 503: "Service Unavailable"}


def reason(status: int) -> str:
    """The reason phrase of a status a gate answers."""
    return _REASONS[status]


def bounded_key(key: str) -> str:
    """``key`` as given to ``for_key``: itself when short and printable, else a digest.

    A key comes from the client (an address, a header), so it may be 10 kB long or
    hold control characters; its digest has a fixed length and one key's requests still
    share one budget. A digest starts with ``#`` and has 32 hexadecimal digits.
    """
    if 0 < len(key) <= MAX_KEY and key.isprintable():
        return key
    data = key.encode("utf-8", "surrogatepass")
    return "#" + hashlib.blake2b(data, digest_size=16).hexdigest()


def header_pairs(verdict: Verdict) -> list[tuple[bytes, bytes]]:
    """A verdict's headers as ASGI wants them."""
    return list(verdict.raw)


def _seconds(value: float) -> int:
    """Whole seconds, rounded up, at least one."""
    return max(1, math.ceil(value - 1e-9))


def _policy(limiter: object) -> tuple[int, int] | None:
    """The limiter's quota ``q`` per ``w`` whole seconds, or ``None`` where it has none
    to announce (a kind with no single rate, a limiter that never limits)."""
    rate = getattr(limiter, "sustained_rate", None)
    if not isinstance(rate, (int, float)) or not 0 < rate < math.inf:
        return None
    window = getattr(limiter, "window_seconds", None)
    if isinstance(window, (int, float)):
        quota = float(getattr(limiter, "limit", 0.0))
        whole = max(1, math.ceil(window))
    else:
        # A bucket: the window in which it refills whole, in seconds (at least one).
        burst = float(getattr(limiter, "capacity", rate))
        whole = max(1, math.ceil(burst / rate - 1e-9))
        quota = rate * whole
    count = math.floor(quota + 1e-9)
    return (count, whole) if count >= 1 else None


class Gate:
    """The decision and the response of one middleware (or one route's limit).

    Args:
        owner: the class or function configured, for error messages.
        limiter: any limiter with ``for_key``.
        key: ``request -> str | None``; ``None`` leaves the request unlimited.
        cost: the tokens a request takes: an int, or ``request -> int``.
        wait: the most seconds a request may be held for its turn before it is
            refused (a ``timedelta`` too); 0 refuses at once.
        exempt: ``request -> bool``; an exempt request is not limited.
        headers: whether granted responses carry ``RateLimit`` and ``RateLimit-Policy``.
    """

    __slots__ = ("_cost", "_exempt", "_granted", "_headers", "_key", "_leveled", "_limiter", "_policy", "_wait")

    def __init__(
        self,
        owner: str,
        limiter: Any,
        key: Callable[[Request], str | None],
        cost: int | float | Callable[[Request], int | float],
        wait: float | timedelta,
        exempt: Callable[[Request], bool] | None,
        headers: bool,
    ) -> None:
        if not callable(getattr(limiter, "for_key", None)):
            raise TypeError(f"{owner}: limiter must be a ratelimit limiter (one with for_key), got {shown(limiter)}")
        if not callable(key):
            raise TypeError(f"{owner}: key must be a function of the request, got {shown(key)}")
        if not callable(cost) and not (isinstance(cost, (int, float)) and not isinstance(cost, bool) and cost > 0):
            raise ValueError(f"{owner}: cost must be a number > 0 or a function of the request, got {shown(cost)}")
        if isinstance(wait, timedelta):
            wait = wait.total_seconds()
        if not (isinstance(wait, (int, float)) and not isinstance(wait, bool) and 0 <= wait < math.inf):
            raise ValueError(f"{owner}: wait must be seconds >= 0, got {shown(wait)}")
        if exempt is not None and not callable(exempt):
            raise TypeError(f"{owner}: exempt must be a function of the request or None, got {shown(exempt)}")
        if not isinstance(headers, bool):
            raise TypeError(f"{owner}: headers must be True or False, got {shown(headers)}")
        self._limiter = limiter
        self._key = key
        self._cost = cost
        self._wait = float(wait)
        self._exempt = exempt
        self._policy = _policy(limiter)
        # What every grant says is the same (the policy is the limiter's when the gate
        # is made): one verdict, made once.
        self._granted = Verdict.of(None, self._fields(0, self._more_in())) if headers else _PASS
        self._headers = headers
        # A granted verdict per level said, made once each (the fields are the same).
        self._leveled: dict[tuple[int, int], Verdict] = {}

    # -- the decision: which budget, how much, then one call to it ----------------------

    def _place(self, request: Request) -> tuple[Any, float] | None:
        """The key's limiter and the request's cost; ``None``: not limited."""
        if self._exempt is not None and self._exempt(request):
            return None
        key = self._key(request)
        if key is None:
            return None
        if not isinstance(key, str):
            raise TypeError(f"the key function must return a str or None, got {shown(key)}")
        cost = self._cost(request) if callable(self._cost) else self._cost
        if isinstance(cost, bool) or not isinstance(cost, (int, float)) or not cost > 0:
            raise ValueError(f"the cost function must return a number > 0, got {shown(cost)}")
        return self._limiter.for_key(bounded_key(key)), cost

    def decide(self, request: Request) -> Verdict:
        """The verdict on ``request``, holding the calling thread for its turn."""
        place = self._place(request)
        if place is None:
            return _PASS
        limiter, cost = place
        try:
            waited, level = acquire_level(limiter, cost, self._wait)
        except (AcquireTimeout, BackendUnavailable, ValueError) as exc:
            return self._not_granted(exc)
        return self.granted(waited, level)

    async def decide_async(self, request: Request) -> Verdict:
        """:meth:`decide` for asyncio: the task is held for its turn, not the thread."""
        place = self._place(request)
        if place is None:
            return _PASS
        limiter, cost = place
        try:
            waited, level = await acquire_level_async(limiter, cost, self._wait)
        except (AcquireTimeout, BackendUnavailable, ValueError) as exc:
            return self._not_granted(exc)
        return self.granted(waited, level)

    def _not_granted(self, exc: AcquireTimeout | BackendUnavailable | ValueError) -> Verdict:
        """The verdict of an acquire that raised, for both paths."""
        if isinstance(exc, AcquireTimeout):
            return self.refused(exc.retry_after)
        if isinstance(exc, BackendUnavailable):
            return self.unavailable()
        # A cost the limit can never grant (above its capacity): never served.
        return self.refused(math.inf)

    # -- the responses --------------------------------------------------------------------

    def _more_in(self) -> int:
        """Whole seconds until one more request's worth comes back at the policy's pace."""
        if self._policy is None:
            return 1
        quota, window = self._policy
        return _seconds(window / quota)

    def _fields(self, remaining: int, more_in: int) -> list[tuple[str, str]]:
        fields = []
        if self._policy is not None:
            quota, window = self._policy
            fields.append(("RateLimit-Policy", f'"{POLICY}";q={quota};w={window}'))
        fields.append(("RateLimit", f'"{POLICY}";r={remaining};t={more_in}'))
        return fields

    def granted(self, waited: float, level: Level | None = None) -> Verdict:
        """A granted request's verdict: pass, with the fields unless ``headers=False``.

        ``level``: what the decision left, measured when it was made (``store.Level``),
        so ``t`` counts from the request's going, ``waited`` seconds later; ``None``:
        unknown, which claims nothing remains."""
        if level is None or not self._headers:
            return self._granted
        left, more_in = level
        # One more never comes (an allowance spent): one step of the policy, as a
        # refusal that can never be granted asks.
        more = math.ceil(max(0.0, more_in - waited) - 1e-9) if more_in < math.inf else self._more_in()
        said = (int(left), more)
        verdict = self._leveled.get(said)
        if verdict is None:
            if len(self._leveled) >= _VERDICTS_KEPT:
                self._leveled.clear()
            verdict = self._leveled[said] = Verdict.of(None, self._fields(*said))
        return verdict

    def refused(self, needed: float) -> Verdict:
        """429: ``needed`` seconds until the request could have gone (``inf``: never at
        this cost; the client is asked to wait one step of the policy)."""
        seconds = _seconds(needed) if needed < math.inf else self._more_in()
        fields = [("Retry-After", str(seconds)), *self._fields(0, seconds)]
        return _answer(429, fields)

    def unavailable(self) -> Verdict:
        """503: the store could not decide and its backend says ``on_unavailable="raise"``."""
        return _answer(503, [("Retry-After", str(UNAVAILABLE_RETRY))])


def _answer(status: int, fields: list[tuple[str, str]]) -> Verdict:
    body = f"{reason(status)}\n".encode()
    fields += [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))]
    return Verdict.of(status, fields, body)
