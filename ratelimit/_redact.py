"""Keeping secrets out of what is printed: URLs shown with ``***`` for their secrets.

A Redis or target URL may carry credentials: the user info before ``@``
(``redis://:password@host``, ``http://user:password@host``, a token alone as in
``https://token@host``) or a query parameter (``?password=...``, ``?token=...``).
:func:`redact_url` is the one way a URL is shown to a user; :func:`url_secrets` lists
the secrets a URL holds, and :func:`scrub` takes them out of any other text, such as
an error message that quotes the URL it failed on.

A URL is read as clients read it (RFC 3986, as ``urllib.parse.urlsplit`` does): the
authority ends at the first ``/``, ``?`` or ``#`` after ``//``, and the user info at
its last ``@``. Text without ``//`` is read the same way from its start, so that a
mistyped URL (``user:pw@host``) is hidden too; text with no ``@`` and no query is
shown as it is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import unquote, unquote_plus

__all__ = ["REDACTED", "redact_url", "scrub", "url_secrets"]

#: What a secret is shown as.
REDACTED = "***"

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
#: Query parameters whose value is a secret, by lower-cased name; and any name ending
#: in one of the suffixes (``redis_password``, ``client_secret``, ``x-api-key``).
_SECRET_PARAMETERS = frozenset(
    {"password", "passwd", "pass", "pwd", "secret", "token", "auth", "key", "apikey", "sig", "signature"}
)
_SECRET_SUFFIXES = ("password", "passwd", "secret", "token", "_key", "-key", "apikey")


def _is_secret_parameter(name: str) -> bool:
    name = unquote_plus(name).strip().lower()
    return name in _SECRET_PARAMETERS or name.endswith(_SECRET_SUFFIXES)


def _split(url: str) -> tuple[str, str, str, str, str]:
    """``(scheme and //, user info with its @, host and path, query, fragment)``.

    The parts join back into ``url`` exactly. Without ``//`` (``user:pw@host``,
    ``http:user:pw@host``, a mistyped URL a client would refuse) the authority is
    taken to start at the beginning: a secret is better hidden where none was meant.
    """
    scheme = _SCHEME.match(url)
    start = 0
    if url.startswith("//", scheme.end() if scheme else 0):
        start = (scheme.end() if scheme else 0) + 2
    end = len(url)
    for mark in "/?#":
        found = url.find(mark, start)
        if found != -1:
            end = min(end, found)
    userinfo, at, _ = url[start:end].rpartition("@")
    rest = url[start + len(userinfo) + len(at) :]  # "host:port/path?query#fragment"
    before_fragment, hash_mark, fragment = rest.partition("#")
    host_path, question, query = before_fragment.partition("?")
    return url[:start], userinfo + at, host_path, question + query, hash_mark + fragment


def redact_url(url: str) -> str:
    """``url`` with its credentials replaced by ``***``.

    ``redis://:pw@host:6379/0`` becomes ``redis://:***@host:6379/0``,
    ``http://user:pw@h/`` becomes ``http://user:***@h/``, a lone user info (often a
    token) ``https://***@h/``, and ``?password=pw`` ``?password=***``. Everything else
    is kept exactly.
    """
    head, userinfo, host_path, query, fragment = _split(url)
    if userinfo:
        user, colon, password = userinfo[:-1].partition(":")
        if colon:
            userinfo = f"{user}:{REDACTED if password else ''}@"
        elif user:
            userinfo = f"{REDACTED}@"
    if query:
        pairs = []
        for pair in query[1:].split("&"):
            name, equals, value = pair.partition("=")
            pairs.append(f"{name}={REDACTED}" if equals and value and _is_secret_parameter(name) else pair)
        query = "?" + "&".join(pairs)
    return head + userinfo + host_path + query + fragment


def url_secrets(url: str) -> tuple[str, ...]:
    """The secrets ``url`` holds, as written and as decoded: what :func:`scrub` removes."""
    _, userinfo, _, query, _ = _split(url)
    found: list[str] = []
    if userinfo:
        user, colon, password = userinfo[:-1].partition(":")
        found.append(password if colon else user)
    for pair in query[1:].split("&") if query else ():
        name, equals, value = pair.partition("=")
        if equals and _is_secret_parameter(name):
            found.append(value)
    variants = {variant for secret in found for variant in (secret, unquote(secret), unquote_plus(secret))}
    # How a message quoting the secret with repr() shows it (backslashes, quotes).
    variants |= {repr(variant)[1:-1] for variant in variants}
    return tuple(sorted((v for v in variants if v), key=lambda v: (-len(v), v)))


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every one of ``secrets`` replaced by ``***``, the longest first."""
    for secret in sorted({s for s in secrets if s}, key=lambda s: (-len(s), s)):
        text = text.replace(secret, REDACTED)
    return text
