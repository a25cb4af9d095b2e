"""The ``ratelimit`` command line.

- ``ratelimit size``: recommended settings for every algorithm from a provider's
  documented limits, the static per-worker split beside them, and the expected wait
  at a given demand (the arithmetic is in ``ratelimit._cli.sizing`` and
  ``ratelimit._limiting.sizing``).
- ``ratelimit bench``: worker processes and threads acquire from one limiter, sized
  as ``size`` would, and call a provider (the built-in fake one by default); reports
  the achieved rate, 429s, waits, round trips, CPU and fairness (``ratelimit._cli.bench``).
  ``--sweep`` tries several headrooms, no guard, and capacities, and marks the best.
  ``--adaptive`` hides the provider's limit (and lowers it mid-run) and measures how
  an adaptive limiter finds and follows it.
- ``ratelimit inspect``, ``set`` and ``top``: what an operator reads and changes in a
  shared store, written once against the operator protocol (``_stores/operated.py``)
  for whichever store the URL names (``ratelimit._cli.stores``), printed by
  ``_cli/inspect_report.py`` and ``_cli/top_report.py``. ``set`` refuses a name the
  store holds nothing of (a typo, most often) unless ``--force``.

A value with a minus sign is a value (``--limit -5/s``), refused as negative by the
option's own check; ``ratelimit --version`` prints the package's version.

Bad arguments end the command with one line on stderr and exit code 2; a run that
cannot start (an unreachable store or target) with one line and exit code 1; Ctrl-C
during a bench prints the partial report and exits with 130. Output whose reader has
gone (``ratelimit inspect | head``) ends the command quietly with 141, as SIGPIPE
ends a Unix tool.

Nothing printed shows a secret: a URL's password (or lone user name, often a token)
and secret query parameters are shown as ``***`` wherever the URL appears, and every
error text is scrubbed of the secrets the command line holds, in case it quotes a URL
(``ratelimit._redact``).
"""

from __future__ import annotations

import argparse
import difflib
import io
import json
import math
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, NoReturn, TypeVar

import redis
import redis.exceptions
from redis.sentinel import MasterNotFoundError

from . import __version__, _validate
from ._cli.bench import (
    ADAPTIVE_BURST_SHARE,
    ADAPTIVE_DROP_SHARE,
    ADAPTIVE_SECONDS,
    DEFAULT_LIMIT,
    BenchConfig,
    BenchError,
    BenchResult,
    run_bench,
    sweep_configs,
)
from ._cli.bench_report import bench_json, bench_text, best, sweep_text
from ._cli.inspect_report import inspect_json, inspect_text, keys_text, override_text
from ._cli.plot import PLOT_MISSING, can_plot, plot
from ._cli.printable import printable
from ._cli.size_report import size_json, size_text
from ._cli.sizing import DEFAULT_GUARD, DEFAULT_HEADROOM, size
from ._cli.stores import (
    SQLITE_PREFIX,
    SQLITE_URL_HELP,
    UnknownStore,
    backend_from_url,
    is_cluster_node,
    sqlite_path_hint,
    store_of,
)
from ._cli.top_report import top_json, top_text
from ._errors import BackendUnavailable
from ._redact import redact_url, scrub, url_secrets
from ._stores.operated import Operated
from ._stores.records import FleetRow, UnchangeableLimit, checked_override
from ._stores.redis import REDIS_URL_ENV, failure_reason, url_from_env
from ._validate import UNITS, Rate, parse_rate

__all__ = ["main"]

_CONNECTION_ERRORS = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.RedisClusterException,
    redis.exceptions.ClusterError,
    OSError,
)

T = TypeVar("T")


#: A value written with a minus sign: argparse would take ``-5/s`` for an option
#: (see :func:`_values_kept`).
_NEGATIVE = re.compile(r"-\s*[0-9.]")


def _not_negative(text: str, expected: str) -> None:
    """Refuse a negative value, saying what is expected instead (``-0`` is zero, left to
    the option's own bounds)."""
    if _NEGATIVE.match(text.strip()) and any(digit in text for digit in "123456789"):
        raise argparse.ArgumentTypeError(f"{text!r} is negative; expected {expected}")


