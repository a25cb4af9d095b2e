"""Each provider's rate-limit headers, one function per dialect, and their registry.

A dialect reads one response's :class:`Fields` into a :class:`RateLimitInfo` (the
binding budget if its headers describe several, a token budget in ``tokens``), empty
when none of its headers were sent. Each docstring names the provider's documentation
and holds a ``Sample::`` of its headers, which the tests parse and check.

``DIALECTS`` is the reading order, and on a tie between budgets the one read first
binds: a new dialect goes at the end, beside ``retry_after``, unless it must win ties.
Adding a provider: a function here, its entry in ``DIALECTS``, a row in
``tests/leaves/test_header_dialects.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from .budgets import binding, merge
from .fields import Fields, RateLimitInfo
from .values import Item, duration, http_date, number, parameters, pieces, rfc3339

__all__ = ["DIALECTS", "Dialect"]

#: What the headers of one dialect say, read from one response's fields.
Dialect = Callable[[Fields], RateLimitInfo]


def x_ratelimit(fields: Fields) -> RateLimitInfo:
    """``X-RateLimit-Limit / -Remaining / -Reset`` and ``X-Rate-Limit-*``.

    Variants: ``X-Rate-Limit-*`` (Okta, Twitter), ``-Used`` read when ``-Remaining`` is
    missing (GitHub, whose ``-Resource`` is not read), ``-Reset-After``, a precise delay
    preferred to ``-Reset`` (Discord), float values (Reddit), ``-Reset`` as an ISO 8601
    time with an offset (Jira Cloud); else ``-Reset`` is numeric (see ``from_now``).

    Documentation:
        https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api
        https://discord.com/developers/docs/topics/rate-limits
        https://developer.okta.com/docs/reference/rl-best-practices/
        https://developer.x.com/en/docs/x-api/rate-limits
        https://developer.atlassian.com/cloud/jira/platform/rate-limiting/

    Sample::

        X-RateLimit-Limit: 5000
        X-RateLimit-Remaining: 4999
        X-RateLimit-Used: 1
        X-RateLimit-Reset: 1700000600
        X-RateLimit-Resource: core
    """

    def names(suffix: str) -> tuple[str, str]:
        return (f"x-ratelimit-{suffix}", f"x-rate-limit-{suffix}")

    limit = fields.least(*names("limit"))
    remaining = fields.least(*names("remaining"))
    used = fields.least(*names("used"))
    if remaining is None and used is not None and limit is not None:
        remaining = max(0.0, limit - used)
    reset = fields.wait(fields.least(*names("reset-after")))
    if reset is None:
        reset = fields.reset(*names("reset"))
    return RateLimitInfo(limit=limit, remaining=remaining, reset_after=reset)


def ietf(fields: Fields) -> RateLimitInfo:
    """The IETF drafts' ``RateLimit`` headers, in both their forms, and GitLab's.

    Drafts up to 6 and GitLab send separate fields (``_ietf_fields``); later drafts a
    structured-field list, one item per policy (``_ietf_list``). A malformed
    ``RateLimit`` list is ignored, as the drafts ask.

    Documentation:
        https://datatracker.ietf.org/doc/draft-ietf-httpapi-ratelimit-headers/
        https://docs.gitlab.com/ee/administration/settings/user_and_ip_rate_limits.html

    Sample::

        RateLimit: "default";r=50;t=30
        RateLimit-Policy: "default";q=100;w=60
    """
    policies = [item for text in fields.texts("ratelimit-policy") for item in parameters(text)]
    items = [item for text in fields.texts("ratelimit") for item in parameters(text)]
    listed = _ietf_list(fields, items, policies)
    return binding([_ietf_fields(fields, policies, announced=listed == RateLimitInfo()), listed])


def _ietf_fields(fields: Fields, policies: list[Item], announced: bool) -> RateLimitInfo:
    """Drafts up to 6: ``RateLimit-Limit / -Remaining / -Reset`` and a policy list;
    GitLab's ``RateLimit-Observed`` (the requests counted: ``Limit - Observed`` remain,
    when ``Remaining`` is missing) and ``RateLimit-ResetTime`` (an HTTP-date) beside them.

    The window is that of the policy whose quota is the announced limit (with no
    limit and no usable ``RateLimit`` list, the first policy's). The reset is a delay
    in the drafts and a UNIX time at GitLab: ``Fields.reset`` tells them apart.
    """
    limit = fields.least("ratelimit-limit")
    remaining = fields.least("ratelimit-remaining")
    observed = fields.least("ratelimit-observed")
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
        reset_after=fields.reset("ratelimit-reset", "ratelimit-resettime"),
        window=window,
    )


def _ietf_list(fields: Fields, items: list[Item], policies: list[Item]) -> RateLimitInfo:
    """The ``RateLimit`` list: one service limit per named policy; the binding one.

    Each item ``"name";r=..;t=..`` takes its limit and window from the
    ``RateLimit-Policy`` item of the same name (``q``, ``w``); ``t`` is until more quota
    comes back, at ``q`` per ``w`` (``refills``). An item naming no policy has no limit
    and no window; one without ``r`` is ignored. The older drafts' dictionary form
    (``limit=100, remaining=50, reset=30``) is one reading, with the window of the
    policy whose quota is its limit.
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
        reset = fields.numeric_reset(number(params.get("t", params.get("reset", ""))))
        if name is None:
            piece = RateLimitInfo(limit=number(params.get("limit", "")), remaining=remaining, reset_after=reset)
            loose = merge(loose, piece)
        elif remaining is not None:
            limit, window = named.get(name, (None, None))
            refills = limit is not None and bool(window)
            readings.append(
                RateLimitInfo(limit=limit, remaining=remaining, reset_after=reset, window=window, refills=refills)
            )
    if loose != RateLimitInfo():
        window = None
        for policy, params in policies:
            if loose.limit is not None and _quota(policy, params) == loose.limit:
                window = number(params.get("w", ""))
                break
        readings.append(replace(loose, window=window))
    return binding(readings)


def _quota(name: str | None, params: dict[str, str]) -> float | None:
    """A policy item's quota: written first in draft 6 (``10;w=1``), as ``q=`` later."""
    quota = number(name) if name is not None else None
    return quota if quota is not None else number(params.get("q", ""))


def openai(fields: Fields) -> RateLimitInfo:
    """OpenAI's (and Groq's) ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``.

    The reset is "the time until the rate limit resets to its initial state", a Go
    duration (``6m0s``, ``20ms``): when the bucket is full again, refilled evenly
    since, so the readings are ``gradual``. The tokens are read into ``tokens``.

    Documentation:
        https://platform.openai.com/docs/guides/rate-limits
        https://console.groq.com/docs/rate-limits

    Sample::

        x-ratelimit-limit-requests: 60
        x-ratelimit-remaining-requests: 59
        x-ratelimit-reset-requests: 1s
        x-ratelimit-limit-tokens: 150000
        x-ratelimit-remaining-tokens: 149984
        x-ratelimit-reset-tokens: 6m0s
    """

    def read(kind: str) -> RateLimitInfo:
        resets = [d for d in map(duration, fields.values(f"x-ratelimit-reset-{kind}")) if d is not None]
        return fields.bucket(
            fields.least(f"x-ratelimit-limit-{kind}"),
            fields.least(f"x-ratelimit-remaining-{kind}"),
            max(resets) if resets else None,
        )

    return replace(read("requests"), tokens=read("tokens"))


def anthropic(fields: Fields) -> RateLimitInfo:
    """Anthropic's ``anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}``.

    A token bucket whose reset is the RFC 3339 time it is "fully replenished", so the
    readings are ``gradual``. The tokens are read into ``tokens``.

    Documentation:
        https://docs.anthropic.com/en/api/rate-limits

    Sample::

        anthropic-ratelimit-requests-limit: 50
        anthropic-ratelimit-requests-remaining: 49
        anthropic-ratelimit-requests-reset: 2023-11-14T22:13:50Z
        anthropic-ratelimit-tokens-limit: 40000
        anthropic-ratelimit-tokens-remaining: 39000
        anthropic-ratelimit-tokens-reset: 2023-11-14T22:14:20+00:00
    """

    def read(kind: str) -> RateLimitInfo:
        moments = [m for m in map(rfc3339, fields.values(f"anthropic-ratelimit-{kind}-reset")) if m is not None]
        return fields.bucket(
            fields.least(f"anthropic-ratelimit-{kind}-limit"),
            fields.least(f"anthropic-ratelimit-{kind}-remaining"),
            max(moments) - fields.now if moments else None,
        )

    return replace(read("requests"), tokens=read("tokens"))


def shopify(fields: Fields) -> RateLimitInfo:
    """Shopify's ``X-Shopify-Shop-Api-Call-Limit: 32/40``: used of the limit (the
    first well-formed value); no reset, no window.

    Documentation:
        https://shopify.dev/docs/api/usage/rate-limits

    Sample::

        X-Shopify-Shop-Api-Call-Limit: 32/40
    """
    for text in fields.texts("x-shopify-shop-api-call-limit"):
        used, _, limit = text.partition("/")
        used_n, limit_n = number(used), number(limit)
        if used_n is not None and limit_n is not None and limit_n > 0:
            return RateLimitInfo(limit=limit_n, remaining=max(0.0, limit_n - used_n))
    return RateLimitInfo()


def hubspot(fields: Fields) -> RateLimitInfo:
    """HubSpot: ``-Max`` per ``-Interval-Milliseconds``, ``-Secondly``, ``-Daily``.

    No reset is sent and none is made up: the interval is a rolling window and the day
    ends at midnight in the account's unknown time zone. ``window`` is the interval in
    seconds (1 for ``-Secondly``). The day is read only once spent
    (``-Daily-Remaining: 0``), when it binds with an unknown reset: before that, with
    the seconds left in the day unknown, its pace says nothing.

    Documentation:
        https://developers.hubspot.com/docs/api/usage-details

    Sample::

        X-HubSpot-RateLimit-Max: 100
        X-HubSpot-RateLimit-Remaining: 97
        X-HubSpot-RateLimit-Interval-Milliseconds: 10000
        X-HubSpot-RateLimit-Daily: 250000
        X-HubSpot-RateLimit-Daily-Remaining: 249000
    """

    def least(suffix: str) -> float | None:
        return fields.least(f"x-hubspot-ratelimit-{suffix}")

    interval = least("interval-milliseconds")
    readings = [
        RateLimitInfo(limit=least("max"), remaining=least("remaining"), window=interval / 1000.0 if interval else None),
        RateLimitInfo(limit=least("secondly"), remaining=least("secondly-remaining"), window=1.0),
    ]
    daily, daily_remaining = least("daily"), least("daily-remaining")
    if daily_remaining == 0:
        readings.append(RateLimitInfo(limit=daily, remaining=0.0, window=86400.0))
    return binding([r for r in readings if r.limit is not None or r.remaining is not None])


def salesforce(fields: Fields) -> RateLimitInfo:
    """Salesforce's ``Sforce-Limit-Info: api-usage=18/5000``: used of the limit.

    ``api-usage`` counts the org's calls over a rolling 24 hours (``window`` 86400, no
    reset); ``per-app-api-usage`` (``17/250(appName=...)``) is a connected app's share
    over the same hours; the binding one is kept. Items are split on ``;`` or ``,``;
    others (``api-bursts``) are not budgets. Usage past the limit leaves 0.

    Documentation:
        https://developer.salesforce.com/docs/atlas.en-us.api_rest.meta/api_rest/headers_api_usage.htm

    Sample::

        Sforce-Limit-Info: api-usage=18/5000; per-app-api-usage=17/250(appName=sample-app)
    """
    readings = []
    for text in fields.texts("sforce-limit-info"):
        for item in pieces(text.replace(",", ";"), ";"):
            key, _, usage = item.partition("=")
            if key.strip().lower() not in ("api-usage", "per-app-api-usage"):
                continue
            used, _, limit = usage.partition("(")[0].partition("/")
            used_n, limit_n = number(used), number(limit)
            if used_n is not None and limit_n is not None and limit_n > 0:
                readings.append(RateLimitInfo(limit=limit_n, remaining=max(0.0, limit_n - used_n), window=86400.0))
    return binding(readings)


def zendesk(fields: Fields) -> RateLimitInfo:
    """Zendesk: the account's budget per minute, and endpoints' budgets of their own.

    ``X-Rate-Limit: 700`` is the account's limit per minute (``window`` 60), with the
    lower of ``X-Rate-Limit-Remaining`` and ``ratelimit-remaining``, and
    ``ratelimit-reset``. An endpoint with a limit of its own adds
    ``Zendesk-RateLimit-<endpoint>: total=100; remaining=99; resets=41`` (no window: its
    interval is only in the documentation); one without ``remaining`` is skipped, and
    at most ``MAX_REPEATS`` such values are read. The binding budget is kept.

    Documentation:
        https://developer.zendesk.com/api-reference/introduction/rate-limits/

    Sample::

        X-Rate-Limit: 700
        X-Rate-Limit-Remaining: 699
        ratelimit-reset: 30
        Zendesk-RateLimit-incremental-exports: total=10; remaining=1; resets=41
    """
    readings = []
    account = fields.least("x-rate-limit")
    if account:
        remaining = fields.least("x-rate-limit-remaining", "ratelimit-remaining")
        reset = fields.reset("ratelimit-reset")
        readings.append(RateLimitInfo(limit=account, remaining=remaining, reset_after=reset, window=60.0))
    for text in fields.prefixed("zendesk-ratelimit-"):
        for _, params in parameters(text):
            remaining = number(params.get("remaining", ""))
            if remaining is not None:
                total = number(params.get("total", "")) or None
                reset = fields.numeric_reset(number(params.get("resets", "")))
                readings.append(RateLimitInfo(limit=total, remaining=remaining, reset_after=reset))
    return binding(readings)


def retry_after(fields: Fields) -> RateLimitInfo:
    """``Retry-After`` as delay-seconds or an HTTP-date (IMF-fixdate, RFC 850, asctime).

    Every provider may send it, beside its own dialect or alone. A date already past
    means "now": no wait, but the header was valid. Repeated values, or values folded
    together (``10, 20``), give the longest wait.

    Documentation:
        https://www.rfc-editor.org/rfc/rfc9110#name-retry-after

    Sample::

        Retry-After: Tue, 14 Nov 2023 22:14:20 GMT
    """
    waits = []
    for text in fields.texts("retry-after"):
        # An HTTP-date holds a comma itself, so try the whole value as one first.
        moment = http_date(text, fields.now)
        if moment is not None:
            waits.append(max(0.0, moment - fields.now))
            continue
        waits.extend(n for n in map(number, pieces(text, ",")) if n is not None)
    return RateLimitInfo(retry_after=fields.wait(max(waits)) if waits else None)


#: Read in this order; on a tie between two budgets, the one read first binds (see the
#: module's docstring). ``retry_after`` only ever adds its own field.
DIALECTS: tuple[Dialect, ...] = (
    x_ratelimit,
    ietf,
    openai,
    anthropic,
    shopify,
    hubspot,
    salesforce,
    zendesk,
    retry_after,
)
