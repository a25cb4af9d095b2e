"""What the public integrations share, so that each adds only its client's I/O.

``http.py`` serves the HTTP clients, ``llm.py`` and ``llm_costs.py`` the LLM
transports, ``metrics.py`` the two metrics exporters. Only public modules import
from here.
"""
