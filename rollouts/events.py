"""A rollout's event log: its own audit events and its nodes' (``rolloutnode.*``: state moves,
replicas pre-warmed, evictions, labels switched, restores), newest first, each with its node's
name, bounded to the latest ``EVENT_LIMIT``. The rollout page and ``/api/v1/rollouts/<id>/events/``
(which the page's live script reads) both show this list."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q

from lifecycle.audit import object_type_of
from lifecycle.models import AuditEvent
from rollouts.models import RollingUpdate, RolloutNode

EVENT_LIMIT = 100


@dataclass(frozen=True)
class RolloutEvent:
    """One audit event of the rollout; ``node`` is "" for the rollout's own."""

    id: int
    at: datetime
    actor: str
    verb: str
    node: str
    reason: str


def rollout_events(rollout: RollingUpdate, limit: int = EVENT_LIMIT) -> list[RolloutEvent]:
    """The latest ``limit`` events of the rollout and its nodes, newest first."""
    names = {str(pk): name for pk, name in RolloutNode.objects.filter(rollout=rollout).values_list("pk", "node_name")}
    node_type = object_type_of(RolloutNode)
    events = AuditEvent.objects.filter(
        Q(object_type=object_type_of(RollingUpdate), object_id=str(rollout.pk))
        | Q(object_type=node_type, object_id__in=list(names))
    ).order_by("-at", "-id")[:limit]
    return [RolloutEvent(id=e.pk, at=e.at, actor=e.actor, verb=e.verb, reason=e.reason,
                         node=names.get(e.object_id, "") if e.object_type == node_type else "")
            for e in events]
