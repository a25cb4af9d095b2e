"""What to do when a call fails: backoff, the classification of an outcome, the retry
runner and the circuit breaker (its state machine is ``_algorithms/breaker.py``, its
state bound through ``Backend.bind_breaker``). Built on ``_limiting`` and ``_stores``.
"""
