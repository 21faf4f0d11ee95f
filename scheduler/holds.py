"""The scheduler's answer to the inventory's question "who holds this partition?": its placements.

The inventory (nodes) may not import the scheduler, so it asks through the hook in
``nodes.holds``; ``PlacementHolder`` is registered there by ``SchedulerConfig.ready``. Every
query that knows how a placement holds a partition lives here, so the inventory's code does not
change when that schema does.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import Expression, F, QuerySet
from django.urls import reverse

from nodes.holds import Hold, HolderInfo
from scheduler.models import PartitionHold, Placement


class PlacementHolder:
    """Partitions held by placements (``scheduler.PartitionHold``); see ``nodes.holds.PartitionHolder``."""

    def holds(self) -> list[Hold]:
        """Every held partition with its placement's node, namespace, workload and memory per GPU."""
        rows = PartitionHold.objects.order_by("partition_id").values_list(
            "partition_id",
            "partition__gpu_id",
            "placement_id",
            "placement__node__name",
            "placement__deployment__namespace",
            "placement__workload_name",
            "placement__deployment__memory_mib",
            "placement__deployment__gpu_count",
        )
        return [
            Hold(
                partition_id=partition_id,
                gpu_id=gpu_id,
                holder_id=placement_id,
                node_name=node_name or "",
                namespace=namespace,
                workload=workload,
                # A tensor-parallel replica spreads the model over its GPUs; rounded up.
                memory_mib_per_gpu=-(-memory_mib // max(gpu_count, 1)),
            )
            for partition_id, gpu_id, placement_id, node_name, namespace, workload, memory_mib, gpu_count in rows
        ]

    def held_partition_ids(self) -> QuerySet[Any]:
        """Ids of the partitions a placement holds, as a subquery."""
        return PartitionHold.objects.values("partition_id")

    def holder_id_expression(self) -> Expression:
        """The holding placement's id."""
        return F("hold__placement_id")

    def workload_type_expression(self) -> Expression:
        """The workload type of the holding placement's deployment."""
        return F("hold__placement__deployment__workload_type")

    def nodes_in_use(self, node_ids: Iterable[int]) -> set[int]:
        """Nodes some placement names: ``Placement.node`` protects them, released or not."""
        ids = list(node_ids)
        if not ids:
            return set()
        return set(Placement.objects.filter(node_id__in=ids).values_list("node_id", flat=True).distinct())

    def describe(self, partition_ids: Iterable[int]) -> dict[int, HolderInfo]:
        """"namespace/deployment #replica" and the deployment's page, per held partition."""
        ids = [pk for pk in partition_ids if pk is not None]
        if not ids:
            return {}
        rows = PartitionHold.objects.filter(partition_id__in=ids).values_list(
            "partition_id",
            "placement_id",
            "placement__replica_index",
            "placement__deployment_id",
            "placement__deployment__namespace",
            "placement__deployment__name",
        )
        return {
            partition_id: HolderInfo(
                holder_id=placement_id,
                label=f"{namespace}/{name} #{replica_index}",
                url=reverse("scheduler:deployment-detail", args=[deployment_id]),
            )
            for partition_id, placement_id, replica_index, deployment_id, namespace, name in rows
        }

    def count_holders(self) -> int:
        """Every placement, released and default-scheduler ones included."""
        return Placement.objects.count()

    def forget_all(self) -> int:
        """Delete every placement (their deployments and decisions stay)."""
        return Placement.objects.all().delete()[1].get("scheduler.Placement", 0)
