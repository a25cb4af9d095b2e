"""The fast path's mark in a bucket's state (see the top of lua/_single.lua)."""

from __future__ import annotations


def clean(text: bytes) -> bool:
    """Whether a bucket's state text carries the mark (see lua/token_bucket.lua and
    lua/leaky_bucket.lua)."""
    if b" " not in text.rstrip(b" "):
        return text.endswith(b" ")
    latest = text.split(b" ")[1].lstrip(b"-")
    return latest[:1] == b"0" and latest[1:2].isdigit()
