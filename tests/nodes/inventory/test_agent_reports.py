"""The node agent's GPU report in the inventory: its UUIDs bound at once, its MIG layout applied by
inventory sync over what the cluster says, and neither fighting the other.

The arithmetic of the expected shares and memory is written next to each assertion.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from lifecycle.models import AuditEvent
from nodes.cluster.base import ClusterNode
from nodes.inventory.agent_reports import record_gpu_report
from nodes.inventory.sync import sync_inventory
from nodes.models import GPU, Node, NodeGPUReport
from tests.nodes.inventory.helpers import FakeCluster, gpu, gpu_node, partitions_of

pytestmark = pytest.mark.django_db


def placeholders(node: ClusterNode) -> ClusterNode:
    """The node as a cluster without the UUID annotation shows it: placeholder UUIDs."""
    return replace(node, gpus=tuple(replace(d, uuid=f"GPU-{node.name}-{d.index}", uuid_known=False) for d in node.gpus))


def reported(index: int, uuid: str, mig: list[tuple[str, int, int, int]] | None = None) -> dict[str, Any]:
    """One GPU of a report; `mig`: [(profile, start, size, memory MiB)] on a MIG-enabled GPU."""
    return {
        "index": index, "uuid": uuid, "product": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559,
        "mig_enabled": mig is not None,
        "mig_instances": [
            {"profile": p, "start": s, "size": z, "uuid": f"MIG-{uuid}-{s}", "memory_mib": m} for p, s, z, m in mig or []
        ],
    }


def fresh_node(name: str = "h1", gpu_count: int = 2) -> Node:
    sync_inventory(FakeCluster([placeholders(gpu_node(name, gpu_count=gpu_count))]))
    return Node.objects.get(name=name)


def uuids(name: str) -> list[str]:
    return list(GPU.objects.filter(node__name=name).order_by("index").values_list("uuid", flat=True))


def test_a_report_binds_the_reported_uuids_to_the_rows_at_once_and_tells_it(db):
    node = fresh_node()
    assert uuids("h1") == ["GPU-h1-0", "GPU-h1-1"]

    outcome = record_gpu_report(node, [reported(0, "GPU-real-0"), reported(1, "GPU-real-1")], actor="agent:h1")

    assert uuids("h1") == ["GPU-real-0", "GPU-real-1"]
    assert outcome.changed and outcome.bound == [(0, "GPU-h1-0", "GPU-real-0"), (1, "GPU-h1-1", "GPU-real-1")]
    bound = AuditEvent.objects.filter(verb="gpu.bound").order_by("object_repr")
    assert [(e.object_repr, e.before, e.after, e.actor) for e in bound] == [
        ("h1/gpu0", {"uuid": "GPU-h1-0"}, {"uuid": "GPU-real-0"}, "agent:h1"),
        ("h1/gpu1", {"uuid": "GPU-h1-1"}, {"uuid": "GPU-real-1"}, "agent:h1"),
    ]
    assert AuditEvent.objects.filter(verb="node.gpus_reported").count() == 1
    report = NodeGPUReport.objects.get()
    assert (report.revision, report.applied_revision) == (1, 0)  # pending: the sync applies the rest


def test_the_same_report_again_changes_nothing_but_when_it_was_sent(db):
    node = fresh_node()
    gpus = [reported(0, "GPU-real-0"), reported(1, "GPU-real-1")]
    record_gpu_report(node, gpus, actor="agent:h1")
    first = NodeGPUReport.objects.get()

    again = record_gpu_report(node, list(reversed(gpus)), actor="agent:h1")  # order does not matter

    report = NodeGPUReport.objects.get()
    assert not again.changed and again.bound == [] and report.revision == 1
    assert report.reported_at > first.reported_at and report.changed_at == first.changed_at
    assert AuditEvent.objects.filter(verb="node.gpus_reported").count() == 1


def test_two_gpus_of_a_node_may_swap_uuids(db):
    node = fresh_node()
    record_gpu_report(node, [reported(0, "GPU-a"), reported(1, "GPU-b")], actor="agent:h1")

    outcome = record_gpu_report(node, [reported(0, "GPU-b"), reported(1, "GPU-a")], actor="agent:h1")

    assert uuids("h1") == ["GPU-b", "GPU-a"] and len(outcome.bound) == 2


def test_a_uuid_bound_to_another_nodes_gpu_is_not_taken_and_an_index_without_a_row_waits(db):
    sync_inventory(FakeCluster([placeholders(gpu_node("h1")), placeholders(gpu_node("h2"))]))
    other = Node.objects.get(name="h2")
    record_gpu_report(Node.objects.get(name="h1"), [reported(0, "GPU-x")], actor="agent:h1")

    outcome = record_gpu_report(other, [reported(0, "GPU-x"), reported(1, "GPU-y"), reported(5, "GPU-z")], actor="agent:h2")

    assert outcome.conflicts == ["GPU-x"] and outcome.unknown_indexes == [5]
    assert uuids("h2") == ["GPU-h2-0", "GPU-y"] and uuids("h1")[0] == "GPU-x"


def test_sync_lays_the_report_over_the_cluster_and_keeps_the_agents_uuids():
    cluster = FakeCluster([placeholders(gpu_node("h1", gpu_count=2))])
    sync_inventory(cluster)
    node = Node.objects.get(name="h1")
    # GPU 0 in MIG mode as NVML reports it (H100 instance sizes); GPU 1 whole.
    record_gpu_report(node, [
        reported(0, "GPU-real-0", mig=[("3g.40gb", 0, 4, 40448), ("1g.10gb", 6, 1, 9984)]),
        reported(1, "GPU-real-1"),
    ], actor="agent:h1")

    report = sync_inventory(cluster)

    assert report.changed and uuids("h1") == ["GPU-real-0", "GPU-real-1"]
    assert Node.objects.get(name="h1").sharing_mode == "mig"
    assert [(p.kind, p.mig_profile, p.mig_start, p.share_milli, p.memory_mib, p.mig_device_uuid)
            for p in partitions_of("h1", 0)] == [
        ("mig", "3g.40gb", 0, 428, 40448, "MIG-GPU-real-0-0"),  # 3 * 1000 // 7 = 428
        ("mig", "1g.10gb", 6, 142, 9984, "MIG-GPU-real-0-6"),  # 1 * 1000 // 7 = 142
    ]
    assert [p.kind for p in partitions_of("h1", 1)] == ["exclusive"]
    assert NodeGPUReport.objects.get().applied_revision == 1
    assert not sync_inventory(cluster).changed  # nothing pending, nothing to fight over


def test_the_report_wins_over_the_annotations_where_both_speak():
    # The cluster's annotations say GPU 0 has one 7g.80gb; NVML says two 3g.40gb.
    annotated = gpu_node("h1", gpu_count=2, mig={0: [("7g.80gb", 0, 8)]})
    cluster = FakeCluster([annotated])
    sync_inventory(cluster)
    record_gpu_report(Node.objects.get(name="h1"), [
        reported(0, "GPU-h1-0", mig=[("3g.40gb", 0, 4, 40448), ("3g.40gb", 4, 4, 40448)]),
    ], actor="agent:h1")

    sync_inventory(cluster)

    assert [(p.mig_profile, p.mig_start) for p in partitions_of("h1", 0)] == [("3g.40gb", 0), ("3g.40gb", 4)]
    # GPU 1 was not reported: the cluster's view of it stays (whole, its annotated UUID).
    assert [p.kind for p in partitions_of("h1", 1)] == ["exclusive"] and gpu("h1", 1).uuid == "GPU-h1-1"


def test_a_placeholder_never_replaces_a_uuid_a_row_was_bound_to():
    cluster = FakeCluster([gpu_node("h1", gpu_count=1, uuid_prefix="GPU-real")])  # annotated: real UUIDs
    sync_inventory(cluster)
    assert uuids("h1") == ["GPU-real-h1-0"]

    cluster.nodes = [placeholders(gpu_node("h1", gpu_count=1))]  # the annotation is gone
    report = sync_inventory(cluster)

    assert uuids("h1") == ["GPU-real-h1-0"] and not report.changed
