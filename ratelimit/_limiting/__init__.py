"""The limiters users hold: the front every limiter shares (``front.py``: validation,
waiting, timeouts, cancellation, events), the three single-algorithm limiters
(``limiters.py``), ``Composite``, the guard against send jitter (``guard.py``) and what
feedback from a response restricts (``feedback.py``). Built on ``_stores`` and
``_algorithms``.
"""
