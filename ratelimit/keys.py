"""Key functions for the middlewares: which budget an incoming request takes from.

A key function takes the framework-free :class:`Request` (``method``, ``path``,
``headers`` by case-insensitive name, ``client`` the peer's address) and returns the
key, a ``str``, or ``None`` to leave the request unlimited. The middlewares'
``key``, ``cost`` and ``exempt`` all get the same view, so your own functions are
plain Python::

    def per_tenant(request: Request) -> str | None:
        return request.headers.get("x-tenant")

Keys come from clients, so the middlewares bound them: a key longer than 100
characters, or holding control characters, is replaced by a digest of itself, and
:attr:`~ratelimit.TokenBucket.key_views` bounds the views kept in memory.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable
from typing import TypeAlias

from ._integrations.serving import Headers, Request
from ._validate import shown

__all__ = ["Headers", "Request", "client_ip", "header"]

Network: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network
Address: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address

#: How much of a forwarding header is read, from its right end: the addresses a
#: trusted chain appended are there, and a client's own text before them is skipped.
_TAIL = 2048
#: Hops read from the right before giving up on finding an untrusted one.
_HOPS = 32


def _networks(trusted_proxies: Iterable[str]) -> tuple[Network, ...]:
    if isinstance(trusted_proxies, str):
        raise TypeError(f"trusted_proxies must be a list of addresses or networks, got {shown(trusted_proxies)}")
    networks = []
    for entry in trusted_proxies:
        try:
            networks.append(ipaddress.ip_network(str(entry).strip(), strict=False))
        except ValueError:
            raise ValueError(f"trusted_proxies must hold addresses or networks (CIDR), got {shown(entry)}") from None
    return tuple(networks)


def _address(text: str) -> Address | None:
    """An address as a forwarding header writes it (``[v6]:port``, ``v4:port``,
    quoted in ``Forwarded``), or ``None`` where it is none (``unknown``, a name)."""
    text = text.strip().strip('"')
    if text.startswith("["):
        text = text[1 : text.find("]")] if "]" in text else text[1:]
    elif text.count(":") == 1:
        text = text.split(":", 1)[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _hops(headers: Headers | object, name: str) -> list[str]:
    """The addresses of one forwarding header, right-most first (at most ``_HOPS``)."""
    get = getattr(headers, "get", None)
    value = get(name) if get is not None else None
    if not isinstance(value, str) or not value:
        return []
    entries = value[-_TAIL:].split(",")[::-1][:_HOPS]
    if name == "forwarded":
        hops = []
        for entry in entries:
            for pair in entry.split(";"):
                key, _, found = pair.partition("=")
                if key.strip().lower() == "for":
                    hops.append(found.strip())
        return hops
    return [entry.strip() for entry in entries]


#: The forwarding headers :func:`client_ip` can read, by the name it is given.
_FORWARDING = ("x-forwarded-for", "forwarded")


def client_ip(
    trusted_proxies: Iterable[str] = (), *, forwarded_header: str = "X-Forwarded-For"
) -> Callable[[Request], str | None]:
    """The key of the client's address.

    With no ``trusted_proxies``, the peer address the server saw (``request.client``),
    and never a header: anyone can send ``X-Forwarded-For``. When the peer is one of
    ``trusted_proxies`` (addresses or CIDR networks), the right-most address of
    ``forwarded_header`` that is not itself trusted: the one the last trusted proxy
    saw. Text a client put before it is never read as the key.

    ``forwarded_header`` is the one your proxies write, ``"X-Forwarded-For"`` or
    ``"Forwarded"`` (its ``for=`` addresses); the other is never read, since a client
    can send it through a proxy that does not touch it.

    A request with no peer (a Unix socket) and no trusted hop has no key: ``None``,
    not limited. Behind a proxy that connects over a Unix socket, trust it by keying
    on the header it sets (:func:`header`).

    Raises:
        ValueError: an entry of ``trusted_proxies`` is not an address or a network,
            or ``forwarded_header`` is not one of the two.
    """
    networks = _networks(trusted_proxies)
    forwarding = forwarded_header.lower() if isinstance(forwarded_header, str) else None
    if forwarding not in _FORWARDING:
        raise ValueError(f"forwarded_header must be 'X-Forwarded-For' or 'Forwarded', got {shown(forwarded_header)}")

    def trusted(address: Address | None) -> bool:
        return address is not None and any(address in network for network in networks)

    def key(request: Request) -> str | None:
        peer = request.client
        if not networks or peer is None or not trusted(_address(peer)):
            return peer
        hops = _hops(request.headers, forwarding)
        last = peer
        for hop in hops:
            address = _address(hop)
            if not trusted(address):
                return str(address) if address is not None else (hop or peer)
            last = str(address)
        # Every hop is a trusted proxy: the left-most one read is as near the client
        # as the chain goes.
        return last

    key.__name__ = key.__qualname__ = "client_ip()" if not networks else f"client_ip({len(networks)} trusted)"
    return key


def header(name: str) -> Callable[[Request], str | None]:
    """The key of one header's value (an API key, a tenant): ``None`` when absent, so
    a request without it is not limited (pair it with ``exempt`` or a second
    middleware keyed by :func:`client_ip` to limit those too).

    Raises:
        ValueError: ``name`` is not a header name.
    """
    if not isinstance(name, str) or not name or not name.isascii() or not name.isprintable() or " " in name:
        raise ValueError(f"name must be a header name, got {shown(name)}")
    lowered = name.lower()

    def key(request: Request) -> str | None:
        return request.headers.get(lowered)

    key.__name__ = key.__qualname__ = f"header({lowered!r})"
    return key
