"""Inventory sync: what the cluster backend reports -> Node, GPU and Partition rows.

`sync_inventory` is the only writer of inventory facts (labels, readiness, GPUs, MIG devices,
which pod uses which partition). The scheduler owns `Partition.placement`; sync never sets or
clears it and never deletes a partition, GPU or node that a placement still holds.

The cluster is read *before* the transaction opens, so no row lock is ever held across cluster
I/O; the database part then runs in one transaction that locks the GPU rows (in primary-key
order, like every other writer should) for the few milliseconds it takes to recompute and write
the allocation counters, so a concurrent reservation cannot be lost between our read and write.

Every row is compared with what it should be and only differences are written, so a sync of an
unchanged cluster issues no INSERT, UPDATE or DELETE at all (Node.last_seen is refreshed only
when older than settings.GPUPLANE_INVENTORY_HEARTBEAT_S).
"""
from __future__ import annotations

import logging
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from nodes.catalog import MIG_COMPUTE_SLICES, MIG_MEMORY_SLICES, GPUModel, UnknownGPUProduct, lookup_product
from nodes.choices import PartitionKind, SharingMode
from nodes.cluster.base import ClusterBackend, ClusterNode, ClusterPod, GPUDevice, MIGDevice, get_cluster
from nodes.contract import (
    ANNOTATION_ASSIGNED_GPUS,
    ANNOTATION_MEMORY_MIB,
    ANNOTATION_MIG_START,
    ANNOTATION_SHARE_MILLI,
    LABEL_APP_NAME,
    LABEL_DEVICE_PLUGIN_CONFIG,
    LABEL_GPU_PRODUCT,
    LABEL_GPU_REPLICAS,
    LABEL_MANAGED_BY,
    LABEL_MIG_CONFIG,
    LABEL_SHARING_MODE,
    LABEL_SHARING_STRATEGY,
    MANAGED_BY_GPUPLANE,
    RESOURCE_GPU,
    RESOURCE_MIG_PREFIX,
    SHARING_MODE_LABEL_WEIGHTED,
    STRATEGY_MPS,
    STRATEGY_TIME_SLICING,
)
from nodes.models import GPU, SHARE_MILLI_FULL, Node, Partition

logger = logging.getLogger(__name__)

DEFAULT_HEARTBEAT_S = 300

# A pod holds its devices once bound (Pending with a node) or running; Succeeded/Failed pods
# have released them.
_HOLDING_PHASES = frozenset({"Pending", "Running"})
_MIG_PROFILE_COMPUTE = re.compile(r"^(\d+)g\.")
_COUNTED_MODELS = ("nodes", "gpus", "partitions")
_MISSING_PRODUCT = f"(no {LABEL_GPU_PRODUCT} label)"

# Unknown products are reported by every sync but logged once per process: the beat runs the
# sync every 30 s and the same warning each time would drown the log.
_warned_unknown_products: set[str] = set()


def _zero_counts() -> dict[str, int]:
    return dict.fromkeys(_COUNTED_MODELS, 0)


@dataclass
class SyncReport:
    """What one sync wrote. Counts are rows per model ("nodes", "gpus", "partitions")."""

    created: dict[str, int] = field(default_factory=_zero_counts)
    updated: dict[str, int] = field(default_factory=_zero_counts)
    deleted: dict[str, int] = field(default_factory=_zero_counts)
    # Nodes whose only write was the last_seen heartbeat (not counted as a change).
    heartbeats: int = 0
    unknown_products: list[str] = field(default_factory=list)
    # "namespace/name" of pods holding GPUs that no partition could be found for.
    unplaced_pods: list[str] = field(default_factory=list)
    # Nodes gone from the cluster but kept (placements reference them), now ready=False.
    gone_nodes_kept: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        """True when the sync created, updated or deleted any inventory row (heartbeats aside)."""
        return any(sum(counts.values()) for counts in (self.created, self.updated, self.deleted))

    def as_dict(self) -> dict[str, Any]:
        """A JSON-serializable copy (what the Celery task returns)."""
        return {
            "created": dict(self.created),
            "updated": dict(self.updated),
            "deleted": dict(self.deleted),
            "heartbeats": self.heartbeats,
            "unknown_products": list(self.unknown_products),
            "unplaced_pods": list(self.unplaced_pods),
            "gone_nodes_kept": list(self.gone_nodes_kept),
            "changed": self.changed,
        }


@dataclass(frozen=True)
class NodeSharing:
    """How a node's GPUs are shared, as read from its labels and MIG devices."""

    mode: str  # a SharingMode value
    replicas: int  # R for mps / timeslice / mps-weighted, else 1
    applied_config: str  # device-plugin config name, or the mig-parted config name on MIG nodes


