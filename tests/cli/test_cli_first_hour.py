"""What a newcomer to the ``ratelimit`` command trips on, each answered in one line:
``--version``; a negative value read as a value and refused as negative; ``set`` of a
name no limiter uses refused (``--force`` stores it); how a ``sqlite:`` URL writes a
relative and an absolute path, in every command's help and in the error of a path
that was meant from the root; ``inspect`` numbers with their units, and JSON that any
reader takes (no ``Infinity``)."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest
import redis

import ratelimit
from ratelimit import ConcurrencyLimit, RedisBackend, SlidingWindow, SQLiteBackend, TokenBucket
from ratelimit._cli.inspect_report import inspect_json
from ratelimit._cli.jsonable import finite
from ratelimit._cli.stores import SQLITE_URL_HELP, sqlite_path_hint
from ratelimit._stores.keys import code_key
from ratelimit._stores.records import Inspection
from ratelimit.cli import _parser, main

from conftest import REDIS_URL, unique_name

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Store:
    """A shared store under test and the URL the command names it by."""

    backend: RedisBackend | SQLiteBackend
    url: str


@pytest.fixture(params=["redis", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    backend: RedisBackend | SQLiteBackend
    if request.param == "redis":
        backend = RedisBackend.from_url(REDIS_URL)
        url = REDIS_URL
    else:
        backend = SQLiteBackend(tmp_path / "first-hour.db")
        url = f"sqlite:///{tmp_path / 'first-hour.db'}"
    yield Store(backend, url)
    backend.close()


def _one_line(err: str) -> str:
    assert err.count("\n") == 1, err
    return err.strip()


def _exit_code(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert isinstance(caught.value.code, int)
    return caught.value.code


# -- --version ---------------------------------------------------------------------------


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert _exit_code(["--version"]) == 0
    assert capsys.readouterr().out == f"ratelimit {ratelimit.__version__}\n"


def test_version_from_python_dash_m() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ratelimit", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, f"ratelimit {ratelimit.__version__}\n", "")


# -- negative values -----------------------------------------------------------------------


def _numeric_options() -> list[tuple[str, str]]:
    """(command, option) for every option of every command that takes a number, a
    rate, a share or a duration: the options whose value is checked by a type."""
    found = []
    for command, parser in _parser().commands.items():
        for action in parser._actions:
            typed = action.type is not None and getattr(action.type, "__name__", "") != "_limiter_key"
            if action.nargs is None and action.option_strings and typed:
                found.append((command, action.option_strings[0]))
    return found


NUMERIC = _numeric_options()


def test_every_numeric_option_is_found() -> None:
    # The list below is checked against the parser, so that a new option is tried too.
    assert {("size", "--limit"), ("bench", "--latency"), ("set", "--for"), ("top", "--interval")} <= set(NUMERIC)
    assert len(NUMERIC) >= 20


@pytest.mark.parametrize(("command", "option"), NUMERIC)
def test_a_negative_value_is_read_as_a_value_and_refused_as_negative(
    command: str, option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    value = "-5/s" if option in ("--limit", "--rate", "--demand", "--ceiling", "--floor", "--drop-to") else "-5"
    argv = [command, *(["x"] if command == "set" else []), option, value]
    if command == "size" and option != "--limit":
        argv += ["--limit", "10/s"]
    assert _exit_code(argv) == 2
    line = _one_line(capsys.readouterr().err)
    assert "expected one argument" not in line
    assert f"argument {option}: '{value}' is negative; expected " in line


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["size", "--limit", "-5/s"], "a rate > 0 like N/s"),
        (["size", "--limit", "10/s", "--headroom", "-5%"], "a percentage (5%)"),
        (["size", "--limit", "10/s", "--guard", "-20ms"], "(0.02, 0.02s or 20ms)"),
        (["set", "x", "--rate", "2/s", "--for", "-30min"], "a duration > 0 (90, 90s, 30min, 1h, 2d)"),
        (["bench", "--latency", "-.5"], "seconds from 0 to 60"),
        (["size", "--limit=-5/s"], "a rate > 0 like N/s"),
    ],
)
def test_a_negative_value_says_how_to_write_one(argv: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _exit_code(argv) == 2
    line = _one_line(capsys.readouterr().err)
    assert "is negative" in line
    assert said in line


def test_a_negative_value_after_a_shortened_option(capsys: pytest.CaptureFixture[str]) -> None:
    # argparse takes --lim for --limit: so is its negative value taken.
    assert _exit_code(["size", "--lim", "-5/s"]) == 2
    assert "argument --limit: '-5/s' is negative" in _one_line(capsys.readouterr().err)
    # A shortening that names two options stays argparse's to refuse.
    assert _exit_code(["size", "--limit", "5/s", "--wo", "-3"]) == 2
    assert "ambiguous option: --wo" in _one_line(capsys.readouterr().err)


def test_a_negative_key_is_a_key(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    name = unique_name("first-hour-key")
    assert TokenBucket(5, 1, backend=store.backend, name=name).for_key("-5").try_acquire()
    assert main(["inspect", name, "--key", "-5", "--store", store.url]) == 0
    assert capsys.readouterr().out.startswith(f"{name} key -5  (token_bucket)")


def test_a_value_after_a_flag_is_left_alone(capsys: pytest.CaptureFixture[str]) -> None:
    # --json takes no value: the word after it is the next argument, as before joining.
    assert main(["size", "--json", "--limit", "10/s"]) == 0
    assert json.loads(capsys.readouterr().out)


# -- set on a name nothing uses --------------------------------------------------------------


def test_set_refuses_a_name_the_store_holds_nothing_of(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    name = unique_name("first-hour-typo")
    assert main(["set", name, "--rate", "2/s", "--store", store.url]) == 1
    captured = capsys.readouterr()
    line = _one_line(captured.err)
    assert line.startswith(f"ratelimit set: error: no limiter named '{name}' in this store")
    assert line.endswith("give --force")
    assert captured.out == ""
    assert store.backend.limit_override(name) is None
    assert not store.backend.holds(name)


def test_set_names_the_nearest_names_the_store_holds(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    name = unique_name("first-hour") + "-geocoder"
    assert TokenBucket(5, 1, backend=store.backend, name=name).try_acquire()
    typo = name.replace("geocoder", "geocodr")
    assert main(["set", typo, "--rate", "2/s", "--store", store.url]) == 1
    line = _one_line(capsys.readouterr().err)
    assert f"nearest names here: '{name}'" in line
    assert store.backend.limit_override(typo) is None


def test_set_force_stores_the_change(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    name = unique_name("first-hour-forced")
    assert main(["set", name, "--rate", "2/s", "--store", store.url, "--force"]) == 0
    assert capsys.readouterr().out.startswith(f"{name}: rate 2/s; until reset")
    change = store.backend.limit_override(name)
    assert change is not None
    assert change.rate == 2
    # The change is a record of the name: without --force, the next change is taken.
    assert main(["set", name, "--burst", "4", "--store", store.url]) == 0
    assert capsys.readouterr().out.startswith(f"{name}: burst 4 tokens; until reset")


def test_set_of_a_used_name_needs_no_force(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    name = unique_name("first-hour-used")
    assert TokenBucket(5, 1, backend=store.backend, name=name).try_acquire()
    assert main(["set", name, "--rate", "2/s", "--store", store.url]) == 0
    assert capsys.readouterr().err == ""


def test_reset_of_an_unused_name_is_not_refused(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    name = unique_name("first-hour-reset")
    assert main(["set", name, "--reset", "--store", store.url]) == 0
    assert "no change was in force" in capsys.readouterr().out


def test_a_bad_value_is_told_before_an_unused_name(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    name = unique_name("first-hour-value")
    assert _exit_code(["set", name, "--burst", "1e13", "--store", store.url]) == 2
    assert "burst must be between" in _one_line(capsys.readouterr().err)


def test_holds_sees_state_a_change_and_slots_but_not_a_keys_budget(store: Store) -> None:
    backend = store.backend
    used, changed, slotted, keyed = (unique_name(f"first-hour-holds-{each}") for each in "ucsk")
    assert not any(backend.holds(name) for name in (used, changed, slotted, keyed))
    assert SlidingWindow(5, 1, backend=backend, name=used).try_acquire()
    backend.set_limit(changed, rate=2)
    limit = ConcurrencyLimit(2, backend=backend, name=slotted)
    assert TokenBucket(5, 1, backend=backend, name=keyed).for_key("tenant-1").try_acquire()
    with limit.hold():
        assert backend.holds(used)
        assert backend.holds(changed)
        assert backend.holds(slotted)
    # A keyed budget is its key's: a change to the name would not reach it.
    assert not backend.holds(keyed)


def test_holds_sees_a_redis_state_whose_code_record_is_gone(redis_client: redis.Redis) -> None:
    # What the code says is kept a day; a slow bucket's state may outlive it.
    name = unique_name("first-hour-codeless")
    backend = RedisBackend(redis_client, coalesce=False)
    assert TokenBucket(5, 1, backend=backend, name=name).try_acquire()
    assert redis_client.delete(code_key(name)) == 1
    assert not backend.inspect(name).known
    assert backend.holds(name)
    backend.close()


# -- sqlite: paths --------------------------------------------------------------------------


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


@pytest.mark.parametrize("command", ["inspect", "set", "top", "bench"])
def test_every_store_command_says_how_sqlite_paths_are_written(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _exit_code([command, "--help"]) == 0
    shown = _flat(capsys.readouterr().out)
    assert _flat(SQLITE_URL_HELP) in shown
    assert "sqlite:///rel/x.db" in shown
    assert "sqlite:////srv/app/x.db" in shown


def test_the_sqlite_help_is_written_once() -> None:
    # One text, used wherever a store's URL is taken: no copy to drift.
    sources = [path.read_text() for path in (ROOT / "ratelimit").rglob("*.py")]
    assert sum(source.count("sqlite:////srv/app/x.db") for source in sources) == 1


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("redis://:pw-never-shown@host:notaport/0", "the port 'notaport' must be a number from 1 to 65535"),
        ("redis://127.0.0.1:1/0?foo=bar", "the query names 'foo', which is not a connection option"),
        ("redis://127.0.0.1:1/0?socket_timeout=-1", "socket_timeout='-1' must be seconds > 0"),
    ],
)
@pytest.mark.parametrize("command", [["inspect"], ["set", "x", "--rate", "1/s"], ["top", "--iterations", "1"]])
def test_a_malformed_redis_url_is_one_line_before_any_connection(
    command: list[str], url: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # redis-py alone: its own words without the URL, or a TypeError's traceback at the first call.
    assert _exit_code([*command, "--store", url]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert said in err
    assert "pw-never-shown" not in err


def test_bench_says_the_same_of_a_malformed_redis_url(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", "--seconds", "1", "--redis", "redis://127.0.0.1:1/0?foo=bar"])
    assert code != 0
    assert "the query names 'foo', which is not a connection option" in _one_line(capsys.readouterr().err)


def test_set_help_says_rate_is_the_limiter_s_own(capsys: pytest.CaptureFixture[str]) -> None:
    # A provider's new limit written as --rate keeps the old burst and the full rate: over the limit.
    assert _exit_code(["set", "--help"]) == 0
    shown = _flat(capsys.readouterr().out)
    assert "the limiter's own new rate" in shown
    assert "not a provider's limit" in shown
    assert "`ratelimit size --limit`" in shown


@pytest.fixture
def meant_from_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    """A ``sqlite:///`` URL whose path exists from the root but not from the current folder."""
    folder = tmp_path / "app"
    folder.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    path = folder / "x.db"
    return "sqlite:///" + str(path).lstrip("/"), path


