"""The text a Redis script is sent and what its replies mean, for every handle.

Numbers go as the shortest text that reads back as the same double; a grant's time
comes back with the script's name of it (see ``exact_name`` and ``pieces_name`` in
``lua/_members.lua``), which a refund sends back to say where its tokens sit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..._algorithms.holes import GrantTime
from ..store import Level


def num(value: float) -> str:
    """``value`` as a script argument."""
    # repr() is the shortest text that reads back as the same double, in Lua too.
    return repr(float(value))


#: The text of the amounts and waits sent most (a token, no wait...), made once: at
#: most :data:`CACHED_MOST` of them, the first met.
_CACHED: dict[float, str] = {}
CACHED_MOST = 64


def cached_num(value: float) -> str:
    """``num(value)``, for the amounts a process sends again and again (tokens, waits)."""
    text = _CACHED.get(value)
    if text is None:
        text = repr(float(value))
        # Equal values have one text, but for the zeros (0.0 == -0.0): none is cached.
        if value and len(_CACHED) < CACHED_MOST:
            _CACHED[value] = text
    return text


def grant_time(at: bytes | str, name: bytes | str) -> float:
    """The time of a grant the script replied, with its name when it gave one."""
    # The script's name of a grant (see exact_name and pieces_name in lua/_members.lua):
    # '' for none, a '0'/'1' per limit, or the pieces it was taken from.
    # Either may end in "g<number>": the latest move of the queue when it was given.
    text = name.decode() if isinstance(name, bytes) else name
    if not text:
        return float(at)
    text, _, gen_text = text.partition("g")
    gen = int(gen_text) if gen_text else 0
    if text.startswith("P"):
        pieces = []
        for piece in text[1:].split(";"):
            j, piece_at, tokens = piece.split(":")
            pieces.append((int(j) - 1, float(piece_at), float(tokens)))
        return GrantTime(float(at), (), tuple(pieces), gen)
    return GrantTime(float(at), tuple(flag == "1" for flag in text), (), gen)


def at_once(text: bytes | str) -> float:
    """The time of a grant at once that the script replied alone (see ``at_once_reply``
    in ``lua/_prelude.lua``): the server's TIME as ``"<seconds> <microseconds>"``, read
    as the script reads it, or the time this client sent, to the same double."""
    seconds, _, micros = (text.decode() if isinstance(text, bytes) else text).partition(" ")
    if micros:
        return float(seconds) + float(micros) / 1000000
    return float(seconds)


def decision_of(reply: Sequence[bytes | str] | bytes | str) -> tuple[float, float]:
    """A reservation's reply as ``(signed_wait, at)``."""
    if isinstance(reply, (bytes, str)):
        return 0.0, at_once(reply)
    if len(reply) > 2 and reply[2]:
        return float(reply[0]), grant_time(reply[1], reply[2])
    return float(reply[0]), float(reply[1])  # no name: grant_time's first answer


def leveled_of(reply: Sequence[bytes | str]) -> tuple[tuple[float, float], Level]:
    """The reply of a reserve that asked for the level after it (a ``'1'`` after its
    arguments, see ``lua/_single.lua``): its decision, as :func:`decision_of`, and its
    level, ``(left, more_in)``: the whole tokens that could go at once now and the
    seconds until one more could, sent in whole microseconds rounded up. A grant at
    once comes as ``[time, left, micros]`` (the time as ``at_once_reply`` writes it),
    any other decision as ``[signed_wait, at, name, left, micros]``."""
    if len(reply) == 3:
        return (0.0, at_once(reply[0])), (float(reply[1]), float(reply[2]) / 1000000)
    return decision_of(reply[:3]), (float(reply[3]), float(reply[4]) / 1000000)


def charged_of(reply: Sequence[bytes | str]) -> float | None:
    """Where the slot of a single limiter's charge ends (``None``: it has none)."""
    # A single limiter's charge says where its slot ends ('' where it has no slot).
    if len(reply) < 2 or reply[1] in (b"", ""):
        return None
    return grant_time(reply[1], reply[2] if len(reply) > 2 and reply[2] else b"1")


def at_arg(at: float | None) -> str:
    """The grant a refund gives back to, as the script reads it (``""``: none named)."""
    if at is None or math.isnan(at):
        return ""
    if isinstance(at, GrantTime):
        # A refund that names its grant: the time, and where its tokens sit.
        gen = f"g{at.gen}" if at.gen else ""
        if at.pieces:
            pieces = ";".join(f"{j + 1}:{num(piece_at)}:{num(tokens)}" for j, piece_at, tokens in at.pieces)
            return f"{num(at)} P{pieces}{gen}"
        return f"{num(at)} {''.join('1' if flag else '0' for flag in at.exact)}{gen}"
    return num(at)


def wait_arg(max_wait: float) -> str:
    """``max_wait`` as a script argument (``""``: no limit)."""
    if max_wait == math.inf:
        return ""
    if max_wait == 0.0:  # a try_acquire's: its text, without formatting it each time
        return "0.0" if math.copysign(1.0, max_wait) > 0 else "-0.0"
    return cached_num(max_wait)
