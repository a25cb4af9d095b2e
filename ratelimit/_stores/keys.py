"""The Redis key scheme: every key of one limiter name shares the name's hash tag.

``ratelimit:{<name>}:...``: one Cluster slot per name, whatever its algorithms,
members and lanes, so a script may touch them all. Braces and ``%`` in a name are
escaped, so that a name can never end its own hash tag early.
"""

from __future__ import annotations

__all__ = ["code_key", "config_key", "key_for", "name_of"]


def _escape(name: str) -> str:
    return name.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


def _unescape(text: str) -> str:
    return text.replace("%7B", "{").replace("%7D", "}").replace("%25", "%")


def name_of(key: str) -> str | None:
    """The limiter name a key of this scheme belongs to, or ``None`` for another key."""
    if not key.startswith("ratelimit:{"):
        return None
    tag, brace, _ = key[len("ratelimit:{") :].partition("}")
    return _unescape(tag) if brace else None


def key_for(name: str, kind: str, member: int | None = None, *, injected: bool = False, lane: str | None = None) -> str:
    """The Redis key of limiter ``name`` (``member`` of a composite, or ``lane`` of a
    budget with priorities) of algorithm ``kind``; ``injected`` for a limiter on a test
    clock."""
    middle = ("injected:" if injected else "") + ("" if member is None else f"{member}:")
    if lane is not None:
        middle += f"{lane}:"
    return f"ratelimit:{{{_escape(name)}}}:{middle}{kind}"


def config_key(name: str) -> str:
    """The hash of limiter ``name``'s limit as changed at run time (``config.py``)."""
    return f"ratelimit:{{{_escape(name)}}}:config"


def code_key(name: str) -> str:
    """The hash of what the code of limiter ``name`` configured, written by its script."""
    return f"ratelimit:{{{_escape(name)}}}:code"
