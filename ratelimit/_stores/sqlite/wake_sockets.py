"""How a release in one process wakes a waiter in another, through a SQLite store (internal).

Each process with a waiter on a :class:`~.sqlite.SQLiteBackend` file listens on a
*wake socket*: a Unix datagram socket of its own, bound before the waiter's row is
written and named in it (``sqlite/slots.py``, its ``door`` column). The transaction
that promotes a waiter (a release, an expiry found by anyone) returns the waiter's
lease id and wake socket; after the commit, the promoting process sends the lease id
to that socket (a *wake message*), or, for a waiter of its own, wakes it directly.
One thread per process and file reads its wake socket, looks in the file that each
lease it hears of holds a slot now (a wake message is a hint, never trusted: a stale
or forged one wakes nobody), and wakes those waiters. Nobody polls.

Where the wake sockets are:

- a socket file ``<process id>`` in the folder ``<file>-wake`` beside the store's
  file (as its ``-wal`` and ``-shm``), made with the permissions of the file: whoever
  may write the store may send wake messages (a folder shared by several users gets
  the sticky bit, so none removes another's socket);
- where that path is too long for ``AF_UNIX`` (108 bytes) or the folder cannot be
  made, an abstract socket on Linux, named after the file's path and the process;
- else no wake socket: the waiter is then woken only by its own looks at the file.

A wake message can be lost (a full socket buffer, a socket gone): a waiter also looks
at the file every third of its lease (as it must to renew its place), and sooner when
a holder's lease runs out first; a lost message costs time, never a slot. Wake
sockets of processes that died are removed when a message finds nobody behind them,
and when a process opens its own.

A wake socket whose socket file is removed (a cleaner of old files, the folder removed
whole) hears no message. While it is open, its thread looks every ``LOOK_EVERY``
seconds that its file is still there; gone, it binds the socket again
under the same name (the folder made again), and its waiters look at the file at once,
for the messages lost meanwhile. A waiter whose row names a wake socket this process no
longer listens at (it could only be bound again elsewhere, or not at all) is looked
for in the file every ``LOOK_EVERY`` seconds by the thread until it is woken.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import hashlib
import heapq
import logging
import math
import os
import socket
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence

from ..waiting import Waiting, process_id

__all__ = ["WakeSockets", "folder_of", "wake_sockets_for"]

logger = logging.getLogger("ratelimit")

#: A wake socket nobody waits behind closes after this long (seconds).
IDLE_SECONDS = 10.0

#: While a wake socket is open, its thread looks this often (seconds) that its socket file
#: is still there, and looks in the file for the waiters whose rows name a wake socket it no
#: longer listens at.
LOOK_EVERY = 0.05

#: The longest ``AF_UNIX`` path (``sun_path`` holds 108 bytes with its NUL).
_MOST_PATH = 107

#: At most this many old wake sockets are looked at when a process opens its own.
_TIDY_AT_MOST = 256

#: What a look at the file says of leases: which of them hold a slot now.
Holding = Callable[[Sequence[str]], list[str]]


def folder_of(path: str) -> str:
    """The folder of the wake sockets of the store at ``path``."""
    return path + "-wake"


def _folder_mode(file_mode: int) -> int:
    """The wake sockets' folder: open to each class that may write the store, sticky when shared."""
    mode = 0o700
    if file_mode & 0o020:
        mode |= 0o070
    if file_mode & 0o002:
        mode |= 0o007
    if mode != 0o700:
        mode |= stat.S_ISVTX
    return mode


def _share_group(path: str, gid: int) -> None:
    """Give ``path`` the store file's group (a file shared by a group: its members
    send wake messages, and make their wake sockets), when this process may."""
    if hasattr(os, "chown") and os.stat(path).st_gid != gid:
        with contextlib.suppress(OSError):
            os.chown(path, -1, gid)


