"""A process holding or waiting for ConcurrencyLimit slots in a SQLiteBackend file
(tests/stores/test_sqlite_concurrency.py).

``python sqlite_slots_worker.py PATH NAME MAX LEASE grab N`` takes N slots, prints
``held N`` and sleeps until killed (the crash test kills it with SIGKILL).

``python sqlite_slots_worker.py PATH NAME MAX LEASE wait HOLD [async]`` prints
``waiting``, takes one slot (waiting as long as needed, from a thread or an asyncio
task), prints ``got <time.monotonic()>`` (one clock for every process of a Linux
box), holds it HOLD seconds and releases it.
"""

from __future__ import annotations

import asyncio
import sys
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


if __name__ == "__main__":
    main()
