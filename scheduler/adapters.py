"""The only bridge between the ORM and the placement core.

``build_snapshot`` reads Node, GPU and Partition rows in three queries and returns the core's
``ClusterSnapshot`` together with an index from (node, GPU, slot) back to row ids (``read_nodes``
does the same for some nodes, for a snapshot brought up to date node by node);
``partition_claims`` maps a core ``Assignment`` onto the Partition rows the services must claim
(or, for weighted MPS, create); ``namespace_quota`` reads a namespace's quota and what its
deployments hold as the core's ``QuotaUsage``. Nothing here writes to the database.

How rows become core partitions (the core's convention is in ``scheduler.core.types``):

- MIG GPUs: every MIG instance, free or occupied, with its slot, profile and geometry.
- Other GPUs: only occupied rows are listed (the core derives free capacity from the node's mode
  and R). Free rows are remembered in the index, by kind, so that a reservation can claim one.
  A GPU that has fewer free rows than the core would believe (a row missing while inventory sync
  catches up) gets placeholder occupants for the difference, so the core never chooses capacity
  that no row can back.
- Time-slice replicas may each touch the whole GPU memory, so a row's ``memory_mib`` says nothing
  about use: an occupied replica is charged what its placement reserved, and pods (found by
  inventory sync) share what the GPU's counter holds beyond that (``GPU.allocated_memory_mib``).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db import connection
from django.db.models import QuerySet, Sum

from nodes.models import GPU, Node, Partition
from nodes.vocabulary import PartitionKind, SharingMode, Taint
from scheduler.choices import DeploymentStatus, PlacementStatus
from scheduler.core import Assignment, ClusterSnapshot, GPUState, NodeState, PartitionState, QuotaUsage
from scheduler.models import NamespaceQuota, PartitionHold, Placement

# Occupant names in the snapshot: "placement:<id>" for gpuplane's own, "namespace/pod" for pods.
PLACEMENT_OCCUPANT = "placement:{id}"
PLACEHOLDER_OCCUPANT = "(no free partition row)"
_WHOLE_MODES = frozenset({SharingMode.EXCLUSIVE, SharingMode.MIG})
_SLOT_KINDS = {SharingMode.MPS: PartitionKind.MPS, SharingMode.TIMESLICE: PartitionKind.TIMESLICE}


@dataclass(frozen=True)
class FreeRow:
    """A free Partition row and what claiming it charges its GPU."""

    pk: int
    slot: int
    share_milli: int
    memory_mib: int


@dataclass
class SnapshotIndex:
    """Row ids behind a snapshot, keyed by what the core speaks (node name, GPU index, slot).

    ``free_rows[(node, gpu_index, kind)]``: free rows of a kind that any placement of that kind
    may take (whole GPU, MPS slot, time-slice replica, or a left-over weighted share), by slot.
    ``mig_rows[(node, gpu_index, slot)]``: the MIG instance row at that slot.
    """

    node_pk: dict[str, int] = field(default_factory=dict)
    gpu_pk: dict[tuple[str, int], int] = field(default_factory=dict)
    free_rows: dict[tuple[str, int, str], list[FreeRow]] = field(default_factory=dict)
    mig_rows: dict[tuple[str, int, int], FreeRow] = field(default_factory=dict)


@dataclass(frozen=True)
class InventorySnapshot:
    """The core's snapshot of the inventory plus the index back to its rows."""

    snapshot: ClusterSnapshot
    index: SnapshotIndex


@dataclass(frozen=True)
class PartitionClaim:
    """What reserving one grant of an assignment means for the database.

    ``candidates``: free rows, any one of which satisfies the grant (tried in order); empty with
    ``create`` set for a weighted MPS share, which is a new row at ``slot`` (or a left-over free
    weighted row at that slot, taken over). ``share_milli`` / ``memory_mib`` are the charge for a
    created row; for a claimed row the row's own shape is charged, except time-slice replicas,
    which charge ``memory_mib`` (the placement's memory: replicas isolate nothing).
    """

    gpu_pk: int
    gpu_index: int
    kind: str
    slot: int
    share_milli: int
    memory_mib: int
    candidates: tuple[FreeRow, ...] = ()
    create: bool = False
    mig_profile: str = ""


