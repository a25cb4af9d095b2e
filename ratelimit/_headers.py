"""Reading a provider's rate-limit headers into one shape: :class:`RateLimitInfo`.

Providers say the same four things in a dozen dialects. Understood, by header name
(case-insensitive):

- ``X-RateLimit-Limit / -Remaining / -Reset`` and the variants ``X-Rate-Limit-*``
  (Okta, Twitter), ``X-RateLimit-Used`` and ``-Resource`` (GitHub), ``-Reset-After``
  (Discord), float values (Reddit). ``Reset`` may be epoch seconds, epoch milliseconds
  or a delay in seconds: a value above 10^12 is read as epoch milliseconds, above 10^9
  as epoch seconds (no provider announces a delay of 31 years), anything else as a
  delay. It may also be an ISO 8601 time with an offset or ``Z``, seconds optional
  (Jira Cloud: ``2024-01-10T12:00Z``); one without an offset is garbage. Jira's
  ``X-RateLimit-NearLimit`` and ``RateLimit-Reason`` say nothing countable and are
  not read.
- The IETF drafts: ``RateLimit-Limit / -Remaining / -Reset`` with
  ``RateLimit-Policy: 10;w=1``, and GitLab's use of those names: its
  ``RateLimit-Reset`` is a UNIX time (read as every numeric reset is, by the rule
  above), ``RateLimit-ResetTime`` the same moment as an HTTP-date, and
  ``RateLimit-Observed`` the requests counted (``Limit - Observed`` remain, when
  ``Remaining`` is missing); and the structured-field form
  ``RateLimit: "default";r=50;t=30`` with ``RateLimit-Policy: "default";q=100;w=60``,
  one item per policy. An item takes its limit and window from the policy of its
  name; an item naming no policy has neither (another policy's are not its own).
- OpenAI's ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}`` with durations
  such as ``6m0s`` or ``20ms`` (Groq's too); Anthropic's
  ``anthropic-ratelimit-{requests,tokens}-*`` with RFC 3339 resets. Both document
  their reset as the time the bucket is *full* again, refilled evenly since, so
  their readings are ``gradual``: the next request may go long before it.
  Shopify's ``X-Shopify-Shop-Api-Call-Limit: 32/40``.
- HubSpot's ``X-HubSpot-RateLimit-Max / -Remaining`` per
  ``-Interval-Milliseconds`` (``window`` in seconds), ``-Secondly / -Secondly-Remaining``
  (a one-second window) and ``-Daily / -Daily-Remaining``. HubSpot sends no reset, so
  ``reset_after`` stays ``None``. The day is reported only once it is spent
  (``-Daily-Remaining: 0``, ``window`` 86400): it then binds, reset unknown (midnight
  in the account's time zone); until then the interval is what paces a client.
- Salesforce's ``Sforce-Limit-Info: api-usage=18/5000`` (used of the limit over a
  rolling 24 hours: ``window`` 86400, no reset) and a connected app's
  ``per-app-api-usage=17/250(appName=...)``, the binding one; items separated by
  ``;`` or ``,``, in any case and spacing.
- Zendesk's account budget, a bare ``X-Rate-Limit: 700`` per minute (``window`` 60)
  with ``X-Rate-Limit-Remaining`` and ``ratelimit-reset``, and an endpoint's own
  ``Zendesk-RateLimit-<endpoint>: total=100; remaining=99; resets=41`` (no window: its
  interval is not in the header), the binding one of them all.
- ``Retry-After`` as delay-seconds or an HTTP-date (IMF-fixdate, RFC 850, asctime).

Every numeric reset (``X-RateLimit-Reset``, ``RateLimit-Reset``, a ``RateLimit``
item's ``t``, Zendesk's ``resets``) may be epoch seconds, epoch milliseconds or a
delay in seconds, by the rule given for ``X-RateLimit-Reset``; Discord's
``-Reset-After`` and ``Retry-After`` are delays by definition.

Garbage never raises: a malformed field comes back as ``None``, a wait is never
negative and never longer than ``cap`` seconds (an hour unless told otherwise). Where
a header is repeated, the most conservative value wins (the lowest limit and
remaining, the latest reset).

One response may report several budgets: the items of a ``RateLimit`` list, HubSpot's
interval and second, Salesforce's org and app, Zendesk's account and endpoints, or
one budget in two dialects. Each reading that has a remaining and a time (a reset, or
a window) is a budget, and the result is the *binding* one, whole: its limit,
remaining, reset and window together, never a field of one budget beside a field of
another. Binding means it runs out first:

1. a spent budget (remaining 0, its reset not due now) binds, since nothing may go
   until it refills; of several, the one with the latest reset;
2. otherwise the lowest pace binds: ``remaining / seconds``, the most one may send per
   second and still have that budget last until it refills, with ``seconds`` the
   reset, or the window when no reset is given (a window's budget refills within one
   window, so the pace is never overstated). A tie goes to the longer time;
3. a budget refilling now (a reset of 0) binds only when no other does.

So ``"default";r=50;t=30, "daily";r=1000;t=3600`` reads as the daily policy: 1,000
over an hour is 0.28 a second against the default's 1.7, and at the default's pace
the day's budget would be gone in ten minutes. A reading with no remaining or no time
cannot be paced against the others; it is merged into the binding budget field by
field, most conservatively (a lower remaining still caps what may go), and a limit
always keeps its own window.

Headers come from servers, so from anyone: every parse here runs in linear time and
looks at a bounded amount of text, whatever it is sent. Only the first 1,024 header
pairs are looked at, 16 repeats of one name, 16 comma-separated pieces of one value
(or items of a structured-field list) and 16 parameters of one item; a value longer
than 1,024 characters is dropped whole, before it is stripped or split. Each kind of
field then has a cap of its own, checked before any regular expression or scanner
sees it: 32 characters for a number or a duration, 40 for an HTTP-date or an RFC 3339
time. Anything over a cap is garbage: ``None``, as any other malformed value.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from ._header_values import Item, duration, http_date, number, parameters, pieces, rfc3339

__all__ = ["DEFAULT_CAP", "RateLimitInfo", "parse_rate_limit_headers"]

#: The longest wait a header may impose, in seconds, unless the caller says otherwise.
DEFAULT_CAP = 3600.0

_EPOCH_SECONDS = 1e9
_EPOCH_MILLISECONDS = 1e12

# -- bounds on what a server can make us read (STYLE.md, practice 13) -------------------
# Each figure is well above the longest value that can mean something, and small enough
# that a hostile response costs microseconds: everything past it is never looked at.

#: Header pairs looked at. http.client refuses a response with more than 100 headers and
#: h11 one whose header block passes 16 KiB: a response with more is not a real one.
_MAX_HEADERS = 1024
#: A longer header name is none of ours: the longest we read by name,
#: ``x-hubspot-ratelimit-interval-milliseconds``, has 41 characters, and Zendesk's
#: longest documented endpoint, ``zendesk-ratelimit-tickets-index-deep-pagination``, 47.
_MAX_NAME = 64
#: Values kept for one header name: a provider repeats one at most a few times.
_MAX_REPEATS = 16
#: A longer value is dropped whole, before it is stripped or split. The longest that
#: can mean something is a structured-field list of a few policies
#: (``"default";q=100;w=60;pk=:...:``), each under a hundred characters.
_MAX_VALUE = 1024


@dataclass(frozen=True, slots=True)
class RateLimitInfo:
    """What a response said about the rate limit; ``None`` where it said nothing usable.

    Attributes:
        limit: requests (or tokens) allowed per window.
        remaining: how many are left in the current window.
        reset_after: seconds until the window resets (the budget is full again).
        retry_after: seconds the provider asked us to wait (``Retry-After``).
        window: the policy's window in seconds, when a header names it.
        tokens: for APIs that also limit tokens (OpenAI, Anthropic), the same fields
            for the token budget; the main fields then describe requests.
        gradual: the budget comes back evenly over ``reset_after`` (a token bucket, as
            OpenAI and Anthropic document theirs), rather than whole at the reset: the
            reset is when it is *full* again, and with ``limit`` known one more comes
            back every ``reset_after / (limit - remaining)`` seconds. Only set when the
            reset was not cut to the cap (a cut reset says nothing of the pace).
    """

    limit: float | None = None
    remaining: float | None = None
    reset_after: float | None = None
    retry_after: float | None = None
    window: float | None = None
    tokens: RateLimitInfo | None = None
    gradual: bool = False


def parse_rate_limit_headers(headers: Any, now: float | None = None, *, cap: float = DEFAULT_CAP) -> RateLimitInfo:
    """Read the rate-limit headers of a response.

    Args:
        headers: a mapping (``dict``, ``httpx.Headers``, ``requests``' headers, an
            ``email.message.Message``) or an iterable of ``(name, value)`` pairs.
        now: the current time as epoch seconds, for absolute resets and HTTP-dates
            (default: ``time.time()``).
        cap: the longest wait, in seconds, any header may impose; longer values are
            cut to it.

    Returns:
        The :class:`RateLimitInfo`; every field the headers do not give, or give in a
        form that cannot be trusted, is ``None``.
    """
    if not (isinstance(cap, (int, float)) and cap > 0):
        raise ValueError(f"cap must be a number > 0, got {cap!r}")
    clock = time.time() if now is None else float(now)
    fields = _collect(headers)
    reader = _Reader(fields, clock, float(cap))
    return reader.read()


def _collect(headers: Any) -> dict[str, list[str]]:
    """Lower-cased names to every value given, whatever container they came in."""
    pairs: Iterable[Any]
    if hasattr(headers, "multi_items"):  # httpx keeps repeated headers apart there
        pairs = headers.multi_items()
    elif hasattr(headers, "items"):
        pairs = headers.items()
    elif headers is None:
        pairs = ()
    else:
        pairs = headers
    fields: dict[str, list[str]] = {}
    try:
        for pair in itertools.islice(pairs, _MAX_HEADERS):
            try:
                name, value = pair
            except (TypeError, ValueError):
                continue
            # Lengths first: nothing longer than a cap is decoded, stripped or lowered.
            if not isinstance(name, (str, bytes)) or len(name) > _MAX_NAME:
                continue
            if isinstance(name, bytes):
                name = name.decode("latin-1")
            text = _text(value)
            if text is None:
                continue
            values = fields.setdefault(name.strip().lower(), [])
            if len(values) < _MAX_REPEATS:
                values.append(text)
    except TypeError:
        return {}
    return fields


def _text(value: Any) -> str | None:
    """A header's value as stripped text, or ``None`` if it is too long or no text."""
    if isinstance(value, (str, bytes)):
        if len(value) > _MAX_VALUE:
            return None
        return (value.decode("latin-1") if isinstance(value, bytes) else value).strip()
    if isinstance(value, int) and not isinstance(value, bool):
        # An int past 128 bits (39 digits) is longer than any number read here, and
        # printing a huge one takes quadratic time (and raises past 4,300 digits).
        return str(value) if value.bit_length() <= 128 else None
    if isinstance(value, float):
        return str(value)
    return None


