"""Where limiters keep their state: the store protocol (``store.py``), in-process
state (``memory.py``), Redis (``redis.py`` and the ``redis_*.py`` and
``fallback_share.py`` modules beside it, its error classes in ``redis_errors.py``, the
Lua scripts found and called in ``scripts.py``), and the counters a store updates
inside its own serialisation (``tally.py``). Built on ``_algorithms``; knows nothing
of the limiter front above it.
"""
