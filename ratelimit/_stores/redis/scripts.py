"""The Lua scripts: found, composed, loaded once per server, and called.

The scripts are ``.lua`` files in the top-level ``lua/`` folder (``ratelimit/lua/``
in the wheel). The shared files (``_prelude``, the algorithms, ``_members``, ``_top``,
``_cache`` or ``_cache_none``) define functions only; each driver (``_single``,
``_lanes``, ``_fair``, ``_group``, ``breaker``, ``concurrency``, ``live``) is the body of one
function, its KEYS/ARGV/return contract at its top.

On Redis 7 and later they are one function library, ``ratelimit_p<protocol>``, loaded
once per server; each decision is an ``FCALL``. The library is named by the version of
its protocol (``lua/protocol.json``, ``docs/protocol.md``), not by its text: every
release and every client (``clients/node``) that speaks one protocol shares one library,
and so one set of caches and counts. A server that lost it, or holds an older revision
of it without the function called, answers "Function not found": the call looks at the
revision loaded (``FUNCTION LIST``), loads its own only if that one is older or absent
(so a fleet of two revisions converges on the newer and never flips back), and is sent
again, once; lost again by then, that one call goes as a script.

A server without Functions (Redis 6, a forbidding service or ACL) gets one script per
driver, called by SHA (``EVAL`` if unknown); the choice is made once per client, at
its first refusal. A Cluster client calls scripts too: redis-py asks a node for an
FCALL's keys (one more round trip), but reads an EVALSHA's itself.

Line numbers in an error from either form are translated back to the file and line
they came from (``lua/_members.lua:120``), not into the composed text.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import threading
import weakref
from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, cast

from redis.exceptions import NoScriptError, OutOfMemoryError, ResponseError

from ..landing import Late

__all__ = [
    "ALGORITHMS",
    "DRIVERS",
    "LANE_KINDS",
    "PROTOCOL",
    "REVISION",
    "Library",
    "Script",
    "breaker_script",
    "by_function",
    "call_by_script",
    "concurrency_script",
    "fair_script",
    "group_script",
    "lanes_script",
    "library",
    "live_script",
    "lua_dir",
    "lua_source",
    "preload",
    "refuses_functions",
    "single_script",
]

#: Every algorithm kind that has a script, in a fixed order.
ALGORITHMS = ("token_bucket", "leaky_bucket", "sliding_window", "sliding_window_counter", "quota")
#: The kinds a budget with priorities or a fair share may be of (lua/_library.lua
#: registers their lanes and fair drivers; a quota refuses ``low_share`` and FairShare).
LANE_KINDS = ALGORITHMS[:4]
#: What only ever decides as a member of a group: the learned pace of ``adaptive=``.
GROUP_ONLY = ("adaptive",)
#: What every rate limit's driver needs defined before it, in order.
_SHARED = ("_members", "_top")
#: Each driver's parameters: the algorithm it runs (and its kind) where it runs one.
_DRIVERS = {
    "_single": "ALG, KIND, KEYS, ARGV",
    "_lanes": "ALG, KIND, KEYS, ARGV",
    "_fair": "ALG, KIND, KEYS, ARGV",
    "_group": "KEYS, ARGV",
    "breaker": "KEYS, ARGV",
    "concurrency": "KEYS, ARGV",
    "live": "KEYS, ARGV",
    "top_flush": "KEYS, ARGV",
}

#: The drivers, each the body of one function of the library.
DRIVERS = tuple(_DRIVERS)


def lua_dir() -> Path:
    """Where the Lua files are: ``ratelimit/lua`` in the wheel, ``lua/`` in a checkout."""
    return _lua_dir()


def _lua_dir() -> Path:
    packaged = resources.files("ratelimit").joinpath("lua")
    if packaged.is_dir():
        return Path(str(packaged))
    # A source checkout (or editable install): the top-level lua/ beside the package.
    source = Path(__file__).resolve().parents[3] / "lua"
    if source.is_dir():
        return source
    raise FileNotFoundError(f"ratelimit's Lua scripts are missing: looked in {packaged} and {source}")


@cache
def lua_source(name: str) -> str:
    """The text of ``lua/<name>.lua``."""
    return (_lua_dir() / f"{name}.lua").read_text(encoding="utf-8")


def protocol_lock() -> dict[str, Any]:
    """``lua/protocol.json``: the protocol this release speaks, the revision of its
    library's text, and the fingerprints of both (``redis/protocol.py`` records them;
    ``tests/stores/test_protocol.py`` checks them against the files)."""
    lock: dict[str, Any] = json.loads((_lua_dir() / "protocol.json").read_text(encoding="utf-8"))
    return lock


#: The version of the protocol (keys, functions, KEYS/ARGV/replies: docs/protocol.md)
#: this release speaks; its library is ``ratelimit_p<PROTOCOL>``.
PROTOCOL: int = int(protocol_lock()["protocol"])
#: The revision of the library's text within the protocol: a server keeps the newest
#: revision any client loaded (see ``_steps``).
REVISION: int = int(protocol_lock()["revision"])


class Composed:
    """Lua text put together from files, which knows where each of its lines came from."""

    __slots__ = ("_lines", "_spans")

    def __init__(self) -> None:
        self._lines: list[str] = []
        # (first line in the text, file name or None for glue, its line count)
        self._spans: list[tuple[int, str | None, int]] = []

    def add(self, text: str, file: str | None = None) -> Composed:
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        self._spans.append((len(self._lines) + 1, file, len(lines)))
        self._lines.extend(lines)
        return self

    def file(self, name: str) -> Composed:
        return self.add(lua_source(name), f"lua/{name}.lua")

    def driver(self, name: str) -> Composed:
        """``lua/<name>.lua`` as the body of the function ``drive<name>``."""
        self.add(f"local function drive_{name.lstrip('_')}({_DRIVERS[name]})")
        self.file(name)
        return self.add("end")

    @property
    def text(self) -> str:
        return "\n".join(self._lines) + "\n"

    def where(self, line: int) -> str | None:
        """The file and line that line ``line`` of the text came from."""
        for first, file, count in self._spans:
            if first <= line < first + count:
                return None if file is None else f"{file}:{line - first + 1}"
        return None

    def translate(self, message: str) -> str:
        """``message`` with each line of the composed text named by its file instead."""

        def named(match: re.Match[str]) -> str:
            found = self.where(int(match.group(2)))
            return match.group(0) if found is None else found

        return _LINE.sub(named, message)


# How Redis names a line of a script (EVAL) or of a function library (FCALL).
_LINE = re.compile(r"@?(user_script|user_function):(\d+)")


def _rate_limit_body(composed: Composed, kinds: Sequence[str], holds: bool = False) -> Composed:
    """The prelude, the algorithms ``kinds`` and the shared Lua files. ``holds``: the
    counters for ``ratelimit top`` may be held in Lua between calls (the function
    library, whose locals outlive a call; never a script, whose die with it)."""
    composed.file("_prelude")
    for kind in kinds:
        composed.file(kind)
    for name in _SHARED:
        if name == "_top":
            composed.add(f"local TOP_HOLDS = {'true' if holds else 'false'}")
        composed.file(name)
    # What the library caches between calls; a script, whose locals die with it, the
    # same functions caching nothing.
    return composed.file("_cache" if holds else "_cache_none")


@dataclass(frozen=True)
class Library:
    """The function library of this release: its name, text and where each line came from."""

    name: str
    composed: Composed

    @property
    def source(self) -> str:
        return self.composed.text

    def function(self, what: str) -> str:
        """The full name of the library's function ``what`` (``token_bucket``, ``group``...)."""
        return f"{self.name}_{what}"


