"""``ratelimit.keys``: which address a request is keyed by, and what a client cannot spoof."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ratelimit.keys import Headers, Request, client_ip, header


def request(client: str | None, *pairs: tuple[str, str]) -> Request:
    return Request("GET", "/", Headers(pairs), client)


def test_without_trusted_proxies_the_peer_is_the_key_whatever_the_headers_say() -> None:
    """A client-sent ``X-Forwarded-For`` or ``Forwarded`` is never read."""
    key = client_ip()
    assert key(request("203.0.113.9", ("X-Forwarded-For", "1.2.3.4"), ("Forwarded", "for=5.6.7.8"))) == "203.0.113.9"
    assert key(request(None)) is None


def test_behind_a_trusted_proxy_the_right_most_untrusted_address_is_the_key() -> None:
    """What the client wrote before the proxies' own entries is skipped."""
    key = client_ip(trusted_proxies=["10.0.0.0/8", "192.168.1.1"])
    chain = ("X-Forwarded-For", "6.6.6.6, 198.51.100.7, 10.1.2.3")
    assert key(request("192.168.1.1", chain)) == "198.51.100.7"
    assert key(request("10.9.9.9", ("x-forwarded-for", "198.51.100.7"))) == "198.51.100.7"


def test_an_untrusted_peer_is_the_key_even_with_a_forwarding_header() -> None:
    """Only a trusted peer's headers are read."""
    key = client_ip(trusted_proxies=["10.0.0.0/8"])
    assert key(request("198.51.100.7", ("X-Forwarded-For", "1.2.3.4"))) == "198.51.100.7"


def test_forwarded_is_read_when_the_proxies_write_it() -> None:
    """``Forwarded: for=`` with quotes, brackets and ports, right-most first."""
    key = client_ip(trusted_proxies=["10.0.0.1"], forwarded_header="Forwarded")
    value = 'for=1.2.3.4, for="[2001:db8::7]:4711";proto=https, for=10.0.0.1'
    assert key(request("10.0.0.1", ("Forwarded", value))) == "2001:db8::7"
    assert key(request("10.0.0.1", ("Forwarded", "for=198.51.100.7:8080"))) == "198.51.100.7"


def test_only_the_named_forwarding_header_is_read() -> None:
    """Through a proxy that writes one header, a client's copy of the other passes
    untouched: reading it would let the client pick its key."""
    by_forwarded = client_ip(trusted_proxies=["10.0.0.1"], forwarded_header="forwarded")
    spoofed = request("10.0.0.1", ("X-Forwarded-For", "6.6.6.6"), ("Forwarded", "for=198.51.100.7"))
    assert by_forwarded(spoofed) == "198.51.100.7"
    by_default = client_ip(trusted_proxies=["10.0.0.1"])
    assert by_default(request("10.0.0.1", ("Forwarded", "for=6.6.6.6"))) == "10.0.0.1"


@pytest.mark.parametrize("name", ["X-Real-IP", "", None, 7])
def test_an_unknown_forwarding_header_is_refused_by_name(name: object) -> None:
    with pytest.raises(ValueError, match="forwarded_header must be"):
        client_ip(trusted_proxies=["10.0.0.1"], forwarded_header=name)  # type: ignore[arg-type]


def test_a_chain_of_only_trusted_hops_keys_by_the_farthest() -> None:
    """Every hop trusted: the left-most one read, the nearest the client the chain goes."""
    key = client_ip(trusted_proxies=["10.0.0.0/8"])
    assert key(request("10.0.0.1", ("X-Forwarded-For", "10.0.0.3, 10.0.0.2"))) == "10.0.0.3"
    assert key(request("10.0.0.1")) == "10.0.0.1"


def test_spoofed_addresses_on_the_left_do_not_change_the_key() -> None:
    """A client varying what it writes before the proxy's entry stays one key."""
    key = client_ip(trusted_proxies=["127.0.0.1"])
    keys = {key(request("127.0.0.1", ("X-Forwarded-For", f"10.0.{i}.1, 198.51.100.7"))) for i in range(50)}
    assert keys == {"198.51.100.7"}


def test_header_keys_by_a_headers_value_in_any_case() -> None:
    """``header(name)``: the value, ``None`` when absent."""
    key = header("X-API-Key")
    assert key(request("1.1.1.1", ("x-api-key", "abc"))) == "abc"
    assert key(request("1.1.1.1")) is None


@pytest.mark.parametrize("bad", ["10.0.0.0/33", "proxy.local", ""])
def test_trusted_proxies_must_be_addresses_or_networks(bad: str) -> None:
    with pytest.raises(ValueError, match="trusted_proxies"):
        client_ip(trusted_proxies=[bad])


def test_trusted_proxies_is_a_list_not_one_string() -> None:
    with pytest.raises(TypeError, match="trusted_proxies"):
        client_ip(trusted_proxies="10.0.0.1")


@pytest.mark.parametrize("bad", ["", "x key", "\x00"])
def test_a_header_name_is_checked(bad: str) -> None:
    with pytest.raises(ValueError, match="name"):
        header(bad)


@given(st.text(max_size=5000), st.text(max_size=300))
def test_any_forwarding_header_gives_a_key_or_the_peer_never_an_error(forwarded_for: str, forwarded: str) -> None:
    """Garbage in the headers of a trusted peer never raises, whichever is read."""
    for name in ("X-Forwarded-For", "Forwarded"):
        key = client_ip(trusted_proxies=["127.0.0.1"], forwarded_header=name)
        found = key(request("127.0.0.1", ("X-Forwarded-For", forwarded_for), ("Forwarded", forwarded)))
        assert found is None or isinstance(found, str)
