"""Reading a Redis Sentinel URL: which sentinels to ask, for which master, with what.

redis-py finds and follows a master through Sentinel (``redis.sentinel.Sentinel``
and its ``master_for``) but has no URL for it. This is the form
:meth:`RedisBackend.from_url <ratelimit._stores.redis.backend.RedisBackend.from_url>` reads,
the ``redis+sentinel`` scheme other clients use too::

    redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/service[/db][?option=value&...]

- ``host[:port]``: one or more sentinels, comma-separated; the port defaults to 26379.
  An IPv6 address goes in brackets (``[::1]:26379``).
- ``service``: the name the sentinels monitor the master under (``mymaster``).
- ``db``: the database number on the master, 0 by default.
- ``user`` and ``password``: the master's (and its replicas') credentials, as in a
  ``redis://`` URL, percent-decoded. Sentinels are asked without credentials unless
  the options give theirs.
- options: ``sentinel_username`` and ``sentinel_password`` (the sentinels' own
  credentials, if they require any); ``socket_timeout`` and
  ``socket_connect_timeout`` in seconds (for the master and the sentinels alike).

Any other option, a missing service, a second path segment after the db, a port or
db that is not a number: a ``ValueError`` naming the part, with the URL shown with
its passwords as ``***``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import unquote

from ..._redact import redact_url

__all__ = ["DEFAULT_SENTINEL_PORT", "SCHEME", "SentinelURL", "is_sentinel_url", "parse_sentinel_url"]

#: The scheme that asks for Sentinel.
SCHEME = "redis+sentinel"
#: The port a sentinel listens on when the URL names none.
DEFAULT_SENTINEL_PORT = 26379

_TIMEOUTS = ("socket_timeout", "socket_connect_timeout")
_SENTINEL_CREDENTIALS = ("sentinel_username", "sentinel_password")
_OPTIONS = _TIMEOUTS + _SENTINEL_CREDENTIALS


@dataclass(frozen=True)
class SentinelURL:
    """What a ``redis+sentinel://`` URL says."""

    #: ``(host, port)`` of each sentinel, in the URL's order.
    sentinels: tuple[tuple[str, int], ...]
    #: The name the sentinels know the master by.
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    sentinel_username: str | None = None
    sentinel_password: str | None = field(default=None, repr=False)
    #: Options for the master's client and the sentinels' (``socket_timeout``, ...).
    timeouts: dict[str, float] = field(default_factory=dict)

    def master_settings(self) -> dict[str, object]:
        """Keyword arguments for the master's connections that the URL fixes."""
        settings: dict[str, object] = {"db": self.db}
        if self.username is not None:
            settings["username"] = self.username
        if self.password is not None:
            settings["password"] = self.password
        return settings

    def sentinel_settings(self) -> dict[str, object]:
        """Keyword arguments for the connections to the sentinels that the URL fixes."""
        settings: dict[str, object] = {}
        if self.sentinel_username is not None:
            settings["username"] = self.sentinel_username
        if self.sentinel_password is not None:
            settings["password"] = self.sentinel_password
        return settings


def is_sentinel_url(url: str) -> bool:
    """Whether ``url`` asks for Sentinel (its scheme, in any case)."""
    return url.split("://", 1)[0].lower() == SCHEME if "://" in url else False


def _bad(url: str, what: str) -> ValueError:
    return ValueError(f"bad Redis Sentinel URL {redact_url(url)}: {what}")


def _sentinel(url: str, text: str) -> tuple[str, int]:
    if text.startswith("["):  # [IPv6]:port
        host, bracket, after = text[1:].partition("]")
        if not bracket or not host or (after and not after.startswith(":")):
            raise _bad(url, f"sentinel address {text!r} is not [ipv6]:port")
        port_text = after[1:] if after else ""
    else:
        host, _, port_text = text.partition(":")
        if not host or ":" in port_text:
            raise _bad(url, f"sentinel address {text!r} is not host:port")
    if not port_text:
        return host, DEFAULT_SENTINEL_PORT
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise _bad(url, f"port {port_text!r} of sentinel {host!r} is not a number from 1 to 65535")
    return host, int(port_text)


def _timeout(url: str, name: str, text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise _bad(url, f"option {name}={text!r} is not a positive number of seconds")
    return seconds


def parse_sentinel_url(url: str) -> SentinelURL:
    """The parts of a ``redis+sentinel://`` URL (see the module's docstring)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() != SCHEME:
        raise _bad(url, f"the scheme must be {SCHEME}://")
    if "#" in rest:
        raise _bad(url, "a fragment (#...) means nothing here")
    before_query, _, query = rest.partition("?")
    authority, slash, path = before_query.partition("/")
    userinfo, at, hosts = authority.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    if not hosts:
        raise _bad(url, "it names no sentinel (host:port before the service name)")
    sentinels = tuple(_sentinel(url, text) for text in hosts.split(","))

    segments = path.split("/") if slash else []
    if not segments or not segments[0]:
        raise _bad(url, "the service name (/mymaster after the sentinels) is missing")
    if len(segments) > 2 or (len(segments) == 2 and not segments[1]):
        raise _bad(url, f"the path {'/' + path!r} is not /service or /service/db")
    service = unquote(segments[0])
    db = 0
    if len(segments) == 2:
        if not segments[1].isdigit():
            raise _bad(url, f"the db {segments[1]!r} is not a number")
        db = int(segments[1])

    timeouts: dict[str, float] = {}
    credentials: dict[str, str] = {}
    for pair in query.split("&") if query else ():
        name, equals, value = pair.partition("=")
        name = unquote(name)
        if name not in _OPTIONS:
            raise _bad(url, f"unknown option {name!r} (known: {', '.join(_OPTIONS)})")
        if not equals:
            raise _bad(url, f"option {name!r} has no value")
        if name in timeouts or name in credentials:
            raise _bad(url, f"option {name!r} is given twice")
        if name in _TIMEOUTS:
            timeouts[name] = _timeout(url, name, unquote(value))
        else:
            credentials[name] = unquote(value)
    return SentinelURL(
        sentinels=sentinels,
        service=service,
        db=db,
        username=username,
        password=password,
        sentinel_username=credentials.get("sentinel_username"),
        sentinel_password=credentials.get("sentinel_password"),
        timeouts=timeouts,
    )
