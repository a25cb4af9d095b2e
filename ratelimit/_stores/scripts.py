"""The Lua scripts: found, composed, and called by SHA.

The scripts live as ``.lua`` files in the top-level ``lua/`` folder of the source tree
and inside the wheel as ``ratelimit/lua/``. A loaded script is composed of pieces: the
shared prelude, the algorithm's functions, what one limiter and a group share
(``_members.lua``), and a driver (one limiter; the two lanes of a budget with
priorities; or a group of limits for a composite, which needs every algorithm).

A script is called with EVALSHA; if the server does not know it (first use, after
``SCRIPT FLUSH``, a restart or a failover) the same call is repeated as EVAL, which
also caches it, so the cost of a reload is one extra round trip, once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from redis.exceptions import NoScriptError

__all__ = [
    "ALGORITHMS",
    "Script",
    "breaker_script",
    "concurrency_script",
    "group_script",
    "lanes_script",
    "live_script",
    "lua_source",
    "single_script",
]

#: Every algorithm kind that has a script, in a fixed order.
ALGORITHMS = ("token_bucket", "leaky_bucket", "sliding_window", "sliding_window_counter")
#: What only ever decides as a member of a group: the learned pace of ``adaptive=``.
GROUP_ONLY = ("adaptive",)


def _lua_dir() -> Path:
    packaged = resources.files("ratelimit").joinpath("lua")
    if packaged.is_dir():
        return Path(str(packaged))
    # A source checkout (or editable install): the top-level lua/ beside the package.
    source = Path(__file__).resolve().parents[2] / "lua"
    if source.is_dir():
        return source
    raise FileNotFoundError(f"ratelimit's Lua scripts are missing: looked in {packaged} and {source}")


@cache
def lua_source(name: str) -> str:
    """The text of ``lua/<name>.lua``."""
    return (_lua_dir() / f"{name}.lua").read_text(encoding="utf-8")


class Script:
    """One composed script, called by SHA with a transparent reload."""

    __slots__ = ("name", "sha", "source")

    def __init__(self, name: str, source: str) -> None:
        self.name = name
        self.source = source
        self.sha = hashlib.sha1(source.encode("utf-8")).hexdigest()

    def __call__(self, client: Any, keys: Sequence[str], args: Sequence[str | float]) -> Any:
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            return client.eval(self.source, len(keys), *keys, *args)

    async def call_async(self, client: Any, keys: Sequence[str], args: Sequence[str | float]) -> Any:
        try:
            return await client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            return await client.eval(self.source, len(keys), *keys, *args)

    def __repr__(self) -> str:
        return f"Script({self.name!r}, sha={self.sha[:12]})"


def _driven(kind: str, driver: str, name: str) -> Script:
    """Algorithm ``kind`` bound to ``ALG`` and run by ``lua/<driver>.lua``."""
    if kind not in ALGORITHMS:
        raise ValueError(f"no script for algorithm {kind!r}")
    parts = [
        lua_source("_prelude"),
        lua_source(kind),
        f"local ALG, KIND = {kind}, '{kind}'",
        lua_source("_members"),
        lua_source("_top"),
        lua_source(driver),
    ]
    return Script(name, "\n".join(parts))


@cache
def single_script(kind: str) -> Script:
    """The script of one limiter of algorithm ``kind``."""
    return _driven(kind, "_single", kind)


@cache
def lanes_script(kind: str) -> Script:
    """The script of a budget with priorities: two lanes of algorithm ``kind``."""
    return _driven(kind, "_lanes", f"{kind}:lanes")


@cache
def group_script() -> Script:
    """The script of a composite: every algorithm, and the group driver."""
    parts = [
        lua_source("_prelude"),
        *(lua_source(kind) for kind in ALGORITHMS + GROUP_ONLY),
        lua_source("_members"),
        lua_source("_top"),
        lua_source("_group"),
    ]
    return Script("group", "\n".join(parts))


@cache
def breaker_script() -> Script:
    """The script of a shared circuit breaker."""
    return Script("breaker", "\n".join([lua_source("_prelude"), lua_source("breaker")]))


@cache
def concurrency_script() -> Script:
    """The script of a shared semaphore (``ConcurrencyLimit``)."""
    return Script("concurrency", "\n".join([lua_source("_prelude"), lua_source("concurrency")]))


@cache
def live_script() -> Script:
    """The script of the safe mode's heartbeat: the live processes (``live.py``)."""
    return Script("live", "\n".join([lua_source("_prelude"), lua_source("live")]))
