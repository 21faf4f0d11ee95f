"""A node agent's GPU report: stored, and its GPU UUIDs bound to the inventory at once.

The agent (`manage.py gpuplane_agent`) reads its node's GPUs through NVML and posts what it
found (`POST /api/v1/nodes/<name>/gpu-report/`): per index the GPU's UUID, product, memory, MIG
mode and MIG instances. `record_gpu_report` stores it as the node's `NodeGPUReport` and, in the
same transaction, renames the node's GPU rows from whatever UUID they had (the placeholder
`GPU-<node>-<index>` on a fresh node) to the reported ones, so that the agent's very first
telemetry batch, which names GPUs by UUID, is accepted. Everything else in the report (MIG mode
and instances) is inventory sync's to apply, against the rest of what it knows of the node
(`nodes.inventory.agent_overlay`); a changed report brings the node into the next sync, which
the API asks for at once.

No cluster I/O here: the agent's request is answered from the database alone.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from lifecycle.audit import AuditEntry, record_many
from nodes.models import GPU, Node, NodeGPUReport

GPU_BOUND = "gpu.bound"  # a GPU row took the UUID its node's agent reported
NODE_GPUS_REPORTED = "node.gpus_reported"  # the node's agent reported its GPUs differently than before
# A UUID a row holds for the instant of a swap between two of a node's GPUs (GPU.uuid is unique).
_SWAP_PREFIX = "~rebinding-"


@dataclass
class ReportOutcome:
    """What storing one report did."""

    changed: bool  # the report differs from the node's previous one (or is its first)
    revision: int
    bound: list[tuple[int, str, str]] = field(default_factory=list)  # (index, old UUID, new UUID)
    unknown_indexes: list[int] = field(default_factory=list)  # reported GPUs the inventory has no row for (yet)
    conflicts: list[str] = field(default_factory=list)  # UUIDs already bound to a GPU of another node


def record_gpu_report(node: Node, gpus: Sequence[dict[str, Any]], *, actor: str, now: datetime | None = None) -> ReportOutcome:
    """Store `gpus` (validated: unique indexes and UUIDs) as `node`'s report; bind its UUIDs to the GPU rows.

    One transaction: the node's GPU rows are locked (primary-key order, as every writer of them
    locks), the report row is created or updated (`revision` raised only when the content
    changed, so an agent re-reporting the same GPUs writes only `reported_at`), and each row
    whose index was reported under another UUID takes it, told as a `gpu.bound` event. A UUID
    already bound to a GPU of another node is not taken (`conflicts`; inventory sync sorts out
    a GPU that really moved); a reported index without a row (`unknown_indexes`: the cluster's
    GFD labels do not count it yet) waits for the sync, which creates the row with the
    reported UUID.
    """
    now = now or timezone.now()
    reported = sorted((dict(gpu) for gpu in gpus), key=lambda gpu: int(gpu["index"]))
    with transaction.atomic():
        rows = list(GPU.objects.select_for_update().filter(node=node).order_by("pk"))
        report, created = NodeGPUReport.objects.select_for_update().get_or_create(
            node=node, defaults={"gpus": reported, "reported_at": now, "changed_at": now}
        )
        changed = created or report.gpus != reported
        if not created:
            report.reported_at = now
            fields = ["reported_at"]
            if changed:
                report.gpus, report.changed_at, report.revision = reported, now, report.revision + 1
                fields += ["gpus", "changed_at", "revision"]
            report.save(update_fields=fields)
        outcome = ReportOutcome(changed=changed, revision=report.revision)
        _bind(node, rows, reported, outcome)
        entries = [
            AuditEntry(GPU_BOUND, ("nodes.gpu", row_id), actor=actor, reason="reported by the node's agent (NVML)",
                       object_repr=f"{node.name}/gpu{index}", before={"uuid": old}, after={"uuid": new})
            for index, old, new, row_id in _bound_rows(rows, outcome)
        ]
        if changed:
            entries.append(AuditEntry(
                NODE_GPUS_REPORTED, node, actor=actor, reason="GPUs read from NVML by the node's agent",
                after={"revision": report.revision, "gpus": len(reported),
                       "mig_instances": sum(len(gpu.get("mig_instances") or ()) for gpu in reported)},
            ))
        record_many(entries, at=now)
    return outcome


def _bind(node: Node, rows: list[GPU], reported: list[dict[str, Any]], outcome: ReportOutcome) -> None:
    by_index = {row.index: row for row in rows}
    wanted: dict[int, str] = {}  # row pk -> reported UUID
    for gpu in reported:
        row = by_index.get(int(gpu["index"]))
        if row is None:
            outcome.unknown_indexes.append(int(gpu["index"]))
        elif row.uuid != gpu["uuid"]:
            wanted[row.pk] = gpu["uuid"]
    if not wanted:
        return
    elsewhere = set(
        GPU.objects.filter(uuid__in=wanted.values()).exclude(node=node).values_list("uuid", flat=True)
    )
    # A UUID held by a GPU of this node that the report does not rename (it left that index out).
    stays = {row.uuid for row in rows if row.pk not in wanted}
    outcome.conflicts = sorted(elsewhere | (stays & set(wanted.values())))
    renames = {pk: uuid for pk, uuid in wanted.items() if uuid not in outcome.conflicts}
    # Two passes: a UUID may move between two GPUs of this node (their indexes were swapped).
    for pk in renames:
        GPU.objects.filter(pk=pk).update(uuid=f"{_SWAP_PREFIX}{pk}")
    by_pk = {row.pk: row for row in rows}
    for pk, uuid in renames.items():
        GPU.objects.filter(pk=pk).update(uuid=uuid)
        row = by_pk[pk]
        outcome.bound.append((row.index, row.uuid, uuid))


def _bound_rows(rows: list[GPU], outcome: ReportOutcome) -> list[tuple[int, str, str, int]]:
    by_index = {row.index: row.pk for row in rows}
    return [(index, old, new, by_index[index]) for index, old, new in outcome.bound]
