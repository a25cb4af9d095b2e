"""The Redis store: every decision one call of a Lua function (or script) on the server.

``backend.py`` is :class:`RedisBackend`, its face; the other modules are its parts, each
named for what it holds (see ARCHITECTURE.md). Only this folder reads ``lua/``. Beside
the backend, the face gives the environment variable that names the Redis the
limiters share (``REDIS_URL_ENV``, read by :func:`url_from_env`), which the command
line's ``--redis`` defaults to, and :func:`failure_reason`, the one line that says why a
call to Redis failed, for the backend's errors and the command line's alike.
"""

from .backend import RedisBackend
from .clients import DEFAULT_SOCKET_TIMEOUT, REDIS_URL_ENV, url_from_env
from .errors import failure_reason
from .scripts import preload

__all__ = ["DEFAULT_SOCKET_TIMEOUT", "REDIS_URL_ENV", "RedisBackend", "failure_reason", "preload", "url_from_env"]
