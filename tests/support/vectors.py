"""The protocol's conformance vectors (``protocol/vectors.json``): read, run, recorded.

A vector is a scenario of steps on fresh keys: ``fcall`` a function of the library
(its name after ``ratelimit_p<protocol>_``) with ``keys`` and ``args``, or send a plain
``command``; ``$NAME`` in any key, argument or command is the scenario's own name. Each
step's ``reply`` is what the server must answer, compared by :func:`conforms`: texts and
integers exactly, and an expected list as the first items of the reply (a later revision
of the protocol may add fields at the end). The Node client runs the same file
(``clients/node/test/vectors.test.ts``) with the same rules.

``python tests/support/vectors.py`` records the replies of the server at ``REDIS_URL``
into the file, for a maintainer to read before committing: the file is the protocol's
word, not the code's.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

#: The vectors, beside the protocol's page.
VECTORS = Path(__file__).resolve().parents[2] / "protocol" / "vectors.json"


def load() -> dict[str, Any]:
    vectors: dict[str, Any] = json.loads(VECTORS.read_text(encoding="utf-8"))
    return vectors


def _named(value: Any, name: str) -> Any:
    return value.replace("$NAME", name) if isinstance(value, str) else value


def _plain(reply: Any) -> Any:
    """A reply as the vectors write it: bytes as text, lists as lists."""
    if isinstance(reply, bytes):
        return reply.decode("utf-8")
    if isinstance(reply, (list, tuple)):
        return [_plain(item) for item in reply]
    return reply


def send(client: Any, prefix: str, step: dict[str, Any], name: str) -> Any:
    """One step's reply (an error reply as ``{"error": <its text>}``)."""
    import redis

    try:
        if "fcall" in step:
            keys = [_named(key, name) for key in step["keys"]]
            args = [_named(arg, name) for arg in step["args"]]
            return _plain(client.fcall(prefix + step["fcall"], len(keys), *keys, *args))
        return _plain(client.execute_command(*(_named(word, name) for word in step["command"])))
    except redis.ResponseError as exc:
        return {"error": str(exc)}


def conforms(expected: Any, got: Any) -> bool:
    """Whether a reply is what a vector expects: lists by their first items."""
    if isinstance(expected, list):
        return (
            isinstance(got, list)
            and len(got) >= len(expected)
            and all(conforms(e, g) for e, g in zip(expected, got, strict=False))
        )
    if isinstance(expected, dict) and "error" in expected:
        return isinstance(got, dict) and expected["error"] in str(got.get("error", ""))
    return bool(expected == got)


def _record(url: str) -> None:  # pragma: no cover - a maintainer's command
    import redis

    from ratelimit._stores.redis.scripts import library

    client = redis.Redis.from_url(url)
    client.function_load(library().source, replace=True)
    vectors = load()
    for scenario in vectors["scenarios"]:
        name = f"vectors-{uuid.uuid4().hex[:8]}"
        for step in scenario["steps"]:
            if "keep" not in step:
                step["reply"] = send(client, library().name + "_", step, name)
        client.delete(*client.keys(f"ratelimit:{{{name}}}*") or [f"ratelimit:{{{name}}}"])
    VECTORS.write_text(json.dumps(vectors, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":  # pragma: no cover
    sys.path.insert(0, str(VECTORS.parents[1]))
    _record(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
