"""The store an operator command works on, picked from its URL (``inspect``, ``set``, ``top``).

:func:`backend_from_url` reads the URL's scheme: ``redis://``, ``rediss://``,
``unix://`` and ``redis+sentinel://`` make a ``RedisBackend`` (a Cluster's client
whenever the URL names a node of one), ``sqlite:///PATH`` a ``SQLiteBackend``; any
other scheme is refused naming it, the URL's secrets shown as ``***``. Either is
used only through the operator protocol (``_stores/operated.py``).
"""

from __future__ import annotations

import os
from typing import Any, Literal

import redis
import redis.exceptions

from .._redact import redact_url
from .._stores.operated import Operated
from .._stores.redis import RedisBackend, check_url
from .._stores.sqlite import SQLiteBackend

__all__ = [
    "ADMIN_TIMEOUT",
    "REDIS_SCHEMES",
    "SQLITE_PREFIX",
    "SQLITE_URL_HELP",
    "UnknownStore",
    "backend_from_url",
    "is_cluster_node",
    "sqlite_path_hint",
    "store_of",
]

#: The schemes of a Redis URL (``redis+sentinel``: a master found through Sentinel).
REDIS_SCHEMES = ("redis", "rediss", "unix", "redis+sentinel")
SQLITE_PREFIX = "sqlite:///"
#: How a ``sqlite:`` URL names its file: the help of every command that takes a
#: store's URL says it in these words.
SQLITE_URL_HELP = (
    "sqlite:///PATH takes the path after three slashes: sqlite:///rel/x.db is rel/x.db under the current "
    "folder, sqlite:////srv/app/x.db (four slashes) is /srv/app/x.db"
)

#: How long an operator command waits for one reply from Redis: a pipeline of
#: thousands of reads is no limiter's hot path.
ADMIN_TIMEOUT = 5.0


class UnknownStore(ValueError):
    """A URL whose scheme names no store."""


def store_of(url: str) -> Literal["redis", "sqlite"]:
    """Which store ``url`` names, by its scheme; :class:`UnknownStore` naming the
    scheme otherwise."""
    scheme, colon, _ = url.partition(":")
    if url.partition("://")[1] and scheme.lower() in REDIS_SCHEMES:
        return "redis"
    if url.startswith(SQLITE_PREFIX) and len(url) > len(SQLITE_PREFIX):
        return "sqlite"
    said = f"scheme {scheme + colon!r} names no store" if colon else "no scheme"
    if scheme.lower() == "sqlite":
        said = "a SQLite store's URL, but no path after three slashes"
    raise UnknownStore(
        f"{redact_url(url)}: {said}; a store is redis://, rediss://, unix://, redis+sentinel:// or "
        f"a SQLite file ({SQLITE_URL_HELP})"
    )


def sqlite_path_hint(url: str) -> str | None:
    """What to write instead of a ``sqlite:`` URL whose relative path lies in a folder
    that does not exist while the same path from the root does (``sqlite:///srv/app/x.db``
    meant as ``/srv/app/x.db``); ``None`` for any other URL."""
    if not url.startswith(SQLITE_PREFIX):
        return None
    path = url[len(SQLITE_PREFIX) :]
    folder = os.path.dirname(path)
    if not folder or os.path.isabs(path) or os.path.isdir(folder) or not os.path.isdir(os.sep + folder):
        return None
    return (
        f"{path} is relative to the current folder, which has no {folder}; /{folder} exists: "
        f"for /{path} write sqlite:////{path}, with four slashes"
    )


def is_cluster_node(url: str) -> bool:
    """Whether the Redis of ``url`` is a node of a Redis Cluster (``cluster_enabled:1``).
    A Sentinel URL names a master found through the sentinels: never a Cluster node.
    ``ValueError`` for a malformed URL, before any client: redis-py would refuse a bad
    port in its own words and an unknown option only at the first call."""
    check_url(url)
    if url.lower().startswith("redis+sentinel://"):
        return False
    client = redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=ADMIN_TIMEOUT)
    try:
        info: dict[str, Any] = client.info("cluster")
    except redis.exceptions.ResponseError:
        return False  # INFO refused or renamed: not a Cluster's node, which needs it
    finally:
        client.close()
    return bool(info.get("cluster_enabled"))


def backend_from_url(url: str, *, cluster: bool | None = None) -> Operated:
    """The store of ``url``, for an operator's reads and changes.

    ``cluster``: whether a Redis URL names a node of a Redis Cluster; ``None`` asks
    the node (:func:`is_cluster_node`). A SQLite file counts nothing for ``top`` of
    its own. Raises :class:`UnknownStore` for a URL of no store, ``ValueError`` for a
    malformed one, and what opening it raises (an unreachable Redis, a missing folder).
    """
    if store_of(url) == "sqlite":
        return SQLiteBackend.from_url(url, counters=False)
    if cluster is None:
        cluster = is_cluster_node(url)
    return RedisBackend.from_url(url, cluster=cluster, coalesce=False, socket_timeout=ADMIN_TIMEOUT)
