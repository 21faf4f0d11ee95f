"""Which node a node agent speaks for, told by Kubernetes: its projected ServiceAccount token.

The agent DaemonSet mounts a token of the ServiceAccount `gpuplane-agent` that the kubelet
requests for its pod, issued for the audience `gpuplane` and bound to the pod, and rotates it
before it expires (deploy/base/agent.yaml). The agent sends it as `Authorization: Bearer`. The
server asks the cluster who it is (the TokenReview API, `ClusterBackend.review_token`), as Vault's
and SPIFFE's Kubernetes authentication do, and takes the agent's node from the review:

- the review must say authenticated, for the audience GPUPLANE_AGENT_TOKEN_AUDIENCE;
- the user must be the ServiceAccount GPUPLANE_AGENT_SERVICE_ACCOUNT of GPUPLANE_NAMESPACE
  (`system:serviceaccount:<namespace>:<name>`): another workload's token proves nothing;
- the review's `extra["authentication.kubernetes.io/node-name"]` names the node: Kubernetes puts
  the pod's node there for pod-bound tokens from 1.30 on (ServiceAccountTokenPodNodeInfo, beta).
  Without it the token cannot say which node, and is refused: use a per-node key instead
  (`nodes.authentication`, `manage.py create_agent_token`).

Any of these failing is `NotAnAgent` (401); a cluster that cannot be asked is a ClusterError.
Successful reviews are kept in a bounded per-process cache keyed by the token's SHA-256, for
GPUPLANE_AGENT_REVIEW_TTL_S and never past the token's own expiry, so an agent's posts do not each
cost a TokenReview. A token whose pod was deleted is therefore still taken for at most that long.
"""
from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings

from nodes.cluster.backends import get_cluster
from nodes.cluster.base import ClusterBackend, TokenReview
from nodes.contract import EXTRA_NODE_NAME, SERVICE_ACCOUNT_USER

# A node's agent holds one token at a time (two around a rotation): room for a large fleet.
MAX_CACHED_REVIEWS = 16_384


class NotAnAgent(Exception):
    """The token is not a node agent's of this installation; the message says why (a 401's detail)."""


@dataclass(frozen=True)
class AgentIdentity:
    """Who a reviewed token belongs to: the agent ServiceAccount, on `node_name`."""

    node_name: str
    username: str


def looks_like_jwt(key: str) -> bool:
    """True for a JWS compact serialization (three base64url parts), the shape of every
    ServiceAccount token; node agent keys (`secrets.token_urlsafe`) have no dot."""
    parts = key.split(".")
    return len(parts) == 3 and all(parts[:2])


def token_expiry(token: str) -> float | None:
    """The token's `exp` claim (Unix seconds), read without checking the signature: only ever used
    after the cluster vouched for the token. None when it has none."""
    try:
        payload = token.split(".")[1]
        exp = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))).get("exp")
    except (IndexError, ValueError, AttributeError):
        return None
    return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None


def identity_of(review: TokenReview, *, audience: str, namespace: str, service_account: str) -> AgentIdentity:
    """The agent identity a review proves, or NotAnAgent saying why (the module docstring's rules)."""
    if not review.authenticated:
        raise NotAnAgent(f"The cluster did not authenticate this token ({review.error or 'no reason given'}).")
    if audience not in review.audiences:
        raise NotAnAgent(f"This token was not issued for the audience {audience!r}.")
    expected = SERVICE_ACCOUNT_USER.format(namespace=namespace, name=service_account)
    if review.username != expected:
        raise NotAnAgent(f"This token belongs to {review.username!r}, not to the node agent ({expected!r}).")
    nodes = review.extra.get(EXTRA_NODE_NAME, ())
    if len(nodes) != 1 or not nodes[0]:
        raise NotAnAgent(
            "This token names no node (a pod-bound token on Kubernetes 1.30 or later does); "
            "give this node's agent a per-node key (manage.py create_agent_token)."
        )
    return AgentIdentity(node_name=nodes[0], username=review.username)


class ReviewCache:
    """Identities of reviewed tokens by SHA-256 digest, each until its deadline; at most
    `max_entries`, the least recently used going first. Safe across a process's threads."""

    def __init__(self, max_entries: int = MAX_CACHED_REVIEWS, clock: Callable[[], float] = time.time) -> None:
        self.max_entries = max_entries
        self.clock = clock
        self._entries: OrderedDict[str, tuple[float, AgentIdentity]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, digest: str) -> AgentIdentity | None:
        with self._lock:
            entry = self._entries.get(digest)
            if entry is None:
                return None
            if self.clock() >= entry[0]:
                del self._entries[digest]
                return None
            self._entries.move_to_end(digest)
            return entry[1]

    def put(self, digest: str, identity: AgentIdentity, deadline: float) -> None:
        if deadline <= self.clock():
            return
        with self._lock:
            self._entries[digest] = (deadline, identity)
            self._entries.move_to_end(digest)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


REVIEWS = ReviewCache()


def identify_agent(token: str, cluster: ClusterBackend | None = None) -> AgentIdentity:
    """The node agent identity of a bound ServiceAccount `token`: from the cache, else from a
    TokenReview by `cluster` (default: settings' `get_cluster()`). NotAnAgent (401) or ClusterError."""
    digest = hashlib.sha256(token.encode()).hexdigest()
    identity = REVIEWS.get(digest)
    if identity is not None:
        return identity
    cluster = cluster or get_cluster()
    audience = settings.GPUPLANE_AGENT_TOKEN_AUDIENCE
    review = cluster.review_token(token, [audience])
    identity = identity_of(review, audience=audience, namespace=settings.GPUPLANE_NAMESPACE,
                           service_account=settings.GPUPLANE_AGENT_SERVICE_ACCOUNT)
    deadline = REVIEWS.clock() + settings.GPUPLANE_AGENT_REVIEW_TTL_S
    expiry = token_expiry(token)
    REVIEWS.put(digest, identity, deadline if expiry is None else min(deadline, expiry))
    return identity
