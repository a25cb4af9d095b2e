"""The limiters users hold: the shared front (``front.py``: validation, waiting,
cancellation, events), the single-algorithm limiters (``limiters.py``), ``Composite``,
``ConcurrencyLimit``, and what they share (guard, feedback, keys, priorities, learned
rates). Built on ``_stores`` and ``_algorithms``.
"""
