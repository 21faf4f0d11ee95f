"""Typed readers for settings taken from the environment.

Each helper fails loudly (ImproperlyConfigured) on a value it cannot parse, so a typo in a
deployment manifest stops the process at start instead of silently using a default.
"""
from __future__ import annotations

import json
import os
import re

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
# A rate: a count per period, e.g. 10/m, 100/h, 5/10m (gpuplane/ratelimits.py reads it).
_RATE = re.compile(r"[0-9]+/[0-9]*[smhd]")
_COUNT_OR_PERCENT = re.compile(r"[0-9]+%?")


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use one of 1/0, true/false, yes/no, on/off)")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} must be >= {minimum}")
    return value


def env_count_or_percent(name: str, default: str) -> str:
    """A count ("2") or a percentage ("10%"), as Kubernetes' int-or-string budgets take."""
    value = os.environ.get(name, default).strip()
    if not _COUNT_OR_PERCENT.fullmatch(value):
        raise ImproperlyConfigured(f"{name}={value!r} is neither a count (e.g. 2) nor a percentage (e.g. 10%)")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = os.environ.get(name, default)
    if value not in choices:
        raise ImproperlyConfigured(f"{name}={value!r} must be one of: {', '.join(choices)}")
    return value


def env_header_pair(name: str) -> tuple[str, str] | None:
    """`Header-Name: value` as Django's (META key, value) pair, e.g. SECURE_PROXY_SSL_HEADER; None if unset."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    header, sep, value = raw.partition(":")
    header, value = header.strip(), value.strip()
    if not sep or not header or not value or not all(ch.isalnum() or ch == "-" for ch in header):
        raise ImproperlyConfigured(f"{name}={raw!r} is not `Header-Name: value` (e.g. `X-Forwarded-Proto: https`)")
    return "HTTP_" + header.upper().replace("-", "_"), value


def env_rate(name: str, default: str) -> str:
    """A request rate such as "10/m" (count per s, m, h or d; "5/10m" is 5 per 10 minutes)."""
    value = os.environ.get(name, default).strip()
    if not _RATE.fullmatch(value) or int(value.split("/")[0]) < 1:
        raise ImproperlyConfigured(f"{name}={value!r} is not a rate: write a count per period, e.g. 10/m, 100/h, 5/10m")
    return value


def env_number_map(name: str) -> dict[str, float]:
    """A JSON object of names to non-negative numbers, e.g. `{"H100-SXM5-80GB": 6.5}`; {} when unset."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not JSON") from None
    if not isinstance(value, dict) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 for v in value.values()
    ):
        raise ImproperlyConfigured(f"{name}={raw!r} must be a JSON object of names to numbers >= 0")
    return {str(k): float(v) for k, v in value.items()}
