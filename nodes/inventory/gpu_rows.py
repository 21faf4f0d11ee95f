"""The GPU and partition passes of inventory sync: plan the rows from the cluster, write the differences.

Planning matches each reported GPU to its row (by UUID, else by node and index) and each GPU's
existing partitions to the shapes its node's sharing mode asks for. Held partitions are never
touched or deleted, and a GPU with a held partition is kept even when the cluster no longer
reports it. Writing compares every row with what it should be and writes only differences.
"""
from __future__ import annotations

import logging
from dataclasses import replace

from nodes.catalog import GPUModel
from nodes.cluster.base import GPUDevice
from nodes.inventory import audit
from nodes.inventory.labels import NodeSharing
from nodes.inventory.node_rows import catalog_model, node_product
from nodes.inventory.plan import GPUPlan, NodeEntry, PartitionSlot, SyncPlan, lowest_unused
from nodes.inventory.shapes import PartitionShape, fixed_partition_shapes
from nodes.models import GPU, Partition
from nodes.vocabulary import SHARE_MILLI_FULL, PartitionKind, SharingMode

logger = logging.getLogger(__name__)

GPU_FIELDS = ["uuid", "node", "index", "model", "memory_mib", "mig_enabled", "allocated_milli", "allocated_memory_mib"]


