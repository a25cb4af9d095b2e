"""Private Redis servers for tests: one to kill mid-test, or a three-master Cluster.

Started from the ``redis-server`` binary on free loopback ports, in temporary
folders, keeping nothing on disk but the cluster's node files; stopped by pid. Every
wait has a deadline, so a server that will not come up fails the test instead of
hanging it.
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import redis

__all__ = ["RedisCluster", "RedisServer", "SilentServer", "free_port"]

HOST = "127.0.0.1"


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
        return True


def free_port(cluster: bool = False) -> int:
    """A TCP port on loopback that nothing listens on right now.

    A cluster node also needs ``port + 10000`` for its bus, so its port must be at
    most 55535: pick from a range where both fit.
    """
    if not cluster:
        with socket.socket() as sock:
            sock.bind((HOST, 0))
            port: int = sock.getsockname()[1]
            return port
    for _ in range(200):
        port = random.randint(20_000, 45_000)
        if _bindable(port) and _bindable(port + 10_000):
            return port
    raise RuntimeError("no free pair of ports (port, port + 10000) on loopback")


def _wait(check: Callable[[], object], what: str, deadline: float, log: Path | None = None) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        try:
            if check():
                return
        except (redis.exceptions.RedisError, OSError):
            pass
        time.sleep(0.05)
    tail = log.read_text(errors="replace")[-2000:] if log is not None and log.exists() else ""
    raise RuntimeError(f"{what} did not happen within {deadline} s\n{tail}")


class RedisServer:
    """One ``redis-server`` process on loopback; restartable on the same port.

    ``maxmemory`` (``"4mb"``, or bytes) and ``maxmemory_policy`` (``"noeviction"``,
    ``"allkeys-lru"``, ...) make a server that fills up, or evicts.
    """

    def __init__(
        self,
        port: int | None = None,
        *extra: str,
        maxmemory: str | int | None = None,
        maxmemory_policy: str | None = None,
    ) -> None:
        self.port = port or free_port(cluster="--cluster-enabled" in extra)
        if maxmemory is not None:
            extra = (*extra, "--maxmemory", str(maxmemory))
        if maxmemory_policy is not None:
            extra = (*extra, "--maxmemory-policy", maxmemory_policy)
        self.extra = extra
        self.dir = Path(tempfile.mkdtemp(prefix=f"ratelimit-redis-{self.port}-"))
        self.log = self.dir / "redis.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def start(self) -> None:
        if self.process is not None and self.process.poll() is None:
            return
        command = [
            "redis-server",
            "--port", str(self.port),
            "--bind", HOST,
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.dir),
            "--logfile", str(self.log),
            *self.extra,
        ]  # fmt: skip
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(host=HOST, port=self.port, socket_timeout=1, socket_connect_timeout=1)
        try:
            _wait(client.ping, f"redis-server on port {self.port} answering PING", 10.0, self.log)
        except RuntimeError:
            self.stop()
            raise
        finally:
            client.close()

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.cleanup()


class RedisCluster:
    """Masters (three by default, no replicas) joined into one Redis Cluster on loopback.

    ``redis-cli --cluster create`` wants three masters at least; fewer (the scaling
    benchmark's one and two) are joined by hand: each takes an even range of the
    16384 slots and meets the first.
    """

    def __init__(self, masters: int = 3) -> None:
        if masters < 1:
            raise ValueError(f"masters must be >= 1, got {masters!r}")
        options = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000")
        self.nodes = [RedisServer(None, *options) for _ in range(masters)]

    @property
    def ports(self) -> list[int]:
        return [node.port for node in self.nodes]

    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        return [(HOST, port) for port in self.ports]

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def start(self) -> None:
        for node in self.nodes:
            node.start()
        clients = [redis.Redis(host=HOST, port=p, socket_timeout=1) for p in self.ports]
        if len(self.nodes) >= 3:
            create = ["redis-cli", "--cluster", "create", *(f"{HOST}:{p}" for p in self.ports)]
            subprocess.run(
                [*create, "--cluster-replicas", "0", "--cluster-yes"],
                check=True,
                capture_output=True,
                timeout=30,
            )
        else:
            share = 16384 // len(clients)
            for i, client in enumerate(clients):
                last = 16383 if i == len(clients) - 1 else (i + 1) * share - 1
                client.execute_command("CLUSTER", "ADDSLOTSRANGE", i * share, last)
                if i:
                    clients[0].execute_command("CLUSTER", "MEET", HOST, self.ports[i])

        def ready() -> bool:
            infos = [client.cluster("INFO") for client in clients]
            return all(
                info.get("cluster_state") == "ok" and int(info.get("cluster_slots_assigned", 0)) == 16384
                for info in infos
            )

        try:
            _wait(ready, "the cluster reporting cluster_state:ok on every node", 20.0)
        finally:
            for client in clients:
                client.close()

    def stop(self) -> None:
        for node in self.nodes:
            node.cleanup()

    def __enter__(self) -> RedisCluster:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


class SilentServer:
    """A listener on loopback that accepts connections and never answers: a hung Redis,
    the worst kind of dead server."""

    def __init__(self, backlog: int = 256) -> None:
        self._listener = socket.socket()
        self._listener.bind((HOST, 0))
        self._listener.listen(backlog)
        self._accepted: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self._listener.getsockname()[1]}/0"

    def _accept(self) -> None:
        self._listener.settimeout(0.05)
        while not self._stop.is_set():
            try:
                self._accepted.append(self._listener.accept()[0])
            except OSError:
                continue

    def __enter__(self) -> SilentServer:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()
        for conn in self._accepted:
            conn.close()
        self._listener.close()
