"""The decision and the responses every server-side middleware shares, on a fake clock."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any

import pytest

from ratelimit import (
    Composite,
    LeakyBucket,
    ManualClock,
    RedisBackend,
    SlidingWindow,
    TokenBucket,
    parse_rate_limit_headers,
)
from ratelimit._integrations.serving import Gate, Headers, Request, Verdict, bounded_key
from ratelimit.keys import client_ip, header


def request(client: str | None = "10.0.0.1", path: str = "/", **headers: str) -> Request:
    return Request("GET", path, Headers((name.replace("_", "-"), value) for name, value in headers.items()), client)


def gate(limiter: Any, **options: Any) -> Gate:
    settings: dict[str, Any] = {"key": client_ip(), "cost": 1, "wait": 0.0, "exempt": None, "headers": True}
    settings.update(options)
    return Gate("test", limiter, **settings)


def fields(verdict: Verdict) -> dict[str, str]:
    return dict(verdict.headers)


def test_a_burst_passes_then_the_next_request_is_refused_with_its_wait_rounded_up() -> None:
    """Refused: 429, ``Retry-After`` in whole seconds rounded up, and the IETF fields."""
    clock = ManualClock()
    door = gate(TokenBucket(capacity=2, refill_per_sec=0.4, clock=clock))
    assert door.decide(request()).passes
    assert door.decide(request()).passes
    refused = door.decide(request())
    assert refused.status == 429
    got = fields(refused)
    assert got["Retry-After"] == "3"  # 2.5 s to the next token
    assert got["RateLimit-Policy"] == '"default";q=2;w=5'
    assert got["RateLimit"] == '"default";r=0;t=3'
    assert b"Traceback" not in refused.body


def test_our_parser_reads_back_exactly_what_a_refusal_says() -> None:
    """``parse_rate_limit_headers`` reads the refusal's fields as they were meant."""
    clock = ManualClock()
    door = gate(TokenBucket(capacity=100, refill_per_sec=100 / 60, clock=clock), cost=100)
    assert door.decide(request()).passes
    info = parse_rate_limit_headers(door.decide(request()).headers, now=0.0)
    assert info.retry_after == 60.0
    assert info.limit == 100.0
    assert info.window == 60.0
    assert info.remaining == 0.0
    assert info.reset_after == 60.0
    assert info.refills


def test_a_granted_response_carries_the_fields_unless_headers_is_false() -> None:
    """Granted: the policy, what is left after the grant, and when one more comes back."""
    limiter = TokenBucket(capacity=10, refill_per_sec=5, clock=ManualClock())
    granted = gate(limiter).decide(request())
    assert granted.passes
    info = parse_rate_limit_headers(granted.headers, now=0.0)
    assert (info.limit, info.window, info.remaining, info.reset_after) == (10.0, 2.0, 9.0, 1.0)
    quiet = gate(TokenBucket(capacity=10, refill_per_sec=5, clock=ManualClock()), headers=False)
    assert quiet.decide(request()) == Verdict(None)


@pytest.mark.parametrize(
    ("limiter", "policy"),
    [
        (TokenBucket(capacity=20, refill_per_sec=100), '"default";q=100;w=1'),
        (TokenBucket(capacity=10, refill_per_sec=3), '"default";q=12;w=4'),
        (LeakyBucket(capacity=5, leak_per_sec=1), '"default";q=5;w=5'),
        (SlidingWindow(limit=30, window_seconds=60), '"default";q=30;w=60'),
    ],
    ids=["fast-bucket", "slow-bucket", "leaky", "window"],
)
def test_the_policy_is_the_limiters_rate_over_whole_seconds(limiter: Any, policy: str) -> None:
    """``q`` per ``w`` is the limiter's sustained rate, in whole units over whole seconds."""
    assert fields(gate(limiter).decide(request()))["RateLimit-Policy"] == policy


def said(verdict: Verdict) -> str:
    """A verdict's ``RateLimit`` field, without the policy's name."""
    return fields(verdict)["RateLimit"].removeprefix('"default";')