def _positive_float(text: str) -> float:
    _not_negative(text, "a number > 0")
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def _limiter_key(text: str) -> str:
    try:
        return _validate.key(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive_int(text: str) -> int:
    _not_negative(text, "a whole number > 0")
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a whole number > 0, got {text!r}")
    return value


def _rate(text: str) -> Rate:
    _not_negative(text, "a rate > 0 like N/s, N/min, N/hour or N/day (e.g. 1000/min)")
    try:
        return parse_rate(text, argument=None)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _headroom(text: str) -> float:
    # "5%" or "0.05"; a bare "5" is refused rather than guessed (5 % or 500 %?).
    _not_negative(text, "a fraction from 0 to below 1 (0.05) or a percentage (5%)")
    percent = text.strip().endswith("%")
    try:
        value = float(text.strip().rstrip("%")) / (100 if percent else 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction or a percentage (0.05 or 5%), got {text!r}") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a fraction from 0 to below 1 (0.05) or a percentage, got {text!r}")
    return value


def _duration(text: str) -> float:
    # "0.02", "0.02s" or "20ms": a bare number is seconds, as every duration here.
    _not_negative(text, "seconds from 0 to 60 (0.02, 0.02s or 20ms)")
    stripped = text.strip().lower()
    scale = 1.0
    if stripped.endswith("ms"):
        stripped, scale = stripped[:-2], 1e-3
    elif stripped.endswith("s"):
        stripped = stripped[:-1]
    try:
        value = float(stripped) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds (0.02, 0.02s or 20ms), got {text!r}") from None
    if not 0 <= value <= 60:
        raise argparse.ArgumentTypeError(f"expected seconds from 0 to 60, got {text!r}")
    return value


def _window(text: str) -> float:
    value = _positive_float(text)
    if not 1 <= value <= 59 or value != int(value):
        raise argparse.ArgumentTypeError(f"expected whole seconds from 1 to 59, got {text!r}")
    return value


def _span(text: str) -> float:
    # "90", "90s", "30min", "1h", "2 days": how long a change at run time lasts.
    _not_negative(text, "a duration > 0 (90, 90s, 30min, 1h, 2d)")
    stripped = text.strip().lower()
    number = stripped.rstrip("abcdefghijklmnopqrstuvwxyz ")
    unit = stripped[len(number) :].strip() or "s"
    try:
        value = float(number) * UNITS[unit]
    except (ValueError, KeyError):
        raise argparse.ArgumentTypeError(f"expected a duration (90, 90s, 30min, 1h, 2d), got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a duration > 0, got {text!r}")
    return value


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line: no usage block above them.

    Its messages may quote an argument (``unrecognized arguments: --redis URL``):
    ``secrets`` are scrubbed from them.
    """

    def __init__(self, *args: Any, secrets: Sequence[str] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.secrets = tuple(secrets)
        #: Each command's parser, by the command's name.
        self.commands: dict[str, _Parser] = {}

    def error(self, message: str) -> NoReturn:
        self.exit(2, scrub(f"{self.prog}: error: {message}\n", self.secrets))

    def valued(self, word: str) -> bool:
        """Whether ``word`` names an option that takes one value (``--limit``, not
        ``--json``), in full or cut short as argparse takes it (``--lim``)."""
        flags = {flag: action.nargs is None for action in self._actions for flag in action.option_strings}
        if word in flags:
            return flags[word]
        named = [flag for flag in flags if word.startswith("--") and flag.startswith(word)]
        return len(named) == 1 and flags[named[0]]


def _values_kept(parser: _Parser, argv: Sequence[str]) -> list[str]:
    """``argv`` with each negative value joined to its option (``--limit -5/s`` as
    ``--limit=-5/s``). argparse takes a word that starts with ``-`` and is not a plain
    number for an option, and would say the option has no value; joined, the
    option's own check says what is wrong with the value."""
    words = list(argv)
    command = next((word for word in words if not word.startswith("-")), None)
    if command not in parser.commands:
        return words
    takes = parser.commands[command]
    kept: list[str] = []
    at = 0
    while at < len(words):
        word = words[at]
        if at + 1 < len(words) and _NEGATIVE.match(words[at + 1]) and takes.valued(word):
            kept.append(f"{word}={words[at + 1]}")
            at += 2
            continue
        kept.append(word)
        at += 1
    return kept


def _argv_secrets(argv: Sequence[str]) -> tuple[str, ...]:
    """The secrets of every argument that may be a URL with credentials (holding ``@`` or ``://``)."""
    found: list[str] = []
    for argument in argv:
        value = argument.partition("=")[2] if argument.startswith("--") else argument
        if "@" in value or "://" in value:
            found.extend(url_secrets(value))
    return tuple(found)


def _secrets(args: argparse.Namespace) -> tuple[str, ...]:
    """The secrets of the URLs a command was given."""
    urls = [getattr(args, name, None) for name in ("redis", "store", "target")]
    return tuple(secret for url in urls if url is not None for secret in url_secrets(url))


def _workers(args: argparse.Namespace) -> tuple[int, int]:
    """(workers in all, boxes) from --workers, --boxes and --workers-per-box."""
    boxes: int = args.boxes or 1
    if args.workers_per_box is None:
        return args.workers or 1, boxes
    total: int = boxes * args.workers_per_box
    if args.workers is not None and args.workers != total:
        raise _UsageError(
            f"--workers {args.workers} disagrees with --boxes {boxes} x --workers-per-box {args.workers_per_box}"
        )
    return total, boxes


class _UsageError(Exception):
    """Arguments that parse one by one but not together."""


def size_command(args: argparse.Namespace) -> int:
    workers, boxes = _workers(args)
    demand = None if args.demand is None else args.demand.per_second
    sizing = size(args.limit, args.burst, workers, boxes, args.headroom, demand, args.guard)
    print(json.dumps(size_json(sizing), indent=2) if args.json else size_text(sizing))
    return 0


#: What --adaptive runs without, and why.
_NOT_ADAPTIVE = {
    "sweep": ("--sweep", "runs one setting"),
    "target": ("--target", "needs the built-in provider, whose limit it hides and lowers"),
    "calls": ("--calls", "runs for --seconds"),
    "strict_provider": ("--strict-provider", "hides a token bucket"),
    "headroom": ("--headroom", "sizes nothing"),
    "guard": ("--guard", "sizes nothing"),
}

#: What only --adaptive takes.
_ADAPTIVE_ONLY = {"ceiling": "--ceiling", "floor": "--floor", "drop_to": "--drop-to", "drop_at": "--drop-at"}


def _check_adaptive(args: argparse.Namespace) -> float | None:
    """The run's seconds, once --adaptive and the options beside it agree."""
    if not args.adaptive:
        given = [flag for name, flag in _ADAPTIVE_ONLY.items() if getattr(args, name) is not None]
        if args.no_drop:
            given.append("--no-drop")
        if given:
            raise _UsageError(f"{given[0]} needs --adaptive")
        return args.seconds if args.seconds is not None or args.calls is not None else 5.0
    for name, (flag, why) in _NOT_ADAPTIVE.items():
        if getattr(args, name) not in (None, False):
            raise _UsageError(f"--adaptive {why}: leave out {flag}")
    if args.algorithm != "token-bucket":
        raise _UsageError("--adaptive learns with a token bucket: leave out --algorithm")
    seconds: float = ADAPTIVE_SECONDS if args.seconds is None else args.seconds
    if args.no_drop and (args.drop_to is not None or args.drop_at is not None):
        raise _UsageError("--no-drop keeps the limit: leave out --drop-to and --drop-at")
    if args.drop_at is not None and args.drop_at >= seconds:
        raise _UsageError(f"--drop-at {args.drop_at:g} must come before the end of the run (--seconds {seconds:g})")
    if args.drop_to is not None and args.drop_to.per_second >= args.limit.per_second:
        raise _UsageError(f"--drop-to {args.drop_to} must be below --limit {args.limit}")
    ceiling = 2 * args.limit.per_second if args.ceiling is None else args.ceiling.per_second
    if args.floor is not None and args.floor.per_second >= ceiling:
        raise _UsageError(f"--floor {args.floor} must be below the ceiling ({ceiling:g}/s)")
    return seconds


def _bench_config(args: argparse.Namespace) -> BenchConfig:
    if args.store is not None:
        if not args.store.startswith("sqlite:///"):
            raise _UsageError(
                f"--store takes a SQLite file ({SQLITE_URL_HELP}; a Redis goes with --redis), got {args.store!r}"
            )
        if args.cluster:
            raise _UsageError("--cluster names a Redis Cluster: leave it out with --store")
        args.redis = None  # the file, not the Redis of the environment
    if args.cluster and args.redis is None:
        raise _UsageError("--cluster needs --redis URL (a node of the cluster)")
    if args.plot is not None and args.sweep:
        raise _UsageError("--plot draws one run: leave out --sweep")
    seconds = _check_adaptive(args)
    return BenchConfig(
        algorithm=args.algorithm,
        limit=args.limit,
        burst=args.burst,
        headroom=DEFAULT_HEADROOM if args.headroom is None else args.headroom,
        guard=DEFAULT_GUARD if args.guard is None else args.guard,
        strict=args.strict_provider,
        processes=args.processes,
        threads=args.threads,
        tasks=args.asyncio_tasks or 0,
        seconds=seconds,
        calls=args.calls,
        redis=args.redis,
        store=args.store,
        cluster=args.cluster,
        target=args.target,
        latency=args.latency,
        adaptive=args.adaptive,
        ceiling=None if args.ceiling is None else args.ceiling.per_second,
        floor=1.0 if args.floor is None else args.floor.per_second,
        drop=not args.no_drop,
        drop_to=args.drop_to,
        drop_at=args.drop_at,
    )


class _Progress:
    """The progress line on stderr: rewritten in place on a terminal, a line a second otherwise."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.last = -math.inf
        self.shown = False

    def __call__(self, elapsed: float, grants: int) -> None:
        if not self.tty and elapsed - self.last < 1:
            return
        self.last = elapsed
        line = f"{elapsed:6.1f} s  {grants} grants  {grants / elapsed if elapsed > 0 else 0:.1f}/s"
        if self.tty:
            sys.stderr.write(f"\r{line}\033[K")
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()
        self.shown = True

    def done(self) -> None:
        if self.tty and self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def _store_url(args: argparse.Namespace) -> str:
    """The URL of the store an operator command works on: ``--store``, else ``--redis``."""
    url: str | None = args.store if args.store is not None else args.redis
    if url is None:
        raise _UsageError(f"give --redis URL or --store URL (redis://..., or a SQLite file: {SQLITE_URL_HELP})")
    return url


def _flag(args: argparse.Namespace) -> str:
    return "--store" if args.store is not None else "--redis"


def _open(args: argparse.Namespace) -> Operated:
    """The store of the command (``--store`` or ``--redis``): for a Redis, a Cluster's
    client whenever it names a Cluster node, with or without ``--cluster`` (a single
    node's client would see a part of it)."""
    url = _store_url(args)
    try:
        store = store_of(url)
    except UnknownStore as exc:
        raise _UsageError(f"{_flag(args)}: {exc}") from None
    if store == "sqlite":
        if args.cluster:
            raise _UsageError("--cluster names a node of a Redis Cluster: leave it out with a SQLite store")
        try:
            return backend_from_url(url)
        except (OSError, ValueError) as exc:  # no such folder, not a store of ours
            raise _Unreachable() from exc
    try:
        cluster = is_cluster_node(url)
    except ValueError as exc:
        raise _UsageError(f"{_flag(args)}: {exc}") from None
    if args.cluster and not cluster and not url.lower().startswith("redis+sentinel://"):
        raise _UsageError(
            f"--cluster: {redact_url(url)} is not a node of a Redis Cluster (its cluster mode is off); "
            "leave out --cluster"
        )
    try:
        return backend_from_url(url, cluster=cluster)
    except ValueError as exc:
        raise _UsageError(f"{_flag(args)}: {exc}") from None


class _Unreachable(Exception):
    """The store could not be reached or used (the cause is chained); said in one
    line, exit 1."""


def _reading(call: Callable[[], T]) -> T:
    """``call()``, its failure to reach the store raised as :class:`_Unreachable` (so
    that an error of our own output, a closed pipe, is never taken for one)."""
    try:
        return call()
    except (BackendUnavailable, *_CONNECTION_ERRORS) as exc:
        raise _Unreachable() from exc


def _unreachable(args: argparse.Namespace, exc: BaseException) -> int:
    cause = exc.__cause__ or exc
    told = None
    while isinstance(cause, BackendUnavailable) and cause.__cause__ is not None:
        told, cause = cause, cause.__cause__
    url = _store_url(args)
    file = url.startswith(SQLITE_PREFIX)
    # redis-py's text of a master not found is a kilobyte of its connection objects, and
    # sqlite3's of a lock says nothing of the wait: the store's own text is one line.
    # Any other failure of Redis is said as the library says it (failure_reason).
    if told is not None and (file or isinstance(cause, MasterNotFoundError)):
        said = str(told)
    else:
        said = str(cause) if file else failure_reason(cause)
    what = "use the SQLite store" if file else "reach Redis"
    hint = sqlite_path_hint(url) if file else None
    said += "" if hint is None else f" ({hint})"
    text = f"ratelimit {args.command}: error: cannot {what} at {redact_url(url)}: {said}"
    print(printable(scrub(text, _secrets(args))), file=sys.stderr)
    return 1


def _on(args: argparse.Namespace) -> str:
    """Where the limiters decide, for the lines that say none did."""
    return "in this SQLite file" if _store_url(args).startswith(SQLITE_PREFIX) else "on this Redis"


def inspect_command(args: argparse.Namespace) -> int:
    if args.key is not None and not args.names:
        print("ratelimit inspect: error: --key needs the NAME (or names) whose key to show", file=sys.stderr)
        return 2
    backend = _reading(lambda: _open(args))
    try:
        if args.names:
            seen = _reading(lambda: backend.inspect_many(args.names, key=args.key))
        else:
            seen = _reading(backend.inspect_all)
    except ValueError as exc:  # a name no limiter could have (too long)
        raise _UsageError(str(exc)) from None
    finally:
        backend.close()
    if args.json:
        print(json.dumps(inspect_json(seen), indent=2, allow_nan=False))
    elif not seen:
        print(f"no limiter has decided {_on(args)} in the last day")
    else:
        print(inspect_text(seen))
    return 1 if any(not each.known for each in seen) else 0


def _top_screens(args: argparse.Namespace, rows_now: Callable[[], Sequence[FleetRow]], where: str, on: str) -> int:
    """``top``'s refreshes: the screen redrawn in place on a terminal; one block a
    refresh otherwise, so that a log of it reads in order (``--json``: one reading)."""
    tty = sys.stdout.isatty()
    shown = 0
    try:
        while True:
            rows = rows_now()
            if args.json:
                print(json.dumps(top_json(rows, args.window), indent=2, allow_nan=False))
                return 0
            screen = top_text(rows, where, args.window, on=on)
            sys.stdout.write(("\033[H\033[2J" if tty else "") + screen + "\n" + ("" if tty else "\n"))
            sys.stdout.flush()
            shown += 1
            if args.iterations is not None and shown >= args.iterations:
                return 0
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0


def top_command(args: argparse.Namespace) -> int:
    backend = _reading(lambda: _open(args))

    def rows_now() -> list[FleetRow]:
        return _reading(lambda: backend.top(args.window))

    try:
        return _top_screens(args, rows_now, redact_url(_store_url(args)), _on(args))
    finally:
        backend.close()


def set_command(args: argparse.Namespace) -> int:
    if args.reset and (args.rate is not None or args.burst is not None or args.ttl is not None):
        raise _UsageError("--reset returns to the code's values: leave out --rate, --burst and --for")
    if not args.reset and args.rate is None and args.burst is None:
        raise _UsageError("give --rate, --burst or both (or --reset)")
    rate = None if args.rate is None else args.rate.per_second
    if not args.reset:
        try:  # the values first, so that a bad one is told whatever the name
            checked_override(rate, args.burst, args.ttl)
        except ValueError as exc:
            raise _UsageError(str(exc)) from None
    backend = _reading(lambda: _open(args))
    name = printable(args.name) + ("" if args.key is None else f" key {printable(args.key)}")
    keyed = {} if args.key is None else {"key": args.key}
    reached = None
    try:
        if (
            not args.reset
            and not args.force
            and not _reading(lambda: backend.holds(args.name))
            and not _reading(lambda: backend.keys_in_use(args.name))
        ):
            print(f"ratelimit set: error: {_unused(backend, args.name)}", file=sys.stderr)
            return 1
        if args.reset:
            was = _reading(lambda: backend.reset_limit(args.name, **keyed))
            said = "back to the code's values" + ("" if was else " (no change was in force)")
        else:
            reached = _reading(lambda: backend.set_limit(args.name, rate=rate, burst=args.burst, ttl=args.ttl, **keyed))
            said = override_text(_reading(lambda: backend.limit_override(args.name, **keyed)))
        seen = _reading(lambda: backend.inspect(args.name, key=args.key))
    except UnchangeableLimit as exc:
        print(f"ratelimit set: error: {printable(str(exc))}", file=sys.stderr)
        return 1
    except ValueError as exc:
        raise _UsageError(str(exc)) from None
    finally:
        backend.close()
    print(f"{name}: {said}")
    if reached is not None and args.key is None:
        print(keys_text(reached, backend.later_keys_follow, backend.later_keys_after))
    print(inspect_text([seen]))
    return 0


#: How many existing names a refused ``set`` suggests, and how alike they must be.
_SUGGESTED = 3
_ALIKE = 0.6


def _unused(backend: Operated, name: str) -> str:
    """Why ``set`` refuses ``name``, which the store holds nothing of: the closest
    names it holds, if any, and ``--force``. Read only on this refusal (a full pass
    over the store's names)."""
    held = [each.name for each in _reading(backend.inspect_all)]
    near = difflib.get_close_matches(name, held, n=_SUGGESTED, cutoff=_ALIKE)
    quoted = ", ".join(f"'{printable(each)}'" for each in near)
    nearest = f"; nearest names here: {quoted}" if near else ""
    return (
        f"no limiter named '{printable(name)}' in this store (no state, no change, no breaker, no slots: a typo?)"
        f"{nearest}; to store the change for it all the same, give --force"
    )


def bench_command(args: argparse.Namespace) -> int:
    config = _bench_config(args)
    if args.plot is not None and not can_plot():
        raise _UsageError(PLOT_MISSING)
    progress = _Progress() if args.progress or sys.stderr.isatty() else None
    configs = sweep_configs(config) if args.sweep else [config]
    results: list[BenchResult] = []
    try:
        for each in configs:
            result = run_bench(each, progress)
            results.append(result)
            if result.interrupted:
                break
    except BenchError as exc:
        # Messages name URLs redacted already; this is the guard for any that quotes one.
        print(scrub(f"ratelimit bench: error: {exc}", _secrets(args)), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        # Stopped while workers were starting or being stopped (a second Ctrl-C), or
        # between sweep runs: report the runs that finished, if any.
        if not results:
            print("ratelimit bench: interrupted, nothing to report", file=sys.stderr)
            return 130
        results[-1] = replace(results[-1], interrupted=True)
    finally:
        if progress is not None:
            progress.done()
    interrupted = results[-1].interrupted
    secrets = _secrets(args)
    results = [replace(r, errors=tuple(scrub(error, secrets) for error in r.errors)) for r in results]
    if args.sweep:
        if args.json:
            chosen = best(results)
            print(json.dumps({"runs": [bench_json(r) for r in results], "best": chosen}, indent=2))
        else:
            print(sweep_text(results))
    else:
        print(json.dumps(bench_json(results[0]), indent=2) if args.json else bench_text(results[0]))
        if args.plot is not None:
            plot(results[0], args.plot)
            if not args.json:
                print(f"plot             {args.plot}")
    return 130 if interrupted else 0


def _add_provider(command: argparse.ArgumentParser, limit_default: Rate | None) -> None:
    command.add_argument(
        "--limit",
        type=_rate,
        required=limit_default is None,
        default=limit_default,
        help="the provider's documented rate: N/s, N/min, N/hour, N/day (e.g. 1000/min)"
        + ("" if limit_default is None else f"; default {limit_default}"),
    )
    command.add_argument("--burst", type=_positive_float, help="the provider's documented burst, if any")
    command.add_argument(
        "--headroom",
        type=_headroom,
        default=DEFAULT_HEADROOM,
        help=f"fraction of the provider's rate left unused, e.g. 0.05 or 5%% (default {DEFAULT_HEADROOM:g})",
    )
    command.add_argument(
        "--guard",
        type=_duration,
        default=DEFAULT_GUARD,
        help="how late a request may leave after its grant (send jitter) with the provider's limit still kept: "
        f"seconds, or e.g. 20ms (default {DEFAULT_GUARD:g} s, measured by benchmarks/jitter.py)",
    )


#: What the operator's ``--json`` writes for a number without bound (``_cli/jsonable.py``).
_JSON_INF = 'a number without bound (a refill that never limits, a wait that never ends) is the string "inf"'


def _add_store(command: argparse.ArgumentParser) -> None:
    """The store that the commands operating a fleet (inspect, set, top) read: any
    store's URL with ``--store`` (checked by the command), a Redis with ``--redis``."""
    command.add_argument(
        "--store",
        metavar="URL",
        help="the store the limiters share: redis://, rediss://, unix://, redis+sentinel:// or a SQLite file "
        f"({SQLITE_URL_HELP}); default: --redis",
    )
    command.add_argument(
        "--redis",
        metavar="URL",
        default=url_from_env(),
        help=f"the Redis the limiters share (default: the {REDIS_URL_ENV} environment variable)",
    )
    command.add_argument(
        "--cluster",
        action="store_true",
        help="--redis names a node of a Redis Cluster (a Cluster node is recognised without it too: the whole "
        "Cluster is read)",
    )


def _parser(secrets: Sequence[str] = ()) -> _Parser:
    parser = _Parser(prog="ratelimit", description="Rate limiting for API-calling pipelines.", secrets=secrets)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    sizing = commands.add_parser(
        "size",
        secrets=secrets,
        help="recommended limiter settings from a provider's documented limits",
        description="Recommended capacity and rate for each algorithm from the provider's documented limits, "
        "the static per-worker split beside them, and the expected wait at a demand. "
        "Every recommendation keeps the provider's limit for requests that leave up to --guard late. "
        "Token bucket: refill = limit x (1 - headroom), capacity = floor(burst - max(burst x headroom, "
        "refill x guard)) (without a burst, or also with one no larger than the limit: limit - refill x "
        "(window + guard), so that no provider window sees more than its limit); the derivations are in "
        "`ratelimit._limiting.sizing`, and ratelimit.for_limit() builds the same token bucket. "
        "Expected wait (Poisson arrivals at demand L, refill M, capacity C, r = L/M): "
        "Wq x exp(-theta (C - 1) / M) with Wq = r / (2M(1 - r)) and theta solving L(exp(theta/M) - 1) = theta; "
        "at or above the rate the wait grows without bound.",
    )
    _add_provider(sizing, None)
    sizing.add_argument("--workers", type=_positive_int, help="workers sharing the budget, all boxes together")
    sizing.add_argument("--boxes", type=_positive_int, help="machines the workers run on (default 1)")
    sizing.add_argument("--workers-per-box", type=_positive_int, help="workers on each box (with --boxes)")
    sizing.add_argument("--demand", type=_rate, help="requests the workers would send, all together (e.g. 12/s)")
    sizing.add_argument("--json", action="store_true", help="print JSON (stable keys) instead of text")
    sizing.set_defaults(func=size_command)

    bench = commands.add_parser(
        "bench",
        secrets=secrets,
        help="measure a limiter: worker processes x threads acquiring and calling a provider",
        description="Worker processes x threads (or asyncio tasks) each acquire() from one limiter, sized as "
        "`ratelimit size` recommends, then call the target; reports the achieved rate against the configured "
        "and the provider's, 429s, the most calls in any provider window, acquire waits, Redis round trips "
        "per grant, CPU per grant and fairness across callers. The target defaults to the built-in "
        "FakeProvider with the same --limit/--burst; the store to in-process state for one process, an "
        "embedded Redis-protocol server for several.",
    )
    bench.add_argument(
        "--algorithm", choices=["token-bucket", "leaky-bucket", "sliding-window"], default="token-bucket"
    )
    _add_provider(bench, DEFAULT_LIMIT)
    bench.add_argument("--processes", type=_positive_int, default=2, help="worker processes (default 2)")
    bench.add_argument("--threads", type=_positive_int, default=4, help="threads per process (default 4)")
    bench.add_argument("--asyncio-tasks", type=_positive_int, help="asyncio tasks per thread (default: none)")
    bench.add_argument(
        "--seconds",
        type=_positive_float,
        help=f"how long to run (default 5, unless --calls; {ADAPTIVE_SECONDS:g} with --adaptive)",
    )
    bench.add_argument("--calls", type=_positive_int, help="stop after this many calls, all workers together")
    bench.add_argument(
        "--redis",
        metavar="URL",
        default=url_from_env(),
        help=f"keep the limiter in this Redis (default: the {REDIS_URL_ENV} environment variable, else embedded)",
    )
    bench.add_argument("--cluster", action="store_true", help="--redis names a node of a Redis Cluster")
    bench.add_argument(
        "--store",
        metavar="sqlite:///PATH",
        help=f"keep the limiter in this SQLite file instead ({SQLITE_URL_HELP})",
    )
    bench.add_argument("--target", metavar="URL", help="call this URL instead of the built-in fake provider")
    bench.add_argument(
        "--strict-provider",
        action="store_true",
        help="without --burst, the built-in provider allows --limit in ANY sliding window, not per fixed window",
    )
    bench.add_argument("--json", action="store_true", help="print JSON (stable keys) instead of text")
    bench.add_argument("--progress", action="store_true", help="a progress line on stderr even when not a terminal")
    bench.add_argument("--plot", metavar="FILE.png", help="draw grants per second over time (needs matplotlib)")
    bench.add_argument(
        "--sweep",
        action="store_true",
        help="try headrooms 0..15%%, no guard, and capacities; mark the best setting",
    )
    bench.add_argument(
        "--latency",
        type=_duration,
        default=0.0,
        metavar="SECONDS",
        help="the built-in provider holds each answer back this long (seconds, or e.g. 20ms): requests in flight "
        "(default 0)",
    )
    adaptive = bench.add_argument_group(
        "adaptive",
        "--adaptive: the built-in provider enforces --limit as a hidden token bucket (no rate-limit headers, "
        f"bare 429s; burst --burst, default {ADAPTIVE_BURST_SHARE * 100:g}% of a second's worth) and lowers it "
        "mid-run; the workers' TokenBucket(1, ceiling, adaptive=Adaptive(floor)) learns the rate from the "
        "429s they feed back. Reports the time to reach 90% of the limit, the steady throughput and 429s, "
        "and how soon the limiter is back under the lowered limit, each against its goal.",
    )
    adaptive.add_argument("--adaptive", action="store_true", help="learn a hidden limit (see above)")
    adaptive.add_argument(
        "--ceiling", type=_rate, help="the adaptive limiter's ceiling (default: twice --limit, which it is not told)"
    )
    adaptive.add_argument("--floor", type=_rate, help="the adaptive limiter's floor (default 1/s)")
    adaptive.add_argument(
        "--drop-to",
        type=_rate,
        metavar="RATE",
        help=f"the hidden limit drops to this rate (default {ADAPTIVE_DROP_SHARE * 100:g}%% of --limit)",
    )
    adaptive.add_argument(
        "--drop-at",
        type=_positive_float,
        metavar="SECONDS",
        help="... this many seconds into the run (default: half of it)",
    )
    adaptive.add_argument("--no-drop", action="store_true", help="keep the hidden limit for the whole run")
    bench.set_defaults(func=bench_command, headroom=None, guard=None)

    inspect = commands.add_parser(
        "inspect",
        secrets=secrets,
        help="what each shared limiter is doing now: configuration, budget, pause, breaker",
        description="For each NAME (default: every name found in the store): the limiter's configuration as "
        "its code set it and as changed at run time (`ratelimit set`), the parameters in force, the most tokens "
        "one request could take now and the wait for one, how far ahead grants are already promised, a pause "
        "fed back from a provider, and the state of a breaker of that name. Exits 1 if a NAME is unknown. "
        "A ConcurrencyLimit's maximum is not kept in a SQLite file.",
    )
    inspect.add_argument("names", nargs="*", metavar="NAME", help="limiter names (default: all found)")
    _add_store(inspect)
    inspect.add_argument(
        "--key",
        type=_limiter_key,
        metavar="K",
        help="show each NAME's budget for key K (a limiter's `for_key(K)`) instead of the name's own",
    )
    inspect.add_argument(
        "--json",
        action="store_true",
        help=f"print JSON (stable keys) instead of text; {_JSON_INF}",
    )
    inspect.set_defaults(func=inspect_command)

    setting = commands.add_parser(
        "set",
        secrets=secrets,
        help="change a shared limiter's rate or burst at run time, in every process",
        description="Store a new rate and/or burst beside limiter NAME's state: every process uses it from its "
        "next decision, with no restart. A token bucket's refill and capacity, a leaky bucket's leak and "
        "queue, a sliding window's limit over its own window (a window has no burst). The tokens already "
        "owed keep their count. --for ends the change by itself; --reset returns to the code's values. "
        "A name whose keys say it would never read the change (a composite's members, an adaptive limiter, a "
        "budget with low_share, a ConcurrencyLimit) is refused: exit 1, nothing stored. So is a NAME the store "
        "holds nothing of (no state, no change, no breaker: often a typo), unless --force. A change by NAME "
        "reaches its keys (for_key) too; --key changes one key's budget alone.",
    )
    setting.add_argument("name", metavar="NAME", help="the limiter's name")
    setting.add_argument(
        "--rate",
        type=_rate,
        help="the limiter's own new rate, e.g. 500/min or 20/s (a bucket's refill, not a provider's limit: for a "
        "provider's new limit, set the rate and burst that `ratelimit size --limit` prints for it)",
    )
    setting.add_argument("--burst", type=_positive_float, help="the new burst (a bucket's capacity)")
    setting.add_argument("--for", dest="ttl", type=_span, metavar="DURATION", help="end the change after this long")
    setting.add_argument("--reset", action="store_true", help="return to the code's values")
    setting.add_argument(
        "--key",
        metavar="KEY",
        help="change the budget of one key of NAME (limiter.for_key(KEY)) alone; without it, a change by name "
        "reaches every key of the name but those with a change of their own",
    )
    setting.add_argument(
        "--force",
        action="store_true",
        help="store the change even for a NAME the store holds nothing of (a limiter yet to start)",
    )
    _add_store(setting)
    setting.set_defaults(func=set_command)

    top = commands.add_parser(
        "top",
        secrets=secrets,
        help="a live view of every shared limiter active in the last minute, across all processes",
        description="Refreshing like top: every limiter that decided in the store in the last minute, busiest "
        "first, with the grants, refusals and leased tokens per second over the last --window seconds, the "
        "99th percentile of the waits granted (the bound of its histogram bucket), the pauses fed back by a "
        "provider (429s with Retry-After) over the minute, a pause in force, and the state of a breaker of "
        "the same name. Counted by the limiters' own scripts, all processes together (in a SQLite file, by each "
        "process once a second). Ctrl-C ends it.",
    )
    _add_store(top)
    top.add_argument("--interval", type=_positive_float, default=1.0, help="seconds between refreshes (default 1)")
    top.add_argument("--window", type=_window, default=5.0, help="seconds the rates are taken over (default 5)")
    top.add_argument("--iterations", type=_positive_int, help="stop after this many refreshes (default: never)")
    top.add_argument(
        "--json", action="store_true", help=f"print one snapshot as JSON (stable keys) and stop; {_JSON_INF}"
    )
    top.set_defaults(func=top_command)
    parser.commands = {name: each for name, each in commands.choices.items() if isinstance(each, _Parser)}
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``ratelimit`` and ``python -m ratelimit``."""
    argv = sys.argv[1:] if argv is None else list(argv)
    from_env = url_from_env()
    parser = _parser(_argv_secrets(argv) + (() if from_env is None else tuple(url_secrets(from_env))))
    args = parser.parse_args(_values_kept(parser, argv))
    try:
        try:
            result: int = args.func(args)
        except _Unreachable as exc:
            result = _unreachable(args, exc)
        sys.stdout.flush()
    except _UsageError as exc:
        parser.exit(2, printable(scrub(f"ratelimit {args.command}: error: {exc}", _secrets(args))) + "\n")
    except BrokenPipeError:
        return _output_closed()
    return result


#: The exit status of a Unix tool killed by SIGPIPE (128 + 13).
_PIPE_CLOSED = 141


def _output_closed() -> int:
    """What a Unix tool does when its reader has gone (``... | head``): stop, quietly.
    The output still buffered would fail again at exit: it goes to /dev/null."""
    for stream in (sys.stdout, sys.stderr):
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, io.UnsupportedOperation):
            pass  # not a file (a test's capture): nothing left to flush
    return _PIPE_CLOSED
