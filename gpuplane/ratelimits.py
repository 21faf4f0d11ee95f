"""Rate limits on guessing passwords: the sign-in pages and the API token endpoint.

Two budgets, each counted in a **sliding window** (the current fixed window's count plus the
previous window's, weighted by how much of it still overlaps the last period), so a burst across
a window edge gets no more through than the rate allows (fixed windows let twice the rate pass):

- per client address (`client_address`): every sign-in POST counts, the two sign-in pages
  together (settings.GPUPLANE_LOGIN_RATE) and token requests apart (GPUPLANE_TOKEN_RATE);
- per account (the username, case-folded): only failed sign-ins count, on the pages and the token
  endpoint together (GPUPLANE_ACCOUNT_SIGN_IN_RATE), so guesses spread over many addresses
  still stop; a correct password does not count.

Over either, the answer is 429 with Retry-After (the seconds until the window lets one more
through) and no password is checked. Counters live in the shared "ratelimit" cache (Redis when
REDIS_URL is set, whose INCR is atomic; else files under var/), so limits hold across web workers.
"""
from __future__ import annotations

import hashlib
import ipaddress
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from typing import Any

from django.conf import settings
from django.core.cache import caches
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from rest_framework.throttling import BaseThrottle

SIGN_IN_GROUP = "gpuplane.sign-in"
TOKEN_GROUP = "gpuplane.api-token"
ACCOUNT_GROUP = "gpuplane.account"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_RATE = re.compile(r"([0-9]+)/([0-9]*)([smhd])")
# The clock, a function so that tests can move it across window edges.
clock: Callable[[], float] = time.time


@dataclass(frozen=True)
class Rate:
    count: int
    period_s: int


def parse_rate(text: str) -> Rate:
    """"10/m" -> Rate(10, 60); "5/10m" -> Rate(5, 600) (settings check the format: gpuplane.env.env_rate)."""
    match = _RATE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"not a rate: {text!r}")
    count, multiple, unit = match.groups()
    return Rate(int(count), int(multiple or 1) * _UNITS[unit])


def _cache_key(group: str, key: str, window: int) -> str:
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"sliding:{group}:{digest}:{window}"


