"""Who holds a partition, asked through a registered hook, so that nodes never names the scheduler.

A partition has at most one occupant: a pod that inventory sync found on the cluster
(`Partition.pod`), or a holder, the record of a workload gpuplane placed there (the scheduler's
placements). Dependencies point scheduler -> nodes, so the inventory cannot query the holders'
tables itself: it asks the `PartitionHolder` registered at startup (the scheduler registers one in
its AppConfig.ready). Until one is registered, nothing is held.

Every method answers from the database as the current transaction sees it; none writes, except
`forget_all`, which exists for the demo's reset.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from django.db.models import CharField, Expression, IntegerField, Q, QuerySet, Value

from nodes.models import Partition


@dataclass(frozen=True)
class Hold:
    """One held partition and what inventory sync must know about its holder."""

    partition_id: int
    gpu_id: int
    holder_id: int
    node_name: str  # the node the holder was placed on ("" when none)
    namespace: str
    workload: str  # the Kubernetes workload it runs as: its pods' app.kubernetes.io/name label
    memory_mib_per_gpu: int  # GPU memory the holder is charged on each of its GPUs


@dataclass(frozen=True)
class HolderInfo:
    """How pages and the admin name a holder: a label ("default/llama #0") and where to read more."""

    holder_id: int
    label: str
    url: str


class PartitionHolder(Protocol):
    """What the inventory asks of whoever holds partitions."""

    def holds(self) -> list[Hold]:
        """Every held partition: sync leaves these rows alone, does not count their holders' pods
        again, and charges a held time-slice replica the holder's memory."""
        ...

    def held_partition_ids(self) -> QuerySet[Any]:
        """The ids of held partitions as a queryset of one column, usable in `pk__in=` so that a
        filter or a count over partitions stays one SQL statement."""
        ...

    def holder_id_expression(self) -> Expression:
        """An expression to annotate onto a Partition queryset: the id of the row's holder, or NULL."""
        ...

    def workload_type_expression(self) -> Expression:
        """An expression to annotate onto a Partition queryset: the kind of work the row's holder
        does ("training", "inference", ...), or NULL when it is not held."""
        ...

    def nodes_in_use(self, node_ids: Iterable[int]) -> set[int]:
        """Those of the given nodes that holders still refer to: sync keeps them, even when they
        are gone from the cluster."""
        ...

    def describe(self, partition_ids: Iterable[int]) -> dict[int, HolderInfo]:
        """The holder of each given partition that has one, by partition id (one query)."""
        ...

    def count_holders(self) -> int:
        """How many holders exist, held partitions or not: what a reset of the inventory would orphan."""
        ...

    def forget_all(self) -> int:
        """Delete every holder, so that every inventory row may be deleted (the demo's forced reset);
        return how many were deleted."""
        ...


class NoHolder:
    """The holder used until one is registered: it holds nothing."""

    def holds(self) -> list[Hold]:
        """Nothing is held."""
        return []

    def held_partition_ids(self) -> QuerySet[Any]:
        """An empty id queryset (`pk__in=` it matches nothing; Django issues no query for it)."""
        return Partition.objects.none().values("pk")

    def holder_id_expression(self) -> Expression:
        """NULL for every row."""
        return Value(None, output_field=IntegerField())

    def workload_type_expression(self) -> Expression:
        """NULL for every row."""
        return Value(None, output_field=CharField())

    def nodes_in_use(self, node_ids: Iterable[int]) -> set[int]:
        """No node is in use."""
        return set()

    def describe(self, partition_ids: Iterable[int]) -> dict[int, HolderInfo]:
        """No partition has a holder."""
        return {}

    def count_holders(self) -> int:
        """There are no holders."""
        return 0

    def forget_all(self) -> int:
        """Nothing to delete."""
        return 0


_registered: PartitionHolder | None = None


def register_holder(holder: PartitionHolder | None) -> PartitionHolder | None:
    """Make `holder` the one the inventory asks (None: back to holding nothing); return the
    previous one, so that a test can put it back."""
    global _registered
    previous, _registered = _registered, holder
    return previous


def partition_holder() -> PartitionHolder:
    """The registered holder, or a `NoHolder` when none is."""
    return _registered if _registered is not None else NoHolder()


def with_holder_id(partitions: QuerySet[Partition]) -> QuerySet[Partition]:
    """Annotate `holder_id` on each partition: the id of its holder, or None (same query)."""
    return partitions.annotate(holder_id=partition_holder().holder_id_expression())


def describe_held(partitions: Iterable[Partition]) -> dict[int, HolderInfo]:
    """`describe` the holders of those partitions (annotated by `with_holder_id`) that have one;
    asks nothing when none is held."""
    held = [p.pk for p in partitions if p.holder_id is not None]
    return partition_holder().describe(held) if held else {}


def free_partition_filter() -> Q:
    """A filter for partitions that no pod uses and no holder holds."""
    return Q(pod="") & ~Q(pk__in=partition_holder().held_partition_ids())


def occupied_partition_filter() -> Q:
    """A filter for partitions that a pod uses or a holder holds (the complement of free_partition_filter)."""
    return ~Q(pod="") | Q(pk__in=partition_holder().held_partition_ids())


__all__ = [
    "Hold",
    "HolderInfo",
    "NoHolder",
    "PartitionHolder",
    "describe_held",
    "free_partition_filter",
    "occupied_partition_filter",
    "partition_holder",
    "register_holder",
    "with_holder_id",
]
