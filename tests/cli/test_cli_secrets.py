"""The command line never prints a secret: not in errors, reports, JSON, progress or plots.

``ratelimit._redact`` is unit-tested on many URL shapes; then the CLI is run, in this
process and as ``python -m ratelimit``, with credentials in ``--redis`` and
``--target`` URLs (unreachable ones, a real target, the real Redis), and nothing it
writes may hold the password.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from ratelimit._redact import REDACTED, redact_url, scrub, url_secrets
from ratelimit.cli import main
from ratelimit.testing import FakeProvider

from conftest import REDIS_URL
from servers import free_port

SECRET = "s3cretPW"

# -- the redaction function -------------------------------------------------------------

SHAPES = {
    "no credentials": ("redis://cache.internal:6379/0", "redis://cache.internal:6379/0"),
    "password only": ("redis://:pw@host:6379/0", "redis://:***@host:6379/0"),
    "user and password": ("http://user:pw@h/", "http://user:***@h/"),
    "user only, often a token": ("https://tok3n@github.com/x", "https://***@github.com/x"),
    "empty password": ("rediss://user:@h:6380", "rediss://user:@h:6380"),
    "IPv6 host": ("redis://:pw@[::1]:6379/0", "redis://:***@[::1]:6379/0"),
    "IPv6 host, no credentials": ("redis://[2001:db8::1]:6379/0", "redis://[2001:db8::1]:6379/0"),
    "query password": ("redis://h:6379/0?password=pw&db=1", "redis://h:6379/0?password=***&db=1"),
    "query token and key": ("http://h/p?api_key=k&token=t&page=2", "http://h/p?api_key=***&token=***&page=2"),
    "query and user info": ("redis://u:pw@h/0?password=pw2", "redis://u:***@h/0?password=***"),
    "unix socket with a password": ("unix://:pw@/tmp/redis.sock?db=0", "unix://:***@/tmp/redis.sock?db=0"),
    "unix socket, query password": ("unix:///tmp/redis.sock?password=pw", "unix:///tmp/redis.sock?password=***"),
    "unix socket, no credentials": ("unix:///tmp/redis.sock?db=2", "unix:///tmp/redis.sock?db=2"),
    "an @ in the password": ("redis://:p@ss@h/0", "redis://:***@h/0"),
    "percent-encoded password": ("redis://:p%40ss@h/0", "redis://:***@h/0"),
    "an @ in the path or fragment": ("http://h/users/me@x.org#a@b", "http://h/users/me@x.org#a@b"),
    "upper-case scheme": ("HTTP://U:PW@H/", "HTTP://U:***@H/"),
    "no scheme": ("user:pw@host:6379", "user:***@host:6379"),
    "no //": ("http:user:pw@host/x", "http:***@host/x"),
    "garbage": ("not a url at all", "not a url at all"),
    "empty": ("", ""),
    "only a scheme": ("nonsense://x", "nonsense://x"),
}


@pytest.mark.parametrize(("url", "expected"), list(SHAPES.values()), ids=list(SHAPES))
def test_redact_url(url: str, expected: str) -> None:
    assert redact_url(url) == expected
    assert redact_url(expected) == expected  # redacting twice changes nothing
    assert set(url_secrets(redact_url(url))) <= {REDACTED}  # every secret it held is gone


@pytest.mark.parametrize(
    ("url", "secrets"),
    [
        ("redis://cache.internal:6379/0", set()),
        ("redis://:pw@h/", {"pw"}),
        ("http://user:pw@h/", {"pw"}),  # the user name is shown, so it is no secret
        ("https://tok3n@h/", {"tok3n"}),
        ("redis://:p%40ss@h/", {"p%40ss", "p@ss"}),  # as written and as a client decodes it
        ("redis://h/?password=a+b", {"a+b", "a b"}),
        ("redis://:back\\slash@h/", {"back\\slash", "back\\\\slash"}),  # and as repr() shows it
        ("not a url", set()),
    ],
)
def test_url_secrets(url: str, secrets: set[str]) -> None:
    assert set(url_secrets(url)) == secrets


def test_scrub_takes_every_secret_out_longest_first() -> None:
    text = "AUTH failed for p@ss (p%40ss) at redis://:p%40ss@h/"
    assert scrub(text, url_secrets("redis://:p%40ss@h/")) == "AUTH failed for *** (***) at redis://:***@h/"
    assert scrub("abcd abc", ["abc", "abcd"]) == "*** ***"
    assert scrub("nothing to hide", ["", "zzz"]) == "nothing to hide"


# -- the command line -------------------------------------------------------------------


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code  # type: ignore[assignment]
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _no_secret(*texts: str) -> None:
    for text in texts:
        assert SECRET not in text, text


@pytest.fixture
def port() -> int:
    return free_port()  # nothing listens there


def _unreachable_stores(port: int) -> Iterator[Any]:
    yield pytest.param(f"redis://:{SECRET}@127.0.0.1:{port}/0", f"redis://:***@127.0.0.1:{port}/0", id="password")
    yield pytest.param(f"redis://bob:{SECRET}@127.0.0.1:{port}/0", f"redis://bob:***@127.0.0.1:{port}/0", id="user")
    yield pytest.param(
        f"redis://127.0.0.1:{port}/0?password={SECRET}", f"redis://127.0.0.1:{port}/0?password=***", id="query"
    )
    yield pytest.param(f"unix://:{SECRET}@/nonexistent/redis.sock", "unix://:***@/nonexistent/redis.sock", id="unix")
    yield pytest.param(f"redis://:{SECRET}@[::1]:{port}/0", f"redis://:***@[::1]:{port}/0", id="ipv6")


STORE_PORT = free_port()


@pytest.mark.parametrize("json_output", [False, True], ids=["text", "json"])
@pytest.mark.parametrize(("url", "shown"), list(_unreachable_stores(STORE_PORT)))
def test_an_unreachable_redis_is_named_without_its_password(
    url: str, shown: str, json_output: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(capsys, "bench", "--redis", url, *(["--json"] if json_output else []))
    assert code == 1
    assert err.startswith(f"ratelimit bench: error: --redis {shown}: cannot connect: ")
    assert err.count("\n") == 1
    assert out == ""
    _no_secret(out, err)


@pytest.mark.parametrize("json_output", [False, True], ids=["text", "json"])
def test_an_unreachable_target_is_named_without_its_password(
    port: int, json_output: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"http://user:{SECRET}@127.0.0.1:{port}/"
    code, out, err = _run(capsys, "bench", "--target", url, *(["--json"] if json_output else []))
    assert code == 1
    assert (
        err
        == f"ratelimit bench: error: --target http://user:***@127.0.0.1:{port}/: cannot connect: Connection refused\n"
    )
    _no_secret(out, err)


def test_a_target_of_the_wrong_scheme_is_named_without_its_password(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "bench", "--target", f"ftp://user:{SECRET}@example.invalid/")
    assert code == 1
    assert "got 'ftp://user:***@example.invalid/'" in err
    _no_secret(out, err)


@pytest.mark.parametrize(
    "argv",
    [
        ["size", "--limit", "10/s", "--redis", f"redis://:{SECRET}@h/0"],  # size takes no --redis
        ["size", "--limit", "10/s", f"--target=http://u:{SECRET}@h/"],
        ["bench", f"redis://:{SECRET}@h/0"],  # the option forgotten
        ["bench", "--algorithm", f"http://{SECRET}@h/"],
    ],
)
def test_argument_errors_quote_no_secret(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, *argv)
    assert code == 2
    assert "error: " in err
    assert REDACTED in err  # the argument is quoted, its secret is not
    _no_secret(out, err)


@pytest.mark.slow
def test_a_store_lost_after_the_check_is_named_without_its_password(
    monkeypatch: pytest.MonkeyPatch, port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    # The CLI's own check passes; the worker then finds nothing there and says so.
    monkeypatch.setattr("ratelimit._cli.bench._probe_redis", lambda url, cluster: None)
    url = f"redis://:{SECRET}@127.0.0.1:{port}/0"
    code, out, err = _run(capsys, "bench", "--redis", url, "--processes", "1", "--threads", "1", "--seconds", "0.5")
    assert code == 1
    assert f" cannot reach the store at redis://:***@127.0.0.1:{port}/0: " in err
    _no_secret(out, err)


def test_an_error_text_quoting_the_url_is_scrubbed(
    monkeypatch: pytest.MonkeyPatch, port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    # A client library whose message quotes the URL it was given, password and all.
    def from_url(url: str, **options: Any) -> Any:
        raise redis.exceptions.ConnectionError(f"cannot use {url}: refused")

    monkeypatch.setattr("redis.Redis.from_url", from_url)
    url = f"redis://u:{SECRET}@127.0.0.1:{port}/0?password={SECRET}"
    code, _, err = _run(capsys, "bench", "--redis", url)
    assert code == 1
    assert err == (
        f"ratelimit bench: error: --redis redis://u:***@127.0.0.1:{port}/0?password=***: cannot connect: "
        f"cannot use redis://u:***@127.0.0.1:{port}/0?password=***: refused\n"
    )


# -- real runs: the report, the JSON, progress and the plot -----------------------------

ONE_CALLER = ["--processes", "1", "--threads", "1", "--calls", "3", "--seconds", "5"]


@pytest.fixture
def target() -> Iterator[str]:
    """A reachable target whose URL carries credentials (the fake provider ignores them)."""
    with FakeProvider(100, 1) as provider:
        yield provider.url.replace("http://", f"http://user:{SECRET}@", 1)


@pytest.mark.slow
def test_the_text_report_and_progress_show_the_target_without_its_password(
    target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(capsys, "bench", "--target", target, "--progress", *ONE_CALLER)
    assert code == 0, err
    assert f"  target         {redact_url(target)}" in out
    assert "user:***@127.0.0.1" in out
    _no_secret(out, err)


@pytest.mark.slow
def test_the_json_report_shows_the_target_without_its_password(target: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "bench", "--target", target, "--json", *ONE_CALLER)
    assert code == 0, err
    report = json.loads(out)
    assert report["target"] == report["config"]["target"] == redact_url(target)
    assert report["grants"] == 3
    _no_secret(out, err)


@pytest.mark.slow
def test_the_plot_shows_no_secret(
    target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.figure
    import matplotlib.text

    texts: list[str] = []
    savefig = matplotlib.figure.Figure.savefig

    def spy(figure: matplotlib.figure.Figure, *args: Any, **kwargs: Any) -> None:
        texts.extend(t.get_text() for t in figure.findobj(matplotlib.text.Text))
        savefig(figure, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", spy)
    path = tmp_path / "grants.png"
    code, out, err = _run(capsys, "bench", "--target", target, "--plot", str(path), *ONE_CALLER)
    assert code == 0, err
    assert path.read_bytes().startswith(b"\x89PNG")
    assert any("grants" in text for text in texts)  # the title was seen
    _no_secret(out, err, *texts)


def _with_password(url: str, userinfo: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{userinfo}@{rest.rpartition('@')[2]}"


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.parametrize("json_output", [False, True], ids=["text", "json"])
def test_the_real_redis_with_a_password_is_never_shown_with_it(
    redis_client: redis.Redis, json_output: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    # A server without a password takes any (AUTH succeeds for the default user): the
    # run goes ahead and reports. One with a password refuses it: the error is shown.
    url = _with_password(REDIS_URL, f":{SECRET}")
    code, out, err = _run(capsys, "bench", "--redis", url, *ONE_CALLER, *(["--json"] if json_output else []))
    _no_secret(out, err)
    if code == 1:
        assert err.startswith(f"ratelimit bench: error: --redis {redact_url(url)}: cannot connect: ")
        return
    assert code == 0, err
    if json_output:
        report = json.loads(out)
        assert report["backend"] == f"Redis at {redact_url(url)}"
        assert report["config"]["redis"] == redact_url(url)
    else:
        assert f"store          Redis at {redact_url(url)}" in out


@pytest.mark.redis
def test_the_real_redis_refusing_a_user_says_so_without_the_password(
    redis_client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    url = _with_password(REDIS_URL, f"nobody:{SECRET}")
    code, out, err = _run(capsys, "bench", "--redis", url, *ONE_CALLER)
    assert code == 1
    assert err.startswith(f"ratelimit bench: error: --redis {redact_url(url)}: cannot connect: ")
    _no_secret(out, err)


# -- as a command -----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("json_output", [False, True], ids=["text", "json"])
@pytest.mark.parametrize("option", ["--redis", "--target"])
def test_python_m_ratelimit_prints_no_secret(option: str, json_output: bool) -> None:
    port = free_port()
    scheme = "redis" if option == "--redis" else "http"
    url = f"{scheme}://user:{SECRET}@127.0.0.1:{port}/"
    result = subprocess.run(
        [sys.executable, "-m", "ratelimit", "bench", option, url, *(["--json"] if json_output else [])],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.startswith(f"ratelimit bench: error: {option} {scheme}://user:***@127.0.0.1:{port}/: ")
    _no_secret(result.stdout, result.stderr)