def plan_gpu_rows(plan: SyncPlan, nodes: dict[str, NodeEntry]) -> None:
    """Plan a GPU (with its partition slots) per reported device; delete GPUs no longer reported
    unless held. Fills `plan.gpu_plans` and `plan.partitions_to_delete`."""
    matched: set[str] = set()
    observed_uuids = {device.uuid for node in plan.observed for device in node.gpus}
    rows_by_node_index = {(gpu.node_id, gpu.index): gpu for gpu in plan.gpu_rows.values()}
    for entry in nodes.values():
        node, observed, sharing = entry.row, entry.observed, entry.sharing
        if observed is None or sharing is None:
            continue
        model = catalog_model(plan, node_product(observed))
        for device in observed.gpus:
            row = plan.gpu_rows.get(device.uuid)
            if row is None:
                # Same node and index under a new UUID (the node agent's report, or the UUID
                # annotation, replaced the placeholder): the same GPU, renamed.
                candidate = rows_by_node_index.get((node.pk, device.index))
                if candidate is not None and candidate.uuid not in matched and candidate.uuid not in observed_uuids:
                    row = candidate
            if row is not None:
                matched.add(row.uuid)
                if not device.uuid_known and row.uuid != device.uuid:
                    # Only a placeholder was observed (the agent's report or the annotation is
                    # not there, or not yet): the UUID the row was bound to stays.
                    device = replace(device, uuid=row.uuid, uuid_known=True)
            gpu_plan = GPUPlan(
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
            _plan_partitions(plan, gpu_plan, sharing, device, model)
            plan.gpu_plans.append(gpu_plan)

    # GPUs no longer reported: delete them with their partitions, unless a holder has a
    # partition; then keep the GPU and only the held partitions (nothing new may go there).
    to_delete = []
    for uuid, row in plan.gpu_rows.items():
        if uuid in matched:
            continue
        if row.pk not in plan.held_gpu_ids:
            to_delete.append(row.pk)
            continue
        kept_node = next((entry.row for entry in nodes.values() if entry.row.pk == row.node_id), None)
        if kept_node is None:
            continue
        gpu_plan = GPUPlan(uuid=uuid, node=kept_node, index=row.index, row=row, memory_mib=row.memory_mib, values={})
        for partition in plan.partitions_by_gpu.get(row.pk, []):
            if plan.is_held(partition):
                gpu_plan.slots.append(_kept_slot(gpu_plan, row.index, partition, held=True))
            else:
                plan.partitions_to_delete.append(partition.pk)
        plan.gpu_plans.append(gpu_plan)
    if to_delete:
        _, per_model = GPU.objects.filter(pk__in=to_delete).delete()
        plan.report.count_deleted(per_model)
        # GPUs of the nodes the node pass deleted are among them (their rows went with the node).
        node_names = {node.pk: node.name for node in plan.node_rows.values()}
        deleted = set(to_delete)
        plan.audit.extend(
            audit.gpu_deleted(row, node_names.get(row.node_id, "")) for row in plan.gpu_rows.values() if row.pk in deleted
        )


def _kept_slot(gpu_plan: GPUPlan, gpu_index: int, partition: Partition, *, held: bool) -> PartitionSlot:
    return PartitionSlot(
        gpu_uuid=gpu_plan.uuid,
        gpu_index=gpu_index,
        slot=partition.slot,
        shape=PartitionShape.of(partition),
        mig_device_uuid=partition.mig_device_uuid,
        row=partition,
        held=held,
        old_pod=partition.pod,
    )


def _plan_partitions(
    plan: SyncPlan, gpu_plan: GPUPlan, sharing: NodeSharing, device: GPUDevice, model: GPUModel | None
) -> None:
    """Match the GPU's existing partitions to the shapes its mode asks for.

    Matching rows are kept with their slot (renumbering would churn rows and could collide
    with the unique slot constraint mid-update); rows that match nothing are deleted unless
    held; missing shapes are created in the lowest slots left free.
    """
    existing = list(plan.partitions_by_gpu.get(gpu_plan.row.pk, [])) if gpu_plan.row is not None else []
    held = [p for p in existing if plan.is_held(p)]
    unheld = [p for p in existing if not plan.is_held(p)]
    for partition in held:
        gpu_plan.slots.append(_kept_slot(gpu_plan, device.index, partition, held=True))

    if sharing.mode == SharingMode.MPS_WEIGHTED and not device.mig_enabled:
        # Weighted shares exist only while a pod or holder has them; the pods' rows are matched
        # in nodes.inventory.binding, anything else here is free capacity, which is implicit.
        for partition in unheld:
            if partition.kind == PartitionKind.MPS_WEIGHTED and partition.pod:
                gpu_plan.slots.append(_kept_slot(gpu_plan, device.index, partition, held=False))
            else:
                plan.partitions_to_delete.append(partition.pk)
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
    plan.partitions_to_delete.extend(p.pk for p in unmatched if not plan.is_held(p))

    for partition, mig_uuid in kept:
        if plan.is_held(partition):
            continue  # already among the held slots, left exactly as its holder wrote it
        slot = _kept_slot(gpu_plan, device.index, partition, held=False)
        slot.mig_device_uuid = mig_uuid
        gpu_plan.slots.append(slot)
    used = {slot.slot for slot in gpu_plan.slots}
    for slot_index, (shape, mig_uuid) in remaining:
        if slot_index in used:
            slot_index = lowest_unused(used)
        used.add(slot_index)
        gpu_plan.slots.append(
            PartitionSlot(
                gpu_uuid=gpu_plan.uuid, gpu_index=device.index, slot=slot_index, shape=shape, mig_device_uuid=mig_uuid
            )
        )


def write_gpu_rows(plan: SyncPlan) -> None:
    """Create or update each planned GPU whose row differs, allocation counters included."""
    to_create: list[GPU] = []
    to_update: list[GPU] = []
    created_names: list[str] = []  # node name of each GPU in to_create
    for gpu_plan in plan.gpu_plans:
        allocated_milli, allocated_memory_mib = _allocation(plan, gpu_plan)
        values = {**gpu_plan.values, "allocated_milli": allocated_milli, "allocated_memory_mib": allocated_memory_mib}
        if gpu_plan.row is None:
            gpu_plan.row = GPU(**values)
            to_create.append(gpu_plan.row)
            created_names.append(gpu_plan.node.name)
        elif any(getattr(gpu_plan.row, name) != value for name, value in values.items()):
            for name, value in values.items():
                setattr(gpu_plan.row, name, value)
            to_update.append(gpu_plan.row)
    if to_update:
        GPU.objects.bulk_update(to_update, GPU_FIELDS)
        plan.report.updated["gpus"] += len(to_update)
    if to_create:
        GPU.objects.bulk_create(to_create)
        plan.report.created["gpus"] += len(to_create)
        missing = {gpu.uuid for gpu in to_create if gpu.pk is None}
        if missing:  # databases that cannot return ids from a bulk insert
            ids = dict(GPU.objects.filter(uuid__in=missing).values_list("uuid", "pk"))
            for gpu in to_create:
                gpu.pk = gpu.pk or ids[gpu.uuid]
        plan.audit.extend(audit.gpu_created(gpu, node_name) for gpu, node_name in zip(to_create, created_names))


def _allocation(plan: SyncPlan, gpu_plan: GPUPlan) -> tuple[int, int]:
    """(milli, MiB) handed out on the GPU: its occupied partitions, capped at the GPU."""
    milli = sum(slot.shape.share_milli for slot in gpu_plan.slots if slot.occupied)
    memory_mib = sum(_occupied_memory_mib(plan, slot, gpu_plan) for slot in gpu_plan.slots if slot.occupied)
    if milli > SHARE_MILLI_FULL or memory_mib > gpu_plan.memory_mib:
        logger.warning(
            "inventory sync: GPU %s is over-committed (%d milli, %d of %d MiB); recording it as full",
            gpu_plan.uuid, milli, memory_mib, gpu_plan.memory_mib,
        )
    return min(milli, SHARE_MILLI_FULL), min(memory_mib, gpu_plan.memory_mib)


def _occupied_memory_mib(plan: SyncPlan, slot: PartitionSlot, gpu_plan: GPUPlan) -> int:
    # Time-slice replicas may each touch all memory, so the partition's memory says nothing
    # about use: count what the pod declared, or what the holder is charged per GPU.
    if slot.shape.kind != PartitionKind.TIMESLICE:
        return slot.shape.memory_mib
    hold = plan.holds.get(slot.row.pk) if slot.held and slot.row is not None else None
    if hold is not None:
        return hold.memory_mib_per_gpu
    if slot.pod_memory_mib is not None:
        return slot.pod_memory_mib
    return slot.shape.memory_mib // max(gpu_plan.replicas, 1)


def write_partition_rows(plan: SyncPlan) -> None:
    """Delete the partitions planned away; create or update the others where they differ (held
    partitions are their holder's rows: never written)."""
    if plan.partitions_to_delete:
        _, per_model = Partition.objects.filter(pk__in=plan.partitions_to_delete).delete()
        plan.report.count_deleted(per_model)
    to_create: list[Partition] = []
    to_update: list[Partition] = []
    for gpu_plan in plan.gpu_plans:
        assert gpu_plan.row is not None and gpu_plan.row.pk is not None
        for slot in gpu_plan.slots:
            if slot.held:
                continue
            if slot.row is None:
                to_create.append(
                    Partition(
                        gpu_id=gpu_plan.row.pk,
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
        plan.report.updated["partitions"] += len(to_update)
    if to_create:
        Partition.objects.bulk_create(to_create)
        plan.report.created["partitions"] += len(to_create)
