"""The Redis store: every decision one call of a Lua function (or script) on the server.

``backend.py`` is :class:`RedisBackend`, its face; the other modules are its parts, each
named for what it holds (see ARCHITECTURE.md). Only this folder reads ``lua/``.
"""

from .backend import RedisBackend

__all__ = ["RedisBackend"]
