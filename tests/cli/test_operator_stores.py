"""``ratelimit inspect``, ``set`` and ``top`` are one command over both shared stores:
the same record, the same text and JSON, the same errors, whether ``--store`` names a
Redis or a SQLite file, and never a traceback on a name that is not UTF-8."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from ratelimit import CircuitBreaker, Composite, ConcurrencyLimit, Quota, RedisBackend, SQLiteBackend, TokenBucket
from ratelimit._cli.stores import UnknownStore, backend_from_url, store_of
from ratelimit._stores.operated import Operated
from ratelimit._stores.records import Inspection
from ratelimit.cli import main

from conftest import REDIS_URL, unique_name


@dataclass
class Shared:
    """A shared store, and the URL the command is given for it."""

    backend: RedisBackend | SQLiteBackend
    url: str

    @property
    def operated(self) -> Operated:
        return self.backend


@pytest.fixture(params=["redis", "sqlite"])
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Shared]:
    if request.param == "redis":
        redis_backend = RedisBackend.from_url(REDIS_URL)
        yield Shared(redis_backend, REDIS_URL)
        redis_backend.close()
    else:
        path = tmp_path / "operated.db"
        sqlite_backend = SQLiteBackend(path)
        yield Shared(sqlite_backend, f"sqlite:///{path}")
        sqlite_backend.close()


def _labels(text: str) -> list[str]:
    """The labels of an inspection block's lines (``changed``, ``pause``, ...)."""
    return [line.split()[0] for line in text.splitlines()[1:] if line.startswith("  ")]