_NODE_COLUMNS = ("pk", "name", "gpu_model", "sharing_mode", "sharing_replicas", "labels", "taints", "ready",
                 "cordoned", "cpu_allocatable_milli", "memory_allocatable_mib", "cpu_requested_milli",
                 "memory_requested_mib")


def _taints(raw: Any) -> tuple[Taint, ...]:
    taints = []
    for item in raw or []:
        if isinstance(item, Mapping) and item.get("key"):
            taints.append(Taint(str(item["key"]), str(item.get("value") or ""), str(item.get("effect") or "NoSchedule")))
    return tuple(taints)


def _labels(raw: Any) -> dict[str, str]:
    if not isinstance(raw, Mapping):
        return {}
    return {str(key): str(value) for key, value in raw.items()}


def build_snapshot(node_names: Iterable[str] | None = None, *,
                   snapshot_class: type[ClusterSnapshot] = ClusterSnapshot) -> InventorySnapshot:
    """The inventory as a ``ClusterSnapshot`` (nodes by name), in three queries.

    ``node_names`` limits the snapshot to those nodes (tests, what-if analyses); None reads all.
    ``snapshot_class`` is the snapshot type to build (the services' cache tracks what decisions
    change). Reads whatever the current transaction sees; the caller decides whether that is
    inside a transaction (see ``scheduler.services``).
    """
    nodes = Node.objects.order_by("name")
    if node_names is not None:
        nodes = nodes.filter(name__in=list(node_names))
    states, index = read_nodes(nodes, limited=node_names is not None)
    return InventorySnapshot(snapshot_class(states), index)


def read_nodes(nodes: QuerySet[Node], *, limited: bool = True) -> tuple[list[NodeState], SnapshotIndex]:
    """The core's ``NodeState`` of each node of ``nodes`` (in its order) and their index.

    ``limited``: read only these nodes' GPUs and partitions (False: all of them, cheaper than an
    ``IN`` list when ``nodes`` is every node).
    """
    node_rows = list(nodes.values_list(*_NODE_COLUMNS))
    node_ids = [row[0] for row in node_rows]
    gpus = GPU.objects.order_by("node_id", "index")
    if limited:
        gpus = gpus.filter(node_id__in=node_ids)
    gpu_rows = list(
        gpus.values_list("pk", "node_id", "index", "memory_mib", "mig_enabled", "allocated_memory_mib",
                         "utilization_pct", "memory_used_mib", "power_w")
    )
    partitions = Partition.objects.order_by("gpu_id", "slot")
    if limited:  # by GPU id, not through a join: the partition's gpu_id index answers it directly
        partitions = partitions.filter(gpu_id__in=[row[0] for row in gpu_rows])
    partitions_by_gpu: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
    for row in partitions.values_list("pk", "gpu_id", "kind", "slot", "share_milli", "memory_mib", "mig_profile",
                                      "mig_start", "mig_size", "hold__placement_id", "pod", "hold__placement__memory_mib",
                                      "hold__placement__cpu_milli", "hold__placement__host_memory_mib"):
        partitions_by_gpu[row[1]].append(row)
    return _assemble(node_rows, gpu_rows, partitions_by_gpu)


