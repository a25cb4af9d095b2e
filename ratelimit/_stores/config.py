"""Limits changed at run time, and what a Redis store can tell about a limiter.

``ratelimit set NAME --rate 500/min --burst 10`` (or :meth:`RedisBackend.set_limit`)
writes a hash beside the limiter's state, ``ratelimit:{<name>}:config``, with ``rate``
(tokens per second) and/or ``burst``. The limiter's script reads it in every call,
atomically with the decision, so every process follows it from its next decision on
and nothing restarts. The algorithm maps it (``Algorithm.configured``): a token
bucket's refill and capacity, a leaky bucket's leak and queue, a window's limit over
its own length. ``--reset`` deletes the hash: the code's values again, at once. A TTL
on the hash (``--for 1h``) ends a change by itself.

Each script also writes what the code says (``ratelimit:{<name>}:code``: the kind, the
two parameters and the seconds of guard they keep back) when that hash is missing, so
that :func:`inspect` can ask the script itself what the limiter could grant now:
the ``peek`` op of ``lua/_single.lua``, which decides nothing.

Only single limiters (``TokenBucket``, ``LeakyBucket``, ``SlidingWindow`` without
``low_share``) follow a change; a composite's members and the lanes of a budget with
priorities keep the code's values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import _validate
from .keys import code_key, config_key, key_for, name_of
from .scripts import ALGORITHMS, single_script

__all__ = [
    "MAX_SET",
    "MIN_SET",
    "Inspection",
    "Override",
    "checked_override",
    "inspect",
    "known_names",
    "read_override",
    "reset_override",
    "write_override",
]

#: The range a run-time ``rate`` (tokens per second) or ``burst`` must lie in: a
#: token per eleven days to a trillion. The scripts ignore a stored value outside it.
MIN_SET = 1e-6
MAX_SET = 1e12
#: The longest a change may be set to last, and the longest a TTL may hold a key.
MAX_TTL_SECONDS = 366 * 86400.0


@dataclass(frozen=True)
class Override:
    """A limit as changed at run time: ``None`` keeps what the code says."""

    rate: float | None
    burst: float | None
    #: Seconds until the change ends by itself; ``None``: until reset.
    ttl: float | None = None

    def as_dict(self) -> dict[str, float | None]:
        return {"rate": self.rate, "burst": self.burst, "ttl": self.ttl}


def _bounded(argument: str, value: object) -> float:
    number = _validate.positive(argument, value)
    if not MIN_SET <= number <= MAX_SET:
        raise ValueError(f"{argument} must be between {MIN_SET:g} and {MAX_SET:g}, got {value!r}")
    return number


def checked_override(rate: object, burst: object, ttl: object) -> Override:
    """The change asked for, checked; ``ValueError``/``TypeError`` naming the argument."""
    if rate is None and burst is None:
        raise ValueError("give rate, burst or both: to return to what the code says, reset the limit")
    seconds = None
    if ttl is not None:
        seconds = _validate.duration("ttl", ttl)
        if not 0 < seconds <= MAX_TTL_SECONDS:
            raise ValueError(f"ttl must be > 0 and at most {MAX_TTL_SECONDS:g} seconds (a year), got {ttl!r}")
    return Override(
        None if rate is None else _bounded("rate", rate),
        None if burst is None else _bounded("burst", burst),
        seconds,
    )


def _code(client: Any, name: str) -> dict[str, str]:
    return {_text(k): _text(v) for k, v in client.hgetall(code_key(name)).items()}


def _server_now(client: Any) -> float:
    seconds, micros = client.time()
    return float(seconds) + float(micros) / 1e6


def _configure(client: Any, name: str, change: Override | None, now: float | None) -> None:
    code = _code(client, name)
    kind = code.get("kind")
    rate = "" if change is None or change.rate is None else repr(change.rate)
    burst = "" if change is None or change.burst is None else repr(change.burst)
    ttl = "" if change is None or change.ttl is None else repr(change.ttl)
    if change is not None and change.burst is not None and kind in WINDOWS:
        raise ValueError(
            f"burst={change.burst!r}: limiter {name!r} is a {kind}, which has no burst apart from its limit "
            f"(set its rate: the limit becomes rate x window)"
        )
    if kind in ALGORITHMS:
        # The limiter's own script: it moves the saved state to the new limit in the
        # same step (a bucket's backlog keeps its tokens, see `switch` in _single.lua).
        assert kind is not None
        args = [
            "configure",
            "" if now is None else repr(now),
            rate,
            burst,
            code["p1"],
            code["p2"],
            code["slack"],
            "0",
            ttl,
        ]
        # A time given is a test clock's: the state to move is that of limiters on one.
        state = key_for(name, kind, injected=now is not None)
        single_script(kind)(client, [state, config_key(name)], args)
        return
    # No process has decided yet: no state to move, and no script known to write it.
    key = config_key(name)
    pipe = client.pipeline(transaction=True)
    pipe.delete(key)
    if change is not None:
        pipe.hset(key, mapping={"rate": rate, "burst": burst})
        if change.ttl is not None:
            until = (_server_now(client) if now is None else now) + change.ttl
            pipe.hset(key, "until", repr(until))
            pipe.pexpire(key, math.ceil((change.ttl + 86400) * 1000))
    pipe.execute()


def write_override(client: Any, name: str, change: Override, now: float | None = None) -> None:
    """Store ``change`` for limiter ``name``: it replaces any earlier change whole.
    ``now``: a test clock's time, for limiters on test clocks; ``None``: the server's."""
    _configure(client, name, change, now)


def reset_override(client: Any, name: str, now: float | None = None) -> bool:
    """Return limiter ``name`` to what the code says; whether a change was in force."""
    was = read_override(client, name, now) is not None
    _configure(client, name, None, now)
    return was


def _number(raw: Mapping[Any, Any], field: str) -> float | None:
    value = raw.get(field, raw.get(field.encode()))
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if MIN_SET <= number <= MAX_SET else None


def read_override(client: Any, name: str, now: float | None = None) -> Override | None:
    """The change in force for ``name`` (as the scripts read it), or ``None``; its
    ``ttl`` is what is left of it at ``now`` (``None``: the server's time)."""
    raw = client.hgetall(config_key(name))
    rate, burst = _number(raw, "rate"), _number(raw, "burst")
    if rate is None and burst is None:
        return None
    until = raw.get("until", raw.get(b"until"))
    if until is None:
        return Override(rate, burst)
    left = float(until) - (_server_now(client) if now is None else now)
    return None if left <= 0 else Override(rate, burst, left)


@dataclass(frozen=True)
class Inspection:
    """What Redis holds of one limiter name, as ``ratelimit inspect`` shows it."""

    name: str
    #: The algorithm the code of its processes runs, ``None``: no single limiter of
    #: this name has decided in the last day (see ``known``).
    kind: str | None = None
    #: The parameters the code configured (``capacity``/``refill_per_sec``, or
    #: ``limit``/``window``), the guard included, and the seconds of guard.
    code: Mapping[str, float] | None = None
    slack: float = 0.0
    #: Whether the latest process to decide runs it in shadow mode (never enforced).
    shadow: bool = False
    override: Override | None = None
    #: The parameters the decisions use now: the code's, or as changed.
    effective: Mapping[str, float] | None = None
    #: The most tokens one request could take now, and the wait for one token.
    available: float | None = None
    wait_for_one: float | None = None
    #: Seconds until the latest grant already promised (0: none ahead).
    promised_ahead: float | None = None
    #: Seconds until a pause fed back from a provider (a 429) ends; ``None``: none.
    paused_for: float | None = None
    #: A breaker of this name: ``closed``, ``open`` or ``half-open``; ``None``: none.
    breaker: str | None = None
    breaker_opened_at: float | None = None
    #: Other keys of this name (a composite's members, priority lanes).
    other_keys: tuple[str, ...] = ()
    now: float | None = None

    @property
    def known(self) -> bool:
        return self.kind is not None or self.breaker is not None or bool(self.other_keys) or self.override is not None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "known": self.known,
            "kind": self.kind,
            "code": None if self.code is None else dict(self.code),
            "guard_seconds": self.slack,
            "shadow": self.shadow,
            "override": None if self.override is None else self.override.as_dict(),
            "effective": None if self.effective is None else dict(self.effective),
            "available": self.available,
            "wait_for_one": self.wait_for_one,
            "promised_ahead": self.promised_ahead,
            "paused_for": self.paused_for,
            "breaker": self.breaker,
            "breaker_opened_at": self.breaker_opened_at,
            "other_keys": list(self.other_keys),
            "now": self.now,
        }


