"""Text from Redis made safe for a terminal, and cut to a column's width.

Limiter names often carry tenant ids: whoever picks a name picks what ``top`` and
``inspect`` write to the operator's terminal. Every character that is not printable
(escape sequences, carriage returns, the 8-bit C1 controls, bidirectional overrides,
line separators) is written as its Python escape (``\\x1b``, ``\\u202e``), so that a
name can neither move the cursor, retitle the window nor leave a colour on. A byte of
a name that is not UTF-8 (read as its surrogate escape, see ``_stores/keys.py``) is
written as that byte, ``\\xe9``, as a shell's ``$'...'`` would give it back. A cut
works on whole escapes and on what the terminal shows: a wide character takes two
columns, a combining one none.
"""

from __future__ import annotations

import unicodedata

__all__ = ["fit", "pad", "printable", "width"]

_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
#: What marks a cut.
CUT = "~"


def _unit(char: str) -> str:
    if char.isprintable():
        return char
    if char in _SHORT:
        return _SHORT[char]
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:
        code -= 0xDC00  # a byte that was not UTF-8, as the byte
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _columns(unit: str) -> int:
    if len(unit) > 1:
        return len(unit)  # an escape: plain ASCII
    if unicodedata.combining(unit):
        return 0
    return 2 if unicodedata.east_asian_width(unit) in ("W", "F") else 1


def printable(text: str) -> str:
    """``text`` with every character a terminal would act on written as its escape."""
    return "".join(_unit(char) for char in text)


def width(text: str) -> int:
    """The columns ``printable(text)`` takes on a terminal."""
    return sum(_columns(_unit(char)) for char in text)


def fit(text: str, columns: int) -> str:
    """``printable(text)`` in at most ``columns`` columns: cut between whole
    characters or escapes and ended by ``~`` when it does not fit."""
    units = [_unit(char) for char in text]
    if sum(_columns(u) for u in units) <= columns:
        return "".join(units)
    kept: list[str] = []
    used = 0
    for unit in units:
        taken = _columns(unit)
        if used + taken > columns - len(CUT):
            break
        kept.append(unit)
        used += taken
    return "".join(kept) + CUT


def pad(text: str, columns: int) -> str:
    """``fit(text, columns)`` filled with spaces to exactly ``columns`` columns."""
    shown = fit(text, columns)
    return shown + " " * (columns - width(shown))
