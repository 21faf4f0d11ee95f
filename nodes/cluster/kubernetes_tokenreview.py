"""KubernetesCluster's TokenReview call (authentication.k8s.io/v1), as a mixin.

Kept apart from `nodes.cluster.kubernetes` by concern; like `kubernetes_configmaps` it does not
import the kubernetes client (only that module may): it calls the `AuthenticationV1Api` object the
cluster holds and goes through the cluster's `_json`, which turns every failure into a ClusterError.
RBAC: `create` on `tokenreviews.authentication.k8s.io` (deploy/base/rbac.yaml).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nodes.cluster.base import TokenReview
from nodes.cluster.kubernetes_http import json_content
from nodes.cluster.parsing import parse_token_review


class TokenReviewCalls:
    """`review_token` of the ClusterBackend protocol, for KubernetesCluster."""

    authentication: Any
    request_timeout_s: tuple[float, float]

    if TYPE_CHECKING:
        def _json(self, action: str, call: Callable[[], Any]) -> dict[str, Any]: ...

    def review_token(self, token: str, audiences: list[str]) -> TokenReview:
        """POST a TokenReview of `token` for `audiences` and read its status (`parsing.parse_token_review`).

        The API server checks the signature, the expiry, that the pod (or secret) the token is
        bound to still exists and that it was issued for one of `audiences`; `status.audiences`
        says which. Nothing is stored: a TokenReview is answered, not created.
        """
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                "spec": {"token": token, "audiences": list(audiences)}}
        answer = self._json("review a token", lambda: self.authentication.create_token_review(
            body, _headers=json_content(), _preload_content=False, _request_timeout=self.request_timeout_s))
        return parse_token_review(answer)
