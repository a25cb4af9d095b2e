"""Many reads in few round trips: the operator commands read thousands of limiters.

On one Redis, a plain pipeline. On a Cluster, each node gets a pipeline of the calls
on its own slots (redis-py's cluster pipeline refuses scripts); a batch that meets a
slot moved meanwhile is asked again call by call through the Cluster's client, which
follows the move. Cut into pipelines of :data:`CHUNK` calls, so that neither side
holds a whole fleet's replies at once.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import redis.cluster
import redis.exceptions

from ..keys import wire

__all__ = ["CHUNK", "Call", "pipelined"]

#: Calls in one pipeline.
CHUNK = 2000

#: One call: the client's method name and its arguments (the key first, or for
#: ``evalsha`` after the SHA and the number of keys).
Call = tuple[str, Sequence[Any]]


def _key(call: Call) -> Any:
    method, args = call
    return args[2] if method == "evalsha" else args[0]


def _run(client: Any, calls: Sequence[Call]) -> list[Any]:
    replies: list[Any] = []
    for start in range(0, len(calls), CHUNK):
        pipe = client.pipeline(transaction=False)
        for method, args in calls[start : start + CHUNK]:
            getattr(pipe, method)(*args)
        replies.extend(pipe.execute())
    return replies


def pipelined(client: Any, calls: Sequence[Call]) -> list[Any]:
    """The replies of ``calls``, in order: ``len(calls) / CHUNK`` round trips (rounded
    up; on a Cluster, that many per node). Names read back from keys that are not UTF-8
    go as their bytes (``keys.wire``)."""
    calls = [(method, [wire(arg) for arg in args]) for method, args in calls]
    if not isinstance(client, redis.cluster.RedisCluster):
        return _run(client, calls)
    cluster: Any = client  # redis-py's cluster methods are untyped
    by_node: dict[str, list[int]] = defaultdict(list)
    nodes: dict[str, Any] = {}
    for index, call in enumerate(calls):
        node = cluster.get_node_from_key(_key(call))
        nodes[node.name] = node
        by_node[node.name].append(index)
    replies: list[Any] = [None] * len(calls)
    for name, indices in by_node.items():
        mine = [calls[i] for i in indices]
        try:
            answers = _run(cluster.get_redis_connection(nodes[name]), mine)
        except (redis.exceptions.MovedError, redis.exceptions.AskError, redis.exceptions.TryAgainError):
            answers = [getattr(cluster, method)(*args) for method, args in mine]
        for index, answer in zip(indices, answers, strict=True):
            replies[index] = answer
    return replies
