"""What the incoming-request middleware costs per request, against the bare app.

One server, started the same way twice per round: the bare app, then the same app
behind the middleware on a Redis budget too large to refuse anything (every request
pays its decision and none is refused). Client processes send requests back to back,
each on a kept-alive connection, for ``--seconds``; the figure is requests served per
second, and the ratio is the middleware's over the bare app's, round by round.

::

    python benchmarks/serving.py --redis redis://127.0.0.1:6379/0 [--server uvicorn|gunicorn]
        [--seconds 5] [--clients 3] [--rounds 3]

The limiter's name is made for the run; its keys expire on their own.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
SUPPORT = ROOT / "tests" / "support"
sys.path.insert(0, str(SUPPORT))

from servers import free_port  # noqa: E402


def command(server: str, port: int) -> list[str]:
    if server == "uvicorn":
        return [
            sys.executable, "-m", "uvicorn", "serving_app:asgi_app", "--host", "127.0.0.1", "--port", str(port),
            "--no-access-log", "--log-level", "warning",
        ]  # fmt: skip
    return [
        sys.executable, "-m", "gunicorn", "-w", "1", "-b", f"127.0.0.1:{port}", "--log-level", "warning",
        "serving_app:wsgi_app",
    ]  # fmt: skip


def drive(url: str, until: float) -> tuple[int, list[int]]:
    """One client process: requests back to back on one kept-alive connection until
    ``until`` (wall clock, shared by the processes); served and failed."""
    served, failed = 0, []
    with httpx.Client(timeout=10) as client:
        while time.time() < until:
            status = client.get(url).status_code
            if status == 200:
                served += 1
            else:
                failed.append(status)
    return served, failed


def served_per_second(server: str, limited: bool, redis_url: str, seconds: float, clients: int) -> float:
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SUPPORT), str(ROOT)]),
        "SERVING_LIMITED": "1" if limited else "0",
        "SERVING_REDIS_URL": redis_url,
        "SERVING_NAME": f"bench-serving-{uuid.uuid4().hex[:8]}",
        "SERVING_RATE": "1e9",
        "SERVING_BURST": "1e9",
    }
    process = subprocess.Popen(command(server, port), env=env)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.TransportError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"{server} did not start") from None
                time.sleep(0.1)
        until = time.time() + seconds
        with ProcessPoolExecutor(clients) as pool:
            results = list(pool.map(drive, [url] * clients, [until] * clients))
        failures = [status for _, failed in results for status in failed]
        if failures:
            raise SystemExit(f"{len(failures)} requests failed: {sorted(set(failures))}")
        return sum(count for count, _ in results) / seconds
    finally:
        process.terminate()
        process.wait(timeout=15)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--server", choices=["uvicorn", "gunicorn"], default="uvicorn")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=3, help="client processes")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    ratios = []
    for round_ in range(1, args.rounds + 1):
        bare = served_per_second(args.server, False, args.redis, args.seconds, args.clients)
        limited = served_per_second(args.server, True, args.redis, args.seconds, args.clients)
        ratios.append(limited / bare)
        print(f"round {round_}: bare {bare:8.0f} req/s   middleware {limited:8.0f} req/s   ratio {limited / bare:.2f}")
    print(f"{args.server}, one worker, {args.clients} client processes: median ratio {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