def read_nodes_by_pk(node_pks: Iterable[int]) -> tuple[list[NodeState], SnapshotIndex]:
    """``read_nodes`` of the nodes with these ids (by name), in one statement.

    For the snapshot cache's catch-up, a node or two per deploy: three ORM queries cost more
    than their few rows (compiled each time, three round trips, under the placement lock too).
    """
    pks = sorted(set(node_pks))
    if not pks:
        return [], SnapshotIndex()
    tables = {model.__name__: connection.ops.quote_name(model._meta.db_table)
              for model in (Node, GPU, Partition, PartitionHold, Placement)}
    index_column = connection.ops.quote_name("index")
    sql = (
        "SELECT n.id, n.name, n.gpu_model, n.sharing_mode, n.sharing_replicas, n.labels, n.taints, n.ready, "
        "n.cordoned, n.cpu_allocatable_milli, n.memory_allocatable_mib, n.cpu_requested_milli, "
        f"n.memory_requested_mib, g.id, g.{index_column}, g.memory_mib, g.mig_enabled, g.allocated_memory_mib, "
        "g.utilization_pct, g.memory_used_mib, g.power_w, p.id, p.kind, p.slot, p.share_milli, p.memory_mib, "
        "p.mig_profile, p.mig_start, p.mig_size, h.placement_id, p.pod, pl.memory_mib, pl.cpu_milli, "
        "pl.host_memory_mib "
        f"FROM {tables['Node']} n LEFT JOIN {tables['GPU']} g ON g.node_id = n.id "
        f"LEFT JOIN {tables['Partition']} p ON p.gpu_id = g.id "
        f"LEFT JOIN {tables['PartitionHold']} h ON h.partition_id = p.id "
        f"LEFT JOIN {tables['Placement']} pl ON pl.id = h.placement_id "
        f"WHERE n.id IN ({', '.join(['%s'] * len(pks))}) ORDER BY n.name, g.{index_column}, p.slot"
    )
    json_value = Node._meta.get_field("labels").from_db_value  # labels and taints: JSON as the ORM reads it
    node_rows: list[tuple[Any, ...]] = []
    gpu_rows: list[tuple[Any, ...]] = []
    partitions_by_gpu: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
    with connection.cursor() as cursor:
        cursor.execute(sql, pks)
        for row in cursor.fetchall():
            node_pk, gpu_pk, partition_pk = row[0], row[13], row[21]
            if not node_rows or node_rows[-1][0] != node_pk:
                node_rows.append((*row[:5], json_value(row[5], None, connection), json_value(row[6], None, connection),
                                  bool(row[7]), bool(row[8]), *row[9:13]))
            if gpu_pk is not None and (not gpu_rows or gpu_rows[-1][0] != gpu_pk):
                gpu_rows.append((gpu_pk, node_pk, row[14], row[15], bool(row[16]), *row[17:21]))
            if partition_pk is not None:
                partitions_by_gpu[gpu_pk].append((partition_pk, gpu_pk, *row[22:34]))
    return _assemble(node_rows, gpu_rows, partitions_by_gpu)


def _assemble(node_rows: list[tuple[Any, ...]], gpu_rows: list[tuple[Any, ...]],
              partitions_by_gpu: Mapping[int, list[tuple[Any, ...]]]) -> tuple[list[NodeState], SnapshotIndex]:
    """Nodes (in order), their GPUs (by node and index) and partitions (by GPU, by slot) as the core's."""
    index = SnapshotIndex()
    gpus_by_node: dict[int, list[GPUState]] = defaultdict(list)
    holds_by_node: dict[int, dict[str, tuple[int, int]]] = defaultdict(dict)
    names = {row[0]: row[1] for row in node_rows}
    modes = {row[0]: (SharingMode(row[3]), max(int(row[4]), 1)) for row in node_rows}
    for gpu_pk, node_pk, gpu_index, memory_mib, mig_enabled, allocated_memory_mib, util, used, power in gpu_rows:
        node_name = names.get(node_pk)
        if node_name is None:
            continue  # its node was created after the node query (it is in the next snapshot)
        mode, replicas = modes[node_pk]
        index.gpu_pk[(node_name, gpu_index)] = gpu_pk
        gpu = GPUState(index=gpu_index, memory_mib=memory_mib, mig_enabled=mig_enabled, utilization_pct=util,
                       memory_used_mib=used, power_w=power)
        rows = partitions_by_gpu.get(gpu_pk, [])
        _fill_partitions(gpu, node_name, mode, replicas, allocated_memory_mib, rows, index)
        gpus_by_node[node_pk].append(gpu)
        for row in rows:  # a placement's CPU and memory, once per placement on the node
            if row[9] is not None:
                holds_by_node[node_pk][PLACEMENT_OCCUPANT.format(id=row[9])] = (row[12] or 0, row[13] or 0)

    states = []
    for (pk, name, gpu_model, _mode, _replicas, labels, taints, ready, cordoned, cpu_allocatable, memory_allocatable,
         cpu_requested, memory_requested) in node_rows:
        index.node_pk[name] = pk
        mode, replicas = modes[pk]
        states.append(
            NodeState(
                name=name,
                gpu_model=gpu_model,
                sharing_mode=mode,
                gpus=gpus_by_node.get(pk, []),
                sharing_replicas=replicas,
                labels=_labels(labels),
                taints=_taints(taints),
                ready=ready,
                cordoned=cordoned,
                # 0 allocatable: not reported (a node the sync has not read): judged as unknown.
                cpu_allocatable_milli=cpu_allocatable or None,
                cpu_requested_milli=cpu_requested,
                memory_allocatable_mib=memory_allocatable or None,
                memory_requested_mib=memory_requested,
                host_holds=holds_by_node.get(pk, {}),
            )
        )
    return states, index


