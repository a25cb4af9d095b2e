"""Reading a call's outcome: its HTTP status, its headers, and whether to retry it.

A call either returns (an HTTP response, or anything else) or raises. Responses are
recognised by shape, not by class, so httpx, requests, aiohttp and urllib3 responses
all work without this module importing any of them: an int ``status_code`` (or
``status``) attribute, and ``headers``. An exception that carries a ``response``
(httpx's ``HTTPStatusError``, requests' ``HTTPError``) is judged by that response.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from typing import Any, TypeAlias

from .._errors import RateLimitError
from .._events import Verdict

__all__ = ["TRANSIENT_STATUSES", "Classifier", "classify", "headers_of", "status_of"]

#: Statuses worth another try: the request may well succeed later.
TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})

#: Client libraries' "could not reach it / no answer in time" exceptions, by qualified
#: name, so that none of them has to be installed for the check.
TRANSIENT_ERRORS = frozenset(
    {
        "httpx.TimeoutException",
        "httpx.NetworkError",
        "httpx.RemoteProtocolError",
        "requests.exceptions.ConnectionError",
        "requests.exceptions.Timeout",
        "urllib3.exceptions.TimeoutError",
        "urllib3.exceptions.ProtocolError",
        "urllib3.exceptions.NewConnectionError",
        "aiohttp.client_exceptions.ClientConnectionError",
        "aiohttp.client_exceptions.ServerTimeoutError",
    }
)

#: ``classify(result, error) -> "ok" | "transient" | "permanent"``: exactly one of
#: ``result`` (what the call returned) and ``error`` (what it raised) is meaningful.
Classifier: TypeAlias = Callable[[Any, "BaseException | None"], Verdict]


def status_of(result: object) -> int | None:
    """The HTTP status of a response-like ``result``; ``None`` for anything else."""
    for attribute in ("status_code", "status"):
        status = getattr(result, attribute, None)
        if isinstance(status, int) and not isinstance(status, bool):
            return status
    return None


def response_of(result: object, error: BaseException | None) -> object:
    """The response to read: the result, or the one an exception carries."""
    if error is not None:
        return getattr(error, "response", None)
    return result


def headers_of(response: object) -> Any:
    return getattr(response, "headers", None) if response is not None else None


def _bad_certificate(error: BaseException) -> bool:
    """Is a certificate that failed to verify behind ``error``? Clients wrap it in their
    own connection errors (requests' ``SSLError`` is a ``ConnectionError``; httpx's
    ``ConnectError`` chains it), and retrying it only delays the same answer."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [error]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, ssl.SSLCertVerificationError):
            return True
        # urllib3 keeps the cause in .reason, requests in args[0].
        todo += [current.__cause__, current.__context__, getattr(current, "reason", None)]
        todo += [arg for arg in current.args if isinstance(arg, BaseException)]
    return False


def _transient_error(error: BaseException) -> bool:
    if isinstance(error, RateLimitError):
        # Our own decisions (an acquire timing out inside the call, say) are not a
        # flaky network; retrying them would only hide the cause.
        return False
    if _bad_certificate(error):
        return False
    if isinstance(error, (ConnectionError, TimeoutError)):
        return True
    return any(f"{cls.__module__}.{cls.__qualname__}" in TRANSIENT_ERRORS for cls in type(error).__mro__)


def classify(result: Any, error: BaseException | None) -> Verdict:
    """The default classifier.

    Transient: statuses 408, 429, 500, 502, 503 and 504, and connection and timeout
    errors (the built-in ``ConnectionError`` and ``TimeoutError``, and httpx's,
    requests', urllib3's and aiohttp's), except a certificate that failed to verify.
    Permanent: every other error and every other status of 400 or more. Anything else
    that returned, ``None`` included, is ``"ok"``.
    """
    if error is not None:
        status = status_of(getattr(error, "response", None))
        if status is not None:
            return "transient" if status in TRANSIENT_STATUSES else "permanent"
        return "transient" if _transient_error(error) else "permanent"
    status = status_of(result)
    if status is None or status < 400:
        return "ok"
    return "transient" if status in TRANSIENT_STATUSES else "permanent"
