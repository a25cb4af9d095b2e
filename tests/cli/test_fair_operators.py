"""What an operator sees of a FairShare's budget on a shared store: ``ratelimit
inspect`` and ``top`` show it and its tenants (boundedly, however many), and a change
at run time is refused, naming why, from the limiter, by name and from the CLI."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from ratelimit import FairShare, RedisBackend, SQLiteBackend, TokenBucket
from ratelimit._stores.memory.backend import MemoryBackend
from ratelimit._stores.records import TENANTS_SHOWN, UnchangeableLimit
from ratelimit._stores.redis.key_survey import probe, survey
from ratelimit.cli import main

from conftest import REDIS_URL, unique_name


@dataclass
class Shared:
    """A shared store, and the URL the command is given for it."""

    backend: RedisBackend | SQLiteBackend
    url: str


@pytest.fixture(params=["redis", "sqlite"])
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Shared]:
    if request.param == "redis":
        redis_backend = RedisBackend.from_url(REDIS_URL)
        yield Shared(redis_backend, REDIS_URL)
        redis_backend.close()
    else:
        path = tmp_path / "fair.db"
        sqlite_backend = SQLiteBackend(path)
        yield Shared(sqlite_backend, f"sqlite:///{path}")
        sqlite_backend.close()


def _busy_share(shared: Shared, name: str) -> tuple[TokenBucket, FairShare]:
    """A share whose two tenants each took a grant: both paced ahead of now."""
    limiter = TokenBucket(5, 1, backend=shared.backend, name=name)
    share = FairShare(limiter, weights={"acme": 3})
    share.for_key("acme").acquire()
    share.for_key("globex").acquire()
    return limiter, share


def test_inspect_shows_a_fair_share_and_its_tenants(shared: Shared, capsys: pytest.CaptureFixture[str]) -> None:
    """A name used only through a FairShare is known: its form, its budget's kind, its
    tenants paced ahead with their weights, and that a change is refused."""
    name = unique_name("fairops")
    _, share = _busy_share(shared, name)
    assert main(["inspect", name, "--store", shared.url]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert lines[0] == f"{name}  (fair)"
    assert "  fair         a FairShare's token_bucket budget; 2 tenants paced ahead of now" in lines
    tenants = [line for line in lines if line.startswith("  tenant ")]
    # Furthest ahead first: globex weighs 1, so its one grant paces it further.
    assert re.fullmatch(r"  tenant       globex: weight 1, paced [\d.]+ s ahead", tenants[0])
    assert re.fullmatch(r"  tenant       acme: weight 3, paced [\d.]+ s ahead", tenants[1])
    assert lines[-1].startswith("  set          refused")
    assert main(["inspect", name, "--store", shared.url, "--json"]) == 0
    (seen,) = json.loads(capsys.readouterr().out)["limiters"]
    assert seen["forms"] == ["fair"]
    assert seen["other_keys"] == []
    fair = seen["fair"]
    assert (fair["kind"], fair["active"]) == ("token_bucket", 2)
    assert [(t["tenant"], t["weight"]) for t in fair["ahead"]] == [("globex", 1.0), ("acme", 3.0)]
    assert all(0 < t["ahead_seconds"] <= 10.0 for t in fair["ahead"])
    share.reset()


def test_every_name_listing_and_top_include_a_fair_share(shared: Shared, capsys: pytest.CaptureFixture[str]) -> None:
    """``inspect`` with no name lists it; ``top`` has a row of kind ``fair`` with its
    tenants, and a note saying what it is."""
    name = unique_name("fairops")
    _, share = _busy_share(shared, name)
    assert name in [each.name for each in shared.backend.inspect_all()]
    assert main(["top", "--store", shared.url, "--iterations", "1"]) == 0
    text = capsys.readouterr().out
    (row,) = [line for line in text.splitlines() if line.startswith(name)]
    assert row.split()[1:4] == ["fair", "(2", "tenants)"]
    assert "fair: a FairShare's budget, with its tenants paced ahead of now (its grants are not counted)" in text
    assert main(["top", "--store", shared.url, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["limiters"]
    (mine,) = [each for each in rows if each["name"] == name]
    assert (mine["kind"], mine["tenants"], mine["grants_per_sec"]) == ("fair", 2, None)
    # Other rows read as they always have: no tenants field.
    assert all("tenants" not in each for each in rows if each["kind"] != "fair")
    share.reset()


def test_a_change_to_a_fair_share_is_refused_naming_why(shared: Shared, capsys: pytest.CaptureFixture[str]) -> None:
    """The share's state never reads a change: the limiter, the store by name and the
    CLI refuse it, and nothing is stored."""
    name = unique_name("fairops")
    limiter, share = _busy_share(shared, name)
    with pytest.raises(UnchangeableLimit, match="FairShare's budget"):
        limiter.set_limit(rate=10)
    with pytest.raises(UnchangeableLimit, match="FairShare's budget"):
        shared.backend.set_limit(name, rate=10)
    assert main(["set", name, "--rate", "10/s", "--store", shared.url]) == 1
    assert "FairShare's budget" in capsys.readouterr().err
    assert shared.backend.limit_override(name) is None
    share.reset()


@pytest.mark.parametrize("named", [True, False], ids=["named", "unnamed"])
def test_a_change_to_a_fair_share_in_process_is_refused(named: bool) -> None:
    """In process too, named on a backend or unnamed: refused, not taken and ignored."""
    backend = MemoryBackend() if named else None
    limiter = TokenBucket(5, 1, backend=backend, name="fairops-in-process" if named else None)
    share = FairShare(limiter)
    share.for_key("a").acquire()
    with pytest.raises(UnchangeableLimit, match="FairShare's budget"):
        limiter.set_limit(rate=10, burst=2)
    if backend is not None:
        with pytest.raises(UnchangeableLimit, match="FairShare's budget"):
            backend.set_limit("fairops-in-process", rate=10)


def test_a_tenant_key_is_escaped_and_cut(shared: Shared, capsys: pytest.CaptureFixture[str]) -> None:
    """Tenant keys come from callers: an escape sequence is shown escaped, a long key cut."""
    name = unique_name("fairops")
    share = FairShare(TokenBucket(5, 1, backend=shared.backend, name=name))
    share.for_key("\x1b[31m" + "x" * 150).acquire()
    assert main(["inspect", name, "--store", shared.url]) == 0
    (line,) = [each for each in capsys.readouterr().out.splitlines() if each.startswith("  tenant ")]
    assert "\x1b" not in line
    assert "\\x1b[31m" in line
    assert len(line) < 120
    share.reset()


def test_inspection_reads_a_few_of_many_tenants(shared: Shared) -> None:
    """Many tenants: all counted, only the few furthest ahead read and shown."""
    name = unique_name("fairops")
    share = FairShare(TokenBucket(30, 1, backend=shared.backend, name=name))
    for i in range(30):
        share.for_key(f"t{i}").acquire()
    fair = shared.backend.inspect(name).fair
    assert fair is not None
    assert fair.active == 30
    assert len(fair.ahead) == TENANTS_SHOWN
    finishes = [ahead for _, ahead, _ in fair.ahead]
    assert finishes == sorted(finishes, reverse=True)
    share.reset()


@pytest.fixture
def client() -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(REDIS_URL)
    try:
        connection.ping()
    except redis.ConnectionError:
        pytest.skip("no Redis")
    yield connection
    connection.close()


def test_a_hundred_thousand_tenants_on_redis_cost_a_count_and_a_few(client: redis.Redis) -> None:
    """100,000 tenants in the sorted set: the inspection counts them on the server and
    reads five (written here directly, as the script keeps them)."""
    name = unique_name("fairops")
    backend = RedisBackend.from_url(REDIS_URL)
    share = FairShare(TokenBucket(5, 1, backend=backend, name=name))
    share.for_key("a").acquire()
    tenants = f"ratelimit:{{{name}}}:fair:token_bucket:tenants"
    now = float(client.time()[0])
    members = {f"t{i}": now + 100 + i / 1000 for i in range(100_000)}
    pipe = client.pipeline(transaction=False)
    chunk = list(members.items())
    for start in range(0, len(chunk), 10_000):
        pipe.zadd(tenants, dict(chunk[start : start + 10_000]))
    pipe.execute()
    try:
        fair = backend.inspect(name).fair
        assert fair is not None
        assert fair.active == 100_001
        assert [tenant for tenant, _, _ in fair.ahead] == [f"t{i}" for i in range(99_999, 99_994, -1)]
        assert all(weight is None for _, _, weight in fair.ahead)  # no weight stored for them
    finally:
        client.delete(
            tenants, f"ratelimit:{{{name}}}:fair:token_bucket", f"ratelimit:{{{name}}}:fair:token_bucket:weights"
        )
        backend.close()


def test_the_key_survey_knows_a_fair_share_by_any_of_its_keys(client: redis.Redis) -> None:
    """The line's key, or its tenants' alone (the line expired first), says the root
    ``fair:<kind>``; a keyed share's keys are not a name of their own."""
    name = unique_name("fairops")
    backend = RedisBackend.from_url(REDIS_URL)
    share = FairShare(TokenBucket(5, 1, backend=backend, name=name))
    share.for_key("a").acquire()
    keyed = FairShare(TokenBucket(5, 1, backend=backend, name=name).for_key("k"))
    keyed.for_key("a").acquire()
    line = f"ratelimit:{{{name}}}:fair:token_bucket"
    try:
        assert survey(client)[name] == frozenset({"fair:token_bucket"})
        assert probe(client, [name])[0][name] == frozenset({"fair:token_bucket"})
        client.delete(line)
        assert survey(client)[name] == frozenset({"fair:token_bucket"})
        assert probe(client, [name])[0][name] == frozenset({"fair:token_bucket"})
    finally:
        share.reset()
        keyed.reset()
        backend.close()
