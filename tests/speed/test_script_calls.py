"""How a script call is sent, without a server: the usual call one command, the way of
calling remembered per client and forgotten when a client is marked, and the text of
the amounts sent again and again."""

from __future__ import annotations

import math
from typing import Any

from ratelimit._stores.redis.replies import cached_num, decision_of, num, wait_arg
from ratelimit._stores.redis.scripts import REVISION, by_function, call_by_script, library, single_script


class Client:
    """Answers every call at once and says which command it was."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def fcall(self, *args: Any) -> list[bytes]:
        self.sent.append("fcall")
        return [b"0", b"1.5", b""]

    def evalsha(self, *args: Any) -> list[bytes]:
        self.sent.append("evalsha")
        return [b"0", b"2.5", b""]

    def function_load(self, *args: Any, **kwargs: Any) -> None:
        self.sent.append("load")

    def function_list(self, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        self.sent.append("list")  # this release's revision is loaded
        described = {"name": "revision", "description": f"ratelimit protocol 1 revision {REVISION}"}
        return [{"library_name": library().name, "functions": [described]}]


def test_a_client_marked_after_its_first_calls_calls_by_script_from_the_next_on() -> None:
    script = single_script("token_bucket")
    first, second = Client(), Client()
    assert script(first, ["k"], ["reserve"]) == [b"0", b"1.5", b""]
    assert script(first, ["k"], ["reserve"]) == [b"0", b"1.5", b""]
    script(second, ["k"], ["reserve"])  # another client between: each is asked for itself
    call_by_script(first)
    script(first, ["k"], ["reserve"])
    script(second, ["k"], ["reserve"])
    # Each client's first call looks at the revision loaded (this one's: not loaded again).
    assert first.sent == ["list", "fcall", "fcall", "evalsha"]
    assert second.sent == ["list", "fcall", "fcall"]
    assert not by_function(first)
    assert by_function(second)


def test_the_cached_text_of_an_amount_is_its_own() -> None:
    for value in (1, 1.0, 2.5, 1e-9, 123456789.123, 2**53 + 1, math.nan, math.inf):
        assert cached_num(value) == num(value)
        assert cached_num(value) == num(value)  # cached by now
    # The zeros are equal and their texts are not: neither is kept for the other.
    assert (cached_num(0.0), cached_num(-0.0), cached_num(0)) == ("0.0", "-0.0", "0.0")
    assert (wait_arg(0.0), wait_arg(-0.0), wait_arg(math.inf), wait_arg(0.25)) == ("0.0", "-0.0", "", "0.25")


def test_a_reply_without_a_name_is_read_as_its_time() -> None:
    assert decision_of([b"0", b"1.5", b""]) == (0.0, 1.5)
    assert decision_of([b"-2", b"3.5"]) == (-2.0, 3.5)
    wait, at = decision_of([b"0", b"1.5", b"1"])
    assert (wait, at) == (0.0, 1.5)
    assert getattr(at, "exact", None) == (True,)
