"""``RATELIMIT_REDIS_URL``: the Redis of ``RedisBackend.from_env()`` and the default of every ``--redis``.

A password in a URL typed on a command line shows in ``ps`` and in shell history; in
the environment it does not. These tests set the variable (``monkeypatch``) and check
that the backend and each command use it, that an explicit ``--redis`` still wins,
that a missing variable is a clear error naming it, and that its password is never
printed.
"""

from __future__ import annotations

import json

import pytest
import redis

from ratelimit import ManualClock, RedisBackend, TokenBucket
from ratelimit._stores.redis.backend import REDIS_URL_ENV
from ratelimit.cli import main

from conftest import REDIS_URL, unique_name
from servers import free_port

pytestmark = pytest.mark.redis

SECRET = "envS3cret"


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(REDIS_URL_ENV, raising=False)


def test_the_variable_is_named_ratelimit_redis_url() -> None:
    assert REDIS_URL_ENV == "RATELIMIT_REDIS_URL"


@pytest.mark.usefixtures("no_env")
@pytest.mark.parametrize("value", [None, "", "   "], ids=["unset", "empty", "blank"])
def test_from_env_without_the_variable_names_it(monkeypatch: pytest.MonkeyPatch, value: str | None) -> None:
    if value is not None:
        monkeypatch.setenv(REDIS_URL_ENV, value)
    with pytest.raises(ValueError, match="the environment variable RATELIMIT_REDIS_URL is not set"):
        RedisBackend.from_env()


def test_from_env_decides_through_the_redis_it_names(
    monkeypatch: pytest.MonkeyPatch, redis_client: redis.Redis
) -> None:
    monkeypatch.setenv(REDIS_URL_ENV, f"  {REDIS_URL}  ")
    backend = RedisBackend.from_env(counters=False)
    assert backend.counters is False  # the options go on to from_url
    bucket = TokenBucket(2, 0.001, backend=backend, name=unique_name("env"), clock=ManualClock(1_000.0))
    assert [bucket.try_acquire() for _ in range(3)] == [True, True, False]
    backend.close()


def test_from_env_reads_another_variable_when_told(monkeypatch: pytest.MonkeyPatch, redis_client: redis.Redis) -> None:
    monkeypatch.setenv("MY_LIMITS_REDIS", REDIS_URL)
    monkeypatch.delenv(REDIS_URL_ENV, raising=False)
    backend = RedisBackend.from_env("MY_LIMITS_REDIS")
    bucket = TokenBucket(1, 0.001, backend=backend, name=unique_name("env"), clock=ManualClock(1_000.0))
    assert bucket.try_acquire()
    backend.close()
    with pytest.raises(TypeError, match="variable must be the name of an environment variable, got ''"):
        RedisBackend.from_env("")


def test_from_env_with_a_malformed_url_hides_its_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(REDIS_URL_ENV, f"redis+sentinel://:{SECRET}@")
    with pytest.raises(ValueError, match="bad Redis Sentinel URL") as caught:
        RedisBackend.from_env()
    assert SECRET not in str(caught.value)


# -- the command line ------------------------------------------------------------------


def _limiter_in_redis() -> str:
    name = unique_name("env-cli")
    backend = RedisBackend.from_url(REDIS_URL)
    TokenBucket(5, 1, backend=backend, name=name).try_acquire()
    backend.close()
    return name


def test_inspect_reads_the_redis_of_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], redis_client: redis.Redis
) -> None:
    name = _limiter_in_redis()
    monkeypatch.setenv(REDIS_URL_ENV, REDIS_URL)
    assert main(["inspect", name, "--json"]) == 0
    (found,) = json.loads(capsys.readouterr().out)["limiters"]
    assert found["name"] == name


def test_an_explicit_redis_wins_over_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], redis_client: redis.Redis
) -> None:
    name = _limiter_in_redis()
    monkeypatch.setenv(REDIS_URL_ENV, f"redis://:{SECRET}@127.0.0.1:{free_port()}/0")  # nothing there
    assert main(["inspect", name, "--redis", REDIS_URL, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["limiters"][0]["name"] == name


@pytest.mark.usefixtures("no_env")
@pytest.mark.parametrize("command", [["inspect"], ["top"], ["set", "x", "--rate", "5/s"]], ids=lambda c: c[0])
def test_without_the_variable_redis_is_required(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(command)
    assert exited.value.code == 2
    assert "--redis" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["inspect"], ["top", "--json"]], ids=lambda c: c[0])
def test_an_unreachable_redis_from_the_variable_is_named_without_its_password(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    monkeypatch.setenv(REDIS_URL_ENV, f"redis://user:{SECRET}@127.0.0.1:{free_port()}/0")
    status = main(command)
    out, err = capsys.readouterr()
    assert status != 0
    assert "cannot reach Redis" in err
    assert SECRET not in out + err


@pytest.mark.slow
def test_bench_keeps_its_limiter_in_the_redis_of_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], redis_client: redis.Redis
) -> None:
    monkeypatch.setenv(REDIS_URL_ENV, REDIS_URL)
    assert main(["bench", "--seconds", "0.3", "--processes", "2", "--threads", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["config"]["redis"] == REDIS_URL
    assert "embedded" not in report["backend"]


def test_the_help_names_the_variable_not_its_value(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(REDIS_URL_ENV, f"redis://:{SECRET}@cache.internal:6379/0")
    with pytest.raises(SystemExit):
        main(["inspect", "--help"])
    out = capsys.readouterr().out
    assert REDIS_URL_ENV in out
    assert SECRET not in out