def test_inspect_shows_one_record_in_one_shape(shared: Shared, capsys: pytest.CaptureFixture[str]) -> None:
    """Text and JSON come from one record: the first line, the labels a store fills in
    Redis's order, and the JSON keys are the same for both stores."""
    name = unique_name("ops")
    assert TokenBucket(5, 1, backend=shared.backend, name=name).try_acquire()
    assert main(["inspect", name, "--store", shared.url]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0] == f"{name}  (token_bucket)"
    assert _labels(text) == ["code", "changed", "in", "now", "promised", "pause"]  # each store fills every one
    assert main(["inspect", name, "--store", shared.url, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["unknown"] == []
    (limiter,) = shown["limiters"]
    assert set(limiter) == set(Inspection(name).as_dict())
    assert (limiter["name"], limiter["kind"], limiter["known"], limiter["override"]) == (
        name,
        "token_bucket",
        True,
        None,
    )


def _shape(text: str, name: str) -> str:
    """An inspection's text with its numbers (and the name) left out."""
    return re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "N", text.replace(name, "NAME"))


#: What ``inspect`` prints of a TokenBucket that took tokens, whichever store.
_BUCKET = """NAME  (token_bucket)
  code         capacity N tokens, refill_per_sec N/s
  changed      none (the code's values)
  in force     capacity N tokens, refill_per_sec N/s
  now          N tokens could go at once; one token waits N s
  promised     grants reserved ahead: none
  pause        none
"""


def test_inspect_prints_the_same_text_for_both_stores(shared: Shared, capsys: pytest.CaptureFixture[str]) -> None:
    """The same lines, the numbers aside, and the same numbers where no time passes
    to change them: the code, the limit in force, what could go now (a bucket whose
    refill is an hour per token), for a limiter's name and for a key's budget."""
    name = unique_name("ops-same")
    limiter = TokenBucket(5, 1 / 3600, backend=shared.backend, name=name)
    assert limiter.try_acquire(3)
    assert limiter.for_key("k").try_acquire(1)
    assert main(["inspect", name, "--store", shared.url]) == 0
    assert _shape(capsys.readouterr().out, name) == _BUCKET
    seen = shared.operated.inspect(name)
    assert seen.code == seen.effective == {"capacity": 5.0, "refill_per_sec": 1 / 3600}
    assert (seen.slack, seen.shadow, seen.wait_for_one, seen.promised_ahead) == (0.0, False, 0.0, 0.0)
    assert seen.available == pytest.approx(2.0, abs=0.01)
    keyed = shared.operated.inspect(name, key="k")
    assert keyed.code == seen.code
    assert keyed.available == pytest.approx(4.0, abs=0.01)
    assert main(["inspect", name, "--key", "k", "--store", shared.url]) == 0
    assert _shape(capsys.readouterr().out, name).startswith("NAME key k  (token_bucket)\n  code ")
    # All spent: one token more waits an hour; one reserved is promised that far ahead.
    assert limiter.try_acquire(2)
    reservation = limiter.reserve(1, timeout=7200)
    seen = shared.operated.inspect(name)
    assert seen.available == pytest.approx(0.0, abs=1e-3)
    assert seen.wait_for_one == pytest.approx(7200.0, abs=5.0)
    assert seen.promised_ahead == pytest.approx(3600.0, abs=5.0)
    reservation.cancel()
    # Changed at run time: the code as it was, the limit in force as changed.
    shared.operated.set_limit(name, rate=2.0, burst=4.0)
    seen = shared.operated.inspect(name)
    assert seen.code == {"capacity": 5.0, "refill_per_sec": 1 / 3600}
    assert seen.effective == {"capacity": 4.0, "refill_per_sec": 2.0}
    shared.operated.reset_limit(name)


def test_a_reset_limiter_still_shows_its_code(shared: Shared) -> None:
    """A reset forgets the usage, not what the code configured: the name is still
    held, and could grant its whole capacity at once."""
    name = unique_name("ops-reset")
    limiter = TokenBucket(5, 1 / 3600, backend=shared.backend, name=name)
    assert limiter.try_acquire(5)
    limiter.reset()
    assert shared.operated.holds(name)
    seen = shared.operated.inspect(name)
    assert (seen.kind, seen.code) == ("token_bucket", {"capacity": 5.0, "refill_per_sec": 1 / 3600})
    assert seen.available == 5.0
    assert name in {each.name for each in shared.operated.inspect_all()}


def test_composites_and_lanes_show_no_code_on_either_store(shared: Shared) -> None:
    """Only a single limiter keeps what its code configured: a composite's members
    and a budget with priorities tell their keys, as on Redis."""
    pair, lanes = unique_name("ops-two"), unique_name("ops-lanes")
    Composite([TokenBucket(5, 1), TokenBucket(50, 10)], backend=shared.backend, name=pair).acquire()
    TokenBucket(10, 1, low_share=0.5, backend=shared.backend, name=lanes).acquire()
    for name, forms in ((pair, ("composite",)), (lanes, ("priorities",))):
        seen = shared.operated.inspect(name)
        assert seen.forms == forms
        assert (seen.kind, seen.code, seen.effective, seen.available) == (None, None, None, None)


def test_set_then_inspect_then_reset(shared: Shared, capsys: pytest.CaptureFixture[str]) -> None:
    name = unique_name("ops-set")
    assert TokenBucket(10, 2, backend=shared.backend, name=name).try_acquire()
    assert main(["set", name, "--rate", "30/min", "--burst", "4", "--for", "1h", "--store", shared.url]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{name}: rate 0.5/s, burst 4 tokens; ends in")
    assert f"{name}  (token_bucket)" in out
    seen = shared.operated.inspect(name)
    assert seen.override is not None
    assert (seen.override.rate, seen.override.burst) == (0.5, 4.0)
    assert main(["inspect", name, "--store", shared.url]) == 0
    assert "  changed      rate 0.5/s, burst 4 tokens; ends in" in capsys.readouterr().out
    assert main(["set", name, "--reset", "--store", shared.url]) == 0
    assert f"{name}: back to the code's values" in capsys.readouterr().out
    assert shared.operated.limit_override(name) is None
    assert main(["set", name, "--reset", "--store", shared.url]) == 0
    assert "(no change was in force)" in capsys.readouterr().out


def test_set_says_which_keys_it_reached_and_changes_one_key(shared: Shared, capsys: pytest.CaptureFixture[str]) -> None:
    """A change by name tells how many keys in use it reached and whether later keys
    follow; ``--key`` changes one key's budget alone, which a change by name then
    leaves as it is."""
    name = unique_name("ops-keys")
    limiter = TokenBucket(10, 2, backend=shared.backend, name=name)
    assert limiter.try_acquire()
    for key in ("a", "b"):
        assert limiter.for_key(key).try_acquire()
    assert main(["set", name, "--key", "a", "--burst", "3", "--store", shared.url]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{name} key a: burst 3 tokens; until reset")
    assert "keys (for_key)" not in out
    assert main(["set", name, "--burst", "5", "--store", shared.url]) == 0
    keys_line = capsys.readouterr().out.splitlines()[1]
    later = "any used later follow it" if shared.backend.later_keys_follow else "first used later starts at the code"
    assert keys_line.startswith("keys (for_key): ")
    assert later in keys_line
    assert shared.operated.inspect(name, key="a").effective == {"capacity": 3.0, "refill_per_sec": 2.0}
    assert shared.operated.inspect(name, key="b").effective == {"capacity": 5.0, "refill_per_sec": 2.0}
    assert main(["set", name, "--key", "a", "--reset", "--store", shared.url]) == 0
    assert f"{name} key a: back to the code's values" in capsys.readouterr().out


def test_set_takes_a_name_that_only_its_keys_use(shared: Shared, capsys: pytest.CaptureFixture[str]) -> None:
    """A limiter that decides on its keys alone (an incoming middleware's) is no typo:
    its change needs no --force, and reaches each key."""
    name = unique_name("ops-keys-only")
    limiter = TokenBucket(10, 2, backend=shared.backend, name=name)
    assert limiter.for_key("a").try_acquire()
    assert not shared.operated.holds(name)
    assert shared.operated.keys_in_use(name) == 1
    assert main(["set", name, "--burst", "5", "--store", shared.url]) == 0
    assert "1 key in use" in capsys.readouterr().out
    assert shared.operated.inspect(name, key="a").effective == {"capacity": 5.0, "refill_per_sec": 2.0}


def test_set_refuses_a_composite_s_members(shared: Shared, capsys: pytest.CaptureFixture[str]) -> None:
    name = unique_name("ops-pair")
    Composite([TokenBucket(5, 1), TokenBucket(50, 10)], backend=shared.backend, name=name).acquire()
    assert main(["set", name, "--rate", "1/s", "--store", shared.url]) == 1
    err = capsys.readouterr().err
    assert "composite" in err
    assert err.count("\n") == 1
    seen = shared.operated.inspect(name)
    assert seen.forms == ("composite",)
    assert seen.other_keys == ("0:token_bucket", "1:token_bucket")
    assert seen.override is None


def test_bad_values_are_usage_errors(shared: Shared, capsys: pytest.CaptureFixture[str]) -> None:
    name = unique_name("ops-bad")
    assert TokenBucket(5, 1, backend=shared.backend, name=name).try_acquire()
    with pytest.raises(SystemExit) as exited:
        main(["set", name, "--burst", "1e13", "--store", shared.url])
    assert exited.value.code == 2
    assert "burst must be between" in capsys.readouterr().err
    assert shared.operated.limit_override(name) is None


def test_an_unknown_name_says_so(shared: Shared, capsys: pytest.CaptureFixture[str]) -> None:
    name = unique_name("ops-nobody")
    assert main(["inspect", name, "--store", shared.url]) == 1
    assert capsys.readouterr().out.startswith(f"{name}: unknown")
    assert main(["inspect", name, "--store", shared.url, "--json"]) == 1
    assert json.loads(capsys.readouterr().out) == {"limiters": [], "unknown": [name]}
    assert not shared.operated.inspect(name).known


def test_a_key_s_budget_is_inspected_apart_and_not_listed_as_a_name(
    shared: Shared, capsys: pytest.CaptureFixture[str]
) -> None:
    name = unique_name("ops-keyed")
    limiter = TokenBucket(3, 1, backend=shared.backend, name=name)
    assert limiter.for_key("tenant-7").try_acquire()
    assert main(["inspect", name, "--key", "tenant-7", "--store", shared.url, "--json"]) == 0
    (seen,) = json.loads(capsys.readouterr().out)["limiters"]
    assert (seen["name"], seen["key"], seen["kind"]) == (name, "tenant-7", "token_bucket")
    assert main(["inspect", name, "--key", "tenant-7", "--store", shared.url]) == 0
    assert capsys.readouterr().out.startswith(f"{name} key tenant-7  (token_bucket)")
    assert not shared.operated.inspect(name).known  # the name's own budget was never used
    assert limiter.try_acquire()
    every = shared.operated.inspect_all()
    assert [(each.name, each.key) for each in every if each.name == name] == [(name, None)]


def test_a_breaker_and_a_concurrency_limit_are_shown(shared: Shared) -> None:
    name = unique_name("ops-held")
    limit = ConcurrencyLimit(2, backend=shared.backend, name=name, lease_seconds=30)
    first = limit.take()
    seen = shared.operated.inspect(name)
    assert seen.concurrency is not None
    assert (seen.concurrency.held, seen.concurrency.queued) == (1, 0)
    assert seen.forms == ("concurrency",)
    first.release()
    breaker_name = unique_name("ops-breaker")
    breaker = CircuitBreaker(min_calls=1, failure_threshold=0.5, backend=shared.backend, name=breaker_name)
    breaker.record(breaker.allow(), False)
    seen = shared.operated.inspect(breaker_name)
    assert seen.known
    assert seen.breaker == "open"
    assert seen.breaker_opened_at is not None
    assert seen.now is not None
    assert 0 <= seen.now - seen.breaker_opened_at < 60


def test_top_shows_the_same_columns(shared: Shared, capsys: pytest.CaptureFixture[str]) -> None:
    name = unique_name("ops-top")
    limiter = TokenBucket(5, 1, backend=shared.backend, name=name)
    assert limiter.try_acquire()
    if isinstance(shared.backend, SQLiteBackend):
        shared.backend.write_counts()  # each process writes its counts once a second
    assert main(["top", "--store", shared.url, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    (row,) = [each for each in shown["limiters"] if each["name"] == name]
    assert row["kind"] == "token_bucket"
    assert set(row) == {
        "name",
        "kind",
        "shadow",
        "grants_per_sec",
        "refusals_per_sec",
        "leased_per_sec",
        "withdrawn_per_sec",
        "p99_wait",
        "pauses_last_minute",
        "paused_for",
        "breaker",
        "idle_seconds",
        "in_flight",
    }
    assert main(["top", "--store", shared.url, "--iterations", "1"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[2].startswith("NAME")
    assert any(line.startswith(name) for line in out.splitlines())


# -- names that are not UTF-8 ------------------------------------------------------------


def _terminal_safe(text: str) -> None:
    assert [c for c in text if not c.isprintable() and c != "\n"] == [], text


def test_a_latin1_name_in_redis_never_stops_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    run = unique_name("lat")  # short enough for top's column
    name = f"{run}-caf\u00e9"
    latin = redis.Redis.from_url(REDIS_URL, encoding="latin-1")
    backend = RedisBackend(latin, coalesce=False)
    assert TokenBucket(5, 10, backend=backend, name=name).try_acquire()
    read_back = name.encode("latin-1").decode("utf-8", "surrogateescape")
    for argv in (["inspect"], ["inspect", "--json"], ["top", "--iterations", "1"], ["top", "--json"]):
        assert main([*argv, "--store", REDIS_URL]) == 0, argv
        out = capsys.readouterr().out
        _terminal_safe(out)
        assert f"{run}-caf\\xe9" in out or f"{run}-caf\\udce9" in out, argv
    assert main(["inspect", read_back, "--store", REDIS_URL]) == 0
    assert f"{run}-caf\\xe9  (token_bucket)" in capsys.readouterr().out
    latin.close()


def _odd_rows(path: Path, now: float) -> None:
    """Rows a hand may write: a name that is a BLOB, and text that is not UTF-8."""
    conn = sqlite3.connect(path)
    with conn:
        for name in ("x'626c6f62'", "CAST(x'636166e9' AS TEXT)"):
            conn.execute(
                "INSERT INTO ratelimit_state (name, member, kind, number, blob, idle, updated, test)"
                f" VALUES ({name}, -1, 'token_bucket', 1.0, NULL, 0, 0, 0)"
            )
            conn.execute(
                f"INSERT INTO ratelimit_top (name, kind, shadow, second, w1) VALUES ({name}, 'token_bucket', 0, ?, 3)",
                (int(now) - 1,),
            )
    conn.close()


def test_odd_names_in_a_sqlite_file_never_stop_the_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "odd.db"
    backend = SQLiteBackend(path)
    assert TokenBucket(5, 1, backend=backend, name="plain").try_acquire()
    backend.write_counts()
    _odd_rows(path, backend.now())
    url = f"sqlite:///{path}"
    for argv in (["inspect"], ["inspect", "--json"], ["top", "--iterations", "1"], ["top", "--json"]):
        assert main([*argv, "--store", url]) == 0, argv
        out = capsys.readouterr().out
        _terminal_safe(out)
        assert "caf\\xe9" in out or "caf\\udce9" in out, argv
        assert "blob" in out, argv
        assert "plain" in out, argv
    assert {each.name for each in backend.inspect_all()} == {"blob", "caf\udce9", "plain"}
    assert {row.name for row in backend.top()} >= {"blob", "caf\udce9"}
    odd = backend.inspect("caf\udce9")
    assert (odd.known, odd.kind) == (True, "token_bucket")
    assert backend.inspect("blob").kind == "token_bucket"
    assert main(["inspect", "caf\udce9", "--store", url]) == 0
    assert "caf\\xe9  (token_bucket)" in capsys.readouterr().out
    backend.close()


# -- which store a URL names -------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "store"),
    [
        ("redis://127.0.0.1:6379/0", "redis"),
        ("rediss://host:6380/0", "redis"),
        ("unix:///run/redis.sock", "redis"),
        ("redis+sentinel://host:26379/service", "redis"),
        ("REDIS://host", "redis"),
        ("sqlite:///x.db", "sqlite"),
        ("sqlite:////tmp/x.db", "sqlite"),
    ],
)
def test_the_store_is_picked_by_the_url_s_scheme(url: str, store: str) -> None:
    assert store_of(url) == store


def test_backend_from_url_makes_the_store_named(tmp_path: Path) -> None:
    made = backend_from_url(f"sqlite:///{tmp_path}/x.db")
    assert isinstance(made, SQLiteBackend)
    made.close()
    made = backend_from_url(REDIS_URL, cluster=False)
    assert isinstance(made, RedisBackend)
    made.close()


@pytest.mark.parametrize(
    "url", ["http://user:hunter2@host/x", "mysql://:hunter2@host/db", "sqlite://relative.db", "host:6379"]
)
def test_a_url_of_no_store_is_refused_naming_its_scheme(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UnknownStore) as refused:
        store_of(url)
    assert "hunter2" not in str(refused.value)
    assert url.partition(":")[0] in str(refused.value)
    with pytest.raises(SystemExit) as exited:
        main(["inspect", "--store", url])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "hunter2" not in err
    assert "redis://" in err
    assert "sqlite:///PATH" in err


def test_a_file_that_cannot_be_opened_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path}/missing/x.db"
    for argv in (["inspect"], ["top", "--json"], ["set", "x", "--rate", "1/s"]):
        assert main([*argv, "--store", url]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"ratelimit {argv[0]}: error: cannot use the SQLite store at {url}: ")
        assert err.count("\n") == 1


def test_cluster_is_refused_with_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["inspect", "--cluster", "--store", f"sqlite:///{tmp_path}/x.db"])
    assert exited.value.code == 2
    assert "--cluster" in capsys.readouterr().err


# -- a calendar quota ---------------------------------------------------------------------


def test_a_quota_is_inspected_and_changed_like_any_limiter(shared: Shared, capsys: pytest.CaptureFixture[str]) -> None:
    """Its limit and the current period's length; what is left of the period; a change
    at run time sets a new limit per period, the tokens used kept; a burst is refused."""
    name = unique_name("ops-quota")
    limiter = Quota(5, "day", tz="America/New_York", backend=shared.backend, name=name)
    assert limiter.try_acquire(3)
    assert main(["inspect", name, "--store", shared.url]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0] == f"{name}  (quota)"
    assert "  code         limit 5 tokens, period " in text
    seen = shared.operated.inspect(name)
    assert seen.code is not None
    day = seen.code["period"]
    assert seen.code == seen.effective == {"limit": 5.0, "period": day}
    assert day in (23 * 3600, 24 * 3600, 25 * 3600)
    assert seen.available == pytest.approx(2.0)
    assert seen.wait_for_one == 0.0
    shared.operated.set_limit(name, rate=4 / 86400)  # `ratelimit set --rate 4/day`
    assert shared.operated.inspect(name).effective == {"limit": 4.0, "period": day}
    assert limiter.try_acquire(1)
    assert not limiter.try_acquire(1)  # 3 + 1 of the new 4
    with pytest.raises(ValueError, match="is a quota, which has no burst"):
        shared.operated.set_limit(name, burst=10.0)
    shared.operated.reset_limit(name)
    assert limiter.try_acquire(1)
    if isinstance(shared.backend, SQLiteBackend):
        shared.backend.write_counts()
    assert main(["top", "--store", shared.url, "--json"]) == 0
    (row,) = [each for each in json.loads(capsys.readouterr().out)["limiters"] if each["name"] == name]
    assert row["kind"] == "quota"
