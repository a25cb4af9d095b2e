"""Errors a user can act on: each bad store input or failure gives one line that names
the store (its URL, the password shown as ``***``) and what is wrong.

Redis: a refused port, an unknown host, wrong or missing credentials, a database the
server does not have (each a ``BackendUnavailable``), and the URLs ``from_url``
refuses at once (no scheme, another scheme, a SQLite URL, a database that is not a
number). SQLite: a Redis URL. The describer ``failure_reason`` is the command line's
too.

Nothing here can hang: the Redis clients have half-second socket timeouts, and the
one call that resolves a name runs under a deadline of its own.
"""

from __future__ import annotations

import asyncio
import errno
import socket
import ssl
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.exceptions
from redis._parsers.base import BaseParser

from ratelimit import BackendUnavailable, RedisBackend, SQLiteBackend, TokenBucket
from ratelimit._stores.redis import failure_reason
from ratelimit._stores.redis.clients import address
from ratelimit.cli import main

from conftest import REDIS_URL, private_server, unique_name
from servers import HOST, RedisServer, SilentServer, free_port

SECRET = "pa55-w0rd-never-shown"
SCHEMES = ("redis://", "rediss://", "unix://", "redis+sentinel://")

#: The longest a failing call may take here: the clients' 0.5 s timeouts, with room.
DEADLINE = 10.0


def failure(url: str, **options: object) -> BackendUnavailable:
    """The error of a first acquire on ``url``, made under a deadline (a name lookup
    has no socket timeout of its own)."""
    backend = RedisBackend.from_url(url, **options)  # type: ignore[arg-type]
    limiter = TokenBucket(5, 5, backend=backend, name=unique_name("errors"))
    caught: list[BaseException] = []

    def acquire() -> None:
        try:
            limiter.acquire()
        except BaseException as exc:  # handed to the test
            caught.append(exc)

    worker = threading.Thread(target=acquire, daemon=True)
    worker.start()
    worker.join(DEADLINE)
    try:
        assert not worker.is_alive(), f"an acquire on {url} took over {DEADLINE} s"
        assert caught, f"an acquire on {url} was granted"
        error = caught[0]
        assert isinstance(error, BackendUnavailable), repr(error)
        return error
    finally:
        backend.close()


def one_line(error: BaseException) -> str:
    text = str(error)
    assert "\n" not in text
    assert SECRET not in text
    return text


# -- Redis: the store cannot decide -------------------------------------------------


def test_a_refused_port_names_the_address_and_says_refused() -> None:
    port = free_port()
    text = one_line(failure(f"redis://:{SECRET}@{HOST}:{port}/0"))
    assert text.startswith(f"the Redis store at redis://:***@{HOST}:{port}/0 is unavailable: ")
    assert "connection refused" in text


def test_a_refused_port_says_the_same_to_asyncio() -> None:
    port = free_port()
    backend = RedisBackend.from_url(f"redis://{HOST}:{port}/0")
    limiter = TokenBucket(5, 5, backend=backend, name=unique_name("errors"))

    async def acquire() -> None:
        await asyncio.wait_for(limiter.acquire_async(), DEADLINE)

    with pytest.raises(BackendUnavailable) as caught:
        asyncio.run(acquire())
    backend.close()
    assert f"at redis://{HOST}:{port}/0 is unavailable: connection refused" in one_line(caught.value)


def test_an_unknown_host_reads_differently_from_a_refusal() -> None:
    text = one_line(failure("redis://no-such-store.invalid:6379/0"))
    assert "redis://no-such-store.invalid:6379/0" in text
    assert "unknown host" in text
    assert "refused" not in text


def test_a_server_that_never_answers_says_timed_out() -> None:
    with SilentServer() as silent:
        url = silent.url
        text = one_line(failure(url, socket_timeout=0.2))
    assert text.startswith(f"the Redis store at {url} is unavailable: timed out (")


def test_a_refused_port_still_fails_open_with_allow() -> None:
    backend = RedisBackend.from_url(f"redis://{HOST}:{free_port()}/0", on_unavailable="allow")
    limiter = TokenBucket(5, 5, backend=backend, name=unique_name("errors"))
    assert limiter.acquire() == 0.0
    assert backend.stats().failed_open == 1
    backend.close()


