"""The redis-py clients of a :class:`~.redis.RedisBackend`: those
:meth:`RedisBackend.from_url <ratelimit._stores.redis.backend.RedisBackend.from_url>` makes
(a plain, Cluster or Sentinel URL; timeouts that suit a limiter; never a retried
script call), and the care a client's pool needs after an interrupted call.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.retry
import redis.asyncio.sentinel
import redis.cluster
import redis.sentinel
from redis.backoff import NoBackoff
from redis.retry import Retry

from ..._redact import redact_url, url_secrets
from .sentinel import SentinelURL, is_sentinel_url, parse_sentinel_url

#: Defaults for clients made by :meth:`RedisBackend.from_url`: a dead server costs an
#: acquire at most about half a second, and a script call is never retried (it is not
#: idempotent: a call that timed out after reaching the server may have been recorded).
DEFAULT_SOCKET_TIMEOUT = 0.5
DEFAULT_CONNECT_TIMEOUT = 0.5

#: The environment variable that names the Redis the limiters share: read by
#: :meth:`RedisBackend.from_env` and the default of the command line's ``--redis``, so
#: that a password need not travel on a command line (``ps``, shell history).
REDIS_URL_ENV = "RATELIMIT_REDIS_URL"


def url_from_env(variable: str = REDIS_URL_ENV) -> str | None:
    """The URL in environment variable ``variable``, or ``None`` if it is unset or blank."""
    url = os.environ.get(variable, "").strip()
    return url or None


#: The schemes of a Redis URL, as an error lists them.
SCHEMES = "redis://, rediss://, unix:// or redis+sentinel://"
_REDIS_SCHEMES = ("redis", "rediss", "unix")
_DIGITS = re.compile(r"[0-9]+")


#: The query options every Redis URL may name beside its connection's own.
_URL_OPTIONS = frozenset(redis.connection.URL_QUERY_ARGUMENT_PARSERS)
_TIMEOUTS = ("socket_timeout", "socket_connect_timeout", "timeout")


def _query_options(scheme: str) -> frozenset[str]:
    """The names a ``scheme://`` URL's query may give: redis-py passes a name it does not
    parse itself to the connection's constructor, which refuses an unknown one only when
    the first connection opens."""
    connection: type = {
        "rediss": redis.connection.SSLConnection,
        "unix": redis.connection.UnixDomainSocketConnection,
    }.get(scheme, redis.connection.Connection)
    names = set(_URL_OPTIONS)
    for cls in connection.__mro__:
        if "__init__" in vars(cls):
            parameters = inspect.signature(vars(cls)["__init__"]).parameters.values()
            names.update(p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
    names.discard("self")
    return frozenset(names)


def check_options(url: str, options: dict[str, Any], *, names: bool) -> None:
    """``ValueError`` (``TypeError`` for a wrong type) for keyword options of
    :meth:`RedisBackend.from_url` that redis-py takes now and refuses only at the first
    call, in its own words: a timeout that is not seconds > 0 (or ``None``) and, with
    ``names`` (a plain URL: a Cluster's or Sentinel's client takes options of its own),
    a name the client does not take. An unknown option's value is never shown: it may
    be a password under a misspelt name."""
    for name in ("socket_timeout", "socket_connect_timeout"):
        value = options.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{name} must be seconds (a number > 0) or None, got {type(value).__name__} {value!r}")
        if not 0 < value < math.inf:
            raise ValueError(f"{name} must be seconds > 0 and finite, or None, got {value!r}")
    if not names:
        return
    scheme = url.partition("://")[0].lower()
    pool = inspect.signature(redis.ConnectionPool.__init__).parameters
    known = _query_options(scheme) | set(pool) | {"single_connection_client"}
    for name in options:
        if name not in known:
            raise TypeError(
                f"from_url got the option {name!r}, which the Redis client does not take (its options are "
                "redis-py's connection options, such as socket_timeout, health_check_interval or ssl_ca_certs)"
            )


def _positive_seconds(text: str) -> bool:
    try:
        seconds = float(text)
    except ValueError:
        return False
    return 0 < seconds < math.inf


def check_url(url: str, *, query_names: bool = True) -> None:
    """``ValueError`` for what a URL of :meth:`RedisBackend.from_url` gets wrong that
    can be told without asking the server: no scheme or another store's, a database
    number that is not one (redis-py would take ``/abc`` for database 0), a port that
    is not one, a timeout that is not seconds > 0 and (``query_names``: not for a
    Cluster, whose client takes options of its own) a query option the connection does
    not take; redis-py refuses the last two only at the first call. A Sentinel URL is
    checked by ``sentinel.py``. Passwords are shown as ``***``."""
    if not isinstance(url, str) or not url:
        raise TypeError(f"url must be a non-empty str, got {url!r}")
    shown = redact_url(url)
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if scheme.startswith("sqlite") or url.lower().startswith("sqlite:"):
        raise ValueError(
            f"url {shown!r} names a SQLite store: use SQLiteBackend.from_url({shown!r}) "
            f"(a RedisBackend's URL is {SCHEMES})"
        )
    if not sep or scheme not in (*_REDIS_SCHEMES, "redis+sentinel"):
        if sep or url.startswith("http"):
            hint = "redis://host:6379/0"
        else:  # host:port, or the path of a socket
            hint = f"unix://{url}" if url.startswith("/") else f"redis://{url}"
        said = "has no scheme" if not sep else f"has the scheme {scheme + '://'!r}"
        raise ValueError(f"url {shown!r} {said}: a Redis URL starts with {SCHEMES} (as in {redact_url(hint)!r})")
    if scheme == "redis+sentinel":
        return
    before_fragment = rest.partition("#")[0]
    authority_path, _, query = before_fragment.partition("?")
    options = _query_options(scheme) if query_names else None
    for pair in query.split("&") if query else ():
        name, _, value = pair.partition("=")
        if name == "db" and not _DIGITS.fullmatch(value):
            raise ValueError(f"url {shown!r}: the database db={value!r} must be a whole number >= 0")
        if name in _TIMEOUTS and not _positive_seconds(value):
            raise ValueError(f"url {shown!r}: {name}={value!r} must be seconds > 0, e.g. {name}=0.5")
        if options is not None and name not in options:
            raise ValueError(
                f"url {shown!r}: the query names {name!r}, which is not a connection option "
                "(such as socket_timeout=0.5, db=0 or health_check_interval=30)"
            )
    if scheme == "unix":
        return
    authority, _, path = authority_path.partition("/")
    port = authority.rpartition("@")[2].rpartition("]")[2].partition(":")[2]
    if port and not (_DIGITS.fullmatch(port) and 0 < int(port) < 65536):
        raise ValueError(f"url {shown!r}: the port {port!r} must be a number from 1 to 65535 (redis://host:6379/0)")
    path = path.strip("/")
    if path and not _DIGITS.fullmatch(path):
        raise ValueError(
            f"url {shown!r}: the path /{path} must be a database number >= 0 (redis://host:6379/0), or nothing"
        )


def address(client: Any) -> str:
    """Where ``client`` connects, as a URL without its secrets: what an error names when
    a backend was made from a client rather than a URL."""
    pool = getattr(client, "connection_pool", None)
    service = getattr(pool, "service_name", None)
    if isinstance(service, str):
        return f"the master of Sentinel service {service!r}"
    get_default_node = getattr(client, "get_default_node", None)
    if callable(get_default_node):  # a Cluster client
        node = get_default_node()
        host, port = getattr(node, "host", "?"), getattr(node, "port", "?")
        return f"redis://{_host(host)}:{port} (a Redis Cluster node)"
    kwargs = getattr(pool, "connection_kwargs", None)
    if not isinstance(kwargs, dict):
        return type(client).__name__
    db = kwargs.get("db", 0)
    if kwargs.get("path"):
        return f"unix://{kwargs['path']}" + (f"?db={db}" if db else "")
    connection_class = getattr(pool, "connection_class", None)
    scheme = "rediss" if "SSL" in getattr(connection_class, "__name__", "") else "redis"
    return f"{scheme}://{_host(kwargs.get('host', 'localhost'))}:{kwargs.get('port', 6379)}/{db}"


def _host(host: object) -> str:
    text = str(host)
    return f"[{text}]" if ":" in text else text


def client_secrets(client: Any, url: str | None) -> tuple[str, ...]:
    """The secrets an error about ``client`` (made from ``url``, where known) must not show."""
    found = list(url_secrets(url)) if url else []
    kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", None)
    if isinstance(kwargs, dict) and isinstance(kwargs.get("password"), str) and kwargs["password"]:
        found.append(kwargs["password"])
    return tuple(found)


def database_count(client: Any) -> int | None:
    """How many databases the server of ``client`` has (``CONFIG GET databases``),
    asked on a connection of its own that selects none; ``None`` when it cannot tell
    (the command renamed or forbidden, the server gone). For an error's text only."""
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    connection_class = getattr(pool, "connection_class", None)
    if not isinstance(kwargs, dict) or connection_class is None or getattr(pool, "service_name", None) is not None:
        return None
    settings = {name: value for name, value in kwargs.items() if name != "db"}
    settings.update(socket_timeout=0.5, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))
    probe = redis.Redis(connection_pool=redis.ConnectionPool(connection_class=connection_class, **settings))
    try:
        found = probe.config_get("databases").get("databases")
        return int(found) if found is not None else None
    except Exception:  # only a better message is at stake
        return None
    finally:
        probe.close()
        probe.connection_pool.disconnect()


