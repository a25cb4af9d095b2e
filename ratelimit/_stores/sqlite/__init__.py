"""The SQLite store: state in one file on one box, each decision a transaction.

``backend.py`` is :class:`SQLiteBackend`, its face; the other modules are its parts
(see ARCHITECTURE.md). It reuses the memory store's handles and slots.
"""

from .backend import SQLiteBackend

__all__ = ["SQLiteBackend"]
