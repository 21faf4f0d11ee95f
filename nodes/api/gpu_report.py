"""`/api/v1/nodes/<name>/gpu-report/`: a node agent reports its GPUs as NVML sees them; operators read it.

POST (the node's own agent token, or the operator role)::

    {"gpus": [{"index": 0, "uuid": "GPU-f6068136-...", "product": "NVIDIA H100 80GB HBM3",
               "memory_total_mib": 81559, "mig_enabled": true,
               "mig_instances": [{"profile": "3g.40gb", "start": 0, "size": 4,
                                  "uuid": "MIG-5c8a...", "memory_mib": 40448}]}]}

answers 200 with what was done: the GPU rows renamed to the reported UUIDs (`bound`), reported
indexes the inventory has no GPU for yet, UUIDs already bound to another node's GPU (not taken),
and whether the report changed (then an inventory sync is queued, which applies the MIG mode and
instances: `nodes.inventory.agent_overlay`). GET (viewer) answers the stored report, 404 before
the first one. Why the agent reports to the API rather than writing node annotations: see
docs/architecture.md ("The node agent").
"""
from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers
from rest_framework.authentication import SessionAuthentication
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from gpuplane.parsers import LimitedJSONParser
from gpuplane.roles import OPERATOR, VIEWER, has_role
from gpuplane.strict_input import RejectUnknownFieldsMixin, StrictQueryParametersMixin
from gpuplane.tokens import APITokenAuthentication
from nodes.api.telemetry_schema import StrictIntegerField
from nodes.authentication import NodeAgent, NodeAgentTokenAuthentication, ServiceAccountTokenAuthentication
from nodes.catalog import MIG_MEMORY_SLICES
from nodes.inventory.agent_reports import record_gpu_report
from nodes.models import Node, NodeGPUReport
from nodes.tasks import sync_inventory_task
from nodes.telemetry.batch import GPU_UUID_MAX_CHARS
from nodes.telemetry.samples import MAX_INT32

logger = logging.getLogger(__name__)

MAX_GPUS_PER_NODE = 64
MAX_MIG_INSTANCES = 7  # 7 compute slices: never more GPU instances on one GPU


class StrictBooleanField(serializers.BooleanField):
    """true or false (or null where allowed); not "yes", 1 or "true"."""

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            raise serializers.ValidationError(f"Must be true or false, not {type(data).__name__}.")
        return data


