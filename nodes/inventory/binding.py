"""Which pod uses which partition: the pod pass of inventory sync.

Each GPU-holding pod found on the cluster is bound to partitions of the planned GPUs of its node:
on fixed layouts (exclusive, MIG, MPS, time-slicing) it takes free slots, keeping the one it had
last time; on weighted MPS nodes each pod gets a share row of its own. A pod that a holder
already accounts for (gpuplane's own workloads) is skipped, so it is not counted twice; one that
fits nowhere is reported, never raised.
"""
from __future__ import annotations

import logging
from collections import defaultdict

from nodes.cluster.base import ClusterPod
from nodes.contract import (
    ANNOTATION_MEMORY_MIB,
    ANNOTATION_SHARE_MILLI,
    LABEL_APP_NAME,
    LABEL_MANAGED_BY,
    MANAGED_BY_GPUPLANE,
)
from nodes.inventory.labels import NodeSharing
from nodes.inventory.plan import GPUPlan, NodeEntry, PartitionSlot, SyncPlan, lowest_unused
from nodes.inventory.pods import HOLDING_PHASES, PodDevice, annotation_int, pinned_first, pod_devices
from nodes.inventory.shapes import PartitionShape, weighted_shape
from nodes.vocabulary import SHARE_MILLI_FULL, PartitionKind, SharingMode

logger = logging.getLogger(__name__)


def bind_pods(plan: SyncPlan, nodes: dict[str, NodeEntry]) -> None:
    """Mark the partitions that running pods use; report pods that fit nowhere."""
    plans_by_node: dict[str, list[GPUPlan]] = defaultdict(list)
    for gpu_plan in plan.gpu_plans:
        if gpu_plan.values:  # vanished GPUs (kept for their holders) take no pods
            plans_by_node[gpu_plan.node.name].append(gpu_plan)
    holder_workloads = {(hold.node_name, hold.namespace, hold.workload) for hold in plan.holds.values()}
    devices_by_node: dict[str, list[PodDevice]] = defaultdict(list)
    for pod in sorted(plan.pods, key=lambda p: p.key):
        if not pod.gpu_requests or pod.phase not in HOLDING_PHASES or not pod.node_name:
            continue  # a pod without GPUs holds only CPU and memory (node_rows counts them)
        if _belongs_to_holder(pod, holder_workloads):
            continue  # its holder already has the partitions; counting it again would double-book
        if pod.node_name not in nodes or nodes[pod.node_name].observed is None:
            _unplaced(plan, pod, "its node is not in the inventory")
            continue
        devices_by_node[pod.node_name].extend(pod_devices(pod))

    for name, devices in devices_by_node.items():
        sharing = nodes[name].sharing
        assert sharing is not None  # only observed nodes get devices
        gpu_plans = sorted(plans_by_node[name], key=lambda p: p.index)
        if sharing.mode == SharingMode.MPS_WEIGHTED:
            _bind_weighted(plan, gpu_plans, devices, sharing)
        else:
            _bind_fixed(plan, gpu_plans, devices)

    # Rows of weighted shares whose pod is gone are deleted, not kept free.
    for gpu_plan in plan.gpu_plans:
        for slot in list(gpu_plan.slots):
            if slot.shape.kind == PartitionKind.MPS_WEIGHTED and not slot.occupied and slot.row is not None:
                plan.partitions_to_delete.append(slot.row.pk)
                gpu_plan.slots.remove(slot)


def _belongs_to_holder(pod: ClusterPod, holder_workloads: set[tuple[str, str, str]]) -> bool:
    if pod.labels.get(LABEL_MANAGED_BY) != MANAGED_BY_GPUPLANE:
        return False
    return (pod.node_name, pod.namespace, pod.labels.get(LABEL_APP_NAME, "")) in holder_workloads


def _unplaced(plan: SyncPlan, pod: ClusterPod, why: str) -> None:
    if pod.key not in plan.report.unplaced_pods:
        plan.report.unplaced_pods.append(pod.key)
        logger.warning("inventory sync: pod %s on node %s holds GPUs but %s", pod.key, pod.node_name or "-", why)


