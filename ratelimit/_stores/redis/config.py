"""Limits changed at run time, and what a Redis store can tell about a limiter.

``ratelimit set`` (or :meth:`RedisBackend.set_limit`) writes a hash beside the
limiter's state, ``ratelimit:{<name>}:config`` (``rate`` in tokens per second,
``burst``). The limiter's script reads it atomically with every decision, so every
process follows it from its next decision on; ``Algorithm.configured`` maps it. Reset
deletes the hash; a TTL on it ends a change by itself.

Each script also writes what the code says (``ratelimit:{<name>}:code``, kept a day;
a keyed budget's, as long as its state and a minute more) at a process's first
decision and then once a minute, so :func:`inspect` can ask the script what the
limiter could grant now (the ``peek`` op). A change is made by the limiter's own
script: with what the code says, it moves the state to the new limit at once; without
it (never written, expired, or evicted) it leaves the state's limit beside the change
for the next decision to move (the ``stage`` op).

Only single limiters (no ``low_share``, no ``adaptive``) follow a change; a change to
a name whose keys say it is anything else is refused (:class:`UnchangeableLimit`) and
nothing is stored. What a name is comes from one pipeline of EXISTS
(``redis/key_survey.py``), with no scan.

A name's keys (``for_key``) each decide in a hash slot of their own, whose script
cannot read the name's hash. So a change by name is also written into the hash of
each key in use (``ratelimit:{<name>%/<key>}:config``, found by one SCAN for their
``:code`` records), with a field ``by`` saying it is the name's and ``v`` its
version: a later change by name replaces it, and a key's own change
(``set_limit(name, key=...)``, no ``by``) is left as it is. For the keys first used
after the change, it is also written as one string beside the name's hash
(``ratelimit:{<name>}:config:keys``), which each process reads once a second and its
keys' decisions carry to their scripts (``redis/name_changes.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..._algorithms.quota import period_seconds
from ..keys import (
    KEY_SEPARATOR,
    Keyed,
    code_key,
    config_key,
    follow_key,
    key_for,
    members_config_key,
    parts_of,
    tag,
    text_of,
    wire,
)
from ..records import (
    FAIR_KEPT,
    MAX_SET,
    MIN_SET,
    PARAMETERS,
    QUOTA_BURST,
    TENANTS_SHOWN,
    WINDOWS,
    Inspection,
    Override,
    Slots,
    Tenants,
    UnchangeableLimit,
)
from .batch import Call, pipelined
from .key_survey import CONCURRENCY, Roots, breaker_mode, fair_kind, forms, members, number, probe, survey
from .name_changes import RESET_KEPT, carried_text
from .scripts import ALGORITHMS, group_script, single_script

__all__ = [
    "eviction_risk",
    "inspect",
    "inspect_all",
    "inspect_many",
    "keys_of",
    "member_override",
    "read_override",
    "reset_override",
    "write_member",
    "write_override",
]

#: What each form that keeps the code's values is, for the refusal.
_UNCHANGEABLE = {
    "adaptive": "an adaptive limiter (its rate is learned from the provider's answers)",
    "composite": "a composite's members",
    "priorities": "a budget with priorities (low_share: two lanes)",
    "concurrency": "a ConcurrencyLimit (slots held, not a rate)",
    "fair": FAIR_KEPT,
}


def _refusal(name: str | Keyed, roots: Roots) -> UnchangeableLimit | None:
    kept = forms(roots)
    if not kept:
        return None
    what = " and ".join(_UNCHANGEABLE[form] for form in kept)
    parts = members(roots)
    listed = f" ({', '.join(parts)})" if parts else ""
    return UnchangeableLimit(
        f"limiter {name!r} is {what}{listed}, which keeps the code's values: only a single TokenBucket, "
        f"LeakyBucket or SlidingWindow reads a change at run time; nothing was changed"
    )


def _code_of(raw: Mapping[Any, Any]) -> dict[str, str]:
    return {text_of(k): text_of(v) for k, v in raw.items()}


def _server_now(client: Any) -> float:
    seconds, micros = client.time()
    return float(seconds) + float(micros) / 1e6


def _configure(client: Any, name: str | Keyed, change: Override | None, now: float | None) -> None:
    found, (raw,) = probe(client, [name], [("hgetall", (code_key(name),))])
    if change is not None:
        refused = _refusal(name, found[name])
        if refused is not None:
            raise refused
    code = _code_of(raw)
    kind = code.get("kind")
    rate = "" if change is None or change.rate is None else repr(change.rate)
    burst = "" if change is None or change.burst is None else repr(change.burst)
    ttl = "" if change is None or change.ttl is None else repr(change.ttl)
    if change is not None and change.burst is not None and kind in WINDOWS:
        raise ValueError(
            f"burst={change.burst!r}: limiter {name!r} is a {kind}, which has no burst apart from its limit "
            f"(set its rate: the limit becomes rate x window)"
        )
    if change is not None and change.burst is not None and kind == "quota":
        raise ValueError(QUOTA_BURST.format(burst=change.burst, name=name))
    if kind is not None and _single(code) == kind:
        # The limiter's own script: it moves the saved state to the new limit in the
        # same step (a bucket's backlog keeps its tokens, see `switch` in _single.lua).
        args = [
            "configure",
            "" if now is None else repr(now),
            rate,
            burst,
            code["p1"],
            code["p2"],
            code.get("slack", "0"),
            "0",
            ttl,
        ]
        # A time given is a test clock's: the state to move is that of limiters on one.
        state = key_for(name, kind, injected=now is not None)
        single_script(kind)(client, [wire(state), wire(config_key(name))], args)
        return
    # What the code says is unknown: no process has decided in the last day, or its
    # hash is gone (an evicting maxmemory-policy takes it first: it is written once a
    # minute) or garbled while a state may be there. The script of each kind writes
    # the change with the limit its state is at, and drops its state's mark, so that
    # the next decision moves the state with its own code's values (`stage` in
    # lua/_single.lua): the change holds from the next decision either way.
    args = ["stage", "" if now is None else repr(now), rate, burst, "", "", "0", "0", ttl]
    for each in ALGORITHMS:
        state = key_for(name, each, injected=now is not None)
        single_script(each)(client, [wire(state), wire(config_key(name))], args)


def eviction_risk(client: Any, change: Override) -> str | None:
    """Why ``change`` may be lost to the server's ``maxmemory-policy``, or ``None``: an
    ``allkeys-*`` policy evicts its hash like any key, a ``volatile-*`` one a change set
    for a while (its hash has a TTL). The limiters then go back to the code's values
    with nothing said, so ``set`` says it. A server that will not tell: ``None``."""
    try:
        info = client.info("memory")
    except Exception:  # an ACL without INFO, a Cluster node down: nothing to tell
        return None
    if isinstance(info, Mapping) and "maxmemory_policy" not in info:
        info = next((each for each in info.values() if isinstance(each, Mapping)), {})  # per Cluster node
    policy = text_of(info.get("maxmemory_policy", "")) if isinstance(info, Mapping) else ""
    if policy.startswith("allkeys-") or (policy.startswith("volatile-") and change.ttl is not None):
        return (
            f"this Redis evicts keys (maxmemory-policy {policy}): the change is a key like any other and "
            "may be evicted, and the limiters then go back to the code's values; run them on a Redis "
            "with maxmemory-policy noeviction (see docs/redis.md)"
        )
    return None


def write_override(client: Any, name: str | Keyed, change: Override, now: float | None = None) -> int:
    """Store ``change`` for limiter ``name``: it replaces any earlier change whole.
    ``now``: a test clock's time, for limiters on test clocks; ``None``: the server's.
    :class:`UnchangeableLimit` if the name's keys say it is a limiter that would
    never read it (a composite's members, adaptive, priorities, a ConcurrencyLimit).
    A name's change is written into each of its keys' budgets in use too (see
    :func:`_to_keys`; returns how many), and for its keys' decisions to carry to the
    keys used later (:func:`_follow`)."""
    _configure(client, name, change, now)
    if isinstance(name, Keyed):
        return 0
    return _to_keys(client, name, change, now, _follow(client, name, change, now))


def write_member(
    client: Any, name: str | Keyed, member: int, change: Override | None, now: float | None = None
) -> bool:
    """Store ``change`` (``None``: back to the code's values) for member ``member`` of
    composite ``name``, by the group's script ('member' op: it knows none of the
    members' code values, so the next decision moves the member's state); whether a
    change of the member was in force. ``now`` as for :func:`write_override`."""
    rate = "" if change is None or change.rate is None else repr(change.rate)
    burst = "" if change is None or change.burst is None else repr(change.burst)
    ttl = "" if change is None or change.ttl is None else repr(change.ttl)
    args = ["member", "" if now is None else repr(now), str(member), rate, burst, ttl]
    reply = group_script()(client, [wire(members_config_key(name))], args)
    return _text(reply[1]) == "1"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def member_override(client: Any, name: str | Keyed, member: int, now: float | None = None) -> Override | None:
    """The change in force for member ``member`` of composite ``name``, or ``None``
    (``ttl``: what is left of it at ``now``, ``None``: the server's time)."""
    prefix = f"{member}:"
    raw = client.hgetall(wire(members_config_key(name)))
    fields = {_text(k)[len(prefix) :]: v for k, v in raw.items() if _text(k).startswith(prefix)}
    return _override(fields, lambda: _server_now(client) if now is None else now)


def reset_override(client: Any, name: str | Keyed, now: float | None = None) -> bool:
    """Return limiter ``name`` to what the code says; whether a change was in force."""
    was = read_override(client, name, now) is not None
    _configure(client, name, None, now)
    if not isinstance(name, Keyed):
        _to_keys(client, name, None, now, _follow(client, name, None, now))
    return was


def _follow(client: Any, name: str, change: Override | None, now: float | None) -> int:
    """Write the string the decisions of ``name``'s keys carry (``redis/name_changes.py``)
    for ``change`` (``None``: a reset, kept ``RESET_KEPT`` seconds where a change was
    kept); returns its version, the server's time in microseconds, above the last one's."""
    seconds, micros = client.time()
    version = int(seconds) * 1_000_000 + int(micros)
    key = wire(follow_key(name))
    last = client.get(key)
    if last is not None:
        held = number(text_of(last).partition(" ")[0])
        if held is not None and held >= version:
            version = int(held) + 1
    if change is None:
        if last is not None:  # (none: no process carries a change by name to undo)
            client.set(key, str(version), px=int(RESET_KEPT * 1000))
        return version
    until = None
    if change.ttl is not None:
        until = (float(seconds) + float(micros) / 1e6 if now is None else now) + change.ttl
    text = carried_text(version, change.rate, change.burst, until)
    if change.ttl is None:
        client.set(key, text)
    else:
        # Kept a while past its end, as the keys' own hashes are: a decision after the
        # end carries nothing that a key would take.
        client.set(key, text, px=int((change.ttl + RESET_KEPT) * 1000))
    return version


#: The field of a key's change that says it is its name's (not the key's own).
_BY_NAME = "by"


def _glob(text: str) -> str:
    """``text`` matched literally by a SCAN pattern."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def keys_of(client: Any, name: str) -> list[Keyed]:
    """The keys of ``name`` (``for_key``) with a budget in the store: each one's
    record of what the code says, written by its first decision in each process
    and kept a minute past its state. One SCAN (of every master on a Cluster)."""
    pattern = f"ratelimit:{{{_glob(tag(name))}{KEY_SEPARATOR}*}}:code"
    found = set()
    for raw in client.scan_iter(match=wire(pattern), count=1000):
        parts = parts_of(text_of(raw))
        if parts is not None and parts[0] == name and parts[1] is not None:
            found.add(Keyed(name, parts[1]))
    return sorted(found, key=lambda keyed: keyed.key)


def _to_keys(client: Any, name: str, change: Override | None, now: float | None, version: int) -> int:
    """Write a change by ``name`` (``None``: its reset) into each of its keys' budgets
    in the store (each key decides in a slot of its own, where its own script reads
    it: from its next decision, in every process), but for a key with a change of its
    own (``set_limit(name, key=...)``), which prevails, and a key's budget of another
    form (it keeps the code's values). Each key's script moves its state (the
    ``configure`` op, with what its code says), marked with the change's ``version``.
    A key's budget first used after the change takes it from its decisions (see
    :func:`_follow`). One SCAN, a pipeline of reads (per node on a Cluster), a call
    per key. Returns how many keys were written."""
    keys = keys_of(client, name)
    reads = pipelined(client, [("hgetall", (each(keyed),)) for keyed in keys for each in (config_key, code_key)])
    rate = "" if change is None or change.rate is None else repr(change.rate)
    burst = "" if change is None or change.burst is None else repr(change.burst)
    ttl = "" if change is None or change.ttl is None else repr(change.ttl)
    marks: list[Call] = []
    reached = 0
    for keyed, held, raw in zip(keys, reads[::2], reads[1::2], strict=True):
        fields = {text_of(field) for field in held}
        code = _code_of(raw)
        kind = _single(code)
        if (fields & {"rate", "burst"} and _BY_NAME not in fields) or kind is None:
            continue  # the key's own change; a budget of another form, or a garbled record
        if change is not None and change.burst is not None and kind in WINDOWS:
            continue  # (a window has no burst: the name's own limiter was checked)
        args = ["configure", "" if now is None else repr(now), rate, burst, code["p1"], code["p2"]]
        args += [code.get("slack", "0"), "0", ttl]
        state = key_for(keyed, kind, injected=now is not None)
        # Through the function library as the decisions are (what it caches of a state
        # is forgotten by the same library's call), one call a key.
        single_script(kind)(client, [wire(state), wire(config_key(keyed))], args)
        if change is not None:
            marks.append(("hset", (config_key(keyed), None, None, {_BY_NAME: "name", "v": str(version)})))
        reached += 1
    pipelined(client, marks)
    return reached


def _number(raw: Mapping[Any, Any], field: str) -> float | None:
    value = raw.get(field, raw.get(field.encode()))
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if MIN_SET <= number <= MAX_SET else None


def read_override(client: Any, name: str | Keyed, now: float | None = None) -> Override | None:
    """The change in force for ``name`` (as the scripts read it), or ``None``; its
    ``ttl`` is what is left of it at ``now`` (``None``: the server's time)."""
    raw = client.hgetall(wire(config_key(name)))
    return _override(raw, lambda: _server_now(client) if now is None else now)


def _override(raw: Mapping[Any, Any], now: Callable[[], float]) -> Override | None:
    rate, burst = _number(raw, "rate"), _number(raw, "burst")
    if rate is None and burst is None:
        return None
    until = raw.get("until", raw.get(b"until"))
    if until is None:
        return Override(rate, burst)
    try:
        left = float(until) - now()
    except ValueError:
        return Override(rate, burst)  # a garbled end: the scripts never end it either
    return None if left <= 0 else Override(rate, burst, left)


def _reads(name: str | Keyed, roots: Roots, at: float) -> list[Call]:
    """What ``inspect`` reads of one name, before asking its script."""
    calls: list[Call] = [
        ("hgetall", (code_key(name),)),
        ("hgetall", (config_key(name),)),
        ("hmget", (key_for(name, "breaker"), "mode", "opened_at")),
    ]
    if CONCURRENCY in roots:
        # See lua/concurrency.lua: holders and places scored by when they run out.
        holders = key_for(name, CONCURRENCY)
        after = f"({at!r}"
        calls += [
            ("zcount", (holders, after, "+inf")),
            ("zcount", (holders + ":expiry", after, "+inf")),
            ("get", (holders + ":max",)),
        ]
    fair = _fair_root(roots)
    if fair is not None:
        # See lua/_fair.lua: tenants scored by their finish; those ahead of now are
        # active. A count and the few furthest ahead, however many there are.
        tenants = key_for(name, fair) + ":tenants"
        calls += [
            ("zcount", (tenants, f"({at!r}", "+inf")),
            ("zrevrangebyscore", (tenants, "+inf", f"({at!r}", 0, TENANTS_SHOWN, True)),
        ]
    return calls


def _fair_root(roots: Roots) -> str | None:
    """A FairShare's root among a name's (the first, should processes run two kinds)."""
    return next((root for root in sorted(roots) if fair_kind(root) is not None), None)


def _peek_args(code: Mapping[str, str], now: float | None) -> list[str]:
    return ["peek", "" if now is None else repr(now), "1", "", code["p1"], code["p2"], code.get("slack", "0")]


def _single(code: Mapping[str, str]) -> str | None:
    """The kind of a single limiter whose script can be asked, from what its code says."""
    kind = code.get("kind")
    # A token bucket's rate may be infinite (a limiter that never limits); a quota's second
    # parameter is the text of its boundaries.
    if kind == "quota":
        rate = _period(code.get("p2"))
    else:
        rate = math.inf if kind == "token_bucket" and code.get("p2") == "inf" else number(code.get("p2"))
    numbers = [number(code.get("p1")), rate, number(code.get("slack", "0"))]
    return kind if kind in ALGORITHMS and None not in numbers else None


def _period(text: str | None) -> float | None:
    """The seconds of the period a quota's boundaries (its second parameter) were sent
    around, or ``None``."""
    return None if text is None else period_seconds(text)


def _second(kind: str, text: str) -> float:
    """An algorithm's second parameter as ``inspect`` shows it (a number)."""
    if kind == "quota":
        seconds = _period(text)
        return math.nan if seconds is None else seconds
    return float(text)


def inspect(client: Any, name: str | Keyed, now: float | None = None) -> Inspection:
    """What Redis holds of limiter ``name``: its configuration as the code set it and
    as changed, what it could grant now, what is promised ahead, a pause, a breaker,
    a ConcurrencyLimit's slots. A ``Keyed`` name: the budget of one of its keys."""
    return inspect_many(client, [name], now)[0]


def inspect_many(
    client: Any,
    names: Sequence[str | Keyed],
    now: float | None = None,
    found: Mapping[Any, Roots] | None = None,
) -> list[Inspection]:
    """:func:`inspect` of each of ``names`` in a few pipelines, whatever their number.
    ``found``: each name's roots if known (``key_survey.survey``); else they are probed."""
    if found is None:
        found = probe(client, names)[0]
    at = _server_now(client) if now is None else now
    roots = [found.get(name, frozenset()) for name in names]
    reads = [_reads(name, each, at) for name, each in zip(names, roots, strict=True)]
    replies = iter(pipelined(client, [call for calls in reads for call in calls]))
    raw = [[next(replies) for _ in calls] for calls in reads]
    fair = _tenants(client, names, roots, raw, at)
    codes = [_code_of(each[0]) for each in raw]
    # Then every single limiter's own script, in one more pass: what it could grant.
    kinds = [_single(code) for code in codes]
    for kind in set(kinds) - {None}:
        assert kind is not None
        script = single_script(kind)
        client.script_load(script.source)
    peeks: list[Call] = []
    for name, code, kind in zip(names, codes, kinds, strict=True):
        if kind is not None:
            keys = [key_for(name, kind), config_key(name)]
            peeks.append(("evalsha", (single_script(kind).sha, len(keys), *keys, *_peek_args(code, now))))
    peeked = iter(pipelined(client, peeks))
    return [
        replace(
            _inspection(name, each_roots, each, code, kind, None if kind is None else next(peeked), at), fair=shares
        )
        for name, each_roots, each, code, kind, shares in zip(names, roots, raw, codes, kinds, fair, strict=True)
    ]


def _tenants(
    client: Any, names: Sequence[str | Keyed], roots: Sequence[Roots], raw: list[list[Any]], at: float
) -> list[Tenants | None]:
    """Each FairShare's tenants (``None``: not one), their reads taken off ``raw``;
    the weights of the few shown read in one more pipeline, for every name at once."""
    found: list[tuple[str, int, list[tuple[str, float]]] | None] = []
    weights: list[Call] = []
    for name, each_roots, each in zip(names, roots, raw, strict=True):
        root = _fair_root(each_roots)
        if root is None:
            found.append(None)
            continue
        ahead = each.pop()
        active = each.pop()
        shown = [(text_of(tenant), float(finish)) for tenant, finish in ahead]
        found.append((root, int(active), shown))
        hash_key = key_for(name, root) + ":weights"
        weights += [("hget", (hash_key, "t" + tenant)) for tenant, _ in shown]
    stored = iter(pipelined(client, weights))
    out: list[Tenants | None] = []
    for share in found:
        if share is None:
            out.append(None)
            continue
        root, active, shown = share
        kind = fair_kind(root)
        assert kind is not None
        out.append(
            Tenants(kind, active, tuple((tenant, finish - at, number(next(stored))) for tenant, finish in shown))
        )
    return out


def _inspection(
    name: str | Keyed, roots: Roots, raw: list[Any], code: Mapping[str, str], kind: str | None, reply: Any, at: float
) -> Inspection:
    _, config_raw, (mode, opened), *slots = raw
    breaker = breaker_mode(mode)
    concurrency = None
    if slots:
        held, queued, most = slots
        stored = number(most)
        concurrency = Slots(int(held), int(queued), None if stored is None else int(stored))
    if kind is not None and reply is not None:
        # The script's time: a test clock's when one was given.
        at = float(text_of(reply[-1]))
    common: dict[str, Any] = dict(
        name=name.name if isinstance(name, Keyed) else name,
        key=name.key if isinstance(name, Keyed) else None,
        breaker=breaker,
        breaker_opened_at=None if breaker != "open" else number(opened),
        override=_override(config_raw, lambda: at),
        other_keys=members(roots),
        forms=forms(roots),
        concurrency=concurrency,
        now=at,
    )
    if kind is None or reply is None:
        # What the code says, if garbled (or of a kind this version does not know):
        # its kind only, nothing the script could be asked.
        return Inspection(**common, kind=code.get("kind"))
    e1, e2, available, wait, latest, paused, _ = (text_of(x) for x in reply)
    names = PARAMETERS[kind]
    return Inspection(
        **common,
        kind=kind,
        code=dict(zip(names, (float(code["p1"]), _second(kind, code["p2"])), strict=True)),
        slack=float(code.get("slack", 0.0)),
        shadow=code.get("shadow") == "1",
        effective=dict(zip(names, (float(e1), _second(kind, e2)), strict=True)),
        available=float(available),
        wait_for_one=float(wait),
        promised_ahead=max(0.0, float(latest) - at),
        paused_for=None if paused == "" else float(paused) - at,
    )


def inspect_all(client: Any, now: float | None = None) -> list[Inspection]:
    """:func:`inspect` of every name with something to show (a limiter that decided
    in the last day, a composite's or a ConcurrencyLimit's state, a change in force,
    a breaker), sorted: one SCAN pass, then a few pipelines."""
    found = survey(client)
    return inspect_many(client, sorted(found), now, found)