def test_waiters_behind_a_failed_call_hear_its_reason() -> None:
    port = free_port()
    backend = RedisBackend.from_url(f"redis://{HOST}:{port}/0", pool_size=1)
    assert backend._outage_seen(0) is None  # no outage yet: nothing to hear
    limiter = TokenBucket(5, 5, backend=backend, name=unique_name("errors"))
    with pytest.raises(BackendUnavailable) as first:
        limiter.acquire()
    behind = backend._outage_seen(0)
    backend.close()
    assert behind is not None
    assert str(behind) == f"{first.value} (met by a call ahead of this one)"


@pytest.fixture
def guarded() -> Iterator[RedisServer]:
    """A private server that asks for the password ``SECRET``."""
    server = private_server()
    client = redis.Redis(host=HOST, port=server.port, socket_timeout=2)
    client.config_set("requirepass", SECRET)
    client.close()
    yield server
    server.cleanup()


@pytest.mark.servers
@pytest.mark.parametrize("on_unavailable", ["raise", "allow", "local"])
def test_wrong_credentials_say_so_whatever_the_policy(guarded: RedisServer, on_unavailable: str) -> None:
    url = f"redis://:wrong-{SECRET}@{HOST}:{guarded.port}/0"
    text = one_line(failure(url, on_unavailable=on_unavailable))
    assert f"redis://:***@{HOST}:{guarded.port}/0" in text
    assert "authentication failed" in text
    assert "wrong-" not in text


@pytest.mark.servers
def test_a_missing_password_says_one_is_needed(guarded: RedisServer) -> None:
    text = one_line(failure(f"redis://{HOST}:{guarded.port}/0", on_unavailable="allow"))
    assert f"redis://{HOST}:{guarded.port}/0" in text
    assert "authentication failed: the server needs a password and none was given" in text


@pytest.mark.servers
def test_the_right_password_decides(guarded: RedisServer) -> None:
    backend = RedisBackend.from_url(f"redis://:{SECRET}@{HOST}:{guarded.port}/0")
    assert TokenBucket(5, 5, backend=backend, name=unique_name("errors")).acquire() == 0.0
    backend.close()


@pytest.mark.parametrize("on_unavailable", ["raise", "allow"])
def test_a_database_the_server_lacks_is_named_with_how_many_it_has(
    redis_client: redis.Redis, on_unavailable: str
) -> None:
    databases = int(str(redis_client.config_get("databases")["databases"]))
    if databases > 99:
        pytest.skip(f"this server has {databases} databases")
    base = REDIS_URL.rsplit("/", 1)[0]
    text = one_line(failure(f"{base}/99", on_unavailable=on_unavailable))
    assert f"{base}/99 is unavailable: " in text
    assert f"database 99 does not exist (this server has {databases}: 0 to {databases - 1})" in text
    assert "DB index" not in text


def test_a_database_the_server_lacks_fails_the_operator_reads_too(redis_client: redis.Redis) -> None:
    base = REDIS_URL.rsplit("/", 1)[0]
    backend = RedisBackend.from_url(f"{base}/99")
    with pytest.raises(BackendUnavailable, match="database 99 does not exist"):
        backend.inspect_all()
    backend.close()


# -- Redis: what from_url refuses at once -------------------------------------------


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("localhost:6379", "has no scheme"),
        (f"localhost:{SECRET}@6379", "has no scheme"),
        ("http://localhost:6379", "has the scheme 'http://'"),
        (f"redis+cluster://:{SECRET}@host:6379", "has the scheme 'redis+cluster://'"),
    ],
)
def test_a_url_without_a_redis_scheme_lists_the_schemes(url: str, says: str) -> None:
    with pytest.raises(ValueError, match="a Redis URL starts with") as caught:
        RedisBackend.from_url(url)
    text = one_line(caught.value)
    assert says in text
    for scheme in SCHEMES:
        assert scheme in text


@pytest.mark.parametrize(
    ("url", "meant"), [("localhost:6379", "redis://localhost:6379"), ("/run/redis.sock", "unix:///run/redis.sock")]
)
def test_a_url_without_a_scheme_is_shown_with_one(url: str, meant: str) -> None:
    with pytest.raises(ValueError, match=f"as in '{meant}'"):
        RedisBackend.from_url(url)


@pytest.mark.parametrize("url", ["sqlite:///limits.db", "sqlite:////tmp/limits.db", "SQLITE:///x.db"])
def test_a_sqlite_url_points_to_the_sqlite_backend(url: str) -> None:
    with pytest.raises(ValueError, match="SQLiteBackend") as caught:
        RedisBackend.from_url(url)
    assert f"names a SQLite store: use SQLiteBackend.from_url({url!r})" in one_line(caught.value)


