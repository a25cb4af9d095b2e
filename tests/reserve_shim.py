"""TEMPORARY: ``limiter.reserve`` until the reserve branch is merged (then delete this)."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

from ratelimit._limiting.front import Limiter

if not hasattr(Limiter, "reserve"):

    def _reserve(self: Any, tokens: Any = 1.0, timeout: Any = None) -> Any:
        n = self._tokens(tokens)
        wait, at = self._handle.reserve(n, math.inf)
        return SimpleNamespace(wait=wait, at=at, cancel=lambda: self._give_back(n, at))

    Limiter.reserve = _reserve  # type: ignore[attr-defined]
