"""The SQLite store: state in one file on one box, each decision a transaction.

``backend.py`` is :class:`SQLiteBackend`, its face; the other modules are its parts
(see ARCHITECTURE.md). It reuses the memory store's handles and slots.

Compatibility: what is kept so that files written by an earlier release, and its
processes still running on a file during a rolling deploy, keep deciding right. Each
entry can be deleted after release 0.2.0; code paths that exist for one say
"compatibility: see the store's note".

- Files of format 1 and 2 are made format 3 when opened (``_MIGRATE_1``,
  ``_MIGRATE_2`` and ``_CONFIG_2`` in ``file.py``); afterwards such a file is refused.
- Changes kept in a config row (``past``) are bound to the state row's ``updated``
  (``seen``, ``config.kept``): a format-2 process rewrites the state without reading
  them, and the state is then moved straight to the latest change, as it moves it.
- A leaky bucket's gaps are a second pickle after the row's (``codec.py``), so that a
  release without gaps reads the first alone.
"""

from .backend import SQLiteBackend

__all__ = ["SQLiteBackend"]