def _counts(group: str, key: str, rate: Rate, now: float) -> tuple[int, int, float]:
    """(this window's count, the previous window's, seconds elapsed in this window)."""
    window = int(now // rate.period_s)
    cache = caches[settings.RATELIMIT_USE_CACHE]
    found = cache.get_many([_cache_key(group, key, window), _cache_key(group, key, window - 1)])
    return (int(found.get(_cache_key(group, key, window), 0)), int(found.get(_cache_key(group, key, window - 1), 0)),
            now - window * rate.period_s)


def seconds_to_wait(current: int, previous: int, elapsed_s: float, rate: Rate) -> int | None:
    """None when the sliding count lets one more through now, else the whole seconds until it does.

    The sliding count is `current + ceil(previous * (1 - elapsed / period))`: the previous
    window's attempts are taken as spread evenly over it, and a part of one still counts as one,
    so the last period never holds more than `rate.count` attempts at a window edge. One more is
    allowed while the count is below `rate.count`.
    """
    period, limit = rate.period_s, rate.count

    def weighed(count: int, fraction_left: float) -> int:
        return math.ceil(count * fraction_left - 1e-9)

    if current + weighed(previous, 1 - elapsed_s / period) < limit:
        return None
    if current < limit:  # later in this window, once enough of the previous one has slid out
        wait = period * (1 - (limit - current - 1) / previous) - elapsed_s
    else:  # in the next window, where this one's count weighs as the previous
        wait = (period - elapsed_s) + period * (1 - (limit - 1) / current)
    return max(1, math.ceil(wait - 1e-9))


def wait_for(group: str, key: str, rate_text: str) -> int | None:
    """Seconds to wait before `key` may try again in `group`, None when it may now (counts nothing)."""
    rate = parse_rate(rate_text)
    current, previous, elapsed = _counts(group, key, rate, clock())
    return seconds_to_wait(current, previous, elapsed, rate)


def hit(group: str, key: str, rate_text: str) -> None:
    """Count one attempt of `key` in `group`'s current window."""
    rate = parse_rate(rate_text)
    cache_key = _cache_key(group, key, int(clock() // rate.period_s))
    cache = caches[settings.RATELIMIT_USE_CACHE]
    cache.add(cache_key, 0, timeout=2 * rate.period_s + 1)  # kept while it can weigh as the previous window
    try:
        cache.incr(cache_key)
    except ValueError:  # expired between add and incr
        cache.set(cache_key, 1, timeout=2 * rate.period_s + 1)


def client_address(request: HttpRequest) -> str:
    """The address a request came from, for counting (settings.RATELIMIT_IP_META_KEY points here).

    REMOTE_ADDR, unless GPUPLANE_CLIENT_IP_HEADER names a header the reverse proxy sets (e.g.
    X-Forwarded-For): then its last address, the one that proxy added (earlier ones are the
    client's to invent). A missing or malformed value counts under REMOTE_ADDR, and a request
    with no address at all (a Unix socket) under "unknown", rather than failing the sign-in.
    IPv6 addresses count per /64 (one host usually holds a whole /64).
    """
    header = settings.GPUPLANE_CLIENT_IP_HEADER
    candidates = []
    if header:
        forwarded = request.META.get("HTTP_" + header.upper().replace("-", "_"), "")
        candidates.append(forwarded.split(",")[-1].strip())
    candidates.append(request.META.get("REMOTE_ADDR", ""))
    for candidate in candidates:
        try:
            return str(ipaddress.ip_address(candidate))
        except ValueError:
            continue
    return "0.0.0.0"  # "unknown": one shared budget for requests without an address


def _address_key(request: HttpRequest) -> str:
    address = ipaddress.ip_address(client_address(request))
    if address.version == 6:
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


def account_key(username: Any) -> str:
    """The per-account counter's key: usernames that differ only in case share one budget."""
    return str(username or "").casefold()


def count_post(request: HttpRequest, group: str, rate: str) -> int | None:
    """Count this POST against its address's budget in `group`; the seconds to wait when over it, else None.

    A POST refused is not counted: it checked no password.
    """
    key = _address_key(request)
    wait_s = wait_for(group, key, rate)
    if wait_s is None:
        hit(group, key, rate)
    return wait_s


def account_wait(username: Any) -> int | None:
    """Seconds before this account may be tried again (too many failed sign-ins), else None."""
    return wait_for(ACCOUNT_GROUP, account_key(username), settings.GPUPLANE_ACCOUNT_SIGN_IN_RATE)


def count_failed_sign_in(username: Any) -> None:
    """Count a failed sign-in against the account's budget (gpuplane.sign_in_audit calls it)."""
    hit(ACCOUNT_GROUP, account_key(username), settings.GPUPLANE_ACCOUNT_SIGN_IN_RATE)


def _too_many(request: HttpRequest, wait_s: int) -> HttpResponse:
    response = render(request, "registration/too_many_attempts.html", {"wait_s": wait_s}, status=429)
    response["Retry-After"] = str(wait_s)
    return response


def limit_sign_in(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Wrap a sign-in view: over either budget, a POST gets a 429 page instead of a password check."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.method == "POST":
            wait_s = account_wait(request.POST.get("username"))
            if wait_s is None:
                wait_s = count_post(request, SIGN_IN_GROUP, settings.GPUPLANE_LOGIN_RATE)
            if wait_s is not None:
                return _too_many(request, wait_s)
        return view(request, *args, **kwargs)

    return wrapped


class TokenRequestThrottle(BaseThrottle):
    """POST /api/v1/auth/token/ within GPUPLANE_TOKEN_RATE per address and the account's failed sign-in
    budget; DRF answers 429 with Retry-After. Other methods (DELETE: revoke) are not counted."""

    wait_s: int | None = None

    def allow_request(self, request: Any, view: Any) -> bool:
        if request.method != "POST":
            return True
        data = request.data
        self.wait_s = account_wait(data.get("username") if hasattr(data, "get") else None)
        if self.wait_s is None:
            self.wait_s = count_post(request, TOKEN_GROUP, settings.GPUPLANE_TOKEN_RATE)
        return self.wait_s is None

    def wait(self) -> float | None:
        return self.wait_s