def library_text(name: str, revision: int) -> Composed:
    """The library's text under ``name``, saying it is of ``revision``."""
    composed = Composed().add(f"#!lua name={name}")
    _rate_limit_body(composed, ALGORITHMS + GROUP_ONLY, holds=True)
    for driver in _DRIVERS:
        composed.driver(driver)
    composed.add(f"local PREFIX = '{name}_'")
    composed.add(f"local PROTOCOL, REVISION = '{PROTOCOL}', '{revision}'")
    return composed.file("_library")


@cache
def library() -> Library:
    """Every script of this release as one Redis function library, named by the
    version of the protocol it speaks."""
    return Library(f"ratelimit_p{PROTOCOL}", library_text(f"ratelimit_p{PROTOCOL}", REVISION))


def _fields(entry: Any) -> dict[str, Any]:
    """A ``FUNCTION LIST`` entry as a dictionary (RESP3 replies one, RESP2 a flat list)."""
    if isinstance(entry, dict):
        return {_text(k): v for k, v in entry.items()}
    items = list(entry)
    return {_text(items[i]): items[i + 1] for i in range(0, len(items) - 1, 2)}


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


# The description of a library's `revision` function (see lua/_library.lua).
_REVISION = re.compile(r"\brevision (\d+)\b")


def listed_revision(listed: Any) -> int | None:
    """The revision of this protocol's library in a ``FUNCTION LIST`` reply: ``None``
    where it is not loaded, 0 where it says none."""
    for entry in listed or ():
        lib = _fields(entry)
        if _text(lib.get("library_name", "")) != library().name:
            continue
        for function in lib.get("functions") or ():
            found = _REVISION.search(_text(_fields(function).get("description") or ""))
            if found is not None:
                return int(found.group(1))
        return 0
    return None


