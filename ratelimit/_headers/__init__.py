"""Reading a response's rate-limit headers (a leaf: nothing here imports the rest of the
package).

``parse.py`` is the door: ``parse_rate_limit_headers`` collects the headers within
bounds and returns a :class:`RateLimitInfo`, which feedback, the retry runner, the LLM
transports and ``ratelimit.celery`` read. Behind it, ``dialects.py`` holds one function
per provider's dialect and their registry, ``budgets.py`` keeps the binding budget of
several readings, ``fields.py`` holds ``RateLimitInfo`` and the readings the dialects
share, and ``values.py`` the grammar of one value (numbers, durations, dates, lists,
each capped).
"""