@pytest.mark.parametrize(
    ("url", "part"),
    [
        (f"redis://:{SECRET}@localhost:6379/-1", "the path /-1"),
        ("redis://localhost:6379/abc", "the path /abc"),
        ("rediss://localhost:6379/1.5", "the path /1.5"),
        ("redis://localhost:6379/0/1", "the path /0/1"),
        (f"redis://localhost:6379?db=-2&password={SECRET}", "db='-2'"),
        ("unix:///run/redis.sock?db=x", "db='x'"),
    ],
)
def test_a_database_that_is_no_number_is_refused_at_once(url: str, part: str) -> None:
    with pytest.raises(ValueError, match=">= 0") as caught:
        RedisBackend.from_url(url)
    text = one_line(caught.value)
    assert part in text
    assert ">= 0" in text


@pytest.mark.parametrize(
    ("url", "part"),
    [
        (f"redis://:{SECRET}@host:notaport/0", "the port 'notaport' must be a number from 1 to 65535"),
        ("redis://host:99999/0", "the port '99999'"),
        ("rediss://[::1]:0/0", "the port '0'"),
        ("redis://host:6379/0?socket_timeout=-1", "socket_timeout='-1' must be seconds > 0"),
        (f"redis://host/0?password={SECRET}&socket_connect_timeout=abc", "socket_connect_timeout='abc'"),
        ("redis://host/0?timeout=nan", "timeout='nan'"),
        ("redis://host:6379/0?foo=bar", "the query names 'foo', which is not a connection option"),
        ("unix:///run/redis.sock?ssl_certfile=x", "'ssl_certfile'"),
    ],
)
def test_a_port_a_timeout_or_an_option_redis_py_refuses_late_is_refused_at_once(url: str, part: str) -> None:
    # redis-py takes these and fails at the first call, with its own words and no URL.
    with pytest.raises(ValueError, match=r"^url ") as caught:
        RedisBackend.from_url(url)
    text = one_line(caught.value)
    assert part in text
    assert SECRET not in text


@pytest.mark.parametrize(
    ("options", "error", "said"),
    [
        ({"socket_timeout": -1}, ValueError, "socket_timeout must be seconds > 0 and finite, or None, got -1"),
        ({"socket_connect_timeout": float("inf")}, ValueError, "socket_connect_timeout must be seconds > 0"),
        ({"socket_timeout": "1"}, TypeError, "socket_timeout must be seconds (a number > 0) or None, got str '1'"),
        ({"pasword": SECRET}, TypeError, "from_url got the option 'pasword', which the Redis client does not take"),
    ],
)
def test_an_option_redis_py_refuses_late_is_refused_at_once(
    options: dict[str, Any], error: type[Exception], said: str
) -> None:
    with pytest.raises(error) as caught:
        RedisBackend.from_url("redis://host:6379/0", **options)
    text = one_line(caught.value)
    assert said in text
    assert SECRET not in text  # a misspelt password's value is never shown


def test_the_client_s_own_options_pass() -> None:
    options: dict[str, Any] = {"socket_timeout": None, "health_check_interval": 30, "client_name": "me"}
    RedisBackend.from_url("redis://host:6379/0", **options).close()
    RedisBackend.from_url("redis://host:6379/0", single_connection_client=False, max_connections=8).close()


@pytest.mark.parametrize(
    "url",
    [
        "rediss://host:6380/0?ssl_cert_reqs=none&ssl_ca_certs=/etc/ca.pem",
        "redis://host/0?socket_timeout=2&health_check_interval=30&client_name=me",
        "redis://[::1]:6379/0",
    ],
)
def test_options_the_connection_takes_pass(url: str) -> None:
    RedisBackend.from_url(url).close()


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis:///0", "localhost:6379"),
        ("redis://[::1]:6380/0", "[::1]:6380"),
        ("unix:///run/redis.sock", "unix:///run/redis.sock"),
        (f"redis://:{SECRET}@h/1", "h:6379"),
    ],
)
def test_the_repr_names_where_the_client_connects(url: str, shown: str) -> None:
    backend = RedisBackend.from_url(url)
    assert repr(backend) == f"RedisBackend({shown}, on_unavailable='raise')"
    backend.close()


