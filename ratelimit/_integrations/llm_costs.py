"""What an LLM call costs in tokens, with no I/O: the estimate read from its request
and the real cost read from its response's ``usage`` (a JSON body or a stream), for
``llm.py``.

The estimate counts a request as OpenAI's own limiter does: the prompt plus the most
the answer may take, times ``n`` choices. The real cost is ``usage``'s
``total_tokens``, else the sum of its counts.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

__all__ = ["BodyUsage", "Estimator", "StreamUsage", "Usage", "usage_tokens"]

#: Counts a prompt's tokens (a tokenizer's ``len(encode(text))``).
Tokenizer = Callable[[str], float]
#: Replaces the whole estimate: the request's JSON body in, tokens out.
Estimate = Callable[[Mapping[str, Any]], float]

#: The request fields that cap the answer, the first one present counting.
OUTPUT_FIELDS = ("max_completion_tokens", "max_output_tokens", "max_tokens")
#: Top-level request fields whose text is no part of the prompt.
NOT_PROMPT = frozenset({"model", "user", "service_tier", "metadata", "prompt_cache_key", "safety_identifier"})
#: The counts that add up to a call's cost when ``usage`` has no ``total_tokens``.
COUNTS = (
    "prompt_tokens",
    "completion_tokens",
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)
#: The most of a JSON body kept to read its usage (a larger one keeps its estimate).
BODY_CAP = 8 << 20
#: The longest line of an event stream kept while it is incomplete.
LINE_CAP = 1 << 20


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _count(value: object) -> float | None:
    """A finite count >= 0 (never a bool), else ``None``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def _strings(value: object) -> Iterator[str]:
    # Iterative, so that a deeply nested body cannot exhaust the stack.
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


class Estimator:
    """A request's estimate from its JSON body.

    Args:
        tokenizer: counts the prompt's tokens from its text (every string of the
            body but the model's name and the like, one per line); default: its
            characters / 4, rounded up.
        estimate: replaces the whole estimate (the parsed body in, tokens out).
        default_max_tokens: the answer's allowance when the request caps none.

    Raises:
        TypeError: ``tokenizer`` or ``estimate`` not callable.
        ValueError: ``default_max_tokens`` not a count > 0.
    """

    __slots__ = ("default_max_tokens", "estimate", "tokenizer")

    def __init__(
        self, tokenizer: Tokenizer | None = None, estimate: Estimate | None = None, default_max_tokens: int = 4096
    ) -> None:
        if tokenizer is not None and not callable(tokenizer):
            raise TypeError(f"tokenizer must be a callable (text -> tokens) or None, got {_short(tokenizer)}")
        if estimate is not None and not callable(estimate):
            raise TypeError(f"estimate must be a callable (request body -> tokens) or None, got {_short(estimate)}")
        if isinstance(default_max_tokens, bool) or not isinstance(default_max_tokens, int) or default_max_tokens <= 0:
            raise ValueError(f"default_max_tokens must be an int > 0, got {_short(default_max_tokens)}")
        self.tokenizer = tokenizer
        self.estimate = estimate
        self.default_max_tokens = default_max_tokens

    def __call__(self, content: bytes) -> float:
        """The tokens a request with body ``content`` may cost (at least 1).

        A body that is not a JSON object costs its bytes / 4 plus the default
        allowance. A ``tokenizer`` or ``estimate`` that answers anything but a
        finite number >= 0 raises ``ValueError`` naming it.
        """
        try:
            body = json.loads(content) if content else None
        except (ValueError, UnicodeDecodeError):
            body = None
        if not isinstance(body, Mapping):
            return math.ceil(len(content) / 4) + float(self.default_max_tokens)
        if self.estimate is not None:
            return max(1.0, self._checked("estimate", self.estimate(body)))
        texts = [text for key, value in body.items() if key not in NOT_PROMPT for text in _strings(value)]
        if self.tokenizer is not None:
            prompt = self._checked("tokenizer", self.tokenizer("\n".join(texts)))
        else:
            prompt = math.ceil(sum(map(len, texts)) / 4)
        output = next(
            (n for n in (_count(body.get(field)) for field in OUTPUT_FIELDS) if n is not None),
            float(self.default_max_tokens),
        )
        choices = _count(body.get("n"))
        return max(1.0, prompt + output * (choices if choices is not None and choices >= 1 else 1.0))

    @staticmethod
    def _checked(name: str, value: object) -> float:
        count = _count(value)
        if count is None:
            raise ValueError(f"{name} must return a finite number of tokens >= 0, got {_short(value)}")
        return count

    def __repr__(self) -> str:
        return (
            f"Estimator(tokenizer={self.tokenizer!r}, estimate={self.estimate!r}, "
            f"default_max_tokens={self.default_max_tokens})"
        )


