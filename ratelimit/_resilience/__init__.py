"""What to do when a call fails: backoff, the classification of an outcome, the retry
runner and the circuit breaker (its pure state machine and stores in
``breaker_state.py``). Built on ``_limiting`` and ``_stores``.
"""