# Each client's way of calling: True by function, False by script (no Functions on its
# server, none allowed, or a client without ``fcall``). Decided at its first call, and
# again only if its server refuses functions later.
_BY_FUNCTION: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()
_by_function_lock = threading.Lock()
# The clients that call functions and have not yet looked at the revision their server
# holds: each one's first call lists the library and replaces an older revision (whose
# text may hold what a later revision fixed), then this forgets it. ``_unchecked`` says
# whether it may hold any: false in the steady state, so a call pays one test of a
# module's bool for it (the weak dictionary's own truth test costs seven times as much).
_UNCHECKED: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()
_unchecked = False
# Bumped at every mark: a Script's memo of the last client it was called on (see
# Script._by_function) holds while this has not moved.
_marks = 0


def _remember(client: Any, by_function: bool) -> bool:
    global _marks
    try:
        with _by_function_lock:
            _BY_FUNCTION[client] = by_function
            _marks += 1
    except TypeError:  # a client that cannot be weakly referenced: asked each time
        pass
    return by_function


def by_function(client: Any) -> bool:
    """Whether ``client`` calls the library's functions (else scripts by SHA)."""
    try:
        known = _BY_FUNCTION.get(client)
    except TypeError:
        known = None
    if known is None:
        # A Cluster client asks a node for the keys of every FCALL (COMMAND GETKEYS: a
        # second round trip per decision) where it reads EVALSHA's itself, so it calls
        # scripts.
        usable = hasattr(client, "fcall") and hasattr(client, "function_load") and not hasattr(client, "nodes_manager")
        if usable:
            _look_first(client)
        return _remember(client, usable)
    return known


def _look_first(client: Any) -> None:
    global _unchecked
    with contextlib.suppress(TypeError), _by_function_lock:
        _UNCHECKED[client] = True
        _unchecked = True


def _first_call(client: Any) -> bool:
    """Whether this is ``client``'s first call by function, which looks at the revision
    loaded first (only one caller is told so)."""
    global _unchecked
    with _by_function_lock:
        try:
            first = _UNCHECKED.pop(client, False)
        except TypeError:
            first = False
        _unchecked = len(_UNCHECKED) > 0
        return first


def call_by_script(client: Any) -> None:
    """Make ``client`` call scripts by SHA from now on, never functions (benchmarks
    compare the two on one server)."""
    _remember(client, False)


# What the server says when it has no FCALL or FUNCTION: unknown (Redis 6, a command
# renamed away) or not allowed (an ACL, a managed service).
_REFUSED = re.compile(
    r"unknown command|unknown subcommand|NOPERM|no permission|not supported|disabled|not allowed", re.I
)
# ... of FCALL or FUNCTION itself: a server that is full ("OOM command not allowed") or
# an ACL that denies a key refuses the call, not Functions, and an error raised inside
# the library (user_function:<line>) is the library's own.
_FUNCTIONS = re.compile(r"\b(fcall|function)\b", re.I)
_NOT_LOADED = "Function not found"


def refuses_functions(message: str) -> bool:
    """Whether an error reply says that the server has no Functions or does not allow them."""
    return (
        "user_function" not in message
        and _NOT_LOADED not in message
        and _REFUSED.search(message) is not None
        and _FUNCTIONS.search(message) is not None
    )


# What a call sends: the library's function, a look for the library, the library
# itself, the script by SHA or by its text.
FCALL, LISTED, LOAD, EVALSHA, EVAL = "fcall", "listed", "load", "evalsha", "eval"


