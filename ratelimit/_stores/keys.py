"""The Redis key scheme: every key of one limiter name shares the name's hash tag.

``ratelimit:{<name>}:...``: one Cluster slot per name, whatever its algorithms,
members and lanes, so a script may touch them all. Braces and ``%`` in a name are
escaped, so that a name can never end its own hash tag early.

A limiter's budget for one key (``limiter.for_key(key)``) has a tag of its own,
``ratelimit:{<name>%/<key>}:...``, each part escaped: an escaped part holds ``%`` only
before ``25``, ``7B`` or ``7D``, so ``%/`` is only ever the separator and no two
(name, key) pairs share a tag. Keys spread over the Cluster's masters.

Names read back are text by :func:`text_of` (bytes that are not UTF-8, as a
``latin-1`` client writes, as surrogate escapes) and sent again by :func:`wire` as
the same bytes, so ``inspect`` and ``set`` of such a name address the same key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "KEY_ERRORS",
    "KEY_SEPARATOR",
    "Keyed",
    "bytes_of",
    "code_key",
    "config_key",
    "follow_key",
    "key_for",
    "members_config_key",
    "name_of",
    "parts_of",
    "tag",
    "text_of",
    "untag",
    "wire",
]

#: What stands between a limiter's name and a key in a keyed budget's hash tag.
KEY_SEPARATOR = "%/"
#: How a key's bytes that are not UTF-8 are read and written again (see text_of).
KEY_ERRORS = "surrogateescape"


def text_of(value: object) -> str:
    """Stored text as ``str``, bytes that are not UTF-8 as surrogate escapes. Never
    raises; ``wire(text_of(raw)) == raw``."""
    return value.decode("utf-8", KEY_ERRORS) if isinstance(value, bytes) else str(value)


def bytes_of(text: str) -> bytes:
    """The bytes :func:`text_of` read ``text`` from."""
    return text.encode("utf-8", KEY_ERRORS)


def wire(value: Any) -> Any:
    """An argument as sent to Redis: text with surrogate escapes as its bytes, anything
    else as it is."""
    if isinstance(value, str) and not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", KEY_ERRORS)
    return value


@dataclass(frozen=True, slots=True)
class Keyed:
    """The budget of limiter ``name`` for ``key``, as a store is given it to bind
    (``name`` ``None``: an unnamed limiter, in process only); never equal to a name."""

    name: str | None
    key: str

    def __str__(self) -> str:
        return f"{self.name!r} key {self.key!r}"


def _escape(name: str) -> str:
    return name.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


def _unescape(text: str) -> str:
    return text.replace("%7B", "{").replace("%7D", "}").replace("%25", "%")


def tag(name: str | Keyed) -> str:
    """The text that stands for ``name`` (or a keyed budget) in a key: unique to it."""
    if isinstance(name, Keyed):
        # A store shared beyond this process always has a name (the front requires it).
        assert name.name is not None, "a shared store keeps keys of named limiters only"
        return f"{_escape(name.name)}{KEY_SEPARATOR}{_escape(name.key)}"
    return _escape(name)


def untag(text: str) -> tuple[str, str | None]:
    """``(limiter name, key or None)`` that :func:`tag` made ``text`` of."""
    name, separator, rest = text.partition(KEY_SEPARATOR)
    return (_unescape(name), _unescape(rest) if separator else None)


def parts_of(key: str) -> tuple[str, str | None] | None:
    """``(limiter name, key or None)`` of a key of this scheme, or ``None`` for another key."""
    if not key.startswith("ratelimit:{"):
        return None
    text, brace, _ = key[len("ratelimit:{") :].partition("}")
    if not brace:
        return None
    return untag(text)


def name_of(key: str) -> str | None:
    """The limiter name a key of this scheme belongs to, or ``None``."""
    parts = parts_of(key)
    return None if parts is None else parts[0]


def key_for(
    name: str | Keyed, kind: str, member: int | None = None, *, injected: bool = False, lane: str | None = None
) -> str:
    """The Redis key of limiter ``name``'s ``kind`` state (of a ``member`` or ``lane``;
    ``injected``: on a test clock)."""
    middle = ("injected:" if injected else "") + ("" if member is None else f"{member}:")
    if lane is not None:
        middle += f"{lane}:"
    return f"ratelimit:{{{tag(name)}}}:{middle}{kind}"


def config_key(name: str | Keyed) -> str:
    """The hash of limiter ``name``'s limit as changed at run time (``redis/config.py``)."""
    return f"ratelimit:{{{tag(name)}}}:config"


def members_config_key(name: str | Keyed) -> str:
    """The hash of a composite ``name``'s members' limits as changed at run time
    (``redis/config.py``; fields per member, see ``lua/_members.lua``)."""
    return f"ratelimit:{{{tag(name)}}}:members:config"


def follow_key(name: str) -> str:
    """The string of limiter ``name``'s change by name as its keys' decisions carry it
    (``redis/name_changes.py``), beside its ``config`` hash."""
    return f"ratelimit:{{{tag(name)}}}:config:keys"


def code_key(name: str | Keyed) -> str:
    """The hash of what the code of limiter ``name`` configured, written by its script."""
    return f"ratelimit:{{{tag(name)}}}:code"