# What each limiter's grants and refusals say, three requests at once and then 2.5 s
# later: a token bucket of 5 at 1/s holds 4, 3, 2 (one more back within a second),
# then 4.5 less one; a window of 3 in 10 s counts down to none, its oldest grant out
# in 10 s (7.5 s later: a refusal's wait); a leaky bucket lets one go and
# queues the next (refused: wait=0); a composite says its tightest limit's.
LEVELS: list[Any] = [
    pytest.param(TokenBucket, (5, 1), ["r=4;t=1", "r=3;t=1", "r=2;t=1"], "r=3;t=1", id="token-bucket"),
    pytest.param(SlidingWindow, (3, 10), ["r=2;t=10", "r=1;t=10", "r=0;t=10"], "429 r=0;t=8", id="window"),
    pytest.param(LeakyBucket, (3, 1), ["r=0;t=1", "429 r=0;t=1", "429 r=0;t=1"], "r=0;t=1", id="leaky"),
    pytest.param(
        Composite,
        ([TokenBucket(5, 1), SlidingWindow(4, 10)],),
        ["r=3;t=10", "r=2;t=10", "r=1;t=10"],
        "r=0;t=8",
        id="composite",
    ),
]


@pytest.mark.parametrize(("cls", "args", "first", "later"), LEVELS)
def test_granted_responses_say_the_level_their_decision_left(
    make: Callable[..., Any], clock: ManualClock, cls: Any, args: tuple[Any, ...], first: list[str], later: str
) -> None:
    """``r`` is what the decision left (whole tokens, the tightest limit's) and ``t``
    the whole seconds until one more comes back, on every store, told by the decision's
    own store call; a refusal says ``r=0`` and its ``Retry-After``."""
    door = gate(make(cls, *args))

    def told() -> str:
        verdict = door.decide(request())
        return said(verdict) if verdict.passes else f"{verdict.status} {said(verdict)}"

    assert [told() for _ in range(3)] == first
    clock.advance(2.5)
    assert told() == later


@pytest.mark.parametrize("store", ["memory", "fakeredis", "redis", "sqlite"])
def test_the_asyncio_decision_says_the_same_level(make: Callable[..., Any], store: str) -> None:
    """``decide_async``: the same fields from the same decisions."""
    door = gate(make(TokenBucket, 5, 1))

    async def run() -> list[str]:
        return [said(await door.decide_async(request())) for _ in range(3)]

    assert asyncio.run(run()) == ["r=4;t=1", "r=3;t=1", "r=2;t=1"]


def test_a_grant_that_waited_its_turn_counts_t_from_when_it_goes() -> None:
    """Held for its turn (``wait``): nothing is left as it goes, and one more comes a
    whole step after it."""
    clock = ManualClock()
    door = gate(TokenBucket(capacity=1, refill_per_sec=0.5, clock=clock), wait=5.0)
    assert said(door.decide(request())) == "r=0;t=2"
    assert said(door.decide(request())) == "r=0;t=2"
    assert clock.sleeps == [2.0]


def test_a_decision_the_store_cannot_level_claims_nothing_left() -> None:
    """A budget with priorities decides in lanes, whose driver tells no level: its
    grants say ``r=0`` and one step of the policy, a lower bound."""
    limiter = TokenBucket(capacity=10, refill_per_sec=5, clock=ManualClock(), low_share=0.5)
    assert said(gate(limiter).decide(request())) == "r=0;t=1"


def test_a_limiter_that_never_limits_announces_no_policy() -> None:
    """``refill_per_sec=inf`` has no quota to state: only the remaining field goes."""
    got = fields(gate(TokenBucket(capacity=1, refill_per_sec=math.inf)).decide(request()))
    assert "RateLimit-Policy" not in got
    assert "RateLimit" in got


def test_each_key_has_a_budget_of_its_own() -> None:
    """Two clients, two budgets: one's refusal leaves the other's grant alone."""
    door = gate(TokenBucket(capacity=1, refill_per_sec=1, clock=ManualClock()))
    assert door.decide(request("10.0.0.1")).passes
    assert door.decide(request("10.0.0.1")).status == 429
    assert door.decide(request("10.0.0.2")).passes


