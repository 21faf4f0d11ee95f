"""`POST /api/v1/telemetry/`: node agents (and operators) push batches of GPU samples.

Body (JSON only)::

    {"node": "gpu-node-1",
     "samples": [{"gpu_uuid": "GPU-...", "ts": "2026-01-01T12:00:00Z", "utilization_pct": 37.5,
                  "memory_used_mib": 20480, "memory_total_mib": 81920, "power_w": 312.0,
                  "temperature_c": 61.0, "sm_clock_mhz": 1980}]}

`gpu_uuid` and `ts` (ISO 8601 with Z or an offset) are required; a metric that was not measured
is null or left out; any other key is refused. Numbers must be finite JSON numbers (not strings,
booleans, NaN or Infinity) within physical bounds: those of any GPU (the schema's minimum and
maximum), then those of the sample's GPU (nodes.telemetry.limits): memory at most the GPU's
memory (and used at most total), power at most 1.5 × its model's TDP, SM clock at most 1.25 × its
maximum clock. Answers:

- 201 `{"stored": n, "duplicates": m}`: duplicates are samples already stored (same GPU and ts),
  so an agent re-sending a batch after a lost answer stores nothing twice. With Prometheus as the
  time-series store (GPUPLANE_PROMETHEUS_URL) only each GPU's newest sample is kept (its latest
  values, exposed at /metrics/dcgm): `stored` counts those, the batch's older samples count as
  duplicates.
- 400 with messages per field, per sample index (nodes.telemetry.validation explains the shape); nothing
  is stored when any sample is refused. An unknown node is a 400 on `node`, an unknown GPU (or one
  of another node) a 400 on that sample's `gpu_uuid`.
- 401 without credentials or with an unknown or revoked agent token; 403 for an agent token of
  another node, or a user below the operator role.

Who may post: a node agent token (`Authorization: Bearer <key>`) for its own node; a user with
the operator role (token or session) for any node.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.utils import timezone
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.authentication import SessionAuthentication
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from gpuplane.parsers import LimitedJSONParser
from gpuplane.roles import OPERATOR, has_role
from gpuplane.strict_input import RejectUnknownFieldsMixin, StrictQueryParametersMixin
from gpuplane.tokens import APITokenAuthentication
from nodes.authentication import NodeAgentTokenAuthentication
from nodes.models import Node, NodeAgentToken
from nodes.telemetry.ingest import IngestResult, ingest_samples
from nodes.telemetry.samples import METRIC_RANGES, SampleIn
from nodes.telemetry.validation import TelemetryRejected


def agent_refusal(node: Node) -> str:
    return f"This agent token may only post telemetry for node {node.name!r}."


class StrictFloatField(serializers.FloatField):
    """A JSON number (integer or not); unlike DRF's FloatField, no strings and no booleans."""

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool) or not isinstance(data, int | float):
            raise serializers.ValidationError(f"A number is required, not {type(data).__name__}.")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer; no strings, booleans or fractions (12.0 too: a whole count sent as a float is a bug)."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            raise serializers.ValidationError(f"A whole number is required, not {type(data).__name__}.")
        return super().to_internal_value(data)


class AwareDateTimeField(serializers.DateTimeField):
    """ISO 8601 with Z or an offset; a time without one is refused rather than guessed as UTC."""

    def enforce_timezone(self, value: Any) -> Any:
        if timezone.is_naive(value):
            raise serializers.ValidationError("must have a timezone (an ISO 8601 time with Z or an offset)")
        return super().enforce_timezone(value)


def _metric(field_class: type[serializers.Field], name: str, help_text: str) -> serializers.Field:
    """An optional, nullable metric field bounded by nodes.telemetry.samples.METRIC_RANGES."""
    low, high = METRIC_RANGES[name]
    return field_class(
        min_value=low, max_value=high, required=False, allow_null=True, help_text=f"{help_text} Null when not measured."
    )


class TelemetrySampleSerializer(RejectUnknownFieldsMixin, serializers.Serializer):
    """One sample; the bounds are those of nodes.telemetry.samples.METRIC_RANGES."""

    gpu_uuid = serializers.CharField(max_length=96, help_text="The GPU's UUID, as NVML reports it.")
    ts = AwareDateTimeField(help_text="When the sample was taken (ISO 8601 with Z or an offset).")
    utilization_pct = _metric(StrictFloatField, "utilization_pct", "GPU utilization, percent.")
    memory_used_mib = _metric(
        StrictIntegerField, "memory_used_mib", "Framebuffer memory used, MiB; at most the GPU's and memory_total_mib."
    )
    memory_total_mib = _metric(
        StrictIntegerField, "memory_total_mib", "Framebuffer memory in total, MiB; at most the GPU's memory."
    )
    power_w = _metric(StrictFloatField, "power_w", "Power draw, watts; at most 1.5 × the TDP of the GPU's model.")
    temperature_c = _metric(StrictFloatField, "temperature_c", "GPU temperature, degrees Celsius.")
    sm_clock_mhz = _metric(
        StrictIntegerField, "sm_clock_mhz", "SM clock, MHz; at most 1.25 × the maximum clock of the GPU's model."
    )


