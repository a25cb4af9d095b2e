"""What the public integrations share, so that each adds only its client's I/O.

``http.py`` serves ``ratelimit.httpx``, ``ratelimit.requests`` and ``ratelimit.aiohttp``;
``llm.py`` and ``llm_costs.py`` the transports of ``ratelimit.llm``; ``metrics.py``
``ratelimit.prometheus`` and ``ratelimit.otel``. Only public modules import from here.
"""
