"""`/api/v1/moves/`: every move of a replica, in flight and past (read-only, every role), and every
removal (``kind`` removal: a scale-down's or a preemption's, evicted with no replacement): who
asked and why, where from and to, the PodDisruptionBudget or budget holding one back, its timings."""
from __future__ import annotations

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers
from rest_framework.viewsets import ReadOnlyModelViewSet

from gpuplane.strict_input import StrictQueryParametersMixin
from scheduler.filtersets import MoveFilterSet
from scheduler.models import Move


# "Move" names a consolidation plan's planned move in the schema already (consolidation.api).
@extend_schema_serializer(component_name="ReplicaMove")
class MoveSerializer(serializers.ModelSerializer):
    deployment_name = serializers.CharField(source="deployment.__str__", read_only=True,
                                            help_text="namespace/name of the deployment")
    original = serializers.IntegerField(source="original_id", read_only=True, help_text="The placement it moves")
    replacement = serializers.IntegerField(source="replacement_id", read_only=True, allow_null=True,
                                           help_text="The placement of its replacement, once placed")

    class Meta:
        model = Move
        fields = [
            "id", "kind", "deployment", "deployment_name", "original", "replacement", "replacement_index", "from_node",
            "from_partition", "to_node", "to_partition", "why", "requested_by", "requester", "status", "reason",
            "blocked_reason", "hold", "evicted_pod", "lost", "timeout_s", "created_at", "started_at", "placed_at",
            "ready_at", "evicted_at", "finished_at", "updated_at",
        ]
        read_only_fields = fields


class MoveViewSet(StrictQueryParametersMixin, ReadOnlyModelViewSet):
    serializer_class = MoveSerializer
    filterset_class = MoveFilterSet
    lookup_value_regex = r"[0-9]+"
    ordering_fields = ["created_at", "status", "kind", "requested_by", "finished_at"]
    ordering = ["-created_at", "-id"]

    def get_queryset(self) -> QuerySet[Move]:
        return Move.objects.select_related("deployment").order_by("-created_at", "-id")