def retries(client: Any) -> int:
    """How many times ``client`` retries a failed call of its own accord (redis-py 6 and
    later retry by default: a ``redis.Redis()`` ten times, with backoff), or 0."""
    get_retry = getattr(client, "get_retry", None)
    retry = get_retry() if callable(get_retry) else None
    count = getattr(retry, "get_retries", None)
    n = count() if callable(count) else 0
    return n if isinstance(n, int) and n > 0 else 0


def database(client: Any) -> int:
    """The database number ``client`` selects (0 where it says none: a Cluster's)."""
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    db = kwargs.get("db", 0) if isinstance(kwargs, dict) else 0
    try:
        return int(db)
    except (TypeError, ValueError):
        return 0


def pool_limit(client: Any) -> int | None:
    """The most connections ``client``'s pool will open, where it says."""
    pool = getattr(client, "connection_pool", None)
    limit = getattr(pool, "max_connections", None) if pool is not None else getattr(client, "max_connections", None)
    return limit if isinstance(limit, int) and limit > 0 else None


class _SentinelMaster(redis.Redis):
    """The master's client made from a Sentinel URL: closing it closes the clients of
    the sentinels it asks as well (redis-py leaves those to the caller)."""

    def close(self) -> None:
        try:
            super().close()
        finally:
            manager = getattr(self.connection_pool, "sentinel_manager", None)
            if manager is not None:
                manager.close()


