"""The handles of a :class:`~.redis.RedisBackend`: a limiter (or a composite's limits,
or one priority of a budget with lanes) bound to its keys, each call one script call.

They make the script's arguments and read its replies (``redis/replies.py``), decide
in rounds when coalescing or leasing (``redis/rounds.py``), and turn to the local fallback
(``memory/fallback.py``) through the backend's failure policy when the store is
unavailable, keeping what each side promised (``redis/pending.py``).
"""

from __future__ import annotations

import asyncio
import functools
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from ..._algorithms.algorithm import Algorithm
from ..._algorithms.lanes import HIGH, LANES, LOW, Lanes, LaneTime, LastLane, charge_parts
from ..._algorithms.quota import CalendarQuota
from ..._errors import BackendUnavailable
from ..keys import Keyed, code_key, config_key
from ..landing import Late, shielded
from ..memory.fallback import Fallback, inner_handle, throttle_fallback
from ..stats import Stats, weight
from ..store import Level, Pacing
from .calls import RedisCalls
from .name_changes import NameChanges
from .pending import LOCAL, STORE, PendingGrants
from .replies import at_arg, cached_num, charged_of, decision_of, grant_time, leveled_of, num, wait_arg
from .rounds import Round, RoundReply, Rounds
from .scripts import Script, follow_script, group_script, lanes_script, single_script

__all__ = ["CODE_EVERY", "RedisGroupHandle", "RedisHandle", "RedisLaneHandle"]

#: Seconds between two writes of what a limiter's code says (``inspect``, ``top``) by
#: one process: a change of mode (a shadow rolled out) shows within this.
CODE_EVERY = 60.0

T = TypeVar("T")


def _parameters(alg: Algorithm[Any]) -> Callable[[str], tuple[str, ...]]:
    """The texts of ``alg``'s parameters for a call told the time ``now`` (``""``: the
    server's, around this machine's). Fixed, but for a quota's: its boundaries around
    that time, which the script picks the period from (``lua/quota.lua``)."""
    if isinstance(alg, CalendarQuota):
        boundaries = alg.calendar.boundaries
        limit = num(alg.limit)
        # The texts sent last and the period they hold for: most calls fall in it.
        said: list[Any] = [math.inf, -math.inf, ()]

        def around(now: str) -> tuple[str, ...]:
            t = float(now) if now else time.time()
            if said[0] <= t < said[1]:
                return said[2]  # type: ignore[no-any-return]
            until, text = boundaries(t)
            said[:] = [alg.calendar.period(t)[0], until, (limit, text)]
            return said[2]  # type: ignore[no-any-return]

        return around
    fixed = tuple(num(p) for p in alg.params())
    return lambda now: fixed


async def _unleveled(late: Late[tuple[float, float, Level | None]], decision: tuple[float, float]) -> None:
    """A decision that tells no level, handed to a ``late`` of leveled decisions."""
    await late((*decision, None))