def node_sharing(node: ClusterNode) -> NodeSharing:
    """Derive the node's sharing mode from what the NVIDIA components report.

    MIG wins over the device-plugin sharing labels: the plugin's MPS never runs on MIG devices and
    its time-slicing only replicates the full GPUs of a MIG node, which the inventory models as
    exclusive partitions of the non-MIG GPUs. Then gpuplane's own `gpuplane.io/sharing-mode=
    mps-weighted` (set on top of a time-slicing config), then GFD's sharing strategy.
    """
    labels = node.labels
    if any(gpu.mig_enabled for gpu in node.gpus):
        return NodeSharing(SharingMode.MIG, 1, labels.get(LABEL_MIG_CONFIG, ""))
    applied = labels.get(LABEL_DEVICE_PLUGIN_CONFIG, "")
    replicas = _positive_int(labels.get(LABEL_GPU_REPLICAS), default=1)
    strategy = labels.get(LABEL_SHARING_STRATEGY, "none")
    if labels.get(LABEL_SHARING_MODE) == SHARING_MODE_LABEL_WEIGHTED:
        return NodeSharing(SharingMode.MPS_WEIGHTED, replicas, applied)
    if strategy == STRATEGY_MPS:
        return NodeSharing(SharingMode.MPS, replicas, applied)
    if strategy == STRATEGY_TIME_SLICING:
        return NodeSharing(SharingMode.TIMESLICE, replicas, applied)
    return NodeSharing(SharingMode.EXCLUSIVE, 1, applied)


@dataclass(frozen=True)
class PartitionShape:
    """The geometry of a partition: everything but its slot, device UUID and occupant."""

    kind: str
    share_milli: int
    memory_mib: int
    mig_profile: str = ""
    mig_start: int | None = None
    mig_size: int | None = None

    @classmethod
    def of(cls, partition: Partition) -> PartitionShape:
        return cls(
            kind=partition.kind,
            share_milli=partition.share_milli,
            memory_mib=partition.memory_mib,
            mig_profile=partition.mig_profile,
            mig_start=partition.mig_start,
            mig_size=partition.mig_size,
        )