class _AsyncSentinelMaster(redis.asyncio.Redis):
    """:class:`_SentinelMaster` for asyncio."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        try:
            await super().aclose(close_connection_pool)
        finally:
            manager = getattr(self.connection_pool, "sentinel_manager", None)
            if manager is not None:
                await manager.aclose()


def _sentinel_master(
    found: SentinelURL, settings: dict[str, Any], *, asynchronous: bool, sentinel_timeouts: dict[str, Any] | None = None
) -> Any:
    """A client of the master that ``found``'s sentinels name, which asks them again
    (and so follows a failover) whenever it opens a connection.

    ``settings`` go to the master's connections; the sentinels are asked with the
    socket timeouts of ``sentinel_timeouts`` (``settings`` when not given), never
    retried, with the credentials the URL gives for them.
    """
    timeouts = settings if sentinel_timeouts is None else sentinel_timeouts
    asking: dict[str, Any] = {name: timeouts[name] for name in ("socket_timeout", "socket_connect_timeout")}
    asking.update(found.sentinel_settings())
    # redis-py's sync Sentinel is untyped: held as Any, as any client is here.
    make: Any = redis.asyncio.sentinel.Sentinel if asynchronous else redis.sentinel.Sentinel
    asking["retry"] = redis.asyncio.retry.Retry(NoBackoff(), 0) if asynchronous else Retry(NoBackoff(), 0)
    sentinel = make(list(found.sentinels), sentinel_kwargs=asking)
    master_class = _AsyncSentinelMaster if asynchronous else _SentinelMaster
    return sentinel.master_for(found.service, redis_class=master_class, **settings)


def drop_idle_connections(client: Any) -> None:
    """Close the idle connections of ``client``'s pools after a call interrupted by
    the caller's own exception (a signal handler raising): redis-py puts a connection
    interrupted between command and reply back with the reply unread, and the next
    call on it would read that reply as its own. Connections in use are left alone."""
    pools = [getattr(client, "connection_pool", None)]
    if hasattr(client, "get_nodes"):  # a Cluster: a pool per node
        pools = [getattr(node.redis_connection, "connection_pool", None) for node in client.get_nodes()]
    for pool in pools:
        disconnect = getattr(pool, "disconnect", None)
        if disconnect is not None:
            with contextlib.suppress(Exception):
                disconnect(inuse_connections=False)


@dataclass(frozen=True)
class UrlClients:
    """What :meth:`RedisBackend.from_url <ratelimit._stores.redis.backend.RedisBackend.from_url>`
    makes of a URL."""

    #: The synchronous client, made now.
    sync: Any
    #: Makes an asyncio client, one for each event loop that calls.
    make_async: Callable[[], Any]
    #: The deadline of each asyncio call (``None``: none), which their clients' own
    #: socket timeouts would not allow for a busy loop.
    deadline: float | None


def url_clients(url: str, *, cluster: bool, pool_size: int, options: dict[str, Any]) -> UrlClients:
    """The clients of ``url``, with the defaults above and ``options`` over them
    (see :meth:`RedisBackend.from_url <ratelimit._stores.redis.backend.RedisBackend.from_url>`)."""
    check_url(url, query_names=not cluster)
    check_options(url, options, names=not cluster and not is_sentinel_url(url))
    if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1:
        raise ValueError(f"pool_size must be an int >= 1, got {pool_size!r}")
    settings: dict[str, Any] = {
        "socket_timeout": DEFAULT_SOCKET_TIMEOUT,
        "socket_connect_timeout": DEFAULT_CONNECT_TIMEOUT,
        "max_connections": pool_size,
    }
    settings.update(options)
    settings.setdefault("retry", Retry(NoBackoff(), 0))
    found: SentinelURL | None = None
    if is_sentinel_url(url):
        found = parse_sentinel_url(url)
        if cluster:
            raise ValueError(f"cluster=True does not go with a Redis Sentinel URL ({redact_url(url)})")
        # As redis-py's own from_url does, what the URL says wins over the options.
        settings.update(found.timeouts)
        settings.update(found.master_settings())
    if "max_connections" not in options and not cluster:
        # One more than the calls in flight: the backend holds one between its calls
        # (redis/held_connection.py), and the rest stay the pool's to lend.
        settings["max_connections"] = pool_size + 1
    sync_class: Any = redis.cluster.RedisCluster if cluster else redis.Redis
    async_class: Any = redis.asyncio.cluster.RedisCluster if cluster else redis.asyncio.Redis
    if found is not None:
        sync_client = _sentinel_master(found, settings, asynchronous=False)
    else:
        sync_client = sync_class.from_url(url, **settings)
    # An event loop busy with thousands of tasks reads a reply late; a socket
    # timeout would take that for a dead server. The asyncio clients get none of
    # their own: each call has a deadline that allows for the loop's lateness.
    limits = [settings["socket_timeout"], settings["socket_connect_timeout"]]
    deadline = max((t for t in limits if isinstance(t, (int, float))), default=None)
    async_settings = dict(
        settings, retry=redis.asyncio.retry.Retry(NoBackoff(), 0), socket_timeout=None, socket_connect_timeout=None
    )

    def make_async() -> Any:
        if found is not None:
            return _sentinel_master(found, async_settings, asynchronous=True, sentinel_timeouts=settings)
        return async_class.from_url(url, **async_settings)

    return UrlClients(sync_client, make_async, deadline)
