"""The node agent's one HTTP verb: POST a JSON body to the gpuplane API with its bearer credential.

The credential is a fixed node agent key, or a `TokenFile`: the projected ServiceAccount token
the kubelet keeps fresh in a file (it rewrites it before it expires), read again for every request.

Every answer is sorted into what the agent does next (`PostResult.outcome`):

- "ok": 2xx (201 all taken, 207 some samples refused, 200 a GPU report taken); the body is parsed;
- "retry": the server could not answer now (connection refused or reset, timeout, a connection
  closed before the answer, 429, 5xx): send again later, after the Retry-After of a 429/503;
- "refused": any other 4xx (a malformed batch, every sample refused, an unknown node, a revoked
  token): the body, when JSON, says why, and sending the same thing again would be refused again.

Standard library only: the agent runs on GPU nodes from the same image, without a database.
"""
from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True)
class PostResult:
    outcome: str  # "ok" | "retry" | "refused"
    status: int | None
    detail: str = ""
    body: dict[str, Any] | None = None
    retry_after_s: float | None = None


class TokenFile:
    """A bearer token kept in a file by someone else (the kubelet): each call reads it anew."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def __call__(self) -> str:
        """The token, without surrounding whitespace; OSError when the file cannot be read."""
        return self.path.read_text().strip()

    def __repr__(self) -> str:
        return f"TokenFile({str(self.path)!r})"


Credential = str | Callable[[], str]


def post_json(url: str, token: Credential, payload: Any, timeout_s: float) -> PostResult:
    """POST `payload` as JSON with `Authorization: Bearer <token>` (a callable token is called for
    its current value; one that cannot be read makes the post "retry"); the answer sorted (module docstring)."""
    try:
        bearer = token() if callable(token) else token
    except OSError as exc:
        return PostResult("retry", None, f"cannot read the agent's token: {exc}")
    request = urllib.request.Request(
        url,
        data=json.dumps(payload).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Accept": "application/json", "Authorization": f"Bearer {bearer}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return PostResult("ok", response.status, body=_json_object(response.read()))
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        if exc.code in RETRYABLE_STATUS:
            return PostResult("retry", exc.code, f"HTTP {exc.code}", retry_after_s=_retry_after(exc.headers))
        return PostResult("refused", exc.code, raw[:500].decode(errors="replace"), body=_json_object(raw))
    except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
        # Connection refused, reset, DNS, timeouts, and a connection closed before the answer
        # (the server may have stored the batch: the re-send is a duplicate, ignored).
        return PostResult("retry", None, str(getattr(exc, "reason", exc)) or type(exc).__name__)


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        parsed = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _retry_after(headers: Any) -> float | None:
    """Retry-After in seconds (the delta form; the HTTP-date form is ignored)."""
    raw = headers.get("Retry-After") if headers is not None else None
    try:
        return max(0.0, float(raw)) if raw is not None else None
    except ValueError:
        return None
