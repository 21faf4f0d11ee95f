"""What the placement services raise: no capacity (409), the cluster refused (502), a retryable conflict.

The first two are domain errors (``lifecycle.errors``): the API answers them with their status and body."""
from __future__ import annotations

from typing import Any

from lifecycle.errors import Conflict
from nodes.cluster.base import ClusterError
from scheduler.models import Deployment


class NoCapacity(Conflict):
    """Nothing fits (HTTP 409); nothing was stored.

    ``message`` leads with the dominant reason and a checked suggestion when there is one, and
    ends like kube-scheduler's ("0/12 nodes are available: ..."); ``decision`` is the core
    ``Decision.to_dict()`` of the replica that could not be placed, ``replica_index`` its index;
    ``explanation`` is ``core.advice.Unplaced.to_dict()`` (empty when the cause is not capacity:
    a conflict that gave up, or a quota that forbids handing over).
    """

    def __init__(self, message: str, decision: dict[str, Any], replica_index: int = 0, *,
                 explanation: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.decision = decision
        self.replica_index = replica_index
        self.explanation = explanation or {}
        # What preemption would have taken (or took too little of): {"node", "victims", "why_not"}.
        self.preemption: dict[str, Any] | None = None

    def body(self) -> dict[str, Any]:
        explanation = self.explanation
        return {"detail": self.message, "replica": self.replica_index, "reason": explanation.get("reason", ""),
                "suggestion": explanation.get("suggestion"), "released_replicas": explanation.get("released", 0),
                "preemption": self.preemption, "decision": self.decision}


class DeployFailed(ClusterError):
    """The cluster refused a workload; everything reserved for it was released."""

    def __init__(self, message: str, deployment: Deployment) -> None:
        super().__init__(message)
        self.message = message
        self.deployment = deployment

    def body(self) -> dict[str, Any]:
        return {"detail": self.message, "deployment": self.deployment.pk, "status": self.deployment.status}


class CapacityConflict(Exception):
    """Another writer took capacity this attempt chose; the attempt is rolled back and retried."""