def _occupant(placement_id: int | None, pod: str) -> str:
    if placement_id is not None:
        return PLACEMENT_OCCUPANT.format(id=placement_id)
    return pod


def _fill_partitions(gpu: GPUState, node: str, mode: SharingMode, replicas: int, allocated_memory_mib: int,
                     rows: list[tuple[Any, ...]], index: SnapshotIndex) -> None:
    """Turn one GPU's rows into core partitions and index its free rows (see the module docstring)."""
    if gpu.mig_enabled:
        for pk, _gpu, kind, slot, share, memory, profile, start, size, placement_id, pod, *_placement in rows:
            if kind != PartitionKind.MIG:
                continue  # only instances can be handed out on a MIG-enabled GPU
            occupant = _occupant(placement_id, pod)
            gpu.partitions.append(PartitionState(kind=PartitionKind.MIG, slot=slot, share_milli=share,
                                                 memory_mib=memory, occupant=occupant, mig_profile=profile,
                                                 mig_start=start, mig_size=size))
            if not occupant:
                index.mig_rows[(node, gpu.index, slot)] = FreeRow(pk, slot, share, memory)
        return

    occupied: list[PartitionState] = []
    pod_timeslices: list[PartitionState] = []
    free_by_kind: dict[str, list[FreeRow]] = defaultdict(list)
    for pk, _gpu, kind, slot, share, memory, _profile, _start, _size, placement_id, pod, placement_memory, *_ in rows:
        occupant = _occupant(placement_id, pod)
        if not occupant:
            free_by_kind[kind].append(FreeRow(pk, slot, share, memory))
            continue
        state = PartitionState(kind=PartitionKind(kind), slot=slot, share_milli=share, memory_mib=memory,
                               occupant=occupant)
        if kind == PartitionKind.TIMESLICE:
            if placement_id is not None:
                state.memory_mib = placement_memory or 0
            else:
                pod_timeslices.append(state)
        occupied.append(state)
    if pod_timeslices:
        # Pods declare their memory to inventory sync, which sums it into the GPU's counter.
        by_pods = {id(state) for state in pod_timeslices}
        placements_mib = sum(p.memory_mib for p in occupied if p.kind == PartitionKind.TIMESLICE
                             and id(p) not in by_pods)
        left = max(allocated_memory_mib - placements_mib, 0)
        share, extra = divmod(left, len(pod_timeslices))
        for position, state in enumerate(pod_timeslices):
            state.memory_mib = share + (1 if position < extra else 0)
    gpu.partitions.extend(occupied)
    for kind, free in free_by_kind.items():
        index.free_rows[(node, gpu.index, kind)] = free

    # Placeholders where the core would see capacity that no free row backs.
    if mode in _WHOLE_MODES:
        backed = 1 if free_by_kind.get(PartitionKind.EXCLUSIVE) else 0
        missing = 0 if occupied else 1 - backed
    elif mode in _SLOT_KINDS:
        backed = len(free_by_kind.get(_SLOT_KINDS[mode], []))
        missing = max(replicas - len(occupied) - backed, 0)
    else:  # weighted shares are rows created on demand: nothing to back
        missing = 0
    for position in range(missing):
        gpu.partitions.append(PartitionState(kind=_SLOT_KINDS.get(mode, PartitionKind.EXCLUSIVE),
                                             slot=1000 + position, share_milli=0, memory_mib=0,
                                             occupant=PLACEHOLDER_OCCUPANT))