class _Reader:
    """One parse: the fields, the time, the cap, and the rules for each dialect."""

    def __init__(self, fields: dict[str, list[str]], now: float, cap: float) -> None:
        self.fields = fields
        self.now = now
        self.cap = cap

    # -- values -------------------------------------------------------------------

    def values(self, *names: str) -> list[str]:
        found: list[str] = []
        for name in names:
            for value in self.fields.get(name, []):
                # A repeated header may arrive folded into one, comma-separated.
                found.extend(piece for piece in pieces(value, ",") if piece.strip())
        return found

    def least(self, *names: str) -> float | None:
        numbers = [n for n in map(number, self.values(*names)) if n is not None]
        return min(numbers) if numbers else None

    def wait(self, seconds: float | None) -> float | None:
        """A delay made safe: ``None`` if absent or past, at most ``cap``."""
        if seconds is None or not math.isfinite(seconds) or seconds < 0:
            return None
        return min(seconds, self.cap)

    def numeric_reset(self, value: float | None) -> float | None:
        """A numeric reset (see ``_from_now``) as a safe wait."""
        return None if value is None else self.wait(_from_now(value, self.now))

    def reset(self, *names: str) -> float | None:
        """The latest of the resets named: a number (see ``_from_now``), an ISO 8601
        time with its offset (Jira Cloud's ``2024-01-10T12:00Z``) or an HTTP-date
        (GitLab's ``RateLimit-ResetTime``). One already past is no reset."""
        delays = []
        for name in names:
            for text in self.fields.get(name, []):
                # An HTTP-date holds a comma itself: the whole value first, then its
                # pieces (a repeated header folded into one).
                moment = http_date(text, self.now)
                if moment is not None:
                    delays.append(moment - self.now)
                    continue
                for piece in pieces(text, ","):
                    value = number(piece)
                    if value is not None:
                        delays.append(_from_now(value, self.now))
                    elif (moment := rfc3339(piece)) is not None:
                        delays.append(moment - self.now)
        return self.wait(max(delays)) if delays else None

    # -- dialects -----------------------------------------------------------------

    def read(self) -> RateLimitInfo:
        primary = _binding(
            [
                self.x_ratelimit(),
                self.ietf(),
                self.openai("requests"),
                self.anthropic("requests"),
                self.shopify(),
                self.hubspot(),
                self.salesforce(),
                self.zendesk(),
            ]
        )
        tokens = _binding([self.openai("tokens"), self.anthropic("tokens")])
        return replace(primary, retry_after=self.retry_after(), tokens=tokens if tokens != RateLimitInfo() else None)

    def retry_after(self) -> float | None:
        waits = []
        for text in self.fields.get("retry-after", []):
            # An HTTP-date holds a comma itself, so try the whole value as one first;
            # otherwise it may be repeated values folded together ("10, 20").
            moment = http_date(text, self.now)
            if moment is not None:
                # A date already past means "now": no wait, but the header was valid.
                waits.append(max(0.0, moment - self.now))
                continue
            waits.extend(n for n in map(number, pieces(text, ",")) if n is not None)
        return self.wait(max(waits)) if waits else None

    def x_ratelimit(self) -> RateLimitInfo:
        def names(suffix: str) -> tuple[str, str]:
            return (f"x-ratelimit-{suffix}", f"x-rate-limit-{suffix}")

        limit = self.least(*names("limit"))
        remaining = self.least(*names("remaining"))
        used = self.least(*names("used"))
        if remaining is None and used is not None and limit is not None:
            remaining = max(0.0, limit - used)  # GitHub gives Used alongside
        reset = self.wait(self.least(*names("reset-after")))  # Discord: a precise delay
        if reset is None:
            reset = self.reset(*names("reset"))
        return RateLimitInfo(limit=limit, remaining=remaining, reset_after=reset)

    def ietf(self) -> RateLimitInfo:
        policies = [item for text in self.fields.get("ratelimit-policy", []) for item in parameters(text)]
        items = [item for text in self.fields.get("ratelimit", []) for item in parameters(text)]
        listed = self.ietf_list(items, policies)
        # A malformed RateLimit list is ignored, as the drafts ask: as if never sent.
        return _binding([self.ietf_fields(policies, announced=listed == RateLimitInfo()), listed])

    def ietf_fields(self, policies: list[Item], announced: bool) -> RateLimitInfo:
        """Drafts up to 6: ``RateLimit-Limit / -Remaining / -Reset`` and a policy list;
        GitLab's ``RateLimit-Observed`` and ``RateLimit-ResetTime`` beside them.

        The window is that of the policy whose quota is the announced limit; with no
        limit and no usable ``RateLimit`` list, the first policy is the one announced.
        The reset is a delay in the drafts and a UNIX time at GitLab: ``reset`` tells
        them apart.
        """
        limit = self.least("ratelimit-limit")
        remaining = self.least("ratelimit-remaining")
        observed = self.least("ratelimit-observed")
        if remaining is None and observed is not None and limit is not None:
            remaining = max(0.0, limit - observed)
        window = None
        for name, params in policies:
            quota = _quota(name, params)
            if quota is not None and (quota == limit or (limit is None and announced)):
                limit, window = quota, number(params.get("w", ""))
                break
        return RateLimitInfo(
            limit=limit,
            remaining=remaining,
            reset_after=self.reset("ratelimit-reset", "ratelimit-resettime"),
            window=window,
        )

    def ietf_list(self, items: list[Item], policies: list[Item]) -> RateLimitInfo:
        """The ``RateLimit`` list: one service limit per named policy; the binding one.

        Each item ``"name";r=..;t=..`` is read with the ``RateLimit-Policy`` item of the
        same name, for its quota (the limit) and window. An item naming no policy keeps
        its remaining and reset, with no limit and no window: another policy's are not
        its own. An item without ``r`` is malformed and ignored. The older dictionary
        form (``limit=100, remaining=50, reset=30``) is one reading, whose window is
        that of the policy with its limit for quota.
        """
        named: dict[str, tuple[float, float | None]] = {}
        for name, params in policies:
            quota = number(params.get("q", ""))
            if name is not None and quota is not None:
                named.setdefault(name, (quota, number(params.get("w", ""))))
        readings = []
        loose = RateLimitInfo()
        for name, params in items:
            remaining = number(params.get("r", params.get("remaining", "")))
            reset = self.numeric_reset(number(params.get("t", params.get("reset", ""))))
            if name is None:
                piece = RateLimitInfo(limit=number(params.get("limit", "")), remaining=remaining, reset_after=reset)
                loose = _merge(loose, piece)
            elif remaining is not None:
                limit, window = named.get(name, (None, None))
                readings.append(RateLimitInfo(limit=limit, remaining=remaining, reset_after=reset, window=window))
        if loose != RateLimitInfo():
            window = None
            for policy, params in policies:
                if loose.limit is not None and _quota(policy, params) == loose.limit:
                    window = number(params.get("w", ""))
                    break
            readings.append(replace(loose, window=window))
        return _binding(readings)

    def openai(self, kind: str) -> RateLimitInfo:
        """OpenAI's (and Groq's): the reset is "the time until the rate limit resets to
        its initial state", a duration: when the bucket is full again."""
        resets = [d for d in map(duration, self.values(f"x-ratelimit-reset-{kind}")) if d is not None]
        return self.bucket(
            self.least(f"x-ratelimit-limit-{kind}"),
            self.least(f"x-ratelimit-remaining-{kind}"),
            max(resets) if resets else None,
        )

    def anthropic(self, kind: str) -> RateLimitInfo:
        """Anthropic's: a token bucket whose reset is the RFC 3339 time it is "fully
        replenished"."""
        moments = [m for m in map(rfc3339, self.values(f"anthropic-ratelimit-{kind}-reset")) if m is not None]
        return self.bucket(
            self.least(f"anthropic-ratelimit-{kind}-limit"),
            self.least(f"anthropic-ratelimit-{kind}-remaining"),
            max(moments) - self.now if moments else None,
        )

    def bucket(self, limit: float | None, remaining: float | None, seconds: float | None) -> RateLimitInfo:
        """A bucket refilled evenly, full again in ``seconds``: ``gradual`` unless the
        reset is cut to the cap, which would overstate the pace of its refill."""
        reset = self.wait(seconds)
        gradual = reset is not None and seconds is not None and seconds <= self.cap
        return RateLimitInfo(limit=limit, remaining=remaining, reset_after=reset, gradual=gradual)

    def shopify(self) -> RateLimitInfo:
        for text in self.fields.get("x-shopify-shop-api-call-limit", []):
            used, _, limit = text.partition("/")
            used_n, limit_n = number(used), number(limit)
            if used_n is not None and limit_n is not None and limit_n > 0:
                return RateLimitInfo(limit=limit_n, remaining=max(0.0, limit_n - used_n))
        return RateLimitInfo()

    def hubspot(self) -> RateLimitInfo:
        """HubSpot: ``-Max`` per ``-Interval-Milliseconds``, ``-Secondly``, ``-Daily``.

        No reset is sent, and none is made up: the interval is a rolling window (its
        budget comes back call by call) and the day ends at midnight in the account's
        time zone. ``window`` is the interval in seconds (1 for ``-Secondly``). The day
        counts only once it is spent (``-Daily-Remaining: 0``): then nothing may go
        whatever the interval allows, and it binds, with an unknown reset. Before that
        its pace over a whole day (how many seconds are left of the account's day is
        unknown) would say nothing the interval does not.
        """

        def least(suffix: str) -> float | None:
            return self.least(f"x-hubspot-ratelimit-{suffix}")

        interval = least("interval-milliseconds")
        readings = [
            RateLimitInfo(
                limit=least("max"), remaining=least("remaining"), window=interval / 1000.0 if interval else None
            ),
            RateLimitInfo(limit=least("secondly"), remaining=least("secondly-remaining"), window=1.0),
        ]
        daily, daily_remaining = least("daily"), least("daily-remaining")
        if daily_remaining == 0:
            readings.append(RateLimitInfo(limit=daily, remaining=0.0, window=86400.0))
        return _binding([r for r in readings if r.limit is not None or r.remaining is not None])

    def salesforce(self) -> RateLimitInfo:
        """Salesforce's ``Sforce-Limit-Info: api-usage=18/5000``: used of the limit.

        ``api-usage`` counts the org's calls over a rolling 24 hours (so ``window`` is
        86400 and there is no reset: calls age out one by one). ``per-app-api-usage``
        (``17/250(appName=...)``) is a connected app's quota of that allocation, read
        over the same 24 hours; the binding one of the two is kept. Items may be
        separated by ``;`` (as Salesforce documents) or ``,``; others (``api-bursts``,
        the days the org may exceed its limit) are not budgets and are skipped. Usage
        past the limit (allowed on such a day) leaves 0.
        """
        readings = []
        for text in self.fields.get("sforce-limit-info", []):
            for item in pieces(text.replace(",", ";"), ";"):
                key, _, usage = item.partition("=")
                if key.strip().lower() not in ("api-usage", "per-app-api-usage"):
                    continue
                used, _, limit = usage.partition("(")[0].partition("/")
                used_n, limit_n = number(used), number(limit)
                if used_n is not None and limit_n is not None and limit_n > 0:
                    readings.append(RateLimitInfo(limit=limit_n, remaining=max(0.0, limit_n - used_n), window=86400.0))
        return _binding(readings)

    def zendesk(self) -> RateLimitInfo:
        """Zendesk: the account's budget per minute, and endpoints' budgets of their own.

        A bare ``X-Rate-Limit: 700`` is the account's limit per minute (``window`` 60);
        its remaining is ``X-Rate-Limit-Remaining`` (or ``ratelimit-remaining``) and
        its reset ``ratelimit-reset``, which Zendesk sends beside it. An endpoint with a
        limit of its own adds ``Zendesk-RateLimit-<endpoint>: total=100; remaining=99;
        resets=41``, ``resets`` in seconds; its interval is in Zendesk's documentation,
        not in the header, so it has no window. An item without a remaining is
        malformed and skipped; the first 16 such values are looked at, whatever their
        endpoints. The binding budget of them all is kept.
        """
        readings = []
        account = self.least("x-rate-limit")
        if account:
            remaining = _low(self.least("x-rate-limit-remaining"), self.least("ratelimit-remaining"))
            reset = self.reset("ratelimit-reset")
            readings.append(RateLimitInfo(limit=account, remaining=remaining, reset_after=reset, window=60.0))
        # Read by prefix, so not bounded by the repeats of one name: as many values in all.
        endpoints = (
            text for name, texts in self.fields.items() if name.startswith("zendesk-ratelimit-") for text in texts
        )
        for text in itertools.islice(endpoints, _MAX_REPEATS):
            for _, params in parameters(text):
                remaining = number(params.get("remaining", ""))
                if remaining is not None:
                    total = number(params.get("total", "")) or None
                    reset = self.numeric_reset(number(params.get("resets", "")))
                    readings.append(RateLimitInfo(limit=total, remaining=remaining, reset_after=reset))
        return _binding(readings)