@pytest.mark.parametrize(
    "url", ["redis://localhost", "redis://localhost:6379", "redis://localhost:6379/", "redis://h/15", "unix:///s?db=3"]
)
def test_good_urls_pass_without_a_round_trip(url: str) -> None:
    RedisBackend.from_url(url).close()  # nothing listens on most of them


# -- the describer --------------------------------------------------------------------


def _caused(outer: BaseException, inner: BaseException) -> BaseException:
    outer.__cause__ = inner
    return outer


def _reply(text: str) -> BaseException:
    exc: BaseException = BaseParser.parse_error(text)  # type: ignore[no-untyped-call]
    return exc


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (
            _caused(redis.exceptions.ConnectionError("Error 111 connecting"), ConnectionRefusedError(111, "refused")),
            "connection refused: nothing listens there",
        ),
        (
            _caused(redis.exceptions.ConnectionError("Error -2 connecting"), socket.gaierror(-2, "Name not known")),
            "unknown host: its name does not resolve (Name not known)",
        ),
        (redis.exceptions.TimeoutError("Timeout connecting to server"), "timed out (Timeout connecting to server)"),
        (asyncio.TimeoutError(), "timed out"),
        (
            _caused(redis.exceptions.ConnectionError("SSL"), ssl.SSLError(1, "[SSL] wrong version number")),
            "TLS failed:",
        ),
        (
            _caused(redis.exceptions.ConnectionError("Error 2"), FileNotFoundError(errno.ENOENT, "No such file")),
            "no such socket file",
        ),
        (_reply("NOAUTH Authentication required."), "authentication failed: the server needs a password"),
        (_reply("WRONGPASS invalid username-password pair or user is disabled."), "authentication failed: invalid"),
        (_reply("ERR DB index is out of range"), "the database does not exist"),
        (_reply("OOM command not allowed when used memory > 'maxmemory'."), "command not allowed when used memory"),
        (redis.exceptions.ConnectionError(""), "ConnectionError"),
    ],
    ids=lambda value: value if isinstance(value, str) else type(value).__name__,
)
def test_failure_reason_says_why_in_one_line(exc: BaseException, reason: str) -> None:
    said = failure_reason(exc)
    assert "\n" not in said
    assert said.startswith(reason) or reason in said


def test_failure_reason_counts_the_databases_where_known() -> None:
    said = failure_reason(_reply("ERR DB index is out of range"), database=20, databases=16)
    assert said == "database 20 does not exist (this server has 16: 0 to 15)"


@pytest.mark.parametrize(
    ("client", "shown"),
    [
        (redis.Redis(host="10.0.0.7", port=6380, db=2, password=SECRET), "redis://10.0.0.7:6380/2"),
        (redis.Redis(host="::1", port=6390), "redis://[::1]:6390/0"),
        (redis.Redis(unix_socket_path="/run/redis.sock", db=1), "unix:///run/redis.sock?db=1"),
        (redis.Redis(host="h", ssl=True), "rediss://h:6379/0"),
    ],
)
def test_a_backend_on_a_client_names_its_address_without_the_password(client: redis.Redis, shown: str) -> None:
    assert address(client) == shown
    backend = RedisBackend(client)
    assert backend._where == shown
    backend.close()


def test_a_backend_on_a_client_scrubs_its_password() -> None:
    client = redis.Redis(host=HOST, port=free_port(), password=SECRET, socket_connect_timeout=0.5)
    backend = RedisBackend(client)
    error = backend._unavailable_error(redis.exceptions.ConnectionError(f"cannot use {SECRET}"))
    assert SECRET not in str(error)
    backend.close()


def test_the_command_line_says_the_reason_as_the_library_does(capsys: pytest.CaptureFixture[str]) -> None:
    url = "redis://no-such-store.invalid:6379/0"
    done: list[int] = []
    worker = threading.Thread(target=lambda: done.append(main(["inspect", "--redis", url])), daemon=True)
    worker.start()
    worker.join(DEADLINE)
    assert done == [1]
    err = capsys.readouterr().err
    assert err.startswith(f"ratelimit inspect: error: cannot reach Redis at {url}: unknown host: ")


# -- SQLite --------------------------------------------------------------------------


def test_sqlite_from_url_points_a_redis_url_to_the_redis_backend() -> None:
    with pytest.raises(ValueError, match="RedisBackend") as caught:
        SQLiteBackend.from_url(f"redis://:{SECRET}@localhost:6379/0")
    text = one_line(caught.value)
    assert "got 'redis://:***@localhost:6379/0': that is a Redis URL, for RedisBackend.from_url" in text