def _after_fcall(client: Any, exc: ResponseError) -> bool:
    """A failed FCALL: True to load the library and call again, False to call by SHA
    instead (the client is marked: its server has no Functions); anything else raises."""
    message = str(exc)
    if _NOT_LOADED in message:
        return True
    if refuses_functions(message):
        call_by_script(client)
        return False
    raise exc


def _after_load(client: Any, exc: ResponseError) -> bool:
    """A failed FUNCTION LOAD: False sends this call by script. A server without
    Functions is marked; a full one is not (it takes no library, yet runs a script
    until its first write, so what only reads is still answered); anything else raises."""
    if refuses_functions(str(exc)):
        call_by_script(client)
        return False
    if isinstance(exc, OutOfMemoryError):
        return False
    raise exc


def _after_reload(exc: ResponseError) -> None:
    """The call sent again after a load failed: a library lost again in between
    (another process flushing in a loop) sends this one call by script; else raise."""
    if _NOT_LOADED not in str(exc):
        raise exc


class Script:
    """One driver: a function of the library, or the same text as a script of its own."""

    __slots__ = ("_memo", "composed", "function", "name", "sha", "source")

    def __init__(self, name: str, composed: Composed, function: str | None) -> None:
        self.name = name
        self.composed = composed
        self.source = composed.text
        self.sha = hashlib.sha1(self.source.encode("utf-8")).hexdigest()
        #: The library function that runs the same driver (None: a script only).
        self.function = function
        # The last client called, weakly, how it calls, and the marks it was read at.
        self._memo: tuple[weakref.ref[Any], bool, int] | None = None

    @classmethod
    def from_source(cls, name: str, source: str) -> Script:
        """A script of ``source`` called by SHA only (benchmarks time variants of one)."""
        return cls(name, Composed().add(source), None)

    def _translated(self, exc: ResponseError) -> ResponseError:
        text = library().composed if self.function is not None and "user_function" in str(exc) else self.composed
        exc.args = (text.translate(str(exc)), *exc.args[1:])
        return exc

    def _by_function(self, client: Any) -> bool:
        if self.function is None:
            return False
        # by_function's answer, remembered for the client of the last call: the weak
        # dictionary's look-up makes a weak reference each time, which a decision
        # need not pay while nobody marks a client.
        memo = self._memo
        if memo is not None and memo[2] == _marks and memo[0]() is client:
            return memo[1]
        marks = _marks
        usable = by_function(client)
        with contextlib.suppress(TypeError):  # a client that cannot be weakly referenced
            self._memo = (weakref.ref(client), usable, marks)
        return usable

    def _steps(
        self, client: Any, failed: ResponseError | None = None, *, first: bool = False
    ) -> Generator[str, Any, Any]:
        """The calls one call of this driver makes, for the synchronous and the asyncio
        runner alike: each yields what to send next (``FCALL``, ``LISTED``, ``LOAD``,
        ``EVALSHA``, ``EVAL``) and is sent its reply, or has its error reply thrown in.
        ``failed``: the error of an ``FCALL`` already sent (the runners send the first
        themselves), from which the steps go on. ``first``: the client's first call,
        which loads the library where it is missing or at a revision older than this
        one (its text may hold what this revision fixed: a call of it would run that)
        before calling; a look refused (an ACL) leaves it to the call, as below."""
        if first:
            try:
                listed = yield LISTED
            except ResponseError:
                listed = None  # a look refused (an ACL): the call says what is missing
            revision = listed_revision(listed)
            if listed is not None and (revision is None or revision < REVISION):
                try:
                    yield LOAD
                except ResponseError as exc:
                    _after_load(client, exc)
        if failed is not None or self._by_function(client):
            if failed is None:
                try:
                    return (yield FCALL)
                except ResponseError as exc:
                    failed = exc
            reload = _after_fcall(client, failed)
            if reload:
                # Every call in flight when a server lost the library hears so (a fleet
                # after a failover): one that finds it loaded meanwhile by another does
                # not load it again. Redis runs one command at a time, so every look
                # that comes after the first load sees it; a look refused (an ACL)
                # goes on to load. A revision of the protocol older than this one is
                # replaced (it may lack the function called); a newer one is kept, and
                # a function it lacks (never, within one protocol) goes as a script:
                # two releases of one protocol never take the library from each other
                # in turns.
                try:
                    listed = yield LISTED
                except ResponseError:
                    listed = None
                revision = listed_revision(listed)
                loaded = revision is not None and revision >= REVISION
                if not loaded:
                    try:
                        yield LOAD
                        loaded = True
                    except ResponseError as exc:
                        loaded = _after_load(client, exc)
                if loaded:
                    try:
                        return (yield FCALL)
                    except ResponseError as exc:
                        _after_reload(exc)
        try:
            return (yield EVALSHA)
        except NoScriptError:
            return (yield EVAL)

    def _wired(self, step: str, keys: Sequence[str], args: Sequence[str]) -> tuple[str, ...]:
        """The command of one step as it goes on a wire (redis/held_connection.py): the words the
        client's method would send."""
        if step == FCALL:
            return ("FCALL", cast("str", self.function), str(len(keys)), *keys, *args)
        if step == EVALSHA:
            return ("EVALSHA", self.sha, str(len(keys)), *keys, *args)
        if step == EVAL:
            return ("EVAL", self.source, str(len(keys)), *keys, *args)
        if step == LISTED:
            return ("FUNCTION", "LIST", "LIBRARYNAME", library().name)
        return ("FUNCTION", "LOAD", "REPLACE", library().source)

    def _command(
        self,
        client: Any,
        step: str,
        keys: Sequence[str],
        args: Sequence[str],
        send: Callable[[tuple[str, ...]], Any] | None = None,
    ) -> Any:
        """Send one step (a coroutine for an asyncio client), on ``send`` where given:
        the library loaded on the connection the call holds, not on another of the
        pool's (which asyncio cannot tell is dead after a restart until it reads)."""
        if send is not None:
            return send(self._wired(step, keys, args))
        if step == FCALL:
            return client.fcall(self.function, len(keys), *keys, *args)
        if step == EVALSHA:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        if step == EVAL:
            return client.eval(self.source, len(keys), *keys, *args)
        if step == LISTED:
            return client.function_list(library=library().name)
        return client.function_load(library().source, replace=True)

    def _command_async(
        self,
        client: Any,
        step: str,
        keys: Sequence[str],
        args: Sequence[str],
        send: Callable[[tuple[str, ...], Late[Any] | None], Awaitable[Any]] | None,
        late: Late[Any] | None,
    ) -> Awaitable[Any]:
        """:meth:`_command` for an asyncio client: ``late`` goes with a step that runs the
        driver, not with a look at the library or its load."""
        if send is None:
            return cast("Awaitable[Any]", self._command(client, step, keys, args))
        return send(self._wired(step, keys, args), late if step in (FCALL, EVALSHA, EVAL) else None)

    def __call__(
        self,
        client: Any,
        keys: Sequence[str],
        args: Sequence[str],
        send: Callable[[tuple[str, ...]], Any] | None = None,
    ) -> Any:
        # The usual call, one command, sent here without the steps' machinery; they
        # take over from its error. ``send``: how that one command goes, where not
        # through the client (redis/held_connection.py).
        try:
            if self._by_function(client):
                if _unchecked and _first_call(client):
                    steps = self._steps(client, first=True)
                else:
                    try:
                        if send is not None:
                            return send(self._wired(FCALL, keys, args))
                        return client.fcall(self.function, len(keys), *keys, *args)
                    except ResponseError as exc:
                        steps = self._steps(client, exc)
            else:
                try:
                    if send is not None:
                        return send(self._wired(EVALSHA, keys, args))
                    return client.evalsha(self.sha, len(keys), *keys, *args)
                except NoScriptError:
                    return self._command(client, EVAL, keys, args, send)
        except ResponseError as exc:
            raise self._translated(exc) from None
        try:
            step = next(steps)
            while True:
                try:
                    reply = self._command(client, step, keys, args, send)
                except ResponseError as exc:
                    step = steps.throw(exc)
                else:
                    step = steps.send(reply)
        except StopIteration as done:
            return done.value
        except ResponseError as exc:
            raise self._translated(exc) from None

    async def call_async(
        self,
        client: Any,
        keys: Sequence[str],
        args: Sequence[str],
        send: Callable[[tuple[str, ...], Late[Any] | None], Awaitable[Any]] | None = None,
        late: Late[Any] | None = None,
    ) -> Any:
        """:meth:`__call__` for an asyncio client; ``late`` goes with each step that runs
        the driver (``send`` hands it the reply if its task leaves before it lands)."""
        try:
            if self._by_function(client):
                if _unchecked and _first_call(client):
                    steps = self._steps(client, first=True)
                else:
                    try:
                        if send is not None:
                            return await send(self._wired(FCALL, keys, args), late)
                        return await client.fcall(self.function, len(keys), *keys, *args)
                    except ResponseError as exc:
                        steps = self._steps(client, exc)
            else:
                try:
                    if send is not None:
                        return await send(self._wired(EVALSHA, keys, args), late)
                    return await client.evalsha(self.sha, len(keys), *keys, *args)
                except NoScriptError:
                    return await self._command_async(client, EVAL, keys, args, send, late)
        except ResponseError as exc:
            raise self._translated(exc) from None
        try:
            step = next(steps)
            while True:
                try:
                    reply = await self._command_async(client, step, keys, args, send, late)
                except ResponseError as exc:
                    step = steps.throw(exc)
                else:
                    step = steps.send(reply)
        except StopIteration as done:
            return done.value
        except ResponseError as exc:
            raise self._translated(exc) from None

    def __repr__(self) -> str:
        return f"Script({self.name!r}, sha={self.sha[:12]})"


