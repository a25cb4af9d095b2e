"""What the public integrations share, so that each adds only its client's I/O.

``http.py`` is the policy of ``ratelimit.httpx``, ``ratelimit.requests`` and
``ratelimit.aiohttp`` (the retry runner each request goes through, the slots its
attempts hold); ``llm.py`` is what ``ratelimit.llm``'s transports decide (under
``ratelimit.openai`` and ``ratelimit.anthropic``), with ``llm_costs.py`` reading a
call's estimate and usage; ``metrics.py`` is what ``ratelimit.prometheus`` and
``ratelimit.otel`` share. Built on ``_resilience``, ``_limiting`` and the leaves; only
the public modules import from here.
"""
