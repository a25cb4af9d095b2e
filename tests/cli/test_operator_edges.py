"""The operator commands (``inspect``, ``set``, ``top``) at their edges: limiters that
never read a change, hostile names, many limiters, ConcurrencyLimit, a Cluster node,
a closed output pipe, an unreachable Sentinel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.connection
from hypothesis import given
from hypothesis import strategies as st

from ratelimit import Adaptive, Composite, ConcurrencyLimit, RedisBackend, SlidingWindow, TokenBucket
from ratelimit._stores.keys import config_key, key_for
from ratelimit._stores.redis.config import inspect
from ratelimit._stores.redis.fleet import fleet
from ratelimit._stores.redis.scripts import library, single_script
from ratelimit.cli import main

from conftest import REDIS_URL, unique_name
from servers import RedisServer, free_port

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*argv: str, stdout: Any = subprocess.PIPE) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "ratelimit", *argv], stdout=stdout, stderr=subprocess.PIPE, text=True, env=env,
        timeout=60, check=False,
    )  # fmt: skip


# -- item 6: `set` on limiters that never read a change -------------------------------


def _adaptive(backend: RedisBackend, name: str) -> Any:
    return TokenBucket(5, 10, backend=backend, name=name, adaptive=Adaptive(1.0))


def _member(backend: RedisBackend, name: str) -> Any:
    return Composite([TokenBucket(5, 10), SlidingWindow(10, 60)], backend=backend, name=name)


def _lanes(backend: RedisBackend, name: str) -> Any:
    return TokenBucket(5, 10, backend=backend, name=name, low_share=0.5)


@pytest.mark.parametrize(
    ("build", "what"),
    [(_adaptive, "adaptive"), (_member, "composite"), (_lanes, "priorities")],
)
def test_set_refuses_a_limiter_that_never_reads_a_change(
    redis_client: redis.Redis, build: Any, what: str, capsys: pytest.CaptureFixture[str]
) -> None:
    name = unique_name(f"unchangeable-{what}")
    backend = RedisBackend(redis_client, coalesce=False)
    limiter = build(backend, name)
    assert limiter.try_acquire()
    with pytest.raises(ValueError, match=what) as caught:
        backend.set_limit(name, rate=1)
    assert type(caught.value).__name__ == "UnchangeableLimit"
    assert name in str(caught.value)
    assert redis_client.exists(config_key(name)) == 0
    # From a shell: a non-zero exit, one line that says why, nothing stored.
    assert main(["set", name, "--rate", "1/s", "--redis", REDIS_URL]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert what in captured.err
    assert "nothing was changed" in captured.err
    assert captured.err.count("\n") == 1
    assert redis_client.exists(config_key(name)) == 0
    # Going back to the code's values is always allowed.
    assert main(["set", name, "--reset", "--redis", REDIS_URL]) == 0
    backend.close()


def test_set_refuses_a_concurrency_limit(redis_client: redis.Redis) -> None:
    name = unique_name("unchangeable-concurrency")
    backend = RedisBackend(redis_client, coalesce=False)
    limit = ConcurrencyLimit(2, backend=backend, name=name)
    with limit.hold(), pytest.raises(ValueError, match="ConcurrencyLimit"):
        backend.set_limit(name, rate=1)
    backend.close()


def test_set_still_changes_a_single_limiter_and_one_not_seen_yet(redis_client: redis.Redis) -> None:
    name = unique_name("changeable")
    backend = RedisBackend(redis_client, coalesce=False)
    limiter = TokenBucket(5, 10, backend=backend, name=name)
    assert limiter.try_acquire()
    backend.set_limit(name, rate=1)
    assert backend.limit_override(name) is not None
    fresh = unique_name("changeable-fresh")
    backend.set_limit(fresh, rate=1)
    assert backend.limit_override(fresh) is not None
    backend.close()


# -- item 7: terminal escapes in names --------------------------------------------------

HOSTILE = [
    "\x1b]0;pwned\x07title",  # sets the window title
    "\x1b[2J\x1b[Hclear",  # clears the screen
    "row\roverwrite\x1b[1A",  # overwrites rows
    "a" * 24 + "\x1b[31mred-left-on",  # cut at 27 characters by `top`: a colour left on
    "bidi\u202egnp.exe",  # reverses what follows
    "c1\x9b31mcontrol",  # the 8-bit CSI
]


def _terminal_safe(text: str) -> None:
    bad = [c for c in text if not c.isprintable() and c != "\n"]
    assert bad == [], text


def test_names_not_in_utf8_are_shown_and_addressed_as_their_bytes(
    redis_client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    """A limiter named through a latin-1 client (a redis-py option) has a key that is not
    UTF-8: ``inspect`` of all names and ``top`` show it with the byte escaped, and the
    name as a shell gives such bytes (``$'caf\\xe9'``) addresses that same key."""
    run = unique_name("latin")
    name = f"{run}-caf\u00e9"
    latin = redis.Redis.from_url(REDIS_URL, encoding="latin-1")
    backend = RedisBackend(latin, coalesce=False)
    assert TokenBucket(5, 10, backend=backend, name=name).try_acquire()
    shown = f"{run}-caf\\xe9"
    assert main(["inspect", "--redis", REDIS_URL]) == 0
    out = capsys.readouterr().out
    _terminal_safe(out)
    assert f"{shown}  (token_bucket)" in out
    assert main(["inspect", "--redis", REDIS_URL, "--json"]) == 0
    assert name.encode("latin-1").decode("utf-8", "surrogateescape") in {
        each["name"] for each in json.loads(capsys.readouterr().out)["limiters"]
    }
    assert main(["top", "--redis", REDIS_URL, "--iterations", "1", "--interval", "0.01"]) == 0
    out = capsys.readouterr().out
    _terminal_safe(out)
    assert any(line.startswith(shown) for line in out.splitlines())
    # Through a client that encodes strictly too: what is read back is sent back as read.
    read_back = name.encode("latin-1").decode("utf-8", "surrogateescape")
    assert read_back in {row.name for row in fleet(redis_client)}
    assert inspect(redis_client, read_back).kind == "token_bucket"
    # The operator's shell hands the command those bytes as they are.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    raw = name.encode("latin-1")
    argv: list[str | bytes] = [sys.executable, "-m", "ratelimit", "set", raw, "--rate", "1/s", "--redis", REDIS_URL]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert f"{shown}: rate 1/s" in done.stdout
    assert backend.limit_override(name) is not None  # the limiter's own key holds it
    argv = [sys.executable, "-m", "ratelimit", "inspect", raw, "--redis", REDIS_URL, "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    (seen,) = json.loads(done.stdout)["limiters"]
    assert seen["kind"] == "token_bucket"
    assert seen["override"]["rate"] == 1.0
    latin.delete(*latin.scan_iter(match=f"ratelimit:{{{run}-*"))
    latin.close()


def test_names_reach_the_terminal_escaped(redis_client: redis.Redis, capsys: pytest.CaptureFixture[str]) -> None:
    run = unique_name("esc")
    backend = RedisBackend(redis_client, coalesce=False)
    names = [f"{run}-{hostile}" for hostile in HOSTILE]
    for name in names:
        assert TokenBucket(5, 10, backend=backend, name=name).try_acquire()
    assert main(["inspect", *names, "--redis", REDIS_URL]) == 0
    out = capsys.readouterr().out
    _terminal_safe(out)
    assert f"{run}-\\x1b]0;pwned\\x07title" in out
    assert main(["top", "--redis", REDIS_URL, "--iterations", "1", "--interval", "0.01"]) == 0
    out = capsys.readouterr().out
    _terminal_safe(out)
    rows = [line for line in out.splitlines() if line.startswith(run)]
    assert len(rows) == len(HOSTILE)
    # Every row as wide as the others: the cut counts what the terminal shows.
    assert len({len(row) for row in rows}) == 1
    assert main(["set", names[0], "--rate", "1/s", "--redis", REDIS_URL]) == 0
    _terminal_safe(capsys.readouterr().out)
    # --json was already safe, and stays exact.
    assert main(["inspect", names[1], "--redis", REDIS_URL, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["limiters"][0]["name"] == names[1]
    backend.close()


def test_a_cut_never_splits_an_escape() -> None:
    from ratelimit._cli.printable import fit, printable

    assert printable("a\x1bb\tc\u202ed\\e") == "a\\x1bb\\tc\\u202ed\\e"
    for width in range(1, 12):
        cut = fit("ab\x1b[31mcd", width)
        _terminal_safe(cut)
        # Only whole escapes: the text cut is a prefix of the whole, ended at a unit.
        whole = printable("ab\x1b[31mcd")
        assert whole.startswith(cut.removesuffix("~"))
        assert not cut.removesuffix("~").endswith(("\\", "\\x", "\\x1"))
        assert len(cut) <= width
    # Wide characters take two columns.
    assert fit("界界界界", 5) == "界界~"


@given(st.binary(max_size=40))
def test_any_key_bytes_are_read_as_text_that_is_sent_back_as_those_bytes(raw: bytes) -> None:
    from ratelimit._cli.printable import printable
    from ratelimit._stores.keys import text_of, wire

    text = text_of(raw)
    assert wire(text) in (raw, text)
    assert (wire(text) if isinstance(wire(text), bytes) else text.encode()) == raw
    shown = printable(text)
    assert shown.isprintable()
    shown.encode("utf-8")  # a terminal can take it whole (no lone surrogate)


def test_a_byte_that_is_not_utf8_is_shown_as_that_byte() -> None:
    from ratelimit._cli.printable import pad, printable
    from ratelimit._stores.keys import text_of

    assert printable(text_of(b"caf\xe9")) == "caf\\xe9"
    assert printable(text_of("café".encode())) == "café"
    assert pad(text_of(b"\xff\xfe"), 8) == "\\xff\\xfe"


# -- item 8: round trips and SCANs --------------------------------------------------------


@pytest.fixture(scope="module")
def private_redis() -> Iterator[RedisServer]:
    """A server of our own: its SCANs and keyspace are this module's alone."""
    with RedisServer() as server:
        yield server


