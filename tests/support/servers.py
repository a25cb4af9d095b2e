"""Private Redis servers for tests: one to kill mid-test, a three-master Cluster, or a
master with a replica watched by three sentinels.

Started from the ``redis-server`` binary on free loopback ports, in temporary
folders, keeping nothing on disk but the cluster's node files; stopped by pid. Every
wait has a deadline, so a server that will not come up fails the test instead of
hanging it.
"""

from __future__ import annotations

import functools
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import redis

__all__ = ["RedisCluster", "RedisSentinelSet", "RedisServer", "SilentServer", "free_port"]

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
                client.cluster("ADDSLOTSRANGE", str(i * share), str(last))
                if i:
                    clients[0].cluster("MEET", HOST, str(self.ports[i]))

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


class RedisSentinelSet:
    """One master, one replica (``--replicaof``) and three sentinels watching them as
    ``service``, all on loopback, quick to fail over (``down_after_ms`` of silence,
    quorum 2).

    :meth:`start` returns once every sentinel knows the master, the replica and the
    two other sentinels: a failover can then be elected. :meth:`kill_master` SIGKILLs
    the master's process; :meth:`wait_for_failover` returns the new master's port.
    """

    def __init__(self, service: str = "mymaster", down_after_ms: int = 1000, failover_timeout_ms: int = 3000) -> None:
        self.service = service
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.master = RedisServer()
        self.replica = RedisServer(None, "--replicaof", HOST, str(self.master.port))
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.dir = Path(tempfile.mkdtemp(prefix="ratelimit-sentinels-"))
        self.sentinels: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        """The ``redis+sentinel://`` URL of the service."""
        hosts = ",".join(f"{HOST}:{port}" for port in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{self.service}/0"

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """``(host, port)`` of each sentinel, as ``redis.sentinel.Sentinel`` takes them."""
        return [(HOST, port) for port in self.sentinel_ports]

    def _ask(self, port: int, *command: str) -> object:
        client: Any = redis.Redis(
            host=HOST, port=port, socket_timeout=1, socket_connect_timeout=1, decode_responses=True
        )
        try:
            return client.execute_command(*command)
        finally:
            client.close()

    def master_port(self, sentinel: int = 0) -> int | None:
        """The master's port as sentinel ``sentinel`` names it now."""
        reply = self._ask(self.sentinel_ports[sentinel], "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service)
        return int(reply[1]) if isinstance(reply, (list, tuple)) and len(reply) == 2 else None

    def _start_sentinel(self, port: int) -> None:
        folder = self.dir / str(port)
        folder.mkdir()
        config = folder / "sentinel.conf"
        config.write_text(
            f"port {port}\n"
            f"bind {HOST}\n"
            f"dir {folder}\n"
            f"logfile {folder / 'sentinel.log'}\n"
            f"sentinel monitor {self.service} {HOST} {self.master.port} 2\n"
            f"sentinel down-after-milliseconds {self.service} {self.down_after_ms}\n"
            f"sentinel failover-timeout {self.service} {self.failover_timeout_ms}\n"
            f"sentinel parallel-syncs {self.service} 1\n"
        )
        command = ["redis-server", str(config), "--sentinel"]
        self.sentinels.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def start(self) -> None:
        self.master.start()
        self.replica.start()
        replica = redis.Redis(host=HOST, port=self.replica.port, socket_timeout=1, decode_responses=True)
        try:
            _wait(
                lambda: replica.info("replication").get("master_link_status") == "up",
                "the replica in sync with the master",
                10.0,
                self.replica.log,
            )
        finally:
            replica.close()
        for port in self.sentinel_ports:
            self._start_sentinel(port)

        def ready(port: int) -> bool:
            # redis-py parses these replies: a dict for the master, a list of them for replicas.
            state = self._ask(port, "SENTINEL", "MASTER", self.service)
            replicas = self._ask(port, "SENTINEL", "REPLICAS", self.service)
            others = state.get("num-other-sentinels", 0) if isinstance(state, dict) else 0
            return int(others) == 2 and isinstance(replicas, list) and len(replicas) == 1

        for port in self.sentinel_ports:
            log = self.dir / str(port) / "sentinel.log"
            _wait(functools.partial(ready, port), f"sentinel {port} knowing the master, replica and peers", 20.0, log)

    def kill_master(self) -> None:
        """SIGKILL the master: no goodbye to its clients, its replica or the sentinels."""
        pid = self.master.pid
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            assert self.master.process is not None
            self.master.process.wait(timeout=5)

    def wait_for_failover(self, deadline: float = 20.0) -> int:
        """Wait until every sentinel names the replica as the master; its port."""
        new = self.replica.port
        _wait(
            lambda: all(self.master_port(i) == new for i in range(len(self.sentinel_ports))),
            "the sentinels promoting the replica",
            deadline,
            self.dir / str(self.sentinel_ports[0]) / "sentinel.log",
        )
        promoted = redis.Redis(host=HOST, port=new, socket_timeout=1, decode_responses=True)
        try:
            _wait(
                lambda: promoted.info("replication").get("role") == "master",
                "the replica taking the master's role",
                10.0,
            )
        finally:
            promoted.close()
        return new

    def stop(self) -> None:
        for process in self.sentinels:
            if process.poll() is None:
                process.terminate()
        for process in self.sentinels:
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        self.sentinels = []
        self.master.cleanup()
        self.replica.cleanup()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisSentinelSet:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
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