def _bind_fixed(plan: SyncPlan, gpu_plans: list[GPUPlan], devices: list[PodDevice]) -> None:
    slots = sorted(
        (slot for gpu_plan in gpu_plans for slot in gpu_plan.slots),
        key=lambda s: (s.gpu_index, s.shape.mig_start if s.shape.mig_start is not None else s.slot, s.slot),
    )
    replicas_by_gpu = {gpu_plan.uuid: gpu_plan.replicas for gpu_plan in gpu_plans}
    memory_by_gpu = {gpu_plan.uuid: gpu_plan.memory_mib for gpu_plan in gpu_plans}
    pending = []
    # Sticky pass first: a pod keeps the partition it had, so pods coming and going do not
    # shuffle the others (and a steady cluster stays write-free).
    for device in devices:
        slot = next(
            (s for s in slots if s.free and s.old_pod == device.pod.key and device.accepts(s.gpu_index, s.shape)), None
        )
        if slot is None:
            pending.append(device)
        else:
            _occupy(slot, device.pod, replicas_by_gpu[slot.gpu_uuid], memory_by_gpu[slot.gpu_uuid])
    for device in pinned_first(pending):
        slot = next((s for s in slots if s.free and device.accepts(s.gpu_index, s.shape)), None)
        if slot is None:
            _unplaced(plan, device.pod, f"no free partition fits {device.describe()}")
        else:
            _occupy(slot, device.pod, replicas_by_gpu[slot.gpu_uuid], memory_by_gpu[slot.gpu_uuid])


def _occupy(slot: PartitionSlot, pod: ClusterPod, replicas: int, gpu_memory_mib: int) -> None:
    slot.pod = pod.key
    if slot.shape.kind == PartitionKind.TIMESLICE:
        declared = annotation_int(pod, ANNOTATION_MEMORY_MIB)
        if declared is not None:
            slot.pod_memory_mib = min(declared, gpu_memory_mib)
        else:
            slot.pod_memory_mib = gpu_memory_mib // max(replicas, 1)


def _bind_weighted(plan: SyncPlan, gpu_plans: list[GPUPlan], devices: list[PodDevice], sharing: NodeSharing) -> None:
    by_index = {gpu_plan.index: gpu_plan for gpu_plan in gpu_plans}
    pending: list[PodDevice] = []
    # Sticky pass first, as on fixed layouts: a pod keeps its share row while it asks for the same share.
    for device in devices:
        if device.mig_profile is not None:
            _unplaced(plan, device.pod, f"it asks for MIG ({device.mig_profile}) on a weighted MPS node")
            continue
        if device.gpu_index is None:
            candidates = gpu_plans
        else:
            candidates = [by_index[device.gpu_index]] if device.gpu_index in by_index else []
        for gpu_plan in candidates:
            shape = _pod_share(device.pod, gpu_plan.memory_mib, sharing.replicas)
            slot = next((s for s in gpu_plan.slots if _reusable_share(s, device.pod, shape)), None)
            if slot is not None and _weighted_fits(gpu_plan, shape, ignore=slot):
                slot.pod = device.pod.key
                break
        else:
            pending.append(device)
    for device in pinned_first(pending):
        if device.gpu_index is not None and device.gpu_index not in by_index:
            _unplaced(plan, device.pod, f"its GPU {device.gpu_index} is not on the node")
            continue
        candidates = [by_index[device.gpu_index]] if device.gpu_index is not None else gpu_plans
        for gpu_plan in candidates:
            shape = _pod_share(device.pod, gpu_plan.memory_mib, sharing.replicas)
            if _weighted_fits(gpu_plan, shape):
                slot_index = lowest_unused({s.slot for s in gpu_plan.slots if s.occupied or s.row is not None})
                gpu_plan.slots.append(
                    PartitionSlot(
                        gpu_uuid=gpu_plan.uuid, gpu_index=gpu_plan.index, slot=slot_index, shape=shape,
                        pod=device.pod.key,
                    )
                )
                break
        else:
            _unplaced(plan, device.pod, "no GPU of the node has that much weighted MPS capacity left")


def _pod_share(pod: ClusterPod, gpu_memory_mib: int, replicas: int) -> PartitionShape:
    """The weighted MPS share a pod declares through its annotations."""
    return weighted_shape(
        annotation_int(pod, ANNOTATION_SHARE_MILLI), annotation_int(pod, ANNOTATION_MEMORY_MIB), gpu_memory_mib, replicas
    )


def _reusable_share(slot: PartitionSlot, pod: ClusterPod, shape: PartitionShape) -> bool:
    """An existing share row this pod had last time, with the share it still asks for."""
    return slot.row is not None and not slot.held and not slot.pod and slot.old_pod == pod.key and slot.shape == shape


def _weighted_fits(gpu_plan: GPUPlan, shape: PartitionShape, ignore: PartitionSlot | None = None) -> bool:
    occupied = [s for s in gpu_plan.slots if s.occupied and s is not ignore]
    milli = sum(s.shape.share_milli for s in occupied)
    memory_mib = sum(s.shape.memory_mib for s in occupied)
    return milli + shape.share_milli <= SHARE_MILLI_FULL and memory_mib + shape.memory_mib <= gpu_plan.memory_mib
