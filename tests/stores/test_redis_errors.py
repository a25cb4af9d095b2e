"""Which error replies go through the failure policy, and which surface as bugs.

Each reply is turned into an exception by redis-py's own parser, as it would be off
the wire, and classified by ``ratelimit._stores.redis.errors``. The same replies from real
servers are in test_redis_server_states.py.
"""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio.sentinel
import redis.exceptions
import redis.sentinel
from redis._parsers.base import BaseParser

from ratelimit._stores.redis.errors import STORE_ERRORS, error_code, is_unavailable

OUTAGES = [
    "OOM command not allowed when used memory > 'maxmemory'. script: 5d8a, on @user_script:102.",
    "READONLY You can't write against a read only replica. script: 5d8a, on @user_script:40.",
    "LOADING Redis is loading the dataset in memory",
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
    "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
    "CLUSTERDOWN The cluster is down",
    "CLUSTERDOWN Hash slot not served",
    "TRYAGAIN Multiple keys request during rehashing of slot",
    "NOREPLICAS Not enough good replicas to write.",
    "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk.",
    "ERR max number of clients reached",
    "ERR problem with LDAP service",
    # Redis < 7 wraps the error of a command inside a script:
    "ERR Error running script (call to f_0a9a51ee): @user_script:41: @user_script: 41: "
    "-OOM command not allowed when used memory > 'maxmemory'.",
    "ERR Error running script (call to f_0a9a51ee): @user_script:12: @user_script: 12: "
    "-READONLY You can't write against a read only replica.",
]

BUGS = [
    "ERR user_script:22: attempt to perform arithmetic on local 'admit_at' (a table value) script: fa75, "
    "on @user_script:22.",
    "ERR Error running script (call to f_fa75): @user_script:22: user_script:22: attempt to compare nil with number",
    "WRONGTYPE Operation against a key holding the wrong kind of value script: fa75, on @user_script:12.",
    "ratelimit: unknown op bogus",
    "NOAUTH Authentication required.",
    "WRONGPASS invalid username-password pair or user is disabled.",
    "NOPERM this user has no permissions to run the 'evalsha' command",
    "CROSSSLOT Keys in request don't hash to the same slot",
    "MOVED 3999 127.0.0.1:6381",
    "ASK 3999 127.0.0.1:6381",
    "ERR unknown command 'EVALSHA'",
    "EXECABORT Transaction discarded because of previous errors.",
    "BUSYKEY Target key name already exists.",
]


def parsed(reply: str) -> BaseException:
    exc: BaseException = BaseParser.parse_error(reply)  # type: ignore[no-untyped-call]
    return exc


@pytest.mark.parametrize("reply", OUTAGES)
def test_outage_replies_are_unavailable(reply: str) -> None:
    exc = parsed(reply)
    assert isinstance(exc, STORE_ERRORS)
    assert is_unavailable(exc), (type(exc), exc)


@pytest.mark.parametrize("reply", BUGS)
def test_bug_replies_surface(reply: str) -> None:
    exc = parsed(reply)
    assert isinstance(exc, STORE_ERRORS)
    assert not is_unavailable(exc), (type(exc), exc)


def test_redis_py_classes_of_the_replies() -> None:
    # What the table in the module docstring says redis-py raises.
    assert isinstance(parsed("OOM full"), redis.exceptions.OutOfMemoryError)
    assert isinstance(parsed("LOADING loading"), redis.exceptions.BusyLoadingError)
    assert isinstance(parsed("MASTERDOWN down"), redis.exceptions.MasterDownError)
    assert type(parsed("BUSY busy")) is redis.exceptions.ResponseError
    assert type(parsed("NOREPLICAS none")) is redis.exceptions.ResponseError
    assert isinstance(parsed("NOAUTH Authentication required."), redis.exceptions.AuthenticationError)


@pytest.mark.parametrize(
    "exc",
    [
        redis.exceptions.ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused."),
        redis.exceptions.TimeoutError("Timeout reading from socket"),
        redis.exceptions.ClusterError("TTL exhausted."),
        redis.exceptions.SlotNotCoveredError('Slot "12" is not covered by the cluster.'),
        ConnectionResetError(104, "Connection reset by peer"),
        asyncio.TimeoutError(),
    ],
    ids=lambda e: type(e).__name__,
)
def test_no_answer_at_all_is_unavailable(exc: BaseException) -> None:
    assert is_unavailable(exc)


@pytest.mark.parametrize(
    "exc",
    [
        # No sentinel names a master that is up: between a master's death and its
        # replica's promotion, or with every sentinel unreachable.
        redis.sentinel.MasterNotFoundError("No master found for 'mymaster'"),
        redis.asyncio.sentinel.MasterNotFoundError("No master found for 'mymaster'"),
        # What a Sentinel-managed connection makes of READONLY from a demoted master.
        redis.exceptions.ConnectionError("The previous master is now a slave"),
        # The same reply on a plain client still pointed at the old master.
        parsed("READONLY You can't write against a read only replica. script: 5d8a, on @user_script:40."),
    ],
    ids=["MasterNotFoundError", "async MasterNotFoundError", "demoted master", "READONLY"],
)
def test_what_a_failover_raises_is_unavailable(exc: BaseException) -> None:
    assert is_unavailable(exc)


@pytest.mark.parametrize(
    "exc",
    [
        redis.exceptions.MaxConnectionsError("Too many connections"),
        redis.exceptions.AuthorizationError("you are not authorized to view this ocsp certificate"),
        redis.exceptions.DataError("Invalid input of type: 'NoneType'."),
        redis.exceptions.InvalidResponse("Protocol Error: b'H'"),
        ValueError("not a store error"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_a_busy_client_and_local_mistakes_are_not_outages(exc: BaseException) -> None:
    assert not is_unavailable(exc)


def test_error_code_reads_the_code_wherever_redis_py_put_it() -> None:
    assert error_code(parsed("OOM command not allowed")) == "OOM"  # mapped: status_code
    assert error_code(parsed("BUSY Redis is busy")) == "BUSY"  # unmapped: the message's first word
    assert error_code(redis.exceptions.ResponseError("NOREPLICAS Not enough good replicas")) == "NOREPLICAS"
    wrapped = "ERR Error running script (call to f_1): @user_script:41: @user_script: 41: -MISCONF cannot persist"
    assert error_code(parsed(wrapped)) == "MISCONF"
    assert error_code(parsed("ERR Error running script (call to f_1): @user_script:3: nil value")) == "ERR"
    assert error_code(redis.exceptions.ResponseError("user_script:1: oops")) is None
    assert error_code(ConnectionResetError()) is None


def test_a_huge_message_is_read_only_at_its_start() -> None:
    # The code is found in the first few hundred characters; the rest is never scanned.
    exc = redis.exceptions.ResponseError("BUSY " + "x" * 10_000_000)
    assert is_unavailable(exc)
    buried = redis.exceptions.ResponseError("Error running script " + "x" * 10_000 + ": @user_script: 1: -OOM no")
    assert not is_unavailable(buried)
