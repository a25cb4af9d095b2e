"""The algorithms: pure state transitions, no clock and no I/O.

One module per algorithm, named like its Lua twin in ``lua/`` (``token_bucket.py``
beside ``lua/token_bucket.lua``); ``algorithm.py`` says what every one of them is,
and ``holes.py`` (twinned by ``lua/_members.lua``) what withdrawn reservations leave.
Nothing here imports from outside this folder but the leaves (``breaker.py`` checks
its policy with ``_validate`` and names its modes with ``_events``).
"""