#: What each kind's two parameters are called (the limiter's own argument names).
PARAMETERS = {
    "token_bucket": ("capacity", "refill_per_sec"),
    "leaky_bucket": ("capacity", "leak_per_sec"),
    "sliding_window": ("limit", "window"),
    "sliding_window_counter": ("limit", "window"),
}
WINDOWS = ("sliding_window", "sliding_window_counter")
_BREAKER_MODES = {0: "closed", 1: "open", 2: "half-open"}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _other_keys(client: Any, name: str, known: set[str]) -> tuple[str, ...]:
    prefix = key_for(name, "")
    pattern = "".join(f"\\{c}" if c in "*?[]\\" else c for c in prefix) + "*"
    found = {_text(key) for key in client.scan_iter(match=pattern, count=1000)}
    # Not a test clock's keys, nor the counters of `top` (fleet.py).
    return tuple(
        sorted(k[len(prefix) :] for k in found - known if not k.startswith(prefix + "injected:") and ":top:" not in k)
    )


def inspect(client: Any, name: str, now: float | None = None) -> Inspection:
    """What Redis holds of limiter ``name``: its configuration as the code set it and
    as changed, what it could grant now, what is promised ahead, a pause, a breaker."""
    code_raw = _code(client, name)
    override = read_override(client, name, now)
    mode, opened = client.hmget(key_for(name, "breaker"), "mode", "opened_at")
    breaker = None if mode is None else _BREAKER_MODES.get(int(float(mode)), "unknown")
    known = {code_key(name), config_key(name), key_for(name, "breaker")}
    kind = code_raw.get("kind")
    base = dict(
        name=name,
        override=override,
        breaker=breaker,
        breaker_opened_at=None if opened is None or breaker != "open" else float(opened),
    )
    if kind not in ALGORITHMS:
        return Inspection(**base, other_keys=_other_keys(client, name, known))  # type: ignore[arg-type]
    assert kind is not None
    names = PARAMETERS[kind]
    p1, p2, slack = float(code_raw["p1"]), float(code_raw["p2"]), float(code_raw.get("slack", 0.0))
    state = key_for(name, kind)
    known |= {state, state + ":holes", state + ":caps", state + ":meta", state + ":slack"}
    reply = single_script(kind)(
        client,
        [state, config_key(name)],
        ["peek", "" if now is None else repr(now), "1", "", code_raw["p1"], code_raw["p2"], code_raw.get("slack", "0")],
    )
    e1, e2, available, wait, latest, paused, at = (_text(x) for x in reply)
    return Inspection(
        **base,  # type: ignore[arg-type]
        kind=kind,
        code=dict(zip(names, (p1, p2), strict=True)),
        slack=slack,
        shadow=code_raw.get("shadow") == "1",
        effective=dict(zip(names, (float(e1), float(e2)), strict=True)),
        available=float(available),
        wait_for_one=float(wait),
        promised_ahead=max(0.0, float(latest) - float(at)),
        paused_for=None if paused == "" else float(paused) - float(at),
        other_keys=_other_keys(client, name, known),
        now=float(at),
    )


def known_names(client: Any) -> list[str]:
    """Every name with something to inspect: a limiter that decided in the last day,
    a change in force, or a breaker; sorted."""
    names: set[str] = set()
    for suffix in ("code", "config", "breaker"):
        for key in client.scan_iter(match=f"ratelimit:{{*}}:{suffix}", count=1000):
            name = name_of(_text(key))
            if name is not None:
                names.add(name)
    return sorted(names)