def partition_claims(assignment: Assignment, index: SnapshotIndex) -> list[PartitionClaim]:
    """The rows to claim (or create) for ``assignment``, ordered by GPU row id then slot.

    Raises ``KeyError`` when the assignment names a GPU or MIG instance the index does not hold
    (it came from another snapshot): a caller bug, not a capacity conflict.
    """
    claims = []
    for grant in assignment.partitions:
        key = (assignment.node, grant.gpu_index)
        gpu_pk = index.gpu_pk[key]
        kind = str(grant.kind)
        if grant.kind == PartitionKind.MIG:
            row = index.mig_rows[(assignment.node, grant.gpu_index, grant.slot)]
            claims.append(PartitionClaim(gpu_pk, grant.gpu_index, kind, grant.slot, row.share_milli, row.memory_mib,
                                         candidates=(row,), mig_profile=grant.mig_profile))
        elif grant.kind == PartitionKind.MPS_WEIGHTED:
            leftovers = tuple(row for row in index.free_rows.get((*key, kind), []) if row.slot == grant.slot)
            claims.append(PartitionClaim(gpu_pk, grant.gpu_index, kind, grant.slot, grant.share_milli,
                                         grant.memory_mib, candidates=leftovers, create=True))
        else:
            # Whole GPUs, MPS slots and time-slice replicas of one GPU are interchangeable: any
            # free row of the kind will do, which spares concurrent placements a conflict.
            candidates = tuple(index.free_rows.get((*key, kind), []))
            claims.append(PartitionClaim(gpu_pk, grant.gpu_index, kind, grant.slot, grant.share_milli,
                                         grant.memory_mib, candidates=candidates))
    claims.sort(key=lambda claim: (claim.gpu_pk, claim.slot))
    return claims


def namespace_quota(namespace: str) -> QuotaUsage | None:
    """The namespace's quota and its use now, as the core takes it; None when it has no quota.

    Used amounts are summed over what the namespace's deployments hold: ``gpu_milli_used`` the
    share of every partition held by their placements (released placements hold none), and
    ``memory_mib_used`` the memory need of each replica that holds partitions (the core charges
    a request its ``memory_mib``, so both sides count the same thing). Reads whatever the
    current transaction sees; the services re-read it under the placement lock to enforce it.
    """
    row = NamespaceQuota.objects.filter(namespace=namespace).values_list("max_gpu_milli", "max_memory_mib").first()
    if row is None:
        return None
    gpu_milli_limit, memory_mib_limit = row
    gpu_milli_used = Partition.objects.filter(hold__placement__deployment__namespace=namespace).aggregate(
        total=Sum("share_milli"))["total"] or 0
    memory_mib_used = Placement.objects.filter(
        deployment__namespace=namespace,
        deployment__status__in=(DeploymentStatus.PENDING, DeploymentStatus.PLACED, DeploymentStatus.RUNNING),
        status__in=(PlacementStatus.RESERVED, PlacementStatus.BINDING, PlacementStatus.RUNNING),
        node__isnull=False,
    ).aggregate(total=Sum("deployment__memory_mib"))["total"] or 0
    return QuotaUsage(gpu_milli_limit=gpu_milli_limit, gpu_milli_used=gpu_milli_used,
                      memory_mib_limit=memory_mib_limit, memory_mib_used=memory_mib_used)


__all__ = [
    "FreeRow",
    "InventorySnapshot",
    "PartitionClaim",
    "SnapshotIndex",
    "build_snapshot",
    "read_nodes",
    "namespace_quota",
    "partition_claims",
]
