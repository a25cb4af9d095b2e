"""A process holding or waiting for ConcurrencyLimit slots in a SQLiteBackend file
(tests/stores/test_sqlite_concurrency.py).

``python sqlite_slots_worker.py PATH NAME MAX LEASE grab N`` takes N slots, prints
``held N`` and sleeps until killed (the crash test kills it with SIGKILL).

``python sqlite_slots_worker.py PATH NAME MAX LEASE loop THREADS SECONDS`` holds slots
from threads in a loop and prints one JSON list: each hold's (start, end) on
``time.monotonic()``, taken just inside the slot.

``python sqlite_slots_worker.py PATH NAME MAX LEASE holds THREADS COUNT HOLD`` prints
``ready``, waits for a line on its input, then each of THREADS threads holds a slot
HOLD seconds COUNT times; it prints one JSON list of each hold's (start, end), as
``loop``.

``python sqlite_slots_worker.py PATH NAME MAX LEASE wait HOLD [async]`` prints
``waiting``, takes one slot (waiting as long as needed, from a thread or an asyncio
task), prints ``got <time.monotonic()>`` (one clock for every process of a Linux
box), holds it HOLD seconds and releases it.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time

from ratelimit import ConcurrencyLimit, SQLiteBackend


def main() -> None:
    path, name, most, lease, mode = sys.argv[1:6]
    limit = ConcurrencyLimit(int(most), lease_seconds=float(lease), backend=SQLiteBackend(path), name=name)
    if mode == "grab":
        leases = [limit.take() for _ in range(int(sys.argv[6]))]
        print("held", len(leases), flush=True)
        time.sleep(3600)
        return
    if mode == "loop":
        loop(limit, int(sys.argv[6]), float(sys.argv[7]))
        return
    if mode == "holds":
        holds(limit, int(sys.argv[6]), int(sys.argv[7]), float(sys.argv[8]))
        return
    hold = float(sys.argv[6])
    print("waiting", flush=True)
    if sys.argv[7:] == ["async"]:

        async def wait() -> None:
            lease = await limit.take_async()
            print("got", repr(time.monotonic()), flush=True)
            await asyncio.sleep(hold)
            await lease.release_async()

        asyncio.run(wait())
        return
    with limit.hold():
        print("got", repr(time.monotonic()), flush=True)
        time.sleep(hold)


def loop(limit: ConcurrencyLimit, threads: int, seconds: float) -> None:
    stop = time.monotonic() + seconds
    spans: list[tuple[float, float]] = []
    lock = threading.Lock()

    def work() -> None:
        while time.monotonic() < stop:
            with limit.hold(timeout=30):
                start = time.monotonic()
                time.sleep(0.002)
                end = time.monotonic()
            with lock:
                spans.append((start, end))

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    print(json.dumps(spans), flush=True)


def holds(limit: ConcurrencyLimit, threads: int, count: int, hold: float) -> None:
    spans: list[tuple[float, float]] = []
    lock = threading.Lock()

    def work() -> None:
        for _ in range(count):
            with limit.hold(timeout=60):
                began = time.monotonic()
                time.sleep(hold)
                ended = time.monotonic()
            with lock:
                spans.append((began, ended))

    print("ready", flush=True)
    sys.stdin.readline()
    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    print(json.dumps(spans), flush=True)


if __name__ == "__main__":
    main()
