"""Which errors from Redis mean "the store is unavailable", and which are bugs (internal).

The failure policy (``on_unavailable``: raise, fail open, or decide locally) is for a
store that cannot serve a decision *right now*, for a reason outside this library and
outside the caller's code, which passes by itself or by an operator's hand: the
network, a restart, a failover, a full memory. Everything else is a bug, in a script
or in the deployment, and reaches the caller as it is: failing open on a bug would
hide it behind a warning for ever.

redis-py turns some error replies into classes of their own (``EXCEPTION_CLASSES`` in
``redis/_parsers/base.py``); the others arrive as a plain ``ResponseError`` whose
message starts with the reply's code. Redis before 7.0 also wraps an error that a
command raised inside a script as ``ERR Error running script (call to f_...):
@user_script:12: @user_script: 12: -OOM command not allowed ...``: the code is read
from there too.

Unavailable: the failure policy applies.

==========================  ===============================  ===================================
reply                       redis-py raises                  why
==========================  ===============================  ===================================
(no reply at all)           ``ConnectionError``,             the server cannot be reached, or
                            ``TimeoutError``,                did not answer in time
                            ``OSError``
``ERR max number of         ``ConnectionError``              the server takes no more clients
clients reached``
``LOADING``                 ``BusyLoadingError``             restarting: the dataset is loading
``OOM``                     ``OutOfMemoryError``             ``maxmemory`` reached under
                                                             ``noeviction`` (or ``volatile-*``
                                                             with nothing left to evict): no
                                                             write succeeds until memory is freed
``READONLY``                ``ReadOnlyError``                a replica: a failover under way, or
                                                             an address that still names the old
                                                             master
(Sentinel names no master)  ``MasterNotFoundError``          no sentinel names a master that is
                            (a ``ConnectionError``)          up: a failover under way, or no
                                                             sentinel reachable
(demoted master)            ``ConnectionError``              a Sentinel-managed client met
                                                             ``READONLY`` on its master: redis-py
                                                             drops the connection, asks again
``MASTERDOWN``              ``MasterDownError``              a replica that lost its master and
                                                             serves no stale data
``CLUSTERDOWN``             ``ClusterDownError``             a hash slot is not served
``TRYAGAIN``                ``TryAgainError``                the slot is migrating (resharding)
(cluster client gave up)    ``ClusterError``,                the cluster client found no node to
                            ``SlotNotCoveredError``          serve the slot within its retries
``BUSY``                    ``ResponseError``                another script runs past
                                                             ``busy-reply-threshold``: the server
                                                             answers nothing else until it ends
                                                             or is killed
``NOREPLICAS``              ``ResponseError``                ``min-replicas-to-write`` not met:
                                                             writes are refused
``MISCONF``                 ``ResponseError``                snapshots fail and
                                                             ``stop-writes-on-bgsave-error`` is
                                                             on: writes are refused
``ERR problem with LDAP     ``ExternalAuthProviderError``    the identity service the server
service``                                                    asks is down
==========================  ===============================  ===================================

Bugs: raised as they are, but for the two ``Misconfigured`` rows (see below).

==========================  ===============================  ===================================
reply                       redis-py raises                  why
==========================  ===============================  ===================================
``ERR user_script:...``,    ``ResponseError``                an error in our own script
``ERR Error running
script`` (no code inside)
``WRONGTYPE``               ``ResponseError``                the key holds another type: some
                                                             other program uses the name
``NOAUTH``, ``WRONGPASS``   ``AuthenticationError``          wrong credentials in the
                            (a ``ConnectionError``)          deployment; they stay wrong
                                                             (raised as ``Misconfigured``)
``ERR DB index is out of    ``ResponseError``                the URL's database is not one the
range`` (at ``SELECT``)                                      server has (``Misconfigured``)
``NOPERM``                  ``NoPermissionError``            an ACL forbids the scripts or keys
``CROSSSLOT``, ``MOVED``,   ``ClusterCrossSlotError``,       a plain client on a Cluster (our keys
``ASK``                     ``MovedError``, ``AskError``     share one hash tag)
(pool full)                 ``MaxConnectionsError``          the client is busy, not the server
                            (a ``ConnectionError``)          down: the backend waits for a
                                                             connection instead
anything else               ``ResponseError``, ...           unknown: surfaced, not guessed at
==========================  ===============================  ===================================

Two Sentinel mistakes cannot be told from an outage, since redis-py raises
``MasterNotFoundError`` for them too: a service name the sentinels do not know, and
wrong credentials for the sentinels. Both look like a failover that never ends.

``NOSCRIPT`` never gets here: :class:`~ratelimit._stores.redis.scripts.Script` reloads the script.

Two of the bugs are mistakes of the deployment that a user fixes in the URL: wrong or
missing credentials, and a database number the server does not have (``SELECT``
answers ``ERR DB index is out of range`` when a connection opens). :func:`misconfigured`
tells them; the backend raises them as ``Misconfigured`` (``unavailable.py``), a
``BackendUnavailable`` whatever ``on_unavailable`` says, since they stay wrong until
someone fixes them.

:func:`failure_reason` says in one line why a call failed (connection refused, unknown host,
timed out, authentication failed, no such database, TLS failed, or the server's own
words): the one describer of both the library's ``BackendUnavailable`` and the
command line's "cannot reach Redis" line.
"""

