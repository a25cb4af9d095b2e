"""End to end: limiters that listen to a real (fake) provider over HTTP, in real time."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from ratelimit import AcquireTimeout, TokenBucket
from ratelimit.testing import FakeProvider

from conftest import REDIS_URL, SUPPORT, unique_name
from feedback_worker import call

pytestmark = pytest.mark.slow

WORKER = SUPPORT / "feedback_worker.py"


def test_managed_workers_adapt_to_an_unmanaged_client_eating_the_budget() -> None:
    # The provider allows 40 per 2 s (20/s); the limiter is sized at 95 % of that, but
    # an unmanaged client takes 5/s behind its back. Feedback must absorb the rest.
    seconds = 4.0
    with FakeProvider(40, 2.0, headers="ietf") as provider:
        limiter = TokenBucket(4, 20 * 0.95)
        managed: list[int] = []
        lock = threading.Lock()
        stop = time.monotonic() + seconds

        def worker() -> None:
            while True:
                try:
                    limiter.acquire(timeout=max(0.0, stop - time.monotonic()))
                except AcquireTimeout:
                    return
                status, headers = call(provider.url)
                limiter.feedback(headers, status=status)
                with lock:
                    managed.append(status)

        def unmanaged() -> None:
            while time.monotonic() < stop:
                call(provider.url)
                time.sleep(0.2)

        pool = [threading.Thread(target=worker) for _ in range(4)] + [threading.Thread(target=unmanaged)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
        stats = provider.stats()

    refused = managed.count(429)
    # Near zero: a response in flight while another lowers the budget may still lose.
    assert refused <= max(2, len(managed) // 50), (refused, len(managed))
    # And the budget is still used: the managed workers got most of what was left.
    assert managed.count(200) >= 0.6 * (40 * seconds / 2.0 - 5 * seconds)
    assert stats.max_in_window <= 40


@pytest.mark.redis
@pytest.mark.usefixtures("redis_client")
def test_a_forced_429_pauses_every_process_then_the_configured_rate_resumes() -> None:
    rate, burst, seconds, pause = 20.0, 2, 5.0, 2
    with FakeProvider(1_000, 1.0) as provider:
        name = unique_name("e2e")
        command = [sys.executable, str(WORKER), REDIS_URL, name, str(rate), str(burst), provider.url, "2"]
        procs = [
            subprocess.Popen([*command, str(seconds)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)
        ]
        time.sleep(1.0)  # let the workers reach their steady rate
        forced_at = time.time()
        provider.force_status(429, retry_after=pause)
        results = []
        for proc in procs:
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err
            results.append(json.loads(out))

    statuses = [s for r in results for s in r["statuses"]]
    sent = sorted(t for r in results for t in r["sent"])
    assert statuses.count(429) == 1
    refused_at = min(t for t in sent if t >= forced_at)
    # After the 429, only calls already reserved before its feedback landed may go out:
    # each of the 4 workers holds at most one reservation, so they all fall within 4
    # intervals. Then nobody, in any process, until the pause ends.
    grace = 4 / rate + 0.05
    quiet = [t for t in sent if refused_at + grace < t < refused_at + pause - 0.05]
    assert quiet == []
    # Afterwards the configured rate, not a burst of everyone who waited.
    after = [t for t in sent if refused_at + pause - 0.05 <= t]
    span = after[-1] - after[0]
    assert span > 1.0
    assert (len(after) - 1) / span == pytest.approx(rate, rel=0.1)