class _ScriptHandle(ABC, Generic[T]):
    """A limiter (or a composite's limits) bound to its keys: each call, one script call.

    Subclasses say only how a request becomes the script's arguments.
    """

    __slots__ = (
        "_backend",
        "_base_keys",
        "_batch_op",
        "_local",
        "_now",
        "_quiet",
        "_reserve_op",
        "_script",
        "pending",
        "rounds",
        "stats",
    )

    suspends = True

    def __init__(
        self,
        backend: RedisCalls,
        script: Script,
        keys: Sequence[str],
        now: Callable[[], str],
        local: Fallback[T] | None,
        counted: bool = True,
    ) -> None:
        self.stats: Stats | None = None
        self._backend = backend
        self._script = script
        self._base_keys = tuple(keys)
        # Before each op, what the library is to cache between calls (see op_of in
        # lua/_top.lua; it serves every database of its server, and keeps database 0's
        # counts and what is found beside a state): '~' counts nothing for `ratelimit
        # top`; '!' counts at once, for a database other than 0; '^' both.
        elsewhere = backend.database != 0
        if counted:
            self._quiet = "!" if elsewhere else ""
        else:
            self._quiet = "^" if elsewhere else "~"
        self._now = now
        self._local = local
        # The ops of a reserve and of a round: 'named' and 'nbatch' once a grant at once
        # is named too (name_grants).
        self._reserve_op = "reserve"
        self._batch_op = "batch"
        #: Coalescing and allotments (``redis/rounds.py``); ``None``: one call per reserve.
        self.rounds: Rounds | None = None
        #: With a local fallback: the grants still to go, carried at a switch
        #: (``redis/pending.py``).
        self.pending: PendingGrants | None = None

    def name_grants(self) -> None:
        self._reserve_op = "named"
        self._batch_op = "nbatch"

    @property
    def _keys(self) -> tuple[str, ...]:
        """The keys of the next call."""
        return self._base_keys

    def _missed(self) -> None:
        """A call did not reach the store: what it was to carry goes with the next one."""

    @abstractmethod
    def _args(self, op: str, tokens: T, extra: str) -> list[str]:
        """The script's arguments for ``op`` on ``tokens``."""

    # -- rounds (see redis/rounds.py) -------------------------------------------------------

    def _batch_args(self, rnd: Round) -> list[str]:
        """The script's arguments for a round of several requests (or an allotment)."""
        raise NotImplementedError(f"{type(self).__name__} is not decided in rounds")

    @staticmethod
    def _lone(rnd: Round) -> bool:
        """Whether a round is one request, decided as a plain reserve."""
        return rnd.give_back is None and not rnd.want and len(rnd.asks) == 1

    def _round_args(self, rnd: Round) -> list[str]:
        if self._lone(rnd):
            ask = rnd.asks[0]
            request: T = ask.request  # type: ignore[assignment]
            return self._args(self._reserve_op, request, wait_arg(ask.max_wait))
        return self._batch_args(rnd)

    def _round_reply(self, rnd: Round, args: Sequence[str], reply: Sequence[bytes | str]) -> RoundReply:
        if self._lone(rnd):
            return RoundReply([decision_of(reply)], 0.0, math.nan)
        n = len(rnd.asks)
        decisions = [(float(reply[3 * i]), grant_time(reply[3 * i + 1], reply[3 * i + 2])) for i in range(n)]
        return RoundReply(decisions, float(reply[3 * n]), float(reply[3 * n + 1]))

    def decide(self, rnd: Round) -> RoundReply:
        """Make one round's call (``Rounds``' I/O, for threads)."""
        self._to_store()  # in the round: its callers wait behind a pause it sets
        args = self._round_args(rnd)
        return self._round_reply(rnd, args, self._backend.run(self._script, self._keys, args))

    async def decide_async(self, rnd: Round) -> RoundReply:
        """Make one round's call on the running event loop."""
        await self._to_store_async()
        args = self._round_args(rnd)
        return self._round_reply(rnd, args, await self._backend.run_async(self._script, self._keys, args))

    #: A reservation's reply as ``(signed_wait, at)``.
    _decision = staticmethod(decision_of)

    def _refund_args(self, tokens: T, at: float | None) -> list[str]:
        """The script's arguments to give back ``tokens`` of the grant at ``at``."""
        return self._args("refund", tokens, at_arg(at))

    def _nothing(self) -> T:
        """No tokens: what is left to grant during a pause."""
        none: T = 0.0  # type: ignore[assignment]
        return none

    def _pause_store(self) -> tuple[float, list[str]] | None:
        """Before a decision of the store: if the local fallback decided last, the
        seconds until its pending grants are due and the restriction that leaves them to
        it (see ``redis/pending.py``)."""
        pending = self.pending
        if pending is None or pending.side == STORE:
            return None
        ahead = pending.enter(STORE)
        if not ahead > 0:
            return None
        if self.rounds is not None:
            self.rounds.void()  # an allotment is not to be spent through the pause
        return ahead, self._args("restrict", self._nothing(), num(ahead))

    def _to_store(self) -> None:
        pause = self._pause_store()
        if pause is not None:
            try:
                self._backend.run(self._script, self._keys, pause[1])
            except BaseException:
                assert self.pending is not None
                self.pending.undo(STORE, pause[0])
                raise

    async def _to_store_async(self) -> None:
        pause = self._pause_store()
        if pause is not None:
            try:
                await self._backend.run_async(self._script, self._keys, pause[1])
            except BaseException:
                assert self.pending is not None
                self.pending.undo(STORE, pause[0])
                raise

    def _decided(self, tokens: T, decision: tuple[float, float]) -> tuple[float, float]:
        """A decision of the store, its reach kept (see ``redis/pending.py``), and counted."""
        if self.pending is not None:
            self.pending.made(STORE, decision[0])
        return self._count(tokens, decision)

    def _locally(self, local: Fallback[T], tokens: T, max_wait: float) -> tuple[float, float]:
        pending = self.pending
        if pending is not None:
            ahead = pending.enter(LOCAL)
            if ahead > 0:
                local.restrict(self._nothing(), ahead)  # the store's queue goes first
        decision = local.reserve(tokens, max_wait)
        if pending is not None:
            pending.made(LOCAL, decision[0])
        return decision

    def _fallback(self, tokens: T, max_wait: float, exc: BackendUnavailable) -> tuple[float, float]:
        self._missed()
        local = self._local
        return self._backend.without_store(
            exc,
            self._base_keys[0],
            local=None if local is None else lambda: self._locally(local, tokens, max_wait),
            otherwise=lambda: (0.0, math.nan),
            says=(
                "Redis unavailable; deciding %r locally: %s",
                "Redis unavailable; granting %r without it (fail open): %s",
            ),
            decision=True,
        )

    def _count(self, tokens: T, decision: tuple[float, float]) -> tuple[float, float]:
        stats = self.stats
        if stats is not None:
            with stats.lock:
                stats.record(weight(tokens), decision[0])
        return decision

    def reserve_one(self, tokens: T, max_wait: float) -> tuple[float, float]:
        """One reservation, one call of the script: a reserve without rounds, and the
        round of a caller alone (``Rounds``), which is the same call."""
        pending = self.pending
        if pending is not None and pending.side != STORE:
            self._to_store()
        args = self._args(self._reserve_op, tokens, wait_arg(max_wait))
        return self._decision(self._backend.run(self._script, self._keys, args))

    async def reserve_one_async(
        self, tokens: T, max_wait: float, late: Late[tuple[float, float]] | None = None
    ) -> tuple[float, float]:
        pending = self.pending
        if pending is not None and pending.side != STORE:
            await self._to_store_async()
        args = self._args(self._reserve_op, tokens, wait_arg(max_wait))
        reply = await self._backend.run_async(self._script, self._keys, args, self._late(tokens, late))
        return self._decision(reply)

    def _late(self, tokens: T, late: Late[tuple[float, float]] | None) -> Late[Any] | None:
        """What the store call hands a reply that lands once its task has left (see
        ``reserve_async``): the decision, counted, to ``late``."""
        return None if late is None else functools.partial(self._landed, tokens, late)

    async def _landed(self, tokens: T, late: Late[tuple[float, float]], reply: Any) -> None:
        await late(self._decided(tokens, self._decision(reply)))

    def reserve(self, tokens: T, max_wait: float) -> tuple[float, float]:
        rounds = self.rounds
        try:
            if rounds is not None:
                w: float = tokens if tokens.__class__ is float else weight(tokens)  # type: ignore[assignment]
                decision = rounds.reserve(w, max_wait, tokens)
            else:
                decision = self.reserve_one(tokens, max_wait)
        except BackendUnavailable as exc:
            return self._count(tokens, self._fallback(tokens, max_wait, exc))
        if self.pending is not None:
            self.pending.made(STORE, decision[0])
        stats = self.stats
        if stats is not None:
            # _count, with Stats.record's count of a grant at once inlined.
            with stats.lock:
                if decision[0] == 0.0:
                    stats.granted += 1
                    stats.tokens += tokens if tokens.__class__ is float else weight(tokens)  # type: ignore[operator]
                else:
                    stats.record(weight(tokens), decision[0])
        return decision

    def reserve_here(self, tokens: T, max_wait: float) -> tuple[float, float] | None:
        return None

    #: Whether the script tells the level after a reserve that asks (``'1'`` after
    #: its arguments): the single and the group drivers do.
    _levels = True

    def _leveled(self, tokens: T, max_wait: float) -> list[str] | None:
        """The arguments of a reserve that asks for the level after it; ``None`` where
        the script does not tell it. Such a reserve is one call of its own, outside the
        rounds (``redis/rounds.py``): a round's batch tells no level, and an allotment
        spent here none either."""
        if not self._levels:
            return None
        args = self._args(self._reserve_op, tokens, wait_arg(max_wait))
        args.append("1")
        return args

    def reserve_level(self, tokens: T, max_wait: float) -> tuple[float, float, Level | None]:
        """``reserve``, and the level it left (see ``Handle.reserve_level``)."""
        args = self._leveled(tokens, max_wait)
        if args is None:
            return (*self.reserve(tokens, max_wait), None)
        try:
            if self.pending is not None and self.pending.side != STORE:
                self._to_store()
            reply = self._backend.run(self._script, self._keys, args)
        except BackendUnavailable as exc:
            return (*self._count(tokens, self._fallback(tokens, max_wait, exc)), None)
        decision, level = leveled_of(reply)
        return (*self._decided(tokens, decision), level)

    async def reserve_level_async(
        self, tokens: T, max_wait: float, late: Late[tuple[float, float, Level | None]] | None = None
    ) -> tuple[float, float, Level | None]:
        """:meth:`reserve_level` for asyncio; ``late`` as for :meth:`reserve_async`."""
        args = self._leveled(tokens, max_wait)
        if args is None:
            if late is None:
                return (*await self.reserve_async(tokens, max_wait), None)
            return (*await self.reserve_async(tokens, max_wait, functools.partial(_unleveled, late)), None)
        if late is not None and not self._backend.hands_over():
            return await shielded(self.reserve_level_async(tokens, max_wait), late)
        landed = None if late is None else functools.partial(self._landed_level, tokens, late)
        try:
            if self.pending is not None and self.pending.side != STORE:
                await self._to_store_async()
            reply = await self._backend.run_async(self._script, self._keys, args, landed)
        except BackendUnavailable as exc:
            return (*self._count(tokens, self._fallback(tokens, max_wait, exc)), None)
        decision, level = leveled_of(reply)
        return (*self._decided(tokens, decision), level)

    async def _landed_level(self, tokens: T, late: Late[tuple[float, float, Level | None]], reply: Any) -> None:
        decision, level = leveled_of(reply)
        await late((*self._decided(tokens, decision), level))

    #: ``reserve_async`` takes ``late`` (``store.TakesLate``).
    takes_late = True

    async def reserve_async(
        self, tokens: T, max_wait: float, late: Late[tuple[float, float]] | None = None
    ) -> tuple[float, float]:
        """The store's decision on ``tokens``; with ``late``, a decision that lands once
        this task has left (cancelled) is handed to it: by the held connection, which
        reads the reply on (``held_connection.py``), or else by the call run in a task
        of its own."""
        rounds = self.rounds
        if late is not None and not self._backend.hands_over():
            return await shielded(self.reserve_async(tokens, max_wait), late)
        if rounds is not None and self._backend.threaded:
            # A synchronous client serves this loop from threads: their rounds.
            return await asyncio.to_thread(self.reserve, tokens, max_wait)
        try:
            if rounds is not None:
                decision = await rounds.reserve_async(weight(tokens), max_wait, tokens, late)
            else:
                # reserve_one_async, inlined: a coroutine less to make and await.
                pending = self.pending
                if pending is not None and pending.side != STORE:
                    await self._to_store_async()
                args = self._args(self._reserve_op, tokens, wait_arg(max_wait))
                reply = await self._backend.run_async(self._script, self._keys, args, self._late(tokens, late))
                decision = self._decision(reply)
        except BackendUnavailable as exc:
            return self._count(tokens, self._fallback(tokens, max_wait, exc))
        return self._decided(tokens, decision)

    def _unrecorded(self, what: str, exc: BackendUnavailable, local: Callable[[Fallback[T]], object]) -> None:
        # A refund or a restriction that cannot reach the store: on the local fallback
        # if there is one, and otherwise lost, which is said in the log.
        self._missed()
        fallback = self._local
        self._backend.without_store(
            exc,
            self._base_keys[0],
            local=None if fallback is None else lambda: local(fallback),
            otherwise=lambda: None,
            says=("", f"Redis unavailable; the {what} on %r is lost: %s"),
        )

    def refund(self, tokens: T, at: float | None) -> None:
        try:
            self._backend.run(self._script, self._keys, self._refund_args(tokens, at))
        except BackendUnavailable as exc:
            self._unrecorded("refund", exc, lambda local: local.refund(tokens, None))

    async def refund_async(self, tokens: T, at: float | None) -> None:
        try:
            await self._backend.run_async(self._script, self._keys, self._refund_args(tokens, at))
        except BackendUnavailable as exc:
            self._unrecorded("refund", exc, lambda local: local.refund(tokens, None))

    def charge(self, tokens: T) -> float | None:
        # Like a refund, a charge lost with the store is said in the log: a call that
        # was made and cost more than reserved goes uncounted by the shared budget.
        try:
            return charged_of(self._backend.run(self._script, self._keys, self._args("charge", tokens, "")))
        except BackendUnavailable as exc:
            self._unrecorded("charge", exc, lambda local: local.charge(tokens))
            return None

    async def charge_async(self, tokens: T) -> float | None:
        try:
            reply = await self._backend.run_async(self._script, self._keys, self._args("charge", tokens, ""))
        except BackendUnavailable as exc:
            self._unrecorded("charge", exc, lambda local: local.charge(tokens))
            return None
        return charged_of(reply)

    def restrict(self, remaining: T, seconds: float) -> None:
        try:
            self._backend.run(self._script, self._keys, self._args("restrict", remaining, num(seconds)))
        except BackendUnavailable as exc:
            self._unrecorded("restriction", exc, lambda local: local.restrict(remaining, seconds))

    async def restrict_async(self, remaining: T, seconds: float) -> None:
        try:
            await self._backend.run_async(self._script, self._keys, self._args("restrict", remaining, num(seconds)))
        except BackendUnavailable as exc:
            self._unrecorded("restriction", exc, lambda local: local.restrict(remaining, seconds))

    # -- reading the wait, forgetting the usage ---------------------------------------

    def peek(self, tokens: T) -> float:
        """The wait a reserve of ``tokens`` would be told now: the script's read-only
        ``wait`` op, on the keys alone (what the code says is not written with it)."""
        try:
            reply = self._backend.run(self._script, self._base_keys, self._args("wait", tokens, ""))
        except BackendUnavailable as exc:
            return self._peek_without(tokens, exc)
        return float(reply[0])

    async def peek_async(self, tokens: T) -> float:
        try:
            reply = await self._backend.run_async(self._script, self._base_keys, self._args("wait", tokens, ""))
        except BackendUnavailable as exc:
            return self._peek_without(tokens, exc)
        return float(reply[0])

    def _peek_without(self, tokens: T, exc: BackendUnavailable) -> float:
        # As a decision would: the local fallback's own answer, or at once (fail open).
        local = self._local
        return self._backend.without_store(
            exc,
            self._base_keys[0],
            local=None if local is None else lambda: local.peek(tokens),
            otherwise=lambda: 0.0,
            says=("", ""),
        )

    def reset(self) -> None:
        """Forget the usage in the store (the script's ``reset`` op), and any allotment in hand."""
        self._forgetting()
        try:
            self._backend.run(self._script, self._base_keys, self._args("reset", self._nothing(), ""))
        except BackendUnavailable as exc:
            self._unrecorded("reset", exc, lambda local: local.reset())

    async def reset_async(self) -> None:
        self._forgetting()
        try:
            await self._backend.run_async(self._script, self._base_keys, self._args("reset", self._nothing(), ""))
        except BackendUnavailable as exc:
            self._unrecorded("reset", exc, lambda local: local.reset())

    def _forgetting(self) -> None:
        if self.rounds is not None:
            self.rounds.void()  # an allotment was taken from the usage forgotten