from __future__ import annotations

import asyncio
import re
import socket
import ssl

import redis.exceptions
import redis.sentinel

__all__ = [
    "STORE_ERRORS",
    "UNAVAILABLE_CODES",
    "UNAVAILABLE_TYPES",
    "error_code",
    "failure_reason",
    "is_unavailable",
    "misconfigured",
    "no_master",
    "wrong_database",
]

#: Everything a store call may raise that :func:`is_unavailable` has an opinion on: an
#: ``except`` clause catches these, then re-raises what is not an outage.
STORE_ERRORS: tuple[type[BaseException], ...] = (
    redis.exceptions.RedisError,
    redis.exceptions.RedisClusterException,
    OSError,
    asyncio.TimeoutError,  # its own class before Python 3.11
)

#: Classes that mean an outage whatever their message (subclasses included, except
#: those in ``_BUGS``).
UNAVAILABLE_TYPES: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError,  # with BusyLoadingError (LOADING)
    redis.exceptions.TimeoutError,
    redis.exceptions.OutOfMemoryError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.ClusterError,  # with ClusterDownError, MasterDownError
    redis.exceptions.TryAgainError,
    redis.exceptions.SlotNotCoveredError,
    OSError,
    asyncio.TimeoutError,
)

#: Subclasses of the classes above that are not outages.
_BUGS: tuple[type[BaseException], ...] = (
    redis.exceptions.AuthenticationError,
    redis.exceptions.AuthorizationError,
    redis.exceptions.MaxConnectionsError,
)

#: Codes of error replies that mean an outage, whichever class redis-py gave them.
UNAVAILABLE_CODES = frozenset(
    {"BUSY", "CLUSTERDOWN", "LOADING", "MASTERDOWN", "MISCONF", "NOREPLICAS", "OOM", "READONLY", "TRYAGAIN"}
)

# An error message is the server's text: look at its start only, never all of it.
_MOST = 512
_CODE = re.compile(r"[A-Z][A-Z_]*")
# Redis < 7: "Error running script (call to f_<sha>): @user_script:12: @user_script: 12: -OOM ..."
_WRAPPED = re.compile(r"@user_script: ?\d+: -([A-Z][A-Z_]*)[ .]")


def error_code(exc: BaseException) -> str | None:
    """The code of the error reply behind ``exc`` (``"OOM"``, ``"BUSY"``, ...).

    For an error raised by a command inside a script on Redis before 7.0 (reported as
    ``ERR Error running script ...``), the code of the command's own error. ``None``
    when there is none (a socket error, a Lua runtime error).
    """
    message = str(exc)[:_MOST]
    code = getattr(exc, "status_code", None)  # set by redis-py >= 5.1 for mapped replies
    if not isinstance(code, str) or not code:
        first = message.split(" ", 1)[0]
        code = first if _CODE.fullmatch(first) else None
    if code in (None, "ERR") and message.startswith("Error running script"):
        wrapped = _WRAPPED.search(message)
        if wrapped is not None:
            return wrapped.group(1)
    return code