def _from_now(value: float, now: float) -> float:
    """A numeric reset as seconds from ``now``: epoch milliseconds above 10^12, epoch
    seconds above 10^9 (no provider announces a delay of 31 years, while GitHub and
    GitLab send UNIX times), else a delay."""
    if value > _EPOCH_MILLISECONDS:
        return value / 1000.0 - now
    if value > _EPOCH_SECONDS:
        return value - now
    return value


def _low(x: float | None, y: float | None) -> float | None:
    return y if x is None else x if y is None else min(x, y)


def _high(x: float | None, y: float | None) -> float | None:
    return y if x is None else x if y is None else max(x, y)


def _quota(name: str | None, params: dict[str, str]) -> float | None:
    """A policy item's quota: written first in draft 6 (``10;w=1``), as ``q=`` later."""
    quota = number(name) if name is not None else None
    return quota if quota is not None else number(params.get("q", ""))


def _limit_and_window(a: RateLimitInfo, b: RateLimitInfo) -> tuple[float | None, float | None]:
    """The lower limit with its own window: both from one reading, never one of each.

    On equal limits, the longer window known (the slower rate). With no limit at all,
    a window still says how long a budget lasts: the first one given.
    """
    if a.limit is None and b.limit is None:
        return None, a.window if a.window is not None else b.window
    if b.limit is None or (a.limit is not None and a.limit < b.limit):
        return a.limit, a.window
    if a.limit is None or b.limit < a.limit:
        return b.limit, b.window
    return a.limit, _high(a.window, b.window)