@pytest.mark.parametrize(
    "argv", [["inspect"], ["top", "--iterations", "1"], ["set", "x", "--rate", "2/s"], ["bench", "--seconds", "1"]]
)
def test_a_relative_path_meant_from_the_root_says_so(
    argv: list[str], meant_from_root: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    url, path = meant_from_root
    assert main([*argv, "--store", url]) == 1
    line = _one_line(capsys.readouterr().err)
    assert "is relative to the current folder" in line
    assert f"for {path} write sqlite:///{path}, with four slashes" in line
    assert not path.exists()


def test_no_hint_when_the_path_is_missing_from_the_root_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert sqlite_path_hint("sqlite:///no-such-folder-here/x.db") is None
    assert sqlite_path_hint(f"sqlite:///{tmp_path}/x.db") is None  # absolute: nothing to say
    assert sqlite_path_hint("sqlite:///x.db") is None  # no folder
    assert sqlite_path_hint("redis://127.0.0.1:6379/0") is None


# -- inspect: units and JSON --------------------------------------------------------------------


def test_inspect_gives_each_number_its_unit(redis_client: redis.Redis, capsys: pytest.CaptureFixture[str]) -> None:
    bucket, window, endless = (unique_name(f"first-hour-units-{each}") for each in "bwe")
    backend = RedisBackend(redis_client, coalesce=False)
    assert TokenBucket(5, 1, backend=backend, name=bucket).try_acquire()
    assert SlidingWindow(5, 2, backend=backend, name=window).try_acquire()
    assert TokenBucket(5, math.inf, backend=backend, name=endless).try_acquire()
    backend.set_limit(bucket, rate=2, burst=4)
    backend.close()
    assert main(["inspect", bucket, window, endless, "--redis", REDIS_URL]) == 0
    text = capsys.readouterr().out
    assert "  code         capacity 5 tokens, refill_per_sec 1/s\n" in text
    assert "  changed      rate 2/s, burst 4 tokens; until reset\n" in text
    assert "  in force     capacity 4 tokens, refill_per_sec 2/s\n" in text
    assert "  code         limit 5 tokens, window 2.05 s (guard 0.05 s kept back)\n" in text
    assert "  code         capacity 5 tokens, refill_per_sec unlimited\n" in text
    assert "never/s" not in text


def _refuse(constant: str) -> NoReturn:
    raise ValueError(f"not JSON: {constant}")


def test_inspect_json_has_no_infinity(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    name = unique_name("first-hour-endless")
    assert TokenBucket(5, math.inf, backend=store.backend, name=name).try_acquire()
    assert main(["inspect", name, "--store", store.url, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out, parse_constant=_refuse, strict=True)
    (limiter,) = shown["limiters"]
    if limiter["code"] is not None:  # Redis keeps what the code says; a SQLite file does not
        assert limiter["code"]["refill_per_sec"] == "inf"
        assert limiter["effective"]["refill_per_sec"] == "inf"


def test_inspect_json_writes_every_number_json_has_no_word_for() -> None:
    seen = Inspection(
        "n",
        kind="token_bucket",
        code={"capacity": 5.0, "refill_per_sec": math.inf},
        effective={"capacity": 5.0, "refill_per_sec": math.inf},
        available=-math.inf,
        wait_for_one=math.nan,
    )
    text = json.dumps(inspect_json([seen]), allow_nan=False)
    (limiter,) = json.loads(text, parse_constant=_refuse)["limiters"]
    assert limiter["code"] == {"capacity": 5.0, "refill_per_sec": "inf"}
    assert (limiter["available"], limiter["wait_for_one"]) == ("-inf", None)


def test_top_json_is_strict_json(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    name = unique_name("first-hour-top")
    assert TokenBucket(5, 1, backend=store.backend, name=name).try_acquire()
    assert main(["top", "--store", store.url, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out, parse_constant=_refuse, strict=True)
    assert isinstance(shown["limiters"], list)


def test_finite_reaches_every_depth() -> None:
    value = {"a": [1.0, math.inf, (-math.inf, {"b": math.nan})], "c": "inf", "d": 2}
    assert finite(value) == {"a": [1.0, "inf", ["-inf", {"b": None}]], "c": "inf", "d": 2}
