"""Releasing one replica: the one way a replica of a live deployment gives its capacity back.

``release_replica`` removes its pod (scaling its workload down, or deleting it when it was the
last replica there) and then its partitions. ``placing`` (which places replicas) and ``watching``
(which gives up a copy that never became ready) both use it.
"""
from __future__ import annotations

from typing import Any

from django.db import transaction

from lifecycle.audit import record
from nodes.cluster.backends import get_cluster
from nodes.cluster.base import ClusterBackend, NotFound
from scheduler.choices import PlacementStatus
from scheduler.models import Deployment, Placement
from scheduler.services.capacity import release_placements

ACTIVE_PLACEMENT = (PlacementStatus.RESERVED, PlacementStatus.BINDING, PlacementStatus.RUNNING)


def release_replica(deployment: Deployment, replica_index: int, *, user: Any = None, reason: str = "",
                    cluster: ClusterBackend | None = None) -> bool:
    """Remove one replica: its pod from the cluster, then its partitions; False if it holds nothing.

    Its workload is scaled down to the replicas that stay there, or deleted when it was the
    last. ``ClusterError`` propagates with nothing released (the pod may still use the GPUs).
    The placement's row stays locked from before its workload goes until it is released, so a
    watch that finds the workload gone can wait for the row and tell a release from a workload
    that vanished (``watching``); of two racing releases of one replica, the second then finds
    it released and touches nothing.
    """
    backend = cluster if cluster is not None else get_cluster()
    with transaction.atomic():
        placement = deployment.placements.select_for_update().filter(
            replica_index=replica_index, status__in=ACTIVE_PLACEMENT).first()
        if placement is None:
            return False
        if placement.workload_name:
            staying = deployment.placements.filter(workload_name=placement.workload_name,
                                                   status__in=ACTIVE_PLACEMENT).exclude(pk=placement.pk).count()
            try:
                if staying:
                    backend.scale_workload(deployment.namespace, placement.workload_name, staying)
                else:
                    backend.delete_workload(deployment.namespace, placement.workload_name)
            except NotFound:
                pass
        Placement.objects.filter(pk=placement.pk).update(status=PlacementStatus.RELEASED)
        released = release_placements([placement.pk])
        record("placement.released", placement, actor=user, reason=reason or "replica removed",
               before={"status": placement.status, "partitions": released}, after={"status": "released"})
    return True
