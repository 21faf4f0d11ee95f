"""How a failed Kubernetes API call reads: a ClusterError saying what was asked, and what came back.

Every API or transport failure of `nodes.cluster.kubernetes` leaves it through `api_error` or
`transport_reason`, so the message always names the operation, the HTTP status, the API's reason
and its message. This module does not import the kubernetes client (only
`nodes.cluster.kubernetes` may): it reads the client's ApiException through `APIFailure`, the
three attributes it needs.
"""
from __future__ import annotations

import json
from typing import Any, Protocol

import urllib3

from nodes.cluster.base import ClusterError, Conflict, EvictionBlocked, NotFound, ResourceVersionGone

__all__ = ["Conflict", "api_error", "status_details", "transport_reason"]


class APIFailure(Protocol):
    """What an error answer of the API carries (kubernetes.client.ApiException has these)."""

    @property
    def status(self) -> int | None: ...

    @property
    def reason(self) -> Any: ...

    @property
    def body(self) -> Any: ...


def api_error(action: str, exc: APIFailure, host: str, too_many_requests_is_eviction_block: bool) -> ClusterError:
    """An ApiException as a readable ClusterError: '<action>: HTTP <code> <reason>: <API message> (<causes>)'."""
    status = int(exc.status or 0)
    if status == 0:
        # The client reports TLS failures and unusable requests with status 0: nothing was answered.
        return ClusterError(f"{action}: cannot reach the Kubernetes API at {host}: {str(exc.reason).strip()}")
    reason, message, causes = status_details(exc)
    text = f"{action}: HTTP {status} {reason}"
    if message:
        text += f": {message}"
    if causes:
        text += f" ({'; '.join(causes)})"
    if status == 404:
        return NotFound(text)
    if status == 409:
        return Conflict(text)
    if status == 410:  # a list or watch from a resourceVersion compacted away
        return ResourceVersionGone(text)
    if status == 429 and too_many_requests_is_eviction_block:
        return EvictionBlocked(text)
    return ClusterError(text)


def status_details(exc: APIFailure) -> tuple[str, str, list[str]]:
    """(reason, message, cause messages) from the metav1.Status body the API server sends with errors."""
    reason = str(exc.reason or "")
    message = ""
    causes: list[str] = []
    try:
        body = json.loads(exc.body) if exc.body else None
    except (TypeError, ValueError):
        body = None
    if isinstance(body, dict) and body.get("kind") == "Status":
        reason = str(body.get("reason") or reason)
        message = str(body.get("message") or "")
        details = body.get("details") or {}
        causes = [str(c.get("message")) for c in details.get("causes") or [] if isinstance(c, dict) and c.get("message")]
        retry_after_s = details.get("retryAfterSeconds")
        if retry_after_s:
            causes.append(f"retry after {retry_after_s}s")
    elif exc.body:
        # Not a Status object (a proxy or load balancer answered): show the start of what came back.
        message = str(exc.body).strip()[:200]
    return reason, message, causes


def transport_reason(exc: urllib3.exceptions.HTTPError) -> str:
    """Why the request never got an answer (connection refused, DNS, timeout), as text."""
    # MaxRetryError wraps the real cause (connection refused, DNS, timeout) in `.reason`.
    inner = getattr(exc, "reason", None)
    return str(inner if inner is not None else exc)