def usage_tokens(usage: object) -> float | None:
    """The tokens a ``usage`` object counts (``None``: it counts none)."""
    if not isinstance(usage, Mapping):
        return None
    total = _count(usage.get("total_tokens"))
    if total is not None:
        return total
    counts = [n for n in (_count(usage.get(name)) for name in COUNTS) if n is not None]
    return sum(counts) if counts else None


class Usage:
    """The usage of one response, gathered from the payloads that carry it.

    A stream reports it in pieces (Anthropic: the input in ``message_start``, the
    output so far in each ``message_delta``), so each count keeps its largest value.
    """

    __slots__ = ("counts", "final")

    #: Events that carry a stream's last usage: Anthropic's ``message_delta``, the
    #: Responses API's end of a response.
    LAST = frozenset({"message_delta", "response.completed", "response.incomplete", "response.failed"})

    def __init__(self) -> None:
        self.counts: dict[str, float] = {}
        #: Whether the last usage was seen (a client may close a stream as soon as it
        #: has its answer, before the bytes that follow).
        self.final = False

    def take(self, payload: object) -> None:
        """Read the usage ``payload`` carries: its own, its ``message``'s (Anthropic's
        ``message_start``) or its ``response``'s (OpenAI's Responses events)."""
        if not isinstance(payload, Mapping):
            return
        # OpenAI's Chat Completions: the usage in a chunk of its own, the last one.
        last = payload.get("type") in self.LAST or ("usage" in payload and "choices" in payload)
        self.final = self.final or last
        for holder in (payload, payload.get("message"), payload.get("response")):
            usage = holder.get("usage") if isinstance(holder, Mapping) else None
            if isinstance(usage, Mapping):
                for name in ("total_tokens", *COUNTS):
                    n = _count(usage.get(name))
                    if n is not None and n > self.counts.get(name, -1.0):
                        self.counts[name] = n

    def tokens(self) -> float | None:
        """The tokens counted so far (``None``: no usage seen)."""
        return usage_tokens(self.counts) if self.counts else None


class BodyUsage(Usage):
    """The usage of a JSON body, read once it has all arrived (up to ``BODY_CAP``)."""

    __slots__ = ("_chunks", "_size")

    def __init__(self) -> None:
        super().__init__()
        self._chunks: list[bytes] | None = []
        self._size = 0

    def feed(self, chunk: bytes) -> None:
        """Keep ``chunk`` of the body (past the cap, nothing more is kept)."""
        if self._chunks is None:
            return
        self._size += len(chunk)
        if self._size > BODY_CAP:
            self._chunks = None
        else:
            self._chunks.append(chunk)

    def end(self) -> None:
        """The body has all arrived: read its usage."""
        self.final = True
        if self._chunks is None:
            return
        content = b"".join(self._chunks)
        self._chunks = None
        if b'"usage"' not in content:
            return
        with contextlib.suppress(ValueError, UnicodeDecodeError):
            self.take(json.loads(content))


class StreamUsage(Usage):
    """The usage in an event stream (``text/event-stream``), read line by line as the
    bytes pass: only the ``data:`` lines that mention ``"usage"`` are parsed."""

    __slots__ = ("_rest",)

    def __init__(self) -> None:
        super().__init__()
        self._rest = b""

    def feed(self, chunk: bytes) -> None:
        """Read the complete lines ``chunk`` ends (an incomplete one waits for the next)."""
        data = self._rest + chunk if self._rest else chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            self._rest = data if len(data) <= LINE_CAP else b""
            return
        self._rest = data[cut + 1 :]
        if len(self._rest) > LINE_CAP:
            self._rest = b""
        if b'"usage"' not in data:
            return
        for line in data[:cut].split(b"\n"):
            if line.startswith(b"data:") and b'"usage"' in line:
                try:
                    self.take(json.loads(line[5:]))
                except (ValueError, UnicodeDecodeError):
                    continue

    def end(self) -> None:
        """The stream has ended: read a last line that had no newline."""
        if self._rest:
            self.feed(b"\n")