class SampleListField(serializers.ListField):
    """The samples; the batch size is checked before any sample is looked at."""

    def to_internal_value(self, data: Any) -> list[Any]:
        if self.max_length is not None and isinstance(data, list) and len(data) > self.max_length:
            raise serializers.ValidationError(
                f"At most {self.max_length} samples per batch (TELEMETRY_MAX_BATCH); got {len(data)}."
            )
        return super().to_internal_value(data)


class TelemetryBatchSerializer(RejectUnknownFieldsMixin, serializers.Serializer):
    """A batch of samples of one node's GPUs.

    Pass `context={"agent_node": node}` for a request made with an agent token: `node` must then
    name that node. `ingest()` stores a valid batch (nodes.telemetry.ingest.ingest_samples).
    """

    node = serializers.CharField(max_length=253, help_text="The node the GPUs belong to (Kubernetes node name).")
    samples = SampleListField(child=TelemetrySampleSerializer())  # bounded in get_fields()

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        # Built per request, not at import, so that the setting (and tests overriding it) apply;
        # the schema's maxItems comes from here too.
        fields["samples"] = SampleListField(
            child=TelemetrySampleSerializer(),
            max_length=settings.TELEMETRY_MAX_BATCH,
            help_text="At most TELEMETRY_MAX_BATCH samples, every one of a GPU of `node`.",
        )
        return fields

    def validate_node(self, name: str) -> Node:
        agent_node: Node | None = self.context.get("agent_node")
        if agent_node is not None:
            # The view refused other names with a 403 already; this keeps the serializer safe alone.
            if name != agent_node.name:
                raise exceptions.PermissionDenied(agent_refusal(agent_node))
            return agent_node
        node = Node.objects.filter(name=name).first()
        if node is None:
            raise serializers.ValidationError(f"Unknown node {name!r}.")
        return node

    def ingest(self, *, source: str) -> IngestResult:
        """Store the validated batch; a batch the storage refuses becomes a ValidationError (400)."""
        samples = [SampleIn(**sample) for sample in self.validated_data["samples"]]
        try:
            return ingest_samples(samples, node=self.validated_data["node"], source=source)
        except TelemetryRejected as exc:
            raise serializers.ValidationError(exc.errors) from exc


class IngestResultSerializer(serializers.Serializer):
    stored = serializers.IntegerField(help_text="Samples stored by this request.")
    duplicates = serializers.IntegerField(help_text="Samples already stored (same GPU and time), ignored.")


class CanPostTelemetry(BasePermission):
    """A node agent token, or a user with the operator role (or above)."""

    message = "Posting telemetry needs a node agent token or the operator role."

    def has_permission(self, request: Request, view: APIView) -> bool:
        if isinstance(request.auth, NodeAgentToken):
            return True
        return bool(request.user and request.user.is_authenticated and has_role(request.user, OPERATOR))


class TelemetryView(StrictQueryParametersMixin, APIView):
    """Receive a batch of GPU samples of one node."""

    authentication_classes = [NodeAgentTokenAuthentication, APITokenAuthentication, SessionAuthentication]
    permission_classes = [CanPostTelemetry]
    parser_classes = [LimitedJSONParser]  # JSON only, with the size and nesting limits of every endpoint
    # Read by nodes.authentication.NodeAgentTokenScheme: list agent tokens for this operation.
    accepts_agent_tokens = True

    @extend_schema(
        operation_id="telemetry_create",
        tags=["telemetry"],
        request=TelemetryBatchSerializer,
        responses={
            201: IngestResultSerializer,
            400: OpenApiResponse(
                description=(
                    "Refused; nothing stored. Messages per field; `samples` holds either messages about the "
                    'batch as a whole or, per sample index, messages per field: {"samples": {"3": {"ts": [...]}}}. '
                    "Also the answer for an unknown `node`, an unknown GPU UUID or a GPU of another node, and "
                    "for a metric past its GPU's physical limits (memory, 1.5 × the TDP, 1.25 × the maximum clock)."
                )
            ),
            401: OpenApiResponse(description="No credentials, or an unknown or revoked agent token."),
            403: OpenApiResponse(description="An agent token of another node, or a user below the operator role."),
        },
        examples=[
            OpenApiExample(
                "One sample",
                request_only=True,
                value={
                    "node": "gpu-node-1",
                    "samples": [
                        {
                            "gpu_uuid": "GPU-5f1b2c3d-0000-1111-2222-333344445555",
                            "ts": "2026-01-01T12:00:00Z",
                            "utilization_pct": 37.5,
                            "memory_used_mib": 20480,
                            "memory_total_mib": 81920,
                            "power_w": 312.0,
                            "temperature_c": 61.0,
                        }
                    ],
                },
            )
        ],
    )
    def post(self, request: Request) -> Response:
        token = request.auth if isinstance(request.auth, NodeAgentToken) else None
        agent_node = token.node if token else None
        # Authorization before validation: an agent learns nothing about another node's batch.
        claimed = request.data.get("node") if isinstance(request.data, Mapping) else None
        if agent_node is not None and isinstance(claimed, str) and claimed != agent_node.name:
            raise exceptions.PermissionDenied(agent_refusal(agent_node))
        serializer = TelemetryBatchSerializer(data=request.data, context={"agent_node": agent_node})
        serializer.is_valid(raise_exception=True)
        result = serializer.ingest(source="agent" if token else "api")
        return Response({"stored": result.stored, "duplicates": result.duplicates}, status=status.HTTP_201_CREATED)

