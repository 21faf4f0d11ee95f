"""Errors as kubectl words them, and the exit status (always 1, as kubectl's).

The server's answers map to kubectl's lines: 401 is ``error: You must be logged in to the server
(Unauthorized)``, any other refusal ``Error from server (<Reason>): <what>``, e.g.
``Error from server (NotFound): deployments "chat" not found`` or ``Error from server
(Forbidden): plans "3" is forbidden: Your role does not allow this.``; a 400 on a create lists
each field as kubectl lists an invalid object's (``The deployment "chat" is invalid:`` then
``* memory_gb: ...``). A server that cannot be reached reads as kubectl's connection errors.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

EXIT_FAILURE = 1

# HTTP status -> the reason kubectl prints (Kubernetes' StatusReason names where one exists).
REASONS = {
    400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed",
    406: "NotAcceptable", 409: "Conflict", 410: "Gone", 413: "RequestEntityTooLarge", 415: "UnsupportedMediaType",
    422: "Invalid", 429: "TooManyRequests", 500: "InternalError", 502: "BadGateway", 503: "ServiceUnavailable",
    504: "Timeout",
}


class CLIError(Exception):
    """A failure already worded for the user: printed to stderr as is, then exit ``exit_code``."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


class UsageError(CLIError):
    """Wrong arguments: the message and a hint to the command's help, exit 1 (kubectl's usage errors)."""


@dataclass
class APIError(Exception):
    """The server answered with a status >= 400; ``body`` is the parsed JSON, or the text."""

    status: int
    body: Any
    method: str = "GET"
    url: str = ""
    location: str = ""  # where a redirect (3xx) points

    def __str__(self) -> str:
        return f"{self.method} {self.url}: HTTP {self.status}"


@dataclass
class ConnectionFailed(Exception):
    """No HTTP answer at all: refused, unknown host, TLS, timeout."""

    server: str
    reason: str
    refused: bool = False

    def __str__(self) -> str:
        return self.reason


@dataclass(frozen=True)
class Target:
    """What a request was about, for the message: ``deployments "chat"``, or a kind alone."""

    kind: str = ""
    name: str = ""

    def __str__(self) -> str:
        return f'{self.kind} "{self.name}"' if self.name else self.kind


def field_messages(body: Any, prefix: str = "") -> Iterator[str]:
    """``{"config": {"replicas": ["too low"]}}`` -> ``"config.replicas: too low"``, in body order."""
    if isinstance(body, dict):
        for key, value in body.items():
            if key in ("non_field_errors", "detail") and not prefix:
                yield from field_messages(value, "")
            else:
                yield from field_messages(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(body, list):
        for item in body:
            yield from field_messages(item, prefix)
    elif body is not None and body != "":
        yield f"{prefix}: {body}" if prefix else str(body)


def detail_of(body: Any) -> str:
    """The server's own words: `detail`, else every field message joined, else the text."""
    if isinstance(body, dict) and isinstance(body.get("detail"), str):
        return body["detail"]
    if isinstance(body, (dict, list)):
        return "; ".join(field_messages(body))
    text = str(body or "").strip()
    if text.startswith("<"):  # an HTML error page (a proxy, a wrong URL): its words are no help here
        return ""
    return text[:300]


def from_api_error(error: APIError, target: Target | None = None, *, creating: bool = False) -> CLIError:
    """The kubectl-style message for an HTTP error answer (see the module docstring).

    ``target`` names what was asked for; ``creating`` words a 400 as an invalid object.
    """
    target = target or Target()
    status = error.status
    reason = REASONS.get(status, "InternalError" if status >= 500 else f"HTTP {status}")
    detail = detail_of(error.body)
    if 300 <= status < 400:
        where = f" to {error.location}" if error.location else ""
        return CLIError(f"error: the server answered HTTP {status}, a redirect{where}: give the server's own URL "
                        "(https:// where it redirects to it) to login or --server")
    if status == 401:
        return CLIError("error: You must be logged in to the server (Unauthorized)")
    if status == 404:
        what = f"{target} not found" if target.name else (detail or "the server could not find the requested resource")
        return CLIError(f"Error from server (NotFound): {what}")
    if status == 403:
        what = f"{target} is forbidden: " if target.kind else ""
        return CLIError(f"Error from server (Forbidden): {what}{detail or 'access denied'}")
    if status == 400 and creating and target.name and isinstance(error.body, dict):
        lines = [f'The {singular(target.kind)} "{target.name}" is invalid:']
        lines += [f"* {line}" for line in field_messages(error.body)]
        return CLIError("\n".join(lines))
    if status >= 500 and not detail:
        detail = f"an error on the server (HTTP {status}) has prevented the request from succeeding"
    message = f"Error from server ({reason}): {detail or reason}"
    extra = _reasons(error.body)
    return CLIError("\n".join([message, *extra]))


def _reasons(body: Any) -> list[str]:
    """A 409's list of reasons (a refused rollout's), one per line under the message."""
    if isinstance(body, dict) and isinstance(body.get("reasons"), list):
        return [f"* {reason}" for reason in body["reasons"] if isinstance(reason, str)]
    return []


def singular(kind: str) -> str:
    """``"deployments"`` -> ``"deployment"`` (the kinds here are regular plurals)."""
    return kind[:-1] if kind.endswith("s") else kind


def from_connection_failure(error: ConnectionFailed) -> CLIError:
    """kubectl's words for a server that does not answer."""
    if error.refused:
        host = error.server.split("://", 1)[-1]
        return CLIError(f"The connection to the server {host} was refused - did you specify the right host or port?")
    return CLIError(f"Unable to connect to the server: {error.reason}")