def _script(name: str, driver: str, kinds: Sequence[str], call: str, function: str) -> Script:
    composed = Composed()
    if driver in ("_single", "_lanes", "_fair", "_group"):
        _rate_limit_body(composed, kinds)
    else:
        composed.file("_prelude")
    composed.driver(driver)
    composed.add(f"return {call}")
    return Script(name, composed, library().function(function))


def _driven(kind: str, driver: str, name: str, function: str) -> Script:
    if kind not in ALGORITHMS:
        raise ValueError(f"no script for algorithm {kind!r}")
    return _script(name, driver, (kind,), f"drive_{driver.lstrip('_')}({kind}, '{kind}', KEYS, ARGV)", function)


@cache
def single_script(kind: str) -> Script:
    """The script of one limiter of algorithm ``kind``."""
    return _driven(kind, "_single", kind, kind)


@cache
def follow_script(kind: str) -> Script:
    """The script of one limiter of algorithm ``kind`` for a key's decisions that carry
    its name's change (``redis/name_changes.py``): the same driver under a function
    that older revisions of the library lack, so that calling it loads this one."""
    return _driven(kind, "_single", kind, f"follow_{kind}")


@cache
def lanes_script(kind: str) -> Script:
    """The script of a budget with priorities: two lanes of algorithm ``kind``."""
    if kind not in LANE_KINDS:
        raise ValueError(f"no budget with priorities of algorithm {kind!r}")
    return _driven(kind, "_lanes", f"{kind}:lanes", f"lanes_{kind}")


