"""Domain errors that carry their HTTP answer (NetBox's ``netbox/api/exceptions.py``).

A service raises one of these when it refuses a request for a reason of the domain (a plan that
is not proposed any more, a rollout that is not safe now, no capacity). The API maps every one
once, in ``gpuplane.api.exception_handler``: ``status_code`` is the HTTP status and ``body()``
the JSON answer, ``{"detail": <message>, ...}`` with the fields the error adds. Viewsets hold no
try/except for them; web views still catch them to show the message on the page.

Pure Python: ``nodes`` and ``scheduler`` may raise them without depending on the API layer.
"""
from __future__ import annotations

from typing import Any


class DomainError(Exception):
    """A refusal with an HTTP status (``status_code``) and a JSON body (``body()``); 409 unless a subclass says."""

    status_code = 409

    def __init__(self, detail: str, **fields: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.fields = fields

    def body(self) -> dict[str, Any]:
        """The API's answer: ``detail`` and the fields given when raised."""
        return {"detail": self.detail, **self.fields}


class Conflict(DomainError):
    """The object's state, or the cluster's, does not allow the request now (409)."""

    status_code = 409


class InvalidRequest(DomainError):
    """The request cannot be valid, whatever the state (400): ``errors`` are messages per field."""

    status_code = 400

    def __init__(self, errors: dict[str, Any]) -> None:
        super().__init__(str(errors))
        self.errors = errors

    def body(self) -> dict[str, Any]:
        return dict(self.errors)


class UpstreamFailure(DomainError):
    """A system gpuplane depends on (the cluster) refused or failed (502)."""

    status_code = 502
