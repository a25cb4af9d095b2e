"""Where limiters keep their state: one folder per store (``memory/``, ``redis/``,
``sqlite/``) and the files they share (the protocol in ``store.py``, key names,
counters, waiters, the failure policy, the local fallback, the operator's records).
Built on ``_algorithms``; knows nothing of the limiter front above it.
"""
