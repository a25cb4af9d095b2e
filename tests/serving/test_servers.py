"""End to end: real ``uvicorn --workers 2`` and ``gunicorn -w 2`` processes behind the
middleware, sharing one Redis budget, under eight client threads for five seconds."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import redis

from ratelimit import TokenBucket, parse_rate_limit_headers
from ratelimit.httpx import RateLimitTransport

from conftest import REDIS_URL, SUPPORT, unavailable, unique_name

pytestmark = [pytest.mark.slow, pytest.mark.redis]

RATE = 20.0
BURST = 10.0
SECONDS = 5.0
THREADS = 8


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    log: Path


def server_command(kind: str, port: int) -> list[str]:
    if kind == "uvicorn":
        # Its own X-Forwarded-For handling off: the middleware's key decides (docs/incoming.md).
        return [
            sys.executable, "-m", "uvicorn", "serving_app:asgi_app", "--workers", "2", "--host", "127.0.0.1",
            "--port", str(port), "--no-access-log", "--no-proxy-headers", "--log-level", "warning",
        ]  # fmt: skip
    return [
        sys.executable, "-m", "gunicorn", "-w", "2", "-b", f"127.0.0.1:{port}", "--log-level", "warning",
        "serving_app:wsgi_app",
    ]  # fmt: skip


def start(kind: str, tmp_path: Path, name: str, **env: str) -> Iterator[Server]:
    from servers import free_port

    try:
        redis.Redis.from_url(REDIS_URL, socket_timeout=2).ping()
    except redis.RedisError as exc:
        unavailable(f"no Redis server answers at {REDIS_URL}: {exc}")
    port = free_port()
    log = tmp_path / f"{kind}.log"
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SUPPORT), str(SUPPORT.parents[1])]),
        "SERVING_REDIS_URL": REDIS_URL,
        "SERVING_NAME": name,
        "SERVING_RATE": str(RATE),
        "SERVING_BURST": str(BURST),
        **env,
    }
    with log.open("wb") as out:
        process = subprocess.Popen(server_command(kind, port), env=environment, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                probe = httpx.HTTPTransport(local_address="127.0.0.9")
                with httpx.Client(transport=probe, timeout=1) as client:
                    client.get(url)
                break
            except httpx.TransportError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"{kind} did not start:\n{log.read_text()}") from None
                time.sleep(0.1)
        yield Server(url, process, log)
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(params=["uvicorn", "gunicorn"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    # The probe above has a key of its own (SERVING_KEY=client keys by address; the
    # probe comes from 127.0.0.9), so it spends none of the measured budget.
    yield from start(request.param, tmp_path, unique_name("serving"))


@dataclass
class Load:
    served: list[float] = field(default_factory=list)
    refused: list[httpx.Headers] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def hammer(url: str, until: float, load: Load, source: str, spoof: bool) -> None:
    """Send requests back to back from ``source`` until ``until``, recording each answer."""
    with httpx.Client(transport=httpx.HTTPTransport(local_address=source), timeout=10) as client:
        while time.monotonic() < until:
            headers = {"X-Forwarded-For": f"198.51.100.{random.randrange(256)}"} if spoof else {}
            try:
                response = client.get(url, headers=headers)
            except httpx.TransportError as exc:
                with load.lock:
                    load.errors.append(repr(exc))
                continue
            now = time.monotonic()
            with load.lock:
                if response.status_code == 200:
                    load.served.append(now)
                elif response.status_code == 429:
                    load.refused.append(response.headers)
                else:
                    load.errors.append(f"{response.status_code}: {response.text[:200]}")


def most_in_one_second(times: list[float]) -> int:
    times = sorted(times)
    most, first = 0, 0
    for last, moment in enumerate(times):
        while moment - times[first] >= 1.0:
            first += 1
        most = max(most, last - first + 1)
    return most


def test_two_workers_share_one_budget_per_key_and_spoofing_buys_nothing(server: Server) -> None:
    """R + B at most in any second, R x t + B in all within 10 %, every 429 readable; a
    second client address has a budget of its own; random X-Forwarded-For changes nothing."""
    one, other = Load(), Load()
    until = time.monotonic() + SECONDS
    threads = [
        threading.Thread(target=hammer, args=(server.url, until, one, "127.0.0.1", i % 2 == 0)) for i in range(THREADS)
    ]
    threads += [threading.Thread(target=hammer, args=(server.url, until, other, "127.0.0.2", False)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    errors = one.errors + other.errors
    assert not errors, (errors[:5], server.log.read_text())
    for load in (one, other):
        assert most_in_one_second(load.served) <= RATE + BURST
        # t runs from the key's first grant (the bucket is full until then, however
        # late a loaded machine starts the threads) to the end of the run.
        expected = RATE * (until - min(load.served)) + BURST
        assert abs(len(load.served) - expected) <= 0.1 * expected, (len(load.served), expected)
    assert one.refused, "eight threads back to back must meet refusals"
    for headers in one.refused:
        info = parse_rate_limit_headers(headers)
        assert headers["retry-after"].isdigit()
        assert info.retry_after is not None
        assert info.retry_after >= 1
        assert (info.limit, info.window, info.remaining) == (RATE, 1.0, 0.0)


def test_granted_responses_say_what_the_shared_budget_has_left(server: Server) -> None:
    """A fresh key's grants, from two workers on one Redis budget: ``r`` what each
    decision left of the burst, ``t`` the second within which one more comes back."""
    with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.3"), timeout=10) as client:
        said = [parse_rate_limit_headers(client.get(server.url).headers) for _ in range(3)]
    # One less than the burst after the first grant: or two less, the TAT being
    # rounded up at the server's clock (a fraction of a microsecond short of it).
    assert said[0].remaining in (BURST - 1, BURST - 2)
    assert all(info.remaining is not None and info.remaining <= BURST - 1 for info in said)
    assert [info.reset_after for info in said] == [1.0, 1.0, 1.0]
    assert all((info.limit, info.window) == (RATE, 1.0) for info in said)


class Counting(httpx.BaseTransport):
    """The wire under ``RateLimitTransport``: counts what the server answered, and when."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.answers: list[tuple[float, int]] = []
        self.lock = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        with self.lock:
            self.answers.append((time.monotonic(), response.status_code))
        return response

    def close(self) -> None:
        self.inner.close()


def test_our_own_client_sends_at_the_servers_rate_with_almost_no_429s(server: Server) -> None:
    """``ratelimit.httpx`` with a limit three times the server's learns the server's pace
    from its fields: after the first second <= 5 % 429s and >= 90 % of the rate served."""
    wire = Counting()
    mine = TokenBucket(capacity=1, refill_per_sec=3 * RATE)
    start_at = time.monotonic()
    until = start_at + SECONDS
    with httpx.Client(transport=RateLimitTransport(mine, transport=wire), timeout=30) as client:

        def send() -> None:
            while time.monotonic() < until:
                client.get(server.url, headers={"x-client": "ours"})

        threads = [threading.Thread(target=send) for _ in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    later = [status for moment, status in wire.answers if start_at + 1.0 <= moment < until]
    refused = later.count(429)
    served = later.count(200)
    assert refused <= 0.05 * len(later), (refused, len(later))
    assert served >= 0.9 * RATE * (SECONDS - 1.0), served
