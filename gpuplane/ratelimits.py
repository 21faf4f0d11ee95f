"""Rate limits on guessing passwords: the sign-in pages and the API token endpoint.

Counted per client address (`client_address`; django-ratelimit masks IPv6 to /64) in fixed
windows, in the shared "ratelimit" cache (settings: Redis when REDIS_URL is set), so the limit
holds across web workers. Only POSTs count: a password guess is a POST. Over the limit the
answer is 429 with Retry-After, the seconds until the window ends.

- `limit_sign_in` wraps the HTML sign-in views (/accounts/login/ and /admin/login/ share one
  budget, settings.GPUPLANE_LOGIN_RATE);
- `TokenRequestThrottle` is the token endpoint's DRF throttle (settings.GPUPLANE_TOKEN_RATE).
"""
from __future__ import annotations

import ipaddress
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django_ratelimit.core import get_usage
from rest_framework.throttling import BaseThrottle

SIGN_IN_GROUP = "gpuplane.sign-in"
TOKEN_GROUP = "gpuplane.api-token"


def client_address(request: HttpRequest) -> str:
    """The address a request came from, for counting (settings.RATELIMIT_IP_META_KEY points here).

    REMOTE_ADDR, unless GPUPLANE_CLIENT_IP_HEADER names a header the reverse proxy sets (e.g.
    X-Forwarded-For): then its last address, the one that proxy added (earlier ones are the
    client's to invent). A missing or malformed value counts under REMOTE_ADDR, and a request
    with no address at all (a Unix socket) under "unknown", rather than failing the sign-in.
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


def count_post(request: HttpRequest, group: str, rate: str) -> int | None:
    """Count this POST against `group`'s budget; the seconds to wait when over it, else None."""
    usage = get_usage(request, group=group, key="ip", rate=rate, method="POST", increment=True)
    if usage is None or not usage["should_limit"]:
        return None
    # time_left is -1 when the cache could not count (django-ratelimit then fails closed).
    return max(1, int(usage["time_left"]))


def limit_sign_in(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Wrap a sign-in view: over GPUPLANE_LOGIN_RATE, a POST gets a 429 page instead of a password check."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.method == "POST":
            wait_s = count_post(request, SIGN_IN_GROUP, settings.GPUPLANE_LOGIN_RATE)
            if wait_s is not None:
                response = render(request, "registration/too_many_attempts.html", {"wait_s": wait_s}, status=429)
                response["Retry-After"] = str(wait_s)
                return response
        return view(request, *args, **kwargs)

    return wrapped


class TokenRequestThrottle(BaseThrottle):
    """POST /api/v1/auth/token/ within GPUPLANE_TOKEN_RATE per address; DRF answers 429 with Retry-After."""

    wait_s: int | None = None

    def allow_request(self, request: Any, view: Any) -> bool:
        self.wait_s = count_post(request, TOKEN_GROUP, settings.GPUPLANE_TOKEN_RATE)
        return self.wait_s is None

    def wait(self) -> float | None:
        return self.wait_s
