"""The in-process store: state decided under a lock in this process (``backend.py``),
and a ConcurrencyLimit's slots (``slots.py``).

The SQLite store reuses its handles and each limiter's ``Slot``, with a transaction
for a lock; both shared stores reuse its ConcurrencyLimit slots when they cannot be
reached.
"""

from .backend import MemoryBackend

__all__ = ["MemoryBackend"]