def test_a_request_without_a_key_or_exempt_is_not_limited() -> None:
    """``key`` returning ``None`` and ``exempt`` returning ``True`` both pass, untouched."""
    limiter = TokenBucket(capacity=1, refill_per_sec=1, clock=ManualClock())
    door = gate(limiter, key=header("x-api-key"), exempt=lambda r: r.path == "/health")
    for _ in range(3):
        assert door.decide(request()) == Verdict(None)
        assert door.decide(request(path="/health", x_api_key="k")) == Verdict(None)
    assert door.decide(request(**{"X-API-Key": "k"})).passes
    assert door.decide(request(**{"x-api-key": "k"})).status == 429


def test_a_cost_function_takes_that_many_tokens() -> None:
    """``cost`` as a function of the request: a heavy path takes more of the budget."""
    door = gate(
        TokenBucket(capacity=10, refill_per_sec=1, clock=ManualClock()),
        cost=lambda r: 6 if r.path == "/export" else 1,
    )
    assert door.decide(request(path="/export")).passes
    assert door.decide(request(path="/export")).status == 429
    assert door.decide(request()).passes


def test_a_cost_above_the_capacity_is_refused_not_a_server_error() -> None:
    """A request the limit can never grant gets a 429 asking for one step of the policy."""
    refused = gate(TokenBucket(capacity=5, refill_per_sec=1, clock=ManualClock()), cost=6).decide(request())
    assert refused.status == 429
    assert fields(refused)["Retry-After"] == "1"


def test_wait_holds_a_request_for_its_turn_in_arrival_order_then_refuses() -> None:
    """Within ``wait`` the request is held and served; a turn further away is refused now."""
    clock = ManualClock()
    door = gate(TokenBucket(capacity=1, refill_per_sec=2, clock=clock), wait=0.5)
    assert door.decide(request()).passes
    before = clock.now()
    assert door.decide(request()).passes  # held 0.5 s
    assert clock.now() - before == pytest.approx(0.5)
    held = clock.now()
    assert door.decide(request()).passes  # held another 0.5 s
    refused = gate(TokenBucket(capacity=1, refill_per_sec=2, clock=clock), wait=0.2)
    assert refused.decide(request()).passes
    assert refused.decide(request()).status == 429
    assert clock.now() - held == pytest.approx(0.5)


def test_the_async_decision_is_the_same() -> None:
    """``decide_async`` grants and refuses as ``decide`` does."""
    door = gate(TokenBucket(capacity=1, refill_per_sec=1, clock=ManualClock()))

    async def run() -> list[int | None]:
        return [(await door.decide_async(request())).status for _ in range(2)]

    assert asyncio.run(run()) == [None, 429]


@pytest.mark.parametrize("policy", ["raise", "allow"])
def test_a_store_that_cannot_decide_follows_on_unavailable(policy: Any) -> None:
    """``raise``: 503 with ``Retry-After`` and no detail; ``allow``: the request passes."""
    from servers import free_port

    backend = RedisBackend.from_url(f"redis://127.0.0.1:{free_port()}/0", on_unavailable=policy)
    try:
        door = gate(TokenBucket(capacity=5, refill_per_sec=1, backend=backend, name="serving-down"))
        verdict = door.decide(request())
        if policy == "raise":
            assert verdict.status == 503
            assert fields(verdict)["Retry-After"] == "1"
            assert verdict.body == b"Service Unavailable\n"
        else:
            assert verdict.passes
    finally:
        backend.close()


def test_hostile_keys_are_bounded_and_still_one_budget_each() -> None:
    """A 10 kB key, control bytes or an empty one: a fixed-length digest, never an error."""
    long_key = "a" * 10_000
    assert bounded_key("10.0.0.1") == "10.0.0.1"
    for key in (long_key, "a\x00b", "line\r\nbreak", "", "\ud800"):
        digest = bounded_key(key)
        assert digest.startswith("#")
        assert len(digest) == 33
        assert bounded_key(key) == digest
    door = gate(TokenBucket(capacity=1, refill_per_sec=1, clock=ManualClock()), key=header("x-key"))
    assert door.decide(request(x_key=long_key)).passes
    assert door.decide(request(x_key=long_key)).status == 429
    assert door.decide(request(x_key="a\x00b")).passes


