"""ServiceAccount tokens in the simulator: the TokenRequest API's signed JWTs, and the TokenReview
API that answers for them.

As the API server does, the simulator signs what it issues (HMAC-SHA256 here, with a key kept in
the state and made on first use) and a review answers for its own tokens only: one it did not
sign, one past its expiry, or one issued for none of the audiences asked is not authenticated.
The user is `system:serviceaccount:<namespace>:<name>`; a token issued for a pod on a node carries
the node's name in `extra` (`nodes.contract.EXTRA_NODE_NAME`), as Kubernetes >= 1.30 does. The
review is answered as the API's TokenReview JSON and read by the Kubernetes backend's parser.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

from nodes.cluster.base import TokenReview
from nodes.cluster.parsing import parse_token_review
from nodes.cluster.sim.store import State
from nodes.contract import EXTRA_NODE_NAME, SERVICE_ACCOUNT_USER

T = TypeVar("T")

ISSUER = "https://kubernetes.default.svc.cluster.local"
API_AUDIENCE = ISSUER  # the API server's own audience: what a review without audiences asks for
MIN_EXPIRATION_S = 600  # the TokenRequest API refuses a shorter expirationSeconds
_KEY = "service-account-signing-key"  # a stored value of the state (one row), not a collection


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _signature(state: State, signed: str) -> str:
    if _KEY not in state:
        state[_KEY] = secrets.token_hex(32)
    return _b64(hmac.new(bytes.fromhex(state[_KEY]), signed.encode(), hashlib.sha256).digest())


def issue_token(state: State, now: float, namespace: str, name: str, *, node: str, audiences: list[str],
                expiration_s: int) -> str:
    """A token of ServiceAccount `namespace/name` for a pod on `node` ("" for none), as a JWT."""
    if expiration_s < MIN_EXPIRATION_S:
        raise ValueError(f"expiration_s must be at least {MIN_EXPIRATION_S}, not {expiration_s}")
    claims: dict[str, Any] = {
        "iss": ISSUER, "sub": SERVICE_ACCOUNT_USER.format(namespace=namespace, name=name),
        "aud": list(audiences) or [API_AUDIENCE], "iat": int(now), "nbf": int(now), "exp": int(now) + expiration_s,
        "kubernetes.io": {"namespace": namespace, "serviceaccount": {"name": name}},
    }
    if node:
        claims["kubernetes.io"]["node"] = {"name": node}
    signed = f"{_b64(json.dumps({'alg': 'HS256', 'typ': 'JWT'}).encode())}.{_b64(json.dumps(claims).encode())}"
    return f"{signed}.{_signature(state, signed)}"


def review(state: State, now: float, token: str, audiences: list[str]) -> dict[str, Any]:
    """The TokenReview object the API server would answer for `token` (see the module docstring)."""
    asked = list(audiences) or [API_AUDIENCE]
    spec = {"token": token, "audiences": list(audiences)}

    def refused(error: str) -> dict[str, Any]:
        return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec,
                "status": {"authenticated": False, "error": error}}

    parts = token.split(".")
    if len(parts) != 3 or _KEY not in state or not hmac.compare_digest(
            _signature(state, f"{parts[0]}.{parts[1]}").encode(), parts[2].encode()):
        return refused("invalid bearer token")
    claims = json.loads(_unb64(parts[1]))
    if now >= claims["exp"]:
        return refused("invalid bearer token, service account token has expired")
    granted = [audience for audience in asked if audience in claims["aud"]]
    if not granted:
        return refused("invalid bearer token, token audiences don't match the requested audiences")
    account = claims["kubernetes.io"]
    extra = {EXTRA_NODE_NAME: [account["node"]["name"]]} if "node" in account else {}
    user = {"username": claims["sub"], "extra": extra,
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{account['namespace']}", "system:authenticated"]}
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec,
            "status": {"authenticated": True, "user": user, "audiences": granted}}


class ServiceAccountAPI:
    """SimulatedCluster's `review_token` (ClusterBackend) and `issue_service_account_token`, the
    kubelet's TokenRequest for a pod's projected token (a control, for tests and the demo)."""

    if TYPE_CHECKING:
        def _operate(self, operation: str, action: Callable[[State, float], T]) -> T: ...

        def _transaction(self) -> AbstractContextManager[State]: ...

        def _now(self) -> float: ...

    def review_token(self, token: str, audiences: list[str]) -> TokenReview:
        return parse_token_review(self._operate("review_token", lambda state, now: review(state, now, token, audiences)))

    def issue_service_account_token(self, namespace: str, name: str, *, node: str = "", audiences: list[str] | None = None,
                                    expiration_s: int = 3600) -> str:
        """A token of ServiceAccount `namespace/name`, bound to a pod on `node`, for `audiences`
        (default: the API server's own), valid `expiration_s` seconds from the cluster's now."""
        with self._transaction() as state:
            return issue_token(state, self._now(), namespace, name, node=node, audiences=list(audiences or ()),
                               expiration_s=expiration_s)