class RedisHandle(_ScriptHandle[float]):
    """One limiter: ``KEYS = [base, config]`` (see ``redis/config.py``), and ``code`` at its
    first call and then once every ``CODE_EVERY`` seconds; ``ARGV = [op, now, tokens,
    extra, *params, slack, shadow]``.

    With ``rounds`` (coalescing, an allotment: see ``redis/rounds.py``) its reserves are decided
    in rounds, ``ARGV = ['batch', now, give_back, give_back_at, *params, slack, shadow, want, least,
    tokens, max_wait, ...]`` for more than one request or an allotment.
    """

    __slots__ = ("__weakref__", "_around", "_code_due", "_follow_script", "_follows", "_params", "_with_code")

    def __init__(
        self,
        backend: RedisCalls,
        alg: Algorithm[Any],
        key: str,
        now: Callable[[], str],
        local: Fallback[float] | None,
        name: str | Keyed | None = None,
        shadow: bool = False,
        *,
        counted: bool = True,
        follows: NameChanges | None = None,
    ) -> None:
        # Without a name (tests driving the script), no change is read nor code written.
        keys = [key] if name is None else [key, config_key(name)]
        super().__init__(backend, single_script(alg.kind), keys, now, local, counted)
        self._with_code = None if name is None else (key, config_key(name), code_key(name))
        self._code_due = -math.inf
        slack = num(getattr(alg, "slack", 0.0))
        self._params = (*(num(p) for p in alg.params()), slack, "1" if shadow else "0")
        # A quota's parameters change with the time (None: fixed, ``_params``).
        self._around = _parameters(alg) if isinstance(alg, CalendarQuota) else None
        # A key's view: its decisions carry its name's change by name (see
        # redis/name_changes.py and `carry` in lua/_single.lua).
        named = name.name if isinstance(name, Keyed) else None
        self._follows = None if follows is None or named is None else (follows, named)
        self._follow_script = follow_script(alg.kind)

    @property
    def _keys(self) -> tuple[str, ...]:
        # What the code says is written by the first call and then once in a while
        # (it is kept a day; a keyed budget's, a minute past its state), not read nor
        # written by every decision.
        if self._with_code is not None:
            now = time.monotonic()
            if now >= self._code_due:
                self._code_due = now + CODE_EVERY
                return self._with_code
        return self._base_keys

    def _missed(self) -> None:
        # The code may have been due with the call that failed: a limiter whose first
        # decisions met an outage would not show in `inspect` for a minute after it.
        self._code_due = -math.inf

    def _args(self, op: str, tokens: float, extra: str) -> list[str]:
        now = self._now()
        if self._follows is not None and op == self._reserve_op:
            op += self._carried()
        return [self._quiet + op, now, cached_num(tokens), extra, *self._params_at(now)]

    def _carried(self) -> str:
        """What this key's decision carries of its name's change (``""``: nothing).
        Once it carries, the handle calls the library's ``follow_<kind>`` from then on
        (the same driver; a server holding an older revision loads this one for it)."""
        assert self._follows is not None
        text = self._follows[0].carried(self._follows[1])
        if text and self._script is not self._follow_script:
            self._script = self._follow_script
        return text

    def _params_at(self, now: str) -> tuple[str, ...]:
        if self._around is None:
            return self._params
        return (*self._around(now), *self._params[2:])

    def _batch_args(self, rnd: Round) -> list[str]:
        back = ("", "") if rnd.give_back is None else (num(rnd.give_back[0]), at_arg(rnd.give_back[1]))
        now = self._now()
        op = self._batch_op
        if self._follows is not None:
            op += self._carried()
        args = [self._quiet + op, now, *back, *self._params_at(now), num(rnd.want), num(rnd.least)]
        for ask in rnd.asks:
            args += [num(ask.tokens), wait_arg(ask.max_wait)]
        return args

    def reserve_here(self, tokens: float, max_wait: float) -> tuple[float, float] | None:
        rounds = self.rounds
        if rounds is None or rounds.lease is None:
            return None
        got = rounds.reserve_here(tokens, threads=self._backend.threaded)
        return None if got is None else self._count(tokens, got)

    def restrict(self, remaining: float, seconds: float) -> None:
        # The provider says how much more may go: what is left of an allotment is not
        # the process's to spend any more.
        if self.rounds is not None:
            self.rounds.void()
        super().restrict(remaining, seconds)

    async def restrict_async(self, remaining: float, seconds: float) -> None:
        if self.rounds is not None:
            self.rounds.void()
        await super().restrict_async(remaining, seconds)

    def give_back_ended(self) -> None:
        """Give back the rest of an allotment that has ended (``redis/allotment_returns.py``)."""
        if self.rounds is not None:
            for tokens, at in self.rounds.take_ended():
                self.refund(tokens, at)

    def give_back_allotment(self) -> None:
        """Give back what is left of this handle's allotments (the backend closing)."""
        if self.rounds is not None:
            for tokens, at in self.rounds.take_voids():
                self.refund(tokens, at)

    async def give_back_allotment_async(self) -> None:
        if self.rounds is not None:
            for tokens, at in self.rounds.take_voids():
                await self.refund_async(tokens, at)