def fixed_partition_shapes(
    sharing: NodeSharing, gpu: GPUDevice, model: GPUModel | None
) -> list[tuple[PartitionShape, str]]:
    """The partitions a GPU offers under its node's sharing mode, with MIG device UUIDs.

    exclusive: the whole GPU; mig: one per MIG device (share = compute slices x 1000 // 7, memory
    from the catalog profile); mps R: R slots of 1000 // R and memory // R (the MPS daemon pins
    memory per client); timeslice R: R replicas of 1000 // R that may each touch all memory (no
    isolation: memory is accounted per pod, see `_occupied_memory_mib`). A non-MIG GPU of a MIG
    node is exclusive. Weighted MPS has no fixed partitions (they follow its pods and
    placements), so it returns [].
    """
    if gpu.mig_enabled:
        shapes = []
        for device in sorted(gpu.mig_devices, key=lambda d: d.start):
            shape = _mig_shape(device, gpu, model)
            if shape is not None:
                shapes.append((shape, device.uuid))
        return shapes
    mode = sharing.mode
    if mode == SharingMode.MPS_WEIGHTED:
        return []
    if mode == SharingMode.MPS:
        replicas = sharing.replicas
        slot = PartitionShape(PartitionKind.MPS, SHARE_MILLI_FULL // replicas, gpu.memory_mib // replicas)
        return [(slot, "")] * replicas
    if mode == SharingMode.TIMESLICE:
        replicas = sharing.replicas
        replica = PartitionShape(PartitionKind.TIMESLICE, SHARE_MILLI_FULL // replicas, gpu.memory_mib)
        return [(replica, "")] * replicas
    return [(PartitionShape(PartitionKind.EXCLUSIVE, SHARE_MILLI_FULL, gpu.memory_mib), "")]


def sync_inventory(cluster: ClusterBackend | None = None) -> SyncReport:
    """Make Node, GPU and Partition rows match the cluster; return what was written.

    Idempotent: a second run against an unchanged cluster writes nothing. Reads the cluster
    first (outside any transaction), then writes in one transaction. Never raises for an unknown
    GPU product (reported in `unknown_products`) or a pod that fits no partition (reported in
    `unplaced_pods`); ClusterError from the backend propagates before anything is written.
    """
    backend = cluster if cluster is not None else get_cluster()
    # Nodes without GPUs (CPU workers, control plane) are not inventory gpuplane places onto.
    observed = [node for node in backend.list_nodes() if node.gpus]
    pods = backend.list_gpu_pods()
    now = timezone.now()
    with transaction.atomic():
        return _InventorySync(observed, pods, now).run()


# --- implementation ----------------------------------------------------------------------------


@dataclass
class _Slot:
    """A partition as the sync plans it: an existing row to keep, or one to create."""

    gpu_uuid: str
    gpu_index: int
    slot: int
    shape: PartitionShape
    mig_device_uuid: str = ""
    row: Partition | None = None
    held: bool = False  # a placement holds it: the scheduler's, left exactly as it is
    old_pod: str = ""
    pod: str = ""
    pod_memory_mib: int | None = None  # timeslice / weighted: memory the occupying pod declared

    @property
    def occupied(self) -> bool:
        return self.held or bool(self.pod)

    @property
    def free(self) -> bool:
        return not self.occupied


@dataclass(frozen=True)
class _Unit:
    """One device a pod holds: a full-GPU resource unit or one MIG instance."""

    pod: ClusterPod
    mig_profile: str | None  # None: nvidia.com/gpu
    gpu_index: int | None  # from gpuplane.io/gpus, when given
    mig_start: int | None  # from gpuplane.io/mig-start, when given

    def accepts(self, slot: _Slot) -> bool:
        if self.gpu_index is not None and slot.gpu_index != self.gpu_index:
            return False
        if self.mig_profile is None:
            return slot.shape.kind != PartitionKind.MIG
        return (
            slot.shape.kind == PartitionKind.MIG
            and slot.shape.mig_profile == self.mig_profile
            and (self.mig_start is None or slot.shape.mig_start == self.mig_start)
        )


@dataclass(frozen=True)
class _NodeEntry:
    """A node row that stays after the node pass, with what the cluster says about it."""

    row: Node
    observed: ClusterNode | None  # None: gone from the cluster, kept for its placements
    sharing: NodeSharing | None


@dataclass
class _GPUPlan:
    """A GPU as the sync plans it: its row (None when new), the values it should have, its slots."""

    uuid: str
    node: Node
    index: int
    values: dict[str, Any]  # the GPU's own fields; {} for a vanished GPU kept for its placements
    row: GPU | None
    memory_mib: int
    replicas: int = 1
    slots: list[_Slot] = field(default_factory=list)


class _InventorySync:
    def __init__(self, observed: list[ClusterNode], pods: list[ClusterPod], now: datetime) -> None:
        self.observed = observed
        self.pods = pods
        self.now = now
        self.report = SyncReport()
        heartbeat_s = getattr(settings, "GPUPLANE_INVENTORY_HEARTBEAT_S", DEFAULT_HEARTBEAT_S)
        self.stale_before = now - timedelta(seconds=heartbeat_s)
        self.gpu_plans: list[_GPUPlan] = []
        self.partitions_to_delete: list[int] = []
        self.model_cache: dict[str, GPUModel | None] = {}

    # -- orchestration --------------------------------------------------------------------------

    def run(self) -> SyncReport:
        self._load()
        nodes = self._sync_nodes()
        self._plan_gpus(nodes)
        self._place_pods(nodes)
        self._write_gpus()
        self._write_partitions()
        self.report.unknown_products.sort()
        self.report.unplaced_pods.sort()
        return self.report

    def _load(self) -> None:
        self.node_rows = {node.name: node for node in Node.objects.all()}
        # Locked for the rest of this (short, I/O-free) transaction: reservations that update
        # GPU.allocated_* wait for us instead of being overwritten by our recomputed totals.
        self.gpu_rows = {gpu.uuid: gpu for gpu in GPU.objects.select_for_update().order_by("pk")}
        self.partitions_by_gpu: dict[int, list[Partition]] = defaultdict(list)
        for partition in Partition.objects.order_by("gpu_id", "slot"):
            self.partitions_by_gpu[partition.gpu_id].append(partition)
        self.held_gpu_ids = {p.gpu_id for ps in self.partitions_by_gpu.values() for p in ps if p.placement_id}
        # Through relations, not scheduler imports: nodes must not depend on the scheduler app.
        self.placement_pods: set[tuple[str, str, str]] = set()
        self.placement_memory_per_gpu: dict[int, int] = {}
        if self.held_gpu_ids:
            held = Partition.objects.filter(placement__isnull=False).values_list(
                "placement_id",
                "placement__node__name",
                "placement__deployment__namespace",
                "placement__workload_name",
                "placement__deployment__memory_mib",
                "placement__deployment__gpu_count",
            )
            for placement_id, node_name, namespace, workload, memory_mib, gpu_count in held:
                self.placement_pods.add((node_name, namespace, workload))
                self.placement_memory_per_gpu[placement_id] = -(-memory_mib // max(gpu_count, 1))

    # -- nodes ----------------------------------------------------------------------------------

    def _sync_nodes(self) -> dict[str, _NodeEntry]:
        """Create/update/delete Node rows; return the rows that stay, by name."""
        to_create: list[Node] = []
        to_update: list[Node] = []
        heartbeats: list[Node] = []
        sharing_by_name: dict[str, NodeSharing] = {}
        for observed in self.observed:
            sharing = node_sharing(observed)
            sharing_by_name[observed.name] = sharing
            values = self._node_values(observed, sharing)
            row = self.node_rows.get(observed.name)
            if row is None:
                to_create.append(Node(name=observed.name, last_seen=self.now, **values))
                continue
            if any(getattr(row, name) != value for name, value in values.items()):
                for name, value in values.items():
                    setattr(row, name, value)
                row.last_seen = self.now
                to_update.append(row)
            elif row.last_seen is None or row.last_seen < self.stale_before:
                row.last_seen = self.now
                heartbeats.append(row)

        observed_names = {node.name for node in self.observed}
        gone = [row for name, row in self.node_rows.items() if name not in observed_names]
        held_node_ids = self._held_node_ids(gone)
        to_delete = [row.pk for row in gone if row.pk not in held_node_ids]
        for row in gone:
            # A node that gpuplane placed onto is kept (Placement.node is PROTECT and the
            # scheduler must release those placements, which it cannot do for a vanished row);
            # it is marked not ready so that nothing new is placed there meanwhile.
            if row.pk in held_node_ids:
                self.report.gone_nodes_kept.append(row.name)
                if row.ready:
                    row.ready = False
                    to_update.append(row)

        if to_delete:
            _, per_model = Node.objects.filter(pk__in=to_delete).delete()
            self._count_deleted(per_model)
        if to_create:
            Node.objects.bulk_create(to_create)
            self.report.created["nodes"] += len(to_create)
        if to_update:
            Node.objects.bulk_update(to_update, [*_NODE_FIELDS, "last_seen"])
            self.report.updated["nodes"] += len(to_update)
        if heartbeats:
            Node.objects.bulk_update(heartbeats, ["last_seen"])
            self.report.heartbeats = len(heartbeats)

        created_names = [node.name for node in to_create if node.pk is None]
        if created_names:  # databases that cannot return ids from a bulk insert
            refreshed = {node.name: node for node in Node.objects.filter(name__in=created_names)}
            to_create = [refreshed.get(node.name, node) for node in to_create]
        rows = {**self.node_rows, **{node.name: node for node in to_create}}
        observed_by_name = {node.name: node for node in self.observed}
        return {
            name: _NodeEntry(row, observed_by_name.get(name), sharing_by_name.get(name))
            for name, row in rows.items()
            if name in observed_by_name or row.pk in held_node_ids
        }

    def _held_node_ids(self, gone: list[Node]) -> set[int]:
        if not gone:
            return set()
        gone_ids = [row.pk for row in gone]
        with_placements = set(
            Node.objects.filter(pk__in=gone_ids, placements__isnull=False).values_list("pk", flat=True)
        )
        with_held_gpus = {gpu.node_id for gpu in self.gpu_rows.values() if gpu.pk in self.held_gpu_ids}
        return with_placements | (with_held_gpus & set(gone_ids))

    def _node_values(self, node: ClusterNode, sharing: NodeSharing) -> dict[str, Any]:
        product = self._node_product(node)
        model = self._model(product)
        return {
            "labels": dict(node.labels),
            "taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in node.taints],
            "ready": node.ready,
            "cordoned": node.unschedulable,
            "cpu_allocatable_milli": node.cpu_allocatable_milli,
            "memory_allocatable_mib": node.memory_allocatable_mib,
            "gpu_product": product,
            "gpu_model": model.key if model else "",
            "gpu_count": len(node.gpus),
            "sharing_mode": sharing.mode,
            "sharing_replicas": sharing.replicas,
            "applied_config": sharing.applied_config,
        }

    def _model(self, product: str) -> GPUModel | None:
        if product not in self.model_cache:
            try:
                self.model_cache[product] = lookup_product(product)
            except UnknownGPUProduct as exc:
                self.model_cache[product] = None
                if product not in _warned_unknown_products:
                    _warned_unknown_products.add(product)
                    logger.warning("inventory sync: %s", exc)
        model = self.model_cache[product]
        shown = product or _MISSING_PRODUCT
        if model is None and shown not in self.report.unknown_products:
            self.report.unknown_products.append(shown)
        return model

    # -- GPUs and their partitions -------------------------------------------------------------

    def _plan_gpus(self, nodes: dict[str, _NodeEntry]) -> None:
        matched: set[str] = set()
        observed_uuids = {device.uuid for node in self.observed for device in node.gpus}
        rows_by_node_index = {(gpu.node_id, gpu.index): gpu for gpu in self.gpu_rows.values()}
        for entry in nodes.values():
            node, observed, sharing = entry.row, entry.observed, entry.sharing
            if observed is None or sharing is None:
                continue
            model = self._model(self._node_product(observed))
            for device in observed.gpus:
                row = self.gpu_rows.get(device.uuid)
                if row is None:
                    # Same node and index under a new UUID (e.g. the node agent's UUID annotation
                    # replaced the derived placeholder): the same GPU, renamed.
                    candidate = rows_by_node_index.get((node.pk, device.index))
                    if candidate is not None and candidate.uuid not in matched and candidate.uuid not in observed_uuids:
                        row = candidate
                if row is not None:
                    matched.add(row.uuid)
                plan = _GPUPlan(
                    uuid=device.uuid,
                    node=node,
                    index=device.index,
                    row=row,
                    memory_mib=device.memory_mib,
                    replicas=sharing.replicas,
                    values={
                        "uuid": device.uuid,
                        "node_id": node.pk,
                        "index": device.index,
                        "model": model.key if model else "",
                        "memory_mib": device.memory_mib,
                        "mig_enabled": device.mig_enabled,
                    },
                )
                self._plan_partitions(plan, sharing, device, model)
                self.gpu_plans.append(plan)

        # GPUs no longer reported: delete them with their partitions, unless a placement holds a
        # partition; then keep the GPU and only the held partitions (nothing new may go there).
        to_delete = []
        for uuid, row in self.gpu_rows.items():
            if uuid in matched:
                continue
            if row.pk not in self.held_gpu_ids:
                to_delete.append(row.pk)
                continue
            node = next((entry.row for entry in nodes.values() if entry.row.pk == row.node_id), None)
            if node is None:
                continue
            plan = _GPUPlan(uuid=uuid, node=node, index=row.index, row=row, memory_mib=row.memory_mib, values={})
            for partition in self.partitions_by_gpu.get(row.pk, []):
                if partition.placement_id:
                    plan.slots.append(self._kept_slot(plan, row.index, partition, held=True))
                else:
                    self.partitions_to_delete.append(partition.pk)
            self.gpu_plans.append(plan)
        if to_delete:
            _, per_model = GPU.objects.filter(pk__in=to_delete).delete()
            self._count_deleted(per_model)

    @staticmethod
    def _node_product(node: ClusterNode) -> str:
        return node.labels.get(LABEL_GPU_PRODUCT) or node.gpus[0].product

    def _kept_slot(self, plan: _GPUPlan, gpu_index: int, partition: Partition, *, held: bool) -> _Slot:
        return _Slot(
            gpu_uuid=plan.uuid,
            gpu_index=gpu_index,
            slot=partition.slot,
            shape=PartitionShape.of(partition),
            mig_device_uuid=partition.mig_device_uuid,
            row=partition,
            held=held,
            old_pod=partition.pod,
        )

    def _plan_partitions(
        self, plan: _GPUPlan, sharing: NodeSharing, device: GPUDevice, model: GPUModel | None
    ) -> None:
        """Match the GPU's existing partitions to the shapes its mode asks for.

        Matching rows are kept with their slot (renumbering would churn rows and could collide
        with the unique slot constraint mid-update); rows that match nothing are deleted unless
        held; missing shapes are created in the lowest slots left free.
        """
        existing = list(self.partitions_by_gpu.get(plan.row.pk, [])) if plan.row is not None else []
        held = [p for p in existing if p.placement_id]
        unheld = [p for p in existing if not p.placement_id]
        for partition in held:
            plan.slots.append(self._kept_slot(plan, device.index, partition, held=True))

        if sharing.mode == SharingMode.MPS_WEIGHTED and not device.mig_enabled:
            # Weighted shares exist only while a pod or placement holds them; the pods' rows are
            # matched in _place_pods, anything else here is free capacity, which is implicit.
            for partition in unheld:
                if partition.kind == PartitionKind.MPS_WEIGHTED and partition.pod:
                    plan.slots.append(self._kept_slot(plan, device.index, partition, held=False))
                else:
                    self.partitions_to_delete.append(partition.pk)
            return

        wanted = fixed_partition_shapes(sharing, device, model)
        remaining = list(enumerate(wanted))
        # Held rows are kept whatever happens, but one that has a wanted shape also fills it.
        unmatched = held + unheld
        kept: list[tuple[Partition, str]] = []
        # Two passes so that an unchanged layout keeps every row in its own slot.
        for same_slot_only in (True, False):
            for partition in list(unmatched):
                shape = PartitionShape.of(partition)
                for position, (slot_index, (wanted_shape, mig_uuid)) in enumerate(remaining):
                    if wanted_shape == shape and (not same_slot_only or partition.slot == slot_index):
                        kept.append((partition, mig_uuid))
                        unmatched.remove(partition)
                        del remaining[position]
                        break
        self.partitions_to_delete.extend(p.pk for p in unmatched if not p.placement_id)

        for partition, mig_uuid in kept:
            if partition.placement_id:
                continue  # already among the held slots, left exactly as the scheduler wrote it
            slot = self._kept_slot(plan, device.index, partition, held=False)
            slot.mig_device_uuid = mig_uuid
            plan.slots.append(slot)
        used = {slot.slot for slot in plan.slots}
        for slot_index, (shape, mig_uuid) in remaining:
            if slot_index in used:
                slot_index = _lowest_unused(used)
            used.add(slot_index)
            plan.slots.append(
                _Slot(gpu_uuid=plan.uuid, gpu_index=device.index, slot=slot_index, shape=shape, mig_device_uuid=mig_uuid)
            )

    # -- pods -----------------------------------------------------------------------------------

    def _place_pods(self, nodes: dict[str, _NodeEntry]) -> None:
        """Mark the partitions that running pods use; report pods that fit nowhere."""
        plans_by_node: dict[str, list[_GPUPlan]] = defaultdict(list)
        for plan in self.gpu_plans:
            if plan.values:  # vanished GPUs (kept for placements) take no pods
                plans_by_node[plan.node.name].append(plan)
        units_by_node: dict[str, list[_Unit]] = defaultdict(list)
        for pod in sorted(self.pods, key=lambda p: p.key):
            if pod.phase not in _HOLDING_PHASES or not pod.node_name:
                continue
            if self._belongs_to_placement(pod):
                continue  # its placement already holds the partitions; counting it again would double-book
            if pod.node_name not in nodes or nodes[pod.node_name].observed is None:
                self._unplaced(pod, "its node is not in the inventory")
                continue
            units_by_node[pod.node_name].extend(_pod_units(pod))

        for name, units in units_by_node.items():
            sharing = nodes[name].sharing
            assert sharing is not None  # only observed nodes get units
            plans = sorted(plans_by_node[name], key=lambda p: p.index)
            if sharing.mode == SharingMode.MPS_WEIGHTED:
                self._place_weighted(plans, units, sharing)
            else:
                self._place_fixed(plans, units)

        # Rows of weighted shares whose pod is gone are deleted, not kept free.
        for plan in self.gpu_plans:
            for slot in list(plan.slots):
                if slot.shape.kind == PartitionKind.MPS_WEIGHTED and not slot.occupied and slot.row is not None:
                    self.partitions_to_delete.append(slot.row.pk)
                    plan.slots.remove(slot)

    def _belongs_to_placement(self, pod: ClusterPod) -> bool:
        if pod.labels.get(LABEL_MANAGED_BY) != MANAGED_BY_GPUPLANE:
            return False
        return (pod.node_name, pod.namespace, pod.labels.get(LABEL_APP_NAME, "")) in self.placement_pods

    def _unplaced(self, pod: ClusterPod, why: str) -> None:
        if pod.key not in self.report.unplaced_pods:
            self.report.unplaced_pods.append(pod.key)
            logger.warning(
                "inventory sync: pod %s on node %s holds GPUs but %s", pod.key, pod.node_name or "-", why
            )

    def _place_fixed(self, plans: list[_GPUPlan], units: list[_Unit]) -> None:
        slots = sorted(
            (slot for plan in plans for slot in plan.slots),
            key=lambda s: (s.gpu_index, s.shape.mig_start if s.shape.mig_start is not None else s.slot, s.slot),
        )
        replicas_by_gpu = {plan.uuid: plan.replicas for plan in plans}
        memory_by_gpu = {plan.uuid: plan.memory_mib for plan in plans}
        pending = []
        # Sticky pass first: a pod keeps the partition it had, so pods coming and going do not
        # shuffle the others (and a steady cluster stays write-free).
        for unit in units:
            slot = next((s for s in slots if s.free and s.old_pod == unit.pod.key and unit.accepts(s)), None)
            if slot is None:
                pending.append(unit)
            else:
                self._occupy(slot, unit.pod, replicas_by_gpu[slot.gpu_uuid], memory_by_gpu[slot.gpu_uuid])
        for unit in _pinned_first(pending):
            slot = next((s for s in slots if s.free and unit.accepts(s)), None)
            if slot is None:
                self._unplaced(unit.pod, f"no free partition fits {_describe_unit(unit)}")
            else:
                self._occupy(slot, unit.pod, replicas_by_gpu[slot.gpu_uuid], memory_by_gpu[slot.gpu_uuid])

    @staticmethod
    def _occupy(slot: _Slot, pod: ClusterPod, replicas: int, gpu_memory_mib: int) -> None:
        slot.pod = pod.key
        if slot.shape.kind == PartitionKind.TIMESLICE:
            declared = _annotation_int(pod, ANNOTATION_MEMORY_MIB)
            if declared is not None:
                slot.pod_memory_mib = min(declared, gpu_memory_mib)
            else:
                slot.pod_memory_mib = gpu_memory_mib // max(replicas, 1)

    def _place_weighted(self, plans: list[_GPUPlan], units: list[_Unit], sharing: NodeSharing) -> None:
        by_index = {plan.index: plan for plan in plans}
        pending: list[_Unit] = []
        for unit in units:
            if unit.mig_profile is not None:
                self._unplaced(unit.pod, f"it asks for MIG ({unit.mig_profile}) on a weighted MPS node")
                continue
            if unit.gpu_index is None:
                candidates = plans
            else:
                candidates = [by_index[unit.gpu_index]] if unit.gpu_index in by_index else []
            for plan in candidates:
                shape = _weighted_shape(unit.pod, plan.memory_mib, sharing.replicas)
                slot = next((s for s in plan.slots if _reusable_share(s, unit.pod, shape)), None)
                if slot is not None and _weighted_fits(plan, shape, ignore=slot):
                    slot.pod = unit.pod.key
                    break
            else:
                pending.append(unit)
        for unit in _pinned_first(pending):
            if unit.gpu_index is not None and unit.gpu_index not in by_index:
                self._unplaced(unit.pod, f"its GPU {unit.gpu_index} is not on the node")
                continue
            candidates = [by_index[unit.gpu_index]] if unit.gpu_index is not None else plans
            for plan in candidates:
                shape = _weighted_shape(unit.pod, plan.memory_mib, sharing.replicas)
                if _weighted_fits(plan, shape):
                    slot_index = _lowest_unused({s.slot for s in plan.slots if s.occupied or s.row is not None})
                    plan.slots.append(
                        _Slot(gpu_uuid=plan.uuid, gpu_index=plan.index, slot=slot_index, shape=shape, pod=unit.pod.key)
                    )
                    break
            else:
                self._unplaced(unit.pod, "no GPU of the node has that much weighted MPS capacity left")

    # -- writes ---------------------------------------------------------------------------------

    def _write_gpus(self) -> None:
        to_create: list[GPU] = []
        to_update: list[GPU] = []
        for plan in self.gpu_plans:
            allocated_milli, allocated_memory_mib = self._allocation(plan)
            values = {**plan.values, "allocated_milli": allocated_milli, "allocated_memory_mib": allocated_memory_mib}
            if plan.row is None:
                plan.row = GPU(**values)
                to_create.append(plan.row)
            elif any(getattr(plan.row, name) != value for name, value in values.items()):
                for name, value in values.items():
                    setattr(plan.row, name, value)
                to_update.append(plan.row)
        if to_update:
            GPU.objects.bulk_update(to_update, _GPU_FIELDS)
            self.report.updated["gpus"] += len(to_update)
        if to_create:
            GPU.objects.bulk_create(to_create)
            self.report.created["gpus"] += len(to_create)
            missing = {gpu.uuid for gpu in to_create if gpu.pk is None}
            if missing:  # databases that cannot return ids from a bulk insert
                ids = dict(GPU.objects.filter(uuid__in=missing).values_list("uuid", "pk"))
                for gpu in to_create:
                    gpu.pk = gpu.pk or ids[gpu.uuid]

    def _allocation(self, plan: _GPUPlan) -> tuple[int, int]:
        """(milli, MiB) handed out on the GPU: its occupied partitions, capped at the GPU."""
        milli = sum(slot.shape.share_milli for slot in plan.slots if slot.occupied)
        memory_mib = sum(self._occupied_memory_mib(slot, plan) for slot in plan.slots if slot.occupied)
        if milli > SHARE_MILLI_FULL or memory_mib > plan.memory_mib:
            logger.warning(
                "inventory sync: GPU %s is over-committed (%d milli, %d of %d MiB); recording it as full",
                plan.uuid, milli, memory_mib, plan.memory_mib,
            )
        return min(milli, SHARE_MILLI_FULL), min(memory_mib, plan.memory_mib)

    def _occupied_memory_mib(self, slot: _Slot, plan: _GPUPlan) -> int:
        # Time-slice replicas may each touch all memory, so the partition's memory says nothing
        # about use: count what the pod declared, or what the placement's deployment needs.
        if slot.shape.kind != PartitionKind.TIMESLICE:
            return slot.shape.memory_mib
        if slot.held and slot.row is not None and slot.row.placement_id in self.placement_memory_per_gpu:
            return self.placement_memory_per_gpu[slot.row.placement_id]
        if slot.pod_memory_mib is not None:
            return slot.pod_memory_mib
        return slot.shape.memory_mib // max(plan.replicas, 1)

    def _write_partitions(self) -> None:
        if self.partitions_to_delete:
            _, per_model = Partition.objects.filter(pk__in=self.partitions_to_delete).delete()
            self._count_deleted(per_model)
        to_create: list[Partition] = []
        to_update: list[Partition] = []
        for plan in self.gpu_plans:
            assert plan.row is not None and plan.row.pk is not None
            for slot in plan.slots:
                if slot.held:
                    continue  # the scheduler's row: not ours to touch
                if slot.row is None:
                    to_create.append(
                        Partition(
                            gpu_id=plan.row.pk,
                            kind=slot.shape.kind,
                            slot=slot.slot,
                            share_milli=slot.shape.share_milli,
                            memory_mib=slot.shape.memory_mib,
                            mig_profile=slot.shape.mig_profile,
                            mig_start=slot.shape.mig_start,
                            mig_size=slot.shape.mig_size,
                            mig_device_uuid=slot.mig_device_uuid,
                            pod=slot.pod,
                        )
                    )
                elif slot.row.pod != slot.pod or slot.row.mig_device_uuid != slot.mig_device_uuid:
                    slot.row.pod = slot.pod
                    slot.row.mig_device_uuid = slot.mig_device_uuid
                    to_update.append(slot.row)
        if to_update:
            Partition.objects.bulk_update(to_update, ["pod", "mig_device_uuid"])
            self.report.updated["partitions"] += len(to_update)
        if to_create:
            Partition.objects.bulk_create(to_create)
            self.report.created["partitions"] += len(to_create)

    def _count_deleted(self, per_model: dict[str, int]) -> None:
        for label, count in per_model.items():
            key = {"nodes.Node": "nodes", "nodes.GPU": "gpus", "nodes.Partition": "partitions"}.get(label)
            if key:
                self.report.deleted[key] += count


_NODE_FIELDS = [
    "labels",
    "taints",
    "ready",
    "cordoned",
    "cpu_allocatable_milli",
    "memory_allocatable_mib",
    "gpu_product",
    "gpu_model",
    "gpu_count",
    "sharing_mode",
    "sharing_replicas",
    "applied_config",
]
_GPU_FIELDS = ["uuid", "node", "index", "model", "memory_mib", "mig_enabled", "allocated_milli", "allocated_memory_mib"]


def _mig_shape(device: MIGDevice, gpu: GPUDevice, model: GPUModel | None) -> PartitionShape | None:
    """A MIG device's partition shape, or None (logged) when its geometry is impossible."""
    if not (0 <= device.start < MIG_MEMORY_SLICES and 1 <= device.size <= MIG_MEMORY_SLICES - device.start):
        logger.warning(
            "inventory sync: GPU %s reports MIG device %s at start %d size %d, ignored",
            gpu.uuid, device.profile, device.start, device.size,
        )
        return None
    profile = None
    if model is not None:
        try:
            profile = model.mig_profile(device.profile)
        except KeyError:
            profile = None
    if profile is not None:
        compute_slices, memory_mib = profile.compute_slices, profile.memory_mib
    else:
        # Unknown model or profile: read the compute slices from the name ("3g.40gb") and give
        # the instance its memory slices' share of the board.
        match = _MIG_PROFILE_COMPUTE.match(device.profile)
        compute_slices = int(match.group(1)) if match else device.size
        memory_mib = device.size * gpu.memory_mib // MIG_MEMORY_SLICES
    share_milli = max(1, min(SHARE_MILLI_FULL, compute_slices * SHARE_MILLI_FULL // MIG_COMPUTE_SLICES))
    return PartitionShape(
        kind=PartitionKind.MIG,
        share_milli=share_milli,
        memory_mib=min(memory_mib, gpu.memory_mib),
        mig_profile=device.profile,
        mig_start=device.start,
        mig_size=device.size,
    )


def _weighted_shape(pod: ClusterPod, gpu_memory_mib: int, replicas: int) -> PartitionShape:
    """A weighted MPS share from the pod's annotations.

    Without a share annotation the pod is one of the R time-slicing replicas the device plugin
    admits, so it is counted as 1000 // R; without a memory annotation it gets its share's
    proportion of the GPU memory (what CUDA_MPS_PINNED_DEVICE_MEM_LIMIT would be set to).
    """
    share_milli = _annotation_int(pod, ANNOTATION_SHARE_MILLI)
    if share_milli is None:
        share_milli = SHARE_MILLI_FULL // max(replicas, 1)
    share_milli = max(1, min(SHARE_MILLI_FULL, share_milli))
    memory_mib = _annotation_int(pod, ANNOTATION_MEMORY_MIB)
    if memory_mib is None:
        memory_mib = gpu_memory_mib * share_milli // SHARE_MILLI_FULL
    return PartitionShape(PartitionKind.MPS_WEIGHTED, share_milli, max(0, min(memory_mib, gpu_memory_mib)))


def _reusable_share(slot: _Slot, pod: ClusterPod, shape: PartitionShape) -> bool:
    """An existing share row this pod had last time, with the share it still asks for."""
    return slot.row is not None and not slot.held and not slot.pod and slot.old_pod == pod.key and slot.shape == shape


def _weighted_fits(plan: _GPUPlan, shape: PartitionShape, ignore: _Slot | None = None) -> bool:
    occupied = [s for s in plan.slots if s.occupied and s is not ignore]
    milli = sum(s.shape.share_milli for s in occupied)
    memory_mib = sum(s.shape.memory_mib for s in occupied)
    return milli + shape.share_milli <= SHARE_MILLI_FULL and memory_mib + shape.memory_mib <= plan.memory_mib


def _pod_units(pod: ClusterPod) -> list[_Unit]:
    """The devices a pod holds, each with the GPU index / MIG start its annotations pin it to."""
    indexes = _annotation_indexes(pod)
    mig_start = _annotation_int(pod, ANNOTATION_MIG_START)
    units: list[_Unit] = []
    for resource, count in sorted(pod.gpu_requests.items()):
        if resource == RESOURCE_GPU:
            profile = None
        elif resource.startswith(RESOURCE_MIG_PREFIX):
            profile = resource[len(RESOURCE_MIG_PREFIX):]
        else:
            continue
        for position in range(count):
            units.append(
                _Unit(
                    pod=pod,
                    mig_profile=profile,
                    gpu_index=indexes[position] if position < len(indexes) else None,
                    # One start annotation cannot pin several instances; it pins a single one.
                    mig_start=mig_start if profile is not None and count == 1 else None,
                )
            )
    return units


def _pinned_first(units: list[_Unit]) -> list[_Unit]:
    """Units pinned by annotation (GPU index or MIG start) before free-floating ones, so that a
    pod that may go anywhere never takes the one partition a pinned pod must have."""
    return sorted(units, key=lambda unit: unit.gpu_index is None and unit.mig_start is None)


def _describe_unit(unit: _Unit) -> str:
    what = f"MIG {unit.mig_profile}" if unit.mig_profile else "a GPU"
    if unit.gpu_index is not None:
        what += f" on GPU {unit.gpu_index}"
    if unit.mig_start is not None:
        what += f" at start {unit.mig_start}"
    return what


def _annotation_indexes(pod: ClusterPod) -> list[int]:
    raw = pod.annotations.get(ANNOTATION_ASSIGNED_GPUS, "")
    try:
        return [int(part) for part in raw.split(",") if part.strip()]
    except ValueError:
        logger.warning(
            "inventory sync: pod %s has a malformed %s annotation %r", pod.key, ANNOTATION_ASSIGNED_GPUS, raw
        )
        return []


def _annotation_int(pod: ClusterPod, key: str) -> int | None:
    raw = pod.annotations.get(key)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        logger.warning("inventory sync: pod %s has a non-integer %s annotation %r", pod.key, key, raw)
        return None


def _positive_int(raw: str | None, *, default: int) -> int:
    try:
        value = int(raw) if raw is not None else default
    except ValueError:
        return default
    return max(1, value)


def _lowest_unused(used: Iterable[int]) -> int:
    taken = set(used)
    slot = 0
    while slot in taken:
        slot += 1
    return slot


__all__ = [
    "ANNOTATION_MEMORY_MIB",
    "NodeSharing",
    "PartitionShape",
    "SyncReport",
    "fixed_partition_shapes",
    "node_sharing",
    "sync_inventory",
]
