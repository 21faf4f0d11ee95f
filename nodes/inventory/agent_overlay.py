"""The node agent's GPU reports over what the cluster says: which source wins for what.

Kubernetes tells how many GPUs a node has, of which product and memory (GFD labels), and what it
may schedule (allocatable); it does not tell a GPU's UUID or its MIG instances. The agent reads
those from NVML on the node and reports them (`nodes.inventory.agent_reports`). Inventory sync
reads the cluster, then lays each node's report over it here, index by index:

- the cluster decides which nodes and how many GPUs exist, their product and memory, labels,
  taints, readiness and sharing configuration (a reported index the cluster does not count is
  ignored: GFD's count is what the device plugin advertises);
- the report decides each reported GPU's UUID and its MIG mode and instances (profile, placement,
  UUID, memory), over the `gpuplane.io/gpu-uuids` / `gpuplane.io/mig-layout` annotations where
  both exist: it was read from the hardware;
- a GPU the report does not cover keeps what the cluster says (annotations, else a placeholder
  UUID, which never replaces a UUID its row was bound to: `nodes.inventory.gpu_rows`).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from django.db.models import F

from nodes.cluster.base import ClusterNode, GPUDevice, MIGDevice
from nodes.models import NodeGPUReport


@dataclass(frozen=True)
class LoadedReport:
    """A node's report as one sync read it: the revision it will mark applied, and the GPUs by index."""

    node_id: int
    revision: int
    applied_revision: int
    gpus: dict[int, dict[str, Any]]

    @property
    def pending(self) -> bool:
        return self.revision != self.applied_revision


def pending_report_nodes() -> set[str]:
    """Names of the nodes whose latest report no sync has applied yet (one query): a sync that
    watches only what changed on the cluster takes them into its scope."""
    return set(
        NodeGPUReport.objects.exclude(applied_revision=F("revision")).values_list("node__name", flat=True)
    )


def load_reports(node_names: Iterable[str] | None) -> dict[str, LoadedReport]:
    """The reports of these nodes (all of them when None), by node name; one query."""
    rows = NodeGPUReport.objects.all()
    if node_names is not None:
        rows = rows.filter(node__name__in=list(node_names))
    return {
        name: LoadedReport(node_id, revision, applied, {int(gpu["index"]): gpu for gpu in gpus})
        for name, node_id, revision, applied, gpus in rows.values_list(
            "node__name", "node_id", "revision", "applied_revision", "gpus"
        )
    }


def overlay(observed: list[ClusterNode], reports: Mapping[str, LoadedReport]) -> list[ClusterNode]:
    """The observed nodes with each one's report laid over its GPUs (see the module docstring)."""
    result = []
    for node in observed:
        report = reports.get(node.name)
        if report is None or not report.gpus:
            result.append(node)
            continue
        result.append(replace(node, gpus=tuple(_gpu(device, report.gpus.get(device.index)) for device in node.gpus)))
    return result


def mark_applied(reports: Mapping[str, LoadedReport]) -> int:
    """Record that the pending reports read were applied (each only if no newer one arrived since);
    return how many. No write when none was pending."""
    marked = 0
    for report in reports.values():
        if report.pending:
            marked += NodeGPUReport.objects.filter(node_id=report.node_id, revision=report.revision).update(
                applied_revision=report.revision
            )
    return marked


def _gpu(device: GPUDevice, reported: Mapping[str, Any] | None) -> GPUDevice:
    if reported is None:
        return device
    mig_enabled = reported.get("mig_enabled")
    if mig_enabled is None:  # the agent could not read the mode: the cluster's view of MIG stays
        return replace(device, uuid=reported["uuid"], uuid_known=True)
    instances = tuple(
        MIGDevice(
            profile=instance["profile"], start=int(instance["start"]), size=int(instance["size"]),
            uuid=instance.get("uuid") or "", memory_mib=instance.get("memory_mib"),
        )
        for instance in reported.get("mig_instances") or ()
    )
    return replace(
        device, uuid=reported["uuid"], uuid_known=True, mig_enabled=bool(mig_enabled),
        mig_devices=instances if mig_enabled else (),
    )