def _merge(a: RateLimitInfo, b: RateLimitInfo) -> RateLimitInfo:
    """Two readings of one response: the most conservative of each field.

    The lowest remaining, the latest reset and ``Retry-After``, the lowest limit with
    its own window (see ``_limit_and_window``). ``gradual`` only if every reading that
    says anything of the budget is: fields of one read with the other's refill could
    make its pace faster than either says.
    """
    limit, window = _limit_and_window(a, b)
    telling = [r for r in (a, b) if (r.limit, r.remaining, r.reset_after) != (None, None, None)]
    return RateLimitInfo(
        limit=limit,
        remaining=_low(a.remaining, b.remaining),
        reset_after=_high(a.reset_after, b.reset_after),
        retry_after=_high(a.retry_after, b.retry_after),
        window=window,
        gradual=bool(telling) and all(r.gradual for r in telling),
    )


def _binding(readings: Iterable[RateLimitInfo]) -> RateLimitInfo:
    """Several readings of one response as one: the binding budget, lowered by the rest.

    A reading with a ``remaining`` and a time (a reset, or a window) is a *budget*, and
    budgets are compared whole: the one that runs out first is kept, with its own
    limit, reset and window. Most binding first:

    1. a spent budget (``remaining`` 0, its reset not due now): nothing may go until it
       refills, so of several, the one with the latest reset (an unknown reset last);
    2. then the lowest pace, ``remaining / seconds``: the most a client may send per
       second and still have that budget last until it refills. ``seconds`` is the
       reset, or the window when no reset is given (a window's budget refills within
       one window, so the pace is never overstated). On a tie, the longer time, then
       the reading that says more (a limit, a window). A ``gradual`` budget with its
       limit known refills as it goes: all of ``limit`` may go before its reset, so
       its pace is ``limit / reset``, spent or not;
    3. last, a budget refilling now (a reset of 0).

    A reading without a ``remaining``, or without any time, cannot be paced against
    the others. It is merged into the binding budget field by field, most
    conservatively (``_merge``): a lower ``remaining`` with no time still caps what
    may go before the binding budget's reset.
    """
    budgets: list[RateLimitInfo] = []
    others: list[RateLimitInfo] = []
    for reading in readings:
        timed = reading.reset_after is not None or reading.window is not None
        (budgets if reading.remaining is not None and timed else others).append(reading)
    combined = min(budgets, key=_pressure) if budgets else RateLimitInfo()
    for other in others:
        combined = _merge(combined, other)
    return combined


def _pressure(budget: RateLimitInfo) -> tuple[int, float, float, int]:
    """How soon one budget runs out, as ``_binding`` orders them: lower is sooner."""
    remaining, reset = budget.remaining or 0.0, budget.reset_after
    says = -sum(field is not None for field in (budget.limit, budget.window))
    if budget.gradual and reset and budget.limit is not None and budget.limit > remaining:
        return 1, budget.limit / reset, -reset, says
    if remaining <= 0 and reset != 0:
        return 0, -reset if reset is not None else math.inf, 0.0, says
    seconds = reset if reset is not None else budget.window or 0.0
    if seconds > 0:
        return 1, remaining / seconds, -seconds, says
    return 2, remaining, 0.0, says
