"""The Redis store: every decision one call of a Lua function (or script) on the server.

``backend.py`` is :class:`RedisBackend`, its face; the other modules are its parts, each
named for what it holds (see ARCHITECTURE.md). Only this folder reads ``lua/``. Beside
the backend, the face gives the environment variable that names the Redis the
limiters share (``REDIS_URL_ENV``, read by :func:`url_from_env`), which the command
line's ``--redis`` defaults to, and :func:`failure_reason`, the one line that says why a
call to Redis failed, for the backend's errors and the command line's alike, and
:func:`check_url`, what a URL gets wrong that can be told without asking the server.

Compatibility: what is kept so that processes of an earlier release, running beside
this one during a rolling deploy, and the keys they wrote, keep deciding right. Each
entry can be deleted after release 0.2.0; code paths that exist for one say
"compatibility: see the store's note".

- The clean marks (``lua/_single.lua``'s fast path) are chosen so that a release
  without them reads a marked state's numbers as they are, and a state written without
  a mark is decided on the full path.
- ``lua/_single.lua`` asks whether a slack record is beside the state in each call,
  never from an earlier one: an earlier release's ``set`` leaves the state unmarked.
- A leaky bucket's gaps are a key of their own (``<base>:gaps``) beside a state of two
  numbers, so that a release without gaps reads the state alone; a ``:gaps`` key
  beside an unmarked state was left by such a release, and is never read.
- A ConcurrencyLimit's ``:max`` key may be missing (written by a release without it):
  ``Slots.most`` and ``FleetRow.most`` are then ``None``.
"""

from .backend import RedisBackend
from .clients import DEFAULT_SOCKET_TIMEOUT, REDIS_URL_ENV, check_url, url_from_env
from .errors import failure_reason
from .scripts import preload

__all__ = [
    "DEFAULT_SOCKET_TIMEOUT",
    "REDIS_URL_ENV",
    "RedisBackend",
    "check_url",
    "failure_reason",
    "preload",
    "url_from_env",
]