class RedisGroupHandle(_ScriptHandle[Sequence[float]]):
    """A composite: ``ARGV = [op, now, extra]`` then ``kind, tokens, *params`` per member."""

    __slots__ = ("_fixed", "_members")

    def __init__(
        self,
        backend: RedisCalls,
        algs: Sequence[Algorithm[Any]],
        keys: Sequence[str],
        now: Callable[[], str],
        local: Fallback[Sequence[float]] | None,
        *,
        counted: bool = True,
    ) -> None:
        super().__init__(backend, group_script(), keys, now, local, counted)
        self._members = tuple((alg.kind, _parameters(alg)) for alg in algs)
        # Every member's parameters as sent, where none changes with the time (no quota).
        self._fixed = (
            None
            if any(isinstance(alg, CalendarQuota) for alg in algs)
            else tuple(tuple(num(p) for p in alg.params()) for alg in algs)
        )

    def _args(self, op: str, tokens: Sequence[float], extra: str) -> list[str]:
        now = self._now()
        args = [self._quiet + op, now, extra]
        fixed = self._fixed
        if fixed is not None:
            for (kind, _), params, n in zip(self._members, fixed, tokens, strict=True):
                args += [kind, num(n), *params]
            return args
        for (kind, around), n in zip(self._members, tokens, strict=True):
            args += [kind, num(n), *around(now)]
        return args

    def _nothing(self) -> Sequence[float]:
        return [0.0] * len(self._members)

    def _batch_args(self, rnd: Round) -> list[str]:
        # The members with no tokens of their own, then each request: its max_wait
        # and one weight per member (see lua/_group.lua). A group takes no allotment.
        args = self._args(self._batch_op, [0.0] * len(self._members), "")
        for ask in rnd.asks:
            request: Sequence[float] = ask.request  # type: ignore[assignment]
            args += [wait_arg(ask.max_wait), *(num(n) for n in request)]
        return args

    # -- a learned pace among the members (``adaptive=``, see _algorithms/adaptive.py) --

    def _throttle_args(self, decided: float | None, at: float | None) -> list[str]:
        known = "" if decided is None or at is None else f"{num(decided)} {num(at)}"
        return self._args("throttle", [0.0] * len(self._members), known)

    def throttle(self, decided: float | None, at: float | None) -> None:
        """A refusal of the request decided at store time ``decided`` to go at ``at``."""
        try:
            self._backend.run(self._script, self._keys, self._throttle_args(decided, at))
        except BackendUnavailable as exc:
            self._unrecorded("throttle", exc, lambda local: throttle_fallback(local, decided, at))

    async def throttle_async(self, decided: float | None, at: float | None) -> None:
        try:
            await self._backend.run_async(self._script, self._keys, self._throttle_args(decided, at))
        except BackendUnavailable as exc:
            self._unrecorded("throttle", exc, lambda local: throttle_fallback(local, decided, at))

    def rate(self) -> float:
        """The learned pace's rate now; this process's own with the local fallback
        while the store is unavailable (otherwise ``BackendUnavailable``)."""
        try:
            reply = self._backend.run(self._script, self._keys, self._args("rate", [0.0] * len(self._members), ""))
        except BackendUnavailable:
            local = inner_handle(self._local) if self._local is not None else None
            if isinstance(local, Pacing):
                return local.rate()
            raise
        return float(reply[0])


