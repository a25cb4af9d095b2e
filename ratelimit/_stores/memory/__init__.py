"""The in-process store: state decided under a lock in this process (``backend.py``).

The SQLite store reuses its handles and slots, with a transaction for a lock.
"""

from .backend import MemoryBackend

__all__ = ["MemoryBackend"]
