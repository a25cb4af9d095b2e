"""A process of a fleet sharing one SQLiteBackend file (tests/test_sqlite_store.py).

python sqlite_worker.py take PATH NAME CALLS START
    at wall time START, ``try_acquire()`` CALLS times on TokenBucket(10, 1e-6) named
    NAME (no refill to speak of): prints how many were granted.
python sqlite_worker.py hold PATH
    takes the file's write lock and writes into it without committing, prints
    "holding", then sleeps until killed (a process SIGKILLed inside a transaction).
python sqlite_worker.py lock PATH SECONDS
    takes the file's write lock (``BEGIN IMMEDIATE``), prints "holding", keeps it
    SECONDS and commits (another process's long transaction).
"""

from __future__ import annotations

import sqlite3
import sys
import time

from ratelimit import SQLiteBackend, TokenBucket


def take(path: str, name: str, calls: int, start: float) -> None:
    limiter = TokenBucket(10, 1e-6, backend=SQLiteBackend(path), name=name)
    while time.time() < start:
        time.sleep(0.001)
    print(sum(limiter.try_acquire() for _ in range(calls)), flush=True)


def hold(path: str) -> None:
    conn = sqlite3.connect(path, isolation_level=None, timeout=5)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("UPDATE ratelimit_state SET number = -1e300, blob = NULL")
    print("holding", flush=True)
    time.sleep(600)


def lock(path: str, seconds: float) -> None:
    conn = sqlite3.connect(path, isolation_level=None, timeout=5)
    conn.execute("BEGIN IMMEDIATE")
    print("holding", flush=True)
    time.sleep(seconds)
    conn.execute("COMMIT")
    conn.close()


if __name__ == "__main__":
    if sys.argv[1] == "take":
        take(sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]))
    elif sys.argv[1] == "lock":
        lock(sys.argv[2], float(sys.argv[3]))
    else:
        hold(sys.argv[2])
