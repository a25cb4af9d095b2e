"""Numbers that any JSON reader takes, for every ``--json`` of the operator's commands.

JSON has no infinity: ``json.dumps`` writes ``Infinity`` unless told not to, which
strict readers (``jq``, JavaScript's ``JSON.parse``, Go) refuse. A number without
bound (a refill that never limits, a wait that never ends) is written as the string
``"inf"`` (``"-inf"``) instead, and a NaN, which says nothing, as ``null``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["finite"]


def finite(value: Any) -> Any:
    """``value`` with every float JSON has no word for replaced, in mappings, lists
    and tuples at any depth (a tuple comes back a list, as JSON writes it)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, Mapping):
        return {key: finite(each) for key, each in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(each) for each in value]
    return value
