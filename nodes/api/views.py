"""Read-only REST endpoints for the inventory (`/api/v1/nodes/`, `/gpus/`, `/partitions/`).

Views only declare what they serve; filtering lives in nodes.filtersets, shapes in
nodes.api.serializers, paging and ordering rules in gpuplane.api. Inventory is written by
inventory sync and the placement services, never through these endpoints: other verbs get 405
(or 403 for a role that may not write at all).
"""
from __future__ import annotations

from django.db.models import QuerySet
from rest_framework.viewsets import ReadOnlyModelViewSet

from nodes.api.serializers import GPUSerializer, NodeSerializer, PartitionSerializer, with_usage
from nodes.filtersets import GPUFilterSet, NodeFilterSet, PartitionFilterSet
from nodes.holds import with_holder_id
from nodes.models import GPU, Node, Partition
from nodes.node_configs import with_mig_layouts

# Kubernetes node names are DNS subdomains: dots are common, slashes impossible.
NAME_IN_PATH = r"[^/]+"


class NodeViewSet(ReadOnlyModelViewSet):
    queryset = with_mig_layouts(with_usage(Node.objects.all()))
    serializer_class = NodeSerializer
    filterset_class = NodeFilterSet
    lookup_field = "name"
    lookup_value_regex = NAME_IN_PATH
    ordering_fields = [
        "name", "gpu_model", "gpu_count", "sharing_mode", "ready", "cordoned", "last_seen",
        "gpus_allocated", "utilization_pct",
    ]


class GPUViewSet(ReadOnlyModelViewSet):
    queryset = GPU.objects.select_related("node")
    serializer_class = GPUSerializer
    filterset_class = GPUFilterSet
    # Simulated and test UUIDs (GPU-<node>-<i>) embed node names, dots included.
    lookup_field = "uuid"
    lookup_value_regex = NAME_IN_PATH
    ordering_fields = [
        "node__name", "index", "model", "memory_mib", "allocated_milli", "allocated_memory_mib",
        "utilization_pct", "memory_used_mib", "power_w", "temperature_c", "sampled_at",
    ]


class PartitionViewSet(ReadOnlyModelViewSet):
    queryset = Partition.objects.select_related("gpu__node")
    serializer_class = PartitionSerializer
    filterset_class = PartitionFilterSet
    lookup_value_regex = r"[0-9]+"
    ordering_fields = ["id", "kind", "slot", "share_milli", "memory_mib", "mig_profile"]

    def get_queryset(self) -> QuerySet[Partition]:
        # Per request, not at import: the holder is registered when the apps are ready.
        return with_holder_id(super().get_queryset())
