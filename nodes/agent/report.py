"""The node agent's GPU report: what NVML says of each GPU of the node, as the API takes it.

`POST /api/v1/nodes/<name>/gpu-report/` (nodes.api.gpu_report) binds the reported UUIDs to the
node's GPU rows at once and queues an inventory sync for the MIG mode and instances, so the
agent reports before its first telemetry batch (which names GPUs by UUID), whenever what it
reads changes (a MIG reconfiguration), when the server refused samples of GPUs it did not know,
and every `report_interval_s` in case the server lost it (a database restored from a backup).
"""
from __future__ import annotations

from typing import Any

from nodes.collectors.base import GPUReading


def gpu_report(readings: list[GPUReading]) -> list[dict[str, Any]]:
    """One entry per GPU read, in index order: its UUID, product, memory and MIG state.

    MIG is reported only when it was read whole: a mode NVML would not give, or instances it gave
    only in part (a placement it could not read), is reported as unknown (`mig_enabled` null),
    and the server then keeps what the cluster says of that GPU's MIG.
    """
    report = []
    for reading in sorted(readings, key=lambda r: r.index):
        whole = "mig_instances" not in reading.missing and all(
            i.profile and i.start >= 0 and i.size >= 1 for i in reading.mig_instances
        )
        instances = [
            {"profile": i.profile, "start": i.start, "size": i.size, "uuid": i.uuid, "memory_mib": i.memory_mib}
            for i in reading.mig_instances
        ]
        mig_enabled = reading.mig_enabled if whole or not reading.mig_enabled else None
        report.append({
            "index": reading.index,
            "uuid": reading.gpu_uuid,
            "product": reading.product,
            "memory_total_mib": reading.memory_total_mib,
            "mig_enabled": mig_enabled,
            "mig_instances": instances if mig_enabled else [],
        })
    return report
