"""The Redis protocol other languages speak (docs/protocol.md): named by its version,
recorded, and held to its conformance vectors.

- ``lua/protocol.json`` records the protocol's version with fingerprints of its contract
  (each function's KEYS/ARGV/reply as the drivers document them, the functions
  registered) and of the library's text (its revision): a change to either without a
  new record fails here, so that the contract cannot change under the same version and
  a server never keeps an older text for a newer one.
- The text the Node client loads (``clients/node/generated/library.json``) is the text
  this release composes.
- The vectors (``protocol/vectors.json``) hold against a real Redis; the Node client's
  tests run the same file.
- Two revisions of one protocol on one server: the newer is kept, the older replaced,
  and neither takes it back in turns.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio

from ratelimit import ManualClock, RedisBackend, TokenBucket
from ratelimit._stores.redis.protocol import (
    NODE_ARTIFACT,
    contract_fingerprint,
    library_fingerprint,
    node_artifact,
)
from ratelimit._stores.redis.scripts import (
    PROTOCOL,
    REVISION,
    library,
    library_text,
    listed_revision,
    protocol_lock,
)

import vectors
from conftest import command_calls, private_server, unique_name
from servers import RedisServer

TOP = Path(__file__).resolve().parents[2]
RECORD = "python -m ratelimit._stores.redis.protocol"


def test_the_library_is_named_by_the_protocol_not_by_its_text() -> None:
    assert library().name == f"ratelimit_p{PROTOCOL}"
    assert library().function("token_bucket") == f"ratelimit_p{PROTOCOL}_token_bucket"
    assert f"revision {REVISION}" not in library_text(library().name, REVISION + 1).text
    assert f"local PROTOCOL, REVISION = '{PROTOCOL}', '{REVISION}'" in library().source


def test_the_contract_is_the_one_recorded_with_this_protocol_version() -> None:
    # A driver's KEYS/ARGV/reply (its header) or the functions registered changed. If a
    # client written to docs/protocol.md would break, bump "protocol" in
    # lua/protocol.json and say what changed on the page; if it only adds what the page
    # lets a client ignore (a trailing reply field, a function) or rewords a comment,
    # record it as it is. Either way: `python -m ratelimit._stores.redis.protocol --contract`.
    changed = f"the protocol's contract changed: {RECORD} --contract"
    assert protocol_lock()["contract"] == contract_fingerprint(), changed


def test_the_library_text_is_the_revision_recorded() -> None:
    # Any change to lua/ is a new revision of the library, so that a server holding the
    # older text takes the newer one: `python -m ratelimit._stores.redis.protocol`.
    assert protocol_lock()["library"] == library_fingerprint(), f"lua/ changed: record a new revision with {RECORD}"


def test_the_node_client_loads_the_text_of_this_release() -> None:
    shipped = json.loads((TOP / NODE_ARTIFACT).read_text(encoding="utf-8"))
    assert shipped == node_artifact(REVISION), f"clients/node/generated/library.json is stale: {RECORD}"


def test_the_protocol_page_names_this_version_and_every_function() -> None:
    page = (TOP / "docs" / "protocol.md").read_text(encoding="utf-8")
    named = re.search(rf"^# .*protocol, version {PROTOCOL}\b", page, re.I | re.M)
    assert named, "docs/protocol.md must name its version"
    for function in ("token_bucket", "leaky_bucket", "sliding_window", "sliding_window_counter", "revision"):
        assert f"ratelimit_p{PROTOCOL}_{function}" in page
    assert vectors.load()["protocol"] == PROTOCOL


def test_a_listing_is_read_for_this_protocols_revision() -> None:
    def entry(name: str, description: bytes | None) -> list[Any]:
        functions: list[list[Any]] = [[b"name", f"{name}_revision".encode(), b"description", description, b"flags", []]]
        return [b"library_name", name.encode(), b"engine", b"LUA", b"functions", functions]

    name = library().name
    assert listed_revision([]) is None
    assert listed_revision([entry("ratelimit_p999", b"ratelimit protocol 999 revision 7")]) is None
    assert listed_revision([entry(name, b"ratelimit protocol 1 revision 7")]) == 7
    assert listed_revision([entry(name, None)]) == 0  # loaded, revision unknown: the oldest
    resp3 = {"library_name": name, "functions": [{"name": "x", "description": "revision 3"}]}
    assert listed_revision([resp3]) == 3


# -- the vectors, against a real server ---------------------------------------------------


@pytest.mark.redis
@pytest.mark.parametrize("scenario", vectors.load()["scenarios"], ids=lambda s: s["name"].split(":")[0])
def test_the_conformance_vectors_hold(redis_client: redis.Redis, scenario: dict[str, Any]) -> None:
    if not redis_client.function_list(library=library().name):
        redis_client.function_load(library().source, replace=True)
    name = unique_name("vectors")
    for i, step in enumerate(scenario["steps"]):
        got = vectors.send(redis_client, library().name + "_", step, name)
        assert vectors.conforms(step["reply"], got), f"step {i} ({step.get('note', '')}): {got!r}"


def test_conforms_reads_lists_by_their_first_items() -> None:
    assert vectors.conforms(["1", "2"], ["1", "2", "level"])
    assert not vectors.conforms(["1", "2"], ["1"])
    assert not vectors.conforms("1000", ["0", "1000", ""])
    assert vectors.conforms({"error": "too big"}, {"error": "ERR too big here"})


# -- two revisions of one protocol on one server -----------------------------------------


@pytest.fixture
def server() -> Iterator[RedisServer]:
    made = private_server()
    yield made
    made.cleanup()


def _revision(admin: redis.Redis) -> int | None:
    return listed_revision(admin.function_list(library=library().name))


def _without_token_bucket(revision: int) -> str:
    # A revision that lacks the function about to be called, as an older one without a
    # function added since would.
    text = library_text(library().name, revision).text
    line = "redis.register_function(PREFIX .. 'token_bucket', single_of(token_bucket, 'token_bucket'))\n"
    assert line in text
    return text.replace(line, "")


@pytest.mark.servers
def test_an_older_revision_is_replaced_and_a_newer_one_kept(server: RedisServer) -> None:
    admin = redis.Redis.from_url(server.url)
    clock = ManualClock(1_000.0)

    admin.function_load(_without_token_bucket(REVISION - 1))
    backend = RedisBackend.from_url(server.url, coalesce=False)
    bucket = TokenBucket(3, 0.001, backend=backend, name=unique_name("older"), clock=clock)
    assert bucket.try_acquire()
    assert _revision(admin) == REVISION  # the older one lacked the function: replaced
    assert command_calls(admin, "function|load") == 2
    backend.close()

    admin.function_load(_without_token_bucket(REVISION + 1), replace=True)
    backend = RedisBackend.from_url(server.url, coalesce=False)
    bucket = TokenBucket(3, 0.001, backend=backend, name=unique_name("newer"), clock=clock)
    assert [bucket.try_acquire() for _ in range(4)] == [True, True, True, False]
    # The newer is kept: the function it lacks goes as a script, never by loading the
    # older text over it (which the newer release would load back, and so on).
    assert _revision(admin) == REVISION + 1
    assert command_calls(admin, "function|load") == 3
    assert command_calls(admin, "evalsha") + command_calls(admin, "eval") >= 4
    backend.close()
    admin.close()


@pytest.mark.servers
@pytest.mark.parametrize("path", ["sync", "async"])
def test_an_older_revision_with_every_function_is_replaced_at_the_first_call(server: RedisServer, path: str) -> None:
    """An older revision may hold what this one fixed (revision 4 bounded a bisection
    that spun for ever in revision 3): it is replaced at a client's first call, not
    kept until a call misses a function. A newer one is still kept."""
    admin = redis.Redis.from_url(server.url)
    clock = ManualClock(1_000.0)

    async def tries(bucket: TokenBucket, client: redis.asyncio.Redis) -> list[bool]:
        got = [await bucket.try_acquire_async() for _ in range(4)]
        await client.aclose()
        return got

    for loaded, kept in ((REVISION - 1, REVISION), (REVISION + 1, REVISION + 1)):
        admin.function_load(library_text(library().name, loaded).text, replace=True)
        if path == "sync":
            backend = RedisBackend.from_url(server.url, coalesce=False)
            bucket = TokenBucket(3, 0.001, backend=backend, name=unique_name("rev"), clock=clock)
            assert [bucket.try_acquire() for _ in range(4)] == [True, True, True, False]
            backend.close()
        else:
            client = redis.asyncio.Redis.from_url(server.url)
            bucket = TokenBucket(3, 0.001, backend=RedisBackend(client), name=unique_name("rev"), clock=clock)
            assert asyncio.run(tries(bucket, client)) == [True, True, True, False]
        assert _revision(admin) == kept
    assert command_calls(admin, "evalsha") + command_calls(admin, "eval") == 0
    admin.close()


# -- what feedback sends, which every client reads alike --------------------------------


def test_the_feedback_vectors_are_what_the_python_client_reads() -> None:
    # protocol/feedback.json: headers, what they say, and the `restrict` they ask for;
    # the Node client's header reading is held to the same file.
    from ratelimit._headers.parse import parse_rate_limit_headers
    from ratelimit._limiting.feedback import restriction

    document = json.loads((TOP / "protocol" / "feedback.json").read_text(encoding="utf-8"))
    for case in document["cases"]:
        info = parse_rate_limit_headers(case["headers"], now=document["now"])
        read = {k: getattr(info, k) for k in ("limit", "remaining", "reset_after", "retry_after", "window")}
        assert {k: v for k, v in read.items() if v is not None} == case["info"], case["about"]
        asked = restriction(info, case["status"])
        assert (list(asked) if asked else None) == case["restriction"], case["about"]
