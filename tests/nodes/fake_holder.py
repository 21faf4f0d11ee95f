"""FakeHolder: a PartitionHolder that holds the partitions it is told to, kept in memory.

Registered in place of the scheduler's holder (fixture `holder` in tests/nodes/conftest.py), it
lets nodes tests check what the inventory does with held partitions without scheduler models.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import Case, CharField, Expression, IntegerField, QuerySet, Value, When

from nodes.holds import Hold, HolderInfo
from nodes.models import Partition

HOLDER_ID = 7


class FakeHolder:
    """Holds the partitions whose ids it is given, all for one workload "serving/llama-0"."""

    def __init__(self) -> None:
        self.partition_ids: set[int] = set()
        self.node_ids: set[int] = set()
        self.memory_mib_per_gpu = 16384
        self.forgotten = False

    def hold(self, partition: Partition) -> None:
        self.partition_ids.add(partition.pk)
        self.node_ids.add(partition.gpu.node_id)

    def holds(self) -> list[Hold]:
        rows = Partition.objects.filter(pk__in=self.partition_ids).values_list("pk", "gpu_id", "gpu__node__name")
        return [
            Hold(pk, gpu_id, HOLDER_ID, node_name, "serving", "llama-0", self.memory_mib_per_gpu)
            for pk, gpu_id, node_name in rows
        ]

    def held_partition_ids(self) -> QuerySet[Any]:
        return Partition.objects.filter(pk__in=self.partition_ids).values("pk")

    def _when_held(self, value: Any, output_field: Any) -> Expression:
        return Case(When(pk__in=self.partition_ids, then=Value(value)), default=None, output_field=output_field)

    def holder_id_expression(self) -> Expression:
        return self._when_held(HOLDER_ID, IntegerField())

    def workload_type_expression(self) -> Expression:
        return self._when_held("training", CharField())

    def nodes_in_use(self, node_ids: Iterable[int]) -> set[int]:
        return self.node_ids & set(node_ids)

    def describe(self, partition_ids: Iterable[int]) -> dict[int, HolderInfo]:
        info = HolderInfo(HOLDER_ID, "serving/llama #0", f"/deployments/{HOLDER_ID}/")
        return {pk: info for pk in partition_ids if pk in self.partition_ids}

    def count_holders(self) -> int:
        return 0 if self.forgotten else 1

    def forget_all(self) -> int:
        self.forgotten, self.partition_ids, self.node_ids = True, set(), set()
        return 1