class RedisLaneHandle(_ScriptHandle[float]):
    """One priority of a budget with two lanes: ``KEYS = [high, low]``, ``ARGV = [op,
    now, tokens, extra, lane, keep, low_share]`` then each lane's largest request and
    parameters (see ``lua/_lanes.lua``)."""

    __slots__ = ("_lane", "_lanes", "_last", "_tail")

    def __init__(
        self,
        backend: RedisCalls,
        lanes: Lanes,
        keys: Sequence[str],
        now: Callable[[], str],
        local: Fallback[float] | None,
        lane: int,
        keep: float | None,
        *,
        counted: bool = True,
    ) -> None:
        super().__init__(backend, lanes_script(lanes.high.kind), keys, now, local, counted)
        self._lane = lane
        self._lanes = lanes
        self._last = LastLane(lane)
        self._tail = (
            "" if keep is None else num(keep),
            num(lanes.low_share),
            *(num(x) for alg in (lanes.high, lanes.low) for x in (alg.most, *alg.params())),
        )

    def name_grants(self) -> None:
        pass  # a lane's grants are not named: a refund finds its lane, not its slot

    _levels = False  # (the lanes' driver tells no level)

    def _args(self, op: str, tokens: float, extra: str) -> list[str]:
        if op == "charge":
            # Both lanes' parts, split here once for both stores (see charge_parts).
            high, low = charge_parts(self._lanes, tokens)
            return [self._quiet + op, self._now(), num(high), num(low), LANES[self._lane], *self._tail]
        return [self._quiet + op, self._now(), num(tokens), extra, LANES[self._lane], *self._tail]

    def _decision(self, reply: Sequence[bytes | str] | bytes | str) -> tuple[float, float]:
        # The lanes' driver always names the lane: never the single driver's lone time.
        assert not isinstance(reply, (bytes, str))
        lane = LOW if reply[2] in (b"lo", "lo") else HIGH
        wait = float(reply[0])
        if wait >= 0:
            self._last.saw(lane)
        return wait, LaneTime(float(reply[1]), lane)

    def _refund_args(self, tokens: float, at: float | None) -> list[str]:
        # A reservation goes back to the lane it was taken from; a plain refund to the
        # lane of this caller's latest grant (see LastLane).
        lane = at.lane if isinstance(at, LaneTime) else self._last.lane()
        return [self._quiet + "refund", self._now(), num(tokens), at_arg(at), LANES[lane], *self._tail]