class ReportedMIGInstanceSerializer(RejectUnknownFieldsMixin, serializers.Serializer):
    profile = serializers.CharField(max_length=32, help_text='Profile name as NVML gives it, without "MIG ": "3g.40gb".')
    start = StrictIntegerField(min_value=0, max_value=MIG_MEMORY_SLICES - 1, help_text="Placement start, memory slices.")
    size = StrictIntegerField(min_value=1, max_value=MIG_MEMORY_SLICES, help_text="Placement size, memory slices.")
    uuid = serializers.CharField(max_length=GPU_UUID_MAX_CHARS, required=False, allow_blank=True, default="")
    memory_mib = StrictIntegerField(
        min_value=0, max_value=MAX_INT32, required=False, allow_null=True, default=None,
        help_text="The instance's memory as NVML reports it (9984 for an H100 1g.10gb).",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["start"] + attrs["size"] > MIG_MEMORY_SLICES:
            raise serializers.ValidationError(f"start + size must be at most {MIG_MEMORY_SLICES} memory slices.")
        return attrs


class ReportedGPUSerializer(RejectUnknownFieldsMixin, serializers.Serializer):
    index = StrictIntegerField(min_value=0, max_value=MAX_GPUS_PER_NODE - 1)
    uuid = serializers.CharField(max_length=GPU_UUID_MAX_CHARS, help_text="The GPU's UUID, as NVML reports it.")
    product = serializers.CharField(max_length=128, required=False, allow_blank=True, default="")
    memory_total_mib = StrictIntegerField(min_value=0, max_value=MAX_INT32, required=False, allow_null=True, default=None)
    mig_enabled = StrictBooleanField(required=False, allow_null=True, default=None, help_text="Null: could not be read.")
    mig_instances = serializers.ListField(
        child=ReportedMIGInstanceSerializer(), max_length=MAX_MIG_INSTANCES, required=False, default=list
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["mig_instances"] and not attrs["mig_enabled"]:
            raise serializers.ValidationError({"mig_instances": ["MIG instances on a GPU whose MIG mode is not enabled."]})
        taken: set[int] = set()
        for instance in attrs["mig_instances"]:
            slices = set(range(instance["start"], instance["start"] + instance["size"]))
            if slices & taken:
                raise serializers.ValidationError({"mig_instances": ["Two instances overlap in memory slices."]})
            taken |= slices
        return attrs


class GPUReportSerializer(RejectUnknownFieldsMixin, serializers.Serializer):
    gpus = serializers.ListField(child=ReportedGPUSerializer(), max_length=MAX_GPUS_PER_NODE)

    def validate_gpus(self, gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for key in ("index", "uuid"):
            values = [gpu[key] for gpu in gpus]
            if len(set(values)) != len(values):
                raise serializers.ValidationError(f"Each GPU must have its own {key}.")
        return gpus


class GPUReportOutcomeSerializer(serializers.Serializer):
    changed = serializers.BooleanField(help_text="The report differs from the node's previous one; an inventory sync is queued.")
    revision = serializers.IntegerField()
    bound = serializers.ListField(
        child=serializers.DictField(), help_text='GPU rows renamed: [{"index": 0, "from": "GPU-n-0", "to": "GPU-f606..."}].'
    )
    unknown_indexes = serializers.ListField(child=serializers.IntegerField(), help_text="Reported GPUs with no row yet.")
    conflicts = serializers.ListField(child=serializers.CharField(), help_text="UUIDs bound to another node's GPU: not taken.")


class StoredGPUReportSerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="node.name")
    pending = serializers.SerializerMethodField(help_text="Not yet applied by inventory sync.")

    class Meta:
        model = NodeGPUReport
        fields = ["node", "gpus", "reported_at", "changed_at", "revision", "applied_revision", "pending"]

    def get_pending(self, report: NodeGPUReport) -> bool:
        return report.revision != report.applied_revision


class CanReportGPUs(BasePermission):
    """GET: the viewer role. POST: the node's own agent (token or key), or the operator role."""

    message = "Reporting GPUs needs this node's agent token or the operator role."

    def has_permission(self, request: Request, view: APIView) -> bool:
        if isinstance(request.user, NodeAgent):
            return request.method not in SAFE_METHODS
        user = request.user
        if not user or not user.is_authenticated:
            return False
        return has_role(user, VIEWER if request.method in SAFE_METHODS else OPERATOR)


def _queue_sync() -> None:
    """Ask for an inventory sync now rather than at the next beat; a broker that is away only
    delays it to that beat (the report is stored and marked for the sync), so it is logged."""
    try:
        sync_inventory_task.delay()
    except Exception as exc:  # kombu's connection errors vary by transport
        logger.warning("GPU report stored; could not queue an inventory sync now (%s): the next beat applies it", exc)


class GPUReportView(StrictQueryParametersMixin, APIView):
    """A node's GPUs as its agent read them from NVML."""

    authentication_classes = [
        ServiceAccountTokenAuthentication, NodeAgentTokenAuthentication, APITokenAuthentication, SessionAuthentication,
    ]
    permission_classes = [CanReportGPUs]
    parser_classes = [LimitedJSONParser]
    accepts_agent_tokens = True  # read by nodes.authentication.NodeAgentTokenScheme

    @extend_schema(operation_id="nodes_gpu_report_retrieve", tags=["nodes"], responses={200: StoredGPUReportSerializer})
    def get(self, request: Request, name: str) -> Response:
        report = get_object_or_404(NodeGPUReport.objects.select_related("node"), node__name=name)
        return Response(StoredGPUReportSerializer(report).data)

    @extend_schema(
        operation_id="nodes_gpu_report_create",
        tags=["nodes"],
        request=GPUReportSerializer,
        responses={
            200: GPUReportOutcomeSerializer,
            400: OpenApiResponse(description="Messages per field, per GPU index of the list."),
            401: OpenApiResponse(description="No credentials, an unknown or revoked agent key, or a token the "
                                             "cluster does not vouch for as the node agent's."),
            403: OpenApiResponse(description="An agent of another node, or a user below the operator role."),
            404: OpenApiResponse(description="No such node in the inventory."),
            503: OpenApiResponse(description="The agent's ServiceAccount token cannot be checked with the cluster now."),
        },
    )
    def post(self, request: Request, name: str) -> Response:
        agent = request.user if isinstance(request.user, NodeAgent) else None
        if agent is not None and agent.node_name != name:
            raise exceptions.PermissionDenied(f"This agent token may only report the GPUs of node {agent.node_name!r}.")
        node = agent.node if agent is not None and agent.node is not None else get_object_or_404(Node, name=name)
        serializer = GPUReportSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        outcome = record_gpu_report(node, serializer.validated_data["gpus"], actor=str(request.user))
        if outcome.changed:
            # The MIG layout (and GPUs the inventory has no row for yet) are the sync's to apply.
            transaction.on_commit(_queue_sync)
        return Response({
            "changed": outcome.changed,
            "revision": outcome.revision,
            "bound": [{"index": index, "from": old, "to": new} for index, old, new in outcome.bound],
            "unknown_indexes": outcome.unknown_indexes,
            "conflicts": outcome.conflicts,
        })