def _fill(client: redis.Redis, names: list[str]) -> None:
    script = single_script("token_bucket")
    client.script_load(script.source)
    pipe = client.pipeline(transaction=False)
    for name in names:
        keys = [key_for(name, "token_bucket"), config_key(name), f"ratelimit:{{{name}}}:code"]
        pipe.evalsha(script.sha, 3, *keys, "reserve", "", "1", "", "100", "1", "0", "0")
    pipe.execute()


class Counted:
    """The round trips (packets of commands sent) and SCANs of every connection, but
    for each new connection's handshake (HELLO, CLIENT SETINFO, ...)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.trips = 0
        self.scans = 0
        send: Any = redis.connection.AbstractConnection.send_packed_command

        def counting(conn: Any, command: Any, check_health: bool = True) -> None:
            self.trips += 1
            packed = b"".join(command) if isinstance(command, list) else command
            if packed.split(b"\r\n")[2] in (b"HELLO", b"CLIENT"):
                self.trips -= 1
            self.scans += packed.count(b"\r\nSCAN\r\n")
            send(conn, command, check_health)

        monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counting)


def _stats(client: redis.Redis) -> tuple[int, int]:
    seen: dict[str, Any] = client.info("commandstats")
    return sum(int(v["calls"]) for v in seen.values()), int(seen.get("cmdstat_scan", {}).get("calls", 0))


@pytest.mark.servers
def test_inspect_set_and_top_take_few_round_trips(
    private_redis: RedisServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    client = redis.Redis.from_url(private_redis.url)
    names = [unique_name("many") for _ in range(600)]
    _fill(client, names)
    url = private_redis.url
    # Loaded beforehand, as on a server already in use: a fresh one's first script call
    # also looks for the library and loads it, once.
    client.function_load(library().source, replace=True)
    counted = Counted(monkeypatch)
    # Every name: one SCAN pass (1,000 keys a page), then pipelines, not a SCAN per name.
    keys = client.dbsize()
    before = _stats(client)
    assert main(["inspect", "--redis", url, "--json"]) == 0
    after = _stats(client)
    assert len(json.loads(capsys.readouterr().out)["limiters"]) == len(names)
    pages = keys // 1000 + 2
    assert after[1] - before[1] <= pages
    assert counted.trips <= pages + 20
    # One name: inspect scans nothing; a change by name one SCAN pass for the name's
    # keys in use (for_key views), which it writes, and the record later keys carry (a
    # read and a write): a bounded number of round trips, whatever the names held.
    for argv, scans, more in (
        (["inspect", names[0]], 0, 0),
        (["set", names[1], "--rate", "5/s"], pages, 4),
        (["set", names[1], "--reset"], pages, 4),
    ):
        before = _stats(client)
        counted.trips = 0
        assert main([*argv, "--redis", url]) == 0
        assert _stats(client)[1] - before[1] <= scans, argv
        assert counted.trips <= 12 + more + scans, argv
    capsys.readouterr()
    # top: a pipeline for all limiters, not a round trip each.
    counted.trips = 0
    assert main(["top", "--redis", url, "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["limiters"]) == len(names)
    assert counted.trips <= pages + 10
    client.close()


# -- item 9: ConcurrencyLimit in inspect and top; names with ":injected:" -----------------


def test_inspect_and_top_show_a_concurrency_limit(
    redis_client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    name = unique_name("slots")
    backend = RedisBackend(redis_client, coalesce=False)
    limit = ConcurrencyLimit(3, backend=backend, name=name)
    with limit.hold(), limit.hold():
        seen = inspect(redis_client, name)
        assert seen.concurrency is not None
        assert (seen.concurrency.held, seen.concurrency.queued, seen.concurrency.most) == (2, 0, 3)
        assert main(["inspect", name, "--redis", REDIS_URL]) == 0
        out = capsys.readouterr().out
        assert f"{name}  (concurrency)" in out
        assert "2 of 3 slots held, 0 queued" in out
        rows = {row.name: row for row in fleet(redis_client)}
        assert rows[name].kind == "concurrency"
        assert (rows[name].held, rows[name].most, rows[name].queued) == (2, 3, 0)
        assert main(["top", "--redis", REDIS_URL, "--json"]) == 0
        (entry,) = [e for e in json.loads(capsys.readouterr().out)["limiters"] if e["name"] == name]
        assert entry["in_flight"] == {"held": 2, "max": 3, "queued": 0}
        assert main(["top", "--redis", REDIS_URL, "--iterations", "1"]) == 0
        (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith(name)]
        assert line.split()[1:] == ["concurrency", "-", "-", "-", "-", "0", "-", "2/3", "0", "-"]
    backend.close()


def test_top_lists_a_name_that_contains_injected(redis_client: redis.Redis) -> None:
    name = unique_name("tenant:injected:x")
    backend = RedisBackend(redis_client, coalesce=False)
    assert TokenBucket(5, 10, backend=backend, name=name).try_acquire()
    seconds, micros = redis_client.time()
    rows = fleet(redis_client, window=2, now=float(seconds) + micros / 1e6 + 1.0)
    assert name in [row.name for row in rows]
    backend.close()


# -- item 14: a Cluster node ----------------------------------------------------------------


def test_the_commands_on_a_cluster_node_see_the_whole_cluster(
    cluster_client: Any, redis_cluster: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    backend = RedisBackend(cluster_client, coalesce=False)
    names = [unique_name("whole") for _ in range(30)]
    for name in names:
        assert TokenBucket(5, 10, backend=backend, name=name).try_acquire()
    host, port = redis_cluster.startup_nodes[0]
    url = f"redis://{host}:{port}/0"
    # A ConcurrencyLimit and a composite, seen and refused through any node.
    slots, group = unique_name("whole-slots"), unique_name("whole-group")
    assert _member(backend, group).try_acquire()
    with ConcurrencyLimit(2, backend=backend, name=slots).hold():
        assert main(["inspect", slots, group, "--redis", url]) == 0
        out = capsys.readouterr().out
        assert "1 of 2 slots held, 0 queued" in out
        assert f"{group}  (composite)" in out
        assert main(["top", "--redis", url, "--json"]) == 0
        rows = {e["name"]: e for e in json.loads(capsys.readouterr().out)["limiters"]}
        assert rows[slots]["in_flight"] == {"held": 1, "max": 2, "queued": 0}
        assert main(["set", group, "--rate", "5/s", "--redis", url]) == 1
        assert "composite" in capsys.readouterr().err
    for cluster in ([], ["--cluster"]):
        assert main(["inspect", "--redis", url, "--json", *cluster]) == 0
        found = {e["name"] for e in json.loads(capsys.readouterr().out)["limiters"]}
        assert set(names) <= found
        assert main(["top", "--redis", url, "--json", *cluster]) == 0
        found = {e["name"] for e in json.loads(capsys.readouterr().out)["limiters"]}
        assert set(names) <= found
        # Names whose keys sit on other nodes than the one named.
        for name in names[:5]:
            assert main(["inspect", name, "--redis", url, *cluster]) == 0
            assert main(["set", name, "--rate", "5/s", "--redis", url, *cluster]) == 0
        capsys.readouterr()
    backend.close()


def test_cluster_on_a_plain_redis_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["inspect", "--cluster", "--redis", REDIS_URL])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert "not a node of a Redis Cluster" in err
    assert err.count("\n") == 1


# -- item 15: a closed output pipe --------------------------------------------------------


def _closed_pipe(*argv: str) -> subprocess.CompletedProcess[str]:
    read, write = os.pipe()
    os.close(read)  # nobody will ever read: the first write fails with EPIPE
    try:
        return run_cli(*argv, stdout=write)
    finally:
        os.close(write)


@pytest.mark.slow
def test_a_closed_output_pipe_is_a_quiet_exit(redis_client: redis.Redis) -> None:
    name = unique_name("pipe")
    backend = RedisBackend(redis_client, coalesce=False)
    assert TokenBucket(5, 10, backend=backend, name=name).try_acquire()
    for argv in (
        ["set", name, "--rate", "2/s"],
        ["top", "--json"],
        ["top", "--iterations", "2", "--interval", "0.01"],
        ["inspect"],
        ["inspect", name, "--json"],
    ):
        done = _closed_pipe(*argv, "--redis", REDIS_URL)
        assert done.stderr == "", argv
        assert done.returncode == 141, argv
    # The change was stored all the same.
    assert backend.limit_override(name) is not None
    backend.close()


@pytest.mark.slow
def test_a_pipe_closed_by_head_is_a_quiet_exit(redis_client: redis.Redis) -> None:
    names = [unique_name("head") for _ in range(3)]
    backend = RedisBackend(redis_client, coalesce=False)
    for name in names:
        assert TokenBucket(5, 10, backend=backend, name=name).try_acquire()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # Refreshes go on after head has gone: a later write meets the closed pipe.
    command = f"{sys.executable} -m ratelimit top --redis {REDIS_URL} --iterations 30 --interval 0.02 | head -n 1"
    done = subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout.startswith("ratelimit top - ")
    assert done.stderr == ""
    backend.close()


# -- item 16 (part): Sentinel with no master ----------------------------------------------


def test_no_master_found_is_one_clear_line(capsys: pytest.CaptureFixture[str]) -> None:
    first, second = free_port(), free_port()
    url = f"redis+sentinel://:hunter2@127.0.0.1:{first},127.0.0.1:{second}/orders?socket_timeout=0.5"
    assert main(["inspect", "--redis", url]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert len(err) < 300, err
    assert "'orders'" in err
    assert f"127.0.0.1:{first}, 127.0.0.1:{second}" in err
    assert "hunter2" not in err
    assert "<redis." not in err


# -- what a hostile or careless writer of keys can do --------------------------------------


def test_garbled_keys_never_stop_the_listing(redis_client: redis.Redis, capsys: pytest.CaptureFixture[str]) -> None:
    run = unique_name("garbled")
    code, breaker, slots, kind = (f"{run}-{what}" for what in ("code", "breaker", "slots", "kind"))
    redis_client.hset(f"ratelimit:{{{code}}}:code", mapping={"kind": "token_bucket", "p1": "abc", "p2": "1"})
    redis_client.hset(f"ratelimit:{{{breaker}}}:breaker", mapping={"mode": "nan", "opened_at": "soon"})
    redis_client.zadd(f"ratelimit:{{{slots}}}:concurrency", {"p:1": 4e9})
    redis_client.set(f"ratelimit:{{{slots}}}:concurrency:max", "lots")
    seconds = int(redis_client.time()[0])
    # A kind of its own making, in a counters key: it reaches the screen escaped.
    redis_client.hset(f"ratelimit:{{{kind}}}:\x1b]0;x\x07:top:{seconds - 1}", "w1", 3)
    for key in redis_client.scan_iter(match=f"ratelimit:{{{run}*", count=1000):
        redis_client.expire(key, 60)
    assert main(["inspect", code, breaker, slots, "--redis", REDIS_URL]) == 0
    out = capsys.readouterr().out
    assert "breaker      unknown" in out
    assert "1 of ? slots held" in out
    assert main(["inspect", "--redis", REDIS_URL, "--json"]) == 0
    names = {e["name"] for e in json.loads(capsys.readouterr().out)["limiters"]}
    assert {code, breaker, slots} <= names
    # A change to a name whose code is garbled is stored, with no script asked.
    assert main(["set", code, "--rate", "2/s", "--redis", REDIS_URL]) == 0
    capsys.readouterr()
    assert main(["top", "--redis", REDIS_URL, "--iterations", "1"]) == 0
    out = capsys.readouterr().out
    _terminal_safe(out)
    assert "\\x1b]0;x\\x07" in out


def test_set_keeps_a_shadow_limiter_labelled(redis_client: redis.Redis) -> None:
    name = unique_name("shadow-set")
    backend = RedisBackend(redis_client, coalesce=False)
    assert TokenBucket(5, 10, backend=backend, name=name, shadow=True).try_acquire()
    backend.set_limit(name, rate=2)
    assert backend.inspect(name).shadow
    backend.close()


@pytest.mark.slow
def test_a_closed_error_stream_is_quiet_too() -> None:
    read, write = os.pipe()
    os.close(read)
    try:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        done = subprocess.run(
            [sys.executable, "-m", "ratelimit", "inspect", "--redis", "redis://127.0.0.1:1"],
            stdout=subprocess.PIPE, stderr=write, text=True, env=env, timeout=60, check=False,
        )  # fmt: skip
    finally:
        os.close(write)
    assert done.returncode == 141