def is_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` means the store cannot serve us now (see the module docstring),
    as opposed to a bug that must reach the caller."""
    if isinstance(exc, _BUGS):
        return False
    if isinstance(exc, UNAVAILABLE_TYPES):
        return True
    if isinstance(exc, redis.exceptions.ResponseError):
        return error_code(exc) in UNAVAILABLE_CODES
    return False


def no_master(client: object, exc: BaseException) -> str | None:
    """What a ``MasterNotFoundError`` means in one line (redis-py's own text is a
    kilobyte of its connection objects): the service and the sentinels asked, as
    ``client``'s pool knows them; ``None`` for any other error."""
    if not isinstance(exc, redis.sentinel.MasterNotFoundError):
        return None
    pool = getattr(client, "connection_pool", None)
    service = getattr(pool, "service_name", "?")
    sentinels = getattr(getattr(pool, "sentinel_manager", None), "sentinels", ())
    where = []
    for sentinel in sentinels:
        kwargs = getattr(getattr(sentinel, "connection_pool", None), "connection_kwargs", {})
        host, port = kwargs.get("host", "?"), kwargs.get("port", "?")
        where.append(f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}")
    return f"no master found for service {service!r}: none of the sentinels at {', '.join(where)} named one"


def wrong_database(exc: BaseException) -> bool:
    """Whether ``exc`` says the database the client selects does not exist on the
    server (``SELECT`` refused as a connection opened)."""
    if isinstance(exc, redis.exceptions.ResponseError):
        return "DB index is out of range" in str(exc)[:_MOST]
    # redis-py's own words for a SELECT answered with anything but OK.
    return isinstance(exc, redis.exceptions.ConnectionError) and str(exc) == "Invalid Database"


def misconfigured(exc: BaseException) -> bool:
    """Whether ``exc`` is a mistake of the deployment that the URL fixes: wrong or
    missing credentials, or a database the server does not have."""
    return isinstance(exc, redis.exceptions.AuthenticationError) or wrong_database(exc)


def _os_error(exc: BaseException) -> OSError | None:
    """The socket error behind ``exc``: itself, or the first in its chain (redis-py
    raises its own ``ConnectionError`` from the socket's)."""
    seen: BaseException | None = exc
    for _ in range(8):  # a chain is short; a loop in one must not hang us
        if seen is None:
            return None
        if isinstance(seen, OSError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _first_line(text: str) -> str:
    line = text[:_MOST].strip().splitlines()[0] if text.strip() else ""
    return line[:200] + ("..." if len(line) > 200 else "")


def failure_reason(exc: BaseException, *, database: int | None = None, databases: int | None = None) -> str:
    """Why a call to Redis failed, in one line a user can act on: ``connection
    refused``, ``unknown host ...``, ``timed out ...``, ``authentication failed ...``,
    ``database 99 does not exist ...``, ``TLS failed ...``, or the server's own words.

    ``database`` is the number the client selects and ``databases`` how many the
    server has, where known: they complete the line for a database that does not exist.
    Never quotes a password: redis-py's texts name the host and port only.
    """
    if wrong_database(exc):
        which = "the database" if database is None else f"database {database}"
        has = "" if not databases else f" (this server has {databases}: 0 to {databases - 1})"
        return f"{which} does not exist{has}"
    if isinstance(exc, redis.exceptions.AuthenticationError):
        if error_code(exc) == "NOAUTH" or str(exc).startswith(("Authentication required", "HELLO must be called")):
            return "authentication failed: the server needs a password and none was given (redis://:PASSWORD@host)"
        return f"authentication failed: {_first_line(str(exc)) or 'the password or user name is wrong'}"
    if isinstance(exc, redis.sentinel.MasterNotFoundError):
        return "no sentinel names a master for the service"
    found = _os_error(exc)
    if isinstance(found, socket.gaierror):
        said = found.strerror or str(found)
        return f"unknown host: its name does not resolve ({said})"
    if isinstance(found, ssl.SSLError):
        return f"TLS failed: {getattr(found, 'reason', None) or _first_line(str(found))}"
    if isinstance(found, ConnectionRefusedError):
        return "connection refused: nothing listens there"
    if isinstance(found, FileNotFoundError):
        return "no such socket file"
    timeouts = (redis.exceptions.TimeoutError, asyncio.TimeoutError, TimeoutError)
    if isinstance(exc, timeouts) or isinstance(found, TimeoutError):
        said = _first_line(str(exc))
        return f"timed out ({said})" if said else "timed out"
    if isinstance(found, OSError) and found.strerror and found is exc:
        return found.strerror
    return _first_line(str(exc)) or type(exc).__name__