@cache
def fair_script(kind: str) -> Script:
    """The script of a budget shared fairly among tenants, of algorithm ``kind``."""
    if kind not in LANE_KINDS:
        raise ValueError(f"no fair share of algorithm {kind!r}")
    return _driven(kind, "_fair", f"{kind}:fair", f"fair_{kind}")


@cache
def group_script() -> Script:
    """The script of a composite: every algorithm, and the group driver."""
    return _script("group", "_group", ALGORITHMS + GROUP_ONLY, "drive_group(KEYS, ARGV)", "group")


@cache
def breaker_script() -> Script:
    """The script of a shared circuit breaker."""
    return _script("breaker", "breaker", (), "drive_breaker(KEYS, ARGV)", "breaker")


@cache
def concurrency_script() -> Script:
    """The script of a shared semaphore (``ConcurrencyLimit``)."""
    return _script("concurrency", "concurrency", (), "drive_concurrency(KEYS, ARGV)", "concurrency")


@cache
def live_script() -> Script:
    """The script of the safe mode's heartbeat: the live processes (``redis/live.py``)."""
    return _script("live", "live", (), "drive_live(KEYS, ARGV)", "live")


def preload(client: Any) -> None:
    """Load the function library and every script on ``client``'s server, before any
    call asks for one (for a server that hangs up after an error reply, as
    fakeredis's does after NOSCRIPT or "Function not found")."""
    client.function_load(library().source, replace=True)
    for script in [*(single_script(kind) for kind in ALGORITHMS), group_script()]:
        client.script_load(script.source)
