"""The limiter names a Redis holds, and what each one is, told by its keys.

Every key of a name sits under ``ratelimit:{<name>}:`` (``keys.py``). What follows
that prefix says what holds the key; the *roots* are:

- ``<kind>``: a single limiter of algorithm ``kind`` (its script also writes ``code``,
  what the code says, kept a day; a keyed budget's, as long as its state and a minute);
- ``<i>:<kind>``: member ``i`` of a composite; an adaptive limiter is a group of two
  whose second member is ``1:adaptive``;
- ``hi:<kind>`` and ``lo:<kind>``: the two lanes of a budget with priorities;
- ``fair:<kind>``: the line of a budget shared by a FairShare (beside it ``:tenants``
  and ``:weights``), probed for (a change at run time is refused) but not surveyed;
- ``concurrency``: a ConcurrencyLimit's holders (beside it ``:queue``, ``:expiry``,
  ``:seq`` and ``:max``, the maximum its processes were built with);
- ``config`` (a change at run time), ``breaker`` (a circuit breaker), ``code``.

Anything else (``<root>:holes``, ``...:top:<second>``, ``injected:...``) belongs to a
root. :func:`survey` finds every name in one SCAN pass (one per Cluster master);
:func:`probe` asks about given names with one pipeline of EXISTS and no scan.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from ..keys import Keyed, key_for, parts_of, text_of
from .batch import Call, pipelined
from .scripts import ALGORITHMS, GROUP_ONLY

__all__ = ["CONCURRENCY", "Roots", "breaker_mode", "forms", "members", "number", "probe", "split", "survey"]

#: A name's roots: what follows its prefix in the keys found.
Roots = frozenset[str]

#: The root of a ConcurrencyLimit's holders.
CONCURRENCY = "concurrency"
_LANES = ("hi", "lo")
_FAIR = "fair"
_PLAIN = ("code", "config", "breaker", CONCURRENCY, *ALGORITHMS)
_MEMBER_KINDS = (*ALGORITHMS, *GROUP_ONLY, CONCURRENCY)
_MEMBER = re.compile(r"(\d+):(\w+)")
#: Members probed in one round trip; a composite with more is probed again.
_PROBED = 8


def split(key: str) -> tuple[str, str] | None:
    """(the escaped name's prefix ``ratelimit:{...}:``, the rest) of one of our keys."""
    if not key.startswith("ratelimit:{"):
        return None
    end = key.find("}:", len("ratelimit:{"))
    if end < 0:
        return None
    return key[: end + 2], key[end + 2 :]


def _is_root(rest: str) -> bool:
    if rest in _PLAIN:
        return True
    member = _MEMBER.fullmatch(rest)
    if member is not None:
        return member.group(2) in _MEMBER_KINDS
    lane, _, kind = rest.partition(":")
    return lane in _LANES and kind in ALGORITHMS


def members(roots: Iterable[str]) -> tuple[str, ...]:
    """The members' and lanes' roots, in member order (``0:token_bucket``, ...)."""

    def order(root: str) -> tuple[int, str]:
        number = root.partition(":")[0]
        return (int(number), root) if number.isdigit() else (-1, root)

    return tuple(sorted((r for r in roots if ":" in r), key=order))


def forms(roots: Iterable[str]) -> tuple[str, ...]:
    """What the name is besides a single limiter: ``adaptive``, ``composite``,
    ``priorities``, ``concurrency``, ``fair``, each at most once, in this order."""
    found = set(roots)
    kinds = {m.group(2) for m in map(_MEMBER.fullmatch, found) if m is not None}
    out = []
    if "adaptive" in kinds:
        out.append("adaptive")
    elif kinds:
        out.append("composite")
    if any(r.partition(":")[0] in _LANES for r in found):
        out.append("priorities")
    if CONCURRENCY in found:
        out.append("concurrency")
    if any(r.partition(":")[0] == _FAIR for r in found):
        out.append("fair")
    return tuple(out)


def survey(client: Any) -> dict[str, Roots]:
    """Every name with a root on this Redis, and its roots: one SCAN pass."""
    found: dict[str, set[str]] = defaultdict(set)
    for raw in client.scan_iter(match="ratelimit:{*", count=1000):
        key = text_of(raw)
        parts, owner = split(key), parts_of(key)
        # A keyed budget (``for_key``) is one of its limiter's many: not a name of its own.
        if parts is not None and owner is not None and owner[1] is None and _is_root(parts[1]):
            found[owner[0]].add(parts[1])
    return {name: frozenset(roots) for name, roots in found.items()}


def _candidates(first: int) -> list[str]:
    roots = [f"{i}:{kind}" for i in range(first, first + _PROBED) for kind in _MEMBER_KINDS]
    if first == 0:
        roots += [*_PLAIN, *(f"{lane}:{kind}" for lane in (*_LANES, _FAIR) for kind in ALGORITHMS)]
    return roots


N = TypeVar("N", bound="str | Keyed")


def probe(client: Any, names: Sequence[N], extra: Sequence[Call] = ()) -> tuple[dict[N, Roots], list[Any]]:
    """The roots of each of ``names`` with no scan: one pipeline of EXISTS (another
    for the rare composite of more than eight members). ``extra`` calls go in the
    first pipeline; their replies come back second. A ``Keyed`` name: one key's."""
    found: dict[N, set[str]] = {name: set() for name in names}
    pending = list(names)
    first = 0
    extras: list[Any] = []
    while pending:
        asked = [(name, root) for name in pending for root in _candidates(first)]
        calls: list[Call] = [("exists", (key_for(name, root),)) for name, root in asked]
        replies = pipelined(client, [*calls, *(extra if first == 0 else ())])
        if first == 0:
            extras = replies[len(calls) :]
        for (name, root), count in zip(asked, replies, strict=False):
            if count:
                found[name].add(root)
        last = first + _PROBED - 1
        pending = [n for n in pending if any(r.startswith(f"{last}:") for r in found[n])]
        first += _PROBED
    return {name: frozenset(roots) for name, roots in found.items()}, extras


_BREAKER_MODES = {0: "closed", 1: "open", 2: "half-open"}


def number(raw: Any) -> float | None:
    """A stored number; ``None`` if missing or garbled (a hand-written key must not
    stop the listing of every other limiter)."""
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def breaker_mode(raw: Any) -> str | None:
    """A breaker's stored mode as a word (see ``lua/breaker.lua``); ``None``: no breaker."""
    if raw is None:
        return None
    value = number(raw)
    return "unknown" if value is None else _BREAKER_MODES.get(int(value), "unknown")