@pytest.mark.parametrize(
    ("option", "value"),
    [("limiter", object()), ("key", "ip"), ("cost", 0), ("cost", True), ("wait", -1), ("wait", math.inf)],
)
def test_bad_arguments_are_refused_by_name(option: str, value: object) -> None:
    """Each argument is checked when the middleware is made, the error naming it."""
    settings: dict[str, Any] = {"limiter": TokenBucket(capacity=1, refill_per_sec=1)}
    settings[option] = value
    limiter = settings.pop("limiter")
    with pytest.raises((TypeError, ValueError), match=option):
        gate(limiter, **settings)


def test_headers_are_case_insensitive_and_repeats_are_joined() -> None:
    """The view's headers: any case finds a name; a repeated header reads as one list."""
    headers = Headers([("X-Forwarded-For", "1.1.1.1"), ("x-forwarded-for", "2.2.2.2"), ("Host", "a")])
    assert headers["x-FORWARDED-for"] == "1.1.1.1, 2.2.2.2"
    assert "HOST" in headers
    assert len(headers) == 2
    assert headers.get("missing") is None


def _script_calls(client: Any) -> int:
    """Function and script calls the server ran (the commands inside them apart)."""
    stats = client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("fcall", "evalsha", "eval"))


@pytest.mark.redis
def test_a_decision_is_one_store_call(quiet_client: Any) -> None:
    """Granted or refused, a request through the gate costs the store one call, nothing more."""
    backend = RedisBackend(quiet_client)
    door = gate(TokenBucket(capacity=2, refill_per_sec=0.01, backend=backend, name="serving-calls"))
    door.decide(request("10.0.0.3"))  # loads the function library once
    before = _script_calls(quiet_client)
    verdicts = [door.decide(request("10.0.0.4")).status for _ in range(4)]
    assert verdicts == [None, None, 429, 429]
    assert _script_calls(quiet_client) - before == 4


@pytest.mark.stress
def test_a_flood_of_distinct_hostile_keys_costs_bounded_memory_and_no_error() -> None:
    """50,000 distinct keys of 10 kB with control bytes: every request decided, and the
    memory kept afterwards a small multiple of what the first thousand kept."""
    import gc
    import tracemalloc

    limiter = TokenBucket(capacity=1, refill_per_sec=1, clock=ManualClock())
    door = gate(limiter, key=header("x-key"))
    tail = "\x01" + "k" * 10_000

    def flood(first: int, count: int) -> None:
        for i in range(first, first + count):
            assert door.decide(request(x_key=f"{i}{tail}")).passes

    tracemalloc.start()
    try:
        flood(0, 1_000)
        gc.collect()
        after_first = tracemalloc.get_traced_memory()[0]
        flood(1_000, 49_000)
        gc.collect()
        after_all = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    # The budgets themselves stay (an in-process store forgets idle ones in its sweep);
    # what is bounded is each one's size: a digest, never the 10 kB key.
    assert after_all < after_first + 50_000 * 2_000


class Slow:
    """A store call that suspends until let go (the memory handle's decision, made
    then): a caller may be cancelled while it is out."""

    suspends = True

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.go = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def reserve_level_async(self, tokens: float, max_wait: float) -> Any:
        await self.go.wait()
        return self.inner.reserve_level(tokens, max_wait)


def test_a_request_cancelled_while_the_store_decides_gives_its_grant_back() -> None:
    """The client leaves while the leveled decision is out: the grant that lands after
    is given back, and the next request finds the budget whole."""
    from ratelimit._limiting.front import acquire_level_async

    limiter = TokenBucket(capacity=5, refill_per_sec=0.001, clock=ManualClock())
    slow = Slow(limiter._handle)
    limiter._handle = slow

    async def run() -> Any:
        leaving = asyncio.ensure_future(acquire_level_async(limiter, 1, 0.0))
        await asyncio.sleep(0)
        leaving.cancel()
        slow.go.set()
        with pytest.raises(asyncio.CancelledError):
            await leaving
        for _ in range(3):
            await asyncio.sleep(0)  # the grant landing, then its give-back
        return await acquire_level_async(limiter, 1, 0.0)

    waited, (left, _) = asyncio.run(run())
    assert (waited, left) == (0.0, 4.0)
