"""A worker process for the end-to-end feedback tests.

Run as ``python feedback_worker.py REDIS_URL NAME RATE BURST TARGET_URL THREADS SECONDS``:
threads that acquire from one Redis-backed TokenBucket, call the target, and feed every
response back. Prints one JSON object: the statuses seen and the send times (epoch).
"""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.error
import urllib.request

from ratelimit import AcquireTimeout, RedisBackend, TokenBucket


def call(url: str) -> tuple[int, dict[str, str]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            response.read()
            return response.status, dict(response.headers)
    except urllib.error.HTTPError as error:
        error.read()
        return error.code, dict(error.headers)


def main() -> None:
    redis_url, name, rate, burst, target, threads, seconds = sys.argv[1:8]
    limiter = TokenBucket(float(burst), float(rate), backend=RedisBackend.from_url(redis_url), name=name)
    stop = time.time() + float(seconds)
    statuses: list[int] = []
    sent: list[float] = []
    lock = threading.Lock()

    def work() -> None:
        while True:
            try:
                limiter.acquire(timeout=max(0.0, stop - time.time()))
            except AcquireTimeout:
                return
            at = time.time()
            status, headers = call(target)
            limiter.feedback(headers, status=status)
            with lock:
                statuses.append(status)
                sent.append(at)

    pool = [threading.Thread(target=work) for _ in range(int(threads))]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    print(json.dumps({"statuses": statuses, "sent": sent}))


if __name__ == "__main__":
    main()