class WakeSockets:
    """This process's wake socket on one store file, and the waiters behind it."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._lock = threading.Lock()
        #: Waiters by lease id, with the look that tells whether they hold a slot and
        #: the wake socket their row names.
        self._waiting: dict[str, tuple[Waiting, Holding, str | None]] = {}
        self._sock: socket.socket | None = None
        #: This wake socket's address as a row names it (``@`` for an abstract one), and its
        #: socket file (``None``: abstract, or none).
        self.address: str | None = None
        self._file: str | None = None
        self._thread: threading.Thread | None = None
        #: Looks due at a time: (monotonic time, order, whose, what to run), and the
        #: earliest due of each.
        self._due: list[tuple[float, int, object, Callable[[], None]]] = []
        self._pending: dict[object, float] = {}
        self._order = 0
        self._sender: socket.socket | None = None

    # -- the waiters' side ------------------------------------------------------------

    def expect(self, lease: str, waiting: Waiting, holding: Holding) -> str | None:
        """Wake ``waiting`` when a wake message for ``lease`` comes and ``holding`` confirms
        it; returns the wake socket to write in its row (``None``: no wake socket, it looks by itself)."""
        with self._lock:
            if self._thread is not None and self._file is not None and not os.path.exists(self._file):
                # Its socket file was removed (a cleaner of old files, a careless rm):
                # wake messages to that name reach nobody. Bound again below, under the same
                # name (the rows of the waiters behind it name it too), with a new thread.
                self._reopen()
            if self._thread is None:
                self._open()
                self._thread = threading.Thread(target=self._run, name="ratelimit-sqlite-wake", daemon=True)
                self._thread.start()
            self._waiting[lease] = (waiting, holding, self.address)
            return self.address

    def forget(self, lease: str) -> None:
        with self._lock:
            self._waiting.pop(lease, None)

    def remind(self, key: object, seconds: float, look: Callable[[], None]) -> None:
        """Run ``look`` from the wake socket's thread in ``seconds`` (a lease due to run out
        then, which no release will announce), unless a look of ``key`` as early is
        due already."""
        with self._lock:
            if self._thread is None:
                return  # nobody waits here
            at = time.monotonic() + seconds
            if self._pending.get(key, math.inf) <= at:
                return
            self._pending[key] = at
            self._order += 1
            heapq.heappush(self._due, (at, self._order, key, look))
        self._nudge()

    # -- the promoters' side ------------------------------------------------------------

    def wake(self, promoted: Iterable[tuple[str, str | None]]) -> None:
        """Tell each promoted waiter: one of this process directly, another at its wake socket."""
        mine = process_id()
        for lease, wake_socket in promoted:
            if lease.rpartition(":")[0] == mine:
                with self._lock:
                    found = self._waiting.pop(lease, None)
                if found is not None:
                    found[0].wake()
                    continue
                # Ours but waiting behind another wake socket of this process: the same file
                # opened by another path (a symbolic link).
            if wake_socket and _shaped_as_wake_socket(wake_socket):
                self._send(wake_socket, lease)

    def _send(self, wake_socket: str, lease: str) -> None:
        try:
            sender = self._sender
            if sender is None:
                with self._lock:
                    sender = self._sender
                    if sender is None:
                        sender = self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                        sender.setblocking(False)
            sender.sendto(lease.encode(), _address(wake_socket))
        except OSError as exc:
            if exc.errno == errno.ECONNREFUSED and os.path.dirname(wake_socket) == folder_of(self._path):
                # Nobody listens behind it: its process died. Its waiters' rows run out.
                # Only a wake socket of this store's folder: a row names whatever the file
                # says, and a socket elsewhere is not the store's to remove.
                with contextlib.suppress(OSError):
                    os.unlink(wake_socket)
            # Any other failure (a full buffer, a wake socket gone): the waiter looks by itself.

    # -- the wake socket -----------------------------------------------------------------

    def _open(self) -> None:
        """Bind this process's wake socket (under the lock), or settle for none."""
        if not hasattr(socket, "AF_UNIX"):
            self.address = self._file = None  # no Unix sockets here: waiters look by themselves
            return
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        place = self._place()
        try:
            if place is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(place)  # ours from before an idle close: never another's (a process id is unique)
                sock.bind(place)
                file_stat = os.stat(self._path)
                os.chmod(place, (file_stat.st_mode & 0o666) | 0o600)
                _share_group(place, file_stat.st_gid)
                self._file, self.address = place, place
            elif sys.platform.startswith("linux"):
                name = self._abstract()
                sock.bind("\0" + name)
                self._file, self.address = None, "@" + name
            else:
                sock.close()
                self._sock = None
                self.address = self._file = None
                return
        except OSError:
            logger.warning(
                "ratelimit: cannot open a wake socket beside %r; waiters will look by themselves", self._path
            )
            sock.close()
            self._sock = None
            self.address = self._file = None
            return
        self._sock = sock
        if self._file is not None:
            self._tidy(os.path.dirname(self._file))

    def _rebind(self, me: threading.Thread) -> list[str]:
        """Bind the wake socket again (from its thread ``me``) if its socket file is gone:
        the leases of the waiters to look for in the file now (those whose wake messages may
        have been lost, and those whose rows name a wake socket no longer listened at)."""
        with self._lock:
            if self._thread is not me:
                return []
            if self._file is not None and not os.path.exists(self._file):
                sock, self._sock = self._sock, None
                if sock is not None:
                    sock.close()
                self._open()
                logger.info("ratelimit: the wake socket beside %r was removed: bound again", self._path)
                return list(self._waiting)
            address = self.address
            return [lease for lease, (_, _, wake_socket) in self._waiting.items() if wake_socket != address]

    def _reopen(self) -> None:
        """Let go of the wake socket (under the lock) to be bound again, keeping its waiters
        and reminders: the old thread, its socket closed under it, ends."""
        sock, self._sock = self._sock, None
        self._thread = None
        if sock is not None:
            sock.close()

    def _place(self) -> str | None:
        """The wake socket's socket file, its folder made if need be; ``None`` if none can be."""
        folder = folder_of(self._path)
        place = os.path.join(folder, process_id())
        if len(os.fsencode(place)) > _MOST_PATH:
            return None
        try:
            file_stat = os.stat(self._path)
            try:
                os.mkdir(folder, 0o700)
            except FileExistsError:
                pass
            else:
                os.chmod(folder, _folder_mode(file_stat.st_mode))
                _share_group(folder, file_stat.st_gid)
            if not os.path.isdir(folder) or not os.access(folder, os.W_OK | os.X_OK):
                return None
        except OSError:
            return None
        return place

    def _abstract(self) -> str:
        digest = hashlib.sha256(os.fsencode(self._path)).hexdigest()[:24]
        return f"ratelimit-{digest}-{process_id()}"

    @staticmethod
    def _tidy(folder: str) -> None:
        """Remove wake sockets nobody listens behind (their processes died)."""
        try:
            names = os.listdir(folder)[:_TIDY_AT_MOST]
        except OSError:
            return
        me = process_id()
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            for name in names:
                if name == me:
                    continue
                place = os.path.join(folder, name)
                try:
                    probe.connect(place)
                except ConnectionRefusedError:
                    with contextlib.suppress(OSError):
                        os.unlink(place)
                except OSError:
                    pass
        finally:
            probe.close()

    def _close(self) -> None:
        """Close the wake socket (under the lock): nobody waits behind it."""
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()
        if self._file is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._file)
        self._file = self.address = None
        self._thread = None
        self._due.clear()
        self._pending.clear()

    def close(self) -> None:
        """Close the wake socket and forget its waiters (they look by themselves from now on)."""
        with self._lock:
            self._waiting.clear()
            self._close()
            sender, self._sender = self._sender, None
        if sender is not None:
            sender.close()

    def _nudge(self) -> None:
        """Make the thread look at its reminders now (a wake message of nobody's)."""
        address = self.address
        if address is not None:
            self._send(address, "")

    # -- the thread -----------------------------------------------------------------------

    def _run(self) -> None:
        idle_since = time.monotonic()
        me = threading.current_thread()
        while True:
            with self._lock:
                if self._thread is not me:
                    return  # closed (and maybe opened again, with a thread of its own)
                sock = self._sock
                due = self._due[0][0] if self._due else None
            # Never longer than LOOK_EVERY: a waiter that comes meanwhile is watched for
            # from then on, with no wake message of its own to wake the thread.
            wait = LOOK_EVERY if due is None else min(LOOK_EVERY, max(0.0, due - time.monotonic()))
            heard: list[str] = []
            if sock is None:
                time.sleep(wait)
            else:
                try:
                    sock.settimeout(wait)
                    heard.append(sock.recv(512).decode("utf-8", "replace"))
                    sock.setblocking(False)
                    while len(heard) < 1024:
                        heard.append(sock.recv(512).decode("utf-8", "replace"))
                except (TimeoutError, BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    with self._lock:
                        if self._thread is not me:
                            return  # closed under it
                        logger.warning(
                            "ratelimit: the wake socket beside %r failed; waiters look by themselves", self._path
                        )
                        self._close()
                    return
            heard.extend(self._rebind(me))
            self._confirm([lease for lease in heard if lease])
            self._looks_due()
            with self._lock:
                if self._thread is not me:
                    return
                if self._waiting:
                    idle_since = time.monotonic()
                elif time.monotonic() - idle_since >= IDLE_SECONDS:
                    self._close()
                    return

    def _confirm(self, heard: list[str]) -> None:
        """Wake the waiters among ``heard`` that the file says hold a slot now."""
        if not heard:
            return
        groups: dict[int, tuple[Holding, list[str]]] = {}
        with self._lock:
            for lease in heard:
                found = self._waiting.get(lease)
                if found is not None:
                    groups.setdefault(id(found[1]), (found[1], []))[1].append(lease)
        for holding, leases in groups.values():
            try:
                held = holding(leases)
            except Exception:
                continue  # the file cannot be read now: each waiter looks by itself later
            with self._lock:
                woken = [self._waiting.pop(lease, None) for lease in held]
            for found in woken:
                if found is not None:
                    found[0].wake()

    def _looks_due(self) -> None:
        now = time.monotonic()
        looks: list[Callable[[], None]] = []
        with self._lock:
            while self._due and self._due[0][0] <= now:
                at, _, key, look = heapq.heappop(self._due)
                if self._pending.get(key) == at:
                    del self._pending[key]
                looks.append(look)
        for look in looks:
            try:
                look()
            except Exception:
                logger.debug("ratelimit: a look at %r failed", self._path, exc_info=True)


def _shaped_as_wake_socket(wake_socket: str) -> bool:
    """Whether a row's wake socket names a wake socket as this module makes them: a process id in a
    folder of wake sockets, or an abstract wake socket of ours. A row says whatever the file says,
    and one who may write the file must not make a promoting process (of another
    user, maybe) send datagrams to any other socket (a log, a service manager's)."""
    if wake_socket.startswith("@"):
        return wake_socket.startswith("@ratelimit-")
    folder, name = os.path.split(wake_socket)
    return folder.endswith("-wake") and len(name) == 16 and all(c in "0123456789abcdef" for c in name)


def _address(wake_socket: str) -> str:
    return "\0" + wake_socket[1:] if wake_socket.startswith("@") else wake_socket


_wake_sockets: dict[str, WakeSockets] = {}
_wake_sockets_lock = threading.Lock()


def wake_sockets_for(path: str) -> WakeSockets:
    """This process's wake sockets on the store at ``path``."""
    with _wake_sockets_lock:
        sockets = _wake_sockets.get(path)
        if sockets is None:
            sockets = _wake_sockets[path] = WakeSockets(path)
        return sockets


def _forked() -> None:
    # The child's threads did not come along, and the parent's wake sockets stay the
    # parent's: the child closes its copies (never removing the parent's socket files)
    # and opens wake sockets of its own, under its own process id, when it waits.
    for sockets in list(_wake_sockets.values()):
        sock = sockets._sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()
        sender = sockets._sender
        if sender is not None:
            with contextlib.suppress(OSError):
                sender.close()
    _wake_sockets.clear()
    global _wake_sockets_lock
    _wake_sockets_lock = threading.Lock()


os.register_at_fork(after_in_child=_forked)


def _closed_at_exit() -> None:
    # Remove this process's socket files (a process killed leaves them to be tidied).
    for sockets in list(_wake_sockets.values()):
        sockets.close()


atexit.register(_closed_at_exit)
